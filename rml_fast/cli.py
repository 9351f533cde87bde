"""The ``rml-fast`` command: ``info``, ``bench`` and ``demo``."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any


def _find_benchmarks(explicit: str | None) -> Path:
    """The ``benchmarks/`` folder of a checkout: explicit, under the cwd, or beside the package."""
    candidates = (
        [Path(explicit)]
        if explicit
        else [
            Path.cwd() / "benchmarks",
            Path(__file__).resolve().parent.parent / "benchmarks",
        ]
    )
    for c in candidates:
        if (c / "run_all.py").is_file():
            return c
    raise SystemExit(
        "rml-fast bench runs the suites of a source checkout: run it from the repository root, "
        "or pass --bench-dir PATH/TO/benchmarks "
        f"(looked in: {', '.join(str(c) for c in candidates)})"
    )


def _load_run_all(bench_dir: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location("rml_fast_run_all", bench_dir / "run_all.py")
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {bench_dir / 'run_all.py'}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _print_info(info: dict[str, Any]) -> None:
    native = info["native"]
    torch_info = info["torch"]
    triton = info["triton"]
    lines = [
        f"rml_fast {info['version']} (Python {info['python']}, {info['platform']}, {info['cpu_count']} CPUs)",
        f"native extension: built={native['built']} compiler={native['compiler']} "
        f"build={native['build_type']}",
        f"  flags: {native['cxx_flags'].strip()}",
        f"  OpenMP: {'yes' if native['openmp'] else 'no'}, max threads {native['openmp_max_threads']}",
    ]
    if torch_info is None:
        lines.append("torch: not installed")
    else:
        devices = ", ".join(torch_info["devices"]) or "none"
        lines.append(
            f"torch: {torch_info['version']}, CUDA available={torch_info['cuda_available']} "
            f"(devices: {devices}), threads {torch_info['num_threads']}"
        )
    lines.append(
        f"triton: {triton['version'] if triton['installed'] else 'not installed'}"
        + (" (TRITON_INTERPRET=1)" if triton["interpret"] else "")
    )
    print("\n".join(lines))


def _run_demo(args: argparse.Namespace) -> int:
    from rml_fast.neural_processes.demo import format_table, run_demo

    baselines = None if args.baselines is None else [b for b in args.baselines.split(",") if b]
    rows = run_demo(
        args.budget,
        baselines=baselines,
        test_batches=args.test_batches,
        out=args.out or None,
        seed=args.seed,
        num_threads=args.threads,
        schedule=args.schedule,
        baseline_schedule=args.baseline_schedule,
    )
    print(format_table(rows))
    if args.out:
        print(f"wrote {args.out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rml-fast", description="rml_fast command line")
    sub = parser.add_subparsers(dest="command", required=True)
    info_p = sub.add_parser("info", help="version, native build, torch and triton")
    info_p.add_argument("--json", action="store_true", help="print JSON")
    bench_p = sub.add_parser(
        "bench", help="run benchmark suites against their peers", add_help=False
    )
    bench_p.add_argument("--bench-dir", default=None, help="path to a checkout's benchmarks/")
    demo_p = sub.add_parser("demo", help="run a method's demo (np: SFConvCNP vs ConvCNP on GP)")
    demo_p.add_argument("name", choices=["np"], help="which demo")
    demo_p.add_argument("--budget", type=float, default=120.0, help="training seconds per model")
    demo_p.add_argument("--out", default="np_demo.png", help="PNG of predictive bands ('' to skip)")
    demo_p.add_argument(
        "--baselines",
        default=None,
        help="comma-separated among convcnp-grid, convcnp-neuralprocesses "
        "(default: both where neuralprocesses is installed)",
    )
    demo_p.add_argument("--test-batches", type=int, default=8, help="held-out batches of 16 tasks")
    demo_p.add_argument("--seed", type=int, default=0)
    demo_p.add_argument("--threads", type=int, default=None, help="torch threads while training")
    demo_p.add_argument(
        "--schedule",
        default="cosine",
        choices=["constant", "cosine"],
        help="learning-rate schedule of the SFConvCNP over its budget",
    )
    demo_p.add_argument(
        "--baseline-schedule",
        default="cosine",
        choices=["constant", "cosine"],
        help="learning-rate schedule of the baselines",
    )
    args, rest = parser.parse_known_args(argv)

    if args.command == "demo":
        if rest:
            parser.error(f"unrecognized arguments: {' '.join(rest)}")
        return _run_demo(args)

    if args.command == "info":
        if rest:
            parser.error(f"unrecognized arguments: {' '.join(rest)}")
        from rml_fast import backend_info

        info = backend_info()
        if args.json:
            print(json.dumps(info, indent=2))
        else:
            _print_info(info)
        return 0

    bench_dir = _find_benchmarks(args.bench_dir)
    os.environ.setdefault("RML_FAST_BENCH_DIR", str(bench_dir))
    return int(_load_run_all(bench_dir).main(rest))


if __name__ == "__main__":
    sys.exit(main())
