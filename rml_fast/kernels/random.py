"""Reproducible counter-based random streams (Philox4x32-10) across CPU and GPU.

Element ``i`` of ``uniform(n, seed, offset)`` is exactly what Triton's ``tl.rand(seed,
offset + i)`` returns inside a kernel (with an int64 offset), and ``normal`` likewise
matches ``tl.randn`` (to float rounding of ``log``/``cos``). So a seed gives the same noise
from the C++ kernels on a laptop as from a Triton kernel on a GPU, and a sampler can draw
block ``[offset, offset + n)`` of a stream independently of the others.

The counter is ``(offset_lo, offset_hi, 0, 0)`` and the key ``(seed_lo, seed_hi)`` (Salmon
et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011); the first output word
is mapped to float32 by Triton's ``uint_to_uniform_float``, and ``normal`` applies the
first branch of Box-Muller to the first two words.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rml_fast._validation import Interval, check_rng, check_scalar
from rml_fast.kernels._dispatch import Device, Kernel, resolve_device

__all__ = [
    "MAX_COUNTER",
    "normal",
    "normal_reference",
    "philox4x32_reference",
    "seed_from_rng",
    "uniform",
    "uniform_reference",
]

MAX_COUNTER = 2**63 - 1  # Triton offsets are int64
_PHILOX_W = (np.uint32(0x9E3779B9), np.uint32(0xBB67AE85))
_PHILOX_M = (np.uint64(0xD2511F53), np.uint64(0xCD9E8D57))

_uniform = Kernel("random.uniform")
_normal = Kernel("random.normal")


def _validate(n: Any, seed: Any, offset: Any) -> tuple[int, int, int]:
    n = check_scalar(n, "n", Interval("int", 0, MAX_COUNTER))
    seed = check_scalar(seed, "seed", Interval("int", 0, MAX_COUNTER))
    offset = check_scalar(offset, "offset", Interval("int", 0, MAX_COUNTER - n))
    return int(n), int(seed), int(offset)


def uniform(
    n: int, seed: int, offset: int = 0, *, device: Any = None, backend: str = "auto"
) -> Any:
    """Draw ``n`` float32 uniforms on [0, 1) from the Philox stream ``seed``.

    ``out[i] = tl.rand(seed, offset + i)``, bit for bit on every backend.

    Parameters
    ----------
    n : int
        Number of draws, ``n >= 0``.
    seed : int
        Stream key, ``0 <= seed < 2**63``.
    offset : int, default=0
        First counter of the block, ``0 <= offset`` and ``offset + n < 2**63``.
    device : None, "numpy", "cpu", "cuda[:N]" or torch.device, default=None
        None returns a NumPy array; otherwise a torch tensor on that device.
    backend : {"auto", "native", "triton", "reference"}, default="auto"
        "auto" runs Triton for CUDA and C++ otherwise.

    Returns
    -------
    out : ndarray or torch.Tensor of shape (n,), float32

    Raises
    ------
    TypeError
        If ``n``, ``seed`` or ``offset`` is not an int, or ``device`` has the wrong type.
    ValueError
        If one of them is out of range, or the device is unknown or unavailable.

    Examples
    --------
    >>> from rml_fast.kernels.random import uniform
    >>> u = uniform(4, seed=7)
    >>> u.dtype, u.shape
    (dtype('float32'), (4,))
    >>> bool((uniform(2, seed=7, offset=2) == u[2:]).all())
    True
    """
    n, seed, offset = _validate(n, seed, offset)
    return _uniform(n, seed, offset, device=resolve_device(device), backend=backend)


def normal(n: int, seed: int, offset: int = 0, *, device: Any = None, backend: str = "auto") -> Any:
    """Draw ``n`` float32 standard normals from the Philox stream ``seed``.

    ``out[i] = tl.randn(seed, offset + i)``: Box-Muller on the first two Philox words,
    ``sqrt(-2 log max(u1, 1e-7)) cos(2 pi u2)``; backends agree to float32 rounding of the
    transcendental functions (the underlying words agree exactly).

    Parameters
    ----------
    n, seed, offset, device, backend
        As in :func:`uniform`.

    Returns
    -------
    out : ndarray or torch.Tensor of shape (n,), float32

    Examples
    --------
    >>> from rml_fast.kernels.random import normal
    >>> z = normal(100_000, seed=1)
    >>> abs(float(z.mean())) < 0.02 and abs(float(z.std()) - 1) < 0.02
    True
    """
    n, seed, offset = _validate(n, seed, offset)
    return _normal(n, seed, offset, device=resolve_device(device), backend=backend)


def seed_from_rng(rng: Any = None) -> int:
    """A stream key in ``[0, 2**63)`` drawn from ``rng`` (Generator, int seed or None)."""
    return int(check_rng(rng).integers(0, MAX_COUNTER, dtype=np.int64, endpoint=True))


# --- reference implementation (NumPy) ----------------------------------------------------


def _philox4x32_10(
    c0: np.ndarray, c1: np.ndarray, c2: np.ndarray, c3: np.ndarray, k0: int, k1: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Ten Philox rounds on uint32 counter arrays with key ``(k0, k1)``."""
    mask32 = np.uint64(0xFFFFFFFF)
    key0, key1 = np.uint32(k0), np.uint32(k1)
    with np.errstate(over="ignore"):
        for _ in range(10):
            prod_b = _PHILOX_M[1] * c2.astype(np.uint64)
            prod_a = _PHILOX_M[0] * c0.astype(np.uint64)
            c0, c1, c2, c3 = (
                (prod_b >> np.uint64(32)).astype(np.uint32) ^ c1 ^ key0,
                (prod_b & mask32).astype(np.uint32),
                (prod_a >> np.uint64(32)).astype(np.uint32) ^ c3 ^ key1,
                (prod_a & mask32).astype(np.uint32),
            )
            key0 = key0 + _PHILOX_W[0]
            key1 = key1 + _PHILOX_W[1]
    return c0, c1, c2, c3


