"""Behavioural vs hidden-state semantic geometry: forced choice, free association and RSA.

Schiekiera, Zimmer, Roux, Pokutta & Günther, "From Associations to Activations" (arXiv
2602.00628, ICML 2026). A language model's word associations, collected with two behavioural
paradigms, define a similarity geometry over a vocabulary that is compared, layer by layer,
with the geometry of its hidden states:

* **Forced choice** (FC): a cue and ``n_candidates`` candidate words; the model picks the
  ``n_picks`` most related (:func:`collect_forced_choice`). **Free association** (FA): the cue
  alone; the model names ``n_responses`` associates (:func:`collect_free_association`). Both take
  any black-box callable, so an API model, a local LLM or a simulated agent
  (:class:`SyntheticAgent`) plugs in.
* Trials become a cue x response count matrix ``C`` (:func:`count_matrix`), weighted by
  ``PPMI[i, r] = max(0, log(C[i, r] N / (C[i, .] C[., r])))`` (:func:`ppmi`), and the
  behavioural similarity is the cosine between cue rows (:func:`cosine_similarity_rows`).
* Hidden-state similarity at layer ``l`` is the cosine of word vectors centred across words
  (:func:`centered_cosine`); RSA is the Pearson (or Spearman) correlation of the two
  similarity matrices' upper triangles, on all pairs or a seeded sample
  (:func:`sample_pairs`, :func:`rsa`, :func:`layerwise_rsa`).
* The held-out-words regression (:class:`HeldOutWordsRegression`) asks how much behavioural
  similarity adds to lexical baselines in predicting hidden-state similarity of unseen words.

The estimators follow the paper's reference code as our spec describes it
(``specs/interp_dynamics.md`` §3).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp
from scipy.stats import rankdata

from rml_fast._validation import check_array, check_rng
from rml_fast.interp._behavior_geometry_kernels import (
    pair_from_linear,
    pearson_on_pairs,
    rowdot_on_pairs,
)

__all__ = [
    "HeldOutWordsRegression",
    "SyntheticAgent",
    "centered_cosine",
    "collect_forced_choice",
    "collect_free_association",
    "cosine_similarity_rows",
    "count_matrix",
    "layerwise_rsa",
    "ppmi",
    "rsa",
    "sample_pairs",
]


def _check_int(value: Any, name: str, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
        raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
    return int(value)


def _norm_word(w: Any) -> str:
    return str(w).strip().lower()


# --------------------------------------------------------------------------- trial collection


def collect_forced_choice(
    model: Callable[..., Sequence[str]],
    cues: Sequence[str],
    vocab: Sequence[str],
    *,
    n_candidates: int = 16,
    n_picks: int = 2,
    trials_per_cue: int | None = None,
    max_retries: int = 1,
    rng: Any = 0,
    progress: bool = False,
) -> dict[str, Any]:
    """Run forced-choice trials: ``model(cue, candidates, attempt)`` picks the related words.

    For each cue, the rest of the vocabulary is shuffled (seeded) and cut into trials of
    ``n_candidates`` candidates, so that every word is a candidate about once per cue (the
    paper's design: ``ceil((|V| - 1) / n_candidates)`` trials per cue). A reply that is not
    ``n_picks`` distinct candidates is retried up to ``max_retries`` times (``attempt`` = 1, 2,
    ...: a model may lower its temperature), then repaired with random distinct candidates.

    Parameters
    ----------
    model : callable
        ``model(cue: str, candidates: list[str], attempt: int) -> sequence of str``.
    cues : sequence of str
        Cue words (normally the vocabulary itself).
    vocab : sequence of str
        Candidate pool.
    n_candidates : int, default=16
    n_picks : int, default=2
    trials_per_cue : int, optional
        Default: enough trials to show every other word once.
    max_retries : int, default=1
    rng : int, numpy Generator or None, default=0
        Seeds the candidate shuffles and repairs.
    progress : bool, default=False
        A progress bar over cues.

    Returns
    -------
    dict
        ``cues`` (per trial), ``responses`` (the picks per trial), ``n_trials``,
        ``n_retried`` and ``n_repaired`` (trials whose reply was invalid).

    Examples
    --------
    >>> import numpy as np
    >>> words = [f"w{i}" for i in range(20)]
    >>> agent = SyntheticAgent(words, np.random.default_rng(0).normal(size=(20, 4)), beta=8, rng=1)
    >>> out = collect_forced_choice(agent.forced_choice, words, words, n_candidates=6)
    >>> out["n_trials"], len(out["responses"][0]), out["n_repaired"]
    (80, 2, 0)
    """
    if not callable(model):
        raise TypeError("model must be callable as model(cue, candidates, attempt)")
    cues = [_norm_word(c) for c in cues]
    vocab = list(dict.fromkeys(_norm_word(v) for v in vocab))
    n_candidates = _check_int(n_candidates, "n_candidates", 2)
    n_picks = _check_int(n_picks, "n_picks", 1)
    max_retries = _check_int(max_retries, "max_retries", 0)
    if n_picks >= n_candidates:
        raise ValueError(f"n_picks ({n_picks}) must be smaller than n_candidates ({n_candidates})")
    if not cues:
        raise ValueError("cues must not be empty")
    if len(vocab) <= n_candidates:
        raise ValueError(f"vocab must have more than n_candidates = {n_candidates} distinct words")
    default_trials = math.ceil((len(vocab) - 1) / n_candidates)
    trials = (
        default_trials
        if trials_per_cue is None
        else _check_int(trials_per_cue, "trials_per_cue", 1)
    )
    gen = check_rng(rng)
    out_cues: list[str] = []
    responses: list[list[str]] = []
    retried = repaired = 0
    for cue in _progress(cues, progress, "forced choice"):
        pool = [w for w in vocab if w != cue]
        order: list[str] = []
        while len(order) < trials * n_candidates:
            order += [pool[i] for i in gen.permutation(len(pool))]
        for t in range(trials):
            cand = order[t * n_candidates : (t + 1) * n_candidates]
            if len(set(cand)) < n_candidates:  # a reshuffle boundary repeated a word
                cand = [pool[i] for i in gen.choice(len(pool), n_candidates, replace=False)]
            picks = None
            for attempt in range(max_retries + 1):
                reply = [_norm_word(w) for w in model(cue, list(cand), attempt)]
                if len(set(reply)) == n_picks and len(reply) == n_picks and set(reply) <= set(cand):
                    picks = reply
                    break
                retried += attempt == 0
            if picks is None:
                repaired += 1
                picks = [cand[i] for i in gen.choice(n_candidates, n_picks, replace=False)]
            out_cues.append(cue)
            responses.append(picks)
    return {
        "cues": out_cues,
        "responses": responses,
        "n_trials": len(out_cues),
        "n_retried": retried,
        "n_repaired": repaired,
    }


def collect_free_association(
    model: Callable[..., Sequence[str]],
    cues: Sequence[str],
    *,
    n_responses: int = 5,
    n_runs: int = 10,
    progress: bool = False,
) -> dict[str, Any]:
    """Run free-association trials: ``model(cue, run)`` names associates of the cue.

    Replies are lower-cased and stripped; empty strings, repeats within a reply and the cue
    itself are dropped, and at most ``n_responses`` are kept (the paper asks for exactly 5,
    over 126 stochastic runs per cue).

    Parameters
    ----------
    model : callable
        ``model(cue: str, run: int) -> sequence of str``.
    cues : sequence of str
    n_responses : int, default=5
    n_runs : int, default=10
        Independent runs per cue (a stochastic model answers differently each run).
    progress : bool, default=False

    Returns
    -------
    dict
        ``cues`` (per trial), ``responses`` (per trial), ``n_trials``, ``n_short`` (replies
        with fewer than ``n_responses`` valid associates).

    Examples
    --------
    >>> import numpy as np
    >>> words = [f"w{i}" for i in range(10)]
    >>> agent = SyntheticAgent(words, np.eye(10), beta=5, rng=0)
    >>> out = collect_free_association(agent.free_association, words, n_runs=3)
    >>> out["n_trials"], len(out["responses"][0])
    (30, 5)
    """
    if not callable(model):
        raise TypeError("model must be callable as model(cue, run)")
    n_responses = _check_int(n_responses, "n_responses", 1)
    n_runs = _check_int(n_runs, "n_runs", 1)
    cues = [_norm_word(c) for c in cues]
    if not cues:
        raise ValueError("cues must not be empty")
    out_cues: list[str] = []
    responses: list[list[str]] = []
    short = 0
    for cue in _progress(cues, progress, "free association"):
        for run in range(n_runs):
            reply = [_norm_word(w) for w in model(cue, run)]
            kept = [w for w in dict.fromkeys(reply) if w and w != cue][:n_responses]
            short += len(kept) < n_responses
            out_cues.append(cue)
            responses.append(kept)
    return {"cues": out_cues, "responses": responses, "n_trials": len(out_cues), "n_short": short}


def _progress(items: Sequence[Any], on: bool, desc: str) -> Any:
    if not on:
        return items
    from tqdm.auto import tqdm

    return tqdm(items, desc=desc)


class SyntheticAgent:
    """A simulated participant whose associations follow latent word embeddings.

    Relatedness is ``cos(z_cue, z_w)``; a forced choice picks the top ``k`` of
    ``beta * cos + Gumbel noise`` among the candidates (a softmax choice without replacement);
    free association samples associates from the softmax over the whole vocabulary.
    ``beta = 0`` answers at random. The spec's oracle agent for RSA.

    Parameters
    ----------
    words : sequence of str
        Vocabulary, aligned with the rows of ``Z``.
    Z : array-like of shape (n_words, r)
        Latent embeddings.
    beta : float
        Inverse temperature (>= 0).
    n_picks : int, default=2
        Words per forced choice.
    n_responses : int, default=5
        Associates per free association.
    rng : int, numpy Generator or None

    Examples
    --------
    >>> import numpy as np
    >>> agent = SyntheticAgent(["cat", "dog", "car"], [[1.0, 0], [0.9, 0.1], [0, 1.0]], beta=50, rng=0)
    >>> agent.pick("cat", ["dog", "car"], 1)
    ['dog']
    """

    words: list[str]
    index: dict[str, int]
    U: np.ndarray
    beta: float
    n_picks: int
    n_responses: int
    rng: np.random.Generator

    def __init__(
        self,
        words: Sequence[str],
        Z: Any,
        beta: float,
        *,
        n_picks: int = 2,
        n_responses: int = 5,
        rng: Any = None,
    ) -> None:
        Z = check_array(Z, "Z", dtypes=(np.float64,))
        words = [_norm_word(w) for w in words]
        if Z.ndim != 2 or Z.shape[0] != len(words):
            raise ValueError(f"Z must have shape (len(words) = {len(words)}, r), got {Z.shape}")
        if not (isinstance(beta, numbers.Real) and beta >= 0):
            raise ValueError(f"beta must be a real number >= 0, got {beta!r}")
        norms = np.linalg.norm(Z, axis=1, keepdims=True)
        self.words = words
        self.index = {w: i for i, w in enumerate(words)}
        self.U = Z / np.where(norms > 0, norms, 1.0)
        self.beta = float(beta)
        self.n_picks = _check_int(n_picks, "n_picks", 1)
        self.n_responses = _check_int(n_responses, "n_responses", 1)
        self.rng = check_rng(rng)

    def pick(self, cue: str, candidates: Sequence[str], k: int) -> list[str]:
        """The ``k`` candidates with the largest ``beta cos(cue, w) + Gumbel`` scores."""
        c = self.U[self._word_index(cue, "cue")]
        if isinstance(candidates, (str, bytes)) or not hasattr(candidates, "__iter__"):
            raise TypeError(
                f"candidates must be a sequence of words, got {type(candidates).__name__}"
            )
        idx = [self._word_index(w, "candidates") for w in candidates]
        if isinstance(k, (bool, np.bool_)) or not isinstance(k, (numbers.Integral)):
            raise TypeError(f"k must be an int, got {type(k).__name__} {k!r}")
        if k < 0:
            raise ValueError(f"k must be an int >= 0, got {k!r}")
        scores = self.beta * (self.U[idx] @ c) + self.rng.gumbel(size=len(idx))
        return [candidates[i] for i in np.argsort(-scores)[:k]]

    def _word_index(self, w: Any, name: str) -> int:
        if w is None:
            raise TypeError(f"{name} must hold words (str), got None")
        i = self.index.get(_norm_word(w))
        if i is None:
            raise ValueError(f"{name}: the word {w!r} is not in the agent's vocabulary")
        return i

    def forced_choice(self, cue: str, candidates: Sequence[str], attempt: int = 0) -> list[str]:
        """Forced-choice reply (``attempt`` is ignored: the agent never errs)."""
        return self.pick(cue, candidates, self.n_picks)

    def free_association(self, cue: str, run: int = 0) -> list[str]:
        """``n_responses`` associates sampled from the softmax over the vocabulary."""
        self._word_index(cue, "cue")
        others = [w for w in self.words if w != _norm_word(cue)]
        return self.pick(cue, others, self.n_responses)


# --------------------------------------------------------------------------- similarity


def count_matrix(
    cues: Sequence[str],
    responses: Sequence[Sequence[str]],
    *,
    vocab: Sequence[str] | None = None,
    drop_self: bool = True,
) -> tuple[sp.csr_matrix, list[str], list[str]]:
    """Cue x response count matrix ``C[i, r]`` from trials.

    Parameters
    ----------
    cues : sequence of str
        The cue of every trial.
    responses : sequence of sequence of str
        The responses of every trial (each adds 1 to its cue's row).
    vocab : sequence of str, optional
        Fix the rows to these cues, in this order (trials of other cues are ignored);
        default: the distinct cues in order of appearance.
    drop_self : bool, default=True
        Ignore a response equal to its cue.

    Returns
    -------
    C : scipy.sparse.csr_matrix of shape (n_cues, n_responses), float64
    rows : list of str
    cols : list of str
        Distinct responses in order of appearance.

    Examples
    --------
    >>> C, rows, cols = count_matrix(["a", "a", "b"], [["x", "y"], ["x", "a"], ["y", "b"]])
    >>> C.toarray(), rows, cols
    (array([[2., 1.],
           [0., 1.]]), ['a', 'b'], ['x', 'y'])
    """
    if len(cues) != len(responses):
        raise ValueError(
            f"cues and responses must have the same length, got {len(cues)} and {len(responses)}"
        )
    if len(cues) == 0:
        raise ValueError("cues must not be empty")
    cues_n = [_norm_word(c) for c in cues]
    rows = (
        list(dict.fromkeys(cues_n))
        if vocab is None
        else list(dict.fromkeys(_norm_word(v) for v in vocab))
    )
    row_of = {w: i for i, w in enumerate(rows)}
    col_of: dict[str, int] = {}
    ri, ci = [], []
    for cue, resp in zip(cues_n, responses, strict=True):
        if isinstance(resp, str):
            raise TypeError("each element of responses must be a sequence of words, not a str")
        i = row_of.get(cue)
        if i is None:
            continue
        for r in resp:
            r = _norm_word(r)
            if not r or (drop_self and r == cue):
                continue
            ri.append(i)
            ci.append(col_of.setdefault(r, len(col_of)))
    C = sp.csr_matrix(
        (np.ones(len(ri)), (np.asarray(ri, dtype=np.int64), np.asarray(ci, dtype=np.int64))),
        shape=(len(rows), len(col_of)),
    )
    C.sum_duplicates()
    return C, rows, list(col_of)


def ppmi(C: Any, alpha: float = 1.0) -> sp.csr_matrix:
    """Positive pointwise mutual information of a count matrix, on its non-zeros.

    ``PMI[i, r] = log(C[i, r] N / (C[i, .] Pc[r]))`` with ``N = sum C`` and the context
    counts ``Pc[r] = N C[., r]**alpha / sum_r C[., r]**alpha`` (``alpha = 1``: no context
    smoothing, the paper's choice; ``alpha = 0.75`` is word2vec's); ``PPMI = max(PMI, 0)``.

    Parameters
    ----------
    C : array-like or sparse matrix of shape (n_cues, n_responses), non-negative
    alpha : float, default=1.0

    Returns
    -------
    scipy.sparse.csr_matrix of the same shape

    Examples
    --------
    >>> import numpy as np
    >>> ppmi(np.outer([1.0, 2.0], [3.0, 1.0])).nnz  # independent counts carry no information
    0
    """
    if not (isinstance(alpha, numbers.Real) and 0 < alpha <= 1):
        raise ValueError(f"alpha must be a real number in (0, 1], got {alpha!r}")
    if not sp.issparse(C):
        C = check_array(C, "C", dtypes=(np.float64,), ndim=2, finite=False)
    elif C.ndim != 2:
        raise ValueError(f"C must be 2-D, got shape {C.shape}")
    C = sp.csr_matrix(C, dtype=np.float64)
    if C.nnz and (C.data.min() < 0 or not np.all(np.isfinite(C.data))):
        raise ValueError("C must be finite and non-negative")
    C.eliminate_zeros()
    N = C.sum()
    if N <= 0:
        return sp.csr_matrix(C.shape)
    row = np.asarray(C.sum(axis=1)).ravel()
    col = np.asarray(C.sum(axis=0)).ravel() ** alpha
    col = col * (N / col.sum())
    coo = C.tocoo()
    pmi = np.log(coo.data * N / (row[coo.row] * col[coo.col]))
    keep = pmi > 1e-12  # PMI of exactly independent cells rounds to ~1e-16
    return sp.csr_matrix((pmi[keep], (coo.row[keep], coo.col[keep])), shape=C.shape)


def cosine_similarity_rows(A: Any, svd_dim: int | None = None, *, rng: Any = 0) -> np.ndarray:
    """Cosine similarity between the rows of ``A`` (zero rows give 0), shape (n, n).

    Parameters
    ----------
    A : array-like or sparse matrix of shape (n, m)
        Counts or PPMI weights (sparse input stays sparse until the product).
    svd_dim : int, optional
        Reduce ``A`` to its top ``svd_dim`` singular directions first (TruncatedSVD).
    rng : int or None, default=0
        Seeds the randomized SVD.

    Returns
    -------
    ndarray of shape (n, n)

    Examples
    --------
    >>> import numpy as np
    >>> cosine_similarity_rows(np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 0.0]])).round(3)
    array([[1.   , 0.707, 0.   ],
           [0.707, 1.   , 0.   ],
           [0.   , 0.   , 0.   ]])
    """
    if not sp.issparse(A):
        A = check_array(A, "A", dtypes=(np.float64,), ndim=2)
    elif not np.all(np.isfinite(sp.csr_matrix(A, dtype=np.float64).data)):
        raise ValueError("A must be finite, got NaN or infinite values")
    if svd_dim is not None:
        from sklearn.decomposition import TruncatedSVD

        svd_dim = _check_int(svd_dim, "svd_dim", 1)
        A = TruncatedSVD(svd_dim, random_state=rng if rng is None else int(rng)).fit_transform(A)
    if sp.issparse(A):
        A = sp.csr_matrix(A, dtype=np.float64)
        norms = np.sqrt(np.asarray(A.multiply(A).sum(axis=1)).ravel())
        inv = np.where(norms > 0, 1.0 / np.where(norms > 0, norms, 1.0), 0.0)
        An = sp.diags(inv) @ A
        return np.asarray((An @ An.T).toarray())
    A = np.asarray(A, dtype=np.float64)
    if A.ndim != 2:
        raise ValueError(f"A must be 2-D, got shape {A.shape}")
    norms = np.linalg.norm(A, axis=1, keepdims=True)
    An = np.where(norms > 0, A / np.where(norms > 0, norms, 1.0), 0.0)
    return An @ An.T


def _centred_unit_rows(X: np.ndarray, fit_idx: np.ndarray | None) -> np.ndarray:
    mu = X.mean(axis=0) if fit_idx is None else X[fit_idx].mean(axis=0)
    Xc = X - mu
    norms = np.linalg.norm(Xc, axis=1, keepdims=True)
    return np.where(norms > 0, Xc / np.where(norms > 0, norms, 1.0), 0.0)


def centered_cosine(X: Any, fit_idx: Any = None) -> np.ndarray:
    """Cosine similarity of word vectors centred across words, shape (n, n).

    Parameters
    ----------
    X : array-like of shape (n, d)
        One hidden-state vector per word (one layer).
    fit_idx : array-like of int, optional
        Words whose mean is subtracted (the training words of a held-out split); default all.

    Returns
    -------
    ndarray of shape (n, n)

    Examples
    --------
    >>> import numpy as np
    >>> S = centered_cosine(np.array([[1.0, 5.0], [3.0, 5.0], [2.0, 7.0]]))
    >>> S.round(3)
    array([[ 1.   , -0.385, -0.555],
           [-0.385,  1.   , -0.555],
           [-0.555, -0.555,  1.   ]])
    """
    X = check_array(X, "X", dtypes=(np.float64,), ndim=2)
    if X.ndim != 2 or X.shape[0] < 2:
        raise ValueError(f"X must have shape (n >= 2, d), got {X.shape}")
    U = _centred_unit_rows(X, None if fit_idx is None else np.asarray(fit_idx))
    return U @ U.T


def sample_pairs(n: int, n_pairs: int | None = None, rng: Any = 0) -> tuple[np.ndarray, np.ndarray]:
    """Upper-triangle pairs ``(i, j)``, ``i < j``: all of them, or a uniform sample.

    Parameters
    ----------
    n : int
        Number of items (>= 2).
    n_pairs : int, optional
        Sample this many distinct pairs uniformly (seeded); default (or when it is at least
        ``n (n - 1) / 2``): all pairs in row-major order.
    rng : int, numpy Generator or None, default=0

    Returns
    -------
    ii, jj : ndarray of int64, shape (n_pairs,)
        Sorted by linear upper-triangle index.

    Examples
    --------
    >>> ii, jj = sample_pairs(4)
    >>> list(zip(ii.tolist(), jj.tolist()))
    [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)]
    """
    n = _check_int(n, "n", 2)
    total = n * (n - 1) // 2
    if n_pairs is None or n_pairs >= total:
        k = np.arange(total, dtype=np.int64)
    else:
        n_pairs = _check_int(n_pairs, "n_pairs", 1)
        k = np.sort(check_rng(rng).choice(total, size=n_pairs, replace=False)).astype(np.int64)
    return pair_from_linear(k, n)


def rsa(
    S1: Any, S2: Any, pairs: tuple[np.ndarray, np.ndarray] | None = None, method: str = "pearson"
) -> float:
    """Representational similarity: correlation of two similarity matrices over item pairs.

    Parameters
    ----------
    S1, S2 : array-like of shape (n, n)
        Similarity (or dissimilarity) matrices over the same items.
    pairs : (ii, jj), optional
        The pairs to compare (:func:`sample_pairs`); default all ``i < j``.
    method : {"pearson", "spearman"}, default="pearson"
        Pearson runs in one pass over the pairs (numba, no vectors materialised).

    Returns
    -------
    float

    Examples
    --------
    >>> import numpy as np
    >>> S = centered_cosine(np.random.default_rng(0).normal(size=(30, 5)))
    >>> round(rsa(S, S), 12), round(rsa(S, 3 * S - 1), 12)
    (1.0, 1.0)
    """
    S1 = check_array(S1, "S1", dtypes=(np.float64,), ndim=2)
    S2 = check_array(S2, "S2", dtypes=(np.float64,), ndim=2)
    if S1.ndim != 2 or S1.shape[0] != S1.shape[1] or S1.shape[0] < 3:
        raise ValueError(f"S1 must be a square (n, n) matrix with n >= 3, got {S1.shape}")
    if S2.shape != S1.shape:
        raise ValueError(f"S2 must have the shape of S1 {S1.shape}, got {S2.shape}")
    if method not in ("pearson", "spearman"):
        raise ValueError(f"method must be 'pearson' or 'spearman', got {method!r}")
    ii, jj = sample_pairs(S1.shape[0]) if pairs is None else _check_pairs(pairs, S1.shape[0])
    if method == "spearman":
        a, b = rankdata(S1[ii, jj]), rankdata(S2[ii, jj])
        return float(np.corrcoef(a, b)[0, 1])
    return float(pearson_on_pairs(S1, S2, ii, jj))


def _check_pairs(pairs: Any, n: int) -> tuple[np.ndarray, np.ndarray]:
    try:
        ii, jj = (np.asarray(p, dtype=np.int64) for p in pairs)
    except (TypeError, ValueError) as exc:
        raise ValueError("pairs must be a tuple (ii, jj) of integer arrays") from exc
    if ii.shape != jj.shape or ii.ndim != 1 or ii.size < 2:
        raise ValueError("pairs must be two 1-D arrays of the same length >= 2")
    if ii.min() < 0 or jj.max() >= n or np.any(ii >= jj):
        raise ValueError(f"pairs must satisfy 0 <= i < j < {n}")
    return ii, jj


def layerwise_rsa(
    hidden: Any,
    S_behav: Any,
    *,
    baselines: Mapping[str, Any] | None = None,
    pairs: tuple[np.ndarray, np.ndarray] | None = None,
    method: str = "pearson",
) -> dict[str, np.ndarray]:
    """RSA of every layer's centred-cosine geometry (and of baselines) with a behavioural one.

    The hidden-state similarities are evaluated on the pairs only (``O(n_pairs d)`` per layer,
    no ``n x n`` matrix), which is what makes 5,000-word vocabularies cheap.

    Parameters
    ----------
    hidden : array-like of shape (n, L, d)
        Word vectors per layer (embedding layer excluded by the caller if wanted).
    S_behav : array-like of shape (n, n)
        Behavioural similarity (e.g. PPMI-cosine of forced-choice counts).
    baselines : mapping of str to (n, n) arrays, optional
        Other similarity matrices to score the same way (lexical embeddings, consensus).
    pairs : (ii, jj), optional
        Default: all pairs.
    method : {"pearson", "spearman"}, default="pearson"

    Returns
    -------
    dict
        ``"layers"``: RSA per layer, shape (L,); plus one float per baseline name.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> Z = rng.normal(size=(40, 6))
    >>> hidden = np.stack([rng.normal(size=(40, 8)), Z @ rng.normal(size=(6, 8))], axis=1)
    >>> r = layerwise_rsa(hidden, centered_cosine(Z))
    >>> bool(r["layers"][1] > 0.5 > abs(r["layers"][0]))
    True
    """
    H = check_array(hidden, "hidden", dtypes=(np.float64,), ndim=3)
    if H.ndim != 3 or H.shape[0] < 2 or 0 in H.shape:
        raise ValueError(f"hidden must have shape (n, L, d) with n >= 2, L, d >= 1, got {H.shape}")
    S = check_array(S_behav, "S_behav", dtypes=(np.float64,), ndim=2)
    n = H.shape[0]
    if S.shape != (n, n):
        raise ValueError(f"S_behav must have shape ({n}, {n}), got {S.shape}")
    if method not in ("pearson", "spearman"):
        raise ValueError(f"method must be 'pearson' or 'spearman', got {method!r}")
    ii, jj = sample_pairs(n) if pairs is None else _check_pairs(pairs, n)
    target = S[ii, jj]
    out: dict[str, Any] = {"layers": np.empty(H.shape[1])}
    for layer in range(H.shape[1]):
        U = np.ascontiguousarray(_centred_unit_rows(H[:, layer], None))
        out["layers"][layer] = _corr(rowdot_on_pairs(U, ii, jj), target, method)
    for name, B in (baselines or {}).items():
        B = check_array(B, f"baselines[{name!r}]", dtypes=(np.float64,), ndim=2)
        if B.shape != (n, n):
            raise ValueError(f"baselines[{name!r}] must have shape ({n}, {n}), got {B.shape}")
        out[name] = _corr(B[ii, jj], target, method)
    return out


def _corr(a: np.ndarray, b: np.ndarray, method: str) -> float:
    if method == "spearman":
        a, b = rankdata(a), rankdata(b)
    return float(np.corrcoef(a, b)[0, 1])


# --------------------------------------------------------------------------- regression


class HeldOutWordsRegression:
    """How much behavioural similarity adds to baselines in predicting hidden-state geometry.

    For every seed, the words are split (``test_size`` held out); the target is the target
    model's centred cosine at each layer with the centring mean of the training words only;
    training pairs are ``n_train_pairs`` random pairs of training words, test pairs all pairs
    of held-out words. Each feature set (named lists of predictor matrices) is fitted by
    ``StandardScaler`` + ``RidgeCV(alphas, cv)`` and scored by test ``R^2``.

    Parameters
    ----------
    feature_sets : mapping of str to sequence of str
        Named nested predictor sets, e.g. ``{"base": ["fasttext"], "full": ["fasttext",
        "fc", "fa"]}``; the names refer to the ``features`` given to :meth:`fit_score`.
    alphas : array-like, default=logspace(-2, 6, 15)
    cv : int, default=5
    n_train_pairs : int, default=10_000
    test_size : float, default=0.2
    seeds : sequence of int, default=(0,)

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> Z = rng.normal(size=(60, 5))
    >>> Q = np.linalg.qr(rng.normal(size=(8, 5)))[0].T  # orthonormal rows: cosines preserved
    >>> hidden = (Z @ Q)[:, None, :] + 0.1 * rng.normal(size=(60, 1, 8))
    >>> feats = {"noise": centered_cosine(rng.normal(size=(60, 5))), "behav": centered_cosine(Z)}
    >>> reg = HeldOutWordsRegression({"base": ["noise"], "full": ["noise", "behav"]},
    ...                              n_train_pairs=800)
    >>> rows = reg.fit_score(hidden, feats)
    >>> r2 = {r["set"]: r["r2"] for r in rows}
    >>> bool(r2["full"] > 0.5 > r2["base"])
    True
    """

    feature_sets: dict[str, list[str]]
    alphas: np.ndarray
    cv: int
    n_train_pairs: int
    test_size: float
    seeds: list[int]

    def __init__(
        self,
        feature_sets: Mapping[str, Sequence[str]],
        *,
        alphas: Any = None,
        cv: int = 5,
        n_train_pairs: int = 10_000,
        test_size: float = 0.2,
        seeds: Sequence[int] = (0,),
    ) -> None:
        if not isinstance(feature_sets, Mapping) or not feature_sets:
            raise ValueError("feature_sets must be a non-empty mapping of name -> feature names")
        for name, feats in feature_sets.items():
            if isinstance(feats, str) or len(feats) == 0:
                raise ValueError(
                    f"feature_sets[{name!r}] must be a non-empty list of feature names"
                )
        if not (isinstance(test_size, numbers.Real) and 0 < test_size < 1):
            raise ValueError(f"test_size must be in (0, 1), got {test_size!r}")
        self.feature_sets = {k: list(v) for k, v in feature_sets.items()}
        self.alphas = np.logspace(-2, 6, 15) if alphas is None else np.asarray(alphas, dtype=float)
        self.cv = _check_int(cv, "cv", 2)
        self.n_train_pairs = _check_int(n_train_pairs, "n_train_pairs", 10)
        self.test_size = float(test_size)
        self.seeds = [int(s) for s in seeds]

    def fit_score(self, hidden_target: Any, features: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Test ``R^2`` per seed, layer and feature set.

        Parameters
        ----------
        hidden_target : array-like of shape (n, L, d)
            The target model's word vectors per layer.
        features : mapping of str to (n, n) arrays
            Predictor similarity matrices (baselines, consensus, FC, FA ...).

        Returns
        -------
        list of dict
            One record per (seed, layer, set): ``seed``, ``layer``, ``set``, ``r2``,
            ``alpha`` (RidgeCV's choice).
        """
        from sklearn.linear_model import RidgeCV
        from sklearn.model_selection import train_test_split
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler

        H = check_array(hidden_target, "hidden_target", dtypes=(np.float64,), ndim=3)
        if H.ndim != 3:
            raise ValueError(f"hidden_target must have shape (n, L, d), got {H.shape}")
        n = H.shape[0]
        needed = {f for fs in self.feature_sets.values() for f in fs}
        missing = needed - set(features)
        if missing:
            raise ValueError(f"features lacks {sorted(missing)} named in feature_sets")
        F = {}
        for name in needed:
            M = check_array(features[name], f"features[{name!r}]", dtypes=(np.float64,))
            if M.shape != (n, n):
                raise ValueError(f"features[{name!r}] must have shape ({n}, {n}), got {M.shape}")
            F[name] = M
        records = []
        for seed in self.seeds:
            train, test = train_test_split(
                np.arange(n), test_size=self.test_size, random_state=seed
            )
            tr_i, tr_j = sample_pairs(len(train), self.n_train_pairs, rng=seed)
            te_i, te_j = sample_pairs(len(test))
            tr_i, tr_j, te_i, te_j = train[tr_i], train[tr_j], test[te_i], test[te_j]
            for layer in range(H.shape[1]):
                U = np.ascontiguousarray(_centred_unit_rows(H[:, layer], train))
                y_tr, y_te = rowdot_on_pairs(U, tr_i, tr_j), rowdot_on_pairs(U, te_i, te_j)
                for set_name, names in self.feature_sets.items():
                    X_tr = np.column_stack([F[f][tr_i, tr_j] for f in names])
                    X_te = np.column_stack([F[f][te_i, te_j] for f in names])
                    model = make_pipeline(StandardScaler(), RidgeCV(alphas=self.alphas, cv=self.cv))
                    model.fit(X_tr, y_tr)
                    records.append(
                        {
                            "seed": seed,
                            "layer": layer,
                            "set": set_name,
                            "r2": float(model.score(X_te, y_te)),
                            "alpha": float(model[-1].alpha_),
                        }
                    )
        return records
