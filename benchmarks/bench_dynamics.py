"""Interpretability III (training dynamics and behaviour): ExPLAIND, belief dynamics, TRACED, RSA.

Cases (one group per family; ``GROUPS`` lists them, each a (cases, body) pair):

* ``explaind``: :class:`rml_fast.interp.explaind.ExactPathKernel` data / step / parameter
  influences vs the naive computation of the same numbers (per-example gradients recomputed at
  every logged step in a Python loop, ``rml_fast.interp._explaind_reference``), checked equal
  before timing; captum's ``TracInCP`` timed beside it for context (a different score: no Adam
  preconditioning); peak memory of the reverse-time (memory-saving) pass reported. Goal
  (issue 17): >= 10x at equal results.
* ``belief``: ``n_boot`` bootstrap refits of the belief-dynamics model, batched
  (:meth:`BeliefDynamicsModel.bootstrap`) vs a ``scipy.optimize.curve_fit`` loop on the same
  resamples, checked to agree (1e-3).
* ``traced``: TRACED features of ragged trajectory batches, one numba pass vs a per-trace NumPy
  loop, checked to agree (1e-9).
* ``rsa``: layer-wise RSA on sampled pairs vs the reference script's ``einsum`` path on the
  same pairs and vs ``rsatoolbox`` on full RDMs.

The fragments' own docstrings, kept above each family's code, give the details.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from rml_fast.benchmarking import Suite, missing_peer, peak_memory_mb

SUITE = "dynamics"


# --------------------------------------------------------------------------- bench_explaind.py

# ExPLAIND: the exact path-kernel data influence vs the naive computation of the same numbers.

EXPLAIND_CASES: list[dict[str, Any]] = [
    {
        "family": "explaind",
        "model": "mlp",
        "M": 64,
        "width": 32,
        "steps": 40,
        "n_test": 4,
        "n_quad": 2,
    },
    {
        "family": "explaind",
        "model": "mlp",
        "M": 64,
        "width": 32,
        "steps": 100,
        "n_test": 8,
        "n_quad": 2,
    },
    {
        "family": "explaind",
        "model": "mlp",
        "M": 4096,
        "width": 256,
        "steps": 10,
        "n_test": 2,
        "n_quad": 1,
    },
    {"family": "explaind", "model": "modadd", "steps": 20, "n_test": 4, "n_quad": 2},
]
EXPLAIND_QUICK_CASES: list[dict[str, Any]] = [
    {
        "family": "explaind",
        "model": "mlp",
        "M": 64,
        "width": 32,
        "steps": 15,
        "n_test": 4,
        "n_quad": 2,
    },
    {
        "family": "explaind",
        "model": "mlp",
        "M": 4096,
        "width": 256,
        "steps": 4,
        "n_test": 2,
        "n_quad": 1,
    },
    {"family": "explaind", "model": "modadd", "steps": 10, "n_test": 4, "n_quad": 2},
]


def _explaind_setup(case: dict[str, Any]) -> dict[str, Any]:
    from rml_fast.interp.explaind import last_position, train_with_history

    loss = torch.nn.CrossEntropyLoss()
    if case["model"] == "mlp":
        torch.manual_seed(0)
        M, h = case["M"], case["width"]
        model = torch.nn.Sequential(torch.nn.Linear(10, h), torch.nn.Tanh(), torch.nn.Linear(h, 3))
        g = torch.Generator().manual_seed(0)
        X = torch.randn(M + case["n_test"], 10, generator=g)
        y = torch.randint(0, 3, (M + case["n_test"],), generator=g)
        Xtr, ytr, Xte, yte = X[:M], y[:M], X[M:], y[M:]
        out_fn, select = None, None
        hist = train_with_history(model, loss, (Xtr, ytr), n_steps=case["steps"], lr=0.01,
                                  batch_size=16, progress=False)  # fmt: skip
    else:
        from rml_fast.models.tasks import ModAddTask
        from rml_fast.models.transformer import TinyConfig, TinyTransformer

        task = ModAddTask(p=11, train_frac=0.5)
        cfg = TinyConfig(n_layers=1, d_model=32, n_heads=2, d_mlp=64, ln=False, act="relu",
                         d_vocab=task.d_vocab, n_ctx=3)  # fmt: skip
        model = TinyTransformer(cfg, seed=0)
        Xtr, ytr = task.full_batch("train")
        Xte, yte = task.full_batch("test")
        Xte, yte = Xte[: case["n_test"]], yte[: case["n_test"]]
        out_fn, select = last_position, yte
        hist = train_with_history(model, loss, (Xtr, ytr), n_steps=case["steps"], lr=1e-2,
                                  betas=(0.9, 0.98), weight_decay=1.0, batch_size=len(ytr),
                                  output_fn=out_fn, progress=False)  # fmt: skip
    return {"model": model, "hist": hist, "loss": loss, "train": (Xtr, ytr), "Xte": Xte,
            "yte": yte, "out_fn": out_fn, "select": select}  # fmt: skip


def explaind_body(suite: Suite, case: dict[str, Any]) -> None:
    """Time ExPLAIND's data influence against the naive loops (same numbers), the forward
    layout (memory) and captum's TracInCP (context)."""
    from rml_fast.interp._explaind_reference import naive_influence
    from rml_fast.interp.explaind import ExactPathKernel

    st = _explaind_setup(case)
    Q = case["n_quad"]
    epk = ExactPathKernel(st["model"], st["hist"], st["loss"], st["train"], output_fn=st["out_fn"],
                          n_quad=Q, early_steps=0)  # fmt: skip
    Xte, sel = st["Xte"], st["select"]

    def ours() -> torch.Tensor:
        return epk.data_influence(Xte, sel)

    def naive() -> torch.Tensor:
        out = naive_influence(st["model"], st["hist"], st["loss"], st["train"], Xte, n_quad=Q,
                              output_fn=st["out_fn"])["data"]  # fmt: skip
        if sel is not None:
            out = out.gather(1, sel[:, None, None].expand(-1, 1, out.shape[-1]))
        return out

    a, b = ours(), naive()
    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)  # the same numbers
    err = float((a - b).abs().max())
    saved = suite.repeat
    suite.repeat = min(suite.repeat, 3)  # the naive loops are slow
    try:
        suite.compare(case, ours, naive, peer_name="naive loops",
                      note=f"max |ours - naive| = {err:.2e}; Q={Q}")  # fmt: skip
    finally:
        suite.repeat = saved
    # the memory-saving reordering: reverse-time pass vs the (M, P) momentum buffer layout
    fwd = lambda: epk.data_influence(Xte, sel, order="forward")  # noqa: E731
    torch.testing.assert_close(fwd(), a, rtol=1e-4, atol=1e-6)
    mem_rev = peak_memory_mb(ours)
    mem_fwd = peak_memory_mb(fwd)
    suite.compare(case, ours, fwd, peer_name="ours order=forward (reference layout)",
                  note=f"peak MB reverse={mem_rev} forward={mem_fwd}")  # fmt: skip
    if case["model"] != "mlp" or case["M"] > 1000:
        return
    reason = missing_peer("captum")
    if reason:
        suite.skip(case, peer_name="captum TracInCP", reason=reason)
        return
    from captum.influence import TracInCP

    hist, model = st["hist"], st["model"]
    Xtr, ytr = st["train"]
    lr0 = float(hist.row(1)[2][0])

    def load(m: torch.nn.Module, key: str) -> float:
        s = int(key.split(":")[1])
        with torch.no_grad():
            for name, p in m.named_parameters():
                p.copy_(hist.theta(s - 1)[name])
        return lr0

    ckpts = [f"step:{s}" for s in range(1, hist.n_steps + 1)]

    def captum_tracin() -> torch.Tensor:
        import warnings

        with warnings.catch_warnings():  # captum sets requires_grad on the inputs and says so
            warnings.simplefilter("ignore", UserWarning)
            return _tracin()

    def _tracin() -> torch.Tensor:
        tr = TracInCP(model, torch.utils.data.TensorDataset(Xtr, ytr), ckpts,
                      checkpoints_load_func=load, loss_fn=torch.nn.CrossEntropyLoss(reduction="sum"),
                      batch_size=64, sample_wise_grads_per_batch=True)  # fmt: skip
        return tr.influence((Xte, st["yte"]))

    suite.compare(case, ours, captum_tracin, peer_name="captum TracInCP (context: another score)",
                  note="TracInCP: sum_s lr <grad L(test), grad L(train)> over all logged steps")  # fmt: skip


