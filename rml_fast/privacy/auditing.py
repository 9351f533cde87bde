"""Empirical privacy audits: sampled mechanisms against the PLD accountant, and one-run
canary audits of DP-SGD / DP-C4 training.

**Mechanism audits.** For an additive mechanism ``M(x) = x + X`` with l2 sensitivity
``Delta``, draw ``n`` outputs on each of the neighbouring inputs ``x0 = 0`` and
``x1 = Delta e1`` through the public sampling path and estimate the hockey-stick divergence
on the likelihood-ratio sets ``S_eps = {y : L(y) > eps}``, ``L = ln p(y) / q(y)`` the
claimed privacy loss:

    delta_hat(eps) = P_hat(S_eps) - e^eps Q_hat(S_eps)      (and the mirror direction).

For *any* fixed set ``S``, ``P(S) - e^eps Q(S)`` is a lower bound on the true ``delta(eps)``
of the sampler, and for a correct sampler the likelihood-ratio set attains the claimed
value (Neyman-Pearson). Clopper-Pearson intervals for ``P(S)`` and ``Q(S)``, simultaneous
over the eps grid and both directions (Bonferroni), bound ``delta_hat``; the audit flags a
*violation* when the lower bound exceeds the accountant's ``delta(eps)``. The loss law of
the samples is also compared with the accountant's PLD (bucket estimator) by a DKW band.

**One-run training audits** (Steinke, Nasr & Jagielski, "Privacy auditing with one (1)
training run", arXiv 2305.08846, Theorem 3.1). ``m`` canaries, each included independently
with probability 1/2; the auditor guesses ``r`` memberships from scores, ``v`` correct. If
the training is ``(eps, delta)``-DP then

    P[W >= v] <= f(v) + 2 m delta max_{i=1..v} (f(v - i) - f(v)) / i,
    f(v) = P[Binomial(r, e^eps / (1 + e^eps)) >= v],

and the empirical lower bound is the largest ``eps`` whose bound is at most ``1 - confidence``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np
from scipy import special

from rml_fast._validation import Interval, check_array, check_rng, check_scalar

__all__ = [
    "DeltaEstimate",
    "MechanismAudit",
    "OneRunAudit",
    "TrainingAudit",
    "audit_canary_scores",
    "audit_dp_training",
    "audit_mechanism",
    "clopper_pearson",
    "empirical_delta",
    "one_run_epsilon_lower_bound",
    "one_run_p_value",
    "philox_gaussian_sampler",
]

_CONF = Interval("real", 0.0, 1.0, "neither")
_POS = Interval("real", 0.0, None, "neither")
_DELTA = Interval("real", 0.0, 1.0, "left")


# --- statistics ----------------------------------------------------------------------------


def clopper_pearson(k: Any, n: Any, confidence: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Exact (Clopper-Pearson) two-sided confidence interval of a binomial proportion.

    ``lo = Beta^{-1}(a/2; k, n - k + 1)`` (0 if ``k = 0``), ``hi = Beta^{-1}(1 - a/2; k + 1,
    n - k)`` (1 if ``k = n``), ``a = 1 - confidence``.

    Parameters
    ----------
    k : int or array-like of int
        Successes, ``0 <= k <= n``.
    n : int or array-like of int
        Trials, ``>= 1`` (broadcast against ``k``).
    confidence : float, default=0.95
        Coverage in (0, 1).

    Returns
    -------
    lo, hi : ndarray of float64 (the broadcast shape)

    Examples
    --------
    >>> from rml_fast.privacy.auditing import clopper_pearson
    >>> lo, hi = clopper_pearson(3, 10)
    >>> round(float(lo), 4), round(float(hi), 4)
    (0.0667, 0.6525)
    """
    conf = float(check_scalar(confidence, "confidence", _CONF))
    kk = check_array(k, "k", dtypes=(np.int64,), ndim=None)
    nn = check_array(n, "n", dtypes=(np.int64,), ndim=None)
    if (nn < 1).any():
        raise ValueError("n must be >= 1")
    if (kk < 0).any() or (kk > nn).any():
        raise ValueError("k must satisfy 0 <= k <= n")
    kk, nn = np.broadcast_arrays(kk.astype(np.float64), nn.astype(np.float64))
    a = 1.0 - conf
    with np.errstate(invalid="ignore", divide="ignore"):
        lo = np.where(kk > 0, special.betaincinv(kk, nn - kk + 1, a / 2), 0.0)
        hi = np.where(kk < nn, special.betaincinv(kk + 1, nn - kk, 1 - a / 2), 1.0)
    return np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64)


@dataclass(frozen=True)
class DeltaEstimate:
    """Empirical hockey-stick divergence on a grid of eps (one direction).

    Attributes
    ----------
    epsilons, estimate, lower, upper : ndarray of shape (m,)
        ``delta_hat(eps) = P_hat(S) - e^eps Q_hat(S)`` and its simultaneous bounds.
    confidence : float
        Joint coverage of all ``2m`` Clopper-Pearson intervals (Bonferroni).
    """

    epsilons: np.ndarray
    estimate: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    confidence: float

    def __post_init__(self) -> None:
        _no_nan(self, ("epsilons", "estimate", "lower", "upper"), finite=("epsilons",))


