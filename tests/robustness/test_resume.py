"""Interrupt and resume of every long run (issue 25 §4).

For each run: (1) in process, a run interrupted after k of N units (an exception raised from a
hook, as Ctrl-C would) and resumed from its checkpoint ends with the result of an uninterrupted
run; (2) real interruptions: a child interpreter runs the same job and blocks *inside* a
checkpoint write (after the temporary file is written, before it replaces the checkpoint), the
test waits for it (polling a file it creates, no fixed sleeps), sends SIGKILL or SIGINT, and
resumes the run here to completion. Tiny problems; one torch thread.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from rml_fast._checkpoint import load_checkpoint, save_checkpoint

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# --------------------------------------------------------------------------- the child harness

_HARNESS = """
import os, sys, time
import torch
torch.set_num_threads(1)
READY, BLOCK_AT = sys.argv[1], int(sys.argv[2])
_calls = [0]
def _blocking(orig):
    def hook(*args, **kwargs):
        out = orig(*args, **kwargs)
        _calls[0] += 1
        if _calls[0] == BLOCK_AT:  # inside a checkpoint write: wait to be killed
            open(READY, "w").close()
            while True:
                time.sleep(0.05)
        return out
    return hook
"""


def _interrupt_child(job: str, tmp_path: Path, *, block_at: int, sig: int,
                     hook: str = "os.fsync = _blocking(os.fsync)") -> subprocess.CompletedProcess:
    """Run ``job`` in a child that blocks in its ``block_at``-th hooked call, then send ``sig``."""
    ready = tmp_path / "ready"
    # a child inherits an ignored SIGINT (a background job of a non-interactive shell, as CI
    # may run); Python then installs no KeyboardInterrupt handler, so restore it explicitly
    script = ("import signal\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n"
              + _HARNESS + hook + "\n" + textwrap.dedent(job))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", script, str(ready), str(block_at)],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 300  # generous: a loaded 2-core machine, a cold import
    while not ready.exists():
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"the child ended (rc {proc.returncode}) before its checkpoint:\n"
                        f"{err.decode()[-3000:]}")
        if time.monotonic() > deadline:
            proc.kill()
            proc.communicate()
            pytest.fail("the child did not reach its checkpoint in 300 s")
        time.sleep(0.05)  # polling for the file, not a guess of how long the work takes
    proc.send_signal(sig)
    try:
        out, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail(f"the child did not end within 120 s of signal {sig}")
    assert proc.returncode != 0, "the interrupted child must not report success"
    if sig == signal.SIGINT:
        assert b"KeyboardInterrupt" in err  # Ctrl-C raises as usual
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


# --------------------------------------------------------------------------- checkpoint files


def test_checkpoint_round_trip_and_refusals(tmp_path: Path) -> None:
    path = tmp_path / "c.pkl"
    assert load_checkpoint(path, kind="k", fingerprint={"a": 1}) is None
    save_checkpoint(path, {"x": np.arange(3)}, kind="k", fingerprint={"a": 1})
    state = load_checkpoint(path, kind="k", fingerprint={"a": 1})
    assert np.array_equal(state["x"], np.arange(3))
    with pytest.raises(ValueError, match=r"another configuration.*a: checkpoint 1, this run 2"):
        load_checkpoint(path, kind="k", fingerprint={"a": 2})
    with pytest.raises(ValueError, match="not of 'other'"):
        load_checkpoint(path, kind="other", fingerprint={"a": 1})
    bad = tmp_path / "bad.pkl"
    bad.write_bytes(b"not a pickle")
    with pytest.raises(ValueError, match="not a readable rml_fast checkpoint"):
        load_checkpoint(bad, kind="k", fingerprint={}, name="checkpoint")


def test_interrupted_write_keeps_the_previous_checkpoint(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "c.pkl"
    save_checkpoint(path, 1, kind="k", fingerprint={})

    def interrupted(fd: int) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "fsync", interrupted)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(path, 2, kind="k", fingerprint={})
    monkeypatch.undo()
    assert load_checkpoint(path, kind="k", fingerprint={}) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.pkl"]  # no temporary file left


# --------------------------------------------------------------------------- DP training

_DP_SETUP = """
import torch
from rml_fast.privacy.dp_c4 import DPC4Optimizer, PoissonBatchSampler, train_private

def dp_setup():
    # make_private_dpc4's loader and optimizer, without its (slow) noise calibration
    torch.manual_seed(0)
    X = torch.randn(64, 5)
    y = (X[:, 0] > 0).long()
    model = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Dropout(0.2), torch.nn.Linear(8, 2))
    sampler = PoissonBatchSampler(64, 0.25, generator=torch.Generator().manual_seed(1))
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(X, y),
                                         batch_sampler=sampler)
    opt = DPC4Optimizer(model, lr=0.1, noise_multiplier=1.2, expected_batch_size=16,
                        sample_rate=0.25, seed=3)
    return model, opt, loader

