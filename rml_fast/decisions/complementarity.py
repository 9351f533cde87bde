"""Robust human-AI complementarity: error correlations and robust linear pooling.

After *Towards Robust Human-AI Complementarity under Uncertainty* (ICML 2026; arXiv id not found).
Only the paper's abstract was available to us, so the concrete model below is the PROPOSED
formalisation of spec ``tabular_decisions.md`` §7:

* a binary (or real) outcome ``Y``, a human forecast ``H`` and an AI forecast ``A``; errors
  ``e_H = H - Y``, ``e_A = A - Y`` with second moments ``s_H^2 = E e_H^2``, ``s_A^2 = E e_A^2`` and
  correlation ``rho = E[e_H e_A] / (s_H s_A)`` (uncentred by default);
* the decision maker (DM) pools linearly, ``p_w = (1 - w) H + w A``, and scores by the Brier /
  squared loss, so (eq. 7.1)

  ``MSE(w) = (1-w)^2 s_H^2 + w^2 s_A^2 + 2 w (1-w) rho s_H s_A``,  ``G(w) = s_H^2 - MSE(w)``;

* asymmetric information: the DM knows ``s_H`` (its own track record) but only a box
  ``U = [s_A^lo, s_A^hi] x [rho_lo, rho_hi]`` for the AI; the robust weight is
  ``w* = argmax_{w in [0,1]} min_{U} G(w)`` (eq. 7.2). ``G`` is concave in ``s_A`` and linear in
  ``rho``, so the inner minimum sits at a vertex of ``U`` and the max-min is solved exactly.

Guarantee (eq. 7.3): for every ``(s_A, rho)`` in ``U`` and every ``w`` in ``(0, 2 w_min)``,
``G(w) > 0``, where ``w_min`` is the smallest vertex-optimal weight
``w_v = s_H (s_H - rho s_A) / (s_H^2 + s_A^2 - 2 rho s_H s_A)``. When ``rho_hi <= 0`` this interval
contains ``(0, 2 s_H^2 / (s_H^2 + (s_A^hi)^2))`` (the abstract's "negatively correlated errors
guarantee an improvement"); when ``rho_hi s_A^hi >= s_H`` no ``w > 0`` is robustly improving.

A note on probability forecasts: for forecasts in ``[0, 1]`` of a 0/1 outcome, ``e_H`` and
``e_A`` always have the same sign, so the *outcome* error correlation is non-negative. Negative
correlations live in the errors relative to the true probability ``p* = P(Y = 1 | info)``:
since ``E[(H - Y)(A - Y)] = E[(H - p*)(A - p*)] + E[p*(1 - p*)]`` for forecasts measurable
w.r.t. the information, passing the irreducible noise ``E[p*(1 - p*)]`` as ``noise_floor``
recovers them. ``G`` does not change (the floor cancels), only ``s`` and ``rho`` are reported
relative to ``p*``.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, ClassVar, NamedTuple

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from rml_fast._sklearn_validation import validate_named
from rml_fast._validation import Interval, check_array, check_rng, check_scalar
from rml_fast.decisions._complementarity_boot import bootstrap_counts, bootstrap_means

__all__ = [
    "STRATEGIES",
    "RobustComplementarity",
    "RobustWeight",
    "SimulatedForecasts",
    "bootstrap_error_moments",
    "compare_strategies",
    "decide",
    "error_moments",
    "optimal_pooling_weight",
    "pool",
    "pooling_gain",
    "pooling_mse",
    "robust_improvement_interval",
    "robust_pooling_weight",
    "simulate_forecasts",
    "worst_case_gain",
]

#: the combination strategies of :class:`RobustComplementarity` (``strategy=``)
STRATEGIES = ("robust", "plugin", "human", "ai", "average")
_UNCERTAINTY = ("bootstrap", "fisher", "none")
_SPACES = ("prob", "logit")
_METHODS = ("exact", "grid", "cvxpy")
_LOGIT_GRID = 201


# --------------------------------------------------------------------------- validation helpers


def _forecast_triple(h: Any, a: Any, y: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    h = check_array(h, "h", ndim=1)
    a = check_array(a, "a", ndim=1)
    y = check_array(y, "y", ndim=1)
    if not (h.shape == a.shape == y.shape):
        raise ValueError(
            f"h, a and y must have the same shape (n,), got {h.shape}, {a.shape} and {y.shape}")
    if h.shape[0] < 2:
        raise ValueError(f"h, a and y need at least 2 cases, got {h.shape[0]}")
    return (h.astype(np.float64, copy=False), a.astype(np.float64, copy=False),
            y.astype(np.float64, copy=False))


def _nonneg(value: Any, name: str) -> float:
    return float(check_scalar(value, name, Interval("real", 0.0, None)))


def _range(value: Any, name: str, lo: float | None, hi: float | None) -> tuple[float, float]:
    if isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_)):
        value = (value, value)
    try:
        pair = tuple(value)
    except TypeError as exc:
        raise TypeError(f"{name} must be a pair (lo, hi) or a number, got {value!r}") from exc
    if len(pair) != 2:
        raise ValueError(f"{name} must be a pair (lo, hi), got {value!r}")
    v_lo = float(check_scalar(pair[0], f"{name}[0]", Interval("real", lo, hi)))
    v_hi = float(check_scalar(pair[1], f"{name}[1]", Interval("real", lo, hi)))
    if v_lo > v_hi:
        raise ValueError(f"{name} must satisfy lo <= hi, got {value!r}")
    return v_lo, v_hi


# --------------------------------------------------------------------------- simulation


class SimulatedForecasts(NamedTuple):
    """Output of :func:`simulate_forecasts` (all arrays of shape (n,), float64 except ``y``).

    Attributes
    ----------
    h, a : ndarray
        Human and AI forecasts.
    y : ndarray of int64
        0/1 outcomes.
    p_true : ndarray
        The probability ``P(Y = 1)`` each outcome was drawn from.
    noise_floor : float
        ``E[p_true (1 - p_true)]`` of the generator (0 for ``kind="outcome"``'s errors, which are
        added to ``Y`` itself): pass it to :func:`error_moments` to recover ``s_h, s_a, rho``.
    """

    h: np.ndarray
    a: np.ndarray
    y: np.ndarray
    p_true: np.ndarray
    noise_floor: float


def simulate_forecasts(n: int, s_h: float, s_a: float, rho: float, *, kind: str = "outcome",
                       base_rate: float = 0.5, rng: Any = None) -> SimulatedForecasts:
    """Draw forecasts whose errors have known second moments and correlation.

    ``(e_H, e_A)`` are bivariate normal with mean 0, standard deviations ``(s_h, s_a)`` and
    correlation ``rho``.

    * ``kind="outcome"``: ``Y ~ Bernoulli(base_rate)``, ``H = Y + e_H``, ``A = Y + e_A``; the
      outcome errors ``H - Y`` have exactly the stated moments (``noise_floor = 0``).
    * ``kind="latent"``: ``p* ~ Beta`` with mean ``base_rate`` (``Beta(2 base_rate, 2 (1 -
      base_rate))``), ``H = p* + e_H``, ``A = p* + e_A``, ``Y ~ Bernoulli(p*)``: errors relative to
      the true probability have the stated moments, the outcome errors add the irreducible noise
      ``E p*(1 - p*) = base_rate (1 - base_rate) * 2/3`` (returned as ``noise_floor``).

    Forecasts are not clipped to [0, 1] (clipping would change the moments).

    Parameters
    ----------
    n : int
        Number of cases (>= 2).
    s_h, s_a : float
        Error standard deviations (>= 0).
    rho : float
        Error correlation in [-1, 1].
    kind : {"outcome", "latent"}, default="outcome"
    base_rate : float, default=0.5
        ``P(Y = 1)``, in (0, 1).
    rng : numpy.random.Generator, int or None

    Returns
    -------
    SimulatedForecasts

    Examples
    --------
    >>> from rml_fast.decisions.complementarity import simulate_forecasts, error_moments
    >>> sim = simulate_forecasts(200_000, 0.3, 0.4, -0.5, rng=0)
    >>> m = error_moments(sim.h, sim.a, sim.y)
    >>> round(m["s_h"], 2), round(m["s_a"], 2), round(m["rho"], 2)
    (0.3, 0.4, -0.5)
    """
    n = int(check_scalar(n, "n", Interval("int", 2, None)))
    s_h = _nonneg(s_h, "s_h")
    s_a = _nonneg(s_a, "s_a")
    rho = float(check_scalar(rho, "rho", Interval("real", -1.0, 1.0)))
    base_rate = float(check_scalar(base_rate, "base_rate",
                                   Interval("real", 0.0, 1.0, closed="neither")))
    if kind not in ("outcome", "latent"):
        raise ValueError(f"kind must be 'outcome' or 'latent', got {kind!r}")
    gen = check_rng(rng)
    z1 = gen.standard_normal(n)
    z2 = gen.standard_normal(n)
    e_h = s_h * z1
    e_a = s_a * (rho * z1 + math.sqrt(max(0.0, 1.0 - rho * rho)) * z2)
    if kind == "outcome":
        p_true = np.full(n, base_rate)
        y = (gen.random(n) < base_rate).astype(np.int64)
        return SimulatedForecasts(y + e_h, y + e_a, y, p_true, 0.0)
    p_true = gen.beta(2.0 * base_rate, 2.0 * (1.0 - base_rate), size=n)
    y = (gen.random(n) < p_true).astype(np.int64)
    floor = base_rate * (1.0 - base_rate) * 2.0 / 3.0  # E p(1-p) for Beta(2m, 2(1-m))
    return SimulatedForecasts(p_true + e_h, p_true + e_a, y, p_true, floor)


# --------------------------------------------------------------------------- estimation


def _moments_from_means(m: np.ndarray, centered: bool, noise_floor: float) -> dict[str, Any]:
    """``m[..., :] = (E e_h^2, E e_a^2, E e_h e_a, E e_h, E e_a)`` -> s_h, s_a, rho, cov."""
    mhh, maa, mha, mh, ma = (m[..., j] for j in range(5))
    if centered:
        mhh, maa, mha = mhh - mh * mh, maa - ma * ma, mha - mh * ma
    mhh, maa, mha = mhh - noise_floor, maa - noise_floor, mha - noise_floor
    with np.errstate(invalid="ignore", divide="ignore"):
        s_h = np.sqrt(np.maximum(mhh, 0.0))
        s_a = np.sqrt(np.maximum(maa, 0.0))
        denom = s_h * s_a
        rho = np.where(denom > 0, mha / np.where(denom > 0, denom, 1.0), 0.0)
    rho = np.clip(rho, -1.0, 1.0)
    return {"s_h": s_h, "s_a": s_a, "rho": rho, "cov": mha, "bias_h": mh, "bias_a": ma}


def _stats(h: np.ndarray, a: np.ndarray, y: np.ndarray) -> np.ndarray:
    e_h, e_a = h - y, a - y
    return np.stack([e_h * e_h, e_a * e_a, e_h * e_a, e_h, e_a])


def _check_floor(noise_floor: Any) -> float:
    return _nonneg(noise_floor, "noise_floor")


def error_moments(h: Any, a: Any, y: Any, *, centered: bool = False,
                  noise_floor: float = 0.0) -> dict[str, Any]:
    """Error second moments and error correlation of two forecasters (spec §7.1).

    ``s_h = sqrt(E (H - Y)^2)``, ``s_a = sqrt(E (A - Y)^2)``,
    ``cov = E[(H - Y)(A - Y)]``, ``rho = cov / (s_h s_a)`` (sample means over the ``n`` cases).

    Parameters
    ----------
    h, a : array-like of shape (n,)
        Human and AI forecasts (probabilities for a binary outcome, or any real predictions).
    y : array-like of shape (n,)
        Outcomes (0/1 for forecasting; any real numbers for regression).
    centered : bool, default=False
        Subtract the mean errors (biases) first: ``rho`` is then Pearson's correlation of the
        errors. The uncentred moments (default) are the ones that make ``pooling_mse`` exact.
    noise_floor : float, default=0.0
        PROPOSED option. An irreducible noise ``E[p*(1 - p*)]`` subtracted from the three second
        moments, so that ``s_h, s_a, rho`` describe the errors relative to the true probability
        ``p*`` (module docstring). Pooling gains are unchanged by it.

    Returns
    -------
    dict
        ``s_h, s_a, rho, cov, bias_h, bias_a`` (floats) and ``n`` (int). ``rho`` is 0 when a
        standard deviation is 0 and is clipped to [-1, 1].

    Raises
    ------
    ValueError
        On arrays of different shapes, fewer than 2 cases, non-finite values.

    Examples
    --------
    >>> import numpy as np
    >>> from rml_fast.decisions.complementarity import error_moments
    >>> y = np.array([1, 0, 1, 0])
    >>> h = np.array([0.8, 0.1, 0.6, 0.3])
    >>> a = np.array([0.6, 0.3, 0.9, 0.1])
    >>> m = error_moments(h, a, y)
    >>> round(m["s_h"], 4), round(m["s_a"], 4), round(m["rho"], 4)
    (0.2739, 0.2598, 0.6325)
    """
    h, a, y = _forecast_triple(h, a, y)
    floor = _check_floor(noise_floor)
    means = _stats(h, a, y).mean(axis=1)
    out = {k: float(v) for k, v in _moments_from_means(means, bool(centered), floor).items()}
    out["n"] = int(h.shape[0])
    return out


def bootstrap_error_moments(h: Any, a: Any, y: Any, *, n_boot: int = 1000,
                            centered: bool = False, noise_floor: float = 0.0,
                            rng: Any = None) -> dict[str, np.ndarray]:
    """Bootstrap distribution of :func:`error_moments` (cases resampled with replacement).

    Vectorised: the ``n_boot`` resamples are drawn in chunks of indices and the five per-case
    statistics are averaged by gathers (1e4 cases x 1e3 resamples: well under a second).

    Parameters
    ----------
    h, a, y : array-like of shape (n,)
        As in :func:`error_moments`.
    n_boot : int, default=1000
        Number of resamples.
    centered, noise_floor
        As in :func:`error_moments`.
    rng : numpy.random.Generator, int or None

    Returns
    -------
    dict of ndarray of shape (n_boot,)
        ``s_h, s_a, rho, cov, bias_h, bias_a`` for each resample.

    Examples
    --------
    >>> from rml_fast.decisions.complementarity import simulate_forecasts, bootstrap_error_moments
    >>> sim = simulate_forecasts(2000, 0.3, 0.3, 0.2, rng=1)
    >>> boot = bootstrap_error_moments(sim.h, sim.a, sim.y, n_boot=500, rng=0)
    >>> boot["rho"].shape
    (500,)
    >>> bool(0.1 < boot["rho"].mean() < 0.3)
    True
    """
    h, a, y = _forecast_triple(h, a, y)
    n_boot = int(check_scalar(n_boot, "n_boot", Interval("int", 1, None)))
    floor = _check_floor(noise_floor)
    gen = check_rng(rng)
    means = bootstrap_means(_stats(h, a, y), n_boot, gen)
    return _moments_from_means(means, bool(centered), floor)


# --------------------------------------------------------------------------- the pooling model


def pooling_mse(w: Any, s_h: Any, s_a: Any, rho: Any) -> Any:
    """Mean squared error of the linear pool ``(1 - w) H + w A`` (spec eq. 7.1).

    ``MSE(w) = (1-w)^2 s_h^2 + w^2 s_a^2 + 2 w (1-w) rho s_h s_a``. Exact for the uncentred
    moments of :func:`error_moments`. All arguments broadcast (NumPy rules).

    Parameters
    ----------
    w : float or array-like
        Weight on the AI (any real; the strategies use [0, 1]).
    s_h, s_a : float or array-like
        Error root-mean-squares (>= 0).
    rho : float or array-like
        Error correlation in [-1, 1].

    Returns
    -------
    float or ndarray

    Examples
    --------
    >>> from rml_fast.decisions.complementarity import pooling_mse
    >>> pooling_mse(0.5, 0.4, 0.4, -1.0)    # perfectly anti-correlated, equal errors
    0.0
    >>> round(pooling_mse(0.5, 0.4, 0.4, 0.0), 4)   # independent: half the variance
    0.08
    """
    w, s_h, s_a, rho = _model_args(w, s_h, s_a, rho)
    out = (1 - w) ** 2 * s_h**2 + w**2 * s_a**2 + 2 * w * (1 - w) * rho * s_h * s_a
    return float(out) if np.ndim(out) == 0 else out


def pooling_gain(w: Any, s_h: Any, s_a: Any, rho: Any) -> Any:
    """Gain of pooling over the human alone, ``G(w) = s_h^2 - MSE(w)`` (spec eq. 7.1).

    ``G(w) = w (2 - w) s_h^2 - w^2 s_a^2 - 2 w (1 - w) rho s_h s_a`` (a Brier-score
    improvement: positive means the pool beats the human). Arguments broadcast.

    Parameters
    ----------
    w, s_h, s_a, rho
        As in :func:`pooling_mse`.

    Returns
    -------
    float or ndarray

    Examples
    --------
    >>> from rml_fast.decisions.complementarity import pooling_gain
    >>> round(pooling_gain(0.5, 0.3, 0.3, 0.0), 4)   # independent equal errors: half of 0.09
    0.045
    >>> pooling_gain([0.0, 1.0], 0.3, 0.5, 0.2).round(2)
    array([ 0.  , -0.16])
    """
    w, s_h, s_a, rho = _model_args(w, s_h, s_a, rho)
    out = s_h**2 - ((1 - w) ** 2 * s_h**2 + w**2 * s_a**2 + 2 * w * (1 - w) * rho * s_h * s_a)
    return float(out) if np.ndim(out) == 0 else out


def _model_args(w: Any, s_h: Any, s_a: Any, rho: Any) -> tuple[np.ndarray, ...]:
    w = check_array(w, "w", dtypes=(np.float64,))
    s_h = check_array(s_h, "s_h", dtypes=(np.float64,))
    s_a = check_array(s_a, "s_a", dtypes=(np.float64,))
    rho = check_array(rho, "rho", dtypes=(np.float64,))
    if (s_h < 0).any() or (s_a < 0).any():
        raise ValueError("s_h and s_a must be >= 0 (root-mean-square errors)")
    if (np.abs(rho) > 1).any():
        raise ValueError("rho must lie in [-1, 1]")
    return w, s_h, s_a, rho


def optimal_pooling_weight(s_h: float, s_a: float, rho: float, *, clip: bool = True) -> float:
    """The classical MSE-optimal weight on the AI (known moments; spec §7.1).

    ``w_opt = s_h (s_h - rho s_a) / (s_h^2 + s_a^2 - 2 rho s_h s_a)`` (Bates-Granger). When the
    denominator is 0 (``rho = 1`` and ``s_a = s_h``) every weight has the same MSE and 0 (the
    human) is returned.

    Parameters
    ----------
    s_h, s_a : float
        Error root-mean-squares (>= 0).
    rho : float
        Error correlation in [-1, 1].
    clip : bool, default=True
        Clip to [0, 1] (the DM's pools); ``False`` returns the unconstrained minimiser.

    Returns
    -------
    float

    Examples
    --------
    >>> from rml_fast.decisions.complementarity import optimal_pooling_weight
    >>> optimal_pooling_weight(0.3, 0.3, 0.0)
    0.5
    >>> round(optimal_pooling_weight(0.2, 0.4, 0.0), 3)   # inverse-variance weights
    0.2
    """
    s_h = _nonneg(s_h, "s_h")
    s_a = _nonneg(s_a, "s_a")
    rho = float(check_scalar(rho, "rho", Interval("real", -1.0, 1.0)))
    w = _vertex_weight(s_h, s_a, rho)
    return float(min(1.0, max(0.0, w))) if clip else float(w)


def _vertex_weight(s_h: float, s_a: float, rho: float) -> float:
    den = s_h * s_h + s_a * s_a - 2.0 * rho * s_h * s_a
    if den <= 1e-300:
        return 0.0
    return s_h * (s_h - rho * s_a) / den


class RobustWeight(NamedTuple):
    """Result of :func:`robust_pooling_weight`.

    Attributes
    ----------
    w : float
        The robust weight on the AI, in [0, 1].
    guaranteed_gain : float
        ``min_{U} G(w)``: the gain over the human alone that holds for every ``(s_a, rho)`` in
        the uncertainty box (>= 0, since ``w = 0`` guarantees 0).
    worst_s_a, worst_rho : float
        A vertex of the box where the minimum is attained.
    """

    w: float
    guaranteed_gain: float
    worst_s_a: float
    worst_rho: float


def _vertices(s_a_range: tuple[float, float],
              rho_range: tuple[float, float]) -> list[tuple[float, float]]:
    return [(sa, r) for sa in sorted(set(s_a_range)) for r in sorted(set(rho_range))]


def _worst(w: np.ndarray, s_h: Any, verts: list[tuple[float, float]]) -> np.ndarray:
    """``min_U G(w)``; ``s_h`` a float (known) or a pair ``(lo, hi)`` (PROPOSED extension).

    For a range, ``G`` is convex in ``s_h`` (coefficient ``w (2 - w) >= 0``), minimised at
    ``s_h* = (1 - w) rho s_a / (2 - w)`` clipped to the range, for each ``(s_a, rho)`` vertex.
    """
    if isinstance(s_h, tuple):
        lo, hi = s_h
        w = np.asarray(w, dtype=np.float64)
        vals = []
        for sa, r in verts:
            sh = np.clip((1.0 - w) * r * sa / np.maximum(2.0 - w, 1e-300), lo, hi)
            vals.append(pooling_gain(w, sh, sa, r))
        return np.min(np.stack(vals), axis=0)
    return np.min(np.stack([pooling_gain(w, s_h, sa, r) for sa, r in verts]), axis=0)


#: error root-mean-squares above this overflow the gains (their squares exceed float64's range)
_MAX_RMS = 1e150


def _check_scale(s_h: float | tuple[float, float], sa: tuple[float, float]) -> None:
    """Refuse error scales whose squares overflow (the gains would be inf/NaN)."""
    top_h = max(s_h) if isinstance(s_h, tuple) else s_h
    if top_h > _MAX_RMS:
        raise ValueError(f"s_h must be at most {_MAX_RMS:g} (its square must be finite), got "
                         f"{top_h!r}")
    if sa[1] > _MAX_RMS:
        raise ValueError(f"s_a_range must be at most {_MAX_RMS:g} (its square must be finite), "
                         f"got {sa[1]!r}")


def _s_h_arg(s_h: Any) -> float | tuple[float, float]:
    """A known ``s_h`` (float) or, for a non-degenerate pair, the range ``(lo, hi)``."""
    if isinstance(s_h, numbers.Real) and not isinstance(s_h, (bool, np.bool_)):
        return _nonneg(s_h, "s_h")
    if isinstance(s_h, (str, bytes)):
        raise TypeError(f"s_h must be a number >= 0 or a pair (lo, hi), got {s_h!r}")
    lo, hi = _range(s_h, "s_h", 0.0, None)
    return lo if lo == hi else (lo, hi)


def worst_case_gain(w: Any, s_h: float | tuple[float, float], s_a_range: Any, rho_range: Any) -> Any:
    """``min_{(s_a, rho) in U} G(w)`` for fixed weight(s) ``w`` (spec eq. 7.2's inner problem).

    The minimum is over the four vertices of ``U`` (``G`` is concave in ``s_a``, linear in
    ``rho``).

    Parameters
    ----------
    w : float or array-like
        Weight(s) on the AI.
    s_h : float or (float, float)
        The human's (known) error root-mean-square; a pair ``(lo, hi)`` is an interval
        (PROPOSED extension, see :func:`robust_pooling_weight`).
    s_a_range : (float, float) or float
        ``[s_a_lo, s_a_hi]`` with ``0 <= lo <= hi``; a number is a point.
    rho_range : (float, float) or float
        ``[rho_lo, rho_hi]`` within [-1, 1]; a number is a point.

    Returns
    -------
    float or ndarray

    Examples
    --------
    >>> from rml_fast.decisions.complementarity import worst_case_gain
    >>> round(worst_case_gain(0.5, 0.3, (0.25, 0.35), (-0.2, 0.0)), 5)
    0.03688
    """
    s_h = _s_h_arg(s_h)
    sa = _range(s_a_range, "s_a_range", 0.0, None)
    rr = _range(rho_range, "rho_range", -1.0, 1.0)
    _check_scale(s_h, sa)
    w = check_array(w, "w", dtypes=(np.float64,))
    out = _worst(w, s_h, _vertices(sa, rr))
    return float(out) if np.ndim(out) == 0 else out


def robust_pooling_weight(s_h: float | tuple[float, float], s_a_range: Any, rho_range: Any, *, method: str = "exact",
                          grid: Any = None) -> RobustWeight:
    """Robust (max-min) pooling weight under an uncertainty box for the AI (spec eq. 7.2).

    ``w* = argmax_{w in [0,1]} min_{(s_a, rho) in U} G(w)``. Each vertex gain
    ``G_v(w) = b_v w - c_v w^2`` (``b_v = 2 s_h (s_h - rho_v s_a,v)``,
    ``c_v = s_h^2 + s_a,v^2 - 2 rho_v s_h s_a,v >= 0``) is a concave parabola, so their minimum is
    concave and its maximum over [0, 1] is at an end point, a vertex optimum ``b_v / 2 c_v`` or a
    crossing of two parabolas: ``method="exact"`` evaluates all of them. Ties go to the smallest
    weight (the DM keeps its own forecast unless the AI helps).

    Parameters
    ----------
    s_h : float or (float, float)
        The human's error root-mean-square (known to the DM). A pair ``(lo, hi)`` makes the DM
        uncertain of its own error too (PROPOSED extension): ``G`` is convex in ``s_h``, so its
        minimum over ``[lo, hi]`` is at ``clip((1 - w) rho s_a / (2 - w), lo, hi)`` per vertex;
        the worst case is still concave in ``w`` and ``"exact"`` maximises it by golden-section
        search (to 1e-13).
    s_a_range : (float, float) or float
        ``[s_a_lo, s_a_hi]``; a number is a point.
    rho_range : (float, float) or float
        ``[rho_lo, rho_hi]`` in [-1, 1]; a number is a point.
    method : {"exact", "grid", "cvxpy"}, default="exact"
        ``"grid"`` maximises over ``grid`` (default 1001 points of [0, 1]); ``"cvxpy"`` solves the
        epigraph program ``max t s.t. t <= G_v(w), 0 <= w <= 1`` (a check of the exact solver).
    grid : array-like of shape (m,), optional
        Weights in [0, 1] for ``method="grid"``.

    Returns
    -------
    RobustWeight
        ``(w, guaranteed_gain, worst_s_a, worst_rho)``.

    Raises
    ------
    ValueError
        On ``s_h < 0``, a range with ``lo > hi``, ``s_a < 0``, ``|rho| > 1``, an unknown method or a
        grid outside [0, 1].

    Examples
    --------
    >>> from rml_fast.decisions.complementarity import robust_pooling_weight
    >>> r = robust_pooling_weight(0.3, (0.25, 0.35), (-0.3, -0.1))
    >>> round(r.w, 4), round(r.guaranteed_gain, 5), r.worst_s_a, r.worst_rho
    (0.4304, 0.04326, 0.35, -0.1)
    >>> robust_pooling_weight(0.3, 0.3, 0.0).w     # a point box: the classical weight
    0.5
    >>> robust_pooling_weight(0.3, (0.2, 0.6), (0.5, 0.9)).w   # rho_hi * s_a_hi >= s_h: keep H
    0.0
    """
    s_h = _s_h_arg(s_h)
    sa = _range(s_a_range, "s_a_range", 0.0, None)
    rr = _range(rho_range, "rho_range", -1.0, 1.0)
    _check_scale(s_h, sa)
    if method not in _METHODS:
        raise ValueError(f"method must be one of {_METHODS}, got {method!r}")
    verts = _vertices(sa, rr)
    if isinstance(s_h, tuple) and method == "cvxpy":
        raise ValueError("method='cvxpy' needs a known s_h (a number), got a range")
    if isinstance(s_h, tuple) and method == "exact":
        cand = np.array([0.0, 1.0, _maximise_concave(lambda w: _worst(w, s_h, verts))])
    elif method == "grid":
        g = (np.linspace(0.0, 1.0, 1001) if grid is None
             else check_array(grid, "grid", dtypes=(np.float64,), ndim=1))
        if g.size == 0 or (g < 0).any() or (g > 1).any():
            raise ValueError("grid must be a non-empty 1-D array of weights in [0, 1]")
        cand = np.sort(g)
    elif method == "cvxpy" and not isinstance(s_h, tuple):  # a range raised above
        cand = np.array([_cvxpy_robust(s_h, verts)])
    else:
        assert not isinstance(s_h, tuple)  # "exact" with a range took the first branch
        pts = [0.0, 1.0]
        coef = []
        for s_a, r in verts:
            c = s_h * s_h + s_a * s_a - 2.0 * r * s_h * s_a
            b = 2.0 * s_h * (s_h - r * s_a)
            coef.append((b, c))
            if c > 0:
                pts.append(b / (2.0 * c))
        for i in range(len(coef)):
            for j in range(i + 1, len(coef)):
                dc = coef[i][1] - coef[j][1]
                if abs(dc) > 1e-300:
                    pts.append((coef[i][0] - coef[j][0]) / dc)
        cand = np.unique(np.clip(np.asarray(pts, dtype=np.float64), 0.0, 1.0))
    vals = _worst(cand, s_h, verts)
    best = vals.max()
    sh_top = max(s_h) if isinstance(s_h, tuple) else s_h
    tol = 1e-12 * max(sh_top * sh_top, max(sa) ** 2, 1e-300)
    k = int(np.flatnonzero(vals >= best - tol)[0])
    w = float(cand[k])
    gains = [_worst(np.array(w), s_h, [vert]) for vert in verts]
    v = int(np.argmin(gains))
    return RobustWeight(w, float(max(vals[k], 0.0) if w == 0.0 else vals[k]),
                        float(verts[v][0]), float(verts[v][1]))


def _maximise_concave(f: Any, lo: float = 0.0, hi: float = 1.0, tol: float = 1e-13) -> float:
    """Golden-section search for the maximiser of a concave function on [lo, hi]."""
    g = (math.sqrt(5.0) - 1.0) / 2.0
    a, b = lo, hi
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = float(f(np.array(c))), float(f(np.array(d)))
    while b - a > tol:
        if fc >= fd:  # ties move left (towards the human)
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = float(f(np.array(c)))
        else:
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = float(f(np.array(d)))
    return 0.5 * (a + b)


def _cvxpy_robust(s_h: float, verts: list[tuple[float, float]]) -> float:
    import cvxpy as cp

    w = cp.Variable()
    t = cp.Variable()
    cons = [w >= 0, w <= 1]
    for s_a, r in verts:
        c = s_h * s_h + s_a * s_a - 2.0 * r * s_h * s_a
        b = 2.0 * s_h * (s_h - r * s_a)
        cons.append(t <= b * w - max(c, 0.0) * cp.square(w))
    prob = cp.Problem(cp.Maximize(t), cons)
    prob.solve()
    if prob.status not in ("optimal", "optimal_inaccurate") or w.value is None:
        raise RuntimeError(f"cvxpy could not solve the robust pooling program: {prob.status}")
    return float(min(1.0, max(0.0, float(w.value))))


def robust_improvement_interval(
    s_h: float | tuple[float, float], s_a_range: Any, rho_range: Any
) -> tuple[float, float]:
    """Weights with a guaranteed strict improvement over the human (spec eq. 7.3).

    ``G_v(w) > 0`` exactly for ``0 < w < 2 w_v`` (the vertex's optimal weight ``w_v``), so
    ``{w in (0, 1] : min_U G(w) > 0} = (0, min(1, 2 min_v w_v))`` (open at the right end unless it
    is 1). Empty (``(0.0, 0.0)``) iff some vertex has ``w_v <= 0``, i.e. ``rho_hi s_a_hi >= s_h``.
    When ``rho_hi <= 0`` the upper end is at least ``2 s_h^2 / (s_h^2 + s_a_hi^2)``.

    Parameters
    ----------
    s_h : float or (float, float)
        As in :func:`robust_pooling_weight`; for a range the right end is found by bisection
        (``F`` is concave with ``F(0) = 0``).
    s_a_range, rho_range
        As in :func:`robust_pooling_weight`.

    Returns
    -------
    (lo, hi) : tuple of float
        ``lo = 0`` always; ``hi = 0`` means no weight is robustly improving.

    Examples
    --------
    >>> from rml_fast.decisions.complementarity import robust_improvement_interval
    >>> robust_improvement_interval(0.3, (0.2, 0.4), (-0.5, 0.0))
    (0.0, 0.72)
    >>> robust_improvement_interval(0.3, (0.2, 0.4), (0.0, 0.8))
    (0.0, 0.0)
    """
    s_h = _s_h_arg(s_h)
    sa = _range(s_a_range, "s_a_range", 0.0, None)
    rr = _range(rho_range, "rho_range", -1.0, 1.0)
    if isinstance(s_h, tuple):
        return _improvement_interval_numeric(s_h, _vertices(sa, rr))
    ws = []
    for s_a, r in _vertices(sa, rr):
        den = s_h * s_h + s_a * s_a - 2.0 * r * s_h * s_a
        if den <= 1e-300:
            return (0.0, 0.0)  # G == 0 at this vertex: no strict improvement
        ws.append(s_h * (s_h - r * s_a) / den)
    hi = 2.0 * min(ws)
    return (0.0, float(min(1.0, max(0.0, hi))))


def _improvement_interval_numeric(s_h: tuple[float, float],
                                  verts: list[tuple[float, float]]) -> tuple[float, float]:
    """``{w > 0 : F(w) > 0}`` for the concave worst case ``F`` (``F(0) = 0``): (0, root)."""
    def f(w: float) -> float:
        return float(_worst(np.array(w), s_h, verts))

    w_best = _maximise_concave(f)
    if f(w_best) <= 0.0:
        return (0.0, 0.0)
    if f(1.0) > 0.0:
        return (0.0, 1.0)
    a, b = w_best, 1.0
    while b - a > 1e-14:
        m = 0.5 * (a + b)
        a, b = (m, b) if f(m) > 0.0 else (a, m)
    return (0.0, float(a))


# --------------------------------------------------------------------------- pooling and decisions


def _logit(p: np.ndarray, eps: float) -> np.ndarray:
    q = np.clip(p, eps, 1.0 - eps)
    return np.log(q) - np.log1p(-q)


def pool(h: Any, a: Any, w: float, *, space: str = "prob", eps: float = 1e-6) -> np.ndarray:
    """Pool two forecasts with weight ``w`` on the AI.

    ``space="prob"``: ``(1 - w) h + w a`` (the linear pool of spec §7.1).
    ``space="logit"`` (PROPOSED): ``sigmoid((1 - w) logit(h) + w logit(a))`` with forecasts clipped
    to ``[eps, 1 - eps]``; needs forecasts in [0, 1].

    Parameters
    ----------
    h, a : array-like of shape (n,)
    w : float
        Weight on the AI, in [0, 1].
    space : {"prob", "logit"}, default="prob"
    eps : float, default=1e-6

    Returns
    -------
    ndarray of shape (n,), float64

    Examples
    --------
    >>> from rml_fast.decisions.complementarity import pool
    >>> pool([0.2, 0.9], [0.6, 0.5], 0.25)
    array([0.3, 0.8])
    >>> pool([0.5], [0.9], 1.0, space="logit").round(6)
    array([0.9])
    """
    h = check_array(h, "h", ndim=1).astype(np.float64, copy=False)
    a = check_array(a, "a", ndim=1).astype(np.float64, copy=False)
    if h.shape != a.shape:
        raise ValueError(f"h and a must have the same shape, got {h.shape} and {a.shape}")
    w = float(check_scalar(w, "w", Interval("real", 0.0, 1.0)))
    if space not in _SPACES:
        raise ValueError(f"space must be one of {_SPACES}, got {space!r}")
    if space == "prob":
        return (1.0 - w) * h + w * a
    eps = float(check_scalar(eps, "eps", Interval("real", 0.0, 0.5, closed="neither")))
    if ((h < 0) | (h > 1) | (a < 0) | (a > 1)).any():
        raise ValueError("space='logit' needs forecasts h and a in [0, 1]")
    z = (1.0 - w) * _logit(h, eps) + w * _logit(a, eps)
    return 1.0 / (1.0 + np.exp(-z))


def decide(p: Any, utility: Any) -> np.ndarray:
    """Bayes action for a binary event under a forecast: ``argmax_a (1-p) u[a,0] + p u[a,1]``.

    The DM's general decision rule (spec §7.1): act on the pooled forecast as if it were the
    probability of ``Y = 1``. Ties go to the lowest action index.

    Parameters
    ----------
    p : array-like of shape (n,)
        Forecasts of ``P(Y = 1)`` in [0, 1].
    utility : array-like of shape (n_actions, 2)
        ``utility[a, y]``: the DM's utility of action ``a`` when the outcome is ``y``.

    Returns
    -------
    ndarray of shape (n,), int64
        The chosen action per case.

    Examples
    --------
    >>> from rml_fast.decisions.complementarity import decide
    >>> U = [[0.0, 0.0], [-1.0, 3.0]]   # act: cost 1, payoff 3 if Y = 1 -> act iff p > 0.25
    >>> decide([0.1, 0.3, 0.9], U)
    array([0, 1, 1])
    """
    p = check_array(p, "p", ndim=1).astype(np.float64, copy=False)
    if ((p < 0) | (p > 1)).any():
        raise ValueError("p must hold probabilities in [0, 1]")
    u = check_array(utility, "utility", ndim=2).astype(np.float64, copy=False)
    if u.shape[1] != 2 or u.shape[0] < 1:
        raise ValueError(f"utility must have shape (n_actions, 2), got {u.shape}")
    eu = (1.0 - p)[:, None] * u[None, :, 0] + p[:, None] * u[None, :, 1]
    return np.argmax(eu, axis=1).astype(np.int64)


# --------------------------------------------------------------------------- the estimator


class RobustComplementarity(BaseEstimator):
    """Robust linear pooling of a human and an AI forecaster (spec §7.2).

    ``fit(X, y)`` with ``X = [h, a]`` (column 0 the human's forecasts, column 1 the AI's) estimates
    the error moments (:func:`error_moments`), forms the uncertainty box ``U`` for the AI's
    ``(s_a, rho)`` and picks the pooling weight by ``strategy``; ``predict(X)`` returns the pooled
    forecast. The human's ``s_h`` is taken as known (its point estimate): the DM's own track
    record. With several AI columns ``X = [h, a_1, ..., a_k]`` (an extension of ours), each AI is
    analysed against the human and the one with the best criterion of the strategy is consulted
    (``ai_index_``): a robust choice of advisor.

    Parameters
    ----------
    strategy : {"robust", "plugin", "human", "ai", "average"}, default="robust"
        ``"robust"``: the max-min weight of :func:`robust_pooling_weight` over ``U``;
        ``"plugin"``: the classical optimal weight at the point estimates; ``"human"`` / ``"ai"`` /
        ``"average"``: ``w = 0, 1, 1/2``.
    uncertainty : {"bootstrap", "fisher", "none"}, default="bootstrap"
        How ``U`` is formed. ``"bootstrap"``: percentile intervals of ``s_a`` and ``rho`` over
        ``n_boot`` case resamples. ``"fisher"`` (PROPOSED): a Fisher-z interval for ``rho`` and a
        CLT interval for ``s_a^2``. ``"none"``: ``U`` is the point estimate (the robust weight is then
        the plug-in weight). Each interval has level ``1 - alpha/2`` (Bonferroni), so the box
        covers both with probability ``>= 1 - alpha`` (asymptotically).
    n_boot : int, default=1000
        Bootstrap resamples.
    alpha : float, default=0.05
        Joint miscoverage of ``U``, in (0, 1).
    space : {"prob", "logit"}, default="prob"
        ``"logit"`` (PROPOSED) pools log-odds; the Brier gain is then not a function of the second
        moments, so the robust weight maximises the worst empirical Brier gain over the bootstrap
        resamples (a scenario max-min on a grid of 201 weights; ``uncertainty="none"`` uses the
        full sample only) and ``guaranteed_gain_`` is that worst empirical gain. Needs forecasts
        in [0, 1] and 0/1 outcomes.
    s_a_range, rho_range : (float, float), optional
        A box given by the user; each overrides the estimated interval for its parameter.
    centered : bool, default=False
        Centred moments (:func:`error_moments`); the box then describes Pearson correlations.
    noise_floor : float, default=0.0
        PROPOSED: subtract an irreducible noise ``E p*(1-p*)`` (see :func:`error_moments`). The
        weights do not depend on it; ``moments_`` and the box are reported relative to ``p*``.
    human_uncertain : bool, default=False
        PROPOSED extension: the DM is uncertain of its own ``s_h`` too; ``U`` gets an interval
        for ``s_h`` (Bonferroni over three parameters) and the weight is robust to it
        (:func:`robust_pooling_weight` with ``s_h`` a range). The spec's DM knows ``s_h``.
    random_state : int, numpy.random.Generator or None
        Seed of the bootstrap.

    Attributes
    ----------
    moments_ : dict
        :func:`error_moments` on the fitting data.
    s_h_ : float
    s_a_range_, rho_range_ : tuple of float
        The uncertainty box ``U``.
    s_h_range_ : tuple of float
        The interval for ``s_h`` (a point unless ``human_uncertain``).
    weight_ : float
        The chosen weight on the AI.
    guaranteed_gain_ : float
        ``min_U G(weight_)`` (Brier units; for ``space="logit"`` the worst resample gain).
    improvement_interval_ : tuple of float
        :func:`robust_improvement_interval` of the box (``space="prob"``).
    ai_index_ : int
        Which AI column (0-based among columns 1..) is consulted; 0 with one AI.
    weights_, guaranteed_gains_ : ndarray of shape (n_ai,)
        Weight and guaranteed gain of each AI column against the human.
    n_features_in_ : int
        ``1 + n_ai``.

    Examples
    --------
    >>> import numpy as np
    >>> from rml_fast.decisions.complementarity import RobustComplementarity, simulate_forecasts
    >>> sim = simulate_forecasts(5000, 0.35, 0.3, -0.3, rng=0)
    >>> X = np.column_stack([sim.h, sim.a])
    >>> model = RobustComplementarity(n_boot=200, random_state=0).fit(X, sim.y)
    >>> round(model.weight_, 2), bool(model.guaranteed_gain_ > 0.04)
    (0.55, True)
    >>> model.predict(X).shape
    (5000,)
    """

    _expected_failed_checks: ClassVar[dict[str, str]] = {}

    def __init__(self, strategy: str = "robust", uncertainty: str = "bootstrap",
                 n_boot: int = 1000, alpha: float = 0.05, space: str = "prob",
                 s_a_range: Any = None, rho_range: Any = None, centered: bool = False,
                 noise_floor: float = 0.0, human_uncertain: bool = False,
                 random_state: Any = None) -> None:
        self.strategy = strategy
        self.uncertainty = uncertainty
        self.n_boot = n_boot
        self.alpha = alpha
        self.space = space
        self.s_a_range = s_a_range
        self.rho_range = rho_range
        self.centered = centered
        self.noise_floor = noise_floor
        self.human_uncertain = human_uncertain
        self.random_state = random_state

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.target_tags.required = True
        tags.target_tags.single_output = True
        return tags

    def _check_params(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {STRATEGIES}, got {self.strategy!r}")
        if self.uncertainty not in _UNCERTAINTY:
            raise ValueError(
                f"uncertainty must be one of {_UNCERTAINTY}, got {self.uncertainty!r}")
        if self.space not in _SPACES:
            raise ValueError(f"space must be one of {_SPACES}, got {self.space!r}")
        check_scalar(self.n_boot, "n_boot", Interval("int", 1, None))
        check_scalar(self.alpha, "alpha", Interval("real", 0.0, 1.0, closed="neither"))
        _check_floor(self.noise_floor)
        if self.s_a_range is not None:
            _range(self.s_a_range, "s_a_range", 0.0, None)
        if self.rho_range is not None:
            _range(self.rho_range, "rho_range", -1.0, 1.0)

    def _check_X(self, X: Any, reset: bool) -> np.ndarray:
        X = validate_named(self, X, reset=reset, dtype=[np.float64, np.float32])
        if X.shape[1] < 2:
            raise ValueError(
                "X must have at least 2 columns (human forecast, AI forecast[s]), got "
                f"{X.shape[1]} feature(s)")
        if self.space == "logit" and ((X < 0) | (X > 1)).any():
            raise ValueError("space='logit' needs forecasts (X) in [0, 1]")
        return X

    def fit(self, X: Any, y: Any) -> RobustComplementarity:
        """Estimate the error moments and the uncertainty box; choose the weight.

        With more than one AI column, each AI is analysed against the human as in the two-
        forecaster model (same bootstrap resamples for all) and the one with the best value of
        the strategy's criterion is consulted (robust: the largest guaranteed gain; plugin: the
        largest estimated gain; fixed weights: the largest worst-case gain at that weight).

        Parameters
        ----------
        X : array-like of shape (n, 1 + n_ai)
            Column 0: the human's forecasts; columns 1..: the AI's (usually one).
        y : array-like of shape (n,)
            Outcomes (0/1 for forecasts; reals for regression-style predictions).

        Returns
        -------
        self

        Examples
        --------
        >>> import numpy as np
        >>> from rml_fast.decisions.complementarity import RobustComplementarity
        >>> X = np.array([[0.8, 0.6], [0.1, 0.3], [0.6, 0.9], [0.3, 0.1]])
        >>> m = RobustComplementarity(uncertainty="none").fit(X, [1, 0, 1, 0])
        >>> round(m.weight_, 4)   # s_h (s_h - rho s_a) / (s_h^2 + s_a^2 - 2 rho s_h s_a)
        0.5714
        """
        self._check_params()
        X, y = validate_named(self, X, y, dtype=[np.float64, np.float32], y_numeric=True)
        if X.shape[1] < 2:
            raise ValueError(
                "X must have at least 2 columns (human forecast, AI forecast[s]), got "
                f"{X.shape[1]} feature(s)")
        y = np.asarray(y, dtype=np.float64)
        if X.shape[0] < 3:
            raise ValueError(f"fit needs at least 3 cases, got n_samples={X.shape[0]}")
        if self.space == "logit":
            if ((X < 0) | (X > 1)).any():
                raise ValueError("space='logit' needs forecasts (X) in [0, 1]")
            if not np.isin(y, (0.0, 1.0)).all():
                raise ValueError("space='logit' needs 0/1 outcomes y")
        X = X.astype(np.float64, copy=False)
        h = X[:, 0]
        gen = check_rng(self.random_state, "random_state")
        seed = int(gen.integers(0, 2**63 - 1))  # the same resamples for every AI column
        per_ai = [self._fit_one(h, X[:, j], y, seed) for j in range(1, X.shape[1])]
        crit = np.array([r["criterion"] for r in per_ai])
        k = int(np.flatnonzero(crit >= crit.max() - 1e-15)[0])
        best = per_ai[k]
        self.ai_index_ = k
        self.moments_ = best["moments"]
        self.s_h_ = float(best["moments"]["s_h"])
        self.s_a_range_ = best["s_a_range"]
        self.s_h_range_ = best["s_h_range"]
        self.rho_range_ = best["rho_range"]
        self.weight_ = best["weight"]
        self.guaranteed_gain_ = best["guaranteed_gain"]
        self.improvement_interval_ = best["interval"]
        self.guaranteed_gains_ = np.array([r["guaranteed_gain"] for r in per_ai])
        self.weights_ = np.array([r["weight"] for r in per_ai])
        return self

    def _fit_one(self, h: np.ndarray, a: np.ndarray, y: np.ndarray, seed: int) -> dict[str, Any]:
        centered, floor = bool(self.centered), float(self.noise_floor)
        mom = error_moments(h, a, y, centered=centered, noise_floor=floor)
        s_h, s_a, rho = mom["s_h"], mom["s_a"], mom["rho"]
        uh = bool(self.human_uncertain)
        q = self.alpha / (6.0 if uh else 4.0)  # two-sided, Bonferroni over the parameters
        sh_box: tuple[float, ...] = (s_h, s_h)
        if self.uncertainty == "bootstrap":
            boot = bootstrap_error_moments(h, a, y, n_boot=self.n_boot, centered=centered,
                                           noise_floor=floor, rng=seed)
            sa_box = tuple(float(v) for v in np.quantile(boot["s_a"], [q, 1 - q]))
            rho_box = tuple(float(v) for v in np.quantile(boot["rho"], [q, 1 - q]))
            if uh:
                sh_box = tuple(float(v) for v in np.quantile(boot["s_h"], [q, 1 - q]))
        elif self.uncertainty == "fisher":
            sa_box, rho_box = _fisher_box(h, a, y, mom, q, centered, floor)
            if uh:
                sh_box, _ = _fisher_box(a, h, y, mom, q, centered, floor)
        else:
            sa_box, rho_box = (s_a, s_a), (rho, rho)
        if self.s_a_range is not None:
            sa_box = _range(self.s_a_range, "s_a_range", 0.0, None)
        if self.rho_range is not None:
            rho_box = _range(self.rho_range, "rho_range", -1.0, 1.0)
        sa_box = (float(sa_box[0]), float(sa_box[1]))
        rho_box = (float(rho_box[0]), float(rho_box[1]))
        sh_box = (float(sh_box[0]), float(sh_box[1]))
        out: dict[str, Any] = {"moments": mom, "s_a_range": sa_box, "rho_range": rho_box, "s_h_range": sh_box}
        if self.space == "logit":
            out.update(self._logit_weight(h, a, y, seed))
            return out
        box = (sh_box if uh else float(s_h), sa_box, rho_box)
        fixed = {"human": 0.0, "ai": 1.0, "average": 0.5}
        if self.strategy == "robust":
            w = robust_pooling_weight(*box).w
        elif self.strategy == "plugin":
            w = optimal_pooling_weight(s_h, s_a, rho)
        else:
            w = fixed[self.strategy]
        g = float(worst_case_gain(w, *box))
        crit = float(pooling_gain(w, s_h, s_a, rho)) if self.strategy == "plugin" else g
        out.update(weight=float(w), guaranteed_gain=g, criterion=crit,
                   interval=robust_improvement_interval(*box))
        return out

    def _logit_weight(self, h: np.ndarray, a: np.ndarray, y: np.ndarray,
                      seed: int) -> dict[str, Any]:
        grid = np.linspace(0.0, 1.0, _LOGIT_GRID)
        base = (h - y) ** 2
        loss = np.stack([base - (pool(h, a, w, space="logit") - y) ** 2 for w in grid], axis=1)
        full = loss.mean(axis=0)
        if self.uncertainty == "bootstrap":
            counts = bootstrap_counts(h.shape[0], self.n_boot, np.random.default_rng(seed))
            worst = (counts @ loss / h.shape[0]).min(axis=0)  # (grid,)
        else:
            worst = full
        fixed = {"human": 0.0, "ai": 1.0, "average": 0.5}
        if self.strategy in ("robust", "plugin"):
            vals = worst if self.strategy == "robust" else full
            k = int(np.flatnonzero(vals >= vals.max() - 1e-15)[0])
        else:
            k = int(np.argmin(np.abs(grid - fixed[self.strategy])))
        crit = float(full[k]) if self.strategy == "plugin" else float(worst[k])
        return {"weight": float(grid[k]), "guaranteed_gain": float(worst[k]), "criterion": crit,
                "interval": (0.0, 0.0)}

    def predict(self, X: Any) -> np.ndarray:
        """Pooled forecasts ``(1 - w) h + w a`` (or the log-odds pool for ``space="logit"``).

        Parameters
        ----------
        X : array-like of shape (n, 2)

        Returns
        -------
        ndarray of shape (n,), float64

        Examples
        --------
        >>> import numpy as np
        >>> from rml_fast.decisions.complementarity import RobustComplementarity
        >>> m = RobustComplementarity(strategy="average").fit([[0.2, 0.4]] * 3, [0, 0, 1])
        >>> m.predict(np.array([[0.2, 0.6]]))
        array([0.4])
        """
        check_is_fitted(self, "weight_")
        X = self._check_X(X, reset=False)
        return pool(X[:, 0].astype(np.float64), X[:, 1 + self.ai_index_].astype(np.float64),
                    self.weight_, space=self.space)

    def score(self, X: Any, y: Any) -> float:
        """Brier gain of the pool over the human on ``(X, y)``: ``mean (h-y)^2 - mean (p-y)^2``.

        Parameters
        ----------
        X : array-like of shape (n, 2)
        y : array-like of shape (n,)

        Returns
        -------
        float
            Positive when the pool beats the human's own forecasts.

        Examples
        --------
        >>> import numpy as np
        >>> from rml_fast.decisions.complementarity import RobustComplementarity
        >>> X = np.array([[0.8, 0.6], [0.1, 0.3], [0.6, 0.9], [0.3, 0.1]])
        >>> m = RobustComplementarity(strategy="average").fit(X, [1, 0, 1, 0])
        >>> round(m.score(X, [1, 0, 1, 0]), 4)
        0.0169
        """
        p = self.predict(X)
        X = np.asarray(X, dtype=np.float64)
        y = check_array(y, "y", ndim=1).astype(np.float64, copy=False)
        if y.shape[0] != p.shape[0]:
            raise ValueError(f"y must have {p.shape[0]} entries, got {y.shape[0]}")
        return float(np.mean((X[:, 0] - y) ** 2) - np.mean((p - y) ** 2))


def _fisher_box(h: np.ndarray, a: np.ndarray, y: np.ndarray, mom: dict[str, Any], q: float,
                centered: bool, floor: float) -> tuple[tuple[float, float], tuple[float, float]]:
    from scipy.stats import norm

    n = h.shape[0]
    z = float(norm.ppf(1.0 - q))
    e_a = a - y
    sq = (e_a - e_a.mean()) ** 2 if centered else e_a * e_a
    se = float(sq.std(ddof=1) / math.sqrt(n))
    m2 = float(sq.mean()) - floor
    sa = (math.sqrt(max(m2 - z * se, 0.0)), math.sqrt(max(m2 + z * se, 0.0)))
    r = min(max(mom["rho"], -1 + 1e-12), 1 - 1e-12)
    half = z / math.sqrt(max(n - 3, 1))
    zr = math.atanh(r)
    return sa, (math.tanh(zr - half), math.tanh(zr + half))


# --------------------------------------------------------------------------- evaluation


def compare_strategies(X_fit: Any, y_fit: Any, X_eval: Any, y_eval: Any, *,
                       strategies: Any = STRATEGIES, utility: Any = None,
                       **params: Any) -> dict[str, dict[str, float]]:
    """Fit each strategy on one split and score it out of sample.

    Parameters
    ----------
    X_fit, X_eval : array-like of shape (n, 2)
        ``[human, AI]`` forecasts on the fitting and the evaluation cases.
    y_fit, y_eval : array-like of shape (n,)
        Outcomes.
    strategies : sequence of str, default=STRATEGIES
    utility : array-like of shape (n_actions, 2), optional
        If given, also the mean realised utility of :func:`decide` on each pooled forecast
        (needs forecasts in [0, 1]; they are clipped to [0, 1] for the decision).
    **params
        Passed to :class:`RobustComplementarity`.

    Returns
    -------
    dict
        ``{strategy: {"weight", "guaranteed_gain", "brier", "gain"[, "utility"]}}`` where
        ``gain`` is the evaluation Brier gain over the human.

    Examples
    --------
    >>> import numpy as np
    >>> from rml_fast.decisions.complementarity import compare_strategies, simulate_forecasts
    >>> sim = simulate_forecasts(4000, 0.3, 0.3, -0.2, rng=3)
    >>> X = np.column_stack([sim.h, sim.a])
    >>> res = compare_strategies(X[:2000], sim.y[:2000], X[2000:], sim.y[2000:],
    ...                          n_boot=200, random_state=0)
    >>> res["robust"]["gain"] > 0, res["human"]["gain"]
    (True, 0.0)
    """
    X_fit = check_array(X_fit, "X_fit", ndim=2)
    y_fit = check_array(y_fit, "y_fit", ndim=1)
    if y_fit.shape != (X_fit.shape[0],):
        raise ValueError(f"y_fit must have shape ({X_fit.shape[0]},) (one per row of X_fit), got "
                         f"{y_fit.shape}")
    X_eval_arr = check_array(X_eval, "X_eval", ndim=2).astype(np.float64, copy=False)
    y_eval_arr = check_array(y_eval, "y_eval", ndim=1).astype(np.float64, copy=False)
    if y_eval_arr.shape != (X_eval_arr.shape[0],):
        raise ValueError(f"y_eval must have shape ({X_eval_arr.shape[0]},) (one per row of "
                         f"X_eval), got {y_eval_arr.shape}")
    strategies = list(strategies)
    for s in strategies:
        if s not in STRATEGIES:
            raise ValueError(f"strategies must be drawn from {STRATEGIES}, got {s!r}")
    out: dict[str, dict[str, float]] = {}
    for s in strategies:
        m = RobustComplementarity(strategy=s, **params).fit(X_fit, y_fit)
        p = m.predict(X_eval_arr)
        rec = {"weight": m.weight_, "guaranteed_gain": m.guaranteed_gain_,
               "brier": float(np.mean((p - y_eval_arr) ** 2)),
               "gain": m.score(X_eval_arr, y_eval_arr)}
        if utility is not None:
            act = decide(np.clip(p, 0.0, 1.0), utility)
            u = check_array(utility, "utility", ndim=2).astype(np.float64, copy=False)
            rec["utility"] = float(np.mean(u[act, y_eval_arr.astype(np.int64)]))
        out[s] = rec
    return out
