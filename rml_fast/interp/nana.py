"""NaNA — Native Network Anatomy: SVD detector-effector units of MLP weights and their effects.

Method (spec ``interp_circuits.md`` §2; ICML 2026 poster "SVD as a Fast Interpretability Method
for Transformers"; only its abstract was available, so the concrete reading below is PROPOSED and
follows Millidge & Black 2022). For an MLP ``h = act(x_in W_in + b_in)``, ``y = h W_out + b_out``
(row vectors, ``W_in`` of shape (D, F), ``W_out`` of shape (F, D)) every matrix has the thin SVD

    W = U diag(S) V^T = sum_i S_i u_i v_i^T.

Unit ``i`` is a **detector-effector unit** (DEU): ``u_i`` detects a direction of the input space,
``v_i`` writes a direction of the output space with gain ``S_i``; ``z W = sum_i S_i (z.u_i) v_i``.
Residual-space sides are read through the vocabulary (effectors of ``W_out`` through the
unembedding, detectors of ``W_in`` through the embedding).

**Subspace Contribution Analysis** (SCA) of a ``W_out`` unit at a token position: its write
``c_i = S_i (h.u_i) v_i`` (so ``sum_i c_i = h W_out``, exactly) followed to the metric
``L = logit[y+] - mean_{y in Y-} logit[y]`` through every norm on the way with its scale frozen
at the clean run (direct-logit attribution of a rank-1 subspace):
``SCA_i = c_i . g`` with ``g = C(gamma (.) dW_U) / s`` for a pre-LN model (``C`` centres,
``s`` is the final norm's scale, ``dW_U = W_U[:, y+] - mean W_U[:, Y-]``); post-LN (BERT) models
chain one such factor per norm. Mode ``"ablate"`` removes the unit from the weight instead
(``W <- W - S_i u_i v_i^T``) and measures ``L_clean - L_ablated`` with a full forward.

References
----------
Millidge & Black, "The singular value decompositions of transformer weight matrices are highly
interpretable" (AI Alignment Forum, 2022). Nanda et al., "Progress measures for grokking via
mechanistic interpretability", arXiv:2301.05217 (2023) (the Fourier features of modular
addition). Ahmad et al., "Beyond Components", arXiv:2511.20273 (2025).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from rml_fast._validation import Interval, check_rng, check_scalar, check_tensor
from rml_fast.interp._checks import ids_like, not_meta
from rml_fast.interp._nana_adapters import Adapter, adapt
from rml_fast.interp._nana_sca import (
    check_tokens,
    direct_grad,
    metric,
    prepare_query,
    removal_deltas,
)

__all__ = ["DEUBank", "NativeNetworkAnatomy", "deu_decompose", "fourier_concentration"]

logger = logging.getLogger(__name__)

_KINDS = ("mlp_in", "mlp_out")


@dataclass
class DEUBank:
    """Detector-effector units of one matrix ``W ~= sum_i S[i] * outer(U[i], V[i])``.

    Attributes
    ----------
    U : Tensor of shape (n_units, d_in)
        Detectors (left singular vectors, orthonormal rows).
    S : Tensor of shape (n_units,)
        Gains (singular values, non-increasing).
    V : Tensor of shape (n_units, d_out)
        Effectors (right singular vectors, orthonormal rows).
    layer : int
        Layer of the matrix (-1 for a bare matrix).
    kind : str
        ``"mlp_in"``, ``"mlp_out"`` or ``"matrix"``.

    Examples
    --------
    >>> import torch
    >>> bank = deu_decompose(torch.eye(3) * torch.tensor([3.0, 2.0, 1.0]))
    >>> bank.S.tolist(), bank.n_units
    ([3.0, 2.0, 1.0], 3)
    """

    U: torch.Tensor
    S: torch.Tensor
    V: torch.Tensor
    layer: int = -1
    kind: str = "matrix"

    def __post_init__(self) -> None:
        check_tensor(self.U, "U", ndim=2)
        check_tensor(self.S, "S", ndim=1)
        check_tensor(self.V, "V", ndim=2)
        r = self.S.shape[0]
        if self.U.shape[0] != r:
            raise ValueError(f"U must have one row per gain in S ({r}), got shape {tuple(self.U.shape)}")
        if self.V.shape[0] != r:
            raise ValueError(f"V must have one row per gain in S ({r}), got shape {tuple(self.V.shape)}")

    @property
    def n_units(self) -> int:
        """Number of units ``r``."""
        return int(self.S.shape[0])

    def reconstruct(self, units: Any = None) -> torch.Tensor:
        """``sum_{i in units} S_i u_i v_i^T`` of shape (d_in, d_out) (all units by default).

        Examples
        --------
        >>> import torch
        >>> W = torch.randn(4, 6, dtype=torch.float64)
        >>> bool(torch.allclose(deu_decompose(W).reconstruct(), W))
        True
        """
        idx = slice(None) if units is None else torch.as_tensor(units, dtype=torch.long)
        return (self.U[idx].T * self.S[idx]) @ self.V[idx]


def _randomized_svd(
    W: torch.Tensor, rank: int, n_oversamples: int, n_iter: int, rng: np.random.Generator
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Halko-Martinsson-Tropp: range finder with ``n_iter`` QR-stabilised power iterations."""
    m, n = W.shape
    q = min(rank + n_oversamples, m, n)
    omega = torch.from_numpy(rng.standard_normal((n, q))).to(W.dtype)
    Y = W @ omega
    Q = torch.linalg.qr(Y).Q
    for _ in range(n_iter):
        Q = torch.linalg.qr(W.T @ Q).Q
        Q = torch.linalg.qr(W @ Q).Q
    Ub, S, Vh = torch.linalg.svd(Q.T @ W, full_matrices=False)
    return (Q @ Ub)[:, :rank], S[:rank], Vh[:rank]


