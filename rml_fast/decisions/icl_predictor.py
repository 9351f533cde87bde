"""In-context tabular predictors: black boxes conditioned on a context table.

ASR-ICL (arXiv 2605.31272) studies recourse for *in-context learning* (ICL) predictors
``f_C(x)``: a model that reads a context ``C = {(x_j, y_j)}`` and the query ``x`` and returns
class probabilities, without any weight update (TabPFN, LLMs prompted with a table). The
paper's predictors (TabPFN weights, LLM APIs) are not available offline; two stand-ins are
provided here, both with the context bound at construction (the ``ICLPredictor`` protocol:
``predict_proba(X) -> (m, K)``):

* :class:`AttentionICL` -- one layer of softmax attention over the (standardised) context,
  the exact form ICL reduces to in a linear-attention/kernel-regression view:
  ``f_C(x) = sum_j softmax_j(-||x - x_j||^2 / T) onehot(y_j)``.
* :class:`TransformerICL` -- a small TinyTransformer of the zoo
  (:class:`rml_fast.models.transformer.TinyTransformer`), meta-trained on synthetic tabular
  classification tasks (random linear and random-MLP teachers; PROPOSED, in the spirit of
  prior-fitted networks) to predict the label of a query from the sequence
  ``x_1, y_1, ..., x_n, y_n, x``. :func:`train_icl_transformer` trains it (progress bar,
  resumable checkpoints); :func:`pretrained_icl_transformer` trains the default recipe once
  and caches it next to the zoo models.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from rml_fast._validation import Interval, check_array, check_rng, check_scalar, check_tensor
from rml_fast.models.transformer import TinyConfig, TinyTransformer

logger = logging.getLogger(__name__)

__all__ = ["AttentionICL", "ICLTabularNet", "TransformerICL", "pretrained_icl_cached",
           "pretrained_icl_transformer", "train_icl_transformer"]


def _context(
    context_X: Any, context_y: Any, n_classes: int | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    Xc = check_array(context_X, "context_X", ndim=2)
    yc = np.asarray(context_y)
    if Xc.shape[0] < 1:
        raise ValueError(f"context_X must hold at least one example (row), got shape {Xc.shape}")
    if yc.ndim != 1 or yc.shape[0] != Xc.shape[0]:
        raise ValueError(f"context_y must have shape ({Xc.shape[0]},) (one label per row of "
                         f"context_X), got {yc.shape}")
    if yc.dtype.kind not in "iub" or (yc < 0).any():
        raise TypeError("context_y must hold non-negative integer class labels")
    k = int(yc.max()) + 1
    if n_classes is not None:
        n_classes = int(check_scalar(n_classes, "n_classes", Interval("int", 2, None)))
        if k > n_classes:
            raise ValueError(f"context_y holds label {k - 1} >= n_classes={n_classes}")
        k = n_classes
    k = max(k, 2)
    Xc = np.asarray(Xc, dtype=np.float64)
    mean = Xc.mean(axis=0)
    std = Xc.std(axis=0)
    std = np.where(std > 0, std, 1.0)
    return Xc, yc.astype(np.int64), mean, std, k


class AttentionICL:
    """One-layer softmax-attention in-context classifier (an offline ICL surrogate).

    ``f_C(x) = sum_j softmax_j(-||z(x) - z(x_j)||^2 / T) onehot(y_j)`` with ``z`` the
    standardisation by the context's mean and standard deviation.

    Parameters
    ----------
    context_X : array-like of shape (n, d)
        Context inputs.
    context_y : array-like of shape (n,), int
        Context labels in ``0..K-1``.
    temperature : float, default=1.0
        ``T`` (in squared standardised units).
    n_classes : int or None, default=None
        ``K`` (default: ``max(context_y) + 1``, at least 2).

    Attributes
    ----------
    classes_ : ndarray of shape (K,)
        ``0..K-1``.

    Examples
    --------
    >>> import numpy as np
    >>> icl = AttentionICL(np.array([[0.0], [1.0]]), np.array([0, 1]), temperature=4.0)
    >>> icl.predict_proba(np.array([[0.0], [1.0]])).round(3)
    array([[0.731, 0.269],
           [0.269, 0.731]])
    """

    def __init__(self, context_X: Any, context_y: Any, *, temperature: float = 1.0,
                 n_classes: int | None = None) -> None:
        self.temperature = check_scalar(temperature, "temperature",
                                        Interval("real", 0, None, "neither"))
        self.context_X, self.context_y, self._mean, self._std, k = _context(
            context_X, context_y, n_classes)
        self.classes_ = np.arange(k)
        self._Z = (self.context_X - self._mean) / self._std
        self._Y = np.eye(k)[self.context_y]

    def predict_proba(self, X: Any) -> np.ndarray:
        """Class probabilities ``(m, K)`` of queries ``X`` of shape (m, d).

        Examples
        --------
        >>> import numpy as np
        >>> icl = AttentionICL(np.array([[0.0], [2.0]]), np.array([0, 1]))
        >>> icl.predict_proba(np.array([[1.0]]))
        array([[0.5, 0.5]])
        """
        X = check_array(X, "X", ndim=2)
        if X.shape[1] != self._Z.shape[1]:
            raise ValueError(f"X must have {self._Z.shape[1]} features, got {X.shape[1]}")
        Q = (np.asarray(X, dtype=np.float64) - self._mean) / self._std
        d2 = ((Q * Q).sum(1)[:, None] - 2.0 * Q @ self._Z.T + (self._Z * self._Z).sum(1)[None])
        s = -np.maximum(d2, 0.0) / self.temperature
        s -= s.max(axis=1, keepdims=True)
        w = np.exp(s)
        w /= w.sum(axis=1, keepdims=True)
        return w @ self._Y

    def predict(self, X: Any) -> np.ndarray:
        """Predicted classes ``(m,)`` (argmax of :meth:`predict_proba`).

        Examples
        --------
        >>> import numpy as np
        >>> AttentionICL(np.array([[0.0], [2.0]]), np.array([0, 1])).predict([[1.9]])
        array([1])
        """
        return np.argmax(self.predict_proba(X), axis=1)


# --------------------------------------------------------------------------- transformer ICL


class ICLTabularNet(nn.Module):
    """A TinyTransformer reading ``x_1, y_1, ..., x_n, y_n, x`` and predicting ``y``.

    Feature tokens are ``W_x x + W_E[k_max]`` (features zero-padded to ``d_max``), label tokens
    ``W_E[y]``; the logits of the first ``k_max`` vocabulary entries at every feature token
    predict that example's label from the examples before it (causal attention).

    Parameters
    ----------
    d_max : int, default=8
        Largest number of features.
    k_max : int, default=4
        Largest number of classes.
    n_max : int, default=64
        Longest context (examples); sequences hold up to ``n_max + 1`` examples (the context
        and the query).
    n_layers, d_model, n_heads, d_mlp : int, default=(2, 64, 4, 128)
        Shape of the :class:`~rml_fast.models.transformer.TinyTransformer`.
    seed : int, default=0
        Weight initialisation.

    Examples
    --------
    >>> import torch
    >>> net = ICLTabularNet(d_max=3, k_max=2, n_max=4, d_model=16, n_heads=2, d_mlp=32)
    >>> xs, ys = torch.randn(5, 4, 3), torch.randint(0, 2, (5, 4))
    >>> tuple(net(xs, ys).shape)          # logits at each of the 4 feature tokens
    (5, 4, 2)
    """

    def __init__(self, *, d_max: int = 8, k_max: int = 4, n_max: int = 64, n_layers: int = 2,
                 d_model: int = 64, n_heads: int = 4, d_mlp: int = 128, seed: int = 0) -> None:
        d_max = check_scalar(d_max, "d_max", Interval("int", 1, None))
        k_max = check_scalar(k_max, "k_max", Interval("int", 2, None))
        n_max = check_scalar(n_max, "n_max", Interval("int", 1, None))
        seed = check_scalar(seed, "seed", Interval("int", None, None))
        super().__init__()
        self.d_max, self.k_max, self.n_max = int(d_max), int(k_max), int(n_max)
        cfg = TinyConfig(n_layers=n_layers, d_model=d_model, n_heads=n_heads, d_mlp=d_mlp,
                         n_ctx=2 * self.n_max + 2, d_vocab=self.k_max + 1)
        self.transformer = TinyTransformer(cfg, seed=seed)
        gen = torch.Generator().manual_seed(seed + 7)
        self.W_x = nn.Parameter(torch.randn(self.d_max, d_model, generator=gen) / self.d_max**0.5)
        self.hparams = {"d_max": self.d_max, "k_max": self.k_max, "n_max": self.n_max,
                        "n_layers": n_layers, "d_model": d_model, "n_heads": n_heads,
                        "d_mlp": d_mlp, "seed": seed}

    def forward(self, xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
        """Logits ``(B, L, k_max)`` at the feature tokens of ``xs (B, L, d<=d_max)``.

        ``ys (B, L)`` are the labels of all but possibly the last example (the label of
        example ``L`` is never read by the logits of feature token ``L``).

        Examples
        --------
        >>> import torch
        >>> net = ICLTabularNet(d_max=2, k_max=3, n_max=4, d_model=8, n_heads=2, d_mlp=8)
        >>> tuple(net(torch.zeros(1, 3, 2), torch.zeros(1, 3, dtype=torch.long)).shape)
        (1, 3, 3)
        """
        # shape and dtype checks only: a finiteness scan would sync every training step, and
        # NaN features propagate to NaN logits
        check_tensor(xs, "xs", ndim=3, finite=False)
        check_tensor(ys, "ys", floating=False)
        if ys.dtype.is_floating_point or ys.dtype.is_complex or ys.dtype == torch.bool:
            raise TypeError(f"ys must hold integer class labels, got dtype {ys.dtype}")
        if tuple(ys.shape) != tuple(xs.shape[:2]):
            raise ValueError(f"ys must have shape (B, L) = {tuple(xs.shape[:2])} like the first "
                             f"two axes of xs, got {tuple(ys.shape)}")
        if not (1 <= xs.shape[1] <= self.n_max + 1 and xs.shape[2] <= self.d_max):
            raise ValueError(f"xs must have shape (B, L, d) with 1 <= L <= n_max + 1 = "
                             f"{self.n_max + 1} and d <= d_max = {self.d_max}, got "
                             f"{tuple(xs.shape)}")
        tt = self.transformer
        B, L, d = xs.shape
        xs = nn.functional.pad(xs, (0, self.d_max - d)) if d < self.d_max else xs
        x_tok = xs @ self.W_x.to(xs.dtype) + tt.W_E[self.k_max].to(xs.dtype)
        y_tok = tt.W_E[ys.clamp(0, self.k_max - 1)].to(xs.dtype)
        seq = torch.stack([x_tok, y_tok], dim=2).reshape(B, 2 * L, -1)
        resid = seq + tt.W_pos[: 2 * L].to(xs.dtype)
        for block in tt.blocks:
            resid = block(resid)
        if tt.ln_final is not None:
            resid = tt.ln_final(resid)
        logits = resid[:, 0::2] @ tt.unembed.to(xs.dtype) + tt.b_U.to(xs.dtype)
        return logits[..., : self.k_max]


def _sample_tasks(gen: torch.Generator, batch: int, n: int, d_max: int, k_max: int):
    """Synthetic tasks (PROPOSED prior): random linear or one-hidden-layer tanh teachers."""
    d = torch.randint(1, d_max + 1, (batch,), generator=gen)
    k = torch.randint(2, k_max + 1, (batch,), generator=gen)
    fmask = (torch.arange(d_max)[None] < d[:, None]).float()
    xs = torch.randn(batch, n, d_max, generator=gen) * fmask[:, None]
    W = torch.randn(batch, d_max, k_max, generator=gen) * (2.0 / d.float().sqrt())[:, None, None]
    lin = xs @ W
    A = torch.randn(batch, d_max, 16, generator=gen) * (1.5 / d.float().sqrt())[:, None, None]
    c = torch.randn(batch, 1, 16, generator=gen) * 0.5
    V = torch.randn(batch, 16, k_max, generator=gen)
    mlp = torch.tanh(xs @ A + c) @ V
    use_lin = (torch.rand(batch, generator=gen) < 0.5)[:, None, None]
    logits = torch.where(use_lin, lin, mlp) + torch.randn(batch, 1, k_max, generator=gen) * 0.5
    cmask = torch.arange(k_max)[None] < k[:, None]
    gumbel = -torch.log(-torch.log(torch.rand(batch, n, k_max, generator=gen).clamp_min(1e-12)))
    noisy = (logits / 0.1 + gumbel).masked_fill(~cmask[:, None], float("-inf"))
    ys = noisy.argmax(-1)
    return xs, ys, cmask


@dataclass(frozen=True)
class _TrainConfig:
    steps: int
    batch: int
    lr: float
    seed: int
    net: dict[str, Any]


def train_icl_transformer(steps: int = 2000, *, batch: int = 32, lr: float = 1e-3, seed: int = 0,
                          checkpoint: str | Path | None = None, resume: bool = True,
                          checkpoint_every: int = 200, progress: bool = True,
                          **net_kwargs: Any) -> ICLTabularNet:
    """Meta-train an :class:`ICLTabularNet` on synthetic tabular tasks.

    Minimises the mean cross-entropy ``-log softmax(f(x_1, y_1, ..., x_j))[y_j]`` over every
    example ``j <= n_max + 1`` of every sequence, for fresh batches of random tasks (PROPOSED prior: inputs
    ``N(0, I)`` with 1..d_max features, labels from a random linear or one-hidden-layer tanh
    teacher over 2..k_max classes, with Gumbel label noise at temperature 0.1), Adam with
    gradient clipping at 1.

    Parameters
    ----------
    steps : int, default=2000
        Total optimiser steps.
    batch : int, default=32
        Tasks per step.
    lr : float, default=1e-3
    seed : int, default=0
        Seeds the weights and the task stream.
    checkpoint : str, Path or None, default=None
        File holding the model, optimiser and task-stream state, written every
        ``checkpoint_every`` steps, on ``KeyboardInterrupt`` and at the end. With ``resume``,
        a run continues from it: k steps, then a call with ``steps=N`` resumes at k and gives
        the same weights as N uninterrupted steps.
    resume : bool, default=True
        Continue from ``checkpoint`` if it exists (it must hold the same configuration except
        ``steps``; otherwise ``ValueError`` lists the differences). False starts fresh.
    checkpoint_every : int, default=200
    progress : bool, default=True
        tqdm bar with the running loss.
    **net_kwargs
        Shape of the network (:class:`ICLTabularNet` parameters, ``seed`` excluded).

    Returns
    -------
    ICLTabularNet
        In ``eval`` mode.

    Examples
    --------
    >>> net = train_icl_transformer(3, batch=4, progress=False, d_max=2, k_max=2, n_max=8,
    ...                             d_model=16, n_heads=2, d_mlp=32)
    >>> net.training, net.d_max
    (False, 2)
    """
    steps = int(check_scalar(steps, "steps", Interval("int", 0, None)))
    batch = int(check_scalar(batch, "batch", Interval("int", 1, None)))
    lr = float(check_scalar(lr, "lr", Interval("real", 0, None, "neither")))
    checkpoint_every = int(check_scalar(checkpoint_every, "checkpoint_every",
                                        Interval("int", 1, None)))
    net = ICLTabularNet(seed=seed, **net_kwargs)
    cfg = _TrainConfig(steps=steps, batch=batch, lr=lr, seed=seed, net=net.hparams)
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(seed + 1)
    start = 0
    path = Path(checkpoint) if checkpoint is not None else None
    if path is not None and resume and path.is_file():
        state = torch.load(path, map_location="cpu", weights_only=False)
        old = {k: v for k, v in state["config"].items() if k != "steps"}
        new = {k: v for k, v in asdict(cfg).items() if k != "steps"}
        if old != new:
            diff = {k: (old.get(k), new.get(k)) for k in set(old) | set(new)
                    if old.get(k) != new.get(k)}
            raise ValueError(f"checkpoint {path} holds another configuration (old, new): {diff}; "
                             "pass resume=False to start fresh")
        net.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        gen.set_state(state["gen"])
        start = min(int(state["step"]), steps)

    def save(step: int) -> None:
        if path is None:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        torch.save({"model": net.state_dict(), "opt": opt.state_dict(), "gen": gen.get_state(),
                    "step": step, "config": asdict(cfg)}, tmp)
        tmp.replace(path)

    from tqdm.auto import tqdm

    net.train()
    step = start
    bar = tqdm(range(start, steps), desc="train ICL transformer", disable=not progress,
               leave=False)
    try:
        for step in bar:
            xs, ys, cmask = _sample_tasks(gen, batch, net.n_max + 1, net.d_max, net.k_max)
            logits = net(xs, ys).masked_fill(~cmask[:, None], float("-inf"))
            loss = nn.functional.cross_entropy(logits.reshape(-1, net.k_max), ys.reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
            opt.step()
            if step % 50 == 0:
                bar.set_postfix(loss=f"{float(loss.detach()):.3f}")
            if (step + 1) % checkpoint_every == 0:
                save(step + 1)
        step = steps
    except KeyboardInterrupt:
        save(step)
        raise
    save(steps)
    return net.eval()


#: the default recipe of :func:`pretrained_icl_transformer`
DEFAULT_RECIPE: dict[str, Any] = {"steps": 1200, "batch": 16, "lr": 2e-3, "seed": 0, "d_max": 8,
                                  "k_max": 4, "n_max": 32, "d_model": 32, "n_heads": 4,
                                  "d_mlp": 64}


def _pretrained_path() -> Path:
    from rml_fast.models.train import cache_dir

    blob = json.dumps({"v": 2, **DEFAULT_RECIPE}, sort_keys=True)
    key = hashlib.sha256(blob.encode()).hexdigest()[:16]
    return cache_dir() / f"icl-tabular-{key}.pt"


def pretrained_icl_cached() -> bool:
    """Whether :func:`pretrained_icl_transformer` would load its network rather than train it.

    Returns
    -------
    bool
        True when the default network is in the cache (``rml_fast.models.train.cache_dir()``).

    Examples
    --------
    >>> isinstance(pretrained_icl_cached(), bool)
    True
    """
    return _pretrained_path().is_file()


def pretrained_icl_transformer(*, progress: bool = True, cache: bool = True) -> ICLTabularNet:
    """The default :class:`ICLTabularNet`, trained once and cached with the zoo models.

    Trains :data:`DEFAULT_RECIPE` with :func:`train_icl_transformer` (a minute or two on one
    CPU core) and stores it under ``rml_fast.models.train.cache_dir()`` (resumable while
    training); later calls load it. Weights are produced by this code, never downloaded.

    Parameters
    ----------
    progress : bool, default=True
    cache : bool, default=True
        False trains in memory without reading or writing the cache.

    Returns
    -------
    ICLTabularNet

    Examples
    --------
    >>> pretrained_icl_transformer  # doctest: +ELLIPSIS
    <function pretrained_icl_transformer at ...>
    """
    final = _pretrained_path()
    kw = dict(DEFAULT_RECIPE)
    steps = kw.pop("steps")
    if cache and final.is_file():
        state = torch.load(final, map_location="cpu", weights_only=False)
        net = ICLTabularNet(**state["hparams"])
        net.load_state_dict(state["model"])
        return net.eval()
    partial = final.with_name(final.stem + ".partial.pt") if cache else None
    net = train_icl_transformer(steps, checkpoint=partial, progress=progress, **kw)
    if cache:
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = final.with_suffix(".tmp")
        torch.save({"model": net.state_dict(), "hparams": net.hparams}, tmp)
        tmp.replace(final)
        if partial is not None:  # set whenever cache is
            partial.unlink(missing_ok=True)
    return net


class TransformerICL:
    """An in-context tabular classifier: an :class:`ICLTabularNet` conditioned on a context.

    ``predict_proba(X)`` runs one sequence ``x_1, y_1, ..., x_n, y_n, x`` per query (so each
    query's output depends on the context and that query only), in float64, on inputs
    standardised by the context's mean and standard deviation; probabilities are the softmax
    over the first ``K`` classes.

    Parameters
    ----------
    context_X : array-like of shape (n, d)
        Context inputs, ``d <= net.d_max``.
    context_y : array-like of shape (n,), int
        Context labels in ``0..K-1``, ``K <= net.k_max``.
    net : ICLTabularNet or None, default=None
        The meta-trained network (default: :func:`pretrained_icl_transformer`).
    n_classes : int or None, default=None
        ``K`` (default: ``max(context_y) + 1``, at least 2).
    n_context : int or None, default=None
        Context examples used (default: ``min(n, net.n_max)``); drawn without replacement by
        ``random_state`` when fewer than ``n`` (re-sample to test recourse robustness to the
        context).
    random_state : int, numpy.random.Generator or None, default=0
    batch_size : int, default=256
        Queries per forward pass.

    Attributes
    ----------
    classes_ : ndarray of shape (K,)
    context_index_ : ndarray of shape (n_context,)
        Rows of ``context_X`` in the context, in order.

    Examples
    --------
    >>> import numpy as np
    >>> net = ICLTabularNet(d_max=2, k_max=2, n_max=8, d_model=16, n_heads=2, d_mlp=32)
    >>> Xc = np.array([[0.0, 0.0], [1.0, 1.0], [0.0, 1.0]]); yc = np.array([0, 1, 1])
    >>> P = TransformerICL(Xc, yc, net).predict_proba(Xc)
    >>> P.shape, bool(np.allclose(P.sum(axis=1), 1.0))
    ((3, 2), True)
    """

    def __init__(self, context_X: Any, context_y: Any, net: ICLTabularNet | None = None, *,
                 n_classes: int | None = None, n_context: int | None = None,
                 random_state: Any = 0, batch_size: int = 256) -> None:
        if net is None:
            net = pretrained_icl_transformer(progress=False)
        if not isinstance(net, ICLTabularNet):
            raise TypeError(f"net must be an ICLTabularNet, got {type(net).__name__}")
        Xc, yc, self._mean, self._std, k = _context(context_X, context_y, n_classes)
        if Xc.shape[1] > net.d_max:
            raise ValueError(f"context_X has {Xc.shape[1]} features; the network takes at most "
                             f"d_max={net.d_max}")
        if k > net.k_max:
            raise ValueError(f"{k} classes; the network takes at most k_max={net.k_max}")
        n = Xc.shape[0]
        n_use = min(n, net.n_max) if n_context is None else int(
            check_scalar(n_context, "n_context", Interval("int", 1, min(n, net.n_max))))
        rng = check_rng(random_state, "random_state")
        idx = np.sort(rng.choice(n, n_use, replace=False)) if n_use < n else np.arange(n)
        order = rng.permutation(idx.size)
        self.context_index_ = idx[order]
        self.batch_size = int(check_scalar(batch_size, "batch_size", Interval("int", 1, None)))
        self.classes_ = np.arange(k)
        self.net = net
        self._net64 = _double_copy(net)
        self._cx = torch.from_numpy((Xc[self.context_index_] - self._mean) / self._std)
        self._cy = torch.from_numpy(yc[self.context_index_])

    def predict_proba(self, X: Any) -> np.ndarray:
        """Class probabilities ``(m, K)`` of queries ``X`` of shape (m, d), float64.

        Examples
        --------
        >>> import numpy as np
        >>> net = ICLTabularNet(d_max=1, k_max=2, n_max=4, d_model=8, n_heads=2, d_mlp=8)
        >>> icl = TransformerICL(np.array([[0.0], [1.0]]), np.array([0, 1]), net)
        >>> icl.predict_proba(np.zeros((2, 1))).shape
        (2, 2)
        """
        X = check_array(X, "X", ndim=2)
        d = self._cx.shape[1]
        if X.shape[1] != d:
            raise ValueError(f"X must have {d} features, got {X.shape[1]}")
        Q = torch.from_numpy((np.asarray(X, dtype=np.float64) - self._mean) / self._std)
        K = self.classes_.size
        out = []
        with torch.no_grad():
            for s in range(0, Q.shape[0], self.batch_size):
                q = Q[s : s + self.batch_size]
                b = q.shape[0]
                xs = torch.cat([self._cx.expand(b, -1, -1), q[:, None]], dim=1)
                ys = torch.cat([self._cy.expand(b, -1), torch.zeros(b, 1, dtype=torch.int64)], 1)
                logits = self._net64(xs, ys)[:, -1, :K]
                out.append(torch.softmax(logits, dim=-1).numpy())
        return np.concatenate(out) if out else np.zeros((0, K))

    def predict(self, X: Any) -> np.ndarray:
        """Predicted classes ``(m,)``.

        Examples
        --------
        >>> import numpy as np
        >>> net = ICLTabularNet(d_max=1, k_max=2, n_max=4, d_model=8, n_heads=2, d_mlp=8)
        >>> TransformerICL(np.array([[0.0], [1.0]]), np.array([0, 1]), net).predict([[0.5]]).shape
        (1,)
        """
        return np.argmax(self.predict_proba(X), axis=1)


def _double_copy(net: ICLTabularNet) -> ICLTabularNet:
    twin = ICLTabularNet(**net.hparams)
    twin.load_state_dict(net.state_dict())
    return twin.double().eval()
