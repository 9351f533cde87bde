"""Query Lens: key and value token readouts of sparse features, including indirect effects.

For a sparse dictionary (SAE) on the residual stream ``h^l_post`` of layer ``l``, with key
(encoder) directions ``k_i`` and value (decoder) directions ``v_i`` (Lee et al. 2026, eqs. 5-8)::

    s_VALUE(i) = U^T LN_f( mean_tokens [ prod_{j>l} (I + J^j_M)(I + J^j_A) ] v_i )    in R^V
    s_KEY(i)   = E_hat   mean_tokens [ prod_{j<=l} (I + J^j_M)(I + J^j_A) ]^T k_i     in R^V

``J^j_A, J^j_M`` are the Jacobians of the attention / MLP branches of block ``j`` (their pre-LN
included) at the residual states of real contexts (the *operating point*). The value direction
is placed at every position of ``h^l_post`` and pushed forward through all later blocks at once
(attention mixes positions), the key direction is placed at every position and pulled back to the
token embeddings. The Logit Lens (``transition="identity"``) keeps only the direct effect
``U^T v_i`` / ``E_hat k_i``; the difference is the indirect, module-mediated effect.

Both products are evaluated without forming a Jacobian: one ``torch.func.jvp`` (value) or
``torch.func.vjp`` (key) per context batch, vectorised over features with ``torch.func.vmap``
(the primal activations are shared by all tangents).

References
----------
Lee, Bang, Hwang, Lim, Kim, "Query Lens: Interpreting Sparse Key-Value Features with Indirect
Effects", ICML 2026, arXiv:2606.07617.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from rml_fast._validation import Interval, check_scalar, check_tensor
from rml_fast.interp import _query_lens_core as core
from rml_fast.interp._checks import naming, not_meta
from rml_fast.interp.sae import TopKSAE
from rml_fast.models.transformer import TinyTransformer

__all__ = [
    "QueryLens",
    "SparseDict",
    "fit_channel_maps",
    "input_score",
    "output_score",
    "subspace_overlap",
]

_TRANSITIONS = ("full", "first_order", "identity")
_FINAL_LN = ("vector", "jacobian", "none")
_READOUT_KEY = ("embed_cosine_centered", "embed_dot")
_READOUT_VALUE = ("unembed",)
_EFFECTS = ("total", "direct", "indirect")
_STRATEGIES = ("auto", "tangents", "operator")


@dataclass(frozen=True)
class SparseDict:
    """A sparse dictionary (SAE or transcoder) attached to layer ``layer`` of a model.

    Parameters
    ----------
    W_enc : Tensor of shape (D, F)
        Encoder; column ``i`` is the key feature ``k_i``.
    W_dec : Tensor of shape (D, F)
        Decoder; column ``i`` is the value feature ``v_i``.
    b_enc : Tensor of shape (F,)
    b_dec : Tensor of shape (D,)
    layer : int
        The SAE reads and writes ``blocks.{layer}.hook_resid_post``. A ``"transcoder"`` reads
        ``blocks.{layer}.hook_resid_mid`` (key side: the prefix ends after the layer's attention)
        and writes the layer's MLP output (value side: transport starts after the MLP).
    kind : {"sae", "transcoder"}, default="sae"

    Examples
    --------
    >>> import torch
    >>> from rml_fast.interp.query_lens import SparseDict
    >>> sd = SparseDict(torch.randn(8, 20), torch.randn(8, 20), torch.zeros(20), torch.zeros(8), 0)
    >>> sd.d_model, sd.n_features
    (8, 20)
    """

    W_enc: torch.Tensor
    W_dec: torch.Tensor
    b_enc: torch.Tensor
    b_dec: torch.Tensor
    layer: int
    kind: str = "sae"

    def __post_init__(self) -> None:
        for name in ("W_enc", "W_dec", "b_enc", "b_dec"):
            if not isinstance(getattr(self, name), torch.Tensor):
                raise TypeError(f"SparseDict.{name} must be a torch.Tensor, got "
                                f"{type(getattr(self, name)).__name__}")  # fmt: skip
            check_tensor(getattr(self, name), f"SparseDict.{name}")
        if self.W_enc.ndim != 2:
            raise ValueError(f"SparseDict.W_enc must be (D, F), got {tuple(self.W_enc.shape)}")
        d, f = self.W_enc.shape
        if tuple(self.W_dec.shape) != (d, f):
            hint = " (transpose it: W_dec is (D, F) here)" if self.W_dec.shape == (f, d) else ""
            raise ValueError(f"SparseDict.W_dec must have shape (D, F) = {(d, f)} like W_enc, "
                             f"got {tuple(self.W_dec.shape)}{hint}")  # fmt: skip
        if tuple(self.b_enc.shape) != (f,) or tuple(self.b_dec.shape) != (d,):
            raise ValueError(f"SparseDict.b_enc must be ({f},) and b_dec ({d},), got "
                             f"{tuple(self.b_enc.shape)} and {tuple(self.b_dec.shape)}")  # fmt: skip
        check_scalar(self.layer, "SparseDict.layer", Interval("int", 0, None))
        if self.kind not in ("sae", "transcoder"):
            raise ValueError(f"SparseDict.kind must be 'sae' or 'transcoder', got {self.kind!r}")

    @property
    def d_model(self) -> int:
        """Residual width ``D``."""
        return int(self.W_enc.shape[0])

    @property
    def n_features(self) -> int:
        """Number of features ``F``."""
        return int(self.W_enc.shape[1])

    @classmethod
    def from_sae(cls, sae: TopKSAE, layer: int, kind: str = "sae") -> SparseDict:
        """Wrap a :class:`~rml_fast.interp.sae.TopKSAE` (its ``W_dec`` (m, d) is transposed).

        Examples
        --------
        >>> from rml_fast.interp.sae import TopKSAE
        >>> sd = SparseDict.from_sae(TopKSAE(8, 16, k=2, seed=0), layer=1)
        >>> tuple(sd.W_dec.shape), sd.layer
        ((8, 16), 1)
        """
        if not isinstance(sae, TopKSAE):
            raise TypeError(f"sae must be a TopKSAE, got {type(sae).__name__}")
        with torch.no_grad():
            return cls(sae.W_enc.detach().clone(), sae.W_dec.detach().T.clone(),
                       sae.b_enc.detach().clone(), sae.b_dec.detach().clone(), layer, kind)  # fmt: skip


class QueryLens:
    """Key and value readouts of sparse features with direct + indirect (module-mediated) effects.

    ``value_scores`` computes ``s_VALUE`` and ``key_scores`` ``s_KEY`` (module docstring; paper
    eqs. 5-8) at the operating point set by :meth:`fit`.

    Parameters
    ----------
    model : TinyTransformer
    sdict : SparseDict
        Its ``d_model`` must equal the model's and its ``layer`` must exist.
    transition : {"full", "first_order", "identity"}, default="full"
        ``full``: the product ``prod (I + J)`` (all multi-hop paths); ``first_order``: the
        single-hop ``I + sum_j J^j`` with every Jacobian at its own operating point; ``identity``:
        the Logit Lens (direct effect only).
    readout_value : {"unembed"}, default="unembed"
    readout_key : {"embed_cosine_centered", "embed_dot"}, default="embed_cosine_centered"
        ``embed_cosine_centered``: cosine of the pulled-back key with ``e_t - c``, ``c`` the mean
        embedding of the fitted context tokens (reference code's choice); ``embed_dot``: ``W_E g``.
    k : int, default=25
        Default number of tokens of :meth:`top_tokens` (at most V are returned).
    include_ln : bool, default=True
        Differentiate through every layer norm; False freezes each LN scale at the operating
        point (a linearisation many lens papers use).
    final_ln : {"vector", "jacobian", "none"}, default="vector"
        How the value readout treats the final LN: ``vector`` centres the token-averaged
        transported direction, divides by its standard deviation and multiplies by the LN gain
        (``U^T (gamma * LN(u))``, the paper's description); ``jacobian`` applies the exact LN
        Jacobian at each token before averaging (equals the derivative of the mean logits, see
        the tests); ``none`` reads ``U^T u``. PROPOSED detail: the paper's folding is not spelled
        out; "vector" is our reading.
    mediators : iterable of str or None, default=None
        Sublayers through which indirect effects may pass, named ``"blocks.{j}.attn"`` /
        ``"blocks.{j}.mlp"``; None = all. A sublayer left out is held at its operating-point
        output (zero Jacobian), so ``mediators=()`` gives the direct effect.
    batch_size : int, default=64
        Contexts per primal pass.
    chunk_size : int, default=64
        Features per vectorised JVP/VJP.
    strategy : {"auto", "tangents", "operator"}, default="auto"
        ``tangents``: one JVP (value) / VJP (key) tangent per feature, vectorised with vmap.
        ``operator``: both readouts are linear in the feature direction, so the token-averaged
        transport is a ``D x D`` operator ``M`` (``u = M v``; the key side is ``g = M_key^T k``,
        because ``mean_q g_q . w = k^T mean_p J (w at every position)``). ``M`` is built once per
        operating point from ``D`` batched JVPs of the basis vectors and cached, after which
        any number of features costs one matrix product. ``auto`` uses the operator when it is
        cached or more than ``D`` directions are requested, else tangents. Never forms the
        ``(n P D) x (n P D)`` Jacobian.

    Attributes
    ----------
    n_tokens_ : int
        Valid tokens of the operating point (after :meth:`fit`).
    embed_center_ : Tensor of shape (D,)
        Mean embedding ``c`` of the fitted tokens.

    Examples
    --------
    >>> import torch
    >>> from rml_fast.models import TinyConfig, TinyTransformer
    >>> from rml_fast.interp.sae import TopKSAE
    >>> from rml_fast.interp.query_lens import QueryLens, SparseDict
    >>> model = TinyTransformer(TinyConfig(n_layers=2, d_model=16, n_heads=2, d_vocab=12), seed=0)
    >>> sd = SparseDict.from_sae(TopKSAE(16, 32, k=4, seed=0), layer=0)
    >>> ql = QueryLens(model, sd, k=3).fit(torch.randint(0, 12, (4, 6)))
    >>> ql.value_scores([0, 5]).shape, ql.key_scores([0, 5]).shape
    (torch.Size([2, 12]), torch.Size([2, 12]))
    >>> tuple(ql.top_tokens(ql.value_scores([0, 5])).shape)
    (2, 3)
    """

    def __init__(
        self,
        model: TinyTransformer,
        sdict: SparseDict,
        *,
        transition: str = "full",
        readout_value: str = "unembed",
        readout_key: str = "embed_cosine_centered",
        k: int = 25,
        include_ln: bool = True,
        final_ln: str = "vector",
        mediators: Iterable[str] | None = None,
        batch_size: int = 64,
        chunk_size: int = 64,
        strategy: str = "auto",
    ) -> None:
        if not isinstance(model, TinyTransformer):
            raise TypeError(f"model must be a TinyTransformer, got {type(model).__name__}")
        if isinstance(sdict, TopKSAE):
            raise TypeError("sdict must be a SparseDict; wrap the SAE with "
                            "SparseDict.from_sae(sae, layer=...)")  # fmt: skip
        if not isinstance(sdict, SparseDict):
            raise TypeError(f"sdict must be a SparseDict, got {type(sdict).__name__}")
        cfg = model.cfg
        if sdict.d_model != cfg.d_model:
            raise ValueError(f"sdict has width D={sdict.d_model} but the model's d_model is "
                             f"{cfg.d_model}")  # fmt: skip
        if sdict.layer >= cfg.n_layers:
            raise ValueError(f"sdict.layer must be in [0, {cfg.n_layers}) for this "
                             f"{cfg.n_layers}-layer model, got {sdict.layer}")  # fmt: skip
        if sdict.kind == "transcoder" and cfg.attn_only:
            raise ValueError("a transcoder needs an MLP at its layer; the model is attention-only")
        for name, val, allowed in (("transition", transition, _TRANSITIONS),
                                   ("strategy", strategy, _STRATEGIES),
                                   ("readout_value", readout_value, _READOUT_VALUE),
                                   ("readout_key", readout_key, _READOUT_KEY),
                                   ("final_ln", final_ln, _FINAL_LN)):  # fmt: skip
            if val not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {val!r}")
        self.model, self.sdict = model, sdict
        self.transition, self.readout_value, self.readout_key = transition, readout_value, readout_key
        self.k = int(check_scalar(k, "k", Interval("int", 1, None)))
        self.include_ln, self.final_ln = bool(include_ln), final_ln
        steps = core.all_steps(model)
        names = {core.step_name(s) for s in steps}
        if mediators is not None:
            if isinstance(mediators, str):
                raise TypeError("mediators must be an iterable of sublayer names, not one str")
            mediators = frozenset(mediators)
            bad = sorted(mediators - names)
            if bad:
                raise ValueError(f"mediators {bad} are not sublayers of the model; "
                                 f"expected names among {sorted(names)}")  # fmt: skip
        self.mediators = mediators
        self.batch_size = int(check_scalar(batch_size, "batch_size", Interval("int", 1, None)))
        self.chunk_size = int(check_scalar(chunk_size, "chunk_size", Interval("int", 1, None)))
        layer = sdict.layer
        if sdict.kind == "sae":
            self._key_steps = [s for s in steps if s[1] <= layer]
        else:
            self._key_steps = [s for s in steps if s[1] < layer] + [("attn", layer)]
        self._value_steps = [s for s in steps if s[1] > layer]
        self.strategy = strategy
        self._contexts: torch.Tensor | None = None
        self._operators: dict[tuple[str, str], torch.Tensor] = {}

    # --- operating point -------------------------------------------------------------------

    def fit(self, contexts: torch.Tensor, mask: torch.Tensor | None = None) -> QueryLens:
        """Set the operating point: the contexts whose hidden states the Jacobians are taken at.

        Parameters
        ----------
        contexts : LongTensor of shape (n_seq, P)
            Token ids (e.g. 1024 x 32 windows of a corpus in the paper).
        mask : BoolTensor of shape (n_seq, P) or None, default=None
            Valid tokens (tangents are placed and averaged only there); None = all.

        Returns
        -------
        self : QueryLens

        Examples
        --------
        >>> import torch
        >>> from rml_fast.models import TinyConfig, TinyTransformer
        >>> from rml_fast.interp.sae import TopKSAE
        >>> model = TinyTransformer(TinyConfig(n_layers=1, d_model=8, n_heads=2, d_vocab=6), seed=0)
        >>> ql = QueryLens(model, SparseDict.from_sae(TopKSAE(8, 4, k=1, seed=0), 0))
        >>> ql.fit(torch.zeros(2, 3, dtype=torch.long)).n_tokens_
        6
        """
        not_meta(contexts, "contexts")
        with naming("contexts"):
            tokens = self.model._check_tokens(contexts)
        if tokens.shape[0] < 1:
            raise ValueError(f"contexts must hold at least one context, got {tuple(tokens.shape)}")
        if mask is None:
            mask = torch.ones(tokens.shape, dtype=torch.bool)
        if not isinstance(mask, torch.Tensor) or mask.shape != tokens.shape:
            raise ValueError(f"mask must be a bool tensor of shape {tuple(tokens.shape)}, got "
                             f"{getattr(mask, 'shape', type(mask).__name__)}")  # fmt: skip
        mask = mask.bool()
        if not bool(mask.any()):
            raise ValueError("mask must mark at least one valid token")
        self._contexts, self._mask = tokens, mask
        self._operators = {}
        self.n_tokens_ = int(mask.sum())
        with torch.no_grad():
            self.embed_center_ = self.model.W_E.detach()[tokens[mask]].mean(0)
        return self

    def _check_fitted(self) -> None:
        if self._contexts is None:
            raise RuntimeError("QueryLens is not fitted; call fit(contexts) first")

    def _batches(self) -> Iterable[tuple[core.OperatingPoint, torch.Tensor]]:
        if self._contexts is None:
            raise RuntimeError("QueryLens is not fitted; call fit(contexts) first")
        for i in range(0, self._contexts.shape[0], self.batch_size):
            tok = self._contexts[i : i + self.batch_size]
            yield core.operating_point(self.model, tok), self._mask[i : i + self.batch_size]

    def _features(self, features: Any, name: str = "features") -> torch.Tensor:
        f = self.sdict.n_features
        if features is None:
            return torch.arange(f)
        idx = torch.as_tensor(np.asarray(features) if not isinstance(features, torch.Tensor)
                              else features)  # fmt: skip
        if idx.ndim != 1 or idx.dtype.is_floating_point or idx.dtype == torch.bool:
            raise ValueError(f"{name} must be a 1-D sequence of feature indices, got "
                             f"dtype {idx.dtype} and shape {tuple(idx.shape)}")  # fmt: skip
        if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= f):
            raise ValueError(f"{name} must lie in [0, n_features={f})")
        return idx.long()

    def _vectors(self, vectors: Any) -> torch.Tensor:
        if not isinstance(vectors, torch.Tensor) or vectors.ndim != 2 or \
                vectors.shape[1] != self.model.cfg.d_model:  # fmt: skip
            raise ValueError(f"vectors must be a tensor of shape (n, D={self.model.cfg.d_model}), "
                             f"got {getattr(vectors, 'shape', type(vectors).__name__)}")  # fmt: skip
        check_tensor(vectors, "vectors", ndim=2)
        return vectors.to(self.model.W_E.dtype)

    # --- transport ---------------------------------------------------------------------------

    def _site(self, op: core.OperatingPoint, steps: list[core.Step]) -> torch.Tensor:
        return op.inputs[steps[0]] if steps else op.final

    def value_transport(
        self, vectors: torch.Tensor, *, transition: str | None = None, batched: bool = True
    ) -> torch.Tensor:
        """Token-averaged pushed-forward directions ``mean_tokens prod(I + J) v``, shape (n, D).

        With ``final_ln="jacobian"`` the final LN's Jacobian is included (output in LN space).

        Parameters
        ----------
        vectors : Tensor of shape (n, D)
            Directions placed at every valid position of ``h^l_post``.
        transition : str or None, default=None
            Overrides the lens' ``transition``.
        batched : bool, default=True
            vmap over the tangents or use the cached operator (see ``strategy``); False: one
            ``jvp`` per vector, the naive loop (a reference).

        Examples
        --------
        >>> import torch
        >>> from rml_fast.models import TinyConfig, TinyTransformer
        >>> from rml_fast.interp.sae import TopKSAE
        >>> model = TinyTransformer(TinyConfig(n_layers=1, d_model=8, n_heads=2, d_vocab=6), seed=0)
        >>> ql = QueryLens(model, SparseDict.from_sae(TopKSAE(8, 4, k=1, seed=0), 0))
        >>> ql = ql.fit(torch.randint(0, 6, (2, 3)))
        >>> bool(torch.allclose(ql.value_transport(torch.eye(8)), torch.eye(8)))  # last layer
        True
        """
        self._check_fitted()
        vectors = self._vectors(vectors)
        transition = self.transition if transition is None else transition
        if batched and self._use_operator("value", transition, vectors.shape[0]):
            return vectors @ self._operator("value", transition)
        return self._value_tangents(vectors, transition, batched)

    def _use_operator(self, side: str, transition: str, n: int) -> bool:
        if self.strategy == "tangents" or transition == "identity":
            return False
        return (self.strategy == "operator" or (side, transition) in self._operators
                or n > self.model.cfg.d_model)  # fmt: skip

    def _operator(self, side: str, transition: str) -> torch.Tensor:
        """``M^T`` (value) or ``M`` (key), cached per operating point: rows ``v @ op``."""
        key = (side, transition)
        if key not in self._operators:
            eye = torch.eye(self.model.cfg.d_model, dtype=self.model.W_E.dtype)
            if side == "value":
                self._operators[key] = self._value_tangents(eye, transition, True)
            else:
                self._operators[key] = self._key_forward(eye, transition).T
        return self._operators[key]

    def _key_forward(self, vectors: torch.Tensor, transition: str) -> torch.Tensor:
        """Rows ``M w``: token-mean forward transport of ``w`` placed at every embedding."""
        steps = self._key_steps
        out = torch.zeros_like(vectors)
        for op, mask in self._batches():
            m = mask.to(vectors.dtype)[None, :, :, None]
            for c in range(0, vectors.shape[0], self.chunk_size):
                t = vectors[c : c + self.chunk_size, None, None, :] * m
                if transition == "full":
                    f = core.chain(self.model, steps, op, include_ln=self.include_ln,
                                   mediators=self.mediators)  # fmt: skip
                    u = core.push_forward(f, op.embed, t, True)
                else:
                    u = core.first_order_forward(
                        self.model, steps, op, t, include_ln=self.include_ln,
                        mediators=self.mediators, batched=True)  # fmt: skip
                out[c : c + self.chunk_size] += (u * m).sum((1, 2)).detach()
        return out / self.n_tokens_

    def _value_tangents(
        self, vectors: torch.Tensor, transition: str, batched: bool
    ) -> torch.Tensor:
        steps, jac_ln = self._value_steps, self.final_ln == "jacobian"
        out = torch.zeros_like(vectors)
        for op, mask in self._batches():
            m = mask.to(vectors.dtype)[None, :, :, None]
            for c in range(0, vectors.shape[0], self.chunk_size):
                t = vectors[c : c + self.chunk_size, None, None, :] * m
                if transition == "full":
                    f = core.chain(self.model, steps, op, include_ln=self.include_ln,
                                   mediators=self.mediators, final_ln=jac_ln)  # fmt: skip
                    u = core.push_forward(f, self._site(op, steps), t, batched)
                else:
                    if transition == "first_order":
                        t = core.first_order_forward(
                            self.model, steps, op, t, include_ln=self.include_ln,
                            mediators=self.mediators, batched=batched)  # fmt: skip
                    u = t
                    if jac_ln:
                        f = core.chain(self.model, [], op, include_ln=self.include_ln,
                                       mediators=None, final_ln=True)  # fmt: skip
                        u = core.push_forward(f, op.final, u, batched)
                out[c : c + self.chunk_size] += (u * m).sum((1, 2)).detach()
        return out / self.n_tokens_

    def key_transport(
        self, vectors: torch.Tensor, *, transition: str | None = None, batched: bool = True
    ) -> torch.Tensor:
        """Token-averaged pulled-back keys ``mean_tokens prod(I + J)^T k`` at the embeddings, (n, D).

        Parameters
        ----------
        vectors : Tensor of shape (n, D)
            Key directions placed (as cotangents) at every valid position of the read site.
        transition : str or None, default=None
            Overrides the lens' ``transition``.
        batched : bool, default=True
            vmap over the cotangents or use the cached operator (see ``strategy``); False: one
            ``vjp`` application per vector (a reference).

        Examples
        --------
        >>> import torch
        >>> from rml_fast.models import TinyConfig, TinyTransformer
        >>> from rml_fast.interp.sae import TopKSAE
        >>> model = TinyTransformer(TinyConfig(n_layers=1, d_model=8, n_heads=2, d_vocab=6), seed=0)
        >>> ql = QueryLens(model, SparseDict.from_sae(TopKSAE(8, 4, k=1, seed=0), 0))
        >>> ql = ql.fit(torch.randint(0, 6, (2, 3)))
        >>> tuple(ql.key_transport(torch.eye(8)[:2]).shape)
        (2, 8)
        """
        self._check_fitted()
        vectors = self._vectors(vectors)
        transition = self.transition if transition is None else transition
        if batched and self._use_operator("key", transition, vectors.shape[0]):
            return vectors @ self._operator("key", transition)
        steps = self._key_steps
        out = torch.zeros_like(vectors)
        for op, mask in self._batches():
            m = mask.to(vectors.dtype)[None, :, :, None]
            for c in range(0, vectors.shape[0], self.chunk_size):
                t = vectors[c : c + self.chunk_size, None, None, :] * m
                if transition == "full":
                    f = core.chain(self.model, steps, op, include_ln=self.include_ln,
                                   mediators=self.mediators)  # fmt: skip
                    g = core.pull_back(f, op.embed, t, batched)
                elif transition == "first_order":
                    g = core.first_order_backward(
                        self.model, steps, op, t, include_ln=self.include_ln,
                        mediators=self.mediators, batched=batched)  # fmt: skip
                else:
                    g = t
                out[c : c + self.chunk_size] += (g * m).sum((1, 2)).detach()
        return out / self.n_tokens_

    # --- readouts ----------------------------------------------------------------------------

    def value_readout(self, u: torch.Tensor) -> torch.Tensor:
        """Token scores ``(n, V)`` of transported value directions ``u`` (n, D) (see ``final_ln``).

        Examples
        --------
        >>> import torch
        >>> from rml_fast.models import TinyConfig, TinyTransformer
        >>> from rml_fast.interp.sae import TopKSAE
        >>> model = TinyTransformer(TinyConfig(n_layers=1, d_model=8, n_heads=2, d_vocab=6), seed=0)
        >>> ql = QueryLens(model, SparseDict.from_sae(TopKSAE(8, 4, k=1, seed=0), 0), final_ln="none")
        >>> bool(torch.allclose(ql.value_readout(torch.eye(8)), model.W_U))
        True
        """
        self._readout_arg(u, "u")
        W_U = self.model.unembed.detach()
        ln = self.model.ln_final
        if self.final_ln == "vector" and ln is not None:
            uc = u - u.mean(-1, keepdim=True)
            u = uc / (uc.pow(2).mean(-1, keepdim=True).sqrt().clamp_min(1e-12)) * ln.w.detach()
        return u @ W_U

    def _readout_arg(self, x: Any, name: str) -> None:
        check_tensor(x, name, ndim=2)
        if x.shape[1] != self.model.cfg.d_model:
            raise ValueError(
                f"{name} must have shape (n, D={self.model.cfg.d_model}), got {tuple(x.shape)}"
            )
        if x.dtype != self.model.W_E.dtype:
            raise TypeError(f"{name} must have the model's dtype {self.model.W_E.dtype}, got {x.dtype}")

    def key_readout(self, g: torch.Tensor) -> torch.Tensor:
        """Token scores ``(n, V)`` of pulled-back keys ``g`` (n, D) (see ``readout_key``).

        Examples
        --------
        >>> import torch
        >>> from rml_fast.models import TinyConfig, TinyTransformer
        >>> from rml_fast.interp.sae import TopKSAE
        >>> model = TinyTransformer(TinyConfig(n_layers=1, d_model=8, n_heads=2, d_vocab=6), seed=0)
        >>> ql = QueryLens(model, SparseDict.from_sae(TopKSAE(8, 4, k=1, seed=0), 0))
        >>> ql = ql.fit(torch.randint(0, 6, (2, 3)))
        >>> float(ql.key_readout(torch.randn(1, 8)).abs().max()) <= 1 + 1e-6  # cosines
        True
        """
        self._readout_arg(g, "g")
        E = self.model.W_E.detach()
        if self.readout_key == "embed_dot":
            return g @ E.T
        self._check_fitted()
        Ec = E - self.embed_center_
        Ec = Ec / Ec.norm(dim=1, keepdim=True).clamp_min(1e-12)
        return (g / g.norm(dim=1, keepdim=True).clamp_min(1e-12)) @ Ec.T

    def value_scores(
        self, features: Any = None, *, effect: str = "total", batched: bool = True
    ) -> torch.Tensor:
        """``s_VALUE`` of the given features, shape (n_features_selected, V).

        Parameters
        ----------
        features : sequence of int or None, default=None
            Feature indices (None: all).
        effect : {"total", "direct", "indirect"}, default="total"
            ``total`` uses the lens' transition, ``direct`` the identity (Logit Lens) and
            ``indirect`` reads the module-mediated part ``u_total - u_direct`` of the transported
            direction through the same readout. With ``final_ln`` "none" or "jacobian" the
            readout is linear and ``total == direct + indirect``; "vector" normalises each.
        batched : bool, default=True

        Examples
        --------
        >>> import torch
        >>> from rml_fast.models import TinyConfig, TinyTransformer
        >>> from rml_fast.interp.sae import TopKSAE
        >>> model = TinyTransformer(TinyConfig(n_layers=2, d_model=8, n_heads=2, d_vocab=6), seed=0)
        >>> ql = QueryLens(model, SparseDict.from_sae(TopKSAE(8, 4, k=1, seed=0), 1))
        >>> ql = ql.fit(torch.randint(0, 6, (2, 3)))  # last layer: no indirect effect
        >>> float(ql.value_scores(effect="indirect").abs().max()) < 1e-6
        True
        """
        idx = self._features(features)
        if effect not in _EFFECTS:
            raise ValueError(f"effect must be one of {_EFFECTS}, got {effect!r}")
        v = self.sdict.W_dec.detach().T[idx].to(self.model.W_E.dtype)
        if effect == "total":
            return self.value_readout(self.value_transport(v, batched=batched))
        direct = self.value_transport(v, transition="identity", batched=batched)
        if effect == "direct":
            return self.value_readout(direct)
        return self.value_readout(self.value_transport(v, batched=batched) - direct)

    def key_scores(
        self, features: Any = None, *, effect: str = "total", batched: bool = True
    ) -> torch.Tensor:
        """``s_KEY`` of the given features, shape (n_features_selected, V).

        Parameters
        ----------
        features : sequence of int or None, default=None
        effect : {"total", "direct", "indirect"}, default="total"
            ``indirect`` reads ``g_total - g_direct`` through the same readout.
        batched : bool, default=True

        Examples
        --------
        >>> import torch
        >>> from rml_fast.models import TinyConfig, TinyTransformer
        >>> from rml_fast.interp.sae import TopKSAE
        >>> model = TinyTransformer(TinyConfig(n_layers=2, d_model=8, n_heads=2, d_vocab=6), seed=0)
        >>> ql = QueryLens(model, SparseDict.from_sae(TopKSAE(8, 4, k=1, seed=0), 0))
        >>> tuple(ql.fit(torch.randint(0, 6, (2, 3))).key_scores([1, 2]).shape)
        (2, 6)
        """
        idx = self._features(features)
        if effect not in _EFFECTS:
            raise ValueError(f"effect must be one of {_EFFECTS}, got {effect!r}")
        kv = self.sdict.W_enc.detach().T[idx].to(self.model.W_E.dtype)
        if effect == "total":
            return self.key_readout(self.key_transport(kv, batched=batched))
        direct = self.key_transport(kv, transition="identity", batched=batched)
        if effect == "direct":
            return self.key_readout(direct)
        return self.key_readout(self.key_transport(kv, batched=batched) - direct)

    def top_tokens(self, scores: torch.Tensor, k: int | None = None) -> torch.Tensor:
        """Indices of the ``k`` highest-scoring tokens per row, shape (n, k), best first.

        Examples
        --------
        >>> import torch
        >>> from rml_fast.models import TinyConfig, TinyTransformer
        >>> from rml_fast.interp.sae import TopKSAE
        >>> model = TinyTransformer(TinyConfig(n_layers=1, d_model=8, n_heads=2, d_vocab=6), seed=0)
        >>> ql = QueryLens(model, SparseDict.from_sae(TopKSAE(8, 4, k=1, seed=0), 0))
        >>> ql.top_tokens(torch.tensor([[0.1, 3.0, -1.0, 2.0, 0.0, 0.5]]), k=2).tolist()
        [[1, 3]]
        """
        k = self.k if k is None else int(check_scalar(k, "k", Interval("int", 1, None)))
        if not isinstance(scores, torch.Tensor) or scores.ndim != 2:
            raise ValueError(f"scores must be a (n, V) tensor, got "
                             f"{getattr(scores, 'shape', type(scores).__name__)}")  # fmt: skip
        check_tensor(scores, "scores", ndim=2)
        return scores.topk(min(k, scores.shape[1]), dim=1).indices

    def channel_responses(self, vectors: torch.Tensor, layer: int) -> torch.Tensor:
        """Single-hop responses ``r = mean_tokens J^layer v`` of block ``layer``, shape (n, D).

        ``J^layer`` is the Jacobian of block ``layer``'s residual update (attention and MLP,
        LNs included) at its operating-point input; these are the responses of the Subspace
        Channel Hypothesis (paper section 6), fitted by :func:`fit_channel_maps`.

        Examples
        --------
        >>> import torch
        >>> from rml_fast.models import TinyConfig, TinyTransformer
        >>> from rml_fast.interp.sae import TopKSAE
        >>> model = TinyTransformer(TinyConfig(n_layers=2, d_model=8, n_heads=2, d_vocab=6), seed=0)
        >>> ql = QueryLens(model, SparseDict.from_sae(TopKSAE(8, 4, k=1, seed=0), 0))
        >>> tuple(ql.fit(torch.randint(0, 6, (2, 3))).channel_responses(torch.eye(8), 1).shape)
        (8, 8)
        """
        self._check_fitted()
        vectors = self._vectors(vectors)
        layer = int(check_scalar(layer, "layer", Interval("int", 0, self.model.cfg.n_layers - 1)))
        steps = [s for s in core.all_steps(self.model) if s[1] == layer]
        out = torch.zeros_like(vectors)
        for op, mask in self._batches():
            m = mask.to(vectors.dtype)[None, :, :, None]
            f = core.chain(self.model, steps, op, include_ln=self.include_ln, mediators=None)
            for c in range(0, vectors.shape[0], self.chunk_size):
                t = vectors[c : c + self.chunk_size, None, None, :] * m
                u = core.push_forward(f, op.inputs[steps[0]], t, True) - t
                out[c : c + self.chunk_size] += (u * m).sum((1, 2)).detach()
        return out / self.n_tokens_


# --- evaluation and subspace channels -------------------------------------------------------


def _as_index_set(x: Any, name: str) -> list[int]:
    arr = np.asarray(x.detach().cpu() if isinstance(x, torch.Tensor) else x)
    if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
        raise ValueError(f"{name} must be a 1-D sequence of token ids, got {arr.dtype} {arr.shape}")
    return [int(t) for t in arr]


def input_score(top: Any, activating_tokens: Any) -> float:
    """Input score ``I(T) = |{t in A : t in T}| / |A|`` (paper section 5.1).

    Parameters
    ----------
    top : sequence of int
        The readout's top tokens ``T``.
    activating_tokens : sequence of int
        ``A``: the most-activating token of each activating context (repeats count).

    Examples
    --------
    >>> input_score([1, 2, 3], [1, 1, 5, 2])
    0.75
    """
    t, a = set(_as_index_set(top, "top")), _as_index_set(activating_tokens, "activating_tokens")
    if not a:
        raise ValueError("activating_tokens must not be empty")
    return sum(x in t for x in a) / len(a)


def output_score(top: Any, steered_top: Any) -> float:
    """Output score ``O(T) = |S & T| / |S|`` with ``S`` the tokens promoted by steering.

    Examples
    --------
    >>> output_score([1, 2, 3, 4], [2, 4, 9, 10])
    0.5
    """
    t, s = set(_as_index_set(top, "top")), set(_as_index_set(steered_top, "steered_top"))
    if not s:
        raise ValueError("steered_top must not be empty")
    return len(s & t) / len(s)


def _column_basis(W: Any, r: int, name: str) -> torch.Tensor:
    if isinstance(W, tuple):
        if len(W) != 2:
            raise ValueError(f"{name} as a tuple must be (B, A), got {len(W)} items")
        B = W[0]
        if not isinstance(B, torch.Tensor) or B.ndim != 2:
            raise ValueError(f"{name}[0] (B) must be a (D, r) tensor")
        check_tensor(B, f"{name}[0]", ndim=2)
        q, _ = torch.linalg.qr(B.double())
        return q[:, :r]
    if not isinstance(W, torch.Tensor) or W.ndim != 2:
        raise ValueError(f"{name} must be a (D, D) tensor or a (B, A) tuple")
    check_tensor(W, name, ndim=2)
    u, _, _ = torch.linalg.svd(W.double(), full_matrices=False)
    return u[:, :r]


def subspace_overlap(W_i: Any, W_j: Any, r: int) -> float:
    """``OL(W_i, W_j) = ||Q_i^T Q_j||_F^2 / r``: mean squared cosine of the principal angles.

    ``Q`` is an orthonormal basis of the top-``r`` column space (left singular vectors of a
    (D, D) map, or of ``B`` for a low-rank map given as ``(B, A)``). 1 for equal subspaces, 0 for
    orthogonal ones.

    Examples
    --------
    >>> import torch
    >>> W = torch.diag(torch.tensor([3.0, 2.0, 0.0, 0.0]))
    >>> subspace_overlap(W, W, 2), subspace_overlap(W, torch.diag(torch.tensor([0., 0., 1., 1.])), 2)
    (1.0, 0.0)
    """
    r = int(check_scalar(r, "r", Interval("int", 1, None)))
    qi, qj = _column_basis(W_i, r, "W_i"), _column_basis(W_j, r, "W_j")
    if qi.shape[0] != qj.shape[0]:
        raise ValueError(f"W_i and W_j must act on the same width, got {qi.shape[0]} and "
                         f"{qj.shape[0]}")  # fmt: skip
    if min(qi.shape[1], qj.shape[1]) < r:
        raise ValueError(f"r={r} exceeds the rank available ({qi.shape[1]}, {qj.shape[1]})")
    return round(float((qi.T @ qj).pow(2).sum() / r), 12)


def fit_channel_maps(
    queries: dict[int, torch.Tensor],
    responses: dict[tuple[int, int], torch.Tensor],
    r: int,
) -> dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor]]:
    """Rank-``r`` maps ``W^{l->k} = B A`` with ``r_i ~ W v_i`` (Subspace Channel Hypothesis).

    Minimises ``sum_i ||r_i - B A v_i||^2`` exactly by reduced-rank regression (least squares,
    then projection on the top-``r`` principal directions of the fitted responses) instead of the
    paper's Adam fit of the same objective.

    Parameters
    ----------
    queries : dict layer -> Tensor of shape (N, D)
        Source value features ``v_i`` per source layer.
    responses : dict (l, k) -> Tensor of shape (N, D)
        Responses ``J^k v_i`` (:meth:`QueryLens.channel_responses`) to the queries of layer l.
    r : int
        Rank (the paper uses D / L).

    Returns
    -------
    maps : dict (l, k) -> (B of shape (D, r), A of shape (r, D))

    Examples
    --------
    >>> import torch
    >>> g = torch.Generator().manual_seed(0)
    >>> V = torch.randn(50, 6, generator=g); W = torch.randn(6, 2, generator=g) @ torch.randn(2, 6, generator=g)
    >>> B, A = fit_channel_maps({0: V}, {(0, 1): V @ W.T}, r=2)[(0, 1)]
    >>> bool(torch.allclose(B @ A, W.double(), atol=1e-8))
    True
    """
    r = int(check_scalar(r, "r", Interval("int", 1, None)))
    out = {}
    for key, R in responses.items():
        if not (isinstance(key, tuple) and len(key) == 2 and key[0] in queries):
            raise ValueError(f"responses key {key!r} must be (l, k) with l a key of queries")
        Q = queries[key[0]]
        if not isinstance(R, torch.Tensor) or R.shape != Q.shape or R.ndim != 2:
            raise ValueError(f"responses[{key}] must match queries[{key[0]}] in shape (N, D)")
        Qd, Rd = Q.double(), R.double()
        Wt = torch.linalg.lstsq(Qd, Rd, driver="gelsd").solution  # (D, D): R ~ Q Wt
        _, _, vh = torch.linalg.svd(Qd @ Wt, full_matrices=False)
        Vr = vh[:r].T  # (D, r) top principal directions of the fitted responses
        out[key] = (Vr, Vr.T @ Wt.T)
    return out
