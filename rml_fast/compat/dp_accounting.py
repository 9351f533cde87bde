"""A ``dp_accounting.PrivacyAccountant`` backed by rml_fast's privacy-loss distributions.

Swap ``dp_accounting.pld.PLDAccountant`` for :class:`PLDAccountant` and keep the rest of the
code: the same constructor (``neighboring_relation``, ``value_discretization_interval``), the
same event trees (``compose``, ``supports``, ``ledger``), the same read-outs (``get_epsilon``,
``get_delta``, ``inf`` / ``1`` after a ``NonPrivateDpEvent``). Composition is done by
:class:`rml_fast.privacy.pld.PrivacyLossDistribution`: identical events are merged and composed
once by FFT powers, and plain Gaussian events use the exact closed form (Balle & Wang).
Every number is an upper bound (pessimistic), as dp-accounting's default PLDs are.

Events the PLD code cannot represent exactly are *reported* unsupported the way dp-accounting
does it (``supports(event)`` is False, ``compose`` raises ``UnsupportedEventError``), never
approximated. dp-accounting is needed by this module only (``pip install dp-accounting``).
"""

from __future__ import annotations

import math
import numbers
from typing import Any, TypeAlias

try:
    import attr
    from dp_accounting import dp_event
    from dp_accounting.privacy_accountant import (
        NeighboringRelation,
        PrivacyAccountant,
        UnsupportedEventError,
    )
except ImportError as exc:  # pragma: no cover - exercised only without dp-accounting
    raise ImportError(
        "rml_fast.compat.dp_accounting needs the dp-accounting package: "
        "pip install dp-accounting"
    ) from exc

from rml_fast._validation import Interval, check_scalar
from rml_fast.privacy.pld import PLDAccountant as _RmlAccountant
from rml_fast.privacy.sgg import SGGMechanism

__all__ = ["NeighboringRelation", "PLDAccountant", "SGGDpEvent", "UnsupportedEventError"]

_Details: TypeAlias = PrivacyAccountant.CompositionErrorDetails
_ADD_OR_REMOVE = NeighboringRelation.ADD_OR_REMOVE_ONE
_REPLACE_ONE = NeighboringRelation.REPLACE_ONE
_REPLACE_SPECIAL = NeighboringRelation.REPLACE_SPECIAL
_NON_PRIVATE = ("non_private",)
_PEER_ONLY = (
    "RandomizedResponseDpEvent",
    "DiscreteLaplaceDpEvent",
    "MixtureOfGaussiansDpEvent",
    "TruncatedSubsampledGaussianDpEvent",
)


@attr.s(frozen=True, slots=True, auto_attribs=True)
class SGGDpEvent(dp_event.DpEvent):
    """One release of a Spherical Generalized Gamma mechanism (:class:`SGGMechanism`).

    The fields are those of :class:`rml_fast.privacy.SGGMechanism`. ``sensitivity`` is the
    l2 bound C of one record's contribution (as ``noise_multiplier = s / C`` of
    ``GaussianDpEvent``): under ``REPLACE_ONE`` the query moves by up to ``2 C``, and the
    accountant accounts for that. Wrap it in ``PoissonSampledDpEvent`` for Poisson
    subsampling (add-or-remove / replace-special relations only).

    Examples
    --------
    >>> from rml_fast.compat.dp_accounting import PLDAccountant, SGGDpEvent
    >>> from rml_fast.privacy import SGGMechanism
    >>> event = SGGDpEvent.from_mechanism(SGGMechanism.gaussian(dim=4, std=1.0))
    >>> acc = PLDAccountant(value_discretization_interval=1e-3).compose(event)
    >>> round(acc.get_delta(1.0), 3)
    0.127
    """

    dim: int
    sigma: float
    k: float | None = None
    p: float = 2.0
    sensitivity: float = 1.0

    @classmethod
    def from_mechanism(cls, mechanism: SGGMechanism) -> SGGDpEvent:
        """The event of one release of ``mechanism`` (an :class:`SGGMechanism`)."""
        if not isinstance(mechanism, SGGMechanism):
            raise TypeError(f"mechanism must be an SGGMechanism, got {type(mechanism).__name__}")
        return cls(mechanism.dim, mechanism.sigma, mechanism.k, mechanism.p, mechanism.sensitivity)

    def mechanism(self, sensitivity_scale: float = 1.0) -> SGGMechanism:
        """The validated :class:`SGGMechanism` (sensitivity times ``sensitivity_scale``).

        Parameters
        ----------
        sensitivity_scale : float, default=1.0
            Positive finite factor on ``sensitivity`` (2 under ``REPLACE_ONE``).

        Returns
        -------
        SGGMechanism

        Examples
        --------
        >>> from rml_fast.compat.dp_accounting import SGGDpEvent
        >>> SGGDpEvent(dim=4, sigma=1.0).mechanism(2.0).sensitivity
        2.0
        """
        sensitivity_scale = check_scalar(sensitivity_scale, "sensitivity_scale",
                                         Interval("real", 0.0, None, "neither"))
        base = SGGMechanism(self.dim, self.sigma, self.k, self.p, self.sensitivity)
        if sensitivity_scale == 1.0:
            return base
        return SGGMechanism(base.dim, base.sigma, base.k, base.p, base.sensitivity * sensitivity_scale)


