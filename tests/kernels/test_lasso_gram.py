"""lasso_path_gram (Gram-form Lasso paths) against the residual-form reference and closed forms.

Both solvers stop on a certified duality gap of the same objective, so with ``P*`` the optimum
``0 <= P(w) - P* <= gap`` for each: objectives agree within the larger gap, and on a design of
full column rank (strong convexity modulus ``mu = lambda_min(X^T X / n)``) the coefficients
within ``sqrt(2 gap / mu)`` each. These bounds hold on any CPU (a 1e-9 relative slack covers
rounding of the objective).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from rml_fast.exceptions import ConvergenceWarning
from rml_fast.kernels.lasso import lambda_grid, lasso_path_gram, lasso_path_reference


def _tall(n, m, seed, rho=0.0):
    rng = np.random.default_rng(seed)
    Z = rng.standard_normal((n, m))
    X = np.sqrt(1 - rho) * Z + np.sqrt(rho) * rng.standard_normal((n, 1))  # correlated columns
    w = np.zeros(m)
    w[: m // 3] = rng.standard_normal(m // 3) * 2
    y = X @ w + 0.5 * rng.standard_normal(n)
    return X, y


def _objective(X, y, w, lam):
    r = y - X @ w
    return r @ r / (2 * X.shape[0]) + lam * np.abs(w).sum()


def _true_gap(X, y, w, lam):
    n = X.shape[0]
    r = y - X @ w
    s = max(n * lam, np.abs(X.T @ r).max())
    dual = lam * (r @ y) / s - n * lam**2 * (r @ r) / (2 * s * s)
    return _objective(X, y, w, lam) - dual


@pytest.mark.parametrize("rho", [0.0, 0.8])
def test_matches_reference_path(rho):
    X, y = _tall(200, 30, seed=1, rho=rho)
    n = X.shape[0]
    lam = lambda_grid(X, y, 12, eps=1e-2)
    tol = 1e-8
    ours = lasso_path_gram(X.T @ X, X.T @ y, y @ y, n, lam, tol=tol)
    ref = lasso_path_reference(X, y, lam, tol=tol)
    mu = np.linalg.eigvalsh(X.T @ X / n)[0]
    bound = tol * (y @ y) / (2 * n)
    for ell, lm in enumerate(lam):
        w_o, w_r = ours.coefs[ell], ref.coefs[ell]
        # our reported gap is the true one of the returned coefficients (to rounding)
        g_true = _true_gap(X, y, w_o, lm)
        assert g_true <= bound * (1 + 1e-6) + 1e-12 * (y @ y) / n
        assert ours.gaps[ell] == pytest.approx(g_true, abs=1e-10 * (y @ y) / n)
        p_o, p_r = _objective(X, y, w_o, lm), _objective(X, y, w_r, lm)
        assert abs(p_o - p_r) <= max(g_true, ref.gaps[ell]) + 1e-9 * abs(p_r)
        radius = np.sqrt(2 * g_true / mu) + np.sqrt(2 * ref.gaps[ell] / mu) + 1e-9
        assert np.linalg.norm(w_o - w_r) <= radius
    assert ours.converged.all()
    assert ours.coefs.shape == (12, 30) and ours.gaps.shape == (12,)


def test_orthogonal_closed_form():
    # X^T X = n I: w = soft_threshold(X^T y / n, lam) exactly
    n = 8
    X = np.linalg.qr(np.random.default_rng(0).standard_normal((n, n)))[0] * np.sqrt(n)
    y = X @ np.array([3.0, 0.0, -2.0, 0.5, 0.0, 0.0, 1.0, -0.25])
    c = X.T @ y / n
    lam = np.array([1.0, 0.3, 0.1])
    res = lasso_path_gram(X.T @ X, X.T @ y, y @ y, n, lam, tol=1e-12)
    for ell, lm in enumerate(lam):
        expect = np.sign(c) * np.maximum(np.abs(c) - lm, 0.0)
        np.testing.assert_allclose(res.coefs[ell], expect, atol=1e-10)


def test_batched_problems_equal_single_calls_and_threads():
    probs = [_tall(150, 20, seed=s, rho=0.5) for s in range(3)]
    G = np.stack([X.T @ X for X, _ in probs])
    Xy = np.stack([X.T @ y for X, y in probs])
    yy = np.array([y @ y for _, y in probs])
    lam = np.geomspace(0.5, 0.005, 15)
    batch = lasso_path_gram(G, Xy, yy, 150, lam, tol=1e-7, n_threads=2)
    assert batch.coefs.shape == (15, 3, 20) and batch.gaps.shape == (15, 3)
    for p in range(3):
        one = lasso_path_gram(G[p], Xy[p], yy[p], 150, lam, tol=1e-7)
        # same arithmetic on one problem whatever the thread: identical iterates
        np.testing.assert_array_equal(batch.coefs[:, p], one.coefs)
        np.testing.assert_array_equal(batch.n_epochs[:, p], one.n_epochs)


def test_zero_column_stays_zero_and_warm_start():
    X, y = _tall(100, 10, seed=3)
    X[:, 4] = 0.0
    G, Xy = X.T @ X, X.T @ y
    lam = np.geomspace(0.3, 0.01, 6)
    res = lasso_path_gram(G, Xy, y @ y, 100, lam, tol=1e-10)
    assert (res.coefs[:, 4] == 0).all()
    # warm started at the solution of the last penalty, a re-solve needs (almost) no epoch
    again = lasso_path_gram(G, Xy, y @ y, 100, lam[-1:], tol=1e-10, warm_start=res.coefs[-1])
    assert again.n_epochs[0] <= 1
    np.testing.assert_allclose(again.coefs[0], res.coefs[-1], atol=1e-8)


@pytest.mark.parametrize("variant", [dict(anderson_k=0), dict(polish=False),
                                     dict(anderson_k=0, polish=False)])
def test_accelerations_off_give_the_same_solution(variant):
    X, y = _tall(300, 40, seed=5, rho=0.9)
    n = X.shape[0]
    lam = lambda_grid(X, y, 10, eps=1e-2)
    tol = 1e-9
    a = lasso_path_gram(X.T @ X, X.T @ y, y @ y, n, lam, tol=tol)
    b = lasso_path_gram(X.T @ X, X.T @ y, y @ y, n, lam, tol=tol, **variant)
    mu = np.linalg.eigvalsh(X.T @ X / n)[0]
    for ell in range(10):
        radius = np.sqrt(2 * a.gaps[ell] / mu) + np.sqrt(2 * b.gaps[ell] / mu) + 1e-9
        assert np.linalg.norm(a.coefs[ell] - b.coefs[ell]) <= radius


def test_max_epochs_warns_and_flags():
    X, y = _tall(200, 30, seed=2, rho=0.95)
    with pytest.warns(ConvergenceWarning, match="max_epochs=1"):
        res = lasso_path_gram(X.T @ X, X.T @ y, y @ y, 200, [1e-4], tol=1e-12, max_epochs=1)
    assert not res.converged[0] and res.n_epochs[0] == 1


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        (dict(G=np.ones((2, 3))), ValueError, "G must"),
        (dict(G=np.array([[1.0, 2.0], [0.0, 1.0]])), ValueError, "G must be symmetric"),
        (dict(G=-np.eye(2)), ValueError, "G must have a non-negative diagonal"),
        (dict(G=np.array([[np.nan, 0.0], [0.0, 1.0]])), ValueError, "G must be finite"),
        (dict(Xy=np.ones(3)), ValueError, "Xy must have shape"),
        (dict(yy=-1.0), ValueError, "yy must be non-negative"),
        (dict(n=0.0), ValueError, "n must be positive"),
        (dict(lambdas=[0.1, 0.2]), ValueError, "lambdas must be non-increasing"),
        (dict(tol=-1.0), ValueError, "tol"),
        (dict(warm_start=np.ones(5)), ValueError, "warm_start must have shape"),
    ],
)
def test_bad_input_raises_naming_argument(kwargs, exc, match):
    args = dict(G=np.eye(2), Xy=np.ones(2), yy=2.0, n=2.0, lambdas=[0.1])
    args.update(kwargs)
    G0 = np.array(args["G"], copy=True)
    with pytest.raises(exc, match=match):
        lasso_path_gram(args.pop("G"), args.pop("Xy"), args.pop("yy"), args.pop("n"),
                        args.pop("lambdas"), **args)
    np.testing.assert_array_equal(kwargs.get("G", np.eye(2)), G0)


def test_no_warning_on_converged_path():
    X, y = _tall(120, 12, seed=4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lasso_path_gram(X.T @ X, X.T @ y, y @ y, 120, np.geomspace(1.0, 0.01, 20))


def test_polish_reaches_the_exact_optimum():
    # with polishing the path ends at the optimum: the gap is far below the tolerance asked
    X, y = _tall(400, 25, seed=8, rho=0.7)
    n = X.shape[0]
    lam = lambda_grid(X, y, 30, eps=1e-3)
    res = lasso_path_gram(X.T @ X, X.T @ y, y @ y, n, lam, tol=1e-4)
    bound = 1e-4 * (y @ y) / (2 * n)
    assert (res.gaps <= bound).all()
    assert np.median(res.gaps) < 1e-6 * bound
    assert np.median(res.n_epochs) <= 5
