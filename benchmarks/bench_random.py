"""Philox streams: rml_fast.kernels.random vs numpy Generator(Philox) and torch.

Cases: 1e6 and 1e8 float32 draws (``--quick``: 1e6), uniform and normal, on the CPU; on a
CUDA machine also against ``torch.rand``/``torch.randn`` on the GPU.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from rml_fast.benchmarking import Suite
from rml_fast.kernels import random as rr

SUITE = "random"


def _body(suite: Suite, case: dict[str, Any]) -> None:
    n, dist = case["n"], case["dist"]
    ours_fn = rr.uniform if dist == "uniform" else rr.normal
    gen_np = np.random.Generator(np.random.Philox(1234))
    if dist == "uniform":
        peer_np = lambda: gen_np.random(n, dtype=np.float32)  # noqa: E731
        peer_t = lambda: torch.rand(n, generator=gen_t)  # noqa: E731
    else:
        peer_np = lambda: gen_np.standard_normal(n, dtype=np.float32)  # noqa: E731
        peer_t = lambda: torch.randn(n, generator=gen_t)  # noqa: E731
    gen_t = torch.Generator().manual_seed(1234)
    ours = lambda: ours_fn(n, seed=1234)  # noqa: E731
    suite.compare(case, ours, peer_np, peer_name="numpy Generator(Philox)")
    suite.compare(case, ours, peer_t, peer_name="torch (cpu)")
    if torch.cuda.is_available():
        gen_c = torch.Generator(device="cuda").manual_seed(1234)
        ours_c = lambda: ours_fn(n, seed=1234, device="cuda")  # noqa: E731
        if dist == "uniform":
            peer_c = lambda: torch.rand(n, generator=gen_c, device="cuda")  # noqa: E731
        else:
            peer_c = lambda: torch.randn(n, generator=gen_c, device="cuda")  # noqa: E731
        suite.compare(case, ours_c, peer_c, peer_name="torch (cuda)", device="cuda")


def run(*, quick: bool = False, progress: bool = True, repeat: int = 5) -> Suite:
    sizes = [10**6] if quick else [10**6, 10**8]
    cases = [{"n": n, "dist": d} for n in sizes for d in ("uniform", "normal")]
    return Suite(SUITE, quick=quick, progress=progress, repeat=repeat).run(cases, _body)


if __name__ == "__main__":  # python benchmarks/bench_random.py [--quick] [--out DIR] ...
    import sys

    from run_all import main

    raise SystemExit(main(sys.argv[1:], suite=SUITE))
