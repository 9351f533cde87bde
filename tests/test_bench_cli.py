"""``rml-fast bench`` outside a checkout, ``--list``, ``--plot``, and the HTML ``--report`` (issue 24 §4).

The wheel ships ``benchmarks/run_all.py`` and ``benchmarks/bench_*.py`` as
``rml_fast/_bench_suites/`` (CMakeLists.txt); here that folder is a temp dir holding the real
``run_all.py`` and a tiny fake suite, and the checkout candidates point nowhere, so the CLI must
fall back to it exactly as an installed wheel does.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rml_fast import cli
from rml_fast.bench_report import (
    format_ratio,
    is_suite_rows,
    load_results,
    render_html,
    write_report,
)

ROOT = Path(__file__).resolve().parents[1]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

FAKE_SUITE = '''"""A fake suite: sum(range(n)) vs a list comprehension, and a peer that is not installed."""

from __future__ import annotations

from rml_fast.benchmarking import Suite

SUITE = "fake"


def _body(suite, case):
    n = case["n"]
    suite.compare(case, lambda: sum(range(n)), lambda: [i for i in range(n)],
                  peer_name="listcomp", memory=False, note="<script>alert(1)</script>")
    suite.skip(case, peer_name="ghost", reason="ghost & co are not installed")


def run(quick=False, progress=True, repeat=5):
    cases = [{"n": 50}] if quick else [{"n": 50}, {"n": 5000}]
    return Suite(SUITE, quick=quick, progress=progress, repeat=repeat).run(cases, _body)
'''


@pytest.fixture
def no_checkout(tmp_path, monkeypatch):
    """A packaged-suites folder (run_all.py + bench_fake.py) and a cwd with no checkout."""
    pkg = tmp_path / "site" / "rml_fast" / "_bench_suites"
    pkg.mkdir(parents=True)
    shutil.copy(ROOT / "benchmarks" / "run_all.py", pkg / "run_all.py")
    (pkg / "bench_fake.py").write_text(FAKE_SUITE)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.delenv("RML_FAST_BENCH_DIR", raising=False)
    monkeypatch.setattr(cli, "_CHECKOUT_BENCH_DIR", tmp_path / "no_checkout" / "benchmarks")
    monkeypatch.setattr(cli, "_PACKAGED_BENCH_DIR", pkg)
    monkeypatch.setattr(sys, "path", list(sys.path))  # run_all puts its folder on sys.path
    return pkg, work


def _section(page: str, name: str) -> str:
    """The part of the report between the suite's heading and the next heading."""
    start = page.index(f"<h2 id='r-{name}'>")
    nxt = page.find("<h2", start + 1)
    return page[start : nxt if nxt >= 0 else len(page)]


def test_packaged_suites_run_outside_a_checkout(no_checkout, capsys):
    pkg, work = no_checkout
    assert cli.main(["bench", "--list"]) == 0
    out = capsys.readouterr().out
    assert f"suites in {pkg}" in out
    assert re.search(r"^\s+fake\s+A fake suite: sum\(range\(n\)\)", out, re.M)

    rc = cli.main(["bench", "fake", "--quick", "--plot", "--repeat", "1", "--no-progress",
                   "--report", "rep"])
    assert rc == 0
    # results go to ./bench_results (never into the installed package)
    rows = json.loads((work / "bench_results" / "fake.quick.json").read_text())
    assert [(r["case"], r["peer"], bool(r.get("skipped"))) for r in rows] == [
        ({"n": 50}, "listcomp", False), ({"n": 50}, "ghost", True)]
    timed = rows[0]
    assert timed["quick"] is True and timed["repeat"] == 1 and timed["machine"]["cpu_count"]
    assert timed["ratio"] == pytest.approx(timed["peer_median_s"] / timed["ours_median_s"])
    assert (work / "bench_results" / "fake.quick.png").read_bytes()[:8] == PNG_MAGIC
    assert sorted(p.name for p in pkg.iterdir() if p.name != "__pycache__") == [
        "bench_fake.py", "run_all.py"]
    # the report of this run
    page = (work / "rep" / "index.html").read_text()
    assert (work / "rep" / "fake.quick.png").read_bytes()[:8] == PNG_MAGIC
    section = _section(page, "fake-quick")
    assert format_ratio(timed["ratio"]) in section
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in section
    assert "ghost &amp; co are not installed" in section
    # the CLI leaves the environment as it found it
    import os

    assert "RML_FAST_BENCH_DIR" not in os.environ


