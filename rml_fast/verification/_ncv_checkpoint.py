"""Private checkpoint helpers of :class:`rml_fast.verification.ncv.NeuralConceptVerifier`.

A checkpoint is one file ``<checkpoint_dir>/ncv.pt`` written after every finished epoch: the
verifier's and the optimiser's states, the numpy batch-order generator's state, the epoch count,
the history, and the run's configuration (every hyper-parameter that changes the result except
``epochs``, plus a SHA-256 of the training data), which must match for a resume.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

FILENAME = "ncv.pt"


def data_digest(X: np.ndarray, y: np.ndarray) -> str:
    """SHA-256 of the training arrays (dtype, shape and bytes)."""
    h = hashlib.sha256()
    for a in (X, y):
        a = np.ascontiguousarray(a)
        h.update(str(a.dtype).encode())
        h.update(str(a.shape).encode())
        h.update(a.tobytes())
    return h.hexdigest()


def config_differences(saved: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """Human-readable list of the entries of ``now`` that differ from ``saved``."""
    keys = sorted(set(saved) | set(now))
    return [f"{key}: checkpoint {saved.get(key)!r}, this call {now.get(key)!r}"
            for key in keys if saved.get(key) != now.get(key)]


def save(directory: str | os.PathLike, payload: dict[str, Any]) -> None:
    """Write ``payload`` atomically (temporary file, then rename) to ``directory/ncv.pt``."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    tmp = d / (FILENAME + ".tmp")
    torch.save(payload, tmp)
    os.replace(tmp, d / FILENAME)


def load(directory: str | os.PathLike) -> dict[str, Any] | None:
    """The checkpoint in ``directory`` or None when there is none."""
    path = Path(directory) / FILENAME
    if not path.exists():
        return None
    return torch.load(path, map_location="cpu", weights_only=True)
