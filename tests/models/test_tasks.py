"""Task generators: the answers and corruptions are what each task's definition says."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rml_fast.models import (
    CharLMTask,
    DigitsAddTask,
    InductionTask,
    IOITask,
    ModAddTask,
    make_task,
    stdlib_corpus,
)


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


def test_induction_batches_and_queries():
    task = InductionTask(half=6, d_vocab=20)
    tokens, targets, mask = task.train_batch(64, _gen())
    assert tokens.shape == (64, 12) and bool((tokens[:, 0] == 0).all())
    assert torch.equal(tokens[:, 1:], targets[:, :-1])
    periods, offsets = set(), set()
    for row, tgt, m in zip(tokens.tolist(), targets.tolist(), mask.tolist(), strict=True):
        assert sum(m) >= task.min_half - 1
        for p in [i for i, on in enumerate(m) if on]:
            # induction: the target follows the previous (unique) occurrence of the token
            prev = [j for j in range(p) if row[j] == row[p]]
            assert len(prev) == 1 and tgt[p] == row[prev[0] + 1]
            periods.add(p - prev[0])
        offsets.add(min(i for i, on in enumerate(m) if on) - (p - prev[0]))
    assert len(periods) > 1 and len(offsets) > 1  # no fixed positional rule
    fixed = InductionTask(half=6, d_vocab=20, min_half=6, random_offset=False)
    tokens, targets, mask = fixed.train_batch(8, _gen())
    seq = torch.cat([tokens, targets[:, -1:]], 1)
    assert torch.equal(seq[:, 1:7], seq[:, 7:13])
    for q in task.queries(10, rng=1):
        c = q.clean[0].tolist()
        assert len(c) == 12 and c[1:6] == c[7:12]
        assert q.answer == c[6] and q.answer not in q.wrong
        assert set(q.wrong) | {q.answer} == set(c[1:7]) and len(set(c[1:7])) == 6
        assert q.corrupt[0, 7:].tolist() == c[7:] and q.corrupt[0, 0] == 0
        assert q.corrupt[0, 1:7].tolist() != c[1:7]
    # deterministic given the seed
    a, b = task.queries(3, rng=5), task.queries(3, rng=5)
    assert all(torch.equal(x.clean, y.clean) for x, y in zip(a, b, strict=True))


def test_ioi_queries_follow_templates():
    task = IOITask()
    qs = task.queries(60, rng=0)
    orders = set()
    for q in qs:
        words = task.decode(q.clean[0]).split()
        cwords = task.decode(q.corrupt[0]).split()
        io, s = task.vocab[q.answer], task.vocab[q.wrong[0]]
        assert words.count(s) == 2 and words.count(io) == 1
        # ABC corruption: the second S mention becomes a third name, nothing else changes
        diff = [i for i, (a, b) in enumerate(zip(words, cwords, strict=True)) if a != b]
        assert len(diff) == 1 and words[diff[0]] == s and cwords[diff[0]] in task.names
        assert cwords[diff[0]] not in (s, io)
        first = min(words.index(io), words.index(s))
        orders.add("ABBA" if words[first] == io else "BABA")
        assert q.pos == len(words) - 1
    assert orders == {"ABBA", "BABA"}
    views = task.paraphrases(qs[0])
    assert len(views) == task.n_templates
    assert len({tuple(v.clean[0].tolist()) for v in views}) == task.n_templates
    assert all(v.answer == qs[0].answer and v.wrong == qs[0].wrong for v in views)
    _tokens, targets, mask = task.train_batch(8, _gen())
    assert bool(mask[:, -1].all()) and int(mask.sum()) == 8
    assert all(task.vocab[int(t)] in task.names for t in targets[:, -1])


def test_modadd():
    task = ModAddTask(p=11, train_frac=0.5, split_seed=3)
    train, ans = task.full_batch("train")
    test, _ans_t = task.full_batch("test")
    assert len(train) + len(test) == 121 and len(train) == 60
    pairs = {tuple(r[:2].tolist()) for r in train} | {tuple(r[:2].tolist()) for r in test}
    assert len(pairs) == 121
    assert torch.equal(ans, (train[:, 0] + train[:, 1]) % 11)
    tokens, _targets, _ = task.train_batch(10**6, _gen())  # full batch
    assert torch.equal(tokens, train)
    for q in task.queries(20, rng=0):
        a, b = q.clean[0, :2].tolist()
        b2 = q.corrupt[0, 1].item()
        assert q.answer == (a + b) % 11 and q.wrong == ((a + b2) % 11,) and b2 != b


def test_digits_add():
    task = DigitsAddTask()
    tokens, targets, _ = task.train_batch(50, _gen())
    a = tokens[:, 1] * 10 + tokens[:, 2]
    b = tokens[:, 4] * 10 + tokens[:, 5]
    assert torch.equal(targets[:, -1], ((a + b) // 10) % 10)
    for q in task.queries(20, rng=1):
        c, k = q.clean[0], q.corrupt[0]
        assert int((c != k).sum()) == 1 and q.answer != q.wrong[0]


def test_charlm_corpus_is_stdlib_text():
    text = stdlib_corpus()
    assert len(text) > 500_000 and text.isascii()
    assert "def dedent(" in text  # textwrap
    task = CharLMTask(seq_len=32)
    tokens, targets, mask = task.train_batch(4, _gen())
    assert torch.equal(tokens[:, 1:], targets[:, :-1]) and bool(mask.all())
    raw = np.frombuffer(text.encode("ascii"), dtype=np.uint8)
    row = tokens[0].numpy()
    # every window is a contiguous slice of the corpus
    hits = np.flatnonzero(raw[: len(raw) - 32] == row[0])
    assert any(np.array_equal(raw[h : h + 32], row) for h in hits)
    with pytest.raises(NotImplementedError):
        task.queries(1)


def test_make_task_and_validation():
    assert isinstance(make_task("ioi"), IOITask)
    with pytest.raises(ValueError, match="task"):
        make_task("sorting")
    with pytest.raises(ValueError, match="d_vocab"):
        InductionTask(half=8, d_vocab=9)
    with pytest.raises(TypeError, match="half"):
        InductionTask(half=2.5)
    with pytest.raises(ValueError, match="n_names"):
        IOITask(n_names=2)
