"""Privacy-loss distributions (PLDs): tight, pessimistic accounting of composed mechanisms.

A mechanism's privacy is captured by a dominating pair of output laws ``(A, B)`` and its
privacy loss ``L = ln dA/dB`` under ``A``. The hockey-stick divergence is

    delta(eps) = E_A[(1 - exp(eps - L))_+] + P_A(L = +inf),

and the loss of a composition is the sum of independent losses, so composing
mechanisms is a convolution of their loss laws (Koskela et al., arXiv 1906.03049;
Meiser & Mohammadi, CCS 2018; Doroshenko et al., arXiv 2207.04380).

Discretisation is pessimistic: the loss is rounded *up* onto the lattice
``l_i = i * h`` (the mass of ``(l_{i-1}, l_i]`` is put on ``l_i``), the mass below the
lowest kept bucket goes to that bucket and the mass above the highest to ``+inf``.
Rounding a loss up can only increase ``delta(eps)`` for every ``eps``, and the rounded
pair is again a valid dominating pair, so every number read out of these objects is an
upper bound on the true ``delta(eps)`` (or ``eps(delta)``), up to floating-point
round-off in the FFT (absolute ~1e-16 per bucket).
"""


from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rml_fast._validation import Interval, check_array, check_scalar
from rml_fast.privacy._pld_compose import _convolve, _self_compose
from rml_fast.privacy._pld_discretise import (
    BucketLimitError,
    _directions,
    _gaussian_hockey,
    _gaussian_model,
    _laplace_model,
    _LossModel,
    _pmf_from_cdf,
)
from rml_fast.privacy._pld_lattice import _bucket, _Pmf, _readonly

__all__ = ["PLDAccountant", "PrivacyLossDistribution"]

RELATIONS = ("add_or_remove", "remove", "add")
_H = Interval("real", 0.0, 1.0, "neither")
_TAIL = Interval("real", 0.0, 0.1, "neither")
_Q = Interval("real", 0.0, 1.0, "right")


# --- public class ------------------------------------------------------------------------


ESTIMATORS = ("bucket", "connect_dots")


def _check_estimator(estimator: Any) -> str:
    if estimator not in ESTIMATORS:
        raise ValueError(f"estimator must be one of {ESTIMATORS}, got {estimator!r}")
    return str(estimator)


def _check_relation(relation: Any) -> str:
    if relation not in RELATIONS:
        raise ValueError(f"relation must be one of {RELATIONS}, got {relation!r}")
    return str(relation)


