"""Smoothed best-response training of :class:`~rml_fast.strategic.ambiguity.AmbiguousStrategicClassifier`
(private; torch autograd, float64, full-batch Adam).

The surrogate replaces the two indicators of the exact model by sigmoids of temperature
``temp`` (Levanon & Rosenfeld 2021 style): a user moves with probability
``sigma((r - dist_hat(x, R_H)) / temp)`` and is accepted without moving with probability
``sigma(margin_{h*}(x) / temp)``; ``p(accept) = 1 - (1 - p_move)(1 - p_stay)`` and the loss is
the log-loss of ``p(accept)`` against ``y``. ``dist_hat`` is the distance to the most violated
robust constraint (a lower bound on the distance to ``R_H``; exact when one constraint binds).
The exact, non-smoothed model is re-evaluated afterwards by the caller.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class SurrogateResult:
    """Trained parameters: anchor direction ``w`` (unit), offset ``c`` and per-kind extras."""

    w: np.ndarray
    c: float
    U: np.ndarray  # (K, d) direction offsets (finite), (1, d) realised offset (ball)
    V: np.ndarray  # (K,) threshold offsets (finite)
    b_star_frac: float  # interval: b* = b_lo + frac * delta


def train_surrogate(X, y, *, kind, delta, K, r, epochs, lr, temp, rng, progress, w_init, c_init):
    """Full-batch Adam on the smoothed strategic log-loss; returns a :class:`SurrogateResult`."""
    import torch
    from tqdm.auto import tqdm

    _n, d = X.shape
    Xt = torch.tensor(np.asarray(X, dtype=np.float64))  # a copy: X may be read-only
    yt = torch.tensor(np.asarray(y, dtype=np.float64))
    v = torch.tensor(w_init, dtype=torch.float64, requires_grad=True)
    c = torch.tensor(float(c_init), dtype=torch.float64, requires_grad=True)
    half = 0.5 * delta
    params = [v, c]
    if kind == "finite":
        U0 = rng.standard_normal((K, d + 1))
        U0 *= (0.5 * half) / np.maximum(np.linalg.norm(U0, axis=1, keepdims=True), 1e-300)
        U0[0] = 0.0  # member 0 starts at the anchor (the realised classifier during training)
        U = torch.tensor(U0[:, :d], dtype=torch.float64, requires_grad=True)
        V = torch.tensor(U0[:, d], dtype=torch.float64, requires_grad=True)
        params += [U, V]
    elif kind == "ball":
        U = torch.zeros((1, d), dtype=torch.float64, requires_grad=True)
        V = torch.zeros(0, dtype=torch.float64)
        params += [U]
    else:
        U = torch.zeros((0, d), dtype=torch.float64)
        V = torch.zeros(0, dtype=torch.float64)
        beta = torch.tensor(10.0, dtype=torch.float64, requires_grad=True)  # b* ~ b_hi
        params += [beta]
    opt = torch.optim.Adam(params, lr=lr)
    eps = 1e-12
    for _ in tqdm(range(epochs), disable=not progress, desc="ambiguity", leave=False):
        opt.zero_grad()
        w = v / torch.linalg.norm(v).clamp_min(1e-12)
        s = Xt @ w
        if kind == "interval":
            b_hi = c + half
            b_star = b_hi - delta * (1.0 - torch.sigmoid(beta))
            dist = torch.relu(b_hi - s)
            stay = (s - b_star) / temp
        elif kind == "finite":
            Wk = w[None, :] + U
            bk = c + V
            norms = torch.linalg.norm(Wk, dim=1).clamp_min(1e-12)
            m = (Xt @ Wk.T - bk[None, :]) / norms[None, :]
            dist = torch.relu(-m.min(dim=1).values)
            stay = m[:, 0] / temp
        else:  # ball: R_H = {w.x - rho ||x|| >= c}; realised (w + u, c)
            rho = half
            xn = torch.linalg.norm(Xt, dim=1)
            dist = torch.relu(c + rho * xn - s) / float(np.sqrt(1.0 + rho * rho))
            ws = w + U[0]
            stay = (Xt @ ws - c) / torch.linalg.norm(ws).clamp_min(1e-12) / temp
        p_move = torch.sigmoid((r - dist) / temp)
        p_stay = torch.sigmoid(stay)
        p = (1.0 - (1.0 - p_move) * (1.0 - p_stay)).clamp(eps, 1.0 - eps)
        loss = -(yt * torch.log(p) + (1.0 - yt) * torch.log1p(-p)).mean()
        loss.backward()
        opt.step()
        with torch.no_grad():  # keep every member inside the disclosure bound
            if kind == "finite":
                nrm = torch.sqrt((U * U).sum(dim=1) + V * V)
                f = torch.clamp(half / nrm.clamp_min(1e-300), max=1.0)
                U.mul_(f[:, None])
                V.mul_(f)
            elif kind == "ball":
                nrm = torch.linalg.norm(U[0])
                if nrm > half:
                    U.mul_(half / nrm)
    w_np = v.detach().numpy().copy()
    nw = np.linalg.norm(w_np)
    w_np = w_np / nw if nw > 0 else np.asarray(w_init, dtype=np.float64)
    frac = 1.0
    if kind == "interval":
        frac = float(torch.sigmoid(beta).detach())
    return SurrogateResult(w=w_np, c=float(c.detach()), U=U.detach().numpy().copy(),
                           V=V.detach().numpy().copy(), b_star_frac=frac)
