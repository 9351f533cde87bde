"""Run the benchmark suites: ``python benchmarks/run_all.py [FAMILY ...] [--quick] [--plot] [--resume]``.

Each ``bench_<family>.py`` beside this file defines ``SUITE`` and ``run(quick=, progress=)``
returning a :class:`rml_fast.benchmarking.Suite`; this script prints each table and writes
``<out>/<family>.json`` (default ``benchmarks/results/``). ``rml-fast bench`` calls ``main``,
and so does each ``bench_<family>.py`` run as a script (``main(argv, suite=SUITE)``: the same
options, that one suite). A ``--quick`` run writes ``<out>/<family>.quick.json`` instead, so
it never replaces the committed full results. Each suite keeps
``<out>/<family>[.quick].partial.json`` up to date after every row; ``--resume`` continues an
interrupted run from it (finished cases are skipped) and the file is removed once the full
JSON is written.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
from pathlib import Path
from types import ModuleType

from rml_fast.cli import _int_at_least

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


_positive_int = _int_at_least(1)


def parser(suite: str | None = None) -> argparse.ArgumentParser:
    """The options of ``rml-fast bench`` (``suite=None``) or of ``bench_<suite>.py``."""
    if suite is None:
        p = argparse.ArgumentParser(prog="rml-fast bench", description=__doc__.splitlines()[0])
        p.add_argument(
            "families", nargs="*", help=f"suites to run (default all: {', '.join(available())})"
        )
    else:
        p = argparse.ArgumentParser(
            prog=f"bench_{suite}.py", description=f"Run the {suite} benchmark suite."
        )
    p.add_argument(
        "--quick",
        action="store_true",
        help="every case at its smallest size; writes <suite>.quick.json (never the full results)",
    )
    p.add_argument(
        "--out",
        default=str(HERE / "results"),
        help="directory for the JSON results (default: benchmarks/results)",
    )
    p.add_argument("--plot", action="store_true", help="also write a PNG per suite")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument(
        "--repeat", type=_positive_int, default=5, help="timed runs per side (median; >= 1)"
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue an interrupted run: cases finished in <out>/<suite>.partial.json "
        "are loaded and skipped (the partial file is written after every row either way)",
    )
    return p


def main(argv: list[str] | None = None, *, suite: str | None = None) -> int:
    """Run suites; ``suite`` runs that one only (the entry point of ``bench_<suite>.py``).

    Returns 0, or 1 when a suite could not run for a missing optional dependency (named on
    stderr, with the pip extra); bad arguments exit with status 2 (argparse).
    """
    ap = parser(suite)
    args = ap.parse_args(argv)

    from rich.console import Console
    from rich.markup import escape

    from rml_fast.benchmarking import checkpointing, missing_dependency_message

    if args.plot and importlib.util.find_spec("matplotlib") is None:
        ap.error("--plot needs matplotlib: pip install 'rml_fast[bench]'")
    if Path(args.out).exists() and not Path(args.out).is_dir():
        ap.error(f"--out must be a directory, got the file {args.out}")
    console = Console()
    if not console.is_terminal:
        console = Console(width=160)
    suites = available()
    families = [suite] if suite is not None else args.families
    unknown = [f for f in families if f not in suites]
    if unknown:
        ap.error(f"unknown suite(s) {unknown}; available: {sorted(suites)}")
    # suites that write side tables (bench_sgg) put them next to the main JSON
    os.environ["RML_FAST_BENCH_OUT"] = str(args.out)
    failed = []
    for family in families or list(suites):
        start = time.perf_counter()
        try:
            with checkpointing(args.out, resume=args.resume):
                result = _load(suites[family]).run(
                    quick=args.quick, progress=not args.no_progress, repeat=args.repeat
                )
        except ImportError as exc:
            message = missing_dependency_message(exc)
            if message is None:
                raise
            print(f"{ap.prog}: error: suite {family} cannot run: {message}", file=sys.stderr)
            failed.append(family)
            continue
        console.print(result.table())
        path = result.save(args.out, plot=args.plot)
        skipped = result.skipped
        if skipped:
            reasons = sorted({f"{r['peer']}: {r['skipped']}" for r in skipped})
            console.print(
                f"[yellow]{family}: {len(skipped)} peer rows skipped "
                f"({escape('; '.join(reasons))})[/yellow]"
            )
        console.print(
            f"[dim]{family}: {len(result.rows)} rows in {time.perf_counter() - start:.1f} s -> {path}[/dim]"
        )
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