def _no_nan(obj: Any, names: Sequence[str], finite: Sequence[str] = ()) -> None:
    """Refuse NaN in an audit result's curves (a NaN bound would hide a violation: NaN > 0
    is False); +-inf is allowed except in ``finite`` (the eps grid)."""
    for name in names:
        arr = check_array(getattr(obj, name), name, dtypes=None, ndim=1, finite=name in finite)
        if arr.dtype.kind == "f" and np.isnan(arr).any():
            raise ValueError(f"{name} must not hold NaN, got {int(np.isnan(arr).sum())} NaN "
                             "value(s)")
        object.__setattr__(obj, name, arr)


def _delta_from_counts(
    kp: np.ndarray, kq: np.ndarray, n_p: int, n_q: int, eps: np.ndarray, level: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Estimate and bounds of ``P(S) - e^eps Q(S)`` from counts, each CI at ``level``."""
    p_lo, p_hi = clopper_pearson(kp, n_p, level)
    q_lo, q_hi = clopper_pearson(kq, n_q, level)
    with np.errstate(over="ignore"):
        w = np.exp(eps)

    def times_w(q: np.ndarray) -> np.ndarray:  # e^eps * q with e^eps * 0 = 0 (not inf * 0 = NaN)
        with np.errstate(invalid="ignore", over="ignore"):
            return np.where(q == 0, 0.0, w * q)

    est = kp / n_p - times_w(kq) / n_q
    return est, p_lo - times_w(q_hi), p_hi - times_w(q_lo)


def _counts_above(scores: np.ndarray, eps_sorted: np.ndarray) -> np.ndarray:
    """``#(scores > eps_i)`` for an ascending grid, shape (m,)."""
    below = np.searchsorted(eps_sorted, scores, side="left")  # number of eps_i < score
    hist = np.bincount(below, minlength=eps_sorted.size + 1)
    return np.cumsum(hist[::-1])[::-1][1:]


def empirical_delta(
    scores_p: Any, scores_q: Any, epsilons: Any, *, confidence: float = 0.95
) -> DeltaEstimate:
    """Hockey-stick divergence on the sets ``S_eps = {score > eps}`` from two samples.

    ``delta_hat(eps) = #{score_p > eps} / n_p - e^eps #{score_q > eps} / n_q``, with
    Clopper-Pearson intervals for both proportions, simultaneous over the grid (each at
    level ``1 - (1 - confidence) / (2m)``). With ``score`` the privacy loss
    ``ln p(y)/q(y)`` of outputs ``y`` drawn from ``P`` (``scores_p``) and ``Q``
    (``scores_q``), ``lower`` is a lower confidence bound on ``delta_{P,Q}(eps)``.

    Parameters
    ----------
    scores_p : array-like of shape (n_p,)
        Scores of outputs drawn from ``P`` (the mechanism on ``x0``).
    scores_q : array-like of shape (n_q,)
        Scores of outputs drawn from ``Q`` (on the neighbour ``x1``).
    epsilons : array-like of shape (m,)
        Finite grid, any order.
    confidence : float, default=0.95

    Returns
    -------
    DeltaEstimate

    Examples
    --------
    >>> import numpy as np
    >>> from rml_fast.privacy.auditing import empirical_delta
    >>> rng = np.random.default_rng(0)
    >>> y0, y1 = rng.normal(0, 1, 100_000), rng.normal(1, 1, 100_000)
    >>> loss = lambda y: 0.5 - y          # ln N(y; 0, 1) / N(y; 1, 1)
    >>> est = empirical_delta(loss(y0), loss(y1), [1.0])
    >>> bool(est.lower[0] <= 0.1269 <= est.upper[0])   # Balle & Wang: delta(1) = 0.1269
    True
    """
    sp = check_array(scores_p, "scores_p", ndim=1, finite=False)
    sq = check_array(scores_q, "scores_q", ndim=1, finite=False)
    eps = check_array(epsilons, "epsilons", dtypes=(np.float64,), ndim=1)
    conf = float(check_scalar(confidence, "confidence", _CONF))
    if sp.size == 0 or sq.size == 0:
        raise ValueError("scores_p and scores_q must not be empty")
    if eps.size == 0:
        raise ValueError("epsilons must not be empty")
    if np.isnan(sp).any() or np.isnan(sq).any():
        raise ValueError("scores_p and scores_q must not hold NaN (+-inf is allowed)")
    order = np.argsort(eps, kind="stable")
    es = eps[order]
    kp, kq = np.empty(eps.size, np.int64), np.empty(eps.size, np.int64)
    kp[order], kq[order] = _counts_above(sp, es), _counts_above(sq, es)
    level = 1.0 - (1.0 - conf) / (2 * eps.size)
    est, lo, hi = _delta_from_counts(kp, kq, sp.size, sq.size, eps, level)
    return DeltaEstimate(eps.copy(), est, lo, hi, conf)


# --- mechanism audit -----------------------------------------------------------------------


def philox_gaussian_sampler(std: float) -> Callable[[np.ndarray, int], np.ndarray]:
    """A sampler ``(x, seed) -> x + std * Z`` drawing ``Z`` from ``rml_fast.kernels.random.normal``.

    That Philox stream is the noise DP-SGD and DP-C4 add to the clipped sums; use the result
    as ``sampler=`` of :func:`audit_mechanism` with ``SGGMechanism.gaussian(dim, std)``.

    Parameters
    ----------
    std : float
        Noise standard deviation, > 0.

    Returns
    -------
    callable
        ``sampler(x, seed)`` with ``x`` of shape (n, dim) float64 and an int seed; returns a
        new (n, dim) float64 array.

    Examples
    --------
    >>> import numpy as np
    >>> from rml_fast.privacy.auditing import philox_gaussian_sampler
    >>> philox_gaussian_sampler(2.0)(np.zeros((4, 3)), 7).shape
    (4, 3)
    """
    std = float(check_scalar(std, "std", _POS))

    def sampler(x: np.ndarray, seed: int) -> np.ndarray:
        from rml_fast.kernels.random import normal

        return x + std * np.asarray(normal(x.size, int(seed)), dtype=np.float64).reshape(x.shape)

    return sampler


@dataclass(frozen=True)
class MechanismAudit:
    """Result of :func:`audit_mechanism` (arrays of shape (m,) over the eps grid).

    Attributes
    ----------
    epsilons, claimed_delta : ndarray
        The grid and the accountant's ``delta(eps)``.
    empirical_delta, lower, upper : ndarray
        Per grid point, the larger estimate of the two directions (remove: ``(P, Q)``,
        add: ``(Q, P)``) and that direction's simultaneous bounds.
    violation : bool
        Some lower bound (either direction) exceeds the claimed ``delta``.
    consistent : bool
        No violation, every claimed ``delta`` is at most its upper bound ``+ atol`` in both
        directions, and the empirical loss CDF lies in the DKW band around the PLD.
    max_excess : float
        ``max(lower - claimed_delta)`` over the grid and both directions (< 0: no violation).
    pld_losses, pld_empirical_cdf, pld_claimed_lower, pld_claimed_upper : ndarray
        Loss values (midpoints of the PLD lattice), the empirical ``P(L <= l)`` under ``P``,
        and the accountant's CDF at the lattice points below and above.
    dkw_width : float
        Half-width of the DKW band (at half the error budget).
    pld_consistent : bool
    n_samples : int
        Draws per neighbouring input.
    confidence : float
    """

    epsilons: np.ndarray
    claimed_delta: np.ndarray
    empirical_delta: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    violation: bool
    consistent: bool
    max_excess: float
    pld_losses: np.ndarray
    pld_empirical_cdf: np.ndarray
    pld_claimed_lower: np.ndarray
    pld_claimed_upper: np.ndarray
    dkw_width: float
    pld_consistent: bool
    n_samples: int
    confidence: float
    directions: dict[str, dict[str, np.ndarray]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        _no_nan(self, ("epsilons", "claimed_delta", "empirical_delta", "lower", "upper",
                       "pld_losses", "pld_empirical_cdf", "pld_claimed_lower",
                       "pld_claimed_upper"), finite=("epsilons",))
        if isinstance(self.max_excess, float) and math.isnan(self.max_excess):
            raise ValueError("max_excess must not be NaN (the violation test would be void)")

    def summary(self) -> dict[str, Any]:
        """JSON-ready dict of the scalar results and the curves (lists of floats)."""
        return {
            "n_samples": self.n_samples, "confidence": self.confidence,
            "violation": self.violation, "consistent": self.consistent,
            "pld_consistent": self.pld_consistent, "max_excess": self.max_excess,
            "dkw_width": self.dkw_width,
            "epsilons": self.epsilons.tolist(), "claimed_delta": self.claimed_delta.tolist(),
            "empirical_delta": self.empirical_delta.tolist(), "lower": self.lower.tolist(),
            "upper": self.upper.tolist(),
        }


def _check_mechanism(mechanism: Any) -> None:
    need = ("dim", "sensitivity", "privacy_loss", "delta_for_epsilon", "pld", "randomize")
    missing = [a for a in need if not hasattr(mechanism, a)]
    if missing:
        raise TypeError(
            f"mechanism must be an SGGMechanism (or provide {need}); "
            f"{type(mechanism).__name__} lacks {missing}"
        )


def _claim(mechanism: Any, eps: tuple[float, ...], h: float) -> tuple[Any, ...]:
    """``(delta(eps), PLD cdf, lattice, h)`` of the claim; cached for hashable mechanisms."""
    try:
        return _claim_cached(mechanism, eps, h)
    except TypeError:  # unhashable duck-typed mechanism
        return _claim_uncached(mechanism, eps, h)


def _claim_uncached(mechanism: Any, eps: tuple[float, ...], h: float) -> tuple[Any, ...]:
    grid = np.asarray(eps, dtype=np.float64)
    claimed = np.asarray(mechanism.delta_for_epsilon(grid, value_discretization_interval=h),
                         dtype=np.float64).reshape(grid.shape)
    pld = mechanism.pld(h, estimator="bucket")
    cum = np.cumsum(np.asarray(pld.pmf, dtype=np.float64))
    lattice = np.asarray(pld.losses, dtype=np.float64)
    for a in (claimed, cum, lattice):
        a.setflags(write=False)
    return claimed, cum, lattice, float(pld.h)


_claim_cached = lru_cache(maxsize=16)(_claim_uncached)


def audit_mechanism(
    mechanism: Any,
    epsilons: Any = None,
    *,
    n_samples: int = 2**20,
    confidence: float = 0.95,
    sampler: Callable[[np.ndarray, int], np.ndarray] | None = None,
    rng: Any = None,
    batch_size: int = 2**17,
    h: float = 1e-4,
    atol: float = 1e-4,
    pld_points: int = 200,
) -> MechanismAudit:
    """Audit a sampler against the accountant: empirical ``delta(eps)`` and PLD vs claimed.

    Draws ``n_samples`` outputs of ``sampler`` on ``x0 = 0`` and on ``x1 = Delta e1``
    (``Delta = mechanism.sensitivity``; every SGG member is spherically symmetric, so this
    pair dominates all neighbours), scores them with the claimed privacy loss
    ``L = mechanism.privacy_loss``, and estimates on ``S_eps = {L > eps}``

        delta_hat(eps) = P_hat(S_eps) - e^eps Q_hat(S_eps)

    (and ``Q_hat(L < -eps) - e^eps P_hat(L < -eps)`` for the other direction) with
    Clopper-Pearson bounds simultaneous over the grid, both directions and both proportions
    (``4m`` intervals, Bonferroni, sharing ``(1 - confidence) / 2``). The claim is ``mechanism.delta_for_epsilon(eps)`` (the
    pessimistic PLD at resolution ``h``). A correct sampler gives ``lower <= claimed <=
    upper``; a sampler with too little noise gives ``lower > claimed`` (a violation) at
    a large enough ``n``. The loss CDF of the ``P`` samples is also checked against the
    accountant's PLD (``mechanism.pld(h, estimator="bucket")``) with the DKW band
    ``sqrt(ln(4 / (1 - confidence)) / (2 n))`` (the other half of ``1 - confidence``), so
    every statement of the result holds jointly with probability ``confidence``.

    Parameters
    ----------
    mechanism : SGGMechanism
        Supplies the claim (``delta_for_epsilon``, ``pld``, ``privacy_loss``).
    epsilons : array-like of shape (m,), optional
        Grid; default 21 points from 0 to ``mechanism.epsilon_for_delta(1e-3)``. Points at
        an atom of the loss (Laplace: ``+-Delta/b``) test a null set in exact arithmetic and
        expose floating-point effects of the output (Mironov 2012), so avoid them.
    n_samples : int, default=2**20
        Draws per neighbouring input.
    confidence : float, default=0.95
        Joint coverage of all delta bounds and the DKW band together.
    sampler : callable, optional
        ``sampler(x, seed) -> ndarray (n, dim)`` with ``x`` of shape (n, dim) float64 and an
        int seed; default ``mechanism.randomize`` (the native Philox SGG sampler).
    rng : numpy.random.Generator, int or None
        Source of the per-batch seeds.
    batch_size : int, default=2**17
        Draws per sampler call (memory: ``batch_size * dim`` floats).
    h : float, default=1e-4
        Value discretisation interval of the claimed PLD.
    atol : float, default=1e-4
        Allowance for the claim's pessimism in the consistency check (not in the violation).
    pld_points : int, default=200
        Loss values at which the CDFs are compared.

    Returns
    -------
    MechanismAudit

    Raises
    ------
    TypeError
        If ``mechanism`` lacks the methods above or ``sampler`` is not callable.
    ValueError
        On out-of-range arguments, or if the sampler returns a wrong shape or non-finite values.

    References
    ----------
    Ding, Wang, Wang, Zhang, Kifer, "Detecting violations of differential privacy", CCS 2018;
    Jagielski, Ullman, Oprea, "Auditing differentially private machine learning",
    arXiv 2006.07709; Dvoretzky-Kiefer-Wolfowitz with Massart's constant.

    Examples
    --------
    >>> from rml_fast.privacy import SGGMechanism
    >>> from rml_fast.privacy.auditing import audit_mechanism
    >>> res = audit_mechanism(SGGMechanism.gaussian(1, std=1.0), [0.5, 1.0, 2.0],
    ...                       n_samples=50_000, rng=0)
    >>> res.violation, res.consistent
    (False, True)
    """
    _check_mechanism(mechanism)
    n = int(check_scalar(n_samples, "n_samples", Interval("int", 1, None)))
    conf = float(check_scalar(confidence, "confidence", _CONF))
    batch = int(check_scalar(batch_size, "batch_size", Interval("int", 1, None)))
    h = float(check_scalar(h, "h", Interval("real", 0.0, 1.0, "neither")))
    atol = float(check_scalar(atol, "atol", Interval("real", 0.0, None, "left")))
    npts = int(check_scalar(pld_points, "pld_points", Interval("int", 1, None)))
    if sampler is not None and not callable(sampler):
        raise TypeError(f"sampler must be callable, got {type(sampler).__name__}")
    gen = check_rng(rng)
    if epsilons is None:
        e_max = float(mechanism.epsilon_for_delta(1e-3))
        eps = np.linspace(0.0, e_max if math.isfinite(e_max) else 5.0, 21)
    else:
        eps = check_array(epsilons, "epsilons", dtypes=(np.float64,), ndim=1)
        if eps.size == 0:
            raise ValueError("epsilons must not be empty")
    draw = sampler if sampler is not None else mechanism.randomize
    dim, sens = int(mechanism.dim), float(mechanism.sensitivity)

    # the claim: delta(eps) and the loss CDF on the PLD lattice (bucket estimator)
    claimed, cum, lattice, step = _claim(mechanism, tuple(eps.tolist()), h)
    inside = np.flatnonzero((cum >= 1e-3) & (cum <= 1 - 1e-3))
    if inside.size == 0 or inside[-1] + 1 >= cum.size:
        inside = np.arange(max(cum.size - 1, 1))
    pick = np.unique(np.linspace(inside[0], min(inside[-1], cum.size - 2), npts).astype(np.int64))
    pick = pick[pick + 1 < cum.size] if cum.size > 1 else pick
    loss_pts = lattice[pick] + step / 2 if cum.size > 1 else lattice[:1]
    cdf_lo = cum[pick] if cum.size > 1 else cum[:1]
    cdf_hi = cum[pick + 1] if cum.size > 1 else np.ones(1)

    order = np.argsort(eps, kind="stable")
    es = eps[order]
    m = eps.size
    kp_r = np.zeros(m, np.int64)  # remove direction: #(L > eps) under P and Q
    kq_r = np.zeros(m, np.int64)
    kp_a = np.zeros(m, np.int64)  # add direction: #(L < -eps) under P and Q
    kq_a = np.zeros(m, np.int64)
    k_cdf = np.zeros(loss_pts.size, np.int64)
    done = 0
    while done < n:
        b = min(batch, n - done)
        for side in (0, 1):
            x = np.zeros((b, dim))
            if side:
                x[:, 0] = sens
            y = np.asarray(draw(x, int(gen.integers(0, 2**62))))
            if y.shape != (b, dim):
                raise ValueError(f"sampler returned shape {y.shape}, expected {(b, dim)}")
            if not np.isfinite(y).all():
                raise ValueError("sampler returned non-finite values")
            loss = mechanism.privacy_loss(np.ascontiguousarray(y, dtype=np.float64))
            if side == 0:
                kp_r += _counts_above(loss, es)
                kp_a += _counts_above(-loss, es)
                k_cdf += np.searchsorted(np.sort(loss), loss_pts, side="right")
            else:
                kq_r += _counts_above(loss, es)
                kq_a += _counts_above(-loss, es)
        done += b
    inv = np.empty_like(order)
    inv[order] = np.arange(m)
    alpha = 1.0 - conf  # split: alpha/2 for the 4m delta intervals, alpha/2 for the DKW band
    level = 1.0 - alpha / (8 * m)
    est_r, lo_r, hi_r = _delta_from_counts(kp_r[inv], kq_r[inv], n, n, eps, level)
    est_a, lo_a, hi_a = _delta_from_counts(kq_a[inv], kp_a[inv], n, n, eps, level)
    first = est_r >= est_a
    est = np.where(first, est_r, est_a)
    lo = np.where(first, lo_r, lo_a)
    hi = np.where(first, hi_r, hi_a)
    excess = float(max(np.max(lo_r - claimed), np.max(lo_a - claimed)))
    violation = excess > 0.0
    within = bool(np.all(claimed <= hi_r + atol) and np.all(claimed <= hi_a + atol))
    dkw = math.sqrt(math.log(4.0 / alpha) / (2.0 * n))
    ecdf = k_cdf / n
    pld_ok = bool(np.all(ecdf >= cdf_lo - dkw) and np.all(ecdf <= cdf_hi + dkw))
    return MechanismAudit(
        epsilons=eps.copy(), claimed_delta=claimed.copy(), empirical_delta=est, lower=lo, upper=hi,
        violation=bool(violation), consistent=bool(not violation and within and pld_ok),
        max_excess=excess, pld_losses=loss_pts, pld_empirical_cdf=ecdf,
        pld_claimed_lower=cdf_lo, pld_claimed_upper=cdf_hi, dkw_width=dkw,
        pld_consistent=pld_ok, n_samples=n, confidence=conf,
        directions={"remove": {"estimate": est_r, "lower": lo_r, "upper": hi_r},
                    "add": {"estimate": est_a, "lower": lo_a, "upper": hi_a}},
    )


# --- one-run auditing ----------------------------------------------------------------------


def _check_counts(num_correct: Any, num_guesses: Any, num_canaries: Any) -> tuple[int, int, int]:
    m = int(check_scalar(num_canaries, "num_canaries", Interval("int", 1, None)))
    r = int(check_scalar(num_guesses, "num_guesses", Interval("int", 0, None)))
    v = int(check_scalar(num_correct, "num_correct", Interval("int", 0, None)))
    if r > m:
        raise ValueError(f"num_guesses must be at most num_canaries, got num_guesses={r} > "
                         f"num_canaries={m}")
    if v > r:
        raise ValueError(f"num_correct must be at most num_guesses, got num_correct={v} > "
                         f"num_guesses={r}")
    return v, r, m


def _p_value(v: int, r: int, m: int, eps: float, delta: float) -> float:
    if v == 0:
        return 1.0
    f_v = float(special.bdtrc(v - 1, r, special.expit(eps)))  # P[Binomial(r, q) >= v]
    if delta == 0.0:
        return min(1.0, f_v)
    j = np.arange(v - 1, -1, -1, dtype=np.float64)  # pmf(v-1), pmf(v-2), ..., pmf(0)
    log_pmf = (special.gammaln(r + 1.0) - special.gammaln(j + 1.0) - special.gammaln(r - j + 1.0)
               + j * special.log_expit(eps) + (r - j) * special.log_expit(-eps))
    alpha = float(np.max(np.cumsum(np.exp(log_pmf)) / np.arange(1, v + 1)))
    return min(1.0, f_v + 2.0 * m * delta * alpha)


def one_run_p_value(
    num_correct: int, num_guesses: int, num_canaries: int, epsilon: float, delta: float
) -> float:
    """Upper bound on ``P[W >= v]`` for an ``(eps, delta)``-DP training (one-run audit).

    Theorem 3.1 of Steinke, Nasr & Jagielski (arXiv 2305.08846): with ``m`` canaries each
    included with probability 1/2 and ``r`` guesses of which ``W`` are correct,

        P[W >= v] <= f(v) + 2 m delta max_{i=1..v} (f(v - i) - f(v)) / i,
        f(v) = P[Binomial(r, e^eps / (1 + e^eps)) >= v].

    Parameters
    ----------
    num_correct : int
        ``v``, ``0 <= v <= r``.
    num_guesses : int
        ``r``, ``0 <= r <= m`` (abstentions excluded; fixed before the run).
    num_canaries : int
        ``m >= 1``.
    epsilon : float
        ``>= 0``.
    delta : float
        In [0, 1).

    Returns
    -------
    float
        The p-value bound in [0, 1].

    Examples
    --------
    >>> from rml_fast.privacy.auditing import one_run_p_value
    >>> round(one_run_p_value(10, 10, 100, 0.0, 0.0), 6)   # 2^-10
    0.000977
    """
    v, r, m = _check_counts(num_correct, num_guesses, num_canaries)
    eps = float(check_scalar(epsilon, "epsilon", Interval("real", 0.0, None, "left")))
    delta = float(check_scalar(delta, "delta", _DELTA))
    return _p_value(v, r, m, eps, delta)


def one_run_epsilon_lower_bound(
    num_correct: int, num_guesses: int, num_canaries: int, delta: float, confidence: float = 0.95
) -> float:
    """The empirical epsilon: the largest ``eps`` rejected at ``confidence`` by the one-run test.

    ``sup{eps >= 0 : one_run_p_value(v, r, m, eps, delta) <= 1 - confidence}`` (0 if none),
    by bisection to 1e-6 (the p-value bound increases with ``eps``). With probability at
    least ``confidence`` an ``(eps, delta)``-DP training gives a bound ``<= eps``.

    Parameters
    ----------
    num_correct, num_guesses, num_canaries : int
        ``v <= r <= m`` as in :func:`one_run_p_value`.
    delta : float
        The claimed delta, in [0, 1).
    confidence : float, default=0.95

    Returns
    -------
    float

    Examples
    --------
    >>> from rml_fast.privacy.auditing import one_run_epsilon_lower_bound
    >>> round(one_run_epsilon_lower_bound(100, 100, 1000, 0.0), 3)  # logit(0.05 ** (1/100))
    3.493
    """
    v, r, m = _check_counts(num_correct, num_guesses, num_canaries)
    delta = float(check_scalar(delta, "delta", _DELTA))
    beta = 1.0 - float(check_scalar(confidence, "confidence", _CONF))
    if _p_value(v, r, m, 0.0, delta) > beta:
        return 0.0
    lo, hi = 0.0, 1.0
    while _p_value(v, r, m, hi, delta) <= beta:
        lo, hi = hi, 2.0 * hi
        if hi > 1e3:
            return math.inf
    while hi - lo > 1e-6:
        mid = 0.5 * (lo + hi)
        if _p_value(v, r, m, mid, delta) <= beta:
            lo = mid
        else:
            hi = mid
    return lo


@dataclass(frozen=True)
class OneRunAudit:
    """Result of :func:`audit_canary_scores`.

    Attributes
    ----------
    epsilon_lower_bound : float
        The best bound over the candidate guess counts (each at the Bonferroni level).
    num_guesses, num_correct, k : int
        Of the best candidate (``k`` top scores guessed in, ``k`` bottom guessed out).
    num_canaries : int
    delta, confidence : float
    table : list of dict
        One row per candidate ``k``: guesses, correct, bound.
    """

    epsilon_lower_bound: float
    num_guesses: int
    num_correct: int
    k: int
    num_canaries: int
    delta: float
    confidence: float
    table: list[dict[str, float]]


def audit_canary_scores(
    scores: Any,
    included: Any,
    delta: float,
    *,
    confidence: float = 0.95,
    guess_counts: Sequence[int] | None = None,
) -> OneRunAudit:
    """One-run audit from canary scores: guess the top ``k`` in and the bottom ``k`` out.

    For each candidate ``k`` (fixed before looking at the scores), ``r = 2k`` guesses are
    made and the bound of :func:`one_run_epsilon_lower_bound` is computed at level
    ``1 - (1 - confidence) / len(guess_counts)``; the best is returned (a union bound keeps
    the overall confidence).

    Parameters
    ----------
    scores : array-like of shape (m,)
        Larger means "more likely included". Ties are broken by index (stable sort).
    included : array-like of bool, shape (m,)
        The secret inclusion bits (each drawn with probability 1/2 before training).
    delta : float
        The claimed delta of the training, in [0, 1).
    confidence : float, default=0.95
    guess_counts : sequence of int, optional
        Candidate ``k`` values, ``1 <= k <= m // 2``; default ``m // d`` for
        ``d in (100, 50, 20, 10, 4, 2)`` (those >= 1).

    Returns
    -------
    OneRunAudit

    Examples
    --------
    >>> import numpy as np
    >>> from rml_fast.privacy.auditing import audit_canary_scores
    >>> rng = np.random.default_rng(0)
    >>> inc = rng.random(1000) < 0.5
    >>> res = audit_canary_scores(inc + rng.normal(0, 0.1, 1000), inc, delta=1e-6)
    >>> res.num_correct == res.num_guesses, round(res.epsilon_lower_bound, 2)
    (True, 4.64)
    """
    s = check_array(scores, "scores", dtypes=(np.float64,), ndim=1)
    m = s.size
    if m < 2:
        raise ValueError(f"scores must hold at least 2 canaries, got shape {s.shape}")
    inc = np.asarray(included)
    if inc.dtype != np.bool_ or inc.shape != s.shape:
        raise ValueError(f"included must be a bool array of the shape of scores {s.shape}, got "
                         f"{inc.dtype} {inc.shape}")
    delta = float(check_scalar(delta, "delta", _DELTA))
    conf = float(check_scalar(confidence, "confidence", _CONF))
    if guess_counts is None:
        ks = sorted({m // d for d in (100, 50, 20, 10, 4, 2) if m // d >= 1})
    else:
        ks = [int(check_scalar(k, "guess_counts[i]", Interval("int", 1, m // 2))) for k in guess_counts]
        if not ks:
            raise ValueError("guess_counts must not be empty")
    level = 1.0 - (1.0 - conf) / len(ks)
    order = np.argsort(-s, kind="stable")
    table: list[dict[str, float]] = []
    best = (-1.0, 0, 0, 0)
    for k in ks:
        v = int(inc[order[:k]].sum() + (~inc[order[m - k:]]).sum())
        lb = one_run_epsilon_lower_bound(v, 2 * k, m, delta, level)
        table.append({"k": k, "num_guesses": 2 * k, "num_correct": v, "epsilon_lower_bound": lb})
        if lb > best[0]:
            best = (lb, 2 * k, v, k)
    return OneRunAudit(best[0], best[1], best[2], best[3], m, delta, conf, table)


# --- training audit ------------------------------------------------------------------------


@dataclass(frozen=True)
class TrainingAudit:
    """Result of :func:`audit_dp_training`.

    Attributes
    ----------
    algorithm : str
    claimed_epsilon : float
        The PLD accountant's epsilon at ``delta`` for the noise actually used.
    delta : float
    noise_multiplier : float
    epsilon_lower_bound : float
        The one-run empirical epsilon (at ``audit.confidence``).
    audit : OneRunAudit
    scores : ndarray of shape (m,)
        Final canary weights (white-box scores).
    included : ndarray of bool, shape (m,)
    train_accuracy : float
        Accuracy of the trained logistic model on the real rows.
    """

    algorithm: str
    claimed_epsilon: float
    delta: float
    noise_multiplier: float
    epsilon_lower_bound: float
    audit: OneRunAudit
    scores: np.ndarray
    included: np.ndarray
    train_accuracy: float

    def __post_init__(self) -> None:
        _no_nan(self, ("scores",))  # an audit read from NaN canary scores would be void


def audit_dp_training(
    X: Any,
    y: Any,
    *,
    algorithm: str = "dpsgd",
    target_epsilon: float = 2.0,
    target_delta: float = 1e-6,
    noise_multiplier: float | None = None,
    num_canaries: int = 1000,
    canary_scale: float = 30.0,
    sample_rate: float = 0.1,
    steps: int = 100,
    lr: float = 0.5,
    anchor_clip: float = 1.0,
    confidence: float = 0.95,
    guess_counts: Sequence[int] | None = None,
    optimizer_kwargs: dict[str, Any] | None = None,
    rng: Any = None,
    progress: bool = False,
) -> TrainingAudit:
    """One-run audit of a DP-SGD / DP-C4 training with white-box Dirac gradient canaries.

    Each of ``m`` canaries is included with probability 1/2. The model is a logistic
    regression on ``[X, 1]`` with one extra weight per canary; canary ``j`` is the row
    ``canary_scale * e_j`` with the linear loss ``-<w, x>``, so its gradient is
    ``-canary_scale e_j`` at every iterate (clipped to ``anchor_clip`` when larger) and no
    other sample touches that weight. Training runs ``steps`` Poisson-sampled steps of
    :class:`~rml_fast.privacy.dp_c4.DPC4Optimizer` (rate ``q``, expected batch
    ``q (n + m/2)``); the score of a canary is its final weight, and
    :func:`audit_canary_scores` turns the scores into an empirical epsilon. A correct
    implementation gives ``epsilon_lower_bound <= claimed_epsilon`` with probability at
    least ``confidence``.

    Parameters
    ----------
    X : array-like of shape (n, d)
        Real features (standardise them first).
    y : array-like of shape (n,)
        Binary labels in {0, 1}.
    algorithm : {"dpsgd", "dpc4"}, default="dpsgd"
    target_epsilon : float, default=2.0
        Used to calibrate the noise when ``noise_multiplier`` is None.
    target_delta : float, default=1e-6
        The claimed delta (``2 m delta`` enters the bound: keep it well below 1).
    noise_multiplier : float, optional
        Noise multiplier to train with (the claim is then the accountant's epsilon for it).
    num_canaries : int, default=1000
    canary_scale : float, default=30.0
        Norm of a canary's gradient, > 0.
    sample_rate : float, default=0.1
        Poisson rate ``q`` in (0, 1].
    steps : int, default=100
    lr : float, default=0.5
    anchor_clip : float, default=1.0
        Clipping norm ``C`` (``C_g`` for DP-C4).
    confidence : float, default=0.95
    guess_counts : sequence of int, optional
        See :func:`audit_canary_scores`.
    optimizer_kwargs : dict, optional
        Further :class:`~rml_fast.privacy.dp_c4.DPC4Optimizer` arguments.
    rng : numpy.random.Generator, int or None
        Canary inclusion, Poisson batches and the noise seed.
    progress : bool, default=False
        Show a tqdm bar over the steps.

    Returns
    -------
    TrainingAudit

    Raises
    ------
    ValueError, TypeError
        On bad arguments, before training.

    References
    ----------
    Steinke, Nasr, Jagielski, arXiv 2305.08846 (Theorem 3.1; white-box gradient canaries).

    Examples
    --------
    >>> import numpy as np
    >>> from rml_fast.privacy.auditing import audit_dp_training
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(200, 5)); y = (X[:, 0] > 0).astype(float)
    >>> res = audit_dp_training(X, y, num_canaries=200, steps=20, rng=0)
    >>> bool(res.epsilon_lower_bound <= res.claimed_epsilon)
    True
    """
    from rml_fast.privacy._auditing_training import train_with_canaries
    from rml_fast.privacy.dp_c4 import ALGORITHMS, calibrate_noise_multiplier, privacy_spent

    Xa = check_array(X, "X", dtypes=(np.float64,), ndim=2)
    ya = check_array(y, "y", dtypes=(np.float64,), ndim=1)
    if Xa.shape[0] == 0:
        raise ValueError(f"X must hold at least one row, got shape {Xa.shape}")
    if ya.shape[0] != Xa.shape[0]:
        raise ValueError(f"y must have shape ({Xa.shape[0]},) (one label per row of X), got "
                         f"{ya.shape}")
    if not np.isin(ya, (0.0, 1.0)).all():
        raise ValueError("y must hold binary labels in {0, 1}")
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm must be one of {ALGORITHMS}, got {algorithm!r}")
    t_eps = float(check_scalar(target_epsilon, "target_epsilon", _POS))
    t_delta = float(check_scalar(target_delta, "target_delta", Interval("real", 0.0, 1.0, "neither")))
    m = int(check_scalar(num_canaries, "num_canaries", Interval("int", 2, None)))
    scale = float(check_scalar(canary_scale, "canary_scale", _POS))
    q = float(check_scalar(sample_rate, "sample_rate", Interval("real", 0.0, 1.0, "right")))
    T = int(check_scalar(steps, "steps", Interval("int", 1, None)))
    lr = float(check_scalar(lr, "lr", _POS))
    clip = float(check_scalar(anchor_clip, "anchor_clip", _POS))
    conf = float(check_scalar(confidence, "confidence", _CONF))
    kwargs = dict(optimizer_kwargs or {})
    clash = {"lr", "noise_multiplier", "expected_batch_size", "sample_rate", "anchor_clip",
             "algorithm", "seed"} & set(kwargs)
    if clash:
        raise ValueError(f"optimizer_kwargs must not set {sorted(clash)} (use the arguments)")
    if noise_multiplier is None:
        sigma = calibrate_noise_multiplier(t_eps, t_delta, q, T)
    else:
        sigma = float(check_scalar(noise_multiplier, "noise_multiplier", _POS))
    gen = check_rng(rng)
    included = gen.random(m) < 0.5
    seed = int(gen.integers(0, 2**62))
    w, acc = train_with_canaries(
        Xa, ya, included, scale=scale, algorithm=algorithm, noise_multiplier=sigma,
        sample_rate=q, steps=T, lr=lr, anchor_clip=clip, seed=seed, batch_rng=gen,
        optimizer_kwargs=kwargs, progress=progress,
    )
    scores = w[Xa.shape[1] + 1:]
    audit = audit_canary_scores(scores, included, t_delta, confidence=conf, guess_counts=guess_counts)
    claimed = privacy_spent(sigma, q, T, t_delta)
    return TrainingAudit(algorithm, claimed, t_delta, sigma, audit.epsilon_lower_bound, audit,
                         scores, included, acc)
