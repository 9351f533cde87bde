"""Vectorised metrics and the stratified percentile bootstrap behind :mod:`.fakeworld`.

All classification metrics are computed from per-resample confusion counts built with one
``np.bincount`` per chunk of resamples, so the point estimate (the identity resample) and every
bootstrap replicate go through the same code. Conventions follow scikit-learn:

* ``balanced_accuracy`` = mean recall over the classes present in ``y_true``;
* ``macro_f1`` = mean F1 over the classes present in ``y_true`` or ``y_pred`` (a class with no
  true and no predicted sample is skipped, as sklearn's default ``labels`` does); a predicted
  code equal to ``n_classes`` means "invalid / parse failure": never correct, never a class;
* ``auroc`` = the Mann-Whitney statistic with ties counted 1/2 (``roc_auc_score``).

Bootstrap draws (documented so that a brute-force loop can reproduce them): resamples come in
chunks of ``_CHUNK`` rows; within a chunk, for each stratum in ascending code order, one call
``rng.integers(0, n_s, size=(rows, n_s), dtype=np.int32)`` picks members of that stratum (members listed in
ascending instance order); the columns of all strata are concatenated.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator

import numba
import numpy as np

_CHUNK = 64
_TOKEN = re.compile(r"[a-z0-9]+")


# --------------------------------------------------------------------------- resampling


def resample_chunks(
    strata: np.ndarray, n_bootstrap: int, rng: np.random.Generator
) -> Iterator[np.ndarray]:
    """Yield int32 index arrays of shape (rows, n), rows <= _CHUNK, n_bootstrap rows in all."""
    strata = np.asarray(strata)
    codes = np.unique(strata)
    members = [np.flatnonzero(strata == c).astype(np.int32) for c in codes]
    done = 0
    while done < n_bootstrap:
        rows = min(_CHUNK, n_bootstrap - done)
        parts = [m[rng.integers(0, m.size, size=(rows, m.size), dtype=np.int32)]
                 for m in members]
        yield np.concatenate(parts, axis=1)
        done += rows


# --------------------------------------------------------------------------- confusion metrics


def confusion_counts(
    y_true: np.ndarray, y_pred: np.ndarray, n_classes: int, idx: np.ndarray
) -> np.ndarray:
    """Counts of shape (rows, n_classes, n_classes + 1) for each row of ``idx``."""
    kp = n_classes + 1
    codes = y_true.astype(np.int64) * kp + y_pred.astype(np.int64)
    counts = _row_counts(idx, codes, n_classes * kp)
    return counts.reshape(idx.shape[0], n_classes, kp)


def from_confusion(cm: np.ndarray) -> dict[str, np.ndarray]:
    """accuracy, balanced_accuracy, macro_f1 (and, for 2 classes, f1 of class 1) per row."""
    k = cm.shape[1]
    sq = cm[:, :, :k]
    diag = np.diagonal(sq, axis1=1, axis2=2)
    row = cm.sum(axis=2)
    col = sq.sum(axis=1)
    total = row.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        acc = diag.sum(axis=1) / total
        recall = np.where(row > 0, diag / np.where(row > 0, row, 1), np.nan)
        bal = np.nanmean(np.where(row > 0, recall, np.nan), axis=1)
        denom = row + col
        f1 = np.where(denom > 0, 2 * diag / np.where(denom > 0, denom, 1), np.nan)
        present = denom > 0
        macro = np.where(present.any(axis=1), np.nansum(f1, axis=1) / present.sum(axis=1), np.nan)
    out = {"accuracy": acc, "balanced_accuracy": bal, "macro_f1": macro}
    if k == 2:
        out["f1"] = np.where(denom[:, 1] > 0, np.nan_to_num(f1[:, 1]), 0.0)
    return out


# --------------------------------------------------------------------------- ranking metrics


def auroc_rows(y: np.ndarray, s: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """Tie-aware AUROC (Mann-Whitney / (n0 n1)) of each resample; NaN if one class is absent.

    Scores are grouped by distinct value once; per resample only group counts are needed:
    AUC = sum_g pos_g (neg_{<g} + neg_g / 2) / (P N).
    """
    _, g = np.unique(s, return_inverse=True)
    n_g = int(g.max()) + 1 if g.size else 0
    both = _row_counts(idx, 2 * g.astype(np.int64) + (y > 0), 2 * n_g)
    both = both.reshape(idx.shape[0], n_g, 2)
    neg, pos = both[:, :, 0], both[:, :, 1]
    neg_below = np.cumsum(neg, axis=1) - neg
    p_tot = pos.sum(axis=1)
    n_tot = neg.sum(axis=1)
    num = (pos * (neg_below + 0.5 * neg)).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where((p_tot > 0) & (n_tot > 0), num / (p_tot * n_tot), np.nan)


def average_precision(y: np.ndarray, s: np.ndarray) -> float:
    """Step-wise average precision sum_k (R_k - R_{k-1}) P_k over distinct thresholds (sklearn's)."""
    y = y.astype(bool)
    if not y.any():
        return float("nan")
    order = np.argsort(-s, kind="mergesort")
    s_sorted, y_sorted = s[order], y[order]
    last = np.r_[np.flatnonzero(np.diff(s_sorted) != 0), s_sorted.size - 1]
    tp = np.cumsum(y_sorted)[last]
    fp = (last + 1) - tp
    precision = tp / (tp + fp)
    recall = tp / y.sum()
    return float(np.sum(np.diff(np.r_[0.0, recall]) * precision))


def ece_rows(conf: np.ndarray, correct: np.ndarray, n_bins: int, idx: np.ndarray) -> np.ndarray:
    """Expected calibration error sum_b |sum_{i in b} (conf_i - correct_i)| / n per resample,
    equal-width bins on [0, 1] (the top bin closed)."""
    b = np.minimum((conf * n_bins).astype(np.int64), n_bins - 1)
    diff = conf - correct.astype(np.float64)
    return np.abs(_row_sums(idx, b, diff, n_bins)).sum(axis=1) / idx.shape[1]


def mean_rows(values: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """Mean of ``values`` over each resample."""
    z = np.zeros(values.shape[0], np.int64)
    return _row_sums(idx, z, values.astype(np.float64), 1)[:, 0] / idx.shape[1]


def row_counts(idx: np.ndarray, n: int) -> np.ndarray:
    """Multiplicity of each instance 0..n-1 in each resample, shape (rows, n), float64."""
    return _row_counts(idx, np.arange(n, dtype=np.int64), n)


@numba.njit(cache=True)
def _row_counts_kernel(idx, codes, n_codes):  # pragma: no cover - compiled
    out = np.zeros((idx.shape[0], n_codes), np.float64)
    for r in range(idx.shape[0]):
        for j in range(idx.shape[1]):
            out[r, codes[idx[r, j]]] += 1.0
    return out


@numba.njit(cache=True)
def _row_sums_kernel(idx, codes, values, n_codes):  # pragma: no cover - compiled
    out = np.zeros((idx.shape[0], n_codes), np.float64)
    for r in range(idx.shape[0]):
        for j in range(idx.shape[1]):
            i = idx[r, j]
            out[r, codes[i]] += values[i]
    return out


def _row_counts(idx: np.ndarray, codes: np.ndarray, n_codes: int) -> np.ndarray:
    """counts[r, c] = #{j : codes[idx[r, j]] == c} (one pass, no index copies)."""
    return _row_counts_kernel(np.ascontiguousarray(idx), np.ascontiguousarray(codes, np.int64),
                              n_codes)


def _row_sums(idx: np.ndarray, codes: np.ndarray, values: np.ndarray, n_codes: int) -> np.ndarray:
    """sums[r, c] = sum of values[i] over resampled i with codes[i] == c."""
    return _row_sums_kernel(np.ascontiguousarray(idx), np.ascontiguousarray(codes, np.int64),
                            np.ascontiguousarray(values, np.float64), n_codes)


# --------------------------------------------------------------------------- rationale overlap


def tokens(text: str) -> list[str]:
    """Lower-case alphanumeric tokens (the default tokenizer of the ``rouge-score`` package)."""
    return _TOKEN.findall(text.lower())


@numba.njit(cache=True)
def _lcs(a: np.ndarray, b: np.ndarray) -> int:  # pragma: no cover - compiled
    m = b.shape[0]
    prev = np.zeros(m + 1, np.int64)
    cur = np.zeros(m + 1, np.int64)
    for i in range(a.shape[0]):
        for j in range(m):
            if a[i] == b[j]:
                cur[j + 1] = prev[j] + 1
            else:
                cur[j + 1] = max(prev[j + 1], cur[j])
        for j in range(m + 1):
            prev[j] = cur[j]
    return prev[m]  # type: ignore[return-value]  # an int64 scalar under numba


def lcs_length(a: list[str], b: list[str]) -> int:
    """Length of the longest common subsequence of two token lists."""
    if not a or not b:
        return 0
    vocab: dict[str, int] = {}
    ai = np.array([vocab.setdefault(t, len(vocab)) for t in a], np.int64)
    bi = np.array([vocab.setdefault(t, len(vocab)) for t in b], np.int64)
    return int(_lcs(ai, bi))


def rouge_l(prediction: str, reference: str) -> float:
    """ROUGE-L F1: P = LCS/|pred|, R = LCS/|ref|, F = 2PR/(P+R); 0 when either is empty."""
    p, r = tokens(prediction), tokens(reference)
    lcs = lcs_length(p, r)
    if lcs == 0:
        return 0.0
    prec, rec = lcs / len(p), lcs / len(r)
    return 2 * prec * rec / (prec + rec)


def token_f1(prediction: str, reference: str) -> float:
    """Bag-of-tokens F1 (SQuAD): overlap of token multisets; 1 if both are empty, 0 if one is."""
    p, r = tokens(prediction), tokens(reference)
    if not p and not r:
        return 1.0
    common = sum((Counter(p) & Counter(r)).values())
    if common == 0:
        return 0.0
    prec, rec = common / len(p), common / len(r)
    return 2 * prec * rec / (prec + rec)


# --------------------------------------------------------------------------- evidence


def interval_iou(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    """IoU of half-open segments [a0, a1) and [b0, b1) (temporal IoU)."""
    inter = max(0.0, min(a[1], b[1]) - max(a[0], b[0]))
    union = (a[1] - a[0]) + (b[1] - b[0]) - inter
    return inter / union if union > 0 else 0.0


def box_iou(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    """IoU of boxes (r0, c0, r1, c1), half-open."""
    ih = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iw = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ih * iw
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0
