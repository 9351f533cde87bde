"""Batched circuit evaluation: rml_fast ``evaluate_masks`` vs a sequential hook loop.

For one query, ``N`` candidate circuits (random edge masks of a given density over the EAP
graph) are evaluated (the task metric of each circuit run). Ours: all masks in one batched
forward (:func:`rml_fast.interp.evaluate_masks`, masked mixing in C++ on the CPU / Triton on
CUDA, only the answer-position logits). Peer: one hooked forward per circuit, the way
EAP-IG's ``evaluate_graph`` and TransformerLens users do it
(:func:`rml_fast.interp.evaluate_masks_hooked`, batch 1). Circuits per second = N / time.

Shapes (random weights: timing does not depend on them): 2L4H D=64 (110 edges, P=24),
4L8H D=128 (1519 edges, P=32), 12L12H D=768 (GPT-2-small shape, 32491 edges, P=32; only
N=16 on the CPU). N in {16, 64, 256}; densities 1%, 5%, 100%. Plus the end-to-end
``QueryCircuitSearch.fit`` (edge sampler, N=10, 6 sizes) vs the same search with sequential
evaluation. ``--quick``: 2L4H, N=16, density 5%. Torch runs with one intra-op thread (the
shared 2-core CI machines oversubscribe badly with more), and so does the C++ kernel (its
OpenMP team follows ``torch.get_num_threads()``).

Both sides get the ablated activations (the forward on the corrupted prompt) from the same
per-model cache (``rml_fast.interp.circuit_eval._ablated``), so after the untimed warm-up call
neither side's timed runs include that forward: the comparison is measured the same way.

auto-circuit (PyPI ``auto-circuit`` 1.0.1, the latest release) is not a peer here: it imports
``transformer_lens.past_key_value_caching.HookedTransformerKeyValueCache``, which
transformer-lens 3.x no longer has, and the newest transformer-lens with that module (2.18.0)
pins ``numpy<2`` (pip would downgrade numpy to 1.26.4 and pandas to 2.0.3); auto-circuit also
hard-requires ``tracr-pypi`` (JAX, dm-haiku) and ``kaleido==0.2.1``.
"""

from __future__ import annotations

from typing import Any

import torch

from rml_fast.benchmarking import Suite
from rml_fast.interp import (
    EdgeGraph,
    LogitDiff,
    QueryCircuitSearch,
    evaluate_masks,
    evaluate_masks_hooked,
    sizes_from_densities,
)
from rml_fast.models import TinyConfig, TinyTransformer

SUITE = "circuits"

SHAPES = {
    "2L4H": (TinyConfig(n_layers=2, d_model=64, n_heads=4, d_mlp=256, n_ctx=64, d_vocab=128), 24),
    "4L8H": (TinyConfig(n_layers=4, d_model=128, n_heads=8, d_mlp=512, n_ctx=64, d_vocab=128), 32),
    "12L12H": (
        TinyConfig(n_layers=12, d_model=768, n_heads=12, d_mlp=3072, n_ctx=64, d_vocab=512),
        32,
    ),
}
_MODELS: dict[str, Any] = {}


def _setup(shape: str) -> tuple[Any, EdgeGraph, torch.Tensor, torch.Tensor, LogitDiff]:
    if shape not in _MODELS:
        cfg, n_pos = SHAPES[shape]
        model = TinyTransformer(cfg, seed=0).eval()
        for p in model.parameters():
            p.requires_grad_(False)
        gen = torch.Generator().manual_seed(0)
        clean = torch.randint(0, cfg.d_vocab, (1, n_pos), generator=gen)
        corrupt = clean.clone()
        corrupt[0, : n_pos // 2] = torch.randint(0, cfg.d_vocab, (n_pos // 2,), generator=gen)
        _MODELS[shape] = (
            model,
            EdgeGraph.from_model(model),
            clean,
            corrupt,
            LogitDiff(-1, 1, (2,)),
        )
    return _MODELS[shape]


def _masks(g: EdgeGraph, n: int, density: float) -> torch.Tensor:
    gen = torch.Generator().manual_seed(1)
    return (torch.rand(n, g.n_fwd, g.n_bwd, generator=gen) < density) & g.real_edge_mask


def _body(suite: Suite, case: dict[str, Any]) -> None:
    model, g, clean, corrupt, metric = _setup(case["shape"])
    if case["what"] == "evaluate":
        masks = _masks(g, case["N"], case["density"])

        def ours() -> Any:
            return evaluate_masks(model, g, clean, corrupt, masks, metric)

        def peer() -> Any:
            return evaluate_masks_hooked(model, g, clean, corrupt, masks, metric)

        row = suite.compare(case, ours, peer, peer_name="sequential hook loop", memory=False)
        row["note"] = (
            f"circuits/s ours {case['N'] / row['ours_median_s']:.1f}, "
            f"loop {case['N'] / row['peer_median_s']:.1f}"
        )
        if torch.cuda.is_available():
            mc, cc, kc = (t.cuda() for t in (masks, clean, corrupt))
            model_c = model.cuda()
            suite.compare(
                case,
                lambda: evaluate_masks(model_c, g, cc, kc, mc, metric),
                lambda: evaluate_masks_hooked(model_c, g, cc, kc, mc, metric),
                peer_name="sequential hook loop (cuda)",
                device="cuda",
                memory=False,
            )
            model.cpu()
        return
    # end-to-end search: EAP-IG scoring + N=10 candidates x 6 sizes + selection
    sizes = sizes_from_densities(g.n_edges, [0.01, 0.02, 0.05, 0.1, 0.2, 0.5])

    def search(evaluate: Any) -> Any:
        import rml_fast.interp.query_circuits as qc

        old = qc.evaluate_masks
        qc.evaluate_masks = evaluate
        try:
            return QueryCircuitSearch(
                sizes, n_samples=10, sampler="edge", random_state=0, progress=False
            ).fit(model, clean, corrupt, metric)
        finally:
            qc.evaluate_masks = old

    def sequential(
        model: Any, g: Any, clean: Any, corrupt: Any, masks: Any, metric: Any, **kw: Any
    ) -> Any:
        return evaluate_masks_hooked(
            model, g, clean, corrupt, masks, metric, ablation=kw["ablation"]
        )

    suite.compare(
        case,
        lambda: search(evaluate_masks),
        lambda: search(sequential),
        peer_name="same search, sequential evaluation",
        memory=False,
    )


def _cases(quick: bool) -> list[dict[str, Any]]:
    if quick:
        return [{"what": "evaluate", "shape": "2L4H", "N": 16, "density": 0.05}]
    cases = []
    for shape in ("2L4H", "4L8H"):
        for n in (16, 64, 256):
            for d in (0.01, 0.05, 1.0):
                cases.append({"what": "evaluate", "shape": shape, "N": n, "density": d})
    for d in (0.01, 0.05, 1.0):
        cases.append({"what": "evaluate", "shape": "12L12H", "N": 16, "density": d})
    cases += [{"what": "search", "shape": s, "N": 10, "density": 0.0} for s in ("2L4H", "4L8H")]
    return cases


def run(*, quick: bool = False, progress: bool = True, repeat: int = 5) -> Suite:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.no_grad():
            return Suite(SUITE, quick=quick, progress=progress, repeat=repeat).run(
                _cases(quick), _body
            )
    finally:
        torch.set_num_threads(threads)


if __name__ == "__main__":  # python benchmarks/bench_circuits.py [--quick] [--out DIR] ...
    import sys

    from run_all import main

    raise SystemExit(main(sys.argv[1:], suite=SUITE))