def deu_decompose(
    W: torch.Tensor,
    rank: int | None = None,
    *,
    canonical_sign: bool = True,
    method: str = "full",
    readout: torch.Tensor | None = None,
    readout_side: str = "effector",
    n_oversamples: int = 10,
    n_iter: int = 4,
    rng: Any = None,
    dtype: torch.dtype = torch.float64,
    layer: int = -1,
    kind: str = "matrix",
) -> DEUBank:
    """Detector-effector units of ``W`` (D_in, D_out): its top-``rank`` SVD ``W = U S V^T``.

    Parameters
    ----------
    W : Tensor of shape (d_in, d_out)
        Row-vector convention: the map is ``z -> z @ W``.
    rank : int or None, default=None
        Units kept (None: ``min(d_in, d_out)``, exact reconstruction).
    canonical_sign : bool, default=True
        Flip ``(u_i, v_i)`` jointly to a canonical sign (PROPOSED): with ``readout`` the
        readout of the chosen side has non-negative skew ``sum_t r_t^3 >= 0``; without it the
        largest-magnitude entry of ``v_i`` is positive.
    method : {"full", "randomized"}, default="full"
        LAPACK thin SVD, or a randomized top-``rank`` SVD (Halko et al. 2011) with
        ``n_oversamples`` extra columns and ``n_iter`` power iterations.
    readout : Tensor of shape (d_out, V) or (d_in, V), optional
        Matrix that maps the ``readout_side`` vectors to token scores (for the sign).
    readout_side : {"effector", "detector"}, default="effector"
    n_oversamples, n_iter : int, default=10, 4
    rng : numpy Generator, int seed or None
        Randomness of ``method="randomized"``.
    dtype : torch.dtype, default=torch.float64
        Precision of the decomposition and of the stored bank.
    layer : int, default=-1
    kind : str, default="matrix"

    Returns
    -------
    DEUBank
        ``U`` (r, d_in), ``S`` (r,), ``V`` (r, d_out).

    Raises
    ------
    TypeError, ValueError
        If ``W`` is not a finite 2-D float tensor or an option is out of range.

    Examples
    --------
    >>> import torch
    >>> W = torch.randn(8, 5, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    >>> bank = deu_decompose(W)
    >>> tuple(bank.U.shape), tuple(bank.V.shape)
    ((5, 8), (5, 5))
    >>> bool(torch.allclose(bank.U @ bank.U.T, torch.eye(5, dtype=torch.float64)))
    True
    >>> top2 = deu_decompose(W, 2, method="randomized", rng=0)
    >>> bool(torch.allclose(top2.S, bank.S[:2]))
    True
    """
    if not isinstance(W, torch.Tensor):
        raise TypeError(f"W must be a torch.Tensor, got {type(W).__name__}")
    not_meta(W, "W")
    if W.ndim != 2 or not W.is_floating_point() or min(W.shape) < 1:
        raise ValueError(f"W must be a non-empty 2-D float tensor, got {W.dtype} {tuple(W.shape)}")
    if not bool(torch.isfinite(W).all()):
        raise ValueError("W must be finite, got NaN or infinite values")
    full = min(W.shape)
    rank = full if rank is None else int(check_scalar(rank, "rank", Interval("int", 1, full)))
    if method not in ("full", "randomized"):
        raise ValueError(f"method must be 'full' or 'randomized', got {method!r}")
    if readout_side not in ("effector", "detector"):
        raise ValueError(f"readout_side must be 'effector' or 'detector', got {readout_side!r}")
    n_oversamples = int(check_scalar(n_oversamples, "n_oversamples", Interval("int", 0, None)))
    n_iter = int(check_scalar(n_iter, "n_iter", Interval("int", 0, None)))
    side_dim = W.shape[1] if readout_side == "effector" else W.shape[0]
    if readout is not None and (readout.ndim != 2 or readout.shape[0] != side_dim):
        raise ValueError(
            f"readout must have shape ({side_dim}, n_tokens) for readout_side={readout_side!r}, "
            f"got {tuple(readout.shape)}"
        )
    gen = check_rng(rng)
    Wd = W.detach().to(dtype)
    if method == "full":
        Uf, S, Vh = torch.linalg.svd(Wd, full_matrices=False)
        Uf, S, Vh = Uf[:, :rank], S[:rank], Vh[:rank]
    else:
        Uf, S, Vh = _randomized_svd(Wd, rank, n_oversamples, n_iter, gen)
    U, V = Uf.T.contiguous(), Vh.contiguous()
    if canonical_sign:
        if readout is not None:
            side = V if readout_side == "effector" else U
            score = ((side @ readout.detach().to(dtype)) ** 3).sum(1)
        else:
            score = V.gather(1, V.abs().argmax(1, keepdim=True)).squeeze(1)
        flip = torch.where(score < 0, -1.0, 1.0).to(dtype)
        U, V = U * flip[:, None], V * flip[:, None]
    return DEUBank(U, S, V, layer=layer, kind=kind)


