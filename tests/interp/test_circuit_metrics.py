"""logit_diff, NFS and NDF: closed forms and identities."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rml_fast.interp import LogitDiff, logit_diff, ndf, nfs, sizes_from_densities


@pytest.mark.parametrize(
    ("full", "circ", "corr", "expected"),
    [(4, 3, 0, 0.75), (4, 5, 0, 0.75), (4, 9, 0, 0.0), (4, -1, 0, 0.0), (4, 4, 0, 1.0),
     (4, 0, 0, 0.0), (-2, -1, 2, 0.75)],
)  # fmt: skip
def test_ndf_closed_forms(full, circ, corr, expected):
    assert float(ndf(full, circ, corr)) == pytest.approx(expected)


def test_ndf_is_clipped_deviation_of_nfs():
    rng = np.random.default_rng(0)
    full, circ, corr = rng.normal(size=(3, 1000)) * 3
    assert np.allclose(ndf(full, circ, corr), np.maximum(0, 1 - np.abs(1 - nfs(full, circ, corr))))
    v = ndf(full, circ, corr)
    assert ((v >= 0) & (v <= 1)).all()
    assert float(nfs(4.0, 5.0, 0.0)) == pytest.approx(1.25)


def test_degenerate_denominator_gives_nan():
    out = ndf([1.0, 1.0], [0.5, 0.5], [1.0, 0.0])
    assert np.isnan(out[0]) and out[1] == pytest.approx(0.5)
    assert np.isnan(nfs(1.0, 0.5, 1.0 + 1e-9))
    assert not np.isnan(nfs(1.0, 0.5, 1.0 + 1e-9, eps=0.0))


def test_ndf_accepts_tensors_and_validates():
    assert float(ndf(torch.tensor(4.0), torch.tensor(3.0), torch.tensor(0.0))) == pytest.approx(
        0.75
    )
    with pytest.raises(ValueError, match="l_circ"):
        ndf(1.0, float("nan"), 0.0)
    with pytest.raises(ValueError, match="broadcast"):
        ndf([1.0, 2.0], [1.0, 2.0, 3.0], 0.0)
    with pytest.raises(ValueError, match="eps"):
        ndf(1.0, 1.0, 0.0, eps=-1.0)


def test_logit_diff_matches_manual():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 5, 7, generator=gen)
    out = logit_diff(
        logits,
        torch.tensor([4, 2, -1]),
        torch.tensor([1, 2, 3]),
        torch.tensor([[0, 5], [6, 6], [1, 2]]),
    )
    manual = torch.stack([
        logits[0, 4, 1] - (logits[0, 4, 0] + logits[0, 4, 5]) / 2,
        logits[1, 2, 2] - logits[1, 2, 6],
        logits[2, 4, 3] - (logits[2, 4, 1] + logits[2, 4, 2]) / 2,
    ])  # fmt: skip
    torch.testing.assert_close(out, manual)
    metric = LogitDiff(pos=-1, answer=3, wrong=(1, 2))
    torch.testing.assert_close(metric(logits), logit_diff(logits, -1, 3, [1, 2]))
    torch.testing.assert_close(metric.from_rows(logits[:, -1]), metric(logits))
    assert metric.token_ids().tolist() == [1, 2, 3]
    with pytest.raises(TypeError, match="neg_ids"):
        logit_diff(logits, 0, 1, [0.5])
    with pytest.raises(ValueError, match="logits"):
        logit_diff(logits[0], 0, 1, [0])


def test_answer_position_is_python_style_and_range_checked():
    gen = torch.Generator().manual_seed(1)
    logits = torch.randn(2, 5, 7, generator=gen)
    # -P .. -1 count from the end, exactly like indexing
    for pos in (-5, -2, 0, 4):
        torch.testing.assert_close(
            logit_diff(logits, pos, 3, [1]), logits[:, pos, 3] - logits[:, pos, 1]
        )
    # past either end raises instead of wrapping around to another token
    for pos in (5, 6, -6, torch.tensor([4, 5]), torch.tensor([-6, 0])):
        with pytest.raises(ValueError, match=r"pos must be in \[-5, 5\)"):
            logit_diff(logits, pos, 3, [1])
        if isinstance(pos, int):
            with pytest.raises(ValueError, match=r"pos must be in \[-5, 5\)"):
                LogitDiff(pos, 3, (1,))(logits)
    with pytest.raises(TypeError, match="pos"):
        LogitDiff(1.5, 3, (1,))
    with pytest.raises(TypeError, match="pos"):
        LogitDiff(True, 3, (1,))


def test_sizes_from_densities():
    assert sizes_from_densities(110, [0.01, 0.05, 1.0]) == [1, 6, 110]
    with pytest.raises(ValueError, match="densities"):
        sizes_from_densities(110, [0.0])
