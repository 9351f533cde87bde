"""The ``rml-fast`` command: ``info``, ``bench`` and ``demo`` (``np``, ``alignment NAME``, ``interp NAME``,
``fairness``).

Bad arguments end with a one-line argparse error (exit status 2, no traceback); an optional
dependency that is not installed ends with one line naming the pip extra that provides it
(exit status 1); ``rml-fast --version`` prints the package version.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

# the demo's baseline names (rml_fast.neural_processes.demo.BASELINES, kept here so that
# parsing the command line does not import torch; a test checks that the two agree)
DEMO_BASELINES = ("convcnp-grid", "convcnp-neuralprocesses")


def _int_at_least(low: int) -> Any:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"expected an integer >= {low}, got {value}")
        return value

    parse.__name__ = f"integer >= {low}"
    return parse


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"expected finite seconds >= 0, got {text}")
    return value


def _baselines(text: str) -> list[str]:
    names = [b.strip() for b in text.split(",") if b.strip()]
    unknown = [b for b in names if b not in DEMO_BASELINES]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown baseline(s) {', '.join(unknown)}; choose among {', '.join(DEMO_BASELINES)}"
        )
    return names


# a checkout's benchmarks/ beside the package (editable installs), and the copy of its
# run_all.py and bench_*.py that the wheel ships (CMakeLists.txt installs them there)
_CHECKOUT_BENCH_DIR = Path(__file__).resolve().parent.parent / "benchmarks"
_PACKAGED_BENCH_DIR = Path(__file__).resolve().parent / "_bench_suites"


def _find_benchmarks(explicit: str | None, parser: argparse.ArgumentParser) -> Path:
    """The suites' folder: ``--bench-dir``, else ``$RML_FAST_BENCH_DIR``, else a checkout's
    ``benchmarks/`` (under the cwd, or beside the package), else the suites in the package."""
    given = explicit or os.environ.get("RML_FAST_BENCH_DIR") or None
    candidates = (
        [Path(given)]
        if given
        else [Path.cwd() / "benchmarks", _CHECKOUT_BENCH_DIR, _PACKAGED_BENCH_DIR]
    )
    for c in candidates:
        if (c / "run_all.py").is_file():
            return c
    how = "--bench-dir" if explicit else "RML_FAST_BENCH_DIR" if given else "the package"
    parser.error(
        "bench runs the suites of a source checkout or those shipped in the wheel, and found "
        f"no run_all.py (from {how}; looked in: {', '.join(str(c) for c in candidates)}); "
        "run it from the repository root, or pass --bench-dir PATH/TO/benchmarks"
    )


def _load_run_all(bench_dir: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location("rml_fast_run_all", bench_dir / "run_all.py")
    if spec is None or spec.loader is None:  # pragma: no cover - run_all.py was found above
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


def _missing(module: str, why: str) -> str | None:
    """One line when the optional ``module`` is not installed, naming its pip extra."""
    from rml_fast.benchmarking import optional_extra

    if importlib.util.find_spec(module) is not None:
        return None
    extra = optional_extra(module) or "bench"
    return f"{why} needs {module}, which is not installed: pip install 'rml_fast[{extra}]'"


def _run_demo(args: argparse.Namespace) -> int:
    # optional dependencies first: fail in one line before minutes of training
    problems = []
    if args.out:
        problems.append(_missing("matplotlib", "--out (the PNG of predictive bands; --out '' skips it)"))
    if args.baselines is not None and "convcnp-neuralprocesses" in args.baselines:
        problems.append(_missing("neuralprocesses", "the convcnp-neuralprocesses baseline"))
    problems = [p for p in problems if p]
    if problems:
        for p in problems:
            print(f"rml-fast demo: error: {p}", file=sys.stderr)
        return 1

    from rml_fast.neural_processes.demo import format_table, run_demo

    models = 1 + (len(args.baselines) if args.baselines is not None else 2)
    if not args.no_progress:
        print(
            f"rml-fast demo np: training up to {models} models for {args.budget:g} s each "
            f"(about {models * args.budget:.0f} s in all), then evaluating "
            f"{args.test_batches} held-out batches",
            file=sys.stderr,
            flush=True,
        )
    rows = run_demo(
        args.budget,
        baselines=args.baselines,
        test_batches=args.test_batches,
        out=args.out or None,
        seed=args.seed,
        num_threads=args.threads,
        schedule=args.schedule,
        baseline_schedule=args.baseline_schedule,
        progress=not args.no_progress,
    )
    print(format_table(rows))
    if args.out:
        print(f"wrote {args.out}")
    return 0


def _run_contract_demo(args: argparse.Namespace, demo: Any) -> int:
    """Run a demo module's ``run(seed=, quick=, out=, progress=)`` and print ``format_table``."""
    result = demo.run(seed=args.seed, quick=args.quick, out=args.out, progress=not args.no_progress)
    print(demo.format_table(result))
    if args.out:
        print(f"wrote {args.out}")
    return 0


