"""Per-sample norms, coupled norms and clip-and-accumulate vs brute force (vmap(grad)) and opacus."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from torch.func import functional_call, grad, vmap

from rml_fast.privacy.clipping import (
    ClippingEngine,
    UnsupportedLayerError,
    clip_and_accumulate,
    coupled_norms,
    per_sample_grad_norms,
)
from rml_fast.privacy.grad_norms import LAYER_RULES

B = 6


def _own(output: torch.Tensor, _target: object) -> torch.Tensor:
    """The loss of the test models: their output is already the per-sample loss."""
    return output


def _squeezed(output: torch.Tensor, _target: object) -> torch.Tensor:
    return output.squeeze(1)


class Head(nn.Module):
    """A per-sample loss head: a fixed nonlinear readout of a layer's output."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.inner(x)
        return (torch.tanh(out) * torch.cos(out)).reshape(out.shape[0], -1).sum(1)


class SeqModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(11, 8, padding_idx=0)
        self.ln = nn.LayerNorm(8)
        self.fc1 = nn.Linear(8, 6)
        self.fc2 = nn.Linear(6, 3, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.ln(self.emb(ids))
        return torch.sin(self.fc2(torch.tanh(self.fc1(h)))).sum((1, 2))


class ConvModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(3, 4, 3, padding=1)
        self.gn = nn.GroupNorm(2, 4)
        self.c2 = nn.Conv2d(4, 4, 3, stride=2, groups=2, padding_mode="reflect", padding=1)
        self.fc = nn.Linear(4 * 4 * 4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.gn(self.c1(x)))
        h = torch.tanh(self.c2(h))
        return torch.sin(self.fc(h.flatten(1))).sum(1)


def _cases() -> dict[str, tuple[nn.Module, torch.Tensor]]:
    torch.manual_seed(0)
    ids = torch.randint(0, 11, (B, 9))
    ids[:, 3] = ids[:, 5]  # repeated tokens within a sample
    ids[0, 0] = 0  # padding index
    cases = {
        "linear": (Head(nn.Linear(5, 3)), torch.randn(B, 5)),
        "linear_seq": (Head(nn.Linear(5, 3)), torch.randn(B, 7, 5)),
        "linear_seq2": (Head(nn.Linear(4, 4, bias=False)), torch.randn(B, 2, 3, 4)),
        "conv1d": (Head(nn.Conv1d(3, 4, 3, padding=2, dilation=2, stride=2)), torch.randn(B, 3, 11)),
        "conv1d_groups": (Head(nn.Conv1d(4, 6, 2, groups=2)), torch.randn(B, 4, 7)),
        "conv2d": (Head(nn.Conv2d(2, 3, (3, 5), padding="same", dilation=(2, 1))), torch.randn(B, 2, 6, 5)),
        "conv2d_stride": (Head(nn.Conv2d(2, 3, 3, stride=2, padding=1, padding_mode="circular")),
                          torch.randn(B, 2, 7, 6)),
        "embedding": (Head(nn.Embedding(11, 5, padding_idx=0)), ids),
        "layernorm": (Head(nn.LayerNorm((3, 4))), torch.randn(B, 2, 3, 4)),
        "groupnorm": (Head(nn.GroupNorm(2, 4)), torch.randn(B, 4, 3, 3)),
        "rmsnorm": (Head(nn.RMSNorm(5)), torch.randn(B, 4, 5)),
        "seq_model": (SeqModel(), ids),
        "conv_model": (ConvModel(), torch.randn(B, 3, 8, 8)),
    }
    for model, _ in cases.values():  # make affine parameters non-trivial
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.3 * torch.randn_like(p))
    return cases


CASES = _cases()


def _prep(name: str, dtype: torch.dtype) -> tuple[nn.Module, torch.Tensor]:
    model, x = CASES[name]
    model = copy.deepcopy(model).to(dtype)
    return model, (x.to(dtype) if x.is_floating_point() else x)


