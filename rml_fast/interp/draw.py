"""Draw a circuit of the EAP graph with matplotlib (optional dependency)."""

from __future__ import annotations

import os
from typing import Any

import torch

from rml_fast.interp.edge_graph import EdgeGraph

__all__ = [
    "draw_circuit",
]

_COLORS = {
    "q": "tab:blue",
    "k": "tab:orange",
    "v": "tab:green",
    "mlp": "tab:purple",
    "logits": "black",
}


def _positions(graph: EdgeGraph) -> dict[int, tuple[float, float]]:
    """Forward-node positions: x = head index (MLP right of the heads), y = stage."""
    pos = {0: ((graph.n_heads - 1) / 2, 0.0)}
    for layer in range(graph.n_layers):
        y = 1.0 + 2 * layer
        for h in range(graph.n_heads):
            pos[graph.head_index(layer, h)] = (float(h), y)
        if graph.has_mlp:
            pos[graph.mlp_index(layer)] = ((graph.n_heads - 1) / 2, y + 1.0)
    return pos


def draw_circuit(
    graph: EdgeGraph,
    mask: torch.Tensor,
    *,
    scores: torch.Tensor | None = None,
    title: str | None = None,
    path: str | os.PathLike[str] | None = None,
    ax: Any = None,
) -> Any:
    """Plot the edges of ``mask`` between input, heads, MLPs and logits.

    Edge colour says which input of the child it enters (q / k / v / MLP / logits); with
    ``scores`` the line width grows with ``|score|``. Returns the matplotlib Axes; writes a
    PNG to ``path`` if given.

    Parameters
    ----------
    graph : EdgeGraph
    mask : BoolTensor of shape (n_fwd, n_bwd)
    scores : Tensor of shape (n_fwd, n_bwd), optional
    title : str, optional
    path : path-like, optional
    ax : matplotlib Axes, optional

    Raises
    ------
    ImportError
        Without matplotlib (``pip install 'rml_fast[bench]'``).
    """
    mask = graph._check_mask(mask, "mask", batched=False)
    try:
        import matplotlib

        if ax is None and path is not None:
            matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("draw_circuit needs matplotlib: pip install 'rml_fast[bench]'") from exc
    pos = _positions(graph)
    top = 2.0 * graph.n_layers + 1.0
    logits_xy = ((graph.n_heads - 1) / 2, top)
    fig = None
    if ax is None:
        fig, ax = plt.subplots(figsize=(1.6 + 1.3 * graph.n_heads, 1.2 + 1.1 * top))
    names = graph.fwd_names
    bwd = graph.bwd_names
    owner = graph.owner.tolist()
    mags = scores.detach().abs().cpu() if scores is not None else None
    big = float(mags[mask].max()) if mags is not None and bool(mask.any()) else 1.0
    used: set[int] = set()
    for s, d in torch.nonzero(mask).tolist():
        kind = "logits" if d == graph.logits_index else bwd[d].split("<")[-1].rstrip(">")
        kind = kind if kind in _COLORS else "mlp"
        x0, y0 = pos[s]
        x1, y1 = logits_xy if owner[d] < 0 else pos[owner[d]]
        offset = {"q": -0.12, "k": 0.0, "v": 0.12}.get(kind, 0.0)
        width = 0.8 + (3.0 * float(mags[s, d]) / big if mags is not None and big > 0 else 0.8)
        ax.annotate(
            "", xy=(x1 + offset, y1 - 0.18), xytext=(x0, y0 + 0.18),
            arrowprops={"arrowstyle": "-|>", "color": _COLORS[kind], "lw": width, "alpha": 0.8,
                        "connectionstyle": "arc3,rad=0.08"},
        )  # fmt: skip
        used.update({s, owner[d]})
    for s, (x, y) in pos.items():
        on = s in used
        ax.scatter([x], [y], s=500, c="white" if not on else "lightyellow",
                   edgecolors="black" if on else "lightgray", zorder=3)  # fmt: skip
        ax.text(x, y, names[s], ha="center", va="center", fontsize=7,
                color="black" if on else "lightgray", zorder=4)  # fmt: skip
    ax.scatter([logits_xy[0]], [logits_xy[1]], s=700, c="lightyellow", edgecolors="black", zorder=3)
    ax.text(*logits_xy, "logits", ha="center", va="center", fontsize=7, zorder=4)
    for kind, color in _COLORS.items():
        ax.plot([], [], color=color, label=f"-> {kind}")
    ax.legend(loc="upper left", fontsize=7, frameon=False, bbox_to_anchor=(1.0, 1.0))
    ax.set_xlim(-0.8, graph.n_heads - 0.2)
    ax.set_ylim(-0.6, top + 0.6)
    ax.axis("off")
    if title:
        ax.set_title(title, fontsize=9)
    if path is not None:
        (fig or ax.figure).tight_layout()
        (fig or ax.figure).savefig(path, dpi=130)
        if fig is not None:
            plt.close(fig)
    return ax
