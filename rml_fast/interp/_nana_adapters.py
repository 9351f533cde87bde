"""Model adapters for NaNA: one per family, exposing MLP weights and a hooked forward.

Families: the zoo's :class:`~rml_fast.models.transformer.TinyTransformer`, TransformerLens
``HookedTransformer``, Hugging Face GPT-2 (``GPT2Model`` / ``GPT2LMHeadModel``) and BERT-style
encoders (``BertModel``, anything with a ``.bert``, a sentence-transformers model whose first
module has an ``auto_model``). Each adapter reads the model's own parameters and hooks its own
modules; nothing of the peers' code is copied.

Row-vector convention everywhere: an MLP is ``h = act(x_in W_in + b_in)``, ``y = h W_out + b_out``
with ``W_in`` of shape (D, F) and ``W_out`` of shape (F, D).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

Replace = Callable[[torch.Tensor], torch.Tensor]


@dataclass
class MLPWeights:
    """The raw (unfolded) weights of one MLP and the layer norm that feeds it (None if none)."""

    W_in: torch.Tensor  # (D, F)
    b_in: torch.Tensor  # (F,)
    W_out: torch.Tensor  # (F, D)
    b_out: torch.Tensor  # (D,)
    ln_w: torch.Tensor | None  # (D,) pre-LN gain (None: no pre-LN)
    ln_b: torch.Tensor | None
    ln_eps: float
    act: Callable[[torch.Tensor], torch.Tensor]


@dataclass
class RunRecord:
    """What one hooked forward recorded.

    ``final`` (B, P, D): the residual after the final norm (what the unembedding reads).
    ``ln_in[name]`` (B, P, D): inputs of the norms named by :meth:`Adapter.chain`.
    ``mlp_x[l]`` (B, P, D): the input of MLP ``l`` *before* its pre-LN (None-LN: the input).
    ``post[l]`` (B, P, F), ``mlp_out[l]`` (B, P, D).
    """

    final: torch.Tensor = field(default_factory=lambda: torch.empty(0))
    ln_in: dict[str, torch.Tensor] = field(default_factory=dict)
    mlp_x: dict[int, torch.Tensor] = field(default_factory=dict)
    post: dict[int, torch.Tensor] = field(default_factory=dict)
    mlp_out: dict[int, torch.Tensor] = field(default_factory=dict)


class Adapter:
    """Common interface; subclasses fill in the family specifics."""

    family = "?"
    post_ln = False  # BERT: LN after each residual addition

    def __init__(self, model: Any) -> None:
        self.model = model

    # --- static weights -----------------------------------------------------------------
    n_layers: int
    d_model: int
    d_mlp: int

    def mlp(self, layer: int) -> MLPWeights:
        raise NotImplementedError

    def embed(self) -> torch.Tensor:
        """Token embedding (V, D)."""
        raise NotImplementedError

    def unembed(self) -> torch.Tensor:
        """Unembedding (D, V)."""
        raise NotImplementedError

    def norms(self) -> dict[str, tuple[torch.Tensor, float]]:
        """Every norm on the direct path: name -> (gain (D,), eps)."""
        raise NotImplementedError

    def chain(self, layer: int) -> list[str]:
        """Names of the norms a write of MLP ``layer`` passes through, in order, to the readout."""
        raise NotImplementedError

    # --- hooked forward -----------------------------------------------------------------
    @contextlib.contextmanager
    def _torch_hooks(self, hooks: list[tuple[torch.nn.Module, str, Callable[..., Any]]]) -> Iterator[None]:
        handles = []
        try:
            for mod, kind, fn in hooks:
                if kind == "pre":
                    handles.append(mod.register_forward_pre_hook(fn))
                else:
                    handles.append(mod.register_forward_hook(fn))
            yield
        finally:
            for h in handles:
                h.remove()

    def run(
        self, tokens: torch.Tensor, layers: list[int], replace: dict[int, Replace] | None = None
    ) -> RunRecord:
        """Forward ``tokens`` (B, P), recording the tensors of ``layers``; ``replace[l]`` maps the
        clean MLP-``l`` output (B, P, D) to the one used downstream."""
        raise NotImplementedError


def _param(x: Any) -> torch.Tensor:
    return x.detach()


# ---------------------------------------------------------------------------------------- zoo


class ZooAdapter(Adapter):
    family = "zoo"

    def __init__(self, model: Any) -> None:
        super().__init__(model)
        cfg = model.cfg
        if cfg.attn_only:
            raise ValueError(
                "model has no MLP weights (an attention-only TinyTransformer, d_mlp=None); "
                "NaNA decomposes MLP matrices"
            )
        self.n_layers, self.d_model, self.d_mlp = cfg.n_layers, cfg.d_model, int(cfg.d_mlp)
        self.ln = cfg.ln

    def mlp(self, layer: int) -> MLPWeights:
        from rml_fast.models.transformer import activation

        blk = self.model.blocks[layer]
        m, act = blk.mlp, blk.mlp.act
        ln = blk.ln2
        return MLPWeights(
            _param(m.W_in), _param(m.b_in), _param(m.W_out), _param(m.b_out),
            None if ln is None else _param(ln.w), None if ln is None else _param(ln.b), 1e-5,
            lambda x: activation(x, act),
        )  # fmt: skip

    def embed(self) -> torch.Tensor:
        return _param(self.model.W_E)

    def unembed(self) -> torch.Tensor:
        return _param(self.model.unembed)

    def norms(self) -> dict[str, tuple[torch.Tensor, float]]:
        lnf = self.model.ln_final
        return {} if lnf is None else {"final": (_param(lnf.w), 1e-5)}

    def chain(self, layer: int) -> list[str]:
        return ["final"] if self.model.ln_final is not None else []

    def run(
        self, tokens: torch.Tensor, layers: list[int], replace: dict[int, Replace] | None = None
    ) -> RunRecord:
        rec = RunRecord()
        names, hooks = [], []
        for layer in layers:
            names += [f"blocks.{layer}.mlp.hook_post", f"blocks.{layer}.hook_mlp_in"]
        last = f"blocks.{self.n_layers - 1}.hook_resid_post"
        names.append(last)
        for layer, fn in (replace or {}).items():
            hooks.append((f"blocks.{layer}.hook_mlp_out", lambda x, hook, fn=fn: fn(x)))
            names.append(f"blocks.{layer}.hook_mlp_out")
        clean_out: dict[int, torch.Tensor] = {}

        def save_clean(x: torch.Tensor, hook: Any) -> None:
            clean_out[int(hook.name.split(".")[1])] = x.detach()

        pre_hooks = [(f"blocks.{layer}.hook_mlp_out", save_clean) for layer in layers]
        with torch.no_grad():
            _, cache = self.model.run_with_cache(tokens, names=names, hooks=[*pre_hooks, *hooks])
        for layer in layers:
            rec.post[layer] = cache[f"blocks.{layer}.mlp.hook_post"]
            rec.mlp_x[layer] = cache[f"blocks.{layer}.hook_mlp_in"]
            rec.mlp_out[layer] = clean_out[layer]
        resid = cache[last]
        if self.model.ln_final is not None:
            rec.ln_in["final"] = resid
            w, b = self.model.ln_final.w.detach(), self.model.ln_final.b.detach()
            rec.final = torch.nn.functional.layer_norm(resid, (resid.shape[-1],), w, b, 1e-5)
        else:
            rec.final = resid
        return rec


# ------------------------------------------------------------------------------ TransformerLens


class TLAdapter(Adapter):
    family = "transformer_lens"

    def __init__(self, model: Any) -> None:
        super().__init__(model)
        cfg = model.cfg
        if getattr(cfg, "attn_only", False) or not hasattr(model.blocks[0], "mlp"):
            raise ValueError("model has no MLP weights (an attention-only HookedTransformer)")
        if getattr(cfg, "gated_mlp", False):
            raise ValueError("gated MLPs (W_gate) are not supported by NaNA's W_in/W_out DEUs")
        if cfg.normalization_type not in ("LN", "LNPre", None):
            raise ValueError(f"normalization_type {cfg.normalization_type!r} is not supported")
        if str(cfg.act_fn).startswith("solu"):
            raise ValueError("SoLU MLPs (a layer norm inside the MLP) are not supported")
        self.n_layers, self.d_model, self.d_mlp = cfg.n_layers, cfg.d_model, int(cfg.d_mlp)
        self.eps = float(cfg.eps)

    def _ln(self, mod: Any) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        if self.model.cfg.normalization_type is None:
            return None, None
        w = getattr(mod, "w", None)
        if w is None:  # LNPre (fold_ln): centre and scale only
            ones = torch.ones(self.d_model, dtype=self.model.W_E.dtype)
            return ones, torch.zeros_like(ones)
        return _param(w), _param(mod.b)

    def mlp(self, layer: int) -> MLPWeights:
        blk = self.model.blocks[layer]
        m = blk.mlp
        w, b = self._ln(blk.ln2)
        return MLPWeights(
            _param(m.W_in), _param(m.b_in), _param(m.W_out), _param(m.b_out), w, b, self.eps,
            m.act_fn,
        )  # fmt: skip

    def embed(self) -> torch.Tensor:
        return _param(self.model.W_E)

    def unembed(self) -> torch.Tensor:
        return _param(self.model.W_U)

    def norms(self) -> dict[str, tuple[torch.Tensor, float]]:
        w, _ = self._ln(self.model.ln_final)
        return {} if w is None else {"final": (w, self.eps)}

    def chain(self, layer: int) -> list[str]:
        return [] if self.model.cfg.normalization_type is None else ["final"]

    def run(
        self, tokens: torch.Tensor, layers: list[int], replace: dict[int, Replace] | None = None
    ) -> RunRecord:
        rec = RunRecord()
        store: dict[str, torch.Tensor] = {}

        def save(x: torch.Tensor, hook: Any) -> None:
            store[hook.name] = x.detach()

        hooks: list[tuple[str, Any]] = []
        for layer in layers:
            for n in ("mlp.hook_post", "hook_resid_mid", "hook_mlp_out"):
                hooks.append((f"blocks.{layer}.{n}", save))
        last = f"blocks.{self.n_layers - 1}.hook_resid_post"
        hooks.append((last, save))
        for layer, fn in (replace or {}).items():
            hooks.append((f"blocks.{layer}.hook_mlp_out", lambda x, hook, fn=fn: fn(x)))
        lnf_out: list[torch.Tensor] = []
        with torch.no_grad(), self._torch_hooks(
            [(self.model.unembed, "pre", lambda mod, args: lnf_out.append(args[0].detach()))]
        ):
            self.model.run_with_hooks(tokens, fwd_hooks=hooks)
        for layer in layers:
            rec.post[layer] = store[f"blocks.{layer}.mlp.hook_post"]
            rec.mlp_x[layer] = store[f"blocks.{layer}.hook_resid_mid"]
            rec.mlp_out[layer] = store[f"blocks.{layer}.hook_mlp_out"]
        if self.chain(0):
            rec.ln_in["final"] = store[last]
        rec.final = lnf_out[0]
        return rec


# ------------------------------------------------------------------------- Hugging Face GPT-2


class GPT2Adapter(Adapter):
    family = "hf-gpt2"

    def __init__(self, model: Any) -> None:
        super().__init__(model)
        self.tr = model.transformer if hasattr(model, "transformer") else model
        cfg = self.tr.config
        self.n_layers, self.d_model = cfg.n_layer, cfg.n_embd
        self.d_mlp = int(self.tr.h[0].mlp.c_fc.weight.shape[1])
        self.eps = float(cfg.layer_norm_epsilon)

    def mlp(self, layer: int) -> MLPWeights:
        blk = self.tr.h[layer]
        m = blk.mlp  # Conv1D: y = x @ weight + bias, weight (in, out)
        return MLPWeights(
            _param(m.c_fc.weight), _param(m.c_fc.bias), _param(m.c_proj.weight),
            _param(m.c_proj.bias), _param(blk.ln_2.weight), _param(blk.ln_2.bias), self.eps, m.act,
        )  # fmt: skip

    def embed(self) -> torch.Tensor:
        return _param(self.tr.wte.weight)

    def unembed(self) -> torch.Tensor:
        head = getattr(self.model, "lm_head", None)
        return _param(head.weight if head is not None else self.tr.wte.weight).T

    def norms(self) -> dict[str, tuple[torch.Tensor, float]]:
        return {"final": (_param(self.tr.ln_f.weight), self.eps)}

    def chain(self, layer: int) -> list[str]:
        return ["final"]

    def run(
        self, tokens: torch.Tensor, layers: list[int], replace: dict[int, Replace] | None = None
    ) -> RunRecord:
        rec = RunRecord()
        hooks: list[tuple[torch.nn.Module, str, Any]] = []
        for layer in layers:
            m = self.tr.h[layer].mlp
            hooks.append((m.c_proj, "pre", lambda mod, a, lay=layer: rec.post.__setitem__(lay, a[0].detach())))
            hooks.append((self.tr.h[layer].ln_2, "pre",
                          lambda mod, a, lay=layer: rec.mlp_x.__setitem__(lay, a[0].detach())))  # fmt: skip
            hooks.append((m, "fwd", lambda mod, a, o, lay=layer: rec.mlp_out.__setitem__(lay, o.detach())))
        for layer, fn in (replace or {}).items():
            hooks.append((self.tr.h[layer].mlp, "fwd", lambda mod, a, o, fn=fn: fn(o)))
        hooks.append((self.tr.ln_f, "pre", lambda mod, a: rec.ln_in.__setitem__("final", a[0].detach())))
        hooks.append((self.tr.ln_f, "fwd", lambda mod, a, o: setattr(rec, "final", o.detach())))
        with torch.no_grad(), self._torch_hooks(hooks):
            self.tr(input_ids=tokens)
        return rec


# ----------------------------------------------------------------------------- Hugging Face BERT


class BertAdapter(Adapter):
    family = "hf-bert"
    post_ln = True

    def __init__(self, model: Any) -> None:
        super().__init__(model)
        inner = getattr(model, "bert", None) or getattr(model, "roberta", None)
        self.bert = inner if inner is not None else model
        cfg = self.bert.config
        self.n_layers, self.d_model = cfg.num_hidden_layers, cfg.hidden_size
        self.d_mlp = int(cfg.intermediate_size)
        self.eps = float(cfg.layer_norm_eps)

    def mlp(self, layer: int) -> MLPWeights:
        lay = self.bert.encoder.layer[layer]
        fc, proj = lay.intermediate.dense, lay.output.dense  # nn.Linear: weight (out, in)
        return MLPWeights(
            _param(fc.weight).T, _param(fc.bias), _param(proj.weight).T, _param(proj.bias),
            None, None, self.eps, lay.intermediate.intermediate_act_fn,
        )  # fmt: skip

    def embed(self) -> torch.Tensor:
        return _param(self.bert.embeddings.word_embeddings.weight)

    def unembed(self) -> torch.Tensor:  # tied word embeddings (no MLM transform head)
        return self.embed().T

    def _ln_mods(self) -> dict[str, torch.nn.Module]:
        out = {}
        for i, lay in enumerate(self.bert.encoder.layer):
            out[f"{i}.attn"] = lay.attention.output.LayerNorm
            out[f"{i}.out"] = lay.output.LayerNorm
        return out

    def norms(self) -> dict[str, tuple[torch.Tensor, float]]:
        out: dict[str, tuple[torch.Tensor, float]] = {}
        for k, m in self._ln_mods().items():
            eps: Any = m.eps
            out[k] = (_param(m.weight), float(eps))
        return out

    def chain(self, layer: int) -> list[str]:
        names = [f"{layer}.out"]
        for k in range(layer + 1, self.n_layers):
            names += [f"{k}.attn", f"{k}.out"]
        return names

    def run(
        self, tokens: torch.Tensor, layers: list[int], replace: dict[int, Replace] | None = None
    ) -> RunRecord:
        rec = RunRecord()
        hooks: list[tuple[torch.nn.Module, str, Any]] = []
        enc = self.bert.encoder.layer
        for layer in layers:
            lay = enc[layer]
            hooks.append((lay.output.dense, "pre",
                          lambda mod, a, lay=layer: rec.post.__setitem__(lay, a[0].detach())))  # fmt: skip
            hooks.append((lay.intermediate.dense, "pre",
                          lambda mod, a, lay=layer: rec.mlp_x.__setitem__(lay, a[0].detach())))  # fmt: skip
            hooks.append((lay.output.dense, "fwd",
                          lambda mod, a, o, lay=layer: rec.mlp_out.__setitem__(lay, o.detach())))  # fmt: skip
        for layer, fn in (replace or {}).items():
            hooks.append((enc[layer].output.dense, "fwd", lambda mod, a, o, fn=fn: fn(o)))
        for name, mod in self._ln_mods().items():
            hooks.append((mod, "pre", lambda m, a, n=name: rec.ln_in.__setitem__(n, a[0].detach())))
        with torch.no_grad(), self._torch_hooks(hooks):
            out = self.bert(input_ids=tokens)
        rec.final = out.last_hidden_state.detach()
        return rec


# ------------------------------------------------------------------------------------ dispatch


def adapt(model: Any) -> Adapter:
    """The adapter for ``model``'s family; raises TypeError/ValueError with the reason."""
    from rml_fast.models.transformer import TinyTransformer

    if isinstance(model, TinyTransformer):
        return ZooAdapter(model)
    mod = type(model).__module__
    if mod.startswith("transformer_lens"):
        return TLAdapter(model)
    if mod.startswith("sentence_transformers"):
        try:
            model = model[0].auto_model
        except (TypeError, IndexError, AttributeError, KeyError) as exc:
            raise TypeError("a sentence-transformers model must wrap a transformers model") from exc
    cfg = getattr(model, "config", None)
    mtype = getattr(cfg, "model_type", None)
    if mtype == "gpt2":
        return GPT2Adapter(model)
    if mtype in ("bert", "roberta"):
        return BertAdapter(model)
    raise TypeError(
        "model must be a rml_fast TinyTransformer, a transformer_lens HookedTransformer, a Hugging "
        "Face GPT-2 / BERT-style model or a sentence-transformers model wrapping one; got "
        f"{type(model).__name__}" + (f" (model_type={mtype!r})" if mtype else "")
    )
