"""Convert a :class:`TinyTransformer` to ``transformer_lens.HookedTransformer`` (optional dependency).

The converted model has the same weights and computes the same logits; it is built with
``use_split_qkv_input=True, use_attn_result=True, use_hook_mlp_in=True`` so that edge-level
circuit interventions can be reproduced with TransformerLens hooks (used by the oracle tests).
Install with ``pip install 'transformer-lens<4'``.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

from rml_fast.models.transformer import TinyTransformer

__all__ = [
    "to_transformer_lens",
]


def to_transformer_lens(model: TinyTransformer) -> Any:
    """A ``HookedTransformer`` with ``model``'s weights (same dtype, on the CPU).

    Raises
    ------
    ImportError
        If transformer-lens is not installed.
    TypeError
        If ``model`` is not a TinyTransformer.
    """
    if not isinstance(model, TinyTransformer):
        raise TypeError(f"model must be a TinyTransformer, got {type(model).__name__}")
    try:
        from transformer_lens import HookedTransformer, HookedTransformerConfig
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("to_transformer_lens needs: pip install 'transformer-lens<4'") from exc
    c = model.cfg
    dtype = model.W_E.dtype
    tl_cfg = HookedTransformerConfig(
        n_layers=c.n_layers,
        d_model=c.d_model,
        n_ctx=c.n_ctx,
        d_head=c.d_head,
        n_heads=c.n_heads,
        d_mlp=c.d_mlp if c.d_mlp is not None else 4 * c.d_model,
        d_vocab=c.d_vocab,
        act_fn=c.act,
        normalization_type="LN" if c.ln else None,
        attn_only=c.attn_only,
        positional_embedding_type="standard",
        use_split_qkv_input=True,
        use_attn_result=True,
        use_hook_mlp_in=True,
        default_prepend_bos=False,
        dtype=dtype,
        device="cpu",
        seed=0,
    )
    with warnings.catch_warnings():  # transformer-lens 3.x deprecates HookedTransformer
        warnings.simplefilter("ignore", DeprecationWarning)
        tl = HookedTransformer(tl_cfg)
    sd: dict[str, torch.Tensor] = {
        "embed.W_E": model.W_E,
        "pos_embed.W_pos": model.W_pos,
        "unembed.W_U": model.unembed,
        "unembed.b_U": model.b_U,
    }
    if model.ln_final is not None:
        sd["ln_final.w"], sd["ln_final.b"] = model.ln_final.w, model.ln_final.b
    block: Any  # a _Block (ModuleList items are typed nn.Module)
    for layer, block in enumerate(model.blocks):
        pre = f"blocks.{layer}."
        a = block.attn
        for name in ("W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V", "b_O"):
            sd[pre + "attn." + name] = getattr(a, name)
        if block.ln1 is not None:
            sd[pre + "ln1.w"], sd[pre + "ln1.b"] = block.ln1.w, block.ln1.b
        if block.ln2 is not None:
            sd[pre + "ln2.w"], sd[pre + "ln2.b"] = block.ln2.w, block.ln2.b
        if block.mlp is not None:
            for name in ("W_in", "b_in", "W_out", "b_out"):
                sd[pre + "mlp." + name] = getattr(block.mlp, name)
    sd = {k: v.detach().clone().to(dtype) for k, v in sd.items()}
    missing, unexpected = tl.load_state_dict(sd, strict=False)
    if unexpected:
        raise RuntimeError(f"transformer-lens rejected parameters: {unexpected}")
    learned = [m for m in missing if not m.endswith(("IGNORE", "mask"))]
    if learned:
        raise RuntimeError(f"parameters not set in the converted model: {learned}")
    return tl.eval()