@dataclass(frozen=True)
class PrivacyLossDistribution:
    """An immutable, pessimistically discretised privacy-loss distribution (float64).

    Holds one pmf per neighbouring direction: one entry for a mechanism whose dominating
    pair is symmetric (Gaussian, Laplace, every SGG member, without subsampling), two
    (``remove``, ``add``) for Poisson-subsampled mechanisms under the add-or-remove
    relation. Read-outs take the maximum over the directions; composition composes each
    direction (a one-entry PLD is used for both directions of a two-entry one).

    The mass ``pmf[i]`` sits at loss ``lower_loss + i * h``; ``infinity_mass`` is the mass
    at ``+inf`` (it adds directly to every delta).

    Parameters
    ----------
    pmfs : tuple of _Pmf
        Use the factories (:meth:`from_cdf`, :meth:`from_gaussian`, :meth:`from_laplace`,
        ``SGGMechanism.pld``) rather than this constructor.

    References
    ----------
    Koskela, Jalko, Honkela, "Computing tight differential privacy guarantees using
    FFT", arXiv 1906.03049. Doroshenko, Ghazi, Kamath, Kumar, Manurangsi,
    "Connect the dots", arXiv 2207.04380. Zhu, Dong, Wang, "Optimal accounting of
    differential privacy via characteristic function", arXiv 2106.08567.

    Examples
    --------
    >>> from rml_fast.privacy import PrivacyLossDistribution
    >>> pld = PrivacyLossDistribution.from_gaussian(std=1.0)
    >>> round(float(pld.get_delta_for_epsilon(1.0)), 4)  # Balle & Wang: 0.1269
    0.1269
    """

    pmfs: tuple[_Pmf, ...]
    _cache: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    # -- views of the first ("remove") direction, as in the spec ---------------------------
    @property
    def pmf(self) -> np.ndarray:
        """Read-only pmf of shape (n,) of the first direction."""
        return self.pmfs[0].pmf

    @property
    def lower_loss(self) -> float:
        """Loss of ``pmf[0]``."""
        return self.pmfs[0].lower_index * self.pmfs[0].h

    @property
    def h(self) -> float:
        """The value discretisation interval."""
        return self.pmfs[0].h

    @property
    def infinity_mass(self) -> float:
        """Mass at +inf of the first direction."""
        return self.pmfs[0].infinity_mass

    @property
    def losses(self) -> np.ndarray:
        """Losses of shape (n,) of ``pmf``."""
        return self.pmfs[0].losses

    # -- factories ---------------------------------------------------------------------
    @classmethod
    def from_cdf(
        cls,
        cdf_on_grid: Any,
        lower_loss: float,
        h: float,
        infinity_mass: float | None = None,
    ) -> PrivacyLossDistribution:
        """Pessimistic bucketing of a loss CDF given on the grid ``lower_loss + i*h``.

        ``pmf[0] = F(l_0)`` (all mass at or below the floor), ``pmf[i] = F(l_i) - F(l_{i-1})``
        (the mass of ``(l_{i-1}, l_i]`` goes up to ``l_i``), ``infinity_mass = 1 - F(l_{n-1})``.

        Parameters
        ----------
        cdf_on_grid : array-like of shape (n,)
            Non-decreasing values ``F(l_i) = P_A(L <= l_i)`` in [0, 1].
        lower_loss : float
            ``l_0``; must be an integer multiple of ``h`` (all PLDs share the lattice ``i*h``).
        h : float
            Grid spacing in (0, 1).
        infinity_mass : float, optional
            Mass at +inf; at least ``1 - F(l_{n-1})`` (default: exactly that).

        Returns
        -------
        PrivacyLossDistribution
        """
        f = check_array(cdf_on_grid, "cdf_on_grid", dtypes=(np.float64,), ndim=1)
        h = float(check_scalar(h, "h", _H))
        lower_loss = float(check_scalar(lower_loss, "lower_loss", Interval("real", None, None)))
        if f.size == 0:
            raise ValueError("cdf_on_grid must not be empty")
        if (f < 0).any() or (f > 1).any() or (np.diff(f) < -1e-15).any():
            raise ValueError("cdf_on_grid must be non-decreasing values in [0, 1]")
        idx = lower_loss / h
        if abs(idx - round(idx)) > 1e-6:
            raise ValueError(f"lower_loss must be an integer multiple of h={h}, got {lower_loss}")
        tail = max(1.0 - float(f[-1]), 0.0)
        if infinity_mass is None:
            infinity_mass = tail
        infinity_mass = float(check_scalar(infinity_mass, "infinity_mass", Interval("real", 0, 1)))
        if infinity_mass < tail - 1e-15:
            raise ValueError(
                f"infinity_mass={infinity_mass} is below 1 - F(last)={tail}: not pessimistic"
            )
        pmf = np.maximum(np.diff(f, prepend=0.0), 0.0)
        return cls((_Pmf(_readonly(pmf), round(idx), h, infinity_mass),))

    @classmethod
    def _from_model(
        cls,
        model: _LossModel,
        h: float,
        sampling_prob: float,
        relation: str,
        tail: float,
        estimator: str = "bucket",
    ) -> PrivacyLossDistribution:
        return cls(_directions(model, h, sampling_prob, relation, tail, estimator=estimator))

    @classmethod
    def from_gaussian(
        cls,
        std: float,
        sensitivity: float = 1.0,
        h: float = 1e-4,
        *,
        sampling_prob: float = 1.0,
        relation: str = "add_or_remove",
        tail_mass_truncation: float = 1e-15,
        estimator: str = "connect_dots",
    ) -> PrivacyLossDistribution:
        """PLD of the Gaussian mechanism ``f(D) + N(0, std^2)``, optionally Poisson-subsampled.

        The loss is ``L ~ N(mu, 2 mu)`` with ``mu = sensitivity^2 / (2 std^2)``. With
        ``sampling_prob = q < 1`` the pairs are ``(qA + (1-q)B, B)`` (remove) and
        ``(B, qA + (1-q)B)`` (add); their loss CDFs are computed exactly before bucketing.

        Parameters
        ----------
        std : float
            Noise standard deviation, > 0.
        sensitivity : float, default=1.0
            l2 sensitivity, > 0.
        h : float, default=1e-4
            Value discretisation interval.
        sampling_prob : float, default=1.0
            Poisson sampling rate q in (0, 1].
        relation : {"add_or_remove", "remove", "add"}, default="add_or_remove"
            Which neighbouring directions to account (only matters for q < 1).
        tail_mass_truncation : float, default=1e-15
            Mass allowed in each truncated tail (upper tail goes to +inf).
        estimator : {"connect_dots", "bucket"}, default="connect_dots"
            "bucket": the loss rounded up to the lattice (CDF bucketing). "connect_dots":
            the discrete PLD whose hockey-stick curve linearly interpolates (in e^eps) the
            exact delta(eps) at the lattice points (Doroshenko et al. 2022; dp-accounting's
            default): also pessimistic, and much tighter after many compositions.

        Returns
        -------
        PrivacyLossDistribution
        """
        std = float(check_scalar(std, "std", Interval("real", 0.0, None, "neither")))
        sensitivity = float(
            check_scalar(sensitivity, "sensitivity", Interval("real", 0.0, None, "neither"))
        )
        h, q, relation, tail = _common_args(h, sampling_prob, relation, tail_mass_truncation)
        estimator = _check_estimator(estimator)
        try:
            model = _gaussian_model(std, sensitivity)
        except OverflowError as exc:  # std**2 or sensitivity**2 beyond float64
            raise ValueError(f"std={std!r} and sensitivity={sensitivity!r} must have finite "
                             "squares (below about 1e154)") from exc
        with _range_named(f"sensitivity={sensitivity!r}, std={std!r}, h={h!r}"):
            return cls._from_model(model, h, q, relation, tail, estimator)

    @classmethod
    def from_laplace(
        cls,
        b: float,
        sensitivity: float = 1.0,
        h: float = 1e-4,
        *,
        sampling_prob: float = 1.0,
        relation: str = "add_or_remove",
        tail_mass_truncation: float = 1e-15,
        estimator: str = "connect_dots",
    ) -> PrivacyLossDistribution:
        """PLD of the Laplace mechanism ``f(D) + Lap(b)`` (1-D), optionally subsampled.

        ``L = (|x - sensitivity| - |x|) / b`` lies in ``[-a, a]``, ``a = sensitivity/b``;
        ``delta(eps) = 1 - exp((eps - a)/2)`` for ``eps < a`` and 0 beyond.

        Parameters
        ----------
        b : float
            Laplace scale, > 0.
        sensitivity, h, sampling_prob, relation, tail_mass_truncation, estimator
            As in :meth:`from_gaussian`.

        Returns
        -------
        PrivacyLossDistribution
        """
        b = float(check_scalar(b, "b", Interval("real", 0.0, None, "neither")))
        sensitivity = float(
            check_scalar(sensitivity, "sensitivity", Interval("real", 0.0, None, "neither"))
        )
        h, q, relation, tail = _common_args(h, sampling_prob, relation, tail_mass_truncation)
        estimator = _check_estimator(estimator)
        model = _laplace_model(b, sensitivity)
        with _range_named(f"sensitivity={sensitivity!r}, b={b!r}, h={h!r}"):
            if q == 1.0:
                a = sensitivity / b
                return cls((
                    _pmf_from_cdf(
                        model.cdf_a, model.sf_a, h, tail, bounds=(-a, a), sf_q=model.sf_b,
                        estimator=estimator, delta_fn=model.delta_ab,
                    ),
                ))
            return cls._from_model(model, h, q, relation, tail, estimator)

    # -- algebra -----------------------------------------------------------------------
    def compose(
        self, other: PrivacyLossDistribution, tail_mass_truncation: float = 1e-15
    ) -> PrivacyLossDistribution:
        """The PLD of running both mechanisms (independent noise): a linear convolution.

        Parameters
        ----------
        other : PrivacyLossDistribution
            Must have the same ``h``.
        tail_mass_truncation : float, default=1e-15
            Mass moved out of each tail after the convolution (upper tail to +inf).

        Returns
        -------
        PrivacyLossDistribution
        """
        if not isinstance(other, PrivacyLossDistribution):
            raise TypeError(f"other must be a PrivacyLossDistribution, got {type(other).__name__}")
        if not math.isclose(other.h, self.h, rel_tol=1e-12):
            raise ValueError(f"other.h={other.h} differs from h={self.h}")
        tail = float(check_scalar(tail_mass_truncation, "tail_mass_truncation", _TAIL))
        a, b = self.pmfs, other.pmfs
        if len(a) == 1 and len(b) == 1:
            return PrivacyLossDistribution((_convolve(a[0], b[0], tail),))
        a2 = a if len(a) == 2 else (a[0], a[0])
        b2 = b if len(b) == 2 else (b[0], b[0])
        return PrivacyLossDistribution(tuple(_convolve(x, y, tail) for x, y in zip(a2, b2, strict=True)))

    def self_compose(
        self,
        num_compositions: int,
        tail_mass_truncation: float = 1e-15,
        method: str = "fft_power",
    ) -> PrivacyLossDistribution:
        """The PLD of ``num_compositions`` independent runs of this mechanism.

        Repeated squaring of *linear* FFT convolutions (the FFT length always covers the
        full support, so there is no wrap-around); after each of the <= 2 log2(N)
        convolutions at most ``tail_mass_truncation`` of each tail is truncated
        pessimistically (upper tail to +inf, lower tail onto the lowest kept bucket).

        Parameters
        ----------
        num_compositions : int
            N >= 1.
        tail_mass_truncation : float, default=1e-15
        method : {"fft_power", "squaring"}, default="fft_power"
            "fft_power": one real FFT, ``pmf_hat ** N``, on a window that holds all but
            ``tail_mass_truncation`` of each tail by a Chernoff bound; the mass the circular
            transform folds back is accounted pessimistically (mass from below moves up,
            the Chernoff bound of the mass from above is added to +inf).
            "squaring": repeated squaring of *linear* convolutions with truncation after
            each step (no folding at all).

        Returns
        -------
        PrivacyLossDistribution
        """
        n = int(check_scalar(num_compositions, "num_compositions", Interval("int", 1, None)))
        tail = float(check_scalar(tail_mass_truncation, "tail_mass_truncation", _TAIL))
        if method not in ("fft_power", "squaring"):
            raise ValueError(f"method must be 'fft_power' or 'squaring', got {method!r}")
        if n == 1:
            return self
        return PrivacyLossDistribution(
            tuple(_self_compose(p, n, tail, method) for p in self.pmfs)
        )

    def subsample(
        self, sampling_prob: float, relation: str = "add_or_remove"
    ) -> PrivacyLossDistribution:
        """Poisson subsampling of this (discretised, symmetric) PLD with rate ``q``.

        The discrete pmf defines a dominating pair ``(A~, B~)`` with ``B~ = sum_i p_i
        e^{-l_i}`` (remaining B-mass at ``L = -inf``); subsampling preserves dominance,
        and the new losses ``ln(q e^l + 1 - q)`` (remove) and ``-ln(q e^l + 1 - q)``
        (add) are rounded up onto the lattice. Prefer the mechanism factories with
        ``sampling_prob`` (they subsample the exact loss law, one rounding instead of two).

        Parameters
        ----------
        sampling_prob : float
            q in (0, 1].
        relation : {"add_or_remove", "remove", "add"}

        Returns
        -------
        PrivacyLossDistribution
        """
        q = float(check_scalar(sampling_prob, "sampling_prob", _Q))
        relation = _check_relation(relation)
        if len(self.pmfs) != 1:
            raise ValueError("subsample needs a symmetric (single-direction) PLD")
        if q == 1.0:
            return self
        base = self.pmfs[0]
        h = base.h
        losses, p = base.losses, base.pmf
        pb = p * np.exp(-losses)  # B-mass at each loss
        b_minus_inf = max(1.0 - float(pb.sum()), 0.0)
        out = []
        if relation in ("add_or_remove", "remove"):
            new = np.log1p(q * np.expm1(losses))
            mass = q * p + (1 - q) * pb
            vals = np.concatenate([new, [math.log1p(-q)]])
            masses = np.concatenate([mass, [(1 - q) * b_minus_inf]])
            out.append(_bucket(vals, masses, h, q * base.infinity_mass))
        if relation in ("add_or_remove", "add"):
            new = -np.log1p(q * np.expm1(losses))
            vals = np.concatenate([new, [-math.log1p(-q)]])
            masses = np.concatenate([pb, [b_minus_inf]])
            out.append(_bucket(vals, masses, h, 0.0))
        return PrivacyLossDistribution(tuple(out))

    # -- read-outs ---------------------------------------------------------------------
    def get_delta_for_epsilon(self, epsilon: float | Sequence[float] | np.ndarray) -> Any:
        """The smallest delta such that the mechanism is (epsilon, delta)-DP (upper bound).

        ``delta(eps) = sum_{l_i > eps} p_i (1 - e^{eps - l_i}) + p_inf``, maximised over
        directions; O(n + q log n) with suffix sums.

        Parameters
        ----------
        epsilon : float or array-like of shape (m,)

        Returns
        -------
        float or ndarray of shape (m,)
        """
        eps = check_array(epsilon, "epsilon", dtypes=(np.float64,), ndim=(0, 1))
        out = np.max([p.delta(np.atleast_1d(eps)) for p in self.pmfs], axis=0)
        out = np.minimum(out, 1.0)
        return float(out[0]) if eps.ndim == 0 else out

    def get_epsilon_for_delta(self, delta: float | Sequence[float] | np.ndarray) -> Any:
        """The smallest epsilon >= 0 with delta(epsilon) <= delta (inf if none).

        Between lattice points delta(eps) = S1 - e^eps S2 + p_inf with fixed suffix sums, so
        the solution is exact for the discretised PLD.

        Parameters
        ----------
        delta : float or array-like of shape (m,)
            Values in [0, 1].

        Returns
        -------
        float or ndarray of shape (m,)
        """
        d = check_array(delta, "delta", dtypes=(np.float64,), ndim=(0, 1))
        if ((d < 0) | (d > 1)).any():
            raise ValueError("delta must lie in [0, 1]")
        out = np.max([p.epsilon(np.atleast_1d(d)) for p in self.pmfs], axis=0)
        return float(out[0]) if d.ndim == 0 else out


