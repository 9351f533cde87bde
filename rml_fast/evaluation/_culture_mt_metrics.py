"""Traditional MT metrics for CULTURE-MT: sacrebleu (BLEU, chrF, TER), embedding cosine, custom.

sacrebleu is imported lazily.  Each sacrebleu metric is computed once from its per-segment
sufficient statistics: the corpus score is sacrebleu's own aggregation of them (so it equals
``sacrebleu.corpus_bleu`` etc. exactly), a segment score is the statistic of one segment (as
``sacrebleu.sentence_bleu``, i.e. effective order for BLEU), and the bootstrap of the
meta-evaluation re-aggregates resampled sums of the same statistics.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

_SACREBLEU = {"bleu": ("BLEU", True), "chrf": ("CHRF", True), "ter": ("TER", False)}


def import_sacrebleu() -> Any:
    """Import sacrebleu or raise an ImportError that names the extra to install."""
    try:
        import sacrebleu
    except ImportError as exc:
        raise ImportError(
            "CULTURE-MT's BLEU/chrF/TER metrics need sacrebleu: pip install 'rml_fast[evaluation]'"
        ) from exc
    return sacrebleu


@dataclass
class MetricSpec:
    """One metric of the harness: its name, orientation and how to compute it."""

    name: str
    higher_is_better: bool
    kind: str  # "sacrebleu" | "cosine" | "custom"
    fn: Callable[..., Any] | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)
    _corpus_scorer: Any = None
    _segment_scorer: Any = None

    def scorers(self) -> tuple[Any, Any]:
        """(corpus, segment) sacrebleu metric objects, built once."""
        if self._corpus_scorer is None:
            sb = import_sacrebleu()
            cls = getattr(sb, _SACREBLEU[self.name][0])
            self._corpus_scorer = cls(**self.kwargs)
            seg_kwargs = dict(self.kwargs)
            if self.name == "bleu":
                seg_kwargs["effective_order"] = True
            self._segment_scorer = cls(**seg_kwargs)
        return self._corpus_scorer, self._segment_scorer


def build_specs(metrics: Any, embedder: Any, metric_kwargs: Any) -> list[MetricSpec]:
    """Validate the harness's ``metrics`` argument into MetricSpec records."""
    if isinstance(metrics, str) or not isinstance(metrics, Sequence):
        raise TypeError(
            "metrics must be a sequence of names ('bleu', 'chrf', 'ter', 'cosine') or "
            f"(name, fn[, higher_is_better]) tuples, got {type(metrics).__name__}"
        )
    metric_kwargs = {} if metric_kwargs is None else dict(metric_kwargs)
    specs: list[MetricSpec] = []
    for m in metrics:
        if isinstance(m, str):
            key = m.lower()
            if key in _SACREBLEU:
                specs.append(
                    MetricSpec(
                        key,
                        _SACREBLEU[key][1],
                        "sacrebleu",
                        kwargs=dict(metric_kwargs.get(key, {})),
                    )
                )
            elif key == "cosine":
                if embedder is None or not callable(embedder):
                    raise ValueError(
                        "metrics contains 'cosine', which needs embedder= (an Embedder callable "
                        "such as rml_fast.evaluation.embedders.MiniLMEmbedder())"
                    )
                specs.append(MetricSpec("cosine", True, "cosine", fn=embedder))
            else:
                raise ValueError(
                    f"metrics: unknown metric {m!r}; expected 'bleu', 'chrf', 'ter', 'cosine' "
                    "or a (name, fn) tuple"
                )
        elif isinstance(m, tuple) and len(m) in (2, 3) and isinstance(m[0], str) and callable(m[1]):
            hib = bool(m[2]) if len(m) == 3 else True
            specs.append(MetricSpec(m[0], hib, "custom", fn=m[1]))
        else:
            raise TypeError(f"metrics: entry {m!r} is neither a metric name nor a (name, fn) tuple")
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise ValueError(f"metrics: duplicate metric names in {names}")
    unknown = set(metric_kwargs) - {s.name for s in specs if s.kind == "sacrebleu"}
    if unknown:
        raise ValueError(f"metric_kwargs: keys {sorted(unknown)} are not sacrebleu metrics in use")
    if any(s.kind == "sacrebleu" for s in specs):
        import_sacrebleu()
    return specs


def compute_metric(
    spec: MetricSpec, hyps: list[str], refs: list[str], sources: list[str]
) -> tuple[float, np.ndarray, np.ndarray | None]:
    """(corpus score, segment scores (m,), sufficient statistics (m, k) or None) on m pairs."""
    m = len(hyps)
    if spec.kind == "sacrebleu":
        corpus, segment = spec.scorers()
        stats = corpus._extract_corpus_statistics(hyps, [refs])
        score = float(corpus._aggregate_and_compute(stats).score)
        seg = np.array(
            [segment._compute_score_from_stats(s).score for s in stats], dtype=np.float64
        )
        return score, seg, np.asarray(stats, dtype=np.float64).reshape(m, -1)
    if spec.kind == "cosine":
        both = spec.fn(list(hyps) + list(refs))  # type: ignore[misc]
        E = np.asarray(both, dtype=np.float64)
        if E.ndim != 2 or E.shape[0] != 2 * m or not np.isfinite(E).all():
            raise ValueError(
                f"embedder must return a finite (n, d) array for n={2 * m} texts, got shape "
                f"{getattr(E, 'shape', None)}"
            )
        E = E / np.maximum(np.linalg.norm(E, axis=1, keepdims=True), 1e-12)
        seg = np.einsum("ij,ij->i", E[:m], E[m:])
        return float(seg.mean()) if m else float("nan"), seg, None
    out = spec.fn(list(hyps), list(refs), list(sources))  # type: ignore[misc]
    try:
        seg = np.asarray(out, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"metric {spec.name!r} must return {m} numbers: {exc}") from exc
    if seg.shape != (m,) or not np.isfinite(seg).all():
        raise ValueError(
            f"metric {spec.name!r} must return {m} finite segment scores, got shape {seg.shape}"
        )
    return float(seg.mean()) if m else float("nan"), seg, None


def corpus_from_stats(spec: MetricSpec, summed: np.ndarray) -> np.ndarray:
    """Corpus scores from (B, k) summed sufficient statistics (one per bootstrap resample)."""
    corpus, _ = spec.scorers()
    return np.array([corpus._compute_score_from_stats(list(row)).score for row in summed])
