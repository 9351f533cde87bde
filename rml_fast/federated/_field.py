"""Exact arithmetic in the Mersenne prime field GF(P), P = 2^61 - 1, on uint64 arrays.

No floating point touches a field element. A product of two elements (< 2^61 each) is formed from
32-bit halves, ``a*b = hi*2^64 + mid*2^32 + lo``, and folded with ``2^61 = 1 (mod P)``:
``2^64 = 8``, ``mid*2^32 = (mid >> 29) + (mid & (2^29-1))*2^32``, ``lo = (lo >> 61) + (lo & P)``;
every partial sum stays below 2^64, so unsigned wrap-around never happens. The numba kernels run in
parallel over chunks; each has a NumPy twin (``*_numpy``) and the tests compare both with Python's
exact integers.

Fixed-point encoding of reals: ``x -> round(x * 2^f) mod P``, decoded signed (values above P/2 are
negative).
"""

from __future__ import annotations

import numba
import numpy as np

P_INT = (1 << 61) - 1
P = np.uint64(P_INT)
HALF_P = P_INT // 2

_M32 = np.uint64(0xFFFFFFFF)
_M29 = np.uint64((1 << 29) - 1)
_S32 = np.uint64(32)
_S29 = np.uint64(29)
_S61 = np.uint64(61)
_S3 = np.uint64(3)
_ZERO = np.uint64(0)


@numba.njit(inline="always", cache=True)
def _fold(x):  # x < 2^64 -> x mod P (fully reduced)
    x = (x & P) + (x >> _S61)
    if x >= P:
        x -= P
    return x


@numba.njit(inline="always", cache=True)
def _mulmod(a, b):  # a, b < P -> a*b mod P
    a0 = a & _M32
    a1 = a >> _S32
    b0 = b & _M32
    b1 = b >> _S32
    lo = a0 * b0  # < 2^64
    mid = a0 * b1 + a1 * b0  # < 2^62
    hi = a1 * b1  # < 2^58
    s = (hi << _S3) + (mid >> _S29) + ((mid & _M29) << _S32) + (lo & P) + (lo >> _S61)
    return _fold(s)  # s < 2^61 + 2^33 + 2^61 + 2^61 + 8 < 2^63


@numba.njit(inline="always", cache=True)
def _addmod(a, b):
    s = a + b
    if s >= P:
        s -= P
    return s


@numba.njit(cache=True)
def _mul_scalar_kernel(a, b):
    return _mulmod(a, b)


def _mul_kernel_py(a, b, out):
    for i in numba.prange(a.shape[0]):
        out[i] = _mulmod(a[i], b[i])


