"""TopK SAE: exact top-k sparsity, training that improves reconstruction, early stopping,
exact resume from a checkpoint, planted-dictionary recovery and input validation."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from rml_fast.interp.sae import TopKSAE, train_topk_sae


def _planted(n=3000, d=12, m=24, p=0.08, seed=0):
    g = torch.Generator().manual_seed(seed)
    atoms = torch.randn(m, d, generator=g)
    atoms = atoms / atoms.norm(dim=1, keepdim=True)
    codes = torch.rand(n, m, generator=g) * (torch.rand(n, m, generator=g) < p)
    return codes @ atoms, atoms


def test_topk_exactly_k_active_and_support_is_top_k():
    sae = TopKSAE(10, 40, k=5, relu=False, seed=3)
    x = torch.randn(64, 10)
    z = sae.encode(x)
    assert ((z != 0).sum(-1) == 5).all()
    pre = sae.pre_activations(x)
    top = pre.topk(5, dim=-1).indices.sort(-1).values
    assert torch.equal((z != 0).nonzero()[:, 1].view(64, 5), top)
    assert torch.allclose(z.gather(-1, top), pre.gather(-1, top))
    # with the ReLU: at most k, and the kept values are the positive top-k pre-activations
    sae.relu = True
    zr = sae.encode(x)
    assert ((zr != 0).sum(-1) <= 5).all()
    assert torch.allclose(zr.gather(-1, top), torch.relu(pre.gather(-1, top)))
    assert torch.allclose(sae(x), zr @ sae.W_dec + sae.b_dec)


def test_training_improves_reconstruction_and_keeps_unit_decoder_rows():
    x, _ = _planted()
    sae = train_topk_sae(x, n_features=24, k=3, steps=400, lr=3e-3, rng=0, eval_every=100)
    mses = [m for _, m in sae.history_]
    assert mses[-1] < 0.25 * mses[0]
    assert all(b <= a * 1.05 for a, b in itertools.pairwise(mses))
    assert torch.allclose(sae.W_dec.norm(dim=1), torch.ones(24), atol=1e-5)
    with torch.no_grad():
        assert sae.mse(x) == pytest.approx(float(((sae(x) - x) ** 2).mean()), rel=1e-5)


def test_planted_dictionary_is_recovered():
    x, atoms = _planted(n=4000, d=12, m=16, p=0.1, seed=1)
    sae = train_topk_sae(x, n_features=32, k=3, steps=1200, lr=3e-3, rng=1, eval_every=400)
    cos = (atoms @ sae.W_dec.detach().T).abs().max(1).values  # best learned match per atom
    assert float((cos > 0.9).float().mean()) >= 0.75


def test_target_mse_stops_early():
    x, _ = _planted()
    full = train_topk_sae(x, n_features=24, k=3, steps=400, lr=3e-3, rng=0, eval_every=50)
    target = full.history_[3][1]  # reached after 150 steps
    sae = train_topk_sae(x, n_features=24, k=3, steps=400, lr=3e-3, rng=0, eval_every=50,
                         target_mse=target)  # fmt: skip
    assert sae.n_steps_ == 150 and sae.history_[-1][1] <= target
    assert torch.allclose(sae.W_dec, train_topk_sae(
        x, n_features=24, k=3, steps=150, lr=3e-3, rng=0, eval_every=50).W_dec)  # fmt: skip


def test_resume_from_checkpoint_equals_uninterrupted_run(tmp_path):
    x, _ = _planted(n=1000)
    kw = {"n_features": 24, "k": 3, "lr": 3e-3, "rng": 7, "batch_size": 64, "eval_every": 10,
          "checkpoint_every": 10}  # fmt: skip
    ref = train_topk_sae(x, steps=60, **kw)
    ck = tmp_path / "sae.pt"
    part = train_topk_sae(x, steps=25, checkpoint=ck, **kw)
    assert part.n_steps_ == 25 and ck.is_file()
    resumed = train_topk_sae(x, steps=60, checkpoint=ck, **kw)
    assert resumed.n_steps_ == 60
    for a, b in zip(ref.parameters(), resumed.parameters(), strict=True):
        assert torch.allclose(a, b, atol=1e-6)
    # a finished checkpoint is loaded as is
    again = train_topk_sae(x, steps=60, checkpoint=ck, **kw)
    assert torch.equal(again.W_enc, resumed.W_enc)
    with pytest.raises(ValueError, match=r"different configuration.*k"):
        train_topk_sae(x, steps=60, checkpoint=ck, **{**kw, "k": 4})


def test_seed_reproducible_and_numpy_input():
    x, _ = _planted(n=500)
    a = train_topk_sae(x, n_features=16, k=2, steps=30, rng=5)
    b = train_topk_sae(x.numpy().astype(np.float64), n_features=16, k=2, steps=30,
                       rng=np.random.default_rng(5))  # fmt: skip
    c = train_topk_sae(x, n_features=16, k=2, steps=30, rng=6)
    assert torch.allclose(a.W_enc, b.W_enc, atol=1e-6)
    assert not torch.allclose(a.W_enc, c.W_enc)


@pytest.mark.parametrize(
    ("acts", "kw", "err", "match"),
    [
        (torch.randn(10), {}, ValueError, "shape \\(n, d\\)"),
        (torch.full((4, 3), float("nan")), {}, ValueError, "finite"),
        (torch.ones(4, 3, dtype=torch.long), {}, TypeError, "floats"),
        ([[1.0, 2.0]], {}, TypeError, "torch.Tensor or ndarray"),
        (torch.randn(4, 3), {"k": 9}, ValueError, "k must be <= n_features"),
        (torch.randn(4, 3), {"steps": -1}, ValueError, "steps"),
        (torch.randn(4, 3), {"lr": 0.0}, ValueError, "lr"),
        (torch.randn(4, 3), {"target_mse": -1.0}, ValueError, "target_mse"),
    ],
)
def test_bad_input(acts, kw, err, match):
    with pytest.raises(err, match=match):
        train_topk_sae(acts, **{"n_features": 8, "k": 2, "steps": 1, **kw})


def test_module_bad_shapes():
    sae = TopKSAE(4, 6, k=2, seed=0)
    with pytest.raises(ValueError, match="last dimension d=4"):
        sae.encode(torch.randn(3, 5))
    with pytest.raises(ValueError, match="n_features=6"):
        sae.decode(torch.randn(3, 4))
    with pytest.raises(ValueError, match="k must be"):
        TopKSAE(4, 6, k=7)