def _figure_problem(args: argparse.Namespace, name: str) -> bool:
    if args.out:
        problem = _missing("matplotlib", "--out (the PNG figure; leave --out out to skip it)")
        if problem:
            print(f"rml-fast demo {name}: error: {problem}", file=sys.stderr)
            return True
    return False


def _run_alignment_demo(args: argparse.Namespace) -> int:
    if _figure_problem(args, "alignment"):
        return 1
    from rml_fast.alignment.demos import load_demo

    return _run_contract_demo(args, load_demo(args.experiment))


def _run_interp_demo(args: argparse.Namespace) -> int:
    if _figure_problem(args, "interp"):
        return 1
    from rml_fast.interp.demos import load_demo

    return _run_contract_demo(args, load_demo(args.experiment))


def _run_federated_demo(args: argparse.Namespace) -> int:
    if _figure_problem(args, "federated"):
        return 1
    from rml_fast.federated.demos import load_demo

    return _run_contract_demo(args, load_demo(args.experiment))


#: single-demo areas: name -> (module, experiment, one-line description)
_SINGLE_DEMOS: dict[str, tuple[str, str, str]] = {
    "security": ("rml_fast.security.demo", "gtm",
                 "GTM token masking against an image-hijack attack on a tiny digits VLM"),
    "watermark": ("rml_fast.watermark.demo", "distseal",
                  "DistSeal latent watermark: train, distil into the decoder, robustness"),
}


def _run_single_demo(args: argparse.Namespace) -> int:
    if _figure_problem(args, args.name):
        return 1
    import importlib

    return _run_contract_demo(args, importlib.import_module(_SINGLE_DEMOS[args.name][0]))


def _run_fairness_demo(args: argparse.Namespace) -> int:
    if _figure_problem(args, "fairness"):
        return 1
    from rml_fast.fairness import demo

    return _run_contract_demo(args, demo)


def _add_contract_demo(
    demo_sub: Any, name: str, help_text: str, demos: dict[str, tuple[str, str]]
) -> argparse.ArgumentParser:
    """A ``demo NAME EXPERIMENT`` sub-parser for a package of contract demos (``demos``: DEMOS)."""
    p = demo_sub.add_parser(name, help=help_text)
    p.add_argument(
        "experiment",
        choices=sorted(demos),
        help="; ".join(f"{k}: {v[1]}" for k, v in sorted(demos.items())),
    )
    p.add_argument(
        "--quick", action="store_true", help="the smallest setting that still shows the effect"
    )
    p.add_argument("--out", default=None, help="PNG figure to write (default: none)")
    p.add_argument("--seed", type=_int_at_least(0), default=0)
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    return p


def _version() -> str:
    from rml_fast import __version__

    return __version__


def main(argv: list[str] | None = None) -> int:
    """Run ``rml-fast`` with ``argv`` (default ``sys.argv[1:]``); returns the exit status.

    Bad arguments raise ``SystemExit(2)`` after a one-line usage error on stderr (argparse).
    A missing optional dependency prints one line naming the pip extra and returns 1.
    """
    try:
        return _main(argv)
    except ImportError as exc:
        from rml_fast.benchmarking import missing_dependency_message

        message = missing_dependency_message(exc)
        if message is None:
            raise
        print(f"rml-fast: error: {message}", file=sys.stderr)
        return 1


