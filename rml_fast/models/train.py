"""Training loop for the tiny-transformer zoo, with progress and resumable cached checkpoints.

Weights are always produced by this code, never downloaded. A finished model is stored under
``cache_dir()/<key>.pt`` where ``key`` hashes the config, the task, every training argument
and :data:`CHECKPOINT_VERSION`; a later call with the same arguments loads it. While training,
a partial checkpoint ``<key>.partial.pt`` is written every ``checkpoint_every`` steps (and on
``KeyboardInterrupt``), and the next call resumes from it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any

import torch

from rml_fast._validation import Interval, check_scalar
from rml_fast.models.tasks import Task, make_task
from rml_fast.models.transformer import TinyConfig, TinyTransformer

__all__ = [
    "CHECKPOINT_VERSION",
    "cache_dir",
    "train_tiny",
]

logger = logging.getLogger(__name__)

CHECKPOINT_VERSION = 1
_OPTIMIZERS = ("adam", "adamw", "sgd")


def cache_dir() -> Path:
    """Where trained checkpoints live: ``$RML_FAST_CACHE/models`` or ``~/.cache/rml_fast/models``.

    ``XDG_CACHE_HOME`` is honoured when ``RML_FAST_CACHE`` is unset.
    """
    root = os.environ.get("RML_FAST_CACHE")
    if root is None:
        xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        root = str(Path(xdg) / "rml_fast")
    return Path(root) / "models"


def _key(cfg: TinyConfig, task: Task, hp: dict[str, Any]) -> str:
    blob = json.dumps(
        {"v": CHECKPOINT_VERSION, "cfg": cfg.to_dict(), "task": task.spec(), "hp": hp},
        sort_keys=True,
        default=str,
    )
    return f"{task.name}-{hashlib.sha256(blob.encode()).hexdigest()[:16]}"


def train_tiny(
    cfg: TinyConfig,
    task: Task | str,
    *,
    steps: int,
    lr: float = 1e-3,
    weight_decay: float = 0.0,
    optimizer: str = "adam",
    seed: int = 0,
    batch: int = 64,
    warmup: int = 0,
    progress: bool = True,
    cache: bool = True,
    checkpoint_every: int = 500,
) -> TinyTransformer:
    """Train a :class:`TinyTransformer` on ``task`` with next-token cross-entropy.

    Minimises ``mean_{(b,p) in mask} -log softmax(logits[b, p])[target[b, p]]`` over fresh
    batches from ``task.train_batch`` (seeded by ``seed``), with a linear warm-up of ``warmup``
    steps and gradient-norm clipping at 1.

    Parameters
    ----------
    cfg : TinyConfig
        ``d_vocab`` must cover the task's vocabulary and ``n_ctx`` its sequence length.
    task : Task or str
        A task object or a task name for :func:`~rml_fast.models.tasks.make_task`.
    steps : int
        Number of optimiser steps.
    lr, weight_decay : float
    optimizer : {"adam", "adamw", "sgd"}, default="adam"
    seed : int, default=0
        Seeds initialisation and data.
    batch : int, default=64
    warmup : int, default=0
    progress : bool, default=True
        Show a tqdm progress bar.
    cache : bool, default=True
        Load/store the trained weights (and resumable partial checkpoints) in :func:`cache_dir`.
    checkpoint_every : int, default=500

    Returns
    -------
    model : TinyTransformer
        In eval mode, on the CPU.

    Raises
    ------
    ValueError
        If a hyper-parameter is out of range or the config cannot hold the task.
    """
    if isinstance(task, str):
        task = make_task(task)
    if not isinstance(task, Task):
        raise TypeError(f"task must be a Task or a task name, got {type(task).__name__}")
    if not isinstance(cfg, TinyConfig):
        raise TypeError(f"cfg must be a TinyConfig, got {type(cfg).__name__}")
    steps = int(check_scalar(steps, "steps", Interval("int", 0, None)))
    # bounded by float32's range: the optimisers keep these as float32 tensors
    lr = float(check_scalar(lr, "lr", Interval("real", 0, 1e30, "neither")))
    weight_decay = float(check_scalar(weight_decay, "weight_decay", Interval("real", 0, 1e30)))
    batch = int(check_scalar(batch, "batch", Interval("int", 1, None)))
    warmup = int(check_scalar(warmup, "warmup", Interval("int", 0, None)))
    seed = int(check_scalar(seed, "seed", Interval("int", 0, None)))
    checkpoint_every = int(
        check_scalar(checkpoint_every, "checkpoint_every", Interval("int", 1, None))
    )
    if optimizer not in _OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {_OPTIMIZERS}, got {optimizer!r}")
    if cfg.d_vocab < task.d_vocab:
        raise ValueError(f"cfg.d_vocab={cfg.d_vocab} < the task's vocabulary {task.d_vocab}")
    if cfg.n_ctx < task.seq_len:
        raise ValueError(f"cfg.n_ctx={cfg.n_ctx} < the task's sequence length {task.seq_len}")

    hp = {"steps": steps, "lr": lr, "wd": weight_decay, "opt": optimizer, "seed": seed,
          "batch": batch, "warmup": warmup}  # fmt: skip
    key = _key(cfg, task, hp)
    final = cache_dir() / f"{key}.pt"
    partial = cache_dir() / f"{key}.partial.pt"
    model = TinyTransformer(cfg, seed=seed)
    if cache and final.is_file():
        model.load_state_dict(torch.load(final, map_location="cpu", weights_only=True))
        logger.info("loaded cached model %s", final)
        return model.eval()

    params = list(model.parameters())
    if optimizer == "adam":
        opt: torch.optim.Optimizer = torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)
    elif optimizer == "adamw":
        opt = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, betas=(0.9, 0.98))
    else:
        opt = torch.optim.SGD(params, lr=lr, weight_decay=weight_decay, momentum=0.9)
    gen = torch.Generator().manual_seed(seed + 1)
    start = 0
    if cache and partial.is_file():
        state = torch.load(partial, map_location="cpu", weights_only=False)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        gen.set_state(state["gen"])
        start = int(state["step"])
        logger.info("resuming %s at step %d", partial, start)

    def save_partial(step: int) -> None:
        if cache:
            partial.parent.mkdir(parents=True, exist_ok=True)
            tmp = partial.with_suffix(".tmp")
            torch.save(
                {"model": model.state_dict(), "opt": opt.state_dict(), "gen": gen.get_state(),
                 "step": step},
                tmp,
            )  # fmt: skip
            tmp.replace(partial)

    from tqdm.auto import tqdm

    model.train()
    bar = tqdm(range(start, steps), desc=f"train {task.name}", disable=not progress, leave=False)
    step = start
    try:
        for step in bar:
            tokens, targets, mask = task.train_batch(batch, gen)
            scale = min(1.0, (step + 1) / warmup) if warmup else 1.0
            for g in opt.param_groups:
                g["lr"] = lr * scale
            logits = model(tokens)
            loss = torch.nn.functional.cross_entropy(logits[mask], targets[mask])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            if step % 50 == 0:
                bar.set_postfix(loss=f"{float(loss.detach()):.4f}")
            if (step + 1) % checkpoint_every == 0 and step + 1 < steps:
                save_partial(step + 1)
    except KeyboardInterrupt:
        save_partial(step)
        raise
    model.eval()
    if cache:
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = final.with_suffix(".tmp")
        torch.save(model.state_dict(), tmp)
        tmp.replace(final)
        partial.unlink(missing_ok=True)
    return model
