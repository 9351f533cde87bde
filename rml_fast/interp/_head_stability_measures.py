"""Batched similarity kernels for :mod:`rml_fast.interp.head_stability`.

Every kernel takes the heads of one layer of all models stacked along a leading axis ``K``
(``K = S * H``) and returns the full ``[K, K]`` similarity matrix from one (chunked) GEMM, so
that all head pairs of all model pairs are compared at once. Inputs are already validated.
"""

from __future__ import annotations

import torch

#: measures on flattened attention signatures ``[K, M]``
VECTOR_MEASURES = ("cosine", "pearson")
#: measures on head representations ``[K, N, d]`` (rows: tokens, columns: units)
REP_MEASURES = ("cka", "svcca", "pwcca")
MEASURES = VECTOR_MEASURES + REP_MEASURES


def gram_chunked(parts: list[torch.Tensor], chunk: int) -> torch.Tensor:
    """``X @ X.T`` for ``X = cat(parts)`` (each part ``[H_i, M]``), accumulated in float64.

    ``X`` is never materialised: per column chunk, each pair of parts gives one block of the
    Gram matrix (``parts[i][:, c] @ parts[j][:, c].T``, strided views, no copies); a chunk of
    all parts stays in cache while its blocks are formed.
    """
    off = [0]
    for p in parts:
        off.append(off[-1] + p.shape[0])
    m = parts[0].shape[1]
    out = torch.zeros(off[-1], off[-1], dtype=torch.float64)
    for lo in range(0, m, chunk):
        blk = [p[:, lo : lo + chunk] for p in parts]
        for i in range(len(parts)):
            for j in range(i, len(parts)):
                g = (blk[i] @ blk[j].T).double()
                out[off[i] : off[i + 1], off[j] : off[j + 1]] += g
                if j != i:
                    out[off[j] : off[j + 1], off[i] : off[i + 1]] += g.T
    return out


def vector_similarity(parts: list[torch.Tensor], measure: str, chunk: int) -> torch.Tensor:
    """Cosine (or centred cosine = Pearson) of all rows of ``cat(parts)`` (``[K, M]``): ``[K, K]``."""
    g = gram_chunked(parts, chunk)
    if measure == "pearson":
        s = torch.cat([p.sum(1, dtype=torch.float64) for p in parts])
        g = g - torch.outer(s, s) / parts[0].shape[1]
    norm = g.diagonal().clamp_min(0).sqrt()
    denom = torch.outer(norm, norm)
    return torch.where(denom > 0, g / denom.clamp_min(1e-300), torch.zeros_like(g)).clamp(-1, 1)


def _centre(x: torch.Tensor) -> torch.Tensor:
    """Subtract the column means of each ``[N, d]`` slice of ``x [K, N, d]`` (float64)."""
    x = x.double()
    return x - x.mean(1, keepdim=True)


def cka_similarity(x: torch.Tensor, chunk: int) -> torch.Tensor:
    """Linear CKA of all pairs of ``x [K, N, d]``: ``||Xa^T Xb||_F^2 / (||Xa^T Xa|| ||Xb^T Xb||)``."""
    k, n, d = x.shape
    xc = _centre(x)
    z = xc.permute(1, 0, 2).reshape(n, k * d)  # [N, K*d]
    c = torch.zeros(k * d, k * d, dtype=torch.float64)
    for lo in range(0, n, chunk):
        blk = z[lo : lo + chunk]
        c += blk.T @ blk
    hsic = c.view(k, d, k, d).square().sum((1, 3))  # [K, K]
    norm = hsic.diagonal().sqrt()
    denom = torch.outer(norm, norm)
    return torch.where(denom > 0, hsic / denom.clamp_min(1e-300), torch.zeros_like(hsic))


def _reduced_bases(
    x: torch.Tensor, keep: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """SVD step of SVCCA: per head the left singular vectors spanning ``keep`` of the variance.

    Returns ``(U [K, N, r], S [K, r], Vh [K, r, d], k [K])`` with the columns past each head's
    ``k`` zeroed (``r = min(N, d)``).
    """
    xc = _centre(x)
    u, s, vh = torch.linalg.svd(xc, full_matrices=False)
    var = s.square()
    total = var.sum(1, keepdim=True)
    tol = s[:, :1] * max(x.shape[1], x.shape[2]) * torch.finfo(torch.float64).eps * 16
    rank = (s > tol).sum(1)
    frac = var.cumsum(1) / total.clamp_min(1e-300)
    # smallest k with frac >= keep (keep=1: the numerical rank)
    k_keep = (frac < keep - 1e-12).sum(1) + 1
    kk = torch.minimum(k_keep, rank).clamp_min(1)
    live = torch.arange(s.shape[1])[None, :] < kk[:, None]  # [K, r]
    u = u * live[:, None, :]
    s = s * live
    return u, s, vh, kk


def cca_similarity(x: torch.Tensor, keep: float, weighted: bool, chunk: int) -> torch.Tensor:
    """SVCCA (mean canonical correlation) or PWCCA of all pairs of ``x [K, N, d]``: ``[K, K]``.

    The canonical correlations of the reduced representations of heads ``a`` and ``b`` are the
    singular values of ``Ua^T Ub`` (orthonormal bases of their column spaces). PWCCA weights
    each correlation ``rho_i`` by ``alpha_i = sum_j |<h_i, x_j>|``, ``h_i`` the i-th canonical
    variate of ``a`` and ``x_j`` the units of ``a`` (Morcos et al. 2018), so it is asymmetric.
    """
    k, n, _ = x.shape
    u, s, vh, kk = _reduced_bases(x, keep)
    r = u.shape[2]
    z = u.permute(1, 0, 2).reshape(n, k * r)
    c = torch.zeros(k * r, k * r, dtype=torch.float64)
    for lo in range(0, n, chunk):
        blk = z[lo : lo + chunk]
        c += blk.T @ blk
    blocks = c.view(k, r, k, r).permute(0, 2, 1, 3)  # [K, K, r, r] = Ua^T Ub
    m = torch.minimum(kk[:, None], kk[None, :])  # [K, K] number of canonical pairs
    first = torch.arange(r)[None, None, :] < m[..., None]  # [K, K, r]
    if not weighted:
        rho = torch.linalg.svdvals(blocks).clamp(0, 1) * first
        return rho.sum(-1) / m
    p, rho, _ = torch.linalg.svd(blocks)
    rho = rho.clamp(0, 1) * first
    # <h_i, x_j> = (P^T Ua^T Xa)_ij = (P^T diag(Sa) Vha)_ij
    sv = s[:, :, None] * vh  # [K, r, d]
    proj = torch.einsum("abri,arj->abij", p, sv)  # [K, K, r, d]
    alpha = proj.abs().sum(-1) * first
    return (alpha * rho).sum(-1) / alpha.sum(-1).clamp_min(1e-300)


def similarity_matrix(
    parts: list[torch.Tensor], measure: str, *, keep: float, chunk: int
) -> torch.Tensor:
    """Dispatch to the kernel of ``measure``; ``parts`` are ``[H_i, M]`` or ``[H_i, N, d]``."""
    if measure in VECTOR_MEASURES:
        return vector_similarity(parts, measure, chunk)
    x = torch.cat(parts)
    if measure == "cka":
        return cka_similarity(x, chunk)
    return cca_similarity(x, keep, measure == "pwcca", chunk)