def dp_run(checkpoint=None, **kw):
    model, opt, loader = dp_setup()
    eps = train_private(model, opt, loader, torch.nn.CrossEntropyLoss(), 3, 1e-5,
                        progress=False, checkpoint=checkpoint, checkpoint_every=2, **kw)
    return model, opt, eps
"""
_dp: dict = {}
exec(_DP_SETUP, _dp)  # the same definitions here and in the child


class _Stop(Exception):
    pass


@pytest.fixture(scope="module")
def dp_reference():
    model, opt, eps = _dp["dp_run"]()
    return [p.detach().clone() for p in model.parameters()], eps, opt.steps


def test_dp_training_resumes_bit_for_bit(tmp_path: Path, dp_reference) -> None:
    ref_w, ref_eps, ref_steps = dp_reference
    ck = tmp_path / "dp.ckpt"

    def stop(step: int, opt) -> None:
        if step == 7:  # mid-epoch 2 (4 Poisson batches per epoch); last checkpoint at step 6
            raise _Stop

    with pytest.raises(_Stop):
        _dp["dp_run"](ck, callback=stop)
    model, opt, eps = _dp["dp_run"](ck)
    assert opt.steps == ref_steps == 12
    assert eps == ref_eps
    # the same operations on the same machine and thread count: identical weights
    for a, b in zip(ref_w, model.parameters(), strict=True):
        assert torch.equal(a, b)
    # a finished run's checkpoint: the model is loaded, nothing is trained
    model2, opt2, eps2 = _dp["dp_run"](ck)
    assert eps2 == ref_eps and opt2.steps == ref_steps
    assert all(torch.equal(a, b) for a, b in zip(ref_w, model2.parameters(), strict=True))


def test_dpc4_optimizer_state_dict_resumes_a_custom_loop() -> None:
    """A user's own loop: save model + optimizer state_dict after k steps, load both into a
    fresh model/optimizer (another noise key given), continue: the uninterrupted weights."""
    from rml_fast.privacy.dp_c4 import DPC4Optimizer

    def make(seed: int):
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 1)
        return model, DPC4Optimizer(model, lr=0.1, noise_multiplier=1.0, expected_batch_size=8,
                                    sample_rate=0.5, seed=seed)

    gen = torch.Generator().manual_seed(0)
    batches = [(torch.randn(8, 4, generator=gen), torch.randn(8, 1, generator=gen))
               for _ in range(6)]
    loss = torch.nn.MSELoss()
    ref_model, ref_opt = make(3)
    for x, y in batches:
        ref_opt.step(loss, x, y)
    model, opt = make(3)
    for x, y in batches[:3]:
        opt.step(loss, x, y)
    saved = (model.state_dict(), opt.state_dict())
    model2, opt2 = make(99)  # the noise key comes from the state_dict
    model2.load_state_dict(saved[0])
    opt2.load_state_dict(saved[1])
    for x, y in batches[3:]:
        opt2.step(loss, x, y)
    assert opt2.steps == 6 and opt2.privacy_spent(1e-5) == ref_opt.privacy_spent(1e-5)
    for a, b in zip(ref_model.parameters(), model2.parameters(), strict=True):
        assert torch.equal(a, b)


def test_dp_checkpoint_of_another_configuration_is_refused(tmp_path: Path) -> None:
    ck = tmp_path / "dp.ckpt"
    _dp["dp_run"](ck)
    model, _, loader = _dp["dp_setup"]()
    from rml_fast.privacy.dp_c4 import DPC4Optimizer, train_private

    other = DPC4Optimizer(model, lr=0.2, noise_multiplier=1.0, expected_batch_size=16,
                          sample_rate=0.25, seed=3)
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(ValueError, match="another configuration"):
        train_private(model, other, loader, torch.nn.CrossEntropyLoss(), 3, 1e-5,
                      progress=False, checkpoint=ck)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_dp_training_killed_mid_write_resumes(tmp_path: Path, dp_reference) -> None:
    ref_w, ref_eps, ref_steps = dp_reference
    ck = tmp_path / "dp.ckpt"
    # checkpoints at steps 2, 4 (end of epoch 1), 6, ...: killed while writing the third
    _interrupt_child(_DP_SETUP + f"\ndp_run({str(ck)!r})\n", tmp_path, block_at=3,
                     sig=signal.SIGKILL)
    import pickle

    state = pickle.loads(ck.read_bytes())["state"]
    assert state["epoch"] == 1 and state["step_in_epoch"] == 0  # the second checkpoint survived
    model, opt, eps = _dp["dp_run"](ck)
    assert opt.steps == ref_steps and eps == pytest.approx(ref_eps, rel=1e-12)
    for a, b in zip(ref_w, model.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)


# --------------------------------------------------------------------------- circuit search


def _search_problem():
    from rml_fast.interp import LogitDiff, QueryCircuitSearch
    from rml_fast.models import TinyConfig, TinyTransformer

    model = TinyTransformer(TinyConfig(n_layers=1, d_model=16, n_heads=2, d_vocab=10), seed=0)
    args = (model, torch.tensor([[1, 2, 3]]), torch.tensor([[1, 4, 3]]), LogitDiff(-1, 2, (4,)))

    def make(**kw):
        return QueryCircuitSearch(n_edges=[3, 9], n_samples=4, sampler="noise", steps=3,
                                  random_state=0, progress=False, **kw)

    return make, args


def test_circuit_search_resumes_after_completed_views(tmp_path: Path, monkeypatch) -> None:
    import rml_fast.interp.query_circuits as qc

    make, args = _search_problem()
    ref = make().fit(*args)
    ck = tmp_path / "search.ckpt"
    real, calls = qc.eap_ig_scores, []

    def interrupted(*a, **kw):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*a, **kw)

    monkeypatch.setattr(qc, "eap_ig_scores", interrupted)
    with pytest.raises(KeyboardInterrupt):
        make().fit(*args, checkpoint=ck)
    calls.clear()
    monkeypatch.setattr(qc, "eap_ig_scores", lambda *a, **kw: (calls.append(1), real(*a, **kw))[1])
    got = make().fit(*args, checkpoint=ck)
    assert len(calls) == 2  # the two views scored before the interruption were re-used
    assert torch.equal(got.scores_, ref.scores_)
    assert np.array_equal(got.ndf_all_, ref.ndf_all_, equal_nan=True)
    assert torch.equal(got.circuit_, ref.circuit_)
    with pytest.raises(ValueError, match="another configuration"):
        make(noise_std=0.2).fit(*args, checkpoint=ck)
    search = make()
    search.random_state = None
    with pytest.raises(ValueError, match="random_state"):
        search.fit(*args, checkpoint=ck)


# --------------------------------------------------------------------------- Rashomon sweep

_SWEEP_SETUP = """
import numpy as np
from rml_fast.trees.falling import rashomon_sweep
rng = np.random.default_rng(0)
X = rng.integers(0, 2, size=(150, 6))
y = (rng.random(150) < 0.2 + 0.5 * X[:, 0] * X[:, 1]).astype(int)
GRID = ([0.005, 0.02], [1, 2, 3])
def sweep(checkpoint=None):
    return rashomon_sweep(X, y, *GRID, checkpoint=checkpoint, progress=False,
                          rashomon_multiplier=0.05)