@contextlib.contextmanager
def _range_named(args: str) -> Iterator[None]:
    """A privacy-loss range too wide for the lattice, reported with the arguments behind it."""
    try:
        yield
    except BucketLimitError as exc:
        raise BucketLimitError(f"{exc} ({args}: the loss range grows with sensitivity over the "
                               "noise scale; a smaller ratio or a larger h)") from exc


def _common_args(h: Any, q: Any, relation: Any, tail: Any,
                 h_name: str = "h") -> tuple[float, float, str, float]:
    return (
        float(check_scalar(h, h_name, _H)),
        float(check_scalar(q, "sampling_prob", _Q)),
        _check_relation(relation),
        float(check_scalar(tail, "tail_mass_truncation", _TAIL)),
    )


# --- accountant --------------------------------------------------------------------------


def _gaussian_epsilon(delta: float, mu: float) -> float:
    """Smallest eps >= 0 with ``_gaussian_hockey(eps, mu) <= delta`` (to ~1e-13 relative).

    Bisection that returns the upper end of its bracket, where ``delta(eps) <= delta`` was
    checked: the answer is never below the exact epsilon (beyond round-off of the curve).
    """

    def d(e: float) -> float:
        return float(_gaussian_hockey(np.array([e]), mu)[0])

    if d(0.0) <= delta:
        return 0.0
    lo, hi = 0.0, max(1.0, 2.0 * mu + math.sqrt(2.0 * mu))
    while d(hi) > delta:
        lo, hi = hi, 2.0 * hi
        if not math.isfinite(hi):  # pragma: no cover - delta(eps) -> 0 for every mu
            return math.inf
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if d(mid) > delta:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-13 * hi:
            break
    return hi


