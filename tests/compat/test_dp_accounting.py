"""rml_fast.compat.dp_accounting.PLDAccountant against dp-accounting's own PLD accountant.

The cases follow dp-accounting's ``pld/pld_privacy_accountant_test.py`` (supported events per
neighbouring relation, relation errors, zero noise, zero sampling probability, the Gaussian /
Poisson-subsampled Gaussian / Laplace examples with their expected values and tolerances),
written here as our own tests, plus closed forms and the peer's optimistic/pessimistic PLDs.
"""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

pytest.importorskip("dp_accounting")

from dp_accounting import dp_event
from dp_accounting.pld import pld_privacy_accountant as peer
from dp_accounting.pld import privacy_loss_distribution as peer_pld
from scipy.stats import norm

from rml_fast.compat.dp_accounting import (
    NeighboringRelation,
    PLDAccountant,
    SGGDpEvent,
    UnsupportedEventError,
)
from rml_fast.privacy import SGGMechanism

Rel = NeighboringRelation
G = dp_event.GaussianDpEvent
L = dp_event.LaplaceDpEvent
P = dp_event.PoissonSampledDpEvent
H = 1e-3


def balle_wang_delta(eps: float, mu: float) -> float:
    """Exact delta(eps) of a Gaussian with sensitivity/std = mu (Balle & Wang 2018)."""
    return float(norm.cdf(mu / 2 - eps / mu) - math.exp(eps) * norm.cdf(-mu / 2 - eps / mu))


# --- imports ----------------------------------------------------------------------------


