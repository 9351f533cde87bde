"""CULTURE-MT: cultural effectiveness of social-media (UGC) translation, as an evaluation harness.

Items are user-generated notes (:class:`UGCItem`) of four types; translation systems are
:data:`~rml_fast.evaluation._protocols.BatchGen` callables; a judge scores each translation on
expression accuracy (EA) and cultural adaptability (CA), and the cultural effectiveness is

    CE = w_EA * EA + w_CA * CA,        (w_EA, w_CA) = weights, default (0.5, 0.5)

beside traditional metrics (BLEU / chrF / TER through sacrebleu, embedding cosine, or any
``(name, fn)`` metric).  :meth:`CultureMTHarness.meta_evaluate` measures how well each metric
tracks CE: segment-level Kendall tau_b and Spearman rho (overall, per type, per domain),
system-level Pearson / Spearman and pairwise accuracy, each with a percentile bootstrap CI over
items, and optionally the correlation of CE with model size.

[PROPOSAL] The paper (arXiv 2605.25626) does not publish its rubric, scale or type names: the
four types, the 1-5 scale, the rubric anchors of :data:`DEFAULT_JUDGE_TEMPLATE`, CE as a weighted
mean and the log10 model-size correlation are our choices.

References
----------
"Beyond Literal Translation: Evaluating Cultural Effectiveness in Social Media UGC",
arXiv 2605.25626 (ICML 2026).
"""

from __future__ import annotations

import hashlib
import json
import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rml_fast._validation import check_rng
from rml_fast.evaluation._culture_mt_judge import parse_scores
from rml_fast.evaluation._culture_mt_meta import meta_rows
from rml_fast.evaluation._culture_mt_metrics import MetricSpec, build_specs, compute_metric
from rml_fast.evaluation._culture_mt_report import MetaReport, MetaRow, Report

__all__ = [
    "DEFAULT_JUDGE_TEMPLATE",
    "DEFAULT_TRANSLATION_TEMPLATE",
    "ITEM_TYPES",
    "CultureMTHarness",
    "MetaReport",
    "MetaRow",
    "Report",
    "UGCItem",
    "load_items",
    "make_llm_judge",
    "parse_judge_output",
]

ITEM_TYPES = ("culture_ugc", "culture_standard", "plain_ugc", "plain_standard")
"""[PROPOSAL] The 2x2 item types: culture-loaded symbols present (``culture``) or not (``plain``)
x UGC-specific style (``ugc``: slang, emoji, memes, interaction phrases) or standard style."""

DEFAULT_TRANSLATION_TEMPLATE = (
    "Translate this {source_lang} social-media post into {target_lang}. Keep its tone, emoji "
    "and cultural meaning: render slang, memes and culture-loaded expressions so that a "
    "{target_lang}-speaking reader gets the same effect. Output only the translation.\n\n{source}"
)
"""Prompt of :meth:`CultureMTHarness.translate`; fields ``{source}``, ``{source_lang}``,
``{target_lang}``, ``{domain}``, ``{type}``, ``{id}``."""

DEFAULT_JUDGE_TEMPLATE = """You are an expert evaluator of social-media translation.
Score the translation of the post on two dimensions, each an integer from 1 to 5.

Expression accuracy (EA): is the intended meaning, emotion and function conveyed, including
slang, puns, memes, interaction phrases and the meaning of emoji?
  5 = everything conveyed, including tone and every slang/emoji nuance
  4 = meaning and tone conveyed, a minor nuance lost
  3 = core meaning conveyed, but some slang, emoji or tone lost or flattened
  2 = major misreadings of slang, idioms or emoji; the point of the post is partly lost
  1 = meaning wrong or unintelligible

Cultural adaptability (CA): are culture-loaded items (idioms, allusions, festivals, food,
memes, platform conventions) rendered so that a target-culture reader gets the same effect,
by adaptation or explanation rather than literal transfer?
  5 = every culture-loaded item adapted or explained; reads like a native post
  4 = mostly adapted, a little awkward
  3 = a mix of adaptation and literal transfer; part of the effect lost
  2 = mostly literal transfer; the effect is lost or confusing
  1 = culturally wrong or offensive, or the effect is entirely lost

Source post:
{source}

Translation:
{translation}
{reference_block}
Answer with JSON only: {{"EA": <1-5>, "CA": <1-5>, "rationale": "<one sentence>"}}"""
"""[PROPOSAL] Judge prompt with rubric anchors for EA and CA on 1-5 (the paper's rubric is not
public).  Fields ``{source}``, ``{translation}``, ``{reference_block}`` (empty, or a reference
translation paragraph)."""


# --------------------------------------------------------------------------------------------
# items


