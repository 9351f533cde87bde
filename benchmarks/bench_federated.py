"""Federated: threshold-watermark field arithmetic, SoHip rounds, and the Flower overhead.

Cases (one group per family; ``GROUPS`` lists them, each a (cases, body) pair):

* ``fedwm``: (t, K) Shamir share / reconstruct over GF(2^61 - 1) vs plain Python ints and vs
  pycryptodome's ``Shamir`` (per secret; it carries 128 bits, ours 61), and reconstruction-free
  threshold verification vs Python ints (D <= 200k) and vs the plaintext z with the key in the
  clear (the floor) at D = 11.2M, t in {8, 32, 64}. Goal (issue 15): >= 10x the Python baseline.
* ``sohip``: one SoHip round for N simulated agents vs one FedProto round; communication bytes per
  round vs the agents' model sizes.
* ``flower``: per-round overhead of the threshold watermark over plain FedAvg on Flower's
  Simulation Engine (goal <= 10%), and Flower vs in-process time per round for FedAvg. These rows
  are built from per-round wall times measured inside the runs (Ray's start-up excluded).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from rml_fast.benchmarking import Suite, missing_peer
from rml_fast.federated import _field, _shamir
from rml_fast.federated.protocol import FederatedServer
from rml_fast.federated.threshold_watermark import (
    FIELD_PRIME,
    KeyShare,
    ShamirField,
    generate_key,
    threshold_verify,
    z_score,
)

SUITE = "federated"


# --------------------------------------------------------------------------- bench_fedwm.py

# Threshold watermark field arithmetic: Shamir share / reconstruct / threshold verify.

FEDWM_CASES: list[dict[str, Any]] = (
    [{"family": "fedwm", "op": "share", "t": t, "K": K, "n": 2000} for t, K in ((3, 5), (8, 16))]
    + [{"family": "fedwm", "op": "reconstruct", "t": t, "K": K, "n": 2000} for t, K in ((3, 5), (8, 16))]
    + [{"family": "fedwm", "op": "verify", "t": 8, "D": 200_000}]
    + [{"family": "fedwm", "op": "verify", "t": t, "D": 11_200_000} for t in (8, 32, 64)]
)
FEDWM_QUICK_CASES: list[dict[str, Any]] = [
    {"family": "fedwm", "op": "share", "t": 3, "K": 5, "n": 500},
    {"family": "fedwm", "op": "reconstruct", "t": 3, "K": 5, "n": 500},
    {"family": "fedwm", "op": "verify", "t": 8, "D": 50_000},
    {"family": "fedwm", "op": "verify", "t": 8, "D": 1_000_000},
]

P = FIELD_PRIME


def _python_share(secrets_: list[int], t: int, K: int) -> list[list[int]]:
    rand = secrets.SystemRandom()
    coeffs = [[rand.randrange(P) for _ in secrets_] for _ in range(t - 1)]
    return _shamir.share_array_python(secrets_, t, K, coeffs)


def _python_verify(theta_q: list[int], shares: list[list[int]], xs: list[int]) -> int:
    ys = [sum(a * b for a, b in zip(theta_q, s, strict=True)) % P for s in shares]
    lam = []
    for j, xj in enumerate(xs):
        num = den = 1
        for m, xm in enumerate(xs):
            if m != j:
                num = num * xm % P
                den = den * (xm - xj) % P
        lam.append(num * pow(den, P - 2, P) % P)
    return sum(lj * y for lj, y in zip(lam, ys, strict=True)) % P


def _coalition(key: dict[str, np.ndarray], t: int, K: int, rng: np.random.Generator) -> list[KeyShare]:
    """t shares (parties 0..t-1) whose Lagrange combination is the encoded key."""
    field = ShamirField(t, K)
    lam = field.lagrange_at_zero(list(range(t)))
    inv_last = np.uint64(_field.inverse(int(lam[-1])))
    arrays: list[dict[str, np.ndarray]] = [{} for _ in range(t)]
    for name, tau in key.items():
        enc = field.encode(tau).ravel()
        acc = np.zeros_like(enc)
        for j in range(t - 1):
            s = rng.integers(0, P, size=enc.size, dtype=np.uint64)
            arrays[j][name] = s.reshape(tau.shape)
            acc = _field.combine(np.stack([acc, s]), np.array([1, int(lam[j])], dtype=np.uint64))
        diff = _field.combine(np.stack([enc, acc]), np.array([1, P - 1], dtype=np.uint64))
        arrays[t - 1][name] = _field.mulmod(diff, np.full(1, inv_last)).reshape(tau.shape)
    return [KeyShare(j, t, K, P, field.frac_bits, arrays[j]) for j in range(t)]


def fedwm_body(suite: Suite, case: dict[str, Any]) -> None:
    op = case["op"]
    rng = np.random.default_rng(0)
    if op in ("share", "reconstruct"):
        t, K, n = case["t"], case["K"], case["n"]
        field = ShamirField(t, K)
        values = rng.normal(size=n)
        key = {"s": values}
        enc = [int(v) for v in field.encode(values)]
        shares = field.share(key, rng=1)
        py_shares = _python_share(enc, t, K)
        ids = list(range(t))
        assert _shamir.reconstruct_array_python([py_shares[j] for j in ids], [j + 1 for j in ids]) == enc
        if op == "share":
            ours = lambda: field.share(key, rng=rng)  # noqa: E731
            python = lambda: _python_share(enc, t, K)  # noqa: E731
        else:
            sub = shares[:t]
            ours = lambda: field.reconstruct_field(sub)  # noqa: E731
            python = lambda: _shamir.reconstruct_array_python(  # noqa: E731
                [py_shares[j] for j in ids], [j + 1 for j in ids])
        suite.compare(case, ours, python, peer_name="python ints", memory=False,
                      note="exact, same field GF(2^61-1)")
        reason = missing_peer("Crypto")
        if reason:
            suite.skip(case, peer_name="pycryptodome Shamir", reason=reason)
            return
        from Crypto.Protocol.SecretSharing import Shamir

        blobs = [bytes(rng.integers(0, 256, size=16, dtype=np.uint8)) for _ in range(n)]
        if op == "share":
            peer = lambda: [Shamir.split(t, K, b) for b in blobs]  # noqa: E731
        else:
            split = [Shamir.split(t, K, b)[:t] for b in blobs]
            assert Shamir.combine(split[0]) == blobs[0]
            peer = lambda: [Shamir.combine(s) for s in split]  # noqa: E731
        row = suite.compare(case, ours, peer, peer_name="pycryptodome Shamir (GF(2^128), 16-byte secrets)",
                            memory=False)
        row["note"] = (f"per secret; per secret bit (61 vs 128) the ratio is {row['ratio'] * 61 / 128:.1f}")
        return
    if op == "verify":
        t, D = case["t"], case["D"]
        K = max(t, 2 * t)
        sizes = [min(1_000_000, D - i) for i in range(0, D, 1_000_000)]
        shapes = {f"layer{i}": (s,) for i, s in enumerate(sizes)}
        key = generate_key(shapes, seed=3)
        theta = {k: (rng.normal(size=v.shape) * 0.05 + 0.01 * v).astype(np.float32) for k, v in key.items()}
        coalition = _coalition(key, t, K, rng)
        z_ours = threshold_verify(theta, coalition)
        z_plain = z_score(theta, key)
        assert abs(z_ours - z_plain) < 1e-6, (z_ours, z_plain)
        ours = lambda: threshold_verify(theta, coalition)  # noqa: E731
        if D <= 200_000:
            name = next(iter(key))
            bits = 32
            tq = [int(v) for v in np.rint(theta[name].astype(np.float64) * 2**bits).astype(np.int64)]
            sh = [[int(v) for v in s.arrays[name]] for s in coalition]
            xs = [s.party + 1 for s in coalition]
            peer = lambda: [_python_verify(tq, sh, xs) for _ in shapes]  # noqa: E731
            suite.compare(case, ours, peer, peer_name="python ints", memory=False,
                          note=f"z = {z_ours:.3f} (= plaintext to 1e-6)")
        else:
            saved = suite.repeat
            suite.repeat = min(saved, 3)
            try:
                suite.compare(case, ours, lambda: z_score(theta, key),
                              peer_name="plaintext z (key in the clear)", memory=False,
                              note=f"floor; z = {z_ours:.3f} (= plaintext to 1e-6); per member: 1/{t} of ours")
            finally:
                suite.repeat = saved
        return
    raise ValueError(f"unknown fedwm op {op!r}")  # pragma: no cover


# --------------------------------------------------------------------------- bench_sohip.py

# SoHip round cost (fragment for benchmarks/bench_federated.py).

SOHIP_CASES: list[dict[str, Any]] = [{"family": "sohip", "N": 100}]
SOHIP_QUICK_CASES: list[dict[str, Any]] = [{"family": "sohip", "N": 20}]


def sohip_body(suite: Suite, case: dict[str, Any]) -> None:
    """Time one SoHip round against one FedProto round of ``case["N"]`` agents."""
    from sklearn.datasets import load_digits

    from rml_fast.federated.baselines import FedProtoClient, FedProtoServer
    from rml_fast.federated.simulation import run_federated
    from rml_fast.federated.sohip import SoHipClient, SoHipServer, label_skew_split

    n_agents, C, m = int(case["N"]), 10, 32
    X, y = load_digits(return_X_y=True)
    parts = label_skew_split((X / 16.0).astype(np.float32), y, n_agents, 2, test_fraction=0.5, rng=0)
    common = {"num_classes": C, "image_shape": (8, 8), "memory_dim": m, "seed": 0, "batch_size": 16}

    def client_fn(cls: Any) -> Any:
        return lambda cid: cls(cid, *parts[cid], arch=cid % 5, **common)

    servers = {"sohip": SoHipServer(C, m), "fedproto": FedProtoServer(C, m)}
    classes = {"sohip": SoHipClient, "fedproto": FedProtoClient}
    warm = {name: run_federated(servers[name], client_fn(classes[name]), n_agents, 1, progress=False)
            for name in servers}  # fmt: skip
    state = {name: servers[name].get_state() for name in servers}

    def one_round(name: str) -> Any:
        server = SoHipServer(C, m) if name == "sohip" else FedProtoServer(C, m)
        server.set_state(state[name])
        return run_federated(server, client_fn(classes[name]), n_agents, 1, progress=False)

    model_bytes = 0
    for cid in range(n_agents):
        agent = SoHipClient(cid, *parts[cid], arch=cid % 5, **common).agent
        model_bytes += sum(p.numel() * 4 for p in agent.parameters())
    note = (
        f"up_bytes={warm['sohip'].bytes_up[-1]} down_bytes={warm['sohip'].bytes_down[-1]} "
        f"model_bytes={model_bytes} (model/upload = {model_bytes / warm['sohip'].bytes_up[-1]:.0f}x)"
    )
    saved = suite.repeat, suite.warmup
    suite.repeat, suite.warmup = min(suite.repeat, 3), 0
    try:
        suite.compare(case, lambda: one_round("sohip"), lambda: one_round("fedproto"),
                      peer_name="FedProto round (rml_fast.federated.baselines)", note=note,
                      memory=False)
    finally:
        suite.repeat, suite.warmup = saved


# --------------------------------------------------------------------------- bench_flower.py

# Per-round cost on Flower (fragment for benchmarks/bench_federated.py).

FLOWER_CASES: list[dict[str, Any]] = [
    {"family": "flower", "case": "watermark_overhead", "variant": "trusted", "K": 4, "R": 10},
    {"family": "flower", "case": "watermark_overhead", "variant": "untrusted", "K": 4, "R": 10},
    {"family": "flower", "case": "flower_vs_inprocess", "method": "fedavg", "K": 4, "R": 10},
]
FLOWER_QUICK_CASES: list[dict[str, Any]] = [
    {"family": "flower", "case": "watermark_overhead", "variant": "trusted", "K": 2, "R": 3},
    {"family": "flower", "case": "flower_vs_inprocess", "method": "fedavg", "K": 2, "R": 3},
]

_FLOWER_RUNS: dict[tuple[Any, ...], list[float]] = {}


class _RoundTimer(FederatedServer):
    """Delegates to ``inner``; stamps each round's start (first configure) and end (metrics)."""

    def __init__(self, inner: FederatedServer) -> None:
        self.inner = inner
        self.phases = inner.phases
        self.starts: dict[int, float] = {}
        self.ends: dict[int, float] = {}

    def select(self, server_round: int, client_ids: Any) -> list[int]:
        return self.inner.select(server_round, client_ids)

    def configure(self, phase: str, server_round: int) -> Any:
        if phase == self.phases[0] and server_round not in self.starts:
            self.starts[server_round] = time.perf_counter()
        return self.inner.configure(phase, server_round)

    def aggregate(self, phase: str, server_round: int, replies: Any) -> None:
        self.inner.aggregate(phase, server_round, replies)

    def metrics(self, server_round: int) -> dict[str, float]:
        self.ends[server_round] = time.perf_counter()
        return {}  # no accuracy evaluation inside the timed rounds

    def round_times(self) -> list[float]:
        return [self.ends[r] - self.starts[r] for r in sorted(self.ends)][1:]


