"""rml_fast.compat.opacus.PrivacyEngine against opacus' own PrivacyEngine.

The layer set is that of opacus' per-sample gradient tests (``tests/grad_samples``) restricted to
the layers both libraries support: Linear, Conv1d, Conv2d, Embedding, LayerNorm, GroupNorm,
RMSNorm. Layers opacus supports and rml_fast does not (Conv3d, EmbeddingBag, InstanceNorm,
MultiheadAttention, RNNs) must raise at make_private.
"""

from __future__ import annotations

import copy
import math

import pytest

pytest.importorskip("opacus")

import opacus
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from rml_fast.compat.opacus import PrivacyEngine, UnsupportedLayerError

pytestmark = [
    # opacus' own warnings (its PrivacyEngine without torchcsprng, its module backward hooks)
    pytest.mark.filterwarnings("ignore:Secure RNG turned off:UserWarning"),
    pytest.mark.filterwarnings("ignore:Full backward hook is firing:UserWarning"),
]

DT = torch.float64


class _Mean1(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mean(1)


class _Flat(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.flatten(1)


def _mlp() -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))
    return model, torch.randn(64, 6, dtype=DT), torch.randint(0, 3, (64,))


def _cnn() -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    model = nn.Sequential(
        nn.Conv2d(2, 4, 3, padding=1), nn.ReLU(), nn.GroupNorm(2, 4),
        nn.Conv2d(4, 4, 3, stride=2, groups=2), nn.Tanh(), _Flat(), nn.Linear(4 * 3 * 3, 3),
    )
    return model, torch.randn(64, 2, 7, 7, dtype=DT), torch.randint(0, 3, (64,))


def _conv1d() -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    model = nn.Sequential(nn.Conv1d(3, 5, 3, padding=1), nn.Tanh(), nn.RMSNorm([5, 6]),
                          _Flat(), nn.Linear(30, 3))
    return model, torch.randn(64, 3, 6, dtype=DT), torch.randint(0, 3, (64,))


def _embedding() -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    model = nn.Sequential(nn.Embedding(11, 6), nn.LayerNorm(6), nn.Linear(6, 5), nn.Tanh(),
                          _Mean1(), nn.Linear(5, 3))
    return model, torch.randint(0, 11, (64, 4)), torch.randint(0, 3, (64,))


CASES = {"mlp": _mlp, "cnn": _cnn, "conv1d_rmsnorm": _conv1d, "embedding_layernorm": _embedding}


def _build(case: str, seed: int = 0) -> tuple[nn.Module, TensorDataset]:
    torch.manual_seed(seed)
    model, x, y = CASES[case]()
    return model.to(DT), TensorDataset(x, y)


def _private(engine_cls, model, ds, *, nm=0.0, C=0.05, seed=0, lr=0.5, **kw):
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    loader = DataLoader(ds, batch_size=16, generator=torch.Generator().manual_seed(seed))
    return engine_cls(accountant="rdp").make_private(
        module=model, optimizer=opt, data_loader=loader, noise_multiplier=nm,
        max_grad_norm=C, **kw)


def _one_step(engine_cls, model, x, y, **kw):
    model, opt, _ = _private(engine_cls, model, TensorDataset(x, y), **kw)
    opt.zero_grad()
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return opt


