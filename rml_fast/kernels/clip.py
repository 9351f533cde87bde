"""Per-sample clipping kernels: ghost norms (Gram-Hadamard reductions) and the scaled accumulate.

A layer that acts linearly on positions (Linear on sequences, Conv via unfold) has, for
sample ``i``, input rows ``A_i`` of shape (S, d) and output-gradient rows ``D_i`` of shape
(S, p); its per-sample weight gradient is ``G_i = D_i^T A_i`` of shape (p, d). The kernels
here work on those rows without ever forming the ``B`` matrices ``G_i``:

* :func:`ghost_norm_sq` -- ``||G_i||_F^2 = sum((A_i A_i^T) * (D_i D_i^T))`` and the cross
  term ``<G_i, G2_i>_F = sum((A_i A2_i^T) * (D_i D2_i^T))`` (Li et al., arXiv 2110.05679;
  Bu et al., arXiv 2210.00038), Hadamard sums in float64.
* :func:`scaled_outer_accumulate` -- ``out = sum_i w_i G_i = D^T diag(w[row // S]) A`` (one
  GEMM with the per-sample weights fused into the rows), optionally plus
  ``noise_std * z`` with ``z`` the Philox normal stream ``normal(p * d, seed, offset)``
  laid out row-major (so the noise is the same on every backend).

Backends: ``"native"`` (C++, CPU tensors or NumPy arrays, OpenMP over samples; the GEMM
calls the BLAS that SciPy ships through its Cython capsule, so the extension links
neither torch nor a BLAS), ``"triton"`` (CUDA tensors, or CPU tensors under
``TRITON_INTERPRET=1``) and ``"reference"`` (torch, any device).
"""

from __future__ import annotations

from typing import Any

import torch

from rml_fast._validation import Interval, check_scalar
from rml_fast.kernels._dispatch import Device, Kernel, device_of
from rml_fast.kernels._torch_ops import define_op
from rml_fast.kernels.random import MAX_COUNTER

__all__ = [
    "ghost_norm_sq",
    "ghost_norm_sq_blas",
    "ghost_norm_sq_reference",
    "scaled_outer_accumulate",
    "scaled_outer_accumulate_reference",
]

_ghost = Kernel("clip.ghost_norm_sq")
# Rows per sample from which the native ghost kernel forms Grams with the BLAS. Below it the
# OpenMP float64 loops were as fast and far steadier here (SciPy's OpenBLAS threads contend
# with torch's on a loaded 2-core machine: 16 ms to 2.9 s for one B=16, S=128 call).
_GHOST_BLAS_MIN_ROWS = 256
_accumulate = Kernel("clip.scaled_outer_accumulate")
_FLOATS = (torch.float32, torch.float64)


def _check_tensor(x: Any, name: str, ndim: int) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.device.type == "meta":
        raise ValueError(f"{name} must hold values, got a tensor on the 'meta' device")
    if x.dtype not in _FLOATS:
        raise TypeError(f"{name} must be float32 or float64, got {x.dtype}")
    if x.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {tuple(x.shape)}")
    return x


def _check_ghost_args(A: Any, D: Any, A2: Any, D2: Any) -> tuple[Any, Any, Any, Any]:
    """The input checks of the ghost-norm functions (tensors with values, dtypes, shapes)."""
    A = _check_tensor(A, "A", 3)
    D = _check_tensor(D, "D", 3)
    if (A2 is None) != (D2 is None):
        raise ValueError("A2 and D2 must be given together")
    if D.dtype != A.dtype or D.shape[:2] != A.shape[:2]:
        raise ValueError(
            f"D must have A's dtype and leading shape (B, S)={tuple(A.shape[:2])}, "
            f"got {D.dtype} {tuple(D.shape)}"
        )
    if D.device != A.device:
        raise ValueError(f"A and D must be on the same device, got {A.device} and {D.device}")
    if A2 is not None and D2 is not None:
        A2 = _check_tensor(A2, "A2", 3)
        D2 = _check_tensor(D2, "D2", 3)
        if A2.dtype != A.dtype or A2.shape[0] != A.shape[0] or A2.shape[2] != A.shape[2]:
            raise ValueError(
                f"A2 must be of shape (B, S2, {A.shape[2]}) with A's dtype and batch size, "
                f"got {A2.dtype} {tuple(A2.shape)}"
            )
        if D2.dtype != A.dtype or D2.shape[:2] != A2.shape[:2] or D2.shape[2] != D.shape[2]:
            raise ValueError(
                f"D2 must be of shape {tuple(A2.shape[:2])} + ({D.shape[2]},) with A's dtype "
                f"(from A2 and D), got {D2.dtype} {tuple(D2.shape)}"
            )
        if A2.device != A.device or D2.device != A.device:
            raise ValueError("A2 and D2 must be on A's device")
    return A, D, A2, D2