# --------------------------------------------------------------------------- bench_belief.py

# Belief dynamics bootstrap — body for benchmarks/bench_dynamics.py.


def _belief_cases(quick: bool) -> list[dict[str, Any]]:
    sizes = [300] if quick else [300, 3000]
    return [{"family": "belief", "n_boot": b, "cells": 100} for b in sizes]


def _belief_body(suite: Suite, case: dict[str, Any]) -> None:
    from scipy.optimize import curve_fit
    from scipy.special import expit

    from rml_fast.interp.belief_dynamics import BeliefDynamicsModel, simulate_curves

    N, m = np.meshgrid([0, 1, 2, 4, 8, 16, 32, 64, 96, 128], np.linspace(-2, 2, 10))
    X = np.column_stack([N.ravel(), m.ravel()]).astype(float)
    y, _ = simulate_curves(X, b=-3.0, a=[1.5], gamma=1.2, alpha=0.3, n_trials=100, rng=0)
    model = BeliefDynamicsModel().fit(X, y)
    B, n = case["n_boot"], X.shape[0]
    bounds = ([-np.inf] * 3 + [0.0], [np.inf] * 3 + [model.max_alpha])

    def f(Xt: np.ndarray, b: float, a: float, g: float, al: float) -> np.ndarray:
        return expit(b + a * Xt[1] + g * np.sign(Xt[0]) * np.abs(Xt[0]) ** (1 - al))

    def ours() -> np.ndarray:
        return model.bootstrap(X, y, n_boot=B, rng=1)

    def peer() -> np.ndarray:
        gen = np.random.default_rng(1)
        out = np.empty((B, 4))
        for i in range(B):
            idx = gen.integers(0, n, n)
            out[i] = curve_fit(f, X[idx].T, y[idx], p0=model.coef_, bounds=bounds)[0]
        return out

    diff = float(np.abs(ours() - peer()).max())
    if diff > 1e-3:
        raise AssertionError(f"bootstrap draws differ from curve_fit's by {diff:.3g}")
    suite.compare(
        case,
        ours,
        peer,
        peer_name="scipy curve_fit loop",
        note=f"max |draw diff| = {diff:.2g}; warm start at the full-data fit",
    )


