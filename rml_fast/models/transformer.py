"""A tiny GPT-style transformer in plain torch with TransformerLens-style hook points.

Every activation that interpretability code reads or patches passes through an identity
:class:`HookPoint` with a stable dotted name (``blocks.1.attn.hook_result``). Temporary hooks
are attached only through :meth:`TinyTransformer.hooks`, a context manager that removes them
in ``finally``; :meth:`TinyTransformer.run_with_cache` returns ``(logits, cache)`` and keeps
no global state.

Each attention head reads its own copy of the residual stream for its query, key and value
inputs (``blocks.{l}.hook_q_input`` etc., TransformerLens' ``use_split_qkv_input``), so that
edge-level circuit interventions can patch the input of one head without touching another.
Layer norm is applied per head copy (it is the same function of the same input in a clean run).

Hook points (shapes for a batch ``B``, positions ``P``, heads ``H``, width ``D``):

==============================================  ==========================
``hook_embed``, ``hook_pos_embed``              ``[B, P, D]``
``blocks.{l}.hook_resid_pre/mid/post``          ``[B, P, D]``
``blocks.{l}.hook_q_input/k_input/v_input``     ``[B, P, H, D]``
``blocks.{l}.attn.hook_q/k/v/z``                ``[B, P, H, dh]``
``blocks.{l}.attn.hook_attn_scores/pattern``    ``[B, H, P, P]``
``blocks.{l}.attn.hook_result``                 ``[B, P, H, D]`` (``z_h W_O^h``, no ``b_O``)
``blocks.{l}.hook_attn_out``                    ``[B, P, D]`` (sum of results + ``b_O``)
``blocks.{l}.hook_mlp_in``                      ``[B, P, D]``
``blocks.{l}.mlp.hook_pre/hook_post``           ``[B, P, d_mlp]``
``blocks.{l}.hook_mlp_out``                     ``[B, P, D]``
``ln_final.hook_normalized``                    ``[B, P, D]``
==============================================  ==========================
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import nn

from rml_fast._validation import Interval, check_scalar

__all__ = [
    "HookPoint",
    "TinyConfig",
    "TinyTransformer",
    "activation",
    "attention_heads",
    "layer_norm",
]

HookFn = Callable[[torch.Tensor, "HookPoint"], Any]

_ACTS = ("gelu", "relu")


@dataclass(frozen=True)
class TinyConfig:
    """Shape of a :class:`TinyTransformer`.

    Parameters
    ----------
    n_layers : int, default=2
    d_model : int, default=64
    n_heads : int, default=4
        Must divide ``d_model``.
    d_mlp : int or None, default=256
        Hidden width of the MLPs; None builds an attention-only model.
    n_ctx : int, default=64
        Maximum number of positions.
    d_vocab : int, default=64
    act : {"gelu", "relu"}, default="gelu"
    ln : bool, default=True
        Pre-layer-norm blocks and a final layer norm; False uses none.
    tie_unembed : bool, default=False
        Use ``W_E.T`` as the unembedding.
    """

    n_layers: int = 2
    d_model: int = 64
    n_heads: int = 4
    d_mlp: int | None = 256
    n_ctx: int = 64
    d_vocab: int = 64
    act: str = "gelu"
    ln: bool = True
    tie_unembed: bool = False

    def __post_init__(self) -> None:
        for name in ("n_layers", "d_model", "n_heads", "n_ctx", "d_vocab"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"TinyConfig.{name} must be a positive int, got {v!r}")
        if self.d_mlp is not None and (not isinstance(self.d_mlp, int) or self.d_mlp < 1):
            raise ValueError(f"TinyConfig.d_mlp must be None or a positive int, got {self.d_mlp!r}")
        if self.d_model % self.n_heads:
            raise ValueError(
                f"TinyConfig.n_heads={self.n_heads} must divide d_model={self.d_model}"
            )
        if self.act not in _ACTS:
            raise ValueError(f"TinyConfig.act must be one of {_ACTS}, got {self.act!r}")

    @property
    def d_head(self) -> int:
        """Width of one attention head, ``d_model // n_heads``."""
        return self.d_model // self.n_heads

    @property
    def attn_only(self) -> bool:
        """Whether the model has no MLPs (``d_mlp is None``)."""
        return self.d_mlp is None

    def to_dict(self) -> dict[str, Any]:
        """The fields as a plain dict (``TinyConfig(**cfg.to_dict()) == cfg``)."""
        return asdict(self)