def _flower_setup(K: int, method: str, variant: str = "trusted") -> tuple[Any, Any]:
    """(server, client_fn) of FedAvg or the threshold watermark on digits with K IID clients."""
    from sklearn.datasets import load_digits

    from rml_fast.federated.fedavg import FedAvgClient, FedAvgServer, iid_partition, make_mlp
    from rml_fast.federated.threshold_watermark import (
        ThresholdWatermarkClient,
        ThresholdWatermarkServer,
        additive_shares,
        generate_key,
        watermark_shapes,
    )

    X, y = load_digits(return_X_y=True)
    X, y = (X[:1500] / 16.0).astype(np.float32), y[:1500].astype(np.int64)
    parts = iid_partition(len(y), K, rng=0)

    def model_fn() -> Any:
        return make_mlp(64, [32], 10, seed=0)

    if method == "fedavg":
        def fedavg_client(cid: int) -> Any:
            return FedAvgClient(model_fn, X[parts[cid]], y[parts[cid]], client_id=cid, lr=3e-3)

        return FedAvgServer(model_fn(), weighting="uniform"), fedavg_client
    key = generate_key(watermark_shapes(model_fn()), seed=1)
    shares = additive_shares(key, K, rng=1) if variant == "untrusted" else None

    def watermark_client(cid: int) -> Any:
        return ThresholdWatermarkClient(
            model_fn, X[parts[cid]], y[parts[cid]], client_id=cid, lr=3e-3, c=0.5,
            key=key if shares is None else shares[cid], variant=variant)

    return ThresholdWatermarkServer(model_fn(), variant=variant), watermark_client


