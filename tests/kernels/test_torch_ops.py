"""The native kernels as torch custom operators: opcheck, autograd, torch.compile and torch.export.

``torch.library.opcheck`` runs the operators through fake tensors, the schema checker and the
autograd registration; the gradients are checked against the einsum reference twins in float64;
``torch.compile`` (``aot_eager``: the full AOTAutograd trace, fake tensors and the backward
graph, without Inductor's C++ compile time) and ``torch.export`` of an SFConvCNP must give the
eager result with the operators as single nodes of the graph.
"""

from __future__ import annotations

import pytest
import torch

from rml_fast.kernels.clip import ghost_norm_sq, scaled_outer_accumulate
from rml_fast.kernels.nudft import FrequencyGrid, nudft_type1, nudft_type2
from rml_fast.neural_processes.models import SFConvCNP

F64 = torch.float64


def _points(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(*shape, generator=g, dtype=F64)


@pytest.mark.parametrize(("dim", "density"), [(1, True), (1, False), (2, True)])
def test_nudft_type1_opcheck(dim, density):
    grid = FrequencyGrid(dim, 2.0, 0.5)
    x = _points(2, 5, dim).requires_grad_()
    v = torch.randn(2, 5, 3, dtype=F64, requires_grad=True)
    args = (x, v, grid.dim, list(grid.max_freq), list(grid.resolution), -1, density, "native")
    torch.library.opcheck(torch.ops.rml_fast.nudft_type1.default, args)


def test_nudft_type2_opcheck():
    grid = FrequencyGrid(2, 2.0, 0.5)
    F = grid.n_freq
    x = _points(2, 4, 2).requires_grad_()
    re = torch.randn(2, F, 3, dtype=F64, requires_grad=True)
    im = torch.randn(2, F, 3, dtype=F64, requires_grad=True)
    args = (x, re, im, grid.weights, 2, list(grid.max_freq), list(grid.resolution), 1, "native")
    torch.library.opcheck(torch.ops.rml_fast.nudft_type2.default, args)


@pytest.mark.parametrize("cross", [False, True])
def test_ghost_norm_sq_opcheck_and_gradient(cross):
    g = torch.Generator().manual_seed(1)
    A = torch.randn(3, 4, 5, dtype=F64, generator=g, requires_grad=True)
    D = torch.randn(3, 4, 2, dtype=F64, generator=g, requires_grad=True)
    A2 = torch.randn(3, 6, 5, dtype=F64, generator=g, requires_grad=True) if cross else None
    D2 = torch.randn(3, 6, 2, dtype=F64, generator=g, requires_grad=True) if cross else None
    torch.library.opcheck(torch.ops.rml_fast.ghost_norm_sq.default, (A, D, A2, D2, "native"))
    inputs = [t for t in (A, D, A2, D2) if t is not None]
    weights = torch.tensor([0.3, -1.0, 2.0], dtype=F64)
    ours = torch.autograd.grad(
        (ghost_norm_sq(A, D, A2, D2, backend="native") * weights).sum(), inputs
    )
    ref = torch.autograd.grad(
        (ghost_norm_sq(A, D, A2, D2, backend="reference") * weights).sum(), inputs
    )
    for a, b in zip(ours, ref, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


def test_scaled_outer_accumulate_opcheck_and_gradient():
    g = torch.Generator().manual_seed(2)
    A = torch.randn(6, 4, dtype=F64, generator=g, requires_grad=True)
    D = torch.randn(6, 3, dtype=F64, generator=g, requires_grad=True)
    w = torch.tensor([1.0, 0.5, -2.0], dtype=F64, requires_grad=True)
    torch.library.opcheck(
        torch.ops.rml_fast.scaled_outer_accumulate.default, (A, D, w, 2, 0.0, 0, 0, "native")
    )
    probe = torch.randn(3, 4, dtype=F64, generator=g)
    ours = torch.autograd.grad(
        (scaled_outer_accumulate(A, D, w, 2, backend="native") * probe).sum(), (A, D, w)
    )
    ref = torch.autograd.grad(
        (scaled_outer_accumulate(A, D, w, 2, backend="reference") * probe).sum(), (A, D, w)
    )
    for a, b in zip(ours, ref, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


def test_nudft_pair_compiles_without_graph_breaks():
    grid = FrequencyGrid(1, 3.0, 0.25)
    w = grid.weights

    def f(x, v, xq):
        Z, D = nudft_type1(x, v, grid, backend="native")
        return nudft_type2(xq, Z * D[..., None], grid, w, backend="native")

    x, xq = _points(2, 6, 1, seed=3).requires_grad_(), _points(2, 4, 1, seed=4)
    v = torch.randn(2, 6, 2, dtype=F64, requires_grad=True)
    eager = f(x, v, xq)
    g_eager = torch.autograd.grad(eager.square().sum(), (x, v))
    torch._dynamo.reset()
    compiled = torch.compile(f, backend="aot_eager", fullgraph=True)
    out = compiled(x, v, xq)
    g_comp = torch.autograd.grad(out.square().sum(), (x, v))
    torch.testing.assert_close(out, eager, rtol=1e-12, atol=1e-12)
    for a, b in zip(g_comp, g_eager, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


class _Moments(torch.nn.Module):
    """The predictive mean and std of an SFConvCNP (export needs tensor outputs)."""

    def __init__(self, model: SFConvCNP) -> None:
        super().__init__()
        self.model = model

    def forward(self, xc, yc, xq):
        dist = self.model(xc, yc, xq)
        return dist.mean, dist.stddev


@pytest.fixture(scope="module")
def sfconv_task():
    torch.manual_seed(0)
    model = _Moments(SFConvCNP(embed_channels=8, feedforward_channels=16, num_layers=2, groups=4))
    model = model.double().eval()
    xc, xq = _points(2, 10, 1, seed=5), _points(2, 7, 1, seed=6)
    yc = torch.sin(6 * xc)
    return model, (xc, yc, xq)


def test_sfconvcnp_compiled_equals_eager(sfconv_task):
    model, args = sfconv_task
    eager = model(*args)
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
    out = compiled(*args)
    for a, b in zip(out, eager, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    # training through the compiled graph: the same parameter gradients as eager
    params = [p for p in model.parameters() if p.requires_grad]
    g_eager = torch.autograd.grad(eager[0].square().sum() + eager[1].sum(), params,
                                  allow_unused=True)  # the last context block feeds nothing
    g_comp = torch.autograd.grad(out[0].square().sum() + out[1].sum(), params, allow_unused=True)
    assert sum(g is not None for g in g_eager) > len(params) // 2
    for a, b in zip(g_comp, g_eager, strict=True):
        assert (a is None) == (b is None)
        if a is not None:
            torch.testing.assert_close(a, b, rtol=1e-8, atol=1e-10)


def test_sfconvcnp_exports_with_the_operators_as_nodes(sfconv_task):
    model, args = sfconv_task
    program = torch.export.export(model, args)
    targets = {str(node.target) for node in program.graph.nodes}
    assert "rml_fast.nudft_type1.default" in targets
    assert "rml_fast.nudft_type2.default" in targets
    xc, _, xq = args
    other = (xc + 0.05, torch.cos(5 * xc), xq * 0.9)  # the program is not specialised to values
    for inputs in (args, other):
        for a, b in zip(program.module()(*inputs), model(*inputs), strict=True):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_compiled_model_refuses_inputs_wider_than_its_parameters(sfconv_task):
    model, args = sfconv_task
    torch._dynamo.reset()
    compiled = torch.compile(_Moments(model.model.float()), backend="aot_eager", fullgraph=True)
    with pytest.raises(Exception, match="wider than the model"):
        compiled(*args)
    model.double()
