"""Array-level Shamir (t, K) secret sharing over GF(2^61 - 1) (Shamir, CACM 1979).

Each element of a secret vector ``s`` gets its own random polynomial
``f_i(x) = s_i + a_{1,i} x + ... + a_{t-1,i} x^{t-1}`` with coefficients uniform in ``[0, P)``;
party ``j`` (0-based) receives ``f_i(j + 1)``. Any ``t`` shares give ``s_i = sum_j lambda_j f_i(x_j)``
with the Lagrange weights at 0; any ``t - 1`` shares are uniform and independent of ``s``.
Coefficients are drawn chunk by chunk so that memory stays ``O(t * chunk + K * D)``.
"""

from __future__ import annotations

import numpy as np

from rml_fast.federated import _field

#: Elements per chunk of coefficient draws.
CHUNK = 1 << 16


def share_array(secret: np.ndarray, t: int, K: int, rng: np.random.Generator) -> np.ndarray:
    """Shamir shares of a uint64 field vector: array of shape (K, D), row j = party j's share."""
    secret = _field.as_field(secret).ravel()
    d = secret.shape[0]
    out = np.empty((K, d), dtype=np.uint64)
    xs = np.arange(1, K + 1, dtype=np.uint64)
    if t == 1:
        out[:] = secret
        return out
    for start in range(0, d, CHUNK):
        stop = min(d, start + CHUNK)
        coeffs = rng.integers(0, _field.P_INT, size=(t - 1, stop - start), dtype=np.uint64)
        out[:, start:stop] = _field.horner_shares(secret[start:stop], coeffs, xs)
    return out


def reconstruct_array(shares: list[np.ndarray], xs: list[int]) -> np.ndarray:
    """Lagrange interpolation at 0 of shares (each shape (D,)) held at points ``xs``."""
    lam = _field.lagrange_at_zero(xs)
    return _field.combine(np.stack([_field.as_field(s).ravel() for s in shares]), lam)


def share_array_python(secret: list[int], t: int, K: int, coeffs: list[list[int]]) -> list[list[int]]:
    """Plain-Python twin (Python ints) with given coefficients ``coeffs[j][i]`` (tests, benchmarks)."""
    p = _field.P_INT
    out = []
    for x in range(1, K + 1):
        row = []
        for i, s in enumerate(secret):
            v = 0
            for j in range(t - 2, -1, -1):
                v = (v + coeffs[j][i]) * x % p
            row.append((v + s) % p)
        out.append(row)
    return out


def reconstruct_array_python(shares: list[list[int]], xs: list[int]) -> list[int]:
    """Plain-Python Lagrange interpolation at 0 (Python ints)."""
    p = _field.P_INT
    lam = []
    for j, xj in enumerate(xs):
        num = den = 1
        for m, xm in enumerate(xs):
            if m != j:
                num = num * xm % p
                den = den * (xm - xj) % p
        lam.append(num * pow(den, p - 2, p) % p)
    d = len(shares[0])
    return [sum(lam[j] * shares[j][i] for j in range(len(xs))) % p for i in range(d)]
