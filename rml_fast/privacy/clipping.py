"""Per-sample gradient norms, coupled (difference) norms and fused clip-and-accumulate.

One forward pass records each supported layer's input; one ``torch.autograd.grad`` call
returns the per-sample losses' gradients with respect to the layer *outputs* (no weight
gradient is computed); then, per layer,

* per-sample norms come from ghost Grams ``sum((A_i A_i^T) * (D_i D_i^T))`` or from
  instantiated ``G_i = D_i^T A_i``, whichever is cheaper (``2 S^2 < p d`` -> ghost, the
  mixed-ghost rule of Bu et al., arXiv 2210.00038);
* the coupled norm ``||g_i(x) - g_i(x')||`` of DP-C4 from the two passes at ``x`` and
  ``x'`` on the same batch, in a form without catastrophic cancellation:
  ``G_i - G'_i = E_i^T A_i + D'_i^T F_i`` with ``E = D - D'``, ``F = A - A'``, so every
  Gram term is small when the difference is;
* the clipped sum ``sum_i w_i g_i (+ sum_i w'_i g_i(x')) + sigma z`` is written into
  ``.grad`` with one weighted GEMM per layer (book-keeping: no second backward), ``z`` from
  the Philox stream, identical on CPU and GPU for one seed.

Runtime state lives in a :class:`ClippingEngine`, never on the parameters.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import numbers
import warnings
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import torch
from torch import nn

from rml_fast._validation import Interval, check_scalar, check_tensor
from rml_fast.kernels import clip as kclip
from rml_fast.kernels.random import MAX_COUNTER
from rml_fast.privacy.grad_norms import (
    LAYER_RULES,
    ConvForm,
    EmbeddingForm,
    Form,
    GemmForm,
    LayerRules,
    SampleForm,
    UnsupportedLayerError,
)

__all__ = [
    "CapturedPass",
    "ClippingEngine",
    "NonFiniteGradientError",
    "UnsupportedLayerError",
    "clip_and_accumulate",
    "coupled_norms",
    "per_sample_grad_norms",
    "per_sample_losses",
]

MODES = ("auto", "ghost", "instantiate")
MEMORY_MODES = ("fast", "low")
# conv per-sample gradients (both modes) and, in the low-memory mode, im2col copies are
# formed for a chunk of samples of at most about _LOW_SCRATCH elements at a time; low-memory
# ghost Grams take _LOW_GRAM entries per chunk (each also copied to float64), and its noise
# is drawn _LOW_NOISE numbers at a time
_LOW_SCRATCH = 1 << 20
_LOW_GRAM = 1 << 16
_LOW_NOISE = 1 << 16


class NonFiniteGradientError(ValueError):
    """Per-sample losses or gradients that are not finite (NaN or inf).

    Raised before anything is written: no ``.grad`` is filled and, from
    :meth:`~rml_fast.privacy.dp_c4.DPC4Optimizer.step`, the parameters and the optimizer
    state are left as they were before the step.

    Attributes
    ----------
    step : int or None
        The optimizer step (0-based: the number of steps completed before it), or None
        outside an optimizer.
    samples : list of int
        Positions in the batch of the offending samples (at most 10).
    """

    def __init__(self, message: str, *, step: int | None = None,
                 samples: Sequence[int] = ()) -> None:
        super().__init__(message)
        self.step = step
        self.samples = list(samples)


@dataclass
class CapturedPass:
    """Activations and output gradients of one forward/backward pass over a batch.

    Attributes
    ----------
    batch_size : int
    forms : list of (layer name, list of Form)
        In the engine's layer order (the same for every pass of one engine).
    """

    batch_size: int
    forms: list[tuple[str, list[Form]]] = field(default_factory=list)
    params: list[nn.Parameter] = field(default_factory=list)
    # memory="low": the per-sample losses whose graph is kept for the second backward, the
    # squared norms (and coupled squared norms) found by the first one, and a context under
    # which the second backward must run (DP-C4 swaps x_{t-1} into the model)
    losses: torch.Tensor | None = None
    sq_norms: torch.Tensor | None = None
    diff_sq_norms: torch.Tensor | None = None
    context: Callable[[], contextlib.AbstractContextManager[Any]] | None = None
    # memory="low" with keep_graph=False: re-runs the forward pass (same batch, same
    # randomness) and returns the per-sample losses for the second backward
    rerun: Callable[[], torch.Tensor] | None = None


@dataclass
class _Record:
    module: nn.Module
    x: torch.Tensor
    out: weakref.ref[torch.Tensor]  # not kept alive: a plain backward frees most outputs
    version: int
    edge: Any  # torch.autograd.graph.GradientEdge of the output
    shape: torch.Size
    dtype: torch.dtype


class ClippingEngine:
    """Hooks a model to compute per-sample norms and clipped sums from one backward pass.

    Parameters
    ----------
    model : torch.nn.Module
        Every sub-module holding trainable parameters must be a supported layer (Linear,
        Conv1d, Conv2d, Embedding, LayerNorm, GroupNorm, RMSNorm, or a type registered in
        ``rules``); the batch is dimension 0 of each layer's input.
    mode : {"auto", "ghost", "instantiate"}, default="auto"
        How Linear/Conv weights get their per-sample norms: ghost Grams, instantiated
        per-sample gradients, or per layer whichever costs less (``2 S^2 < p d``).
    backend : {"auto", "native", "triton", "reference"}, default="auto"
        Kernel backend of :mod:`rml_fast.kernels.clip`.
    rules : LayerRules, default=LAYER_RULES
    memory : {"fast", "low"}, default="fast"
        ``"fast"`` (book-keeping): one backward w.r.t. the layer outputs keeps every
        layer's output gradient until all per-sample norms are known, then one row-scaled
        GEMM per layer writes the clipped sum (no second backward; more memory).
        ``"low"``: the first backward (graph kept) computes each layer's norm contribution
        in a hook on its output and drops the output gradient at once; :meth:`accumulate`
        then runs a second backward of ``sum_i w_i loss_i`` into ``.grad`` and adds the
        noise in bounded chunks. The same update as ``"fast"`` (to rounding), peak memory
        close to a non-private step, one more backward pass of time.

    Raises
    ------
    UnsupportedLayerError
        If a layer with trainable parameters has no rule (the message names it), or a
        parameter is shared by two layers.

    Examples
    --------
    >>> import torch
    >>> from rml_fast.privacy.clipping import ClippingEngine
    >>> model = torch.nn.Linear(3, 2)
    >>> x, y = torch.randn(4, 3), torch.randn(4, 2)
    >>> with ClippingEngine(model) as engine:
    ...     with engine.record():
    ...         losses = ((model(x) - y) ** 2).sum(1)
    ...     norms = engine.norms(engine.backward(losses))
    >>> norms.shape
    torch.Size([4])
    """

    def __init__(
        self,
        model: nn.Module,
        *,
        mode: str = "auto",
        backend: str = "auto",
        rules: LayerRules = LAYER_RULES,
        memory: str = "fast",
    ) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if memory not in MEMORY_MODES:
            raise ValueError(f"memory must be one of {MEMORY_MODES}, got {memory!r}")
        self.mode, self.backend, self.rules, self.memory = mode, backend, rules, memory
        self.layers: list[tuple[str, nn.Module]] = []
        self.params: list[nn.Parameter] = []
        owner: dict[int, str] = {}
        for name, module in model.named_modules():
            own = [p for p in module.parameters(recurse=False) if p.requires_grad]
            if not own:
                continue
            rules.lookup(module, name)
            for p in own:
                if id(p) in owner:
                    raise UnsupportedLayerError(
                        f"parameter shared by layers {owner[id(p)]!r} and {name!r} (tied weights) "
                        "is not supported by per-sample clipping"
                    )
                owner[id(p)] = name
                self.params.append(p)
            self.layers.append((name, module))
        if not self.params:
            raise ValueError("model has no trainable parameters")
        self._index = {id(m): i for i, (_, m) in enumerate(self.layers)}
        self._records: dict[int, _Record] = {}
        self._recording = False
        self._low: dict[str, Any] | None = None
        self._handles = [m.register_forward_hook(self._hook) for _, m in self.layers]

    # -- hooks ---------------------------------------------------------------------------

    def _hook(self, module: nn.Module, inputs: tuple[Any, ...], output: Any) -> None:
        if not self._recording or not torch.is_grad_enabled():
            return
        i = self._index[id(module)]
        if i in self._records:
            raise UnsupportedLayerError(
                f"layer {self.layers[i][0]!r} ran twice in one forward pass; per-sample "
                "clipping needs each layer to run once per pass"
            )
        if not isinstance(output, torch.Tensor):
            raise UnsupportedLayerError(f"layer {self.layers[i][0]!r} returned a non-tensor")
        if not output.requires_grad:
            return  # no gradient reaches this layer in this pass (its norm part is 0)
        from torch.autograd.graph import get_gradient_edge

        rec = _Record(module, inputs[0].detach(), weakref.ref(output), output._version,
                      get_gradient_edge(output), output.shape, output.dtype)
        self._records[i] = rec
        if self.memory == "low":
            # on the output's grad_fn, so it fires after the output itself is freed; it is
            # inert outside the first backward of a low-memory pass
            output.register_hook(self._low_hook(i))

    @contextlib.contextmanager
    def record(self) -> Iterator[ClippingEngine]:
        """Record layer inputs/outputs of the forward passes run inside this context."""
        self._records.clear()
        self._recording = True
        try:
            yield self
        finally:
            self._recording = False

    def close(self) -> None:
        """Remove the hooks (the engine is unusable afterwards)."""
        for h in self._handles:
            h.remove()
        self._handles = []
        self._records.clear()

    def __enter__(self) -> ClippingEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- passes --------------------------------------------------------------------------

    def backward(
        self,
        losses: torch.Tensor,
        *,
        reference: CapturedPass | None = None,
        store: bool = False,
        keep_graph: bool = True,
    ) -> CapturedPass:
        """Gradients of the per-sample ``losses`` (B,) w.r.t. the recorded layer outputs.

        No parameter gradient is written. The records are consumed.

        With ``memory="fast"`` the returned pass holds every layer's forms (activations and
        output gradients). With ``memory="low"`` the graph is kept for the second backward
        of :meth:`accumulate` and the pass holds the squared per-sample norms instead (each
        output gradient is dropped once its layer's norm part is added); ``reference``, a
        stored pass over the same batch at other parameters, adds the coupled squared norms
        ``||g_i - g_i(reference)||^2`` (its forms are dropped layer by layer);
        ``store=True`` keeps the forms as ``"fast"`` does (and the graph), for use as a
        ``reference``. ``keep_graph=False`` (low only) frees the graph in the first
        backward as a plain backward does -- the lowest peak -- and the caller sets
        ``rerun`` on the pass, a function re-running the forward pass for the second.
        """
        if not isinstance(losses, torch.Tensor) or losses.ndim != 1:
            raise ValueError(
                "losses must be a 1-D tensor of per-sample losses (use reduction='none'), got "
                f"{getattr(losses, 'shape', type(losses).__name__)}"
            )
        # values on a real device, a real floating dtype (finiteness: the check below)
        check_tensor(losses, "losses", ndim=1, finite=False)
        B = losses.shape[0]
        _check_finite_losses(losses, "losses")
        records = sorted(self._records.items())
        self._records = {}
        low = self.memory == "low"
        if B == 0:
            zero = torch.zeros(0, dtype=torch.float64, device=self.params[0].device)
            return CapturedPass(0, [], self.params, sq_norms=zero if low else None,
                                diff_sq_norms=zero if low and reference is not None else None)
        self._check_records(records, B)  # (no loop variable left holding a record)
        keep = low and keep_graph
        if low and not store:
            return self._backward_low(losses, records, reference, keep)
        edges = [rec.edge for _, rec in records]
        grads = (torch.autograd.grad(losses.sum(), edges, allow_unused=True, retain_graph=keep)
                 if edges else [])
        cp = CapturedPass(B, [], self.params, losses=losses if keep else None)
        for (i, rec), g in zip(records, grads, strict=True):
            dy = self._zero_grad(rec) if g is None else g.detach()
            cp.forms.append((self.layers[i][0], self.rules.lookup(rec.module)(rec.module, rec.x, dy)))
        return cp

    def _check_records(self, records: list[tuple[int, _Record]], B: int) -> None:
        for i, rec in records:
            self._check_record(i, rec, B)

    def _check_record(self, i: int, rec: _Record, B: int) -> None:
        out = rec.out()
        if out is not None and out._version != rec.version:
            raise UnsupportedLayerError(
                f"the output of layer {self.layers[i][0]!r} was modified in place "
                "(e.g. ReLU(inplace=True)); use out-of-place operations"
            )
        if rec.x.shape[0] != B:
            raise ValueError(
                f"layer {self.layers[i][0]!r} saw a batch of {rec.x.shape[0]} but losses "
                f"has {B} entries; the batch must be dimension 0"
            )

    @staticmethod
    def _zero_grad(rec: _Record) -> torch.Tensor:
        return torch.zeros(rec.shape, dtype=rec.dtype, device=rec.x.device)

    # -- low-memory mode -----------------------------------------------------------------

    def _low_hook(self, i: int) -> Callable[[torch.Tensor], None]:
        # The hook lives on the graph's node: it must not reference the record (whose
        # GradientEdge holds that node), or the cycle through C++ would keep the graph's
        # nodes and the recorded inputs alive after the second backward.
        engine = weakref.ref(self)

        def hook(grad: torch.Tensor) -> None:
            self_ = engine()
            state = None if self_ is None else self_._low
            if self_ is not None and state is not None and i in state["records"]:
                # popped: the layer's input is released as soon as its part is added
                self_._low_contribution(state, i, state["records"].pop(i), grad.detach())

        return hook

    def _low_contribution(self, state: dict[str, Any], i: int, rec: _Record,
                          dy: torch.Tensor) -> None:
        name = self.layers[i][0]
        forms = self.rules.lookup(rec.module)(rec.module, rec.x, dy)
        ref = state["reference"]
        if ref is None:
            for f in forms:
                state["sq"] += self._sq_norm(f)
            return
        forms2 = ref.pop(name, None)
        if forms2 is None or len(forms2) != len(forms):
            raise ValueError(f"the reference pass differs at layer {name!r}")
        for f, f2 in zip(forms, forms2, strict=True):
            sq, diff = self._sq_and_diff(f, f2)
            state["sq"] += sq
            state["diff"] += diff

    def _low_target(self, i: int, rec: _Record) -> Any:
        module = self.layers[i][1]
        small = min((p for p in module.parameters(recurse=False) if p.requires_grad),
                    key=lambda p: p.numel())
        return small if small.numel() <= rec.shape.numel() else rec.edge

    def _backward_low(self, losses: torch.Tensor, records: list[tuple[int, _Record]],
                      reference: CapturedPass | None, keep_graph: bool) -> CapturedPass:
        B = losses.shape[0]
        if reference is not None and reference.batch_size != B:
            raise ValueError("the two passes must be over the same batch")
        ref = None
        if reference is not None:
            ref = dict(reference.forms)
            reference.forms = []  # consumed layer by layer by the hooks
        sq, diff = self._zeros(B), self._zeros(B)
        # one gradient target per layer that makes autograd run the layer's backward node
        # (so the hook on its output fires) at the least cost: its smallest parameter
        # (e.g. a bias: a sum) or, where that is larger, the output gradient itself
        targets = [self._low_target(i, rec) for i, rec in records]
        state: dict[str, Any] = {"records": dict(records), "reference": ref, "sq": sq, "diff": diff}
        records.clear()  # the state owns the records: each is dropped once its layer is done
        self._low = state
        try:
            if targets:
                torch.autograd.grad(losses.sum(), targets, allow_unused=True,
                                    retain_graph=keep_graph)
            while state["records"]:  # layers no gradient reached
                i, rec = state["records"].popitem()
                self._low_contribution(state, i, rec, self._zero_grad(rec))
                del rec
        finally:
            self._low = None
        if ref:
            raise ValueError(f"the reference pass has layers {sorted(ref)} this pass has not")
        return CapturedPass(B, [], self.params, losses=losses if keep_graph else None, sq_norms=sq,
                            diff_sq_norms=diff if reference is not None else None)

    def _gemm_backend(self, A: torch.Tensor) -> str:
        # On CPU torch's BLAS (MKL/oneDNN) runs this GEMM faster than the SciPy BLAS the
        # native kernel calls (measured in benchmarks/bench_clip.py), so "auto" uses it
        # there; the noise is the same Philox stream either way.
        if self.backend == "auto" and A.device.type == "cpu":
            return "reference"
        return self.backend

    def _ghost_sq(self, A: torch.Tensor, D: torch.Tensor, A2: torch.Tensor | None = None,
                  D2: torch.Tensor | None = None) -> torch.Tensor:
        # On CPU, Grams from torch's batched GEMM beat the C++ float64 loops (transformer
        # block shapes: 3.4x at one thread, 1.7x at two; docs/privacy_training.md).
        if self.backend == "auto" and A.device.type == "cpu":
            if self.memory == "low":
                return kclip.ghost_norm_sq_blas(A, D, A2, D2, max_scratch=_LOW_GRAM)
            return kclip.ghost_norm_sq_blas(A, D, A2, D2)
        return kclip.ghost_norm_sq(A, D, A2, D2, backend=self.backend)

    def _ghost(self, A: torch.Tensor, D: torch.Tensor) -> bool:
        if self.mode != "auto":
            return self.mode == "ghost"
        S = A.shape[1]
        return A.shape[2] * D.shape[2] > 2 * S * S

    # -- norms ---------------------------------------------------------------------------

    def norms(self, cp: CapturedPass) -> torch.Tensor:
        """Per-sample gradient norms ``||g_i||`` over all parameters, shape (B,), float64."""
        if cp.sq_norms is not None:
            return cp.sq_norms.sqrt()
        total = self._zeros(cp.batch_size)
        for _, forms in cp.forms:
            for f in forms:
                total += self._sq_norm(f)
        return total.sqrt()

    def diff_norms(self, cp: CapturedPass, cp_prev: CapturedPass) -> torch.Tensor:
        """Coupled norms ``||g_i(x) - g_i(x')||`` from two passes on the same batch, (B,)."""
        if cp.batch_size != cp_prev.batch_size:
            raise ValueError("the two passes must be over the same batch")
        if cp.diff_sq_norms is not None:
            return cp.diff_sq_norms.clamp_min(0.0).sqrt()
        if cp.sq_norms is not None:
            raise ValueError("a low-memory pass has coupled norms only when its backward was "
                             "given the other pass as reference")
        total = self._zeros(cp.batch_size)
        for (name, forms), (name2, forms2) in zip(cp.forms, cp_prev.forms, strict=True):
            if name != name2 or len(forms) != len(forms2):
                raise ValueError(f"passes differ at layer {name!r}/{name2!r}")
            for f, f2 in zip(forms, forms2, strict=True):
                total += self._diff_sq_norm(f, f2)
        return total.clamp_min(0.0).sqrt()

    def norms_and_diff_norms(
        self, cp: CapturedPass, cp_prev: CapturedPass
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(norms(cp), diff_norms(cp, cp_prev))`` in one walk over the layers: a layer whose
        per-sample gradients are instantiated forms them once for both (and drops them)."""
        if cp.batch_size != cp_prev.batch_size:
            raise ValueError("the two passes must be over the same batch")
        if cp.sq_norms is not None:
            return self.norms(cp), self.diff_norms(cp, cp_prev)
        total, diff = self._zeros(cp.batch_size), self._zeros(cp.batch_size)
        for (name, forms), (name2, forms2) in zip(cp.forms, cp_prev.forms, strict=True):
            if name != name2 or len(forms) != len(forms2):
                raise ValueError(f"passes differ at layer {name!r}/{name2!r}")
            for f, f2 in zip(forms, forms2, strict=True):
                sq, d = self._sq_and_diff(f, f2)
                total += sq
                diff += d
        return total.sqrt(), diff.clamp_min(0.0).sqrt()

    def _sq_and_diff(self, f: Form, f2: Form) -> tuple[torch.Tensor, torch.Tensor]:
        """``(||G_i||^2, ||G_i - G2_i||^2)`` of one form pair (conv per-sample gradients
        formed once for both)."""
        if isinstance(f, ConvForm) and isinstance(f2, ConvForm) and not self._conv_ghost(f):
            # a chunk of samples at a time: bounded per-sample-gradient scratch
            return _cat_pairs(self._sq_and_diff_plain(a, b)
                              for a, b in zip(_conv_chunks(f), _conv_chunks(f2), strict=True))
        return self._sq_norm(f), self._diff_sq_norm(f, f2)

    def _sq_and_diff_plain(self, f: ConvForm, f2: ConvForm) -> tuple[torch.Tensor, torch.Tensor]:
        g, g2 = f.per_sample(), f2.per_sample()
        return self._sq_norm(g), self._diff_sq_norm(g, g2)

    def _zeros(self, batch_size: int) -> torch.Tensor:
        device = self.params[0].device
        return torch.zeros(batch_size, dtype=torch.float64, device=device)

    def _conv_ghost(self, f: ConvForm) -> bool:
        """Ghost norms (im2col + Grams) or per-sample gradients (batch-grouped conv)?

        ``auto``: ghost only where it is cheaper (``2 L^2 < p d``) *and* the per-sample
        gradients (``B p d`` per group) would outgrow the im2col buffer ghost norms need
        (``B L d``), i.e. ``p > L``; otherwise the grouped convolution, which needs no
        im2col and ran 2-7x faster than unfold + GEMM on the benchmark CNN's two larger
        layers (about even on its 3-channel input layer).
        """
        if self.mode != "auto":
            return self.mode == "ghost"
        L, d, p = f.positions, f.fan_in, f.fan_out
        return p > L and p * d > 2 * L * L

    def _sq_norm(self, f: Form) -> torch.Tensor:
        if isinstance(f, ConvForm):
            if f.x.shape[0] > 1 and (self.memory == "low" or not self._conv_ghost(f)):
                # bounded scratch: per-sample gradients (both modes) / im2col of a chunk of
                # samples (low; "fast" keeps the whole unfolded input for the accumulate)
                chunks = _conv_chunks(f)
                if len(chunks) > 1:
                    return torch.cat([self._sq_norm(c) for c in chunks])
            if self._conv_ghost(f):
                return _sum(self._sq_norm(g) for g in f.gemm_forms())
            return _sample_sq(f.per_sample().grads.values())
        if isinstance(f, GemmForm):
            if self._ghost(f.A, f.D):
                out = self._ghost_sq(f.A, f.D)
            else:
                out = torch.einsum("bsp,bsd->bpd", f.D, f.A).square().sum((1, 2)).double()
            if f.bias is not None:
                out = out + f.bias_per_sample.double().square().sum(1)
            return out
        if isinstance(f, EmbeddingForm):
            return _segment_sq_norms(f.ids, f.D, f.weight.shape[0])
        return _sample_sq(f.grads.values())

    def _diff_sq_norm(self, f: Form, f2: Form) -> torch.Tensor:
        if isinstance(f, ConvForm) and isinstance(f2, ConvForm):
            if f.x.shape[0] > 1 and (self.memory == "low" or not self._conv_ghost(f)):
                chunks = list(zip(_conv_chunks(f), _conv_chunks(f2), strict=True))
                if len(chunks) > 1:
                    return torch.cat([self._diff_sq_norm(a, b) for a, b in chunks])
            if self._conv_ghost(f):
                return _sum(self._diff_sq_norm(g, g2) for g, g2 in
                            zip(f.gemm_forms(), f2.gemm_forms(), strict=True))
            return self._diff_sq_norm(f.per_sample(), f2.per_sample())
        if isinstance(f, GemmForm) and isinstance(f2, GemmForm):
            E = f.D - f2.D
            if self._ghost(f.A, f.D):
                out = self._ghost_sq(f.A, E)
                if not (f.A is f2.A or torch.equal(f.A, f2.A)):
                    Fa = f.A - f2.A
                    out = out + self._ghost_sq(Fa, f2.D)
                    out = out + 2.0 * self._ghost_sq(f.A, E, Fa, f2.D)
            else:
                G = torch.einsum("bsp,bsd->bpd", f.D, f.A) - torch.einsum("bsp,bsd->bpd", f2.D, f2.A)
                out = G.square().sum((1, 2)).double()
            if f.bias is not None:
                out = out + (f.bias_per_sample - f2.bias_per_sample).double().square().sum(1)
            return out
        if isinstance(f, EmbeddingForm) and isinstance(f2, EmbeddingForm):
            ids = torch.cat([f.ids, f2.ids], 1)
            return _segment_sq_norms(ids, torch.cat([f.D, -f2.D], 1), f.weight.shape[0])
        if isinstance(f, SampleForm) and isinstance(f2, SampleForm):
            return _sample_sq(
                g - g2 for g, g2 in zip(f.grads.values(), f2.grads.values(), strict=True)
            )
        raise ValueError("the two passes have different layer forms")

    # -- clipped sums --------------------------------------------------------------------

    def accumulate(
        self,
        terms: Sequence[tuple[CapturedPass, torch.Tensor]],
        *,
        noise_std: float = 0.0,
        seed: int = 0,
        offset: int = 0,
        consume: bool = False,
    ) -> None:
        """Write ``sum_k sum_i w^k_i g_i(pass_k) + noise_std * z`` into every ``param.grad``.

        ``z`` is element ``offset + o_p + j`` of the Philox normal stream ``seed`` for
        element ``j`` of parameter ``p`` (``o_p`` = numel of the parameters before it), so
        the noise is reproducible from ``(seed, offset)``. Existing ``.grad`` is freed first
        and replaced.

        Parameters
        ----------
        terms : sequence of (CapturedPass, weights of shape (B,))
        noise_std : float, default=0.0
        seed, offset : int, default=0
        consume : bool, default=False
            Release each layer's stored activations and output gradients as soon as its sum
            is written (the passes are empty afterwards): the peak memory then falls as the
            gradients grow, as in a plain backward pass. With ``memory="low"`` the sums come
            from a second backward of ``sum_i w_i loss_i`` through each pass's kept graph,
            which ``consume=True`` frees (else the graph is kept for another call).
        """
        noise_std = float(check_scalar(noise_std, "noise_std", Interval("real", 0.0, None)))
        seed = int(check_scalar(seed, "seed", Interval("int", 0, MAX_COUNTER)))
        offset = int(check_scalar(offset, "offset", Interval("int", 0, MAX_COUNTER - self.numel)))
        offsets, o = [], offset
        for p in self.params:
            offsets.append(o)
            o += p.numel()
        for cp, w in terms:
            if w.shape != (cp.batch_size,):
                raise ValueError(f"weights must have shape ({cp.batch_size},), got {tuple(w.shape)}")
            if [p.shape for p in cp.params] != [p.shape for p in self.params]:
                raise ValueError("a pass comes from a model with different parameters")
            if self.memory == "low" and cp.batch_size and cp.losses is None and cp.rerun is None:
                raise ValueError("a pass of a low-memory engine has no kept graph (was it "
                                 "already consumed?) and no rerun function")
        for p in self.params:  # free the previous gradients before building the new ones
            p.grad = None
        if self.memory == "low":
            self._accumulate_low(terms, noise_std, seed, offsets, consume)
            return
        # unfused noise: each gradient starts as its noise (made when the parameter is first
        # reached) and the sums are added in place -- no gradient-sized temporaries
        prefill = noise_std > 0.0 and self._gemm_backend(self.params[0]) == "reference"
        grads = _Grads(self.params, noise_std if prefill else 0.0, seed, offsets)
        noised = grads.noised
        for cp, w in terms:
            pos = {id(p): k for k, p in enumerate(cp.params)}
            for j, (name, forms) in enumerate(cp.forms):
                for k in {pos[id(p)] for f in forms for p in f.params}:
                    grads.prepare(k)
                for f in forms:
                    self._accumulate_form(f, w, pos, grads, noised, noise_std, seed, offsets)
                if consume:
                    cp.forms[j] = (name, [])
        for k, p in enumerate(self.params):
            g = grads.get(k)
            if g is None:
                g = torch.zeros_like(p)
            g = g.to(p.dtype).view(p.shape)
            if noise_std > 0.0 and k not in noised:
                g.add_(_philox_normal(p.numel(), seed, offsets[k], p).view(p.shape), alpha=noise_std)
            p.grad = g

    def _accumulate_low(self, terms: Sequence[tuple[CapturedPass, torch.Tensor]],
                        noise_std: float, seed: int, offsets: list[int], consume: bool) -> None:
        for cp, w in terms:
            if cp.batch_size == 0:
                continue
            ctx = cp.context() if cp.context is not None else contextlib.nullcontext()
            with ctx:
                losses = cp.losses
                if losses is None:
                    with torch.enable_grad():
                        losses = cp.rerun()  # type: ignore[misc]
                    if losses.shape != (cp.batch_size,):
                        raise ValueError("rerun must return the per-sample losses of the batch")
                torch.autograd.backward(losses, w.to(losses.dtype), inputs=cp.params,
                                        retain_graph=not consume and cp.losses is not None)
                del losses
            if consume:
                cp.losses, cp.forms, cp.rerun = None, [], None
            if cp.params is not self.params:  # a shadow model's pass: move its sums over
                for p, q in zip(self.params, cp.params, strict=True):
                    if q.grad is not None:
                        p.grad = q.grad if p.grad is None else p.grad.add_(q.grad)
                        q.grad = None
        for k, p in enumerate(self.params):
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            elif not p.grad.is_contiguous():
                p.grad = p.grad.contiguous()
            if noise_std > 0.0:  # in bounded chunks of the Philox stream, in place
                flat = p.grad.view(-1)
                # (larger chunks on an accelerator: one kernel launch each)
                step = _LOW_NOISE if flat.device.type == "cpu" else 64 * _LOW_NOISE
                for a in range(0, flat.numel(), step):
                    b = min(a + step, flat.numel())
                    flat[a:b].add_(_philox_normal(b - a, seed, offsets[k] + a, p), alpha=noise_std)

    def _accumulate_form(
        self,
        f: Form,
        w: torch.Tensor,
        pos: dict[int, int],
        grads: dict[int, torch.Tensor],
        noised: set[int],
        std: float,
        seed: int,
        offsets: list[int],
    ) -> None:
        def add(p: nn.Parameter, value: torch.Tensor) -> None:
            k = pos[id(p)]
            if k in grads:
                grads[k] += value.view(grads[k].shape)
            else:
                grads[k] = value

        if isinstance(f, ConvForm):
            if self._conv_ghost(f):
                for gf in f.gemm_forms():
                    self._accumulate_form(gf, w, pos, grads, noised, std, seed, offsets)
                return
            add(f.weight, f.weighted_sum(w))
            if f.bias is not None:
                add(f.bias, w.to(f.dy.dtype) @ f.dy.sum((2, 3)))
            return
        if isinstance(f, GemmForm):
            B, S, d = f.A.shape
            p_rows = f.D.shape[2]
            wt = w.to(f.A.dtype)
            full = f.rows == slice(None)
            kw = pos[id(f.weight)]
            backend = self._gemm_backend(f.A)
            if backend == "reference" and kw in grads:
                # in place into the gradient: out += D^T diag(w) A (the reference kernel's
                # product, without its (p, d) result temporary)
                rows = wt.repeat_interleave(S)[:, None]
                A2, D2 = f.A.reshape(B * S, d), f.D.reshape(B * S, p_rows)
                left, right = (D2.T, A2 * rows) if d < p_rows else ((D2 * rows).T, A2)
                grads[kw].view(f.weight.shape[0], -1)[f.rows].addmm_(left, right)
                if f.bias is not None:
                    add(f.bias, wt @ f.bias_per_sample)
                return
            fuse = (std > 0.0 and full and kw not in grads and kw not in noised
                    and backend != "reference")
            g = kclip.scaled_outer_accumulate(
                f.A.reshape(B * S, d), f.D.reshape(B * S, p_rows), wt, S,
                noise_std=std if fuse else 0.0, seed=seed, offset=offsets[kw], backend=backend,
            )
            if fuse:
                noised.add(kw)
            if full:
                add(f.weight, g.reshape(f.weight.shape))
            else:
                if kw not in grads:
                    grads[kw] = torch.zeros_like(f.weight, dtype=f.A.dtype)
                grads[kw].view(f.weight.shape[0], -1)[f.rows] += g
            if f.bias is not None:
                add(f.bias, wt @ f.bias_per_sample)
        elif isinstance(f, EmbeddingForm):
            V, p = f.weight.shape
            rows = (f.D * w.to(f.D.dtype)[:, None, None]).reshape(-1, p)
            k = pos[id(f.weight)]
            if k not in grads:
                grads[k] = torch.zeros(V, p, dtype=f.D.dtype, device=f.D.device)
            grads[k].view(V, p).index_add_(0, f.ids.reshape(-1), rows)
        else:
            for param, gs in f.grads.items():
                k = pos[id(param)]
                flat = gs.reshape(gs.shape[0], -1)
                if k in grads:
                    grads[k].view(-1).addmv_(flat.T, w.to(gs.dtype))
                else:
                    grads[k] = (w.to(gs.dtype) @ flat).view(param.shape)

    @property
    def numel(self) -> int:
        """Total number of trainable parameters (the noise dimension)."""
        return sum(p.numel() for p in self.params)


class _Grads(dict):  # type: ignore[type-arg]
    """The gradients being built, keyed by parameter index; ``prepare(k)`` starts entry
    ``k`` as ``noise_std * z_k`` when the noise is not fused into a kernel."""

    def __init__(self, params: list[nn.Parameter], noise_std: float, seed: int,
                 offsets: list[int]) -> None:
        super().__init__()
        self.params, self.noise_std, self.seed, self.offsets = params, noise_std, seed, offsets
        self.noised: set[int] = set()

    def prepare(self, k: int) -> None:
        if self.noise_std > 0.0 and k not in self:
            p = self.params[k]
            g = _philox_normal(p.numel(), self.seed, self.offsets[k], p).view(p.shape)
            self[k] = g.mul_(self.noise_std)
            self.noised.add(k)


def _philox_normal(n: int, seed: int, offset: int, like: torch.Tensor) -> torch.Tensor:
    from rml_fast.kernels.random import normal

    device = "cpu" if like.device.type == "cpu" else like.device
    return normal(n, seed, offset, device=device).to(like.dtype)


def _conv_chunks(f: ConvForm) -> list[ConvForm]:
    """``f`` split along the batch so that a chunk's per-sample gradients and im2col copy
    hold at most about ``_LOW_SCRATCH`` elements each."""
    B = f.x.shape[0]
    per_sample = max(f.weight.numel(), f.positions * f.fan_in * f.groups)
    n = max(1, _LOW_SCRATCH // max(per_sample, 1))
    if n >= B:
        return [f]
    return [dataclasses.replace(f, x=f.x[a:a + n], dy=f.dy[a:a + n], _gemm=None)
            for a in range(0, B, n)]


def _cat_pairs(pairs: Any) -> tuple[torch.Tensor, torch.Tensor]:
    first, second = zip(*pairs, strict=True)
    return torch.cat(first), torch.cat(second)


def _sum(terms: Any) -> torch.Tensor:
    out: torch.Tensor | None = None
    for t in terms:
        out = t if out is None else out + t
    if out is None:
        raise ValueError("empty form")
    return out


def _sample_sq(grads: Any) -> torch.Tensor:
    out: torch.Tensor | None = None
    for g in grads:
        # a norm in the input precision (sums of positive squares: no cancellation), then
        # squared in float64 -- no float64 copy of the per-sample gradients
        s = torch.linalg.vector_norm(g.reshape(g.shape[0], -1), dim=1).double().square()
        out = s if out is None else out + s
    if out is None:
        raise ValueError("empty sample form")
    return out


def _segment_sq_norms(ids: torch.Tensor, D: torch.Tensor, vocab: int) -> torch.Tensor:
    """``sum_tok ||sum_{s: ids_is = tok} D_is||^2`` per sample, by sorting (B, S) ids."""
    B, S = ids.shape
    key = ids + vocab * torch.arange(B, device=ids.device)[:, None]
    uniq, inv = torch.unique(key.reshape(-1), return_inverse=True)
    sums = torch.zeros(uniq.shape[0], D.shape[-1], dtype=torch.float64, device=D.device)
    sums.index_add_(0, inv, D.reshape(B * S, -1).double())
    out = torch.zeros(B, dtype=torch.float64, device=D.device)
    return out.index_add_(0, uniq // vocab, sums.square().sum(1))


# --- the loss convention -----------------------------------------------------------------
#
# One convention for the loss callable across rml_fast.privacy (docs/privacy_training.md,
# "Conventions"): ``loss_fn(output, target)`` with ``output = model(inputs)``, the torch
# criterion signature, returning per-sample losses of shape (B,). A torch loss module
# (``nn.CrossEntropyLoss()`` with its default ``reduction="mean"``) is also accepted: it is
# called with ``reduction="none"`` (on a copy; the caller's module is not changed) and its
# per-element losses are reduced over all but the batch dimension the way its own reduction
# says, so that the batch mean of the per-sample losses is the module's usual value. The
# model and the batch ``(inputs, target)`` are passed separately.

LossFn = Callable[[Any, Any], torch.Tensor]
# the deprecated form: loss_fn(model) -> per-sample losses of a batch the callable closes over
ModelLossFn = Callable[[nn.Module], torch.Tensor]
_MODULE_REDUCTIONS = {"mean": "mean", "sum": "sum", "batchmean": "sum"}
_SHOWN = 10  # sample positions named in an error message


def forward(model: nn.Module, inputs: Any) -> Any:
    """``model(inputs)``; a tuple or list is unpacked (``model(*inputs)``), a dict passed as
    keyword arguments (``model(**inputs)``)."""
    if isinstance(inputs, dict):
        return model(**inputs)
    if isinstance(inputs, (tuple, list)):
        return model(*inputs)
    return model(inputs)


def per_sample_losses(loss_fn: Any, output: Any, target: Any) -> torch.Tensor:
    """``loss_fn(output, target)`` as per-sample losses of shape (B,).

    A torch loss module whose ``reduction`` is ``"mean"``, ``"sum"`` or ``"batchmean"`` is
    called on a copy set to ``reduction="none"``; its per-element losses are then averaged
    (``"mean"``) or summed (``"sum"``, ``"batchmean"``) over every dimension but the first.
    Any other callable must return the per-sample losses itself (``reduction="none"``).

    Raises
    ------
    TypeError
        If ``loss_fn`` does not return a tensor.
    ValueError
        If the losses do not have shape (B,) (the message says how to fix it), ``output`` or
        ``target`` is a tensor without values (``meta`` device), or ``loss_fn`` fails on them
        (its error, chained, behind the names of both).
    TypeError
        If ``output`` is a tensor of a non-floating dtype, or a torch loss module gets a
        non-tensor.

    Examples
    --------
    >>> import torch
    >>> out, y = torch.tensor([[2.0, 0.0], [0.0, 2.0]]), torch.tensor([0, 0])
    >>> per_sample_losses(torch.nn.CrossEntropyLoss(), out, y).round(decimals=4)
    tensor([0.1269, 2.1269])
    """
    return _per_sample_losses(loss_fn, output, target, "output", "target")


def _per_sample_losses(loss_fn: Any, output: Any, target: Any, output_name: str,
                       target_name: str) -> torch.Tensor:
    """:func:`per_sample_losses` with the caller's names of ``output`` and ``target``."""
    module = isinstance(loss_fn, nn.Module) and getattr(loss_fn, "reduction", None) in (
        _MODULE_REDUCTIONS)
    for name, value, floating in ((output_name, output, True), (target_name, target, False)):
        if isinstance(value, torch.Tensor):
            check_tensor(value, name, floating=floating, finite=False)
            if value.is_complex():
                raise TypeError(f"{name} must hold real numbers, got dtype {value.dtype}")
        elif module and not isinstance(value, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor for the torch loss module "
                            f"{type(loss_fn).__name__}, got {type(value).__name__}")
    try:
        if module:
            import copy

            reduction = loss_fn.reduction
            per_element: Any = copy.copy(loss_fn)  # shallow: own attribute dict, shared buffers
            per_element.reduction = "none"
            losses = per_element(output, target)
            if isinstance(losses, torch.Tensor) and losses.ndim > 1:
                dims = tuple(range(1, losses.ndim))
                losses = (losses.mean(dims) if _MODULE_REDUCTIONS[reduction] == "mean"
                          else losses.sum(dims))
        else:
            losses = loss_fn(output, target)
    except torch.OutOfMemoryError:
        raise
    except (ValueError, TypeError, RuntimeError, NotImplementedError, IndexError) as exc:
        if _ours(exc):
            raise
        raise _call_error(exc, f"loss_fn({output_name}, {target_name}) failed on {output_name} "
                               f"{_describe(output)} and {target_name} {_describe(target)}") from exc
    if not isinstance(losses, torch.Tensor):
        raise TypeError(f"loss_fn must return a torch.Tensor of per-sample losses, got "
                        f"{type(losses).__name__}")
    if losses.ndim != 1:
        raise ValueError(
            "loss_fn must return per-sample losses of shape (B,): use reduction='none' (or pass "
            "a torch loss module such as nn.CrossEntropyLoss()) and reduce any other "
            f"dimensions yourself; got shape {tuple(losses.shape)}"
        )
    return losses


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"(a {value.dtype} tensor of shape {tuple(value.shape)})"
    return f"(a {type(value).__name__})"


def _ours(exc: BaseException) -> bool:
    """An error of this package (raised by its hooks or checks): passed on unchanged."""
    return type(exc).__module__.startswith("rml_fast")


def _call_error(exc: BaseException, what: str) -> Exception:
    """A user callable's failure on the user's arguments, as a ValueError/TypeError naming them
    (a dtype problem -- TypeError, NotImplementedError -- as TypeError)."""
    kind = TypeError if isinstance(exc, (TypeError, NotImplementedError)) else ValueError
    return kind(f"{what}: {type(exc).__name__}: {exc}")


def _bad_samples(bad: torch.Tensor) -> list[int]:
    return bad.nonzero().flatten()[:_SHOWN].tolist()


def all_finite(t: torch.Tensor) -> bool:
    """Whether every entry of ``t`` is finite. A NaN or inf makes the sum non-finite, so the
    sum (one fast reduction) decides unless it overflowed; only then are the entries tested
    one by one (``torch.isfinite(t).all()`` is many times slower on large tensors)."""
    if not (t.is_floating_point() or t.is_complex()) or t.numel() == 0:
        return True
    if bool(torch.isfinite(t.sum())):
        return True
    return bool(torch.isfinite(t).all())


_UNCHANGED = "nothing was changed"


def _check_finite_losses(losses: torch.Tensor, name: str, where: str = "",
                         step: int | None = None, after: str = _UNCHANGED) -> None:
    """Raise :class:`NonFiniteGradientError` naming ``name`` if a loss is NaN or inf."""
    if not all_finite(losses.detach()):
        bad = ~torch.isfinite(losses.detach())
        if bool(bad.any()):
            samples = _bad_samples(bad)
            raise NonFiniteGradientError(
                f"{where}{name} gave non-finite losses (NaN or inf) for samples {samples} of "
                f"the batch ({int(bad.sum())} of {losses.shape[0]}); check the data and the loss "
                f"(e.g. log(0)); {after}",
                step=step, samples=samples,
            )


def _check_finite_norms(norms: torch.Tensor, what: str, where: str = "",
                        step: int | None = None, after: str = _UNCHANGED) -> None:
    bad = ~torch.isfinite(norms)
    if bool(bad.any()):
        samples = _bad_samples(bad)
        raise NonFiniteGradientError(
            f"{where}the per-sample {what} of samples {samples} of the batch are not finite "
            f"(NaN or inf: e.g. an overflow or a 0/0 in the backward pass) although their losses "
            f"are; {after}",
            step=step, samples=samples,
        )


def check_finite_batch(value: Any, name: str, where: str = "", of: str = "the batch",
                       after: str = _UNCHANGED) -> None:
    """Raise ``ValueError`` naming ``name`` (and the sample positions) if a floating-point
    tensor in ``value`` (a tensor, or a tuple/list/dict of them) holds NaN or inf."""
    if isinstance(value, dict):
        items = [(f"{name}[{k!r}]", v) for k, v in value.items()]
    elif isinstance(value, (tuple, list)):
        items = [(f"{name}[{k}]", v) for k, v in enumerate(value)]
    else:
        items = [(name, value)]
    for label, t in items:
        if isinstance(t, torch.Tensor) and t.device.type == "meta":
            raise ValueError(f"{where}{label} must hold values, got a tensor on the 'meta' device; "
                             f"{after}")
        if not isinstance(t, torch.Tensor) or not (t.is_floating_point() or t.is_complex()):
            continue
        if all_finite(t):
            continue
        finite = torch.isfinite(t)
        if t.ndim == 0:
            raise ValueError(f"{where}{label} is not finite (NaN or inf); {after}")
        bad = ~finite.reshape(t.shape[0], -1).all(1)
        samples = _bad_samples(bad)
        raise ValueError(
            f"{where}{label} has non-finite values (NaN or inf) in samples {samples} of "
            f"{of} ({int(bad.sum())} of {t.shape[0]}); remove or impute them; {after}"
        )


def _deprecated(message: str) -> None:
    """A ``FutureWarning`` attributed to the first caller outside torch and this package."""
    import os
    import sys

    skip = (os.path.dirname(torch.__file__), os.path.dirname(__file__))
    frame: Any = sys._getframe(1)  # a FrameType, then None past the outermost frame
    level = 1
    while frame is not None and frame.f_code.co_filename.startswith(skip):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, FutureWarning, stacklevel=level + 1)


def _required_positional(fn: Callable[..., Any]) -> int | None:
    """Number of required positional parameters of ``fn`` (None if it cannot be told)."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    return sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
               for p in sig.parameters.values())


def _loss_of(func: str, loss_fn: Any, inputs: Any, target: Any, usage: str, *,
             where: str = "", step: int | None = None,
             after: str = _UNCHANGED) -> Callable[[nn.Module], torch.Tensor]:
    """``model -> per-sample losses`` for the convention ``loss_fn(model(inputs), target)``
    (inputs and target checked finite here), or -- with a ``FutureWarning`` -- for the
    deprecated ``loss_fn(model)`` when no ``inputs`` are given."""
    if not callable(loss_fn):
        raise TypeError(f"loss_fn must be callable, got {type(loss_fn).__name__}")
    if inputs is None:
        if target is not None:
            raise TypeError(f"{func}: target was given without inputs; call {usage}")
        if isinstance(loss_fn, nn.modules.loss._Loss) or _required_positional(loss_fn) == 2:
            raise TypeError(f"{func}: inputs is required; call {usage}")
        _deprecated(
            f"{func}(model, loss_fn) with loss_fn(model) -> losses is deprecated; pass the batch "
            f"instead: {usage}, where loss_fn(output, target) returns per-sample losses "
            "(e.g. nn.CrossEntropyLoss())"
        )

        def old(model: nn.Module) -> torch.Tensor:
            losses = loss_fn(model)
            if not isinstance(losses, torch.Tensor) or losses.ndim != 1:
                raise ValueError(
                    "loss_fn must return per-sample losses of shape (B,) (use "
                    "reduction='none'), got "
                    f"{getattr(losses, 'shape', type(losses).__name__)}"
                )
            _check_finite_losses(losses, "loss_fn")
            return losses

        return old
    check_finite_batch(inputs, "inputs", where, after=after)
    check_finite_batch(target, "target", where, after=after)

    def new(model: nn.Module) -> torch.Tensor:
        try:
            output = forward(model, inputs)
        except torch.OutOfMemoryError:
            raise
        except (ValueError, TypeError, RuntimeError, NotImplementedError, IndexError) as exc:
            if _ours(exc):  # e.g. UnsupportedLayerError from the recording hooks
                raise
            raise _call_error(exc, f"{where}the model failed on inputs {_describe(inputs)}; "
                                   f"{after}") from exc
        losses = _per_sample_losses(loss_fn, output, target, "model(inputs)", "target")
        _check_finite_losses(losses, "loss_fn", where, step, after)
        return losses

    return new


def _one_pass(engine: ClippingEngine, model: nn.Module, loss: Callable[[nn.Module], torch.Tensor],
              **backward: Any) -> CapturedPass:
    with engine.record():
        losses = loss(model)
    return engine.backward(losses, **backward)


def per_sample_grad_norms(model: nn.Module, loss_fn: LossFn | ModelLossFn, inputs: Any = None,
                          target: Any = None, *, mode: str = "auto",
                          memory: str = "fast") -> torch.Tensor:
    """Per-sample gradient norms ``||grad_theta l_i(theta)||`` without per-sample gradients.

    Parameters
    ----------
    model : torch.nn.Module
    loss_fn : callable
        ``loss_fn(output, target) -> losses`` of shape (B,) with ``output = model(inputs)``:
        per-sample losses (``reduction="none"``), or a torch loss module such as
        ``nn.CrossEntropyLoss()`` (see :func:`per_sample_losses`). Deprecated: without
        ``inputs``, ``loss_fn(model) -> losses`` (a ``FutureWarning``).
    inputs : tensor, tuple, list or dict
        The batch (dimension 0), passed to the model as in :func:`forward`.
    target : any, optional
        Passed to ``loss_fn`` as is.
    mode : {"auto", "ghost", "instantiate"}, default="auto"
    memory : {"fast", "low"}, default="fast"
        ``"low"``: each layer's norm part is formed in a hook during the backward pass and
        its output gradient dropped at once, the graph freed as a plain backward frees it.

    Returns
    -------
    norms : torch.Tensor of shape (B,), float64

    Raises
    ------
    ValueError
        If ``inputs`` or ``target`` hold NaN or inf (naming the samples), or the losses do
        not have shape (B,).
    NonFiniteGradientError
        If a per-sample loss or gradient norm is NaN or inf.

    Examples
    --------
    >>> import torch
    >>> from rml_fast.privacy.clipping import per_sample_grad_norms
    >>> model, x, y = torch.nn.Linear(3, 2), torch.randn(5, 3), torch.tensor([0, 1, 1, 0, 1])
    >>> per_sample_grad_norms(model, torch.nn.CrossEntropyLoss(), x, y).shape
    torch.Size([5])
    """
    loss = _loss_of("per_sample_grad_norms", loss_fn, inputs, target,
                    "per_sample_grad_norms(model, loss_fn, inputs, target)")
    with ClippingEngine(model, mode=mode, memory=memory) as engine:
        if memory == "low":
            norms = engine.norms(_one_pass(engine, model, loss, keep_graph=False))
        else:
            norms = engine.norms(_one_pass(engine, model, loss))
    _check_finite_norms(norms, "gradient norms")
    return norms


def coupled_norms(
    model: nn.Module, model_prev: nn.Module, loss_fn: LossFn | ModelLossFn, inputs: Any = None,
    target: Any = None, *, mode: str = "auto"
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(||g_i(x_t)||, ||g_i(x_t) - g_i(x_{t-1})||)`` for one batch, each (B,) float64.

    ``model`` holds ``x_t`` and ``model_prev`` (same architecture) ``x_{t-1}``; the losses
    are ``loss_fn(model(inputs), target)`` and ``loss_fn(model_prev(inputs), target)``, per
    sample (as in :func:`per_sample_grad_norms`; ``loss_fn(model)`` without ``inputs`` is
    deprecated).
    """
    loss = _loss_of("coupled_norms", loss_fn, inputs, target,
                    "coupled_norms(model, model_prev, loss_fn, inputs, target)")
    with ClippingEngine(model, mode=mode) as eng, ClippingEngine(model_prev, mode=mode) as eng2:
        cp = _one_pass(eng, model, loss)
        cp2 = _one_pass(eng2, model_prev, loss)
        norms, diffs = eng.norms(cp), eng.diff_norms(cp, cp2)
    _check_finite_norms(norms, "gradient norms")
    _check_finite_norms(diffs, "gradient differences")
    return norms, diffs


def clip_and_accumulate(
    model: nn.Module,
    loss_fn: LossFn | ModelLossFn,
    inputs: Any = None,
    target: Any = None,
    *,
    max_norm: float | None = None,
    noise_std: float = 0.0,
    seed: int = 0,
    mode: str = "auto",
    memory: str = "fast",
) -> torch.Tensor:
    """Write ``sum_i clip(g_i, C) + noise_std * z`` into ``.grad``; returns the norms (B,).

    ``g_i`` is the gradient of ``loss_fn(model(inputs), target)[i]`` (per-sample losses, as
    in :func:`per_sample_grad_norms`); ``clip(v, C) = v * min(1, C / ||v||)`` with
    ``C = max_norm``; ``z`` is the Philox normal stream ``seed``. ``memory="low"``: norms in
    backward hooks, the sum from a second backward (see :class:`ClippingEngine`); the same
    result, less memory. Deprecated (``FutureWarning``): ``clip_and_accumulate(model,
    loss_fn, max_norm)`` with ``loss_fn(model) -> losses``.

    Raises
    ------
    ValueError
        On a bad ``max_norm``/``noise_std``, non-finite ``inputs``/``target``, or losses not
        of shape (B,); before anything is written.
    NonFiniteGradientError
        If a per-sample loss or gradient norm is NaN or inf; no ``.grad`` is written.
    """
    if max_norm is None and target is None and (
        isinstance(inputs, numbers.Real) and not isinstance(inputs, bool)
    ):  # the deprecated positional form clip_and_accumulate(model, loss_fn, max_norm)
        max_norm, inputs = cast(float, inputs), None
    if max_norm is None:
        raise TypeError("clip_and_accumulate needs max_norm: "
                        "clip_and_accumulate(model, loss_fn, inputs, target, max_norm=C)")
    max_norm = float(check_scalar(max_norm, "max_norm", Interval("real", 0.0, None, "neither")))
    noise_std = float(check_scalar(noise_std, "noise_std", Interval("real", 0.0, None)))
    loss = _loss_of("clip_and_accumulate", loss_fn, inputs, target,
                    "clip_and_accumulate(model, loss_fn, inputs, target, max_norm=C)")
    with ClippingEngine(model, mode=mode, memory=memory) as engine:
        cp = _one_pass(engine, model, loss)
        norms = engine.norms(cp)
        _check_finite_norms(norms, "gradient norms", after="no .grad was written")
        w = clip_factors(norms, max_norm)
        engine.accumulate([(cp, w)], noise_std=noise_std, seed=seed, consume=True)
        return norms


def clip_factors(norms: torch.Tensor, max_norm: float) -> torch.Tensor:
    """``min(1, C / ||g_i||)`` (1 where the norm is 0)."""
    return (max_norm / norms.clamp_min(1e-300)).clamp(max=1.0)