# --------------------------------------------------------------------------- bench_traced.py

# TRACED features — body for benchmarks/bench_dynamics.py.


def _traced_cases(quick: bool) -> list[dict[str, Any]]:
    sizes = [(1000, 64)] if quick else [(1000, 64), (10000, 64), (2000, 1024)]
    return [{"family": "traced", "n": n, "d": d} for n, d in sizes]


def _numpy_features(H: np.ndarray) -> np.ndarray:
    v = np.diff(H, axis=0)
    speed = np.linalg.norm(v, axis=1)
    D = np.linalg.norm(H[-1] - H[0])
    cos = np.einsum("ij,ij->i", v[:-1], v[1:]) / (speed[:-1] * speed[1:])
    th = np.arccos(np.clip(cos, -1.0, 1.0))
    return np.array(
        [
            D / speed.sum(),
            np.log(D),
            D / (len(H) - 1),
            th.mean(),
            th.std(),
            np.mean(th > np.pi / 2),
            np.log(len(H)),
        ]
    )


def _traced_body(suite: Suite, case: dict[str, Any]) -> None:
    from rml_fast.interp.traced import pack_trajectories, trace_features

    rng = np.random.default_rng(0)
    trajs = [
        np.cumsum(rng.standard_normal((int(T), case["d"])), axis=0)
        for T in rng.integers(5, 201, case["n"])
    ]
    packed = pack_trajectories(trajs)

    def ours() -> np.ndarray:
        return trace_features(packed)

    def peer() -> np.ndarray:
        return np.stack([_numpy_features(H) for H in trajs])

    np.testing.assert_allclose(ours(), peer(), rtol=1e-9, atol=1e-9)
    suite.compare(
        case,
        ours,
        peer,
        peer_name="per-trace NumPy loop",
        note="same 7 features; numba prange over traces",
    )


