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

Two options serve the batched circuit evaluator: ``source_first=True`` takes ``delta`` as
``(S_tot, N, K)`` and returns ``(J, N, K)`` (one destination's rows over all runs are then one
contiguous matrix, ready for a per-head GEMM), and ``ln=(w, b, eps)`` layer-normalises every
length-``D`` row of the output (``K = P * D``), fused into the C++ kernel while the block is in
cache (the other backends apply it afterwards). The C++ kernel runs on as many OpenMP threads
as torch's intra-op pool (``torch.get_num_threads()``).
"""

from __future__ import annotations

from typing import Any

from rml_fast.kernels._dispatch import Kernel, device_of

__all__ = [
    "SPARSE_DENSITY",
    "masked_mix",
    "masked_mix_reference",
]

SPARSE_DENSITY = 0.15
_PATHS = ("auto", "dense", "sparse")

_masked_mix = Kernel("circuits.masked_mix")


def _validate(
    delta: Any, mask: Any, base: Any, source_first: bool = False
) -> tuple[Any, Any, Any]:
    import torch

    for x, name in ((delta, "delta"), (mask, "mask"), (base, "base")):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
        if x.device.type == "meta":
            raise ValueError(f"{name} must hold values, got a tensor on the 'meta' device")
    if delta.dtype not in (torch.float32, torch.float64):
        raise TypeError(f"delta must be float32 or float64, got {delta.dtype}")
    if base.dtype != delta.dtype:
        raise TypeError(f"base must have delta's dtype {delta.dtype}, got {base.dtype}")
    if delta.ndim != 3 or mask.ndim != 3 or base.ndim != 2:
        raise ValueError(
            "expected delta (N, S_tot, K), mask (N, S, J), base (J, K); got shapes "
            f"{tuple(delta.shape)}, {tuple(mask.shape)}, {tuple(base.shape)}"
        )
    s_tot, n, k = delta.shape if source_first else (delta.shape[1], delta.shape[0], delta.shape[2])
    if mask.shape[0] != n or mask.shape[1] > s_tot:
        raise ValueError(
            f"mask must have shape (N={n}, S<={s_tot}, J) with N and S_tot from delta, got "
            f"mask of shape {tuple(mask.shape)} and delta of shape {tuple(delta.shape)}"
        )
    if base.shape != (mask.shape[2], k):
        raise ValueError(
            f"base must have shape (J={mask.shape[2]}, K={k}) with J from mask and K from "
            f"delta, got base of shape {tuple(base.shape)}"
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
    source_first: bool = False,
    ln: tuple[Any, Any, float] | None = None,
    need: Any = None,
) -> Any:
    """Mix source deltas into destination inputs under per-run edge masks.

    ``out[n, j] = base[j] + sum_{s < S} mask[n, s, j] * delta[n, s]``, then optionally
    ``out[n, j, p] <- LN(out[n, j, p])`` over each length-``D`` row ``p``.

    Parameters
    ----------
    delta : Tensor of shape (N, S_tot, K), or (S_tot, N, K) if source_first, float32 or float64
        Source deltas; only the first ``S = mask.shape[1]`` sources are read.
    mask : BoolTensor or uint8 Tensor of shape (N, S, J)
    base : Tensor of shape (J, K), delta's dtype
    path : {"auto", "dense", "sparse"}, default="auto"
    backend : {"auto", "native", "triton", "reference"}, default="auto"
        Backend of the sparse path (the dense path is a torch batched GEMM).
    out : Tensor of shape (N, J, K), or (J, N, K) if source_first, optional
        Contiguous buffer of delta's dtype and device to write into (re-using one buffer
        avoids page-faulting a fresh allocation on every call).
    source_first : bool, default=False
        Source-major ``delta`` and destination-major ``out`` (see the module docstring).
    ln : tuple (w, b, eps) or None, default=None
        Layer norm ``(x - mean) / sqrt(var + eps) * w + b`` of every length-``D`` row of the
        output, ``w`` and ``b`` (or None) of shape (D,) with ``K % D == 0``; fused in C++.

    Returns
    -------
    out : Tensor of shape (N, J, K), or (J, N, K) if source_first, delta's dtype and device

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
    source_first = bool(source_first)
    delta, mask, base = _validate(delta, mask, base, source_first)
    ln = _check_ln(ln, delta)
    n, j, k = mask.shape[0], mask.shape[2], delta.shape[2]
    import torch

    if need is not None and (
        not isinstance(need, torch.Tensor) or need.dtype != torch.bool or need.shape != (n, j)
    ):
        raise ValueError(f"need must be a bool tensor of shape {(n, j)}")
    shape = (j, n, k) if source_first else (n, j, k)
    if out is not None:
        if not isinstance(out, type(delta)) or tuple(out.shape) != shape:
            raise ValueError(f"out must be a tensor of shape {shape}")
        if out.dtype != delta.dtype or out.device != delta.device or not out.is_contiguous():
            raise ValueError("out must be contiguous, with delta's dtype and device")
    if path not in _PATHS:
        raise ValueError(f"path must be one of {_PATHS}, got {path!r}")
    if path == "auto":
        density = float(mask.float().mean()) if mask.numel() else 0.0
        path = "sparse" if density < SPARSE_DENSITY else "dense"
    if path == "sparse" and backend in ("auto", "native") and delta.device.type == "cpu":
        return _mix_native(delta, mask, base, out, source_first, ln, need)  # LN fused
    if path == "dense" and backend in ("auto", "native", "triton"):
        res = _dense(delta, mask, base, source_first)
    else:
        res = _masked_mix(
            _batch_first(delta, source_first), mask, base, None,
            device=device_of(delta), backend=backend,
        )  # fmt: skip
        res = res.transpose(0, 1) if source_first else res
    res = _finish(res, ln, out)
    if need is not None:
        res[~(need.T if source_first else need)] = 0.0
    return res