def test_checkout_is_preferred_and_missing_suites_are_one_line_errors(no_checkout, monkeypatch,
                                                                      capsys):
    pkg, work = no_checkout
    # a benchmarks/ under the cwd wins over the packaged suites
    (work / "benchmarks").mkdir()
    shutil.copy(pkg / "run_all.py", work / "benchmarks" / "run_all.py")
    assert cli.main(["bench", "--list"]) == 0
    assert f"suites in {work / 'benchmarks'}:" in capsys.readouterr().out
    # RML_FAST_BENCH_DIR wins over both, and must hold run_all.py
    monkeypatch.setenv("RML_FAST_BENCH_DIR", str(pkg))
    assert cli.main(["bench", "--list"]) == 0
    assert f"suites in {pkg}:" in capsys.readouterr().out
    monkeypatch.setenv("RML_FAST_BENCH_DIR", str(work))
    with pytest.raises(SystemExit) as exc:
        cli.main(["bench", "--list"])
    assert exc.value.code == 2
    assert "from RML_FAST_BENCH_DIR" in capsys.readouterr().err
    # nothing anywhere: one line naming every place looked in
    monkeypatch.delenv("RML_FAST_BENCH_DIR")
    shutil.rmtree(work / "benchmarks")
    monkeypatch.setattr(cli, "_PACKAGED_BENCH_DIR", work / "nowhere")
    with pytest.raises(SystemExit) as exc:
        cli.main(["bench", "--quick"])
    assert exc.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()[-1:]
    assert "rml-fast bench: error: bench runs the suites of a source checkout" in line
    assert str(work / "nowhere") in line


def _fixture_results(src: Path) -> None:
    machine = {"cpu_model": "Test CPU <x86>", "cpu_count": 2}
    alpha = [
        {"suite": "alpha", "case": {"n": 8, "kind": "a&b"}, "device": "cpu", "peer": "numpy",
         "ours_median_s": 0.002, "ours_q20_s": 0.0019, "ours_q80_s": 0.0021,
         "peer_median_s": 0.005, "peer_q20_s": 0.0049, "peer_q80_s": 0.0052, "ratio": 2.5,
         "ours_peak_mb": 1.5, "peer_peak_mb": 3.25, "repeat": 5,
         "note": "<script>alert('x')</script>", "machine": machine, "agree": True},
        {"suite": "alpha", "case": {"n": 8, "kind": "a&b"}, "device": "cpu", "peer": "slowpeer",
         "ours_median_s": 1.0, "peer_median_s": 0.0123, "ratio": 0.0123, "ours_peak_mb": None,
         "peer_peak_mb": None, "repeat": 5, "note": None, "machine": machine},
        {"suite": "alpha", "case": {"n": 8, "kind": "a&b"}, "device": "cpu", "peer": "absent",
         "skipped": "absent is not installed (pip install 'rml_fast[bench]')", "ratio": None,
         "note": None, "machine": machine},
    ]
    beta = [{"suite": "beta", "case": {"d": 3}, "device": "cpu", "peer": "torch",
             "ours_median_s": 1e-5, "peer_median_s": 4.2e-4, "ratio": 42.0, "quick": True}]
    (src / "alpha.json").write_text(json.dumps(alpha))
    (src / "beta.quick.json").write_text(json.dumps(beta))
    (src / "side_table.json").write_text(json.dumps([{"epsilon": 1.0, "mse": 0.25}]))
    (src / "meta.json").write_text(json.dumps({"meta": {"seed": "<7>"}}))
    (src / "alpha.partial.json").write_text("{not json: an unfinished run's checkpoint")


