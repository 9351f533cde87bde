"""Alternating timings of the SFConv layer (forward + backward) for the docs table of
``docs/neural_processes.md``: every provider once per round, in turn, in one process, so that
load changes on a shared machine hit all of them alike (``bench_nudft`` times one side after
the other).

Usage (one case per call, JSON as the cases of ``bench_nudft.cases``)::

    OMP_NUM_THREADS=1 flock /work/bench.lock python benchmarks/nudft_alternate.py \\
        '{"d": 1, "B": 64, "G": 4, "N": 500, "M": 128, "C": 128,
          "providers": ["ours", "einsum", "direct", "torchkbnufft:3"]}' --rounds 7

Providers: ``ours`` (``backend="auto"``), ``einsum`` (the reference formulation: materialised
phases, embedding, plane-wise spectral product), ``direct`` (``backend="native"``: our C++ direct
sums), ``nufft`` (``backend="nufft"``), ``pytorch-finufft`` / ``torchkbnufft`` (the peer
transforms under our layer), ``attention`` (the TNP-style layer of the scaling cases); a suffix
``:k`` caps that provider's rounds at ``k``. Prints medians of wall-clock and process CPU time
and the ratios ``provider / ours``; ``--memory`` instead measures the peak resident-set growth
of one call each (with glibc's mmap threshold fixed, which makes every large allocation
page-fault and therefore must not be combined with timing); ``--fixed-malloc`` times with the
threshold fixed at 32 MiB instead of glibc's dynamic default (no page faults on re-allocated
tensors, as ``rml-fast bench nudft`` times). ``--threads`` sets torch's
intra-op threads (default 1: on an oversubscribed machine, thread teams wait for their slowest
member and the timings become meaningless). ``--out FILE`` appends the result as a JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_nudft as bn

from rml_fast.benchmarking import peak_memory_mb


def _steps(case: dict[str, Any], providers: list[str]) -> dict[str, Any]:
    xc, xq, z = bn._inputs(case)
    steps = {}
    for p in providers:
        name = p.partition(":")[0]
        if name == "attention":
            steps[p] = bn._attention_step(case, xc, xq, z)
            continue
        backend, plan = {
            "ours": ("auto", None),
            "einsum": ("reference", None),
            "direct": ("native", None),
            "nufft": ("nufft", None),
            "pytorch-finufft": ("reference", bn._FinufftPlan),
            "torchkbnufft": ("reference", bn._KbPlan),
        }[name]
        steps[p] = bn._step(bn._layer(case, backend), xc, xq, z, plan)
    return steps


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("case", help="JSON case with a 'providers' list")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--memory", action="store_true")
    ap.add_argument(
        "--fixed-malloc",
        action="store_true",
        help="time with glibc's mmap threshold fixed at 32 MiB (as rml-fast bench nudft does)",
    )
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    spec = json.loads(args.case)
    providers = spec.pop("providers")
    case = {"kind": "layer", **spec}
    torch.set_num_threads(args.threads)
    if args.memory:
        bn._memory_malloc()
    elif args.fixed_malloc:
        bn._timing_malloc()
    steps = _steps(case, providers)
    if args.memory:
        for s in steps.values():
            s()  # warm-up: the first call also allocates the persistent gradient buffers
        peaks = {}
        for p, s in steps.items():
            bn._memory_malloc()  # return the heap's free pages: reused blocks count again
            peaks[p] = peak_memory_mb(s)
        res: dict[str, Any] = {"case": case, "peak_mb": peaks}
        print(case, {p: f"{m:.0f} MiB" for p, m in res["peak_mb"].items()})
    else:
        for s in steps.values():
            s()  # warm-up
        cap = {p: int(p.partition(":")[2] or args.rounds) for p in steps}
        wall: dict[str, list[float]] = {p: [] for p in steps}
        cpu: dict[str, list[float]] = {p: [] for p in steps}
        for _ in range(max(cap.values())):
            for p, s in steps.items():
                if len(wall[p]) < cap[p]:
                    t, c = time.perf_counter(), time.process_time()
                    s()
                    wall[p].append(time.perf_counter() - t)
                    cpu[p].append(time.process_time() - c)
        med = {p: statistics.median(v) for p, v in wall.items()}
        cmed = {p: statistics.median(v) for p, v in cpu.items()}
        ours = providers[0]
        res = {
            "case": case,
            "threads": args.threads,
            "fixed_malloc": args.fixed_malloc,
            "median_s": med,
            "cpu_median_s": cmed,
            "ratio": {p: med[p] / med[ours] for p in med},
            "cpu_ratio": {p: cmed[p] / cmed[ours] for p in cmed},
            "runs_s": wall,
            "load": os.getloadavg(),
        }
        print(
            case,
            f"load {res['load'][0]:.1f}",
            {
                p: f"{med[p] * 1e3:.0f} ms x{res['ratio'][p]:.2f} (cpu x{res['cpu_ratio'][p]:.2f})"
                for p in med
            },
        )
    if args.out:
        with open(args.out, "a") as f:
            f.write(json.dumps(res) + "\n")
    return res


if __name__ == "__main__":
    main()