def _chunks(n: int) -> int:
    return max(1, min(n // 65536 + 1, 4 * numba.get_num_threads()))


def _dot_kernel_py(a, b, nchunks):
    n = a.shape[0]
    partial = np.zeros(nchunks, dtype=np.uint64)
    step = (n + nchunks - 1) // nchunks
    for c in numba.prange(nchunks):
        acc = _ZERO
        lo = c * step
        hi = min(n, lo + step)
        for i in range(lo, hi):
            acc = _addmod(acc, _mulmod(a[i], b[i]))
        partial[c] = acc
    total = _ZERO
    for c in range(nchunks):
        total = _addmod(total, partial[c])
    return total


def _horner_kernel_py(secret, coeffs, xs, out):
    # out[k, i] = secret[i] + sum_j coeffs[j, i] * xs[k]^(j+1)  (mod P), by Horner
    m = coeffs.shape[0]
    n = secret.shape[0]
    for i in numba.prange(n):
        for k in range(xs.shape[0]):
            x = xs[k]
            v = _ZERO
            for j in range(m - 1, -1, -1):
                v = _mulmod(_addmod(v, coeffs[j, i]), x)
            out[k, i] = _addmod(v, secret[i])


def _combine_kernel_py(shares, lam, out):
    # out[i] = sum_j lam[j] * shares[j, i]  (mod P)
    for i in numba.prange(shares.shape[1]):
        acc = _ZERO
        for j in range(shares.shape[0]):
            acc = _addmod(acc, _mulmod(lam[j], shares[j, i]))
        out[i] = acc


def _encode_kernel_py(x, scale, out, bad):
    # out[i] = round(x[i] * scale) mod P ; bad[0] = 1 when |round(x*scale)| > HALF_P
    lim = float(HALF_P)
    for i in numba.prange(x.shape[0]):
        v = np.rint(x[i] * scale)
        if not (abs(v) < lim):
            bad[0] = 1
            out[i] = _ZERO
        elif v < 0:
            out[i] = P - np.uint64(-np.int64(v))
        else:
            out[i] = np.uint64(np.int64(v))


#: Below this many elements the serial kernels run (thread start-up costs more than it saves).
PARALLEL_MIN = 1 << 18

_SERIAL = {}
_PARALLEL = {}
for _name, _fn in (("mul", _mul_kernel_py), ("dot", _dot_kernel_py), ("horner", _horner_kernel_py),
                   ("combine", _combine_kernel_py), ("encode", _encode_kernel_py)):
    _SERIAL[_name] = numba.njit(cache=True, nogil=True)(_fn)
    _PARALLEL[_name] = numba.njit(parallel=True, cache=True)(_fn)


def _k(name: str, n: int):
    return (_PARALLEL if n >= PARALLEL_MIN and numba.get_num_threads() > 1 else _SERIAL)[name]


# --- public helpers of this private module --------------------------------------------------


def as_field(a: np.ndarray) -> np.ndarray:
    """Contiguous uint64 view/copy of an array already holding field elements."""
    return np.ascontiguousarray(a, dtype=np.uint64)


def mulmod(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Elementwise ``a * b mod P`` of uint64 arrays of field elements (numba)."""
    a, b = np.broadcast_arrays(as_field(a), as_field(b))
    a, b = np.ascontiguousarray(a).ravel(), np.ascontiguousarray(b).ravel()
    out = np.empty_like(a)
    _k("mul", a.shape[0])(a, b, out)
    return out


def mulmod_numpy(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """NumPy twin of :func:`mulmod` (same 32-bit-halves folding, vectorised)."""
    a = np.asarray(a, dtype=np.uint64)
    b = np.asarray(b, dtype=np.uint64)
    a0, a1 = a & _M32, a >> _S32
    b0, b1 = b & _M32, b >> _S32
    lo = a0 * b0
    mid = a0 * b1 + a1 * b0
    hi = a1 * b1
    s = (hi << _S3) + (mid >> _S29) + ((mid & _M29) << _S32) + (lo & P) + (lo >> _S61)
    s = (s & P) + (s >> _S61)
    return np.where(s >= P, s - P, s)


def dot(a: np.ndarray, b: np.ndarray) -> int:
    """``sum_i a_i b_i mod P`` of two uint64 vectors of field elements (numba, parallel)."""
    a, b = as_field(a).ravel(), as_field(b).ravel()
    if a.shape != b.shape:
        raise ValueError(f"field vectors differ in length: {a.shape[0]} vs {b.shape[0]}")
    n = a.shape[0]
    return int(_k("dot", n)(a, b, _chunks(n) if n >= PARALLEL_MIN else 1))


def dots(a: np.ndarray, bs: list[np.ndarray], *, block: int = 1 << 15) -> list[int]:
    """``[sum_i a_i b_i mod P for b in bs]``: one vector against many, cache-blocked.

    ``a`` is read once per block of ``block`` elements and reused for every ``b`` while it is in
    cache; the range is split over ``numba.get_num_threads()`` Python threads (the serial kernel
    releases the GIL) when it has at least ``PARALLEL_MIN`` elements.
    """
    a = as_field(a).ravel()
    bs = [as_field(b).ravel() for b in bs]
    n = a.shape[0]
    for b in bs:
        if b.shape[0] != n:
            raise ValueError(f"field vectors differ in length: {n} vs {b.shape[0]}")
    kernel = _SERIAL["dot"]

    def run(lo: int, hi: int) -> list[int]:
        acc = [0] * len(bs)
        for start in range(lo, hi, block):
            stop = min(hi, start + block)
            aa = a[start:stop]
            for j, b in enumerate(bs):
                acc[j] += int(kernel(aa, b[start:stop], 1))
        return acc

    threads = numba.get_num_threads()
    if n < PARALLEL_MIN or threads <= 1:
        parts = [run(0, n)]
    else:
        from concurrent.futures import ThreadPoolExecutor

        step = -(-n // threads)
        with ThreadPoolExecutor(threads) as pool:
            parts = list(pool.map(lambda lo: run(lo, min(n, lo + step)), range(0, n, step)))
    return [sum(p[j] for p in parts) % P_INT for j in range(len(bs))]


def dot_numpy(a: np.ndarray, b: np.ndarray) -> int:
    """NumPy twin of :func:`dot`: vectorised products, their 32-bit halves summed without wrap."""
    prod = mulmod_numpy(np.ravel(a), np.ravel(b))
    lo = int((prod & _M32).sum(dtype=np.uint64))  # < 2^32 * len: no wrap below 2^32 terms
    hi = int((prod >> _S32).sum(dtype=np.uint64))
    return ((hi << 32) + lo) % P_INT


def encode(x: np.ndarray, frac_bits: int) -> np.ndarray:
    """Fixed-point field encoding ``round(x * 2^frac_bits) mod P`` (exact for |x 2^f| < P/2).

    Raises
    ------
    ValueError
        If some ``|x * 2^frac_bits|`` is not below ``P / 2`` (it would wrap around) or not finite.
    """
    x = np.ascontiguousarray(np.asarray(x, dtype=np.float64)).ravel()
    out = np.empty(x.shape[0], dtype=np.uint64)
    bad = np.zeros(1, dtype=np.int64)
    _k("encode", x.shape[0])(x, float(2.0 ** frac_bits), out, bad)
    if bad[0]:
        raise ValueError(
            f"values times 2^{frac_bits} must lie strictly within +-(P-1)/2 = +-{HALF_P} "
            "(and be finite) to be encoded without wrap-around"
        )
    return out


def decode_signed_int(u: np.ndarray | int) -> np.ndarray | int:
    """Field elements to signed integers: ``u`` if ``u <= (P-1)/2`` else ``u - P``."""
    if isinstance(u, (int, np.integer)):
        v = int(u) % P_INT
        return v - P_INT if v > HALF_P else v
    u = np.asarray(u, dtype=np.uint64)
    return np.where(u > np.uint64(HALF_P), u.astype(np.int64) - np.int64(P_INT), u.astype(np.int64))


def decode(u: np.ndarray, frac_bits: int) -> np.ndarray:
    """Signed fixed-point decoding of field elements: ``decode_signed_int(u) / 2^frac_bits``."""
    return np.asarray(decode_signed_int(u), dtype=np.float64) / float(2.0 ** frac_bits)


def horner_shares(secret: np.ndarray, coeffs: np.ndarray, xs: np.ndarray) -> np.ndarray:
    """Evaluate ``f(x) = secret + sum_j coeffs[j] x^(j+1)`` at every ``x`` in ``xs``: shape (K, D)."""
    secret = as_field(secret).ravel()
    coeffs = np.ascontiguousarray(coeffs, dtype=np.uint64).reshape(-1, secret.shape[0])
    xs = as_field(xs).ravel()
    out = np.empty((xs.shape[0], secret.shape[0]), dtype=np.uint64)
    _k("horner", secret.shape[0] * xs.shape[0])(secret, coeffs, xs, out)
    return out


def combine(shares: np.ndarray, lam: np.ndarray) -> np.ndarray:
    """``sum_j lam[j] * shares[j] mod P`` for shares of shape (m, D): shape (D,)."""
    shares = np.ascontiguousarray(shares, dtype=np.uint64)
    shares = shares.reshape(shares.shape[0], -1)
    out = np.empty(shares.shape[1], dtype=np.uint64)
    _k("combine", shares.size)(shares, as_field(lam).ravel(), out)
    return out


def inverse(a: int) -> int:
    """Multiplicative inverse in GF(P) (Fermat), of a non-zero element."""
    a = int(a) % P_INT
    if a == 0:
        raise ZeroDivisionError("0 has no inverse in GF(P)")
    return pow(a, P_INT - 2, P_INT)


def lagrange_at_zero(xs: list[int]) -> np.ndarray:
    """Lagrange weights ``lambda_j = prod_{m != j} x_m / (x_m - x_j) mod P`` for distinct non-zero xs."""
    xs = [int(x) % P_INT for x in xs]
    out = []
    for j, xj in enumerate(xs):
        num, den = 1, 1
        for m, xm in enumerate(xs):
            if m != j:
                num = num * xm % P_INT
                den = den * ((xm - xj) % P_INT) % P_INT
        out.append(num * inverse(den) % P_INT)
    return np.array(out, dtype=np.uint64)
