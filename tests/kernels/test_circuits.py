"""masked_mix: every backend and path against the torch reference (Triton interpreted on CPU)."""

from __future__ import annotations

import pytest
import torch

from rml_fast.kernels.circuits import masked_mix, masked_mix_reference


def _inputs(n, s_tot, s, j, k, density, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    delta = torch.randn(n, s_tot, k, generator=g, dtype=torch.float64).to(dtype)
    mask = torch.rand(n, s, j, generator=g) < density
    base = torch.randn(j, k, generator=g, dtype=torch.float64).to(dtype)
    return delta, mask, base


def _loop(delta, mask, base):
    """The obviously correct triple loop."""
    n, s, j = mask.shape
    out = base.unsqueeze(0).repeat(n, 1, 1).clone()
    for a in range(n):
        for b in range(s):
            for c in range(j):
                if mask[a, b, c]:
                    out[a, c] += delta[a, b]
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(
    ("n", "s_tot", "s", "j", "k"), [(3, 7, 5, 4, 37), (1, 1, 1, 1, 1), (5, 13, 13, 9, 130)]
)
def test_reference_matches_loop(dtype, n, s_tot, s, j, k):
    delta, mask, base = _inputs(n, s_tot, s, j, k, 0.3, dtype)
    torch.testing.assert_close(masked_mix_reference(delta, mask, base), _loop(delta, mask, base))


@pytest.mark.parametrize("backend", ["native", "triton", "reference"])
@pytest.mark.parametrize("path", ["dense", "sparse", "auto"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("density", [0.0, 0.05, 0.5, 1.0])
def test_backends_match_reference(backend, path, dtype, density):
    if backend == "triton":
        pytest.importorskip("triton")
    delta, mask, base = _inputs(4, 11, 9, 7, 3 * 37, density, dtype, seed=1)
    ref = masked_mix_reference(delta, mask, base)
    out = masked_mix(delta, mask, base, path=path, backend=backend)
    assert out.dtype == dtype and out.shape == (4, 7, 3 * 37)
    tol = {torch.float32: 1e-5, torch.float64: 1e-12}[dtype]
    torch.testing.assert_close(out, ref, rtol=tol, atol=tol)


def test_uint8_mask_and_noncontiguous_inputs():
    delta, mask, base = _inputs(3, 6, 6, 5, 17, 0.2, torch.float32, seed=2)
    delta_t = delta.transpose(0, 1).contiguous().transpose(0, 1)  # non-contiguous view
    ref = masked_mix_reference(delta, mask, base)
    for backend in ("native", "reference"):
        out = masked_mix(delta_t, mask.to(torch.uint8), base, path="sparse", backend=backend)
        torch.testing.assert_close(out, ref)


def test_sparse_sum_order_is_fixed():
    # the native sparse path adds sources in ascending order: identical across runs
    delta, mask, base = _inputs(8, 40, 40, 3, 64, 0.5, torch.float32, seed=3)
    a = masked_mix(delta, mask, base, path="sparse", backend="native")
    b = masked_mix(delta, mask, base, path="sparse", backend="native")
    assert torch.equal(a, b)


def test_inputs_are_not_mutated():
    delta, mask, base = _inputs(2, 4, 4, 3, 8, 0.5, torch.float32)
    copies = [t.clone() for t in (delta, mask, base)]
    masked_mix(delta, mask, base, path="sparse", backend="native")
    for t, c in zip((delta, mask, base), copies, strict=True):
        assert torch.equal(t, c)


def test_invalid_inputs():
    delta, mask, base = _inputs(2, 4, 4, 3, 8, 0.5, torch.float32)
    with pytest.raises(TypeError, match="delta"):
        masked_mix(delta.numpy(), mask, base)
    with pytest.raises(TypeError, match="delta"):
        masked_mix(delta.half(), mask, base.half())
    with pytest.raises(TypeError, match="base"):
        masked_mix(delta, mask, base.double())
    with pytest.raises(ValueError, match="mask"):
        masked_mix(delta, mask[:1], base)
    with pytest.raises(ValueError, match="mask"):
        masked_mix(delta[:, :2], mask, base)
    with pytest.raises(ValueError, match="base"):
        masked_mix(delta, mask, base[:2])
    with pytest.raises(TypeError, match="mask"):
        masked_mix(delta, mask.float(), base)
    with pytest.raises(ValueError, match="path"):
        masked_mix(delta, mask, base, path="blocked")


def test_native_binding_checks():
    from rml_fast._native import _C

    delta, mask, base = _inputs(2, 4, 4, 3, 8, 0.5, torch.float32)
    out = torch.empty(2, 3, 8)
    with pytest.raises(TypeError, match="mask"):
        _C.circuits.masked_mix(delta.numpy(), mask.numpy(), base.numpy(), out.numpy())
    with pytest.raises(ValueError, match="C-contiguous"):
        _C.circuits.masked_mix(
            delta.transpose(0, 1).numpy(), mask.to(torch.uint8).numpy(), base.numpy(), out.numpy()
        )
    with pytest.raises(TypeError, match="dtype"):
        _C.circuits.masked_mix(
            delta.numpy(), mask.to(torch.uint8).numpy(), base.double().numpy(), out.numpy()
        )
    with pytest.raises(ValueError, match="out"):
        _C.circuits.masked_mix(
            delta.numpy(), mask.to(torch.uint8).numpy(), base.numpy(), out[:1].numpy()
        )


@pytest.mark.parametrize("backend", ["native", "triton", "reference"])
@pytest.mark.parametrize("path", ["dense", "sparse"])
def test_out_buffer(backend, path):
    if backend == "triton":
        pytest.importorskip("triton")
    delta, mask, base = _inputs(3, 5, 4, 6, 21, 0.3, torch.float64, seed=4)
    out = torch.full((3, 6, 21), float("nan"), dtype=torch.float64)
    res = masked_mix(delta, mask, base, path=path, backend=backend, out=out)
    assert res.data_ptr() == out.data_ptr()
    torch.testing.assert_close(out, masked_mix_reference(delta, mask, base))
    with pytest.raises(ValueError, match="out"):
        masked_mix(delta, mask, base, out=out[:2])
    with pytest.raises(ValueError, match="out"):
        masked_mix(delta, mask, base, out=out.float())


def _ln_rows(x, w, b, d, eps=1e-5):
    """The obvious per-row layer norm of every length-d row of x[..., K]."""
    rows = x.reshape(-1, d)
    mu = rows.mean(-1, keepdim=True)
    var = ((rows - mu) ** 2).mean(-1, keepdim=True)
    y = (rows - mu) / torch.sqrt(var + eps) * w + (0 if b is None else b)
    return y.reshape(x.shape)


@pytest.mark.parametrize("backend", ["native", "triton", "reference"])
@pytest.mark.parametrize("path", ["dense", "sparse"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("with_bias", [True, False])
def test_source_first_layer_norm_and_need(backend, path, dtype, with_bias):
    if backend == "triton":
        pytest.importorskip("triton")
    n, s_tot, s, j, d = 5, 9, 7, 6, 8
    delta, mask, base = _inputs(n, s_tot, s, j, 3 * d, 0.3, dtype, seed=6)
    mask[0] = False  # a run without active sources: its blocks are LN(base)
    g = torch.Generator().manual_seed(7)
    w = torch.randn(d, generator=g, dtype=torch.float64).to(dtype)
    b = torch.randn(d, generator=g, dtype=torch.float64).to(dtype) if with_bias else None
    need = torch.rand(n, j, generator=g) < 0.7
    expect = _ln_rows(_loop(delta, mask, base), w, b, d) * need[:, :, None]  # [n, j, K]
    tol = {torch.float32: 1e-5, torch.float64: 1e-12}[dtype]
    # batch-first and source-first layouts, with and without the fused layer norm
    out = masked_mix(delta, mask, base, path=path, backend=backend, ln=(w, b, 1e-5), need=need)
    torch.testing.assert_close(out, expect, rtol=tol, atol=tol)
    delta_sf = delta.transpose(0, 1).contiguous()
    out = masked_mix(
        delta_sf, mask, base, path=path, backend=backend, source_first=True, ln=(w, b, 1e-5),
        need=need,
    )  # fmt: skip
    assert out.shape == (j, n, 3 * d)
    torch.testing.assert_close(out, expect.transpose(0, 1), rtol=tol, atol=tol)
    plain = masked_mix(delta_sf, mask, base, path=path, backend=backend, source_first=True)
    torch.testing.assert_close(plain, _loop(delta, mask, base).transpose(0, 1), rtol=tol, atol=tol)
    ref = masked_mix_reference(delta_sf, mask, base, source_first=True, ln=(w, b, 1e-5))
    torch.testing.assert_close(ref * need.T[:, :, None], expect.transpose(0, 1), rtol=tol, atol=tol)


def test_native_threads_do_not_change_the_result():
    from rml_fast._native import _C

    delta, mask, base = _inputs(16, 12, 12, 10, 4096, 0.3, torch.float32, seed=8)
    m = mask.to(torch.uint8).numpy()
    outs = []
    for nt in (1, 2):
        out = torch.empty(16, 10, 4096)
        _C.circuits.masked_mix(delta.numpy(), m, base.numpy(), out.numpy(), n_threads=nt)
        outs.append(out)
    assert torch.equal(outs[0], outs[1])
    torch.testing.assert_close(outs[0], masked_mix_reference(delta, mask, base))


def test_layer_norm_and_need_invalid():
    delta, mask, base = _inputs(2, 4, 4, 3, 8, 0.5, torch.float32)
    w = torch.ones(4)
    with pytest.raises(ValueError, match="ln"):
        masked_mix(delta, mask, base, ln=(torch.ones(3), None, 1e-5))  # 3 does not divide 8
    with pytest.raises(ValueError, match="ln"):
        masked_mix(delta, mask, base, ln=(w.double(), None, 1e-5))
    with pytest.raises(ValueError, match="ln"):
        masked_mix(delta, mask, base, ln=(w, torch.ones(5), 1e-5))
    with pytest.raises(ValueError, match="eps"):
        masked_mix(delta, mask, base, ln=(w, None, 0.0))
    with pytest.raises(TypeError, match="ln"):
        masked_mix(delta, mask, base, ln=w)
    with pytest.raises(ValueError, match="need"):
        masked_mix(delta, mask, base, need=torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="mask"):  # source-first delta of the wrong shape
        masked_mix(delta, mask, base, source_first=True)
