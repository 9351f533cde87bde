"""Tiny reference models: a hooked GPT-style transformer, its offline tasks and training.

>>> from rml_fast.models import TinyConfig, TinyTransformer, make_task
>>> task = make_task("induction", half=4, d_vocab=16)
>>> model = TinyTransformer(TinyConfig(n_layers=1, d_model=16, n_heads=2, d_mlp=None,
...                                    d_vocab=16, n_ctx=16), seed=0)
>>> tokens, targets, mask = task.train_batch(2, __import__("torch").Generator().manual_seed(0))
>>> tuple(model(tokens).shape)
(2, 8, 16)
"""

from __future__ import annotations

from rml_fast.models.convert import to_transformer_lens
from rml_fast.models.diffusion import (
    ConceptMixture,
    ConditionalDenoiser,
    DDPMSchedule,
    concept_mixture,
    ddpm_sample,
    train_denoiser,
)
from rml_fast.models.tasks import (
    CharLMTask,
    DigitsAddTask,
    InductionTask,
    IOITask,
    ModAddTask,
    Query,
    Task,
    make_task,
    stdlib_corpus,
)
from rml_fast.models.train import cache_dir, train_tiny
from rml_fast.models.transformer import HookPoint, TinyConfig, TinyTransformer
from rml_fast.models.zoo import ZOO, tiny_model

__all__ = [
    "ZOO",
    "CharLMTask",
    "ConceptMixture",
    "ConditionalDenoiser",
    "DDPMSchedule",
    "DigitsAddTask",
    "HookPoint",
    "IOITask",
    "InductionTask",
    "ModAddTask",
    "Query",
    "Task",
    "TinyConfig",
    "TinyTransformer",
    "cache_dir",
    "concept_mixture",
    "ddpm_sample",
    "make_task",
    "stdlib_corpus",
    "tiny_model",
    "to_transformer_lens",
    "train_denoiser",
    "train_tiny",
]
