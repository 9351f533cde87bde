"""CYBERTEAM: a standardized threat-hunting workflow engine with a correct CVSS calculator.

After "Benchmarking LLM-Assisted Blue Teaming via Standardized Threat Hunting" (arXiv 2509.23571;
reference repo github.com/mengyuqiao/LLM-Cyberteam). A workflow is a DAG of tasks grouped in four
stages that flow Threat Attribution -> Behavior Analysis -> Prioritization -> Response; each task
runs an ordered chain of operational modules from nine types (NER, REX, SPA, SUM, CLS, MATH, MAP,
SIM, RAG). Modules are plain callables ``module(ctx) -> dict``: five deterministic ones ship here
(REX regex indicators, MATH = CVSS v2.0 / v3.1 / v4.0 scoring, MAP table lookup, SIM TF-IDF matching,
RAG TF-IDF retrieval), the four LLM-backed ones fill a prompt template, call an injected
``llm(prompt) -> str`` and parse its JSON robustly. A task sees the outputs of its ancestors
only; its answer is scored against a gold answer per task type (PROPOSED rules, :func:`score_task`);
runs can be journalled and resumed.

CVSS: :func:`cvss31_base` implements the v3.1 base equations with the specification's integer
``Roundup``; :func:`cvss40_score` the v4.0 MacroVector lookup and severity-distance
interpolation (both from the FIRST specifications; see :mod:`rml_fast.evaluation._cvss`).

Examples
--------
>>> from rml_fast.evaluation.cyberteam import cvss_score, rex_extract
>>> cvss_score("CVSS:3.1/AV:N/AC:L/PR:L/UI:N/S:C/C:H/I:H/A:H")
(9.9, 'Critical')
>>> rex_extract("callback to 198.51.100[.]9")["ipv4"]
['198.51.100.9']
"""

from __future__ import annotations

import json
import math
import os
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from rml_fast._validation import Interval, check_scalar
from rml_fast.evaluation._cvss import (
    CVSSVectorError,
    cvss2_base,
    cvss31_base,
    cvss31_base_scores,
    cvss31_roundup,
    cvss40_macrovector,
    cvss40_score,
    cvss_attributes_to_vector,
    cvss_score,
    cvss_severity,
)

__all__ = [
    "IOC_TYPES",
    "LLM_MODULES",
    "MODULES",
    "MODULE_PROMPTS",
    "PRIMARY_METRIC",
    "STAGES",
    "TASK_TYPES",
    "CVSSVectorError",
    "ModuleContext",
    "ModuleReplyError",
    "TaskResult",
    "TaskSpec",
    "TfidfRetriever",
    "Workflow",
    "WorkflowCycleError",
    "aggregate_scores",
    "cvss2_base",
    "cvss31_base",
    "cvss31_base_scores",
    "cvss31_roundup",
    "cvss40_macrovector",
    "cvss40_score",
    "cvss_attributes_to_vector",
    "cvss_score",
    "cvss_severity",
    "default_modules",
    "example_knowledge",
    "example_samples",
    "example_tasks",
    "extract_json",
    "heuristic_llm",
    "llm_module",
    "llm_selector",
    "load_cyberteam_json",
    "map_lookup",
    "normalize_entity",
    "open_ended_baseline",
    "refang",
    "rex_extract",
    "rouge_l",
    "score_task",
    "sim_score",
]

# ============================================================================================
# deterministic text modules
# ============================================================================================

IOC_TYPES: tuple[str, ...] = ("url", "email", "ipv4", "sha256", "sha1", "md5", "timestamp", "cve",
                              "technique", "domain")
"""Indicator types that :func:`rex_extract` reports, in its output's key order."""

_TLDS = r"(?:com|net|org|info|biz|io|ru|cn|uk|de|fr|jp|br|in|ir|kp|su|top|xyz|online|site|" \
        r"club|me|co|us|gov|edu|mil|int|eu|nl|pl|it|es|ca|au|kr|tk|cc|onion|pw|ws|to|ly|gg)"
_IOC_RE = re.compile(
    r"(?P<url>\b(?:https?|ftp)://[^\s\"'<>\]\)]+)"
    r"|(?P<email>\b[A-Za-z0-9._%+-]+@(?:[A-Za-z0-9-]+\.)+[A-Za-z]{2,}\b)"
    r"|(?P<ipv4>\b(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\b)"
    r"|(?P<sha256>\b[A-Fa-f0-9]{64}\b)"
    r"|(?P<sha1>\b[A-Fa-f0-9]{40}\b)"
    r"|(?P<md5>\b[A-Fa-f0-9]{32}\b)"
    r"|(?P<timestamp>\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?\b)"
    r"|(?P<cve>\bCVE-\d{4}-\d{4,}\b)"
    r"|(?P<technique>\bT1\d{3}(?:\.\d{3})?\b)"
    r"|(?P<domain>\b(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+" + _TLDS + r"\b)",
    re.IGNORECASE,
)
_REFANG_BRACKET = re.compile(r"[\[({](?:\.|[dD][oO][tT]|@|[aA][tT]|:)[\])}]")
_REFANG_SCHEME = re.compile(r"\b(?:[hH][xX][xX][pP]|[fF][xX][pP])")
_REFANG_MAP = {".": ".", "dot": ".", "@": "@", "at": "@", ":": ":"}
# candidate tokens: maximal runs without whitespace, quotes or brackets
_TOKEN_SPLIT = re.compile(r"[^\s\"'<>()\[\]{}]+")


def refang(text: str) -> str:
    """Undo common IOC defanging: ``[.]``, ``(.)``, ``[dot]`` -> ``.``; ``[at]`` -> ``@``;
    ``[:]`` -> ``:``; ``hxxp`` -> ``http``.

    Parameters
    ----------
    text : str

    Returns
    -------
    str

    Examples
    --------
    >>> from rml_fast.evaluation.cyberteam import refang
    >>> refang("hxxps://evil[.]example[.]com and ops[at]bad[.]ru")
    'https://evil.example.com and ops@bad.ru'
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    if "[" in text or "(" in text or "{" in text:
        text = _REFANG_BRACKET.sub(lambda m: _REFANG_MAP[m.group(0)[1:-1].lower()], text)
    low = text.lower()
    if "hxxp" in low or "fxp" in low:
        text = _REFANG_SCHEME.sub(lambda m: "http" if len(m.group(0)) == 4 else "ftp", text)
    return text


def rex_extract(text: str, *, defanged: bool = True) -> dict[str, list[str]]:
    """REX module: regex indicators of compromise in one pass of one compiled regex.

    Types (:data:`IOC_TYPES`): URLs, e-mails, IPv4 addresses, SHA-256 / SHA-1 / MD5 hashes,
    ISO-8601 timestamps, CVE ids, MITRE ATT&CK technique ids and domains. Matches do not
    overlap (the alternation tries the types in that order), so the domain inside a URL or an
    e-mail is reported only as part of it; domains need a known top-level domain (a fixed list)
    so that file names such as ``payload.exe`` are not reported. The regex runs only on the
    whitespace/quote/bracket-delimited tokens that can hold an indicator (a date and a time
    separated by a space are reported as the date).

    Parameters
    ----------
    text : str
        The report.
    defanged : bool, default=True
        Refang the text first (:func:`refang`), so ``1.2.3[.]4`` is found as ``1.2.3.4``.

    Returns
    -------
    dict of str to list of str
        One key per type, values unique, in order of first appearance; CVE ids upper-cased,
        hashes and domains lower-cased.

    Examples
    --------
    >>> from rml_fast.evaluation.cyberteam import rex_extract
    >>> out = rex_extract("Beacon to 203.0.113[.]7 and hxxp://cdn.evil-update[.]com/a.php "
    ...                   "exploiting CVE-2021-44228 (T1190) on 2021-12-10.")
    >>> out["ipv4"], out["url"], out["cve"], out["technique"], out["timestamp"]
    (['203.0.113.7'], ['http://cdn.evil-update.com/a.php'], ['CVE-2021-44228'], ['T1190'], ['2021-12-10'])
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    if defanged:
        text = refang(text)
    return _collect(_candidate_matches(text))


def _candidate_matches(text: str):
    """Matches of the IOC regex inside candidate tokens only: a token without '.', '@', ':',
    '-', 32+ characters or a ``T<digit>`` start cannot hold an indicator and is skipped, which
    makes the pass several times faster than one regex over the whole text."""
    finditer = _IOC_RE.finditer
    for tok in _TOKEN_SPLIT.findall(text):
        t = tok.rstrip(".,;:!?")
        if ("." in t or "@" in t or ":" in t or "-" in t or len(t) >= 32
                or (t[:1] in "Tt" and t[1:2].isdigit())):
            yield from finditer(tok)


def _rex_reference(text: str) -> dict[str, list[str]]:
    """One regex over the whole text (the specification of :func:`rex_extract`; test oracle)."""
    return _collect(_IOC_RE.finditer(refang(text)))


def _collect(matches) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {k: [] for k in IOC_TYPES}
    seen: dict[str, set[str]] = {k: set() for k in IOC_TYPES}
    for match in matches:
        kind = match.lastgroup
        assert kind is not None
        val = match.group(kind)
        if kind == "url":
            val = val.rstrip(".,;:")
        elif kind in ("cve", "technique"):
            val = val.upper()
        elif kind in ("sha256", "sha1", "md5", "domain", "email"):
            val = val.lower()
        if val not in seen[kind]:
            seen[kind].add(val)
            out[kind].append(val)
    return out