def _check_ln(ln: Any, delta: Any) -> tuple[Any, Any, float] | None:
    import torch

    if ln is None:
        return None
    if not isinstance(ln, tuple) or len(ln) != 3:
        raise TypeError("ln must be a tuple (w, b, eps) or None")
    w, b, eps = ln
    d = w.shape[0] if isinstance(w, torch.Tensor) and w.ndim == 1 else 0
    if d == 0 or w.dtype != delta.dtype or delta.shape[2] % d:
        raise ValueError("ln: w must be a 1-d tensor of delta's dtype whose length divides K")
    if b is not None and (not isinstance(b, torch.Tensor) or b.shape != w.shape):
        raise ValueError("ln: b must be None or a tensor of w's shape")
    if b is not None and b.dtype != delta.dtype:
        raise ValueError("ln: b must have delta's dtype")
    if not float(eps) > 0:
        raise ValueError(f"ln: eps must be positive, got {eps}")
    return w, b, float(eps)


def _batch_first(delta: Any, source_first: bool) -> Any:
    return delta.transpose(0, 1) if source_first else delta


def _finish(res: Any, ln: Any, out: Any) -> Any:
    """Apply the optional layer norm and copy into ``out``."""
    import torch

    if ln is not None:
        w, b, eps = ln
        d = w.shape[0]
        res = torch.nn.functional.layer_norm(
            res.reshape(*res.shape[:2], -1, d), (d,), w, b, eps
        ).reshape(res.shape)
    if out is None:
        return res.contiguous()
    return out.copy_(res)


def _dense(delta: Any, mask: Any, base: Any, source_first: bool) -> Any:
    import torch

    s = mask.shape[1]
    m = mask.to(delta.dtype).transpose(1, 2)  # [N, J, S]
    b = base.unsqueeze(0).expand(m.shape[0], -1, -1)
    d = delta[:s].transpose(0, 1) if source_first else delta[:, :s]
    res = torch.baddbmm(b, m, d)
    return res.transpose(0, 1) if source_first else res


def masked_mix_reference(
    delta: Any,
    mask: Any,
    base: Any,
    *,
    source_first: bool = False,
    ln: tuple[Any, Any, float] | None = None,
) -> Any:
    """Torch twin of :func:`masked_mix`: ``base + einsum("nsj,nsk->njk", mask, delta[:, :S])``.

    With ``source_first`` the delta is ``(S_tot, N, K)`` and the result ``(J, N, K)``; ``ln``
    applies ``torch.nn.functional.layer_norm`` to every length-``D`` row of the result.
    """
    import torch

    delta, mask, base = _validate(delta, mask, base, bool(source_first))
    ln = _check_ln(ln, delta)
    d = _batch_first(delta, bool(source_first))
    s = mask.shape[1]
    res = base.unsqueeze(0) + torch.einsum("nsj,nsk->njk", mask.to(delta.dtype), d[:, :s])
    if ln is not None:
        w, b, eps = ln
        res = torch.nn.functional.layer_norm(
            res.reshape(*res.shape[:2], -1, w.shape[0]), (w.shape[0],), w, b, eps
        ).reshape(res.shape)
    return res.transpose(0, 1).contiguous() if source_first else res


@_masked_mix.register("reference")
def _mix_ref(delta: Any, mask: Any, base: Any, out: Any, *, device: Any) -> Any:
    res = masked_mix_reference(delta, mask, base)
    return res if out is None else out.copy_(res)


def _mix_native(
    delta: Any,
    mask: Any,
    base: Any,
    out: Any,
    source_first: bool = False,
    ln: tuple[Any, Any, float] | None = None,
    need: Any = None,
) -> Any:
    import torch

    from rml_fast._native import _C

    k = delta.shape[2]
    n, j = mask.shape[0], mask.shape[2]
    d = delta.detach().contiguous()
    m = (
        mask.detach().contiguous().view(torch.uint8)
        if mask.dtype == torch.bool
        else mask.contiguous()
    )
    b = base.detach().contiguous()
    if out is None:
        out = torch.empty(*((j, n) if source_first else (n, j)), k, dtype=delta.dtype)
    # as many threads as torch's intra-op pool (torch.set_num_threads governs both)
    kw: dict[str, Any] = {"source_first": source_first, "n_threads": torch.get_num_threads()}
    if ln is not None:
        w, lb, eps = ln
        kw["ln_w"] = w.detach().contiguous().numpy()
        kw["ln_b"] = None if lb is None else lb.detach().contiguous().numpy()
        kw["eps"] = eps
    if need is not None:
        kw["need"] = need.detach().contiguous().view(torch.uint8).numpy()
    _C.circuits.masked_mix(d.numpy(), m.numpy(), b.numpy(), out.numpy(), **kw)
    return out


@_masked_mix.register("native")
def _mix_native_kernel(delta: Any, mask: Any, base: Any, out: Any, *, device: Any) -> Any:
    return _mix_native(delta, mask, base, out)


@_masked_mix.register("triton")
def _mix_triton(delta: Any, mask: Any, base: Any, out: Any, *, device: Any) -> Any:
    from rml_fast.kernels.triton.circuits import masked_mix_triton

    return masked_mix_triton(delta, mask, base, out=out)