def test_report_from_json_renders_every_suite_escaped(tmp_path, capsys):
    src = tmp_path / "results"
    src.mkdir()
    _fixture_results(src)
    before = sorted(p.name for p in src.iterdir())
    rep = tmp_path / "report"
    assert cli.main(["bench", "--report", str(rep), "--from-json", str(src), "--no-progress"]) == 0
    assert capsys.readouterr().out.strip().endswith(f"report: {rep / 'index.html'}")
    assert sorted(p.name for p in src.iterdir()) == before  # nothing ran, nothing written
    assert sorted(p.name for p in rep.iterdir()) == ["alpha.png", "beta.quick.png", "index.html"]
    assert (rep / "alpha.png").read_bytes()[:8] == PNG_MAGIC
    page = (rep / "index.html").read_text()
    assert "<script" not in page
    alpha = _section(page, "alpha")
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in alpha
    assert "n=8 kind=a&amp;b" in alpha and "Test CPU &lt;x86&gt;" in alpha
    assert "<img src='alpha.png'" in alpha
    for text in ("2.50x", "0.0123x", "2.00 ms [1.90 ms, 2.10 ms]", "5.00 ms", "1.5", "3.2",
                 "absent is not installed (pip install &#x27;rml_fast[bench]&#x27;)", "agree=True"):
        assert text in alpha, text
    beta = _section(page, "beta-quick")
    assert "42.00x" in beta and "machine not recorded | QUICK MODE" in beta
    # side tables: records as a table, other JSON collapsed (escaped)
    assert "0.25" in page and "&lt;7&gt;" in page
    # the summary: one row per suite with its median ratio
    summary = page[page.index("<h2>Summary</h2>") : page.index("<h2 id='r-alpha'>")]
    assert "href='#r-alpha'" in summary and "href='#r-beta-quick'" in summary
    assert "<td>1.26x</td><td>0.0123x</td><td>2.50x</td><td>1 of 2</td>" in summary  # median 1.256


def test_report_inline_is_one_file(tmp_path):
    src = tmp_path / "results"
    src.mkdir()
    _fixture_results(src)
    results = load_results(src)
    assert sorted(results) == ["alpha", "beta.quick", "meta", "side_table"]
    page = write_report({"alpha": results["alpha"]}, tmp_path / "one", inline=True)
    assert sorted(p.name for p in page.parent.iterdir()) == ["index.html"]
    m = re.search(r"src='data:image/png;base64,([A-Za-z0-9+/=]+)'", page.read_text())
    import base64

    assert m and base64.b64decode(m.group(1))[:8] == PNG_MAGIC


def test_report_of_the_committed_results_has_every_suite_and_ratio():
    results = load_results(ROOT / "benchmarks" / "results")
    suites = {k: v for k, v in results.items() if is_suite_rows(v)}
    assert len(suites) >= 10
    page = render_html(results)
    for name, rows in suites.items():
        section = _section(page, re.sub(r"[^A-Za-z0-9_-]", "-", name))
        assert f">{name}</h2>" in section
        for r in rows:
            if not r.get("skipped"):
                assert format_ratio(r["ratio"]) in section, (name, r["case"], r["peer"])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--from-json", "x"], "--from-json renders a --report: pass --report DIR too"),
        (["--report", "rep", "--from-json", "does_not_exist"], "does not exist"),
        (["--report", "rep", "--from-json", "."], "no result *.json files"),
        (["nope", "--list"], "unknown suite(s) ['nope']"),
    ],
)
def test_bad_report_arguments_are_one_line_errors(no_checkout, argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["bench", *argv])
    assert exc.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("rml-fast bench: error:") and message in last


def test_cmake_ships_the_suites_without_results(tmp_path):
    """The CMakeLists.txt rule that puts the suites in the wheel: installed into a prefix by a
    throwaway project holding only that rule and a copy of benchmarks/ (no compile)."""
    cmake = shutil.which("cmake")
    if cmake is None:
        pytest.skip("cmake is not on the PATH")
    text = (ROOT / "CMakeLists.txt").read_text()
    rule = re.search(r"install\(DIRECTORY benchmarks/.*?\)\s*$", text, re.S | re.M)
    assert rule, "CMakeLists.txt no longer installs benchmarks/ into the wheel"
    src = tmp_path / "src"
    shutil.copytree(ROOT / "benchmarks", src / "benchmarks",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (src / "benchmarks" / "__pycache__").mkdir()
    (src / "benchmarks" / "__pycache__" / "bench_x.cpython-311.pyc").write_bytes(b"")
    (src / "CMakeLists.txt").write_text(
        f"cmake_minimum_required(VERSION 3.18)\nproject(t NONE)\n{rule.group(0)}\n")
    for args in (["-S", str(src), "-B", str(tmp_path / "b")],
                 ["--install", str(tmp_path / "b"), "--prefix", str(tmp_path / "inst")]):
        subprocess.run([cmake, *args], check=True, capture_output=True, timeout=120)
    inst = tmp_path / "inst" / "rml_fast" / "_bench_suites"
    shipped = sorted(str(p.relative_to(inst)) for p in inst.rglob("*"))
    expected = sorted(["run_all.py", *(p.name for p in (ROOT / "benchmarks").glob("bench_*.py"))])
    assert shipped == expected
