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
    AdamW lr 4e-3, batch 32, cosine decay) and a ConvCNP (AdamW lr 2e-3, batch 16, constant, as in
    earlier rounds) trained for the same 60 s of wall clock each on GP-RBF tasks (one torch
    thread; the models take turns step by step, so load changes on a shared machine hit both
    alike), evaluated on 128 held-out tasks with 128 targets. The baseline is the
    ``neuralprocesses`` package's ConvCNP (UNet 4x32, 32 points per unit) where it is installed,
    else the in-repo grid ConvCNP.

    Stated margins: the SFConvCNP's mean per-point log-likelihood is within 0.6 nats of the exact
    GP oracle (an untrained model is ~1.9 nats below it), does not exceed the oracle by more
    than the test set's sampling noise (0.05), and is **not worse than the ConvCNP's**, up to
    0.03 nats of evaluation noise: twice the largest standard error of the paired per-task
    difference of the two models over the 128 held-out tasks (0.010-0.016 in the runs below).

    Measured (shared 2-core dev machine, load 1-3, oracle 0.257, one thread, seeds 0-4 of
    ``run_demo``): SFConvCNP 0.131 / 0.121 / 0.135 / 0.130 / 0.125 against the neuralprocesses
    ConvCNP 0.087 / 0.070 / 0.091 / 0.083 / 0.057 (3759-4074 and 3865-4252 steps): ahead by
    0.043 / 0.052 / 0.044 / 0.047 / 0.068 (3.0-4.4 standard errors); this test itself (seed 0)
    0.129 against 0.081 -- those runs trained the ConvCNP on a constant learning rate. Both
    models now get the same cosine schedule (``run_demo``'s default): the test then gave
    0.122 against 0.120, a tie within the noise, which "not worse" accepts. Before round 5
    (F=50, no set-convolution features, lr 2e-3, batch 16, constant) the SFConvCNP was
    0.07-0.10 nats behind (docs/neural_processes.md, "Demo")."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import neuralprocesses  # noqa: F401
        baseline = "convcnp-neuralprocesses"
    except ImportError:
        baseline = "convcnp-grid"
    rows = run_demo(60.0, baselines=[baseline], test_batches=8, num_threads=1)
    print(format_table(rows))
    sf, conv = rows
    assert sf.model == "SFConvCNP" and conv.model == baseline
    assert sf.oracle_loglik - 0.6 < sf.loglik < sf.oracle_loglik + 0.05
    assert sf.loglik > conv.loglik - 0.03
