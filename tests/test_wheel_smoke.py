"""Wheel smoke test: one native kernel per family against its reference twin on tiny inputs.

Runs in the normal suite (a checkout with an editable install) and, copied alone to a temp
dir, inside the fresh venv that ``scripts/check_wheel.sh`` installs the repaired wheel into.
There ``RML_FAST_WHEEL_SMOKE=1`` is set, and the extra test below asserts that
``rml_fast._C`` is the one from the installed wheel (site-packages of this interpreter, listed
in the wheel's RECORD), not from a checkout. Everything here takes well under a second.
"""

from __future__ import annotations

import importlib.metadata
import os
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import rml_fast
from rml_fast._native import _C

IN_WHEEL_VENV = os.environ.get("RML_FAST_WHEEL_SMOKE") == "1"
NATIVE_FAMILIES = ("random", "sgg", "clip", "lasso", "gravitree", "nudft", "circuits")


def test_extension_is_built_with_every_family():
    info = rml_fast.backend_info()
    assert info["native"]["built"] is True
    for name in NATIVE_FAMILIES:
        assert hasattr(_C, name), name
    assert _C.thread_limit() >= 0
    assert _C.max_threads() >= 1


@pytest.mark.skipif(not IN_WHEEL_VENV, reason="only inside scripts/check_wheel.sh's venv")
def test_extension_comes_from_the_installed_wheel():
    so = Path(_C.__file__).resolve()
    site = Path(sys.prefix).resolve()
    assert site in so.parents, f"_C loaded from {so}, not from the venv at {site}"
    assert "site-packages" in so.parts
    checkout = os.environ.get("RML_FAST_WHEEL_CHECKOUT")
    if checkout:
        assert Path(checkout).resolve() not in so.parents, so
    dist = importlib.metadata.distribution("rml_fast")
    recorded = {Path(str(f)).name for f in dist.files or ()}
    assert so.name in recorded, "the loaded _C is not in the wheel's RECORD"
    # A real (not editable) install: no PEP 660 redirect.
    direct = dist.read_text("direct_url.json") or ""
    assert '"editable": true' not in direct
    # auditwheel repaired it: a manylinux tag (the script checks libgomp with ldd).
    wheel_meta = dist.read_text("WHEEL") or ""
    assert "manylinux" in wheel_meta, wheel_meta
    # pyproject's cmake.build-type (scripts/sanitize.sh builds Debug; never in a wheel).
    assert rml_fast.backend_info()["native"]["build_type"] == "Release"


def test_random_philox_native_equals_reference():
    from rml_fast.kernels import random as rr

    np.testing.assert_array_equal(
        rr.uniform(1031, 7, 2**32 - 5, backend="native"), rr.uniform_reference(1031, 7, 2**32 - 5)
    )
    np.testing.assert_array_max_ulp(
        rr.normal(1031, 7, 3, backend="native"), rr.normal_reference(1031, 7, 3), maxulp=1
    )


def test_sgg_sampler_and_pld_native_equal_reference():
    from rml_fast.kernels import sgg

    a = sgg.sgg_sample(300, 3, 1.3, 2.0, 1.0, seed=11, offset=5, backend="native")
    b = sgg.sgg_sample_reference(300, 3, 1.3, 2.0, 1.0, seed=11, offset=5)
    np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12 * np.abs(b).max())
    rng = np.random.default_rng(0)
    pmf = rng.random(400)
    pmf /= pmf.sum() * 1.0001
    eps = np.linspace(-2.0, 2.0, 9)
    got = sgg.pld_delta_for_epsilon(pmf, -200, 1e-2, 1e-4, eps, backend="native")
    # delta(eps) = sum_i pmf_i max(1 - e^(eps - L_i), 0) + inf_mass, from the definition
    losses = (-200 + np.arange(pmf.size)) * 1e-2
    brute = [float(np.sum(pmf * np.maximum(1 - np.exp(e - losses), 0.0))) + 1e-4 for e in eps]
    np.testing.assert_allclose(got, brute, rtol=1e-10, atol=1e-13)


def test_clip_ghost_norm_native_equals_instantiated_gradients():
    # The C++ kernel itself (the public wrapper adds a torch custom operator on top, whose
    # first call is slow on a loaded machine): ||D_i^T A_i||_F^2 per sample.
    rng = np.random.default_rng(3)
    A = rng.standard_normal((3, 5, 4))
    D = rng.standard_normal((3, 5, 2))
    out = np.empty(3)
    _C.clip.ghost_norm_sq(A, D, out, 0)
    G = np.einsum("bsp,bsd->bpd", D, A)
    np.testing.assert_allclose(out, np.square(G).sum(axis=(1, 2)), rtol=1e-12, atol=1e-12)


def test_lasso_path_native_equals_reference():
    from rml_fast.kernels.lasso import lambda_grid, lasso_path, lasso_path_reference

    rng = np.random.default_rng(1)
    X = rng.standard_normal((20, 30))
    X = np.asfortranarray(X / np.linalg.norm(X, axis=0))
    w = np.zeros(30)
    w[[2, 7, 11]] = [1.5, -1.0, 2.0]
    y = X @ w + 0.01 * rng.standard_normal(20)
    lams = lambda_grid(X, y, n_lambdas=4, eps=5e-2)
    a = lasso_path(X, y, lams, tol=1e-12, backend="native")
    b = lasso_path_reference(X, y, lams, tol=1e-12)
    np.testing.assert_allclose(a.coefs, b.coefs, atol=1e-7)


def test_gravitree_native_equals_brute_force():
    from rml_fast.kernels.gravitree import gravitree_fit

    rng = np.random.default_rng(0)
    X = rng.integers(0, 2, size=(24, 3))
    y = (X[:, 0] ^ (rng.random(24) < 0.2)).astype(np.int64)
    kw = dict(depth=2, regularization=0.01, bound_value=0.2)
    nat = gravitree_fit(X, y, backend="native", **kw)
    ref = gravitree_fit(X, y, backend="reference", **kw)
    assert len(nat) == len(ref) > 0
    assert nat.optimal_objective == ref.optimal_objective
    np.testing.assert_array_equal(nat.objectives, ref.objectives)


def test_nudft_type1_native_equals_reference():
    # The C++ path under the public wrapper (its torch custom operator's first call is slow).
    from rml_fast.kernels.nudft import FrequencyGrid, _native_type1, nudft_type1_reference

    grid = FrequencyGrid(1, 2.0, 0.25)
    gen = torch.Generator().manual_seed(4)
    x = torch.rand(2, 9, 1, generator=gen, dtype=torch.float64) * 6 - 3
    v = torch.randn(2, 9, 3, generator=gen, dtype=torch.float64)
    re, im, dre, dim = _native_type1(x, v, grid, -1, True)
    Z_ref, D_ref = nudft_type1_reference(x, v, grid, sign=-1)
    assert D_ref is not None
    torch.testing.assert_close(torch.complex(re, im), Z_ref, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(torch.complex(dre, dim), D_ref, rtol=1e-12, atol=1e-12)


def test_circuits_masked_mix_native_equals_reference():
    from rml_fast.kernels.circuits import masked_mix, masked_mix_reference

    gen = torch.Generator().manual_seed(5)
    delta = torch.randn(3, 6, 17, generator=gen, dtype=torch.float64)
    mask = torch.rand(3, 5, 4, generator=gen) < 0.4
    base = torch.randn(4, 17, generator=gen, dtype=torch.float64)
    ref = masked_mix_reference(delta, mask, base)
    for path in ("dense", "sparse"):
        out = masked_mix(delta, mask, base, path=path, backend="native")
        torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
