"""AIR and ARSPO as drop-ins for TRL's ``GRPOTrainer`` (trl >= 1.0; written against trl 1.16).

TRL is an optional extra (``pip install 'rml_fast[alignment]'``): this module imports without
it, and the trainer classes import ``trl`` the first time they are used.

``ARSPOGRPOTrainer``
    a ``GRPOTrainer`` whose ``reward_weights`` follow a
    :class:`~rml_fast.alignment.arspo.DynamicTaskWeights` (one task per named reward function),
    updated on every generation batch before TRL aggregates the rewards. Reward maps are plain
    TRL reward functions: wrap a scorer with :func:`mapped_reward`. Everything else (grouping,
    ``scale_rewards``, loss types, vLLM, logging) is TRL's.
``AIRGRPOTrainer``
    a ``GRPOTrainer`` whose loss adds ``air_lambda * L_AIR`` (or V-REx) computed on the
    per-(intent, variant) risks of each training micro-batch, with the intent / variant / anchor
    of every prompt read from dataset columns. With ``air_lambda = 0`` its loss is TRL's.
    ``air_advantage="group"`` recomputes the advantages over whole intents (AIR's heterogeneous
    grouping); the default ``"trl"`` keeps TRL's per-prompt (= per-variant) advantages.

Batching: TRL's groups are the ``num_generations`` completions of one prompt, so one variant of an
intent is one prompt row. The AIR risks are computed per micro-batch
(``per_device_train_batch_size`` completions), so keep all variants of an intent in one
micro-batch: order the dataset intent by intent, ``shuffle_dataset=False``, and make
``per_device_train_batch_size`` a multiple of ``num_generations * variants_per_intent`` with
``steps_per_generation=1`` (TRL shuffles completions within a generation batch before splitting
it into micro-batches). Intents that arrive without an anchor or without an open variant are left
out of ``L_AIR``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from rml_fast._validation import check_scalar
from rml_fast.alignment.air import _air_loss, _cell_anchor, _context_risk, _vrex_loss
from rml_fast.alignment.arspo import DynamicTaskWeights, reward_map
from rml_fast.alignment.grpo import _NONNEG, _sequence_ratio, grpo_advantages

__all__ = ["AIRGRPOTrainer", "ARSPOGRPOTrainer", "mapped_reward"]  # noqa: F822  (built lazily)

_INSTALL = "pip install 'rml_fast[alignment]'"


def _require_trl() -> Any:
    try:
        import trl
    except ImportError as exc:  # pragma: no cover - exercised only without trl
        raise ImportError(f"rml_fast.alignment.trl_grpo needs TRL: {_INSTALL}") from exc
    return trl


def mapped_reward(
    func: Callable[..., Sequence[float | None]],
    kind: str = "power",
    gamma: float = 0.5,
    kappa: float = 2.0,
    name: str | None = None,
) -> Callable[..., list[float | None]]:
    r"""A TRL reward function returning ``phi(func(...))``, ARSPO's task reward map.

    ``phi`` is :func:`~rml_fast.alignment.arspo.reward_map` (``s^gamma``,
    ``(e^{kappa s}-1)/(e^kappa-1)`` or the identity; PROPOSAL of spec np_alignment §4.1). ``None``
    rewards (TRL's "not applicable") pass through.

    Parameters
    ----------
    func : callable
        A TRL reward function ``func(prompts, completions, **kwargs) -> list`` of scores in [0, 1].
    kind : {"power", "exp", "identity"}, default="power"
        The map.
    gamma, kappa : float
        Its parameters.
    name : str, optional
        ``__name__`` of the wrapper (TRL logs rewards and matches task names by it); default
        ``func.__name__``.

    Returns
    -------
    reward_func : callable
        Same signature as ``func``.

    Examples
    --------
    >>> def iou(completions, **kw):
    ...     return [0.04, 0.25, None]
    >>> f = mapped_reward(iou)
    >>> f.__name__, [None if r is None else round(r, 3) for r in f(completions=["a", "b", "c"])]
    ('iou', [0.2, 0.5, None])
    """
    if not callable(func):
        raise TypeError(f"func must be a callable reward function, got {type(func).__name__}")
    reward_map(torch.zeros(1), kind, gamma, kappa)  # validates kind / gamma / kappa now

    def reward_func(*args: Any, **kwargs: Any) -> list[float | None]:
        raw = list(func(*args, **kwargs))
        idx = [i for i, r in enumerate(raw) if r is not None]
        out: list[float | None] = [None] * len(raw)
        if idx:
            vals = reward_map(torch.tensor([float(r) for r in raw if r is not None], dtype=torch.float64), kind, gamma, kappa)
            for i, v in zip(idx, vals.tolist(), strict=True):
                out[i] = v
        return out

    reward_func.__name__ = str(name or getattr(func, "__name__", "mapped_reward"))
    reward_func.__qualname__ = reward_func.__name__
    reward_func.__doc__ = f"{kind} map of {getattr(func, '__name__', 'a reward')} (rml_fast ARSPO)."
    return reward_func


def _build() -> None:
    """Define the trainer classes (imports trl)."""
    if "AIRGRPOTrainer" in globals() and "ARSPOGRPOTrainer" in globals():
        return
    trl = _require_trl()
    from accelerate.utils import gather_object

    grpo_trainer_cls = trl.GRPOTrainer

    class ARSPOGRPOTrainer(grpo_trainer_cls):  # type: ignore[misc,valid-type]
        r"""TRL ``GRPOTrainer`` with ARSPO's dynamic task weights on its ``reward_weights``.

        On every generation batch, before TRL aggregates the rewards
        (``R = sum_k w_k r_k``, then group advantages), the batch mean of each task's reward
        function updates ``task_weights`` (:class:`~rml_fast.alignment.arspo.DynamicTaskWeights`,
        PROPOSAL of spec np_alignment §4.1) and the new weights are written into
        ``self.reward_weights``. Reward functions that are not tasks keep their
        ``GRPOConfig.reward_weights`` (e.g. a format reward at 1). Non-linear reward maps are
        ordinary reward functions (:func:`mapped_reward`). Note that with TRL's default
        ``scale_rewards="group"`` a weight only matters relative to the other components (a
        common scale cancels); ``scale_rewards="none"`` is the un-normalised option.

        Parameters
        ----------
        *args, **kwargs
            Those of ``trl.GRPOTrainer``.
        task_weights : DynamicTaskWeights
            Its ``tasks`` must be names of reward functions (their ``__name__``).

        Attributes
        ----------
        task_weights : DynamicTaskWeights
            The running state (``mu``, ``weights``, ``n_updates``).

        Examples
        --------
        >>> from trl import GRPOTrainer
        >>> issubclass(ARSPOGRPOTrainer, GRPOTrainer)
        True
        """

        def __init__(self, *args: Any, task_weights: DynamicTaskWeights, **kwargs: Any) -> None:
            if not isinstance(task_weights, DynamicTaskWeights):
                raise TypeError(
                    f"task_weights must be a DynamicTaskWeights, got {type(task_weights).__name__}"
                )
            super().__init__(*args, **kwargs)
            unknown = [t for t in task_weights.tasks if t not in self.reward_func_names]
            if unknown:
                raise ValueError(
                    f"task_weights names tasks {unknown} that are not reward functions {self.reward_func_names}"
                )
            self.task_weights = task_weights
            self._task_index = {t: self.reward_func_names.index(t) for t in task_weights.tasks}
            self._set_weights()

        def _set_weights(self) -> None:
            for t, i in self._task_index.items():
                self.reward_weights[i] = float(self.task_weights.weights[t])

        def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):  # type: ignore[override]
            rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
            if self.model.training:
                means = {}
                for t, i in self._task_index.items():
                    col = rewards_per_func[:, i]
                    col = col[~torch.isnan(col)]
                    means[t] = col.detach().double().cpu() if col.numel() else None
                if all(v is not None for v in means.values()):
                    self.task_weights.update(means)  # type: ignore[arg-type]
                    self._set_weights()
                    for t in self.task_weights.tasks:
                        self._metrics["train"][f"arspo/weight/{t}"].append(self.task_weights.weights[t])
            return rewards_per_func

    class AIRGRPOTrainer(grpo_trainer_cls):  # type: ignore[misc,valid-type]
        r"""TRL ``GRPOTrainer`` plus the AIR (or V-REx) regulariser of
        :mod:`rml_fast.alignment.air`.

        Loss ``= TRL's loss + air_lambda * L_reg`` per micro-batch, where ``L_reg`` is
        :func:`~rml_fast.alignment.air.air_loss` (``air_regulariser="air"``) or
        :func:`~rml_fast.alignment.air.vrex_loss` (``"vrex"``) of the risks
        ``R_{i,e} = 1 - mean_{j in (i,e)} s_j r_j``, ``s_j`` the length-normalised sequence ratio
        against the sampling policy and ``r_j`` the total reward (TRL's weighted sum of the reward
        functions, or the one named by ``air_reward``), which should lie in [0, 1]. The intent,
        variant and anchor flag of each prompt come from dataset columns. PROPOSAL reconstruction
        of arXiv 2605.20994 (spec np_alignment §2.1); see the module docstring for batching.

        Parameters
        ----------
        *args, **kwargs
            Those of ``trl.GRPOTrainer``.
        air_lambda : float, default=1.0
            Regulariser weight (>= 0); 0 gives TRL's loss.
        air_regulariser : {"air", "vrex"}, default="air"
            Which penalty.
        air_one_sided : bool, default=True
            ``max(u, 0)^2`` (AIR) or ``u^2``.
        air_advantage : {"trl", "group"}, default="trl"
            Keep TRL's per-prompt advantages, or recompute them over whole intents
            (``(R - mean_intent R) / (std_intent R + 1e-4)``, heterogeneous grouping).
        air_reward : str, optional
            Name of the reward function whose output is the risk's reward; default the weighted
            total.
        group_column, variant_column, anchor_column : str
            Dataset columns holding the intent id (int), variant id (int) and anchor flag (bool);
            default ``"air_group"``, ``"air_variant"``, ``"air_anchor"``.

        Examples
        --------
        >>> from trl import GRPOTrainer
        >>> issubclass(AIRGRPOTrainer, GRPOTrainer)
        True
        """

        _signature_columns: list[str] | None  # set by the TRL base class

        def __init__(
            self,
            *args: Any,
            air_lambda: float = 1.0,
            air_regulariser: str = "air",
            air_one_sided: bool = True,
            air_advantage: str = "trl",
            air_reward: str | None = None,
            group_column: str = "air_group",
            variant_column: str = "air_variant",
            anchor_column: str = "air_anchor",
            **kwargs: Any,
        ) -> None:
            self.air_lambda = check_scalar(air_lambda, "air_lambda", _NONNEG)
            if air_regulariser not in ("air", "vrex"):
                raise ValueError(f"air_regulariser must be 'air' or 'vrex', got {air_regulariser!r}")
            if air_advantage not in ("trl", "group"):
                raise ValueError(f"air_advantage must be 'trl' or 'group', got {air_advantage!r}")
            self.air_regulariser = air_regulariser
            self.air_one_sided = bool(air_one_sided)
            self.air_advantage = air_advantage
            self.air_columns = (group_column, variant_column, anchor_column)
            self._air_capture = False
            self._air_logps: torch.Tensor | None = None
            self._air_rewards_per_func: torch.Tensor | None = None
            super().__init__(*args, **kwargs)
            if air_reward is not None and air_reward not in self.reward_func_names:
                raise ValueError(f"air_reward must be one of {self.reward_func_names}, got {air_reward!r}")
            self.air_reward = air_reward

        def _set_signature_columns_if_needed(self) -> None:
            super()._set_signature_columns_if_needed()
            if self._signature_columns is not None:
                self._signature_columns = list(self._signature_columns) + [
                    c for c in self.air_columns if c not in self._signature_columns
                ]

        def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):  # type: ignore[override]
            out = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
            self._air_rewards_per_func = out
            return out

        def _generate_and_score_completions(self, inputs):  # type: ignore[override]
            gcol, vcol, acol = self.air_columns
            for col in self.air_columns:
                if col not in inputs[0]:
                    raise ValueError(
                        f"AIRGRPOTrainer needs the dataset column {col!r} (intent id, variant id, anchor flag); "
                        f"the batch has {sorted(inputs[0])}"
                    )
            output = super()._generate_and_score_completions(inputs)
            device = self.accelerator.device
            rpf = self._air_rewards_per_func
            assert rpf is not None
            if self.air_reward is None:
                total = (rpf * self.reward_weights.to(rpf.device).unsqueeze(0)).nansum(dim=1)
            else:
                total = torch.nan_to_num(rpf[:, self.reward_func_names.index(self.air_reward)], nan=0.0)
            n = len(inputs)
            sl = slice(self.accelerator.process_index * n, (self.accelerator.process_index + 1) * n)
            group = torch.tensor([int(x[gcol]) for x in inputs], dtype=torch.long, device=device)
            variant = torch.tensor([int(x[vcol]) for x in inputs], dtype=torch.long, device=device)
            anchor = torch.tensor([bool(x[acol]) for x in inputs], dtype=torch.bool, device=device)
            output["air_group"] = group
            output["air_variant"] = variant
            output["air_anchor"] = anchor
            output["air_reward"] = total[sl].to(device)
            if self.air_advantage == "group":
                all_groups = torch.tensor(gather_object([int(x[gcol]) for x in inputs]), dtype=torch.long)
                adv = grpo_advantages(total.detach().double().cpu(), all_groups, "group", eps=1e-4)
                output["advantages"] = adv[sl].to(device=device, dtype=output["advantages"].dtype)
            return output

        def _get_per_token_logps_and_entropies(self, *args: Any, **kwargs: Any):  # type: ignore[override]
            out = super()._get_per_token_logps_and_entropies(*args, **kwargs)
            if self._air_capture:
                self._air_logps = out[0]
            return out

        def _compute_loss(self, model, inputs):  # type: ignore[override]
            self._air_capture = True
            try:
                loss = super()._compute_loss(model, inputs)
            finally:
                self._air_capture = False
            logps, self._air_logps = self._air_logps, None
            if self.air_lambda == 0.0 or logps is None:
                return loss
            mask = inputs["completion_mask"]
            if "tool_mask" in inputs:
                mask = mask * inputs["tool_mask"]
            mask = mask.bool()
            old = inputs.get("old_per_token_logps")
            old = logps.detach() if old is None else old
            ratio = _sequence_ratio(logps, old.to(logps.dtype), mask)
            risks = _context_risk(ratio, inputs["air_reward"].to(logps.dtype), inputs["air_group"],
                                  inputs["air_variant"])
            valid = torch.isfinite(risks.detach())
            if self.air_regulariser == "air":
                anchor = _cell_anchor(inputs["air_anchor"], inputs["air_group"], inputs["air_variant"])
                reg = _air_loss(risks, anchor, valid, self.air_one_sided)
            else:
                reg = _vrex_loss(risks, valid)
            mode = "train" if self.model.training else "eval"
            normalizer = self.current_gradient_accumulation_steps if mode == "train" else 1.0
            self._metrics[mode][f"air/{self.air_regulariser}"].append(float(reg.detach()))
            return loss + self.air_lambda * reg / normalizer

    for cls in (ARSPOGRPOTrainer, AIRGRPOTrainer):
        cls.__qualname__ = cls.__name__
    globals()["ARSPOGRPOTrainer"] = ARSPOGRPOTrainer
    globals()["AIRGRPOTrainer"] = AIRGRPOTrainer


def __getattr__(name: str) -> Any:
    if name in ("AIRGRPOTrainer", "ARSPOGRPOTrainer"):
        _build()
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