def _round_times(K: int, R: int, method: str, variant: str, engine: str) -> list[float]:
    from rml_fast.federated import run_federated
    from rml_fast.federated.flower import run_flower_simulation

    cache_key = (K, R, method, variant, engine)
    if cache_key not in _FLOWER_RUNS:
        server, client_fn = _flower_setup(K, method, variant)
        timed = _RoundTimer(server)
        if engine == "flower":
            run_flower_simulation(timed, client_fn, K, R)
        else:
            run_federated(timed, client_fn, K, R, progress=False)
        _FLOWER_RUNS[cache_key] = timed.round_times()
    return _FLOWER_RUNS[cache_key]


def _row(suite: Suite, case: dict[str, Any], ours: list[float], peer: list[float],
         peer_name: str, note: str) -> None:
    """A row with ``Suite.compare``'s keys from per-round times measured inside the runs."""
    o, p = np.asarray(ours), np.asarray(peer)
    suite.rows.append({
        "suite": suite.name, "case": dict(case), "device": "cpu", "peer": peer_name,
        "ours_median_s": float(np.median(o)), "ours_q20_s": float(np.quantile(o, 0.2)),
        "ours_q80_s": float(np.quantile(o, 0.8)),
        "peer_median_s": float(np.median(p)), "peer_q20_s": float(np.quantile(p, 0.2)),
        "peer_q80_s": float(np.quantile(p, 0.8)),
        "ratio": float(np.median(p) / np.median(o)),
        "ours_peak_mb": None, "peer_peak_mb": None, "repeat": len(o), "note": note,
    })


