"""Functional residual-stream transport for Query Lens (private).

The residual stream of a :class:`~rml_fast.models.transformer.TinyTransformer` is a chain of
sublayers ``x <- x + R_s(x)`` (``s`` = attention or MLP of a block, each with its pre-LN). These
helpers evaluate chains of sublayers as pure functions of the residual so that
``torch.func.jvp``/``vjp`` (under ``vmap`` over many tangents) can push value directions forward
and pull key directions back without forming any ``D x D`` Jacobian.

Options that change the Jacobians:

* ``include_ln=False`` freezes each layer norm's scale ``sqrt(var + 1e-5)`` at the operating
  point (the constant ``std`` of the cached primal input), dropping its derivative;
* a sublayer not in ``mediators`` is replaced by its cached output (a constant: zero Jacobian),
  which removes the indirect effect that passes through it.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from rml_fast.models.transformer import TinyTransformer, activation, attention_heads, layer_norm

Step = tuple[str, int]  # ("attn" | "mlp", layer)


def all_steps(model: TinyTransformer) -> list[Step]:
    """Every sublayer of the model in forward order."""
    out: list[Step] = []
    for layer, block in enumerate(model.blocks):
        out.append(("attn", layer))
        if block.mlp is not None:
            out.append(("mlp", layer))
    return out


def step_name(step: Step) -> str:
    """``blocks.{l}.attn`` / ``blocks.{l}.mlp``."""
    return f"blocks.{step[1]}.{step[0]}"


@dataclass
class OperatingPoint:
    """Primal states of one batch of contexts (all detached)."""

    inputs: dict[Step, torch.Tensor]  # residual entering each sublayer, [n, P, D]
    outputs: dict[Step, torch.Tensor]  # output of each sublayer, [n, P, D]
    embed: torch.Tensor  # h^0_pre = token + position embedding, [n, P, D]
    final: torch.Tensor  # residual entering the final LN, [n, P, D]


def operating_point(model: TinyTransformer, tokens: torch.Tensor) -> OperatingPoint:
    """Run the model once and collect the residual entering/leaving every sublayer."""
    names = []
    for layer, block in enumerate(model.blocks):
        names += [f"blocks.{layer}.hook_resid_pre", f"blocks.{layer}.hook_attn_out",
                  f"blocks.{layer}.hook_resid_mid", f"blocks.{layer}.hook_resid_post"]  # fmt: skip
        if block.mlp is not None:
            names.append(f"blocks.{layer}.hook_mlp_out")
    with torch.no_grad():
        _, cache = model.run_with_cache(tokens, names=names)
    inputs, outputs = {}, {}
    for layer, block in enumerate(model.blocks):
        inputs[("attn", layer)] = cache[f"blocks.{layer}.hook_resid_pre"]
        outputs[("attn", layer)] = cache[f"blocks.{layer}.hook_attn_out"]
        if block.mlp is not None:
            inputs[("mlp", layer)] = cache[f"blocks.{layer}.hook_resid_mid"]
            outputs[("mlp", layer)] = cache[f"blocks.{layer}.hook_mlp_out"]
    last = len(model.blocks) - 1
    return OperatingPoint(inputs, outputs, cache["blocks.0.hook_resid_pre"],
                          cache[f"blocks.{last}.hook_resid_post"])  # fmt: skip


def _std(x: torch.Tensor) -> torch.Tensor:
    return (x.var(-1, unbiased=False, keepdim=True) + 1e-5).sqrt()


def ln_apply(x: torch.Tensor, ln: Any, frozen: torch.Tensor | None) -> torch.Tensor:
    """The model's layer norm, or with its scale frozen at ``frozen`` (``[n, P, 1]``)."""
    if ln is None:
        return x
    if frozen is None:
        return layer_norm(x, ln.w, ln.b)
    return (x - x.mean(-1, keepdim=True)) / frozen * ln.w + ln.b


def branch(
    model: TinyTransformer, step: Step, x: torch.Tensor, frozen: torch.Tensor | None
) -> torch.Tensor:
    """Output ``R_s(x)`` of sublayer ``step`` (LN included) for a residual ``x [..., P, D]``."""
    kind, layer = step
    block: Any = model.blocks[layer]
    if kind == "attn":
        xa = ln_apply(x, block.ln1, frozen)
        return attention_heads(xa, xa, xa, block.attn, None, hooked=False).sum(-2) + block.attn.b_O
    mlp: Any = block.mlp
    xm = ln_apply(x, block.ln2, frozen)
    return activation(xm @ mlp.W_in + mlp.b_in, mlp.act) @ mlp.W_out + mlp.b_out


