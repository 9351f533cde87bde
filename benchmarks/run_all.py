"""Run the benchmark suites: ``python benchmarks/run_all.py [FAMILY ...] [--quick] [--plot]``.

Each ``bench_<family>.py`` beside this file defines ``SUITE`` and ``run(quick=, progress=)``
returning a :class:`rml_fast.benchmarking.Suite`; this script prints each table and writes
``<out>/<family>.json`` (default ``benchmarks/results/``). ``rml-fast bench`` calls ``main``.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent


def available() -> dict[str, Path]:
    """Suite name -> file, for every ``bench_*.py`` here."""
    return {p.stem.removeprefix("bench_"): p for p in sorted(HERE.glob("bench_*.py"))}


def _load(path: Path) -> ModuleType:
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    spec = importlib.util.spec_from_file_location(f"rml_fast_bench_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load benchmark suite {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rml-fast bench", description=__doc__.splitlines()[0])
    parser.add_argument(
        "families", nargs="*", help=f"suites to run (default all: {', '.join(available())})"
    )
    parser.add_argument("--quick", action="store_true", help="every case at its smallest size")
    parser.add_argument(
        "--out", default=str(HERE / "results"), help="directory for the JSON results"
    )
    parser.add_argument("--plot", action="store_true", help="also write a PNG per suite")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.add_argument("--repeat", type=int, default=5, help="timed runs per side (median)")
    args = parser.parse_args(argv)

    from rich.console import Console

    if args.plot and importlib.util.find_spec("matplotlib") is None:
        parser.error("--plot needs matplotlib: pip install 'rml_fast[bench]'")
    console = Console()
    if not console.is_terminal:
        console = Console(width=160)
    suites = available()
    unknown = [f for f in args.families if f not in suites]
    if unknown:
        parser.error(f"unknown suite(s) {unknown}; available: {sorted(suites)}")
    # suites that write side tables (bench_sgg) put them next to the main JSON
    os.environ["RML_FAST_BENCH_OUT"] = str(args.out)
    for family in args.families or list(suites):
        start = time.perf_counter()
        suite = _load(suites[family]).run(
            quick=args.quick, progress=not args.no_progress, repeat=args.repeat
        )
        console.print(suite.table())
        path = suite.save(args.out, plot=args.plot)
        console.print(
            f"[dim]{family}: {len(suite.rows)} rows in {time.perf_counter() - start:.1f} s -> {path}[/dim]"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
