"""TRL integration: a ``DPOTrainer`` that trains any of the nine preference objectives with RC.

``PreferenceDPOTrainer`` is a subclass of ``trl.DPOTrainer`` (TRL >= 1.0, an optional extra:
``pip install 'rml_fast[alignment]'``). It keeps TRL's data pipeline, reference handling
(separate ``ref_model``, PEFT adapters or ``precompute_ref_log_probs``), fused LM head and
logging, and replaces only the loss: its ``compute_loss`` computes the policy's sequence
log-likelihoods the way TRL does (``model(..., labels=..., fused_lm_head=True).log_probs``
summed over the completion) and evaluates
:func:`~rml_fast.alignment.preference.preference_step` on them, optionally through a
:class:`~rml_fast.alignment.preference.RewardCalibrator` on the LM head (or the trainable
LoRA weights when the head is frozen). Besides TRL's metrics it logs the incentives
(``incentives/d_w``, ``incentives/d_l``, ``incentives/log_r``) and, when the head geometry is
computed (``reward_calibration=True`` or ``band_diagnostic=True``), ``band/inside``,
``band/log_r_star`` (``log |s_l|/|s_w|``), ``band/rho`` and ``rc/alpha``.

Where the objective coincides, the loss equals TRL's own: ``kind="dpo"`` is
``loss_type="sigmoid"``, ``kind="dpo", length_norm=True`` is ``"sigmoid_norm"``,
``kind="ipo", length_norm=True, tau=beta`` is ``"ipo"`` and ``kind="bce"`` is ``"bco_pair"``
at ``beta=1``. ``trl`` is imported only when the class is first used, so this module imports
without it; :func:`trl_available` tells whether it can be used.
"""

from __future__ import annotations

import functools
import importlib.util
import math
from typing import Any

import torch

from rml_fast.alignment.preference import (
    _HP,
    RewardCalibrator,
    _check_kind,
    _resolve_hp,
    preference_step,
)

__all__ = ["PreferenceLossMixin", "preference_dpo_trainer_class", "trl_available"]

_INSTALL = "pip install 'rml_fast[alignment]'"
_NON_MODEL_KEYS = {"completion_mask", "ref_chosen_logps", "ref_rejected_logps"}


def trl_available() -> bool:
    """Whether ``trl`` (and so :class:`PreferenceDPOTrainer`) can be imported.

    Examples
    --------
    >>> isinstance(trl_available(), bool)
    True
    """
    return importlib.util.find_spec("trl") is not None


def _import_trl() -> Any:
    try:
        import trl
    except ImportError as exc:  # pragma: no cover - exercised without trl
        raise ImportError(
            f"PreferenceDPOTrainer needs TRL, an optional dependency: {_INSTALL} (or pip install trl)"
        ) from exc
    try:  # the fused-LM-head batch layout this subclass relies on (TRL >= 1.16 tested)
        from trl.trainer.utils import add_fused_lm_head  # noqa: F401
    except ImportError as exc:
        raise ImportError(
            f"PreferenceDPOTrainer needs trl>=1.16 (found {getattr(trl, '__version__', '?')}): "
            "pip install -U trl"
        ) from exc
    return trl


def _head_params(model: torch.nn.Module) -> list[torch.Tensor]:
    """The trainable LM-head parameters, or else the trainable LoRA weights."""
    params: list[torch.Tensor] = []
    get_head = getattr(model, "get_output_embeddings", None)
    head = get_head() if callable(get_head) else None
    if head is not None:
        params = [p for p in head.parameters() if p.requires_grad]
    if not params:
        params = [p for n, p in model.named_parameters() if p.requires_grad and "lora" in n.lower()]
    if not params:
        raise ValueError(
            "no trainable LM-head or LoRA parameters found for the score geometry; "
            "pass head_params=[...] explicitly"
        )
    return params


