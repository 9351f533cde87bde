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
