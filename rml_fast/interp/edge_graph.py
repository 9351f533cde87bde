"""The EAP computational graph of a transformer with split q/k/v inputs.

Source (forward) nodes, in this order: ``input`` (token + position embedding), then per layer
``l`` the heads ``a{l}.h{h}`` (``z_h W_O^h``, bias excluded) followed by the MLP ``m{l}``;
``n_fwd = 1 + L (H + 1)`` (attention-only: ``1 + L H``).

Destination (backward) nodes: per layer the q inputs of the ``H`` heads, their k inputs, their
v inputs, then the MLP input; finally ``logits`` (the final residual);
``n_bwd = L (3H + 1) + 1`` (attention-only: ``3 L H + 1``).

An edge ``s -> d`` exists iff ``s`` is upstream of ``d``. With this ordering the sources of
every destination are a prefix of the forward nodes, so ``real_edge_mask[s, d] = s < limit[d]``.
The edge count is

``E(L, H) = sum_{l<L} [3H (1 + l (H+1)) + (1 + l (H+1) + H)] + 1 + L (H+1)``

(32491 for the GPT-2-small shape ``L = H = 12``), as in ``hannamw/EAP-IG``.
"""

from __future__ import annotations

import heapq
import numbers
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from rml_fast._validation import Interval, check_scalar
from rml_fast.interp._checks import int_arg, not_meta

__all__ = [
    "EdgeGraph",
]