@pytest.mark.parametrize("case", sorted(CASES))
def test_zero_noise_step_matches_opacus(case):
    model, ds = _build(case)
    x, y = ds.tensors[0][:13], ds.tensors[1][:13]  # not the expected batch size (16)
    ours, theirs = copy.deepcopy(model), copy.deepcopy(model)
    opt = _one_step(PrivacyEngine, ours, x, y)
    _one_step(opacus.PrivacyEngine, theirs, x, y)
    norms = opt.last_per_sample_norms
    assert norms.shape == (13,)
    assert (norms > 0.05).sum() >= 7  # clipping is active on most samples
    assert (norms < 0.05 * 1e3).all()
    moved = 0.0
    for (name, p), q, p0 in zip(ours.named_parameters(), theirs.parameters(),
                                model.parameters(), strict=True):
        step, ref = (p - p0).detach(), (q - p0).detach()
        # float64: the same update to ~1e-14 (1e-9 asserted; without opacus' +1e-6 in the clip
        # factor the gap would be ~1e-6, so this checks the semantics, not just the scale)
        assert torch.linalg.norm(step - ref) <= 1e-9 * torch.linalg.norm(ref) + 1e-15, name
        moved += float(torch.linalg.norm(ref))
    assert moved > 0


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_loop_with_poisson_loader_matches_opacus(reduction):
    """The unchanged opacus loop over the returned Poisson loaders (same generator seed)."""
    model, ds = _build("cnn", seed=1)
    results = []
    for cls in (PrivacyEngine, opacus.PrivacyEngine):
        m = copy.deepcopy(model)
        m, opt, loader = _private(cls, m, ds, seed=3, C=0.1, loss_reduction=reduction, lr=0.1)
        sizes = []
        for x, y in loader:
            opt.zero_grad()
            loss = nn.functional.cross_entropy(m(x), y, reduction=reduction)
            loss.backward()
            opt.step()
            sizes.append(len(x))
        results.append((torch.cat([p.detach().flatten() for p in m.parameters()]), sizes))
    (ours, s1), (theirs, s2) = results
    assert s1 == s2 and len(s1) == 4 and len(set(s1)) > 1  # the same Poisson batches
    start = torch.cat([p.detach().flatten() for p in model.parameters()])
    assert torch.linalg.norm(ours - theirs) <= 1e-9 * torch.linalg.norm(theirs - start)


def test_noise_std_matches_opacus_formula():
    torch.manual_seed(0)
    model = nn.Linear(50, 40).to(DT)  # 2040 parameters
    x, y = torch.randn(8, 50, dtype=DT), torch.randint(0, 40, (8,))
    nm, C = 1.3, 0.7
    # noise = update with noise - update without: std nm * C / expected_batch_size (64/4)
    clean = copy.deepcopy(model)
    _one_step(PrivacyEngine, clean, x, y, nm=0.0, C=C, lr=1.0)
    gen = torch.Generator().manual_seed(5)
    noisy = copy.deepcopy(model)
    ds = TensorDataset(torch.randn(64, 50, dtype=DT), torch.zeros(64, dtype=torch.long))
    m, opt, _ = _private(PrivacyEngine, noisy, ds, nm=nm, C=C, lr=1.0, noise_generator=gen)
    opt.zero_grad()
    nn.functional.cross_entropy(m(x), y).backward()
    opt.step()
    z = torch.cat([(p - q).detach().flatten() for p, q in zip(clean.parameters(),
                                                               noisy.parameters(), strict=True)])
    expected = nm * C / 16
    n = z.numel()
    # sample std of n normals: relative standard error ~ 1/sqrt(2n); 5 sigma
    assert abs(float(z.std()) / expected - 1) < 5 / math.sqrt(2 * n)
    assert abs(float(z.mean())) < 5 * expected / math.sqrt(n)
    # reproducible from the generator's seed, different for another seed
    again = copy.deepcopy(model)
    m2, opt2, _ = _private(PrivacyEngine, again, ds, nm=nm, C=C, lr=1.0,
                           noise_generator=torch.Generator().manual_seed(5))
    opt2.zero_grad()
    nn.functional.cross_entropy(m2(x), y).backward()
    opt2.step()
    assert all(torch.equal(p, q) for p, q in zip(again.parameters(), noisy.parameters(),
                                                 strict=True))