def test_core_imports_do_not_load_dp_accounting():
    code = "import sys, rml_fast, rml_fast.compat; print('dp_accounting' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_missing_dp_accounting_names_the_install_command():
    code = (
        "import sys; sys.modules['dp_accounting'] = None\n"
        "try:\n    import rml_fast.compat.dp_accounting\n"
        "except ImportError as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "pip install dp-accounting" in out.stdout


# --- what is supported: the peer's cases --------------------------------------------------

SUPPORT_EVENTS = [
    G(1.0),
    dp_event.SelfComposedDpEvent(G(1.0), 6),
    dp_event.ComposedDpEvent([G(1.0), G(2.0)]),
    P(0.1, G(1.0)),
    dp_event.ComposedDpEvent([P(0.1, G(1.0)), G(2.0)]),
    L(1.0),
    P(0.1, L(1.0)),
    P(1.0, G(1.0)),
    dp_event.NoOpDpEvent(),
    dp_event.NonPrivateDpEvent(),
    dp_event.UnsupportedDpEvent(),
    dp_event.SampledWithoutReplacementDpEvent(1000, 10, G(1.0)),
    dp_event.SampledWithReplacementDpEvent(1000, 10, G(1.0)),
    P(0.1, dp_event.SelfComposedDpEvent(G(1.0), 2)),
    dp_event.ZCDpEvent(0.1),
    dp_event.ComposedDpEvent([G(1.0), dp_event.UnsupportedDpEvent()]),
    dp_event.SelfComposedDpEvent(dp_event.SampledWithoutReplacementDpEvent(10, 2, G(1.0)), 3),
]


def _diverges(event, relation) -> bool:
    """Where we knowingly refuse what the peer accepts: subsampling under REPLACE_ONE."""
    if relation != Rel.REPLACE_ONE:
        return False
    if isinstance(event, dp_event.PoissonSampledDpEvent):
        return event.sampling_probability < 1.0 and isinstance(event.event, G)
    if isinstance(event, dp_event.ComposedDpEvent):
        return any(_diverges(e, relation) for e in event.events)
    return False


@pytest.mark.parametrize("relation", list(Rel))
@pytest.mark.parametrize("event", SUPPORT_EVENTS, ids=lambda e: type(e).__name__)
def test_supports_matches_the_peer(event, relation):
    ours = PLDAccountant(relation).supports(event)
    theirs = peer.PLDAccountant(relation).supports(event)
    if _diverges(event, relation):
        assert theirs and not ours
    else:
        assert ours == theirs


@pytest.mark.parametrize(
    ("event", "relation", "message"),
    [
        (L(1.0), Rel.REPLACE_ONE, "neighboring_relation must be `ADD_OR_REMOVE_ONE` or `REPLACE_SPECIAL`"),
        (P(0.1, L(1.0)), Rel.REPLACE_ONE, "neighboring_relation must be `ADD_OR_REMOVE_ONE` or `REPLACE_SPECIAL`"),
        (dp_event.RandomizedResponseDpEvent(0.1, 3), Rel.REPLACE_ONE, "dp_accounting.pld.PLDAccountant supports it"),
        (dp_event.DiscreteLaplaceDpEvent(0.1, 1), Rel.ADD_OR_REMOVE_ONE, "rml_fast has no PLD"),
        (dp_event.MixtureOfGaussiansDpEvent(1.0, [0.0, 1.0], [0.5, 0.5]), Rel.ADD_OR_REMOVE_ONE, "rml_fast has no PLD"),
        (P(0.1, G(1.0)), Rel.REPLACE_ONE, "no REPLACE_ONE Poisson-subsampled pair"),
        (dp_event.SampledWithoutReplacementDpEvent(100, 10, G(1.0)), Rel.ADD_OR_REMOVE_ONE, "Unsupported event"),
        (dp_event.UnsupportedDpEvent(), Rel.ADD_OR_REMOVE_ONE, "Unsupported event"),
        (P(0.1, dp_event.ZCDpEvent(0.1)), Rel.ADD_OR_REMOVE_ONE, "Subevent of `PoissonSampledDpEvent`"),
    ],
)
def test_unsupported_events_raise_and_leave_the_state_alone(event, relation, message):
    acc = PLDAccountant(relation, H).compose(G(2.0))
    before = (acc.get_epsilon(1e-5), acc.ledger)
    assert not acc.supports(event)
    with pytest.raises(UnsupportedEventError, match=message):
        acc.compose(dp_event.ComposedDpEvent([G(1.0), event]))
    assert (acc.get_epsilon(1e-5), acc.ledger) == before


@pytest.mark.parametrize("count", [0, -1])
def test_non_positive_count_is_a_value_error(count):
    for acc in (PLDAccountant(), peer.PLDAccountant()):
        with pytest.raises(ValueError, match="count"):
            acc.compose(G(1.0), count)
        with pytest.raises(ValueError, match="count"):
            acc.compose(dp_event.SelfComposedDpEvent(G(1.0), count))


@pytest.mark.parametrize("event", [G(0), L(0), P(0.1, G(0)), P(0.1, L(0)), dp_event.NonPrivateDpEvent()])
def test_zero_noise_is_non_private(event):
    acc = PLDAccountant(value_discretization_interval=H).compose(G(1.0)).compose(event)
    assert acc.get_delta(1.0) == 1
    assert acc.get_epsilon(0.01) == math.inf


@pytest.mark.parametrize(
    "event", [P(0, G(1)), P(0, L(1)), P(0, G(0)), P(0, L(0)), dp_event.NoOpDpEvent()]
)
def test_nothing_private_composed_gives_zero(event):
    acc = PLDAccountant().compose(event)
    assert acc.get_delta(0) == 0
    assert acc.get_epsilon(0) == 0


# --- the peer's numeric examples, at the peer's tolerance ------------------------------------


def test_gaussian_basic():
    acc = PLDAccountant()
    acc.compose(G(math.sqrt(3)), 1)
    acc.compose(G(math.sqrt(3)), 2)
    assert acc.get_delta(1.0) == pytest.approx(0.126936, abs=1e-3)
    assert acc.get_epsilon(0.126936) == pytest.approx(1.0, abs=1e-3)


@pytest.mark.parametrize("self_composed", [False, True])
def test_poisson_subsampled_gaussian(self_composed):
    event = P(0.2, G(0.5))
    acc = PLDAccountant()
    if self_composed:
        acc.compose(dp_event.SelfComposedDpEvent(event, 3))
    else:
        acc.compose(event, 1).compose(event, 2)
    assert acc.get_delta(1.0) == pytest.approx(0.15594, abs=1e-3)
    assert acc.get_epsilon(0.15594) == pytest.approx(1.0, abs=1e-3)


def test_laplace_basic():
    acc = PLDAccountant().compose(L(1), 3).compose(L(2), 2)
    assert acc.get_delta(4.0) == pytest.approx(1e-14, abs=1e-6)
    assert acc.get_epsilon(1e-14) == pytest.approx(4.0, abs=1e-6)


def test_poisson_subsampled_laplace():
    event = P(0.2, L(0.5))
    acc = PLDAccountant().compose(event, 1).compose(event, 2)
    assert acc.get_delta(2.46964) == pytest.approx(1e-14, abs=1e-6)
    assert acc.get_epsilon(1e-14) == pytest.approx(2.46964, abs=1e-3)


# --- upper bounds: closed forms and the peer's optimistic / pessimistic PLDs ---------------


@pytest.mark.parametrize("relation", [Rel.ADD_OR_REMOVE_ONE, Rel.REPLACE_ONE])
@pytest.mark.parametrize(("sigma", "count"), [(0.8, 1), (2.0, 10), (5.0, 100), (20.0, 1000)])
def test_gaussian_is_balle_wang(sigma, count, relation):
    sens = 2.0 if relation == Rel.REPLACE_ONE else 1.0
    mu = sens * math.sqrt(count) / sigma
    acc = PLDAccountant(relation, H).compose(G(sigma), count)
    for eps in (0.1, 1.0, 3.0):
        exact = balle_wang_delta(eps, mu)
        assert exact - 1e-12 <= acc.get_delta(eps) <= exact + 1e-9
    for delta in (1e-3, 1e-6):
        eps = acc.get_epsilon(delta)
        assert balle_wang_delta(eps, mu) <= delta * (1 + 1e-9)  # eps is feasible: an upper bound
        assert balle_wang_delta(eps - 1e-6, mu) > delta  # and tight to 1e-6


@pytest.mark.parametrize("b", [0.5, 1.0, 4.0])
def test_single_laplace_is_its_closed_form(b):
    acc = PLDAccountant(value_discretization_interval=H).compose(L(b))
    a = 1.0 / b
    for eps in (0.0, 0.3 * a, 0.9 * a):
        exact = 1.0 - math.exp((eps - a) / 2)
        assert exact - 1e-12 <= acc.get_delta(eps) <= exact + H  # within one lattice step
    assert a - 1e-12 <= acc.get_epsilon(0.0) <= a + H


def _peer_bounds(pld_factory, count: int, delta: float) -> tuple[float, float]:
    """The peer's (optimistic, pessimistic) epsilon at the same discretisation."""
    opt = pld_factory(pessimistic_estimate=False, use_connect_dots=False).self_compose(count)
    pes = pld_factory(pessimistic_estimate=True, use_connect_dots=True).self_compose(count)
    return opt.get_epsilon_for_delta(delta), pes.get_epsilon_for_delta(delta)


@pytest.mark.parametrize(
    ("sigma", "q", "count"), [(1.0, 0.01, 1000), (0.8, 0.05, 200), (2.0, 0.2, 50)]
)
def test_poisson_gaussian_between_peer_bounds(sigma, q, count):
    def factory(**kw):
        return peer_pld.from_gaussian_mechanism(
            sigma, value_discretization_interval=H, sampling_prob=q, **kw
        )

    ours = PLDAccountant(value_discretization_interval=H).compose(P(q, G(sigma)), count)
    for delta in (1e-5, 1e-3):
        opt, pes = _peer_bounds(factory, count, delta)
        eps = ours.get_epsilon(delta)
        # ours is an upper bound: never below the peer's lower bound ...
        assert eps >= opt - 1e-9
        # ... and as tight as the peer's pessimistic PLD: both use connect-the-dots on the same
        # lattice, so they differ only by round-off (measured < 1e-8); h/10 leaves room.
        assert abs(eps - pes) <= H / 10


def test_laplace_composition_between_peer_bounds():
    def factory(**kw):
        return peer_pld.from_laplace_mechanism(2.0, value_discretization_interval=H, **kw)

    ours = PLDAccountant(value_discretization_interval=H).compose(L(2.0), 50)
    opt, pes = _peer_bounds(factory, 50, 1e-5)
    eps = ours.get_epsilon(1e-5)
    assert eps >= opt - 1e-9
    assert abs(eps - pes) <= H / 10


TREES = [
    dp_event.ComposedDpEvent([
        dp_event.SelfComposedDpEvent(P(0.02, G(1.1)), 300),
        G(10.0),
        dp_event.SelfComposedDpEvent(L(20.0), 5),
    ]),
    dp_event.SelfComposedDpEvent(
        dp_event.ComposedDpEvent([P(0.1, G(2.0)), P(0.05, L(3.0)), dp_event.NoOpDpEvent()]), 40
    ),
]


@pytest.mark.parametrize("relation", [Rel.ADD_OR_REMOVE_ONE, Rel.REPLACE_SPECIAL])
@pytest.mark.parametrize("tree", TREES, ids=["mixed", "nested"])
def test_composed_trees_agree_with_the_peer(tree, relation):
    ours = PLDAccountant(relation, H).compose(tree)
    theirs = peer.PLDAccountant(relation, H).compose(tree)
    for delta in (1e-6, 1e-3):
        # same lattice, same connect-the-dots PLDs: the two differ by FFT round-off and the
        # order of composition (measured < 2e-8 in epsilon); h/10 is far below any lattice effect.
        assert ours.get_epsilon(delta) == pytest.approx(theirs.get_epsilon(delta), abs=H / 10)
    for eps in (0.5, 2.0):
        assert ours.get_delta(eps) == pytest.approx(theirs.get_delta(eps), rel=1e-4, abs=1e-12)


@pytest.mark.parametrize("tree", [*TREES, P(0.01, G(1.0)), L(1.0)], ids=type)
def test_round_trip(tree):
    acc = PLDAccountant(value_discretization_interval=H).compose(tree, 3)
    for delta in (1e-7, 1e-4, 0.05):
        eps = acc.get_epsilon(delta)
        assert acc.get_delta(eps) <= delta * (1 + 1e-9)
    for eps in (0.2, 1.0):
        assert acc.get_epsilon(acc.get_delta(eps)) <= eps + 1e-9


def test_repeated_compose_equals_one_composition():
    event = P(0.05, G(1.2))
    a = PLDAccountant(value_discretization_interval=H)
    for _ in range(20):
        a.compose(event)
    b = PLDAccountant(value_discretization_interval=H).compose(event, 20)
    c = PLDAccountant(value_discretization_interval=H).compose(dp_event.SelfComposedDpEvent(event, 20))
    assert a.get_epsilon(1e-5) == b.get_epsilon(1e-5) == c.get_epsilon(1e-5)
    assert a.ledger == b.ledger == dp_event.SelfComposedDpEvent(event, 20)


# --- SGG events ---------------------------------------------------------------------------


@pytest.mark.parametrize("q", [1.0, 0.1])
def test_sgg_gaussian_member_is_the_gaussian(q):
    mech = SGGMechanism.gaussian(dim=5, std=2.0, sensitivity=0.5)  # noise multiplier 4
    ours = PLDAccountant(value_discretization_interval=H).compose(
        P(q, SGGDpEvent.from_mechanism(mech)), 30
    )
    gauss = PLDAccountant(value_discretization_interval=H).compose(P(q, G(4.0)), 30)
    for delta in (1e-6, 1e-3):
        assert ours.get_epsilon(delta) == pytest.approx(gauss.get_epsilon(delta), abs=H)


def test_sgg_one_dimensional_l1_member_is_laplace():
    # dim = 1, p = 1: density exp(-|x| / sigma), the Laplace mechanism with b = sigma
    ours = PLDAccountant(value_discretization_interval=H).compose(SGGDpEvent(1, 2.0, p=1.0), 3)
    lap = PLDAccountant(value_discretization_interval=H).compose(L(2.0), 3)
    assert ours.get_epsilon(1e-6) == pytest.approx(lap.get_epsilon(1e-6), abs=H)
    assert ours.get_delta(1.0) == pytest.approx(lap.get_delta(1.0), abs=1e-6)


def test_sgg_replace_one_doubles_the_sensitivity():
    event = SGGDpEvent.from_mechanism(SGGMechanism.gaussian(dim=2, std=3.0))
    ours = PLDAccountant(Rel.REPLACE_ONE, H).compose(event, 4)
    assert ours.get_delta(1.0) == pytest.approx(balle_wang_delta(1.0, 2 * 2 / 3), abs=1e-6)
    assert not PLDAccountant(Rel.REPLACE_ONE, H).supports(P(0.1, event))


def test_sgg_event_round_trips_through_named_tuple():
    event = SGGDpEvent(3, 2.0, p=1.0)
    assert dp_event.DpEvent.from_named_tuple(event.to_named_tuple()) == event


def test_sgg_event_fields_are_validated():
    with pytest.raises(ValueError, match="sigma"):
        PLDAccountant().compose(SGGDpEvent(2, -1.0))
    with pytest.raises(TypeError, match="mechanism"):
        SGGDpEvent.from_mechanism("gaussian")


# --- bad input ------------------------------------------------------------------------------


def test_bad_arguments_name_themselves():
    with pytest.raises(TypeError, match="neighboring_relation"):
        PLDAccountant("add_or_remove")
    with pytest.raises(ValueError, match="value_discretization_interval"):
        PLDAccountant(value_discretization_interval=0.0)
    with pytest.raises(ValueError, match="noise_multiplier"):
        PLDAccountant().compose(G(-1.0))
    with pytest.raises(ValueError, match="sampling_probability"):
        PLDAccountant().compose(P(1.5, G(1.0)))
    acc = PLDAccountant(value_discretization_interval=H).compose(G(1.0))
    with pytest.raises(ValueError, match="target_delta"):
        acc.get_epsilon(-0.1)
    with pytest.raises(ValueError, match="target_epsilon"):
        acc.get_delta(-1.0)
    with pytest.raises(TypeError):
        acc.compose("gaussian")
    assert acc.get_delta(1.0) == pytest.approx(balle_wang_delta(1.0, 1.0), abs=1e-9)