"""
_sw: dict = {}
exec(_SWEEP_SETUP, _sw)


def _same_sweep(a: list, b: list) -> None:
    assert len(a) == len(b) == 6
    for ra, rb in zip(a, b, strict=True):
        assert {k: v for k, v in ra.items() if k != "objectives"} == {
            k: v for k, v in rb.items() if k != "objectives"}
        assert np.array_equal(ra["objectives"], rb["objectives"])


def test_rashomon_sweep_skips_finished_points(tmp_path: Path, monkeypatch) -> None:
    from rml_fast.trees import falling

    ref = _sw["sweep"]()
    ck = tmp_path / "sweep.ckpt"
    real, fits = falling.FallingRashomonSet.fit, []

    def counted(self, *a, **kw):
        fits.append((self.regularization, self.depth_budget))
        if len(fits) == 4 and stop:
            raise KeyboardInterrupt
        return real(self, *a, **kw)

    stop = True
    monkeypatch.setattr(falling.FallingRashomonSet, "fit", counted)
    with pytest.raises(KeyboardInterrupt):
        _sw["sweep"](ck)
    stop, fits[:] = False, []
    got = _sw["sweep"](ck)
    assert fits == [(0.02, 1), (0.02, 2), (0.02, 3)]  # the first three points were loaded
    _same_sweep(got, ref)
    rashomon_sweep = _sw["rashomon_sweep"]
    with pytest.raises(ValueError, match="another configuration"):
        rashomon_sweep(_sw["X"], _sw["y"], [0.005], [1], checkpoint=ck, progress=False)


def test_rashomon_sweep_sigint_mid_write_resumes(tmp_path: Path) -> None:
    ref = _sw["sweep"]()
    ck = tmp_path / "sweep.ckpt"
    _interrupt_child(_SWEEP_SETUP + f"\nsweep({str(ck)!r})\n", tmp_path, block_at=2,
                     sig=signal.SIGINT)
    import pickle

    assert len(pickle.loads(ck.read_bytes())["state"]) == 1  # the first point's file survived
    _same_sweep(_sw["sweep"](ck), ref)


# --------------------------------------------------------------------------- SFConvCNP training

_NP_SETUP = """
import torch
from rml_fast.neural_processes import SFConvCNP
from rml_fast.neural_processes.data import GPGenerator
from rml_fast.neural_processes.train import train

