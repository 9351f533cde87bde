"""Row storage of an ExPLAIND training log: in memory, or on disk in chunked files.

One row per optimiser step ``s = 1..N``: the flat parameters ``theta_s`` (P,), the AdamW
second moment ``v_s`` (P,), the per-tensor learning rates and weight decays (T,) and the
batch indices ``B_s``. Chunk ``c`` of a disk store holds steps ``c*K+1 .. (c+1)*K`` in
``chunk_{c:06d}.pt``; ``meta.json`` records how many steps are committed, so a crash between a
chunk write and the next meta write never exposes a half-written step. Writes are atomic
(temporary file, then rename).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch

FORMAT = "rml_fast.explaind.history/1"


def _atomic_save(obj: Any, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def _atomic_json(obj: Any, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1))
    os.replace(tmp, path)


class RowStore:
    """Append-only rows ``(theta, v, lr, wd, batch)``; random access by step (1-based)."""

    def __init__(self, meta: dict[str, Any], theta0: torch.Tensor, path: Path | None) -> None:
        self.meta = meta
        self.theta0 = theta0
        self.path = path
        self.chunk = int(meta["chunk_size"])
        self.n = 0
        self._rows: list[tuple[torch.Tensor, ...]] = []  # memory: all rows; disk: pending
        self._pending_start = 0  # disk: step index (0-based) of the first pending row
        self._cache: tuple[int, dict[str, Any]] | None = None

    # --- creation / loading ----------------------------------------------------------

    @classmethod
    def create(cls, meta: dict[str, Any], theta0: torch.Tensor, path: Path | None) -> RowStore:
        store = cls(meta, theta0, path)
        if path is not None:
            path.mkdir(parents=True, exist_ok=True)
            _atomic_save(theta0, path / "theta0.pt")
            store._write_meta()
        return store

    @classmethod
    def open(cls, path: Path) -> RowStore:
        meta_file = path / "meta.json"
        if not meta_file.is_file():
            raise ValueError(f"path {str(path)!r} holds no ExPLAIND history (no meta.json)")
        meta = json.loads(meta_file.read_text())
        if meta.get("format") != FORMAT:
            raise ValueError(f"path {str(path)!r}: unknown history format {meta.get('format')!r}")
        theta0 = torch.load(path / "theta0.pt", map_location="cpu", weights_only=True)
        store = cls(meta, theta0, path)
        store.truncate(int(meta["n_steps"]))
        return store

    def _write_meta(self) -> None:
        assert self.path is not None
        self.meta["n_steps"] = self.n
        _atomic_json(self.meta, self.path / "meta.json")

    def _chunk_file(self, c: int) -> Path:
        assert self.path is not None
        return self.path / f"chunk_{c:06d}.pt"

    # --- writing ---------------------------------------------------------------------

    def append(self, row: tuple[torch.Tensor, ...]) -> None:
        self._rows.append(row)
        self.n += 1
        if self.path is not None and len(self._rows) == self.chunk:
            self.flush()
            self._rows = []
            self._pending_start = self.n

    def flush(self) -> None:
        """Write the pending rows (disk store) and commit the step count."""
        if self.path is None:
            return
        if self._rows:
            c = self._pending_start // self.chunk
            _atomic_save(_pack(self._rows), self._chunk_file(c))
            if self._cache is not None and self._cache[0] == c:
                self._cache = None
        self._write_meta()

    def truncate(self, n: int) -> None:
        """Keep the first ``n`` steps (used when resuming from a checkpoint)."""
        if n > self.n and self.path is None:
            raise ValueError(f"cannot truncate a log of {self.n} steps to {n}")
        if self.path is None:
            self._rows = self._rows[:n]
            self.n = n
            return
        self._cache = None
        self.n = n
        self._pending_start = (n // self.chunk) * self.chunk
        k = n - self._pending_start
        self._rows = []
        if k:
            data = torch.load(
                self._chunk_file(self._pending_start // self.chunk),
                map_location="cpu", weights_only=True,
            )  # fmt: skip
            self._rows = _unpack(data)[:k]

    # --- reading ---------------------------------------------------------------------

    def row(self, s: int) -> tuple[torch.Tensor, ...]:
        """Row of step ``s`` (1-based)."""
        i = s - 1
        if self.path is None:
            return self._rows[i]
        if i >= self._pending_start:
            return self._rows[i - self._pending_start]
        c = i // self.chunk
        if self._cache is None or self._cache[0] != c:
            data = torch.load(self._chunk_file(c), map_location="cpu", weights_only=True)
            self._cache = (c, data)
        data = self._cache[1]
        j = i - c * self.chunk
        return (data["theta"][j], data["v"][j], data["lr"][j], data["wd"][j],
                data["batches"][j])  # fmt: skip

    def save_to(self, path: Path) -> None:
        """Write every row in the disk format under ``path``."""
        path.mkdir(parents=True, exist_ok=True)
        meta = dict(self.meta)
        _atomic_save(self.theta0, path / "theta0.pt")
        for c in range((self.n + self.chunk - 1) // self.chunk):
            rows = [self.row(s) for s in range(c * self.chunk + 1,
                                                min((c + 1) * self.chunk, self.n) + 1)]  # fmt: skip
            _atomic_save(_pack(rows), path / f"chunk_{c:06d}.pt")
        meta["n_steps"] = self.n
        _atomic_json(meta, path / "meta.json")


def _pack(rows: list[tuple[torch.Tensor, ...]]) -> dict[str, Any]:
    return {
        "theta": torch.stack([r[0] for r in rows]),
        "v": torch.stack([r[1] for r in rows]),
        "lr": torch.stack([r[2] for r in rows]),
        "wd": torch.stack([r[3] for r in rows]),
        "batches": [r[4] for r in rows],
    }


def _unpack(data: dict[str, Any]) -> list[tuple[torch.Tensor, ...]]:
    return [
        (data["theta"][j], data["v"][j], data["lr"][j], data["wd"][j], data["batches"][j])
        for j in range(len(data["batches"]))
    ]