def _main(argv: list[str] | None) -> int:
    parser = argparse.ArgumentParser(prog="rml-fast", description="rml_fast command line")
    parser.add_argument(
        "--version", action="version", version=f"rml_fast {_version()}", help="print the version"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    info_p = sub.add_parser("info", help="version, native build, torch and triton")
    info_p.add_argument("--json", action="store_true", help="print JSON")
    bench_p = sub.add_parser(
        "bench", help="run benchmark suites against their peers", add_help=False
    )
    bench_p.add_argument(
        "--bench-dir",
        default=None,
        help="folder of run_all.py and bench_*.py (default: $RML_FAST_BENCH_DIR, a checkout's "
        "benchmarks/, else the suites shipped in the package)",
    )
    demo_top = sub.add_parser(
        "demo",
        help="run a method's demo (np, alignment, interp, fairness, federated, security, watermark)",
    )
    demo_sub = demo_top.add_subparsers(dest="name", required=True, metavar="name")
    demo_p = demo_sub.add_parser("np", help="SFConvCNP vs ConvCNP on GP-RBF tasks")
    from rml_fast.alignment.demos import DEMOS as ALIGNMENT_DEMOS
    from rml_fast.federated.demos import DEMOS as FEDERATED_DEMOS
    from rml_fast.interp.demos import DEMOS as INTERP_DEMOS

    align_p = _add_contract_demo(
        demo_sub,
        "alignment",
        "alignment objectives' effects on toy policies and denoisers",
        ALIGNMENT_DEMOS,
    )
    interp_p = _add_contract_demo(
        demo_sub, "interp", "interpretability experiments on the tiny-model zoo", INTERP_DEMOS
    )
    fed_p = _add_contract_demo(
        demo_sub, "federated", "federated methods simulated in process on digits", FEDERATED_DEMOS
    )
    single_ps = {
        area: _add_contract_demo(demo_sub, area, text, {experiment: (module, text)})
        for area, (module, experiment, text) in _SINGLE_DEMOS.items()
    }
    fair_p = demo_sub.add_parser(
        "fairness", help="multi-class accuracy-fairness frontier on a real data set"
    )
    fair_p.add_argument(
        "--quick", action="store_true", help="the smallest setting that still shows the frontier"
    )
    fair_p.add_argument("--out", default=None, help="PNG figure to write (default: none)")
    fair_p.add_argument("--seed", type=_int_at_least(0), default=0)
    fair_p.add_argument("--no-progress", action="store_true", help="no progress bars")
    demo_p.add_argument(
        "--budget", type=_seconds, default=120.0, help="training seconds per model (>= 0)"
    )
    demo_p.add_argument("--out", default="np_demo.png", help="PNG of predictive bands ('' to skip)")
    demo_p.add_argument(
        "--baselines",
        type=_baselines,
        default=None,
        help=f"comma-separated among {', '.join(DEMO_BASELINES)} "
        "(default: both where neuralprocesses is installed)",
    )
    demo_p.add_argument(
        "--test-batches", type=_int_at_least(1), default=8, help="held-out batches of 16 tasks"
    )
    demo_p.add_argument("--seed", type=_int_at_least(0), default=0)
    demo_p.add_argument(
        "--threads", type=_int_at_least(1), default=None, help="torch threads while training"
    )
    demo_p.add_argument(
        "--no-progress", action="store_true", help="no progress bar (and no start-up line)"
    )
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
            parsers = {"alignment": align_p, "interp": interp_p, "fairness": fair_p,
                       "federated": fed_p, **single_ps}
            parsers.get(args.name, demo_p).error(
                f"unrecognized arguments: {' '.join(rest)}"
            )
        if args.name == "alignment":
            return _run_alignment_demo(args)
        if args.name == "interp":
            return _run_interp_demo(args)
        if args.name == "fairness":
            return _run_fairness_demo(args)
        if args.name == "federated":
            return _run_federated_demo(args)
        if args.name in _SINGLE_DEMOS:
            return _run_single_demo(args)
        return _run_demo(args)

    if args.command == "info":
        if rest:
            info_p.error(f"unrecognized arguments: {' '.join(rest)}")
        from rml_fast import backend_info

        info = backend_info()
        if args.json:
            print(json.dumps(info, indent=2))
        else:
            _print_info(info)
        return 0

    bench_dir = _find_benchmarks(args.bench_dir, bench_p)
    before = os.environ.get("RML_FAST_BENCH_DIR")
    os.environ["RML_FAST_BENCH_DIR"] = str(bench_dir)  # for the suites' child processes
    try:
        return int(_load_run_all(bench_dir).main(rest))
    finally:
        if before is None:
            os.environ.pop("RML_FAST_BENCH_DIR", None)
        else:
            os.environ["RML_FAST_BENCH_DIR"] = before


if __name__ == "__main__":
    sys.exit(main())
