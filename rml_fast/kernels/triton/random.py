"""Triton Philox streams: element ``i`` is ``tl.rand`` / ``tl.randn`` at ``offset + i``."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

__all__ = [
    "fill",
]

_BLOCK = 1024


@triton.jit(do_not_specialize=["n", "seed", "offset"])
def _uniform_kernel(out_ptr, n, seed, offset, BLOCK: tl.constexpr):
    idx = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    counters = offset + idx  # int64: Triton's randint4x then uses both counter words
    tl.store(out_ptr + idx, tl.rand(seed, counters), mask=idx < n)


@triton.jit(do_not_specialize=["n", "seed", "offset"])
def _normal_kernel(out_ptr, n, seed, offset, BLOCK: tl.constexpr):
    idx = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    counters = offset + idx
    tl.store(out_ptr + idx, tl.randn(seed, counters), mask=idx < n)


def fill(out: torch.Tensor, seed: int, offset: int, *, normal: bool) -> torch.Tensor:
    """Fill the contiguous float32 tensor ``out`` in place with a Philox stream."""
    n = out.numel()
    if n == 0:
        return out
    grid = (triton.cdiv(n, _BLOCK),)
    kernel = _normal_kernel if normal else _uniform_kernel
    kernel[grid](out, n, seed, offset, BLOCK=_BLOCK)
    return out
