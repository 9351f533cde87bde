"""The benchmark harness: timing statistics, ratios, JSON rows, and the CLI entry points."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rml_fast import cli
from rml_fast.benchmarking import (
    Suite,
    missing_dependency_message,
    missing_peer,
    peak_memory_mb,
    plot_ratios,
    time_call,
)

ROOT = Path(__file__).resolve().parents[1]


def test_time_call_counts_runs_and_orders_quantiles():
    calls = []
    t = time_call(lambda: calls.append(1), warmup=2, repeat=4)
    assert len(calls) == 6 and len(t.runs_s) == 4
    assert t.q20_s <= t.median_s <= t.q80_s
    with pytest.raises(ValueError, match="repeat must be"):
        time_call(lambda: None, repeat=0)


def test_ratio_orders_a_slow_peer_above_one():
    suite = Suite("unit", repeat=3, warmup=0, progress=False)
    row = suite.compare(
        {"n": 1}, lambda: None, lambda: time.sleep(0.01), peer_name="sleep", memory=False
    )
    assert row["ratio"] > 10
    assert row["peer_median_s"] >= 0.01


def _alloc_50mib(hold_s: float = 0.0) -> int:
    # A fresh anonymous mapping, touched page by page: resident memory grows whatever the
    # allocator's state (malloc may serve a plain np.ones from pages it already holds).
    import mmap

    size = 50 * 2**20
    buf = mmap.mmap(-1, size)
    for off in range(0, size, mmap.PAGESIZE):
        buf[off] = 1
    time.sleep(hold_s)
    total = sum(buf[off] for off in range(0, size, 2**20))
    buf.close()
    return total


def test_peak_memory_sees_a_large_allocation():
    mb = peak_memory_mb(_alloc_50mib)
    assert mb is not None and 45 < mb < 80
    assert peak_memory_mb(lambda: None) < 5


def test_peak_memory_sampling_fallback(monkeypatch):
    from rml_fast import benchmarking

    monkeypatch.setattr(benchmarking, "_reset_peak_rss", lambda: False)
    mb = peak_memory_mb(lambda: _alloc_50mib(hold_s=0.3))
    assert mb is not None and 40 < mb < 80


def test_suite_writes_json_rows_with_machine(tmp_path):
    suite = Suite("unit", repeat=2, warmup=0, progress=False)
    suite.run(
        [{"n": 1}, {"n": 2}],
        lambda s, case: s.compare(case, lambda: None, lambda: None, peer_name="p"),
    )
    path = suite.save(tmp_path)
    rows = json.loads(path.read_text())
    assert [r["case"] for r in rows] == [{"n": 1}, {"n": 2}]
    for r in rows:
        for key in (
            "suite",
            "peer",
            "ours_median_s",
            "peer_median_s",
            "ratio",
            "ours_peak_mb",
            "peer_peak_mb",
        ):
            assert key in r
        assert r["machine"]["cpu_count"] >= 1 and r["machine"]["openmp_threads"] >= 1


def test_cli_info(capsys):
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    assert "native extension: built=True" in out and "OpenMP" in out
    assert cli.main(["info", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["native"]["built"] is True


def test_cli_bench_random_quick(tmp_path, capsys):
    rc = cli.main(
        [
            "bench",
            "--bench-dir",
            str(ROOT / "benchmarks"),
            "random",
            "--quick",
            "--no-progress",
            "--repeat",
            "1",
            "--out",
            str(tmp_path),
        ]
    )
    assert rc == 0
    # a quick run is saved under its own name: it never replaces the full results
    assert not (tmp_path / "random.json").exists()
    rows = json.loads((tmp_path / "random.quick.json").read_text())
    assert {r["peer"] for r in rows} >= {"numpy Generator(Philox)", "torch (cpu)"}
    assert all(r["case"]["n"] == 10**6 and r["ratio"] > 0 and r["quick"] is True for r in rows)
    out = capsys.readouterr().out
    assert "ratio" in out and "quick mode" in out


def test_cli_bench_rejects_unknown_suite(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["bench", "--bench-dir", str(ROOT / "benchmarks"), "nope", "--out", str(tmp_path)])
    assert exc.value.code == 2
    assert "unknown suite(s) ['nope']" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        cli.main(["bench", "--bench-dir", str(tmp_path)])
    assert exc.value.code == 2
    assert "source checkout" in capsys.readouterr().err


def test_quick_suite_saves_under_its_own_name(tmp_path):
    for quick, name in ((True, "unit.quick.json"), (False, "unit.json")):
        suite = Suite("unit", quick=quick, repeat=1, warmup=0, progress=False)
        suite.compare({"n": 1}, lambda: None, lambda: None, peer_name="p", memory=False)
        path = suite.save(tmp_path)
        assert path == tmp_path / name
        assert json.loads(path.read_text())[0]["quick"] is quick
    assert sorted(p.name for p in tmp_path.iterdir()) == ["unit.json", "unit.quick.json"]


def _render(table) -> str:
    from rich.console import Console

    console = Console(record=True, width=250, file=open(os.devnull, "w"))  # noqa: SIM115
    console.print(table)
    console.file.close()
    return console.export_text()


def test_skipped_peer_rows_in_table_and_json(tmp_path):
    suite = Suite("unit", repeat=1, warmup=0, progress=False)
    suite.compare({"n": 1}, lambda: None, lambda: None, peer_name="present", memory=False)
    reason = missing_peer("no_such_peer_module")
    assert reason == "no_such_peer_module is not installed"
    suite.skip({"n": 1}, peer_name="absent", reason=reason)
    assert [r["peer"] for r in suite.skipped] == ["absent"]
    text = _render(suite.table())
    # the reason survives rich's markup (brackets such as [bench] are escaped)
    assert "absent (skipped: no_such_peer_module is not installed)" in text
    rows = json.loads(suite.save(tmp_path).read_text())
    assert rows[0].get("skipped") is None and rows[0]["ratio"] is not None
    assert rows[1]["skipped"] == reason and rows[1]["ratio"] is None
    assert rows[1]["ours_median_s"] is None and rows[1]["peer"] == "absent"


def test_missing_peer_names_the_pip_extra():
    assert missing_peer("json") is None
    # an installed dependency is not missing; an absent one provided by an extra names it
    assert missing_dependency_message(ModuleNotFoundError("x", name="neuralprocesses")) == (
        "the optional dependency 'neuralprocesses' is not installed: "
        "pip install 'rml_fast[bench]' (or pip install neuralprocesses)"
    )
    msg = missing_dependency_message(ModuleNotFoundError("x", name="sklearn.linear_model"))
    assert "'sklearn'" in msg and "rml_fast[bench]" in msg and "scikit-learn" in msg
    assert "rml_fast[federated]" in missing_dependency_message(ModuleNotFoundError("x", name="flwr"))
    # found through a chain (raise ImportError(...) from ModuleNotFoundError)
    outer = ImportError("plotting needs matplotlib")
    outer.__cause__ = ModuleNotFoundError("no matplotlib", name="matplotlib")
    assert "rml_fast[bench]" in missing_dependency_message(outer)
    # a core dependency or rml_fast itself is a bug, not an optional peer
    assert missing_dependency_message(ModuleNotFoundError("x", name="numpy")) is None
    assert missing_dependency_message(ModuleNotFoundError("x", name="rml_fast.nope")) is None
    assert missing_dependency_message(ValueError("x")) is None


_FAKE_SUITE = '''
from __future__ import annotations

from rml_fast.benchmarking import Suite, import_skip_reason

SUITE = "fake"


def _body(suite, case):
    suite.compare(case, lambda: None, lambda: None, peer_name="present", memory=False)
    try:
        import no_such_peer_module  # noqa: F401
    except ImportError as exc:
        suite.skip(case, peer_name="absent peer", reason=import_skip_reason(exc))


def run(*, quick=False, progress=True, repeat=5):
    return Suite(SUITE, quick=quick, progress=progress, repeat=repeat).run([{"n": 1}], _body)


if __name__ == "__main__":
    import sys

    from run_all import main

    raise SystemExit(main(sys.argv[1:], suite=SUITE))
'''


@pytest.fixture
def fake_bench(tmp_path):
    """A benchmarks/ folder with the real run_all.py and a one-case suite with a missing peer."""
    bench = tmp_path / "benchmarks"
    bench.mkdir()
    shutil.copy(ROOT / "benchmarks" / "run_all.py", bench / "run_all.py")
    (bench / "bench_fake.py").write_text(_FAKE_SUITE)
    return bench


def _run_script(script: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(script), *args],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=script.parent.parent,
        env={**os.environ, "COLUMNS": "250"},
    )


def test_bench_script_passes_its_arguments(fake_bench, tmp_path):
    out = tmp_path / "out"
    res = _run_script(fake_bench / "bench_fake.py", "--quick", "--out", str(out), "--repeat", "1")
    assert res.returncode == 0, res.stderr
    # --out and --quick are honoured: nothing lands in the default results folder
    assert sorted(p.name for p in out.iterdir()) == ["fake.quick.json"]
    assert not (fake_bench / "results").exists()
    rows = json.loads((out / "fake.quick.json").read_text())
    assert [r["peer"] for r in rows] == ["present", "absent peer"]
    assert rows[0]["repeat"] == 1
    assert rows[1]["skipped"] == "no_such_peer_module is not installed"
    # the skipped row is in the table and in a summary line
    assert "absent peer (skipped: no_such_peer_module is not installed)" in res.stdout
    assert "fake: 1 peer rows skipped" in res.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--repeat", "0"], "argument --repeat: expected an integer >= 1, got 0"),
        (["--repeat", "x"], "argument --repeat: expected an integer, got 'x'"),
        (["--bogus"], "unrecognized arguments: --bogus"),
        (["random"], "unrecognized arguments: random"),  # a bench script runs its own suite
    ],
)
def test_bench_script_bad_arguments_are_one_line_errors(fake_bench, args, message):
    res = _run_script(fake_bench / "bench_fake.py", *args)
    assert res.returncode == 2
    assert "Traceback" not in res.stderr
    assert res.stderr.strip().splitlines()[-1] == f"bench_fake.py: error: {message}"
    assert not (fake_bench / "results").exists()


def test_every_bench_script_passes_argv_to_the_harness():
    # each suite's __main__ hands its command line to run_all.main (no fixed argument list)
    for script in sorted((ROOT / "benchmarks").glob("bench_*.py")):
        text = script.read_text()
        assert "main(sys.argv[1:], suite=SUITE)" in text, script.name
        assert "main([SUITE])" not in text, script.name


def test_real_bench_script_quick_run_leaves_committed_results_alone(tmp_path):
    committed = ROOT / "benchmarks" / "results" / "random.json"
    before = committed.read_bytes() if committed.exists() else None
    res = _run_script(
        ROOT / "benchmarks" / "bench_random.py",
        "--quick", "--out", str(tmp_path), "--repeat", "1", "--no-progress",
    )
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "random.quick.json").is_file()
    assert (committed.read_bytes() if committed.exists() else None) == before


def _captured_figure(monkeypatch):
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figures = []
    real_close = plt.close

    def keep(fig=None):
        figures.append(fig)
        return real_close(fig)

    monkeypatch.setattr(plt, "close", keep)
    return figures


def test_plot_annotates_ratios_and_names_the_machine(tmp_path, monkeypatch):
    figures = _captured_figure(monkeypatch)
    rows = [
        {"case": {"n": 1}, "peer": "fast peer", "ratio": 0.25},
        {"case": {"n": 1}, "peer": "slow peer", "ratio": 40.0},
        {"case": {"n": 1}, "peer": "gone", "ratio": None, "skipped": "gone is not installed"},
    ]
    machine = {"cpu_model": "Test CPU 9000", "cpu_count": 2, "torch_threads": 2,
               "openmp_threads": 2}
    path = plot_ratios(rows, tmp_path / "p.png", title="unit", quick=True, machine=machine)
    assert path.stat().st_size > 0
    (fig,) = figures
    (ax,) = fig.axes
    assert ax.get_xscale() == "log"  # ratios span a factor 160
    texts = [t.get_text() for t in ax.texts]
    assert "0.25x" in texts and "40x" in texts
    assert [t.get_text() for t in ax.get_yticklabels()] == ["n=1 | vs fast peer", "n=1 | vs slow peer"]
    note = " ".join(t.get_text() for t in fig.texts)
    assert "Test CPU 9000, 2 CPUs, torch threads 2" in note and "QUICK MODE" in note
    assert "skipped 1 peer rows: gone (gone is not installed)" in note
    assert "quick mode" in ax.get_title()


def test_plot_linear_axis_for_close_ratios_and_summary_for_many_rows(tmp_path, monkeypatch):
    figures = _captured_figure(monkeypatch)
    close = [{"case": {"n": i}, "peer": "p", "ratio": 1.0 + 0.1 * i} for i in range(4)]
    plot_ratios(close, tmp_path / "a.png", title="unit", machine={})
    many = [{"case": {"n": i}, "peer": f"p{i % 2}", "ratio": 2.0 + i} for i in range(100)]
    plot_ratios(many, tmp_path / "b.png", title="unit", machine={})
    ax_close, ax_many = (f.axes[0] for f in figures)
    assert ax_close.get_xscale() == "linear" and ax_close.get_xlim()[0] == 0
    assert ax_close.get_xlim()[1] > 1.3  # room for the value written after the longest bar
    assert [t.get_text() for t in ax_many.get_yticklabels()] == [
        "vs p0 (50 cases)",
        "vs p1 (50 cases)",
    ]
    assert {t.get_text() for t in ax_many.texts} == {"median 51x", "median 52x"}


def _load_plot_nudft():
    spec = importlib.util.spec_from_file_location(
        "rml_fast_plot_nudft", ROOT / "benchmarks" / "plot_nudft.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_plot_nudft_arguments_and_annotations(tmp_path, monkeypatch, capsys):
    plot_nudft = _load_plot_nudft()
    with pytest.raises(SystemExit) as exc:
        plot_nudft.main([str(tmp_path / "missing.json"), str(tmp_path / "x.png")])
    assert exc.value.code == 2
    assert "cannot read the results" in capsys.readouterr().err
    figures = _captured_figure(monkeypatch)
    layer = {"kind": "layer", "d": 1, "N": 50, "M": 128, "C": 128}
    rows = [
        {"case": layer, "peer": "einsum", "ratio": 2.5, "quick": True},
        {"case": layer, "peer": "torchkbnufft", "ratio": None, "skipped": "not installed"},
    ]
    src = tmp_path / "nudft.quick.json"
    src.write_text(json.dumps(rows))
    out = plot_nudft.main([str(src), str(tmp_path / "n.png")])
    assert out.stat().st_size > 0
    (fig,) = figures
    ax = fig.axes[0]
    assert "2.5" in [t.get_text() for t in ax.texts] and "quick mode" in ax.get_title()
    note = " ".join(t.get_text() for t in fig.texts)
    assert "QUICK MODE" in note and "skipped: torchkbnufft (not installed)" in note


def test_suite_save_plot_writes_quick_png(tmp_path):
    pytest.importorskip("matplotlib")
    suite = Suite("unit", quick=True, repeat=1, warmup=0, progress=False)
    suite.compare({"n": 1}, lambda: None, lambda: None, peer_name="p", memory=False)
    suite.save(tmp_path, plot=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["unit.quick.json", "unit.quick.png"]
