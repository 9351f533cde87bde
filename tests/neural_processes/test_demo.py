"""The equal-budget demo (``rml-fast demo np``) and its ConvCNP baselines."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from rml_fast.cli import main
from rml_fast.neural_processes.data import GPGenerator, batch_oracle_loglik
from rml_fast.neural_processes.demo import (
    DEMO_CONFIG,
    GridConvCNP,
    NeuralProcessesConvCNP,
    _Stepper,
    format_table,
    run_demo,
    train_for,
)


def test_cli_demo_np_tiny_budget(tmp_path, capsys) -> None:
    pytest.importorskip("matplotlib")
    png = tmp_path / "bands.png"
    rc = main(
        [
            "demo", "np", "--budget", "0.5", "--baselines", "convcnp-grid",
            "--test-batches", "1", "--out", str(png),
        ]
    )
    assert rc == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["model", "params", "steps", "test", "loglik", "GP", "oracle"]
    rows = {line.split()[0]: line.split()[1:] for line in out[1:3]}
    assert set(rows) == {"SFConvCNP", "convcnp-grid"}
    # The oracle column is the exact GP log-likelihood of the held-out tasks (seed 2026).
    test = GPGenerator("rbf", batch_size=16, num_target=128, rng=2026).batches(1)
    oracle = batch_oracle_loglik(test[0])
    for params, steps, ll, orc in rows.values():
        assert int(params) > 1000 and int(steps) >= 1
        assert float(orc) == pytest.approx(oracle, abs=1e-3)
        assert float(ll) < float(orc)  # half a second of training is far from the oracle
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert out[-1] == f"wrote {png}"


def test_cli_demo_rejects_unknown_names(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["demo", "nope"])
    with pytest.raises(ValueError, match="baselines"):
        run_demo(0, baselines=["unet"], test_batches=1)
    with pytest.raises(ValueError, match="budget"):
        run_demo(-1.0, baselines=[], test_batches=1)


def test_cosine_schedule_follows_the_models_own_time() -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(1, 2)  # a stand-in: the stepper only needs a Normal from the model

    class Tiny(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = model

        def forward(self, xc, yc, xq):
            out = self.lin(xq)
            return torch.distributions.Normal(out[..., :1], torch.nn.functional.softplus(out[..., 1:]))

    st = _Stepper(Tiny(), lr=2e-3, batch_size=2, rng=0, kernel="rbf", schedule="cosine", budget=10.0)
    lrs = []
    for seconds in (0.0, 2.5, 5.0, 10.0, 20.0):
        st.seconds = seconds
        st.step()
        lrs.append(st.opt.param_groups[0]["lr"])
    expected = [2e-3 * max(0.5 * (1 + np.cos(np.pi * min(s / 10, 1))), 0.01) for s in (0, 2.5, 5, 10, 20)]
    np.testing.assert_allclose(lrs, expected, rtol=1e-12)
    const = _Stepper(Tiny(), lr=2e-3, batch_size=2, rng=0, kernel="rbf", budget=10.0)
    const.seconds = 9.0
    const.step()
    assert const.opt.param_groups[0]["lr"] == 2e-3
    with pytest.raises(ValueError, match="schedules"):
        train_for([Tiny(), Tiny()], 0.0, schedules=["cosine"])
    with pytest.raises(ValueError, match="schedules"):
        train_for([Tiny()], 0.0, schedules=["linear"])
    assert train_for([Tiny(), Tiny()], 0.0, schedules=["cosine", "constant"]) == [1, 1]
    with pytest.raises(ValueError, match="one per model"):
        train_for([Tiny(), Tiny()], 0.0, lr=[1e-3])
    with pytest.raises(ValueError, match="batch_size"):
        train_for([Tiny()], 0.0, batch_size=[0])

    class Recorder(Tiny):
        def forward(self, xc, yc, xq):
            self.seen = xc.shape[0]
            return super().forward(xc, yc, xq)

    a, b = Recorder(), Recorder()
    assert train_for([a, b], 0.0, lr=[1e-3, 3e-3], batch_size=[4, 2]) == [1, 1]
    assert (a.seen, b.seen) == (4, 2)
    with pytest.raises(ValueError, match="baseline_schedule"):
        run_demo(0, baselines=[], test_batches=1, baseline_schedule="step")


class _TinyNP(torch.nn.Module):
    """A stand-in model: the stepper only needs a Normal from it."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(1, 2)

    def forward(self, xc, yc, xq):
        out = self.lin(xq)
        return torch.distributions.Normal(out[..., :1], torch.nn.functional.softplus(out[..., 1:]))


