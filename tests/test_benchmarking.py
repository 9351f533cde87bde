"""The benchmark harness: timing statistics, ratios, JSON rows, and the CLI entry points."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from rml_fast import cli
from rml_fast.benchmarking import Suite, peak_memory_mb, time_call

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
    rows = json.loads((tmp_path / "random.json").read_text())
    assert {r["peer"] for r in rows} >= {"numpy Generator(Philox)", "torch (cpu)"}
    assert all(r["case"]["n"] == 10**6 and r["ratio"] > 0 for r in rows)
    assert "ratio" in capsys.readouterr().out


def test_cli_bench_rejects_unknown_suite(tmp_path):
    with pytest.raises(SystemExit):
        cli.main(["bench", "--bench-dir", str(ROOT / "benchmarks"), "nope", "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="source checkout"):
        cli.main(["bench", "--bench-dir", str(tmp_path)])
