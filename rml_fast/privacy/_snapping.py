"""Grid arithmetic that makes additive-noise releases floating-point safe ("snapping").

The float64 output ``fl(x + X)`` of a textbook additive mechanism leaks ``x`` through its
low bits (Mironov, "On significance of the least significant bits for differential
privacy", CCS 2012): for ``x = 1`` and ``y`` in (-1, -0.5) the sum is exact, so its last
mantissa bit is always 0, while for ``x = 0`` it is set half the time. The fix used here is
the granularity approach of secure-noise implementations (Mironov's snapping mechanism;
Google's differential-privacy library, "Secure Noise Generation"; Holohan & Braghin,
"Secure random sampling in differential privacy", ESORICS 2021): pick a power of two ``g``,
round the input and the noise to the grid ``g Z`` and add them:

    K = rnd(x / g),  R = rnd(X / g),  release = g (K + R),   rnd(t) = floor(t + 1/2).

``x / g``, ``X / g`` and ``g (K + R)`` are exact in binary floating point (scaling by a
power of two), ``rnd`` is computed exactly (``floor(t) + [t - floor(t) >= 1/2]``: the
fractional part ``t - floor(t)`` is exact and the comparison with 1/2 is monotone), and
``K + R`` is exact while ``|K + R| <= 2**53``; beyond that the float64 sum is the correctly
rounded ``K + R``, and a float32 output is the correctly rounded float64 value: in every
case the release is a deterministic function of the integer ``K + R``. Because ``rnd(t + n) = rnd(t) + n`` for every
integer ``n``, ``g (K + R) = g rnd((g K + X) / g)``: the release is a post-processing of the
exact mechanism ``g K + X`` applied to the rounded input ``g K``, and its law is the law of
``g R`` (which does not depend on ``x``) shifted by ``g K``. Neighbouring inputs therefore
have outputs on the same grid, and the privacy accounting is that of the exact mechanism
at the sensitivity of ``g K`` (:func:`effective_sensitivity`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = [
    "EXACT_GRID_UNITS",
    "FIDELITY_BITS",
    "GRANULARITY_BITS",
    "MAX_INPUT_UNITS",
    "auto_granularity",
    "check_granularity",
    "effective_sensitivity",
    "round_half_up",
    "snap_release",
]

#: "auto": ``g`` is the largest power of two <= Delta 2**-GRANULARITY_BITS / sqrt(dim), so
#: the accounting sensitivity is at most Delta (1 + 2**-GRANULARITY_BITS) (exactly Delta in
#: one dimension when Delta is a multiple of g, e.g. Delta = 1), independent of the noise
#: scale, unless the fidelity floor below is larger; the rounding moves the noise by <= g/2.
GRANULARITY_BITS = 30
#: ... but never finer than ``std * 2**-FIDELITY_BITS``: our noise comes from a float64
#: sampler (relative error ~2**-50), so a cell of width g must hold many representable noise
#: values (Google's library uses g ~ scale 2**-40 with exact discrete samplers). At
#: ``g >= std 2**-40`` a cell around |X| ~ std holds >= 2**12 float64 values; at typical
#: calibrations (std ~ Delta) it holds ~2**22.
FIDELITY_BITS = 40
#: ``g (K + R)`` is exact while ``|K + R| <= EXACT_GRID_UNITS``; beyond, the float64 sum is the
#: correctly rounded ``K + R``, still a function of ``K + R`` (see :func:`snap_release`).
EXACT_GRID_UNITS = 2.0**53
#: Inputs must satisfy ``|x| <= MAX_INPUT_UNITS * min(g, 1)``: ``x / g`` and the release stay
#: far from float64 overflow.
MAX_INPUT_UNITS = 2.0**1000
_MIN_G = 2.0**-1022  # smallest normal float64
_MAX_G = 2.0**1000


def _pow2_floor(v: float) -> float:
    _, e = math.frexp(v)  # v = m 2**e, m in [0.5, 1)
    return math.ldexp(1.0, e - 1)


def _pow2_ceil(v: float) -> float:
    m, e = math.frexp(v)
    return math.ldexp(1.0, e - 1) if m == 0.5 else math.ldexp(1.0, e)


def auto_granularity(sensitivity: float, dim: int, std: float) -> float:
    """The automatic granularity: ``max(pow2_floor(Delta 2**-30 / sqrt(dim)), pow2_ceil(std 2**-40))``.

    ``pow2_floor``/``pow2_ceil``: the largest/smallest power of two below/above. The first
    term bounds the accounting cost (``g sqrt(dim) <= Delta 2**-30``), the second keeps the
    grid coarse against the float64 resolution of the noise (``FIDELITY_BITS``).

    Examples
    --------
    >>> from rml_fast.privacy._snapping import auto_granularity
    >>> auto_granularity(1.0, 1, 1.0) == 2.0**-30, auto_granularity(1.0, 4, 1.0) == 2.0**-31
    (True, True)
    >>> auto_granularity(1.0, 1, 2.0**20) == 2.0**-20    # very noisy: the fidelity floor
    True
    """
    g = max(
        _pow2_floor(math.ldexp(float(sensitivity), -GRANULARITY_BITS) / math.sqrt(dim)),
        _pow2_ceil(math.ldexp(float(std), -FIDELITY_BITS)),
    )
    return min(max(g, _MIN_G), _MAX_G)


def check_granularity(value: Any, name: str = "granularity") -> float | str | None:
    """Validate ``"auto"``, None or a positive (normal) power of two; returns it normalised."""
    if value is None:
        return None
    if isinstance(value, str):
        if value != "auto":
            raise ValueError(f"{name} must be 'auto', None or a positive power of two, got {value!r}")
        return "auto"
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(
            f"{name} must be 'auto', None or a positive power of two, got {type(value).__name__} {value!r}"
        )
    g = float(value)
    if not (math.isfinite(g) and g > 0.0) or math.frexp(g)[0] != 0.5 or not (_MIN_G <= g <= _MAX_G):
        raise ValueError(
            f"{name} must be 'auto', None or a positive power of two in [2**-1022, 2**1000] "
            f"(e.g. 2.0**-20), got {value!r}"
        )
    return g


def effective_sensitivity(sensitivity: float, g: float | None, dim: int) -> float:
    """l2 sensitivity of the rounded query ``g K`` given that of ``x`` (``Delta``).

    ``g K = x + e(x)`` with every coordinate of ``e`` in (-g/2, g/2], so
    ``|K_i - K'_i| < |x_i - x'_i| / g + 1``. In one dimension the integer ``|K - K'|`` is
    then at most ``ceil(Delta / g)``: the sensitivity is ``g ceil(Delta / g) < Delta + g``
    (equal to ``Delta`` when ``Delta`` is a multiple of ``g``, e.g. ``Delta = 1, g <= 1``).
    In ``dim >= 2`` the triangle inequality gives ``Delta + g sqrt(dim)`` (attained up to
    O(g) by ``x - x'`` spread evenly over the coordinates). ``g = None``: ``Delta``.

    Examples
    --------
    >>> from rml_fast.privacy._snapping import effective_sensitivity
    >>> effective_sensitivity(1.0, 2.0**-20, 1), effective_sensitivity(0.3, 0.25, 1)
    (1.0, 0.5)
    >>> effective_sensitivity(1.0, 2.0**-2, 4)
    1.5
    """
    if g is None:
        return float(sensitivity)
    if dim == 1:
        return g * math.ceil(sensitivity / g)
    return float(sensitivity) + g * math.sqrt(dim)


def round_half_up(t: Any) -> Any:
    """``floor(t + 1/2)`` computed exactly (NumPy array or torch tensor, float; ``t`` is overwritten).

    ``t + 0.5`` itself can round up (``0.49999999999999994 + 0.5 == 1.0``); instead
    ``floor(t) + [t - floor(t) >= 1/2]``, where ``t - floor(t)`` is exact for floats.
    """
    if isinstance(t, np.ndarray):
        fl = np.floor(t)
        np.subtract(t, fl, out=t)  # the exact fractional part
        np.add(fl, t >= 0.5, out=fl)
        return fl
    fl = t.floor()
    frac = t.sub_(fl)
    return fl.add_(frac >= 0.5)


def snap_release(x: Any, noise: Any, g: float, out_dtype: Any) -> Any:
    """``g (rnd(x / g) + rnd(noise / g))`` in float64, cast to ``out_dtype``.

    ``x`` (float32/float64, not modified) and ``noise`` (float64, consumed: overwritten)
    are NumPy arrays or torch tensors of one shape, ``|x| <= 2**1000 min(g, 1)``. ``K`` and
    ``R`` are exact; ``fl(K + R)`` (exact below ``2**53``), the product by ``g`` (exact) and
    the cast to float32 are each a deterministic function of their exact input, so the
    output is a function of the integer ``K + R``: a post-processing. Every output is a
    multiple of ``g``: below ``2**53 g`` (float64) or ``2**24 g`` (float32) it is exactly
    ``g (K + R)``; above, a float is a multiple of its ulp, a larger power of two.
    """
    if isinstance(noise, np.ndarray):
        t = np.divide(x, g, dtype=np.float64)
        k = round_half_up(t)
        np.divide(noise, g, out=noise)
        r = round_half_up(noise)
        np.add(k, r, out=k)
        np.multiply(k, g, out=k)
        return k if out_dtype == np.float64 else k.astype(out_dtype)
    import torch

    t = x.to(torch.float64) / g
    k = round_half_up(t)
    r = round_half_up(noise.div_(g))
    out = k.add_(r).mul_(g)
    return out if out_dtype == torch.float64 else out.to(out_dtype)
