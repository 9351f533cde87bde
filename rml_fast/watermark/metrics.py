"""Watermark metrics: bit accuracy, exact binomial detection, capacity, PSNR and SSIM.

DistSeal (arXiv 2601.16140, and its ``distseal/utils/metrics.py``) reports multi-bit watermarks by

* bit accuracy ``mean(b_hat == m)`` with ``b_hat = 1[logit > 0]``;
* the detection test with key ``m*`` of ``K`` bits: under H0 (an unwatermarked image) the number of
  matching bits is ``n ~ Binom(K, 1/2)``, so the p-value is ``P(Binom(K, 1/2) >= n)`` and the
  threshold at false-positive rate ``alpha`` is ``tau(alpha) = min{tau : P(Binom(K,1/2) >= tau) <=
  alpha}``; the TPR at that FPR is the fraction of watermarked images with ``n >= tau``;
* capacity ``K (1 - H2(bit_acc))`` bits, with ``H2`` the binary entropy;
* PSNR ``10 log10(data_range^2 / MSE)`` per image (equal to the ``20 log10(255) - 10 log10(MSE_255)``
  of the paper for images in [0, 1]) and SSIM (Wang et al. 2004, 7x7 uniform window, sample
  covariance, ``K1 = 0.01``, ``K2 = 0.03``: the defaults of ``skimage.metrics.structural_similarity``).

Tails are exact: integer sums of binomial coefficients (no normal approximation), tabulated once
per ``K``. All functions take NumPy arrays (torch tensors are converted) and return NumPy arrays.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

import numpy as np

from rml_fast._validation import Interval, check_array, check_scalar

__all__ = [
    "binomial_pvalue",
    "bit_accuracy",
    "capacity",
    "detection_threshold",
    "psnr",
    "ssim",
    "tpr_at_fpr",
]


def _np(x: Any, name: str, **kw: Any) -> np.ndarray:
    if hasattr(x, "detach") and hasattr(x, "cpu"):
        x = x.detach().cpu().numpy()
    return check_array(x, name, **kw)


def _check_k(K: Any) -> int:
    return int(check_scalar(K, "K", Interval("int", 1, 4096)))


@lru_cache(maxsize=64)
def _upper_tail(K: int) -> np.ndarray:
    """``tail[n] = P(Binom(K, 1/2) >= n)`` for n = 0 .. K+1 (exact integer sums, then float)."""
    counts = [math.comb(K, i) for i in range(K + 1)]
    tail = [0] * (K + 2)
    acc = 0
    for n in range(K, -1, -1):
        acc += counts[n]
        tail[n] = acc
    denom = 2**K
    out = np.array([t / denom for t in tail], dtype=np.float64)  # Python's int/int is correctly rounded
    out.setflags(write=False)
    return out


def _check_bits(m: Any, name: str, K: int | None = None) -> np.ndarray:
    arr = _np(m, name, dtypes=None, ndim=(1, 2))
    if arr.size and not np.isin(arr, (0, 1)).all():
        raise ValueError(f"{name} must hold bits in {{0, 1}}, got other values")
    if K is not None and arr.shape[-1] != K:
        raise ValueError(f"{name} must have {K} bits in its last axis, got shape {arr.shape}")
    return arr.astype(np.int8)


def bit_accuracy(logits: Any, m: Any) -> np.ndarray:
    """Fraction of decoded bits equal to the message, per image.

    Decoded bits are ``b_hat = 1[logits > 0]``; bit accuracy is ``mean_k(b_hat_k == m_k)``.

    Parameters
    ----------
    logits : array-like of shape (B, K)
        Extractor logits (or any scores thresholded at 0).
    m : array-like of shape (B, K) or (K,)
        Message bits in {0, 1} (a single message is broadcast over the batch).

    Returns
    -------
    ndarray of shape (B,)

    Examples
    --------
    >>> bit_accuracy([[2.0, -1.0, 0.5, -3.0]], [1, 0, 0, 0])
    array([0.75])
    """
    lg = _np(logits, "logits", dtypes=None, ndim=2)
    bits = _check_bits(m, "m", lg.shape[1])
    return ((lg > 0).astype(np.int8) == bits).mean(axis=1)


def binomial_pvalue(n_match: Any, K: int) -> np.ndarray:
    """Exact one-sided p-value ``P(Binom(K, 1/2) >= n_match)`` of the multi-bit detection test.

    Equal to ``scipy.stats.binomtest(n, K, 0.5, alternative="greater").pvalue``.

    Parameters
    ----------
    n_match : int or array-like of int in [0, K]
        Number of decoded bits that match the key.
    K : int
        Message length.

    Returns
    -------
    ndarray of the shape of ``n_match``, float64

    Examples
    --------
    >>> float(binomial_pvalue(8, 8))
    0.00390625
    >>> binomial_pvalue([0, 4], 8)
    array([1.        , 0.63671875])
    """
    K = _check_k(K)
    n = _np(n_match, "n_match", dtypes=None)
    if n.dtype.kind == "f" and not np.all(n == np.round(n)):
        raise ValueError("n_match must hold integers")
    if n.size and (n.min() < 0 or n.max() > K):
        raise ValueError(f"n_match must lie in [0, K={K}], got range [{n.min()}, {n.max()}]")
    return _upper_tail(K)[n.astype(np.int64)]


def detection_threshold(K: int, fpr: float) -> int:
    """Smallest number of matching bits ``tau`` whose exact H0 tail is at most ``fpr``.

    ``tau(alpha) = min{tau : P(Binom(K, 1/2) >= tau) <= alpha}``; an image is declared watermarked
    when ``n_match >= tau``, so the false-positive rate on unwatermarked images is at most
    ``alpha``. Returns ``K + 1`` (never detect) when even ``n = K`` has tail ``2^-K > alpha``.

    Parameters
    ----------
    K : int
        Message length.
    fpr : float in (0, 1]
        Nominal false-positive rate ``alpha``.

    Returns
    -------
    int

    Examples
    --------
    >>> detection_threshold(32, 1e-3), detection_threshold(8, 1e-3)
    (26, 9)
    """
    K = _check_k(K)
    fpr = float(check_scalar(fpr, "fpr", Interval("real", 0.0, 1.0, "right")))
    tail = _upper_tail(K)
    ok = np.nonzero(tail <= fpr)[0]
    return int(ok[0])


def tpr_at_fpr(n_match_wm: Any, K: int, fpr: float, n_match_clean: Any = None) -> float:
    """True-positive rate of the detection test at a false-positive rate.

    Without ``n_match_clean`` the threshold is the exact ``tau(fpr)`` of
    :func:`detection_threshold` (the paper's analytic FPR). With it, the threshold is empirical:
    the smallest ``tau`` whose rate ``mean(n_match_clean >= tau)`` on the clean images is at most
    ``fpr`` (the ROC operating point).

    Parameters
    ----------
    n_match_wm : array-like of int, shape (B,)
        Matching bits on watermarked images.
    K : int
    fpr : float in (0, 1]
    n_match_clean : array-like of int, shape (B0,), optional
        Matching bits on unwatermarked images.

    Returns
    -------
    float
        ``mean(n_match_wm >= tau)``.

    Examples
    --------
    >>> tpr_at_fpr([32, 30, 20, 27], 32, 1e-3)
    0.75
    """
    K = _check_k(K)
    fpr = float(check_scalar(fpr, "fpr", Interval("real", 0.0, 1.0, "right")))
    wm = _np(n_match_wm, "n_match_wm", dtypes=None, ndim=1)
    if wm.size == 0:
        raise ValueError("n_match_wm must not be empty")
    binomial_pvalue(wm, K)  # range checks
    if n_match_clean is None:
        tau = detection_threshold(K, fpr)
    else:
        clean = _np(n_match_clean, "n_match_clean", dtypes=None, ndim=1)
        if clean.size == 0:
            raise ValueError("n_match_clean must not be empty")
        binomial_pvalue(clean, K)
        rates = np.array([(clean >= t).mean() for t in range(K + 2)])
        tau = int(np.nonzero(rates <= fpr)[0][0])
    return float((wm >= tau).mean())


def capacity(bitacc: Any, K: int) -> np.ndarray:
    """Watermark capacity ``K (1 - H2(p))`` in bits, ``H2`` the binary entropy (``H2(0)=H2(1)=0``).

    Parameters
    ----------
    bitacc : array-like of shape (B,), values in [0, 1]
    K : int

    Returns
    -------
    ndarray of shape (B,)

    Examples
    --------
    >>> capacity([1.0, 0.5], 32)
    array([32.,  0.])
    """
    K = _check_k(K)
    p = _np(bitacc, "bitacc", dtypes=(np.float64,))
    if p.size and (p.min() < 0 or p.max() > 1):
        raise ValueError("bitacc must lie in [0, 1]")
    with np.errstate(divide="ignore", invalid="ignore"):
        h = -(p * np.log2(p) + (1 - p) * np.log2(1 - p))
    h = np.where((p == 0) | (p == 1), 0.0, h)
    return K * (1.0 - h)


def _pair(x: Any, y: Any) -> tuple[np.ndarray, np.ndarray]:
    a = _np(x, "x", ndim=(2, 3, 4))
    b = _np(y, "y", ndim=(2, 3, 4))
    if a.shape != b.shape:
        raise ValueError(f"x and y must have the same shape, got {a.shape} and {b.shape}")
    if a.ndim == 2:
        a, b = a[None, None], b[None, None]
    elif a.ndim == 3:
        a, b = a[:, None], b[:, None]
    return a.astype(np.float64), b.astype(np.float64)


def psnr(x: Any, y: Any, data_range: float = 1.0) -> np.ndarray:
    """Peak signal-to-noise ratio per image, ``10 log10(data_range^2 / mean((x - y)^2))`` in dB.

    Equal to ``skimage.metrics.peak_signal_noise_ratio(x_i, y_i, data_range=data_range)`` per
    image; ``inf`` for identical images.

    Parameters
    ----------
    x, y : array-like of shape (B, C, H, W), (B, H, W) or (H, W)
        Images (NumPy arrays or torch tensors), values in [0, data_range].
    data_range : float, default=1.0

    Returns
    -------
    ndarray of shape (B,) (shape (1,) for a single 2-D image)

    Examples
    --------
    >>> x = np.zeros((1, 1, 4, 4)); y = x.copy(); y[0, 0, 0, 0] = 0.1
    >>> np.round(psnr(x, y), 4)
    array([32.0412])
    """
    a, b = _pair(x, y)
    dr = float(check_scalar(data_range, "data_range", Interval("real", 0.0, None, "neither")))
    mse = ((a - b) ** 2).reshape(len(a), -1).mean(axis=1)
    with np.errstate(divide="ignore"):
        return 10.0 * np.log10(dr**2 / mse)


def _box_valid(img: np.ndarray, w: int) -> np.ndarray:
    """Means of every w x w window lying fully inside (..., H, W) -> (..., H-w+1, W-w+1)."""
    c = np.cumsum(np.cumsum(img, axis=-1), axis=-2)
    c = np.pad(c, [(0, 0)] * (img.ndim - 2) + [(1, 0), (1, 0)])
    s = c[..., w:, w:] - c[..., :-w, w:] - c[..., w:, :-w] + c[..., :-w, :-w]
    return s / (w * w)


def ssim(x: Any, y: Any, data_range: float = 1.0, win_size: int = 7) -> np.ndarray:
    """Mean structural similarity per image (Wang et al. 2004), averaged over channels.

    With local means ``mu``, sample variances ``v`` and covariance ``v_xy`` over ``win_size^2``
    uniform windows, ``S = (2 mu_x mu_y + C1)(2 v_xy + C2) / ((mu_x^2 + mu_y^2 + C1)(v_x + v_y +
    C2))``, ``C1 = (0.01 L)^2``, ``C2 = (0.03 L)^2`` (``L = data_range``), averaged over the windows
    that lie inside the image. Equal to ``skimage.metrics.structural_similarity`` with its defaults
    (``channel_axis`` set for colour images).

    Parameters
    ----------
    x, y : array-like of shape (B, C, H, W), (B, H, W) or (H, W)
        Images with H, W >= ``win_size``.
    data_range : float, default=1.0
    win_size : int, default=7
        Odd window side.

    Returns
    -------
    ndarray of shape (B,)

    Examples
    --------
    >>> x = np.random.default_rng(0).random((2, 3, 16, 16))
    >>> ssim(x, x)
    array([1., 1.])
    """
    a, b = _pair(x, y)
    L = float(check_scalar(data_range, "data_range", Interval("real", 0.0, None, "neither")))
    w = int(check_scalar(win_size, "win_size", Interval("int", 1, None)))
    if w % 2 == 0:
        raise ValueError(f"win_size must be odd, got {w}")
    if min(a.shape[-2:]) < w:
        raise ValueError(f"images must be at least {w}x{w} for win_size={w}, got {a.shape[-2:]}")
    n = w * w
    cov = n / (n - 1.0)
    ux, uy = _box_valid(a, w), _box_valid(b, w)
    uxx, uyy, uxy = _box_valid(a * a, w), _box_valid(b * b, w), _box_valid(a * b, w)
    vx, vy, vxy = cov * (uxx - ux * ux), cov * (uyy - uy * uy), cov * (uxy - ux * uy)
    c1, c2 = (0.01 * L) ** 2, (0.03 * L) ** 2
    s = ((2 * ux * uy + c1) * (2 * vxy + c2)) / ((ux**2 + uy**2 + c1) * (vx + vy + c2))
    return s.mean(axis=(-2, -1)).mean(axis=1)
