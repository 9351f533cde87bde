"""The passes over an ExPLAIND training log (private; see :mod:`rml_fast.interp.explaind`).

Notation (arXiv 2505.20076, Theorem 3.1): ``f`` maps the flat parameters ``theta`` (P,) to the
``R = n * C`` test outputs; ``phi_s = int_0^1 grad f(theta_{s-1} + t dtheta_s) dt`` (R, P) by the
midpoint rule; ``d_s = sqrt(v_s / (1 - beta2^s)) + eps``; the update is
``dtheta_s = -eta_s lam theta_{s-1} - eta_s mhat_s / d_s`` (torch's AdamW).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.func import functional_call, grad, jacrev, jvp, vmap


_FWAD_READY = False


def _prepare_forward_ad() -> None:
    """Load torch's forward-AD decompositions once, silencing torch's own deprecation
    warning of ``torch.jit.script`` that the first ``jvp`` call emits."""
    global _FWAD_READY
    if _FWAD_READY:
        return
    import warnings

    from torch.autograd import forward_ad

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", FutureWarning)
        loader = getattr(forward_ad, "_maybe_load_decompositions", None)
        if loader is not None:
            loader()
    _FWAD_READY = True


@dataclass
class Flat:
    """Names, shapes and offsets of the logged parameters in the flat vector."""

    names: list[str]
    shapes: list[tuple[int, ...]]

    def __post_init__(self) -> None:
        self.numels = [int(torch.Size(s).numel()) for s in self.shapes]
        self.P = sum(self.numels)

    def unflatten(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        out = {}
        for name, shape, piece in zip(self.names, self.shapes, flat.split(self.numels), strict=True):
            out[name] = piece.view(shape)
        return out

    def expand(self, per_tensor: torch.Tensor) -> torch.Tensor:
        """A per-tensor value (T,) repeated over each tensor's entries -> (P,)."""
        return per_tensor.repeat_interleave(torch.tensor(self.numels))


@dataclass
class Funcs:
    """The model as functions of the flat parameters."""

    model: torch.nn.Module
    flat: Flat
    output_fn: Callable[[Any], torch.Tensor]
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

    def outputs(self, theta: torch.Tensor, X: Any, select: torch.Tensor | None) -> torch.Tensor:
        """f_theta(X) as a flat vector (n*C,) (C = 1 when ``select`` picks a column per row)."""
        out = self.output_fn(functional_call(self.model, self.flat.unflatten(theta), (X,)))
        if select is not None:
            out = out.gather(1, select[:, None])
        return out.reshape(-1)

    def losses(self, theta: torch.Tensor, X: Any, y: torch.Tensor) -> torch.Tensor:
        """Per-sample training losses (B,)."""
        out = self.output_fn(functional_call(self.model, self.flat.unflatten(theta), (X,)))
        return self.loss_fn(out, y)

    def jacobian(self, theta, X, select, chunk: int | None) -> torch.Tensor:
        """d f / d theta of shape (R, P)."""
        return jacrev(lambda th: self.outputs(th, X, select), chunk_size=chunk)(theta)

    def phi(self, theta0, dtheta, X, select, n_quad: int, chunk: int | None) -> torch.Tensor:
        """Midpoint-rule path integral of the Jacobian along the step, (R, P).

        The ``n_quad`` points are evaluated in one vmapped call (in chunks of ``chunk``
        points where given), which removes most of the per-call overhead of torch.func.
        """
        t = (torch.arange(n_quad, dtype=theta0.dtype) + 0.5) / n_quad
        points = theta0 + t[:, None] * dtheta  # (Q, P)
        jac = jacrev(lambda th: self.outputs(th, X, select))
        try:
            Js = vmap(jac, chunk_size=chunk)(points)  # (Q, R, P)
            return Js.mean(0)
        except RuntimeError:  # models with data-dependent control flow on parameters
            acc = None
            for q in range(n_quad):
                J = jac(points[q])
                acc = J if acc is None else acc.add_(J)
            assert acc is not None
            return acc.div_(n_quad)

    def path_jvp(self, theta0, dtheta, tangents, X, select, n_quad: int) -> torch.Tensor:
        """``phi_s @ tangents.T`` without forming phi: (R, K) for tangents (K, P)."""
        _prepare_forward_ad()
        acc = None
        for q in range(n_quad):
            point = theta0 + ((q + 0.5) / n_quad) * dtheta
            cols = [jvp(lambda th: self.outputs(th, X, select), (point,), (t,))[1] for t in tangents]
            val = torch.stack(cols, 1)
            acc = val if acc is None else acc + val
        assert acc is not None
        return acc / n_quad

    def per_sample_grads(self, theta, Xb, yb, chunk: int | None) -> torch.Tensor:
        """Per-sample gradients of the loss (B, P); vmap, or a loop where vmap is unsupported."""

        def one(th, x, y):
            return self.losses(th, x.unsqueeze(0), y.unsqueeze(0))[0]

        try:
            return vmap(grad(one), in_dims=(None, 0, 0), chunk_size=chunk)(theta, Xb, yb)
        except RuntimeError:  # data-dependent control flow in the model (e.g. .item())
            return torch.stack([grad(one)(theta, Xb[k], yb[k]) for k in range(len(yb))])

    def grad_dots(self, S, theta, Xb, yb, mode: str, chunk: int | None) -> torch.Tensor:
        """``S @ G.T`` (R, B) for per-sample gradients G (B, P) at ``theta``.

        ``mode="jvp"`` never forms G: row r is the directional derivative of the per-sample
        losses along ``S[r]`` (one forward-mode pass over the batch per row).
        """
        if mode == "jvp":
            _prepare_forward_ad()

            def dirderiv(t):
                return jvp(lambda th: self.losses(th, Xb, yb), (theta,), (t,))[1]

            try:
                return vmap(dirderiv, chunk_size=chunk)(S)
            except RuntimeError:
                return torch.stack([dirderiv(t) for t in S])
        G = self.per_sample_grads(theta, Xb, yb, chunk)
        return S @ G.T

    def batch_grad(self, theta, Xb, yb) -> torch.Tensor:
        """Gradient of the mean batch loss (P,)."""
        return torch.func.grad(lambda th: self.losses(th, Xb, yb).mean())(theta)


