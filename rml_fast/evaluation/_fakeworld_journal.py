"""The JSON-lines journal that makes :meth:`TwoAxisEvaluator.evaluate` resumable."""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

import numpy as np

from rml_fast.evaluation._fakeworld_types import Prediction


def json_default(o: Any) -> Any:
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, tuple):
        return list(o)
    raise TypeError(f"cannot store {type(o).__name__} in the journal")


def to_record(o: Any) -> Any:
    if isinstance(o, Prediction):
        return {"kind": "prediction", **{k: getattr(o, k) for k in
                                         ("media", "content", "fake", "rationale", "evidence")}}
    if o is None or isinstance(o, (str, dict)):
        return o
    raise TypeError(f"detector must return a Prediction, dict, str or None, got {type(o).__name__}")


def from_record(o: Any) -> Any:
    if isinstance(o, dict) and o.get("kind") == "prediction":
        fields = {k: v for k, v in o.items() if k != "kind"}
        fields["evidence"] = tuple(_tuplify(e) for e in fields["evidence"])
        return Prediction(**fields)
    return o


def _tuplify(e: Any) -> Any:
    if isinstance(e, dict):
        return {k: tuple(v) if isinstance(v, list) else v for k, v in e.items()}
    return e


def open_journal(path: Any, ids: list[str], resume: bool) -> tuple[dict[str, Any], Any]:
    digest = hashlib.sha256("\n".join(ids).encode()).hexdigest()
    header = {"kind": "fakeworld-journal", "n": len(ids), "ids_sha256": digest}
    done: dict[str, Any] = {}
    if resume and os.path.exists(path) and os.path.getsize(path) > 0:
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
        try:
            head = json.loads(lines[0])
        except json.JSONDecodeError as exc:
            raise ValueError(f"journal {os.fspath(path)!r} has no valid header") from exc
        diff = [k for k in header if head.get(k) != header[k]]
        if diff:
            raise ValueError(f"journal {os.fspath(path)!r} belongs to other instances (differs "
                             f"in {diff}); pass resume=False or another journal path")
        known = set(ids)
        for line in lines[1:]:
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue  # an empty or half-written last line of an interrupted run
            if rec.get("id") in known:
                done[rec["id"]] = rec["out"]
        fh = open(path, "a", encoding="utf-8")  # noqa: SIM115
        if lines and lines[-1] != "":
            fh.write("\n")
        return done, fh
    fh = open(path, "w", encoding="utf-8")  # noqa: SIM115
    fh.write(json.dumps(header) + "\n")
    fh.flush()
    return done, fh

