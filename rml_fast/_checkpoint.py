"""Atomic checkpoint files shared by the resumable runs (DP training, circuit search,
Rashomon sweeps, benchmark suites).

A checkpoint is a pickle of ``{"format", "kind", "fingerprint", "state"}`` written to a
temporary file in the same directory and moved over the target with :func:`os.replace`, so
the file on disk is always a complete checkpoint: an interruption (Ctrl-C, a killed process)
during a write leaves the previous one. :func:`load_checkpoint` refuses, with a ``ValueError``
that names what differs, a checkpoint of another kind or another configuration (the
``fingerprint``: a dict of plain values describing the run). Pickle runs code when loaded:
load only checkpoints you wrote.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pickle
import tempfile
from pathlib import Path
from typing import Any

FORMAT = 1


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (temporary file, fsync, ``os.replace``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """:func:`atomic_write_bytes` of UTF-8 text."""
    atomic_write_bytes(path, text.encode("utf-8"))


def digest(*parts: Any) -> str:
    """SHA-256 hex digest of arrays/tensors (values, shape, dtype) and plain values."""
    h = hashlib.sha256()
    for p in parts:
        if hasattr(p, "detach"):  # torch tensor
            p = p.detach().cpu().contiguous().numpy()
        if hasattr(p, "tobytes") and hasattr(p, "dtype"):
            import numpy as np

            a = np.ascontiguousarray(p)
            h.update(repr((a.shape, str(a.dtype))).encode())
            h.update(a.tobytes())
        else:
            h.update(repr(p).encode())
        h.update(b"|")
    return h.hexdigest()


def save_checkpoint(path: str | os.PathLike[str], state: Any, *, kind: str,
                    fingerprint: dict[str, Any]) -> None:
    """Atomically write ``state`` (picklable) with its ``kind`` and ``fingerprint``."""
    payload = {"format": FORMAT, "kind": kind, "fingerprint": fingerprint, "state": state}
    atomic_write_bytes(path, pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL))


def load_checkpoint(path: str | os.PathLike[str], *, kind: str,
                    fingerprint: dict[str, Any], name: str = "checkpoint") -> Any | None:
    """The state saved at ``path``, or None if there is no file.

    Raises
    ------
    ValueError
        Naming ``name`` (the caller's argument) if the file is not a checkpoint of ``kind``
        or its fingerprint differs from ``fingerprint`` (the keys that differ are listed):
        a checkpoint of another configuration is never resumed silently.
    """
    path = Path(path)
    if not path.exists():
        return None
    try:
        payload = pickle.loads(path.read_bytes())
    except Exception as exc:
        raise ValueError(f"{name} {str(path)!r} is not a readable rml_fast checkpoint "
                         f"({type(exc).__name__}: {exc}); delete it or pass another path") from exc
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise ValueError(f"{name} {str(path)!r} is not an rml_fast checkpoint of format {FORMAT}; "
                         f"delete it or pass another path")
    if payload.get("kind") != kind:
        raise ValueError(f"{name} {str(path)!r} holds a checkpoint of {payload.get('kind')!r}, "
                         f"not of {kind!r}; delete it or pass another path")
    saved = payload.get("fingerprint", {})
    diff = [k for k in sorted(set(saved) | set(fingerprint)) if saved.get(k) != fingerprint.get(k)]
    if diff:
        shown = "; ".join(f"{k}: checkpoint {saved.get(k)!r}, this run {fingerprint.get(k)!r}"
                          for k in diff[:4])
        raise ValueError(f"{name} {str(path)!r} was written by a run with another configuration, "
                         f"so it cannot be resumed ({shown}); delete it or pass another path")
    return payload["state"]
