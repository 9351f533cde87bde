"""Vectorised count tensors, TV distances, resplit draws and permutations for B3IT.

Private helpers of :mod:`rml_fast.evaluation.b3it`. Tokens are encoded per prompt against that
prompt's own sorted vocabulary (the union of every token seen for it), padded to the largest
vocabulary ``V`` over prompts, as in the reference implementation; padding codes are ``-1``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

#: tests per chunk of the resplit draws (fixed, so results depend only on the seed)
RESPLIT_CHUNK = 256


def encode(groups: Sequence[Sequence[Sequence[str]]]) -> tuple[list[list[np.ndarray]], int]:
    """Encode token lists per prompt.

    ``groups[g][p]`` is the token list of group ``g`` for prompt ``p``. Returns
    ``codes[g][p]`` (int64 arrays) and ``V``, the largest per-prompt vocabulary size.
    """
    n_prompts = len(groups[0])
    vmax = 1
    out: list[list[np.ndarray]] = [[] for _ in groups]
    for p in range(n_prompts):
        vocab = sorted(set().union(*(set(g[p]) for g in groups)))
        index = {tok: i for i, tok in enumerate(vocab)}
        vmax = max(vmax, len(vocab))
        for g, group in enumerate(groups):
            out[g].append(np.fromiter((index[t] for t in group[p]), np.int64, len(group[p])))
    return out, vmax


def pad(codes: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Stack ragged code arrays into ``(P, L_max)`` with ``-1`` padding; also the lengths."""
    lengths = np.array([len(c) for c in codes], dtype=np.int64)
    out = np.full((len(codes), max(int(lengths.max()), 1)), -1, dtype=np.int64)
    for p, c in enumerate(codes):
        out[p, : len(c)] = c
    return out, lengths


def counts(codes: np.ndarray, n_bins: int, mask: np.ndarray | None = None) -> np.ndarray:
    """Histogram the last axis: ``codes (..., m)`` -> ``(..., n_bins)`` float64 counts.

    Negative codes (padding) and entries where ``mask`` is False are not counted.
    """
    lead = codes.shape[:-1]
    n_rows = int(np.prod(lead, dtype=np.int64))
    keep = codes >= 0
    if mask is not None:
        keep = keep & mask
    rows = np.broadcast_to(np.arange(n_rows).reshape(*lead, 1), codes.shape)
    flat = rows[keep] * n_bins + codes[keep]
    return np.bincount(flat, minlength=n_rows * n_bins).astype(np.float64).reshape(*lead, n_bins)


def mean_tv(c1: np.ndarray, c2: np.ndarray) -> np.ndarray:
    """Mean over prompts of the TV distance of row-normalised counts.

    ``c1, c2`` of shape ``(..., P, V)`` -> ``(...,)``; ``TV = 1/2 sum_y |p(y) - q(y)|``.
    """
    p = c1 / c1.sum(axis=-1, keepdims=True)
    q = c2 / c2.sum(axis=-1, keepdims=True)
    return 0.5 * np.abs(p - q).sum(axis=-1).mean(axis=-1)


def _first_k(rng: np.random.Generator, lengths: np.ndarray, k: int) -> np.ndarray:
    """Uniform random ordered draws without replacement: ``lengths (..., )`` -> ``(..., k)``.

    A key ``U(0, 1)`` per pool position (2.0 on padding): the positions of the ``k`` smallest
    keys in increasing key order (a partial sort, ``O(L + k log k)`` per row).
    """
    lmax = int(lengths.max())
    keys = rng.random((*lengths.shape, lmax))
    keys[np.arange(lmax) >= lengths[..., None]] = 2.0
    if k < lmax:
        idx = np.argpartition(keys, k - 1, axis=-1)[..., :k]
        sub = np.take_along_axis(keys, idx, axis=-1)
        return np.take_along_axis(idx, np.argsort(sub, axis=-1, kind="stable"), axis=-1)
    return np.argsort(keys, axis=-1, kind="stable")[..., :k]


def resplit_draws(
    rng: np.random.Generator,
    lengths_ref: np.ndarray,
    lengths_new: np.ndarray | None,
    n_prompts: int,
    n_ref: int,
    n_det: int,
    n_tests: int,
) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """The random draws of ``n_tests`` resplit tests, in chunks of :data:`RESPLIT_CHUNK`.

    Each chunk gives ``prompt_idx (t, n_prompts)`` (distinct prompts of the pool),
    ``ref_idx (t, n_prompts, n_ref)`` and ``det_idx (t, n_prompts, n_det)`` (sample positions).
    Without ``lengths_new`` (null resplits) reference and detection samples are disjoint draws
    from the one pool; with it, the detection samples come from the second pool.
    """
    total = len(lengths_ref)
    done = 0
    while done < n_tests:
        t = min(RESPLIT_CHUNK, n_tests - done)
        prompt_idx = np.argsort(rng.random((t, total)), axis=1, kind="stable")[:, :n_prompts]
        if lengths_new is None:
            both = _first_k(rng, lengths_ref[prompt_idx], n_ref + n_det)
            ref_idx, det_idx = both[..., :n_ref], both[..., n_ref:]
        else:
            ref_idx = _first_k(rng, lengths_ref[prompt_idx], n_ref)
            det_idx = _first_k(rng, lengths_new[prompt_idx], n_det)
        yield prompt_idx, ref_idx, det_idx
        done += t


def resplit_statistics(
    pool_ref: np.ndarray,
    pool_new: np.ndarray | None,
    n_bins: int,
    draws: Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]],
) -> np.ndarray:
    """Mean-TV statistic of every drawn test in one vectorised pass per chunk."""
    pool_det = pool_ref if pool_new is None else pool_new
    out = []
    for prompt_idx, ref_idx, det_idx in draws:
        rows = prompt_idx[..., None]
        c1 = counts(pool_ref[rows, ref_idx], n_bins)
        c2 = counts(pool_det[rows, det_idx], n_bins)
        out.append(mean_tv(c1, c2))
    return np.concatenate(out) if out else np.zeros(0)


def permutation_statistics(
    counts_ref: np.ndarray,
    counts_new: np.ndarray,
    n_permutations: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """Mean-TV statistic after ``n_permutations`` within-prompt reassignments of the pooled samples.

    For each prompt the ``n1 + n2`` samples of both groups are pooled and a uniformly random
    ``n1`` of them become the first group, independently across prompts and permutations. Only
    the counts matter, so the first group's counts are one multivariate hypergeometric draw
    from the pooled counts (exactly the law of the reassignment), vectorised over permutations.
    ``counts_ref, counts_new`` are ``(P, V)`` integer-valued; returns ``(n_permutations,)``.
    """
    pooled = (counts_ref + counts_new).astype(np.int64)
    n1 = counts_ref.sum(axis=1).astype(np.int64)
    c1 = np.empty((n_permutations, *pooled.shape), dtype=np.float64)
    for p in range(pooled.shape[0]):
        c1[:, p] = rng.multivariate_hypergeometric(pooled[p], int(n1[p]), size=n_permutations)
    c2 = pooled[None].astype(np.float64) - c1
    return mean_tv(c1, c2)
