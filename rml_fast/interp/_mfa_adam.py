"""Minibatch Adam on the MFA negative log-likelihood (private; see :mod:`rml_fast.interp.mfa`).

The reference parameterisation (Shafran et al. 2026): ``W_k = normalize_cols(dir_k) ·
softplus(scale_k)``, ``Ψ = softplus(ρ) + ε``, ``π = softmax(logits)``. The NLL of a batch uses
the same Woodbury form as the EM core, in torch, on any device.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

EPS_PSI = 1e-5


def _inv_softplus(y: np.ndarray) -> np.ndarray:
    y = np.maximum(y, 1e-12)
    return np.where(y > 20.0, y, np.log(np.expm1(np.minimum(y, 20.0))))


class AdamState:
    """Unconstrained parameters, the Adam optimiser and the shuffling generator of one fit."""

    def __init__(self, means, W, psi, weights, *, lr, device, dtype, seed) -> None:
        kw: dict[str, Any] = {"device": device, "dtype": dtype}
        norms = np.linalg.norm(W, axis=1)  # (K, q)
        dirs = np.where(norms[:, None, :] > 1e-12, W, 1e-3)
        self.mu = torch.tensor(means, **kw).requires_grad_()
        self.dir = torch.tensor(dirs, **kw).requires_grad_()
        self.scale = torch.tensor(_inv_softplus(np.maximum(norms, 1e-6)), **kw).requires_grad_()
        self.rho = torch.tensor(_inv_softplus(np.maximum(psi - EPS_PSI, 1e-8)), **kw).requires_grad_()
        self.logits = torch.tensor(np.log(np.maximum(weights, 1e-300)), **kw).requires_grad_()
        self.opt = torch.optim.Adam(self.params(), lr=lr)
        self.gen = torch.Generator(device="cpu").manual_seed(int(seed))
        self.epoch = 0
        self.best_nll = math.inf
        self.best: tuple[np.ndarray, ...] | None = None
        self.history: list[float] = []

    def params(self) -> list[torch.Tensor]:
        return [self.mu, self.dir, self.scale, self.rho, self.logits]

    def constrained(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        W = F.normalize(self.dir, dim=1) * F.softplus(self.scale)[:, None, :]
        psi = F.softplus(self.rho) + EPS_PSI
        return self.mu, W, psi, torch.log_softmax(self.logits, dim=0)

    def numpy_params(self) -> tuple[np.ndarray, ...]:
        with torch.no_grad():
            mu, W, psi, logw = self.constrained()
            return tuple(t.detach().cpu().double().numpy().copy() for t in (mu, W, psi, logw.exp()))

    # pickling: tensors and optimiser state go through state dicts (works across devices)
    def __getstate__(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["opt"] = self.opt.state_dict()
        d["gen"] = self.gen.get_state()
        for name in ("mu", "dir", "scale", "rho", "logits"):
            d[name] = d[name].detach().cpu()
        return d

    def __setstate__(self, d: dict[str, Any]) -> None:
        opt_state, gen_state = d.pop("opt"), d.pop("gen")
        self.__dict__.update(d)
        for name in ("mu", "dir", "scale", "rho", "logits"):
            setattr(self, name, getattr(self, name).requires_grad_())
        self.opt = torch.optim.Adam(self.params())
        self.opt.load_state_dict(opt_state)
        self.gen = torch.Generator(device="cpu")
        self.gen.set_state(gen_state)

    def to(self, device: str, dtype: torch.dtype) -> None:
        """Move the parameters and optimiser moments to ``device`` / ``dtype``."""
        for name in ("mu", "dir", "scale", "rho", "logits"):
            t = getattr(self, name)
            if t.device != torch.device(device) or t.dtype != dtype:
                setattr(self, name, t.detach().to(device=device, dtype=dtype).requires_grad_())
        state = self.opt.state_dict()
        self.opt = torch.optim.Adam(self.params(), lr=state["param_groups"][0]["lr"])
        self.opt.load_state_dict(state)


def batch_nll(X: torch.Tensor, mu, W, psi, logw) -> torch.Tensor:
    """Per-row ``−log p(x)`` for a batch ``X`` (B, D) under ``(μ, W, Ψ, log π)``."""
    B, D = X.shape
    K, _, q = W.shape
    pinv = 1.0 / psi
    pinv2 = pinv.unsqueeze(0) if psi.dim() == 1 else pinv
    logdet_psi = torch.log(psi).sum(-1)
    quad = (X * X) @ pinv2.T  # (B, K) or (B, 1)
    pm = pinv2 * mu
    lin = X @ pm.T
    c = (mu * pm).sum(-1)
    maha = quad - 2.0 * lin + c[None, :]
    if q > 0:
        A = W * (pinv2[:, :, None] if psi.dim() == 2 else pinv2[0][None, :, None])
        M = torch.eye(q, dtype=W.dtype, device=W.device) + W.transpose(1, 2) @ A
        L = torch.linalg.cholesky(M)
        logdet_M = 2.0 * torch.log(torch.diagonal(L, dim1=1, dim2=2)).sum(-1)
        V = (X @ A.permute(1, 0, 2).reshape(D, K * q)).reshape(B, K, q) - torch.einsum(
            "kd,kdq->kq", mu, A)[None]
        U = torch.linalg.solve_triangular(L, V.permute(1, 2, 0), upper=False)  # (K, q, B)
        maha = maha - (U * U).sum(1).T
    else:
        logdet_M = torch.zeros(K, dtype=X.dtype, device=X.device)
    logp = logw[None, :] - 0.5 * (D * math.log(2 * math.pi) + logdet_psi + logdet_M + maha)
    return -torch.logsumexp(logp, dim=1)


def run_epochs(
    state: AdamState, X: torch.Tensor, *, n_epochs: int, batch_size: int, tol: float,
    keep_best: bool, progress: bool,
) -> bool:
    """Run up to ``n_epochs`` epochs of minibatch Adam; returns whether ``tol`` was met."""
    from tqdm.auto import tqdm

    N = X.shape[0]
    converged = False
    bar = tqdm(range(n_epochs), desc="MFA (adam)", disable=not progress, leave=False)
    for _ in bar:
        perm = torch.randperm(N, generator=state.gen).to(X.device)
        total = 0.0
        for s in range(0, N, batch_size):
            xb = X[perm[s:s + batch_size]]
            nll = batch_nll(xb, *state.constrained()).mean()
            state.opt.zero_grad(set_to_none=True)
            nll.backward()
            state.opt.step()
            total += float(nll.detach()) * xb.shape[0]
        epoch_nll = total / N
        if not math.isfinite(epoch_nll):
            raise FloatingPointError(
                f"MFA Adam: the NLL became non-finite in epoch {state.epoch + 1}; lower lr")
        prev = state.history[-1] if state.history else math.inf
        state.history.append(epoch_nll)
        state.epoch += 1
        if epoch_nll < state.best_nll or not keep_best:
            state.best_nll = epoch_nll
            state.best = state.numpy_params()
        bar.set_postfix(nll=f"{epoch_nll:.4f}")
        if abs(prev - epoch_nll) < tol:
            converged = True
            break
    return converged
