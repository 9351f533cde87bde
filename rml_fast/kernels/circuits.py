"""Masked residual mixing: the inner step of evaluating many edge masks in one forward.

For a batch of ``N`` candidate circuits, destination ``j`` of a layer reads

``out[n, j, :] = base[j, :] + sum_{s < S} mask[n, s, j] * delta[n, s, :]``

where ``delta[n, s] = a_s(run_n) - a_s(ablated)`` is the (flattened ``P*D``) change of source
``s`` in circuit run ``n`` and ``base[j] = sum_s a_s(ablated) + biases`` is shared by all runs.

Two paths:

* ``"dense"``: one batched GEMM ``mask[n]^T @ delta[n]`` (BLAS/cuBLAS through torch);
* ``"sparse"``: for each ``(n, j)`` only the active sources are gathered and added
  (C++ with OpenMP over ``(n, j)`` on the CPU, Triton on CUDA); the work is ``nnz(mask) * K``
  instead of ``N * S * J * K``, which pays at circuit densities of a few percent.

``path="auto"`` takes the sparse path when the mask density is below ``SPARSE_DENSITY``.
The native extension receives NumPy views of contiguous CPU tensors (it does not link torch).
"""

from __future__ import annotations

from typing import Any

from rml_fast.kernels._dispatch import Kernel, device_of

SPARSE_DENSITY = 0.15
_PATHS = ("auto", "dense", "sparse")

_masked_mix = Kernel("circuits.masked_mix")


def _validate(delta: Any, mask: Any, base: Any) -> tuple[Any, Any, Any]:
    import torch

    for x, name in ((delta, "delta"), (mask, "mask"), (base, "base")):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if delta.dtype not in (torch.float32, torch.float64):
        raise TypeError(f"delta must be float32 or float64, got {delta.dtype}")
    if base.dtype != delta.dtype:
        raise TypeError(f"base must have delta's dtype {delta.dtype}, got {base.dtype}")
    if delta.ndim != 3 or mask.ndim != 3 or base.ndim != 2:
        raise ValueError(
            "expected delta (N, S_tot, K), mask (N, S, J), base (J, K); got shapes "
            f"{tuple(delta.shape)}, {tuple(mask.shape)}, {tuple(base.shape)}"
        )
    n, s_tot, k = delta.shape
    if mask.shape[0] != n or mask.shape[1] > s_tot:
        raise ValueError(f"mask must have shape (N={n}, S<={s_tot}, J), got {tuple(mask.shape)}")
    if base.shape != (mask.shape[2], k):
        raise ValueError(
            f"base must have shape (J={mask.shape[2]}, K={k}), got {tuple(base.shape)}"
        )
    if mask.dtype not in (torch.bool, torch.uint8):
        raise TypeError(f"mask must be bool or uint8, got {mask.dtype}")
    if delta.device != mask.device or delta.device != base.device:
        raise ValueError("delta, mask and base must be on the same device")
    return delta, mask, base


def masked_mix(
    delta: Any,
    mask: Any,
    base: Any,
    *,
    path: str = "auto",
    backend: str = "auto",
    out: Any = None,
) -> Any:
    """Mix source deltas into destination inputs under per-run edge masks.

    ``out[n, j] = base[j] + sum_{s < S} mask[n, s, j] * delta[n, s]``.

    Parameters
    ----------
    delta : Tensor of shape (N, S_tot, K), float32 or float64
        Source deltas; only the first ``S = mask.shape[1]`` sources are read.
    mask : BoolTensor or uint8 Tensor of shape (N, S, J)
    base : Tensor of shape (J, K), delta's dtype
    path : {"auto", "dense", "sparse"}, default="auto"
    backend : {"auto", "native", "triton", "reference"}, default="auto"
        Backend of the sparse path (the dense path is a torch batched GEMM).
    out : Tensor of shape (N, J, K), optional
        Contiguous buffer of delta's dtype and device to write into (re-using one buffer
        avoids page-faulting a fresh allocation on every call).

    Returns
    -------
    out : Tensor of shape (N, J, K), delta's dtype and device

    Raises
    ------
    TypeError, ValueError
        On wrong types, dtypes, shapes or devices.

    Examples
    --------
    >>> import torch
    >>> from rml_fast.kernels.circuits import masked_mix
    >>> delta = torch.ones(1, 3, 2)
    >>> mask = torch.tensor([[[1, 0], [1, 1], [0, 0]]], dtype=torch.bool)
    >>> masked_mix(delta, mask, torch.zeros(2, 2)).tolist()
    [[[2.0, 2.0], [1.0, 1.0]]]
    """
    delta, mask, base = _validate(delta, mask, base)
    if out is not None:
        shape = (delta.shape[0], mask.shape[2], delta.shape[2])
        if not isinstance(out, type(delta)) or tuple(out.shape) != shape:
            raise ValueError(f"out must be a tensor of shape {shape}")
        if out.dtype != delta.dtype or out.device != delta.device or not out.is_contiguous():
            raise ValueError("out must be contiguous, with delta's dtype and device")
    if path not in _PATHS:
        raise ValueError(f"path must be one of {_PATHS}, got {path!r}")
    if path == "auto":
        density = float(mask.float().mean()) if mask.numel() else 0.0
        path = "sparse" if density < SPARSE_DENSITY else "dense"
    if path == "dense" and backend in ("auto", "native", "triton"):
        return _dense(delta, mask, base, out)
    return _masked_mix(delta, mask, base, out, device=device_of(delta), backend=backend)


def _dense(delta: Any, mask: Any, base: Any, out: Any) -> Any:
    import torch

    s = mask.shape[1]
    m = mask.to(delta.dtype).transpose(1, 2)  # [N, J, S]
    b = base.unsqueeze(0).expand(m.shape[0], -1, -1)
    if out is None:
        return torch.baddbmm(b, m, delta[:, :s])
    return torch.baddbmm(b, m, delta[:, :s], out=out)


def masked_mix_reference(delta: Any, mask: Any, base: Any) -> Any:
    """Torch twin of :func:`masked_mix`: ``base + einsum("nsj,nsk->njk", mask, delta[:, :S])``."""
    import torch

    delta, mask, base = _validate(delta, mask, base)
    s = mask.shape[1]
    return base.unsqueeze(0) + torch.einsum("nsj,nsk->njk", mask.to(delta.dtype), delta[:, :s])


@_masked_mix.register("reference")
def _mix_ref(delta: Any, mask: Any, base: Any, out: Any, *, device: Any) -> Any:
    res = masked_mix_reference(delta, mask, base)
    return res if out is None else out.copy_(res)


@_masked_mix.register("native")
def _mix_native(delta: Any, mask: Any, base: Any, out: Any, *, device: Any) -> Any:
    import torch

    from rml_fast._native import _C

    n, _, k = delta.shape
    j = mask.shape[2]
    d = delta.detach().contiguous()
    m = (
        mask.detach().contiguous().view(torch.uint8)
        if mask.dtype == torch.bool
        else mask.contiguous()
    )
    b = base.detach().contiguous()
    if out is None:
        out = torch.empty(n, j, k, dtype=delta.dtype)
    _C.circuits.masked_mix(d.numpy(), m.numpy(), b.numpy(), out.numpy())
    return out


@_masked_mix.register("triton")
def _mix_triton(delta: Any, mask: Any, base: Any, out: Any, *, device: Any) -> Any:
    from rml_fast.kernels.triton.circuits import masked_mix_triton

    return masked_mix_triton(delta, mask, base, out=out)