def np_run(checkpoint_dir=None):
    torch.manual_seed(0)
    model = SFConvCNP(embed_channels=8, feedforward_channels=8, num_layers=1, groups=2,
                      max_freq=2.0, freq_resolution=0.1)
    res = train(model, GPGenerator(batch_size=2, rng=1), epochs=3, batches_per_epoch=2,
                lr=1e-3, progress=False, checkpoint_dir=checkpoint_dir)
    return model, res
"""
_np: dict = {}
exec(_NP_SETUP, _np)


def test_sfconvcnp_training_killed_mid_write_resumes(tmp_path: Path) -> None:
    ref_model, _ = _np["np_run"]()
    ckdir = tmp_path / "np"
    ckdir.mkdir()
    # train() writes last.pt.tmp with torch.save and renames it: killed inside the second
    # write (epoch 2), so last.pt holds epoch 1 and a stale last.pt.tmp is left behind
    _interrupt_child(_NP_SETUP + f"\nnp_run({str(ckdir)!r})\n", tmp_path, block_at=2,
                     sig=signal.SIGKILL, hook="torch.save = _blocking(torch.save)")
    assert (ckdir / "last.pt").exists()
    model, res = _np["np_run"](ckdir)
    assert res.start_epoch == 1 and res.epochs_done == 3
    for a, b in zip(ref_model.parameters(), model.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)


# --------------------------------------------------------------------------- benchmark suite

_BENCH = '''
from pathlib import Path
from rml_fast.benchmarking import Suite
SUITE = "x"
HERE = Path(__file__).parent

def _body(suite, case):
    with open(HERE / "calls.log", "a") as f:
        f.write(f"{case['n']}\\n")
    suite.compare(case, lambda: sum(range(case["n"])), lambda: sum(range(2 * case["n"])),
                  peer_name="py", memory=False)
    if case["n"] == 3 and (HERE / "stop").exists():
        raise KeyboardInterrupt
    suite.skip(case, peer_name="absent", reason="not installed")

def run(quick=False, progress=True, repeat=5):
    return Suite(SUITE, quick=quick, progress=progress, repeat=repeat).run(
        [{"n": n} for n in range(1, 6)], _body)
'''
_TIMINGS = ("ours_median_s", "ours_q20_s", "ours_q80_s", "peer_median_s", "peer_q20_s",
            "peer_q80_s", "ratio", "ours_peak_mb", "peer_peak_mb", "machine")


def _load_run_all():
    spec = importlib.util.spec_from_file_location("rml_fast_run_all_t", ROOT / "benchmarks" /
                                                  "run_all.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_benchmark_suite_resumes_skipping_finished_cases(tmp_path: Path, monkeypatch) -> None:
    run_all = _load_run_all()
    bench = tmp_path / "bench_x.py"
    bench.write_text(_BENCH)
    monkeypatch.setattr(run_all, "available", lambda: {"x": bench})
    argv = ["x", "--quick", "--no-progress", "--repeat", "1"]

    def rows(path: Path) -> list:
        return [{k: v for k, v in r.items() if k not in _TIMINGS}
                for r in json.loads(path.read_text())]

    assert run_all.main([*argv, "--out", str(tmp_path / "ref")]) == 0
    ref = rows(tmp_path / "ref" / "x.quick.json")
    out = tmp_path / "out"
    (tmp_path / "stop").touch()
    (tmp_path / "calls.log").unlink()
    with pytest.raises(KeyboardInterrupt):
        run_all.main([*argv, "--out", str(out)])
    partial = json.loads((out / "x.quick.partial.json").read_text())
    assert len(partial["done"]) == 2  # cases 1 and 2; case 3's compare row is in "started"
    (tmp_path / "stop").unlink()
    (tmp_path / "calls.log").unlink()
    assert run_all.main([*argv, "--out", str(out), "--resume"]) == 0
    assert (tmp_path / "calls.log").read_text().split() == ["3", "4", "5"]
    assert rows(out / "x.quick.json") == ref  # equal except the timings
    assert not (out / "x.quick.partial.json").exists()
