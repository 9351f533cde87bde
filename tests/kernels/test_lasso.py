"""rml_fast.kernels.lasso: native and reference solvers vs closed forms, KKT and peers."""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest

from rml_fast.exceptions import ConvergenceWarning
from rml_fast.kernels.lasso import (
    lambda_grid,
    lambda_max,
    lasso,
    lasso_path,
    lasso_path_reference,
    ridge_refit,
)

BACKENDS = ["native", "reference"]
TOL_COEF = {np.float64: 1e-6, np.float32: 1e-4}


def make_problem(n=40, m=120, k=5, B=1, dtype=np.float64, seed=0, noise=0.01):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, m))
    X /= np.linalg.norm(X, axis=0)
    W = np.zeros((m, B))
    for b in range(B):
        idx = rng.choice(m, k, replace=False)
        W[idx, b] = rng.choice([-1.0, 1.0], k) * (1 + rng.random(k))
    Y = X @ W + noise * rng.standard_normal((n, B))
    Y = Y[:, 0] if B == 1 else Y
    return np.asfortranarray(X.astype(dtype)), Y.astype(dtype)


def run(backend, D, Y, lambdas, **kw):
    if backend == "reference":
        kw.pop("n_threads", None)
        return lasso_path_reference(D, Y, lambdas, **kw)
    return lasso_path(D, Y, lambdas, backend=backend, **kw)


def kkt_violation(D, y, w, lam):
    """max over j of the KKT residual |grad_j + lam s_j| scaled by lam (0 at the optimum)."""
    X = D.astype(np.float64)
    n = X.shape[0]
    g = X.T @ (y.astype(np.float64) - X @ w.astype(np.float64)) / n
    on = w != 0
    v_off = np.max(np.abs(g[~on]) - lam, initial=0.0)
    v_on = np.max(np.abs(g[on] - lam * np.sign(w[on])), initial=0.0)
    return max(v_off, v_on) / lam


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_above_lambda_max_gives_zero(backend, dtype):
    D, Y = make_problem(B=3, dtype=dtype)
    lm = lambda_max(D, Y)
    assert lm.shape == (3,)
    res = run(backend, D, Y, [float(lm.max()) * 1.5, float(lm.max()), float(lm.max()) * (1 - 1e-9)])
    assert np.all(res.coefs[0] == 0)
    assert np.all(res.coefs[1] == 0)
    assert np.all(res.gaps[:2] <= 1e-12 * (Y.astype(np.float64) ** 2).sum(0).max())
    # just below the largest lambda_max the most correlated feature of that RHS enters
    b = int(np.argmax(lm))
    assert np.count_nonzero(res.coefs[2, b]) <= 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_kkt_and_gap(backend):
    D, y = make_problem(n=50, m=150, k=6, seed=1)
    lams = lambda_grid(D, y, n_lambdas=8, eps=1e-2)
    res = run(backend, D, y, lams, tol=1e-12)
    tol_abs = 1e-12 * float(y @ y) / (2 * D.shape[0])
    assert np.all(res.gaps >= 0)
    assert np.all(res.gaps <= tol_abs)
    for ell, lam in enumerate(lams):
        assert kkt_violation(D, y, res.coefs[ell], lam) < 1e-5


@pytest.mark.parametrize("backend", BACKENDS)
def test_orthonormal_closed_form(backend):
    rng = np.random.default_rng(3)
    n = 30
    Q = np.asfortranarray(np.linalg.qr(rng.standard_normal((n, n)))[0])
    y = rng.standard_normal(n)
    lams = np.array([0.05, 0.02, 0.01, 0.001])
    res = run(backend, Q, y, lams, tol=1e-14)
    z = Q.T @ y
    for ell, lam in enumerate(lams):
        expect = np.sign(z) * np.maximum(np.abs(z) - n * lam, 0)
        np.testing.assert_allclose(res.coefs[ell], expect, atol=1e-10)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("shape", [(40, 300), (100, 60)])
def test_matches_sklearn_lasso(dtype, shape):
    sklearn_lm = pytest.importorskip("sklearn.linear_model")
    D, y = make_problem(n=shape[0], m=shape[1], k=6, dtype=dtype, seed=2)
    lm = lambda_max(D, y)
    for frac in (0.5, 0.1, 0.02):
        lam = lm * frac
        ours = lasso(D, y, lam, tol=1e-12)
        sk_tol = 1e-12 if dtype == np.float64 else 1e-7
        ref = sklearn_lm.Lasso(alpha=lam, fit_intercept=False, tol=sk_tol, max_iter=100_000)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # float32 may stop at its rounding floor
            ref.fit(D, y)
        assert ours.coef.dtype == dtype
        np.testing.assert_allclose(ours.coef, ref.coef_, atol=TOL_COEF[dtype], rtol=0)
        np.testing.assert_array_equal(ours.coef != 0, ref.coef_ != 0)


