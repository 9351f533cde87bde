"""Session state of the entry-point fuzzer: the collected entry points, their baselines
(recorded once from the docstring examples) and the counts, written to the JSON file named by
``RML_FAST_FUZZ_REPORT`` and printed in the terminal summary."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest

_HERE = Path(__file__).parent


def load_fuzz(module: str = "_fuzz"):
    """A private helper module of this folder, ``_fuzz`` by default (loaded by path, once)."""
    name = "rml_fast_tests_robustness" + module
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, _HERE / f"{module}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def _only(entries):
    """The entry points named by ``RML_FAST_FUZZ_ONLY`` (comma-separated name prefixes such
    as ``rml_fast.alignment,rml_fast.kernels.nudft``), all of them when it is unset: a
    partial run records only those baselines, from the docstrings of matching modules."""
    prefixes = [p.strip() for p in os.environ.get("RML_FAST_FUZZ_ONLY", "").split(",")
                if p.strip()]
    if not prefixes:
        return entries
    return [ep for ep in entries if any(ep.name.startswith(p) for p in prefixes)]


@pytest.fixture(scope="session")
def fuzz_session(tmp_path_factory):
    """Entry points, recorded baselines and the shared statistics of this session."""
    import torch

    fz = load_fuzz()
    work = tmp_path_factory.mktemp("fuzz_doctests")
    cwd, threads = os.getcwd(), torch.get_num_threads()
    os.chdir(work)  # an example may write files
    torch.set_num_threads(1)
    try:
        entries = fz.collect_entry_points()
        calls, unrecordable = fz.record_baselines(_only(entries))
    finally:
        os.chdir(cwd)
        torch.set_num_threads(threads)
    stats = fz.STATS
    stats.entry_points = len(entries)
    stats.calls_recorded = len(calls)
    return {"entries": {e.name: e for e in entries}, "calls": calls,
            "unrecordable": unrecordable, "stats": stats, "workdir": work}


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    fz = sys.modules.get("rml_fast_tests_robustness_fuzz")
    if fz is None or fz.STATS.entry_points == 0:
        return
    report = fz.STATS.as_dict()
    terminalreporter.write_line(
        "rml_fast fuzz: {entry_points} entry points, {fuzzed} fuzzed, {excluded} excluded, "
        "{calls_recorded} baseline calls, {examples} examples, failures {failures}".format(
            **report)
    )
    path = os.environ.get("RML_FAST_FUZZ_REPORT")
    if path:
        Path(path).write_text(json.dumps(report, indent=2, sort_keys=True), encoding="utf-8")
