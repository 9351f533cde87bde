"""The ``rml-fast`` command line: version, one-line errors, missing optional peers, progress."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

import rml_fast
from rml_fast import cli


def test_version(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == f"rml_fast {rml_fast.__version__}"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["bench", "random", "--repeat", "0"], "argument --repeat: expected an integer >= 1"),
        (["demo", "np", "--budget", "-5"], "argument --budget: expected finite seconds >= 0"),
        (["demo", "np", "--budget", "nan"], "argument --budget: expected finite seconds >= 0"),
        (["demo", "np", "--baselines", "nope"], "argument --baselines: unknown baseline(s) nope"),
        (["demo", "np", "--test-batches", "0"], "argument --test-batches: expected an integer >= 1"),
        (["demo", "np", "--threads", "0"], "argument --threads: expected an integer >= 1"),
        (["demo", "np", "--seed", "-1"], "argument --seed: expected an integer >= 0"),
        (["demo", "np", "--bogus"], "unrecognized arguments: --bogus"),
        (["demo", "nope"], "argument name: invalid choice: 'nope'"),
        (["demo", "alignment", "nope"], "argument experiment: invalid choice: 'nope'"),
        (["demo", "alignment", "air", "--seed", "-2"], "argument --seed: expected an integer >= 0"),
        (["demo", "alignment", "air", "--bogus"], "unrecognized arguments: --bogus"),
        (["demo", "interp", "nope"], "argument experiment: invalid choice: 'nope'"),
        (["demo", "fairness", "--seed", "x"], "argument --seed: expected an integer"),
        (["demo", "fairness", "--bogus"], "unrecognized arguments: --bogus"),
        (["info", "--bogus"], "unrecognized arguments: --bogus"),
        ([], "the following arguments are required: command"),
    ],
)
def test_bad_arguments_are_one_line_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("rml-fast") and ": error: " in last and message in last


def test_bench_outside_a_checkout_is_a_one_line_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["bench", "--bench-dir", str(tmp_path)])
    assert exc.value.code == 2
    assert "rml-fast bench: error: bench runs the suites of a source checkout" in (
        capsys.readouterr().err
    )


def test_bad_argument_in_a_real_process_has_no_traceback():
    res = subprocess.run(
        [sys.executable, "-m", "rml_fast.cli", "demo", "np", "--budget", "-5"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 2
    assert "Traceback" not in res.stderr
    assert res.stderr.strip().splitlines()[-1] == (
        "rml-fast demo np: error: argument --budget: expected finite seconds >= 0, got -5"
    )


def test_demo_baseline_names_match_the_demo():
    from rml_fast.neural_processes.demo import BASELINES

    assert tuple(BASELINES) == cli.DEMO_BASELINES


def _hide(monkeypatch, *modules):
    real = importlib.util.find_spec

    def find_spec(name, *args, **kwargs):
        if name.split(".")[0] in modules:
            return None
        return real(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


def test_missing_optional_peer_is_one_line_naming_the_extra(monkeypatch, capsys):
    _hide(monkeypatch, "neuralprocesses", "matplotlib")
    rc = cli.main(["demo", "np", "--baselines", "convcnp-neuralprocesses", "--out", ""])
    assert rc == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "rml-fast demo: error: the convcnp-neuralprocesses baseline needs neuralprocesses, "
        "which is not installed: pip install 'rml_fast[bench]'"
    ]
    rc = cli.main(["demo", "np", "--baselines", "convcnp-grid", "--out", "x.png"])
    assert rc == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "needs matplotlib" in line and "pip install 'rml_fast[bench]'" in line


def test_missing_optional_import_anywhere_is_one_line(monkeypatch, capsys):
    def fail(argv):
        raise ImportError("wrapped") from ModuleNotFoundError("No module named 'treefarms'",
                                                              name="treefarms")

    monkeypatch.setattr(cli, "_main", fail)
    assert cli.main(["bench"]) == 1
    assert capsys.readouterr().err.strip() == (
        "rml-fast: error: the optional dependency 'treefarms' is not installed: "
        "pip install 'rml_fast[bench]' (or pip install treefarms)"
    )

    def bug(argv):
        raise ModuleNotFoundError("No module named 'rml_fast.nope'", name="rml_fast.nope")

    monkeypatch.setattr(cli, "_main", bug)
    with pytest.raises(ModuleNotFoundError):  # a bug is not hidden behind an install hint
        cli.main(["info"])


def test_demo_passes_progress_and_announces_the_run(monkeypatch, capsys):
    from rml_fast.neural_processes import demo

    calls = []

    def fake_run_demo(budget, **kwargs):
        calls.append((budget, kwargs))
        return [demo.DemoRow("SFConvCNP", 1, 1, -1.0, 1.0, 0.5)]

    monkeypatch.setattr(demo, "run_demo", fake_run_demo)
    argv = ["demo", "np", "--budget", "3", "--baselines", "convcnp-grid", "--out", ""]
    assert cli.main(argv) == 0
    captured = capsys.readouterr()
    assert calls[-1][0] == 3.0 and calls[-1][1]["progress"] is True
    assert calls[-1][1]["baselines"] == ["convcnp-grid"]
    assert "training up to 2 models for 3 s each" in captured.err
    assert "SFConvCNP" in captured.out
    assert cli.main([*argv, "--no-progress"]) == 0
    assert calls[-1][1]["progress"] is False
    assert capsys.readouterr().err == ""


def test_train_for_shows_a_progress_bar_that_can_be_turned_off(capsys):
    import torch

    from rml_fast.neural_processes.demo import GridConvCNP, train_for

    torch.manual_seed(0)
    model = GridConvCNP()
    assert train_for(model, 0.0, progress=True) == [1]
    assert "train" in capsys.readouterr().err
    assert train_for(model, 0.0, progress=False) == [1]
    assert capsys.readouterr().err == ""


def test_alignment_demo_runs_the_registered_module(monkeypatch, capsys):
    import types

    from rml_fast.alignment import demos

    calls = []
    fake = types.SimpleNamespace(
        run=lambda **kw: calls.append(kw) or {"effect": 1.5},
        format_table=lambda result: f"effect {result['effect']}",
    )
    monkeypatch.setattr(demos, "load_demo", lambda name: calls.append(name) or fake)
    assert cli.main(["demo", "alignment", "unlearning", "--quick", "--seed", "3"]) == 0
    assert calls == ["unlearning", {"seed": 3, "quick": True, "out": None, "progress": True}]
    assert capsys.readouterr().out.strip() == "effect 1.5"
    assert cli.main(["demo", "alignment", "air", "--no-progress"]) == 0
    assert calls[-1] == {"seed": 0, "quick": False, "out": None, "progress": False}


def test_interp_demo_runs_the_registered_module(monkeypatch, capsys):
    import types

    from rml_fast.interp import demos

    calls = []
    fake = types.SimpleNamespace(
        run=lambda **kw: calls.append(kw) or {"gain": 2.0},
        format_table=lambda result: f"gain {result['gain']}",
    )
    monkeypatch.setattr(demos, "load_demo", lambda name: calls.append(name) or fake)
    assert cli.main(["demo", "interp", "energy_dps", "--quick", "--no-progress"]) == 0
    assert calls == ["energy_dps", {"seed": 0, "quick": True, "out": None, "progress": False}]
    assert capsys.readouterr().out.strip() == "gain 2.0"


@pytest.mark.parametrize("package", ["alignment", "interp"])
def test_every_registered_demo_honours_the_contract(package):
    import importlib
    import inspect

    demos = importlib.import_module(f"rml_fast.{package}.demos")
    DEMOS, load_demo = demos.DEMOS, demos.load_demo

    with pytest.raises(ValueError, match="name must be one of"):
        load_demo("nope")
    for name in DEMOS:
        module = load_demo(name)
        params = inspect.signature(module.run).parameters
        assert {"seed", "quick", "out", "progress"} <= set(params), name
        assert all(params[p].kind is inspect.Parameter.KEYWORD_ONLY for p in ("seed", "quick"))
        assert callable(module.format_table), name


def test_fairness_demo_runs_the_demo_module(monkeypatch, capsys):
    import inspect

    from rml_fast.fairness import demo

    params = inspect.signature(demo.run).parameters
    assert {"seed", "quick", "out", "progress"} <= set(params)
    calls = []
    monkeypatch.setattr(demo, "run", lambda **kw: calls.append(kw) or {"acc": 0.5})
    monkeypatch.setattr(demo, "format_table", lambda result: f"acc {result['acc']}")
    assert cli.main(["demo", "fairness", "--quick", "--no-progress"]) == 0
    assert calls == [{"seed": 0, "quick": True, "out": None, "progress": False}]
    assert capsys.readouterr().out.strip() == "acc 0.5"
