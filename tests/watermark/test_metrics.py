"""DistSeal metrics against scipy / scikit-image and closed forms (spec robust_media §2.4)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats
from skimage.metrics import peak_signal_noise_ratio, structural_similarity

from rml_fast.watermark.metrics import (
    binomial_pvalue,
    bit_accuracy,
    capacity,
    detection_threshold,
    psnr,
    ssim,
    tpr_at_fpr,
)


@pytest.mark.parametrize("K", [1, 8, 32, 64, 256])
def test_binomial_pvalue_equals_scipy_binomtest(K):
    ns = np.unique(np.linspace(0, K, 12).astype(int))
    ours = binomial_pvalue(ns, K)
    ref = [stats.binomtest(int(n), K, 0.5, alternative="greater").pvalue for n in ns]
    np.testing.assert_allclose(ours, ref, rtol=1e-12, atol=0)


@pytest.mark.parametrize(("K", "fpr"), [(8, 1e-2), (32, 1e-3), (48, 1e-4), (64, 1e-6), (256, 1e-3)])
def test_detection_threshold_is_the_exact_smallest_tail(K, fpr):
    tau = detection_threshold(K, fpr)
    tail = lambda t: sum(math.comb(K, i) for i in range(t, K + 1)) / 2**K  # noqa: E731
    assert tail(tau) <= fpr
    assert tau == 0 or tail(tau - 1) > fpr


def test_detection_threshold_never_detects_below_2_pow_minus_K():
    assert detection_threshold(8, 1e-3) == 9  # 2^-8 = 0.0039 > 1e-3


@pytest.mark.parametrize(("K", "fpr"), [(16, 0.05), (32, 0.01)])
def test_monte_carlo_fpr_on_random_bits_matches_nominal(K, fpr):
    # under H0 decoded bits are independent fair coins; the realised FPR must equal the exact
    # tail at tau (<= fpr), within 4 binomial standard errors
    rng = np.random.default_rng(0)
    n = 200_000
    key = rng.integers(0, 2, K)
    bits = rng.integers(0, 2, (n, K))
    n_match = (bits == key).sum(1)
    tau = detection_threshold(K, fpr)
    exact = float(binomial_pvalue(tau, K))
    emp = float((n_match >= tau).mean())
    assert exact <= fpr
    assert abs(emp - exact) < 4 * math.sqrt(exact * (1 - exact) / n)
    assert tpr_at_fpr(n_match, K, fpr) == pytest.approx(emp)


def test_tpr_at_fpr_with_clean_uses_empirical_threshold():
    clean = np.array([10, 12, 14, 16, 18, 20, 22, 24, 26, 28])
    wm = np.array([20, 25, 27, 30])
    # fpr 0.2: smallest tau with mean(clean >= tau) <= 0.2 is 25 (26, 28) -> 3 of 4 pass
    assert tpr_at_fpr(wm, 32, 0.2, n_match_clean=clean) == 0.75
    assert tpr_at_fpr(wm, 32, 1e-3) == np.mean(wm >= detection_threshold(32, 1e-3))


def test_bit_accuracy_and_capacity_closed_forms():
    logits = np.array([[1.0, -1.0, 1.0, -1.0], [-1.0, -1.0, -1.0, -1.0]])
    m = np.array([1, 0, 0, 0])
    np.testing.assert_array_equal(bit_accuracy(logits, m), [0.75, 0.75])
    np.testing.assert_array_equal(bit_accuracy(torch.tensor(logits), np.array([m, 1 - m])),
                                  [0.75, 0.25])
    p = np.array([0.0, 0.11, 0.5, 0.9, 1.0])
    h = np.array([0.0] + [-(q * math.log2(q) + (1 - q) * math.log2(1 - q)) for q in p[1:-1]] + [0.0])
    np.testing.assert_allclose(capacity(p, 64), 64 * (1 - h), rtol=1e-12)


def test_psnr_equals_skimage():
    rng = np.random.default_rng(1)
    x = rng.random((4, 3, 24, 20))
    y = np.clip(x + 0.03 * rng.standard_normal(x.shape), 0, 1)
    ref = [peak_signal_noise_ratio(x[i], y[i], data_range=1) for i in range(4)]
    np.testing.assert_allclose(psnr(x, y), ref, rtol=1e-12)
    np.testing.assert_allclose(psnr(torch.tensor(x, dtype=torch.float32),
                                    torch.tensor(y, dtype=torch.float32)), ref, rtol=1e-4)
    assert np.isinf(psnr(x, x)).all()


@pytest.mark.parametrize("shape", [(3, 3, 32, 32), (2, 1, 17, 23), (2, 9, 9)])
def test_ssim_equals_skimage(shape):
    rng = np.random.default_rng(2)
    x = rng.random(shape)
    y = np.clip(0.7 * x + 0.3 * rng.random(shape), 0, 1)
    ours = ssim(x, y)
    if len(shape) == 4 and shape[1] > 1:
        ref = [structural_similarity(x[i], y[i], data_range=1, channel_axis=0) for i in range(shape[0])]
    else:
        xs, ys = x.reshape(shape[0], *shape[-2:]), y.reshape(shape[0], *shape[-2:])
        ref = [structural_similarity(xs[i], ys[i], data_range=1) for i in range(shape[0])]
    np.testing.assert_allclose(ours, ref, rtol=1e-9, atol=1e-12)


def test_bad_inputs_name_the_argument():
    with pytest.raises(ValueError, match="n_match"):
        binomial_pvalue(33, 32)
    with pytest.raises(ValueError, match="fpr"):
        detection_threshold(32, 0.0)
    with pytest.raises(TypeError, match="K"):
        detection_threshold(32.5, 0.1)
    with pytest.raises(ValueError, match="m must hold bits"):
        bit_accuracy(np.zeros((1, 4)), [0, 1, 2, 0])
    with pytest.raises(ValueError, match="4 bits"):
        bit_accuracy(np.zeros((1, 4)), [0, 1, 1])
    with pytest.raises(ValueError, match="same shape"):
        psnr(np.zeros((1, 3, 8, 8)), np.zeros((1, 3, 8, 9)))
    with pytest.raises(ValueError, match="bitacc"):
        capacity([1.2], 8)
    with pytest.raises(ValueError, match="win_size"):
        ssim(np.zeros((1, 8, 8)), np.zeros((1, 8, 8)), win_size=4)