def test_matches_sklearn_on_diabetes():
    datasets = pytest.importorskip("sklearn.datasets")
    sklearn_lm = pytest.importorskip("sklearn.linear_model")
    X, y = datasets.load_diabetes(return_X_y=True)
    lams = lambda_grid(X, y, n_lambdas=10, eps=1e-3)
    ours = lasso_path(X, y, lams, tol=1e-12)
    _, coefs, _ = sklearn_lm.lasso_path(X, y, alphas=lams, tol=1e-14, max_iter=200_000)
    np.testing.assert_allclose(ours.coefs, coefs.T, atol=1e-6 * np.abs(coefs).max(), rtol=0)


@pytest.mark.parametrize("peer", ["celer", "skglm"])
def test_matches_celer_and_skglm(peer):
    mod = pytest.importorskip(peer)
    D, y = make_problem(n=60, m=400, k=8, seed=4)
    lam = lambda_max(D, y) / 10
    ours = lasso(D, y, lam, tol=1e-12)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = mod.Lasso(alpha=lam, fit_intercept=False, tol=1e-12, max_iter=1000)
        if peer == "skglm":
            est.max_epochs = 100_000
        est.fit(D, y)
    np.testing.assert_allclose(ours.coef, est.coef_, atol=1e-6, rtol=0)
    np.testing.assert_array_equal(ours.coef != 0, est.coef_ != 0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_warm_path_equals_cold_solves(backend):
    D, Y = make_problem(n=40, m=200, k=5, B=2, seed=5)
    lams = lambda_grid(D, Y, n_lambdas=6, eps=1e-2)
    path = run(backend, D, Y, lams, tol=1e-13)
    for ell, lam in enumerate(lams):
        cold = run(backend, D, Y, [lam], tol=1e-13)
        np.testing.assert_allclose(path.coefs[ell], cold.coefs[0], atol=1e-8)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_native_matches_reference_multi_rhs(dtype):
    D, Y = make_problem(n=30, m=90, k=4, B=4, dtype=dtype, seed=6)
    lams = lambda_grid(D, Y, n_lambdas=5, eps=5e-2)
    a = lasso_path(D, Y, lams, tol=1e-12)
    b = lasso_path_reference(D, Y, lams, tol=1e-12)
    assert a.coefs.shape == (5, 4, 90)
    assert a.coefs.dtype == dtype
    np.testing.assert_allclose(a.coefs, b.coefs, atol=TOL_COEF[dtype] / 10)
    # each column solved alone gives the same
    for j in range(4):
        single = lasso_path(D, np.ascontiguousarray(Y[:, j]), lams, tol=1e-12)
        np.testing.assert_allclose(single.coefs, a.coefs[:, j], atol=TOL_COEF[dtype] / 10)


@pytest.mark.parametrize("n_threads", [1, 2])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_lockstep_groups_match_single_solves(n_threads, dtype):
    """Eleven right-hand sides run in lockstep groups sharing each pass over D (blocks of four
    problems, some screened apart and some not, plus a remainder); each equals its own solve
    and the reference, with a warm start for some columns and a zero right-hand side."""
    D, Y = make_problem(n=36, m=150, k=4, B=11, dtype=dtype, seed=9)
    Y[:, 5] = 0.0
    lams = lambda_grid(D, Y, n_lambdas=6, eps=2e-2)
    warm = np.zeros((11, 150))
    warm[2, :7] = 0.3
    a = lasso_path(D, Y, lams, tol=1e-12, n_threads=n_threads, warm_start=warm)
    ref = lasso_path_reference(D, Y, lams, tol=1e-12, warm_start=warm)
    np.testing.assert_allclose(a.coefs, ref.coefs, atol=TOL_COEF[dtype] / 10)
    assert np.all(a.coefs[:, 5] == 0) and np.all(a.gaps >= 0)
    for j in (0, 2, 10):
        single = lasso_path(D, np.ascontiguousarray(Y[:, j]), lams, tol=1e-12, warm_start=warm[j])
        np.testing.assert_allclose(single.coefs, a.coefs[:, j], atol=TOL_COEF[dtype] / 10)
        np.testing.assert_allclose(single.gaps, a.gaps[:, j], atol=1e-12)


def test_native_column_norms_and_finiteness():
    from rml_fast._native import _C

    D, _ = make_problem(n=33, m=70, dtype=np.float32, seed=10)
    D = np.asfortranarray(D)
    nrm2, finite = _C.lasso.col_norm2(D)
    assert finite and nrm2.dtype == np.float64
    np.testing.assert_allclose(nrm2, (D.astype(np.float64) ** 2).sum(0), rtol=1e-12)
    D[3, 40] = np.inf
    assert not _C.lasso.col_norm2(D)[1]
    with pytest.raises(ValueError, match="D must be finite"):
        lasso_path(D, np.ones(33, dtype=np.float32), [0.1])


@pytest.mark.parametrize(
    "opts",
    [
        {"screening": None},
        {"anderson_k": 0},
        {"working_set": False},
        {"ws_start": 1, "anderson_k": 3},
        {"n_threads": 1},
    ],
)
def test_options_do_not_change_the_solution(opts):
    D, Y = make_problem(n=50, m=250, k=6, B=3, seed=7)
    lams = lambda_grid(D, Y, n_lambdas=6, eps=1e-2)
    base = lasso_path(D, Y, lams, tol=1e-12)
    other = lasso_path(D, Y, lams, tol=1e-12, **opts)
    np.testing.assert_allclose(other.coefs, base.coefs, atol=1e-7)


def test_large_working_set_uses_residual_solver():
    # more than 1024 features active in the working set (no Gram cache): still exact
    D, y = make_problem(n=80, m=1500, k=10, seed=8)
    lam = lambda_max(D, y) / 50
    a = lasso(D, y, lam, tol=1e-12, working_set=False)
    b = lasso(D, y, lam, tol=1e-12)
    np.testing.assert_allclose(a.coef, b.coef, atol=1e-7)
    assert kkt_violation(D, y, a.coef, lam) < 1e-5


def test_sparse_output_and_warm_start():
    pytest.importorskip("scipy.sparse")
    D, Y = make_problem(n=30, m=100, k=4, B=2, seed=9)
    lams = lambda_grid(D, Y, n_lambdas=4, eps=1e-2)
    dense = lasso_path(D, Y, lams, tol=1e-12)
    sp = lasso_path(D, Y, lams, tol=1e-12, sparse=True)
    assert len(sp.coefs) == 4
    for ell in range(4):
        np.testing.assert_array_equal(sp.coefs[ell].toarray(), dense.coefs[ell])
    # warm start at the solution: no epochs needed and the same answer
    warm = lasso_path(D, Y, lams[-1:], tol=1e-10, warm_start=dense.coefs[-1])
    assert np.all(warm.n_epochs == 0)
    np.testing.assert_array_equal(warm.coefs[0], dense.coefs[-1])


def test_max_epochs_zero_returns_start_and_positive_gap():
    D, y = make_problem(seed=10)
    with pytest.warns(ConvergenceWarning, match=r"1 of 1 .* max_epochs=0 .* tol=1e-06"):
        res = lasso_path(D, y, [lambda_max(D, y) / 10], max_epochs=0)
    assert np.all(res.coefs == 0)
    assert res.gaps[0] > 0
    assert res.n_epochs[0] == 0
    assert res.converged.tolist() == [False]


def test_inputs_not_mutated():
    D, Y = make_problem(B=2, seed=11)
    D0, Y0 = D.copy(), Y.copy()
    lasso_path(D, Y, lambda_grid(D, Y, n_lambdas=3))
    np.testing.assert_array_equal(D, D0)
    np.testing.assert_array_equal(Y, Y0)


def test_c_ordered_design_is_accepted():
    D, y = make_problem(seed=12)
    lams = lambda_grid(D, y, n_lambdas=3)
    a = lasso_path(np.ascontiguousarray(D), y, lams, tol=1e-12)
    b = lasso_path(D, y, lams, tol=1e-12)
    np.testing.assert_allclose(a.coefs, b.coefs, atol=1e-9)


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"Y": np.zeros(7)}, ValueError, "Y must have"),
        ({"D": np.full((40, 120), np.nan)}, ValueError, "D must be finite"),
        ({"lambdas": [-0.1]}, ValueError, "strictly positive"),
        ({"lambdas": [0.0]}, ValueError, "strictly positive"),
        ({"lambdas": [0.1, 0.2]}, ValueError, "non-increasing"),
        ({"lambdas": [np.nan]}, ValueError, "lambdas must be finite"),
        ({"Y": "float32"}, TypeError, "dtype of D"),
        ({"tol": -1.0}, ValueError, "tol"),
        ({"max_epochs": 1.5}, TypeError, "max_epochs"),
        ({"screening": "strong"}, ValueError, "screening"),
        ({"warm_start": np.zeros(3)}, ValueError, "warm_start"),
        ({"col_norm2": np.ones(5)}, ValueError, "col_norm2"),
        ({"D": np.zeros((40, 120), dtype=complex)}, TypeError, "D must hold real"),
    ],
)
def test_bad_input(kwargs, exc, match):
    D, y = make_problem()
    args = {"D": D, "Y": y, "lambdas": [0.01]}
    if isinstance(kwargs.get("Y"), str):
        kwargs = {"Y": y.astype(np.float32)}
    args.update(kwargs)
    with pytest.raises(exc, match=match):
        lasso_path(args.pop("D"), args.pop("Y"), args.pop("lambdas"), **args)


