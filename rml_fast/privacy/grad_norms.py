"""Per-layer rules turning stored activations and output gradients into per-sample gradients.

Each supported layer type registers, with an explicit decorator into :data:`LAYER_RULES`,
a function ``(module, activation, output_grad) -> list[Form]`` that describes the layer's
per-sample gradients in one of four forms, without computing them:

* :class:`GemmForm` -- a weight whose per-sample gradient is ``G_i = D_i^T A_i`` (Linear
  over positions), plus an optional bias ``b_i = sum_s D_is``. Norms by ghost Grams or by
  instantiating ``G_i`` (chosen by cost).
* :class:`ConvForm` -- Conv1d/Conv2d: ``G_i`` instantiated by one batch-grouped
  convolution (no im2col), or unfolded into GemmForms for ghost norms (chosen by cost).
* :class:`EmbeddingForm` -- ``G_i = sum_s e_{id_is} D_is^T``: norm by segment sums.
* :class:`SampleForm` -- per-sample gradients instantiated (LayerNorm/GroupNorm/RMSNorm
  affine parameters: a few numbers per sample).

The engine in :mod:`rml_fast.privacy.clipping` combines forms into norms, coupled
(difference) norms and clipped sums.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeGuard, cast

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "LAYER_RULES",
    "ConvForm",
    "EmbeddingForm",
    "Form",
    "GemmForm",
    "LayerRules",
    "SampleForm",
    "UnsupportedLayerError",
]


class UnsupportedLayerError(TypeError):
    """A layer with trainable parameters that has no per-sample gradient rule."""


@dataclass
class GemmForm:
    """``G_i = D_i^T A_i`` written into ``weight.view(p_total, -1)[rows]`` (+ bias rows).

    Parameters
    ----------
    weight : torch.nn.Parameter
        The layer's weight; ``weight.view(p_total, -1)[rows]`` has shape (p, d).
    A : torch.Tensor of shape (B, S, d)
        Activations (S positions per sample), finite.
    D : torch.Tensor of shape (B, S, p)
        Output gradients, finite.
    bias : torch.nn.Parameter or None, default=None
        The bias whose per-sample gradient is ``sum_s D_is``.
    rows : slice, default=slice(None)
        The rows of the weight's matrix view this form covers (a group of a grouped conv).

    Built directly, every argument is checked (values, dtypes, shapes, NaN/inf refused); the
    layer rules build it unchecked from a layer's own activations and gradients (the engine
    checks the losses and the resulting norms for NaN/inf).

    Examples
    --------
    >>> import torch
    >>> lin = torch.nn.Linear(3, 2)
    >>> f = GemmForm(lin.weight, torch.ones(4, 1, 3), torch.ones(4, 1, 2), lin.bias)
    >>> tuple(f.bias_per_sample.shape), len(f.params)
    ((4, 2), 2)
    """

    weight: nn.Parameter
    A: torch.Tensor  # (B, S, d)
    D: torch.Tensor  # (B, S, p)
    bias: nn.Parameter | None = None
    rows: slice = field(default_factory=lambda: slice(None))
    _bias_ps: torch.Tensor | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        from rml_fast._validation import check_tensor

        check_tensor(self.weight, "weight", nonempty=True)
        check_tensor(self.A, "A", ndim=3)
        check_tensor(self.D, "D", ndim=3)
        if self.bias is not None:
            check_tensor(self.bias, "bias", ndim=1)
        if not isinstance(self.rows, slice):
            raise TypeError(f"rows must be a slice, got {type(self.rows).__name__}")
        B, S, d = self.A.shape
        if tuple(self.D.shape[:2]) != (B, S):
            raise ValueError(f"D must have shape (B, S, p) = ({B}, {S}, p) like A, got "
                             f"{tuple(self.D.shape)}")
        block = self.weight.reshape(self.weight.shape[0], -1)[self.rows]
        if tuple(block.shape) != (self.D.shape[2], d):
            raise ValueError(f"weight's rows {self.rows} must have shape (p, d) = "
                             f"({self.D.shape[2]}, {d}) for D and A, got {tuple(block.shape)}")
        if self.bias is not None and self.bias.shape[0] != self.weight.shape[0]:
            raise ValueError(f"bias must have shape ({self.weight.shape[0]},) like the rows of "
                             f"weight, got {tuple(self.bias.shape)}")

    @classmethod
    def _unchecked(cls, weight: nn.Parameter, A: torch.Tensor, D: torch.Tensor,
                   bias: nn.Parameter | None = None, rows: slice | None = None) -> GemmForm:
        """The layer rules' constructor: no checks (the hot path of every step)."""
        obj = object.__new__(cls)
        obj.weight, obj.A, obj.D, obj.bias = weight, A, D, bias
        obj.rows = slice(None) if rows is None else rows
        obj._bias_ps = None
        return obj

    @property
    def params(self) -> tuple[nn.Parameter, ...]:
        """The parameters this form covers: ``(weight,)`` or ``(weight, bias)``."""
        return (self.weight,) if self.bias is None else (self.weight, self.bias)

    @property
    def bias_per_sample(self) -> torch.Tensor:
        """Per-sample bias gradients ``sum_s D_is``, shape (B, p) (computed once)."""
        if self._bias_ps is None:
            self._bias_ps = self.D.sum(1)
        return self._bias_ps