@dataclass(frozen=True)
class UGCItem:
    """One user-generated-content item to translate.

    Parameters
    ----------
    id : str
        Unique identifier.
    source : str
        The source post (non-empty).
    domain : str
        Topic domain (the paper has 14, e.g. food, travel, beauty).
    type : str
        One of :data:`ITEM_TYPES` ([PROPOSAL] 2x2: culture-loaded symbols x UGC style).
    reference : str or None, default=None
        A reference translation; the reference-based metrics skip items without one.
    meta : dict or None, default=None
        Anything else (e.g. ``culture_spans``).

    Examples
    --------
    >>> UGCItem("n1", "今天的火锅yyds🔥", "food", "culture_ugc", "Today's hotpot is the GOAT 🔥").type
    'culture_ugc'
    """

    id: str
    source: str
    domain: str
    type: str
    reference: str | None = None
    meta: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise TypeError(f"UGCItem.id must be a non-empty str, got {self.id!r}")
        if not isinstance(self.source, str) or not self.source.strip():
            raise ValueError(
                f"UGCItem {self.id!r}: source must be a non-empty str, got {self.source!r}"
            )
        if not isinstance(self.domain, str) or not self.domain:
            raise ValueError(
                f"UGCItem {self.id!r}: domain must be a non-empty str, got {self.domain!r}"
            )
        if self.type not in ITEM_TYPES:
            raise ValueError(
                f"UGCItem {self.id!r}: type must be one of {ITEM_TYPES}, got {self.type!r}"
            )
        if self.reference is not None and not isinstance(self.reference, str):
            raise TypeError(
                f"UGCItem {self.id!r}: reference must be a str or None, got {type(self.reference).__name__}"
            )
        if self.meta is not None and not isinstance(self.meta, dict):
            raise TypeError(
                f"UGCItem {self.id!r}: meta must be a dict or None, got {type(self.meta).__name__}"
            )


_ITEM_FIELDS = ("id", "source", "domain", "type", "reference", "meta")


def load_items(path_or_records: str | Path | Sequence[Mapping[str, Any]]) -> list[UGCItem]:
    """Read UGC items from a JSON / JSONL file or from a list of dicts.

    A JSON file holds a list of records (or ``{"items": [...]}``); a ``.jsonl`` file one record a
    line.  A record has the :class:`UGCItem` fields; an extra ``culture_spans`` goes into ``meta``.

    Parameters
    ----------
    path_or_records : str, Path or sequence of dict
        The file, or the records themselves.

    Returns
    -------
    items : list of UGCItem

    Raises
    ------
    ValueError
        Naming the record (index and id) and the field at fault: a missing or unknown field, a
        bad type, a duplicate id, an empty list.

    Examples
    --------
    >>> items = load_items([{"id": "a", "source": "绝绝子", "domain": "beauty", "type": "plain_ugc"}])
    >>> items[0].reference is None
    True
    """
    records: Any
    if isinstance(path_or_records, (str, Path)):
        path = Path(path_or_records)
        if not path.is_file():
            raise ValueError(f"path_or_records: no such file {str(path)!r}")
        text = path.read_text(encoding="utf-8")
        try:
            if path.suffix == ".jsonl":
                records = [json.loads(ln) for ln in text.splitlines() if ln.strip()]
            else:
                records = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"path_or_records: {str(path)!r} is not valid JSON: {exc}") from exc
        if isinstance(records, dict) and "items" in records:
            records = records["items"]
    else:
        records = path_or_records
    if isinstance(records, (str, bytes, Mapping)) or not isinstance(records, Sequence):
        raise TypeError(
            f"path_or_records must be a path or a list of dicts, got {type(records).__name__}"
        )
    if len(records) == 0:
        raise ValueError("path_or_records: no items")
    items: list[UGCItem] = []
    seen: set[str] = set()
    for i, rec in enumerate(records):
        if not isinstance(rec, Mapping):
            raise ValueError(f"record {i}: expected a dict, got {type(rec).__name__}")
        where = f"record {i} (id={rec.get('id')!r})"
        unknown = set(rec) - set(_ITEM_FIELDS) - {"culture_spans"}
        if unknown:
            raise ValueError(f"{where}: unknown field(s) {sorted(unknown)}; allowed {_ITEM_FIELDS}")
        for f in ("id", "source", "domain", "type"):
            if f not in rec:
                raise ValueError(f"{where}: missing field {f!r}")
        rid = rec["id"]
        if isinstance(rid, bool) or not isinstance(rid, (str, int)):
            raise ValueError(f"{where}: field 'id' must be a str or int, got {type(rid).__name__}")
        rid = str(rid)
        if rid in seen:
            raise ValueError(f"{where}: duplicate id {rid!r}")
        seen.add(rid)
        meta = rec.get("meta")
        if "culture_spans" in rec:
            meta = {
                **(meta if isinstance(meta, dict) else {}),
                "culture_spans": rec["culture_spans"],
            }
        try:
            items.append(
                UGCItem(rid, rec["source"], rec["domain"], rec["type"], rec.get("reference"), meta)
            )
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{where}: {exc}") from exc
    return items


