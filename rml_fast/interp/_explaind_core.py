"""The passes over an ExPLAIND training log (private; see :mod:`rml_fast.interp.explaind`).

Notation (arXiv 2505.20076, Theorem 3.1): ``f`` maps the flat parameters ``theta`` (P,) to the
``R = n * C`` test outputs; ``phi_s = int_0^1 grad f(theta_{s-1} + t dtheta_s) dt`` (R, P) by the
midpoint rule; ``d_s = sqrt(v_s / (1 - beta2^s)) + eps``; the update is
``dtheta_s = -eta_s lam theta_{s-1} - eta_s mhat_s / d_s`` (torch's AdamW).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

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

    # --- step blocks: one vmapped call for several logged steps ------------------------

    def phi_block(self, th_prev, dth, X, select, n_quad: int, chunk: int | None,
                  budget: int = 256 * 2**20) -> torch.Tensor:  # fmt: skip
        """``phi_s`` of ``b`` steps at once: (b, R, P) from (b, P) starts and updates.

        All ``b * n_quad`` points go through one vmapped call when their Jacobians fit in
        ``budget`` bytes; otherwise the points are summed in groups that do.
        """
        b, P = th_prev.shape
        t = (torch.arange(n_quad, dtype=th_prev.dtype) + 0.5) / n_quad
        jac = jacrev(lambda th: self.outputs(th, X, select))

        def jacs(points: torch.Tensor) -> torch.Tensor:
            try:
                return vmap(jac, chunk_size=chunk)(points)
            except RuntimeError:
                return torch.stack([jac(pt) for pt in points])

        R = self.outputs(th_prev[0], X, select).numel()
        per_point = max(R * P * th_prev.element_size(), 1)
        if b * n_quad * per_point <= budget:
            points = (th_prev[:, None, :] + t[None, :, None] * dth[:, None, :]).reshape(b * n_quad, P)
            return jacs(points).view(b, n_quad, R, P).mean(1)
        group = max(1, budget // per_point)
        out = torch.zeros(b, R, P, dtype=th_prev.dtype)
        for i in range(b):
            for q0 in range(0, n_quad, group):
                tq = t[q0 : q0 + group]
                out[i] += jacs(th_prev[i] + tq[:, None] * dth[i]).sum(0)
        return out.div_(n_quad)

    def jvp_block(self, th_prev, dth, tangents, X, select, n_quad: int) -> torch.Tensor:
        """``phi_s @ tangents_s.T`` of ``b`` steps without forming phi: (b, R, K)."""
        _prepare_forward_ad()
        b, K, P = tangents.shape
        t = (torch.arange(n_quad, dtype=th_prev.dtype) + 0.5) / n_quad
        points = (th_prev[:, None, :] + t[None, :, None] * dth[:, None, :]).reshape(b * n_quad, P)
        tans = tangents.repeat_interleave(n_quad, dim=0)  # (b*Q, K, P)

        def f(th):
            return self.outputs(th, X, select)

        def one(pt, tk):
            return vmap(lambda tt: jvp(f, (pt,), (tt,))[1])(tk)  # (K, R)

        try:
            vals = vmap(one)(points, tans)
        except RuntimeError:
            vals = torch.stack([torch.stack([jvp(f, (pt,), (tt,))[1] for tt in tk])
                                for pt, tk in zip(points, tans, strict=True)])  # fmt: skip
        return vals.view(b, n_quad, K, -1).mean(1).transpose(1, 2)

    def dots_block(self, S, thetas, batches, train, mode: str, chunk: int | None) -> list:
        """``S_s @ G_s.T`` for ``b`` steps: a list of (R, |B_s|) for S (b, R, P) and the
        per-sample gradients ``G_s`` of batch ``B_s`` at ``thetas[s]``."""
        Xtr, ytr = train
        b = len(batches)
        same_len = len({len(bi) for bi in batches}) == 1
        identical = same_len and all(torch.equal(bi, batches[0]) for bi in batches)
        if mode == "jvp":
            _prepare_forward_ad()

            def dd(th, t, xb, yb):
                return jvp(lambda p: self.losses(p, xb, yb), (th,), (t,))[1]

            try:
                if identical:  # e.g. full batch: the data are not batched over steps
                    xb, yb = Xtr[batches[0]], ytr[batches[0]]
                    out = vmap(lambda th, Ss: vmap(lambda t: dd(th, t, xb, yb), chunk_size=chunk)(Ss))(thetas, S)
                    return list(out)
                if same_len:
                    xb = torch.stack([Xtr[bi] for bi in batches])
                    yb = torch.stack([ytr[bi] for bi in batches])
                    out = vmap(lambda th, Ss, x, y: vmap(lambda t: dd(th, t, x, y), chunk_size=chunk)(Ss))(
                        thetas, S, xb, yb)  # fmt: skip
                    return list(out)
            except RuntimeError:
                pass
            return [self.grad_dots(S[i], thetas[i], Xtr[batches[i]], ytr[batches[i]], "jvp", chunk)
                    for i in range(b)]  # fmt: skip
        if same_len:

            def one(th, x, y):
                return self.losses(th, x.unsqueeze(0), y.unsqueeze(0))[0]

            xb = torch.stack([Xtr[bi] for bi in batches])
            yb = torch.stack([ytr[bi] for bi in batches])
            try:
                G = vmap(vmap(grad(one), in_dims=(None, 0, 0), chunk_size=chunk))(thetas, xb, yb)
                return list(torch.bmm(S, G.transpose(1, 2)))
            except RuntimeError:  # the model cannot be vmapped over its inputs
                if mode == "auto":
                    return self.dots_block(S, thetas, batches, train, "jvp", chunk)
        return [self.grad_dots(S[i], thetas[i], Xtr[batches[i]], ytr[batches[i]], "per_sample", chunk)
                for i in range(b)]  # fmt: skip

    def grads_block(self, thetas, batches, train, chunk: int | None) -> list:
        """Per-sample gradients (|B_s|, P) of ``b`` steps."""
        Xtr, ytr = train
        if len({len(bi) for bi in batches}) == 1:

            def one(th, x, y):
                return self.losses(th, x.unsqueeze(0), y.unsqueeze(0))[0]

            xb = torch.stack([Xtr[bi] for bi in batches])
            yb = torch.stack([ytr[bi] for bi in batches])
            try:
                return list(vmap(vmap(grad(one), in_dims=(None, 0, 0), chunk_size=chunk))(thetas, xb, yb))
            except RuntimeError:
                pass
        return [self.per_sample_grads(thetas[i], Xtr[bi], ytr[bi], chunk) for i, bi in enumerate(batches)]


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
    block: int | None,
    progress: bool,
) -> PassResult:
    """One pass over steps 1..N (``order="forward"``) or N..1 (``"reverse"``), in blocks of
    steps whose Jacobians and gradients are computed by one vmapped call each."""
    from tqdm.auto import tqdm

    N = hist.n_steps
    beta1, beta2 = hist.betas
    eps = hist.eps
    flat = funcs.flat
    P = flat.P
    f0 = funcs.outputs(hist.theta_flat(0), X, select).detach()
    fN = funcs.outputs(hist.theta_flat(N), X, select).detach()
    R = f0.numel()
    C = R // n
    dt = f0.dtype
    step_inf = torch.zeros(N, R, dtype=dt)
    decay_inf = torch.zeros(N, R, dtype=dt)
    res = PassResult(f0, fN, step_inf, decay_inf)
    want_data = train is not None
    M = 0
    if train is not None:  # want_data
        M = len(train[1])
        res.data = torch.zeros(R, M, dtype=dt)
        if by_step:
            res.data_by_step = torch.zeros(N, R, M, dtype=dt)
    W = (N + window - 1) // window if N else 0
    if group_ids is not None:
        res.component = torch.zeros(W, n, n_groups, dtype=dt)
    if keep_params:
        res.params = torch.zeros(W, n, P, dtype=dt)
    signed_acc: dict[int, torch.Tensor] = {}  # abs_mode "total"/"signed": per-window sums
    S_rev = None  # reverse pass accumulator (R, P)
    mom = None  # forward pass per-sample momentum buffer (M, P)

    def finish_window(w: int) -> None:
        buf = signed_acc.pop(w, None)
        if buf is None:
            return
        per = buf.abs().sum(1) if abs_mode == "total" else buf.sum(1)  # (n, P)
        _add_param_scores(res, w, per, group_ids)

    steps = list(range(1, N + 1)) if order == "forward" else list(range(N, 0, -1))
    B_max = max((len(hist.row(s)[4]) for s in steps[:1]), default=1)

    def limit(s: int) -> int:  # steps per block: about 256 MB of Jacobians and gradients
        if block is not None:
            return block
        per_step = (quad(s) * R + 2 * R + (B_max if want_data else 0)) * P * f0.element_size()
        return int(max(1, min(64, (256 * 2**20) // max(per_step, 1))))

    blocks: list[list[int]] = []
    for s in steps:
        if blocks and len(blocks[-1]) < limit(s) and quad(blocks[-1][-1]) == quad(s):
            blocks[-1].append(s)
        else:
            blocks.append([s])
    current_w = None
    bar = tqdm(total=N, desc="ExPLAIND", disable=not progress, leave=False)
    for blk in blocks:
        rows = [hist.row(s) for s in blk]
        th_prev = torch.stack([hist.theta_flat(s - 1) for s in blk])
        th_s = torch.stack([r[0] for r in rows])
        lr = torch.stack([flat.expand(r[2]) for r in rows]).to(dt)
        wd = torch.stack([flat.expand(r[3]) for r in rows]).to(dt)
        batches = [r[4] for r in rows]
        dth = th_s - th_prev
        dec = -lr * wd * th_prev  # the weight-decay part of each update
        Q = quad(blk[0])
        idx = torch.tensor(blk) - 1
        if not explicit:
            both = funcs.jvp_block(th_prev, dth, torch.stack([dth, dec], 1), X, select, Q)
            step_inf[idx], decay_inf[idx] = both[..., 0], both[..., 1]
            bar.update(len(blk))
            continue
        phis = funcs.phi_block(th_prev, dth, X, select, Q, chunk)  # (b, R, P)
        step_inf[idx] = torch.einsum("brp,bp->br", phis, dth)
        decay_inf[idx] = torch.einsum("brp,bp->br", phis, dec)
        if group_ids is not None or keep_params:
            for i, s in enumerate(blk):
                w = (s - 1) // window
                if current_w is not None and w != current_w:
                    finish_window(current_w)
                current_w = w
                contrib = (phis[i] * (dth[i] if include_decay else dth[i] - dec[i])).view(n, C, P)
                if abs_mode == "per_step":
                    _add_param_scores(res, w, contrib.abs().sum(1), group_ids)
                elif w in signed_acc:
                    signed_acc[w] += contrib
                else:
                    signed_acc[w] = contrib.clone()
        if want_data:
            d = torch.sqrt(torch.stack([r[1] for r in rows]) / (1 - beta2 ** idx.add(1).to(dt))[:, None]) + eps
            bc1 = (1 - beta1 ** idx.add(1).to(dt))[:, None]
            V = phis.mul_((lr / (bc1 * d))[:, None, :])  # (b, R, P), phi no longer needed
            if order == "reverse":
                Ss = torch.empty_like(V)
                for i in range(len(blk)):
                    S_rev = V[i] if S_rev is None else V[i].add_(S_rev, alpha=beta1)
                    Ss[i] = S_rev
                S_rev = Ss[-1].clone()
                dots = funcs.dots_block(Ss, th_prev, batches, train,
                                        _mode(train_grad, R, len(batches[0])), chunk)  # fmt: skip
                del Ss
                for i, s in enumerate(blk):
                    contrib_k = dots[i] * (-(1 - beta1) / len(batches[i]))  # (R, B)
                    cast(torch.Tensor, res.data).index_add_(1, batches[i], contrib_k)
                    if by_step:
                        cast(torch.Tensor, res.data_by_step)[s - 1].index_add_(1, batches[i], contrib_k)
            else:
                if mom is None:
                    mom = torch.zeros(M, P, dtype=dt)
                Gs = funcs.grads_block(th_prev, batches, train, chunk)
                for i, s in enumerate(blk):
                    mom.mul_(beta1).index_add_(0, batches[i], Gs[i], alpha=(1 - beta1) / len(batches[i]))
                    contrib_all = -(V[i] @ mom.T)  # (R, M)
                    cast(torch.Tensor, res.data).add_(contrib_all)  # set when want_data
                    if by_step:
                        cast(torch.Tensor, res.data_by_step)[s - 1] = contrib_all
        bar.update(len(blk))
    bar.close()
    if current_w is not None:
        finish_window(current_w)
    for w in list(signed_acc):
        finish_window(w)
    return res


def _add_param_scores(res: PassResult, w: int, per: torch.Tensor, group_ids) -> None:
    """Add per-parameter scores (n, P) of window ``w`` to the group / parameter totals."""
    if res.params is not None:
        res.params[w] += per
    if res.component is not None:
        res.component[w].index_add_(1, group_ids, per)


def _mode(train_grad: str, R: int, B: int) -> str:
    """``"auto"``: forward-mode products for large batches (B >= 4R and B >= 128), else
    per-sample gradients, falling back to forward mode where vmap over inputs fails."""
    if train_grad != "auto":
        return train_grad
    return "jvp" if R * 4 <= B and B >= 128 else "auto"
