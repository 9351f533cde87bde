"""TRL integration: a ``DPOTrainer`` that trains any of the nine preference objectives with RC.

``PreferenceDPOTrainer`` is a subclass of ``trl.DPOTrainer`` (TRL >= 1.0, an optional extra:
``pip install 'rml_fast[alignment]'``). It keeps TRL's data pipeline, reference handling
(separate ``ref_model``, PEFT adapters or ``precompute_ref_log_probs``), fused LM head and
logging, and replaces only the loss: its ``compute_loss`` computes the policy's sequence
log-likelihoods the way TRL does (``model(..., labels=..., fused_lm_head=True).log_probs``
summed over the completion) and evaluates
:func:`~rml_fast.alignment.preference.preference_step` on them, optionally through a
:class:`~rml_fast.alignment.preference.RewardCalibrator` on the LM head (or the trainable
LoRA weights when the head is frozen); for a plain untied linear head the two score norms come
in closed form from the final hidden states (:func:`head_geometry`), so the band diagnostic and
RC cost about one extra head matmul instead of two backward passes. Besides TRL's metrics it
logs the incentives
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

from rml_fast._validation import Interval, check_scalar, check_tensor
from rml_fast.alignment.preference import (
    _HP,
    RewardCalibrator,
    _check_kind,
    _resolve_hp,
    preference_step,
)

__all__ = ["PreferenceLossMixin", "head_geometry", "preference_dpo_trainer_class", "trl_available"]

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


_SCALE_KEYS = (
    "final_logit_softcapping", "logit_scale", "output_multiplier", "lm_head_multiplier",
    "logits_scaling",
)


def _closed_form_ok(model: torch.nn.Module, params: list[torch.Tensor]) -> bool:
    """Whether the head geometry can be computed in closed form from the final hidden states.

    True for a plain, untied ``nn.Linear`` LM head (no logit soft-capping or scaling, not a PEFT
    model) when the geometry parameters are exactly its trainable weight (and bias).
    """
    get_head = getattr(model, "get_output_embeddings", None)
    head = get_head() if callable(get_head) else None
    if not isinstance(head, torch.nn.Linear) or hasattr(model, "peft_config"):
        return False
    get_in = getattr(model, "get_input_embeddings", None)
    emb = get_in() if callable(get_in) else None
    if emb is not None and getattr(emb, "weight", None) is head.weight:
        return False  # tied: the head-restricted gradient also flows through the embedding
    config: Any = getattr(model, "config", None)
    cfg = config.get_text_config() if hasattr(config, "get_text_config") else config
    if cfg is None or any(getattr(cfg, k, None) not in (None, 1.0) for k in _SCALE_KEYS):
        return False
    backbone = getattr(model, "base_model", model)
    if backbone is model:
        return False
    own = {id(p) for p in head.parameters() if p.requires_grad}
    return own == {id(p) for p in params} and id(head.weight) in own


def _check_head_inputs(hidden: Any, labels: Any, weight: Any, bias: Any) -> None:
    """Validate :func:`head_geometry`'s tensors (named in the errors) before any work."""
    check_tensor(hidden, "hidden", ndim=3, nonempty=True)
    check_tensor(weight, "weight", ndim=2, nonempty=True)
    check_tensor(labels, "labels", ndim=2, floating=False)
    if labels.is_floating_point() or labels.is_complex() or labels.dtype == torch.bool:
        raise TypeError(f"labels must be an integer tensor, got dtype {labels.dtype}")
    n2 = hidden.shape[0]
    if n2 % 2:
        raise ValueError(f"hidden must have shape (2B, T, d) (chosen rows first), got {tuple(hidden.shape)}")
    if labels.shape != hidden.shape[:2]:
        raise ValueError(f"labels must have shape {tuple(hidden.shape[:2])} (hidden.shape[:2]), "
                         f"got {tuple(labels.shape)}")
    if weight.shape[1] != hidden.shape[2]:
        raise ValueError(f"weight must have shape (V, {hidden.shape[2]}) (d of hidden), got "
                         f"{tuple(weight.shape)}")
    v = weight.shape[0]
    if not bool(((labels == -100) | ((labels >= 0) & (labels < v))).all()):
        raise ValueError(f"labels must be -100 or token ids in [0, {v}) (the rows of weight)")
    if bias is not None:
        check_tensor(bias, "bias", ndim=1)
        if bias.shape[0] != v:
            raise ValueError(f"bias must have shape ({v},) like weight's rows, got {tuple(bias.shape)}")


