"""SoHip: social hippocampus memory learning among heterogeneous agents (Yi, Zhao & Hu, ICML 2026,
arXiv 2603.25614).

Every agent keeps its own model (any architecture) and its data; what it shares is *memory*: a
class-by-feature matrix in a common width ``m``. Per agent ``k`` and class ``c``:

1. **short-term memory** (STM), abstracted from the batch's projected representations
   ``q_i = P_k(F_k(x_i))``: ``s_c = mean_{i: y_i = c} q_i``;
2. **hippocampal consolidation** into the individual long-term memory (LTM) ``M_k`` by a learned
   gate: ``g_c = sigmoid(w_g^T [M_k[c]; s_c; M_k[c] * s_c] + b_g)``,
   ``M_k[c] <- (1 - g_c) M_k[c] + g_c s_c`` (a class's first STM is copied);
3. the server's **collective memory** ``Mbar[c] = sum_k n_{k,c} M_k[c] / sum_k n_{k,c}``
   (only ``M_k`` and the class counts ``n_k`` leave an agent);
4. **fusion** for prediction: ``F = rho M_k + (1 - rho) Mbar`` (per class, over the memories that
   exist), ``a = softmax(q F^T / sqrt(m))``, ``z = q + lambda a F``, logits ``= W_k [h; z]``; the
   local loss is ``CE + mu ||q - stopgrad(Mbar[y])||^2 / m``.

Only the paper's abstract was available when this was written: **every formula above is
PROPOSED** (``specs/privacy.md`` section 4), a reconstruction of what the abstract describes. The
named options (``gate``, ``lam``, ``learn_lambda``, ``rho``, ``mu``, ``upload_noise``) expose each
choice, so the paper's own equations can replace them. Baselines on the same protocol:
:mod:`rml_fast.federated.baselines`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from rml_fast._validation import Interval, check_array, check_rng, check_scalar, check_tensor
from rml_fast.federated._sohip_nets import (
    ARCHITECTURES,
    build_extractor,
    optimizer_state_from_arrays,
    optimizer_state_to_arrays,
    round_generator,
    torch_threads,
)
from rml_fast.federated.protocol import (
    FederatedClient,
    FederatedServer,
    Message,
    _check_round,
    check_message,
)

__all__ = [
    "ARCHITECTURES",
    "SoHipAgent",
    "SoHipClient",
    "SoHipServer",
    "aggregate_memories",
    "label_skew_split",
]


def _agent_seed(seed: int, client_id: int) -> int:
    ss = np.random.SeedSequence([int(seed), int(client_id), 0x5048])
    return int(ss.generate_state(1, dtype=np.uint64)[0] >> np.uint64(1))


class SoHipAgent(nn.Module):
    """One heterogeneous SoHip agent: extractor, projector, hippocampal gate, fusion and head.

    Parameters
    ----------
    in_features : int
        Input width (flat features; CNN extractors reshape them to ``image_shape``).
    num_classes : int
        Number of classes ``C`` (shared by all agents).
    arch : int, default=0
        Index into :data:`ARCHITECTURES` (0, 1, 3: MLPs; 2, 4: CNNs). Agents may differ.
    memory_dim : int, default=32
        Shared memory width ``m`` (the projector maps ``d_k -> m``).
    image_shape : tuple of int, optional
        ``(H, W)`` with ``H * W == in_features``; required by the CNN architectures.
    fusion : bool, default=True
        False builds the plain model ``logits = W_k [h; q]`` without gate or memory use (the
        local-only and FedProto baselines).
    gate : {"learned"} or float, default="learned"
        ``"learned"``: the gate ``g_c = sigmoid(w_g^T [M[c]; s_c; M[c] * s_c] + b_g)``
        [PROPOSED]; a float in [0, 1] fixes ``g_c`` to it (1: the LTM is the last STM).
    lam : float, default=0.5
        Initial fusion weight ``lambda`` of the retrieved memory in ``z = q + lambda r``.
    learn_lambda : bool, default=True
        Train ``lambda`` (otherwise it is a fixed buffer).
    rho : float, default=0.5
        Weight of the individual LTM against the collective one in the fused memory
        ``F = rho M_k + (1 - rho) Mbar`` [PROPOSED].
    seed : int, default=0
        Seed of the weight initialisation.

    Attributes
    ----------
    ltm : torch.Tensor, shape (C, m)
        The individual long-term memory (a buffer: detached, in the state dict).
    ltm_counts : torch.Tensor, shape (C,), int64
        Samples consolidated per class so far.

    Examples
    --------
    >>> import torch
    >>> from rml_fast.federated.sohip import SoHipAgent
    >>> agent = SoHipAgent(64, 10, arch=2, memory_dim=16, image_shape=(8, 8), seed=0)
    >>> x, y = torch.randn(6, 64), torch.tensor([0, 0, 1, 1, 1, 3])
    >>> mem = agent.consolidate(agent.extract(x), y)
    >>> tuple(agent.memory().shape), agent.counts().tolist()[:4]
    ((10, 16), [2, 3, 0, 1])
    >>> tuple(agent(x).shape)
    (6, 10)
    """

    extractor: nn.Module
    projector: nn.Linear
    head: nn.Linear
    gate: nn.Linear
    lam: torch.Tensor
    ltm: torch.Tensor
    ltm_counts: torch.Tensor

    def __init__(
        self,
        in_features: int,
        num_classes: int,
        *,
        arch: int = 0,
        memory_dim: int = 32,
        image_shape: tuple[int, int] | None = None,
        fusion: bool = True,
        gate: str | float = "learned",
        lam: float = 0.5,
        learn_lambda: bool = True,
        rho: float = 0.5,
        seed: int = 0,
    ) -> None:
        super().__init__()
        in_features = int(check_scalar(in_features, "in_features", Interval("int", 1, None)))
        num_classes = int(check_scalar(num_classes, "num_classes", Interval("int", 2, None)))
        arch = int(check_scalar(arch, "arch", Interval("int", 0, len(ARCHITECTURES) - 1)))
        memory_dim = int(check_scalar(memory_dim, "memory_dim", Interval("int", 1, None)))
        if image_shape is not None:
            if len(image_shape) != 2 or int(image_shape[0]) * int(image_shape[1]) != in_features:
                raise ValueError(
                    f"image_shape must be (H, W) with H * W == in_features={in_features}, "
                    f"got {image_shape!r}"
                )
            image_shape = (int(image_shape[0]), int(image_shape[1]))
        if isinstance(gate, str):
            if gate != "learned":
                raise ValueError(f"gate must be 'learned' or a float in [0, 1], got {gate!r}")
        else:
            gate = float(check_scalar(gate, "gate", Interval("real", 0.0, 1.0)))
        lam = float(check_scalar(lam, "lam", Interval("real", None, None)))
        rho = float(check_scalar(rho, "rho", Interval("real", 0.0, 1.0)))
        seed = int(check_scalar(seed, "seed", Interval("int", 0, None)))
        self.num_classes, self.memory_dim, self.fusion, self.gate_mode = (
            num_classes, memory_dim, bool(fusion), gate,
        )  # fmt: skip
        self.rho = rho
        self.in_features = in_features
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.extractor, self.feature_dim = build_extractor(arch, in_features, image_shape)
            self.projector = nn.Linear(self.feature_dim, memory_dim)
            self.head = nn.Linear(self.feature_dim + memory_dim, num_classes)
            if self.fusion and gate == "learned":
                self.gate = nn.Linear(3 * memory_dim, 1)
        if self.fusion:
            if learn_lambda:
                self.lam = nn.Parameter(torch.tensor(lam, dtype=torch.float32))
            else:
                self.register_buffer("lam", torch.tensor(lam, dtype=torch.float32))
        self.register_buffer("ltm", torch.zeros(num_classes, memory_dim))
        self.register_buffer("ltm_counts", torch.zeros(num_classes, dtype=torch.int64))

    # ------------------------------------------------------------------ input checks
    # The public methods validate their tensors once; the clients' training loops call the
    # private twins (``_forward``, ``_forward_train``, ...) on data checked at construction.
    def _dtype(self) -> torch.dtype:
        return self.projector.weight.dtype

    def _check_rows(self, t: Any, name: str, width: int) -> torch.Tensor:
        check_tensor(t, name, ndim=2)
        if t.shape[1] != width:
            raise ValueError(f"{name} must have shape (B, {width}), got {tuple(t.shape)}")
        if t.dtype != self._dtype():
            raise TypeError(f"{name} must have the model's dtype {self._dtype()}, got {t.dtype}")
        return t

    def _check_labels(self, y: Any, n: int, rows: str, name: str = "y") -> torch.Tensor:
        check_tensor(y, name, ndim=1, floating=False, finite=False)
        if y.dtype != torch.int64:
            raise TypeError(f"{name} must be an int64 tensor of labels, got {y.dtype}")
        if y.shape[0] != n:
            raise ValueError(f"{name} must have one label per row of {rows} ({n} rows), "
                             f"got shape {tuple(y.shape)}")
        if y.numel() and (int(y.min()) < 0 or int(y.max()) >= self.num_classes):
            raise ValueError(f"{name} must hold labels in [0, {self.num_classes}), "
                             f"got values in [{int(y.min())}, {int(y.max())}]")
        return y

    def _check_collective(self, memory: Any, counts: Any) -> None:
        C, m = self.num_classes, self.memory_dim
        if memory is not None:
            check_tensor(memory, "collective_memory", ndim=2)
            if tuple(memory.shape) != (C, m):
                raise ValueError(f"collective_memory must have shape {(C, m)}, "
                                 f"got {tuple(memory.shape)}")
            if memory.dtype != self._dtype():
                raise TypeError(f"collective_memory must have the model's dtype {self._dtype()}, "
                                f"got {memory.dtype}")
        if counts is not None:
            check_tensor(counts, "collective_counts", ndim=1, floating=False, finite=False)
            if counts.is_complex() or counts.dtype == torch.bool or tuple(counts.shape) != (C,):
                raise ValueError(f"collective_counts must be an integer tensor of shape {(C,)}, "
                                 f"got {counts.dtype} of shape {tuple(counts.shape)}")

    # ------------------------------------------------------------------ pieces
    def extract(self, x: torch.Tensor) -> torch.Tensor:
        """Features ``h = F_k(x)``, shape ``(B, d_k)``, from inputs of shape ``(B, in_features)``.

        Parameters
        ----------
        x : torch.Tensor, shape (B, in_features)
            Finite inputs of the model's dtype.

        Returns
        -------
        torch.Tensor, shape (B, d_k)

        Examples
        --------
        >>> import torch
        >>> from rml_fast.federated.sohip import SoHipAgent
        >>> agent = SoHipAgent(64, 10, arch=2, memory_dim=16, image_shape=(8, 8), seed=0)
        >>> agent.extract(torch.randn(3, 64)).shape[0]
        3
        """
        return self.extractor(self._check_rows(x, "x", self.in_features))

    def short_term_memory(self, q: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Class-conditional STM ``s_c = mean_{i: y_i = c} q_i`` [PROPOSED].

        Parameters
        ----------
        q : torch.Tensor, shape (B, m)
            Projected representations.
        y : torch.Tensor, shape (B,), int64
            Labels in ``[0, C)``.

        Returns
        -------
        stm : torch.Tensor, shape (C, m)
            Zero rows for classes absent from the batch.
        n : torch.Tensor, shape (C,), int64
            Samples per class in the batch.

        Examples
        --------
        >>> import torch
        >>> from rml_fast.federated.sohip import SoHipAgent
        >>> agent = SoHipAgent(4, 3, memory_dim=2)
        >>> stm, n = agent.short_term_memory(torch.ones(3, 2), torch.tensor([0, 0, 2]))
        >>> n.tolist(), stm[1].tolist()
        ([2, 0, 1], [0.0, 0.0])
        """
        self._check_rows(q, "q", self.memory_dim)
        self._check_labels(y, q.shape[0], "q")
        return self._short_term_memory(q, y)

    def _short_term_memory(self, q: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        onehot = F.one_hot(y, self.num_classes).to(q.dtype)
        n = onehot.sum(0)
        stm = (onehot.T @ q) / n.clamp_min(1.0)[:, None]
        return stm, n.to(torch.int64)

    def _gate(self, stm: torch.Tensor, present: torch.Tensor) -> torch.Tensor:
        if isinstance(self.gate_mode, float):
            g = torch.full((self.num_classes, 1), self.gate_mode, dtype=stm.dtype)
        else:
            mem = self.ltm.clone()
            g = torch.sigmoid(self.gate(torch.cat([mem, stm, mem * stm], dim=1)))
        first = (self.ltm_counts == 0)[:, None]
        g = torch.where(first, torch.ones_like(g), g)  # a class's first STM is copied
        return g * present[:, None].to(g.dtype)

    def _consolidate_q(self, q: torch.Tensor, y: torch.Tensor, commit: bool) -> torch.Tensor:
        stm, n = self._short_term_memory(q, y)
        g = self._gate(stm, n > 0) if self.fusion else (n > 0)[:, None].to(stm.dtype)
        new = (1.0 - g) * self.ltm.clone() + g * stm
        if commit:
            with torch.no_grad():
                self.ltm.copy_(new.detach())
                self.ltm_counts.add_(n)
        return new

    def consolidate(self, h: torch.Tensor, y: torch.Tensor, *, commit: bool = True) -> torch.Tensor:
        """Hippocampal consolidation of a batch's STM into the LTM [PROPOSED].

        ``g_c = sigmoid(w_g^T [M[c]; s_c; M[c] * s_c] + b_g)`` (or the fixed ``gate``; 1 for a
        class never seen before, 0 for classes absent from the batch) and
        ``M[c] <- (1 - g_c) M[c] + g_c s_c``.

        Parameters
        ----------
        h : torch.Tensor, shape (B, d_k)
            Extractor features (:meth:`extract`).
        y : torch.Tensor, shape (B,), int64
            Labels.
        commit : bool, default=True
            Store the new memory (detached) and add the batch's class counts.

        Returns
        -------
        torch.Tensor, shape (C, m)
            The consolidated memory, differentiable with respect to the projector and the gate.
        """
        self._check_rows(h, "h", self.feature_dim)
        self._check_labels(y, h.shape[0], "h")
        if not isinstance(commit, bool):
            raise TypeError(f"commit must be a bool, got {type(commit).__name__}")
        return self._consolidate_q(self.projector(h), y, commit)

    def memory(self) -> torch.Tensor:
        """The individual LTM ``M_k``, shape ``(C, m)``, float32 (a detached copy)."""
        return self.ltm.detach().clone()

    def counts(self) -> torch.Tensor:
        """Samples consolidated per class, shape ``(C,)``, int64 (a copy)."""
        return self.ltm_counts.clone()

    def _head(
        self,
        h: torch.Tensor,
        q: torch.Tensor,
        individual: torch.Tensor,
        collective: torch.Tensor | None,
        collective_counts: torch.Tensor | None,
    ) -> torch.Tensor:
        if not self.fusion:
            return self.head(torch.cat([h, q], dim=1))
        w_ind = self.rho * (self.ltm_counts > 0).to(q.dtype)
        fused = w_ind[:, None] * individual
        total = w_ind
        if collective is not None:
            present = (collective_counts > 0) if collective_counts is not None else \
                torch.ones(self.num_classes, dtype=torch.bool)
            w_col = (1.0 - self.rho) * present.to(q.dtype)
            fused = fused + w_col[:, None] * collective
            total = total + w_col
        mask = total > 0
        fused = fused / total.clamp_min(1e-12)[:, None]
        scores = (q @ fused.T) / math.sqrt(self.memory_dim)
        scores = scores.masked_fill(~mask[None, :], float("-inf"))
        if bool(mask.any()):
            r = torch.softmax(scores, dim=1) @ fused
        else:
            r = torch.zeros_like(q)
        return self.head(torch.cat([h, q + self.lam * r], dim=1))

    def forward(
        self,
        x: torch.Tensor,
        collective_memory: torch.Tensor | None = None,
        collective_counts: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Logits from the features fused with the stored and collective memories [PROPOSED].

        ``q = P_k(F_k(x))``, ``F = rho M_k + (1 - rho) Mbar``, ``a = softmax(q F^T / sqrt(m))``,
        ``logits = W_k [h; q + lambda a F]``.

        Parameters
        ----------
        x : torch.Tensor, shape (B, in_features)
        collective_memory : torch.Tensor, shape (C, m), optional
            The server's ``Mbar``.
        collective_counts : torch.Tensor, shape (C,), optional
            Its class counts; classes with 0 are left out of the attention.

        Returns
        -------
        torch.Tensor, shape (B, C)
        """
        self._check_rows(x, "x", self.in_features)
        self._check_collective(collective_memory, collective_counts)
        return self._forward(x, collective_memory, collective_counts)

    def _forward(
        self,
        x: torch.Tensor,
        collective_memory: torch.Tensor | None = None,
        collective_counts: torch.Tensor | None = None,
    ) -> torch.Tensor:
        h = self.extractor(x)
        q = self.projector(h)
        return self._head(h, q, self.ltm, collective_memory, collective_counts)

    def forward_train(
        self,
        x: torch.Tensor,
        y: torch.Tensor,
        collective_memory: torch.Tensor | None = None,
        collective_counts: torch.Tensor | None = None,
        *,
        commit: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Training forward: consolidate this batch's STM, then fuse and predict.

        Parameters
        ----------
        x : torch.Tensor, shape (B, in_features)
        y : torch.Tensor, shape (B,), int64
        collective_memory, collective_counts : torch.Tensor, optional
            As in :meth:`forward`.
        commit : bool, default=True
            Store the consolidated memory; False uses it for this prediction only (the gate
            still learns from the loss).

        Returns
        -------
        logits : torch.Tensor, shape (B, C)
        q : torch.Tensor, shape (B, m)
            The projected representations (for the memory-alignment term).
        """
        self._check_rows(x, "x", self.in_features)
        self._check_labels(y, x.shape[0], "x")
        self._check_collective(collective_memory, collective_counts)
        if not isinstance(commit, bool):
            raise TypeError(f"commit must be a bool, got {type(commit).__name__}")
        return self._forward_train(x, y, collective_memory, collective_counts, commit=commit)

    def _forward_train(
        self,
        x: torch.Tensor,
        y: torch.Tensor,
        collective_memory: torch.Tensor | None = None,
        collective_counts: torch.Tensor | None = None,
        *,
        commit: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.extractor(x)
        q = self.projector(h)
        individual = self._consolidate_q(q, y, commit=commit)
        return self._head(h, q, individual, collective_memory, collective_counts), q


# ---------------------------------------------------------------------- aggregation


def aggregate_memories(
    memories: Sequence[np.ndarray] | np.ndarray, counts: Sequence[np.ndarray] | np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Count-weighted collective memory ``Mbar[c] = sum_k n_{k,c} M_k[c] / sum_k n_{k,c}``.

    Parameters
    ----------
    memories : array-like, shape (N, C, m)
        The agents' memories.
    counts : array-like, shape (N, C)
        Non-negative class counts.

    Returns
    -------
    collective : numpy.ndarray, shape (C, m), float32
        Zero rows for classes nobody holds.
    total : numpy.ndarray, shape (C,), int64
        ``sum_k n_{k,c}``.

    Raises
    ------
    ValueError
        If the shapes disagree or a count is negative or not an integer.

    Examples
    --------
    >>> import numpy as np
    >>> from rml_fast.federated.sohip import aggregate_memories
    >>> mem, n = aggregate_memories([np.ones((2, 3)), 3 * np.ones((2, 3))], [[1, 0], [1, 2]])
    >>> mem[:, 0].tolist(), n.tolist()
    ([2.0, 3.0], [2, 2])
    """
    mem = check_array(memories, "memories", ndim=3)
    cnt = check_array(counts, "counts", dtypes=None, ndim=2)
    if cnt.shape != mem.shape[:2]:
        raise ValueError(
            f"counts must have shape (N, C) = {mem.shape[:2]} to match memories, got {cnt.shape}"
        )
    if not np.all(np.mod(cnt, 1) == 0) or np.any(cnt < 0):
        raise ValueError("counts must be non-negative integers")
    cnt = cnt.astype(np.int64)
    total = cnt.sum(axis=0)
    weighted = np.einsum("nc,ncm->cm", cnt.astype(np.float64), mem.astype(np.float64))
    out = np.where(total[:, None] > 0, weighted / np.maximum(total, 1)[:, None], 0.0)
    return out.astype(np.float32), total


# ---------------------------------------------------------------------- data


def label_skew_split(
    X: Any,
    y: Any,
    num_clients: int,
    classes_per_client: int = 2,
    *,
    test_fraction: float = 0.5,
    rng: Any = None,
) -> list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    """Pathological non-IID split: each client holds ``classes_per_client`` classes.

    Class assignment cycles through a random permutation of the classes so every class is held by
    about ``num_clients * classes_per_client / C`` clients (client ``k`` takes the next
    ``classes_per_client`` classes of the cycle, so with 10 clients and 2 of 10 classes each,
    clients ``k`` and ``k + 5`` hold the same pair); a class's samples are shared evenly among
    its holders; each client's share is split into train and test in the same proportions per
    class (personalised evaluation on the client's own label distribution, as in the authors'
    heterogeneous-FL papers).

    Parameters
    ----------
    X : array-like, shape (n, p)
    y : array-like, shape (n,), integer labels in ``[0, C)``
    num_clients : int
    classes_per_client : int, default=2
    test_fraction : float, default=0.5
    rng : numpy.random.Generator, int or None

    Returns
    -------
    list of (X_train, y_train, X_test, y_test)
        One tuple per client; X float32, y int64.

    Examples
    --------
    >>> import numpy as np
    >>> from rml_fast.federated.sohip import label_skew_split
    >>> X, y = np.random.default_rng(0).normal(size=(100, 4)), np.repeat(np.arange(5), 20)
    >>> parts = label_skew_split(X, y, num_clients=5, classes_per_client=2, rng=0)
    >>> [len(np.unique(p[1])) for p in parts]
    [2, 2, 2, 2, 2]
    """
    X = check_array(X, "X", ndim=2)
    y = check_array(y, "y", dtypes=None, ndim=1)
    if len(X) != len(y):
        raise ValueError(f"X and y must have the same length, got {len(X)} and {len(y)}")
    if not np.all(np.mod(y, 1) == 0) or np.any(y < 0):
        raise ValueError("y must hold non-negative integer labels")
    y = y.astype(np.int64)
    classes = np.unique(y)
    num_clients = int(check_scalar(num_clients, "num_clients", Interval("int", 1, None)))
    classes_per_client = int(
        check_scalar(classes_per_client, "classes_per_client", Interval("int", 1, len(classes)))
    )
    test_fraction = float(check_scalar(test_fraction, "test_fraction", Interval("real", 0.0, 1.0, "neither")))
    gen = check_rng(rng)
    order = gen.permutation(classes)
    held = [
        [int(order[(k * classes_per_client + j) % len(classes)]) for j in range(classes_per_client)]
        for k in range(num_clients)
    ]
    holders: dict[int, list[int]] = {}
    for k, cls in enumerate(held):
        for c in cls:
            holders.setdefault(c, []).append(k)
    idx: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
    for c, ks in sorted(holders.items()):
        members = gen.permutation(np.flatnonzero(y == c))
        for k, share in zip(ks, np.array_split(members, len(ks)), strict=True):
            idx[k].append(share)
    out = []
    for k in range(num_clients):
        tr, te = [], []
        for share in idx[k]:
            n_test = round(test_fraction * len(share))
            te.append(share[:n_test])
            tr.append(share[n_test:])
        tr_i, te_i = np.concatenate(tr), np.concatenate(te)
        out.append((X[tr_i].astype(np.float32), y[tr_i], X[te_i].astype(np.float32), y[te_i]))
    return out


# ---------------------------------------------------------------------- clients


class _AgentClient(FederatedClient):
    """Shared machinery: validation, deterministic local epochs, state, evaluation."""

    fusion = False

    def __init__(
        self,
        client_id: int,
        X_train: Any,
        y_train: Any,
        X_test: Any,
        y_test: Any,
        *,
        num_classes: int,
        arch: int = 0,
        image_shape: tuple[int, int] | None = None,
        memory_dim: int = 32,
        lr: float = 0.01,
        batch_size: int = 32,
        local_epochs: int = 1,
        seed: int = 0,
        threads: int = 1,
        **agent_kwargs: Any,
    ) -> None:
        self.client_id = int(check_scalar(client_id, "client_id", Interval("int", 0, None)))
        Xtr = check_array(X_train, "X_train", ndim=2)
        Xte = check_array(X_test, "X_test", ndim=2)
        ytr = check_array(y_train, "y_train", dtypes=None, ndim=1)
        yte = check_array(y_test, "y_test", dtypes=None, ndim=1)
        self.num_classes = int(check_scalar(num_classes, "num_classes", Interval("int", 2, None)))
        if len(Xtr) != len(ytr) or len(Xte) != len(yte):
            raise ValueError("X_train/y_train and X_test/y_test must have matching lengths")
        if len(Xtr) == 0:
            raise ValueError("X_train must hold at least one sample")
        if Xte.shape[1] != Xtr.shape[1]:
            raise ValueError(
                f"X_test must have {Xtr.shape[1]} columns like X_train, got {Xte.shape[1]}"
            )
        for name, lab in (("y_train", ytr), ("y_test", yte)):
            if lab.size and (np.any(np.mod(lab, 1) != 0) or lab.min() < 0 or lab.max() >= self.num_classes):
                raise ValueError(f"{name} must hold integer labels in [0, {self.num_classes})")
        self.lr = float(check_scalar(lr, "lr", Interval("real", 0.0, None, "neither")))
        self.batch_size = int(check_scalar(batch_size, "batch_size", Interval("int", 1, None)))
        self.local_epochs = int(check_scalar(local_epochs, "local_epochs", Interval("int", 1, None)))
        self.seed = int(check_scalar(seed, "seed", Interval("int", 0, None)))
        self.threads = int(check_scalar(threads, "threads", Interval("int", 1, None)))
        self.X_train = torch.from_numpy(np.array(Xtr, dtype=np.float32, order="C", copy=True))
        self.y_train = torch.from_numpy(ytr.astype(np.int64))
        self.X_test = torch.from_numpy(np.array(Xte, dtype=np.float32, order="C", copy=True))
        self.y_test = torch.from_numpy(yte.astype(np.int64))
        self.class_counts = np.bincount(ytr.astype(np.int64), minlength=self.num_classes).astype(np.int64)
        self.agent = SoHipAgent(
            Xtr.shape[1], self.num_classes, arch=arch, memory_dim=memory_dim,
            image_shape=image_shape, fusion=self.fusion, seed=_agent_seed(self.seed, self.client_id),
            **agent_kwargs,
        )  # fmt: skip
        self.optimizer = torch.optim.Adam(self.agent.parameters(), lr=self.lr)

    # state ---------------------------------------------------------------
    def get_state(self) -> Message:
        """Model weights, memory buffers and optimizer state (kept on the client, never sent).

        Returns
        -------
        dict[str, numpy.ndarray]
        """
        state = {f"model/{k}": v.detach().cpu().numpy().copy() for k, v in self.agent.state_dict().items()}
        state.update(optimizer_state_to_arrays(self.optimizer))
        return state

    def set_state(self, state: Message) -> None:
        """Restore :meth:`get_state` (an empty state keeps the fresh initialisation).

        Parameters
        ----------
        state : dict[str, numpy.ndarray]
        """
        check_message(state, "state")
        model = {k[len("model/"):]: torch.from_numpy(np.array(v, copy=True))
                 for k, v in state.items() if k.startswith("model/")}
        if model:
            self.agent.load_state_dict(model)
        optimizer_state_from_arrays(self.optimizer, dict(state))

    # hooks ---------------------------------------------------------------
    def _read(self, message: Message) -> None:
        """Parse the broadcast (default: nothing to read)."""

    def _loss(self, xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(self.agent._forward(xb), yb)

    def _predict(self, x: torch.Tensor) -> torch.Tensor:
        return self.agent._forward(x)

    def _upload(self) -> Message:
        return {}

    # protocol ------------------------------------------------------------
    def evaluate(self) -> tuple[int, int]:
        """Correct predictions and size of the local test set.

        Returns
        -------
        (int, int)
        """
        if len(self.y_test) == 0:
            return 0, 0
        self.agent.eval()
        with torch.no_grad():
            pred = self._predict(self.X_test).argmax(1)
        return int((pred == self.y_test).sum()), len(self.y_test)

    def handle(self, phase: str, server_round: int, message: Message) -> Message:
        """Local epochs on the broadcast, then the upload and the test counts.

        Parameters
        ----------
        phase : str
            ``"fit"``.
        server_round : int
            The 0-based round (seeds the batch order with the seed and the client id).
        message : dict[str, numpy.ndarray]
            The server's broadcast.

        Returns
        -------
        dict[str, numpy.ndarray]
            The method's upload plus 0-d ``test_correct`` / ``test_total``.
        """
        if phase != "fit":
            raise ValueError(f"phase must be 'fit', got {phase!r}")
        server_round = _check_round(server_round)
        check_message(message)
        self._read(message)
        with torch_threads(self.threads):
            gen = round_generator(self.seed, self.client_id, server_round)
            n = len(self.y_train)
            self.agent.train()
            for _ in range(self.local_epochs):
                perm = torch.randperm(n, generator=gen)
                for start in range(0, n, self.batch_size):
                    b = perm[start:start + self.batch_size]
                    loss = self._loss(self.X_train[b], self.y_train[b])
                    self.optimizer.zero_grad()
                    loss.backward()
                    self.optimizer.step()
            reply = self._upload()
            correct, total = self.evaluate()
        reply["test_correct"] = np.array(correct, dtype=np.int64)
        reply["test_total"] = np.array(total, dtype=np.int64)
        return reply


class SoHipClient(_AgentClient):
    """A SoHip agent on the federated protocol: uploads only its LTM ``(C, m)`` and counts ``(C,)``.

    Each round: read ``Mbar`` and its counts, run ``local_epochs`` of Adam on
    ``CE(logits, y) + mu ||q - stopgrad(Mbar[y])||^2`` (consolidating every batch's STM into
    the LTM), upload ``memory`` (``M_k``, float32 ``(C, m)``, optionally clipped and noised) and
    ``counts`` (the local training samples per class), plus the 0-d test counts.

    Parameters
    ----------
    client_id : int
        The client's id (seeds its initialisation and batch order with ``seed``).
    X_train, y_train, X_test, y_test : array-like
        Local data ``(n, p)`` and labels ``(n,)`` in ``[0, num_classes)``.
    num_classes : int
        ``C``.
    arch : int, default=0
        Extractor architecture (:data:`ARCHITECTURES`); agents may differ.
    image_shape : tuple of int, optional
        Needed by the CNN architectures.
    memory_dim : int, default=32
        ``m``.
    lr : float, default=0.01
        Adam learning rate.
    batch_size : int, default=32
    local_epochs : int, default=1
    seed : int, default=0
    threads : int, default=1
        torch threads inside :meth:`handle`.
    mu : float, default=1.0
        Weight of the memory-alignment term ``mu * mean_j (q_j - Mbar[y]_j)^2`` (the squared
        distance averaged over the ``m`` coordinates, as FedProto's MSE; the spec's 0.1 with a
        summed distance was weaker than FedProto's pull on digits) [PROPOSED].
    upload_noise : float, default=0.0
        Std of Gaussian noise added to the uploaded memory after clipping each row to ``clip``
        (per-(seed, client, round) stream) [PROPOSED privacy option].
    clip : float, optional
        Row-norm clip of the uploaded memory (required when ``upload_noise > 0``).
    consolidation : {"batch", "round"}, default="batch"
        ``"batch"``: every batch's STM is consolidated into the stored LTM as it is seen;
        ``"round"``: the batches' consolidated memories are used for prediction only (the gate
        still learns) and the LTM is consolidated once per round from the STM of the whole
        local training set in eval mode ("sleep" consolidation) [PROPOSED, both].
    **agent_kwargs
        ``gate``, ``lam``, ``learn_lambda``, ``rho`` of :class:`SoHipAgent`.

    Examples
    --------
    >>> import numpy as np
    >>> from rml_fast.federated.sohip import SoHipClient
    >>> rng = np.random.default_rng(0)
    >>> X, y = rng.normal(size=(40, 6)).astype(np.float32), np.repeat([2, 5], 20)
    >>> client = SoHipClient(0, X, y, X, y, num_classes=10, memory_dim=4)
    >>> reply = client.handle("fit", 0, {"memory": np.zeros((10, 4), np.float32),
    ...                                  "counts": np.zeros(10, np.int64)})
    >>> {k: v.shape for k, v in reply.items()}
    {'memory': (10, 4), 'counts': (10,), 'test_correct': (), 'test_total': ()}
    >>> reply["counts"].tolist()
    [0, 0, 20, 0, 0, 20, 0, 0, 0, 0]
    """

    fusion = True

    def __init__(
        self,
        client_id: int,
        X_train: Any,
        y_train: Any,
        X_test: Any,
        y_test: Any,
        *,
        num_classes: int,
        mu: float = 1.0,
        upload_noise: float = 0.0,
        clip: float | None = None,
        consolidation: str = "batch",
        **kwargs: Any,
    ) -> None:
        if consolidation not in ("batch", "round"):
            raise ValueError(f"consolidation must be 'batch' or 'round', got {consolidation!r}")
        self.consolidation = consolidation
        self.mu = float(check_scalar(mu, "mu", Interval("real", 0.0, None)))
        self.upload_noise = float(check_scalar(upload_noise, "upload_noise", Interval("real", 0.0, None)))
        if clip is not None:
            clip = float(check_scalar(clip, "clip", Interval("real", 0.0, None, "neither")))
        if self.upload_noise > 0 and clip is None:
            raise ValueError("upload_noise > 0 needs a row-norm clip (clip=...) to bound sensitivity")
        self.clip = clip
        super().__init__(client_id, X_train, y_train, X_test, y_test, num_classes=num_classes, **kwargs)
        self._round = 0
        self._collective: torch.Tensor | None = None
        self._collective_counts: torch.Tensor | None = None

    def _read(self, message: Message) -> None:
        C, m = self.num_classes, self.agent.memory_dim
        if "memory" not in message or "counts" not in message:
            raise ValueError("the SoHip broadcast must hold 'memory' (C, m) and 'counts' (C,)")
        mem, cnt = message["memory"], message["counts"]
        if mem.shape != (C, m) or cnt.shape != (C,):
            raise ValueError(
                f"broadcast memory/counts must have shapes {(C, m)} and {(C,)}, "
                f"got {mem.shape} and {cnt.shape}"
            )
        cnt_t = torch.from_numpy(np.asarray(cnt, dtype=np.int64).copy())
        if bool((cnt_t > 0).any()):
            self._collective = torch.from_numpy(np.asarray(mem, dtype=np.float32).copy())
            self._collective_counts = cnt_t
        else:
            self._collective = self._collective_counts = None

    def _loss(self, xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
        logits, q = self.agent._forward_train(xb, yb, self._collective, self._collective_counts,
                                             commit=self.consolidation == "batch")
        loss = F.cross_entropy(logits, yb)
        if self.mu > 0 and self._collective is not None and self._collective_counts is not None:
            have = self._collective_counts[yb] > 0
            if bool(have.any()):
                target = self._collective[yb[have]]
                loss = loss + self.mu * ((q[have] - target) ** 2).mean()
        return loss

    def _predict(self, x: torch.Tensor) -> torch.Tensor:
        return self.agent._forward(x, self._collective, self._collective_counts)

    def _upload(self) -> Message:
        if self.consolidation == "round":
            self.agent.eval()
            with torch.no_grad():
                q = self.agent.projector(self.agent.extractor(self.X_train))
                self.agent._consolidate_q(q, self.y_train, commit=True)
        mem = self.agent.memory().numpy().astype(np.float32)
        if self.clip is not None:
            norms = np.linalg.norm(mem, axis=1, keepdims=True)
            mem = (mem * np.minimum(1.0, self.clip / np.maximum(norms, 1e-12))).astype(np.float32)
        if self.upload_noise > 0:
            ss = np.random.SeedSequence([self.seed, self.client_id, self._round, 0x4E4F])
            noise = np.random.default_rng(ss).normal(0.0, self.upload_noise, mem.shape)
            mem = (mem + noise * (self.class_counts > 0)[:, None]).astype(np.float32)
        return {"memory": mem, "counts": self.class_counts.copy()}

    def handle(self, phase: str, server_round: int, message: Message) -> Message:
        """One SoHip round (see the class docstring).

        Parameters
        ----------
        phase : str
            ``"fit"``.
        server_round : int
            The 0-based round.
        message : dict[str, numpy.ndarray]
            ``memory`` (C, m) float32 and ``counts`` (C,) int64 from :class:`SoHipServer`.

        Returns
        -------
        dict[str, numpy.ndarray]
            ``memory`` (C, m), ``counts`` (C,), ``test_correct`` and ``test_total`` (0-d).
        """
        self._round = _check_round(server_round)
        return super().handle(phase, server_round, message)


# ---------------------------------------------------------------------- server


class SoHipServer(FederatedServer):
    """Collects the agents' memories and broadcasts the count-weighted collective memory.

    ``Mbar[c] = sum_k n_{k,c} M_k[c] / sum_k n_{k,c}`` over the round's participants; a class
    nobody uploaded keeps its previous collective memory and count. FedProto's server does the
    same with prototypes (:class:`rml_fast.federated.baselines.FedProtoServer`).

    Parameters
    ----------
    num_classes : int
        ``C``.
    memory_dim : int
        ``m``.
    fraction : float, default=1.0
        Share of the clients that take part in each round (at least one), drawn from
        ``(seed, round)``.
    seed : int, default=0

    Examples
    --------
    >>> import numpy as np
    >>> from rml_fast.federated.sohip import SoHipServer
    >>> server = SoHipServer(3, 2)
    >>> server.aggregate("fit", 0, {
    ...     0: {"memory": np.ones((3, 2), np.float32), "counts": np.array([1, 0, 0]),
    ...         "test_correct": np.array(3), "test_total": np.array(4)},
    ...     1: {"memory": 3 * np.ones((3, 2), np.float32), "counts": np.array([1, 1, 0]),
    ...         "test_correct": np.array(4), "test_total": np.array(4)}})
    >>> server.configure("fit", 1)["memory"][:, 0].tolist(), server.metrics(0)["accuracy"]
    ([2.0, 3.0, 0.0], 0.875)
    """

    upload_keys: tuple[str, ...] = ("memory", "counts")

    def __init__(self, num_classes: int, memory_dim: int, *, fraction: float = 1.0, seed: int = 0) -> None:
        self.num_classes = int(check_scalar(num_classes, "num_classes", Interval("int", 2, None)))
        self.memory_dim = int(check_scalar(memory_dim, "memory_dim", Interval("int", 1, None)))
        self.fraction = float(check_scalar(fraction, "fraction", Interval("real", 0.0, 1.0, "right")))
        self.seed = int(check_scalar(seed, "seed", Interval("int", 0, None)))
        self.memory = np.zeros((self.num_classes, self.memory_dim), np.float32)
        self.counts = np.zeros(self.num_classes, np.int64)
        self._accuracy = float("nan")

    def select(self, server_round: int, client_ids: Sequence[int]) -> list[int]:
        """``ceil(fraction * K)`` clients drawn from ``(seed, round)``, ascending.

        Parameters
        ----------
        server_round : int
        client_ids : Sequence[int]

        Returns
        -------
        list of int
        """
        ids = list(client_ids)
        if self.fraction >= 1.0:
            return ids
        k = max(1, math.ceil(self.fraction * len(ids)))
        gen = np.random.default_rng(np.random.SeedSequence([self.seed, int(server_round), 0x53454C]))
        return sorted(int(i) for i in gen.choice(ids, size=k, replace=False))

    def configure(self, phase: str, server_round: int) -> Message:
        """Broadcast ``memory`` (C, m) float32 and ``counts`` (C,) int64.

        Parameters
        ----------
        phase : str
        server_round : int

        Returns
        -------
        dict[str, numpy.ndarray]
        """
        return {"memory": self.memory.copy(), "counts": self.counts.copy()}

    def aggregate(self, phase: str, server_round: int, replies: Mapping[int, Message]) -> None:
        """Count-weighted mean of the uploaded memories; mean per-client test accuracy.

        Parameters
        ----------
        phase : str
        server_round : int
        replies : Mapping[int, dict[str, numpy.ndarray]]

        Raises
        ------
        ValueError
            If a reply lacks ``memory``/``counts`` or has the wrong shapes.
        """
        shape = (self.num_classes, self.memory_dim)
        mems, cnts, accs = [], [], []
        for cid in sorted(replies):
            reply = check_message(replies[cid], f"reply of client {cid}")
            if any(k not in reply for k in self.upload_keys):
                raise ValueError(f"reply of client {cid} must hold {self.upload_keys}")
            if reply["memory"].shape != shape or reply["counts"].shape != (self.num_classes,):
                raise ValueError(
                    f"reply of client {cid}: memory must be {shape} and counts ({self.num_classes},), "
                    f"got {reply['memory'].shape} and {reply['counts'].shape}"
                )
            mems.append(reply["memory"])
            cnts.append(reply["counts"])
            if "test_total" in reply and int(reply["test_total"]) > 0:
                accs.append(int(reply["test_correct"]) / int(reply["test_total"]))
        if mems:
            mem, total = aggregate_memories(np.stack(mems), np.stack(cnts))
            have = total > 0
            self.memory[have] = mem[have]
            self.counts[have] = total[have]
        self._accuracy = float(np.mean(accs)) if accs else float("nan")

    def metrics(self, server_round: int) -> dict[str, float]:
        """``accuracy``: the mean of the participants' local test accuracies.

        Parameters
        ----------
        server_round : int

        Returns
        -------
        dict[str, float]
        """
        return {"accuracy": self._accuracy}

    def get_state(self) -> Message:
        """Collective memory, counts and the last accuracy.

        Returns
        -------
        dict[str, numpy.ndarray]
        """
        return {"memory": self.memory.copy(), "counts": self.counts.copy(),
                "accuracy": np.array(self._accuracy)}

    def set_state(self, state: Message) -> None:
        """Restore :meth:`get_state`.

        Parameters
        ----------
        state : dict[str, numpy.ndarray]
        """
        check_message(state, "state")
        if state:
            self.memory = np.array(state["memory"], dtype=np.float32)
            self.counts = np.array(state["counts"], dtype=np.int64)
            self._accuracy = float(state["accuracy"])