def test_ridge_refit_matches_sklearn_and_lstsq():
    sklearn_lm = pytest.importorskip("sklearn.linear_model")
    D, y = make_problem(n=60, m=100, seed=13)
    S = np.array([3, 17, 42, 77, 90])
    n = D.shape[0]
    for mu in (1e-3, 0.1, 2.0):
        ours = ridge_refit(D, y, S, mu)
        ref = sklearn_lm.Ridge(alpha=n * mu, fit_intercept=False, solver="cholesky").fit(D[:, S], y)
        np.testing.assert_allclose(ours[S], ref.coef_, rtol=1e-10, atol=1e-12)
        assert np.all(np.delete(ours, S) == 0)
    ls = np.linalg.lstsq(D[:, S], y, rcond=None)[0]
    np.testing.assert_allclose(ridge_refit(D, y, S, 0.0)[S], ls, rtol=1e-9)
    with pytest.raises(ValueError, match="support"):
        ridge_refit(D, y, [0, 0], 0.1)
    with pytest.raises(ValueError, match="support"):
        ridge_refit(D, y, [100], 0.1)
    with pytest.raises(ValueError, match="mu"):
        ridge_refit(D, y, S, -1.0)


def _duality_gap(D, y, w, lam):
    """The duality gap of w recomputed in NumPy (dual point r / max(n lam, ||X^T r||_inf))."""
    X = D.astype(np.float64)
    n = X.shape[0]
    y = y.astype(np.float64)
    r = y - X @ w.astype(np.float64)
    s = max(n * lam, float(np.abs(X.T @ r).max()))
    primal = r @ r / (2 * n) + lam * np.abs(w).sum()
    dual = lam * (r @ y) / s - n * lam**2 * (r @ r) / (2 * s * s)
    return primal - dual


