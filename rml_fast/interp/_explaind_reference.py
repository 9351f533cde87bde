"""The straightforward ExPLAIND computation, for tests and benchmarks (private).

Per-example gradients are recomputed at every logged step in Python loops (one
``torch.autograd.grad`` per training sample and per test output and quadrature point), the
per-sample momentum is kept as an (M, P) buffer and the influence
``I[x, o, k, s] = -eta_s phi_s(x)[o] . u_{k,s}`` is accumulated in update-step order, exactly
as written in the paper. Slow by design; the numbers must equal
:meth:`rml_fast.interp.explaind.ExactPathKernel.data_influence`.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.func import functional_call


def naive_influence(
    model: torch.nn.Module,
    history: Any,
    loss_fn: Any,
    dataset: tuple[torch.Tensor, torch.Tensor],
    X: torch.Tensor,
    *,
    n_quad: int = 1,
    output_fn: Any = None,
) -> dict[str, torch.Tensor]:
    """Data influence (n, C, M), step influence (N, n, C) and decay influence (N, n, C) by
    explicit loops (the same quadrature rule, ``n_quad`` points at every step)."""
    from rml_fast.interp.explaind import _per_sample_loss

    out_fn = output_fn or (lambda o: o)
    loss = _per_sample_loss(loss_fn)
    flat = history._flat
    dt = history.dtype
    Xtr, ytr = dataset
    if Xtr.is_floating_point():
        Xtr = Xtr.to(dt)
    if X.is_floating_point():
        X = X.to(dt)
    b1, b2 = history.betas
    eps = history.eps
    N, M, P = history.n_steps, len(ytr), flat.P

    def f_single(theta: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return out_fn(functional_call(model, flat.unflatten(theta), (x.unsqueeze(0),)))[0]

    def grad_of(fn, theta: torch.Tensor) -> torch.Tensor:
        th = theta.detach().clone().requires_grad_(True)
        (g,) = torch.autograd.grad(fn(th), th)
        return g

    n = len(X)
    C = f_single(history.theta_flat(0), X[0]).numel()
    data = torch.zeros(n, C, M, dtype=dt)
    step = torch.zeros(N, n, C, dtype=dt)
    decay = torch.zeros(N, n, C, dtype=dt)
    mom = torch.zeros(M, P, dtype=dt)
    for s in range(1, N + 1):
        th_prev = history.theta_flat(s - 1)
        th_s, v_s, lr_t, wd_t, batch = history.row(s)
        lr = flat.expand(lr_t).to(dt)
        wd = flat.expand(wd_t).to(dt)
        dth = th_s - th_prev
        dec = -lr * wd * th_prev
        # per-sample momentum: one autograd call per training sample of the batch
        mom *= b1
        for k in batch.tolist():
            g = grad_of(lambda th, k=k: loss(out_fn(functional_call(
                model, flat.unflatten(th), (Xtr[k:k + 1],))), ytr[k:k + 1])[0], th_prev)  # fmt: skip
            mom[k] += (1 - b1) / len(batch) * g
        d = torch.sqrt(v_s / (1 - b2**s)) + eps
        u = mom / (1 - b1**s) / d  # (M, P)
        for i in range(n):
            for o in range(C):
                phi = torch.zeros(P, dtype=dt)
                for q in range(n_quad):
                    point = th_prev + (q + 0.5) / n_quad * dth
                    phi += grad_of(lambda th, i=i, o=o: f_single(th, X[i])[o], point)
                phi /= n_quad
                step[s - 1, i, o] = phi @ dth
                decay[s - 1, i, o] = phi @ dec
                data[i, o] += -(u @ (lr * phi))
    return {"data": data, "step": step, "decay": decay}