def _per_sample_grads(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Brute force: (B, n_params) flattened per-sample gradients by vmap(grad)."""
    params = {k: v.detach() for k, v in model.named_parameters()}

    def loss(p: dict[str, torch.Tensor], xi: torch.Tensor) -> torch.Tensor:
        return functional_call(model, p, (xi.unsqueeze(0),)).sum()

    g = vmap(grad(loss), in_dims=(None, 0))(params, x)
    return torch.cat([g[k].reshape(x.shape[0], -1) for k in params], 1)


def _rtol(dtype: torch.dtype) -> float:
    return 1e-5 if dtype == torch.float32 else 1e-10


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("mode", ["ghost", "instantiate", "auto"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_norms_match_brute_force(name: str, mode: str, dtype: torch.dtype) -> None:
    model, x = _prep(name, dtype)
    expected = _per_sample_grads(model, x).double().norm(dim=1)
    norms = per_sample_grad_norms(model, _own, x, mode=mode)
    assert norms.dtype == torch.float64
    torch.testing.assert_close(norms, expected, rtol=_rtol(dtype), atol=0)
    low = per_sample_grad_norms(model, _own, x, mode=mode, memory="low")
    torch.testing.assert_close(low, expected, rtol=_rtol(dtype), atol=0)


@pytest.mark.parametrize("memory", ["fast", "low"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("mode", ["ghost", "instantiate"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_clip_and_accumulate_matches_brute_force(name: str, mode: str, dtype: torch.dtype,
                                                 memory: str) -> None:
    model, x = _prep(name, dtype)
    G = _per_sample_grads(model, x)
    norms = G.norm(dim=1)
    C = float(norms.median())
    expected = (G * (C / norms).clamp(max=1.0)[:, None]).sum(0)
    clip_and_accumulate(model, _own, x, max_norm=C, mode=mode, memory=memory)
    got = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
    assert got.dtype == dtype
    torch.testing.assert_close(got, expected, rtol=_rtol(dtype) * 10, atol=_rtol(dtype) * 10)


@pytest.mark.parametrize("mode", ["ghost", "instantiate"])
@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("scale", [1e-1, 1e-6])
def test_coupled_norms_match_brute_force(name: str, mode: str, scale: float) -> None:
    """||g_i(x) - g_i(x')|| stays accurate relative to itself when x' is very close to x."""
    model, x = _prep(name, torch.float64)
    prev = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in prev.parameters():
            p.add_(scale * torch.randn(p.shape, generator=gen, dtype=p.dtype))
    expected = (_per_sample_grads(model, x) - _per_sample_grads(prev, x)).norm(dim=1)
    expected_g = _per_sample_grads(model, x).norm(dim=1)
    norms, diffs = coupled_norms(model, prev, _own, x, mode=mode)
    torch.testing.assert_close(norms, expected_g, rtol=1e-10, atol=0)
    # relative to the difference itself: the naive ||G||^2 + ||G'||^2 - 2<G, G'> loses
    # ~ eps * ||G||^2 / ||G - G'||^2 = 1e-4 at scale 1e-6 and would fail this
    torch.testing.assert_close(diffs, expected, rtol=1e-7, atol=0)


def test_coupled_norms_float32_small_difference() -> None:
    model, x = _prep("seq_model", torch.float32)
    prev = copy.deepcopy(model)
    with torch.no_grad():
        for p in prev.parameters():
            p.mul_(1 + 1e-3)
    m64, p64 = copy.deepcopy(model).double(), copy.deepcopy(prev).double()
    expected = (_per_sample_grads(m64, x) - _per_sample_grads(p64, x)).norm(dim=1)
    _, diffs = coupled_norms(model, prev, _own, x, mode="ghost")
    torch.testing.assert_close(diffs, expected, rtol=1e-3, atol=0)


def _shifted_pair(name: str):
    """The float64 model ``name``, a copy at 0.9 x its parameters, the batch, both per-sample
    gradient sets and two weight vectors (the two passes of a coupled DP-C4 step)."""
    model, x = _prep(name, torch.float64)
    prev = copy.deepcopy(model)
    with torch.no_grad():
        for p in prev.parameters():
            p.mul_(0.9)
    G, G2 = _per_sample_grads(model, x), _per_sample_grads(prev, x)
    w = torch.linspace(0.1, 1.0, B, dtype=torch.float64)
    w2 = -torch.linspace(1.0, 0.2, B, dtype=torch.float64)
    return model, prev, x, G, G2, w, w2


def test_accumulate_two_passes_with_noise() -> None:
    """sum_i w_i g_i(x) + sum_i w'_i g_i(x') + sigma z, z from the Philox stream."""
    from rml_fast.kernels.random import normal_reference

    model, prev, x, G, G2, w, w2 = _shifted_pair("conv_model")
    with ClippingEngine(model) as e1, ClippingEngine(prev) as e2:
        with e1.record():
            cp = e1.backward(model(x))
        with e2.record():
            cp2 = e2.backward(prev(x))
        e1.accumulate([(cp, w), (cp2, w2)], noise_std=0.5, seed=123, offset=77)
    z = torch.from_numpy(normal_reference(e1.numel, 123, 77)).double()
    expected = w @ G + w2 @ G2 + 0.5 * z
    got = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
    torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-6)


# opacus 1.6 differs from brute force (and from us) on non-zero padding modes (it ignores
# padding_mode="circular"/"reflect") and on Embedding(padding_idx=...) (it gives the padding
# row a gradient): those cases are checked against vmap(grad) only.
OPACUS_CASES = ["linear", "linear_seq", "linear_seq2", "conv1d", "conv1d_groups", "conv2d",
                "layernorm", "groupnorm", "rmsnorm"]


@pytest.mark.filterwarnings("ignore:Full backward hook:UserWarning")
@pytest.mark.parametrize("name", OPACUS_CASES)
def test_matches_opacus_per_sample_norms(name: str) -> None:
    pytest.importorskip("opacus")
    from opacus.grad_sample import GradSampleModule

    model, x = _prep(name, torch.float64)
    gsm = GradSampleModule(copy.deepcopy(model), loss_reduction="sum")
    gsm(x).sum().backward()
    opacus_norms = torch.stack(
        [p.grad_sample.reshape(B, -1).norm(dim=1) for p in gsm.parameters()], 1
    ).norm(dim=1)
    ours = per_sample_grad_norms(model, _own, x)
    torch.testing.assert_close(ours, opacus_norms, rtol=1e-10, atol=0)


def test_unsupported_layer_raises_naming_it() -> None:
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    with pytest.raises(UnsupportedLayerError, match=r"'1' \(BatchNorm1d\)"):
        ClippingEngine(model)


def test_tied_weights_and_inplace_outputs_raise() -> None:
    a, b = nn.Linear(3, 3), nn.Linear(3, 3)
    b.weight = a.weight
    with pytest.raises(UnsupportedLayerError, match="shared"):
        ClippingEngine(nn.Sequential(a, b))
    model = nn.Sequential(nn.Linear(3, 3), nn.ReLU(inplace=True), nn.Linear(3, 1))
    x = torch.randn(4, 3)
    with pytest.raises(UnsupportedLayerError, match="in place"):
        per_sample_grad_norms(model, _squeezed, x)
    twice = nn.Linear(3, 3)
    with pytest.raises(UnsupportedLayerError, match="ran twice"):
        per_sample_grad_norms(nn.Sequential(twice, twice), lambda out, _: out.sum(1), x)


def test_frozen_layers_are_skipped_and_bad_args_raise() -> None:
    model = nn.Sequential(nn.BatchNorm1d(3), nn.Linear(3, 1))
    for p in model[0].parameters():
        p.requires_grad_(False)
    model.eval()
    x = torch.randn(4, 3)
    norms = per_sample_grad_norms(model, _squeezed, x)
    assert norms.shape == (4,)
    with pytest.raises(ValueError, match="mode"):
        ClippingEngine(model, mode="fast")
    with pytest.raises(TypeError, match="model"):
        ClippingEngine("model")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="losses"):
        per_sample_grad_norms(model, _own, x)
    with pytest.raises(ValueError, match="max_norm"):
        clip_and_accumulate(model, _squeezed, x, max_norm=0.0)


def test_registry_rejects_duplicates() -> None:
    with pytest.raises(ValueError, match="already registered"):
        LAYER_RULES.register(nn.Linear)(lambda m, x, d: [])


def _triton_ready() -> bool:
    from rml_fast.kernels._dispatch import triton_available, triton_interpreting

    return triton_available() and (torch.cuda.is_available() or triton_interpreting())


@pytest.mark.skipif(not _triton_ready(), reason="needs triton (CUDA or TRITON_INTERPRET=1)")
@pytest.mark.parametrize("name", ["linear_seq", "conv_model", "seq_model"])
def test_engine_with_triton_kernels(name: str) -> None:
    """The engine end to end on the Triton backend (CPU interpreter here, CUDA in CI-GPU)."""
    model, x = _prep(name, torch.float32)
    G = _per_sample_grads(model, x)
    norms_bf = G.double().norm(dim=1)
    w = torch.linspace(0.2, 1.0, B)
    with ClippingEngine(model, mode="ghost", backend="triton") as engine:
        with engine.record():
            cp = engine.backward(model(x))
        torch.testing.assert_close(engine.norms(cp), norms_bf, rtol=1e-4, atol=0)
        engine.accumulate([(cp, w)], noise_std=0.3, seed=5)
    from rml_fast.kernels.random import normal_reference

    expected = w @ G + 0.3 * torch.from_numpy(normal_reference(G.shape[1], 5, 0))
    got = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["linear_seq", "conv_model", "seq_model", "layernorm"])
def test_engine_on_cuda_matches_brute_force(name: str) -> None:
    model, x = _prep(name, torch.float32)
    expected = _per_sample_grads(model, x).double().norm(dim=1)
    model, x = model.cuda(), x.cuda()
    norms = per_sample_grad_norms(model, _own, x)
    torch.testing.assert_close(norms.cpu(), expected, rtol=1e-4, atol=0)


@pytest.mark.parametrize("name", ["conv_model", "seq_model"])
def test_accumulate_consume_releases_passes_and_keeps_the_sum(name: str) -> None:
    """consume=True writes the same noisy sum and leaves the passes empty (their
    activations and output gradients released layer by layer)."""
    model, x = _prep(name, torch.float64)
    w = torch.linspace(0.3, 1.0, B, dtype=torch.float64)
    sums = []
    for consume in (False, True):
        with ClippingEngine(model) as engine:
            with engine.record():
                cp = engine.backward(model(x))
            engine.accumulate([(cp, w)], noise_std=0.2, seed=9, offset=3, consume=consume)
        sums.append(torch.cat([p.grad.reshape(-1) for p in model.parameters()]))
        assert all(not forms for _, forms in cp.forms) == consume
    torch.testing.assert_close(sums[0], sums[1], rtol=1e-12, atol=1e-12)
    G = _per_sample_grads(model, x)
    from rml_fast.kernels.random import normal_reference

    expected = w @ G + 0.2 * torch.from_numpy(normal_reference(G.shape[1], 9, 3)).double()
    torch.testing.assert_close(sums[1], expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("mode", ["ghost", "instantiate", "auto"])
def test_norms_and_diff_norms_in_one_walk(mode: str) -> None:
    model, x = _prep("conv_model", torch.float64)
    prev = copy.deepcopy(model)
    with torch.no_grad():
        for p in prev.parameters():
            p.mul_(0.95)
    with ClippingEngine(model, mode=mode) as e1, ClippingEngine(prev, mode=mode) as e2:
        with e1.record():
            cp = e1.backward(model(x))
        with e2.record():
            cp2 = e2.backward(prev(x))
        norms, diffs = e1.norms_and_diff_norms(cp, cp2)
        torch.testing.assert_close(norms, e1.norms(cp), rtol=1e-12, atol=0)
        torch.testing.assert_close(diffs, e1.diff_norms(cp, cp2), rtol=1e-10, atol=0)
    expected = (_per_sample_grads(model, x) - _per_sample_grads(prev, x)).norm(dim=1)
    torch.testing.assert_close(diffs, expected, rtol=1e-9, atol=0)


# --- memory="low": norms in backward hooks, sums from a second backward --------------------


def _low_and_fast_step(model: nn.Module, x: torch.Tensor, memory: str, keep_graph: bool = True,
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    from rml_fast.privacy.clipping import clip_factors

    with ClippingEngine(model, memory=memory) as engine:
        with engine.record():
            losses = model(x)
        if memory == "low" and not keep_graph:
            cp = engine.backward(losses, keep_graph=False)
            cp.rerun = lambda: model(x)
        else:
            cp = engine.backward(losses)
        del losses
        norms = engine.norms(cp)
        w = clip_factors(norms, float(norms.median()))
        engine.accumulate([(cp, w)], noise_std=0.3, seed=11, offset=4, consume=True)
    return norms, torch.cat([p.grad.reshape(-1) for p in model.parameters()])


@pytest.mark.parametrize("keep_graph", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", sorted(CASES))
def test_low_memory_mode_gives_the_fast_mode_update(name: str, dtype: torch.dtype,
                                                    keep_graph: bool) -> None:
    """The same norms and noisy clipped sum (to 1e-6 relative) from two backwards."""
    model, x = _prep(name, dtype)
    n_fast, g_fast = _low_and_fast_step(copy.deepcopy(model), x, "fast")
    n_low, g_low = _low_and_fast_step(copy.deepcopy(model), x, "low", keep_graph)
    assert g_low.dtype == dtype
    torch.testing.assert_close(n_low, n_fast, rtol=1e-12, atol=0)
    assert float((g_low - g_fast).norm() / g_fast.norm()) < (1e-6 if dtype == torch.float32 else 1e-13)
    expected = _per_sample_grads(model, x).double().norm(dim=1)
    torch.testing.assert_close(n_low, expected, rtol=_rtol(dtype), atol=0)


@pytest.mark.parametrize("name", ["conv_model", "conv2d_stride", "conv1d_groups", "seq_model"])
@pytest.mark.parametrize("mode", ["ghost", "instantiate"])
def test_low_memory_coupled_norms_and_chunked_convs(name: str, mode: str,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Coupled norms from the hooks of the pass at x against a stored pass at x', with conv
    per-sample work forced into chunks of one or two samples; the two-pass sum."""
    from rml_fast.kernels.random import normal_reference
    from rml_fast.privacy import clipping

    monkeypatch.setattr(clipping, "_LOW_SCRATCH", 60)
    model, prev, x, G, G2, w, w2 = _shifted_pair(name)
    with ClippingEngine(model, mode=mode, memory="low") as e1, \
            ClippingEngine(prev, mode=mode, memory="low") as e2:
        with e2.record():
            cp2 = e2.backward(prev(x), store=True)
        with e1.record():
            cp = e1.backward(model(x), reference=cp2)
        assert not cp.forms and not cp2.forms  # both dropped layer by layer
        norms, diffs = e1.norms_and_diff_norms(cp, cp2)
        torch.testing.assert_close(norms, G.norm(dim=1), rtol=1e-10, atol=0)
        torch.testing.assert_close(diffs, (G - G2).norm(dim=1), rtol=1e-9, atol=0)
        e1.accumulate([(cp, w), (cp2, w2)], noise_std=0.5, seed=123, offset=77, consume=True)
        with pytest.raises(ValueError, match="kept graph"):
            e1.accumulate([(cp, w)])
    z = torch.from_numpy(normal_reference(e1.numel, 123, 77)).double()
    got = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
    torch.testing.assert_close(got, w @ G + w2 @ G2 + 0.5 * z, rtol=1e-10, atol=1e-10)
    assert all(p.grad is None for p in prev.parameters())  # moved over to the model's


def test_low_memory_mode_releases_the_graph_and_activations() -> None:
    """The output hooks must not keep the graph (and the recorded inputs) alive."""
    import gc
    import weakref

    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    x = torch.randn(5, 4)
    refs = []
    handle = model[1].register_forward_hook(lambda m, i, o: refs.append(weakref.ref(o)))
    with ClippingEngine(model, memory="low") as engine:
        with engine.record():
            losses = model(x).squeeze(1)
        cp = engine.backward(losses)
        del losses
        engine.accumulate([(cp, torch.ones(5, dtype=torch.float64))], consume=True)
        del cp
        gc.collect()
        assert refs[0]() is None
    handle.remove()


def test_low_memory_bad_arguments() -> None:
    model = nn.Linear(3, 1)
    with pytest.raises(ValueError, match="memory"):
        ClippingEngine(model, memory="tiny")
    x = torch.randn(4, 3)
    with ClippingEngine(model, memory="low") as engine:
        with engine.record():
            cp = engine.backward(model(x).squeeze(1))
        with pytest.raises(ValueError, match="reference"):
            engine.diff_norms(cp, cp)


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["linear_seq", "conv_model", "seq_model"])
def test_low_memory_mode_on_cuda(name: str) -> None:
    model, x = _prep(name, torch.float32)
    n_fast, g_fast = _low_and_fast_step(copy.deepcopy(model).cuda(), x.cuda(), "fast")
    n_low, g_low = _low_and_fast_step(copy.deepcopy(model).cuda(), x.cuda(), "low")
    torch.testing.assert_close(n_low, n_fast, rtol=1e-6, atol=0)
    assert float((g_low - g_fast).norm() / g_fast.norm()) < 1e-5