# --------------------------------------------------------------------------- bench_behavior.py

# Behavioural-geometry RSA — body for benchmarks/bench_dynamics.py.


def _rsa_cases(quick: bool) -> list[dict[str, Any]]:
    sizes = [(500, 64, 4, 50_000)] if quick else [(500, 64, 4, 50_000), (2000, 256, 8, 500_000)]
    return [{"family": "rsa", "n": n, "d": d, "L": L, "pairs": p} for n, d, L, p in sizes]


def _rsa_body(suite: Suite, case: dict[str, Any]) -> None:
    from rml_fast.interp.behavior_geometry import centered_cosine, layerwise_rsa, sample_pairs

    n, d, L = case["n"], case["d"], case["L"]
    rng = np.random.default_rng(0)
    Z = rng.standard_normal((n, 16))
    H = np.stack(
        [Z @ rng.standard_normal((16, d)) + rng.standard_normal((n, d)) for _ in range(L)], 1
    )
    S = centered_cosine(Z)
    pairs = sample_pairs(n, case["pairs"], rng=1)

    def ours() -> np.ndarray:
        return layerwise_rsa(H, S, pairs=pairs)["layers"]

    def einsum_ref() -> np.ndarray:
        ii, jj = pairs
        target = S[ii, jj]
        out = np.empty(L)
        for layer in range(L):
            X = H[:, layer] - H[:, layer].mean(0)
            X /= np.linalg.norm(X, axis=1, keepdims=True)
            out[layer] = np.corrcoef(np.einsum("ij,ij->i", X[ii], X[jj]), target)[0, 1]
        return out

    np.testing.assert_allclose(ours(), einsum_ref(), atol=1e-10)
    suite.compare(case, ours, einsum_ref, peer_name="reference einsum on pairs")
    reason = missing_peer("rsatoolbox")
    if reason:
        suite.skip(case, peer_name="rsatoolbox full RDMs", reason=reason)
        return
    import rsatoolbox

    iu = np.triu_indices(n, 1)
    behav = rsatoolbox.rdm.RDMs((1 - S[iu])[None])

    def rsatoolbox_full() -> np.ndarray:
        out = np.empty(L)
        for layer in range(L):
            model = rsatoolbox.rdm.RDMs((1 - centered_cosine(H[:, layer])[iu])[None])
            out[layer] = rsatoolbox.rdm.compare(model, behav, method="corr")[0, 0]
        return out

    full = rsatoolbox_full()
    suite.compare(
        case,
        ours,
        rsatoolbox_full,
        peer_name="rsatoolbox full RDMs",
        note=f"full-matrix RSA {np.round(full, 4).tolist()} vs sampled {np.round(ours(), 4).tolist()}",
    )


GROUPS: list[
    tuple[Callable[[bool], list[dict[str, Any]]], Callable[[Suite, dict[str, Any]], None]]
] = [
    (lambda quick: EXPLAIND_QUICK_CASES if quick else EXPLAIND_CASES, explaind_body),
    (_belief_cases, _belief_body),
    (_traced_cases, _traced_body),
    (_rsa_cases, _rsa_body),
]


def run(*, quick: bool = False, progress: bool = True, repeat: int = 5) -> Suite:
    """Run every family's cases into one ``dynamics`` suite."""
    suite = Suite(SUITE, quick=quick, progress=progress, repeat=repeat)
    for cases, body in GROUPS:
        suite.run(cases(quick), body)
    return suite


if __name__ == "__main__":  # python benchmarks/bench_dynamics.py [--quick] [--out DIR] ...
    import sys

    from run_all import main

    raise SystemExit(main(sys.argv[1:], suite=SUITE))