# --------------------------------------------------------------------------------------------
# judge


def _check_scale(scale: Any) -> tuple[float, float]:
    try:
        lo, hi = (float(scale[0]), float(scale[1]))
    except (TypeError, ValueError, IndexError) as exc:
        raise TypeError(f"scale must be a (low, high) pair of numbers, got {scale!r}") from exc
    if len(scale) != 2 or not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise ValueError(f"scale must be a finite (low, high) pair with low < high, got {scale!r}")
    return lo, hi


def parse_judge_output(text: str, scale: tuple[float, float] = (1, 5)) -> dict[str, Any]:
    """Parse a judge's raw answer into ``{"EA": float, "CA": float, "rationale": str}``.

    Tolerates a JSON object inside a fenced code block or surrounded by prose, single-quoted
    (Python-literal) dicts, numbers given as strings (``"4"``, ``"4/5"``), key aliases
    (``expression_accuracy``, ``cultural_adaptability``; ``reason``/``explanation``), and plain
    ``EA: 4, CA: 5`` text.

    Parameters
    ----------
    text : str
        The judge's output.
    scale : (float, float), default=(1, 5)
        Allowed score range, inclusive.

    Returns
    -------
    scores : dict
        ``EA`` and ``CA`` as floats in ``scale``; ``rationale`` (``""`` if absent).

    Raises
    ------
    ValueError
        If no EA/CA pair can be read, or a score is NaN, infinite or outside ``scale``.  No
        other exception type is raised for any input.

    Examples
    --------
    >>> parse_judge_output('Sure!\\n```json\\n{"EA": "4", "CA": 5, "rationale": "ok"}\\n```\\nDone.')
    {'EA': 4.0, 'CA': 5.0, 'rationale': 'ok'}
    >>> parse_judge_output("{'EA': 3, 'CA': 2}")["CA"]
    2.0
    """
    lo, hi = _check_scale(scale)
    if not isinstance(text, str):
        raise ValueError(f"text must be a str (the judge output), got {type(text).__name__}")
    try:
        out = parse_scores(text)
    except ValueError as exc:
        raise ValueError(f"text: {exc}") from exc
    for k in ("EA", "CA"):
        if not lo <= out[k] <= hi:
            raise ValueError(f"judge score {k}={out[k]!r} is outside the scale [{lo:g}, {hi:g}]")
    return out


