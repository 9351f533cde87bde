"""Task metric (logit difference) and circuit faithfulness scores (NFS, NDF) for query circuits."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from rml_fast._validation import Interval, check_array, check_scalar, check_tensor

__all__ = [
    "LogitDiff",
    "logit_diff",
    "ndf",
    "nfs",
    "sizes_from_densities",
]


def _ids(x: Any, name: str, batch: int, ndim: int, n_vocab: int | None = None) -> torch.Tensor:
    if isinstance(x, torch.Tensor) and x.device.type == "meta":
        raise ValueError(f"{name} must hold values, got a tensor on the 'meta' device")
    if x is None or isinstance(x, (str, bytes)):
        raise TypeError(f"{name} must be an int or integer token ids, got {type(x).__name__}")
    try:
        t = torch.as_tensor(x)
    except (RuntimeError, TypeError, ValueError, OverflowError) as exc:
        raise TypeError(f"{name} must be an int or integer token ids: {exc}") from exc
    if t.dtype not in (torch.int64, torch.int32, torch.int16, torch.uint8):
        raise TypeError(f"{name} must hold integer token ids, got {t.dtype}")
    t = t.long()
    if t.ndim == ndim - 1:
        t = t.unsqueeze(0).expand(batch, *t.shape)
    if t.ndim != ndim or t.shape[0] != batch:
        raise ValueError(
            f"{name} must have {ndim - 1} or {ndim} axes (batch {batch}), got {tuple(t.shape)}"
        )
    if ndim == 2 and t.shape[1] < 1:
        raise ValueError(f"{name} must hold at least one token id per row, got {tuple(t.shape)}")
    if n_vocab is not None and t.numel() and bool(((t < 0) | (t >= n_vocab)).any()):
        raise ValueError(f"{name} must hold token ids in [0, {n_vocab})")
    return t


def _resolve_pos(pos: Any, n_pos: int) -> int:
    """The non-negative index of answer position ``pos`` in a prompt of ``n_pos`` positions.

    Python-style: ``-1`` is the last position; anything outside ``[-n_pos, n_pos)`` raises
    ``ValueError`` naming ``pos`` (rather than wrapping around to another token).
    """
    if isinstance(pos, (bool, np.bool_)) or not isinstance(pos, (int, np.integer)):
        raise TypeError(f"pos must be an int, got {type(pos).__name__}")
    if not -n_pos <= int(pos) < n_pos:
        raise ValueError(
            f"pos must be in [-{n_pos}, {n_pos}) for a prompt of {n_pos} positions "
            f"(negative counts from the end, -1 = last), got {int(pos)}"
        )
    return int(pos) % n_pos


def _positions(pos: Any, batch: int, n_pos: int) -> torch.Tensor:
    """``pos`` (int or (B,)) checked against ``[-n_pos, n_pos)`` and made non-negative."""
    t = _ids(pos, "pos", batch, 1)
    bad = (t < -n_pos) | (t >= n_pos)
    if bool(bad.any()):
        raise ValueError(
            f"pos must be in [-{n_pos}, {n_pos}) for prompts of {n_pos} positions "
            f"(negative counts from the end, -1 = last), got {sorted(set(t[bad].tolist()))}"
        )
    return t % n_pos


def logit_diff(logits: torch.Tensor, pos: Any, pos_ids: Any, neg_ids: Any) -> torch.Tensor:
    """``L = logit[pos_id] - mean_{y in neg_ids} logit[y]`` at position ``pos`` of each row.

    Parameters
    ----------
    logits : Tensor of shape (B, P, V)
    pos : int or LongTensor of shape (B,)
        Answer position per row, in ``[-P, P)``: Python-style, negative values count from the
        end (``-1`` is the last position). Out of range raises ``ValueError``.
    pos_ids : int or LongTensor of shape (B,)
        The rewarded token.
    neg_ids : sequence of int of length K, or LongTensor of shape (B, K)
        The contrast tokens (``K >= 1``).

    Returns
    -------
    L : Tensor of shape (B,)

    Examples
    --------
    >>> import torch
    >>> from rml_fast.interp import logit_diff
    >>> logits = torch.tensor([[[0.0, 1.0, 3.0]]])
    >>> float(logit_diff(logits, 0, 2, [0, 1]))
    2.5
    """
    if not isinstance(logits, torch.Tensor) or logits.ndim != 3:
        raise ValueError("logits must be a tensor of shape (B, P, V)")
    check_tensor(logits, "logits", ndim=3, nonempty=True)
    b, p, v = logits.shape
    pos_t = _positions(pos, b, p)
    pos_ids_t = _ids(pos_ids, "pos_ids", b, 1, v)
    neg_ids_t = _ids(neg_ids, "neg_ids", b, 2, v)
    pos_t = pos_t.to(logits.device)
    rows = logits[torch.arange(b, device=logits.device), pos_t]  # [B, V]
    return _diff(rows, pos_ids_t, neg_ids_t)


def _diff(rows: torch.Tensor, pos_ids: torch.Tensor, neg_ids: torch.Tensor) -> torch.Tensor:
    pos_ids, neg_ids = pos_ids.to(rows.device), neg_ids.to(rows.device)
    good = rows.gather(-1, pos_ids[:, None])[:, 0]
    return good - rows.gather(-1, neg_ids).mean(-1)


@dataclass(frozen=True)
class LogitDiff:
    """The task metric ``L = logit[answer] - mean(logit[wrong])`` at position ``pos``.

    Used by :func:`evaluate_masks` (which then computes only the ``1 + K`` needed logits at
    the one answer position) and by :func:`eap_ig_scores` (per-row answers allowed).

    Parameters
    ----------
    pos : int
        Answer position, Python-style: ``0 <= pos < P`` from the start, ``-P <= pos < 0``
        from the end (``-1`` is the last position). A position outside ``[-P, P)`` of the
        prompt the metric is applied to raises ``ValueError``.
    answer : int or sequence of int (one per row)
    wrong : sequence of int (shared) or sequence of sequences (one per row)
    """

    pos: int
    answer: Any
    wrong: Any

    def __post_init__(self) -> None:
        if isinstance(self.pos, (bool, np.bool_)) or not isinstance(self.pos, (int, np.integer)):
            raise TypeError(f"pos must be an int, got {type(self.pos).__name__}")

    @classmethod
    def from_query(cls, query: Any) -> LogitDiff:
        """From a :class:`rml_fast.models.Query`."""
        return cls(int(query.pos), int(query.answer), tuple(int(w) for w in query.wrong))

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        """``L`` per row of ``logits`` of shape (B, P, V); returns shape (B,)."""
        return logit_diff(logits, self.pos, self.answer, self.wrong)

    def from_rows(self, rows: torch.Tensor) -> torch.Tensor:
        """``L`` from the answer-position logits ``rows`` of shape (B, V)."""
        check_tensor(rows, "rows", ndim=2, nonempty=True)
        return self._from_rows(rows, check_vocab=True)

    def _from_rows(self, rows: torch.Tensor, check_vocab: bool = False) -> torch.Tensor:
        # internal: rows may be NaN outside the metric's token ids (circuit_eval fills only those)
        b = rows.shape[0]
        v = rows.shape[1] if check_vocab else None
        return _diff(rows, _ids(self.answer, "answer", b, 1, v), _ids(self.wrong, "wrong", b, 2, v))

    def token_ids(self) -> torch.Tensor:
        """The distinct token ids the metric reads (to compute only those logits)."""
        ids = torch.cat(
            [torch.as_tensor(self.answer).flatten(), torch.as_tensor(self.wrong).flatten()]
        )
        return torch.unique(ids.long())


def _three(l_full: Any, l_circ: Any, l_corr: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    arrs = []
    for x, name in ((l_full, "l_full"), (l_circ, "l_circ"), (l_corr, "l_corr")):
        if isinstance(x, torch.Tensor):
            x = x.detach().cpu().numpy()
        arrs.append(check_array(x, name, dtypes=(np.float64,), finite=True))
    try:
        out = np.broadcast_arrays(*arrs)
    except ValueError as exc:
        raise ValueError(f"l_full, l_circ and l_corr must broadcast: {exc}") from exc
    return out[0], out[1], out[2]


def nfs(l_full: Any, l_circ: Any, l_corr: Any, eps: float = 1e-6) -> np.ndarray:
    """Normalised faithfulness ``NFS = (L(C(q)) - L(M(q'))) / (L(M(q)) - L(M(q')))``.

    Parameters
    ----------
    l_full, l_circ, l_corr : array-like (broadcastable)
        Metric of the full model on ``q``, of the circuit on ``q``, of the model on ``q'``.
    eps : float, default=1e-6
        Where ``|l_full - l_corr| < eps`` the result is NaN (degenerate query).

    Returns
    -------
    nfs : ndarray of float64 (broadcast shape)

    Examples
    --------
    >>> from rml_fast.interp import nfs
    >>> float(nfs(4.0, 5.0, 0.0))
    1.25
    """
    full, circ, corr = _three(l_full, l_circ, l_corr)
    eps = float(check_scalar(eps, "eps", Interval("real", 0, None)))
    denom = full - corr
    bad = np.abs(denom) < eps
    with np.errstate(divide="ignore", invalid="ignore"):
        out = (circ - corr) / np.where(bad, 1.0, denom)
    return np.where(bad, np.nan, out)


def ndf(l_full: Any, l_circ: Any, l_corr: Any, eps: float = 1e-6) -> np.ndarray:
    """Normalised deviation faithfulness of a circuit on one query (Wu & Barez 2025).

    ``NDF = 1 - min(|(L(M(q)) - L(C(q))) / (L(M(q)) - L(M(q')))|, 1) = max(0, 1 - |1 - NFS|)``,
    always in ``[0, 1]``; NaN where ``|L(M(q)) - L(M(q'))| < eps``.

    Parameters
    ----------
    l_full, l_circ, l_corr : array-like (broadcastable)
    eps : float, default=1e-6

    Returns
    -------
    ndf : ndarray of float64 (broadcast shape)

    References
    ----------
    Wu & Barez, "Query Circuits: Explaining How Language Models Answer User Prompts",
    arXiv:2509.24808.

    Examples
    --------
    >>> from rml_fast.interp import ndf
    >>> ndf(4.0, [3.0, 5.0, 9.0, -1.0], 0.0).tolist()
    [0.75, 0.75, 0.0, 0.0]
    """
    full, circ, corr = _three(l_full, l_circ, l_corr)
    eps = float(check_scalar(eps, "eps", Interval("real", 0, None)))
    denom = full - corr
    bad = np.abs(denom) < eps
    with np.errstate(divide="ignore", invalid="ignore"):
        dev = np.abs((full - circ) / np.where(bad, 1.0, denom))
    return np.where(bad, np.nan, 1.0 - np.minimum(dev, 1.0))


def sizes_from_densities(n_edges: int, densities: Sequence[float]) -> list[int]:
    """Circuit sizes ``max(1, round(d * n_edges))`` for densities ``d`` in (0, 1]."""
    out = []
    for d in densities:
        d = float(check_scalar(d, "densities", Interval("real", 0, 1, "right")))
        out.append(max(1, round(d * n_edges)))
    return out
