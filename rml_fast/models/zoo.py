"""Named recipes of the tiny-model zoo: ``tiny_model("induction")`` trains (or loads) one."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rml_fast.models.tasks import Task, make_task
from rml_fast.models.train import train_tiny
from rml_fast.models.transformer import TinyConfig, TinyTransformer


@dataclass(frozen=True)
class Recipe:
    """A task, a model shape and training hyper-parameters."""

    task: str
    task_kwargs: dict[str, Any]
    cfg: dict[str, Any]
    train: dict[str, Any] = field(default_factory=dict)


ZOO: dict[str, Recipe] = {}


def tiny_model(
    name: str, *, progress: bool = True, cache: bool = True
) -> tuple[TinyTransformer, Task]:
    """Train (or load from the cache) the zoo model ``name``; returns ``(model, task)``."""
    if name not in ZOO:
        raise ValueError(f"name must be one of {sorted(ZOO)}, got {name!r}")
    r = ZOO[name]
    task = make_task(r.task, **r.task_kwargs)
    cfg = TinyConfig(**{"d_vocab": task.d_vocab, "n_ctx": task.seq_len, **r.cfg})
    return train_tiny(cfg, task, progress=progress, cache=cache, **r.train), task