def philox4x32_reference(seed: int, offsets: np.ndarray) -> np.ndarray:
    """Philox4x32-10 words for counters ``(offset_lo, offset_hi, 0, 0)`` and key ``seed``.

    This is Triton's ``tl.randint4x(seed, offsets)`` for int64 offsets.

    Parameters
    ----------
    seed : int
        ``0 <= seed < 2**64``.
    offsets : ndarray of shape (n,), uint64

    Returns
    -------
    words : ndarray of shape (4, n), uint32
    """
    offsets = np.asarray(offsets, dtype=np.uint64)
    lo = (offsets & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    hi = (offsets >> np.uint64(32)).astype(np.uint32)
    zero = np.zeros_like(lo)
    words = _philox4x32_10(lo, hi, zero, zero, seed & 0xFFFFFFFF, (seed >> 32) & 0xFFFFFFFF)
    return np.stack(words)


def _uint_to_uniform(words: np.ndarray) -> np.ndarray:
    signed = words.view(np.int32)
    signed = np.where(signed < 0, ~signed, signed)
    return signed.astype(np.float32) * np.float32(4.6566127342e-10)


def _counters(n: int, offset: int) -> np.ndarray:
    return np.uint64(offset) + np.arange(n, dtype=np.uint64)


def uniform_reference(n: int, seed: int, offset: int = 0) -> np.ndarray:
    """NumPy twin of :func:`uniform`: returns ndarray of shape (n,), float32."""
    n, seed, offset = _validate(n, seed, offset)
    return _uint_to_uniform(philox4x32_reference(seed, _counters(n, offset))[0])


def normal_reference(n: int, seed: int, offset: int = 0) -> np.ndarray:
    """NumPy twin of :func:`normal`: returns ndarray of shape (n,), float32.

    Every float32 operation of Triton's Box-Muller is reproduced, with ``log`` and ``cos``
    correctly rounded to float32 (evaluated in float64, then rounded).
    """
    n, seed, offset = _validate(n, seed, offset)
    words = philox4x32_reference(seed, _counters(n, offset))
    u1 = np.maximum(np.float32(1e-7), _uint_to_uniform(words[0]))
    theta = np.float32(6.283185307179586) * _uint_to_uniform(words[1])
    log_u1 = np.log(u1.astype(np.float64)).astype(np.float32)
    radius = np.sqrt(np.float32(-2.0) * log_u1)
    return radius * np.cos(theta.astype(np.float64)).astype(np.float32)


# --- backends ----------------------------------------------------------------------------


def _to_device(arr: np.ndarray, device: Device) -> Any:
    if not device.is_torch:
        return arr
    import torch

    return torch.from_numpy(arr).to(device.torch_device)


@_uniform.register("reference")
def _uniform_ref(n: int, seed: int, offset: int, *, device: Device) -> Any:
    return _to_device(uniform_reference(n, seed, offset), device)


@_normal.register("reference")
def _normal_ref(n: int, seed: int, offset: int, *, device: Device) -> Any:
    return _to_device(normal_reference(n, seed, offset), device)


def _native_fill(n: int, seed: int, offset: int, device: Device, normal: bool) -> Any:
    from rml_fast._native import _C

    out = np.empty(n, dtype=np.float32)
    (_C.random.fill_normal if normal else _C.random.fill_uniform)(out, seed, offset)
    return _to_device(out, device)


@_uniform.register("native")
def _uniform_native(n: int, seed: int, offset: int, *, device: Device) -> Any:
    return _native_fill(n, seed, offset, device, normal=False)


@_normal.register("native")
def _normal_native(n: int, seed: int, offset: int, *, device: Device) -> Any:
    return _native_fill(n, seed, offset, device, normal=True)


def _triton_fill(n: int, seed: int, offset: int, device: Device, normal: bool) -> Any:
    import torch

    from rml_fast.kernels.triton import random as triton_random

    out = torch.empty(n, dtype=torch.float32, device=device.torch_device)
    triton_random.fill(out, seed, offset, normal=normal)
    return out


@_uniform.register("triton")
def _uniform_triton(n: int, seed: int, offset: int, *, device: Device) -> Any:
    return _triton_fill(n, seed, offset, device, normal=False)


@_normal.register("triton")
def _normal_triton(n: int, seed: int, offset: int, *, device: Device) -> Any:
    return _triton_fill(n, seed, offset, device, normal=True)