def _native_dense(D, Y, lams, **kw):
    from rml_fast._native import _C

    D = np.asfortranarray(D)
    Y2 = np.asfortranarray(Y.reshape(Y.shape[0], -1))
    nrm2, _ = _C.lasso.col_norm2(D)
    indices, values, indptr, gaps, _epochs, passes = _C.lasso.path(D, Y2, lams, nrm2, None, **kw)
    L, B, m = len(lams), Y2.shape[1], D.shape[1]
    coefs = np.zeros((L * B, m))
    coefs[np.repeat(np.arange(L * B), np.diff(indptr)), indices] = values
    return coefs.reshape(L, B, m), gaps, passes


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_correlation_reuse_keeps_the_gap_and_saves_passes(dtype):
    """Correlations reused through their bounds (probe direction, snapshot ring that wraps
    on a 100-penalty path, pass-free first round of each penalty): the duality gap recomputed
    independently in NumPy meets the tolerance at every penalty, the solutions equal those of
    the solver that recomputes every correlation each round, and far fewer passes over D."""
    D, y = make_problem(n=96, m=3000, k=12, dtype=dtype, seed=13)
    lams = lambda_grid(D, y, n_lambdas=100, eps=1e-2)
    tol = 1e-10
    on, gaps_on, passes_on = _native_dense(D, y, lams, tol=tol, reuse_corr=True)
    off, _, passes_off = _native_dense(D, y, lams, tol=tol, reuse_corr=False)
    yy = float(y.astype(np.float64) @ y.astype(np.float64))
    tol_abs = tol * yy / (2 * D.shape[0])
    for ell, lam in enumerate(lams):
        g = _duality_gap(D, y, on[ell, 0], lam)
        assert g <= tol_abs * (1 + 1e-6) + 1e-14 * yy, (ell, g, tol_abs)
        assert 0 <= gaps_on[ell, 0] <= tol_abs
    np.testing.assert_allclose(on, off, atol=1e-6)
    assert passes_on[0, 0] == 1.0  # the first penalty reads every column once (cold start)
    assert np.count_nonzero(passes_on) > 64  # more passes than snapshots: the ring wrapped
    assert passes_on.sum() < 0.5 * passes_off.sum()
    # the public result reports the same counts
    res = lasso_path(D, y, lams, tol=tol)
    np.testing.assert_array_equal(res.n_passes, passes_on[:, 0])


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_dynamic_groups_match_single_solves(dtype):
    """Twenty right-hand sides on two threads form three groups handed out dynamically;
    every column equals its own single solve and the reference."""
    D, Y = make_problem(n=40, m=160, k=4, B=20, dtype=dtype, seed=14)
    lams = lambda_grid(D, Y, n_lambdas=5, eps=2e-2)
    a = lasso_path(D, Y, lams, tol=1e-12, n_threads=2)
    ref = lasso_path_reference(D, Y, lams, tol=1e-12)
    np.testing.assert_allclose(a.coefs, ref.coefs, atol=TOL_COEF[dtype] / 10)
    assert a.n_passes.shape == (5, 20) and np.all(a.n_passes[0] == 1.0)
    for j in (0, 7, 19):
        single = lasso_path(D, np.ascontiguousarray(Y[:, j]), lams, tol=1e-12, n_threads=1)
        np.testing.assert_allclose(single.coefs, a.coefs[:, j], atol=TOL_COEF[dtype] / 10)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_design_is_streamed_without_a_copy(dtype):
    """A Fortran-ordered design of either dtype reaches the native solver as it is: the memory
    traced during the call stays far below the size of D (no float64 conversion, no copy)."""
    import tracemalloc

    D, y = make_problem(n=256, m=4096, k=8, dtype=dtype, seed=15)
    lams = lambda_grid(D, y, n_lambdas=5, eps=1e-2)
    lasso_path(D, y, lams)  # first call: imports and caches outside the traced window
    tracemalloc.start()
    try:
        lasso_path(D, y, lams)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < D.nbytes / 4, (peak, D.nbytes)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_portable_bookkeeping_matches_the_vectorised_one(dtype, tmp_path):
    """The per-feature bookkeeping (bounds, screening, working-set keys) has AVX2 versions and
    portable fallbacks; a process forced onto the fallbacks (RML_FAST_LASSO_PORTABLE=1) gives
    the same path: every gap meets the tolerance (checked independently in float64) and the
    coefficients agree with this process's (the AVX2 ones on a machine that has AVX2)."""
    import subprocess
    import sys

    D, y = make_problem(n=96, m=3000, k=12, dtype=dtype, seed=13)
    lams = lambda_grid(D, y, n_lambdas=60, eps=1e-2)
    np.savez(tmp_path / "p.npz", D=D, y=y, lams=lams)
    script = (
        "import numpy as np, sys\n"
        "from rml_fast.kernels.lasso import lasso_path\n"
        "p = np.load(sys.argv[1])\n"
        "r = lasso_path(p['D'], p['y'], p['lams'], tol=1e-10)\n"
        "from rml_fast._native import _C\n"
        "np.savez(sys.argv[2], coefs=r.coefs, gaps=r.gaps, isa=_C.lasso.bookkeeping_isa())\n"
    )
    env = {**os.environ, "RML_FAST_LASSO_PORTABLE": "1"}
    subprocess.run([sys.executable, "-c", script, str(tmp_path / "p.npz"), str(tmp_path / "o.npz")],
                   env=env, check=True, timeout=300)
    from rml_fast._native import _C

    portable = np.load(tmp_path / "o.npz")
    assert str(portable["isa"]) == "portable"
    assert _C.lasso.bookkeeping_isa() in ("avx2", "portable")
    ours = lasso_path(D, y, lams, tol=1e-10)
    yy = float(y.astype(np.float64) @ y.astype(np.float64))
    tol_abs = 1e-10 * yy / (2 * D.shape[0])
    assert np.all(portable["gaps"] <= tol_abs) and np.all(portable["gaps"] >= 0)
    if dtype == np.float64:  # float32 output coefficients are rounded: their own gap is larger
        for ell, lam in enumerate(lams):
            g = _duality_gap(D, y, portable["coefs"][ell], lam)
            assert g <= tol_abs * (1 + 1e-6) + 1e-14 * yy
    np.testing.assert_allclose(portable["coefs"], ours.coefs, atol=1e-6)