class HookPoint(nn.Module):
    """Identity module marking an activation; forward hooks may read or replace it."""

    def __init__(self) -> None:
        super().__init__()
        self.name = ""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Identity: returns ``x`` unchanged (forward hooks on this module may replace it)."""
        return x


def _check_act(t: Any, name: str, min_ndim: int = 1) -> torch.Tensor:
    """An activation tensor: real floating, holding values (not ``meta``), ``ndim >=
    min_ndim``. Values are not checked (non-finite activations propagate)."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.device.type == "meta":
        raise ValueError(f"{name} must hold values, got a tensor on the 'meta' device")
    if not t.is_floating_point():
        raise TypeError(f"{name} must have a real floating-point dtype, got {t.dtype}")
    if t.ndim < min_ndim:
        raise ValueError(f"{name} must have at least {min_ndim} dimensions, got shape {tuple(t.shape)}")
    return t


def layer_norm(x: torch.Tensor, w: torch.Tensor | None, b: torch.Tensor | None) -> torch.Tensor:
    """``(x - mean) / sqrt(var + 1e-5) * w + b`` over the last axis (identity if ``w`` is None).

    ``x`` has shape ``[..., D]``; ``w`` and ``b`` shape ``(D,)`` (or None).

    Examples
    --------
    >>> x = torch.tensor([[1.0, 3.0]])
    >>> layer_norm(x, torch.ones(2), torch.zeros(2)).round(decimals=3).tolist()
    [[-1.0, 1.0]]
    """
    _check_act(x, "x")
    if w is None:
        return x
    d = x.shape[-1]
    for t_, name in ((w, "w"), (b, "b")):
        if t_ is None and name == "b":
            continue
        t = _check_act(t_, name)
        if t.shape != (d,):
            raise ValueError(f"{name} must have shape ({d},) like x's last axis, got {tuple(t.shape)}")
        if t.device != x.device:
            raise ValueError(f"{name} must be on x's device {x.device}, got {t.device}")
    return torch.nn.functional.layer_norm(x, (d,), w, b, 1e-5)


class _LN(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.ones(d))
        self.b = nn.Parameter(torch.zeros(d))
        self.hook_normalized = HookPoint()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.hook_normalized(layer_norm(x, self.w, self.b))


class _Attention(nn.Module):
    def __init__(self, cfg: TinyConfig) -> None:
        super().__init__()
        h, d, dh = cfg.n_heads, cfg.d_model, cfg.d_head
        self.W_Q = nn.Parameter(torch.randn(h, d, dh) / math.sqrt(d))
        self.W_K = nn.Parameter(torch.randn(h, d, dh) / math.sqrt(d))
        self.W_V = nn.Parameter(torch.randn(h, d, dh) / math.sqrt(d))
        self.W_O = nn.Parameter(torch.randn(h, dh, d) / math.sqrt(d))
        self.b_Q = nn.Parameter(torch.zeros(h, dh))
        self.b_K = nn.Parameter(torch.zeros(h, dh))
        self.b_V = nn.Parameter(torch.zeros(h, dh))
        self.b_O = nn.Parameter(torch.zeros(d))
        for name in ("q", "k", "v", "z", "attn_scores", "pattern", "result"):
            setattr(self, f"hook_{name}", HookPoint())


class _MLP(nn.Module):
    def __init__(self, cfg: TinyConfig) -> None:
        super().__init__()
        d_mlp = int(cfg.d_mlp or 0)  # constructed only for models with MLPs
        self.W_in = nn.Parameter(torch.randn(cfg.d_model, d_mlp) / math.sqrt(cfg.d_model))
        self.b_in = nn.Parameter(torch.zeros(d_mlp))
        self.W_out = nn.Parameter(torch.randn(d_mlp, cfg.d_model) / math.sqrt(d_mlp))
        self.b_out = nn.Parameter(torch.zeros(cfg.d_model))
        self.act = cfg.act
        self.hook_pre = HookPoint()
        self.hook_post = HookPoint()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pre = self.hook_pre(x @ self.W_in + self.b_in)
        post = self.hook_post(activation(pre, self.act))
        return post @ self.W_out + self.b_out