@pytest.mark.parametrize(("q", "sigma", "steps"), [(0.01, 1.0, 1000), (0.05, 2.0, 200)])
def test_epsilon_against_opacus_accountants(q, sigma, steps):
    from opacus.accountants import PRVAccountant, RDPAccountant

    ours = PrivacyEngine().accountant
    prv, rdp = PRVAccountant(), RDPAccountant()
    for acc in (prv, rdp):
        acc.history = [(sigma, q, steps)]
    ours.history = [(sigma, q, steps)]
    eps = ours.get_epsilon(1e-5)
    eps_prv, eps_rdp = prv.get_epsilon(1e-5), rdp.get_epsilon(1e-5)
    assert eps <= eps_rdp  # RDP is a looser bound
    assert abs(eps - eps_prv) <= 0.02 * eps_prv  # PRV: opacus' eps_error=0.01 plus its grid


def test_epsilon_after_training_steps():
    model, ds = _build("mlp")
    engine = PrivacyEngine()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(ds, batch_size=16, generator=torch.Generator().manual_seed(0))
    m, opt, loader = engine.make_private(module=model, optimizer=opt, data_loader=loader,
                                         noise_multiplier=1.0, max_grad_norm=1.0)
    assert engine.get_epsilon(1e-5) == 0.0
    for x, y in loader:
        opt.zero_grad()
        nn.functional.cross_entropy(m(x), y).backward()
        opt.step()
    assert engine.accountant.history == [(1.0, 0.25, 4)]
    from opacus.accountants import RDPAccountant

    rdp = RDPAccountant()
    rdp.history = [(1.0, 0.25, 4)]
    assert 0 < engine.get_epsilon(1e-5) <= rdp.get_epsilon(1e-5)


def test_make_private_with_epsilon_meets_target():
    model, ds = _build("mlp")
    engine = PrivacyEngine()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(ds, batch_size=16)
    _, opt, loader = engine.make_private_with_epsilon(
        module=model, optimizer=opt, data_loader=loader, target_epsilon=3.0,
        target_delta=1e-5, epochs=2, max_grad_norm=1.0)
    sigma = opt.noise_multiplier
    engine.accountant.history = [(sigma, 0.25, 8)]
    assert 0.97 * 3.0 <= engine.get_epsilon(1e-5) <= 3.0
    with pytest.raises(ValueError, match="already spent"):
        engine.make_private_with_epsilon(
            module=nn.Linear(6, 3).to(DT), optimizer=torch.optim.SGD(nn.Linear(1, 1).parameters()),
            data_loader=loader, target_epsilon=3.0, target_delta=1e-5, epochs=1,
            max_grad_norm=1.0)


@pytest.mark.parametrize("layer", [
    nn.Conv3d(1, 2, 2), nn.EmbeddingBag(5, 3), nn.InstanceNorm1d(3, affine=True),
    nn.MultiheadAttention(4, 2), nn.LSTM(3, 4), nn.BatchNorm1d(3),
])
def test_unsupported_layer_raises(layer):
    model = nn.Sequential(nn.Linear(3, 3), layer)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(8, 3)), batch_size=4)
    with pytest.raises(UnsupportedLayerError, match=rf"\({type(layer).__name__}\)"):
        PrivacyEngine().make_private(module=model, optimizer=opt, data_loader=loader,
                                     noise_multiplier=1.0, max_grad_norm=1.0)


def test_bad_arguments_raise():
    model, ds = _build("mlp")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(ds, batch_size=16)
    kw = dict(module=model, optimizer=opt, data_loader=loader, noise_multiplier=1.0,
              max_grad_norm=1.0)
    for bad, match in [({"max_grad_norm": 0.0}, "max_grad_norm"),
                       ({"max_grad_norm": [1.0, 1.0]}, "max_grad_norm"),
                       ({"noise_multiplier": -1.0}, "noise_multiplier"),
                       ({"clipping": "per_layer"}, "clipping"),
                       ({"loss_reduction": "max"}, "loss_reduction"),
                       ({"grad_sample_mode": "ghost"}, "grad_sample_mode"),
                       ({"batch_first": False}, "batch_first")]:
        with pytest.raises(ValueError, match=match):
            PrivacyEngine().make_private(**{**kw, **bad})
    with pytest.raises(ValueError, match="optimizer"):
        PrivacyEngine().make_private(**{**kw, "optimizer": torch.optim.SGD(
            nn.Linear(2, 2).parameters(), lr=0.1)})
    with pytest.raises(ValueError, match="secure_mode"):
        PrivacyEngine(secure_mode=True)
    with pytest.raises(ValueError, match="accountant"):
        PrivacyEngine(accountant="moments")