_NOISE = Interval("real", 0.0, None, "left")  # 0 means no noise: non-private
_PROBABILITY = Interval("real", 0.0, 1.0, "both")
_COUNT = Interval("int", 0, None)


class PLDAccountant(PrivacyAccountant):
    """Drop-in replacement of ``dp_accounting.pld.PLDAccountant`` on rml_fast's PLD code.

    Supported events (and trees of them through ``SelfComposedDpEvent`` and
    ``ComposedDpEvent``): ``NoOpDpEvent``, ``NonPrivateDpEvent``, ``GaussianDpEvent``,
    ``LaplaceDpEvent``, ``PoissonSampledDpEvent`` of a Gaussian, Laplace or
    :class:`SGGDpEvent`, and :class:`SGGDpEvent`. Under ``REPLACE_ONE`` the Laplace events
    are refused with dp-accounting's own message, and Poisson-subsampled events with
    ``0 < q < 1`` are refused (rml_fast has no replace-one subsampled PLD; dp-accounting's
    accountant handles the Gaussian one). ``SampledWithoutReplacementDpEvent`` and every
    other event are unsupported, as in dp-accounting's PLD accountant (which also supports
    randomized response, discrete Laplace, mixtures of Gaussians and truncated subsampled
    Gaussians: those are refused here, naming the peer).

    Parameters
    ----------
    neighboring_relation : NeighboringRelation, default=ADD_OR_REMOVE_ONE
        ``ADD_OR_REMOVE_ONE`` and ``REPLACE_SPECIAL`` (the same PLDs) or ``REPLACE_ONE``
        (a Gaussian moves by twice the norm bound).
    value_discretization_interval : float, default=1e-4
        The loss lattice spacing h, in (0, 1).

    Examples
    --------
    >>> from dp_accounting import dp_event
    >>> from rml_fast.compat.dp_accounting import PLDAccountant
    >>> acc = PLDAccountant(value_discretization_interval=1e-3)
    >>> _ = acc.compose(dp_event.GaussianDpEvent(noise_multiplier=1.0))
    >>> round(acc.get_delta(1.0), 4)  # Balle & Wang
    0.1269
    """

    def __init__(
        self,
        neighboring_relation: NeighboringRelation = _ADD_OR_REMOVE,
        value_discretization_interval: float = 1e-4,
    ) -> None:
        if not isinstance(neighboring_relation, NeighboringRelation):
            raise TypeError(
                "neighboring_relation must be a dp_accounting NeighboringRelation, got "
                f"{type(neighboring_relation).__name__}"
            )
        h = check_scalar(value_discretization_interval, "value_discretization_interval",
                         Interval("real", 0.0, 1.0, "neither"))
        super().__init__(neighboring_relation)
        self._h = h
        self._counts: dict[tuple[Any, ...], int] = {}
        self._non_private = False
        self._inner: _RmlAccountant | None = None

    @property
    def value_discretization_interval(self) -> float:
        """The loss lattice spacing h shared by every composed PLD."""
        return self._h

    # -- traversal ---------------------------------------------------------------------
    def _maybe_compose(
        self, event: dp_event.DpEvent, count: int, do_compose: bool
    ) -> _Details | None:
        leaves: list[tuple[tuple[Any, ...], int]] = []
        error = self._collect(event, int(check_scalar(count, "count", _COUNT)), leaves)
        if error is not None or not do_compose:
            return error
        for key, n in leaves:
            if key == _NON_PRIVATE:
                self._non_private = True
            else:
                self._counts[key] = self._counts.get(key, 0) + n
        self._inner = None
        return None

    def _collect(
        self, event: Any, count: int, out: list[tuple[tuple[Any, ...], int]]
    ) -> _Details | None:
        """Appends (key, count) leaves of ``event`` to ``out``; error details if unsupported."""
        relation = self.neighboring_relation
        if isinstance(event, dp_event.NoOpDpEvent):
            return None
        if isinstance(event, dp_event.NonPrivateDpEvent):
            out.append((_NON_PRIVATE, count))
            return None
        if isinstance(event, dp_event.SelfComposedDpEvent):
            return self._collect(event.event, count * int(check_scalar(event.count, "event.count", _COUNT)), out)
        if isinstance(event, dp_event.ComposedDpEvent):
            for sub in event.events:
                error = self._collect(sub, count, out)
                if error is not None:
                    return error
            return None
        if isinstance(event, dp_event.GaussianDpEvent):
            return self._gaussian(event, 1.0, count, out)
        if isinstance(event, dp_event.LaplaceDpEvent):
            if relation == _REPLACE_ONE:
                return _relation_error(event, "`LaplaceDpEvent`", relation)
            return self._laplace(event, 1.0, count, out)
        if isinstance(event, SGGDpEvent):
            return self._sgg(event, 1.0, count, out)
        if isinstance(event, dp_event.PoissonSampledDpEvent):
            return self._poisson(event, count, out)
        if isinstance(event, dp_event.SampledWithoutReplacementDpEvent):
            return _Details(
                invalid_event=event,
                error_message=(
                    "Unsupported event. Sampling without replacement has no exact PLD here "
                    "(dp-accounting's PLD accountant does not support it either)."
                ),
            )
        if type(event).__name__ in _PEER_ONLY:
            return _Details(
                invalid_event=event,
                error_message=(
                    f"Unsupported event. rml_fast has no PLD for `{type(event).__name__}`; "
                    "dp_accounting.pld.PLDAccountant supports it."
                ),
            )
        return _Details(invalid_event=event, error_message="Unsupported event.")

    def _poisson(
        self, event: Any, count: int, out: list[tuple[tuple[Any, ...], int]]
    ) -> _Details | None:
        relation = self.neighboring_relation
        inner = event.event
        kinds = (dp_event.GaussianDpEvent, dp_event.LaplaceDpEvent, SGGDpEvent)
        if not isinstance(inner, kinds):
            return _Details(
                invalid_event=event,
                error_message=(
                    "Subevent of `PoissonSampledDpEvent` must be `GaussianDpEvent`, "
                    f"`LaplaceDpEvent` or `SGGDpEvent`. Found {inner}."
                ),
            )
        if isinstance(inner, dp_event.LaplaceDpEvent) and relation == _REPLACE_ONE:
            return _relation_error(
                event, "`PoissonSampledDpEvent` of a `LaplaceDpEvent`", relation
            )
        q = check_scalar(event.sampling_probability, "PoissonSampledDpEvent.sampling_probability", _PROBABILITY)
        if q < 1.0 and relation == _REPLACE_ONE:
            return _Details(
                invalid_event=event,
                error_message=(
                    "rml_fast's PLD has no REPLACE_ONE Poisson-subsampled pair; use "
                    "ADD_OR_REMOVE_ONE / REPLACE_SPECIAL, or dp_accounting.pld.PLDAccountant."
                ),
            )
        if isinstance(inner, dp_event.GaussianDpEvent):
            return self._gaussian(inner, q, count, out)
        if isinstance(inner, dp_event.LaplaceDpEvent):
            return self._laplace(inner, q, count, out)
        return self._sgg(inner, q, count, out)

    def _gaussian(
        self, event: Any, q: float, count: int, out: list[tuple[tuple[Any, ...], int]]
    ) -> _Details | None:  # never an error today; the same protocol as _collect
        sigma = check_scalar(event.noise_multiplier, "GaussianDpEvent.noise_multiplier", _NOISE)
        if q == 0.0 or count == 0:
            return None
        if sigma == 0.0:
            out.append((_NON_PRIVATE, count))
            return None
        sens = 2.0 if self.neighboring_relation == _REPLACE_ONE else 1.0
        out.append((("gaussian", sigma, sens, q), count))
        return None

    def _laplace(
        self, event: Any, q: float, count: int, out: list[tuple[tuple[Any, ...], int]]
    ) -> _Details | None:  # never an error today; the same protocol as _collect
        b = check_scalar(event.noise_multiplier, "LaplaceDpEvent.noise_multiplier", _NOISE)
        if q == 0.0 or count == 0:
            return None
        if b == 0.0:
            out.append((_NON_PRIVATE, count))
            return None
        out.append((("laplace", b, q), count))
        return None

    def _sgg(
        self, event: SGGDpEvent, q: float, count: int, out: list[tuple[tuple[Any, ...], int]]
    ) -> _Details | None:  # never an error today; the same protocol as _collect
        scale = 2.0 if self.neighboring_relation == _REPLACE_ONE else 1.0
        mech = event.mechanism(scale)  # validates the fields (ValueError / TypeError)
        if q == 0.0 or count == 0:
            return None
        out.append((("sgg", mech, q), count))
        return None

    # -- read-outs ---------------------------------------------------------------------
    def _accountant(self) -> _RmlAccountant:
        if self._inner is None:
            acc = _RmlAccountant(h=self._h)
            for key, n in self._counts.items():
                if key[0] == "gaussian":
                    _, sigma, sens, q = key
                    acc.compose_gaussian(std=sigma, sensitivity=sens, count=n, sampling_prob=q)
                elif key[0] == "laplace":
                    _, b, q = key
                    acc.compose_laplace(b=b, count=n, sampling_prob=q)
                else:
                    _, mech, q = key
                    acc.compose(mech.pld(self._h, sampling_prob=q), n)
            self._inner = acc
        return self._inner

    def get_epsilon(self, target_delta: float) -> float:
        """The composed epsilon at ``target_delta`` in [0, 1] (an upper bound).

        ``inf`` after a non-private event, 0 when nothing private was composed.
        """
        delta = check_scalar(target_delta, "target_delta", _PROBABILITY)
        if self._non_private:
            return math.inf
        if not self._counts or delta == 1.0:
            return 0.0
        acc = self._accountant()
        if delta == 0.0:
            return float(acc.pld().get_epsilon_for_delta(0.0))
        return float(acc.get_epsilon(delta))

    def get_delta(self, target_epsilon: float) -> float:
        """The composed delta at ``target_epsilon`` >= 0 (an upper bound).

        1 after a non-private event, 0 when nothing private was composed.
        """
        eps = target_epsilon
        if isinstance(eps, bool) or not isinstance(eps, numbers.Real):
            raise TypeError(f"target_epsilon must be a real number, got {type(eps).__name__}")
        eps = float(eps)
        if math.isnan(eps) or eps < 0.0:
            raise ValueError(f"target_epsilon must be >= 0, got {eps}")
        if self._non_private:
            return 1.0
        if not self._counts or eps == math.inf:
            return 0.0
        return float(self._accountant().get_delta(eps))


def _relation_error(event: Any, what: str, relation: NeighboringRelation) -> _Details:
    return _Details(
        invalid_event=event,
        error_message=(
            f"neighboring_relation must be `ADD_OR_REMOVE_ONE` or `REPLACE_SPECIAL` for {what}. "
            f"Found {relation}."
        ),
    )