class PLDAccountant:
    """Accumulates heterogeneous mechanisms and reports the composed (epsilon, delta).

    Every number it reports is an upper bound (pessimistic). Gaussian mechanisms without
    subsampling compose exactly into one Gaussian (noise ``1/s^2 = sum count_i
    (sensitivity_i/std_i)^2``): they are merged and discretised once, and when they are
    all that was composed, :meth:`get_epsilon` / :meth:`get_delta` use the closed form
    (Balle & Wang 2018, evaluated without overflow for epsilon up to ~1e300) instead of a PLD.

    Parameters
    ----------
    h : float, default=1e-4
        Value discretisation interval shared by every composed PLD.
    tail_mass_truncation : float, default=1e-15
        Tail mass each discretisation and composition may truncate. For
        :meth:`compose_gaussian` / :meth:`compose_laplace` with ``count`` steps it is the
        budget of all the steps together (``tail_mass_truncation / count`` each), so the mass
        at +inf, below which no delta has a finite epsilon, stays ~1e-15 however many steps.
    estimator : {"connect_dots", "bucket"}, default="connect_dots"
        Discretisation of the Gaussian/Laplace/SGG events (see ``from_gaussian``).

    Examples
    --------
    >>> from rml_fast.privacy import PLDAccountant
    >>> acc = PLDAccountant(h=1e-3)
    >>> acc = acc.compose_gaussian(std=20.0, count=100).compose_laplace(b=50.0)
    >>> 0 < acc.get_epsilon(1e-5) < 3
    True
    """

    def __init__(
        self, h: float = 1e-4, tail_mass_truncation: float = 1e-15, estimator: str = "connect_dots"
    ) -> None:
        self.h = float(check_scalar(h, "h", _H))
        self.estimator = _check_estimator(estimator)
        self.tail_mass_truncation = float(
            check_scalar(tail_mass_truncation, "tail_mass_truncation", _TAIL)
        )
        self._events: list[tuple[PrivacyLossDistribution, int]] = []
        self._gauss_precision = 0.0  # sum of count * (sensitivity/std)^2 of plain Gaussians
        self._composed: PrivacyLossDistribution | None = None

    def compose(self, pld: PrivacyLossDistribution, count: int = 1) -> PLDAccountant:
        """Add ``count`` runs of the mechanism whose PLD is ``pld``; returns ``self``."""
        if not isinstance(pld, PrivacyLossDistribution):
            raise TypeError(f"pld must be a PrivacyLossDistribution, got {type(pld).__name__}")
        if not math.isclose(pld.h, self.h, rel_tol=1e-12):
            raise ValueError(f"pld.h={pld.h} differs from the accountant's h={self.h}")
        count = int(check_scalar(count, "count", Interval("int", 1, None)))
        self._events.append((pld, count))
        self._composed = None
        return self

    def compose_gaussian(
        self, std: float, sensitivity: float = 1.0, count: int = 1, sampling_prob: float = 1.0
    ) -> PLDAccountant:
        """Add ``count`` (Poisson-subsampled) Gaussian mechanisms, e.g. DP-SGD steps."""
        if sampling_prob == 1.0:  # exact: merged into one Gaussian (validated as below)
            std = float(check_scalar(std, "std", Interval("real", 0.0, None, "neither")))
            sensitivity = float(
                check_scalar(sensitivity, "sensitivity", Interval("real", 0.0, None, "neither"))
            )
            count = int(check_scalar(count, "count", Interval("int", 1, None)))
            prec = self._gauss_precision + count * (sensitivity / std) ** 2
            if not math.isfinite(prec):
                raise ValueError("std is too small relative to sensitivity: the loss overflows")
            self._gauss_precision = prec
            self._composed = None
            return self
        count = int(check_scalar(count, "count", Interval("int", 1, None)))
        pld = PrivacyLossDistribution.from_gaussian(
            std, sensitivity, self.h, sampling_prob=sampling_prob,
            tail_mass_truncation=self._step_tail(count), estimator=self.estimator,
        )
        return self.compose(pld, count)

    def compose_laplace(
        self, b: float, sensitivity: float = 1.0, count: int = 1, sampling_prob: float = 1.0
    ) -> PLDAccountant:
        """Add ``count`` (Poisson-subsampled) Laplace mechanisms."""
        count = int(check_scalar(count, "count", Interval("int", 1, None)))
        pld = PrivacyLossDistribution.from_laplace(
            b, sensitivity, self.h, sampling_prob=sampling_prob,
            tail_mass_truncation=self._step_tail(count), estimator=self.estimator,
        )
        return self.compose(pld, count)

    def _step_tail(self, count: int) -> float:
        """Upper-tail mass each of ``count`` composed steps may put at +inf: the budget
        ``tail_mass_truncation`` shared by the steps, so that the composition's mass at +inf
        (which bounds the smallest delta with a finite epsilon) does not grow with ``count``."""
        return self.tail_mass_truncation / count

    def compose_mechanism(self, mechanism: Any, count: int = 1) -> PLDAccountant:
        """Add ``count`` runs of any object with a ``pld(value_discretization_interval)``."""
        if not hasattr(mechanism, "pld"):
            raise TypeError(f"mechanism must have a pld() method, got {type(mechanism).__name__}")
        return self.compose(mechanism.pld(value_discretization_interval=self.h), count)

    def pld(self) -> PrivacyLossDistribution:
        """The composed PLD of every event so far."""
        if not self._events and self._gauss_precision == 0.0:
            raise ValueError("no mechanism has been composed yet")
        if self._composed is None:
            total: PrivacyLossDistribution | None = None
            if self._gauss_precision > 0.0:
                total = PrivacyLossDistribution.from_gaussian(
                    1.0 / math.sqrt(self._gauss_precision), 1.0, self.h,
                    tail_mass_truncation=self.tail_mass_truncation, estimator=self.estimator,
                )
            for pld, count in self._events:
                part = pld.self_compose(count, self.tail_mass_truncation)
                total = part if total is None else total.compose(part, self.tail_mass_truncation)
            self._composed = total
        return self._composed  # type: ignore[return-value]

    def get_epsilon(self, delta: float) -> float:
        """Composed epsilon at ``delta`` in (0, 1)."""
        delta = float(check_scalar(delta, "delta", Interval("real", 0.0, 1.0, "neither")))
        if not self._events and self._gauss_precision > 0.0:
            return _gaussian_epsilon(delta, 0.5 * self._gauss_precision)
        return float(self.pld().get_epsilon_for_delta(delta))

    def get_delta(self, epsilon: float) -> float:
        """Composed delta at ``epsilon`` >= 0."""
        epsilon = float(check_scalar(epsilon, "epsilon", Interval("real", 0.0, None)))
        if not self._events and self._gauss_precision > 0.0:
            return float(_gaussian_hockey(np.array([epsilon]), 0.5 * self._gauss_precision)[0])
        return float(self.pld().get_delta_for_epsilon(epsilon))
