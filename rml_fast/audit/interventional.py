"""S(H)NAP: generative interventional attribution of a risk model (Shapley values + interactions).

The players are ``n`` interventions (objects that a generator removes from, or keeps in, an
input); the game is the risk model's output on the generated, intervened input,

    v(S) = (1/R) sum_{r=1..R} f(g(x, S, seed_r)),        S subset of {0..n-1},

with ``f`` any risk model (a callable on a batch of inputs returning ``(B,)`` scores) and ``g``
any intervention generator (a callable ``g(x, keep, seed)`` returning one intervened input per
row of the boolean coalition matrix ``keep`` of shape ``(B, n)``). From ``v``:

* Moebius (Harsanyi) dividends ``a(T) = sum_{U <= T} (-1)^{|T|-|U|} v(U)``;
* Shapley values ``phi_i = sum_{T contains i} a(T)/|T|`` and Banzhaf values;
* pairwise interactions ``I_ij = sum_{T >= {i,j}} w(|T|) a(T)``: Shapley interaction index
  (SII, ``w = 1/(t-1)``), Banzhaf (BII, ``2^-(t-2)``), Shapley-Taylor (STII, ``1/C(t,2)``),
  Moebius (``[t = 2]``) and Faith-Shap (FSII, the order-2 LMPI surrogate
  ``v(S) ~ b0 + sum_{i in S} b_i + sum_{i<j in S} b_ij`` fitted with Shapley-kernel weights,
  empty set and grand coalition exact).

Exact computation evaluates all ``2**n`` coalitions in batched generator/model calls and runs
the numba transforms (``O(n^2 2^n)``); for larger ``n`` two sampling estimators work within a
budget of game evaluations: permutation sampling (Shapley values + SII from adjacent pairs) and
kernel sampling (the LMPI / KernelSHAP regression on sampled coalitions).

Reference: "Auditing Sybil: Explaining Deep Lung Cancer Risk Prediction Through Generative
Interventional Attributions", arXiv:2602.02560. The paper's code is not released: the estimator
details (kernel weights, sampling scheme, seed averaging, bootstrap over seeds) are PROPOSED.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.stats import spearmanr
from tqdm.auto import tqdm

from rml_fast._validation import Interval, check_rng, check_scalar
from rml_fast.audit._interventional_kernels import (
    bits_to_masks,
    faith_shap_weights,
    lmpi_r2,
    pairs,
    shapley_kernel_weights,
    singles,
    size_weights,
)
from rml_fast.audit._interventional_toy import (
    FeatureGroupGenerator,
    InpaintingGenerator,
    ObjectScene,
    OracleSceneGenerator,
    ToyRiskModel,
    make_object_scene,
    make_toy_lung_dataset,
    toy_lung_scene,
)
from rml_fast.fairness.compatibility import moebius_transform

__all__ = [
    "INDICES",
    "AttributionResult",
    "FeatureGroupGenerator",
    "GenerativeInterventionalAttribution",
    "InpaintingGenerator",
    "InterventionGame",
    "ObjectScene",
    "OracleSceneGenerator",
    "ToyRiskModel",
    "coalition_values",
    "exact_attribution",
    "exact_attribution_reference",
    "insertion_curve",
    "kernel_sampling",
    "make_object_scene",
    "make_toy_lung_dataset",
    "moebius_transform",
    "permutation_sampling",
    "toy_lung_scene",
]

#: pairwise interaction indices; the first-order values reported with each
INDICES = {"SII": "SV", "BII": "BV", "STII": "Moebius", "Moebius": "Moebius", "FSII": "FSII"}
MAX_EXACT_PLAYERS = 24


@dataclass
class AttributionResult:
    """First-order values and pairwise interactions of one game.

    Attributes
    ----------
    index : str
        The pairwise index (``"SII"``, ``"BII"``, ``"STII"``, ``"Moebius"``, ``"FSII"``).
    baseline : float
        ``v(empty)``.
    values : ndarray of shape (n,)
        Shapley values (always; efficiency ``values.sum() == v(N) - v(empty)``).
    first_order : ndarray of shape (n,)
        The index's own singleton terms: SV for SII, Banzhaf values for BII, Moebius ``a({i})``
        for STII/Moebius, Faith-Shap ``b_i`` for FSII.
    interactions : ndarray of shape (n, n)
        Symmetric pairwise index, zero diagonal.
    full : float
        ``v(N)``.
    n_evaluations : int
        Game evaluations spent (coalitions, before seed averaging).
    extra : dict
        Estimator diagnostics (e.g. ``r2`` of the surrogate, ``pair_counts``).

    Examples
    --------
    >>> res = exact_attribution(np.array([0.0, 1.0, 2.0, 5.0]))
    >>> res.values, float(res.interactions[0, 1])
    (array([2., 3.]), 2.0)
    """

    index: str
    baseline: float
    values: np.ndarray
    first_order: np.ndarray
    interactions: np.ndarray
    full: float
    n_evaluations: int
    extra: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("values", "first_order", "interactions"):
            arr = getattr(self, name)
            if isinstance(arr, np.ndarray) and arr.dtype.kind in "fc" and not bool(
                    np.isfinite(arr).all()):
                raise ValueError(f"{name} must be finite, got NaN or infinite values")


def _check_index(index: str) -> str:
    if index not in INDICES:
        raise ValueError(f"index must be one of {sorted(INDICES)}, got {index!r}")
    return index


def _n_from_table(values: np.ndarray, name: str) -> int:
    if values.ndim != 1 or values.size < 2 or values.size & (values.size - 1):
        raise ValueError(f"{name} must be a 1-D table of length 2**n (n >= 1) indexed by "
                         f"coalition bitmask, got shape {values.shape}")
    return int(values.size).bit_length() - 1


def exact_attribution(values, index: str = "SII") -> AttributionResult:
    """Exact Shapley values and pairwise interactions from a full value table.

    Moebius transform (fast butterfly, ``O(n 2^n)``), then ``I_ij = sum_{T >= {i,j}} w(|T|)
    a(T)`` and ``phi_i = sum_{T contains i} a(T)/|T|`` (numba, ``O(n^2 2^n)``). For FSII the
    closed form of Tsai et al. (2023, Thm. 19) for order 2 is used, which equals the
    Shapley-kernel LMPI fit; its weighted R^2 is in ``extra["r2"]``.

    Parameters
    ----------
    values : array-like of shape (2**n,)
        ``v(S)`` at index ``S`` = coalition bitmask (bit ``i`` set = player ``i`` present).
    index : {"SII", "BII", "STII", "Moebius", "FSII"}, default="SII"

    Returns
    -------
    AttributionResult
        ``extra["moebius"]`` holds the dividends, shape (2**n,).

    Examples
    --------
    >>> v = np.array([0.0, 1.0, 2.0, 5.0])          # a({0,1}) = 2
    >>> res = exact_attribution(v, "SII")
    >>> res.values, res.interactions
    (array([2., 3.]), array([[0., 2.],
           [2., 0.]]))
    """
    _check_index(index)
    v = np.array(values, dtype=np.float64)
    if not np.all(np.isfinite(v)):
        raise ValueError("values must be finite")
    n = _n_from_table(v, "values")
    a = moebius_transform(v)
    phi = singles(a, n, size_weights("SV", n))
    extra: dict[str, Any] = {"moebius": a}
    if index == "FSII":
        w1, w2 = faith_shap_weights(n)
        first = a[1 << np.arange(n)] + singles(a, n, w1)
        inter = pairs(a, n, w2) + pairs(a, n, size_weights("Moebius2", n))
        extra["r2"] = lmpi_r2(v, n, v[0], first, np.triu(inter, 1))
    else:
        inter = pairs(a, n, size_weights("Moebius2" if index == "Moebius" else index, n))
        kind = INDICES[index]
        first = phi if kind == "SV" else (singles(a, n, size_weights("BV", n)) if kind == "BV"
                                          else a[1 << np.arange(n)].copy())
    return AttributionResult(index, float(v[0]), phi, first, inter, float(v[-1]), v.size, extra)


def exact_attribution_reference(values, index: str = "SII") -> AttributionResult:
    """Plain-Python twin of :func:`exact_attribution` by the definitions (small ``n`` only).

    Shapley values by the permutation-weight formula ``sum_S |S|!(n-|S|-1)!/n! (v(S+i)-v(S))``,
    SII/BII by weighted discrete derivatives ``sum_S w(|S|) (v(S+ij)-v(S+i)-v(S+j)+v(S))``,
    STII from the Moebius definition by direct subset sums; FSII by the weighted least-squares
    fit (``numpy.linalg.lstsq``) with empty and full coalitions pinned.

    Parameters
    ----------
    values : array-like of shape (2**n,)
    index : {"SII", "BII", "STII", "Moebius", "FSII"}, default="SII"

    Returns
    -------
    AttributionResult

    Examples
    --------
    >>> exact_attribution_reference([0.0, 1.0, 2.0, 5.0]).values
    array([2., 3.])
    """
    _check_index(index)
    v = np.array(values, dtype=np.float64)
    if not np.all(np.isfinite(v)):
        raise ValueError("values must be finite")
    n = _n_from_table(v, "values")
    fact = math.factorial
    full = (1 << n) - 1
    a = np.zeros_like(v)
    for t in range(1 << n):
        u = t
        while True:  # all subsets u of t
            a[t] += (-1) ** (bin(t).count("1") - bin(u).count("1")) * v[u]
            if u == 0:
                break
            u = (u - 1) & t
    phi = np.zeros(n)
    bv = np.zeros(n)
    for i in range(n):
        for s in range(1 << n):
            if s >> i & 1:
                continue
            k = bin(s).count("1")
            phi[i] += fact(k) * fact(n - k - 1) / fact(n) * (v[s | 1 << i] - v[s])
            bv[i] += (v[s | 1 << i] - v[s]) / 2 ** (n - 1)
    inter = np.zeros((n, n))
    first = phi if index == "SII" else bv if index == "BII" else a[1 << np.arange(n)]
    if index == "FSII":
        rows = [s for s in range(1, full)]
        pairs_ij = [(i, j) for i in range(n) for j in range(i + 1, n)]
        mu = shapley_kernel_weights(n)
        X = np.array([[s >> i & 1 for i in range(n)] + [(s >> i & 1) * (s >> j & 1)
                      for i, j in pairs_ij] for s in rows], dtype=np.float64)
        y = v[rows] - v[0]
        sw = np.sqrt(mu[[bin(s).count("1") for s in rows]])
        # pin the grand coalition: the last coefficient is d - sum(others)
        d = v[full] - v[0]
        if n == 1:
            beta = np.array([d])
        else:
            Xr = X[:, :-1] - X[:, -1:]
            coef, *_ = np.linalg.lstsq(Xr * sw[:, None], (y - d * X[:, -1]) * sw, rcond=None)
            beta = np.append(coef, d - coef.sum())
        first = beta[:n]
        for k, (i, j) in enumerate(pairs_ij):
            inter[i, j] = inter[j, i] = beta[n + k]
    else:
        for i in range(n):
            for j in range(i + 1, n):
                tot = 0.0
                for s in range(1 << n):
                    if s >> i & 1 or s >> j & 1:
                        continue
                    k = bin(s).count("1")
                    delta = v[s | 1 << i | 1 << j] - v[s | 1 << i] - v[s | 1 << j] + v[s]
                    if index == "SII":
                        tot += fact(k) * fact(n - k - 2) / fact(n - 1) * delta
                    elif index == "BII":
                        tot += delta / 2 ** (n - 2)
                if index in ("STII", "Moebius"):
                    for t in range(1 << n):
                        if t >> i & 1 and t >> j & 1:
                            size = bin(t).count("1")
                            w = 1.0 / math.comb(size, 2) if index == "STII" else float(size == 2)
                            tot += w * a[t]
                inter[i, j] = inter[j, i] = tot
    return AttributionResult(index, float(v[0]), phi, np.asarray(first, dtype=np.float64),
                             inter, float(v[-1]), v.size, {"moebius": a})


# --- the game -----------------------------------------------------------------------------------


def _check_input(x: Any, name: str) -> None:
    """Refuse an empty or a non-finite NumPy input (other kinds of input pass unchecked)."""
    if not isinstance(x, np.ndarray):
        return
    if x.size == 0:
        raise ValueError(f"{name} must not be empty, got shape {x.shape}")
    if x.dtype.kind in "fc" and not bool(np.isfinite(x).all()):
        raise ValueError(f"{name} must be finite, got NaN or infinite values")


def _generate(generator: Any, x: Any, keep: np.ndarray, seed: int) -> Any:
    if callable(generator):
        return generator(x, keep, seed)
    if hasattr(generator, "remove"):
        return generator.remove(x, keep, seed)
    raise TypeError("generator must be a callable generator(x, keep, seed) or an object with a "
                    f"remove(x, keep, seed) method, got {type(generator).__name__}")


class InterventionGame:
    """The game ``v(S) = mean_r f(g(x, S, seed_r))`` as a batched callable on coalitions.

    Parameters
    ----------
    risk_fn : callable
        ``risk_fn(batch) -> (B,)`` (or ``(B, 1)``) finite scores for a batch of inputs.
    generator : callable or object with ``remove``
        ``generator(x, keep, seed)`` with ``keep`` bool of shape ``(B, n)``; returns a batch of
        ``B`` intervened inputs (anything ``risk_fn`` accepts whose ``len`` is ``B``). A
        generator with an ``n_players`` attribute (the classes of this module) is checked
        against ``n_players``.
    x : any
        The input being explained (passed to the generator unchanged). A NumPy array must be
        non-empty and finite.
    n_players : int
        Number of interventions ``n``.
    seeds : sequence of int, default=(0,)
        Generator seeds ``seed_r``; ``v`` averages over them (common random numbers: the same
        seeds for every coalition).
    batch_size : int, default=256
        Coalitions per generator/model call.

    Examples
    --------
    >>> game = InterventionGame(lambda b: b.sum(1), lambda x, keep, s: keep * x, np.array([1., 2.]), 2)
    >>> game(np.array([[True, False], [True, True]]))
    array([1., 3.])
    """

    def __init__(self, risk_fn: Callable[[Any], Any], generator: Any, x: Any, n_players: int,
                 *, seeds=(0,), batch_size: int = 256) -> None:
        if not callable(risk_fn):
            raise TypeError(f"risk_fn must be callable, got {type(risk_fn).__name__}")
        if not (callable(generator) or hasattr(generator, "remove")):
            _generate(generator, x, np.zeros((0, 0), bool), 0)
        _check_input(x, "x")
        self.risk_fn, self.generator, self.x = risk_fn, generator, x
        self.n_players = check_scalar(n_players, "n_players", Interval("int", 1, None))
        declared = getattr(generator, "n_players", None)
        if declared is not None and declared != self.n_players:
            raise ValueError(f"n_players={self.n_players} does not match the generator, which "
                             f"has {declared} objects (masks / groups)")
        self.seeds = [int(s) for s in seeds]
        if not self.seeds:
            raise ValueError("seeds must hold at least one seed")
        self.batch_size = check_scalar(batch_size, "batch_size", Interval("int", 1, None))
        self.n_calls = 0

    def per_seed(self, keep: np.ndarray, progress: bool = False) -> np.ndarray:
        """Values of each coalition under each seed: ``(B, n)`` bool -> ``(R, B)`` float64.

        Examples
        --------
        >>> game = InterventionGame(lambda b: b.sum(1), lambda x, k, s: k * x + s, np.ones(2), 2,
        ...                         seeds=(0, 1))
        >>> game.per_seed(np.array([[True, True]]))
        array([[2.],
               [4.]])
        """
        keep = np.asarray(keep)
        if keep.ndim != 2 or keep.shape[1] != self.n_players or keep.dtype != np.bool_:
            raise ValueError(f"keep must be a boolean array of shape (B, {self.n_players}), got "
                             f"{keep.dtype} {keep.shape}")
        b_total = keep.shape[0]
        out = np.empty((len(self.seeds), b_total))
        starts = range(0, b_total, self.batch_size)
        bar = tqdm(total=len(starts) * len(self.seeds), disable=not progress,
                   desc="coalitions")
        for r, seed in enumerate(self.seeds):
            for lo in starts:
                chunk = keep[lo:lo + self.batch_size]
                batch = _generate(self.generator, self.x, chunk.copy(), seed)
                try:
                    got = len(batch)
                except TypeError:
                    got = None
                if got != chunk.shape[0]:
                    raise ValueError(f"generator must return one intervened input per coalition "
                                     f"row: asked for {chunk.shape[0]}, got "
                                     f"{'an object without len' if got is None else got}")
                scores = np.asarray(self.risk_fn(batch), dtype=np.float64)
                if scores.ndim == 2 and scores.shape[1] == 1:
                    scores = scores[:, 0]
                if scores.shape != (chunk.shape[0],):
                    raise ValueError(f"risk_fn must return {chunk.shape[0]} scores of shape "
                                     f"(B,) or (B, 1), got shape {scores.shape}")
                if not np.all(np.isfinite(scores)):
                    raise ValueError("risk_fn returned non-finite scores")
                out[r, lo:lo + chunk.shape[0]] = scores
                self.n_calls += 1
                bar.update()
        bar.close()
        return out

    def __call__(self, keep: np.ndarray) -> np.ndarray:
        """Seed-averaged values ``v(S)`` of shape (B,) for coalitions ``keep`` of shape (B, n).

        Examples
        --------
        >>> game = InterventionGame(lambda b: b.sum(1), lambda x, k, s: k * x, np.ones(3), 3)
        >>> game(np.ones((1, 3), bool))
        array([3.])
        """
        return self.per_seed(keep).mean(axis=0)


def coalition_values(game: Callable[[np.ndarray], Any], n_players: int, *,
                     max_players: int = MAX_EXACT_PLAYERS) -> np.ndarray:
    """Evaluate a game on all ``2**n`` coalitions; returns the bitmask-indexed table (2**n,).

    Parameters
    ----------
    game : callable
        ``game(keep)`` with ``keep`` bool of shape (B, n) -> values (B,).
    n_players : int
    max_players : int, default=24
        Refuse larger ``n`` (the table has ``2**n`` entries).

    Returns
    -------
    values : ndarray of shape (2**n,), float64

    Examples
    --------
    >>> coalition_values(lambda k: k.sum(1).astype(float), 2)
    array([0., 1., 1., 2.])
    """
    n = check_scalar(n_players, "n_players", Interval("int", 1, None))
    if n > max_players:
        raise ValueError(f"n_players={n} is too large for exact enumeration (2**{n} coalitions, "
                         f"max_players={max_players}); use permutation_sampling or "
                         "kernel_sampling with a budget")
    keep = bits_to_masks(np.arange(1 << n), n)
    vals = np.asarray(game(keep), dtype=np.float64).reshape(-1)
    if vals.shape != (1 << n,):
        raise ValueError(f"game must return {1 << n} values for {1 << n} coalitions, got shape "
                         f"{np.shape(vals)}")
    return vals


# --- sampling estimators ------------------------------------------------------------------------


class _Cache:
    """Evaluate a game on bitmasks, each distinct coalition once."""

    def __init__(self, game: Callable[[np.ndarray], Any], n: int) -> None:
        self.game, self.n = game, n
        self.store: dict[Any, Any] = {}

    def __call__(self, bits: np.ndarray) -> np.ndarray:
        uniq = np.unique(bits)
        new = np.array([b for b in uniq.tolist() if b not in self.store], dtype=np.int64)
        if new.size:
            vals = np.asarray(self.game(bits_to_masks(new, self.n)), dtype=np.float64)
            if vals.shape != (new.size,):
                raise ValueError(f"game must return {new.size} values, got shape {vals.shape}")
            self.store.update(zip(new.tolist(), vals.tolist(), strict=True))
        return np.array([self.store[b] for b in bits.tolist()])


def _check_sampling(n_players: int, budget: int, rng: Any) -> tuple[int, int, np.random.Generator]:
    n = check_scalar(n_players, "n_players", Interval("int", 2, 62))
    b = check_scalar(budget, "budget", Interval("int", 2, None))
    return n, b, check_rng(rng)


def permutation_sampling(game: Callable[[np.ndarray], Any], n_players: int, budget: int, *,
                         rng=None) -> AttributionResult:
    """Shapley values and SII by permutation sampling within ``budget`` game evaluations.

    For each random permutation ``pi`` the prefixes ``P_0 = {}, ..., P_n = N`` are evaluated:
    ``phi_i`` averages ``v(P_k + i) - v(P_k)`` (i at position k). For the pair ``(i, j)`` at
    adjacent positions ``k, k+1``, ``v(P_k+ij) - v(P_k+i) - v(P_k+j) + v(P_k)`` costs one extra
    evaluation; merging the pair into one player shows that ``P_k`` then follows the SII weights
    ``|S|!(n-|S|-2)!/(n-1)!``, so averaging over the permutations in which a pair is adjacent
    estimates ``SII_ij`` without bias. About ``2n`` evaluations per permutation; repeated
    coalitions are evaluated once. PROPOSED (the paper samples kernel-weighted coalitions).

    Parameters
    ----------
    game : callable
        ``game(keep)`` with bool ``keep`` of shape (B, n) -> (B,).
    n_players : int
        ``2 <= n <= 62``.
    budget : int
        Game evaluations: ``budget // (2n)`` permutations of ``2n`` coalitions each (at least
        ``2n``); repeated coalitions are evaluated once, so fewer calls may be made.
    rng : numpy Generator, int or None

    Returns
    -------
    AttributionResult
        ``index="SII"``; ``extra["pair_counts"]`` (n, n) = permutations in which each pair was
        adjacent (a pair never adjacent gets 0), ``extra["n_permutations"]``.

    Examples
    --------
    >>> game = lambda k: k @ np.array([1.0, 2.0, 3.0]) + 4.0 * (k[:, 0] & k[:, 1])
    >>> res = permutation_sampling(game, 3, budget=200, rng=0)   # efficiency holds exactly
    >>> round(float(res.values.sum()), 6), round(float(res.interactions[0, 1]), 6)
    (10.0, 4.0)
    """
    n, budget, gen = _check_sampling(n_players, budget, rng)
    if budget < 2 * n:
        raise ValueError(f"budget must be at least 2*n_players = {2 * n}, got {budget}")
    cache = _Cache(game, n)
    phi_sum = np.zeros(n)
    pair_sum = np.zeros((n, n))
    counts = np.zeros((n, n))
    n_perm = budget // (2 * n)
    for _ in range(n_perm):
        perm = gen.permutation(n)
        prefix = np.concatenate([[0], np.cumsum(1 << perm)]).astype(np.int64)
        # extra coalitions P_k + pi_{k+1} for k = 0..n-2
        extra = prefix[:-2] | (1 << perm[1:]).astype(np.int64)
        wanted = np.concatenate([prefix, extra])
        vals = cache(wanted)
        pv, ev = vals[: n + 1], vals[n + 1:]
        phi_sum[perm] += np.diff(pv)
        i, j = perm[:-1], perm[1:]
        delta = pv[2:] - pv[1:-1] - ev + pv[:-2]
        pair_sum[i, j] += delta
        pair_sum[j, i] += delta
        counts[i, j] += 1
        counts[j, i] += 1
    inter = np.divide(pair_sum, counts, out=np.zeros_like(pair_sum), where=counts > 0)
    phi = phi_sum / n_perm
    v0, vn = cache(np.array([0, (1 << n) - 1], dtype=np.int64))
    return AttributionResult("SII", float(v0), phi, phi.copy(), inter, float(vn),
                             len(cache.store), {"pair_counts": counts, "n_permutations": n_perm})


def kernel_sampling(game: Callable[[np.ndarray], Any], n_players: int, budget: int, *,
                    order: int = 2, rng=None) -> AttributionResult:
    """The LMPI / KernelSHAP regression on a budget of coalitions (Shapley-kernel weights).

    Minimises ``sum_S mu(|S|) (v(S) - b0 - sum_{i in S} b_i - sum_{i<j in S} b_ij)^2`` with
    ``b0 = v(empty)`` and ``v(N)`` matched exactly, ``mu(s) = (n-1)/(C(n,s) s (n-s))``. The
    coalitions (PROPOSED, spec step 5): every coalition of size ``1, n-1`` and, for
    ``order=2``, ``2, n-2`` (as budget allows, in that order, each with its exact kernel weight);
    the rest of the budget is drawn from the remaining sizes with probability proportional to
    their kernel mass, each draw weighted by (remaining mass) / (number of draws). With
    ``order=1`` this is KernelSHAP (exact Shapley values once every coalition is in);
    ``order=2`` gives Faith-Shap (FSII), exact once every coalition is in.

    Parameters
    ----------
    game : callable
        ``game(keep)`` with bool ``keep`` of shape (B, n) -> (B,).
    n_players : int
        ``2 <= n <= 62``.
    budget : int
        Number of game evaluations (coalitions), ``>= 1 + n + n(n-1)/2`` for ``order=2``.
    order : {1, 2}, default=2
    rng : numpy Generator, int or None

    Returns
    -------
    AttributionResult
        ``index="FSII"`` (order 2) with ``values = b_i + 1/2 sum_j b_ij`` (the Shapley values of
        the fitted surrogate), or ``"SV"``-style (order 1, ``interactions`` zero);
        ``extra["r2"]``: weighted R^2 of the fit on the sampled coalitions.

    Examples
    --------
    >>> game = lambda k: k @ np.array([1.0, 2.0, 3.0, 0.0]) + 4.0 * (k[:, 0] & k[:, 1])
    >>> res = kernel_sampling(game, 4, budget=16, rng=0)
    >>> res.values.round(6), round(float(res.interactions[0, 1]), 6)
    (array([3., 4., 3., 0.]), 4.0)
    """
    n, budget, gen = _check_sampling(n_players, budget, rng)
    if order not in (1, 2):
        raise ValueError(f"order must be 1 or 2, got {order!r}")
    n_terms = n + (n * (n - 1) // 2 if order == 2 else 0)
    if budget < n_terms + 1:
        raise ValueError(f"budget must be at least {n_terms + 1} (the number of surrogate "
                         f"coefficients + 1) for n_players={n}, order={order}; got {budget}")
    full = (1 << n) - 1
    mu = shapley_kernel_weights(n)
    remaining = budget - 2
    bits: list[int] = []
    weights: list[float] = []
    sizes_left = list(range(1, n))
    border = [1, n - 1] + ([2, n - 2] if order == 2 else [])
    for s in dict.fromkeys(border):
        if not 1 <= s <= n - 1 or s not in sizes_left or math.comb(n, s) > remaining:
            continue
        for combo in _combinations_bits(n, s):
            bits.append(combo)
            weights.append(mu[s])
        remaining -= math.comb(n, s)
        sizes_left.remove(s)
    if sizes_left and remaining > 0:
        mass = np.array([mu[s] * math.comb(n, s) for s in sizes_left])
        if sum(math.comb(n, s) for s in sizes_left) <= remaining:
            for s in sizes_left:
                for combo in _combinations_bits(n, s):
                    bits.append(combo)
                    weights.append(mu[s])
        else:
            drawn: dict[int, int] = {}
            total = mass.sum()
            n_draws = 0
            while len(drawn) < remaining and n_draws < 50 * remaining:
                s = sizes_left[gen.choice(len(sizes_left), p=mass / total)]
                members = gen.choice(n, size=s, replace=False)
                b = int(np.sum(1 << members.astype(np.int64)))
                drawn[b] = drawn.get(b, 0) + 1
                n_draws += 1
            for b, c in drawn.items():
                bits.append(b)
                weights.append(total * c / n_draws)
    rows = np.array(bits, dtype=np.int64)
    w = np.array(weights)
    vals = _Cache(game, n)(np.concatenate([[0, full], rows]).astype(np.int64))
    v0, vn, y = vals[0], vals[1], vals[2:]
    keep = bits_to_masks(rows, n).astype(np.float64)
    iu = np.triu_indices(n, 1)
    X = keep if order == 1 else np.hstack([keep, keep[:, iu[0]] * keep[:, iu[1]]])
    d = vn - v0
    Xr = X[:, :-1] - X[:, -1:]
    sw = np.sqrt(w)
    coef, *_ = np.linalg.lstsq(Xr * sw[:, None], (y - v0 - d * X[:, -1]) * sw, rcond=None)
    beta = np.append(coef, d - coef.sum())
    first = beta[:n]
    inter = np.zeros((n, n))
    if order == 2:
        inter[iu] = beta[n:]
        inter = inter + inter.T
    resid = y - v0 - X @ beta
    mean = np.average(y, weights=w)
    ss_tot = float(np.sum(w * (y - mean) ** 2))
    r2 = 1.0 - float(np.sum(w * resid**2)) / ss_tot if ss_tot > 0 else 1.0
    phi = first + 0.5 * inter.sum(axis=1)
    return AttributionResult("FSII" if order == 2 else "SV", float(v0), phi, first, inter,
                             float(vn), rows.size + 2, {"r2": r2})


def _combinations_bits(n: int, s: int) -> list[int]:
    from itertools import combinations

    return [sum(1 << i for i in c) for c in combinations(range(n), s)]


# --- insertion probes ---------------------------------------------------------------------------


def insertion_curve(risk_fn: Callable[[Any], Any], inserter: Callable[[Any, Any, int], Any],
                    x_bg: Any, positions, *, radii=None, baseline: float | None = None,
                    seeds=(0,)) -> dict[str, Any]:
    """Insertion probe (bias audit): risk change when an object is inserted at each position.

    ``Delta(p) = mean_r f(g_ins(x_bg, p, seed_r)) - baseline`` with ``baseline = f(x_bg)`` by
    default (or ``v(empty)`` of a fitted audit). With ``radii`` (e.g. distance of each position
    from the organ centre) the slope of ``Delta`` against ``r`` (least squares) and Spearman's
    rho are reported: a negative rho means peripheral objects raise the risk less (radial bias).

    Parameters
    ----------
    risk_fn : callable
        ``risk_fn(batch) -> (B,)``.
    inserter : callable
        ``inserter(x_bg, position, seed) -> one input`` (same kind as ``x_bg``).
    x_bg : any
        The background input (e.g. the scene with every object removed).
    positions : sequence, length L
        Positions passed to ``inserter``.
    radii : array-like of shape (L,), optional
    baseline : float, optional
    seeds : sequence of int, default=(0,)

    Returns
    -------
    dict
        ``deltas`` (L,), ``baseline``, and with ``radii``: ``slope``, ``spearman_rho``
        (nan when ``Delta`` is constant).

    Examples
    --------
    >>> f = lambda b: np.asarray(b).sum(axis=1)
    >>> ins = lambda x, p, s: x + np.eye(3)[p] * (3 - p)
    >>> out = insertion_curve(f, ins, np.zeros(3), [0, 1, 2], radii=[0.0, 1.0, 2.0])
    >>> out["deltas"], round(out["slope"], 6), round(out["spearman_rho"], 6)
    (array([3., 2., 1.]), -1.0, -1.0)
    """
    try:
        positions = list(positions)
    except TypeError as exc:
        raise TypeError(f"positions must be a sequence of positions, got "
                        f"{type(positions).__name__}") from exc
    if not positions:
        raise ValueError("positions must hold at least one position")
    seeds = [int(s) for s in seeds]
    if not seeds:
        raise ValueError("seeds must hold at least one seed")
    if radii is not None:
        radii = np.asarray(radii, dtype=np.float64)
        if radii.shape != (len(positions),):
            raise ValueError(f"radii must have shape ({len(positions)},), got {radii.shape}")
        if not bool(np.isfinite(radii).all()):
            raise ValueError("radii must be finite, got NaN or infinite values")
    if baseline is not None:
        baseline = check_scalar(baseline, "baseline", Interval("real", None, None))
    _check_input(x_bg, "x_bg")
    where = f"x_bg (shape {np.shape(x_bg)})"
    try:
        base = float(np.asarray(risk_fn(np.asarray(x_bg)[None])).reshape(-1)[0]) \
            if baseline is None else float(baseline)
        batch = np.stack([np.asarray(inserter(x_bg, p, s)) for s in seeds for p in positions])
        scores = np.asarray(risk_fn(batch), dtype=np.float64)
    except (ValueError, TypeError, IndexError) as exc:
        raise ValueError(f"risk_fn / inserter failed on {where}: {exc}") from exc
    if scores.size != len(seeds) * len(positions):
        raise ValueError(f"risk_fn returned {scores.size} scores for {batch.shape[0]} inputs "
                         f"inserted into {where}: expected one score per position and seed")
    scores = scores.reshape(len(seeds), len(positions))
    deltas = scores.mean(axis=0) - base
    out: dict[str, Any] = {"deltas": deltas, "baseline": base}
    if radii is not None:
        out["slope"] = float(np.polyfit(radii, deltas, 1)[0]) if len(radii) > 1 else float("nan")
        const = np.ptp(deltas) == 0 or np.ptp(radii) == 0
        out["spearman_rho"] = float("nan") if const else float(spearmanr(radii, deltas)[0])
    return out


# --- the estimator ------------------------------------------------------------------------------


class GenerativeInterventionalAttribution:
    """S(H)NAP audit of one input: Shapley values and pairwise interactions of interventions.

    ``fit(x, n_players)`` builds the game ``v(S) = (1/R) sum_r f(g(x, S, seed_r))`` and computes
    the attribution exactly (all ``2**n`` coalitions, batched) or by sampling within a budget.
    The order-2 LMPI surrogate ``v(S) ~ b0 + sum b_i + sum b_ij`` (Faith-Shap, Shapley-kernel
    weights; PROPOSED weights, spec step 3) is reported next to the chosen index.

    Parameters
    ----------
    risk_fn : callable
        ``risk_fn(batch) -> (B,)`` scores (probability or logit).
    generator : callable or object with ``remove``
        ``generator(x, keep, seed)`` -> ``B`` intervened inputs for bool ``keep`` (B, n).
    n_seeds : int, default=1
        Generator seeds ``R`` averaged per coalition (common to all coalitions).
    index : {"SII", "BII", "STII", "Moebius", "FSII"}, default="SII"
        Pairwise index in ``interactions_`` (exact mode; the samplers give SII / FSII).
    approximator : {"auto", "exact", "permutation", "kernel"}, default="auto"
        "auto": exact when ``n <= max_exact_players`` and ``budget`` is None or ``>= 2**n``,
        else "kernel".
    budget : int, optional
        Coalitions evaluated by the samplers (default ``min(2**n, 2048)``).
    batch_size : int, default=256
        Coalitions per generator/model call.
    max_exact_players : int, default=16
        Largest ``n`` for exact enumeration (``ValueError`` beyond, with approximator="exact").
    n_bootstrap : int, default=200
        Bootstrap resamples over seeds for ``ci_`` (exact mode, ``n_seeds >= 2``; PROPOSED).
    confidence : float, default=0.95
    random_state : numpy Generator, int or None, default=0
        Draws the generator seeds and the sampler's coalitions.
    progress : bool, default=False
        tqdm bar over generator/model calls.

    Attributes
    ----------
    values_ : ndarray of shape (2**n,) or None
        Seed-averaged value table (exact mode), bitmask-indexed.
    moebius_ : ndarray of shape (2**n,) or None
    shapley_values_ : ndarray of shape (n,)
    first_order_ : ndarray of shape (n,)
    interactions_ : ndarray of shape (n, n)
    beta0_, beta_, beta2_, r2_ : float, (n,), (n, n), float
        LMPI surrogate (exact mode: the exact FSII; kernel mode: the fitted one; else None).
    v_empty_, v_full_ : float
    generator_bias_ : float
        ``f(x) - v(N)`` (reconstruction bias of the generator's identity pass).
    ci_ : dict or None
        ``{"shapley_values": (2, n), "interactions": (2, n, n)}`` percentile intervals.
    result_ : AttributionResult
    n_evaluations_ : int

    Examples
    --------
    >>> scene = make_object_scene(4, size=16, amplitude=1.0, rng=0)
    >>> G = np.zeros((4, 4)); G[0, 1] = G[1, 0] = 2.0
    >>> f = ToyRiskModel(scene, [1.0, 0.5, 0.0, -1.0], G)
    >>> audit = GenerativeInterventionalAttribution(f, OracleSceneGenerator(scene))
    >>> audit = audit.fit(scene.image, 4)
    >>> audit.shapley_values_.round(6), round(float(audit.interactions_[0, 1]), 6)
    (array([ 2. ,  1.5,  0. , -1. ]), 2.0)
    """

    def __init__(self, risk_fn: Callable[[Any], Any], generator: Any, *, n_seeds: int = 1,
                 index: str = "SII", approximator: str = "auto", budget: int | None = None,
                 batch_size: int = 256, max_exact_players: int = 16, n_bootstrap: int = 200,
                 confidence: float = 0.95, random_state=0, progress: bool = False) -> None:
        self.risk_fn = risk_fn
        self.generator = generator
        self.n_seeds = n_seeds
        self.index = index
        self.approximator = approximator
        self.budget = budget
        self.batch_size = batch_size
        self.max_exact_players = max_exact_players
        self.n_bootstrap = n_bootstrap
        self.confidence = confidence
        self.random_state = random_state
        self.progress = progress

    def _mode(self, n: int) -> str:
        if self.approximator not in ("auto", "exact", "permutation", "kernel"):
            raise ValueError("approximator must be 'auto', 'exact', 'permutation' or 'kernel', "
                             f"got {self.approximator!r}")
        if self.approximator == "auto":
            small = n <= self.max_exact_players
            return "exact" if small and (self.budget is None or self.budget >= 1 << n) \
                else "kernel"
        if self.approximator == "exact" and n > self.max_exact_players:
            raise ValueError(f"n_players={n} is too large for approximator='exact' (2**{n} "
                             f"coalitions, max_exact_players={self.max_exact_players}); use "
                             "'permutation' or 'kernel' with a budget")
        return self.approximator

    def fit(self, x: Any, n_players: int) -> GenerativeInterventionalAttribution:
        """Evaluate the intervention game on ``x`` and compute the attributions.

        Parameters
        ----------
        x : any
            The input (image, row, ...), passed unchanged to the generator.
        n_players : int
            Number of interventions (objects / feature groups).

        Returns
        -------
        self

        Examples
        --------
        >>> gen = FeatureGroupGenerator([[0], [1]], np.zeros((1, 2)))
        >>> audit = GenerativeInterventionalAttribution(lambda b: b[:, 0] * b[:, 1], gen)
        >>> audit.fit(np.array([1.0, 3.0]), 2).shapley_values_
        array([1.5, 1.5])
        """
        _check_index(self.index)
        n = check_scalar(n_players, "n_players", Interval("int", 1, 62))
        r = check_scalar(self.n_seeds, "n_seeds", Interval("int", 1, None))
        check_scalar(self.batch_size, "batch_size", Interval("int", 1, None))
        check_scalar(self.max_exact_players, "max_exact_players",
                     Interval("int", 1, MAX_EXACT_PLAYERS))
        n_boot = check_scalar(self.n_bootstrap, "n_bootstrap", Interval("int", 1, None))
        conf = check_scalar(self.confidence, "confidence", Interval("real", 0, 1, "neither"))
        mode = self._mode(n)
        if mode != "exact" and n < 2:
            raise ValueError(f"the samplers need n_players >= 2, got {n}")
        budget = self.budget if self.budget is not None else min(1 << min(n, 40), 2048)
        budget = check_scalar(budget, "budget", Interval("int", 2, None))
        gen = check_rng(self.random_state)
        seeds = gen.integers(0, 2**31 - 1, size=r).tolist()
        game = InterventionGame(self.risk_fn, self.generator, x, n, seeds=seeds,
                                batch_size=self.batch_size)
        try:
            f_x = float(np.asarray(self.risk_fn(np.asarray(x)[None]),
                                   dtype=np.float64).reshape(-1)[0])
        except (ValueError, TypeError, IndexError) as exc:
            raise ValueError(f"risk_fn failed on x[None] (x of shape {np.shape(x)}): {exc}") \
                from exc
        self.values_ = self.moebius_ = self.ci_ = None
        self.beta0_ = self.beta_ = self.beta2_ = self.r2_ = None
        if mode == "exact":
            keep = bits_to_masks(np.arange(1 << n), n)
            tables = game.per_seed(keep, progress=self.progress)
            self.values_ = tables.mean(axis=0)
            res = exact_attribution(self.values_, self.index)
            self.moebius_ = res.extra["moebius"]
            lmpi = res if self.index == "FSII" else exact_attribution(self.values_, "FSII")
            self.beta0_, self.beta_ = lmpi.baseline, lmpi.first_order
            self.beta2_, self.r2_ = lmpi.interactions, lmpi.extra["r2"]
            if r >= 2:
                per = [exact_attribution(t, self.index) for t in tables]
                sv = np.stack([p.values for p in per])
                it = np.stack([p.interactions for p in per])
                idx = gen.integers(0, r, size=(n_boot, r))
                q = [(1 - conf) / 2 * 100, (1 + conf) / 2 * 100]
                self.ci_ = {"shapley_values": np.percentile(sv[idx].mean(1), q, axis=0),
                            "interactions": np.percentile(it[idx].mean(1), q, axis=0)}
        elif mode == "permutation":
            res = permutation_sampling(lambda k: game.per_seed(k, self.progress).mean(0), n,
                                       budget, rng=gen)
        else:
            res = kernel_sampling(lambda k: game.per_seed(k, self.progress).mean(0), n, budget,
                                  order=2, rng=gen)
            self.beta0_, self.beta_ = res.baseline, res.first_order
            self.beta2_, self.r2_ = res.interactions, res.extra["r2"]
        self.result_ = res
        self.shapley_values_ = res.values
        self.first_order_ = res.first_order
        self.interactions_ = res.interactions
        self.v_empty_, self.v_full_ = res.baseline, res.full
        self.generator_bias_ = f_x - res.full
        self.n_evaluations_ = res.n_evaluations
        self.n_players_ = n
        self.mode_ = mode
        self.seeds_ = seeds
        return self

    def insertion_curve(self, x_bg: Any, inserter: Callable[[Any, Any, int], Any], positions,
                        *, radii=None) -> dict[str, Any]:
        """Insertion probe against the fitted ``v(empty)`` (see :func:`insertion_curve`).

        Uses this audit's ``risk_fn`` and generator seeds; ``Delta(p) = mean_r
        f(inserter(x_bg, p, seed_r)) - v(empty)``.

        Examples
        --------
        >>> gen = FeatureGroupGenerator([[0], [1]], np.zeros((1, 2)))
        >>> audit = GenerativeInterventionalAttribution(lambda b: b.sum(1), gen)
        >>> audit = audit.fit(np.array([1.0, 1.0]), 2)
        >>> ins = lambda x, p, s: x + np.eye(2)[p]
        >>> audit.insertion_curve(np.zeros(2), ins, [0, 1])["deltas"]
        array([1., 1.])
        """
        if not hasattr(self, "v_empty_"):
            raise ValueError("call fit before insertion_curve")
        return insertion_curve(self.risk_fn, inserter, x_bg, positions, radii=radii,
                               baseline=self.v_empty_, seeds=self.seeds_)
