"""ExPLAIND: AdamW-trained models as exact path-kernel machines (arXiv 2505.20076).

A model trained for ``N`` AdamW steps is rewritten exactly (Theorem 3.1) as

    f_{theta_N}(x) = f_{theta_0}(x) + sum_s phi_s(x) . dtheta_s ,
    phi_s(x) = int_0^1 grad_theta f_{theta_{s-1} + t dtheta_s}(x) dt ,
    dtheta_s = -eta_s lam theta_{s-1} - eta_s mhat_s / d_s ,   d_s = sqrt(vhat_s) + eps ,

and, unrolling the first moment ``m_s`` into per-sample gradients ``g_{k,i}`` taken at
``theta_{i-1}``, into the influence tensor

    I[x, o, j, k, s] = -eta_s phi_s(x)[o, j] u_{k,s}[j] ,
    u_{k,s} = sum_{i <= s, k in B_i} (1 - beta1) beta1^{s-i} g_{k,i} / |B_i| / (1 - beta1^s) / d_s ,
    R[x, o, j, s]    = -eta_s lam phi_s(x)[o, j] theta_{s-1}[j]          (weight decay),

whose entries sum to ``f_{theta_N}(x) - f_{theta_0}(x)`` up to the quadrature error of ``phi``
(completeness). Partial sums give the step-wise (``S_s``), data (``D_k``), parameter (``P_j``)
and component (sums of ``P_j`` over named groups) influences.

:class:`TrainingHistory` logs what the reconstruction needs (``theta_0``, every ``theta_s``,
AdamW's ``v_s``, ``eta_s``, ``lam_s`` and the batch ``B_s``) to memory or to chunked files;
:func:`train_with_history` is a resumable full training loop; :class:`ExactPathKernel`
recomputes per-sample gradients and test-output Jacobians from the log.

PROPOSED (ours, same numbers as the paper's layout): the data influence runs a reverse-time
pass ``S_i = V_i + beta1 S_{i+1}``, ``V_s = eta_s phi_s / ((1 - beta1^s) d_s)``, with the
contribution of sample k at gradient step i ``-(1 - beta1) / |B_i| S_i . g_{k,i}``: memory
``O(n C P)`` instead of the reference's ``O(M P)`` per-sample momentum buffer
(``order="forward"``), and, with ``train_grad="jvp"``, no per-sample gradient is ever formed.
"""

from __future__ import annotations

import copy
import logging
import numbers
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import torch

from rml_fast._validation import Interval, check_scalar, check_tensor
from rml_fast.interp._checks import not_meta
from rml_fast.interp._explaind_core import Flat, Funcs, PassResult, run_pass
from rml_fast.interp._explaind_store import FORMAT, RowStore, _atomic_save

__all__ = [
    "CompletenessReport",
    "ExactPathKernel",
    "TrainingHistory",
    "last_position",
    "train_with_history",
]

logger = logging.getLogger(__name__)


def last_position(output: torch.Tensor) -> torch.Tensor:
    """The outputs at the last sequence position: ``output[:, -1]`` (``(B, P, V) -> (B, V)``).

    The ``output_fn`` for sequence models such as
    :class:`~rml_fast.models.transformer.TinyTransformer`.

    Examples
    --------
    >>> import torch
    >>> last_position(torch.arange(12.).view(1, 3, 4)).tolist()
    [[8.0, 9.0, 10.0, 11.0]]
    """
    if not isinstance(output, torch.Tensor):
        raise TypeError(f"output must be a torch.Tensor, got {type(output).__name__}")
    not_meta(output, "output")
    if output.ndim < 2 or output.shape[1] < 1:
        raise ValueError(f"output must have shape (B, P, ...) with P >= 1, got {tuple(output.shape)}")
    # the finiteness check needs values: skipped inside torch.func transforms (vmap / jvp)
    if (
        (output.is_floating_point() or output.is_complex())
        and not _functorch_wrapped(output)
        and not bool(torch.isfinite(output.detach()).all())
    ):
        raise ValueError("output must be finite, got NaN or infinite values")
    return output[:, -1]


def _functorch_wrapped(t: torch.Tensor) -> bool:
    try:
        return bool(torch._C._functorch.is_functorch_wrapped_tensor(t))
    except AttributeError:  # pragma: no cover - older torch
        return True


def _per_sample_loss(loss_fn: Any) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    if isinstance(loss_fn, torch.nn.Module) and hasattr(loss_fn, "reduction"):
        loss_fn = copy.copy(loss_fn)
        loss_fn.reduction = "none"
        return loss_fn
    if not callable(loss_fn):
        raise TypeError(f"loss_fn must be callable(output, target), got {type(loss_fn).__name__}")
    return loss_fn


def _check_path(path: Any, name: str = "path") -> Any:
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{name} must be a str or os.PathLike, got {type(path).__name__}")
    return path


def _check_dataset(dataset: Any, name: str = "dataset") -> tuple[torch.Tensor, torch.Tensor]:
    if not (isinstance(dataset, (tuple, list)) and len(dataset) == 2):
        raise TypeError(f"{name} must be a pair (inputs, targets) of tensors, got {type(dataset).__name__}")
    X, y = dataset
    if not (isinstance(X, torch.Tensor) and isinstance(y, torch.Tensor)):
        raise TypeError(f"{name} must hold torch tensors, got {type(X).__name__}, {type(y).__name__}")
    for part, t in (("inputs", X), ("targets", y)):
        if t.device.type == "meta":
            raise ValueError(f"{name} {part} must hold values, got a tensor on the 'meta' device")
        if t.is_floating_point() and t.numel() and not bool(torch.isfinite(t).all()):
            raise ValueError(f"{name} {part} must be finite, got NaN or infinite values")
    if X.ndim < 1 or y.ndim < 1 or len(X) != len(y) or len(X) == 0:
        raise ValueError(
            f"{name}: inputs and targets need the same non-zero number of rows, got "
            f"{tuple(X.shape)} and {tuple(y.shape)}"
        )
    return X, y


