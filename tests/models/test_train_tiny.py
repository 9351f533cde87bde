"""train_tiny: the smallest zoo models learn their task; checkpoints are cached and resumable."""

from __future__ import annotations

import pytest
import torch

from rml_fast.models import (
    CharLMTask,
    DigitsAddTask,
    InductionTask,
    ModAddTask,
    TinyConfig,
    TinyTransformer,
    cache_dir,
    train_tiny,
)


def test_induction_learns():
    # fixed period and offset (a positional rule solves it): trains in seconds
    task = InductionTask(half=8, d_vocab=32, min_half=8, random_offset=False)
    cfg = TinyConfig(n_layers=2, d_model=32, n_heads=4, d_mlp=None, n_ctx=16, d_vocab=32)
    model = train_tiny(cfg, task, steps=250, lr=3e-3, progress=False, cache=False)
    chance = 1 / (task.d_vocab - 1)
    assert task.accuracy(TinyTransformer(cfg, seed=0)) < 5 * chance
    assert task.accuracy(model) > 0.9


@pytest.mark.slow
def test_induction_small_zoo_model_learns(induction_small):
    # random period and offset: the model must match tokens, not positions
    model, task = induction_small
    assert task.accuracy(model) > 0.8


def test_charlm_learns_something():
    task = CharLMTask(seq_len=32)
    cfg = TinyConfig(n_layers=1, d_model=32, n_heads=2, d_mlp=64, n_ctx=32, d_vocab=128)
    model = train_tiny(cfg, task, steps=150, lr=3e-3, batch=32, progress=False, cache=False)
    x, y = task.eval_batch(64)
    with torch.no_grad():
        loss = torch.nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
    assert float(loss) < 0.75 * float(torch.log(torch.tensor(128.0)))  # well below uniform


class _Interrupting(InductionTask):
    """Raises KeyboardInterrupt when asked for batch number ``at``."""

    def __init__(self, at):
        super().__init__(half=4, d_vocab=12)
        self._at, self._calls = at, 0

    def spec(self):
        return InductionTask(half=4, d_vocab=12).spec()

    def train_batch(self, batch, gen):
        if self._calls == self._at:
            self._calls += 1
            raise KeyboardInterrupt
        self._calls += 1
        return super().train_batch(batch, gen)


def test_cache_and_resume(tmp_path, monkeypatch):
    monkeypatch.setenv("RML_FAST_CACHE", str(tmp_path))
    cfg = TinyConfig(n_layers=1, d_model=16, n_heads=2, d_mlp=None, n_ctx=9, d_vocab=12)
    kw = {"steps": 30, "lr": 1e-2, "batch": 8, "progress": False, "checkpoint_every": 10}
    full = train_tiny(cfg, InductionTask(half=4, d_vocab=12), cache=False, **kw)
    with pytest.raises(KeyboardInterrupt):
        train_tiny(cfg, _Interrupting(at=17), **kw)
    partial = list(cache_dir().glob("*.partial.pt"))
    assert len(partial) == 1 and torch.load(partial[0], weights_only=False)["step"] == 17
    resumed = train_tiny(cfg, InductionTask(half=4, d_vocab=12), **kw)
    for a, b in zip(full.parameters(), resumed.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert not list(cache_dir().glob("*.partial.pt")) and len(list(cache_dir().glob("*.pt"))) == 1
    # a second call loads the stored weights instead of training
    loaded = train_tiny(cfg, _Interrupting(at=0), **kw)
    for a, b in zip(resumed.parameters(), loaded.parameters(), strict=True):
        assert torch.equal(a, b)


def test_invalid_arguments():
    cfg = TinyConfig(n_layers=1, d_model=16, n_heads=2, d_mlp=None, n_ctx=9, d_vocab=12)
    task = InductionTask(half=4, d_vocab=12)
    with pytest.raises(ValueError, match="optimizer"):
        train_tiny(cfg, task, steps=1, optimizer="lbfgs", cache=False)
    with pytest.raises(ValueError, match="lr"):
        train_tiny(cfg, task, steps=1, lr=0.0, cache=False)
    with pytest.raises(TypeError, match="steps"):
        train_tiny(cfg, task, steps=1.5, cache=False)
    with pytest.raises(ValueError, match="d_vocab"):
        train_tiny(cfg, InductionTask(half=4, d_vocab=20), steps=1, cache=False)
    with pytest.raises(ValueError, match="n_ctx"):
        train_tiny(cfg, InductionTask(half=8, d_vocab=12), steps=1, cache=False)
    with pytest.raises(ValueError, match="task"):
        train_tiny(cfg, "nope", steps=1, cache=False)


@pytest.mark.slow
def test_digits_add_learns():
    task = DigitsAddTask()
    cfg = TinyConfig(n_layers=2, d_model=32, n_heads=4, d_mlp=128, n_ctx=7, d_vocab=13)
    model = train_tiny(cfg, task, steps=500, lr=3e-3, progress=False, cache=False)
    assert task.accuracy(TinyTransformer(cfg, seed=0)) < 0.3
    assert task.accuracy(model) > 0.5  # chance is 0.1


@pytest.mark.slow
def test_modadd_full_batch_adamw_fits_the_training_split():
    # the grokking set-up (full batch, AdamW, weight decay 1); generalisation takes ~10k steps
    task = ModAddTask(p=23, train_frac=0.5)
    cfg = TinyConfig(n_layers=1, d_model=64, n_heads=4, d_mlp=256, n_ctx=3, d_vocab=24, ln=False)
    model = train_tiny(
        cfg, task, steps=600, lr=3e-3, weight_decay=1.0, optimizer="adamw", batch=10**6,
        progress=False, cache=False,
    )  # fmt: skip
    tokens, answers = task.full_batch("train")
    with torch.no_grad():
        acc = float((model(tokens)[:, -1].argmax(-1) == answers).float().mean())
    assert acc > 0.95
