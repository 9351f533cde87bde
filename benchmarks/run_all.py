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

``--list`` lists the suites; ``--report DIR`` writes ``DIR/index.html`` with every suite's
table and ratio plot (:mod:`rml_fast.bench_report`), after running the selected suites or,
with ``--from-json RESULTS``, from JSON results written earlier (nothing runs). This file and
the ``bench_*.py`` beside it also ship inside the wheel (``rml_fast/_bench_suites/``), where
``rml-fast bench`` finds them when there is no checkout; results then default to
``./bench_results``.
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
# the copy installed in the wheel (rml_fast/_bench_suites) must not write into site-packages
DEFAULT_OUT = Path("bench_results") if HERE.name == "_bench_suites" else HERE / "results"


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
        default=str(DEFAULT_OUT),
        help=f"directory for the JSON results (default: {DEFAULT_OUT})",
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
    p.add_argument("--list", action="store_true", help="list the suites and exit")
    p.add_argument(
        "--report",
        metavar="DIR",
        default=None,
        help="also write DIR/index.html: every suite's table and ratio plot (needs matplotlib)",
    )
    p.add_argument(
        "--from-json",
        metavar="RESULTS",
        default=None,
        help="with --report: render the result JSON files in RESULTS (a directory or a file) "
        "instead of running suites",
    )
    return p


def _summary(path: Path) -> str:
    """The first line of a suite file's docstring, read without importing it."""
    import ast

    try:
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
    except (OSError, SyntaxError, ValueError):
        doc = None
    return (doc or "").strip().splitlines()[0] if doc else ""


def _report(args: argparse.Namespace, ap: argparse.ArgumentParser, paths: list[Path],
            families: list[str]) -> None:
    from rml_fast.bench_report import load_results, write_report

    try:
        results = load_results(paths)
    except ValueError as exc:
        ap.error(f"--from-json: {exc}")
    if families:  # only the named suites (by the rows' suite name or the file name)
        results = {
            k: v for k, v in results.items()
            if k.removesuffix(".quick") in families
            or (isinstance(v, list) and v and isinstance(v[0], dict) and v[0].get("suite") in families)
        }
        if not results:
            ap.error(f"no results of the suite(s) {families} in {args.from_json}")
    page = write_report(results, args.report, progress=not args.no_progress)
    print(f"report: {page}")


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

    for flag, wanted in (("--plot", args.plot), ("--report", args.report)):
        if wanted and importlib.util.find_spec("matplotlib") is None:
            ap.error(f"{flag} needs matplotlib: pip install 'rml_fast[bench]'")
    if args.from_json is not None and args.report is None:
        ap.error("--from-json renders a --report: pass --report DIR too")
    if args.report is not None and Path(args.report).exists() and not Path(args.report).is_dir():
        ap.error(f"--report must be a directory, got the file {args.report}")
    if Path(args.out).exists() and not Path(args.out).is_dir():
        ap.error(f"--out must be a directory, got the file {args.out}")
    console = Console()
    if not console.is_terminal:
        console = Console(width=160)
    suites = available()
    families = [suite] if suite is not None else args.families
    unknown = [f for f in families if f not in suites]
    if unknown and args.from_json is None:
        ap.error(f"unknown suite(s) {unknown}; available: {sorted(suites)}")
    if args.list:
        print(f"suites in {HERE}:")
        for name in families or list(suites):
            print(f"  {name:<12} {_summary(suites[name])}")
        return 0
    if args.from_json is not None:
        _report(args, ap, [Path(args.from_json)], families)
        return 0
    # suites that write side tables (bench_sgg) put them next to the main JSON
    os.environ["RML_FAST_BENCH_OUT"] = str(args.out)
    failed = []
    written: list[Path] = []
    todo = families or list(suites)
    for i, family in enumerate(todo, 1):
        if not args.no_progress and len(todo) > 1:
            console.print(f"[bold]bench [{i}/{len(todo)}] {escape(family)}[/bold]")
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
        written.append(path)
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
    if args.report is not None and written:
        _report(args, ap, written, [])
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