def extract_json(text: str) -> Any:
    """Robust JSON extraction from an LLM reply: a ```json fence, else the first balanced
    ``{...}`` (or ``[...]``) block, else the whole text.

    Parameters
    ----------
    text : str
        The model's reply.

    Returns
    -------
    dict or list
        The parsed JSON value.

    Raises
    ------
    ValueError
        If no parseable JSON object or array is found (the message quotes the start of the
        reply).

    Examples
    --------
    >>> from rml_fast.evaluation.cyberteam import extract_json
    >>> extract_json('Sure! ```json\\n{"label": "network"}\\n``` Hope it helps.')
    {'label': 'network'}
    >>> extract_json('The answer is {"actors": ["APT29"], "note": "a } in a string"} ok')
    {'actors': ['APT29'], 'note': 'a } in a string'}
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    candidates: list[str] = []
    for fence in re.finditer(r"```(?:json|JSON)?\s*(.*?)```", text, re.DOTALL):
        candidates.append(fence.group(1).strip())
    block = _first_balanced(text)
    if block is not None:
        candidates.append(block)
    candidates.append(text.strip())
    for cand in candidates:
        try:
            val = json.loads(cand)
        except (json.JSONDecodeError, ValueError):
            inner = _first_balanced(cand)
            if inner is None or inner == cand:
                continue
            try:
                val = json.loads(inner)
            except (json.JSONDecodeError, ValueError):
                continue
        if isinstance(val, (dict, list)):
            return val
    head = text[:80] + ("..." if len(text) > 80 else "")
    raise ValueError(f"no JSON object found in the reply text {head!r}")


def _first_balanced(text: str) -> str | None:
    """The first balanced {...} or [...] block, skipping brackets inside JSON strings."""
    starts = [i for i in (text.find("{"), text.find("[")) if i >= 0]
    while starts:
        start = min(starts)
        open_c = text[start]
        close_c = "}" if open_c == "{" else "]"
        depth = 0
        in_str = False
        esc = False
        for j in range(start, len(text)):
            c = text[j]
            if in_str:
                if esc:
                    esc = False
                elif c == "\\":
                    esc = True
                elif c == '"':
                    in_str = False
                continue
            if c == '"':
                in_str = True
            elif c == open_c:
                depth += 1
            elif c == close_c:
                depth -= 1
                if depth == 0:
                    return text[start:j + 1]
        # unbalanced from this start: try the next opening bracket
        nxt = [i for i in (text.find("{", start + 1), text.find("[", start + 1)) if i >= 0]
        starts = nxt
    return None


_TOKEN_RE = re.compile(r"[a-z0-9]+(?:[._-][a-z0-9]+)*")


def _tokens(text: str) -> list[str]:
    return _TOKEN_RE.findall(text.lower())


def sim_score(a: str, b: str, method: str = "tfidf") -> float:
    """SIM module: similarity of two texts in [0, 1].

    ``"jaccard"``: ``|A & B| / |A | B|`` of the lower-cased word-token sets (1 when both are
    empty). ``"tfidf"``: cosine of the two texts' TF-IDF vectors with the IDF fitted on the pair
    (scikit-learn ``TfidfVectorizer``, smooth IDF, l2 norm; 0 when either has no tokens).

    Parameters
    ----------
    a, b : str
    method : {"tfidf", "jaccard"}, default="tfidf"

    Returns
    -------
    float

    Examples
    --------
    >>> from rml_fast.evaluation.cyberteam import sim_score
    >>> sim_score("phishing email with macro", "macro phishing email", method="jaccard")
    0.75
    >>> round(sim_score("credential dumping lsass", "credential dumping lsass"), 6)
    1.0
    """
    if not isinstance(a, str) or not isinstance(b, str):
        raise TypeError("a and b must be str")
    if method == "jaccard":
        sa, sb = set(_tokens(a)), set(_tokens(b))
        if not sa and not sb:
            return 1.0
        return len(sa & sb) / len(sa | sb)
    if method == "tfidf":
        if not _tokens(a) or not _tokens(b):
            return 0.0
        from sklearn.feature_extraction.text import TfidfVectorizer

        vec = TfidfVectorizer(token_pattern=_TOKEN_RE.pattern, lowercase=True)
        x = vec.fit_transform([a, b])
        return float(min(1.0, max(0.0, (x[0] @ x[1].T).toarray()[0, 0])))
    raise ValueError(f"method must be 'tfidf' or 'jaccard', got {method!r}")


class TfidfRetriever:
    """RAG module backend: TF-IDF retrieval by cosine similarity (scikit-learn sparse matmul).

    Parameters
    ----------
    ngram_range : tuple of int, default=(1, 2)
        Word n-grams of the vectoriser.

    Examples
    --------
    >>> from rml_fast.evaluation.cyberteam import TfidfRetriever
    >>> r = TfidfRetriever().fit(["patch the log4j library", "block port 445 smb",
    ...                           "rotate leaked credentials"])
    >>> r.query("smb worm spreading over port 445", k=1)[0][0]
    1
    """

    def __init__(self, ngram_range: tuple[int, int] = (1, 2)) -> None:
        self.ngram_range = ngram_range

    def fit(self, docs: Sequence[str]) -> TfidfRetriever:
        """Index ``docs`` (a non-empty sequence of str); returns self."""
        from sklearn.feature_extraction.text import TfidfVectorizer

        if isinstance(docs, str) or not isinstance(docs, Sequence) or len(docs) == 0:
            raise ValueError("docs must be a non-empty sequence of strings")
        if not all(isinstance(d, str) for d in docs):
            raise TypeError("docs must hold strings")
        self.docs_ = list(docs)
        self.vectorizer_ = TfidfVectorizer(token_pattern=_TOKEN_RE.pattern,
                                           ngram_range=self.ngram_range)
        try:
            self.matrix_ = self.vectorizer_.fit_transform(self.docs_)
        except ValueError as exc:  # empty vocabulary
            raise ValueError(f"docs have no indexable tokens: {exc}") from exc
        return self

    def query(self, q: str, k: int = 5) -> list[tuple[int, float]]:
        """The ``k`` best documents for ``q`` as ``(index, cosine)`` pairs, best first (ties by
        index); documents with cosine 0 are left out."""
        if not hasattr(self, "matrix_"):
            raise RuntimeError("TfidfRetriever is not fitted; call fit(docs) first")
        if not isinstance(q, str):
            raise TypeError(f"q must be a str, got {type(q).__name__}")
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"k must be an int >= 1, got {k!r}")
        sims = (self.matrix_ @ self.vectorizer_.transform([q]).T).toarray().ravel()
        order = np.lexsort((np.arange(sims.size), -sims))[:k]
        return [(int(i), float(sims[i])) for i in order if sims[i] > 0]


def map_lookup(table: Mapping[Any, Any], key: Any) -> list:
    """MAP module: look ``key`` up in a mapping table (CVE -> CWE, IOC -> APT, ...).

    Keys are matched exactly first, then after :func:`normalize_entity` on both sides. A value
    that is a list is returned as a list; a scalar value as a one-element list; a missing key
    as ``[]``.

    Parameters
    ----------
    table : mapping
    key : hashable

    Returns
    -------
    list

    Examples
    --------
    >>> from rml_fast.evaluation.cyberteam import map_lookup
    >>> map_lookup({"CVE-2021-44228": ["CWE-502", "CWE-917"]}, "cve-2021-44228")
    ['CWE-502', 'CWE-917']
    >>> map_lookup({"evil[.]com": "APT28"}, "EVIL.COM")
    ['APT28']
    """
    if not isinstance(table, Mapping):
        raise TypeError(f"table must be a mapping, got {type(table).__name__}")
    if key in table:
        val = table[key]
    else:
        nk = normalize_entity(key)
        val = None
        for k, v in table.items():
            if normalize_entity(k) == nk:
                val = v
                break
        if val is None:
            return []
    if isinstance(val, (list, tuple)):
        return list(val)
    return [val]


def normalize_entity(x: Any) -> str:
    """Normalisation before comparing answers: ``str``, refang, lower-case, collapse
    whitespace, strip surrounding whitespace, quotes and trailing ``.,;:``.

    Examples
    --------
    >>> from rml_fast.evaluation.cyberteam import normalize_entity
    >>> normalize_entity("  Evil[.]Example[.]COM. ")
    'evil.example.com'
    """
    s = refang(str(x)).lower()
    s = re.sub(r"\s+", " ", s).strip().strip("\"'`").rstrip(".,;:").strip()
    return s


def rouge_l(pred: str, gold: str, beta: float = 1.0) -> float:
    """ROUGE-L F-measure of two texts on lower-cased word tokens (Lin, 2004).

    ``P = LCS / |pred|``, ``R = LCS / |gold|``, ``F = (1 + beta^2) P R / (R + beta^2 P)``;
    1.0 when both are empty, 0.0 when exactly one is.

    Examples
    --------
    >>> from rml_fast.evaluation.cyberteam import rouge_l
    >>> round(rouge_l("patch the server now", "patch the web server"), 4)
    0.75
    """
    a, b = _tokens(str(pred)), _tokens(str(gold))
    if not a and not b:
        return 1.0
    if not a or not b:
        return 0.0
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0] * (len(b) + 1)
        for j, y in enumerate(b, 1):
            cur[j] = prev[j - 1] + 1 if x == y else max(prev[j], cur[j - 1])
        prev = cur
    lcs = prev[-1]
    if lcs == 0:
        return 0.0
    p, r = lcs / len(a), lcs / len(b)
    b2 = beta * beta
    return (1 + b2) * p * r / (r + b2 * p)


def _as_list(x: Any) -> list:
    if x is None:
        return []
    if isinstance(x, (list, tuple, set, frozenset)):
        return list(x)
    return [x]


def _num(x: Any) -> float | None:
    if isinstance(x, bool) or x is None:
        return None
    if isinstance(x, (int, float, np.number)):
        v = float(x)
    else:
        m = re.search(r"-?\d+(?:\.\d+)?", str(x))
        if m is None:
            return None
        v = float(m.group(0))
    return v if math.isfinite(v) else None


ScorerFn = Callable[[Any, Any], Mapping[str, float]]


# ============================================================================================
# scoring
# ============================================================================================

TASK_TYPES: tuple[str, ...] = ("classification", "extraction", "numeric", "generation")
"""Built-in scorer types of :func:`score_task`."""

PRIMARY_METRIC: dict[str, str] = {"classification": "correct", "extraction": "f1",
                                  "numeric": "within_0_5", "generation": "rouge_l"}
"""The metric of each scorer type that enters the workflow-level mean (PROPOSED)."""


def score_task(task_type: str | ScorerFn, pred: Any, gold: Any, *,
               judge: Callable[[Any, Any], float] | None = None) -> dict[str, float]:
    """Score one task answer against its gold answer (the spec's PROPOSED per-type rules).

    * ``"classification"``: ``correct`` = 1 if the normalised labels are equal (accuracy and
      macro-F1 are computed over samples by :func:`aggregate_scores`).
    * ``"extraction"`` (NER / REX / SPA / MAP answers): set ``precision``, ``recall``, ``f1``
      after :func:`normalize_entity` (both empty: all 1).
    * ``"numeric"`` (CVSS): ``abs_error``, ``within_0_5`` (|err| <= 0.5), ``severity_match``;
      a missing / unparseable prediction counts as error 10 (PROPOSED).
    * ``"generation"`` (summary, mitigation): ``rouge_l`` F, plus ``judge`` = ``judge(pred,
      gold)`` when a judge callable is given.
    * a callable ``f(pred, gold) -> mapping``: its result (floats), used as is.

    Parameters
    ----------
    task_type : str or callable
    pred, gold : any
        Prediction and gold answer (str, number or list of str).
    judge : callable, optional
        ``judge(pred, gold) -> float`` for generation tasks.

    Returns
    -------
    dict of str to float

    Examples
    --------
    >>> from rml_fast.evaluation.cyberteam import score_task
    >>> score_task("extraction", ["APT28", "evil[.]com"], ["apt28", "EVIL.COM", "x.org"])
    {'precision': 1.0, 'recall': 0.6666666666666666, 'f1': 0.8}
    >>> score_task("numeric", 9.1, 9.8)
    {'abs_error': 0.7000000000000011, 'within_0_5': 0.0, 'severity_match': 1.0}
    """
    if callable(task_type):
        res = task_type(pred, gold)
        if not isinstance(res, Mapping):
            raise TypeError(f"a scorer callable must return a mapping of metric -> float, got "
                            f"{type(res).__name__}")
        return {str(k): float(v) for k, v in res.items()}
    if task_type == "classification":
        ok = pred is not None and normalize_entity(pred) == normalize_entity(gold)
        return {"correct": float(ok)}
    if task_type == "extraction":
        p = {normalize_entity(x) for x in _as_list(pred)} - {""}
        g = {normalize_entity(x) for x in _as_list(gold)} - {""}
        if not p and not g:
            return {"precision": 1.0, "recall": 1.0, "f1": 1.0}
        tp = len(p & g)
        prec = tp / len(p) if p else 0.0
        rec = tp / len(g) if g else 0.0
        f1 = 2 * prec * rec / (prec + rec) if prec + rec > 0 else 0.0
        return {"precision": prec, "recall": rec, "f1": f1}
    if task_type == "numeric":
        g_num = _num(gold)
        if g_num is None:
            raise ValueError(f"gold must be a number for a numeric task, got {gold!r}")
        v = _num(pred)
        if v is None:
            return {"abs_error": 10.0, "within_0_5": 0.0, "severity_match": 0.0}
        err = abs(v - g_num)
        sev = (0.0 <= v <= 10.0) and cvss_severity(v) == cvss_severity(min(max(g_num, 0.0), 10.0))
        return {"abs_error": err, "within_0_5": float(err <= 0.5 + 1e-9),
                "severity_match": float(sev)}
    if task_type == "generation":
        out = {"rouge_l": rouge_l("" if pred is None else str(pred), str(gold))}
        if judge is not None:
            out["judge"] = float(judge(pred, gold))
        return out
    raise ValueError(f"task_type must be one of {list(TASK_TYPES)} or a callable, got "
                     f"{task_type!r}")


def _primary(task_type: str | ScorerFn, scores: Mapping[str, float]) -> float:
    if isinstance(task_type, str):
        return float(scores[PRIMARY_METRIC[task_type]])
    if "score" in scores:
        return float(scores["score"])
    return float(next(iter(scores.values()))) if scores else math.nan


def _macro_f1(preds: list[str], golds: list[str]) -> float:
    labels = sorted(set(golds) | set(preds))
    f1s = []
    for lab in labels:
        tp = sum(p == lab and g == lab for p, g in zip(preds, golds, strict=True))
        fp = sum(p == lab and g != lab for p, g in zip(preds, golds, strict=True))
        fn = sum(p != lab and g == lab for p, g in zip(preds, golds, strict=True))
        f1s.append(2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 0.0)
    return float(np.mean(f1s)) if f1s else 0.0


# ============================================================================================
# the workflow engine
# ============================================================================================

MODULES: tuple[str, ...] = ("NER", "REX", "SPA", "SUM", "CLS", "MATH", "MAP", "SIM", "RAG")
"""The nine operational module types; NER, SPA, SUM and CLS are LLM-backed."""

LLM_MODULES: tuple[str, ...] = ("NER", "SPA", "SUM", "CLS")
"""Module types that call the injected LLM (prompt template + :func:`extract_json`)."""

STAGES: tuple[str, ...] = ("attribution", "behavior", "prioritization", "response")
"""The four stages; dependencies flow from earlier to later stages."""

MODULE_PROMPTS: dict[str, str] = {
    "NER": "[NER] Extract threat entities (actors, malware, vulnerabilities, infrastructure) "
           "from the report. {instruction}\nReport:\n{text}\nUpstream results: {upstream}\n"
           "Earlier module results: {previous}\nAnswer with one JSON object.",
    "SPA": "[SPA] Copy the exact spans of the report that describe attack techniques. "
           "{instruction}\nReport:\n{text}\nUpstream results: {upstream}\n"
           "Earlier module results: {previous}\nAnswer with one JSON object.",
    "SUM": "[SUM] Summarise in at most {n_sentences} sentences. {instruction}\nReport:\n{text}\n"
           "Upstream results: {upstream}\nEarlier module results: {previous}\n"
           "Answer with one JSON object.",
    "CLS": "[CLS] Classify. {instruction}\nReport:\n{text}\nUpstream results: {upstream}\n"
           "Earlier module results: {previous}\nAnswer with one JSON object.",
}
"""Prompt templates of the LLM-backed modules (fields: instruction, text, upstream, previous,
n_sentences); the leading ``[NER]`` tag names the module for stub LLMs."""


@dataclass(frozen=True)
class TaskSpec:
    """One task of a threat-hunting workflow (a node of the DAG).

    Parameters
    ----------
    name : str
        Unique task name.
    stage : str
        One of the workflow's stages (:data:`STAGES` by default).
    depends_on : tuple of str
        Names of parent tasks whose outputs this task receives.
    modules : tuple of str
        The ordered operational modules the task runs (names of :data:`MODULES` or of custom
        modules passed to :meth:`Workflow.run`).
    prompt : str
        Task instruction for the LLM-backed modules.
    scorer : str or callable, default="extraction"
        :func:`score_task` type or a callable ``f(pred, gold) -> mapping``.
    answer_key : str or tuple of str, default="answer"
        Key(s) of the task output that hold the answer; several keys concatenate their lists.

    Examples
    --------
    >>> from rml_fast.evaluation.cyberteam import TaskSpec
    >>> TaskSpec("severity", "prioritization", modules=("MATH",), scorer="numeric",
    ...          answer_key="cvss_score").modules
    ('MATH',)
    """

    name: str
    stage: str
    depends_on: tuple[str, ...] = ()
    modules: tuple[str, ...] = ()
    prompt: str = ""
    scorer: str | ScorerFn = "extraction"
    answer_key: str | tuple[str, ...] = "answer"

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"TaskSpec name must be a non-empty str, got {self.name!r}")
        for fld in ("depends_on", "modules"):
            val = getattr(self, fld)
            if isinstance(val, str) or not all(isinstance(v, str) for v in val):
                raise TypeError(f"TaskSpec {self.name!r}: {fld} must be a tuple of str, got "
                                f"{val!r}")
            object.__setattr__(self, fld, tuple(val))
        if isinstance(self.scorer, str) and self.scorer not in TASK_TYPES:
            raise ValueError(f"TaskSpec {self.name!r}: scorer must be one of {list(TASK_TYPES)} "
                             f"or a callable, got {self.scorer!r}")

    def answer(self, output: Mapping[str, Any]) -> Any:
        """The task's answer read from its merged module ``output`` (``answer_key``)."""
        if isinstance(self.answer_key, str):
            return output.get(self.answer_key)
        vals: list = []
        for k in self.answer_key:
            vals.extend(_as_list(output.get(k)))
        return vals

    def fingerprint(self) -> dict[str, Any]:
        """A JSON-able description used to refuse resuming a journal of another workflow."""
        sc = self.scorer if isinstance(self.scorer, str) else getattr(
            self.scorer, "__qualname__", repr(self.scorer))
        return {"name": self.name, "stage": self.stage, "depends_on": list(self.depends_on),
                "modules": list(self.modules), "prompt": self.prompt, "scorer": sc,
                "answer_key": self.answer_key if isinstance(self.answer_key, str)
                else list(self.answer_key)}


@dataclass
class ModuleContext:
    """What a module callable receives: ``module(ctx) -> dict`` (JSON-able values).

    Attributes
    ----------
    task : TaskSpec
    text : str
        The sample's report text.
    sample : dict
        The whole sample.
    upstream : dict
        ``{task name: output}`` of the task's ancestors that ran (never of other tasks).
    previous : dict
        ``{module name: output}`` of the modules this task ran before this one.
    llm : callable or None
        ``llm(prompt: str) -> str``.
    knowledge : dict
        Offline knowledge: ``"ttps"`` ({id: description}), ``"map"`` ({table: {key: value}}),
        ``"corpus"`` (list of str).

    Modules must treat the context as read-only (upstream outputs are shared between the
    tasks that read them) and return JSON-serialisable values.
    """

    task: TaskSpec
    text: str
    sample: dict
    upstream: dict
    previous: dict
    llm: Callable[[str], str] | None
    knowledge: dict

    def merged(self) -> dict[str, Any]:
        """Upstream outputs then this task's earlier module outputs, merged into one dict."""
        out: dict[str, Any] = {}
        for v in self.upstream.values():
            out.update(v)
        for v in self.previous.values():
            out.update(v)
        return out


@dataclass
class TaskResult:
    """The outcome of one task on one sample.

    Attributes
    ----------
    name : str
    status : {"ok", "partial", "skipped"}
        ``"partial"``: some module reply could not be parsed.
    output : dict
        Merged module outputs (later modules override earlier keys).
    modules : dict
        ``{module: output}``.
    module_ok : dict
        ``{module: bool}``, False where an LLM reply had no parseable JSON.
    upstream : list of str
        Names of the tasks whose outputs this task received.
    seq : int
        The wave the task ran in (its depth in the DAG: 0 for roots, else 1 + the largest
        parent wave), the same in a fresh and a resumed run; -1 when skipped.
    answer : any
        ``TaskSpec.answer(output)``.
    scores : dict or None
        :func:`score_task` against the sample's gold answer, when there is one.
    """

    name: str
    status: str
    output: dict = field(default_factory=dict)
    modules: dict = field(default_factory=dict)
    module_ok: dict = field(default_factory=dict)
    upstream: list = field(default_factory=list)
    seq: int = -1
    answer: Any = None
    scores: dict | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict (the journal format; values are shared, not copied)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TaskResult:
        """Inverse of :meth:`to_dict`."""
        return cls(**dict(d))


# ----------------------------------------------------------------------------- built-in modules

_CVSS_VEC_RE = re.compile(r"CVSS:(?:3\.[01]|4\.0)/[A-Za-z:/]+[A-Za-z]"
                          r"|\bAV:[LAN]/AC:[HML]/Au:[MSN]/C:[NPC]/I:[NPC]/A:[NPC]\b")
_CVSS_ATTR_RE = re.compile(r"(?:Access|Attack) Vector\s*:", re.IGNORECASE)
_CVSS_REPORTED_RE = re.compile(r"<CVSS Scores?>\s*:\s*(\d+(?:\.\d+)?)", re.IGNORECASE)


def _module_rex(ctx: ModuleContext) -> dict:
    return rex_extract(ctx.text)


def _module_math(ctx: ModuleContext) -> dict:
    found = []
    for vec in dict.fromkeys(_CVSS_VEC_RE.findall(ctx.text)):
        try:
            score, sev = cvss_score(vec)
        except CVSSVectorError as exc:
            found.append({"vector": vec, "error": str(exc)})
            continue
        found.append({"vector": vec, "score": score, "severity": sev})
    if not found and _CVSS_ATTR_RE.search(ctx.text):  # "Attribute: Value, ..." answers
        try:
            vec = cvss_attributes_to_vector(ctx.text)
            score, sev = cvss_score(vec)
            found.append({"vector": vec, "score": score, "severity": sev})
        except CVSSVectorError as exc:
            found.append({"vector": None, "error": str(exc)})
    scored = [f["score"] for f in found if "score" in f]
    best = max(scored) if scored else None
    reported = _CVSS_REPORTED_RE.search(ctx.text)
    if best is None and reported is not None:
        best = float(reported.group(1))
    return {"cvss": found, "cvss_score": best,
            "severity": cvss_severity(best) if best is not None and 0 <= best <= 10 else None}


def _strings(obj: Any) -> list[str]:
    if isinstance(obj, str):
        return [obj]
    if isinstance(obj, Mapping):
        return [s for v in obj.values() for s in _strings(v)]
    if isinstance(obj, (list, tuple)):
        return [s for v in obj for s in _strings(v)]
    return []


def _module_map(ctx: ModuleContext) -> dict:
    tables = ctx.knowledge.get("map", {})
    keys = list(dict.fromkeys(_strings(ctx.merged()) + _strings(rex_extract(ctx.text))))
    out: dict[str, list] = {}
    for tname, table in tables.items():
        vals: list = []
        for k in keys:
            for v in map_lookup(table, k):
                if v not in vals:
                    vals.append(v)
        out[tname] = vals
    return out


def _module_sim(ctx: ModuleContext, k: int = 3, threshold: float = 0.1) -> dict:
    ttps = ctx.knowledge.get("ttps", {})
    if not ttps:
        return {"ttp_matches": [], "ttp_scores": {}}
    ids = list(ttps)
    hits = TfidfRetriever(ngram_range=(1, 1)).fit([ttps[i] for i in ids]).query(ctx.text, k=k)
    matches = [ids[i] for i, s in hits if s >= threshold]
    return {"ttp_matches": matches, "ttp_scores": {ids[i]: round(s, 6) for i, s in hits}}


def _module_rag(ctx: ModuleContext, k: int = 2) -> dict:
    corpus = ctx.knowledge.get("corpus", [])
    if not corpus:
        return {"retrieved": []}
    hits = TfidfRetriever().fit(corpus).query(ctx.text, k=k)
    return {"retrieved": [corpus[i] for i, _ in hits]}


class ModuleReplyError(ValueError):
    """An LLM-backed module got a reply without a parseable JSON object (recorded as a failed
    module call, not raised out of :meth:`Workflow.run`).

    Examples
    --------
    >>> from rml_fast.evaluation.cyberteam import ModuleReplyError
    >>> issubclass(ModuleReplyError, ValueError)
    True
    """


def llm_module(kind: str, *, n_sentences: int = 4) -> Callable[[ModuleContext], dict]:
    """Build an LLM-backed module (NER, SPA, SUM, CLS): fill :data:`MODULE_PROMPTS`, call the
    injected ``ctx.llm``, parse the reply with :func:`extract_json`.

    Parameters
    ----------
    kind : {"NER", "SPA", "SUM", "CLS"}
    n_sentences : int, default=4
        Summary length asked of SUM.

    Returns
    -------
    callable
        ``module(ctx) -> dict``; raises :class:`ModuleReplyError` on an unparseable reply.

    Examples
    --------
    >>> from rml_fast.evaluation.cyberteam import Workflow, TaskSpec, llm_module
    >>> wf = Workflow([TaskSpec("vector", "prioritization", modules=("CLS",),
    ...                         scorer="classification", answer_key="label")])
    >>> res = wf.run({"id": "s", "text": "remote exploit"},
    ...              llm=lambda p: '```json {"label": "network"} ```',
    ...              modules={"CLS": llm_module("CLS")})
    >>> res["vector"].answer
    'network'
    """
    if kind not in LLM_MODULES:
        raise ValueError(f"kind must be one of {list(LLM_MODULES)}, got {kind!r}")

    def run(ctx: ModuleContext) -> dict:
        if ctx.llm is None:
            raise ValueError(f"task {ctx.task.name!r} runs the LLM-backed module {kind} but no "
                             "llm callable was given to Workflow.run")
        prompt = MODULE_PROMPTS[kind].format(
            instruction=ctx.task.prompt, text=ctx.text, n_sentences=n_sentences,
            upstream=json.dumps(ctx.upstream, sort_keys=True),
            previous=json.dumps(ctx.previous, sort_keys=True))
        reply = ctx.llm(prompt)
        if not isinstance(reply, str):
            raise TypeError(f"llm must return a str, got {type(reply).__name__}")
        try:
            val = extract_json(reply)
        except ValueError as exc:
            raise ModuleReplyError(str(exc)) from None
        if not isinstance(val, dict):
            val = {"answer": val}
        return val

    run.__name__ = f"llm_{kind.lower()}"
    return run


def llm_selector(llm: Callable[[str], str]) -> Callable[[str, list, Any], list]:
    """A ``select`` callable for :meth:`Workflow.run` that lets the LLM choose which tasks of
    each stage to run (the paper's flexible subset).

    The LLM is shown the stage, the candidate task names with their instructions and the
    report, and answers JSON ``{"tasks": [...]}`` (or a bare list). Unknown names are dropped;
    an unparseable reply or an empty choice runs every candidate (PROPOSED fallback).

    Parameters
    ----------
    llm : callable
        ``llm(prompt) -> str``.

    Returns
    -------
    callable
        ``select(stage, candidates, sample) -> list of names``.

    Examples
    --------
    >>> from rml_fast.evaluation.cyberteam import llm_selector
    >>> pick = llm_selector(lambda p: '{"tasks": ["severity_scoring", "bogus"]}')
    >>> pick("prioritization", ["severity_scoring", "attack_vector_classification"], {"text": "x"})
    ['severity_scoring']
    """
    if not callable(llm):
        raise TypeError("llm must be callable(prompt) -> str")

    def select(stage: str, candidates: list, sample: Any) -> list:
        text = sample.get("text", "") if isinstance(sample, Mapping) else ""
        prompt = (f"[SELECT] Stage: {stage}. Choose the tasks worth running for this report "
                  f"from {json.dumps(list(candidates))}.\nReport:\n{text}\n"
                  'Answer with JSON {"tasks": [...]}.')
        try:
            val = extract_json(llm(prompt))
        except ValueError:
            return list(candidates)
        names = val.get("tasks", []) if isinstance(val, dict) else val
        if not isinstance(names, list):
            return list(candidates)
        chosen = [c for c in candidates if c in names]
        return chosen or list(candidates)

    return select


def default_modules() -> dict[str, Callable[[ModuleContext], dict]]:
    """The built-in module registry: REX, MATH, MAP, SIM, RAG (deterministic) and NER, SPA,
    SUM, CLS (LLM-backed via :func:`llm_module`).

    Examples
    --------
    >>> from rml_fast.evaluation.cyberteam import MODULES, default_modules
    >>> sorted(default_modules()) == sorted(MODULES)
    True
    """
    mods: dict[str, Callable[[ModuleContext], dict]] = {
        "REX": _module_rex, "MATH": _module_math, "MAP": _module_map, "SIM": _module_sim,
        "RAG": _module_rag,
    }
    for k in LLM_MODULES:
        mods[k] = llm_module(k)
    return mods


# ----------------------------------------------------------------------------- the engine


class WorkflowCycleError(ValueError):
    """The task graph has a cycle; the message lists it (``a -> b -> a``).

    Examples
    --------
    >>> from rml_fast.evaluation.cyberteam import Workflow, TaskSpec, WorkflowCycleError
    >>> try:
    ...     Workflow([TaskSpec("a", "behavior", depends_on=("b",)),
    ...               TaskSpec("b", "behavior", depends_on=("a",))])
    ... except WorkflowCycleError as err:
    ...     print(err)
    the workflow's task graph has a cycle: a -> b -> a
    """


class Workflow:
    """A threat-hunting workflow: a DAG of tasks, each an ordered chain of modules.

    Each task runs after all its parents, its modules in order; a module receives the
    outputs of the task's ancestors only (never of other tasks) and of the task's earlier
    modules; the task's output is the merge of its module outputs and its answer is read
    from ``answer_key`` and scored against ``sample["gold"][task]`` when present.

    Parameters
    ----------
    tasks : sequence of TaskSpec
    stages : sequence of str or None, default=STAGES
        Allowed stages in flow order; a task may depend only on tasks of the same or an earlier
        stage. None: any stage names, no order check.

    Raises
    ------
    ValueError
        Duplicate task names, a dependency on a task that does not exist (both named), a
        stage not in ``stages`` or a dependency against the stage order.
    WorkflowCycleError
        The dependencies form a cycle (listed in the message).

    Examples
    --------
    >>> from rml_fast.evaluation.cyberteam import Workflow, example_tasks, example_samples
    >>> from rml_fast.evaluation.cyberteam import example_knowledge, heuristic_llm
    >>> wf = Workflow(example_tasks())
    >>> wf.topological_order()[:3]
    ['malware_identification', 'infrastructure_extraction', 'actor_identification']
    >>> res = wf.run(example_samples()[0], llm=heuristic_llm, knowledge=example_knowledge())
    >>> res["severity_scoring"].answer, res["severity_scoring"].scores["within_0_5"]
    (9.8, 1.0)
    """

    def __init__(self, tasks: Sequence[TaskSpec], stages: Sequence[str] | None = STAGES) -> None:
        if isinstance(tasks, TaskSpec) or not isinstance(tasks, Sequence) or not tasks:
            raise ValueError("tasks must be a non-empty sequence of TaskSpec")
        for t in tasks:
            if not isinstance(t, TaskSpec):
                raise TypeError(f"tasks must hold TaskSpec objects, got {type(t).__name__}")
        names = [t.name for t in tasks]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"task names must be unique; repeated: {dup}")
        known = set(names)
        for t in tasks:
            missing = [d for d in t.depends_on if d not in known]
            if missing:
                raise ValueError(f"task {t.name!r} depends on missing task(s) {missing}")
            if t.name in t.depends_on:
                raise WorkflowCycleError(
                    f"the workflow's task graph has a cycle: {t.name} -> {t.name}")
        self.tasks: dict[str, TaskSpec] = {t.name: t for t in tasks}
        self.stages = None if stages is None else tuple(stages)
        cycle = self._find_cycle()
        if cycle:
            raise WorkflowCycleError(
                "the workflow's task graph has a cycle: " + " -> ".join(cycle))
        if self.stages is not None:
            pos = {s: i for i, s in enumerate(self.stages)}
            for t in tasks:
                if t.stage not in pos:
                    raise ValueError(f"task {t.name!r} has stage {t.stage!r}; expected one of "
                                     f"{list(self.stages)}")
            for t in tasks:
                for d in t.depends_on:
                    if pos[self.tasks[d].stage] > pos[t.stage]:
                        raise ValueError(
                            f"task {t.name!r} (stage {t.stage!r}) depends on {d!r} of the later "
                            f"stage {self.tasks[d].stage!r}; dependencies flow "
                            f"{' -> '.join(self.stages)}")
        self._order = self._kahn()
        self._anc = {n: self._ancestors(n) for n in self._order}
        self._index = {n: i for i, n in enumerate(self._order)}
        self._children: dict[str, list[str]] = {n: [] for n in self._order}
        for n in self._order:
            for d in self.tasks[n].depends_on:
                self._children[d].append(n)
        self._anc_ordered = {n: [a for a in self._order if a in self._anc[n]]
                             for n in self._order}
        self._depth: dict[str, int] = {}
        for n in self._order:  # the wave a task runs in: 1 + its deepest parent's wave
            self._depth[n] = 1 + max((self._depth[d] for d in self.tasks[n].depends_on),
                                     default=-1)

    def _find_cycle(self) -> list[str] | None:
        colour = dict.fromkeys(self.tasks, 0)
        stack: list[str] = []

        def visit(n: str) -> list[str] | None:
            colour[n] = 1
            stack.append(n)
            for d in self.tasks[n].depends_on:
                if colour[d] == 1:
                    cyc = [*stack[stack.index(d):], d]
                    return cyc[::-1]  # dependency direction: parent -> child
                if colour[d] == 0:
                    found = visit(d)
                    if found:
                        return found
            stack.pop()
            colour[n] = 2
            return None

        for n in self.tasks:
            if colour[n] == 0:
                found = visit(n)
                if found:
                    return found
        return None

    def _kahn(self) -> list[str]:
        names = list(self.tasks)
        indeg = {n: len(self.tasks[n].depends_on) for n in names}
        children: dict[str, list[str]] = {n: [] for n in names}
        for n in names:
            for d in self.tasks[n].depends_on:
                children[d].append(n)
        index = {n: i for i, n in enumerate(names)}
        ready = sorted((n for n in names if indeg[n] == 0), key=index.__getitem__)
        order: list[str] = []
        while ready:
            n = ready.pop(0)
            order.append(n)
            for c in children[n]:
                indeg[c] -= 1
                if indeg[c] == 0:
                    ready.append(c)
            ready.sort(key=index.__getitem__)
        return order

    def _ancestors(self, name: str) -> set[str]:
        out: set[str] = set()
        todo = list(self.tasks[name].depends_on)
        while todo:
            d = todo.pop()
            if d not in out:
                out.add(d)
                todo.extend(self.tasks[d].depends_on)
        return out

    def topological_order(self) -> list[str]:
        """Task names in a dependency order (Kahn's algorithm, ties in declaration order).

        Returns
        -------
        list of str

        Examples
        --------
        >>> from rml_fast.evaluation.cyberteam import Workflow, TaskSpec
        >>> Workflow([TaskSpec("b", "response", depends_on=("a",)),
        ...           TaskSpec("a", "attribution")]).topological_order()
        ['a', 'b']
        """
        return list(self._order)

    def ancestors(self, name: str) -> set[str]:
        """All tasks ``name`` depends on, directly or transitively.

        Examples
        --------
        >>> from rml_fast.evaluation.cyberteam import Workflow, example_tasks
        >>> sorted(Workflow(example_tasks()).ancestors("actor_identification"))
        ['infrastructure_extraction', 'malware_identification']
        """
        if name not in self.tasks:
            raise ValueError(f"unknown task name {name!r}; tasks: {list(self.tasks)}")
        return set(self._anc[name])

    def fingerprint(self) -> list[dict[str, Any]]:
        """JSON-able description of the tasks (stored in a journal's header).

        Examples
        --------
        >>> from rml_fast.evaluation.cyberteam import Workflow, TaskSpec
        >>> Workflow([TaskSpec("a", "attribution")]).fingerprint()[0]["name"]
        'a'
        """
        return [self.tasks[n].fingerprint() for n in self.tasks]

    # ------------------------------------------------------------------------- running

    def _check_run_args(self, modules, select, max_workers, on_error):
        registry = default_modules()
        if modules is not None:
            if not isinstance(modules, Mapping):
                raise TypeError("modules must be a dict {name: callable}")
            for k, v in modules.items():
                if not callable(v):
                    raise TypeError(f"modules[{k!r}] must be callable, got {type(v).__name__}")
            registry.update(modules)
        for t in self.tasks.values():
            unknown = [m for m in t.modules if m not in registry]
            if unknown:
                raise ValueError(f"task {t.name!r} uses unknown module(s) {unknown}; known: "
                                 f"{sorted(registry)}")
        if select is not None and not callable(select):
            raise TypeError("select must be callable(stage, candidates, sample) -> names")
        check_scalar(max_workers, "max_workers", Interval("int", 1, None))
        if on_error not in ("raise", "record"):
            raise ValueError(f"on_error must be 'raise' or 'record', got {on_error!r}")
        return registry

    def _selected(self, sample: dict, select) -> set[str]:
        if select is None:
            return set(self.tasks)
        stages = list(self.stages) if self.stages is not None else list(
            dict.fromkeys(t.stage for t in self.tasks.values()))
        chosen: set[str] = set()
        for st in stages:
            cands = [n for n in self._order if self.tasks[n].stage == st]
            if not cands:
                continue
            picked = list(select(st, list(cands), sample))
            bad = [p for p in picked if p not in cands]
            if bad:
                raise ValueError(f"select returned {bad} for stage {st!r}, not among its tasks "
                                 f"{cands}")
            chosen.update(picked)
        return chosen

    def _run_task(self, name, sample, text, done, llm, registry, knowledge, on_error, seq):
        task = self.tasks[name]
        up = {a: done[a].output for a in self._anc_ordered[name] if done[a].status != "skipped"}
        previous: dict[str, dict] = {}
        mod_ok: dict[str, bool] = {}
        for m in task.modules:
            ctx = ModuleContext(task=task, text=text, sample=sample, upstream=up,
                                previous=dict(previous), llm=llm, knowledge=knowledge)
            try:
                out = registry[m](ctx)
                if not isinstance(out, Mapping):
                    raise TypeError(f"module {m} of task {name!r} returned "
                                    f"{type(out).__name__}, expected a dict")
                previous[m] = dict(out)
                mod_ok[m] = True
            except ModuleReplyError:
                previous[m] = {}
                mod_ok[m] = False
            except Exception:
                if on_error == "raise":
                    raise
                previous[m] = {}
                mod_ok[m] = False
        merged: dict[str, Any] = {}
        for m in task.modules:
            merged.update(previous[m])
        res = TaskResult(name=name, status="ok" if all(mod_ok.values()) else "partial",
                         output=merged, modules=previous, module_ok=mod_ok,
                         upstream=list(up), seq=seq)
        res.answer = task.answer(merged)
        gold = sample.get("gold", {})
        if isinstance(gold, Mapping) and name in gold:
            res.scores = score_task(task.scorer, res.answer, gold[name])
        # JSON round trip: a resumed run reads exactly what a fresh run returns
        try:
            blob = json.dumps(res.to_dict())
        except (TypeError, ValueError) as exc:
            raise TypeError(f"task {name!r}: module outputs must be JSON-serialisable "
                            f"(dicts, lists, str, numbers, bool, None): {exc}") from None
        return TaskResult.from_dict(json.loads(blob))

    def run(self, sample: Mapping[str, Any], llm: Callable[[str], str] | None = None,
            modules: Mapping[str, Callable[[ModuleContext], dict]] | None = None, *,
            knowledge: Mapping[str, Any] | None = None, select: Callable | None = None,
            max_workers: int = 1, journal: str | os.PathLike | None = None,
            resume: bool = True, on_error: str = "raise",
            progress: bool = False) -> dict[str, TaskResult]:
        """Run the workflow on one sample.

        Tasks run in waves: every task whose parents are finished runs in the current wave,
        in parallel when ``max_workers > 1`` (a thread pool; results do not depend on it).

        Parameters
        ----------
        sample : mapping
            ``{"id": str, "text": str, "gold": {task: answer}, ...}`` (``gold`` optional).
        llm : callable, optional
            ``llm(prompt) -> str``; needed when a task runs an LLM-backed module.
        modules : dict, optional
            Extra or replacement modules ``{name: module(ctx) -> dict}``.
        knowledge : dict, optional
            Offline knowledge for MAP / SIM / RAG (see :class:`ModuleContext`).
        select : callable, optional
            ``select(stage, candidate names, sample) -> names``: the flexible subset of a
            stage's tasks to run; the others are ``"skipped"``.
        max_workers : int, default=1
        journal : path, optional
            JSON-lines journal: each finished task is appended; with ``resume=True`` a run on
            an existing journal reuses its finished tasks, so a stopped run resumes without
            changing its result. A journal of a different workflow is refused.
        resume : bool, default=True
            False: start the journal afresh.
        on_error : {"raise", "record"}, default="raise"
            An exception in a module: re-raise it (the journal keeps the finished tasks) or
            record the module as failed.
        progress : bool, default=False
            Show a tqdm bar over tasks.

        Returns
        -------
        dict of str to TaskResult
            In topological order.
        """
        if not isinstance(sample, Mapping):
            raise TypeError(f"sample must be a mapping, got {type(sample).__name__}")
        text = sample.get("text")
        if not isinstance(text, str):
            raise ValueError("sample must have a str 'text' field")
        if llm is not None and not callable(llm):
            raise TypeError("llm must be callable(prompt) -> str")
        registry = self._check_run_args(modules, select, max_workers, on_error)
        know = dict(knowledge or {})
        sid = str(sample.get("id", ""))
        jr = _Journal(journal, self.fingerprint(), resume) if journal is not None else None
        done: dict[str, TaskResult] = {}
        if jr is not None:
            done.update(jr.completed.get(sid, {}))
        chosen = self._selected(dict(sample), select)
        bar = _NoBar() if not progress else tqdm(total=len(self._order), desc=f"sample {sid}",
                                                 leave=False)
        bar.update(len(done))
        pool = ThreadPoolExecutor(max_workers=max_workers) if max_workers > 1 else None
        try:
            index = self._index
            remaining = {n: sum(d not in done for d in self.tasks[n].depends_on)
                         for n in self._order if n not in done}
            ready = [n for n in remaining if remaining[n] == 0]
            while ready:
                wave = ready
                results: dict[str, TaskResult] = {}
                for n in wave:
                    if n not in chosen:
                        results[n] = TaskResult(name=n, status="skipped")
                todo = [n for n in wave if n in chosen]
                args = (sample, text, done, llm, registry, know, on_error)
                error: BaseException | None = None
                if pool is None or len(todo) <= 1:
                    for n in todo:
                        try:
                            results[n] = self._run_task(n, *args, self._depth[n])
                        except BaseException as exc:
                            error = exc
                            break
                else:
                    futs = {n: pool.submit(self._run_task, n, *args, self._depth[n])
                            for n in todo}
                    for n in todo:
                        try:
                            results[n] = futs[n].result()
                        except BaseException as exc:
                            error = error or exc
                nxt: list[str] = []
                for n in wave:  # journal in a fixed order
                    if n in results:
                        done[n] = results[n]
                        if jr is not None:
                            jr.append(sid, results[n])
                        bar.update(1)
                        for c in self._children[n]:
                            if c not in remaining:  # finished in a journalled run
                                continue
                            remaining[c] -= 1
                            if remaining[c] == 0:
                                nxt.append(c)
                if error is not None:
                    raise error
                ready = sorted(nxt, key=index.__getitem__)
        finally:
            bar.close()
            if pool is not None:
                pool.shutdown(wait=True)
        return {n: done[n] for n in self._order}

    def evaluate(self, samples: Sequence[Mapping[str, Any]], llm: Callable[[str], str] | None
                 = None, modules: Mapping[str, Callable] | None = None, *,
                 knowledge: Mapping[str, Any] | None = None, select: Callable | None = None,
                 max_workers: int = 1, journal: str | os.PathLike | None = None,
                 resume: bool = True, on_error: str = "raise",
                 progress: bool = True) -> dict[str, Any]:
        """Run the workflow on every sample and aggregate the scores (:func:`aggregate_scores`).

        Parameters are those of :meth:`run`; ``samples`` need distinct ``id`` fields when a
        journal is used. ``progress`` shows a bar over samples.

        Returns
        -------
        dict
            ``{"results": [run results], **aggregate_scores(...)}``.

        Examples
        --------
        >>> from rml_fast.evaluation.cyberteam import Workflow, example_tasks, example_samples
        >>> from rml_fast.evaluation.cyberteam import example_knowledge, heuristic_llm
        >>> rep = Workflow(example_tasks()).evaluate(example_samples(), heuristic_llm,
        ...                                          knowledge=example_knowledge(), progress=False)
        >>> rep["dag_consistency"], rep["per_task"]["severity_scoring"]["within_0_5"]
        (1.0, 1.0)
        """
        if isinstance(samples, Mapping) or not isinstance(samples, Sequence):
            raise TypeError("samples must be a sequence of sample dicts")
        if journal is not None:
            ids = [str(s.get("id", "")) for s in samples]
            if len(set(ids)) != len(ids):
                raise ValueError("samples need distinct 'id' fields when a journal is used")
        if journal is not None and not resume and os.path.exists(journal):
            os.remove(journal)
        results = []
        for s in tqdm(samples, disable=not progress, desc="cyberteam"):
            results.append(self.run(s, llm, modules, knowledge=knowledge, select=select,
                                    max_workers=max_workers, journal=journal, resume=True,
                                    on_error=on_error))
        golds = [s.get("gold", {}) for s in samples]
        return {"results": results, **aggregate_scores(self, results, golds)}