def flower_body(suite: Suite, case: dict[str, Any]) -> None:
    """Per-round time of the watermark vs FedAvg on Flower, or of FedAvg in process vs Flower."""
    peer_name = "flwr run_simulation (FedAvg)" if case["case"] == "watermark_overhead" \
        else "flwr run_simulation"
    for module in ("flwr", "ray", "torch"):
        if (reason := missing_peer(module)) is not None:
            suite.skip(case, peer_name=peer_name, reason=reason)
            return
    K, R = int(case["K"]), int(case["R"])
    fedavg_flower = _round_times(K, R, "fedavg", "trusted", "flower")
    if case["case"] == "watermark_overhead":
        ours = _round_times(K, R, "watermark", case["variant"], "flower")
        overhead = np.median(ours) / np.median(fedavg_flower) - 1.0
        local = (np.median(_round_times(K, R, "watermark", case["variant"], "inprocess"))
                 / np.median(_round_times(K, R, "fedavg", "trusted", "inprocess")) - 1.0)
        _row(suite, case, ours, fedavg_flower, peer_name,
             f"watermark per-round overhead over FedAvg on Flower: {100 * overhead:+.1f}% "
             f"(goal <= 10%); the same in process: {100 * local:+.1f}%")
    else:
        ours = _round_times(K, R, "fedavg", "trusted", "inprocess")
        _row(suite, case, ours, fedavg_flower, peer_name,
             f"Flower / in-process per-round time: {np.median(fedavg_flower) / np.median(ours):.2f}x")


GROUPS: list[tuple[Callable[[bool], list[dict[str, Any]]], Callable[[Suite, dict[str, Any]], None]]] = [
    (lambda q: FEDWM_QUICK_CASES if q else FEDWM_CASES, fedwm_body),
    (lambda q: SOHIP_QUICK_CASES if q else SOHIP_CASES, sohip_body),
    (lambda q: FLOWER_QUICK_CASES if q else FLOWER_CASES, flower_body),
]


def run(*, quick: bool = False, progress: bool = True, repeat: int = 5) -> Suite:
    """Run every family's cases into one ``federated`` suite."""
    suite = Suite(SUITE, quick=quick, progress=progress, repeat=repeat)
    for cases, body in GROUPS:
        suite.run(cases(quick), body)
    return suite


if __name__ == "__main__":  # python benchmarks/bench_federated.py [--quick] [--out DIR] ...
    import sys

    from run_all import main

    raise SystemExit(main(sys.argv[1:], suite=SUITE))
