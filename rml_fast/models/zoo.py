"""Named recipes of the tiny-model zoo: ``tiny_model("induction")`` trains (or loads) one."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rml_fast.models.tasks import Task, make_task
from rml_fast.models.train import train_tiny
from rml_fast.models.transformer import TinyConfig, TinyTransformer

__all__ = [
    "ZOO",
    "Recipe",
    "tiny_model",
]


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


def _register(name: str, recipe: Recipe) -> None:
    ZOO[name] = recipe


_ATTN2 = {"n_layers": 2, "d_model": 64, "n_heads": 4, "d_mlp": None}
_register(  # spec: 2L attn-only D=64 H=4 (81 edges), ~1-3k Adam steps; periods 2..16 (see below)
    "induction",
    Recipe(
        "induction", {"half": 16, "d_vocab": 64, "min_half": 2}, _ATTN2, {"steps": 2000, "lr": 1e-3}
    ),
)
_register(  # the smallest model used by the tests (~15 s on one core); periods 2..16 make it
    # form a previous-token head and classic induction heads (a narrower range of periods
    # lets a 2-layer model solve the task with fixed-offset attention instead)
    "induction-small",
    Recipe(
        "induction",
        {"half": 16, "d_vocab": 64, "min_half": 2},
        {"n_layers": 2, "d_model": 32, "n_heads": 4, "d_mlp": None},
        {"steps": 1500, "lr": 3e-3},
    ),
)
_register(  # 2L4H with MLPs (110 edges)
    "ioi",
    Recipe(
        "ioi",
        {"n_names": 40},
        {"n_layers": 2, "d_model": 64, "n_heads": 4, "d_mlp": 256},
        {"steps": 1500, "lr": 2e-3},
    ),
)
_register(  # the small IOI model used by the tests (~10 s on one core)
    "ioi-small",
    Recipe(
        "ioi",
        {"n_names": 40},
        {"n_layers": 2, "d_model": 32, "n_heads": 4, "d_mlp": 128},
        {"steps": 600, "lr": 3e-3},
    ),
)
_register(  # 4L8H D=128 (1519 edges)
    "ioi-4l8h",
    Recipe(
        "ioi",
        {"n_names": 40},
        {"n_layers": 4, "d_model": 128, "n_heads": 8, "d_mlp": 512},
        {"steps": 3000, "lr": 1e-3, "warmup": 200},
    ),
)
_register(  # Nanda et al.: 1L ReLU, full-batch AdamW with wd=1 (p=53: a 50% split groks by ~2500
    # steps, test accuracy 1.0 at 3000; a 30% split with GELU had not grokked after 15k steps)
    "modadd",
    Recipe(
        "modadd",
        {"p": 53, "train_frac": 0.5},
        {"n_layers": 1, "d_model": 128, "n_heads": 4, "d_mlp": 512, "ln": False, "act": "relu"},
        {"steps": 3000, "lr": 1e-3, "weight_decay": 1.0, "optimizer": "adamw", "batch": 10**6},
    ),
)
_register(
    "digits_add",
    Recipe(
        "digits_add",
        {},
        {"n_layers": 2, "d_model": 64, "n_heads": 4, "d_mlp": 256},
        {"steps": 3000, "lr": 1e-3},
    ),
)
_register(
    "charlm",
    Recipe(
        "charlm",
        {"seq_len": 64},
        {"n_layers": 2, "d_model": 128, "n_heads": 4, "d_mlp": 512},
        {"steps": 3000, "lr": 1e-3, "batch": 32, "warmup": 100},
    ),
)