def test_step_budget_trains_exact_steps_with_cosine_over_steps() -> None:
    Tiny = _TinyNP
    a, b = Tiny(), Tiny()
    assert train_for([a, b], 1e9, steps=[3, 5], schedules=["cosine", "constant"]) == [3, 5]
    st = _Stepper(Tiny(), lr=2e-3, batch_size=2, rng=0, kernel="rbf", schedule="cosine",
                  max_steps=4)
    lrs = []
    for _ in range(4):
        st.step()
        lrs.append(st.opt.param_groups[0]["lr"])
    expected = [2e-3 * max(0.5 * (1 + np.cos(np.pi * k / 4)), 0.01) for k in range(4)]
    np.testing.assert_allclose(lrs, expected, rtol=1e-12)
    with pytest.raises(ValueError, match="steps"):
        train_for([Tiny(), Tiny()], 0.0, steps=[1])
    with pytest.raises(ValueError, match="steps"):
        train_for([Tiny()], 0.0, steps=0)


def test_demo_config_is_the_documented_deviation() -> None:
    # the demo's SFConvCNP: the paper's blocks with a shorter frequency grid and the PROPOSED
    # set-convolution features; the paper's preset stays without them
    from rml_fast.neural_processes import SFConvCNP

    m = SFConvCNP(**DEMO_CONFIG)
    assert m.grid.n_freq == 25 and m.setconv_lengthscale is not None
    assert SFConvCNP.from_config("sfconvcnp-1d", num_layers=1).grid.n_freq == 50


def test_grid_convcnp_is_translation_equivariant() -> None:
    torch.manual_seed(0)
    m = GridConvCNP(channels=8, layers=3).double()
    b = GPGenerator(batch_size=2, rng=3, dtype=torch.float64).sample()
    d0 = m(b.xc, b.yc, b.xq)
    d1 = m(b.xc + 0.75, b.yc, b.xq + 0.75)  # 0.75 * 32 points per unit: a whole number of cells
    torch.testing.assert_close(d1.loc, d0.loc, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(d1.scale, d0.scale, rtol=1e-9, atol=1e-9)


def test_neuralprocesses_wrapper_matches_package_loglik() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        nps = pytest.importorskip("neuralprocesses.torch")
    torch.manual_seed(0)
    m = NeuralProcessesConvCNP(points_per_unit=16, unet_channels=(8, 8))
    b = GPGenerator(batch_size=3, num_context=7, num_target=11, rng=4).sample()
    d = m(b.xc, b.yc, b.xq)
    assert d.loc.shape == b.yq.shape
    ours = d.log_prob(b.yq).mean(dim=(1, 2))
    t = lambda a: a.transpose(1, 2)  # noqa: E731
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = nps.loglik(m.model, t(b.xc), t(b.yc), t(b.xq), t(b.yq), normalise=True)
    np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol=1e-5)


@pytest.mark.slow
def test_sfconvcnp_vs_convcnp_equal_budget_near_gp_oracle() -> None:
    """The demo's SFConvCNP (``DEMO_CONFIG``: C=32, L=2, F=25, PROPOSED set-convolution features;
    AdamW lr 4e-3, batch 32, cosine decay) and the in-repo grid ConvCNP (AdamW lr 2e-3, batch 16,
    cosine decay) trained for the same **number of steps** (1500 each, one torch thread), then
    evaluated on 128 held-out GP-RBF tasks with 128 targets.

    A step budget, not the demo's wall-clock budget: the result must not depend on the machine's
    speed or load (an earlier version of this test trained for 60 s each and failed on a loaded
    machine, where the models got 122 steps instead of ~4000).

    Stated margins: the SFConvCNP's mean per-point log-likelihood is within 0.6 nats of the exact
    GP oracle (an untrained model is ~1.9 nats below it), does not exceed the oracle by more
    than the test set's sampling noise (0.05), and is **not worse than the ConvCNP's**, up to
    0.03 nats of evaluation noise (about twice the largest standard error of the paired per-task
    difference of the two models over the 128 held-out tasks, 0.010-0.016 in earlier runs).

    Measured (2-core machine, heavily loaded, seed 0): SFConvCNP 0.063 against the grid ConvCNP
    0.066, oracle 0.257 (a tie within the noise, which "not worse" accepts); 60 s wall-clock
    runs on a quiet machine gave 0.122-0.135 against the neuralprocesses ConvCNP's 0.057-0.120
    (docs/neural_processes.md, "Demo")."""
    rows = run_demo(0.0, baselines=["convcnp-grid"], test_batches=8, num_threads=1, steps=1500,
                    progress=False)
    print(format_table(rows))
    sf, conv = rows
    assert sf.model == "SFConvCNP" and conv.model == "convcnp-grid"
    assert sf.steps == conv.steps == 1500
    assert sf.oracle_loglik - 0.6 < sf.loglik < sf.oracle_loglik + 0.05
    assert sf.loglik > conv.loglik - 0.03