def head_geometry(
    hidden: torch.Tensor,
    labels: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    *,
    max_grad_norm: float = 0.0,
    chunk: int = 1024,
) -> dict[str, torch.Tensor]:
    """Closed-form score geometry of a linear LM head, without autograd.

    For ``z = sum_t log softmax(W h_t + b)[y_t]`` the head gradient is
    ``dz/dW = sum_t (e_{y_t} - p_t) h_t^T`` (and ``dz/db = sum_t (e_{y_t} - p_t)``), so
    ``g_w = grad_W mean_b z_w`` and ``g_l`` follow from the final hidden states of the scored
    tokens only (two matmuls per token chunk), instead of two backward passes through the head.
    Equals :func:`~rml_fast.alignment.preference.score_geometry` with ``params=[W(, b)]``.

    Parameters
    ----------
    hidden : Tensor of shape (2B, T, d)
        Final hidden states, chosen rows first; ``hidden[:, t]`` predicts ``labels[:, t]``.
    labels : LongTensor of shape (2B, T)
        Next-token labels, ``-100`` where not scored.
    weight : Tensor of shape (V, d)
    bias : Tensor of shape (V,), optional
        Include the bias gradient (when it is trained).
    max_grad_norm : float, default=0.0
        Joint clipping of ``[g_w, g_l]`` as in ``score_geometry``.
    chunk : int, default=1024
        Tokens per matmul chunk.

    Returns
    -------
    geometry : dict
        ``sw_sq``, ``sl_sq``, ``dot``, ``rho`` (0-dim float64 tensors).

    Examples
    --------
    >>> import torch
    >>> from rml_fast.alignment.preference import score_geometry, sequence_logps
    >>> g = torch.Generator().manual_seed(0)
    >>> h = torch.randn(4, 3, 5, generator=g, dtype=torch.float64)
    >>> W = torch.randn(7, 5, generator=g, dtype=torch.float64, requires_grad=True)
    >>> y = torch.randint(0, 7, (4, 3), generator=g)
    >>> z = sequence_logps(h @ W.T, y)
    >>> a, b = head_geometry(h, y, W.detach()), score_geometry(z[:2], z[2:], [W])
    >>> all(torch.allclose(a[k], b[k]) for k in ("sw_sq", "sl_sq", "dot"))
    True
    """
    _check_head_inputs(hidden, labels, weight, bias)
    max_grad_norm = check_scalar(max_grad_norm, "max_grad_norm", Interval("real", 0.0, None))
    chunk = check_scalar(chunk, "chunk", Interval("int", 1, None))
    n2 = hidden.shape[0]
    b = n2 // 2
    grads = []
    with torch.no_grad():
        for rows in (slice(0, b), slice(b, n2)):
            lab = labels[rows]
            keep = lab != -100
            h = hidden[rows][keep].to(weight.dtype)
            y = lab[keep]
            gw = torch.zeros_like(weight).index_add_(0, y, h)
            gb = torch.zeros(weight.shape[0], dtype=weight.dtype, device=weight.device)
            gb.index_add_(0, y, torch.ones_like(y, dtype=weight.dtype))
            for i in range(0, h.shape[0], chunk):
                hc = h[i : i + chunk]
                logits = hc @ weight.T
                if bias is not None:
                    logits = logits + bias
                p = torch.softmax(logits, dim=-1)
                gw.sub_(p.T @ hc)
                gb.sub_(p.sum(0))
            grads.append((gw / b, gb / b))
        (gw_w, gb_w), (gw_l, gb_l) = grads
        sw_sq = gw_w.double().pow(2).sum()
        sl_sq = gw_l.double().pow(2).sum()
        dot = (gw_w.double() * gw_l.double()).sum()
        if bias is not None:
            sw_sq = sw_sq + gb_w.double().pow(2).sum()
            sl_sq = sl_sq + gb_l.double().pow(2).sum()
            dot = dot + (gb_w.double() * gb_l.double()).sum()
        if max_grad_norm > 0:
            total = torch.sqrt(sw_sq + sl_sq)
            c = torch.clamp(math.sqrt(2.0) * max_grad_norm / (total + 1e-6), max=1.0)
            sw_sq, sl_sq, dot = sw_sq * c * c, sl_sq * c * c, dot * c * c
        rho = dot / torch.sqrt(sw_sq * sl_sq).clamp_min(1e-300)
    return {"sw_sq": sw_sq, "sl_sq": sl_sq, "dot": dot, "rho": rho}


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
    fast_geometry : bool, default=True
        For a plain untied linear head (and ``head_params`` its own weights), compute the score
        norms in closed form from the final hidden states of the completion tokens
        (:func:`head_geometry`) instead of two backward passes through the fused head; other
        models fall back to ``torch.autograd.grad``.

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
        fast_geometry: bool = True,
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
        self._geometry_params: list[torch.Tensor] | None = None
        self._closed_form = False
        if reward_calibration or band_diagnostic:
            params = list(head_params) if head_params is not None else _head_params(unwrapped)
            self._geometry_params = params
            self._closed_form = bool(fast_geometry) and _closed_form_ok(unwrapped, params)
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
        calibrator = self.preference_calibrator if mode == "train" else None
        need_geo = mode == "train" and torch.is_grad_enabled() and (
            self.band_diagnostic or (calibrator is not None and calibrator.needs_geometry())
        )
        closed_form = need_geo and self._closed_form
        captured: dict[str, torch.Tensor] = {}
        handle = None
        if closed_form:
            unwrapped = self.accelerator.unwrap_model(model)  # type: ignore[attr-defined]

            def keep_hidden(module: Any, args: Any, out: Any) -> None:
                captured["h"] = out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]

            handle = unwrapped.base_model.register_forward_hook(keep_hidden)
        try:
            outputs = model(**model_kwargs, labels=labels, fused_lm_head=True)
        finally:
            if handle is not None:
                handle.remove()
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
        geometry = None
        if closed_form and "h" in captured:
            head = unwrapped.get_output_embeddings()
            with_bias = head.bias is not None and head.bias.requires_grad
            geometry = head_geometry(
                captured["h"][:, :-1], labels[:, 1:], head.weight.detach(),
                head.bias.detach() if with_bias else None,
                max_grad_norm=calibrator.max_grad_norm if calibrator is not None else 0.0,
            )
        params = None
        if mode == "train" and geometry is None:  # band_diagnostic: the geometry on every step
            if calibrator is not None and not self.band_diagnostic:
                params = calibrator.params
            else:
                params = self._geometry_params
        out = preference_step(
            self.preference_kind, zw, zl, ref_w, ref_l, len_w, len_l,
            params=params, calibrator=calibrator, geometry=geometry, **self.preference_hp,
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
        ``rc_ema``, ``rc_every``, ``band_diagnostic``, ``head_params``, ``fast_geometry``). TRL's ``loss_type`` is ignored
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
            fast_geometry: bool = True,
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
                rc_every, fast_geometry,
            )

    PreferenceDPOTrainer.__module__ = __name__
    return PreferenceDPOTrainer


def __getattr__(name: str) -> Any:
    if name == "PreferenceDPOTrainer":
        return _trainer_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
