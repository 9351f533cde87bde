"""Cross-refit stability of attention heads (Bali, Stanley, Suresh & Bzdok 2026).

"Quantifying LLM Attention-Head Stability: Implications for Circuit Universality",
arXiv 2602.16740. Several models ``m = 1..S`` of one architecture are trained from different
initialisation seeds and run on one fixed prompt set. Head ``(l, h)`` of model ``m`` is
summarised by its *attention signature*

``A^m_{l,h} = concat_j vec_causal(pattern_j[h])``  (all lower-triangular entries, diagonal
included, of its attention pattern on every prompt ``j``; option: the pre-softmax scores),

heads of the same layer are compared across models by ``sim(a, b) = cos(A^m_{l,a},
A^{m'}_{l,b})`` and, since heads inside a layer are exchangeable, matched: the *stability*
of head ``(l, h)`` in model ``m`` is

``stab[m, l, h] = mean_{m' != m} max_b sim(A^m_{l,h}, A^{m'}_{l,b})``

(``matching="hungarian"``: the one-to-one assignment of
:func:`scipy.optimize.linear_sum_assignment` instead of the row maximum), and the *layer
stability* is its mean over heads and models, plotted against relative depth ``l / (L - 1)``.

Besides the paper's cosine on attention signatures, head outputs (``hook_z`` or
``hook_result``) can be compared with rotation-invariant representation similarities: linear
CKA (Kornblith et al. 2019), SVCCA (Raghu et al. 2017) and projection-weighted CCA (Morcos et
al. 2018). All head pairs of all model pairs of a layer come from one chunked GEMM.

The residual-stream stability (linear CKA of residual activations across refits), head
importance (perplexity increase when a head is ablated) and the weight-decay experiment
(:class:`StabilityStudy`: Adam vs AdamW refits) complete the paper's analyses.

PROPOSED (the paper's summaries leave these open; spec §5): the ``hungarian`` matching, the
``pearson``/``cka``/``svcca``/``pwcca`` measures, :func:`head_distinctness`, the
prompt-permutation null of :func:`stability_null`, linear CKA as the residual-stream measure
and the ``mean`` ablation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment

from rml_fast._validation import Interval, check_array, check_rng, check_scalar, check_tensor
from rml_fast.interp._checks import naming, not_meta
from rml_fast.interp._head_stability_measures import (
    MEASURES,
    VECTOR_MEASURES,
    similarity_matrix,
)
from rml_fast.models.transformer import TinyTransformer

__all__ = [
    "StabilityStudy",
    "attention_signatures",
    "head_distinctness",
    "head_importance",
    "head_representations",
    "head_similarity",
    "head_stability",
    "layer_stability",
    "linear_cka",
    "match_heads",
    "pairwise_similarity",
    "residual_stability",
    "stability_from_similarity",
    "stability_importance_correlation",
    "stability_null",
    "svcca",
]

_MATCHINGS = ("max", "hungarian")
_DEFAULT_CHUNK = 1 << 14


# --------------------------------------------------------------------------- model access


def _dims(model: Any, name: str = "model") -> tuple[int, int]:
    cfg = getattr(model, "cfg", None)
    if not isinstance(model, torch.nn.Module) or cfg is None:
        raise TypeError(
            f"{name} must be a TinyTransformer or a TransformerLens HookedTransformer, "
            f"got {type(model).__name__}"
        )
    return int(cfg.n_layers), int(cfg.n_heads)


def _run_cache(
    model: Any, tokens: torch.Tensor, names: list[str], hooks: Sequence[Any] = ()
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """``run_with_cache`` of a zoo model or a TransformerLens model, caching only ``names``."""
    with torch.no_grad():
        if isinstance(model, TinyTransformer):  # rml_fast TinyTransformer
            return model.run_with_cache(tokens, names=names, hooks=list(hooks))
        keep = set(names)
        with model.hooks(fwd_hooks=list(hooks)):
            return model.run_with_cache(tokens, names_filter=lambda n: n in keep)


def _check_prompts(prompts: Any, model: Any, name: str = "prompts") -> torch.Tensor:
    if not isinstance(prompts, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of token ids, got {type(prompts).__name__}")
    not_meta(prompts, name)
    if prompts.dtype not in (torch.int64, torch.int32) or prompts.ndim != 2:
        raise ValueError(
            f"{name} must be an integer tensor of shape (n_prompts, n_pos), got dtype "
            f"{prompts.dtype} and shape {tuple(prompts.shape)}"
        )
    if prompts.shape[0] < 1 or prompts.shape[1] < 1:
        raise ValueError(
            f"{name} must hold at least one prompt of one token, got {tuple(prompts.shape)}"
        )
    cfg = model.cfg
    d_vocab = int(cfg.d_vocab)
    n_ctx = int(cfg.n_ctx)
    if prompts.shape[1] > n_ctx:
        raise ValueError(f"{name} has {prompts.shape[1]} positions but the model's n_ctx={n_ctx}")
    if int(prompts.min()) < 0 or int(prompts.max()) >= d_vocab:
        raise ValueError(f"{name} must hold token ids in [0, d_vocab={d_vocab})")
    return prompts.long()


def _check_batch(batch_size: Any) -> int:
    return int(check_scalar(batch_size, "batch_size", Interval("int", 1, None)))


def _check_chunk(chunk: Any) -> int:
    return int(check_scalar(chunk, "chunk", Interval("int", 1, None)))


# --------------------------------------------------------------------------- signatures


def attention_signatures(
    model: Any,
    prompts: torch.Tensor,
    *,
    use_scores: bool = False,
    causal_only: bool = True,
    batch_size: int = 64,
) -> torch.Tensor:
    """Flattened attention patterns of every head on a fixed prompt set (the paper's ``A^m_{l,h}``).

    ``A_{l,h} = concat_{j=1..n} vec(pattern_{l,h}(p_j)[q, k] for k <= q)``: the causal
    (lower-triangular, diagonal included) entries of head ``(l, h)``'s attention pattern on
    every prompt, prompt-major, row-major inside a prompt.

    Parameters
    ----------
    model : TinyTransformer or transformer_lens.HookedTransformer
        Read through its ``blocks.{l}.attn.hook_pattern`` / ``hook_attn_scores`` hook points.
    prompts : LongTensor of shape (n, P)
        The same token ids for every model that is compared.
    use_scores : bool, default=False
        Flatten the pre-softmax scores ``q.k / sqrt(d_head)`` instead of the pattern.
    causal_only : bool, default=True
        Keep only the causal entries (``M = n P (P + 1) / 2``); False keeps all ``P^2``
        (the masked pattern entries are 0; not allowed with ``use_scores``, where they are -inf).
    batch_size : int, default=64
        Prompts per forward pass.

    Returns
    -------
    signatures : Tensor of shape (L, H, M), float32

    Raises
    ------
    ValueError
        If ``prompts`` is not an integer (n, P) tensor of valid ids, or ``use_scores`` is
        combined with ``causal_only=False``.

    Examples
    --------
    >>> import torch
    >>> from rml_fast.models import TinyConfig, TinyTransformer
    >>> from rml_fast.interp.head_stability import attention_signatures
    >>> model = TinyTransformer(TinyConfig(n_layers=2, d_model=16, n_heads=2, d_vocab=10), seed=0)
    >>> sig = attention_signatures(model, torch.randint(0, 10, (3, 4)))
    >>> tuple(sig.shape)  # 3 prompts x 4*5/2 causal entries
    (2, 2, 30)
    >>> float(sig[0, 0, 0])  # position 0 can only attend to itself
    1.0
    """
    n_layers, n_heads = _dims(model)
    prompts = _check_prompts(prompts, model)
    batch_size = _check_batch(batch_size)
    if use_scores and not causal_only:
        raise ValueError("use_scores=True needs causal_only=True (masked scores are -inf)")
    n, p = prompts.shape
    hook = "hook_attn_scores" if use_scores else "hook_pattern"
    names = [f"blocks.{layer}.attn.{hook}" for layer in range(n_layers)]
    if causal_only:
        rows, cols = torch.tril_indices(p, p)
    else:
        rows, cols = torch.meshgrid(torch.arange(p), torch.arange(p), indexing="ij")
        rows, cols = rows.reshape(-1), cols.reshape(-1)
    t = rows.numel()
    out = torch.empty(n_layers, n_heads, n, t, dtype=torch.float32)
    for lo in range(0, n, batch_size):
        _, cache = _run_cache(model, prompts[lo : lo + batch_size], names)
        for layer, name in enumerate(names):
            a = cache[name][:, :, rows, cols]  # [B, H, T]
            out[layer, :, lo : lo + a.shape[0]] = a.transpose(0, 1).float()
    return out.reshape(n_layers, n_heads, n * t)


def head_representations(
    model: Any, prompts: torch.Tensor, *, hook: str = "z", batch_size: int = 64
) -> torch.Tensor:
    """Per-head outputs on a prompt set, one row per token: the inputs of CKA / SVCCA / PWCCA.

    Parameters
    ----------
    model : TinyTransformer or transformer_lens.HookedTransformer
    prompts : LongTensor of shape (n, P)
    hook : {"z", "result"}, default="z"
        ``blocks.{l}.attn.hook_z`` (the head's value mix, width ``d_head``) or ``hook_result``
        (``z W_O``, width ``d_model``; TransformerLens needs ``use_attn_result``).
    batch_size : int, default=64

    Returns
    -------
    reps : Tensor of shape (L, H, n * P, d), float32
        Row ``j * P + q`` is prompt ``j``, position ``q``.

    Examples
    --------
    >>> import torch
    >>> from rml_fast.models import TinyConfig, TinyTransformer
    >>> from rml_fast.interp.head_stability import head_representations
    >>> model = TinyTransformer(TinyConfig(n_layers=2, d_model=16, n_heads=2, d_vocab=10), seed=0)
    >>> tuple(head_representations(model, torch.randint(0, 10, (3, 4))).shape)
    (2, 2, 12, 8)
    """
    n_layers, n_heads = _dims(model)
    prompts = _check_prompts(prompts, model)
    batch_size = _check_batch(batch_size)
    if hook not in ("z", "result"):
        raise ValueError(f"hook must be 'z' or 'result', got {hook!r}")
    names = [f"blocks.{layer}.attn.hook_{hook}" for layer in range(n_layers)]
    n = prompts.shape[0]
    chunks: list[list[torch.Tensor]] = [[] for _ in range(n_layers)]
    for lo in range(0, n, batch_size):
        _, cache = _run_cache(model, prompts[lo : lo + batch_size], names)
        for layer, name in enumerate(names):
            if name not in cache:
                raise ValueError(
                    f"model did not record {name} (TransformerLens: set use_attn_result)"
                )
            z = cache[name]  # [B, P, H, d]
            chunks[layer].append(z.permute(2, 0, 1, 3).reshape(n_heads, -1, z.shape[-1]).float())
    return torch.stack([torch.cat(c, dim=1) for c in chunks])


# --------------------------------------------------------------------------- similarity


def _check_measure(measure: Any) -> str:
    if measure not in MEASURES:
        raise ValueError(f"measure must be one of {MEASURES}, got {measure!r}")
    return str(measure)


def _check_signatures(
    signatures: Any, measure: str, name: str = "signatures"
) -> list[torch.Tensor]:
    if isinstance(signatures, torch.Tensor):
        raise TypeError(f"{name} must be a list of per-model tensors, got one tensor")
    sigs = list(signatures)
    if len(sigs) < 1:
        raise ValueError(f"{name} must hold at least one model's signatures")
    want = 3 if measure in VECTOR_MEASURES else 4
    what = "(L, H, M) attention signatures" if want == 3 else "(L, H, N, d) head representations"
    for i, s in enumerate(sigs):
        if not isinstance(s, torch.Tensor) or not s.is_floating_point():
            what_got = f"dtype {s.dtype}" if isinstance(s, torch.Tensor) else type(s).__name__
            raise TypeError(f"{name}[{i}] must be a float torch.Tensor, got {what_got}")
        not_meta(s, f"{name}[{i}]")
        if s.ndim != want:
            raise ValueError(
                f"{name}[{i}] must be {what} for measure={measure!r}, got shape {tuple(s.shape)}"
            )
        if s.shape != sigs[0].shape:
            raise ValueError(
                f"{name}[{i}] has shape {tuple(s.shape)} but {name}[0] has {tuple(sigs[0].shape)}; "
                "compare models of one architecture on the same prompts"
            )
        # one reduction instead of a boolean mask of the whole tensor; the exact check runs
        # only when the sum is not finite (NaN/inf present, or an overflowing sum)
        if not torch.isfinite(s.sum()) and not torch.isfinite(s).all():
            raise ValueError(
                f"{name}[{i}] must be finite (use_scores signatures must be causal_only)"
            )
    return sigs


def pairwise_similarity(
    signatures: Sequence[torch.Tensor],
    *,
    measure: str = "cosine",
    keep: float = 0.99,
    chunk: int = _DEFAULT_CHUNK,
) -> torch.Tensor:
    """Similarity of every head pair of every model pair, layer by layer, batched.

    Per layer the heads of all ``S`` models are stacked into ``K = S H`` rows and one chunked
    GEMM gives the ``[K, K]`` Gram matrix from which the measure follows:

    * ``cosine`` (the paper): ``<A_a, A_b> / (|A_a| |A_b|)`` on attention signatures;
    * ``pearson`` (PROPOSED): the cosine of the mean-centred signatures;
    * ``cka`` (PROPOSED): linear CKA ``||X_a^T X_b||_F^2 / (||X_a^T X_a||_F ||X_b^T X_b||_F)``
      of column-centred head representations ``X [N, d]``;
    * ``svcca`` (PROPOSED): the mean canonical correlation after projecting each head onto the
      singular directions holding ``keep`` of its variance;
    * ``pwcca`` (PROPOSED): canonical correlations weighted by how much of the row head's units
      each canonical variate accounts for (asymmetric).

    Parameters
    ----------
    signatures : list of S tensors
        Of shape (L, H, M) (:func:`attention_signatures`) for ``cosine``/``pearson``, or
        (L, H, N, d) (:func:`head_representations`) for ``cka``/``svcca``/``pwcca``.
    measure : {"cosine", "pearson", "cka", "svcca", "pwcca"}, default="cosine"
    keep : float in (0, 1], default=0.99
        Variance fraction kept by the SVD step of ``svcca``/``pwcca`` (1: the numerical rank).
    chunk : int, default=16384
        Columns (``M``) or rows (``N``) per GEMM chunk; bounds the temporary memory.

    Returns
    -------
    sims : Tensor of shape (S, S, L, H, H), float64
        ``sims[m, m2, l, a, b]`` = similarity of head ``a`` of model ``m`` and head ``b`` of
        model ``m2`` in layer ``l``.

    Examples
    --------
    >>> import torch
    >>> from rml_fast.interp.head_stability import pairwise_similarity
    >>> g = torch.Generator().manual_seed(0)
    >>> a = torch.rand(1, 3, 50, generator=g)
    >>> sims = pairwise_similarity([a, a[:, [2, 0, 1]]])
    >>> tuple(sims.shape)
    (2, 2, 1, 3, 3)
    >>> round(float(sims[0, 1, 0, 2, 0]), 6)  # head 2 of model 0 is head 0 of model 1
    1.0
    """
    measure = _check_measure(measure)
    keep = float(check_scalar(keep, "keep", Interval("real", 0, 1, "right")))
    chunk = _check_chunk(chunk)
    sigs = _check_signatures(signatures, measure)
    s = len(sigs)
    n_layers, n_heads = sigs[0].shape[:2]
    out = torch.empty(s, s, n_layers, n_heads, n_heads, dtype=torch.float64)
    for layer in range(n_layers):
        parts = [sig[layer] for sig in sigs]  # S x [H, ...], stacked chunk by chunk
        sim = similarity_matrix(parts, measure, keep=keep, chunk=chunk)
        out[:, :, layer] = sim.view(s, n_heads, s, n_heads).permute(0, 2, 1, 3)
    return out


def head_similarity(
    sig_a: torch.Tensor,
    sig_b: torch.Tensor,
    *,
    measure: str = "cosine",
    keep: float = 0.99,
    chunk: int = _DEFAULT_CHUNK,
) -> torch.Tensor:
    """Similarity of every head of model ``a`` with every head of model ``b``, layer by layer.

    ``sim[l, i, j] = sim(A^a_{l,i}, A^b_{l,j})`` with the measures of
    :func:`pairwise_similarity` (default: the paper's cosine of attention signatures).

    Parameters
    ----------
    sig_a, sig_b : Tensor of shape (L, H, M) or (L, H, N, d)
    measure, keep, chunk
        As in :func:`pairwise_similarity`.

    Returns
    -------
    sim : Tensor of shape (L, H, H), float64

    Examples
    --------
    >>> import torch
    >>> from rml_fast.interp.head_stability import head_similarity
    >>> uniform = torch.tensor([1.0, 0.5, 0.5, 1 / 3, 1 / 3, 1 / 3]).repeat(1, 2, 4)
    >>> head_similarity(uniform, uniform).flatten().round(decimals=9).tolist()  # uniform: cos 1
    [1.0, 1.0, 1.0, 1.0]
    """
    measure = _check_measure(measure)
    _check_signatures([sig_a], measure, name="sig_a")
    _check_signatures([sig_b], measure, name="sig_b")
    if sig_a.shape != sig_b.shape:
        raise ValueError(
            f"sig_a and sig_b must have the same shape (one architecture, the same prompts), "
            f"got sig_a {tuple(sig_a.shape)} and sig_b {tuple(sig_b.shape)}"
        )
    return pairwise_similarity([sig_a, sig_b], measure=measure, keep=keep, chunk=chunk)[0, 1]


# --------------------------------------------------------------------------- matching


def match_heads(sim: Any) -> torch.Tensor:
    """One-to-one head matching maximising the total similarity (Hungarian algorithm).

    ``perm = argmax_{pi} sum_a sim[a, pi(a)]`` over injective maps, solved by
    :func:`scipy.optimize.linear_sum_assignment` (``O(H^3)``).

    Parameters
    ----------
    sim : Tensor or array of shape (H1, H2), H1 <= H2
        Similarities of the heads of one layer of two models.

    Returns
    -------
    perm : LongTensor of shape (H1,)
        Head ``a`` of the first model is matched to head ``perm[a]`` of the second.

    Examples
    --------
    >>> import torch
    >>> from rml_fast.interp.head_stability import match_heads
    >>> match_heads(torch.tensor([[0.1, 0.9], [0.8, 0.7]])).tolist()
    [1, 0]
    """
    not_meta(sim, "sim")
    if isinstance(sim, torch.Tensor) and (sim.is_complex() or sim.dtype == torch.bool):
        raise TypeError(f"sim must hold real similarities, got dtype {sim.dtype}")
    m = check_array(
        sim.detach().cpu().numpy() if isinstance(sim, torch.Tensor) else sim,
        "sim",
        dtypes=(np.float64,),
        finite=False,
    )
    if m.ndim != 2 or m.shape[0] > m.shape[1] or m.size == 0:
        raise ValueError(
            f"sim must be a non-empty (H1, H2) matrix with H1 <= H2, got shape {m.shape}"
        )
    if not np.isfinite(m).all():
        raise ValueError("sim must be finite")
    rows, cols = linear_sum_assignment(m, maximize=True)
    perm = np.empty(m.shape[0], dtype=np.int64)
    perm[rows] = cols
    return torch.from_numpy(perm)


def _check_sims(sims: Any) -> torch.Tensor:
    if not isinstance(sims, torch.Tensor) or sims.ndim != 5 or sims.shape[0] != sims.shape[1]:
        shape = tuple(sims.shape) if isinstance(sims, torch.Tensor) else type(sims).__name__
        raise ValueError(
            f"sims must be a (S, S, L, H, H) tensor from pairwise_similarity, got {shape}"
        )
    if sims.shape[3] != sims.shape[4]:
        raise ValueError(f"sims must have square (H, H) head blocks, got {tuple(sims.shape)}")
    return check_tensor(sims, "sims", ndim=5)


def stability_from_similarity(sims: torch.Tensor, *, matching: str = "max") -> torch.Tensor:
    """Head stability from precomputed similarities (the paper's per-head stability score).

    ``stab[m, l, h] = mean_{m2 != m} sim(A^m_{l,h}, A^{m2}_{l, pi(h)})`` with ``pi(h)`` the
    best match of head ``h`` in the same layer of model ``m2``: ``argmax_b`` for
    ``matching="max"`` (the paper), the Hungarian assignment of :func:`match_heads` for
    ``"hungarian"`` (PROPOSED; always ``<=`` the max version).

    Parameters
    ----------
    sims : Tensor of shape (S, S, L, H, H)
        From :func:`pairwise_similarity`; ``S >= 2``.
    matching : {"max", "hungarian"}, default="max"

    Returns
    -------
    stab : Tensor of shape (S, L, H), float64

    Examples
    --------
    >>> import torch
    >>> from rml_fast.interp.head_stability import pairwise_similarity, stability_from_similarity
    >>> a = torch.rand(2, 3, 40, generator=torch.Generator().manual_seed(0))
    >>> sims = pairwise_similarity([a, a.flip(1)])  # the same heads in another order
    >>> stability_from_similarity(sims, matching="hungarian").min().item() > 1 - 1e-9
    True
    """
    sims = _check_sims(sims)
    if matching not in _MATCHINGS:
        raise ValueError(f"matching must be one of {_MATCHINGS}, got {matching!r}")
    s, _, n_layers, n_heads, _ = sims.shape
    if s < 2:
        raise ValueError(f"stability needs at least 2 models, got S={s}")
    best = torch.zeros(s, n_layers, n_heads, dtype=torch.float64)
    for m in range(s):
        for m2 in range(s):
            if m2 == m:
                continue
            if matching == "max":
                best[m] += sims[m, m2].amax(-1)
            else:
                for layer in range(n_layers):
                    blk = sims[m, m2, layer]
                    perm = match_heads(blk)
                    best[m, layer] += blk[torch.arange(n_heads), perm]
    return best / (s - 1)


def head_stability(
    signatures: Sequence[torch.Tensor],
    *,
    matching: str = "max",
    measure: str = "cosine",
    keep: float = 0.99,
    chunk: int = _DEFAULT_CHUNK,
) -> torch.Tensor:
    """Cross-refit stability of every head of every model (Bali et al. 2026).

    ``stab[m, l, h] = mean_{m2 != m} max_b sim(A^m_{l,h}, A^{m2}_{l,b})`` (``matching="max"``)
    or with the one-to-one Hungarian matching (``"hungarian"``, PROPOSED); ``sim`` is the
    paper's cosine of attention signatures by default (see :func:`pairwise_similarity`).

    Parameters
    ----------
    signatures : list of S >= 2 tensors of shape (L, H, M) (or (L, H, N, d) for rep. measures)
        One per independently initialised refit, all on the same prompts.
    matching : {"max", "hungarian"}, default="max"
    measure, keep, chunk
        As in :func:`pairwise_similarity`.

    Returns
    -------
    stab : Tensor of shape (S, L, H), float64 in [-1, 1] (``[0, 1]`` for patterns)

    Examples
    --------
    >>> import torch
    >>> from rml_fast.models import TinyConfig, TinyTransformer
    >>> from rml_fast.interp.head_stability import attention_signatures, head_stability
    >>> cfg = TinyConfig(n_layers=2, d_model=16, n_heads=2, d_vocab=10)
    >>> prompts = torch.randint(0, 10, (4, 6), generator=torch.Generator().manual_seed(0))
    >>> sigs = [attention_signatures(TinyTransformer(cfg, seed=s), prompts) for s in (0, 0, 1)]
    >>> stab = head_stability(sigs)
    >>> tuple(stab.shape), bool(stab.max() <= 1 + 1e-9)
    ((3, 2, 2), True)
    """
    sims = pairwise_similarity(signatures, measure=measure, keep=keep, chunk=chunk)
    return stability_from_similarity(sims, matching=matching)


def layer_stability(stab: torch.Tensor) -> torch.Tensor:
    """Layer stability: the mean head stability over models and heads of each layer.

    ``layer_stab[l] = mean_{m, h} stab[m, l, h]``; plot against relative depth ``l / (L - 1)``.

    Parameters
    ----------
    stab : Tensor of shape (S, L, H)

    Returns
    -------
    layer_stab : Tensor of shape (L,)

    Examples
    --------
    >>> import torch
    >>> from rml_fast.interp.head_stability import layer_stability
    >>> layer_stability(torch.tensor([[[1.0, 0.5]], [[0.5, 0.0]]])).tolist()
    [0.5]
    """
    if not isinstance(stab, torch.Tensor) or stab.ndim != 3:
        shape = tuple(stab.shape) if isinstance(stab, torch.Tensor) else type(stab).__name__
        raise ValueError(f"stab must be an (S, L, H) tensor, got {shape}")
    check_tensor(stab, "stab", ndim=3, finite=False)
    return stab.mean((0, 2))


def head_distinctness(sims: torch.Tensor) -> torch.Tensor:
    """Distinctness of each head from the other heads of its layer (PROPOSED).

    ``distinct[m, l, h] = 1 - mean_{b != h} sim(A^m_{l,h}, A^m_{l,b})`` (the paper reports that
    middle-layer heads are the least stable yet the most distinct).

    Parameters
    ----------
    sims : Tensor of shape (S, S, L, H, H), H >= 2
        From :func:`pairwise_similarity` (only the within-model blocks are read).

    Returns
    -------
    distinct : Tensor of shape (S, L, H)

    Examples
    --------
    >>> import torch
    >>> from rml_fast.interp.head_stability import head_distinctness, pairwise_similarity
    >>> a = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])  # two orthogonal heads
    >>> head_distinctness(pairwise_similarity([a])).tolist()
    [[[1.0, 1.0]]]
    """
    sims = _check_sims(sims)
    n_heads = sims.shape[3]
    if n_heads < 2:
        raise ValueError("distinctness needs at least 2 heads per layer")
    within = torch.stack([sims[m, m] for m in range(sims.shape[0])])  # [S, L, H, H]
    off = within.sum(-1) - within.diagonal(dim1=-2, dim2=-1)
    return 1 - off / (n_heads - 1)


def stability_null(
    signatures: Sequence[torch.Tensor],
    n_prompts: int,
    *,
    n_perm: int = 20,
    matching: str = "max",
    measure: str = "cosine",
    keep: float = 0.99,
    chunk: int = _DEFAULT_CHUNK,
    rng: Any = None,
) -> torch.Tensor:
    """Prompt-permutation null distribution of head stability (PROPOSED).

    Each model's signature is cut into its ``n_prompts`` prompt blocks, which are shuffled
    independently per model, and :func:`head_stability` is recomputed: heads are then compared
    on different prompts, which keeps everything that does not depend on the prompt content
    (the causal shape of a pattern, positional heads) and removes content-specific agreement
    (e.g. two induction heads attending to the same earlier tokens). A refit whose stability
    exceeds the null's upper quantiles agrees on more than positional structure.

    Parameters
    ----------
    signatures : list of S >= 2 tensors of shape (L, H, M) or (L, H, N, d)
        ``M`` (or ``N``) must be a multiple of ``n_prompts`` (prompt-major, as produced).
    n_prompts : int >= 2
    n_perm : int, default=20
    matching, measure, keep, chunk
        As in :func:`head_stability`.
    rng : numpy.random.Generator, int or None

    Returns
    -------
    null : Tensor of shape (n_perm, S, L, H)

    Examples
    --------
    >>> import torch
    >>> from rml_fast.interp.head_stability import stability_null
    >>> g = torch.Generator().manual_seed(0)
    >>> sigs = [torch.rand(1, 2, 5 * 10, generator=g) for _ in range(2)]
    >>> tuple(stability_null(sigs, 5, n_perm=3, rng=0).shape)
    (3, 2, 1, 2)
    """
    measure = _check_measure(measure)
    sigs = _check_signatures(signatures, measure)
    n_prompts = int(check_scalar(n_prompts, "n_prompts", Interval("int", 2, None)))
    n_perm = int(check_scalar(n_perm, "n_perm", Interval("int", 1, None)))
    gen = check_rng(rng)
    length = sigs[0].shape[2]
    if length % n_prompts:
        raise ValueError(
            f"n_prompts={n_prompts} must divide the signature length {length} (axis 2)"
        )
    if len(sigs) < 2:
        raise ValueError(f"stability needs at least 2 models, got S={len(sigs)}")
    out = []
    for _ in range(n_perm):
        shuffled = []
        for sig in sigs:
            blocks = sig.reshape(*sig.shape[:2], n_prompts, -1, *sig.shape[3:])
            perm = torch.from_numpy(gen.permutation(n_prompts))
            shuffled.append(blocks[:, :, perm].reshape(sig.shape))
        out.append(
            head_stability(shuffled, matching=matching, measure=measure, keep=keep, chunk=chunk)
        )
    return torch.stack(out)


# --------------------------------------------------------------------------- residual stream


def _as_matrix(x: Any, name: str) -> torch.Tensor:
    if isinstance(x, np.ndarray):
        x = torch.from_numpy(x)
    if not isinstance(x, torch.Tensor) or not (
        x.is_floating_point() or x.dtype in (torch.int64, torch.int32)
    ):
        raise TypeError(
            f"{name} must be a real torch.Tensor or NumPy array, got {type(x).__name__}"
        )
    not_meta(x, name)
    if x.ndim != 2 or x.shape[0] < 2:
        raise ValueError(f"{name} must have shape (n, d) with n >= 2, got {tuple(x.shape)}")
    if not torch.isfinite(x.double()).all():
        raise ValueError(f"{name} must be finite")
    return x.double()


def linear_cka(X: Any, Y: Any) -> float:
    """Linear centred kernel alignment (Kornblith et al. 2019) of two representations.

    ``CKA(X, Y) = ||Y_c^T X_c||_F^2 / (||X_c^T X_c||_F ||Y_c^T Y_c||_F)`` with column-centred
    ``X_c, Y_c``; equal to ``HSIC(K, L) / sqrt(HSIC(K, K) HSIC(L, L))`` for linear kernels.
    Invariant to orthogonal transforms and isotropic scaling of either side; in ``[0, 1]``.

    Parameters
    ----------
    X : Tensor or ndarray of shape (n, d1)
    Y : Tensor or ndarray of shape (n, d2)

    Returns
    -------
    cka : float

    Examples
    --------
    >>> import torch
    >>> from rml_fast.interp.head_stability import linear_cka
    >>> X = torch.randn(100, 5, generator=torch.Generator().manual_seed(0))
    >>> Q, _ = torch.linalg.qr(torch.randn(5, 5, generator=torch.Generator().manual_seed(1)))
    >>> round(linear_cka(X, 3 * X @ Q), 6)
    1.0
    """
    x = _as_matrix(X, "X")
    y = _as_matrix(Y, "Y")
    if x.shape[0] != y.shape[0]:
        raise ValueError(
            f"X and Y must have the same number of rows, got {x.shape[0]} and {y.shape[0]}"
        )
    x = x - x.mean(0)
    y = y - y.mean(0)
    num = (y.T @ x).square().sum()
    den = torch.linalg.matrix_norm(x.T @ x) * torch.linalg.matrix_norm(y.T @ y)
    return float(num / den) if den > 0 else 0.0


def svcca(X: Any, Y: Any, *, keep: float = 0.99, projection_weighted: bool = False) -> float:
    """SVCCA (Raghu et al. 2017) or PWCCA (Morcos et al. 2018) similarity of two representations.

    SVD step: project each column-centred side onto its top singular directions holding
    ``keep`` of its variance; CCA step: the canonical correlations ``rho_i`` of the two reduced
    representations (singular values of ``U_X^T U_Y``). SVCCA is ``mean_i rho_i``; PWCCA is
    ``sum_i alpha_i rho_i / sum_i alpha_i`` with ``alpha_i = sum_j |<h_i, x_j>|``, ``h_i`` the
    canonical variates of ``X`` and ``x_j`` its columns.

    Parameters
    ----------
    X, Y : Tensor or ndarray of shape (n, d)
        The same width ``d`` on both sides (e.g. two heads' outputs).
    keep : float in (0, 1], default=0.99
    projection_weighted : bool, default=False

    Returns
    -------
    similarity : float in [0, 1]

    Examples
    --------
    >>> import torch
    >>> from rml_fast.interp.head_stability import svcca
    >>> X = torch.randn(200, 4, generator=torch.Generator().manual_seed(0))
    >>> A = torch.tensor([[2.0, 1, 0, 0], [0, 1, 0, 0], [0, 0, 3, 1], [1, 0, 0, 1]])
    >>> round(svcca(X, X @ A, keep=1.0), 6)  # CCA is invariant to invertible maps
    1.0
    """
    x = _as_matrix(X, "X")
    y = _as_matrix(Y, "Y")
    if x.shape != y.shape:
        raise ValueError(
            f"X and Y must have the same shape, got {tuple(x.shape)} and {tuple(y.shape)}"
        )
    keep = float(check_scalar(keep, "keep", Interval("real", 0, 1, "right")))
    measure = "pwcca" if projection_weighted else "svcca"
    return float(
        similarity_matrix([torch.stack([x, y])], measure, keep=keep, chunk=_DEFAULT_CHUNK)[0, 1]
    )


def residual_stability(
    models: Sequence[Any], prompts: torch.Tensor, *, batch_size: int = 64
) -> torch.Tensor:
    """Residual-stream stability across refits: linear CKA of residual activations per layer.

    ``res[l] = mean_{m < m2} CKA(R^m_l, R^{m2}_l)`` with ``R^m_l`` the ``[n P, D]`` matrix of
    ``blocks.{l}.hook_resid_pre`` activations (``l = L``: the final ``hook_resid_post``). CKA is
    rotation invariant, as needed because residual bases are not aligned across seeds
    (PROPOSED: the paper's exact residual measure is not specified in its summaries).

    Parameters
    ----------
    models : sequence of S >= 2 models of one architecture
    prompts : LongTensor of shape (n, P)
    batch_size : int, default=64

    Returns
    -------
    res : Tensor of shape (L + 1,), float64

    Examples
    --------
    >>> import torch
    >>> from rml_fast.models import TinyConfig, TinyTransformer
    >>> from rml_fast.interp.head_stability import residual_stability
    >>> cfg = TinyConfig(n_layers=2, d_model=16, n_heads=2, d_vocab=10)
    >>> prompts = torch.randint(0, 10, (4, 6), generator=torch.Generator().manual_seed(0))
    >>> res = residual_stability([TinyTransformer(cfg, seed=0), TinyTransformer(cfg, seed=0)], prompts)
    >>> [round(v, 6) for v in res.tolist()]
    [1.0, 1.0, 1.0]
    """
    models = list(models)
    if len(models) < 2:
        raise ValueError(f"models must hold at least 2 models, got {len(models)}")
    dims = [_dims(m, f"models[{i}]") for i, m in enumerate(models)]
    if len(set(dims)) != 1:
        raise ValueError(f"models must share n_layers and n_heads, got {dims}")
    prompts = _check_prompts(prompts, models[0])
    batch_size = _check_batch(batch_size)
    n_layers = dims[0][0]
    names = [f"blocks.{layer}.hook_resid_pre" for layer in range(n_layers)]
    names.append(f"blocks.{n_layers - 1}.hook_resid_post")
    reps = []
    for model in models:
        parts: list[list[torch.Tensor]] = [[] for _ in names]
        for lo in range(0, prompts.shape[0], batch_size):
            _, cache = _run_cache(model, prompts[lo : lo + batch_size], names)
            for i, name in enumerate(names):
                parts[i].append(cache[name].reshape(-1, cache[name].shape[-1]))
        reps.append([torch.cat(p) for p in parts])
    out = torch.zeros(len(names), dtype=torch.float64)
    pairs = 0
    for i in range(len(models)):
        for j in range(i + 1, len(models)):
            pairs += 1
            for k in range(len(names)):
                out[k] += linear_cka(reps[i][k], reps[j][k])
    return out / pairs


# --------------------------------------------------------------------------- importance


def _perplexity(logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> float:
    ce = torch.nn.functional.cross_entropy(logits[mask].double(), targets[mask], reduction="mean")
    return math.exp(float(ce))


def head_importance(
    model: Any,
    prompts: torch.Tensor,
    *,
    ablation: str = "zero",
    targets: torch.Tensor | None = None,
    loss_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Functional importance of each head: the perplexity increase when it is ablated.

    ``imp[l, h] = PPL(model with head (l, h) ablated) - PPL(model)``, ``PPL = exp(mean CE)``
    over the scored positions. The head's output ``z`` (``blocks.{l}.attn.hook_z``) is set to
    zero (``ablation="zero"``) or to its mean over the prompts at each position (``"mean"``,
    PROPOSED), which removes the head's contribution ``z W_O`` to the residual stream.

    Parameters
    ----------
    model : TinyTransformer or transformer_lens.HookedTransformer
    prompts : LongTensor of shape (n, P)
    ablation : {"zero", "mean"}, default="zero"
    targets : LongTensor of shape (n, P), optional
        Next-token targets for every position; default: language modelling on the prompts
        themselves (positions ``0..P-2`` predict tokens ``1..P-1``).
    loss_mask : BoolTensor of shape (n, P), optional
        Which positions are scored (with ``targets``; default all).

    Returns
    -------
    importance : Tensor of shape (L, H), float64

    Examples
    --------
    >>> import torch
    >>> from rml_fast.models import TinyConfig, TinyTransformer
    >>> from rml_fast.interp.head_stability import head_importance
    >>> model = TinyTransformer(TinyConfig(n_layers=1, d_model=16, n_heads=2, d_vocab=10), seed=0)
    >>> tuple(head_importance(model, torch.randint(0, 10, (4, 6))).shape)
    (1, 2)
    """
    n_layers, n_heads = _dims(model)
    prompts = _check_prompts(prompts, model)
    if ablation not in ("zero", "mean"):
        raise ValueError(f"ablation must be 'zero' or 'mean', got {ablation!r}")
    if targets is None:
        if loss_mask is not None:
            raise ValueError("loss_mask needs targets")
        if prompts.shape[1] < 2:
            raise ValueError("prompts need at least 2 positions for language modelling")
        tgt = torch.zeros_like(prompts)
        tgt[:, :-1] = prompts[:, 1:]
        mask = torch.zeros(prompts.shape, dtype=torch.bool)
        mask[:, :-1] = True
    else:
        if not isinstance(targets, torch.Tensor) or targets.shape != prompts.shape:
            raise ValueError(f"targets must be a LongTensor of shape {tuple(prompts.shape)}")
        tgt = targets.long()
        if loss_mask is None:
            mask = torch.ones(prompts.shape, dtype=torch.bool)
        else:
            if not isinstance(loss_mask, torch.Tensor) or loss_mask.shape != prompts.shape:
                raise ValueError(f"loss_mask must be a BoolTensor of shape {tuple(prompts.shape)}")
            mask = loss_mask.bool()
        if not mask.any():
            raise ValueError("loss_mask selects no position")
    names = [f"blocks.{layer}.attn.hook_z" for layer in range(n_layers)]
    logits, cache = _run_cache(model, prompts, names)
    base = _perplexity(logits, tgt, mask)
    out = torch.zeros(n_layers, n_heads, dtype=torch.float64)
    for layer in range(n_layers):
        mean_z = cache[names[layer]].mean(0)  # [P, H, d]
        for head in range(n_heads):

            def ablate(
                z: torch.Tensor, hook: Any, h: int = head, mz: torch.Tensor = mean_z
            ) -> torch.Tensor:
                z = z.clone()
                z[:, :, h] = 0.0 if ablation == "zero" else mz[:, h]
                return z

            with torch.no_grad():
                if isinstance(model, TinyTransformer):
                    abl = model(prompts, hooks=[(names[layer], ablate)])
                else:
                    abl = model.run_with_hooks(prompts, fwd_hooks=[(names[layer], ablate)])
            out[layer, head] = _perplexity(abl, tgt, mask) - base
    return out


def stability_importance_correlation(stab: torch.Tensor, importance: torch.Tensor) -> torch.Tensor:
    """Spearman rank correlation of head stability and head importance within each layer.

    ``rho[l] = corr(rank(stab[:, l, :]), rank(importance[:, l, :]))`` over the ``S H`` heads of
    layer ``l`` of all models (the paper: unstable heads in deeper layers are the more important
    ones, i.e. ``rho < 0`` there). Ties get their average rank; NaN where either side is constant.

    Parameters
    ----------
    stab : Tensor of shape (S, L, H)
        From :func:`head_stability`.
    importance : Tensor of shape (S, L, H)
        From :func:`head_importance`, stacked over the models.

    Returns
    -------
    rho : Tensor of shape (L,), float64

    Examples
    --------
    >>> import torch
    >>> from rml_fast.interp.head_stability import stability_importance_correlation
    >>> stab = torch.tensor([[[0.9, 0.5, 0.7]]])
    >>> stability_importance_correlation(stab, -stab).tolist()
    [-1.0]
    """
    for name, t in (("stab", stab), ("importance", importance)):
        if not isinstance(t, torch.Tensor) or t.ndim != 3:
            shape = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
            raise ValueError(f"{name} must be an (S, L, H) tensor, got {shape}")
        not_meta(t, name)
        if t.is_complex():
            raise TypeError(f"{name} must hold real numbers, got dtype {t.dtype}")
    if stab.shape != importance.shape:
        raise ValueError(
            f"stab and importance must have the same shape, got {tuple(stab.shape)} and "
            f"{tuple(importance.shape)}"
        )
    from scipy.stats import rankdata

    out = torch.full((stab.shape[1],), float("nan"), dtype=torch.float64)
    for layer in range(stab.shape[1]):
        a = rankdata(stab[:, layer].reshape(-1).double().numpy())
        b = rankdata(importance[:, layer].reshape(-1).double().numpy())
        a, b = a - a.mean(), b - b.mean()
        den = float(np.sqrt((a * a).sum() * (b * b).sum()))
        if den > 0:
            out[layer] = float((a * b).sum()) / den
    return out


# --------------------------------------------------------------------------- the study


class StabilityStudy:
    """The weight-decay experiment: refits of one zoo architecture under Adam vs AdamW.

    For every optimiser setting ``o`` and seed ``s`` a :class:`~rml_fast.models.TinyTransformer`
    of shape ``cfg`` is trained on ``task`` by :func:`~rml_fast.models.train.train_tiny` (seed
    ``s`` fixes both the initialisation and the data order); per setting the refits' heads are
    compared on one fixed prompt set (:func:`head_stability`) and the run reports the layer
    stability curves, their prompt-permutation null, the residual-stream stability, held-out
    perplexity and (optionally) head importance. Paper: AdamW's decoupled weight decay makes
    heads markedly more stable across seeds at no cost in perplexity.

    Every trained model is cached (and resumable from partial checkpoints) by ``train_tiny``,
    so an interrupted study restarts where it stopped and gives the same numbers.

    Parameters
    ----------
    cfg : TinyConfig
        Model shape; ``d_vocab``/``n_ctx`` must cover the task.
    task : str or Task, default="charlm"
    seeds : iterable of int, default=range(5)
        At least two distinct non-negative seeds.
    optimizers : sequence, default=("adam", "adamw")
        Entries ``"adam"`` (weight decay 0, the paper's Adam), ``"adamw"`` (decoupled weight
        decay ``weight_decay``), ``"sgd"`` (0), or explicit ``(optimizer, weight_decay)`` pairs.
    weight_decay : float, default=0.1
        The decay of ``"adamw"`` entries.
    steps, lr, batch, warmup : training arguments of ``train_tiny``
        Defaults 1000, 1e-3, 32, 0.
    n_prompts : int, default=64
        Size of the fixed prompt set (held-out windows for ``charlm``, else a fixed batch).
    n_eval : int, default=128
        Held-out sequences for the perplexity.
    matching : {"max", "hungarian"}, default="max"
    measure : {"cosine", "pearson"}, default="cosine"
        Measure on attention signatures (see :func:`pairwise_similarity`).
    n_null : int, default=10
        Prompt permutations of the null (0: none).
    importance : bool, default=False
        Also compute :func:`head_importance` (zero ablation) of every model.
    prompt_seed : int, default=0
        Seeds the fixed prompt set (``prompt_seed + 1``: the perplexity set).
    task_kwargs : dict, optional
        Arguments of :func:`~rml_fast.models.tasks.make_task` when ``task`` is a name.
    progress : bool, default=True
        tqdm bars for the training runs.
    cache : bool, default=True
        Use ``train_tiny``'s checkpoint cache (``RML_FAST_CACHE``).

    Examples
    --------
    >>> from rml_fast.models import TinyConfig
    >>> from rml_fast.interp.head_stability import StabilityStudy
    >>> cfg = TinyConfig(n_layers=2, d_model=16, n_heads=2, d_mlp=None, n_ctx=8, d_vocab=10)
    >>> study = StabilityStudy(cfg, "induction", seeds=(0, 1), steps=2, batch=4, n_prompts=4,
    ...                        n_eval=4, n_null=0, progress=False, cache=False,
    ...                        task_kwargs={"half": 4, "d_vocab": 10})
    >>> res = study.run()
    >>> res["labels"], tuple(res["layer_stability"]["adamw"].shape)
    (['adam', 'adamw'], (2,))
    """

    def __init__(
        self,
        cfg: Any,
        task: Any = "charlm",
        seeds: Any = range(5),
        optimizers: Sequence[Any] = ("adam", "adamw"),
        weight_decay: float = 0.1,
        *,
        steps: int = 1000,
        lr: float = 1e-3,
        batch: int = 32,
        warmup: int = 0,
        n_prompts: int = 64,
        n_eval: int = 128,
        matching: str = "max",
        measure: str = "cosine",
        n_null: int = 10,
        importance: bool = False,
        prompt_seed: int = 0,
        task_kwargs: dict[str, Any] | None = None,
        progress: bool = True,
        cache: bool = True,
    ) -> None:
        from rml_fast.models.tasks import Task, make_task
        from rml_fast.models.transformer import TinyConfig

        if not isinstance(cfg, TinyConfig):
            raise TypeError(f"cfg must be a TinyConfig, got {type(cfg).__name__}")
        if isinstance(task, str):
            with naming("task"):
                task = make_task(task, **(task_kwargs or {}))
        elif task_kwargs:
            raise ValueError("task_kwargs is only used with a task name")
        if not isinstance(task, Task):
            raise TypeError(f"task must be a Task or a task name, got {type(task).__name__}")
        if cfg.d_vocab < task.d_vocab or cfg.n_ctx < task.seq_len:
            raise ValueError(
                f"cfg (d_vocab={cfg.d_vocab}, n_ctx={cfg.n_ctx}) cannot hold the task "
                f"(d_vocab={task.d_vocab}, seq_len={task.seq_len})"
            )
        if isinstance(seeds, (str, bytes)) or not hasattr(seeds, "__iter__"):
            raise TypeError(f"seeds must be an iterable of int seeds, got {type(seeds).__name__}")
        seeds = [int(check_scalar(s, "seeds", Interval("int", 0, None))) for s in seeds]
        if len(set(seeds)) < 2 or len(set(seeds)) != len(seeds):
            raise ValueError(f"seeds must hold at least 2 distinct seeds, got {seeds}")
        wd = float(check_scalar(weight_decay, "weight_decay", Interval("real", 0, None)))
        self.settings: list[tuple[str, str, float]] = []
        for o in optimizers:
            if isinstance(o, str):
                if o not in ("adam", "adamw", "sgd"):
                    raise ValueError(f"optimizers entries must be adam/adamw/sgd, got {o!r}")
                self.settings.append((o, o, wd if o == "adamw" else 0.0))
            elif isinstance(o, tuple) and len(o) == 2 and o[0] in ("adam", "adamw", "sgd"):
                w = float(check_scalar(o[1], "optimizers weight decay", Interval("real", 0, None)))
                self.settings.append((f"{o[0]}(wd={w:g})", o[0], w))
            else:
                raise ValueError(
                    f"optimizers entries must be a name or (name, weight_decay), got {o!r}"
                )
        labels = [s[0] for s in self.settings]
        if not labels or len(set(labels)) != len(labels):
            raise ValueError(f"optimizers must be non-empty and distinct, got {labels}")
        if matching not in _MATCHINGS:
            raise ValueError(f"matching must be one of {_MATCHINGS}, got {matching!r}")
        if measure not in VECTOR_MEASURES:
            raise ValueError(f"measure must be one of {VECTOR_MEASURES}, got {measure!r}")
        self.cfg, self.task, self.seeds = cfg, task, seeds
        self.weight_decay = wd
        self.steps = int(check_scalar(steps, "steps", Interval("int", 0, None)))
        self.lr = float(check_scalar(lr, "lr", Interval("real", 0, None, "neither")))
        self.batch = int(check_scalar(batch, "batch", Interval("int", 1, None)))
        self.warmup = int(check_scalar(warmup, "warmup", Interval("int", 0, None)))
        self.n_prompts = int(check_scalar(n_prompts, "n_prompts", Interval("int", 2, None)))
        self.n_eval = int(check_scalar(n_eval, "n_eval", Interval("int", 1, None)))
        self.n_null = int(check_scalar(n_null, "n_null", Interval("int", 0, None)))
        self.prompt_seed = int(check_scalar(prompt_seed, "prompt_seed", Interval("int", 0, None)))
        self.matching, self.measure = matching, measure
        self.importance, self.progress, self.cache = bool(importance), bool(progress), bool(cache)

    def _batch(self, n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``n`` fixed sequences (held-out for charlm) with targets and loss mask."""
        if hasattr(self.task, "eval_batch"):
            tokens, targets = self.task.eval_batch(n, seed=seed)
            return tokens, targets, torch.ones(tokens.shape, dtype=torch.bool)
        gen = torch.Generator().manual_seed(10**9 + seed)  # disjoint from training seeds
        return self.task.train_batch(n, gen)

    def prompts(self) -> torch.Tensor:
        """The fixed prompt set, LongTensor of shape (n_prompts, seq_len)."""
        return self._batch(self.n_prompts, self.prompt_seed)[0]

    def train(self) -> dict[str, list[Any]]:
        """Train (or load from the cache) every refit: ``{label: [model per seed]}``."""
        from rml_fast.models.train import train_tiny

        out: dict[str, list[Any]] = {}
        for label, opt, wd in self.settings:
            out[label] = [
                train_tiny(
                    self.cfg, self.task, steps=self.steps, lr=self.lr, weight_decay=wd,
                    optimizer=opt, seed=s, batch=self.batch, warmup=self.warmup,
                    progress=self.progress, cache=self.cache,
                )
                for s in self.seeds
            ]  # fmt: skip
        return out

    def run(self) -> dict[str, Any]:
        """Train the refits and measure their stability.

        Returns
        -------
        result : dict
            ``labels`` (list of str), ``weight_decay`` ({label: float}), ``relative_depth``
            (Tensor (L,), ``l / (L - 1)``) and per label: ``stability`` (Tensor (S, L, H)),
            ``layer_stability`` (L,), ``layer_stability_sd`` (L,; SD over models of the
            per-model layer means), ``null_layer_stability`` and ``null_q95`` (L,; mean and
            95% quantile of the prompt-permutation null, NaN when ``n_null=0``),
            ``distinctness`` (L,), ``residual`` (L + 1,), ``perplexity`` (S,) and, with
            ``importance=True``, ``importance`` (S, L, H) and ``importance_corr`` (L,; Spearman
            correlation of stability and importance within each layer).
        """
        models = self.train()
        prompts = self.prompts()
        ev_tokens, ev_targets, ev_mask = self._batch(self.n_eval, self.prompt_seed + 1)
        n_layers = self.cfg.n_layers
        res: dict[str, Any] = {
            "labels": [s[0] for s in self.settings],
            "weight_decay": {s[0]: s[2] for s in self.settings},
            "relative_depth": torch.arange(n_layers, dtype=torch.float64) / max(n_layers - 1, 1),
        }
        keys = ("stability", "layer_stability", "layer_stability_sd", "null_layer_stability",
                "null_q95", "distinctness", "residual", "perplexity", "importance",
                "importance_corr")  # fmt: skip
        for k in keys:
            res[k] = {}
        for label, _, _ in self.settings:
            ms = models[label]
            sigs = [attention_signatures(m, prompts) for m in ms]
            sims = pairwise_similarity(sigs, measure=self.measure)
            stab = stability_from_similarity(sims, matching=self.matching)
            res["stability"][label] = stab
            res["layer_stability"][label] = layer_stability(stab)
            res["layer_stability_sd"][label] = stab.mean(2).std(0)
            if self.n_null:
                null = stability_null(
                    sigs, self.n_prompts, n_perm=self.n_null, matching=self.matching,
                    measure=self.measure, rng=self.prompt_seed,
                ).mean((1, 3))  # fmt: skip
                res["null_layer_stability"][label] = null.mean(0)
                res["null_q95"][label] = torch.quantile(null, 0.95, dim=0)
            else:
                nan = torch.full((n_layers,), float("nan"), dtype=torch.float64)
                res["null_layer_stability"][label] = nan
                res["null_q95"][label] = nan.clone()
            if self.cfg.n_heads >= 2:
                res["distinctness"][label] = head_distinctness(sims).mean((0, 2))
            res["residual"][label] = residual_stability(ms, prompts)
            ppl = []
            for m in ms:
                with torch.no_grad():
                    ppl.append(_perplexity(m(ev_tokens), ev_targets, ev_mask))
            res["perplexity"][label] = torch.tensor(ppl, dtype=torch.float64)
            if self.importance:
                res["importance"][label] = torch.stack(
                    [
                        head_importance(m, ev_tokens, targets=ev_targets, loss_mask=ev_mask)
                        for m in ms
                    ]
                )
                res["importance_corr"][label] = stability_importance_correlation(
                    stab, res["importance"][label]
                )
        if not self.importance:
            del res["importance"], res["importance_corr"]
        return res