def aggregate_scores(workflow: Workflow, results: Sequence[Mapping[str, TaskResult]],
                     golds: Sequence[Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """Dataset-level metrics of workflow runs (PROPOSED, spec section 4.1).

    * ``per_task[name]``: the mean of every metric of :func:`score_task` over the samples
      that have a gold answer for the task (skipped tasks score as empty answers); for
      classification also ``accuracy`` and ``macro_f1`` (over the normalised labels).
    * ``mean_task_score``: mean over tasks of their primary metric
      (:data:`PRIMARY_METRIC`).
    * ``dag_consistency``: fraction of executed tasks that ran strictly after all their parents
      and received outputs of ancestors only.
    * ``module_success``: fraction of module calls that returned a parseable result.

    Parameters
    ----------
    workflow : Workflow
    results : sequence of dict
        :meth:`Workflow.run` outputs, one per sample.
    golds : sequence of dict, optional
        ``sample["gold"]`` per sample (needed for the skipped tasks' zero scores).

    Returns
    -------
    dict

    Examples
    --------
    >>> from rml_fast.evaluation.cyberteam import Workflow, TaskSpec, aggregate_scores
    >>> wf = Workflow([TaskSpec("iocs", "attribution", modules=("REX",), answer_key="ipv4")])
    >>> r = wf.run({"id": "a", "text": "c2 at 198.51.100.4", "gold": {"iocs": ["198.51.100.4"]}})
    >>> aggregate_scores(wf, [r])["per_task"]["iocs"]["f1"]
    1.0
    """
    golds = list(golds) if golds is not None else [{} for _ in results]
    if len(golds) != len(results):
        raise ValueError(f"golds has {len(golds)} entries for {len(results)} results")
    per_task: dict[str, dict[str, float]] = {}
    primaries = []
    for name in workflow.topological_order():
        task = workflow.tasks[name]
        rows = []
        preds, labs = [], []
        for res, gold in zip(results, golds, strict=True):
            r = res[name]
            if r.scores is not None:
                rows.append(r.scores)
            elif r.status == "skipped" and isinstance(gold, Mapping) and name in gold:
                rows.append(score_task(task.scorer, None, gold[name]))
            else:
                continue
            if task.scorer == "classification":
                preds.append(normalize_entity(r.answer) if r.answer is not None else "")
                labs.append(normalize_entity(gold.get(name, "")) if isinstance(gold, Mapping)
                            else "")
        if not rows:
            continue
        keys = list(rows[0])
        agg = {k: float(np.mean([row[k] for row in rows])) for k in keys}
        agg["n"] = float(len(rows))
        if task.scorer == "classification":
            agg["accuracy"] = agg["correct"]
            agg["macro_f1"] = _macro_f1(preds, labs) if preds and all(labs) else math.nan
        per_task[name] = agg
        primaries.append(_primary(task.scorer, agg))
    executed = consistent = calls = ok = 0
    for res in results:
        for name, r in res.items():
            if r.status == "skipped":
                continue
            executed += 1
            parents = workflow.tasks[name].depends_on
            anc = workflow.ancestors(name)
            good = set(r.upstream) <= anc and all(
                res[p].status == "skipped" or res[p].seq < r.seq for p in parents)
            consistent += good
            calls += len(r.module_ok)
            ok += sum(bool(v) for v in r.module_ok.values())
    return {
        "per_task": per_task,
        "mean_task_score": float(np.mean(primaries)) if primaries else math.nan,
        "dag_consistency": consistent / executed if executed else math.nan,
        "module_success": ok / calls if calls else math.nan,
    }


class _NoBar:
    """Stand-in for a disabled tqdm bar (creating tqdm costs more than a task)."""

    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass


class _Journal:
    """Append-only JSON-lines journal of finished tasks, with the workflow in its header."""

    def __init__(self, path: str | os.PathLike, fingerprint: list, resume: bool) -> None:
        self.path = os.fspath(path)
        self.completed: dict[str, dict[str, TaskResult]] = {}
        self._lock = threading.Lock()
        header = {"kind": "header", "format": 1, "workflow": fingerprint}
        if resume and os.path.exists(self.path) and os.path.getsize(self.path) > 0:
            with open(self.path, encoding="utf-8") as fh:
                lines = fh.read().splitlines()
            try:
                head = json.loads(lines[0])
            except json.JSONDecodeError as exc:
                raise ValueError(f"journal {self.path!r} has no valid header: {exc}") from None
            if head.get("workflow") != fingerprint:
                raise ValueError(f"journal {self.path!r} belongs to another workflow; "
                                 f"differences: {_diff(head.get('workflow'), fingerprint)}; "
                                 "use resume=False to start afresh")
            for ln in lines[1:]:
                if not ln.strip():
                    continue
                try:
                    rec = json.loads(ln)
                except json.JSONDecodeError:
                    break  # a torn last line of an interrupted write
                self.completed.setdefault(rec["sample"], {})[rec["task"]] = \
                    TaskResult.from_dict(rec["result"])
        else:
            with open(self.path, "w", encoding="utf-8") as fh:
                fh.write(json.dumps(header) + "\n")

    def append(self, sid: str, res: TaskResult) -> None:
        line = json.dumps({"kind": "task", "sample": sid, "task": res.name,
                           "result": res.to_dict()})
        with self._lock, open(self.path, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")
            fh.flush()
        self.completed.setdefault(sid, {})[res.name] = res


def _diff(old: Any, new: list) -> list[str]:
    if not isinstance(old, list):
        return ["the stored header has no task list"]
    o = {t.get("name"): t for t in old if isinstance(t, dict)}
    n = {t["name"]: t for t in new}
    out = [f"task {k!r} only in the journal" for k in o if k not in n]
    out += [f"task {k!r} only in this workflow" for k in n if k not in o]
    for k in n:
        if k in o and o[k] != n[k]:
            fields = [f for f in n[k] if o[k].get(f) != n[k][f]]
            out.append(f"task {k!r} differs in {fields}")
    return out


# ============================================================================================
# baseline, data loading, the offline example set
# ============================================================================================


def open_ended_baseline(sample: Mapping[str, Any], llm: Callable[[str], str],
                        tasks: Sequence[TaskSpec] | None = None,
                        style: str = "direct") -> dict[str, Any]:
    """The paper's baseline: one open-ended prompt (direct or chain-of-thought) asking for all
    tasks' answers at once, on the same input, scored like the workflow.

    Parameters
    ----------
    sample : mapping
        With ``"text"`` (and optionally ``"gold"``).
    llm : callable
        ``llm(prompt) -> str``.
    tasks : sequence of TaskSpec, optional
        The tasks to answer; default :func:`example_tasks`.
    style : {"direct", "cot"}, default="direct"

    Returns
    -------
    dict
        ``{"answers": {task: answer or None}, "parsed": bool, "scores": {task: dict}}``
        (scores only for tasks with a gold answer; an unparsed reply scores as no answers).

    Examples
    --------
    >>> from rml_fast.evaluation.cyberteam import open_ended_baseline, TaskSpec
    >>> t = [TaskSpec("severity", "prioritization", scorer="numeric")]
    >>> out = open_ended_baseline({"text": "...", "gold": {"severity": 7.5}},
    ...                           lambda p: '{"severity": 7.0}', t)
    >>> out["answers"], out["scores"]["severity"]["within_0_5"]
    ({'severity': 7.0}, 1.0)
    """
    if style not in ("direct", "cot"):
        raise ValueError(f"style must be 'direct' or 'cot', got {style!r}")
    if tasks is None:
        tasks = example_tasks()
    if not callable(llm):
        raise TypeError("llm must be callable(prompt) -> str")
    if not isinstance(sample, Mapping) or not isinstance(sample.get("text"), str):
        raise ValueError("sample must be a mapping with a str 'text' field")
    lines = [f'- "{t.name}": {t.prompt or t.name.replace("_", " ")}' for t in tasks]
    how = ("Think step by step, then give the final answers." if style == "cot"
           else "Answer directly.")
    prompt = ("You are a threat-hunting analyst. Read the report and answer every task.\n"
              f"Report:\n{sample['text']}\nTasks:\n" + "\n".join(lines) +
              f"\n{how} End with one JSON object mapping each task name to its answer.")
    reply = llm(prompt)
    try:
        val = extract_json(reply)
        parsed = isinstance(val, dict)
    except ValueError:
        val, parsed = {}, False
    if not isinstance(val, dict):
        val = {}
    answers = {t.name: val.get(t.name) for t in tasks}
    gold = sample.get("gold", {}) or {}
    scores = {t.name: score_task(t.scorer, answers[t.name], gold[t.name])
              for t in tasks if t.name in gold}
    return {"answers": answers, "parsed": parsed, "scores": scores}


_FIELD_RE = re.compile(r"<([A-Za-z][A-Za-z ]{0,39})>\s*:\s*(.*?)(?=\s*<[A-Za-z][A-Za-z ]{0,39}>\s*:|\Z)",
                       re.DOTALL)


def load_cyberteam_json(path_or_records: str | os.PathLike | Sequence[Mapping[str, Any]]
                        ) -> list[dict[str, Any]]:
    """Load CYBERTEAM released samples (``instruction`` / ``input`` / ``output`` records).

    Accepts a ``.json`` file holding a list of records, a ``.jsonl`` file (one per line) or the
    records themselves. The input's ``<Field>: value`` parts (``<Description>``, ``<Affected
    Products>``, ``<CVSS Scores>``, ...) are parsed into ``fields``.

    Parameters
    ----------
    path_or_records : path or sequence of dict

    Returns
    -------
    list of dict
        ``{"id", "instruction", "text", "output", "fields"}`` per record (``id`` is the
        record's own ``id`` or its index).

    Raises
    ------
    ValueError
        A record without ``input`` (the record's index is named) or an unreadable file.

    Examples
    --------
    >>> from rml_fast.evaluation.cyberteam import load_cyberteam_json
    >>> recs = load_cyberteam_json([{"instruction": "Give the CVSS score.",
    ...     "input": "<Description>: Heap overflow in libfoo. <CVSS Scores>: 7.5",
    ...     "output": "7.5"}])
    >>> recs[0]["fields"]
    {'Description': 'Heap overflow in libfoo.', 'CVSS Scores': '7.5'}
    """
    if isinstance(path_or_records, (str, os.PathLike)):
        path = os.fspath(path_or_records)
        try:
            with open(path, encoding="utf-8") as fh:
                raw = fh.read()
        except OSError as exc:
            raise ValueError(f"cannot read {path!r}: {exc}") from None
        if path.endswith(".jsonl"):
            records = [json.loads(ln) for ln in raw.splitlines() if ln.strip()]
        else:
            records = json.loads(raw)
            if isinstance(records, dict):
                records = records.get("data", [records])
    else:
        records = list(path_or_records)
    out = []
    for i, rec in enumerate(records):
        if not isinstance(rec, Mapping) or not isinstance(rec.get("input"), str):
            raise ValueError(f"record {i} must be a dict with a str 'input' field, got "
                             f"{rec!r:.80}")
        text = rec["input"]
        fields = {m.group(1).strip(): m.group(2).strip() for m in _FIELD_RE.finditer(text)}
        out.append({"id": str(rec.get("id", i)), "instruction": rec.get("instruction", ""),
                    "text": text, "output": rec.get("output"), "fields": fields})
    return out


def example_tasks() -> list[TaskSpec]:
    """A small offline workflow over the four stages (written for this package; the paper's
    30-task list was not available): 8 tasks, all nine module types.

    Returns
    -------
    list of TaskSpec

    Examples
    --------
    >>> from rml_fast.evaluation.cyberteam import example_tasks
    >>> len(example_tasks()), sorted({m for t in example_tasks() for m in t.modules})
    (8, ['CLS', 'MAP', 'MATH', 'NER', 'RAG', 'REX', 'SIM', 'SPA', 'SUM'])
    """
    return [
        TaskSpec("malware_identification", "attribution", modules=("NER",),
                 prompt="List the malware families as JSON {\"malware\": [...]}.",
                 scorer="extraction", answer_key="malware"),
        TaskSpec("infrastructure_extraction", "attribution", modules=("REX",),
                 scorer="extraction", answer_key=("ipv4", "domain", "url")),
        TaskSpec("actor_identification", "attribution",
                 depends_on=("malware_identification", "infrastructure_extraction"),
                 modules=("MAP",), scorer="extraction", answer_key="actor"),
        TaskSpec("ttp_extraction", "behavior", depends_on=("malware_identification",),
                 modules=("SPA", "SIM"),
                 prompt="Quote the technique sentences as JSON {\"spans\": [...]}.",
                 scorer="extraction", answer_key="ttp_matches"),
        TaskSpec("severity_scoring", "prioritization", modules=("MATH",), scorer="numeric",
                 answer_key="cvss_score"),
        TaskSpec("attack_vector_classification", "prioritization",
                 depends_on=("infrastructure_extraction",), modules=("CLS",),
                 prompt="Attack vector: one of network, adjacent, local, physical; JSON "
                        "{\"label\": ...}.",
                 scorer="classification", answer_key="label"),
        TaskSpec("weakness_mapping", "response", depends_on=("severity_scoring",),
                 modules=("REX", "MAP"), scorer="extraction", answer_key="cwe"),
        TaskSpec("mitigation_recommendation", "response",
                 depends_on=("ttp_extraction", "weakness_mapping"), modules=("RAG", "SUM"),
                 prompt="Recommend the mitigation as JSON {\"summary\": ...}.",
                 scorer="generation", answer_key="summary"),
    ]


def example_knowledge() -> dict[str, Any]:
    """Offline knowledge for the example tasks: ATT&CK-style technique descriptions, mapping
    tables (IOC -> actor, CVE -> CWE) and a mitigation corpus (written for this package).

    Examples
    --------
    >>> from rml_fast.evaluation.cyberteam import example_knowledge
    >>> sorted(example_knowledge())
    ['corpus', 'map', 'ttps']
    """
    return {
        "ttps": {
            "T1566": "phishing email with a malicious attachment or link sent to victims",
            "T1190": "exploit a public facing application vulnerability over the internet",
            "T1059": "command and scripting interpreter powershell script execution",
            "T1003": "credential dumping from lsass memory to steal passwords",
            "T1486": "data encrypted for impact ransomware encrypts files for ransom",
            "T1071": "application layer protocol web traffic command and control beacon",
        },
        "map": {
            "actor": {"198.51.100.23": "APT28", "update-check.net": "APT28",
                      "203.0.113.77": "FIN7", "cdn-payments.org": "FIN7",
                      "192.0.2.45": "Lazarus Group"},
            "cwe": {"CVE-2021-44228": ["CWE-502", "CWE-917"], "CVE-2017-0144": ["CWE-20"],
                    "CVE-2023-23397": ["CWE-294"], "CVE-2019-0708": ["CWE-416"]},
        },
        "corpus": [
            "Upgrade log4j to 2.17.1 and disable JNDI lookups in the logging configuration.",
            "Disable SMBv1, apply MS17-010 and block port 445 at the perimeter.",
            "Patch Outlook and block outbound SMB to stop NTLM hash leaks.",
            "Enable network level authentication and patch remote desktop services.",
            "Train users to report phishing and filter macro attachments at the mail gateway.",
        ],
    }


def example_samples() -> list[dict[str, Any]]:
    """Four short synthetic threat reports with gold answers for :func:`example_tasks`
    (written for this package; IPs and domains are documentation ranges / made up).

    Examples
    --------
    >>> from rml_fast.evaluation.cyberteam import example_samples
    >>> s = example_samples()[0]
    >>> s["gold"]["severity_scoring"]
    9.8
    """
    return [
        {"id": "r1",
         "text": "APT28 operators delivered the Zebrocy malware through a phishing email with "
                 "a malicious attachment. The implant beacons to 198.51.100.23 and "
                 "hxxp://update-check[.]net/api over web traffic. The initial access exploited "
                 "CVE-2021-44228 in a public facing application. "
                 "CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H",
         "gold": {"malware_identification": ["Zebrocy"],
                  "infrastructure_extraction": ["198.51.100.23",
                                                "http://update-check.net/api"],
                  "actor_identification": ["APT28"],
                  "ttp_extraction": ["T1566", "T1190", "T1071"],
                  "severity_scoring": 9.8,
                  "attack_vector_classification": "network",
                  "weakness_mapping": ["CWE-502", "CWE-917"],
                  "mitigation_recommendation": "Upgrade log4j to 2.17.1 and disable JNDI "
                                               "lookups."}},
        {"id": "r2",
         "text": "FIN7 used the Carbanak backdoor and a PowerShell script to dump credentials "
                 "from lsass memory. Stolen data went to 203.0.113.77 and cdn-payments.org. "
                 "The attacker needed local access to the point-of-sale host. "
                 "CVSS:3.1/AV:L/AC:L/PR:L/UI:N/S:U/C:H/I:H/A:H",
         "gold": {"malware_identification": ["Carbanak"],
                  "infrastructure_extraction": ["203.0.113.77", "cdn-payments.org"],
                  "actor_identification": ["FIN7"],
                  "ttp_extraction": ["T1059", "T1003"],
                  "severity_scoring": 7.8,
                  "attack_vector_classification": "local",
                  "weakness_mapping": [],
                  "mitigation_recommendation": "Restrict PowerShell and protect lsass "
                                               "memory."}},
        {"id": "r3",
         "text": "WannaCry ransomware spread over SMB by exploiting CVE-2017-0144 and encrypted "
                 "files for ransom; infected hosts contacted 192.0.2.45. "
                 "CVSS:3.1/AV:N/AC:H/PR:N/UI:N/S:U/C:H/I:H/A:H",
         "gold": {"malware_identification": ["WannaCry"],
                  "infrastructure_extraction": ["192.0.2.45"],
                  "actor_identification": ["Lazarus Group"],
                  "ttp_extraction": ["T1486", "T1190"],
                  "severity_scoring": 8.1,
                  "attack_vector_classification": "network",
                  "weakness_mapping": ["CWE-20"],
                  "mitigation_recommendation": "Disable SMBv1, apply MS17-010 and block port "
                                               "445."}},
        {"id": "r4",
         "text": "A crafted calendar invite abuses CVE-2023-23397 in Outlook to leak NTLM "
                 "hashes to an attacker server without user interaction. "
                 "CVSS:4.0/AV:N/AC:L/AT:N/PR:N/UI:N/VC:H/VI:H/VA:H/SC:N/SI:N/SA:N",
         "gold": {"malware_identification": [],
                  "infrastructure_extraction": [],
                  "actor_identification": [],
                  "ttp_extraction": ["T1190"],
                  "severity_scoring": 9.3,
                  "attack_vector_classification": "network",
                  "weakness_mapping": ["CWE-294"],
                  "mitigation_recommendation": "Patch Outlook and block outbound SMB."}},
    ]


_KNOWN_MALWARE = ("Zebrocy", "Carbanak", "WannaCry", "Emotet", "TrickBot", "Cobalt Strike")


def heuristic_llm(prompt: str) -> str:
    """A deterministic keyword stand-in for an LLM, for offline demos and tests of the
    engine (not a model of the paper): it reads the module tag and the report from a
    :data:`MODULE_PROMPTS` prompt and answers in JSON.

    NER: known malware names; SPA: sentences that mention a technique keyword; CLS: attack
    vector from keywords (local / physical / adjacent, else network); SUM: the first retrieved
    document of an upstream / earlier RAG result, else the first sentence. Other prompts get
    ``{}``.

    Parameters
    ----------
    prompt : str

    Returns
    -------
    str
        A JSON reply wrapped in a ```json fence.

    Examples
    --------
    >>> from rml_fast.evaluation.cyberteam import heuristic_llm
    >>> heuristic_llm("[CLS] Classify.\\nReport:\\nneeds local access\\nUpstream results: {}")
    '```json\\n{"label": "local"}\\n```'
    """
    if not isinstance(prompt, str):
        raise TypeError("prompt must be a str")
    tag = prompt[1:4] if prompt.startswith("[") else ""
    m = re.search(r"Report:\n(.*?)\nUpstream results:", prompt, re.DOTALL)
    text = m.group(1) if m else ""
    if tag == "NER":
        ans: dict[str, Any] = {"malware": [w for w in _KNOWN_MALWARE if w.lower() in
                                           text.lower()]}
    elif tag == "SPA":
        keys = ("phishing", "exploit", "script", "dump", "encrypt", "beacon")
        sents = re.split(r"(?<=[.!?])\s+", text)
        ans = {"spans": [s for s in sents if any(k in s.lower() for k in keys)]}
    elif tag == "CLS":
        low = text.lower()
        label = ("physical" if "physical" in low else "local" if "local access" in low
                 else "adjacent" if "adjacent" in low else "network")
        ans = {"label": label}
    elif tag == "SUM":
        docs = re.findall(r'"retrieved": \[(".*?")', prompt)
        ans = {"summary": json.loads(docs[0]) if docs else re.split(r"(?<=[.!?])\s", text)[0]}
    else:
        ans = {}
    return "```json\n" + json.dumps(ans) + "\n```"