def _device(x: torch.Tensor) -> Device:
    return device_of(x)


# --- ghost norms -------------------------------------------------------------------------


def ghost_norm_sq(
    A: torch.Tensor,
    D: torch.Tensor,
    A2: torch.Tensor | None = None,
    D2: torch.Tensor | None = None,
    *,
    backend: str = "auto",
) -> torch.Tensor:
    r"""Per-sample squared Frobenius norms (or inner products) of ``G_i = D_i^T A_i``.

    .. math::

        n_i = \sum_{s, s'} (a_{is} \cdot a2_{is'}) (\delta_{is} \cdot \delta2_{is'})
            = \langle D_i^T A_i, D2_i^T A2_i \rangle_F ,

    with ``A2 = A``, ``D2 = D`` when omitted (then ``n_i = ||G_i||_F^2``). Cost
    ``O(S^2 (d + p))`` per sample, no ``p x d`` matrix is formed.

    Parameters
    ----------
    A : torch.Tensor of shape (B, S, d), float32 or float64
        Layer inputs per sample and position.
    D : torch.Tensor of shape (B, S, p), same dtype
        Gradients of the per-sample losses with respect to the layer outputs.
    A2, D2 : torch.Tensor of shapes (B, S2, d) and (B, S2, p), optional
        The second factor of the inner product; both or neither.
    backend : {"auto", "native", "triton", "reference"}, default="auto"

    Returns
    -------
    out : torch.Tensor of shape (B,), float64
        Native: for ``S >= 256`` each sample's Grams come from the BLAS in the input
        precision (O(S^2) scratch, one sample at a time) and are Hadamard-summed in
        float64; below, float64 dot products. Reference: float64 throughout. Triton:
        float32 tiles (then cast).

    Raises
    ------
    TypeError, ValueError
        On non-tensors, other dtypes, or inconsistent shapes.

    References
    ----------
    Li, Tramer, Liang, Hashimoto, arXiv 2110.05679 (ghost clipping); Bu, Mao, Xu,
    arXiv 2210.00038 (book-keeping, mixed ghost).

    Examples
    --------
    >>> import torch
    >>> from rml_fast.kernels.clip import ghost_norm_sq
    >>> A, D = torch.randn(3, 5, 4, dtype=torch.float64), torch.randn(3, 5, 2, dtype=torch.float64)
    >>> G = torch.einsum("bsp,bsd->bpd", D, A)
    >>> bool(torch.allclose(ghost_norm_sq(A, D), G.square().sum((1, 2))))
    True
    """
    A, D, A2, D2 = _check_ghost_args(A, D, A2, D2)
    return _ghost(A, D, A2, D2, device=_device(A), backend=backend)


def ghost_norm_sq_reference(
    A: torch.Tensor,
    D: torch.Tensor,
    A2: torch.Tensor | None = None,
    D2: torch.Tensor | None = None,
) -> torch.Tensor:
    """Torch twin of :func:`ghost_norm_sq` (float64 Grams); returns shape (B,), float64.

    Same input checks as :func:`ghost_norm_sq`.
    """
    A, D, A2, D2 = _check_ghost_args(A, D, A2, D2)
    A, D = A.double(), D.double()
    A2 = A if A2 is None else A2.double()
    D2 = D if D2 is None else D2.double()
    if A.shape[1] == 1 and A2.shape[1] == 1:
        return (A[:, 0] * A2[:, 0]).sum(1) * (D[:, 0] * D2[:, 0]).sum(1)
    ga = torch.bmm(A, A2.transpose(1, 2))
    gd = torch.bmm(D, D2.transpose(1, 2))
    return (ga * gd).sum((1, 2))