def chain(
    model: TinyTransformer,
    steps: list[Step],
    op: OperatingPoint,
    *,
    include_ln: bool,
    mediators: frozenset[str] | None,
    final_ln: bool = False,
) -> Callable[[torch.Tensor], torch.Tensor]:
    """``x -> (final LN o) (I + R_{s_n}) o ... o (I + R_{s_1}) (x)`` as a pure function."""
    frozen = {s: None if include_ln else _std(op.inputs[s]) for s in steps}
    final_frozen = None if include_ln else _std(op.final)

    def f(x: torch.Tensor) -> torch.Tensor:
        for s in steps:
            if mediators is not None and step_name(s) not in mediators:
                x = x + op.outputs[s]  # a constant: no tangent flows through this module
            else:
                x = x + branch(model, s, x, frozen[s])
        if final_ln:
            x = ln_apply(x, model.ln_final, final_frozen)
        return x

    return f


_JVP_READY = False


def _load_jvp_decompositions() -> None:
    """Import torch's forward-AD decompositions once, silencing its own deprecation warning.

    torch 2.13 scripts these decompositions with ``torch.jit.script`` on the first forward-mode
    call and warns that ``torch.jit.script`` is deprecated; the warning is torch's, not ours.
    """
    global _JVP_READY
    if _JVP_READY:
        return
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*torch\.jit\.script.*", category=DeprecationWarning)
        import torch._decomp.decompositions_for_jvp  # noqa: F401
    _JVP_READY = True


def push_forward(
    f: Callable[[torch.Tensor], torch.Tensor],
    x0: torch.Tensor,
    tangents: torch.Tensor,
    batched: bool,
) -> torch.Tensor:
    """``J_f(x0) t`` for every ``t`` in ``tangents [c, *x0.shape]`` (vmap of jvp, or a loop)."""
    _load_jvp_decompositions()
    if batched:
        return torch.func.vmap(lambda t: torch.func.jvp(f, (x0,), (t,))[1])(tangents)
    return torch.stack([torch.func.jvp(f, (x0,), (t,))[1] for t in tangents])


def pull_back(
    f: Callable[[torch.Tensor], torch.Tensor],
    x0: torch.Tensor,
    cotangents: torch.Tensor,
    batched: bool,
) -> torch.Tensor:
    """``J_f(x0)^T c`` for every ``c`` in ``cotangents [c, *f(x0).shape]`` (one shared forward)."""
    vjp_fn = torch.func.vjp(f, x0)[1]
    if batched:
        return torch.func.vmap(vjp_fn)(cotangents)[0]
    return torch.stack([vjp_fn(c)[0] for c in cotangents])


def _branch_fn(
    model: TinyTransformer, step: Step, frozen: torch.Tensor | None
) -> Callable[[torch.Tensor], torch.Tensor]:
    def f(x: torch.Tensor) -> torch.Tensor:
        return branch(model, step, x, frozen)

    return f


def first_order_forward(
    model: TinyTransformer,
    steps: list[Step],
    op: OperatingPoint,
    tangents: torch.Tensor,
    *,
    include_ln: bool,
    mediators: frozenset[str] | None,
    batched: bool,
) -> torch.Tensor:
    """Single-hop transport ``(I + sum_s J_s) t``, each ``J_s`` at its own operating point."""
    out = tangents.clone()
    for s in steps:
        if mediators is not None and step_name(s) not in mediators:
            continue
        frozen = None if include_ln else _std(op.inputs[s])
        out = out + push_forward(_branch_fn(model, s, frozen), op.inputs[s], tangents, batched)
    return out


def first_order_backward(
    model: TinyTransformer,
    steps: list[Step],
    op: OperatingPoint,
    cotangents: torch.Tensor,
    *,
    include_ln: bool,
    mediators: frozenset[str] | None,
    batched: bool,
) -> torch.Tensor:
    """Single-hop pull-back ``(I + sum_s J_s)^T c``, each ``J_s`` at its own operating point."""
    out = cotangents.clone()
    for s in steps:
        if mediators is not None and step_name(s) not in mediators:
            continue
        frozen = None if include_ln else _std(op.inputs[s])
        out = out + pull_back(_branch_fn(model, s, frozen), op.inputs[s], cotangents, batched)
    return out