@dataclass
class EmbeddingForm:
    """Rows ``ids`` of ``weight`` receive ``D`` (B, S, p); ids (B, S) int64."""

    weight: nn.Parameter
    ids: torch.Tensor
    D: torch.Tensor

    @property
    def params(self) -> tuple[nn.Parameter, ...]:
        """The parameters this form covers: ``(weight,)``."""
        return (self.weight,)


@dataclass
class SampleForm:
    """Instantiated per-sample gradients ``grads[k]`` of shape (B, *params[k].shape)."""

    grads: dict[nn.Parameter, torch.Tensor]

    @property
    def params(self) -> tuple[nn.Parameter, ...]:
        """The parameters this form covers, in the order of ``grads``."""
        return tuple(self.grads)


@dataclass
class ConvForm:
    """A Conv1d/Conv2d layer's per-sample gradients, in whichever form the engine asks for.

    ``x`` (B, C_in, H, W) is the input as the convolution sees it (non-zero padding modes
    already applied), ``dy`` (B, C_out, H_out, W_out) the output gradient (Conv1d as
    ``H = 1``). :meth:`per_sample` instantiates ``G_i`` with one convolution whose groups
    run over the batch (the weight gradient of a ``B * groups``-grouped convolution: no
    im2col); :meth:`gemm_forms` unfolds the input into ``GemmForm`` rows for ghost norms.
    Both are computed once and cached.
    """

    weight: nn.Parameter
    bias: nn.Parameter | None
    x: torch.Tensor
    dy: torch.Tensor
    kernel: tuple[int, int]
    dilation: tuple[int, int]
    padding: tuple[int, int]
    stride: tuple[int, int]
    groups: int
    _gemm: list[Form] | None = field(default=None, repr=False)

    @property
    def params(self) -> tuple[nn.Parameter, ...]:
        """The trainable parameters this form covers: ``weight`` and ``bias`` where trainable."""
        return tuple(p for p in (self.weight, self.bias) if _trainable(p))

    @property
    def positions(self) -> int:
        """``L``, output positions per sample (the rows of the unfolded input)."""
        return self.dy.shape[2] * self.dy.shape[3]

    @property
    def fan_in(self) -> int:
        """``d = C_in / groups * kh * kw``."""
        return self.x.shape[1] // self.groups * self.kernel[0] * self.kernel[1]

    @property
    def fan_out(self) -> int:
        """``p = C_out / groups``."""
        return self.dy.shape[1] // self.groups

    def per_sample(self) -> SampleForm:
        """Instantiated per-sample gradients (weight (B, *weight.shape), bias (B, C_out)).

        Not cached: ``B`` copies of the weight are as large as the layer's activations, so
        the engine takes norms from them and drops them (the clipped sum comes from one
        convolution weight gradient with per-sample-scaled output gradients instead).
        """
        grads: dict[nn.Parameter, torch.Tensor] = {}
        if _trainable(self.weight):
            grads[self.weight] = _conv_per_sample_weight_grads(self)
        if _trainable(self.bias):
            grads[self.bias] = self.dy.sum((2, 3))  # type: ignore[index]
        return SampleForm(grads)

    def weighted_sum(self, w: torch.Tensor) -> torch.Tensor:
        """``sum_i w_i G_i`` (weight only) by one convolution weight gradient of ``w``-scaled
        output gradients, shape ``weight.shape``; ``w`` of shape (B,)."""
        dyw = self.dy * w.to(self.dy.dtype).view(-1, 1, 1, 1)
        weight = self.x.new_empty(1).expand(
            self.dy.shape[1], self.x.shape[1] // self.groups, *self.kernel)
        gw = torch.ops.aten.convolution_backward(
            dyw, self.x, weight, None, list(self.stride), list(self.padding),
            list(self.dilation), False, [0, 0], self.groups, [False, True, False],
        )[1]
        return gw.reshape(self.weight.shape)

    def gemm_forms(self) -> list[Form]:
        """The unfolded ``G_i = D_i^T A_i`` forms (one per group; bias of a grouped conv
        as a :class:`SampleForm`)."""
        if self._gemm is None:
            self._gemm = _conv_gemm_forms(self)
        return self._gemm


Form = GemmForm | EmbeddingForm | SampleForm | ConvForm
Rule = Callable[[nn.Module, torch.Tensor, torch.Tensor], list[Form]]


class LayerRules:
    """A registry of per-sample gradient rules keyed by exact layer type."""

    def __init__(self) -> None:
        self._rules: dict[type[nn.Module], Rule] = {}

    def register(self, *types: type[nn.Module]) -> Callable[[Rule], Rule]:
        """Decorator registering ``rule`` for each layer type in ``types``."""

        def deco(rule: Rule) -> Rule:
            for t in types:
                if t in self._rules:
                    raise ValueError(f"a per-sample rule for {t.__name__} is already registered")
                self._rules[t] = rule
            return rule

        return deco

    def supports(self, module: nn.Module) -> bool:
        """Whether a rule is registered for ``type(module)`` exactly (subclasses do not match)."""
        return type(module) in self._rules

    def lookup(self, module: nn.Module, name: str = "") -> Rule:
        """The rule for ``module``; raises :class:`UnsupportedLayerError` naming the layer."""
        rule = self._rules.get(type(module))
        if rule is None:
            known = ", ".join(sorted(t.__name__ for t in self._rules))
            raise UnsupportedLayerError(
                f"layer {name or '<root>'!r} ({type(module).__name__}) has trainable parameters "
                f"but no per-sample gradient rule; supported layers: {known}. Freeze it "
                "(requires_grad=False) or register a rule with LAYER_RULES.register"
            )
        return rule

    @property
    def types(self) -> tuple[type[nn.Module], ...]:
        """The layer types with a registered rule, in registration order."""
        return tuple(self._rules)


LAYER_RULES = LayerRules()


# The rules take ``module: Any``: each is registered for one layer type (nn.Linear, nn.Conv2d,
# ...) whose attributes it reads, which ``Rule``'s ``nn.Module`` parameter cannot express.


def _trainable(p: Any) -> TypeGuard[nn.Parameter]:
    return p is not None and p.requires_grad


@LAYER_RULES.register(nn.Linear)
def _linear(module: Any, x: torch.Tensor, dy: torch.Tensor) -> list[Form]:
    B = x.shape[0]
    A = x.reshape(B, -1, x.shape[-1])
    D = dy.reshape(B, -1, dy.shape[-1])
    return _gemm_forms(module, A, D)


def _gemm_forms(module: Any, A: torch.Tensor, D: torch.Tensor) -> list[Form]:
    weight, bias = module.weight, getattr(module, "bias", None)
    if _trainable(weight):
        return [GemmForm._unchecked(weight, A, D, bias if _trainable(bias) else None)]
    if _trainable(bias):
        return [SampleForm({bias: D.sum(1)})]
    return []


def _conv_padded_input(
    module: Any, x: torch.Tensor, nd: int
) -> tuple[torch.Tensor, tuple[int, ...]]:
    """The input as the convolution sees it, and the zero padding left for unfold to add."""
    zero = (0,) * nd
    if module.padding_mode != "zeros":
        return F.pad(x, module._reversed_padding_repeated_twice, mode=module.padding_mode), zero
    if isinstance(module.padding, str):  # "same" or "valid"
        if module.padding == "valid":
            return x, zero
        pads: list[int] = []
        for k, dil in zip(reversed(module.kernel_size), reversed(module.dilation), strict=True):
            total = dil * (k - 1)
            pads += [total // 2, total - total // 2]
        if all(pads[i] == pads[i + 1] for i in range(0, len(pads), 2)):
            return x, tuple(reversed(pads[::2]))
        return F.pad(x, pads), zero
    return x, tuple(module.padding[:nd])


def _conv_per_sample_weight_grads(f: ConvForm) -> torch.Tensor:
    B, C_in, H, W = f.x.shape
    C_out = f.dy.shape[1]
    shape = f.weight.shape
    # the weight of the B-fold grouped convolution: only its shape is read when just the
    # weight gradient is asked for (as torch.nn.grad.conv2d_weight does)
    weight = f.x.new_empty(1).expand(B * C_out, C_in // f.groups, *f.kernel)
    gw = torch.ops.aten.convolution_backward(
        f.dy.reshape(1, B * C_out, *f.dy.shape[2:]), f.x.reshape(1, B * C_in, H, W), weight,
        None, list(f.stride), list(f.padding), list(f.dilation), False, [0, 0],
        B * f.groups, [False, True, False],
    )[1]
    return gw.reshape(B, *shape)


def _conv_gemm_forms(f: ConvForm) -> list[Form]:
    B = f.x.shape[0]
    cols = _unfold(f.x, f.kernel, f.dilation, f.padding, f.stride)  # (B, L, C_in*k)
    L = cols.shape[1]
    c_out, groups = f.dy.shape[1], f.groups
    if f.positions != L:
        raise RuntimeError(f"conv unfold produced {L} positions, output has {f.dy.shape[2:]}")
    D_all = f.dy.reshape(B, c_out, L).transpose(1, 2).contiguous()  # (B, L, C_out)
    weight, bias = f.weight, f.bias
    per_in = cols.shape[2] // groups
    per_out = c_out // groups
    forms: list[Form] = []
    for g in range(groups):
        A = cols if groups == 1 else cols[:, :, g * per_in:(g + 1) * per_in]  # (B, L, d)
        D = D_all if groups == 1 else D_all[:, :, g * per_out:(g + 1) * per_out]  # (B, L, p)
        rows = slice(g * per_out, (g + 1) * per_out)
        own_bias = bias if groups == 1 and _trainable(bias) else None
        forms.append(GemmForm._unchecked(weight, A, D, own_bias, rows))
    if groups > 1 and _trainable(bias):
        forms.append(SampleForm({bias: D_all.sum(1)}))
    return forms


@LAYER_RULES.register(nn.Conv1d, nn.Conv2d)
def _conv(module: Any, x: torch.Tensor, dy: torch.Tensor) -> list[Form]:
    nd = 1 if isinstance(module, nn.Conv1d) else 2
    x, padding = _conv_padded_input(module, x, nd)
    if nd == 1:
        x, dy = x.unsqueeze(2), dy.unsqueeze(2)
        kernel, dilation, stride = (1, *module.kernel_size), (1, *module.dilation), (1, *module.stride)
        padding = (0, *padding)
    else:
        kernel, dilation, stride = module.kernel_size, module.dilation, module.stride
    weight, bias = module.weight, module.bias
    if not _trainable(weight):
        return [SampleForm({bias: dy.sum(tuple(range(2, dy.ndim)))})] if _trainable(bias) else []
    pad2 = cast("tuple[int, int]", tuple(padding))  # 2-D after the Conv1d lift above
    return [ConvForm(weight, bias if _trainable(bias) else None, x, dy, tuple(kernel),
                     tuple(dilation), pad2, tuple(stride), module.groups)]


def _unfold(
    x: torch.Tensor,
    kernel: tuple[int, ...],
    dilation: tuple[int, ...],
    padding: tuple[int, ...],
    stride: tuple[int, ...],
) -> torch.Tensor:
    """im2col as one strided copy: (B, C, H, W) -> (B, L, C * kh * kw), channel-major rows
    (the layout of ``weight.view(C_out, -1)``). Faster on CPU than ``F.unfold``."""
    if any(padding):
        x = F.pad(x, (padding[1], padding[1], padding[0], padding[0]))
    (kh, kw), (dh, dw), (sh, sw) = kernel, dilation, stride
    win = x.unfold(2, dh * (kh - 1) + 1, sh).unfold(3, dw * (kw - 1) + 1, sw)
    win = win[..., ::dh, ::dw]  # (B, C, Ho, Wo, kh, kw)
    B, C, Ho, Wo = win.shape[:4]
    return win.permute(0, 2, 3, 1, 4, 5).reshape(B, Ho * Wo, C * kh * kw)


@LAYER_RULES.register(nn.Embedding)
def _embedding(module: Any, ids: torch.Tensor, dy: torch.Tensor) -> list[Form]:
    if module.scale_grad_by_freq:
        raise UnsupportedLayerError(
            "nn.Embedding(scale_grad_by_freq=True) couples the samples of a batch; not supported"
        )
    if not _trainable(module.weight):
        return []
    B = ids.shape[0]
    ids = ids.reshape(B, -1)
    D = dy.reshape(B, ids.shape[1], dy.shape[-1])
    if module.padding_idx is not None:
        D = D * (ids != module.padding_idx).unsqueeze(-1).to(D.dtype)
    return [EmbeddingForm(module.weight, ids, D)]


def _affine_forms(
    module: Any, xhat: torch.Tensor, dy: torch.Tensor, reduce_dims: tuple[int, ...]
) -> list[Form]:
    grads: dict[nn.Parameter, torch.Tensor] = {}
    if _trainable(module.weight):
        grads[module.weight] = (xhat * dy).sum(reduce_dims) if reduce_dims else xhat * dy
    bias = getattr(module, "bias", None)
    if _trainable(bias):
        grads[bias] = dy.sum(reduce_dims) if reduce_dims else dy
    return [SampleForm(grads)] if grads else []


@LAYER_RULES.register(nn.LayerNorm)
def _layer_norm(module: Any, x: torch.Tensor, dy: torch.Tensor) -> list[Form]:
    if not module.elementwise_affine:
        return []
    shape = tuple(module.normalized_shape)
    xhat = F.layer_norm(x, shape, eps=module.eps)
    B = x.shape[0]
    xhat = xhat.reshape(B, -1, *shape)
    dy = dy.reshape(B, -1, *shape)
    return _affine_forms(module, xhat, dy, (1,))


@LAYER_RULES.register(nn.GroupNorm)
def _group_norm(module: Any, x: torch.Tensor, dy: torch.Tensor) -> list[Form]:
    if not module.affine:
        return []
    xhat = F.group_norm(x, module.num_groups, eps=module.eps)
    dims = tuple(range(2, x.ndim))
    return _affine_forms(module, xhat, dy, dims)


if hasattr(nn, "RMSNorm"):

    @LAYER_RULES.register(nn.RMSNorm)
    def _rms_norm(module: Any, x: torch.Tensor, dy: torch.Tensor) -> list[Form]:
        if not module.elementwise_affine:
            return []
        shape = tuple(module.normalized_shape)
        xhat = F.rms_norm(x, shape, eps=module.eps)
        B = x.shape[0]
        return _affine_forms(module, xhat.reshape(B, -1, *shape), dy.reshape(B, -1, *shape), (1,))