class PreferenceLossMixin:
    """The loss of :class:`PreferenceDPOTrainer`; mixed in before ``trl.DPOTrainer``.

    Keyword arguments consumed from the trainer's constructor:

    Parameters
    ----------
    preference_loss : str, default="dpo"
        One of :data:`~rml_fast.alignment.preference.LOSSES`.
    loss_hp : dict, optional
        Hyper-parameters of the objective. ``beta`` defaults to ``args.beta`` for dpo, simpo
        and cpo, and ``tau`` to ``args.beta`` for ipo (TRL's convention).
    reward_calibration : bool, default=False
        Wrap the objective in a :class:`~rml_fast.alignment.preference.RewardCalibrator`.
    rc_ema : float, default=0.98
        EMA decay of the calibrator. Gradient clipping of the score pair follows
        ``args.max_grad_norm`` (joint clipping, ratio preserved).
    rc_every : int, default=1
        Refresh the calibrator's score norms every ``rc_every`` steps (PROPOSED amortisation;
        see :class:`~rml_fast.alignment.preference.RewardCalibrator`).
    band_diagnostic : bool, default=False
        Compute the head geometry (two extra head-restricted backward passes) for the band
        metrics even without calibration.
    head_params : list of Parameter, optional
        Parameter subset for the score norms; default: the trainable LM head, else LoRA weights.

    Examples
    --------
    >>> PreferenceLossMixin.supported_options()["ipo"]
    ['length_norm', 'tau']
    """

    def _setup_preference(
        self,
        preference_loss: str = "dpo",
        loss_hp: dict[str, Any] | None = None,
        reward_calibration: bool = False,
        rc_ema: float = 0.98,
        band_diagnostic: bool = False,
        head_params: Any = None,
        rc_every: int = 1,
    ) -> None:
        kind = _check_kind(preference_loss)
        hp = dict(loss_hp or {})
        beta = float(self.args.beta)  # type: ignore[attr-defined]
        if "beta" in _HP[kind]:
            hp.setdefault("beta", beta)
        if kind == "ipo":
            hp.setdefault("tau", beta)
        self.preference_kind = kind
        self.preference_hp = _resolve_hp(kind, hp)
        self.band_diagnostic = bool(band_diagnostic)
        unwrapped = self.accelerator.unwrap_model(self.model)  # type: ignore[attr-defined]
        self.preference_calibrator: RewardCalibrator | None = None
        self._geometry_params = None
        if reward_calibration or band_diagnostic:
            params = list(head_params) if head_params is not None else _head_params(unwrapped)
            self._geometry_params = params
            if reward_calibration:
                self.preference_calibrator = RewardCalibrator(
                    params, ema=rc_ema,
                    max_grad_norm=float(self.args.max_grad_norm or 0.0),  # type: ignore[attr-defined]
                    every=rc_every,
                )

    @staticmethod
    def supported_options() -> dict[str, list[str]]:
        """Each objective's hyper-parameter names (all also take ``length_norm``)."""
        return {k: sorted([*v, "length_norm"]) for k, v in _HP.items()}

    def compute_loss(
        self,
        model: torch.nn.Module,
        inputs: dict[str, torch.Tensor],
        return_outputs: bool = False,
        num_items_in_batch: Any = None,
    ) -> Any:
        """The chosen objective on TRL's padded ``[chosen; rejected]`` batch (mean over pairs)."""
        if return_outputs:
            raise NotImplementedError("PreferenceDPOTrainer does not return model outputs")
        mode = "train" if self.model.training else "eval"  # type: ignore[attr-defined]
        completion_mask = inputs["completion_mask"]
        model_kwargs: dict[str, Any] = {k: v for k, v in inputs.items() if k not in _NON_MODEL_KEYS}
        model_kwargs["use_cache"] = False
        labels = inputs["input_ids"].masked_fill(completion_mask.eq(0), -100)
        outputs = model(**model_kwargs, labels=labels, fused_lm_head=True)
        shift_mask = completion_mask[..., 1:]
        per_token = outputs.log_probs[:, -shift_mask.size(1) :]
        logps = per_token.sum(dim=1)
        lengths = shift_mask.sum(dim=1).clamp(min=1).to(logps.dtype)
        zw, zl = logps.chunk(2, dim=0)
        len_w, len_l = lengths.chunk(2, dim=0)
        if self.precompute_ref_logps:  # type: ignore[attr-defined]
            ref_w, ref_l = inputs["ref_chosen_logps"], inputs["ref_rejected_logps"]
        else:
            ref_model = self.ref_model  # type: ignore[attr-defined]
            ref_w, ref_l = self.compute_ref_log_probs(  # type: ignore[attr-defined]
                self.model if ref_model is None else ref_model, inputs  # type: ignore[attr-defined]
            )
        ref_w = ref_w.to(zw.dtype)
        ref_l = ref_l.to(zw.dtype)
        calibrator = self.preference_calibrator if mode == "train" else None
        params = None
        if mode == "train":  # band_diagnostic forces the geometry on every step
            if calibrator is not None and not self.band_diagnostic:
                params = calibrator.params
            else:
                params = self._geometry_params
        out = preference_step(
            self.preference_kind, zw, zl, ref_w, ref_l, len_w, len_l,
            params=params,
            calibrator=calibrator, **self.preference_hp,
        )
        self._log_preference(mode, out, zw, zl, ref_w, ref_l)
        return out.loss

    @torch.no_grad()
    def _log_preference(self, mode: str, out: Any, zw: Any, zl: Any, ref_w: Any, ref_l: Any) -> None:
        acc = self.accelerator  # type: ignore[attr-defined]
        metrics = self._metrics[mode]  # type: ignore[attr-defined]

        def log(key: str, value: torch.Tensor) -> None:
            metrics[key].append(acc.gather_for_metrics(value.detach().float()).mean().item())

        rw, rl = (zw - ref_w).detach(), (zl - ref_l).detach()
        log("rewards/chosen", rw)
        log("rewards/rejected", rl)
        log("rewards/margins", rw - rl)
        log("rewards/accuracies", (rw > rl).float())
        log("logps/chosen", zw)
        log("logps/rejected", zl)
        log("incentives/d_w", out.d_w)
        log("incentives/d_l", out.d_l)
        metrics["incentives/log_r"].append(out.log_r)
        if out.geometry is not None:
            geo = out.geometry
            sw, sl = float(geo["sw_sq"]), float(geo["sl_sq"])
            if sw > 0 and sl > 0:
                metrics["band/log_r_star"].append(0.5 * (math.log(sl) - math.log(sw)))
            metrics["band/rho"].append(float(geo["rho"]))
        if out.inside is not None:
            log("band/inside", out.inside.float())
        if self.preference_calibrator is not None:
            metrics["rc/alpha"].append(out.alpha)


