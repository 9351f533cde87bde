"""Tolerant parsing of an LLM judge's EA/CA answer (CULTURE-MT).

Accepted forms, tried in order: a JSON object anywhere in the text (inside a fenced code block
or followed/preceded by prose), a Python-literal dict (single quotes), and finally ``EA: 4``
style key-value text.  Scores may be numbers or numeric strings.  Anything else raises
``ValueError`` (never another exception type).
"""

from __future__ import annotations

import ast
import json
import math
import re
from typing import Any

_EA_KEYS = ("ea", "expression_accuracy", "expressionaccuracy", "expression accuracy")
_CA_KEYS = ("ca", "cultural_adaptability", "culturaladaptability", "cultural adaptability")
_RAT_KEYS = ("rationale", "reason", "reasoning", "explanation", "justification")
_NUM_RE = re.compile(r"^\s*([+-]?(?:\d+(?:\.\d*)?|\.\d+))\s*(?:/\s*5(?:\.0*)?)?\s*$")
_KV_RE = re.compile(
    r"(?<![A-Za-z0-9_])[\"']?(EA|CA)[\"']?\s*[:=]\s*[\"']?\s*([+-]?(?:\d+(?:\.\d*)?|\.\d+))(?![\d.eE])",
    re.IGNORECASE,
)
_MAX_STARTS = 64
_MAX_LEN = 200_000


def _to_score(v: Any, key: str) -> float:
    if isinstance(v, bool):
        raise ValueError(f"judge score {key} must be a number, got the bool {v!r}")
    if isinstance(v, (int, float)):
        try:
            out = float(v)
        except OverflowError as exc:
            raise ValueError(f"judge score {key} is too large: {str(v)[:20]}...") from exc
    elif isinstance(v, str):
        m = _NUM_RE.match(v)
        if m is None:
            raise ValueError(f"judge score {key} must be a number, got the string {v[:40]!r}")
        out = float(m.group(1))
    else:
        raise ValueError(f"judge score {key} must be a number, got {type(v).__name__}")
    if not math.isfinite(out):
        raise ValueError(f"judge score {key} must be finite, got {out!r}")
    return out


def _from_mapping(d: Any) -> dict[str, Any] | None:
    if not isinstance(d, dict):
        return None
    low = {str(k).strip().lower(): v for k, v in d.items()}
    ea = next((low[k] for k in _EA_KEYS if k in low), None)
    ca = next((low[k] for k in _CA_KEYS if k in low), None)
    if ea is None or ca is None:
        return None
    rat = next((low[k] for k in _RAT_KEYS if k in low), "")
    return {"EA": _to_score(ea, "EA"), "CA": _to_score(ca, "CA"), "rationale": str(rat)}


def _balanced_end(text: str, start: int) -> int:
    """Index one past the '}' closing the '{' at ``start`` (quote-aware), or -1."""
    depth = 0
    quote = ""
    esc = False
    for i in range(start, len(text)):
        ch = text[i]
        if quote:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == quote:
                quote = ""
            continue
        if ch in "\"'":
            quote = ch
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return i + 1
    return -1


def parse_scores(text: Any) -> dict[str, Any]:
    """Parse ``{"EA": float, "CA": float, "rationale": str}`` out of a judge's raw text."""
    if not isinstance(text, str):
        raise ValueError(f"judge output must be a str, got {type(text).__name__}")
    if len(text) > _MAX_LEN:
        text = text[:_MAX_LEN]
    decoder = json.JSONDecoder()
    starts = [i for i, ch in enumerate(text) if ch == "{"][:_MAX_STARTS]
    last_error: Exception | None = None
    for s in starts:
        try:
            obj, _ = decoder.raw_decode(text, s)
            got = _from_mapping(obj)
            if got is not None:
                return got
        except ValueError as exc:  # JSONDecodeError and score errors
            last_error = exc
        except RecursionError:
            pass
        end = _balanced_end(text, s)
        if end < 0:
            continue
        try:
            obj = ast.literal_eval(text[s:end])
        except ValueError as exc:
            last_error = exc
            continue
        except Exception:  # SyntaxError, MemoryError, RecursionError, TypeError ...
            continue
        try:
            got = _from_mapping(obj)
        except ValueError as exc:
            last_error = exc
            continue
        if got is not None:
            return got
    found: dict[str, str] = {}
    for m in _KV_RE.finditer(text):
        found.setdefault(m.group(1).upper(), m.group(2))
    if "EA" in found and "CA" in found:
        return {
            "EA": _to_score(found["EA"], "EA"),
            "CA": _to_score(found["CA"], "CA"),
            "rationale": "",
        }
    detail = f" ({last_error})" if last_error is not None else ""
    raise ValueError(
        f"could not parse EA and CA scores from the judge output{detail}: {text[:200]!r}"
    )
