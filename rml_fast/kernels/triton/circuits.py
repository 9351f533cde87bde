"""Triton masked residual mixing (sparse path): ``out[n, j] = base[j] + sum_s mask[n, s, j] delta[n, s]``.

Grid ``(N * J, cdiv(K, BLOCK))``: each program owns one destination of one circuit run and a
``BLOCK`` slice of the flattened ``P * D`` axis, loops over the sources and loads a source's
slice only when its mask bit is set (the masked load skips the memory traffic). Accumulates in
the input dtype (float32 or float64), sources in ascending order.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

__all__ = [
    "masked_mix_triton",
]


@triton.jit
def _masked_mix_kernel(
    delta_ptr, mask_ptr, base_ptr, out_ptr,
    S, J, K,
    stride_dn, stride_ds, stride_mn, stride_ms,
    BLOCK: tl.constexpr,
):  # fmt: skip
    pid = tl.program_id(0)
    n = (pid // J).to(tl.int64)
    j = (pid % J).to(tl.int64)
    offs = tl.program_id(1).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    in_k = offs < K
    acc = tl.load(base_ptr + j * K + offs, mask=in_k, other=0.0)
    for s in range(0, S):
        m = tl.load(mask_ptr + n * stride_mn + s * stride_ms + j).to(tl.int32)
        on = (tl.zeros([BLOCK], dtype=tl.int32) + m) != 0  # the mask bit, broadcast
        d = tl.load(delta_ptr + n * stride_dn + s * stride_ds + offs, mask=in_k & on, other=0.0)
        acc += d
    tl.store(out_ptr + (n * J + j) * K + offs, acc, mask=in_k)


def masked_mix_triton(
    delta: torch.Tensor, mask: torch.Tensor, base: torch.Tensor, out: torch.Tensor | None = None
) -> torch.Tensor:
    """Launch the kernel; ``delta (N, S_tot, K)``, ``mask (N, S, J)``, ``base (J, K)``."""
    delta = delta.contiguous()
    mask_u8 = mask.contiguous()
    if mask_u8.dtype == torch.bool:
        mask_u8 = mask_u8.view(torch.uint8)
    base = base.contiguous()
    n, _, k = delta.shape
    s, j = mask_u8.shape[1], mask_u8.shape[2]
    if out is None:
        out = torch.empty(n, j, k, dtype=delta.dtype, device=delta.device)
    if out.numel() == 0:
        return out
    block = min(1024, triton.next_power_of_2(k))
    grid = (n * j, triton.cdiv(k, block))
    _masked_mix_kernel[grid](
        delta, mask_u8, base, out, s, j, k,
        delta.stride(0), delta.stride(1), mask_u8.stride(0), mask_u8.stride(1),
        BLOCK=block,
    )  # fmt: skip
    return out