def preference_dpo_trainer_class() -> type:
    """The class ``PreferenceDPOTrainer`` (built on first use; imports ``trl``).

    ``from rml_fast.alignment.trl_dpo import PreferenceDPOTrainer`` gives the same class.

    Raises
    ------
    ImportError
        If ``trl`` is not installed (names ``pip install 'rml_fast[alignment]'``).

    Examples
    --------
    >>> if trl_available():
    ...     assert preference_dpo_trainer_class().__name__ == "PreferenceDPOTrainer"
    """
    return _trainer_class()


@functools.cache
def _trainer_class() -> type:
    trl = _import_trl()

    class PreferenceDPOTrainer(PreferenceLossMixin, trl.DPOTrainer):  # type: ignore[misc, name-defined]
        """``trl.DPOTrainer`` training one of the nine preference objectives, optionally with RC.

        Takes every argument of ``trl.DPOTrainer`` plus the keyword-only options of
        :class:`PreferenceLossMixin` (``preference_loss``, ``loss_hp``, ``reward_calibration``,
        ``rc_ema``, ``rc_every``, ``band_diagnostic``, ``head_params``). TRL's ``loss_type`` is ignored
        (must be the default ``["sigmoid"]``); ``ld_alpha``, ``use_weighting`` and
        f-divergences other than ``reverse_kl`` are not supported and raise.
        """

        def __init__(
            self,
            *args: Any,
            preference_loss: str = "dpo",
            loss_hp: dict[str, Any] | None = None,
            reward_calibration: bool = False,
            rc_ema: float = 0.98,
            band_diagnostic: bool = False,
            head_params: Any = None,
            rc_every: int = 1,
            **kwargs: Any,
        ) -> None:
            _check_kind(preference_loss)
            super().__init__(*args, **kwargs)
            a = self.args
            if list(a.loss_type) != ["sigmoid"]:
                raise ValueError(
                    "set the objective with preference_loss=..., not args.loss_type "
                    f"(got loss_type={a.loss_type})"
                )
            if a.ld_alpha is not None or a.use_weighting or a.f_divergence_type != "reverse_kl":
                raise ValueError(
                    "PreferenceDPOTrainer does not support ld_alpha, use_weighting or "
                    "f_divergence_type other than 'reverse_kl'"
                )
            self._setup_preference(
                preference_loss, loss_hp, reward_calibration, rc_ema, band_diagnostic, head_params,
                rc_every,
            )

    PreferenceDPOTrainer.__module__ = __name__
    return PreferenceDPOTrainer


def __getattr__(name: str) -> Any:
    if name == "PreferenceDPOTrainer":
        return _trainer_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