def fourier_concentration(values: Any, top: int = 1) -> np.ndarray:
    """Share of the non-constant Fourier power of each row in its ``top`` strongest frequencies.

    For ``x`` of length ``p`` (a function on Z_p, e.g. a unit's readout over the numbers
    ``0..p-1`` of a modular-addition model), the power of frequency ``k = 1..floor(p/2)`` is
    ``|X_k|^2`` (with its mirror ``p - k``); the result is ``sum of the top powers / total``.
    1 means a pure sinusoid; white noise gives about ``top / (p // 2)``.

    Parameters
    ----------
    values : array-like of shape (n, p) or (p,)
    top : int, default=1

    Returns
    -------
    ndarray of shape (n,)

    Examples
    --------
    >>> import numpy as np
    >>> t = np.arange(13)
    >>> fourier_concentration(np.cos(2 * np.pi * 3 * t / 13) + 0.5).round(6).tolist()
    [1.0]
    """
    x = np.atleast_2d(np.asarray(values, dtype=np.float64))
    if x.ndim != 2 or x.shape[1] < 3:
        raise ValueError(f"values must have shape (n, p) with p >= 3, got {x.shape}")
    top = int(check_scalar(top, "top", Interval("int", 1, None)))
    power = np.abs(np.fft.rfft(x - x.mean(1, keepdims=True), axis=1)[:, 1:]) ** 2
    srt = np.sort(power, axis=1)[:, ::-1]
    return srt[:, :top].sum(1) / np.maximum(power.sum(1), 1e-300)


def _subtract(delta: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor]:
    """A replacement hook ``y -> y - delta`` (in ``y``'s dtype)."""

    def fn(y: torch.Tensor) -> torch.Tensor:
        return y - delta.to(y.dtype)

    return fn


