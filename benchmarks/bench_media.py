"""Media and security: S(H)NAP's exact interaction computation vs shapiq.

Cases (one group per family; ``GROUPS`` lists them, each a (cases, body) pair):

* ``shnap``: exact order-2 interactions of the same game, :mod:`rml_fast.audit.interventional`
  (one batched coalition table + numba Moebius butterfly) vs ``shapiq.ExactComputer``: SII at
  n = 8, 12, 14 players and FSII at n = 8, 10 on a cheap vectorised game (so the attribution
  machinery dominates), plus an end-to-end toy audit (64x64 scene, 6 objects, inpainting
  generator, 4 seeds). The largest absolute difference between the two sides is recorded.
  ``--quick``: SII at 8, 10, FSII at 8 and the toy audit. Goal (issue 22): >= 5x.

DistSeal's embed/detect throughput against invisible-watermark will join this suite when DistSeal
lands (issue 22).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import numpy as np

from rml_fast.audit.interventional import (
    GenerativeInterventionalAttribution,
    InpaintingGenerator,
    InterventionGame,
    ToyRiskModel,
    coalition_values,
    exact_attribution,
    make_object_scene,
)
from rml_fast.benchmarking import Suite, missing_peer

SUITE = "media"


# --------------------------------------------------------------------------- bench_shnap.py

# S(H)NAP (rml_fast.audit.interventional) -- body for benchmarks/bench_media.py.

SHNAP_CASES = [
    {"method": "shnap", "index": "SII", "n": 8},
    {"method": "shnap", "index": "SII", "n": 12},
    {"method": "shnap", "index": "SII", "n": 14},
    {"method": "shnap", "index": "FSII", "n": 8},
    {"method": "shnap", "index": "FSII", "n": 10},
    {"method": "shnap", "index": "SII", "n": 6, "e2e": True, "size": 64, "seeds": 4},
]
SHNAP_QUICK_CASES = [
    {"method": "shnap", "index": "SII", "n": 8},
    {"method": "shnap", "index": "SII", "n": 10},
    {"method": "shnap", "index": "FSII", "n": 8},
    {"method": "shnap", "index": "SII", "n": 6, "e2e": True, "size": 64, "seeds": 4},
]


def _shnap_game(n: int, seed: int = 0):
    w = np.random.default_rng(seed).normal(size=n)

    def game(keep: np.ndarray) -> np.ndarray:
        k = np.asarray(keep, dtype=np.float64)
        return np.tanh(k @ w) + k[:, 0] * k[:, 1] * k[:, 2] - 0.5 * k[:, 3] * k[:, 4]

    return game


def shnap_body(suite: Suite, case: dict[str, Any]) -> None:
    n, index = case["n"], case["index"]
    peer_name = f"shapiq.ExactComputer({index})"
    reason = missing_peer("shapiq")
    if reason:
        suite.skip(case, peer_name=peer_name, reason=reason)
        return
    import shapiq

    if case.get("e2e"):
        scene = make_object_scene(n, size=case["size"], rng=0)
        G = np.zeros((n, n))
        G[0, 1] = G[1, 0] = 1.5
        risk = ToyRiskModel(scene, np.linspace(-1.0, 1.0, n), G)
        gen = InpaintingGenerator(scene.masks, noise=0.1)
        audit = GenerativeInterventionalAttribution(risk, gen, n_seeds=case["seeds"], index=index)
        seeds = audit.fit(scene.image, n).seeds_

        class _Res:  # the fitted audit, read like an AttributionResult
            def __init__(self, a: Any) -> None:
                self.first_order, self.interactions = a.first_order_, a.interactions_

        def ours() -> Any:
            return _Res(audit.fit(scene.image, n))

        def peer() -> Any:
            game = InterventionGame(risk, gen, scene.image, n, seeds=seeds)
            return shapiq.ExactComputer(game, n_players=n)(index=index, order=2)
    else:
        game = _shnap_game(n)

        def ours() -> Any:
            return exact_attribution(coalition_values(game, n), index)

        def peer() -> Any:
            return shapiq.ExactComputer(game, n_players=n)(index=index, order=2)

    mine, theirs = ours(), peer()
    diff = max(abs(theirs[(i,)] - mine.first_order[i]) for i in range(n))
    diff = max(diff, max(abs(theirs[(i, j)] - mine.interactions[i, j])
                         for i, j in itertools.combinations(range(n), 2)))
    note = f"max|ours - shapiq| = {diff:.2e} over {n} singletons + {n * (n - 1) // 2} pairs"
    slow = n >= 14 or (index == "FSII" and n >= 10)
    saved = suite.repeat, suite.warmup
    if slow:
        suite.repeat, suite.warmup = min(suite.repeat, 2), 0
    try:
        suite.compare(case, ours, peer, peer_name=peer_name, note=note, memory=not slow)
    finally:
        suite.repeat, suite.warmup = saved
    suite.rows[-1]["max_abs_diff"] = float(diff)


GROUPS: list[tuple[Callable[[bool], list[dict[str, Any]]], Callable[[Suite, dict[str, Any]], None]]] = [
    (lambda quick: SHNAP_QUICK_CASES if quick else SHNAP_CASES, shnap_body),
]


def run(*, quick: bool = False, progress: bool = True, repeat: int = 5) -> Suite:
    """Run every family's cases into one ``media`` suite."""
    suite = Suite(SUITE, quick=quick, progress=progress, repeat=repeat)
    for cases, body in GROUPS:
        suite.run(cases(quick), body)
    return suite


if __name__ == "__main__":  # python benchmarks/bench_media.py [--quick] [--out DIR] ...
    import sys

    from run_all import main

    raise SystemExit(main(sys.argv[1:], suite=SUITE))
