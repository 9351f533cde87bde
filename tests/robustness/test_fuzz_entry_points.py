"""Property-based fuzzing of every public entry point of rml_fast (issue 25, part 1).

The entry points are collected automatically (every function and class in a public module's
``__all__``, see ``_fuzz.collect_entry_points``); a known-good call of each is recorded from
its docstring example; then one argument at a time is mutated (NaN / inf, empty, wrong ndim,
complex / object / str / bool dtypes, non-contiguous and Fortran-ordered views, a torch tensor
for a NumPy array and a NumPy array or a "meta" tensor for a tensor, negative / zero / huge
scalars, None, a string; plus hypothesis-drawn positions and values). Contract: the call
returns (the baseline's result for an equivalent input such as a strided view; a non-finite
result, never a finite one, for NaN input) or raises a ValueError/TypeError whose message
names the argument; never another exception type, a hang, or a change to the caller's arrays.

``RML_FAST_FUZZ_REPORT=path`` writes the counts (entry points, examples run, failures by kind)
as JSON; they are printed in the terminal summary.
"""

from __future__ import annotations

import pytest

from tests.robustness.conftest import load_fuzz

fz = load_fuzz()
ENTRIES = fz.collect_entry_points()

# Entry points not fuzzed, with the reason. Keep it small: a new entry point without a
# docstring example that calls it fails test_every_entry_point_is_fuzzed_or_excluded.
EXCLUDED: dict[str, str] = {}

# Defects found by the fuzzer and not fixed yet (strict xfail: fixing one flips its test).
KNOWN_DEFECTS: dict[str, str] = {}

SLOW_S = 0.05  # a baseline slower than this gets its 4 highest-priority mutations only
HYPOTHESIS_EXAMPLES = 3


def _auto_excluded(ep) -> str | None:
    if ep.kind == "class" and issubclass(ep.obj, BaseException):
        return "an exception or warning type: raised, not called"
    return EXCLUDED.get(ep.name)


def _params():
    out = []
    for ep in ENTRIES:
        if _auto_excluded(ep):
            continue
        marks = []
        if ep.name in KNOWN_DEFECTS:
            marks.append(pytest.mark.xfail(strict=True, reason=KNOWN_DEFECTS[ep.name]))
        out.append(pytest.param(ep.name, marks=marks, id=ep.name))
    return out


@pytest.mark.parametrize("entry", _params())
def test_fuzz_entry_point(entry, fuzz_session, monkeypatch):
    monkeypatch.chdir(fuzz_session["workdir"])
    calls = [c for c in fuzz_session["calls"].values() if c.entry == entry]
    if not calls:
        pytest.skip("no baseline recorded (see test_every_entry_point_is_fuzzed_or_excluded)")
    failures = []
    budget = {"slow_labels": 2}
    for call in calls:
        failures += fz.fuzz_call(call, SLOW_S, HYPOTHESIS_EXAMPLES, budget)
    fz.STATS.fuzzed += 1
    assert not failures, f"{len(failures)} contract violation(s):\n" + "\n".join(failures)


def test_every_entry_point_is_fuzzed_or_excluded(fuzz_session):
    names = {ep.name for ep in ENTRIES}
    stale = sorted(set(EXCLUDED) - names)
    assert not stale, f"exclusions naming no entry point: {stale}"
    recorded = {c.entry for c in fuzz_session["calls"].values()}
    auto = [ep.name for ep in ENTRIES if _auto_excluded(ep)]
    fz.STATS.excluded = len(auto)
    missing = sorted(ep.name for ep in ENTRIES
                     if ep.name not in recorded and not _auto_excluded(ep))
    assert not missing, (
        "public entry points whose docstring example never calls them (add an example that "
        "does, or an EXCLUDED reason):\n" + "\n".join(missing))
    assert len(EXCLUDED) <= 0.1 * len(ENTRIES), "the exclusion table must stay small"
    assert len(ENTRIES) >= 300, len(ENTRIES)  # the walk reaches the API


def test_contract_checker_catches_violations():
    """The checker itself: a function that ignores NaN, one that mutates its input, one
    that raises an unnamed error and one that crashes are all caught."""
    import numpy as np

    def ignores_nan(x):
        return float(np.nansum(x))

    def mutates(x):
        x[0] = 0.0
        return x.sum()

    def unnamed(x):
        raise ValueError("bad input")

    def crashes(x):
        raise IndexError("boom")

    def good(x):
        x = np.asarray(x, dtype=float)
        if not np.isfinite(x).all():
            raise ValueError("x must be finite")
        return float(x.sum())

    x = np.array([1.0, 2.0, 3.0])
    kinds = {}
    for f in (ignores_nan, mutates, unnamed, crashes, good):
        call = fz.Call(f.__name__, f.__name__, f, (x.copy(),), {})
        nan = fz.Mutation(0, "nan", np.array([1.0, np.nan, 3.0]), "reject")
        kinds[f.__name__] = fz.run_case(call, nan, 6.0, True, 5.0).kind
    assert kinds == {"ignores_nan": "accepted_nan", "mutates": "mutated_input",
                     "unnamed": "unnamed", "crashes": "crash", "good": "error"}
    view = fz.Mutation(0, "noncontiguous", fz._noncontig_np(x), "same")
    assert fz.run_case(fz.Call("g", "g", good, (x,), {}), view, 6.0, True, 5.0).kind == "ok"
    wrong = fz.Call("w", "w", lambda x: float(x[1]), (x,), {})
    assert fz.run_case(wrong, fz.Mutation(0, "x", x[::-1].copy(), "same"), 1.0, True,
                       5.0).kind == "mismatch"