def make_llm_judge(
    textgen: Callable[[str], str] | None,
    template: str = DEFAULT_JUDGE_TEMPLATE,
    *,
    max_retries: int = 2,
    n_samples: int = 1,
    scale: tuple[float, float] = (1, 5),
    name: str | None = None,
    batch_textgen: Callable[[list[str]], list[str]] | None = None,
) -> Callable[[str, str, str | None], dict[str, Any]]:
    """Turn a TextGen LLM into a CULTURE-MT judge ``(source, translation, reference) -> scores``.

    The prompt is ``template`` (default :data:`DEFAULT_JUDGE_TEMPLATE`, [PROPOSAL] rubric) with
    ``{source}``, ``{translation}`` and ``{reference_block}``; the answer is read by
    :func:`parse_judge_output`, retried up to ``max_retries`` times when unparsable or out of
    ``scale``, and averaged over ``n_samples`` answers (self-consistency: EA = mean of the
    samples' EA, likewise CA; the first sample's rationale).

    Parameters
    ----------
    textgen : callable or None
        ``prompt -> text`` (:data:`~rml_fast.evaluation._protocols.TextGen`); may be None when
        ``batch_textgen`` is given.
    template : str
        Prompt template (``str.format`` fields as above; literal braces doubled).
    max_retries : int, default=2
        Extra attempts per sample after an unparsable answer.
    n_samples : int, default=1
        Answers averaged per call.
    scale : (float, float), default=(1, 5)
        Allowed score range.
    name : str, optional
        Name used in error messages (default: the textgen's ``__name__``).
    batch_textgen : callable, optional
        ``prompts -> texts`` (:data:`~rml_fast.evaluation._protocols.BatchGen`).  When given, the
        judge gets a ``batch(triples)`` method that :meth:`CultureMTHarness.evaluate` uses to
        send every uncached (source, translation, reference) in one call per sample and retry
        round.

    Returns
    -------
    judge : callable
        ``judge(source, translation, reference=None) -> {"EA": float, "CA": float, "rationale": str}``.

    Raises
    ------
    ValueError
        At construction for a template with unknown fields; at call time, naming the judge, when
        every attempt of a sample fails to parse.

    Examples
    --------
    >>> judge = make_llm_judge(lambda prompt: 'Here: {"EA": 5, "CA": "4", "rationale": "fine"} bye')
    >>> judge("绝绝子", "absolutely amazing", None)
    {'EA': 5.0, 'CA': 4.0, 'rationale': 'fine'}
    >>> bj = make_llm_judge(None, batch_textgen=lambda ps: ["EA: 3, CA: 2"] * len(ps))
    >>> [r["CA"] for r in bj.batch([("a", "b", None), ("c", "d", "e")])]
    [2.0, 2.0]
    """
    if textgen is None and batch_textgen is None:
        raise TypeError("make_llm_judge needs textgen (prompt -> text) or batch_textgen")
    for arg, what in ((textgen, "textgen"), (batch_textgen, "batch_textgen")):
        if arg is not None and not callable(arg):
            raise TypeError(f"{what} must be callable, got {type(arg).__name__}")
    if not isinstance(template, str):
        raise TypeError(f"template must be a str, got {type(template).__name__}")
    try:
        template.format(source="s", translation="t", reference_block="")
    except (KeyError, IndexError, ValueError) as exc:
        raise ValueError(
            "template must use only the fields {source}, {translation}, {reference_block} "
            f"(double literal braces): {exc!r}"
        ) from exc
    if (
        isinstance(max_retries, bool)
        or not isinstance(max_retries, numbers.Integral)
        or max_retries < 0
    ):
        raise ValueError(f"max_retries must be an int >= 0, got {max_retries!r}")
    if isinstance(n_samples, bool) or not isinstance(n_samples, numbers.Integral) or n_samples < 1:
        raise ValueError(f"n_samples must be an int >= 1, got {n_samples!r}")
    scale = _check_scale(scale)
    gen = textgen if textgen is not None else batch_textgen
    label = name or getattr(gen, "__name__", type(gen).__name__)
    attempts = int(max_retries) + 1

    def prompt_of(source: str, translation: str, reference: str | None) -> str:
        ref_block = "" if reference is None else f"\nReference translation:\n{reference}\n"
        return template.format(source=source, translation=translation, reference_block=ref_block)

    def generate(prompts: list[str]) -> list[str]:
        if batch_textgen is not None:
            out = batch_textgen(prompts)
            if isinstance(out, str) or not isinstance(out, Sequence) or len(out) != len(prompts):
                raise ValueError(f"judge {label!r}: batch_textgen must return {len(prompts)} texts")
            return list(out)
        return [textgen(p) for p in prompts]  # type: ignore[misc]

    def batch(triples: Sequence[tuple[str, str, str | None]]) -> list[dict[str, Any]]:
        prompts = [prompt_of(*t) for t in triples]
        samples: list[list[dict[str, Any]]] = [[] for _ in prompts]
        for _ in range(int(n_samples)):
            todo = list(range(len(prompts)))
            last: dict[int, str] = {}
            for _attempt in range(attempts):
                if not todo:
                    break
                raws = generate([prompts[i] for i in todo])
                failed = []
                for i, raw in zip(todo, raws, strict=True):
                    try:
                        samples[i].append(parse_judge_output(raw, scale))
                    except ValueError as exc:
                        last[i] = str(exc)
                        failed.append(i)
                todo = failed
            if todo:
                raise ValueError(
                    f"judge {label!r}: no parsable EA/CA answer after {attempts} attempts "
                    f"({len(todo)} of {len(prompts)} prompts); last error: {last[todo[0]]}"
                )
        return [
            {
                "EA": float(np.mean([x["EA"] for x in smp])),
                "CA": float(np.mean([x["CA"] for x in smp])),
                "rationale": smp[0]["rationale"],
            }
            for smp in samples
        ]

    def judge(source: str, translation: str, reference: str | None = None) -> dict[str, Any]:
        return batch([(source, translation, reference)])[0]

    judge.__name__ = f"llm_judge[{label}]"
    if batch_textgen is not None:
        judge.batch = batch  # type: ignore[attr-defined]
    return judge


def _judge_key(source: str, translation: str, reference: str | None, sample: int) -> str:
    h = hashlib.sha256()
    for part in (source, translation, "\x00none" if reference is None else reference, str(sample)):
        h.update(part.encode("utf-8", "surrogatepass"))
        h.update(b"\x1f")
    return h.hexdigest()


# --------------------------------------------------------------------------------------------
# harness