def test_step_without_backward_and_accumulation_raise():
    model, ds = _build("mlp")
    m, opt, _ = _private(PrivacyEngine, model, ds)
    x, y = ds.tensors[0][:5], ds.tensors[1][:5]
    with pytest.raises(ValueError, match="no per-sample gradients"):
        opt.step()
    nn.functional.cross_entropy(m(x), y).backward()
    with pytest.raises(ValueError, match="accumulation"):
        nn.functional.cross_entropy(m(x), y).backward()
    opt.zero_grad()
    nn.functional.cross_entropy(m(x), y).backward()
    before = [p.detach().clone() for p in model.parameters()]
    opt.step()
    assert any(not torch.equal(a, p) for a, p in zip(before, model.parameters(), strict=True))


def test_import_rml_fast_does_not_import_opacus():
    import subprocess
    import sys

    code = "import sys, rml_fast; assert 'opacus' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_backward_writes_no_nonprivate_grad_and_inplace_output_raises():
    model, ds = _build("mlp")
    m, opt, _ = _private(PrivacyEngine, model, ds)
    x, y = ds.tensors[0][:5], ds.tensors[1][:5]
    opt.zero_grad()
    nn.functional.cross_entropy(m(x), y).backward()
    assert all(p.grad is None and p.requires_grad for p in model.parameters())
    opt.step()
    assert all(p.grad is not None for p in model.parameters())
    # in-place activations: after an inner layer the hook sees the gradient w.r.t. the value
    # the layer returned (the same update as out-of-place); after a layer whose output is a
    # leaf of the graph (the first one) autograd refuses the in-place operation
    res = []
    for inplace in (False, True):
        torch.manual_seed(0)
        net = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 8), nn.ReLU(inplace=inplace),
                            nn.Linear(8, 3), nn.ReLU(inplace=inplace)).to(DT)
        _one_step(PrivacyEngine, net, x, y)
        res.append(torch.cat([p.detach().flatten() for p in net.parameters()]))
    torch.manual_seed(0)
    ref = torch.cat([p.detach().flatten() for p in nn.Sequential(
        nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 3)).to(DT).parameters()])
    assert not torch.equal(res[0], ref)  # the step moved the parameters
    assert torch.equal(res[0], res[1])
    first = nn.Sequential(nn.Linear(6, 8), nn.ReLU(inplace=True), nn.Linear(8, 3)).to(DT)
    m, opt, _ = _private(PrivacyEngine, first, ds)
    with pytest.raises(RuntimeError, match="in-place"):
        m(x)


def test_empty_poisson_batch_adds_noise_only():
    model, ds = _build("cnn")
    m, opt, _ = _private(PrivacyEngine, model, ds, nm=1.0, C=1.0, lr=1.0,
                         noise_generator=torch.Generator().manual_seed(0))
    x, y = ds.tensors[0][:0], ds.tensors[1][:0]  # an empty Poisson batch
    opt.zero_grad()
    nn.functional.cross_entropy(m(x), y, reduction="sum").backward()
    before = torch.cat([p.detach().flatten() for p in model.parameters()])
    opt.step()
    z = torch.cat([p.detach().flatten() for p in model.parameters()]) - before
    assert opt.last_per_sample_norms.shape == (0,)
    expected = 1.0 * 1.0 / 16  # noise_multiplier * max_grad_norm / expected_batch_size
    assert abs(float(z.std()) / expected - 1) < 5 / math.sqrt(2 * z.numel())