def activation(x: torch.Tensor, act: str) -> torch.Tensor:
    """The MLP non-linearity named ``act`` (exact erf GELU or ReLU), elementwise.

    A non-contiguous ``x`` is made contiguous first, so that a strided view gives the same
    values as a contiguous copy (torch's vectorised and scalar GELU differ in the last bits).

    Examples
    --------
    >>> activation(torch.tensor([-1.0, 2.0]), "relu").tolist()
    [0.0, 2.0]
    """
    _check_act(x, "x", 0)
    if act not in _ACTS:
        raise ValueError(f"act must be one of {_ACTS}, got {act!r}")
    x = x.contiguous()
    return torch.nn.functional.gelu(x) if act == "gelu" else torch.relu(x)


def _project(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``x @ W^h + b^h`` per head; ``x`` is ``[..., P, H, D]`` (split) or ``[..., P, D]`` (shared)."""
    if x.ndim == w.ndim:  # shared input: [..., P, D] x [H, D, e]
        return torch.einsum("...pd,hde->...phe", x, w) + b
    return torch.einsum("...phd,hde->...phe", x, w) + b


def attention_heads(
    q_in: torch.Tensor,
    k_in: torch.Tensor,
    v_in: torch.Tensor,
    attn: _Attention,
    ln: _LN | None,
    hooked: bool = True,
) -> torch.Tensor:
    """Per-head attention on split inputs; returns results ``[..., P, H, D]`` (no ``b_O``).

    ``q_in, k_in, v_in`` have shape ``[..., P, H, D]`` (head ``h`` reads ``x[..., h, :]``) or
    ``[..., P, D]`` (all heads read the same input). The functional core shared by the model's
    forward and the batched circuit evaluator.
    """
    if not isinstance(attn, _Attention):
        raise TypeError(f"attn must be a block's attention module, got {type(attn).__name__}")
    if ln is not None and not isinstance(ln, _LN):
        raise TypeError(f"ln must be a block's layer norm or None, got {type(ln).__name__}")
    H, D = attn.W_Q.shape[0], attn.W_Q.shape[1]
    lead = None
    for t, name in ((q_in, "q_in"), (k_in, "k_in"), (v_in, "v_in")):
        _check_act(t, name, 2)
        split = t.ndim != 3  # [..., P, H, D] unless 3-D ([B, P, D], shared by the heads)
        if t.shape[-1] != D or (split and (t.ndim < 3 or t.shape[-2] != H)):
            raise ValueError(
                f"{name} must have shape [..., P, {D}] (3-D, shared) or [..., P, {H}, {D}] "
                f"(split per head), got {tuple(t.shape)}"
            )
        bp = tuple(t.shape[:-2] if split else t.shape[:-1])  # (..., P)
        if lead is None:
            lead = bp
        elif bp != lead:
            raise ValueError(
                f"{name} must have the leading shape (..., P) = {lead} of q_in, got {bp} "
                f"(shape {tuple(t.shape)})"
            )
        if t.device != attn.W_Q.device:
            raise ValueError(f"{name} must be on the model's device {attn.W_Q.device}, got {t.device}")
    w = ln.w if ln is not None else None
    b = ln.b if ln is not None else None
    hp = (lambda name: getattr(attn, f"hook_{name}")) if hooked else (lambda name: _identity)
    xq = layer_norm(q_in, w, b)
    xk = xq if k_in is q_in else layer_norm(k_in, w, b)
    xv = xq if v_in is q_in else xk if v_in is k_in else layer_norm(v_in, w, b)
    q = hp("q")(_project(xq, attn.W_Q, attn.b_Q))
    k = hp("k")(_project(xk, attn.W_K, attn.b_K))
    v = hp("v")(_project(xv, attn.W_V, attn.b_V))
    scores = torch.einsum("...qhe,...khe->...hqk", q, k) / math.sqrt(q.shape[-1])
    n_pos = q.shape[-3]
    causal = torch.ones(n_pos, n_pos, dtype=torch.bool, device=q.device).tril()
    scores = hp("attn_scores")(scores.masked_fill(~causal, float("-inf")))
    pattern = hp("pattern")(torch.softmax(scores, dim=-1))
    z = hp("z")(torch.einsum("...hqk,...khe->...qhe", pattern, v))
    return hp("result")(torch.einsum("...phe,hed->...phd", z, attn.W_O))


def _identity(x: torch.Tensor) -> torch.Tensor:
    return x


class _Block(nn.Module):
    hook_resid_pre: HookPoint
    hook_q_input: HookPoint
    hook_k_input: HookPoint
    hook_v_input: HookPoint
    hook_attn_out: HookPoint
    hook_resid_mid: HookPoint
    hook_mlp_in: HookPoint
    hook_mlp_out: HookPoint
    hook_resid_post: HookPoint

    def __init__(self, cfg: TinyConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.ln1 = _LN(cfg.d_model) if cfg.ln else None
        self.attn = _Attention(cfg)
        self.ln2 = _LN(cfg.d_model) if (cfg.ln and not cfg.attn_only) else None
        self.mlp = _MLP(cfg) if not cfg.attn_only else None
        for name in (
            "resid_pre", "q_input", "k_input", "v_input", "attn_out", "resid_mid",
            "mlp_in", "mlp_out", "resid_post",
        ):  # fmt: skip
            setattr(self, f"hook_{name}", HookPoint())

    def forward(self, resid: torch.Tensor) -> torch.Tensor:
        resid = self.hook_resid_pre(resid)
        split_hooks = [self.hook_q_input, self.hook_k_input, self.hook_v_input]
        if any(h._forward_hooks for h in split_hooks):
            # someone reads or patches a head's own input: materialise the per-head copies
            # (a separate expand per input, so that each is its own autograd node)
            shape = (*resid.shape[:-1], self.cfg.n_heads, resid.shape[-1])
            q_in, k_in, v_in = (h(resid.unsqueeze(-2).expand(shape)) for h in split_hooks)
        else:  # fast path, same values: every head reads the shared residual
            q_in = k_in = v_in = resid
        result = attention_heads(q_in, k_in, v_in, self.attn, self.ln1)
        attn_out = self.hook_attn_out(result.sum(-2) + self.attn.b_O)
        resid = self.hook_resid_mid(resid + attn_out)
        if self.mlp is not None:
            x = self.hook_mlp_in(resid.view_as(resid))  # own autograd node, as the q/k/v inputs
            x = layer_norm(x, self.ln2.w, self.ln2.b) if self.ln2 is not None else x
            resid = resid + self.hook_mlp_out(self.mlp(x))
        return self.hook_resid_post(resid)


class TinyTransformer(nn.Module):
    """A GPT-style decoder (pre-LN, learned positions, causal attention) with hook points.

    Parameters
    ----------
    cfg : TinyConfig
    seed : int or None, default=None
        Seeds the weight initialisation (a local generator; global RNG state is untouched).

    Examples
    --------
    >>> import torch
    >>> from rml_fast.models import TinyConfig, TinyTransformer
    >>> model = TinyTransformer(TinyConfig(n_layers=1, d_model=16, n_heads=2, d_vocab=10), seed=0)
    >>> logits, cache = model.run_with_cache(torch.tensor([[1, 2, 3]]))
    >>> tuple(logits.shape), tuple(cache["blocks.0.attn.hook_pattern"].shape)
    ((1, 3, 10), (1, 2, 3, 3))
    """

    def __init__(self, cfg: TinyConfig, *, seed: int | None = None) -> None:
        super().__init__()
        if not isinstance(cfg, TinyConfig):
            raise TypeError(f"cfg must be a TinyConfig, got {type(cfg).__name__}")
        if seed is not None:
            seed = int(check_scalar(seed, "seed", Interval("int", 0, 2**64 - 1)))
        self.cfg = cfg
        fork = torch.random.fork_rng() if seed is not None else contextlib.nullcontext()
        with fork:
            if seed is not None:
                torch.manual_seed(seed)
            d = cfg.d_model
            self.W_E = nn.Parameter(torch.randn(cfg.d_vocab, d) * 0.1)
            self.W_pos = nn.Parameter(torch.randn(cfg.n_ctx, d) * 0.1)
            self.blocks = nn.ModuleList(_Block(cfg) for _ in range(cfg.n_layers))
            self.ln_final = _LN(d) if cfg.ln else None
            self.W_U = (
                None if cfg.tie_unembed else nn.Parameter(torch.randn(d, cfg.d_vocab) / d**0.5)
            )
            self.b_U = nn.Parameter(torch.zeros(cfg.d_vocab))
        self.hook_embed = HookPoint()
        self.hook_pos_embed = HookPoint()
        self.hook_points: dict[str, HookPoint] = {}
        for name, mod in self.named_modules():
            if isinstance(mod, HookPoint):
                mod.name = name
                self.hook_points[name] = mod

    # --- forward -------------------------------------------------------------------------

    @property
    def unembed(self) -> torch.Tensor:
        """The unembedding matrix ``[D, V]``."""
        return self.W_E.T if self.W_U is None else self.W_U

    def _check_tokens(self, tokens: Any) -> torch.Tensor:
        if not isinstance(tokens, torch.Tensor):
            raise TypeError(f"tokens must be a torch.Tensor, got {type(tokens).__name__}")
        if tokens.device.type == "meta":
            raise ValueError("tokens must hold values, got a tensor on the 'meta' device")
        if tokens.dtype not in (torch.int64, torch.int32) or tokens.ndim != 2:
            raise ValueError(
                f"tokens must be an integer tensor of shape (batch, pos), got dtype "
                f"{tokens.dtype} and shape {tuple(tokens.shape)}"
            )
        if tokens.shape[1] > self.cfg.n_ctx or tokens.shape[1] < 1:
            raise ValueError(f"tokens has {tokens.shape[1]} positions; n_ctx={self.cfg.n_ctx}")
        if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= self.cfg.d_vocab):
            raise ValueError(f"tokens must lie in [0, d_vocab={self.cfg.d_vocab})")
        return tokens.long()

    def forward(
        self,
        tokens: torch.Tensor,
        *,
        hooks: Sequence[tuple[str, HookFn]] | None = None,
    ) -> torch.Tensor:
        """Logits ``[B, P, V]`` for integer ``tokens`` of shape ``(B, P)``.

        ``hooks`` is a list of ``(hook_name, fn)`` attached for this call only (see :meth:`hooks`).
        """
        tokens = self._check_tokens(tokens)
        with self.hooks(hooks or ()):
            return self._forward(tokens)

    def _forward(self, tokens: torch.Tensor) -> torch.Tensor:
        n_pos = tokens.shape[1]
        resid = self.hook_embed(self.W_E[tokens]) + self.hook_pos_embed(self.W_pos[:n_pos])
        for block in self.blocks:
            resid = block(resid)
        if self.ln_final is not None:
            resid = self.ln_final(resid)
        return resid @ self.unembed + self.b_U

    # --- hooks ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def hooks(self, fwd_hooks: Sequence[tuple[str, HookFn]] = ()) -> Iterator[TinyTransformer]:
        """Attach forward hooks for the duration of a ``with`` block.

        Each ``fn(activation, hook)`` may return a replacement tensor (or None to keep it).
        All hooks are removed in ``finally``, also when the block raises.

        Raises
        ------
        ValueError
            If a name is not a hook point of this model.
        """
        handles = []
        try:
            for name, fn in fwd_hooks:
                if name not in self.hook_points:
                    raise ValueError(f"unknown hook point {name!r}")
                hp = self.hook_points[name]
                handles.append(hp.register_forward_hook(_wrap(fn, hp)))
            yield self
        finally:
            for h in handles:
                h.remove()

    def run_with_cache(
        self,
        tokens: torch.Tensor,
        *,
        names: Sequence[str] | Callable[[str], bool] | None = None,
        hooks: Sequence[tuple[str, HookFn]] = (),
        detach: bool = True,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Run the model and return ``(logits, cache)`` of hook activations.

        Parameters
        ----------
        tokens : LongTensor of shape (B, P)
        names : sequence of str, callable or None, default=None
            Which hook points to cache (None: all).
        hooks : sequence of (name, fn), default=()
            Extra hooks applied during the run (before caching at the same point).
        detach : bool, default=True
            Detach cached tensors from the autograd graph.
        """
        if names is None:
            keep = list(self.hook_points)
        elif callable(names):
            keep = [n for n in self.hook_points if names(n)]
        else:
            keep = list(names)
        cache: dict[str, torch.Tensor] = {}

        def save(x: torch.Tensor, hook: HookPoint) -> None:
            cache[hook.name] = x.detach() if detach else x

        logits = self(tokens, hooks=[*hooks, *[(n, save) for n in keep]])
        return logits, cache


def _wrap(fn: HookFn, hp: HookPoint) -> Callable[..., Any]:
    def hook(module: nn.Module, args: tuple[Any, ...], output: torch.Tensor) -> Any:
        return fn(output, hp)

    return hook
