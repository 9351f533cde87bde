"""Offline task generators for the tiny-transformer zoo.

Every task is deterministic given its seed and needs no download. A task gives

* training batches ``(tokens [B, P], targets [B, P], loss_mask [B, P])`` for next-token
  cross-entropy on the masked positions, and
* single-query circuit problems :class:`Query` ``(clean, corrupt, answer, wrong, pos)``: the
  clean prompt, its corrupted counterpart ``q'``, the answer token, the contrast tokens of the
  metric ``L = logit[answer] - mean(logit[wrong])`` at position ``pos``.

=============  ==================================================  =====================================
task           prompt                                              corruption ``q'``
=============  ==================================================  =====================================
``induction``  BOS + ``half`` distinct random tokens, repeated     resample the first half
``ioi``        word-level IOI templates (ABBA and BABA)            "ABC": S2 replaced by a third name
``modadd``     ``a b =`` -> ``(a + b) mod p``                      ``b`` replaced by ``b'``
``digits_add`` ``a1 a0 + b1 b0 =`` -> tens digit of ``a + b``      one operand digit changed
``charlm``     windows of the Python standard library's source     (none)
=============  ==================================================  =====================================
"""

from __future__ import annotations

import functools
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rml_fast._validation import Interval, check_rng, check_scalar

__all__ = [
    "CHARLM_MODULES",
    "IOI_NAMES",
    "IOI_OBJECTS",
    "IOI_PLACES",
    "IOI_TEMPLATES",
    "TASKS",
    "CharLMTask",
    "DigitsAddTask",
    "IOITask",
    "InductionTask",
    "ModAddTask",
    "Query",
    "Task",
    "make_task",
    "stdlib_corpus",
]


@dataclass(frozen=True)
class Query:
    """One query for circuit discovery.

    Attributes
    ----------
    clean, corrupt : LongTensor of shape (1, P)
    answer : int
        Token whose logit the metric rewards.
    wrong : tuple of int
        Tokens whose mean logit is subtracted.
    pos : int
        Position of the answer logits (``P - 1`` for all tasks here).
    template : int
        Which prompt template produced it (paraphrase views share the answer, not the template).
    """

    clean: torch.Tensor
    corrupt: torch.Tensor
    answer: int
    wrong: tuple[int, ...]
    pos: int
    template: int = 0
    meta: dict[str, Any] = field(default_factory=dict, compare=False)


def _check_batch(batch: Any, gen: Any) -> int:
    """``train_batch``'s arguments: a batch size >= 1 and a ``torch.Generator``."""
    batch = int(check_scalar(batch, "batch", Interval("int", 1, None)))
    if not isinstance(gen, torch.Generator):
        raise TypeError(f"gen must be a torch.Generator, got {type(gen).__name__}")
    return batch


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(int(seed))


