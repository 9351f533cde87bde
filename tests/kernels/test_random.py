"""Philox streams: C++ vs NumPy reference vs Triton (interpreter / CUDA), known answers,
statistics and argument checks."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from scipy import stats

from rml_fast.kernels import random as rr

SEEDS = [0, 1, 20260, 2**40 + 7, 2**63 - 1]
OFFSETS = [0, 5, 2**32 - 3, 2**32, 2**40 + 11]


def test_philox_known_answers():
    # Philox4x32-10 known-answer vectors of Random123 (Salmon et al. 2011), kat_vectors.
    cases = [
        ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
        (
            (0xFFFFFFFF,) * 4,
            (0xFFFFFFFF, 0xFFFFFFFF),
            (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD),
        ),
        (
            (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
            (0xA4093822, 0x299F31D0),
            (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1),
        ),
    ]
    for counter, key, expected in cases:
        words = rr._philox4x32_10(*(np.array([c], dtype=np.uint32) for c in counter), *key)
        assert [int(w[0]) for w in words] == list(expected)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("offset", OFFSETS)
def test_native_uniform_equals_reference_bitwise(seed, offset):
    ours = rr.uniform(4099, seed, offset)
    ref = rr.uniform_reference(4099, seed, offset)
    assert ours.dtype == np.float32
    np.testing.assert_array_equal(ours, ref)


@pytest.mark.parametrize("seed", SEEDS[:3])
@pytest.mark.parametrize("offset", OFFSETS)
def test_native_normal_equals_reference(seed, offset):
    ours = rr.normal(4099, seed, offset)
    ref = rr.normal_reference(4099, seed, offset)
    np.testing.assert_array_max_ulp(ours, ref, maxulp=1)


def test_streams_are_blockwise_consistent():
    # Any split of [offset, offset + n) gives the same numbers (counter-based).
    whole = rr.uniform(100_000, 3, 2**32 - 50_000)
    parts = np.concatenate(
        [rr.uniform(30_000, 3, 2**32 - 50_000), rr.uniform(70_000, 3, 2**32 - 20_000)]
    )
    np.testing.assert_array_equal(whole, parts)
    whole_n = rr.normal(100_000, 3)
    np.testing.assert_array_equal(whole_n[17:1017], rr.normal(1000, 3, 17))


def test_thread_count_does_not_change_stream():
    code = (
        "import numpy as np, rml_fast.kernels.random as r;"
        "np.save('/dev/stdout', r.normal(300000, 11, 2**33))"
    )
    outs = []
    for n in ("1", "2"):
        res = subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "OMP_NUM_THREADS": n},
            capture_output=True,
            check=True,
        )
        outs.append(res.stdout)
    assert outs[0] == outs[1]


@pytest.mark.parametrize("seed", [0, 12345, 2**40 + 7])
@pytest.mark.parametrize("offset", [0, 2**32 - 3, 2**40 + 11])
def test_triton_matches_native(seed, offset):
    pytest.importorskip("triton")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    n = 3000  # not a multiple of the block size
    u_tri = rr.uniform(n, seed, offset, device=device, backend="triton").cpu().numpy()
    np.testing.assert_array_equal(u_tri, rr.uniform(n, seed, offset))
    z_tri = rr.normal(n, seed, offset, device=device, backend="triton").cpu().numpy()
    # GPU / NumPy log and cos are within a few ulp of the correctly rounded values.
    np.testing.assert_allclose(z_tri, rr.normal(n, seed, offset), rtol=2e-6, atol=2e-6)


def test_triton_matches_tl_rand_directly():
    triton = pytest.importorskip("triton")
    import triton.language as tl

    @triton.jit
    def kernel(out_u, out_z, seed, offset, BLOCK: tl.constexpr):
        idx = tl.arange(0, BLOCK).to(tl.int64)
        tl.store(out_u + idx, tl.rand(seed, offset + idx))
        tl.store(out_z + idx, tl.randn(seed, offset + idx))

    device = "cuda" if torch.cuda.is_available() else "cpu"
    u = torch.empty(256, device=device)
    z = torch.empty(256, device=device)
    kernel[(1,)](u, z, 77, 2**35 + 3, BLOCK=256)
    np.testing.assert_array_equal(u.cpu().numpy(), rr.uniform_reference(256, 77, 2**35 + 3))
    np.testing.assert_allclose(z.cpu().numpy(), rr.normal_reference(256, 77, 2**35 + 3), atol=2e-6)


@pytest.mark.gpu
def test_cuda_auto_backend_is_triton_and_matches_cpu():
    u = rr.uniform(10_000, 5, 2**33, device="cuda")
    assert u.is_cuda
    np.testing.assert_array_equal(u.cpu().numpy(), rr.uniform(10_000, 5, 2**33))


def test_uniform_is_uniform():
    u = rr.uniform(200_000, 42).astype(np.float64)
    assert u.min() >= 0.0 and u.max() < 1.0
    assert stats.kstest(u, "uniform").pvalue > 1e-3
    # Lag-1 independence: correlation of neighbours ~ N(0, 1/n).
    r = np.corrcoef(u[:-1], u[1:])[0, 1]
    assert abs(r) < 5 / np.sqrt(u.size)


def test_normal_is_standard_normal():
    z = rr.normal(200_000, 43, 2**40).astype(np.float64)
    assert stats.kstest(z, "norm").pvalue > 1e-3
    assert abs(z.mean()) < 5 / np.sqrt(z.size)
    assert abs(z.var() - 1) < 5 * np.sqrt(2 / z.size)


def test_different_seeds_and_offsets_differ():
    a, b, c = rr.uniform(1000, 1), rr.uniform(1000, 2), rr.uniform(1000, 1, 1000)
    assert (a != b).mean() > 0.99 and (a != c).mean() > 0.99


def test_torch_cpu_device_returns_tensor():
    t = rr.uniform(10, 9, device="cpu")
    assert isinstance(t, torch.Tensor) and t.dtype == torch.float32
    np.testing.assert_array_equal(t.numpy(), rr.uniform(10, 9))
    assert rr.normal(0, 1).shape == (0,)


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"n": -1, "seed": 0}, ValueError, "n must be"),
        ({"n": 2.0, "seed": 0}, TypeError, "n must be"),
        ({"n": 3, "seed": 1.5}, TypeError, "seed must be"),
        ({"n": 3, "seed": -2}, ValueError, "seed must be"),
        ({"n": 3, "seed": 2**63}, ValueError, "seed must be"),
        ({"n": 3, "seed": True}, TypeError, "seed must be"),
        ({"n": 3, "seed": 0, "offset": -1}, ValueError, "offset must be"),
        ({"n": 10, "seed": 0, "offset": 2**63 - 5}, ValueError, "offset must be"),
        ({"n": 3, "seed": 0, "device": "tpu"}, ValueError, "device must be"),
        ({"n": 3, "seed": 0, "device": 3}, TypeError, "device must be"),
        ({"n": 3, "seed": 0, "backend": "fortran"}, ValueError, "backend must be"),
    ],
)
def test_bad_arguments(kwargs, exc, match):
    for fn in (rr.uniform, rr.normal):
        with pytest.raises(exc, match=match):
            fn(**kwargs)


def test_cuda_unavailable_is_a_clear_error():
    if torch.cuda.is_available():
        pytest.skip("CUDA present")
    with pytest.raises(ValueError, match="no CUDA device"):
        rr.uniform(3, 0, device="cuda")


def test_native_binding_checks_its_buffer():
    from rml_fast import _C

    with pytest.raises(TypeError, match="out: expected dtype float32"):
        _C.random.fill_uniform(np.empty(4), 0, 0)
    with pytest.raises(ValueError, match="C-contiguous"):
        _C.random.fill_uniform(np.empty(8, dtype=np.float32)[::2], 0, 0)
    with pytest.raises(ValueError, match="1-D"):
        _C.random.fill_normal(np.empty((2, 2), dtype=np.float32), 0, 0)


def test_seed_from_rng_is_reproducible():
    assert rr.seed_from_rng(5) == rr.seed_from_rng(np.random.default_rng(5))
    assert 0 <= rr.seed_from_rng(None) < 2**63
    with pytest.raises(TypeError, match="rng must be"):
        rr.seed_from_rng("abc")