class TrainingHistory:
    """The log of an AdamW run that makes its path-kernel decomposition exact.

    Wraps a model and its ``torch.optim.AdamW``; call :meth:`log_step` after every
    ``optimizer.step()``. Records ``theta_0`` at construction and, per step ``s``, the
    parameters ``theta_s`` (P,), AdamW's second moment ``v_s`` (``exp_avg_sq``, P,), the
    learning rate and weight decay of each tensor and the batch indices ``B_s``. Storage is
    ``N (2P + |B|)`` numbers. ``store="disk"`` writes chunks of ``chunk_size`` steps to
    ``path`` (resumable: :meth:`load` then keep logging).

    Parameters
    ----------
    model : torch.nn.Module
    optimizer : torch.optim.AdamW
        With ``amsgrad=False``, ``maximize=False`` and the same betas and eps in every group;
        it must not have stepped yet. Its parameters are the logged ones (named as in
        ``model.named_parameters()``); other parameters are constants.
    store : {"memory", "disk"}, default="memory"
    path : str or Path, optional
        Directory of the disk store (required for ``store="disk"``).
    dtype : torch.dtype, default=torch.float32
        Storage dtype (float32 or float64; use the model's dtype for an exact log).
    chunk_size : int, default=100
        Steps per file of the disk store.

    Examples
    --------
    >>> import torch
    >>> model = torch.nn.Linear(3, 2)
    >>> opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    >>> hist = TrainingHistory(model, opt)
    >>> X, y = torch.randn(8, 3), torch.randn(8, 2)
    >>> for s in range(5):
    ...     opt.zero_grad(); ((model(X) - y) ** 2).mean().backward(); opt.step()
    ...     hist.log_step(torch.arange(8))
    >>> hist.n_steps, hist.n_params, sorted(hist.theta(5))
    (5, 8, ['bias', 'weight'])
    """

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        *,
        store: str = "memory",
        path: str | os.PathLike[str] | None = None,
        dtype: torch.dtype = torch.float32,
        chunk_size: int = 100,
    ) -> None:
        names = self._check_opt(model, optimizer, require_fresh=True)
        if store not in ("memory", "disk"):
            raise ValueError(f"store must be 'memory' or 'disk', got {store!r}")
        if store == "disk" and path is None:
            raise ValueError("path is required for store='disk'")
        if dtype not in (torch.float32, torch.float64):
            raise TypeError(f"dtype must be torch.float32 or torch.float64, got {dtype}")
        chunk_size = int(check_scalar(chunk_size, "chunk_size", Interval("int", 1, None)))
        g0 = optimizer.param_groups[0]
        meta = {
            "format": FORMAT, "names": names,
            "shapes": [list(p.shape) for p in self._params], "dtype": str(dtype).split(".")[-1],
            "betas": [float(b) for b in g0["betas"]], "eps": float(g0["eps"]),
            "chunk_size": chunk_size, "n_steps": 0,
        }  # fmt: skip
        theta0 = self._flat_params(dtype)
        disk = Path(path) if store == "disk" and path is not None else None  # path checked above
        self._store = RowStore.create(meta, theta0, disk)
        self._init_meta(meta)

    # --- construction helpers --------------------------------------------------------

    def _check_opt(self, model, optimizer, *, require_fresh: bool) -> list[str]:
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        if not isinstance(optimizer, torch.optim.AdamW):
            raise TypeError(f"optimizer must be a torch.optim.AdamW, got {type(optimizer).__name__}")
        groups = optimizer.param_groups
        for g in groups:
            if g.get("amsgrad") or g.get("maximize"):
                raise ValueError("optimizer must have amsgrad=False and maximize=False")
            if tuple(g["betas"]) != tuple(groups[0]["betas"]) or g["eps"] != groups[0]["eps"]:
                raise ValueError("optimizer: every parameter group must share betas and eps")
        ids = {id(p): n for n, p in model.named_parameters()}
        self._params = [p for g in groups for p in g["params"]]
        self._group_of = [i for i, g in enumerate(groups) for _ in g["params"]]
        missing = [p for p in self._params if id(p) not in ids]
        if missing:
            raise ValueError("optimizer holds parameters that are not the model's parameters")
        if require_fresh and any(optimizer.state.get(p) for p in self._params):
            raise ValueError("optimizer has already stepped; create the history before training")
        self.model: torch.nn.Module | None = model  # None for a read-only log (load without them)
        self.optimizer: torch.optim.Optimizer | None = optimizer
        return [ids[id(p)] for p in self._params]

    def _init_meta(self, meta: dict[str, Any]) -> None:
        self._flat = Flat(list(meta["names"]), [tuple(s) for s in meta["shapes"]])
        self.dtype = getattr(torch, meta["dtype"])

    def _flat_params(self, dtype: torch.dtype) -> torch.Tensor:
        return torch.cat([p.detach().reshape(-1).to("cpu", dtype) for p in self._params])

    # --- logging ---------------------------------------------------------------------

    def log_step(self, batch_indices: torch.Tensor) -> None:
        """Record the step the optimizer just took on the samples ``batch_indices``.

        Parameters
        ----------
        batch_indices : LongTensor of shape (B,)
            Indices into the training set of the mini-batch ``B_s`` whose mean loss gave the
            gradient of this step (duplicates allowed).

        Examples
        --------
        See :class:`TrainingHistory`.
        """
        if self.optimizer is None:
            raise ValueError("this history is read-only; load it with model and optimizer to log")
        not_meta(batch_indices, "batch_indices")
        try:
            b = torch.as_tensor(batch_indices)
        except (RuntimeError, TypeError, ValueError) as exc:
            raise TypeError(f"batch_indices must be a 1-D integer tensor: {exc}") from exc
        if b.ndim != 1 or b.numel() == 0 or b.dtype not in (torch.int64, torch.int32):
            raise ValueError(f"batch_indices must be a non-empty 1-D integer tensor, got {b.dtype} {tuple(b.shape)}")
        st = self.optimizer.state
        stepped = [st[p]["step"] for p in self._params if "step" in st.get(p, {})]
        step = int(max(stepped)) if stepped else 0
        if step != self.n_steps + 1:
            raise ValueError(f"optimizer is at step {step} but the log holds {self.n_steps}; call log_step after every optimizer.step()")
        groups = self.optimizer.param_groups
        dtype = self.dtype
        theta = self._flat_params(dtype)
        v = torch.cat([  # a parameter without a gradient so far has no state: v = 0
            st[p]["exp_avg_sq"].detach().reshape(-1).to("cpu", dtype) if "exp_avg_sq" in st.get(p, {})
            else torch.zeros(p.numel(), dtype=dtype) for p in self._params
        ])  # fmt: skip
        lr = torch.tensor([float(groups[g]["lr"]) for g in self._group_of], dtype=torch.float64)
        wd = torch.tensor([float(groups[g]["weight_decay"]) for g in self._group_of], dtype=torch.float64)
        self._store.append((theta, v, lr, wd, b.detach().to("cpu", torch.int64).clone()))

    def flush(self) -> None:
        """Write pending steps of a disk store and commit the step count (no-op in memory)."""
        self._store.flush()

    # --- reading ---------------------------------------------------------------------

    @property
    def n_steps(self) -> int:
        """Number of logged optimizer steps ``N``."""
        return self._store.n

    @property
    def n_params(self) -> int:
        """Number of logged parameters ``P``."""
        return self._flat.P

    @property
    def param_names(self) -> list[str]:
        """Names of the logged parameter tensors, in flat order."""
        return list(self._flat.names)

    @property
    def betas(self) -> tuple[float, float]:
        """AdamW's ``(beta1, beta2)``."""
        b = self._store.meta["betas"]
        return float(b[0]), float(b[1])

    @property
    def eps(self) -> float:
        """AdamW's ``eps``."""
        return float(self._store.meta["eps"])

    def _check_s(self, s: int, lo: int) -> int:
        return int(check_scalar(s, "s", Interval("int", lo, self.n_steps)))

    def theta_flat(self, s: int) -> torch.Tensor:
        """Flat parameters ``theta_s`` of shape (P,) (``s = 0``: the initial ones)."""
        s = self._check_s(s, 0)
        return self._store.theta0 if s == 0 else self._store.row(s)[0]

    def row(self, s: int) -> tuple[torch.Tensor, ...]:
        """``(theta_s, v_s, lr per tensor, weight decay per tensor, B_s)`` of step ``s >= 1``."""
        return self._store.row(self._check_s(s, 1))

    def theta(self, s: int) -> dict[str, torch.Tensor]:
        """Parameters after step ``s`` as ``{name: tensor}`` (``s = 0``: before training)."""
        return self._flat.unflatten(self.theta_flat(s))

    def denom(self, s: int) -> dict[str, torch.Tensor]:
        """AdamW's denominator ``d_s = sqrt(v_s / (1 - beta2^s)) + eps`` as ``{name: tensor}``."""
        v = self.row(s)[1]
        return self._flat.unflatten(torch.sqrt(v / (1 - self.betas[1] ** s)) + self.eps)

    def batch(self, s: int) -> torch.Tensor:
        """Batch indices ``B_s`` of step ``s``."""
        return self.row(s)[4]

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the log to ``path`` in the disk format (readable by :meth:`load`)."""
        _check_path(path)
        self._store.flush()
        self._store.save_to(Path(path))

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str],
        model: torch.nn.Module | None = None,
        optimizer: torch.optim.Optimizer | None = None,
    ) -> TrainingHistory:
        """Open a saved log; with ``model`` and ``optimizer`` (restored to the last logged
        step) further :meth:`log_step` calls append to it.

        Examples
        --------
        >>> import tempfile, torch
        >>> model = torch.nn.Linear(2, 1); opt = torch.optim.AdamW(model.parameters())
        >>> h = TrainingHistory(model, opt)
        >>> d = tempfile.mkdtemp(); h.save(d); TrainingHistory.load(d).n_steps
        0
        """
        store = RowStore.open(Path(_check_path(path)))
        self = cls.__new__(cls)
        self._store = store
        self._init_meta(store.meta)
        self.model = self.optimizer = None
        if model is not None and optimizer is not None:
            names = self._check_opt(model, optimizer, require_fresh=False)
            if names != self._flat.names:
                raise ValueError(f"model/optimizer parameters {names} differ from the log's {self._flat.names}")
        return self


def train_with_history(
    model: torch.nn.Module,
    loss_fn: Any,
    dataset: tuple[torch.Tensor, torch.Tensor],
    *,
    n_steps: int,
    lr: float = 1e-3,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
    weight_decay: float = 0.01,
    batch_size: int = 32,
    lr_schedule: Callable[[int], float] | None = None,
    output_fn: Callable[[Any], torch.Tensor] | None = None,
    seed: int = 0,
    store: str = "memory",
    path: str | os.PathLike[str] | None = None,
    dtype: torch.dtype = torch.float32,
    checkpoint_every: int = 100,
    resume: bool = True,
    progress: bool = True,
) -> TrainingHistory:
    """Train ``model`` with torch's AdamW on mini-batches and log every step.

    Step ``s`` draws ``B_s`` (``batch_size`` indices without replacement from a
    ``torch.Generator`` seeded by ``seed``; the whole set when ``batch_size >= M``), sets the
    learning rate to ``lr * lr_schedule(s)`` and minimises
    ``(1/|B_s|) sum_{k in B_s} loss_fn(output_fn(model(X_k)), y_k)``.

    Parameters
    ----------
    model : torch.nn.Module
        Trained in place (its current parameters are ``theta_0``).
    loss_fn : callable or torch loss module
        ``loss_fn(output, target)`` giving per-sample losses (B,) (a loss module is called with
        ``reduction="none"``).
    dataset : (inputs, targets)
        Tensors with ``M`` rows.
    n_steps : int
        Train until ``N = n_steps`` steps are logged (continuing a resumed run).
    lr, betas, eps, weight_decay : AdamW's hyper-parameters.
    batch_size : int, default=32
    lr_schedule : callable(s) -> float, optional
        Multiplier of ``lr`` at step ``s`` (1-based).
    output_fn : callable, optional
        Maps the model output to ``(B, C)`` (e.g. :func:`last_position`); default identity.
    seed : int, default=0
        Seeds the batch order.
    store : {"memory", "disk"}, default="memory"
    path : str or Path, optional
        With ``store="disk"``: the log directory, checkpointed every ``checkpoint_every`` steps
        (model, optimizer, generator); an interrupted run resumes from it, giving the same log.
    dtype : torch.dtype, default=torch.float32
    checkpoint_every : int, default=100
        Also the disk chunk size.
    resume : bool, default=True
        Continue a run found at ``path`` (it must have the same configuration: ``ValueError``
        listing the differences); False starts fresh (overwriting).
    progress : bool, default=True

    Returns
    -------
    history : TrainingHistory

    Examples
    --------
    >>> import torch
    >>> torch.manual_seed(0); model = torch.nn.Linear(4, 3)  # doctest: +ELLIPSIS
    <torch._C.Generator object at ...>
    >>> X, y = torch.randn(32, 4), torch.randint(0, 3, (32,))
    >>> hist = train_with_history(model, torch.nn.CrossEntropyLoss(), (X, y), n_steps=20,
    ...                           lr=0.05, batch_size=8, progress=False)
    >>> hist.n_steps, tuple(hist.batch(1).shape)
    (20, (8,))
    """
    X, y = _check_dataset(dataset)
    n_steps = int(check_scalar(n_steps, "n_steps", Interval("int", 0, None)))
    # far below the overflow of the parameters' dtype (AdamW's step scales lr by up to 1/(1-b1))
    lr_max = min(
        (float(torch.finfo(p.dtype).max) ** 0.5 for p in model.parameters() if p.is_floating_point()),
        default=float(torch.finfo(torch.float64).max) ** 0.5,
    )
    lr = float(check_scalar(lr, "lr", Interval("real", 0, lr_max, "right")))
    b1 = float(check_scalar(betas[0], "betas[0]", Interval("real", 0, 1, "left")))
    b2 = float(check_scalar(betas[1], "betas[1]", Interval("real", 0, 1, "left")))
    eps = float(check_scalar(eps, "eps", Interval("real", 0, None, "neither")))
    weight_decay = float(check_scalar(weight_decay, "weight_decay", Interval("real", 0, None)))
    batch_size = int(check_scalar(batch_size, "batch_size", Interval("int", 1, None)))
    seed = int(check_scalar(seed, "seed", Interval("int", 0, None)))
    checkpoint_every = int(check_scalar(checkpoint_every, "checkpoint_every", Interval("int", 1, None)))
    if lr_schedule is not None and not callable(lr_schedule):
        raise TypeError("lr_schedule must be callable(step) -> float or None")
    if store not in ("memory", "disk"):
        raise ValueError(f"store must be 'memory' or 'disk', got {store!r}")
    if store == "disk" and path is None:
        raise ValueError("path is required for store='disk'")
    loss = _per_sample_loss(loss_fn)
    out_fn = output_fn or (lambda o: o)
    M = len(y)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(b1, b2), eps=eps,
                            weight_decay=weight_decay)  # fmt: skip
    gen = torch.Generator().manual_seed(seed)
    config = {"lr": lr, "betas": [b1, b2], "eps": eps, "weight_decay": weight_decay,
              "batch_size": batch_size, "seed": seed, "M": M, "dtype": str(dtype)}  # fmt: skip
    ckpt = Path(path) / "train_state.pt" if store == "disk" and path is not None else None
    if ckpt is not None and resume and ckpt.is_file():
        state = torch.load(ckpt, map_location="cpu", weights_only=False)
        diff = {k: (state["config"].get(k), v) for k, v in config.items() if state["config"].get(k) != v}
        if diff:
            raise ValueError(f"path holds a run with another configuration (saved, given): {diff}")
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        gen.set_state(state["gen"])
        hist = TrainingHistory.load(ckpt.parent, model, opt)  # = path
        hist._store.truncate(int(state["step"]))
        logger.info("resuming ExPLAIND training at step %d", hist.n_steps)
    else:
        hist = TrainingHistory(model, opt, store=store, path=path, dtype=dtype,
                               chunk_size=checkpoint_every)  # fmt: skip

    def save_state() -> None:
        hist.flush()
        if ckpt is not None:
            _atomic_save({"model": model.state_dict(), "opt": opt.state_dict(),
                          "gen": gen.get_state(), "step": hist.n_steps, "config": config}, ckpt)  # fmt: skip

    from tqdm.auto import tqdm

    model.train()
    for s in tqdm(range(hist.n_steps + 1, n_steps + 1), desc="train+log", disable=not progress, leave=False):
        idx = torch.arange(M) if batch_size >= M else torch.randperm(M, generator=gen)[:batch_size]
        for g in opt.param_groups:
            g["lr"] = lr * (float(lr_schedule(s)) if lr_schedule is not None else 1.0)
        opt.zero_grad(set_to_none=True)
        batch_loss = loss(out_fn(model(X[idx])), y[idx]).mean()
        if not torch.isfinite(batch_loss):
            raise FloatingPointError(f"non-finite loss at step {s}")
        batch_loss.backward()
        opt.step()
        hist.log_step(idx)
        if s % checkpoint_every == 0:
            save_state()
    save_state()
    model.eval()
    return hist


@dataclass(frozen=True)
class CompletenessReport:
    """The completeness check ``sum(I) + sum(R) = f_{theta_N}(x) - f_{theta_0}(x)``.

    Attributes
    ----------
    target : Tensor of shape (n, C)
        ``f_{theta_N}(X) - f_{theta_0}(X)``.
    total : Tensor of shape (n, C)
        Sum of all data and weight-decay influences.
    path_total : Tensor of shape (n, C)
        Sum of the step influences (differs from ``target`` by the quadrature error only).
    max_abs_error : float
        ``max |total - target|``.
    rel_error : float
        ``max_abs_error / max |target|``.
    quadrature_error : float
        ``max |path_total - target|``.
    """

    target: torch.Tensor
    total: torch.Tensor
    path_total: torch.Tensor
    max_abs_error: float
    rel_error: float
    quadrature_error: float

    def __post_init__(self) -> None:
        shape = None
        for name in ("target", "total", "path_total"):
            t = getattr(self, name)
            check_tensor(t, name, floating=True, finite=True)
            if shape is not None and t.shape != shape:
                raise ValueError(f"{name} must have the shape of target {tuple(shape)}, got {tuple(t.shape)}")
            shape = t.shape
        for name in ("max_abs_error", "rel_error", "quadrature_error"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, numbers.Real):
                raise TypeError(f"{name} must be a real number, got {type(v).__name__} {v!r}")


_ABS_MODES = ("per_step", "total", "signed")
_ORDERS = ("reverse", "forward")
_TRAIN_GRAD = ("auto", "jvp", "per_sample")


class ExactPathKernel:
    """The exact path-kernel (ExPLAIND) decomposition of a logged AdamW run.

    Parameters
    ----------
    model : torch.nn.Module
        The trained architecture (its parameter values are not used: every ``theta_s`` comes
        from the log). Must be deterministic (no dropout in ``eval`` mode) and, for
        ``train_grad="per_sample"``, free of batch coupling (no batch norm).
    history : TrainingHistory
    loss_fn : callable or torch loss module
        The training loss, ``loss_fn(output_fn(model(X)), y)`` per sample (B,); each step's
        gradient must be the mean over ``B_s`` (as :func:`train_with_history` trains).
    dataset : (inputs, targets)
        The training set the batch indices refer to; needed for data influence and
        :meth:`update_residual`.
    output_fn : callable, optional
        Maps the model output to ``f`` of shape (n, C); default identity.
    n_quad : int, default=10
        Midpoint-rule points for ``phi_s`` (reference ``integral_eps=0.1``); 1 is exact for
        models linear in their parameters.
    n_quad_early : int, default=1000
        Points for the first ``early_steps`` steps, where the path is most curved
        (reference ``early_integral_eps=1e-3``).
    early_steps : int, default=4
    param_groups : dict[str, list[str]], optional
        Component name -> parameter names, for :meth:`component_influence`; default one
        component per parameter tensor.
    train_grad : {"auto", "jvp", "per_sample"}, default="auto"
        How the reverse pass contracts the kernel with training gradients: ``"jvp"``
        (PROPOSED) takes directional derivatives of the per-sample losses, one forward-mode
        pass per test output, never forming per-sample gradients; ``"per_sample"`` forms
        them with ``vmap(grad)`` and multiplies. ``"auto"`` uses jvp when the batch is at
        least 4x larger than ``n * C`` and has 128 or more samples, else per-sample gradients
        (jvp where the model cannot be vmapped over its inputs).
    chunk_size : int, optional
        vmap chunk size (bounds memory of Jacobians and per-sample gradients).
    block_size : int, optional
        Logged steps whose Jacobians / per-sample gradients are computed in one vmapped call
        (fewer calls, more memory); default: as many as fit in about 256 MB, at most 64.
    progress : bool, default=False
        tqdm bar over the steps of each pass.

    Examples
    --------
    >>> import torch
    >>> torch.manual_seed(0)  # doctest: +ELLIPSIS
    <torch._C.Generator object at ...>
    >>> model = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    >>> X, y = torch.randn(16, 3), torch.randint(0, 2, (16,))
    >>> hist = train_with_history(model, torch.nn.CrossEntropyLoss(), (X, y), n_steps=10,
    ...                           lr=0.05, batch_size=4, progress=False)
    >>> epk = ExactPathKernel(model, hist, torch.nn.CrossEntropyLoss(), (X, y),
    ...                       n_quad=8, n_quad_early=8)
    >>> rep = epk.completeness(X[:3])
    >>> rep.rel_error < 1e-3
    True
    >>> tuple(epk.data_influence(X[:3]).shape)   # (n, C, M)
    (3, 2, 16)
    """

    def __init__(
        self,
        model: torch.nn.Module,
        history: TrainingHistory,
        loss_fn: Any,
        dataset: tuple[torch.Tensor, torch.Tensor] | None = None,
        *,
        output_fn: Callable[[Any], torch.Tensor] | None = None,
        n_quad: int = 10,
        n_quad_early: int = 1000,
        early_steps: int = 4,
        param_groups: dict[str, list[str]] | None = None,
        train_grad: str = "auto",
        chunk_size: int | None = None,
        block_size: int | None = None,
        progress: bool = False,
    ) -> None:
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        if not isinstance(history, TrainingHistory):
            raise TypeError(f"history must be a TrainingHistory, got {type(history).__name__}")
        if dataset is not None:
            dataset = _check_dataset(dataset)
        self.n_quad = int(check_scalar(n_quad, "n_quad", Interval("int", 1, None)))
        self.n_quad_early = int(check_scalar(n_quad_early, "n_quad_early", Interval("int", 1, None)))
        self.early_steps = int(check_scalar(early_steps, "early_steps", Interval("int", 0, None)))
        if train_grad not in _TRAIN_GRAD:
            raise ValueError(f"train_grad must be one of {_TRAIN_GRAD}, got {train_grad!r}")
        if chunk_size is not None:
            chunk_size = int(check_scalar(chunk_size, "chunk_size", Interval("int", 1, None)))
        if block_size is not None:
            block_size = int(check_scalar(block_size, "block_size", Interval("int", 1, None)))
        self.block_size = block_size
        if output_fn is not None and not callable(output_fn):
            raise TypeError("output_fn must be callable or None")
        named = dict(model.named_parameters())
        for name, shape in zip(history._flat.names, history._flat.shapes, strict=True):
            if name not in named or tuple(named[name].shape) != tuple(shape):
                raise ValueError(f"model has no parameter {name!r} of shape {tuple(shape)} as in the log")
        names = history.param_names
        if param_groups is None:
            param_groups = {n: [n] for n in names}
        if not isinstance(param_groups, dict) or not param_groups:
            raise TypeError("param_groups must be a non-empty dict {component: [parameter names]}")
        gid = {}
        for g, (comp, members) in enumerate(param_groups.items()):
            for m in members:
                if m not in names:
                    raise ValueError(f"param_groups[{comp!r}] names {m!r}, not a logged parameter {names}")
                if m in gid:
                    raise ValueError(f"parameter {m!r} is in two param_groups")
                gid[m] = g
        self.group_names = list(param_groups)
        other = [n for n in names if n not in gid]
        if other:
            self.group_names.append("other")
            for n in other:
                gid[n] = len(self.group_names) - 1
        self._group_ids = history._flat.expand(torch.tensor([gid[n] for n in names]))
        self.model, self.history, self.dataset = model, history, dataset
        self.train_grad, self.chunk_size, self.progress = train_grad, chunk_size, progress
        self._funcs = Funcs(model.eval(), history._flat, output_fn or (lambda o: o), _per_sample_loss(loss_fn))

    # --- input checks ------------------------------------------------------------------

    def _inputs(self, X: Any, select: Any) -> tuple[Any, torch.Tensor | None, int]:
        if not isinstance(X, torch.Tensor) or X.ndim < 1 or len(X) == 0:
            raise TypeError(f"X must be a non-empty torch tensor with one row per test input, got {type(X).__name__}")
        not_meta(X, "X")
        if X.is_complex():
            raise TypeError(f"X must hold real numbers, got dtype {X.dtype}")
        if X.is_floating_point():
            if not bool(torch.isfinite(X).all()):
                raise ValueError("X must be finite, got NaN or infinite values")
            X = X.to(self.history.dtype)
        try:
            out = self._funcs.outputs(self.history.theta_flat(0), X, None)
        except RuntimeError as exc:  # e.g. integer X for a model with a float first layer
            raise TypeError(f"X cannot be run through the model: {exc}") from exc
        n = len(X)
        if out.numel() % n:
            raise ValueError("output_fn(model(X)) must have shape (n, C)")
        C = out.numel() // n
        if select is not None:
            select = torch.as_tensor(select)
            if select.shape != (n,) or select.dtype not in (torch.int64, torch.int32):
                raise ValueError(f"select must be an integer tensor of shape ({n},), got {select.dtype} {tuple(select.shape)}")
            if int(select.min()) < 0 or int(select.max()) >= C:
                raise ValueError(f"select must lie in [0, {C})")
            select = select.long()
        return X, select, n

    def _quad(self, s: int) -> int:
        return self.n_quad_early if s <= self.early_steps else self.n_quad

    def _run(self, X, select, *, data=False, order="reverse", by_step=False, window=None,
             abs_mode="per_step", include_decay=False, components=False, keep_params=False,
             explicit=True) -> tuple[PassResult, int]:  # fmt: skip
        X, select, n = self._inputs(X, select)
        if abs_mode not in _ABS_MODES:
            raise ValueError(f"abs_mode must be one of {_ABS_MODES}, got {abs_mode!r}")
        if order not in _ORDERS:
            raise ValueError(f"order must be one of {_ORDERS}, got {order!r}")
        N = self.history.n_steps
        window = N or 1 if window is None else int(check_scalar(window, "window", Interval("int", 1, None)))
        train = None
        if data:
            if self.dataset is None:
                raise ValueError("data influence needs the training dataset (pass dataset=...)")
            Xtr, ytr = self.dataset
            if Xtr.is_floating_point():
                Xtr = Xtr.to(self.history.dtype)
            train = (Xtr, ytr)
        res = run_pass(
            self._funcs, self.history, X, select, n=n, train=train, order=order,
            by_step=by_step, quad=self._quad, window=window, abs_mode=abs_mode,
            include_decay=include_decay, group_ids=self._group_ids if components else None,
            n_groups=len(self.group_names), keep_params=keep_params, explicit=explicit,
            train_grad=self.train_grad, chunk=self.chunk_size, block=self.block_size,
            progress=self.progress,
        )  # fmt: skip
        return res, n

    # --- the decomposition -------------------------------------------------------------

    def predict(self, X: torch.Tensor, select: torch.Tensor | None = None) -> torch.Tensor:
        """Kernel-machine reconstruction ``f_{theta_0}(X) + sum_s phi_s(X) . dtheta_s``.

        Parameters
        ----------
        X : Tensor of shape (n, ...)
            Test inputs.
        select : LongTensor of shape (n,), optional
            Keep only output ``select[i]`` of test point ``i`` (then C = 1), e.g. the logit of
            the correct class; saves a factor C in every pass.

        Returns
        -------
        Tensor of shape (n, C)

        Examples
        --------
        >>> import torch
        >>> model = torch.nn.Linear(2, 1); X, y = torch.randn(8, 2), torch.randn(8, 1)
        >>> h = train_with_history(model, lambda o, t: ((o - t) ** 2).sum(1), (X, y),
        ...                        n_steps=5, batch_size=4, progress=False)
        >>> epk = ExactPathKernel(model, h, lambda o, t: ((o - t) ** 2).sum(1), n_quad=1,
        ...                       early_steps=0)   # linear in theta: one point is exact
        >>> torch.allclose(epk.predict(X), model(X), atol=1e-6)
        True
        """
        res, n = self._run(X, select, explicit=False)
        return (res.f0 + res.step.sum(0)).view(n, -1)

    def residual(self, X: torch.Tensor, select: torch.Tensor | None = None) -> torch.Tensor:
        """``predict(X) - f_{theta_N}(X)``, the quadrature error, of shape (n, C).

        Examples
        --------
        >>> import torch
        >>> model = torch.nn.Linear(2, 1); X, y = torch.randn(8, 2), torch.randn(8, 1)
        >>> h = train_with_history(model, lambda o, t: ((o - t) ** 2).sum(1), (X, y),
        ...                        n_steps=3, batch_size=8, progress=False)
        >>> epk = ExactPathKernel(model, h, lambda o, t: ((o - t) ** 2).sum(1), n_quad=1, early_steps=0)
        >>> float(epk.residual(X).abs().max()) < 1e-5
        True
        """
        res, n = self._run(X, select, explicit=False)
        return (res.f0 + res.step.sum(0) - res.fN).view(n, -1)

    def step_influence(self, X: torch.Tensor, select: torch.Tensor | None = None, *,
                       split: bool = False) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
        """Step-wise influence ``S_s(x, o) = sum_{j,k} I + sum_j R = phi_s(x) . dtheta_s``.

        Parameters
        ----------
        X, select : see :meth:`predict`.
        split : bool, default=False
            Also return the weight-decay part ``sum_j R[x, o, j, s]`` (the data part is the
            difference).

        Returns
        -------
        Tensor of shape (N, n, C) [, Tensor of shape (N, n, C)]

        Examples
        --------
        >>> import torch
        >>> model = torch.nn.Linear(2, 1); X, y = torch.randn(8, 2), torch.randn(8, 1)
        >>> h = train_with_history(model, lambda o, t: ((o - t) ** 2).sum(1), (X, y),
        ...                        n_steps=4, batch_size=8, progress=False)
        >>> epk = ExactPathKernel(model, h, lambda o, t: ((o - t) ** 2).sum(1), n_quad=1, early_steps=0)
        >>> tuple(epk.step_influence(X[:3]).shape)
        (4, 3, 1)
        """
        res, n = self._run(X, select, explicit=False)
        step = res.step.view(-1, n, res.f0.numel() // n)
        return (step, res.decay.view_as(step)) if split else step

    def data_influence(self, X: torch.Tensor, select: torch.Tensor | None = None, *,
                       order: str = "reverse", by_step: bool = False
                       ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
        """Data influence ``D_k(x, o) = sum_{j,s} I[x, o, j, k, s]`` of every training sample.

        Parameters
        ----------
        X, select : see :meth:`predict`.
        order : {"reverse", "forward"}, default="reverse"
            ``"reverse"`` (PROPOSED, memory ``O(n C P)``): the reverse-time pass over gradient
            steps. ``"forward"``: the reference layout with an (M, P) per-sample momentum
            buffer, indexed by update step. Both give the same totals.
        by_step : bool, default=False
            Also return the per-step split (N, n, C, M): indexed by the step whose gradient
            the sample entered (reverse) or by update step ``s`` (forward).

        Returns
        -------
        Tensor of shape (n, C, M) [, Tensor of shape (N, n, C, M)]

        Examples
        --------
        >>> import torch
        >>> torch.manual_seed(1)  # doctest: +ELLIPSIS
        <torch._C.Generator object at ...>
        >>> model = torch.nn.Linear(2, 1); X, y = torch.randn(6, 2), torch.randn(6, 1)
        >>> mse = lambda o, t: ((o - t) ** 2).sum(1)
        >>> h = train_with_history(model, mse, (X, y), n_steps=5, batch_size=3,
        ...                        weight_decay=0.0, progress=False)
        >>> epk = ExactPathKernel(model, h, mse, (X, y), n_quad=1, early_steps=0)
        >>> D = epk.data_influence(X[:2])          # no weight decay: D sums to f_N - f_0
        >>> tuple(D.shape), torch.allclose(D.sum(-1), epk.step_influence(X[:2]).sum(0), atol=1e-5)
        ((2, 1, 6), True)
        """
        res, n = self._run(X, select, data=True, order=order, by_step=by_step)
        C = res.f0.numel() // n
        D = cast(torch.Tensor, res.data).view(n, C, -1)  # data=True fills data (and by step)
        if by_step:
            return D, cast(torch.Tensor, res.data_by_step).view(-1, n, C, D.shape[-1])
        return D

    def parameter_influence(self, X: torch.Tensor, select: torch.Tensor | None = None, *,
                            abs_mode: str = "per_step", window: int = 100,
                            include_decay: bool = False) -> dict[str, torch.Tensor]:  # fmt: skip
        """Parameter-wise influence ``P_j(x) = sum_{s in w} sum_o |sum_k I[x, o, j, k, s]|``.

        ``sum_k I[x, o, j, k, s] = phi_s(x)[o, j] (dtheta_s + eta_s lam theta_{s-1})[j]`` (the
        data part of the update), so no per-sample quantity is needed.

        Parameters
        ----------
        X, select : see :meth:`predict`.
        abs_mode : {"per_step", "total", "signed"}, default="per_step"
            Where the absolute value is taken (AMBIGUOUS in the paper): per step (the reference
            code), after summing the steps of a window, or never.
        window : int, default=100
            Steps per window (reference ``kernel_store_interval``).
        include_decay : bool, default=False
            Add the weight-decay part ``R`` (then the signed sums are ``phi_s . dtheta_s``).

        Returns
        -------
        dict name -> Tensor of shape (W, n, numel), ``W = ceil(N / window)``

        Examples
        --------
        >>> import torch
        >>> model = torch.nn.Linear(2, 1); X, y = torch.randn(8, 2), torch.randn(8, 1)
        >>> mse = lambda o, t: ((o - t) ** 2).sum(1)
        >>> h = train_with_history(model, mse, (X, y), n_steps=6, batch_size=8, progress=False)
        >>> P = ExactPathKernel(model, h, mse, n_quad=1, early_steps=0).parameter_influence(X[:2], window=3)
        >>> {k: tuple(v.shape) for k, v in P.items()}
        {'weight': (2, 2, 2), 'bias': (2, 2, 1)}
        """
        res, _ = self._run(X, select, window=window, abs_mode=abs_mode,
                           include_decay=include_decay, keep_params=True)  # fmt: skip
        flat = self.history._flat
        pieces = cast(torch.Tensor, res.params).split(flat.numels, dim=2)  # keep_params=True
        return dict(zip(flat.names, pieces, strict=True))

    def component_influence(self, X: torch.Tensor, select: torch.Tensor | None = None, *,
                            window: int = 100, relative: bool = True, abs_mode: str = "per_step",
                            include_decay: bool = False) -> Any:  # fmt: skip
        """Component influence: ``P_j`` summed over the parameters of each group and the tests.

        Parameters
        ----------
        X, select, abs_mode, window, include_decay : see :meth:`parameter_influence`.
        relative : bool, default=True
            Divide each window's column by its total (the share of each component).

        Returns
        -------
        pandas.DataFrame
            Rows: components (``param_groups``); columns: windows ``"first-last"`` step.

        Examples
        --------
        >>> import torch
        >>> model = torch.nn.Linear(2, 1); X, y = torch.randn(8, 2), torch.randn(8, 1)
        >>> mse = lambda o, t: ((o - t) ** 2).sum(1)
        >>> h = train_with_history(model, mse, (X, y), n_steps=6, batch_size=8, progress=False)
        >>> epk = ExactPathKernel(model, h, mse, n_quad=1, early_steps=0)
        >>> df = epk.component_influence(X[:2], window=3)
        >>> list(df.columns), [round(v, 6) for v in df.sum().tolist()]
        (['1-3', '4-6'], [1.0, 1.0])
        """
        import pandas as pd

        window = int(check_scalar(window, "window", Interval("int", 1, None)))
        res, _ = self._run(X, select, window=window, abs_mode=abs_mode,
                           include_decay=include_decay, components=True)  # fmt: skip
        comp = cast(torch.Tensor, res.component).sum(1).T.double()  # (G, W); components=True
        if relative:
            comp = comp / comp.sum(0, keepdim=True).clamp_min(torch.finfo(torch.float64).tiny)
        N = self.history.n_steps
        cols = [f"{w * window + 1}-{min((w + 1) * window, N)}" for w in range(comp.shape[1])]
        return pd.DataFrame(comp.numpy(), index=self.group_names, columns=cols)

    def completeness(self, X: torch.Tensor, select: torch.Tensor | None = None, *,
                     order: str = "reverse") -> CompletenessReport:
        """Check ``sum_{j,k,s} I + sum_{j,s} R = f_{theta_N}(x) - f_{theta_0}(x)``.

        Computes the data influence (one pass) and compares; ``quadrature_error`` isolates the
        error of the midpoint rule (``path_total``). The remaining difference is the float
        error of recomputing the per-sample gradients.

        Returns
        -------
        CompletenessReport

        Examples
        --------
        See :class:`ExactPathKernel`.
        """
        res, n = self._run(X, select, data=True, order=order)
        target = (res.fN - res.f0).view(n, -1)
        total = (cast(torch.Tensor, res.data).sum(1) + res.decay.sum(0)).view(n, -1)
        path_total = res.step.sum(0).view(n, -1)
        err = float((total - target).abs().max())
        scale = float(target.abs().max())
        return CompletenessReport(
            target=target, total=total, path_total=path_total, max_abs_error=err,
            rel_error=err / scale if scale > 0 else err,
            quadrature_error=float((path_total - target).abs().max()),
        )  # fmt: skip

    def decompose(self, X: torch.Tensor, select: torch.Tensor | None = None, *,
                  window: int = 100, abs_mode: str = "per_step", include_decay: bool = False,
                  data: bool = True) -> dict[str, Any]:  # fmt: skip
        """Step, data, decay and component influences from one reverse-time pass.

        Returns
        -------
        dict with ``f0``, ``fN`` (n, C); ``step``, ``decay`` (N, n, C); ``data`` (n, C, M) or
        None; ``component`` (W, n, G) raw sums; ``groups`` (list of G names); ``window``.

        Examples
        --------
        >>> import torch
        >>> model = torch.nn.Linear(2, 1); X, y = torch.randn(8, 2), torch.randn(8, 1)
        >>> mse = lambda o, t: ((o - t) ** 2).sum(1)
        >>> h = train_with_history(model, mse, (X, y), n_steps=4, batch_size=4, progress=False)
        >>> out = ExactPathKernel(model, h, mse, (X, y), n_quad=1, early_steps=0).decompose(X[:2], window=2)
        >>> tuple(out["data"].shape), tuple(out["component"].shape)
        ((2, 1, 8), (2, 2, 2))
        """
        res, n = self._run(X, select, data=data, window=window, abs_mode=abs_mode,
                           include_decay=include_decay, components=True)  # fmt: skip
        C = res.f0.numel() // n
        return {
            "f0": res.f0.view(n, C), "fN": res.fN.view(n, C),
            "step": res.step.view(-1, n, C), "decay": res.decay.view(-1, n, C),
            "data": None if res.data is None else res.data.view(n, C, -1),
            "component": res.component, "groups": list(self.group_names), "window": window,
        }  # fmt: skip

    def update_residual(self, steps: Any = None) -> float:
        """Largest relative error of the logged updates re-derived from the log.

        Recomputes each batch gradient at ``theta_{s-1}``, runs AdamW's moment recursions and
        compares ``-eta lam theta_{s-1} - eta mhat_s / d_s`` with the logged ``dtheta_s``
        (``d_s`` from the logged ``v_s``): small values confirm that the loss, batches and
        optimizer settings match the run, which the exactness of the decomposition needs.

        Parameters
        ----------
        steps : int, optional
            Check only the first ``steps`` steps (default all).

        Returns
        -------
        float
            ``max_s |predicted - logged| / max |logged|`` over the checked steps.

        Examples
        --------
        >>> import torch
        >>> model = torch.nn.Linear(2, 1); X, y = torch.randn(8, 2), torch.randn(8, 1)
        >>> mse = lambda o, t: ((o - t) ** 2).sum(1)
        >>> h = train_with_history(model, mse, (X, y), n_steps=4, batch_size=4, progress=False)
        >>> ExactPathKernel(model, h, mse, (X, y)).update_residual() < 1e-4
        True
        """
        if self.dataset is None:
            raise ValueError("update_residual needs the training dataset (pass dataset=...)")
        h = self.history
        N = h.n_steps if steps is None else int(check_scalar(steps, "steps", Interval("int", 0, h.n_steps)))
        Xtr, ytr = self.dataset
        if Xtr.is_floating_point():
            Xtr = Xtr.to(h.dtype)
        b1, b2 = h.betas
        m = torch.zeros(h.n_params, dtype=h.dtype)
        v = torch.zeros_like(m)
        worst = 0.0
        for s in range(1, N + 1):
            th_prev = h.theta_flat(s - 1)
            th_s, v_log, lr_t, wd_t, batch = h.row(s)
            g = self._funcs.batch_grad(th_prev, Xtr[batch], ytr[batch])
            m = b1 * m + (1 - b1) * g
            v = b2 * v + (1 - b2) * g * g
            d = torch.sqrt(v_log / (1 - b2**s)) + h.eps
            lr = h._flat.expand(lr_t).to(h.dtype)
            wd = h._flat.expand(wd_t).to(h.dtype)
            pred = -lr * wd * th_prev - lr * (m / (1 - b1**s)) / d
            dth = th_s - th_prev
            scale = float(dth.abs().max()) or 1.0
            worst = max(worst, float((pred - dth).abs().max()) / scale)
        return worst