@dataclass
class PassResult:
    """Everything one pass over the log computes (see ExactPathKernel.decompose)."""

    f0: torch.Tensor
    fN: torch.Tensor
    step: torch.Tensor  # (N, R)
    decay: torch.Tensor  # (N, R)
    data: torch.Tensor | None = None  # (R, M)
    data_by_step: torch.Tensor | None = None  # (N, R, M)
    component: torch.Tensor | None = None  # (W, n, G)
    params: torch.Tensor | None = None  # (W, n, P)
    extra: dict[str, Any] = field(default_factory=dict)


def run_pass(
    funcs: Funcs,
    hist: Any,
    X: Any,
    select: torch.Tensor | None,
    *,
    n: int,
    train: tuple[Any, torch.Tensor] | None,
    order: str,
    by_step: bool,
    quad: Callable[[int], int],
    window: int,
    abs_mode: str,
    include_decay: bool,
    group_ids: torch.Tensor | None,
    n_groups: int,
    keep_params: bool,
    explicit: bool,
    train_grad: str,
    chunk: int | None,
    progress: bool,
) -> PassResult:
    """One pass over steps 1..N (``order="forward"``) or N..1 (``"reverse"``)."""
    from tqdm.auto import tqdm

    N = hist.n_steps
    beta1, beta2 = hist.betas
    eps = hist.eps
    flat = funcs.flat
    f0 = funcs.outputs(hist.theta_flat(0), X, select).detach()
    fN = funcs.outputs(hist.theta_flat(N), X, select).detach()
    R = f0.numel()
    C = R // n
    dt = f0.dtype
    step_inf = torch.zeros(N, R, dtype=dt)
    decay_inf = torch.zeros(N, R, dtype=dt)
    res = PassResult(f0, fN, step_inf, decay_inf)
    want_data = train is not None
    if want_data:
        Xtr, ytr = train
        M = len(ytr)
        res.data = torch.zeros(R, M, dtype=dt)
        if by_step:
            res.data_by_step = torch.zeros(N, R, M, dtype=dt)
    W = (N + window - 1) // window if N else 0
    if group_ids is not None:
        res.component = torch.zeros(W, n, n_groups, dtype=dt)
    if keep_params:
        res.params = torch.zeros(W, n, flat.P, dtype=dt)
    signed_acc: dict[int, torch.Tensor] = {}  # abs_mode "total": per-window signed sums
    S_rev = None  # reverse pass accumulator (R, P)
    mom = None  # forward pass per-sample momentum buffer (M, P)

    def finish_window(w: int) -> None:
        buf = signed_acc.pop(w, None)
        if buf is None:
            return
        per = buf.abs().sum(1) if abs_mode == "total" else buf.sum(1)  # (n, P)
        _add_param_scores(res, w, per, group_ids)

    steps = range(1, N + 1) if order == "forward" else range(N, 0, -1)
    current_w = None
    for s in tqdm(steps, desc="ExPLAIND", disable=not progress, leave=False):
        th_prev = hist.theta_flat(s - 1)
        th_s, v_s, lr_t, wd_t, batch = hist.row(s)
        lr = flat.expand(lr_t).to(dt)
        wd = flat.expand(wd_t).to(dt)
        dth = th_s - th_prev
        dec = -lr * wd * th_prev  # the weight-decay part of the update
        w = (s - 1) // window
        if current_w is not None and w != current_w:
            finish_window(current_w)
        current_w = w
        Q = quad(s)
        if not explicit:
            both = funcs.path_jvp(th_prev, dth, torch.stack([dth, dec]), X, select, Q)
            step_inf[s - 1], decay_inf[s - 1] = both[:, 0], both[:, 1]
            continue
        phi = funcs.phi(th_prev, dth, X, select, Q, chunk)  # (R, P)
        step_inf[s - 1] = phi @ dth
        decay_inf[s - 1] = phi @ dec
        if group_ids is not None or keep_params:
            contrib = phi * (dth if include_decay else dth - dec)  # (R, P)
            contrib = contrib.view(n, C, flat.P)
            if abs_mode == "per_step":
                _add_param_scores(res, w, contrib.abs().sum(1), group_ids)
            else:
                if w in signed_acc:
                    signed_acc[w] += contrib
                else:
                    signed_acc[w] = contrib.clone()
        if not want_data:
            continue
        d_s = torch.sqrt(v_s / (1 - beta2**s)) + eps
        V = phi * (lr / ((1 - beta1**s) * d_s))  # (R, P)
        Xb, yb = _take(Xtr, batch), ytr[batch]
        if order == "reverse":
            S_rev = V if S_rev is None else V.add_(S_rev, alpha=beta1)
            dots = funcs.grad_dots(S_rev, th_prev, Xb, yb, _mode(train_grad, R, len(batch)), chunk)
            contrib_k = dots * (-(1 - beta1) / len(batch))  # (R, B)
            res.data.index_add_(1, batch, contrib_k)
            if by_step:
                res.data_by_step[s - 1].index_add_(1, batch, contrib_k)
        else:
            if mom is None:
                mom = torch.zeros(M, flat.P, dtype=dt)
            G = funcs.per_sample_grads(th_prev, Xb, yb, chunk)
            mom.mul_(beta1).index_add_(0, batch, G, alpha=(1 - beta1) / len(batch))
            contrib_all = -(V @ mom.T)  # (R, M)
            res.data += contrib_all
            if by_step:
                res.data_by_step[s - 1] = contrib_all
    if current_w is not None:
        finish_window(current_w)
    for w in list(signed_acc):
        finish_window(w)
    if mom is not None:
        res.extra["buffer_numel"] = mom.numel()
    elif S_rev is not None:
        res.extra["buffer_numel"] = S_rev.numel()
    return res


def _add_param_scores(res: PassResult, w: int, per: torch.Tensor, group_ids) -> None:
    """Add per-parameter scores (n, P) of window ``w`` to the group / parameter totals."""
    if res.params is not None:
        res.params[w] += per
    if res.component is not None:
        res.component[w].index_add_(1, group_ids, per)


def _mode(train_grad: str, R: int, B: int) -> str:
    if train_grad != "auto":
        return train_grad
    return "jvp" if R * 4 <= B else "per_sample"


def _take(X: Any, idx: torch.Tensor) -> Any:
    return X[idx]
