"""Numerical core of the mixture of factor analyzers (private; see :mod:`rml_fast.interp.mfa`).

Everything here works on low-rank-plus-diagonal covariances ``C_k = W_k W_kᵀ + Ψ_k`` through the
Woodbury identity and the matrix determinant lemma, never forming a ``D × D`` matrix:

* ``M_k = I_q + W_kᵀ Ψ_k⁻¹ W_k = L_k L_kᵀ`` (Cholesky), ``B_k = Ψ_k⁻¹ W_k L_k⁻ᵀ`` (D × q);
* ``u_k(x) = B_kᵀ (x − μ_k) = L_k⁻¹ v_k(x)`` with ``v_k = W_kᵀ Ψ_k⁻¹ (x − μ_k)``;
* ``log N_k(x) = −½ [D log 2π + Σ_d log Ψ_kd + log det M_k + (x−μ_k)ᵀ Ψ_k⁻¹ (x−μ_k) − ‖u_k‖²]``;
* ``E[z | x, k] = M_k⁻¹ v_k = L_k⁻ᵀ u_k`` and ``Cov[z | x, k] = M_k⁻¹``.

One batch costs one GEMM ``X @ [B_1 … B_K]`` (N × D by D × Kq) plus O(N K D) for the
Mahalanobis terms; the EM statistics need one more GEMM of the same size.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

LOG_2PI = float(np.log(2.0 * np.pi))


@dataclass
class Prepared:
    """Per-component quantities that do not depend on the data (float64)."""

    const: np.ndarray  # (K,) log π_k − ½(D log 2π + Σ log Ψ_k + log det M_k + μ_kᵀΨ_k⁻¹μ_k)
    pinv: np.ndarray  # (K, D) or (1, D): Ψ⁻¹
    pm: np.ndarray  # (K, D): Ψ_k⁻¹ μ_k
    B: np.ndarray  # (D, Kq): [B_1 … B_K], B_k = Ψ_k⁻¹ W_k L_k⁻ᵀ
    muB: np.ndarray  # (K, q): μ_kᵀ B_k
    Linv: np.ndarray  # (K, q, q): L_k⁻¹ (M_k = L_k L_kᵀ)
    q: int


def prepare(means: np.ndarray, W: np.ndarray, psi: np.ndarray, weights: np.ndarray) -> Prepared:
    """Precompute the Woodbury factors; ``psi`` is (D,) shared or (K, D) per component."""
    K, D, q = W.shape
    psi2 = psi[None, :] if psi.ndim == 1 else psi
    pinv = 1.0 / psi2
    with np.errstate(divide="ignore"):
        logw = np.log(weights)
    logdet_psi = np.log(psi2).sum(axis=1)
    if q > 0:
        A = W * pinv[:, :, None] if psi.ndim == 2 else W * pinv[0][None, :, None]
        M = np.matmul(W.transpose(0, 2, 1), A) + np.eye(q)[None]
        L = np.linalg.cholesky(M)
        logdet_M = 2.0 * np.log(np.diagonal(L, axis1=1, axis2=2)).sum(axis=1)
        Linv = np.linalg.inv(L)
        Bk = np.matmul(A, Linv.transpose(0, 2, 1))
        B = np.ascontiguousarray(Bk.transpose(1, 0, 2).reshape(D, K * q))
        muB = np.matmul(means[:, None, :], Bk)[:, 0]
    else:
        logdet_M = np.zeros(K)
        Linv = np.zeros((K, 0, 0))
        B = np.zeros((D, 0))
        muB = np.zeros((K, 0))
    pm = pinv * means if psi.ndim == 2 else pinv[0][None, :] * means
    c = (means * pm).sum(axis=1)
    const = logw - 0.5 * (D * LOG_2PI + logdet_psi + logdet_M + c)
    return Prepared(const, pinv, pm, B, muB, Linv, q)


def component_logpdf(X: np.ndarray, P: Prepared) -> tuple[np.ndarray, np.ndarray]:
    """``log π_k + log N_k(x_n)`` of shape (N, K) and ``u = L_k⁻¹ v_k`` of shape (N, K, q).

    One GEMM gives ``u_k = B_kᵀ(x − μ_k)``; the Woodbury correction is ``vᵀM⁻¹v = ‖u‖²``."""
    N = X.shape[0]
    K = P.const.shape[0]
    X2 = X * X
    if P.pinv.shape[0] == 1:
        quad = (-0.5 * (X2 @ P.pinv[0]))[:, None]
    else:
        quad = -0.5 * (X2 @ P.pinv.T)
    out = P.const[None, :] + quad + X @ P.pm.T
    if P.q > 0:
        U = (X @ P.B).reshape(N, K, P.q)
        U -= P.muB[None]
        out += 0.5 * (U * U).sum(axis=2)
    else:
        U = np.zeros((N, K, 0))
    return out, U


def posterior_mean(U: np.ndarray, P: Prepared) -> np.ndarray:
    """``E[z | x, k] = L_k⁻ᵀ u_k = M_k⁻¹ v_k``, shape (N, K, q)."""
    return np.matmul(U.transpose(1, 0, 2), P.Linv).transpose(1, 0, 2)


def posterior_cov(P: Prepared) -> np.ndarray:
    """``Cov[z | x, k] = M_k⁻¹ = L_k⁻ᵀ L_k⁻¹``, shape (K, q, q)."""
    return np.matmul(P.Linv.transpose(0, 2, 1), P.Linv)


def _lse_resp(lp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    m = lp.max(axis=1, keepdims=True)
    R = np.exp(lp - m)
    tot = R.sum(axis=1, keepdims=True)
    R /= tot
    return (m + np.log(tot))[:, 0], R


def loglik_resp(X: np.ndarray, P: Prepared, chunk: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-sample ``log p(x)`` (N,) and responsibilities (N, K), computed in row chunks."""
    N = X.shape[0]
    K = P.const.shape[0]
    ll = np.empty(N)
    R = np.empty((N, K))
    for s in range(0, N, chunk):
        lp, _ = component_logpdf(X[s:s + chunk], P)
        ll[s:s + chunk], R[s:s + chunk] = _lse_resp(lp)
    return ll, R