@dataclass(frozen=True, eq=False)
class EdgeGraph:
    """Dense index of the EAP graph of an ``n_layers`` x ``n_heads`` transformer.

    Build with :meth:`from_config` or :meth:`from_model`. Scores and masks are tensors of
    shape ``(n_fwd, n_bwd)`` (with optional leading batch axes); only entries where
    :attr:`real_edge_mask` is True are edges.

    Examples
    --------
    >>> from rml_fast.interp import EdgeGraph
    >>> EdgeGraph.from_config(12, 12).n_edges
    32491
    >>> EdgeGraph.from_config(1, 4, has_mlp=False).n_edges
    17
    """

    n_layers: int
    n_heads: int
    has_mlp: bool = True
    src_limit: torch.Tensor = field(init=False, repr=False)
    owner: torch.Tensor = field(init=False, repr=False)

    def __post_init__(self) -> None:
        check_scalar(self.n_layers, "n_layers", Interval("int", 1, None))
        check_scalar(self.n_heads, "n_heads", Interval("int", 1, None))
        if isinstance(self.has_mlp, (bool, np.bool_)) or (
            isinstance(self.has_mlp, numbers.Integral) and int(self.has_mlp) in (0, 1)
        ):
            object.__setattr__(self, "has_mlp", bool(self.has_mlp))
        else:
            raise TypeError(f"has_mlp must be a bool, got {type(self.has_mlp).__name__} {self.has_mlp!r}")
        L, H, m = self.n_layers, self.n_heads, int(self.has_mlp)
        limit, owner = [], []
        for layer in range(L):
            start = self._fwd_index(layer, 0)
            for _ in range(3):
                for h in range(H):
                    limit.append(start)
                    owner.append(start + h)
            if m:
                limit.append(start + H)
                owner.append(start + H)
        limit.append(self.n_fwd)
        owner.append(-1)
        object.__setattr__(self, "src_limit", torch.tensor(limit))
        object.__setattr__(self, "owner", torch.tensor(owner))

    # --- construction --------------------------------------------------------------------

    @classmethod
    def from_config(cls, n_layers: int, n_heads: int, has_mlp: bool = True) -> EdgeGraph:
        """The graph of an ``n_layers`` x ``n_heads`` model (``has_mlp=False``: attention-only)."""
        return cls(n_layers, n_heads, bool(has_mlp))

    @classmethod
    def from_model(cls, model: Any) -> EdgeGraph:
        """The graph of a :class:`~rml_fast.models.TinyTransformer`."""
        cfg = model.cfg
        return cls(cfg.n_layers, cfg.n_heads, not cfg.attn_only)

    # --- sizes and indices ---------------------------------------------------------------

    @property
    def n_fwd(self) -> int:
        """Sources: ``input``, every head and every MLP: ``1 + L (H + has_mlp)``."""
        return 1 + self.n_layers * (self.n_heads + int(self.has_mlp))

    @property
    def n_bwd(self) -> int:
        """Destinations: q, k, v of every head, every MLP, ``logits``: ``L (3H + has_mlp) + 1``."""
        return self.n_layers * (3 * self.n_heads + int(self.has_mlp)) + 1

    @property
    def real_edge_mask(self) -> torch.Tensor:
        """BoolTensor of shape (n_fwd, n_bwd): which entries are edges."""
        return torch.arange(self.n_fwd)[:, None] < self.src_limit[None, :]

    @property
    def n_edges(self) -> int:
        """Number of real edges (each source feeds every later destination), ``E(L, H)``."""
        return int(self.src_limit.sum())

    def _layer(self, layer: Any) -> int:
        return int_arg(layer, "layer", 0, self.n_layers - 1)

    def _head(self, head: Any) -> int:
        return int_arg(head, "head", 0, self.n_heads - 1)

    def _fwd_index(self, layer: int, head: int) -> int:
        return 1 + layer * (self.n_heads + int(self.has_mlp)) + head

    def head_index(self, layer: int, head: int) -> int:
        """Forward index of head ``a{layer}.h{head}``."""
        return self._fwd_index(self._layer(layer), self._head(head))

    def mlp_index(self, layer: int) -> int:
        """Forward index of MLP ``m{layer}``."""
        if not self.has_mlp:
            raise ValueError("this graph has no MLP nodes")
        return self._fwd_index(self._layer(layer), self.n_heads)

    def qkv_index(self, layer: int, head: int, which: str) -> int:
        """Backward index of the ``which`` in {"q", "k", "v"} input of head ``a{layer}.h{head}``."""
        layer, head = self._layer(layer), self._head(head)
        if not isinstance(which, str) or which not in ("q", "k", "v"):
            raise ValueError(f"which must be 'q', 'k' or 'v', got {which!r}")
        base = layer * (3 * self.n_heads + int(self.has_mlp))
        return base + "qkv".index(which) * self.n_heads + head

    def mlp_in_index(self, layer: int) -> int:
        """Backward index of the input of MLP ``m{layer}``."""
        if not self.has_mlp:
            raise ValueError("this graph has no MLP nodes")
        return self._layer(layer) * (3 * self.n_heads + 1) + 3 * self.n_heads

    @property
    def logits_index(self) -> int:
        """Column of the ``logits`` destination (the last one)."""
        return self.n_bwd - 1

    @property
    def fwd_names(self) -> list[str]:
        """Source names by row: ``input``, ``a{l}.h{h}``, ``m{l}``."""
        names = ["input"]
        for layer in range(self.n_layers):
            names += [f"a{layer}.h{h}" for h in range(self.n_heads)]
            if self.has_mlp:
                names.append(f"m{layer}")
        return names

    @property
    def bwd_names(self) -> list[str]:
        """Destination names by column: ``a{l}.h{h}<q|k|v>``, ``m{l}``, ``logits``."""
        names = []
        for layer in range(self.n_layers):
            for w in "qkv":
                names += [f"a{layer}.h{h}<{w}>" for h in range(self.n_heads)]
            if self.has_mlp:
                names.append(f"m{layer}")
        return [*names, "logits"]

    def edges(self, mask: torch.Tensor) -> list[tuple[str, str]]:
        """The ``(source, destination)`` names of the edges in a single mask."""
        fwd, bwd = self.fwd_names, self.bwd_names
        idx = torch.nonzero(self._check_mask(mask, "mask", batched=False))
        return [(fwd[int(s)], bwd[int(d)]) for s, d in idx]

    def nodes(self, mask: torch.Tensor) -> set[str]:
        """Names of the forward nodes with an out-edge in ``mask``, plus ``logits`` if reached."""
        mask = self._check_mask(mask, "mask", batched=False)
        fwd = self.fwd_names
        out = {fwd[int(s)] for s in torch.nonzero(mask.any(1)).flatten()}
        if bool(mask[:, self.logits_index].any()):
            out.add("logits")
        return out

    # --- validation ----------------------------------------------------------------------

    def _check_mask(self, mask: Any, name: str, batched: bool = True) -> torch.Tensor:
        if not isinstance(mask, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(mask).__name__}")
        not_meta(mask, name)
        shape = (self.n_fwd, self.n_bwd)
        if mask.ndim < 2 or tuple(mask.shape[-2:]) != shape or (not batched and mask.ndim != 2):
            want = "(..., n_fwd, n_bwd)" if batched else "(n_fwd, n_bwd)"
            raise ValueError(f"{name} must have shape {want} = {shape}, got {tuple(mask.shape)}")
        if mask.dtype != torch.bool:
            raise TypeError(f"{name} must be a bool tensor, got {mask.dtype}")
        return mask

    def _check_scores(self, scores: Any) -> torch.Tensor:
        if not isinstance(scores, torch.Tensor):
            raise TypeError(f"scores must be a torch.Tensor, got {type(scores).__name__}")
        not_meta(scores, "scores")
        if scores.ndim < 2 or tuple(scores.shape[-2:]) != (self.n_fwd, self.n_bwd):
            raise ValueError(
                f"scores must have shape (..., {self.n_fwd}, {self.n_bwd}), got {tuple(scores.shape)}"
            )
        if not scores.is_floating_point():
            raise TypeError(f"scores must be a floating tensor, got {scores.dtype}")
        if not bool(torch.isfinite(scores[..., self.real_edge_mask]).all()):
            raise ValueError("scores must be finite on real edges")
        return scores

    def _check_n(self, n: Any) -> int:
        return int(check_scalar(n, "n", Interval("int", 0, self.n_edges)))

    # --- circuit construction ------------------------------------------------------------

    def topn(
        self, scores: torch.Tensor, n: int, absolute: bool = True, prune: bool = True
    ) -> torch.Tensor:
        """Keep the ``n`` real edges with the largest (absolute) score, then :meth:`prune`.

        Ties go to the lower flat index. Batched over leading axes of ``scores``.

        Parameters
        ----------
        scores : Tensor of shape (..., n_fwd, n_bwd)
        n : int
            ``0 <= n <= n_edges``.
        absolute : bool, default=True
            Rank by ``|score|``.
        prune : bool, default=True
            Prune the result (it then has at most ``n`` edges).

        Returns
        -------
        mask : BoolTensor of shape (..., n_fwd, n_bwd)
        """
        scores = self._check_scores(scores)
        n = self._check_n(n)
        key = scores.abs() if absolute else scores
        real = self.real_edge_mask.to(scores.device)
        key = key.masked_fill(~real, float("-inf")).flatten(-2)
        order = torch.sort(key, dim=-1, descending=True, stable=True).indices[..., :n]
        mask = torch.zeros(key.shape, dtype=torch.bool, device=scores.device)
        mask.scatter_(-1, order, True)
        mask = mask.view(scores.shape)
        return self.prune(mask) if prune else mask

    def greedy(
        self, scores: torch.Tensor, n: int, absolute: bool = True, prune: bool = True
    ) -> torch.Tensor:
        """Grow a circuit from ``logits``: repeatedly add the best edge whose child is in it.

        Starting with the logits node, the highest-(|)score(|) edge into a node already in the
        circuit is added (a heap over the frontier); its parent then joins the circuit and the
        edges into the parent's q/k/v (or MLP) inputs join the frontier. Stops after ``n``
        edges or when the frontier is empty.

        Parameters
        ----------
        scores : Tensor of shape (n_fwd, n_bwd)
        n : int
        absolute : bool, default=True
        prune : bool, default=True

        Returns
        -------
        mask : BoolTensor of shape (n_fwd, n_bwd)
        """
        scores = self._check_scores(scores)
        if scores.ndim != 2:
            raise ValueError(f"scores must have shape (n_fwd, n_bwd), got {tuple(scores.shape)}")
        n = self._check_n(n)
        key = (scores.abs() if absolute else scores).detach().cpu().double()
        limit, owner = self.src_limit.tolist(), self.owner.tolist()
        dests_of: dict[int, list[int]] = {}
        for d, s in enumerate(owner):
            dests_of.setdefault(s, []).append(d)
        heap: list[tuple[float, int, int]] = []
        cols = key.T.tolist()

        def push(d: int) -> None:
            for s in range(limit[d]):
                heapq.heappush(heap, (-cols[d][s], s * self.n_bwd + d, s))

        mask = torch.zeros(self.n_fwd, self.n_bwd, dtype=torch.bool)
        in_graph = {-1}
        push(self.logits_index)
        count = 0
        while heap and count < n:
            _, flat, s = heapq.heappop(heap)
            mask.view(-1)[flat] = True
            count += 1
            if s not in in_graph and s != 0:
                in_graph.add(s)
                for d in dests_of.get(s, []):
                    push(d)
        mask = mask.to(scores.device)
        return self.prune(mask) if prune else mask

    def prune(self, mask: torch.Tensor) -> torch.Tensor:
        """Remove edges of nodes without inputs (``input`` exempt) or outputs (``logits`` exempt).

        Repeats until a fixed point; batched over leading axes. The result is a subset of
        ``mask``, and ``prune(prune(m)) == prune(m)``. Under patching ablation the removed
        edges carry exactly their corrupted values, so the circuit's metric is unchanged.

        Parameters
        ----------
        mask : BoolTensor of shape (..., n_fwd, n_bwd)

        Returns
        -------
        pruned : BoolTensor of shape (..., n_fwd, n_bwd)
        """
        mask = self._check_mask(mask, "mask") & self.real_edge_mask.to(mask.device)
        own = torch.zeros(self.n_fwd, self.n_bwd, dtype=torch.float32, device=mask.device)
        dst = torch.nonzero(self.owner >= 0).flatten()
        own[self.owner[dst], dst] = 1.0
        not_logits = torch.ones(self.n_bwd, dtype=torch.bool, device=mask.device)
        not_logits[self.logits_index] = False
        while True:
            dest_has_in = mask.any(-2).float()  # [..., n_bwd]
            has_in = (dest_has_in @ own.T) > 0  # [..., n_fwd]
            has_in[..., 0] = True
            has_out = mask.any(-1)  # [..., n_fwd]
            alive = has_in & has_out
            dest_alive = (alive.float() @ own) > 0  # [..., n_bwd]
            dest_alive = dest_alive | ~not_logits
            new = mask & alive[..., :, None] & dest_alive[..., None, :]
            if torch.equal(new, mask):
                return new
            mask = new
