"""Dirac gradient canaries and the training loop of the one-run training audit.

Private helpers of :func:`rml_fast.privacy.auditing.audit_dp_training`. The model is a
logistic regression on the real features (plus a bias column) with ``m`` extra input
columns, one per canary. Canary ``j`` is the row ``x = c e_{d+1+j}`` with the *linear*
loss ``-<w, x>``, so its per-sample gradient is ``-c e_{d+1+j}`` at every iterate: a Dirac
canary in gradient space (Steinke, Nasr & Jagielski, arXiv 2305.08846, Sec. 6), of norm
``c``, clipped to exactly the clipping norm when ``c`` exceeds it, and no other sample
(real or canary) has a gradient on that coordinate. The white-box score of canary ``j`` is
the final weight ``w_{d+1+j}`` (a post-processing of the released iterates).
"""

from __future__ import annotations

from typing import Any

import numpy as np

CANARY_TARGET = -1.0  # target value marking a canary row (real targets are 0 / 1)


def canary_dataset(
    X: np.ndarray, y: np.ndarray, included: np.ndarray, scale: float
) -> tuple[np.ndarray, np.ndarray]:
    """The training set: real rows ``[X, 1, 0...]`` and the included canaries' rows.

    Returns ``(features (n + k, d + 1 + m), targets (n + k,))``, float64, with ``k`` the
    number of included canaries.
    """
    n, d = X.shape
    m = included.shape[0]
    idx = np.flatnonzero(included)
    feats = np.zeros((n + idx.size, d + 1 + m))
    feats[:n, :d] = X
    feats[:n, d] = 1.0
    feats[n + np.arange(idx.size), d + 1 + idx] = scale
    targets = np.concatenate([y.astype(np.float64), np.full(idx.size, CANARY_TARGET)])
    return feats, targets


def canary_loss(out: Any, target: Any) -> Any:
    """Per-sample losses (B,): logistic loss for real rows, ``-<w, x>`` for canaries."""
    import torch

    z = out.reshape(-1)
    bce = torch.nn.functional.binary_cross_entropy_with_logits(
        z, target.clamp(0.0, 1.0), reduction="none"
    )
    return torch.where(target < 0, -z, bce)


def train_with_canaries(
    X: np.ndarray,
    y: np.ndarray,
    included: np.ndarray,
    *,
    scale: float,
    algorithm: str,
    noise_multiplier: float,
    sample_rate: float,
    steps: int,
    lr: float,
    anchor_clip: float,
    seed: int,
    batch_rng: np.random.Generator,
    optimizer_kwargs: dict[str, Any],
    progress: bool,
) -> tuple[np.ndarray, float]:
    """Train once with Poisson batches; returns (final weights (d + 1 + m,), train accuracy).

    The expected batch size is ``q (n + m / 2)``: a public constant that does not depend on
    which canaries were included.
    """
    import torch
    from tqdm.auto import tqdm

    from rml_fast.privacy.dp_c4 import DPC4Optimizer

    n, d = X.shape
    m = included.shape[0]
    feats, targets = canary_dataset(X, y, included, scale)
    xt, yt = torch.from_numpy(feats), torch.from_numpy(targets)
    model = torch.nn.Linear(d + 1 + m, 1, bias=False).double()
    with torch.no_grad():
        model.weight.zero_()
    expected = max(1, round(sample_rate * (n + m / 2)))
    opt = DPC4Optimizer(
        model, lr=lr, noise_multiplier=noise_multiplier, expected_batch_size=expected,
        sample_rate=sample_rate, anchor_clip=anchor_clip, algorithm=algorithm, seed=seed,
        **optimizer_kwargs,
    )
    total = feats.shape[0]
    for _ in tqdm(range(steps), disable=not progress, desc=f"{algorithm} canary audit"):
        batch = torch.from_numpy(np.flatnonzero(batch_rng.random(total) < sample_rate))
        opt.step(canary_loss, xt[batch], yt[batch])
    w = model.weight.detach().numpy()[0].copy()
    logits = feats[:n] @ w
    accuracy = float(np.mean((logits > 0) == (y > 0.5))) if n else float("nan")
    return w, accuracy