def _base_logpdf(X: np.ndarray, X2: np.ndarray, P: Prepared) -> np.ndarray:
    """``log π_k + log N_k(x)`` without the Woodbury term ``+½‖u‖²``, shape (N, K)."""
    if P.pinv.shape[0] == 1:
        quad = (-0.5 * (X2 @ P.pinv[0]))[:, None]
    else:
        quad = -0.5 * (X2 @ P.pinv.T)
    return P.const[None, :] + quad + X @ P.pm.T


@njit(cache=True, nogil=True)
def _fused_estep(base, U, R, RU, Nk, Sz, Szz):  # pragma: no cover - compiled
    """One pass over a row block: add ½‖u‖², log-sum-exp, responsibilities ``R``, ``R·u``
    and the sums ``Σα``, ``Σα u``, ``Σα u uᵀ`` (in place); returns ``Σ_n log p(x_n)``."""
    n, K, q = U.shape
    lp = np.empty(K)
    total = 0.0
    for i in range(n):
        m = -np.inf
        for k in range(K):
            v = base[i, k]
            for j in range(q):
                v += 0.5 * U[i, k, j] * U[i, k, j]
            lp[k] = v
            if v > m:
                m = v
        tot = 0.0
        for k in range(K):  # exp(-500) ~ 1e-217: flush below it (denormals are 10x slower)
            d = lp[k] - m
            lp[k] = np.exp(d) if d > -500.0 else 0.0
            tot += lp[k]
        total += m + np.log(tot)
        for k in range(K):
            r = lp[k] / tot
            R[i, k] = r
            Nk[k] += r
            for j in range(q):
                ru = r * U[i, k, j]
                RU[i, k, j] = ru
                Sz[k, j] += ru
                for t in range(q):
                    Szz[k, j, t] += ru * U[i, k, t]
    return total


