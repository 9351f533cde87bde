"""The per-instance ASR search of :mod:`rml_fast.decisions.recourse` (private).

Each instance runs as a generator that *yields* a block of candidate points (rows in the
original feature units) and receives the model's class probabilities for them. The driver in
``recourse.py`` concatenates the blocks of all active instances into one model call per round,
so the per-instance logic stays sequential while the queries are batched. Every yielded row is
one query; a generator never yields more rows than its remaining budget.

Internal units: a move is ``z = delta / scale`` (``scale`` = MAD per feature); the feasible set
(box, monotone signs, immutables, integer rounding) is applied by :meth:`_Space.point`.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, field

import numpy as np

_LOG_EPS = 1e-12

Query = Generator[np.ndarray, np.ndarray, None]


@dataclass
class _Config:
    subspace_dim: int
    n_directions: int
    mu: float
    mu_max: float
    init_step: float
    lr: float
    lr_decay: float
    lam: float
    margin: float
    refresh: int
    explore: float
    init: str
    directions: str
    step_rule: str
    adaptive_mu: bool
    probe_fallback: bool
    grow_subspace: bool
    polish: bool
    min_margin: float
    accept_probes: bool
    sparsify: str
    shrink_steps: int
    cost: str


@dataclass
class _Space:
    """Feasible moves of one instance, in standardised units ``z``."""

    x: np.ndarray  # (d,) original point
    scale: np.ndarray  # (d,) > 0
    zlo: np.ndarray  # (d,) lower bound on z (<= 0 after clipping x into the box)
    zhi: np.ndarray  # (d,)
    integer: np.ndarray  # (d,) bool
    actionable: np.ndarray  # (k,) indices that may move

    def project(self, z: np.ndarray) -> np.ndarray:
        """Clip to the box/monotone limits, round integer features, zero the immutables."""
        z = np.clip(z, self.zlo, self.zhi)
        if self.integer.any():
            xi = np.round(self.x + z * self.scale)
            z = np.where(self.integer, (xi - self.x) / self.scale, z)
            z = np.clip(z, self.zlo, self.zhi)
        return z

    def point(self, z: np.ndarray) -> np.ndarray:
        """The feature vector ``x + z * scale`` of a (projected) move."""
        return self.x + z * self.scale


def cost_of(z: np.ndarray, kind: str) -> np.ndarray:
    """Cost of moves ``z`` (..., d): ``sum |z_j|`` (l1/MAD) or ``||z||_2`` (l2)."""
    if kind == "l1":
        return np.abs(z).sum(axis=-1)
    return np.sqrt((z * z).sum(axis=-1))


def _cost_grad(z: np.ndarray, kind: str) -> np.ndarray:
    if kind == "l1":
        return np.sign(z)
    n = np.sqrt((z * z).sum())
    return z / n if n > 0 else np.zeros_like(z)


@dataclass
class _Outcome:
    z_best: np.ndarray | None = None
    cost_best: float = np.inf
    margin_best: float = np.nan
    status: str = "budget_exhausted"
    n_queries: int = 0
    trace: list[float] = field(default_factory=list)


def margins(proba: np.ndarray, desired: np.ndarray) -> np.ndarray:
    """``max_{k in S} log p_k - max_{k not in S} log p_k`` per row (S = desired classes)."""
    lp = np.log(np.clip(proba, _LOG_EPS, None))
    inside = np.where(desired, lp, -np.inf).max(axis=-1)
    outside = np.where(desired, -np.inf, lp).max(axis=-1)
    return inside - outside


def is_valid(proba: np.ndarray, desired: np.ndarray) -> np.ndarray:
    """Whether the predicted class (first argmax, as ``numpy.argmax``) is a desired class."""
    return desired[np.argmax(proba, axis=-1)]


def _directions(rng: np.random.Generator, s: int, q: int, kind: str) -> np.ndarray:
    """q directions in R^s with E[u u^T] = I (orthonormal blocks scaled by sqrt(s), or Gaussian)."""
    if kind == "gaussian":
        return rng.standard_normal((q, s))
    blocks = []
    for _ in range(-(-q // s)):
        qmat, r = np.linalg.qr(rng.standard_normal((s, s)))
        blocks.append((qmat * np.sign(np.diag(r))).T * np.sqrt(s))
    return np.concatenate(blocks)[:q]


def search(space: _Space, desired: np.ndarray, budget: int, cfg: _Config,
           rng: np.random.Generator, out: _Outcome, first_proba: np.ndarray) -> Query:
    """ASR for one instance; ``first_proba`` is the model's output at ``x`` (already queried).

    Sends blocks of rows (m_i, d), receives probabilities (m_i, K); writes into ``out``.
    """
    d = space.x.shape[0]
    A = space.actionable
    s = min(cfg.subspace_dim, A.size)
    left = budget - out.n_queries

    def note(zs: np.ndarray, proba: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        nonlocal left
        out.n_queries += zs.shape[0]
        left -= zs.shape[0]
        mg = margins(proba, desired)
        ok = is_valid(proba, desired) & (mg >= cfg.min_margin)
        if ok.any():
            c = cost_of(zs[ok], cfg.cost)
            i = int(np.argmin(c))
            if c[i] < out.cost_best:
                out.cost_best, out.z_best = float(c[i]), zs[ok][i].copy()
                out.margin_best = float(mg[ok][i])
                out.status = "found"
        return mg, ok

    def loss(mg: np.ndarray, zs: np.ndarray) -> np.ndarray:
        return np.maximum(0.0, cfg.margin - mg) + cfg.lam * cost_of(zs, cfg.cost)

    z = space.project(np.zeros(d))
    if np.any(z != 0):  # x itself lies outside the box: the search starts from its projection
        if left < 1:
            return
        proba = yield space.point(z)[None]
        mg0, ok = note(z[None], proba)
        mg_cur = float(mg0[0])
        if ok[0]:  # (coords was missing here: a TypeError whenever this branch was taken)
            yield from _postprocess(space, desired, cfg, out, note, lambda: left, A)
            return
    else:
        mg_cur = float(margins(first_proba[None], desired)[0])
    out.trace.append(mg_cur)

    # --- 1. initial subspace: one-sided coordinate differences, or random when tight
    ema = np.zeros(A.size)
    init = cfg.init
    if init == "auto":
        init = "coordinate" if A.size + 2 * (cfg.n_directions + 1) <= left else "random"
    if init == "coordinate" and A.size <= left:
        h = cfg.init_step
        zs = np.repeat(z[None], A.size, axis=0)
        up = np.minimum(z[A] + h, space.zhi[A])
        down = np.maximum(z[A] - h, space.zlo[A])
        step = np.where(up - z[A] >= z[A] - down, up, down)
        zs[np.arange(A.size), A] = step
        zs = space.project(zs)
        proba = yield space.point(zs)
        mg, ok = note(zs, proba)
        moved = np.abs(zs[np.arange(A.size), A] - z[A])
        ema = np.where(moved > 0, np.abs(mg - mg_cur) / np.maximum(moved, 1e-300), 0.0)
        if cfg.accept_probes and ok.any():
            yield from _postprocess(space, desired, cfg, out, note, lambda: left, A)
            return
    order = np.argsort(-ema + 1e-9 * rng.random(A.size), kind="stable")
    J = np.sort(order[:s])  # positions into A
    explored = np.zeros(A.size, dtype=bool)
    explored[J] = True
    ema_max = ema.max() if ema.size else 0.0
    ema = ema / ema_max if ema_max > 0 else ema

    # --- 2-4. zeroth-order descent in the subspace
    mu, lr, it = cfg.mu, cfg.lr, 0
    L_cur = float(loss(np.array([mg_cur]), z[None])[0])
    q = cfg.n_directions
    while left >= q + 1:
        it += 1
        coords = A[J]
        U = _directions(rng, J.size, q, cfg.directions)
        zs = np.repeat(z[None], q, axis=0)
        zs[:, coords] += mu * U
        zs = space.project(zs)
        proba = yield space.point(zs)
        mg, ok = note(zs, proba)
        if cfg.accept_probes and ok.any():
            break
        hinge_d = np.maximum(0.0, cfg.margin - mg) - max(0.0, cfg.margin - mg_cur)
        if cfg.adaptive_mu and np.all(np.abs(hinge_d) < 1e-12):
            # flat (saturated / hard-label model): widen the probes, then the subspace
            J, mu = _widen(J, mu, cfg, A.size, rng)
            explored[J] = True
            continue
        # effective displacement along each direction after projection
        disp = (zs[:, coords] - z[coords]) / mu
        g = (hinge_d / mu) @ disp / q + cfg.lam * _cost_grad(z, cfg.cost)[coords]
        ema[J] = 0.8 * ema[J] + 0.2 * np.abs(g)
        gn = np.linalg.norm(g)
        if gn == 0:
            mu = min(2.0 * mu, cfg.mu_max)
            continue
        if cfg.step_rule == "adaptive":
            cand = z.copy()
            cand[coords] -= lr * np.sqrt(J.size) * g / gn
        else:
            cand = z.copy()
            cand[coords] -= lr * g
            lr *= cfg.lr_decay
        cand = space.project(cand)
        proba = yield space.point(cand)[None]
        mg_new, ok = note(cand[None], proba)
        L_new = float(loss(mg_new, cand[None])[0])
        L_probe = loss(mg, zs)
        r = int(np.argmin(L_probe))
        if cfg.step_rule == "adaptive":
            lr = lr * 1.5 if L_new < L_cur else lr * 0.5
            lr = min(max(lr, 1e-3), 10.0)
        if L_new < L_cur or cfg.step_rule != "adaptive":
            z, mg_cur, L_cur = cand, float(mg_new[0]), L_new
            out.trace.append(mg_cur)
        elif cfg.probe_fallback and L_probe[r] < L_cur:
            # PROPOSED: the step failed (non-smooth model) but a probe improved: move there
            z, mg_cur, L_cur = zs[r].copy(), float(mg[r]), float(L_probe[r])
            out.trace.append(mg_cur)
        elif cfg.adaptive_mu:
            J, mu = _widen(J, mu, cfg, A.size, rng)
            explored[J] = True
        if ok[0]:
            break
        if it % cfg.refresh == 0 and A.size > J.size:
            J = np.sort(np.argsort(-ema, kind="stable")[:J.size])
            fresh = np.flatnonzero(~explored)
            if fresh.size and rng.random() < cfg.explore:
                weakest = J[np.argmin(ema[J])]
                J = np.sort(np.append(J[weakest != J], rng.choice(fresh)))
            explored[J] = True
    if out.z_best is not None:
        yield from _postprocess(space, desired, cfg, out, note, lambda: left, A[J])


def _widen(J: np.ndarray, mu: float, cfg: _Config, n_act: int,
           rng: np.random.Generator) -> tuple[np.ndarray, float]:
    """No progress: double ``mu``; once at ``mu_max``, add a random coordinate to ``J``."""
    if mu < cfg.mu_max or not cfg.grow_subspace or J.size >= n_act:
        return J, min(2.0 * mu, cfg.mu_max)
    rest = np.setdiff1d(np.arange(n_act), J)
    return np.sort(np.append(J, rng.choice(rest))), mu


def _postprocess(space, desired, cfg, out, note, budget_left, coords) -> Query:
    """Shrink toward ``x``, sparsify (reset coordinates, optionally re-scaling the rest),
    polish (closest point of the linearised boundary), shrink."""
    yield from _shrink(space, out.z_best, 0.0, 1.0, cfg, out, note, budget_left)
    zb = out.z_best
    if cfg.sparsify != "off":
        for j in np.argsort(np.abs(zb), kind="stable"):
            zb = out.z_best
            if zb[j] == 0 or np.count_nonzero(zb) <= 1 or budget_left() < 1:
                continue
            cand = zb.copy()
            cand[j] = 0.0
            cand = space.project(cand)
            proba = yield space.point(cand)[None]
            _, ok = note(cand[None], proba)
            if ok[0] or cfg.sparsify != "rescale":
                continue
            yield from _rescale(space, cand, cfg, out, note, budget_left)
    if cfg.polish:
        yield from _polish(space, cfg, out, note, budget_left, coords)
    yield from _shrink(space, out.z_best, 0.0, 1.0, cfg, out, note, budget_left)


def _polish(space, cfg, out, note, budget_left, coords) -> Query:
    """One boundary projection: forward differences of the margin at the best point ``z``
    (coordinates ``coords`` and the changed ones), then the cheapest point of the linearised
    boundary ``{u : m(z) + g.(u - z) = min_margin}`` (l2: ``u = ((g.z - m)/||g||^2) g``; l1: one
    coordinate, ``u = ((g.z - m)/g_j) e_j`` with the largest ``|g_j|``), scaled by
    1.001 / 1.02 / 1.1 until valid."""
    z, m0 = out.z_best.copy(), out.margin_best
    C = np.intersect1d(np.union1d(coords, np.flatnonzero(z)), space.actionable)
    if not np.isfinite(m0) or C.size == 0 or budget_left() < C.size + 1:
        return
    h = 0.01
    zs = np.repeat(z[None], C.size, axis=0)
    up = np.minimum(z[C] + h, space.zhi[C])
    down = np.maximum(z[C] - h, space.zlo[C])
    zs[np.arange(C.size), C] = np.where(up - z[C] >= z[C] - down, up, down)
    zs = space.project(zs)
    proba = yield space.point(zs)
    mg, _ = note(zs, proba)
    moved = zs[np.arange(C.size), C] - z[C]
    g = np.where(moved != 0, (mg - m0) / np.where(moved != 0, moved, 1.0), 0.0)
    if not np.any(g):
        return
    rhs = float(g @ z[C] - m0 + cfg.min_margin)  # linearised {m = min_margin}: g.u = rhs
    u = np.zeros_like(z)
    if cfg.cost == "l2":
        u[C] = rhs / float(g @ g) * g
    else:
        j = int(np.argmax(np.abs(g)))
        u[C[j]] = rhs / g[j]
    for f in (1.001, 1.02, 1.1):
        cand = space.project(f * u)
        if budget_left() < 1 or cost_of(cand, cfg.cost) >= out.cost_best:
            return
        proba = yield space.point(cand)[None]
        _, ok = note(cand[None], proba)
        if ok[0]:
            return


def _rescale(space, cand, cfg, out, note, budget_left) -> Query:
    """Find the smallest a > 1 with a * cand valid and cheaper than the best (bisection)."""
    c = float(cost_of(cand, cfg.cost))
    if c <= 0 or budget_left() < 1:
        return
    a_hi = out.cost_best / c
    if a_hi <= 1.0:
        return
    top = space.project(a_hi * cand * (1 - 1e-9))
    proba = yield space.point(top)[None]
    _, ok = note(top[None], proba)
    if ok[0]:
        yield from _shrink(space, cand, 1.0, a_hi * (1 - 1e-9), cfg, out, note, budget_left)


def _shrink(space, z, a_lo, a_hi, cfg, out, note, budget_left) -> Query:
    """Bisection on the scale a of ``z`` in (a_lo, a_hi]; a_hi * z is known to be valid."""
    for _ in range(cfg.shrink_steps):
        if budget_left() < 1:
            return
        a = 0.5 * (a_lo + a_hi)
        cand = space.project(a * z)
        proba = yield space.point(cand)[None]
        _, ok = note(cand[None], proba)
        if ok[0]:
            a_hi = a
        else:
            a_lo = a