def ghost_norm_sq_blas(
    A: torch.Tensor,
    D: torch.Tensor,
    A2: torch.Tensor | None = None,
    D2: torch.Tensor | None = None,
    *,
    max_scratch: int = 1 << 20,
) -> torch.Tensor:
    """:func:`ghost_norm_sq` with the Grams from torch's batched GEMM (any device).

    ``A_i A2_i^T`` and ``D_i D2_i^T`` come from ``torch.bmm`` in the input precision, for a
    chunk of samples at a time (at most ``max_scratch`` Gram entries each, so the scratch
    stays ``O(max_scratch)`` whatever ``B``), and are Hadamard-summed in float64. On a CPU
    this runs at the BLAS's speed (MKL/oneDNN in torch builds): 1.7-3.4x faster than the
    native float64 dot-product loops on transformer-block shapes (S = 128); float32 Grams
    carry float32 rounding (4e-8 relative there), float64 inputs are exact to float64.

    Parameters and return as :func:`ghost_norm_sq`; ``max_scratch`` : int, default=2**20.

    Examples
    --------
    >>> import torch
    >>> from rml_fast.kernels.clip import ghost_norm_sq_blas, ghost_norm_sq_reference
    >>> A, D = torch.randn(3, 5, 4, dtype=torch.float64), torch.randn(3, 5, 2, dtype=torch.float64)
    >>> bool(torch.allclose(ghost_norm_sq_blas(A, D), ghost_norm_sq_reference(A, D)))
    True
    """
    A, D, A2, D2 = _check_ghost_args(A, D, A2, D2)
    A2 = A if A2 is None else A2
    D2 = D if D2 is None else D2
    max_scratch = int(check_scalar(max_scratch, "max_scratch", Interval("int", 1, None)))
    B, S, S2 = A.shape[0], A.shape[1], A2.shape[1]
    out = torch.empty(B, dtype=torch.float64, device=A.device)
    if S == 1 and S2 == 1:
        return (_dot_rows(A[:, 0], None if A2 is A else A2[:, 0])
                * _dot_rows(D[:, 0], None if D2 is D else D2[:, 0]))
    step = max(1, max_scratch // max(1, S * S2))
    for lo in range(0, B, step):
        hi = min(B, lo + step)
        ga = torch.bmm(A[lo:hi], A2[lo:hi].transpose(1, 2))
        gd = torch.bmm(D[lo:hi], D2[lo:hi].transpose(1, 2))
        if ga.dtype == torch.float64:
            out[lo:hi] = (ga * gd).sum((1, 2))
        else:
            out[lo:hi] = (ga.double() * gd.double()).sum((1, 2))
    return out


def _dot_rows(x: torch.Tensor, y: torch.Tensor | None) -> torch.Tensor:
    """Row-wise dot products as float64 (``y=None``: squared norms, in the input precision
    -- sums of positive terms -- then squared in float64)."""
    if y is None:
        return torch.linalg.vector_norm(x, dim=1).double().square()
    return torch.linalg.vecdot(x.double(), y.double())


@_ghost.register("reference")
def _ghost_ref(A: Any, D: Any, A2: Any, D2: Any, *, device: Device) -> torch.Tensor:
    return ghost_norm_sq_reference(A, D, A2, D2)


def _ghost_native_raw(A: Any, D: Any, A2: Any, D2: Any) -> torch.Tensor:
    from rml_fast._native import _C

    A, D = A.detach().contiguous(), D.detach().contiguous()
    out = torch.empty(A.shape[0], dtype=torch.float64)
    if A2 is None:
        gemm = _blas_gemm(A.dtype) if A.shape[1] >= _GHOST_BLAS_MIN_ROWS else 0
        _C.clip.ghost_norm_sq(A.numpy(), D.numpy(), out.numpy(), gemm)
    else:
        A2, D2 = A2.detach().contiguous(), D2.detach().contiguous()
        rows = min(A.shape[1], A2.shape[1])
        gemm = _blas_gemm(A.dtype) if rows >= _GHOST_BLAS_MIN_ROWS else 0
        _C.clip.ghost_cross(A.numpy(), D.numpy(), A2.numpy(), D2.numpy(), out.numpy(), gemm)
    return out


def _ghost_triton_raw(A: Any, D: Any, A2: Any, D2: Any) -> torch.Tensor:
    from rml_fast.kernels.triton import clip as triton_clip

    return triton_clip.ghost_norm_sq(A, D, A2, D2)


# ``rml_fast::ghost_norm_sq``: a torch custom operator (fake implementation and autograd), so
# that torch.compile / torch.export capture the kernel as one node.
def _ghost_impl(A: torch.Tensor, D: torch.Tensor, A2: torch.Tensor | None, D2: torch.Tensor | None,
              impl: str) -> torch.Tensor:
    """Per-sample ``<D_i^T A_i, D2_i^T A2_i>_F`` (B,), float64."""
    raw = _ghost_native_raw if impl == "native" else _ghost_triton_raw
    return raw(A, D, A2, D2)


def _ghost_fake(A, D, A2, D2, impl):
    return A.new_empty(A.shape[0], dtype=torch.float64)


def _ghost_setup(ctx, inputs, output):
    A, D, A2, D2, _impl = inputs
    ctx.cross = A2 is not None
    ctx.save_for_backward(A, D, A2, D2)


def _ghost_backward(ctx, g):
    """n_i = <G_i, H_i>, G_i = D_i^T A_i, H_i = D2_i^T A2_i: dn/dA_i = D_i H_i, dn/dD_i = A_i H_i^T
    (and symmetrically for A2, D2); without a second factor H = G and the gradients double."""
    A, D, A2, D2 = ctx.saved_tensors
    gw = g.to(A.dtype)[:, None, None]
    G = torch.einsum("bsp,bsd->bpd", D, A)
    if not ctx.cross:
        H = G * (2 * gw)
        return torch.einsum("bsp,bpd->bsd", D, H), torch.einsum("bsd,bpd->bsp", A, H), None, None, None
    H = torch.einsum("bsp,bsd->bpd", D2, A2) * gw
    G = G * gw
    return (torch.einsum("bsp,bpd->bsd", D, H), torch.einsum("bsd,bpd->bsp", A, H),
            torch.einsum("bsp,bpd->bsd", D2, G), torch.einsum("bsd,bpd->bsp", A2, G), None)


_op_ghost = define_op(
    "ghost_norm_sq", "(Tensor A, Tensor D, Tensor? A2, Tensor? D2, str impl) -> Tensor",
    _ghost_impl, _ghost_fake, _ghost_backward, _ghost_setup,
)


@_ghost.register("native")
def _ghost_native(A: Any, D: Any, A2: Any, D2: Any, *, device: Device) -> torch.Tensor:
    return _op_ghost(A, D, A2, D2, "native")


@_ghost.register("triton")
def _ghost_triton(A: Any, D: Any, A2: Any, D2: Any, *, device: Device) -> torch.Tensor:
    return _op_ghost(A, D, A2, D2, "triton")


# --- scaled accumulate -------------------------------------------------------------------


def scaled_outer_accumulate(
    A: torch.Tensor,
    D: torch.Tensor,
    w: torch.Tensor,
    seq_len: int,
    *,
    noise_std: float = 0.0,
    seed: int = 0,
    offset: int = 0,
    backend: str = "auto",
) -> torch.Tensor:
    r"""Weighted sum of per-sample outer products, optionally with fused Gaussian noise.

    .. math::

        \mathrm{out}_{jk} = \sum_{r} w_{\lfloor r / S \rfloor} D_{rj} A_{rk}
            + \sigma z_{jd + k}, \qquad z = \mathrm{normal}(p d, \mathrm{seed}, \mathrm{offset}),

    i.e. ``sum_i w_i G_i`` for ``G_i = D_i^T A_i``, plus Philox noise (element ``j * d + k``
    of the stream :func:`rml_fast.kernels.random.normal`). This writes the clipped sum of a
    layer's per-sample gradients from stored activations and output gradients, with no
    second backward pass (book-keeping).

    Parameters
    ----------
    A : torch.Tensor of shape (B * S, d), float32 or float64
    D : torch.Tensor of shape (B * S, p), same dtype
    w : torch.Tensor of shape (B,)
        Per-sample weights (cast to A's dtype).
    seq_len : int
        ``S``, the number of rows per sample.
    noise_std : float, default=0.0
        ``sigma >= 0``; 0 adds no noise.
    seed, offset : int, default=0
        Philox stream key and first counter of the noise.
    backend : {"auto", "native", "triton", "reference"}, default="auto"

    Returns
    -------
    out : torch.Tensor of shape (p, d), A's dtype
        Accumulated in A's dtype by the BLAS (native, reference) or in float32 (Triton).

    Raises
    ------
    TypeError, ValueError
        On bad types, shapes or scalars.

    Examples
    --------
    >>> import torch
    >>> from rml_fast.kernels.clip import scaled_outer_accumulate
    >>> A, D = torch.randn(6, 4, dtype=torch.float64), torch.randn(6, 2, dtype=torch.float64)
    >>> w = torch.tensor([1.0, 0.5, 0.0], dtype=torch.float64)
    >>> out = scaled_outer_accumulate(A, D, w, seq_len=2)
    >>> ref = sum(w[i] * D[2 * i:2 * i + 2].T @ A[2 * i:2 * i + 2] for i in range(3))
    >>> bool(torch.allclose(out, ref))
    True
    """
    A = _check_tensor(A, "A", 2)
    D = _check_tensor(D, "D", 2)
    w = _check_tensor(w, "w", 1)
    seq_len = int(check_scalar(seq_len, "seq_len", Interval("int", 1, None)))
    if D.dtype != A.dtype or D.shape[0] != A.shape[0]:
        raise ValueError(
            f"D must have A's dtype and {A.shape[0]} rows, got {D.dtype} {tuple(D.shape)}"
        )
    if w.shape[0] * seq_len != A.shape[0]:
        raise ValueError(
            f"w must have A.shape[0] / seq_len = {A.shape[0] / seq_len} entries, got {w.shape[0]}"
        )
    noise_std = float(check_scalar(noise_std, "noise_std", Interval("real", 0.0, None)))
    seed = int(check_scalar(seed, "seed", Interval("int", 0, MAX_COUNTER)))
    n_out = A.shape[1] * D.shape[1]
    offset = int(check_scalar(offset, "offset", Interval("int", 0, MAX_COUNTER - n_out)))
    return _accumulate(
        A, D, w.to(A.dtype), seq_len, noise_std, seed, offset, device=_device(A), backend=backend
    )


def _noise_reference(p: int, d: int, seed: int, offset: int, like: torch.Tensor) -> torch.Tensor:
    from rml_fast.kernels.random import normal_reference

    z = torch.from_numpy(normal_reference(p * d, seed, offset)).reshape(p, d)
    return z.to(device=like.device, dtype=like.dtype)


def scaled_outer_accumulate_reference(
    A: torch.Tensor,
    D: torch.Tensor,
    w: torch.Tensor,
    seq_len: int,
    *,
    noise_std: float = 0.0,
    seed: int = 0,
    offset: int = 0,
) -> torch.Tensor:
    """Torch twin of :func:`scaled_outer_accumulate`; returns shape (p, d), A's dtype."""
    rows = w.to(A.dtype).repeat_interleave(seq_len)
    if A.shape[1] < D.shape[1]:
        out = D.T @ (A * rows[:, None])
    else:
        out = (D * rows[:, None]).T @ A
    if noise_std > 0.0:
        out += noise_std * _noise_reference(D.shape[1], A.shape[1], seed, offset, out)
    return out


@_accumulate.register("reference")
def _acc_ref(A: Any, D: Any, w: Any, S: int, std: float, seed: int, offset: int, *,
             device: Device) -> torch.Tensor:
    return scaled_outer_accumulate_reference(A, D, w, S, noise_std=std, seed=seed, offset=offset)


def _acc_native_raw(A: Any, D: Any, w: Any, S: int, std: float, seed: int, offset: int
                    ) -> torch.Tensor:
    from rml_fast._native import _C

    A, D, w = A.detach().contiguous(), D.detach().contiguous(), w.detach().contiguous()
    out = torch.empty(D.shape[1], A.shape[1], dtype=A.dtype)
    _C.clip.scaled_outer_accumulate(
        A.numpy(), D.numpy(), w.numpy(), S, out.numpy(), std, seed, offset, _blas_gemm(A.dtype)
    )
    return out


def _acc_triton_raw(A: Any, D: Any, w: Any, S: int, std: float, seed: int, offset: int
                    ) -> torch.Tensor:
    from rml_fast.kernels.triton import clip as triton_clip

    return triton_clip.scaled_outer_accumulate(A, D, w, S, std, seed, offset)


# ``rml_fast::scaled_outer_accumulate``: a torch custom operator (fake implementation and
# autograd; the noise term has no gradient).
def _acc_impl(A: torch.Tensor, D: torch.Tensor, w: torch.Tensor, seq_len: int, noise_std: float,
            seed: int, offset: int, impl: str) -> torch.Tensor:
    """``sum_i w_i D_i^T A_i + sigma z`` (p, d)."""
    raw = _acc_native_raw if impl == "native" else _acc_triton_raw
    return raw(A, D, w, seq_len, noise_std, seed, offset)


def _acc_fake(A, D, w, seq_len, noise_std, seed, offset, impl):
    return A.new_empty(D.shape[1], A.shape[1])


def _acc_setup(ctx, inputs, output):
    A, D, w, seq_len = inputs[:4]
    ctx.seq_len = seq_len
    ctx.save_for_backward(A, D, w)


def _acc_backward(ctx, g):
    """out = D^T diag(w_r) A: dA = w_r D g, dD = w_r A g^T, dw_i = sum_{r in i} D_r^T g A_r."""
    A, D, w = ctx.saved_tensors
    wr = w.repeat_interleave(ctx.seq_len)[:, None]
    g = g.to(A.dtype)
    Dg = D @ g  # (B S, d)
    gw = (Dg * A).sum(-1).reshape(-1, ctx.seq_len).sum(-1)
    return wr * Dg, wr * (A @ g.T), gw, None, None, None, None, None


_op_acc = define_op(
    "scaled_outer_accumulate",
    "(Tensor A, Tensor D, Tensor w, int seq_len, float noise_std, int seed, int offset, "
    "str impl) -> Tensor",
    _acc_impl, _acc_fake, _acc_backward, _acc_setup,
)


@_accumulate.register("native")
def _acc_native(A: Any, D: Any, w: Any, S: int, std: float, seed: int, offset: int, *,
                device: Device) -> torch.Tensor:
    return _op_acc(A, D, w, S, std, seed, offset, "native")


@_accumulate.register("triton")
def _acc_triton(A: Any, D: Any, w: Any, S: int, std: float, seed: int, offset: int, *,
                device: Device) -> torch.Tensor:
    return _op_acc(A, D, w, S, std, seed, offset, "triton")


_BLAS_CACHE: dict[torch.dtype, int] = {}


def _blas_gemm(dtype: torch.dtype) -> int:
    """Address of SciPy's Fortran BLAS ``sgemm``/``dgemm`` (0 if unavailable).

    The C++ kernel calls it through this pointer, so the extension links no BLAS itself.
    """
    if dtype not in _BLAS_CACHE:
        addr = 0
        try:
            import ctypes

            from scipy.linalg import cython_blas

            capsule = cython_blas.__pyx_capi__["sgemm" if dtype == torch.float32 else "dgemm"]
            get = ctypes.pythonapi.PyCapsule_GetPointer
            get.restype = ctypes.c_void_p
            get.argtypes = [ctypes.py_object, ctypes.c_char_p]
            get_name = ctypes.pythonapi.PyCapsule_GetName
            get_name.restype = ctypes.c_char_p
            get_name.argtypes = [ctypes.py_object]
            addr = int(get(capsule, get_name(capsule)) or 0)
        except (ImportError, KeyError, AttributeError, ValueError):  # pragma: no cover
            addr = 0
        _BLAS_CACHE[dtype] = addr
    return _BLAS_CACHE[dtype]