def em_step(
    X: np.ndarray,
    means: np.ndarray,
    W: np.ndarray,
    psi: np.ndarray,
    weights: np.ndarray,
    *,
    psi_floor: float,
    chunk: int,
    variant: str = "aecm",
) -> tuple[float, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One EM iteration; returns the total log-likelihood of the *incoming* parameters and the
    updated ``(means, W, psi, weights)``.

    ``variant="augmented"``: Ghahramani & Hinton (1996), one M-step for the augmented loadings
    ``W̃_k = [W_k, μ_k]``. ``variant="aecm"``: the same E pass, then ``μ_k`` = the
    responsibility-weighted mean (exact maximiser with ``z`` integrated out), the factor
    posterior moved to the new mean (``E[z] − M⁻¹WᵀΨ⁻¹ δμ``, exact, no second pass), then
    ``W_k``, ``Ψ`` for the centred data. Each step raises the free energy, so the
    log-likelihood is monotone for both; ``aecm`` moves the means much faster.
    """
    N, D = X.shape
    K, _, q = W.shape
    P = prepare(means, W, psi, weights)
    per_comp = psi.ndim == 2
    Nk = np.zeros(K)
    Sx = np.zeros((K, D))
    Sxz = np.zeros((D, K * q))
    Sz = np.zeros((K, q))
    Szz = np.zeros((K, q, q))
    Sxx = np.zeros((K, D))
    total = 0.0
    X2 = X * X
    R = np.empty((min(chunk, N), K))
    RU = np.empty((min(chunk, N), K, q))
    for s in range(0, N, chunk):
        Xc, X2c = X[s:s + chunk], X2[s:s + chunk]
        n = Xc.shape[0]
        base = _base_logpdf(Xc, X2c, P)
        U = (Xc @ P.B).reshape(n, K, q)
        U -= P.muB[None]
        total += _fused_estep(base, U, R[:n], RU[:n], Nk, Sz, Szz)
        Sx += R[:n].T @ Xc
        Sxx += R[:n].T @ X2c
        if q > 0:  # statistics of u; E[z] = L⁻ᵀu is applied once per component below
            Sxz += Xc.T @ RU[:n].reshape(n, K * q)
    Li = P.Linv
    Sxz3 = np.matmul(Sxz.reshape(D, K, q).transpose(1, 0, 2), Li)  # Σα x E[z]ᵀ, (K, D, q)
    Sz = np.matmul(Sz[:, None, :], Li)[:, 0]  # Σα E[z]
    Szz = np.matmul(Li.transpose(0, 2, 1), np.matmul(Szz, Li))  # Σα E[z]E[z]ᵀ
    alive = Nk > 1e-10 * N
    Minv = posterior_cov(P)
    if variant == "augmented":
        S = np.concatenate([Sxz3, Sx[:, :, None]], axis=2)  # [Σα x Ezᵀ, Σα x]
        G = np.zeros((K, q + 1, q + 1))
        if q > 0:
            G[:, :q, :q] = Szz + Nk[:, None, None] * Minv
            G[:, :q, q] = Sz
            G[:, q, :q] = Sz
        G[:, q, q] = Nk
        Wt = np.concatenate([W, means[:, :, None]], axis=2)
        if alive.any():
            Wt[alive] = np.linalg.solve(G[alive], S[alive].transpose(0, 2, 1)).transpose(0, 2, 1)
        explained = (Wt * S).sum(axis=2)  # (K, D): diag(W̃_k S_kᵀ)
        resid = Sxx - explained
        new_mu, new_W = Wt[:, :, q].copy(), Wt[:, :, :q].copy()
    else:
        new_mu = means.copy()
        new_mu[alive] = Sx[alive] / Nk[alive, None]
        new_W = W.copy()
        # Σα (x−μ)² per coordinate, at the new (weighted-mean) μ
        resid = Sxx - Nk[:, None] * new_mu * new_mu
        if q > 0:
            Bk = P.B.reshape(D, K, q).transpose(1, 0, 2)
            g = np.matmul(np.matmul((new_mu - means)[:, None, :], Bk), Li)[:, 0]  # M⁻¹Aᵀδμ
            Sz_n = Sz - Nk[:, None] * g
            Szz_n = (Szz - Sz[:, :, None] * g[:, None, :] - g[:, :, None] * Sz[:, None, :]
                     + Nk[:, None, None] * g[:, :, None] * g[:, None, :])
            Syz = Sxz3 - Sx[:, :, None] * g[:, None, :] - new_mu[:, :, None] * Sz_n[:, None, :]
            G = Szz_n + Nk[:, None, None] * Minv
            if alive.any():
                new_W[alive] = np.linalg.solve(
                    G[alive], Syz[alive].transpose(0, 2, 1)).transpose(0, 2, 1)
            resid = resid - (new_W * Syz).sum(axis=2)
    if per_comp:
        new_psi = psi.copy()
        new_psi[alive] = resid[alive] / Nk[alive, None]
    else:
        new_psi = resid[alive].sum(axis=0) / N
    new_psi = np.maximum(new_psi, psi_floor)
    return total, new_mu, new_W, new_psi, Nk / N


def kmeans_init(
    X: np.ndarray, K: int, *, proj_dim: int, pool_frac: float, rng: np.random.Generator,
    n_init: int = 3,
) -> tuple[np.ndarray, np.ndarray]:
    """Projected k-means: a random pool of rows, a random orthonormal projection to
    ``proj_dim`` dimensions, k-means++ with Lloyd iterations (scikit-learn's ``KMeans``).

    Returns the pool's row indices and their cluster labels."""
    from sklearn.cluster import KMeans

    N, D = X.shape
    n_pool = min(N, max(int(np.ceil(pool_frac * N)), min(N, 20 * K)))
    idx = np.sort(rng.choice(N, size=n_pool, replace=False)) if n_pool < N else np.arange(N)
    Xp = X[idx]
    if proj_dim < D:
        Q, _ = np.linalg.qr(rng.standard_normal((D, proj_dim)))
        Xp = Xp @ Q
    km = KMeans(n_clusters=K, n_init=n_init, max_iter=100, random_state=int(rng.integers(2**31 - 1)))
    labels = km.fit_predict(Xp)
    return idx, labels


def local_pca_init(
    X: np.ndarray, idx: np.ndarray, labels: np.ndarray, K: int, q: int,
    *, per_comp: bool, loadings: str, psi_floor: float, rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Means, loadings, Ψ and weights from a hard clustering of ``X[idx]``.

    ``loadings="pca"``: the top-q principal directions of each cluster scaled by
    ``sqrt(max(λ_j − σ², 0))`` (σ² the mean discarded eigenvalue) plus a small random part so no
    column starts at zero; ``"random"``: the reference's unit random directions (N(0, 1/D),
    normalised) times softplus(1)."""
    D = X.shape[1]
    Xp = X[idx]
    means = np.empty((K, D))
    W = np.empty((K, D, q))
    resid = np.empty((K, D))
    counts = np.bincount(labels, minlength=K).astype(float)
    glob_var = Xp.var(axis=0) + psi_floor
    for k in range(K):
        Xk = Xp[labels == k]
        if Xk.shape[0] == 0:
            Xk = Xp[rng.integers(Xp.shape[0], size=1)]
        mu = Xk.mean(axis=0)
        means[k] = mu
        C = Xk - mu
        var = (C * C).mean(axis=0)
        rand = rng.standard_normal((D, q)) / np.sqrt(D)
        if loadings == "random" or q == 0:
            nrm = np.linalg.norm(rand, axis=0, keepdims=True)
            W[k] = rand / np.maximum(nrm, 1e-12) * np.log1p(np.e)
            resid[k] = var if Xk.shape[0] > 1 else glob_var
            continue
        _, s, Vt = np.linalg.svd(C, full_matrices=False)
        lam = s**2 / max(Xk.shape[0], 1)
        r = min(q, lam.shape[0])
        sigma2 = lam[r:].sum() / max(D - r, 1)
        Wk = np.zeros((D, q))
        Wk[:, :r] = Vt[:r].T * np.sqrt(np.maximum(lam[:r] - sigma2, 0.0))
        scale = np.sqrt(max(sigma2, float(glob_var.mean()) * 1e-3))
        W[k] = Wk + 0.1 * scale * rand
        explained = (Wk * Wk).sum(axis=1)
        resid[k] = np.maximum(var - explained, 0.0) if Xk.shape[0] > q + 1 else glob_var
    w = np.maximum(counts, 1.0)
    w /= w.sum()
    if per_comp:
        psi = np.maximum(resid, psi_floor)
    else:
        psi = np.maximum((w[:, None] * resid).sum(axis=0), psi_floor)
    psi = np.maximum(psi, 1e-3 * glob_var)
    return means, W, psi, w