class Task:
    """Base class: a named generator of training batches and queries."""

    name = "task"
    d_vocab = 0
    seq_len = 0

    def train_batch(
        self, batch: int, gen: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """A random training batch drawn from ``gen``.

        Returns
        -------
        tokens, targets : LongTensor of shape (batch, seq_len)
            ``targets[:, p]`` is the token to predict at position ``p`` (the next token).
        mask : BoolTensor of shape (batch, seq_len)
            The positions the loss (and :meth:`accuracy`) counts.
        """
        raise NotImplementedError

    def queries(self, n: int, rng: Any = None) -> list[Query]:
        """``n`` random (clean, corrupted) query pairs for circuit discovery, seeded by ``rng``."""
        raise NotImplementedError

    def spec(self) -> dict[str, Any]:
        """Parameters that identify the task (used in checkpoint keys)."""
        return {"name": self.name, **{k: v for k, v in vars(self).items() if not k.startswith("_")}}

    def accuracy(self, model: torch.nn.Module, n: int = 256, seed: int = 12345) -> float:
        """Fraction of masked training positions where the argmax logit is the target."""
        tokens, targets, mask = self.train_batch(n, _gen(seed))
        with torch.no_grad():
            pred = model(tokens).argmax(-1)
        return float(((pred == targets) & mask).sum() / mask.sum())


# --- induction ---------------------------------------------------------------------------


class InductionTask(Task):
    """BOS, random filler, a segment ``A`` of ``m`` distinct random tokens, ``A`` again, filler.

    Training rows draw the period ``m`` uniformly from ``[min_half, half]`` and (with
    ``random_offset``) the start of ``A`` uniformly among the positions that fit in ``2 half``
    tokens; filler tokens never occur in ``A``. So no positional rule solves the task and the
    model must form induction heads (with ``min_half = half`` and ``random_offset=False`` a
    tiny model learns a positional shortcut instead). Every row has ``2 half`` tokens.
    The loss is on the predictable positions of the second copy. A query is
    ``BOS + A + A[:half-1]`` (``m = half``) and asks for ``A[half-1]``; the metric subtracts the
    mean logit of the other tokens of ``A``; ``q'`` resamples the first copy.
    """

    name = "induction"

    def __init__(
        self,
        half: int = 16,
        d_vocab: int = 64,
        min_half: int | None = None,
        random_offset: bool = True,
    ) -> None:
        self.random_offset = bool(random_offset)
        self.half = int(check_scalar(half, "half", Interval("int", 2, 1024)))
        self.d_vocab = int(check_scalar(d_vocab, "d_vocab", Interval("int", half + 2, None)))
        lo = max(2, self.half // 2) if min_half is None else min_half
        self.min_half = int(check_scalar(lo, "min_half", Interval("int", 2, self.half)))
        self.seq_len = 2 * self.half

    def _distinct(self, batch: int, gen: torch.Generator) -> torch.Tensor:
        keys = torch.rand(batch, self.d_vocab - 1, generator=gen)
        return keys.argsort(-1)[:, : self.half] + 1  # distinct tokens in [1, V)

    def _sample(self, batch: int, gen: torch.Generator) -> torch.Tensor:
        first = self._distinct(batch, gen)
        bos = torch.zeros(batch, 1, dtype=torch.long)
        return torch.cat([bos, first, first], dim=1)

    def train_batch(
        self, batch: int, gen: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        batch = _check_batch(batch, gen)
        h, v = self.half, self.d_vocab
        perm = torch.rand(batch, v - 1, generator=gen).argsort(-1) + 1
        first, pool = perm[:, :h], perm[:, h:]  # the filler never reuses a token of A
        filler = pool.gather(1, torch.randint(0, v - 1 - h, (batch, 2 * h), generator=gen))
        m = torch.randint(self.min_half, h + 1, (batch, 1), generator=gen)
        if self.random_offset:
            off = (torch.rand(batch, 1, generator=gen) * (2 * h - 2 * m + 1)).long()
        else:
            off = torch.zeros_like(m)
        pos = torch.arange(2 * h)[None, :] - off
        idx = torch.where(pos < m, pos, pos - m).clamp(0, h - 1)
        body = torch.where((pos >= 0) & (pos < 2 * m), first.gather(1, idx), filler)
        seq = torch.cat([torch.zeros(batch, 1, dtype=torch.long), body], dim=1)
        tokens, targets = seq[:, :-1], seq[:, 1:]
        # token position p predicts body[p]: A[1..m-1] of the second copy
        mask = (pos >= m + 1) & (pos <= 2 * m - 1)
        return tokens, targets, mask

    def queries(self, n: int, rng: Any = None) -> list[Query]:
        g = _gen(int(check_rng(rng).integers(2**62)))  # _gen applies int() too
        out = []
        for _ in range(n):
            seq = self._sample(1, g)
            clean = seq[:, :-1]
            fresh = self._sample(1, g)[:, 1 : 1 + self.half]
            corrupt = clean.clone()
            corrupt[:, 1 : 1 + self.half] = fresh
            answer = int(seq[0, -1])
            wrong = tuple(int(t) for t in seq[0, 1 : 1 + self.half] if int(t) != answer)
            out.append(Query(clean, corrupt, answer, wrong, clean.shape[1] - 1))
        return out


# --- IOI ---------------------------------------------------------------------------------

IOI_NAMES = [
    "Mary",
    "John",
    "Alice",
    "Bob",
    "Tom",
    "James",
    "Anna",
    "Kate",
    "Paul",
    "Mark",
    "Lucy",
    "Emma",
    "Jack",
    "Sarah",
    "David",
    "Laura",
    "Peter",
    "Sophie",
    "Daniel",
    "Rachel",
    "Chris",
    "Helen",
    "Simon",
    "Grace",
    "Adam",
    "Ruth",
    "Oliver",
    "Clara",
    "Henry",
    "Julia",
    "Victor",
    "Nora",
    "Hugo",
    "Ella",
    "Martin",
    "Irene",
    "Oscar",
    "Diana",
    "Felix",
    "Lisa",
    "Ryan",
    "Amy",
    "Leo",
    "Zoe",
    "Max",
    "Ivy",
    "Sam",
    "Eva",
    "Ben",
    "Mia",
]
IOI_PLACES = [
    "store",
    "garden",
    "school",
    "office",
    "house",
    "park",
    "station",
    "restaurant",
    "hospital",
    "library",
    "market",
    "beach",
    "museum",
    "church",
    "bakery",
]
IOI_OBJECTS = [
    "drink",
    "ring",
    "book",
    "bone",
    "kiss",
    "basketball",
    "computer",
    "necklace",
    "bag",
    "apple",
    "snack",
    "key",
    "gift",
    "letter",
    "ball",
]
# [A], [B] are the first and second mentioned names; [S] is the repeated subject.
IOI_TEMPLATES = (
    "Then , [A] and [B] went to the [P] . [S] gave a [O] to",
    "When [A] and [B] got a [O] at the [P] , [S] decided to give it to",
    "After [A] and [B] went to the [P] , [S] gave a [O] to",
    "While [A] and [B] were working at the [P] , [S] gave a [O] to",
    "Then , [A] and [B] had a lot of fun at the [P] . [S] gave a [O] to",
    "Friends [A] and [B] found a [O] at the [P] . [S] gave it to",
)


class IOITask(Task):
    """Word-level indirect-object identification (Wang et al. 2022, arXiv:2211.00593).

    ``"When Mary and John went to the store , John gave a drink to"`` -> ``Mary`` (IO). Orders
    ABBA (IO first) and BABA (subject first); the loss is on the final position only. The
    corrupted query replaces S2 by a third name ("ABC"), the metric is ``logit[IO] - logit[S]``.
    Paraphrase views (:meth:`paraphrases`) keep names, place and object under other templates.
    """

    name = "ioi"

    def __init__(self, n_names: int = 40, n_templates: int = len(IOI_TEMPLATES)) -> None:
        self.n_names = int(check_scalar(n_names, "n_names", Interval("int", 3, len(IOI_NAMES))))
        self.n_templates = int(
            check_scalar(n_templates, "n_templates", Interval("int", 1, len(IOI_TEMPLATES)))
        )
        words: list[str] = ["<bos>"]
        for t in IOI_TEMPLATES:
            words += [w for w in t.split() if not w.startswith("[") and w not in words]
        self.names = IOI_NAMES[: self.n_names]
        self.vocab = words + list(self.names) + list(IOI_PLACES) + list(IOI_OBJECTS)
        self._index = {w: i for i, w in enumerate(self.vocab)}
        self.d_vocab = len(self.vocab)
        self.seq_len = max(len(t.split()) for t in IOI_TEMPLATES) + 1

    def encode(self, words: list[str]) -> list[int]:
        """Token ids of a list of words (KeyError for a word outside :attr:`vocab`)."""
        return [self._index[w] for w in words]

    def decode(self, ids: Any) -> str:
        """The space-joined words of a sequence of token ids."""
        return " ".join(self.vocab[int(i)] for i in ids)

    def _fill(self, template: int, a: str, b: str, s: str, place: str, obj: str) -> list[int]:
        rep = {"[A]": a, "[B]": b, "[S]": s, "[P]": place, "[O]": obj}
        return self.encode(["<bos>", *[rep.get(w, w) for w in IOI_TEMPLATES[template].split()]])

    def _draw(self, rng: np.random.Generator) -> dict[str, Any]:
        io, s, c = rng.choice(self.n_names, size=3, replace=False)
        return {
            "io": self.names[io], "s": self.names[s], "c": self.names[c],
            "place": IOI_PLACES[rng.integers(len(IOI_PLACES))],
            "obj": IOI_OBJECTS[rng.integers(len(IOI_OBJECTS))],
            "abba": bool(rng.integers(2)), "template": int(rng.integers(self.n_templates)),
        }  # fmt: skip

    def _query(self, d: dict[str, Any], template: int) -> Query:
        a, b = (d["io"], d["s"]) if d["abba"] else (d["s"], d["io"])
        clean = self._fill(template, a, b, d["s"], d["place"], d["obj"])
        corrupt = self._fill(template, a, b, d["c"], d["place"], d["obj"])
        io, s = self._index[d["io"]], self._index[d["s"]]
        return Query(
            torch.tensor([clean]), torch.tensor([corrupt]), io, (s,), len(clean) - 1,
            template, meta=dict(d),
        )  # fmt: skip

    def train_batch(
        self, batch: int, gen: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        batch = _check_batch(batch, gen)
        rng = np.random.default_rng(int(torch.randint(0, 2**62, (1,), generator=gen)))
        template = int(rng.integers(self.n_templates))  # one template per batch: no padding
        rows, targets = [], []
        for _ in range(batch):
            d = self._draw(rng)
            q = self._query(d, template)
            rows.append(q.clean[0])
            targets.append(q.answer)
        tokens = torch.stack(rows)
        tgt = torch.zeros_like(tokens)
        tgt[:, -1] = torch.tensor(targets)
        mask = torch.zeros_like(tokens, dtype=torch.bool)
        mask[:, -1] = True
        return tokens, tgt, mask

    def queries(self, n: int, rng: Any = None) -> list[Query]:
        r = check_rng(rng)
        out = []
        for _ in range(n):
            d = self._draw(r)
            out.append(self._query(d, d["template"]))
        return out

    def paraphrases(self, query: Query) -> list[Query]:
        """The same names, place and object under every template (same answer), as views."""
        return [self._query(query.meta, t) for t in range(self.n_templates)]


# --- modular addition --------------------------------------------------------------------


class ModAddTask(Task):
    """``a b =`` -> ``(a + b) mod p`` (Nanda et al. 2023, arXiv:2301.05217).

    Tokens ``0..p-1`` are numbers, ``p`` is ``=``. The training split is a fixed random
    ``train_frac`` of all ``p^2`` pairs (seeded by ``split_seed``); loss on the last position.
    """

    name = "modadd"

    def __init__(self, p: int = 53, train_frac: float = 0.3, split_seed: int = 0) -> None:
        self.p = int(check_scalar(p, "p", Interval("int", 2, 10_000)))
        self.train_frac = float(
            check_scalar(train_frac, "train_frac", Interval("real", 0, 1, "right"))
        )
        self.split_seed = int(split_seed)
        self.d_vocab = self.p + 1
        self.seq_len = 3

    def _pairs(self) -> tuple[torch.Tensor, torch.Tensor]:
        perm = np.random.default_rng(self.split_seed).permutation(self.p * self.p)
        n_train = max(1, round(self.train_frac * self.p * self.p))
        return torch.from_numpy(perm[:n_train]), torch.from_numpy(perm[n_train:])

    def _tokens(self, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a, b = idx // self.p, idx % self.p
        eq = torch.full_like(a, self.p)
        return torch.stack([a, b, eq], 1).long(), ((a + b) % self.p).long()

    def full_batch(self, split: str = "train") -> tuple[torch.Tensor, torch.Tensor]:
        """All ``(tokens [n, 3], answers [n])`` of the ``"train"`` or ``"test"`` split."""
        train, test = self._pairs()
        return self._tokens(train if split == "train" else test)

    def train_batch(
        self, batch: int, gen: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        batch = _check_batch(batch, gen)
        train, _ = self._pairs()
        if batch >= len(train):  # full batch (the grokking set-up)
            pick = train
        else:
            pick = train[torch.randint(0, len(train), (batch,), generator=gen)]
        tokens, ans = self._tokens(pick)
        tgt = torch.zeros_like(tokens)
        tgt[:, -1] = ans
        mask = torch.zeros_like(tokens, dtype=torch.bool)
        mask[:, -1] = True
        return tokens, tgt, mask

    def queries(self, n: int, rng: Any = None) -> list[Query]:
        r = check_rng(rng)
        out = []
        for _ in range(n):
            a, b = (int(v) for v in r.integers(self.p, size=2))
            b2 = int((b + 1 + r.integers(self.p - 1)) % self.p)
            clean = torch.tensor([[a, b, self.p]])
            corrupt = torch.tensor([[a, b2, self.p]])
            out.append(Query(clean, corrupt, (a + b) % self.p, ((a + b2) % self.p,), 2))
        return out


# --- two-digit addition ------------------------------------------------------------------


class DigitsAddTask(Task):
    """``BOS a1 a0 + b1 b0 =`` -> tens digit of ``a + b`` (a greater-than/carry analogue).

    Tokens: digits ``0..9``, ``+`` = 10, ``=`` = 11, BOS = 12. The corrupted query changes one
    operand digit so that the tens digit of the sum changes.
    """

    name = "digits_add"
    d_vocab = 13
    seq_len = 7

    @staticmethod
    def _encode(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        bos = torch.full_like(a, 12)
        return torch.stack(
            [bos, a // 10, a % 10, torch.full_like(a, 10), b // 10, b % 10, torch.full_like(a, 11)],
            1,
        ).long()

    def train_batch(
        self, batch: int, gen: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        batch = _check_batch(batch, gen)
        a = torch.randint(0, 100, (batch,), generator=gen)
        b = torch.randint(0, 100, (batch,), generator=gen)
        tokens = self._encode(a, b)
        tgt = torch.zeros_like(tokens)
        tgt[:, -1] = ((a + b) // 10) % 10
        mask = torch.zeros_like(tokens, dtype=torch.bool)
        mask[:, -1] = True
        return tokens, tgt, mask

    def queries(self, n: int, rng: Any = None) -> list[Query]:
        r = check_rng(rng)
        out: list[Query] = []
        while len(out) < n:
            a, b = (int(v) for v in r.integers(100, size=2))
            slot = int(r.integers(4))
            digits = [a // 10, a % 10, b // 10, b % 10]
            digits[slot] = int((digits[slot] + 1 + r.integers(9)) % 10)
            a2, b2 = digits[0] * 10 + digits[1], digits[2] * 10 + digits[3]
            y, y2 = ((a + b) // 10) % 10, ((a2 + b2) // 10) % 10
            if y == y2:
                continue
            clean = self._encode(torch.tensor([a]), torch.tensor([b]))
            corrupt = self._encode(torch.tensor([a2]), torch.tensor([b2]))
            out.append(Query(clean, corrupt, y, (y2,), 6))
        return out


# --- character LM ------------------------------------------------------------------------

CHARLM_MODULES = (
    "textwrap.py", "argparse.py", "collections/__init__.py", "functools.py", "json/decoder.py",
    "json/encoder.py", "pathlib.py", "dataclasses.py", "string.py", "heapq.py", "bisect.py",
    "fractions.py", "statistics.py", "random.py", "shutil.py", "difflib.py", "inspect.py",
    "typing.py", "enum.py", "contextlib.py",
)  # fmt: skip


@functools.lru_cache(maxsize=4)
def stdlib_corpus(modules: tuple[str, ...] = CHARLM_MODULES) -> str:
    """Source text (code and docstrings) of ``modules`` from the running interpreter's stdlib.

    The corpus is real English/Python text that ships with every CPython install, so the
    character LM needs no download. Non-ASCII characters are replaced by ``?``. Modules absent
    from this interpreter are skipped; raises if none is found.
    """
    root = Path(sysconfig.get_paths()["stdlib"])
    parts = []
    for m in modules:
        f = root / m
        if f.is_file():
            parts.append(f.read_text(encoding="utf-8", errors="replace"))
    if not parts:
        raise FileNotFoundError(f"none of the corpus modules was found under {root}")
    text = "\n".join(parts)
    return text.encode("ascii", errors="replace").decode("ascii")


class CharLMTask(Task):
    """Next-character prediction on :func:`stdlib_corpus` (ASCII, vocabulary 128).

    The last ``holdout`` fraction of the text is held out (:meth:`eval_batch`).
    """

    name = "charlm"
    d_vocab = 128

    def __init__(self, seq_len: int = 64, holdout: float = 0.05) -> None:
        self.seq_len = int(check_scalar(seq_len, "seq_len", Interval("int", 2, 4096)))
        self.holdout = float(check_scalar(holdout, "holdout", Interval("real", 0, 0.5)))
        self._data: torch.Tensor | None = None

    @property
    def data(self) -> torch.Tensor:
        """The corpus as a LongTensor of ASCII codes, shape (n_chars,), loaded on first use."""
        if self._data is None:
            raw = np.frombuffer(stdlib_corpus().encode("ascii"), dtype=np.uint8)
            self._data = torch.from_numpy(raw.astype(np.int64))
        return self._data

    def _windows(self, batch: int, gen: torch.Generator, train: bool) -> torch.Tensor:
        n = len(self.data)
        cut = int(n * (1 - self.holdout))
        lo, hi = (0, cut - self.seq_len - 1) if train else (cut, n - self.seq_len - 1)
        start = torch.randint(lo, hi, (batch,), generator=gen)
        idx = start[:, None] + torch.arange(self.seq_len + 1)
        return self.data[idx]

    def train_batch(
        self, batch: int, gen: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        batch = _check_batch(batch, gen)
        w = self._windows(batch, gen, True)
        return w[:, :-1], w[:, 1:], torch.ones(batch, self.seq_len, dtype=torch.bool)

    def eval_batch(self, batch: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """Held-out windows ``(tokens, targets)``."""
        w = self._windows(batch, _gen(seed), False)
        return w[:, :-1], w[:, 1:]

    def queries(self, n: int, rng: Any = None) -> list[Query]:
        """Not available: a language-modelling task has no corrupted counterpart."""
        raise NotImplementedError("charlm has no corrupted counterpart; it is a plain LM task")


TASKS: dict[str, type[Task]] = {
    t.name: t for t in (InductionTask, IOITask, ModAddTask, DigitsAddTask, CharLMTask)
}


def make_task(name: str, **kwargs: Any) -> Task:
    """Build a task by name: ``induction``, ``ioi``, ``modadd``, ``digits_add``, ``charlm``."""
    if not isinstance(name, str) or name not in TASKS:
        raise ValueError(f"name must be one of the tasks {sorted(TASKS)}, got {name!r}")
    return TASKS[name](**kwargs)
