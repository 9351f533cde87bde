"""Private prover machinery of the Neural Concept Verifier (exact, greedy and Frank-Wolfe selection).

Every prover picks, per example, a binary mask ``s in {0,1}^m`` with exactly ``k`` ones that
maximises a *score* of the verifier's log-probabilities ``lp = log softmax V(z, s)`` (shape
``(..., K+1)``, the last column the "I don't know" reject class when the verifier has one):

* ``"merlin"``  (cooperative): ``score = lp[t]`` for the target class ``t`` (= -CE);
* ``"morgana"`` (adversarial, training): ``score = -log(p_y + p_idk)``  (the Morgana loss);
* ``"fool"``    (adversarial, evaluation): ``score = max_{c not in {y, idk}} lp[c] - max(lp[y], lp[idk])``,
  positive exactly when the verifier outputs a wrong class.

The exact prover enumerates all ``C(m, k)`` subsets in one batched forward pass (chunked); the greedy
prover adds one concept at a time (``k`` rounds of ``m`` candidates); the Frank-Wolfe prover optimises the
relaxed mask over ``{s in [0,1]^m : sum s <= k}`` and binarises by top-k.
"""

from __future__ import annotations

import itertools
import math
from functools import lru_cache

import torch

OBJECTIVES = ("merlin", "morgana", "fool")

#: rows of (example, subset) pairs evaluated per forward pass of the exact prover
_CHUNK_ROWS = 1 << 17


@lru_cache(maxsize=32)
def _subsets_cached(m: int, k: int) -> torch.Tensor:
    idx = torch.tensor(list(itertools.combinations(range(m), k)), dtype=torch.long)
    masks = torch.zeros((idx.shape[0], m), dtype=torch.bool)
    masks.scatter_(1, idx, True)
    return masks


def all_subsets(m: int, k: int) -> torch.Tensor:
    """All ``C(m, k)`` masks with ``k`` ones, lexicographic (itertools) order, bool ``(C, m)``."""
    return _subsets_cached(int(m), int(k))


def morgana_loss_from_logprobs(lp: torch.Tensor, y: torch.Tensor, reject: bool) -> torch.Tensor:
    """``-log(p_y + p_idk)`` from log-probabilities ``lp`` of shape ``(..., K+1)``; ``y`` broadcasts."""
    ly = lp.gather(-1, y.unsqueeze(-1)).squeeze(-1)
    if not reject:
        return -ly
    return -torch.logaddexp(ly, lp[..., -1])


def score(lp: torch.Tensor, y: torch.Tensor, objective: str, reject: bool) -> torch.Tensor:
    """The prover's score (to maximise) of log-probabilities ``lp`` ``(..., K+1)`` for labels ``y``."""
    if objective == "merlin":
        return lp.gather(-1, y.unsqueeze(-1)).squeeze(-1)
    if objective == "morgana":
        return morgana_loss_from_logprobs(lp, y, reject)
    # "fool": best wrong class against the better of {y, idk}
    n_cls = lp.shape[-1] - (1 if reject else 0)
    cls_lp = lp[..., :n_cls]
    ly = cls_lp.gather(-1, y.unsqueeze(-1)).squeeze(-1)
    wrong = cls_lp.scatter(-1, y.unsqueeze(-1), float("-inf")).amax(-1)
    guard = torch.maximum(ly, lp[..., -1]) if reject else ly
    return wrong - guard