class CultureMTHarness:
    """Evaluate translation systems on UGC items: judge EA/CA/CE, MT metrics, meta-evaluation.

    CE of item i under system s is ``w_EA * EA[s, i] + w_CA * CA[s, i]``, where EA and CA are the
    means of ``n_judge_samples`` judge answers (self-consistency).  Judge calls are keyed by the
    sha256 of (source, translation, reference, sample index) and cached for the harness's life,
    so a translation repeated across items, systems or calls is judged once per sample.

    Parameters
    ----------
    items : sequence of UGCItem or of dict
        The n >= 1 items (dicts go through :func:`load_items`).
    judge : callable
        ``judge(source, translation, reference_or_None) -> {"EA": s, "CA": s, "rationale": str}``
        with scores in ``scale`` (e.g. from :func:`make_llm_judge`).
    metrics : sequence, default=("bleu", "chrf")
        Names among ``"bleu"``, ``"chrf"``, ``"ter"`` (sacrebleu; TER is lower-is-better) and
        ``"cosine"`` (needs ``embedder``), or ``(name, fn)`` / ``(name, fn, higher_is_better)``
        tuples with ``fn(hypotheses, references, sources) -> (m,)`` segment scores (corpus score =
        their mean).  Reference-based: items without a reference get NaN.
    n_judge_samples : int, default=1
        Judge answers averaged per (item, translation).
    weights : (float, float), default=(0.5, 0.5)
        ``(w_EA, w_CA)``, non-negative, summing to 1 ([PROPOSAL] CE as a weighted mean).
    rng : numpy.random.Generator, int or None
        Randomness of the bootstrap in :meth:`meta_evaluate`.
    embedder : callable, optional
        :data:`~rml_fast.evaluation._protocols.Embedder` for ``"cosine"`` (e.g.
        ``rml_fast.evaluation.embedders.MiniLMEmbedder()``; English targets).
    metric_kwargs : dict, optional
        sacrebleu constructor options per metric, e.g. ``{"bleu": {"tokenize": "zh"}}``.
    scale : (float, float), default=(1, 5)
        Allowed judge score range.
    source_lang, target_lang : str, default="Chinese", "English"
        Used by the translation prompt ([PROPOSAL] language pair).

    Attributes
    ----------
    items : list of UGCItem
    n_judge_calls : int
        Judge answers requested so far (cache misses).

    Notes
    -----
    A judge with a ``batch(triples) -> list of answers`` method (as :func:`make_llm_judge` gives
    with ``batch_textgen``) is called once per :meth:`evaluate` with every uncached
    ``(source, translation, reference)``, repeated once per self-consistency sample.

    Examples
    --------
    >>> items = [UGCItem("1", "今天的火锅yyds🔥", "food", "culture_ugc", "Today's hotpot is the GOAT 🔥"),
    ...          UGCItem("2", "这家店绝绝子", "food", "plain_ugc", "This place is absolutely amazing")]
    >>> judge = lambda src, tr, ref: {"EA": 5 if "GOAT" in tr or "amazing" in tr else 2,
    ...                               "CA": 4, "rationale": ""}
    >>> h = CultureMTHarness(items, judge, rng=0)
    >>> rep = h.evaluate({"adapted": ["Today's hotpot is the GOAT 🔥", "This place is absolutely amazing"],
    ...                   "literal": ["Today's hotpot eternal god 🔥", "This shop absolutely child"]},
    ...                  progress=False)
    >>> round(rep.corpus["adapted"]["bleu"], 6), float(rep.ce["literal"].mean())
    (100.0, 3.0)
    >>> meta = h.meta_evaluate(rep, n_boot=200)
    >>> meta.get("bleu", "kendall_tau_b").value > 0
    True
    """

    def __init__(
        self,
        items: Sequence[UGCItem] | Sequence[Mapping[str, Any]],
        judge: Callable[[str, str, str | None], Mapping[str, Any]],
        metrics: Sequence[Any] = ("bleu", "chrf"),
        n_judge_samples: int = 1,
        weights: tuple[float, float] = (0.5, 0.5),
        rng: Any = None,
        *,
        embedder: Callable[[list[str]], np.ndarray] | None = None,
        metric_kwargs: Mapping[str, Mapping[str, Any]] | None = None,
        scale: tuple[float, float] = (1, 5),
        source_lang: str = "Chinese",
        target_lang: str = "English",
    ) -> None:
        if isinstance(items, (str, bytes)) or not isinstance(items, Sequence):
            raise TypeError(
                f"items must be a sequence of UGCItem or dicts, got {type(items).__name__}"
            )
        if len(items) == 0:
            raise ValueError("items must not be empty")
        self.items: list[UGCItem]
        if all(isinstance(it, UGCItem) for it in items):
            given = [it for it in items if isinstance(it, UGCItem)]
            ids = [it.id for it in given]
            if len(set(ids)) != len(ids):
                raise ValueError("items: duplicate ids")
            self.items = given
        else:
            self.items = load_items(items)  # type: ignore[arg-type]
        if not callable(judge):
            raise TypeError(f"judge must be callable, got {type(judge).__name__}")
        self.judge = judge
        self.judge_name = getattr(judge, "__name__", type(judge).__name__)
        self._specs: list[MetricSpec] = build_specs(metrics, embedder, metric_kwargs)
        if self._specs and all(it.reference is None for it in self.items):
            raise ValueError(
                f"metrics {[sp.name for sp in self._specs]} compare with reference translations, "
                "but no item has one; pass metrics=() to judge only"
            )
        if (
            isinstance(n_judge_samples, bool)
            or not isinstance(n_judge_samples, numbers.Integral)
            or n_judge_samples < 1
        ):
            raise ValueError(f"n_judge_samples must be an int >= 1, got {n_judge_samples!r}")
        self.n_judge_samples: int = int(n_judge_samples)
        try:
            w = tuple(float(v) for v in weights)
        except (TypeError, ValueError) as exc:
            raise TypeError(
                f"weights must be a pair of numbers (w_EA, w_CA), got {weights!r}"
            ) from exc
        if len(w) != 2 or not all(math.isfinite(v) and v >= 0 for v in w) or abs(sum(w) - 1) > 1e-9:
            raise ValueError(
                f"weights must be two non-negative numbers summing to 1, got {weights!r}"
            )
        self.weights: tuple[float, float] = (w[0], w[1])
        self.scale: tuple[float, float] = _check_scale(scale)
        self.source_lang: str = str(source_lang)
        self.target_lang: str = str(target_lang)
        self._rng = check_rng(rng)
        self._cache: dict[str, tuple[float, float, str]] = {}
        self.n_judge_calls: int = 0

    @property
    def metric_names(self) -> tuple[str, ...]:
        """Names of the metrics computed by :meth:`evaluate`, in order."""
        return tuple(s.name for s in self._specs)

    def translate(
        self,
        system: Callable[[list[str]], list[str]],
        template: str | None = None,
        batch_size: int | None = None,
    ) -> list[str]:
        """Translate every item with a BatchGen system.

        Parameters
        ----------
        system : callable
            ``prompts -> texts`` (:data:`~rml_fast.evaluation._protocols.BatchGen`).
        template : str, optional
            Prompt template, default :data:`DEFAULT_TRANSLATION_TEMPLATE`; fields ``{source}``,
            ``{source_lang}``, ``{target_lang}``, ``{domain}``, ``{type}``, ``{id}``.  ``"{source}"``
            sends the bare source.
        batch_size : int, optional
            Prompts per call (default: all at once).

        Returns
        -------
        translations : list of str, one per item (stripped of surrounding whitespace).

        Examples
        --------
        >>> h = CultureMTHarness([UGCItem("1", "你好", "daily", "plain_standard", "hello")],
        ...                      lambda s, t, r: {"EA": 5, "CA": 5}, metrics=())
        >>> h.translate(lambda prompts: [p.replace("你好", "hello") for p in prompts], "{source}")
        ['hello']
        """
        if not callable(system):
            raise TypeError(f"system must be a BatchGen callable, got {type(system).__name__}")
        template = DEFAULT_TRANSLATION_TEMPLATE if template is None else template
        if not isinstance(template, str):
            raise TypeError(f"template must be a str, got {type(template).__name__}")
        if batch_size is not None and (
            isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1
        ):
            raise ValueError(f"batch_size must be a positive int or None, got {batch_size!r}")
        try:
            prompts = [
                template.format(
                    source=it.source,
                    source_lang=self.source_lang,
                    target_lang=self.target_lang,
                    domain=it.domain,
                    type=it.type,
                    id=it.id,
                )
                for it in self.items
            ]
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(f"template has an unknown or malformed field: {exc!r}") from exc
        name = getattr(system, "__name__", type(system).__name__)
        step = batch_size or len(prompts)
        out: list[str] = []
        for lo in range(0, len(prompts), step):
            chunk = prompts[lo : lo + step]
            got = system(chunk)
            if isinstance(got, str) or not isinstance(got, Sequence) or len(got) != len(chunk):
                raise ValueError(
                    f"system {name!r} must return a list of {len(chunk)} str, got "
                    f"{type(got).__name__} of length {len(got) if hasattr(got, '__len__') else '?'}"
                )
            if not all(isinstance(t, str) for t in got):
                raise TypeError(f"system {name!r} must return str translations")
            out.extend(t.strip() for t in got)
        return out

    # -- judging ------------------------------------------------------------------------------

    def _store(self, key: str, got: Any, it: UGCItem, system: str) -> None:
        """Validate one judge answer and cache it under ``key``."""
        where = f"judge {self.judge_name!r} on item {it.id!r} (system {system!r})"
        if not isinstance(got, Mapping) or "EA" not in got or "CA" not in got:
            raise ValueError(f"{where} must return a dict with 'EA' and 'CA', got {got!r:.200}")
        lo, hi = self.scale
        vals = []
        for k in ("EA", "CA"):
            v = got[k]
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Real):
                raise ValueError(f"{where} returned a non-numeric {k}: {v!r}")
            v = float(v)
            if not (math.isfinite(v) and lo <= v <= hi):
                raise ValueError(
                    f"{where} returned {k}={v!r}, outside the scale [{lo:g}, {hi:g}] or NaN"
                )
            vals.append(v)
        self._cache[key] = (vals[0], vals[1], str(got.get("rationale", "")))

    def _judge_all(
        self, systems: tuple[str, ...], outputs: dict[str, list[str]], progress: bool
    ) -> dict[str, list[list[str]]]:
        """Judge every (item, translation, sample) not in the cache, once each; returns the
        cache keys, ``keys[system][item][sample]``."""
        needed: dict[str, tuple[UGCItem, str, str]] = {}
        keys: dict[str, list[list[str]]] = {}
        for s in systems:
            keys[s] = []
            for it, tr in zip(self.items, outputs[s], strict=True):
                row = [
                    _judge_key(it.source, tr, it.reference, j) for j in range(self.n_judge_samples)
                ]
                keys[s].append(row)
                for key in row:
                    if key not in self._cache and key not in needed:
                        needed[key] = (it, tr, s)
        if not needed:
            return keys
        batch = getattr(self.judge, "batch", None)
        if callable(batch):
            got = batch([(it.source, tr, it.reference) for it, tr, _ in needed.values()])
            if (
                isinstance(got, (str, Mapping))
                or not isinstance(got, Sequence)
                or len(got) != len(needed)
            ):
                raise ValueError(
                    f"judge {self.judge_name!r}: batch() must return {len(needed)} answers"
                )
            self.n_judge_calls += len(needed)
            for (key, (it, _, s)), g in zip(needed.items(), got, strict=True):
                self._store(key, g, it, s)
            return keys
        from tqdm.auto import tqdm

        for key, (it, tr, s) in tqdm(
            needed.items(), desc="judge", disable=not progress, leave=False
        ):
            g = self.judge(it.source, tr, it.reference)
            self.n_judge_calls += 1
            self._store(key, g, it, s)
        return keys

    def evaluate(
        self, system_outputs: Mapping[str, Sequence[str]], progress: bool = True
    ) -> Report:
        """Judge and score the translations of each system.

        Parameters
        ----------
        system_outputs : dict of str to list of str
            ``{system name: n translations, in item order}``.
        progress : bool, default=True
            Show a tqdm bar over the judge calls.

        Returns
        -------
        report : Report
            EA, CA, CE and segment metric values of shape (n,) per system, corpus metrics.

        Raises
        ------
        ValueError
            Empty mapping, an output list of the wrong length, a judge answer that is not a dict
            with EA/CA in ``scale`` (naming the judge, item and system).

        Examples
        --------
        >>> h = CultureMTHarness([UGCItem("1", "破防了", "daily", "plain_ugc", "I'm so moved")],
        ...                      lambda s, t, r: {"EA": 4, "CA": 2}, weights=(0.75, 0.25))
        >>> float(h.evaluate({"mt": ["I broke defence"]}, progress=False).ce["mt"][0])
        3.5
        """
        if not isinstance(system_outputs, Mapping) or len(system_outputs) == 0:
            raise ValueError("system_outputs must be a non-empty dict {system name: translations}")
        n = len(self.items)
        outputs: dict[str, list[str]] = {}
        for s, outs in system_outputs.items():
            if not isinstance(s, str):
                raise TypeError(f"system_outputs: system names must be str, got {s!r}")
            if isinstance(outs, str) or not isinstance(outs, Sequence):
                raise TypeError(
                    f"system_outputs[{s!r}] must be a list of str, got {type(outs).__name__}"
                )
            if len(outs) != n:
                raise ValueError(
                    f"system_outputs[{s!r}] has {len(outs)} translations, expected {n} (one per item)"
                )
            if not all(isinstance(t, str) for t in outs):
                raise TypeError(f"system_outputs[{s!r}] must hold only str")
            outputs[s] = list(outs)
        systems = tuple(outputs)
        keys = self._judge_all(systems, outputs, progress)
        w_ea, w_ca = self.weights
        ea, ca, ce, rats = {}, {}, {}, {}
        for s in systems:
            got = [[self._cache[key] for key in row] for row in keys[s]]
            sc = np.array([[g[:2] for g in row] for row in got])  # (n, k, 2)
            e, c = sc[:, :, 0].mean(axis=1), sc[:, :, 1].mean(axis=1)  # (n,)
            rats[s] = [row[0][2] for row in got]
            ea[s], ca[s], ce[s] = e, c, w_ea * e + w_ca * c
        has_ref = np.array([it.reference is not None for it in self.items])
        idx = np.flatnonzero(has_ref)
        refs = [self.items[i].reference for i in idx]
        srcs = [self.items[i].source for i in idx]
        segment: dict[str, dict[str, np.ndarray]] = {s: {} for s in systems}
        corpus: dict[str, dict[str, float]] = {s: {} for s in systems}
        stats: dict[str, dict[str, np.ndarray]] = {s: {} for s in systems}
        for spec in self._specs:
            for s in systems:
                hyps = [outputs[s][i] for i in idx]
                score, seg, st = compute_metric(spec, hyps, refs, srcs)  # type: ignore[arg-type]
                full = np.full(n, np.nan)
                full[idx] = seg
                segment[s][spec.name] = full
                corpus[s][spec.name] = score
                if st is not None:
                    z = np.zeros((n, st.shape[1]))
                    z[idx] = st
                    stats[s][spec.name] = z
        return Report(
            systems,
            tuple(self.items),
            outputs,
            ea,
            ca,
            ce,
            segment,
            corpus,
            rats,
            {sp.name: sp.higher_is_better for sp in self._specs},
            stats,
        )

    # -- meta-evaluation ---------------------------------------------------------------------

    def meta_evaluate(
        self,
        report: Report,
        *,
        n_boot: int = 1000,
        confidence: float = 0.95,
        model_sizes: Mapping[str, float] | None = None,
        rng: Any = None,
    ) -> MetaReport:
        """How well each metric tracks CE: correlations with percentile bootstrap CIs.

        Metrics are oriented higher-is-better first (TER enters as -TER).  Segment level: Kendall
        tau_b and Spearman rho between metric and CE over all (system, item) pairs with a
        reference, overall and per item type and domain.  System level: Pearson r and Spearman
        rho between corpus metric and mean CE over systems (NaN below 3 systems), and pairwise
        accuracy, the fraction of system pairs ordered alike by metric and CE (sign agreement,
        ties included).  ``model_sizes`` adds Pearson / Spearman between log10(size) and mean CE
        ([PROPOSAL]).  CIs resample items with replacement (all systems of a drawn item
        together), ``n_boot`` times, recomputing corpus metrics from resampled sacrebleu
        statistics; vectorised (a numba kernel computes tau_b and rho from resampling counts).

        Parameters
        ----------
        report : Report
            From :meth:`evaluate` of this harness.
        n_boot : int, default=1000
            Bootstrap resamples (0 gives NaN intervals).
        confidence : float, default=0.95
            Interval coverage.
        model_sizes : dict of str to float, optional
            Parameter count of the base model of (some of) the systems.
        rng : numpy.random.Generator, int or None
            Overrides the harness's ``rng``.

        Returns
        -------
        meta : MetaReport

        Examples
        --------
        >>> items = [UGCItem(str(i), f"源{i}", "d", "plain_ugc", f"ref {i}") for i in range(8)]
        >>> ce = {"a": [5, 4, 5, 3, 2, 4, 1, 2]}
        >>> h = CultureMTHarness(items, lambda s, t, r: {"EA": float(t.split()[1]), "CA": float(t.split()[1])},
        ...                      metrics=[("len", lambda hy, re, so: [len(x) for x in hy])], rng=0)
        >>> rep = h.evaluate({"a": [f"x {v} " + "y" * v for v in ce["a"]]}, progress=False)
        >>> h.meta_evaluate(rep, n_boot=100).get("len", "kendall_tau_b").value
        1.0
        """
        if not isinstance(report, Report):
            raise TypeError(f"report must be a Report from evaluate(), got {type(report).__name__}")
        if len(report.items) != len(self.items) or any(
            a.id != b.id for a, b in zip(report.items, self.items, strict=True)
        ):
            raise ValueError("report was not produced on this harness's items")
        if isinstance(n_boot, bool) or not isinstance(n_boot, numbers.Integral) or n_boot < 0:
            raise ValueError(f"n_boot must be an int >= 0, got {n_boot!r}")
        if (
            isinstance(confidence, bool)
            or not isinstance(confidence, numbers.Real)
            or not 0 < confidence < 1
        ):
            raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
        if model_sizes is not None:
            if not isinstance(model_sizes, Mapping):
                raise TypeError(
                    f"model_sizes must be a dict {{system: parameter count}}, got {type(model_sizes).__name__}"
                )
            for s, v in model_sizes.items():
                if s not in report.systems:
                    raise ValueError(
                        f"model_sizes: unknown system {s!r}; report has {list(report.systems)}"
                    )
                if (
                    isinstance(v, bool)
                    or not isinstance(v, numbers.Real)
                    or not (math.isfinite(v) and v > 0)
                ):
                    raise ValueError(f"model_sizes[{s!r}] must be a positive number, got {v!r}")
        gen = self._rng if rng is None else check_rng(rng)
        rows = meta_rows(
            report, self.items, self._specs, int(n_boot), float(confidence), model_sizes, gen
        )
        return MetaReport(tuple(rows), int(n_boot), float(confidence))