class NativeNetworkAnatomy:
    """NaNA on a transformer: DEU banks of every MLP matrix, token readouts, SCA, pathways.

    Parameters
    ----------
    model : TinyTransformer, HookedTransformer, GPT2Model/GPT2LMHeadModel, BertModel, ...
        Any model with MLPs of a supported family (see module docstring of
        ``rml_fast.interp._nana_adapters``); read, never modified.
    matrices : sequence of {"mlp_in", "mlp_out"}, default=("mlp_in", "mlp_out")
    rank : int or None, default=None
        Units per matrix (None: all, ``min(D, F)``).
    fold_ln : bool, default=True
        Fold the MLP's pre-LN gain into ``W_in`` (``diag(gamma) W_in``) before the SVD, so that
        ``mlp_in`` detectors live in the normalised residual space (TransformerLens' fold_ln).
        Readouts always fold the final norm's gain into the unembedding.
    method : {"full", "randomized"}, default="full"
        SVD solver (see :func:`deu_decompose`).
    canonical_sign : bool, default=True
        Skew-sign convention of :func:`deu_decompose` on the vocabulary readouts (PROPOSED).
    rng : numpy Generator, int seed or None
    dtype : torch.dtype, default=torch.float64

    Attributes
    ----------
    banks_ : dict[(int, str), DEUBank]
        ``banks_[(layer, kind)]`` after :meth:`fit`.

    Examples
    --------
    >>> import torch
    >>> from rml_fast.models import TinyConfig, TinyTransformer
    >>> model = TinyTransformer(TinyConfig(n_layers=2, d_model=16, d_mlp=32, d_vocab=11), seed=0)
    >>> nana = NativeNetworkAnatomy(model).fit()
    >>> nana.banks_[(1, "mlp_out")].n_units
    16
    >>> tokens = torch.tensor([[1, 2, 3, 4]])
    >>> scores, bias = nana.sca(tokens, pos_ids=5, neg_ids=[6], return_bias=True)
    >>> tuple(scores.shape)
    (1, 2, 16)
    >>> dla = nana.direct_logit_attribution(tokens, pos_ids=5, neg_ids=[6])
    >>> bool(torch.allclose(scores.sum(-1) + bias, dla, atol=1e-5))
    True
    """

    def __init__(
        self,
        model: Any,
        matrices: Sequence[str] = ("mlp_in", "mlp_out"),
        rank: int | None = None,
        fold_ln: bool = True,
        method: str = "full",
        canonical_sign: bool = True,
        rng: Any = None,
        dtype: torch.dtype = torch.float64,
    ) -> None:
        self.adapter: Adapter = adapt(model)
        self.model = model
        if isinstance(matrices, str) or not matrices or any(m not in _KINDS for m in matrices):
            raise ValueError(f"matrices must be a non-empty sequence of {_KINDS}, got {matrices!r}")
        self.matrices = tuple(dict.fromkeys(matrices))
        a = self.adapter
        full = min(a.d_model, a.d_mlp)
        self.rank = None if rank is None else int(check_scalar(rank, "rank", Interval("int", 1, full)))
        if method not in ("full", "randomized"):
            raise ValueError(f"method must be 'full' or 'randomized', got {method!r}")
        if dtype not in (torch.float32, torch.float64):
            raise ValueError(f"dtype must be torch.float32 or torch.float64, got {dtype}")
        self.fold_ln, self.method, self.canonical_sign = bool(fold_ln), method, bool(canonical_sign)
        self.rng, self.dtype = rng, dtype
        self.banks_: dict[tuple[int, str], DEUBank] = {}

    # ------------------------------------------------------------------------- weights

    def _mlp(self, layer: int) -> tuple[torch.Tensor, torch.Tensor, Any]:
        """Folded ``(W_in, b_in, weights)`` in the bank dtype."""
        w = self.adapter.mlp(layer)
        W_in, b_in = w.W_in.to(self.dtype), w.b_in.to(self.dtype)
        if self.fold_ln and w.ln_w is not None and w.ln_b is not None:
            b_in = b_in + w.ln_b.to(self.dtype) @ W_in
            W_in = w.ln_w.to(self.dtype)[:, None] * W_in
        return W_in, b_in, w

    def _static_map(self, layer: int, v: torch.Tensor) -> torch.Tensor:
        """Residual vectors (n, D) written by MLP ``layer``, through the chain's centring and gains."""
        norms = self.adapter.norms()
        for name in self.adapter.chain(layer):
            gain = norms[name][0].to(v.dtype)
            v = (v - v.mean(-1, keepdim=True)) * gain
        return v

    def _embed_read(self, u: torch.Tensor) -> torch.Tensor:
        E = self.adapter.embed().to(u.dtype)
        if self.fold_ln and not self.adapter.post_ln:
            E = E - E.mean(1, keepdim=True)  # the pre-LN removes the mean
        return u @ E.T

    def fit(self) -> NativeNetworkAnatomy:
        """SVD every selected MLP matrix into a :class:`DEUBank` (attribute ``banks_``).

        Returns
        -------
        self

        Examples
        --------
        >>> from rml_fast.models import TinyConfig, TinyTransformer
        >>> m = TinyTransformer(TinyConfig(n_layers=1, d_model=8, d_mlp=16, d_vocab=5), seed=0)
        >>> sorted(NativeNetworkAnatomy(m, rank=3).fit().banks_)
        [(0, 'mlp_in'), (0, 'mlp_out')]
        """
        gen = check_rng(self.rng)
        self.banks_ = {}
        for layer in range(self.adapter.n_layers):
            W_in, _, w = self._mlp(layer)
            for kind in self.matrices:
                W = w.W_out.to(self.dtype) if kind == "mlp_out" else W_in
                bank = deu_decompose(W, self.rank, canonical_sign=False, method=self.method, rng=gen,
                                     dtype=self.dtype, layer=layer, kind=kind)  # fmt: skip
                self.banks_[(layer, kind)] = bank
                if self.canonical_sign:  # skew of the token readout >= 0 (deu_decompose's rule)
                    flip = torch.where((self.readout(layer, kind) ** 3).sum(1) < 0, -1.0, 1.0)
                    bank.U, bank.V = bank.U * flip[:, None], bank.V * flip[:, None]
        return self

    def _bank(self, layer: int, kind: str) -> DEUBank:
        if not self.banks_:
            raise RuntimeError("call fit() first")
        if kind not in _KINDS:
            raise ValueError(f"kind must be one of {_KINDS}, got {kind!r}")
        if (layer, kind) not in self.banks_:
            raise ValueError(f"no bank for layer={layer!r}, kind={kind!r}; fitted: {sorted(self.banks_)}")
        return self.banks_[(layer, kind)]

    # ------------------------------------------------------------------------- readouts

    def readout(self, layer: int, kind: str = "mlp_out") -> torch.Tensor:
        """Token scores (n_units, V) of the residual-space side of each unit.

        ``mlp_out``: effector through the final norm's centring and gain and the unembedding,
        ``C(v_i) gamma W_U``; ``mlp_in``: detector through the (centred) embedding, ``E u_i``.

        Examples
        --------
        >>> from rml_fast.models import TinyConfig, TinyTransformer
        >>> m = TinyTransformer(TinyConfig(n_layers=1, d_model=8, d_mlp=16, d_vocab=5), seed=0)
        >>> tuple(NativeNetworkAnatomy(m).fit().readout(0).shape)
        (8, 5)
        """
        bank = self._bank(layer, kind)
        if kind == "mlp_out":
            return self._static_map(layer, bank.V) @ self.adapter.unembed().to(self.dtype)
        return self._embed_read(bank.U)

    def vocab_readout(
        self,
        layer: int,
        kind: str = "mlp_out",
        k: int = 20,
        side: str = "effector",
        units: Any = None,
        sign: str = "+",
        decode: Any = None,
    ) -> list[list[Any]]:
        """Top-``k`` tokens of each unit's residual-space readout (``sign="-"``: the bottom ones).

        Parameters
        ----------
        layer : int
        kind : {"mlp_out", "mlp_in"}, default="mlp_out"
        k : int, default=20
        side : {"effector", "detector"}, default="effector"
            Must be the residual-space side: effector of ``mlp_out``, detector of ``mlp_in``.
        units : sequence of int, optional
            Units to read (all by default).
        sign : {"+", "-"}, default="+"
        decode : callable, optional
            Maps a token id to a string (e.g. ``tokenizer.decode``); ids are returned without it.

        Returns
        -------
        list of list
            One list of ``k`` tokens (ids or strings) per unit, strongest first.

        Examples
        --------
        >>> from rml_fast.models import TinyConfig, TinyTransformer
        >>> m = TinyTransformer(TinyConfig(n_layers=1, d_model=8, d_mlp=16, d_vocab=5), seed=0)
        >>> out = NativeNetworkAnatomy(m).fit().vocab_readout(0, k=2, units=[0, 1])
        >>> len(out), len(out[0])
        (2, 2)
        """
        want = "effector" if kind == "mlp_out" else "detector"
        if side != want:
            raise ValueError(
                f"side={side!r} of kind={kind!r} lives in neuron space (d_mlp); only the {want} "
                "side has a token readout"
            )
        if sign not in ("+", "-"):
            raise ValueError(f"sign must be '+' or '-', got {sign!r}")
        R = self.readout(layer, kind)
        k = int(check_scalar(k, "k", Interval("int", 1, R.shape[1])))
        if units is not None:
            R = R[torch.as_tensor(units, dtype=torch.long)]
        idx = torch.topk(R if sign == "+" else -R, k, dim=1).indices.tolist()
        return [[decode(t) if decode else t for t in row] for row in idx]

    # ------------------------------------------------------------------------- SCA

    def _query(self, tokens: Any, pos_ids: Any, neg_ids: Any, position: Any):
        return prepare_query(tokens, pos_ids, neg_ids, position, self.adapter.unembed().to(self.dtype))

    def _layers(self, layers: Any) -> list[int]:
        if layers is None:
            return list(range(self.adapter.n_layers))
        out = [int(x) for x in ([layers] if isinstance(layers, int) else layers)]
        if any(not 0 <= x < self.adapter.n_layers for x in out):
            raise ValueError(f"layers must lie in [0, {self.adapter.n_layers}), got {layers!r}")
        return out

    def direct_logit_attribution(self, tokens: Any, pos_ids: Any, neg_ids: Any = None, position: Any = -1, layers: Any = None) -> torch.Tensor:
        """Frozen-norm direct logit attribution of each MLP's whole output (B, n_layers).

        The reference that direct SCA decomposes: ``DLA_l = mlp_out_l . g_l`` (see module doc).

        Examples
        --------
        >>> import torch
        >>> from rml_fast.models import TinyConfig, TinyTransformer
        >>> m = TinyTransformer(TinyConfig(n_layers=1, d_model=8, d_mlp=16, d_vocab=5), seed=0)
        >>> nana = NativeNetworkAnatomy(m).fit()
        >>> tuple(nana.direct_logit_attribution(torch.tensor([[1, 2]]), 3).shape)
        (1, 1)
        """
        bi, pi, dW, shape = self._query(tokens, pos_ids, neg_ids, position)
        ls = self._layers(layers)
        rec = self.adapter.run(tokens, ls)
        out = torch.stack(
            [(rec.mlp_out[lay][bi, pi].to(self.dtype) * direct_grad(self.adapter, rec, lay, bi, pi, dW)).sum(-1)
             for lay in ls], 1)  # fmt: skip
        return out.reshape(*shape, len(ls))

    def sca(
        self,
        tokens: Any,
        pos_ids: Any,
        neg_ids: Any = None,
        position: Any = -1,
        mode: str = "direct",
        kind: str = "mlp_out",
        layers: Any = None,
        return_bias: bool = False,
        chunk: int = 64,
        progress: bool = False,
    ) -> Any:
        """Subspace Contribution Analysis: each unit's contribution to ``L`` at ``position``.

        ``L = logit[pos_ids] - mean logit[neg_ids]``. ``mode="direct"`` (``kind="mlp_out"``
        only): ``SCA_i = S_i (h.u_i) (v_i . g)`` with the clean-run frozen-norm map ``g``; the
        units sum to the MLP's direct logit attribution minus its bias term (returned with
        ``return_bias=True``). ``mode="ablate"``: ``L_clean - L`` after removing the unit from
        the weight, ``W <- W - S_i u_i v_i^T`` (a full forward; ``chunk`` units per batch).

        Parameters
        ----------
        tokens : LongTensor of shape (B, P)
        pos_ids : int or LongTensor of shape (B,) (``position="all"``: (B, P), e.g. next tokens)
        neg_ids : None, sequence of int (k,) or LongTensor of shape (B, k) (or (B, P, k))
        position : int, LongTensor of shape (B,) or "all", default=-1
            Where the metric is read; ``"all"`` scores every position (all ``B*P`` tokens).
        mode : {"direct", "ablate"}, default="direct"
        kind : {"mlp_out", "mlp_in"}, default="mlp_out"
        layers : int, sequence of int or None
            Layers to score (None: all).
        return_bias : bool, default=False
            Direct mode: also return the bias term ``b_out . g`` (B, n_layers).
        chunk : int, default=64
            Units removed per batched forward in ablate mode.
        progress : bool, default=False
            Show a tqdm bar over the ablate-mode forwards (one per chunk of units and layer).

        Returns
        -------
        Tensor of shape (B, n_layers, n_units) (``position="all"``: (B, P, n_layers, n_units))
            (and the bias term (B, n_layers) / (B, P, n_layers) when ``return_bias``).

        Examples
        --------
        >>> import torch
        >>> from rml_fast.models import TinyConfig, TinyTransformer
        >>> m = TinyTransformer(TinyConfig(n_layers=1, d_model=8, d_mlp=16, d_vocab=5), seed=0)
        >>> nana = NativeNetworkAnatomy(m, rank=8).fit()
        >>> t = torch.tensor([[1, 2, 3]])
        >>> direct = nana.sca(t, pos_ids=4, neg_ids=[0])
        >>> ablate = nana.sca(t, pos_ids=4, neg_ids=[0], mode="ablate")
        >>> tuple(direct.shape), tuple(ablate.shape)
        ((1, 1, 8), (1, 1, 8))
        >>> every = nana.sca(t[:, :2], pos_ids=t[:, 1:], position="all")  # next-token logits
        >>> tuple(every.shape)
        (1, 2, 1, 8)
        """
        if mode not in ("direct", "ablate"):
            raise ValueError(f"mode must be 'direct' or 'ablate', got {mode!r}")
        if mode == "direct" and kind != "mlp_out":
            raise ValueError("mode='direct' decomposes MLP outputs: use kind='mlp_out' (or mode='ablate')")
        if return_bias and mode != "direct":
            raise ValueError("return_bias needs mode='direct'")
        chunk = int(check_scalar(chunk, "chunk", Interval("int", 1, None)))
        ls = self._layers(layers)
        banks = [self._bank(lay, kind) for lay in ls]
        bi, pi, dW, shape = self._query(tokens, pos_ids, neg_ids, position)
        B = tokens.shape[0]
        rec = self.adapter.run(tokens, ls)
        if mode == "direct":
            out, bias = [], []
            for lay, bank in zip(ls, banks, strict=True):
                g = direct_grad(self.adapter, rec, lay, bi, pi, dW)  # (N, D)
                h = rec.post[lay][bi, pi].to(self.dtype)  # (N, F)
                out.append((h @ bank.U.T) * bank.S * (g @ bank.V.T))
                bias.append(g @ self.adapter.mlp(lay).b_out.to(self.dtype))
            scores = torch.stack(out, 1).reshape(*shape, len(ls), -1)
            return (scores, torch.stack(bias, 1).reshape(*shape, len(ls))) if return_bias else scores
        base = metric(rec.final, bi, pi, dW)
        res = []
        from tqdm.auto import tqdm

        total = sum(-(-bank.n_units // chunk) for bank in banks)
        bar = tqdm(total=total, desc="SCA ablate", disable=not progress, leave=False)
        for lay, bank in zip(ls, banks, strict=True):
            folded = self._mlp(lay) if kind == "mlp_in" else None
            vals = []
            for d in removal_deltas(rec, lay, bank.U, bank.S, bank.V, kind, folded, self.fold_ln, chunk):
                # d: (n, B, P, D), the removals of n units, run downstream as one batch
                n = d.shape[0]
                flat = d.reshape(n * B, *d.shape[2:])
                r2 = self.adapter.run(tokens.repeat(n, 1), [], {lay: _subtract(flat)})
                rows = (torch.arange(n)[:, None] * B + bi[None]).reshape(-1)
                ablated = metric(r2.final, rows, pi.repeat(n), dW.repeat(n, 1))
                vals.append((base.repeat(n) - ablated).reshape(n, -1).T)
                bar.update(1)
            res.append(torch.cat(vals, 1))
        bar.close()
        return torch.stack(res, 1).reshape(*shape, len(ls), -1)

    def ablate_units(self, tokens: Any, layer: int, units: Any, kind: str = "mlp_out") -> torch.Tensor:
        """Final normalised residual (B, P, D) with ``units`` of one matrix removed jointly.

        Removing every ``mlp_out`` unit leaves ``mlp_out = b_out`` (zero-ablates ``h W_out``).

        Examples
        --------
        >>> import torch
        >>> from rml_fast.models import TinyConfig, TinyTransformer
        >>> m = TinyTransformer(TinyConfig(n_layers=1, d_model=8, d_mlp=16, d_vocab=5), seed=0)
        >>> nana = NativeNetworkAnatomy(m).fit()
        >>> tuple(nana.ablate_units(torch.tensor([[1, 2]]), 0, [0, 1]).shape)
        (1, 2, 8)
        """
        bank = self._bank(layer, kind)
        check_tokens(tokens)
        idx = ids_like(units, "units").reshape(-1)
        if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= bank.n_units):
            raise ValueError(f"units must lie in [0, {bank.n_units}), got {units!r}")
        rec = self.adapter.run(tokens, [layer])
        folded = self._mlp(layer) if kind == "mlp_in" else None
        (delta,) = removal_deltas(rec, layer, bank.U[idx], bank.S[idx], bank.V[idx], kind, folded,
                                  self.fold_ln, 1, joint=True)  # fmt: skip
        return self.adapter.run(tokens, [], {layer: _subtract(delta[0])}).final

    # ------------------------------------------------------------------------- pathways

    @staticmethod
    def dominant_pathway(sca: torch.Tensor, mass: float = 0.8, layers: Any = None) -> dict[int, torch.Tensor]:
        """Smallest set of units per layer carrying a fraction ``mass`` of the MLP's total effect.

        Scores are averaged over the batch; with total ``T = sum_i SCA_i`` the units are sorted
        by ``sign(T) SCA_i`` (most supportive first) and the shortest prefix whose sum reaches
        ``mass * |T|`` is returned (empty if ``T == 0``).

        Parameters
        ----------
        sca : Tensor of shape (B, n_layers, n_units) or (n_layers, n_units)
        mass : float in (0, 1], default=0.8
        layers : sequence of int, optional
            Layer index of each row of ``sca`` (default ``0..n_layers-1``).

        Returns
        -------
        dict[int, LongTensor]

        Examples
        --------
        >>> import torch
        >>> s = torch.tensor([[[0.1, 2.0, -0.5, 1.0]]])
        >>> NativeNetworkAnatomy.dominant_pathway(s, mass=0.8)
        {0: tensor([1, 3])}
        """
        mass = float(check_scalar(mass, "mass", Interval("real", 0, 1, "right")))
        if not isinstance(sca, torch.Tensor) or sca.ndim not in (2, 3):
            raise ValueError("sca must be a tensor of shape (B, n_layers, n_units) or (n_layers, n_units)")
        check_tensor(sca, "sca", ndim=(2, 3))
        m = sca.mean(0) if sca.ndim == 3 else sca
        ls = list(range(m.shape[0])) if layers is None else [int(x) for x in layers]
        if len(ls) != m.shape[0]:
            raise ValueError(f"layers has {len(ls)} entries for {m.shape[0]} rows of sca")
        out = {}
        for row, layer in zip(m, ls, strict=True):
            total = float(row.sum())
            if total == 0.0:
                out[layer] = torch.zeros(0, dtype=torch.long)
                continue
            signed = row * (1.0 if total > 0 else -1.0)
            order = torch.argsort(signed, descending=True)
            cum = torch.cumsum(signed[order], 0)
            n = int(torch.searchsorted(cum, torch.tensor(mass * abs(total), dtype=cum.dtype)).item()) + 1
            out[layer] = order[: min(n, len(order))]
        return out

    def pathway_graph(self, threshold: float = 0.0, top: int | None = 20, units: dict[int, Any] | None = None) -> list[tuple[tuple[int, int], tuple[int, int], float]]:
        """PROPOSED cross-layer effector->detector coupling ``w = S_i^out |C(v_i^out_l) . u_j^in_l'|``.

        For every pair of layers ``l < l'`` and every ``mlp_out`` unit ``i`` of ``l`` (restricted
        to ``units[l]`` if given, e.g. a dominant pathway) and ``mlp_in`` unit ``j`` of ``l'``;
        edges with ``w > threshold``, strongest first, at most ``top`` (None: all). Norm scales
        are ignored (centring is kept for pre-LN models).

        Returns
        -------
        list of ((l, i), (l', j), w)

        Examples
        --------
        >>> from rml_fast.models import TinyConfig, TinyTransformer
        >>> m = TinyTransformer(TinyConfig(n_layers=2, d_model=8, d_mlp=16, d_vocab=5), seed=0)
        >>> edges = NativeNetworkAnatomy(m).fit().pathway_graph(top=3)
        >>> len(edges), edges[0][0][0] < edges[0][1][0]
        (3, True)
        """
        if not {"mlp_in", "mlp_out"} <= set(self.matrices):
            raise ValueError("pathway_graph needs matrices=('mlp_in', 'mlp_out')")
        threshold = float(check_scalar(threshold, "threshold", Interval("real", 0, None)))
        if top is not None:
            top = int(check_scalar(top, "top", Interval("int", 0, None)))
        edges = []
        L = self.adapter.n_layers
        for lay in range(L):
            src = self._bank(lay, "mlp_out")
            sel = torch.arange(src.n_units) if not units or lay not in units else torch.as_tensor(units[lay], dtype=torch.long)
            v = src.V[sel]
            if not self.adapter.post_ln:
                v = v - v.mean(-1, keepdim=True)
            for l2 in range(lay + 1, L):
                dst = self._bank(l2, "mlp_in")
                w = (src.S[sel, None] * (v @ dst.U.T)).abs()
                ii, jj = torch.nonzero(w > threshold, as_tuple=True)
                edges += [((lay, int(sel[i])), (l2, int(j)), float(w[i, j])) for i, j in zip(ii.tolist(), jj.tolist(), strict=True)]
        edges.sort(key=lambda e: -e[2])
        return edges if top is None else edges[: int(top)]