def _logprobs(verifier, z: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    # the unchecked forward: the public entry points validated z once
    forward = getattr(verifier, "_forward", verifier)
    return torch.log_softmax(forward(z, s), dim=-1)


def exact_logprobs(verifier, z: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probabilities of every example under every k-subset: ``(B, C, K+1)`` and the masks ``(C, m)``."""
    b, m = z.shape
    masks = all_subsets(m, k).to(device=z.device)
    sm = masks.to(z.dtype)
    c = sm.shape[0]
    per = max(1, _CHUNK_ROWS // c)
    out = []
    with torch.no_grad():
        for i in range(0, b, per):
            zz = z[i:i + per]
            bb = zz.shape[0]
            zr = zz.unsqueeze(1).expand(bb, c, m).reshape(bb * c, m)
            sr = sm.unsqueeze(0).expand(bb, c, m).reshape(bb * c, m)
            out.append(_logprobs(verifier, zr, sr).reshape(bb, c, -1))
    return torch.cat(out, 0), masks


def exact_select(verifier, z, y, k, objective, reject) -> tuple[torch.Tensor, torch.Tensor]:
    """Best k-subset per example by full enumeration; returns masks ``(B, m)`` and scores ``(B,)``.

    Ties go to the first subset in lexicographic order (``torch.argmax`` returns the first maximum).
    """
    lp, masks = exact_logprobs(verifier, z, k)
    sc = score(lp, y.unsqueeze(1).expand(lp.shape[:2]), objective, reject)
    best = sc.argmax(1)
    return masks[best].to(z.dtype), sc.gather(1, best.unsqueeze(1)).squeeze(1)


def greedy_select(verifier, z, y, k, objective, reject) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy forward selection: ``k`` rounds, each adds the concept that raises the score most."""
    b, m = z.shape
    s = torch.zeros_like(z)
    eye = torch.eye(m, dtype=z.dtype, device=z.device)
    best_sc = torch.full((b,), float("-inf"), dtype=z.dtype, device=z.device)
    with torch.no_grad():
        for _ in range(k):
            cand = (s.unsqueeze(1) + eye.unsqueeze(0)).clamp_(max=1.0)  # (B, m, m)
            zr = z.unsqueeze(1).expand(b, m, m).reshape(b * m, m)
            lp = _logprobs(verifier, zr, cand.reshape(b * m, m)).reshape(b, m, -1)
            sc = score(lp, y.unsqueeze(1).expand(b, m), objective, reject)
            sc = sc.masked_fill(s.bool(), float("-inf"))  # a concept is added once
            j = sc.argmax(1)
            best_sc = sc.gather(1, j.unsqueeze(1)).squeeze(1)
            s = s.scatter(1, j.unsqueeze(1), 1.0)
    return s, best_sc


def _topk_mask(s: torch.Tensor, k: int) -> torch.Tensor:
    idx = s.topk(k, dim=1).indices.sort(dim=1).values
    return torch.zeros_like(s).scatter_(1, idx, 1.0)


def fw_select(verifier, z, y, k, objective, reject, *, iters=250, lr=0.1, momentum=0.9,
              patience=8, l1=0.0, restarts=0) -> tuple[torch.Tensor, torch.Tensor]:
    """Stochastic Frank-Wolfe over the relaxed k-sparse polytope, then top-k binarisation.

    Minimises ``f(s) = -score(V(z, s)) + l1 * sum(s)`` over ``{s in [0,1]^m : sum s <= k}`` (the
    ``"fool"`` objective uses the smooth Morgana loss as its surrogate). Update with momentum
    ``d <- momentum d + (1 - momentum) grad f``; linear minimisation oracle ``v``: ones on the ``k``
    most negative coordinates of ``d`` that are negative; ``s <- s + lr (v - s)``. After every step the
    top-k binarisation is scored; each example keeps its best binary mask and stops after ``patience``
    steps without improvement, independently of the other examples of the batch.

    ``restarts`` further runs (PROPOSED) start at a vertex: restart ``r`` reveals the same ``k``
    concepts for every example, drawn uniformly by ``torch.Generator().manual_seed(r)`` (so results
    do not depend on the batch); the best binary mask over all runs is kept per example.
    """
    best_mask, best_sc = _fw_run(verifier, z, y, k, objective, reject, None, iters, lr, momentum,
                                 patience, l1)
    m = z.shape[1]
    for r in range(int(restarts)):
        start = torch.zeros_like(z)
        start[:, torch.randperm(m, generator=torch.Generator().manual_seed(r))[:k]] = 1.0
        mask, sc = _fw_run(verifier, z, y, k, objective, reject, start, iters, lr, momentum,
                           patience, l1)
        better = sc > best_sc
        best_sc = torch.where(better, sc, best_sc)
        best_mask = torch.where(better.unsqueeze(1), mask, best_mask)
    return best_mask, best_sc


def _fw_run(verifier, z, y, k, objective, reject, start, iters, lr, momentum, patience, l1):
    b, m = z.shape
    relaxed = "morgana" if objective == "fool" else objective
    s = torch.full_like(z, k / m) if start is None else start.clone()
    d = torch.zeros_like(z)
    best_mask = _topk_mask(s, k)
    with torch.no_grad():
        best_sc = score(_logprobs(verifier, z, best_mask), y, objective, reject)
    stall = torch.zeros(b, dtype=torch.long, device=z.device)
    active = torch.ones(b, dtype=torch.bool, device=z.device)
    for _ in range(int(iters)):
        if not bool(active.any()):
            break
        sv = s.detach().requires_grad_(True)
        with torch.enable_grad():
            f = -score(_logprobs(verifier, z, sv), y, relaxed, reject) + l1 * sv.sum(1)
            (g,) = torch.autograd.grad(f.sum(), sv)
        d = torch.where(active.unsqueeze(1), momentum * d + (1.0 - momentum) * g, d)
        top = (-d).topk(k, dim=1)
        v = torch.zeros_like(s).scatter_(1, top.indices, (top.values > 0).to(s.dtype))
        s = torch.where(active.unsqueeze(1), s + lr * (v - s), s)
        cand = _topk_mask(s, k)
        with torch.no_grad():
            sc = score(_logprobs(verifier, z, cand), y, objective, reject)
        better = active & (sc > best_sc)
        best_sc = torch.where(better, sc, best_sc)
        best_mask = torch.where(better.unsqueeze(1), cand, best_mask)
        stall = torch.where(better, torch.zeros_like(stall), stall + active.long())
        active = active & (stall < patience)
    return best_mask, best_sc


def n_subsets(m: int, k: int) -> int:
    """``C(m, k)``."""
    return math.comb(int(m), int(k))
