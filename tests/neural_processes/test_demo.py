"""The equal-budget demo (``rml-fast demo np``) and its ConvCNP baselines."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from rml_fast.cli import main
from rml_fast.neural_processes.data import GPGenerator, batch_oracle_loglik
from rml_fast.neural_processes.demo import GridConvCNP, NeuralProcessesConvCNP, run_demo


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
