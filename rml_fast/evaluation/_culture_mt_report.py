"""Result records of CULTURE-MT: :class:`Report` (per-item scores) and :class:`MetaReport`.

Public through :mod:`rml_fast.evaluation.culture_mt`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from rml_fast.evaluation.culture_mt import UGCItem


@dataclass(frozen=True)
class Report:
    """Per-item judge scores and metric values of each system (from :meth:`CultureMTHarness.evaluate`).

    Attributes
    ----------
    systems : tuple of str
        System names, in the order given.
    items : tuple of UGCItem
        The n items.
    outputs : dict of str to list of str
        The evaluated translations.
    ea, ca, ce : dict of str to ndarray of shape (n,)
        Judge means of EA and CA (over the self-consistency samples) and CE = w_EA EA + w_CA CA.
    segment : dict of str to dict of str to ndarray of shape (n,)
        ``segment[system][metric]``: segment-level scores; NaN for items without a reference.
    corpus : dict of str to dict of str to float
        ``corpus[system][metric]``: corpus scores (sacrebleu's corpus statistics; the mean of
        the segment scores for cosine and custom metrics).
    rationales : dict of str to list of str
        First judge sample's rationale per item.
    higher_is_better : dict of str to bool
        Orientation of each metric (False for TER).
    stats : dict
        ``stats[system][metric]``: per-item sacrebleu sufficient statistics of shape (n, k), zero
        rows where there is no reference (used by the system-level bootstrap).
    """

    systems: tuple[str, ...]
    items: tuple[UGCItem, ...]
    outputs: dict[str, list[str]]
    ea: dict[str, np.ndarray]
    ca: dict[str, np.ndarray]
    ce: dict[str, np.ndarray]
    segment: dict[str, dict[str, np.ndarray]]
    corpus: dict[str, dict[str, float]]
    rationales: dict[str, list[str]]
    higher_is_better: dict[str, bool]
    stats: dict[str, dict[str, np.ndarray]] = field(repr=False, default_factory=dict)

    def system_scores(self) -> dict[str, dict[str, float]]:
        """Mean EA, CA, CE and the corpus metrics of each system, ``{system: {name: value}}``."""
        return {
            s: {
                "EA": float(self.ea[s].mean()),
                "CA": float(self.ca[s].mean()),
                "CE": float(self.ce[s].mean()),
                **self.corpus[s],
            }
            for s in self.systems
        }

    def to_records(self) -> list[dict[str, Any]]:
        """One flat dict per (system, item): ids, type, domain, translation, EA, CA, CE, metrics."""
        rows = []
        for s in self.systems:
            for i, it in enumerate(self.items):
                row = {
                    "system": s,
                    "id": it.id,
                    "type": it.type,
                    "domain": it.domain,
                    "translation": self.outputs[s][i],
                    "EA": float(self.ea[s][i]),
                    "CA": float(self.ca[s][i]),
                    "CE": float(self.ce[s][i]),
                }
                row.update({m: float(v[i]) for m, v in self.segment[s].items()})
                rows.append(row)
        return rows


@dataclass(frozen=True)
class MetaRow:
    """One meta-evaluation statistic with its bootstrap CI.

    Attributes
    ----------
    level : {"segment", "system", "size"}
        Segment-level (pooled over systems x items), system-level, or model size vs CE.
    metric : str
        Metric name (``"log10_size"`` for the size row).
    group, subset : str
        ``("all", "all")``, ``("type", <type>)`` or ``("domain", <domain>)``.
    statistic : {"kendall_tau_b", "spearman", "pearson", "pairwise_accuracy"}
    value : float
        The statistic (NaN when undefined: fewer than 2 segments / 3 systems, or constant input).
    ci_low, ci_high : float
        Percentile bootstrap interval over resampled items.
    n : int
        Number of segments or systems.
    """

    level: str
    metric: str
    group: str
    subset: str
    statistic: str
    value: float
    ci_low: float
    ci_high: float
    n: int


@dataclass(frozen=True)
class MetaReport:
    """Metric-versus-CE meta-evaluation (from :meth:`CultureMTHarness.meta_evaluate`).

    Attributes
    ----------
    rows : tuple of MetaRow
    n_boot : int
    confidence : float
    """

    rows: tuple[MetaRow, ...]
    n_boot: int
    confidence: float

    def get(
        self,
        metric: str,
        statistic: str,
        level: str = "segment",
        group: str = "all",
        subset: str = "all",
    ) -> MetaRow:
        """The row for ``(level, metric, group, subset, statistic)``.

        Raises
        ------
        ValueError
            If an argument matches no row (the message names it).
        KeyError
            If each argument matches some row but no row matches all of them.
        """
        for name, value in (("level", level), ("metric", metric), ("group", group),
                            ("subset", subset), ("statistic", statistic)):
            known = sorted({str(getattr(r, name)) for r in self.rows})
            if not isinstance(value, str) or value not in known:
                raise ValueError(f"{name} must be one of {known}, got {value!r}")
        for r in self.rows:
            if (r.level, r.metric, r.group, r.subset, r.statistic) == (
                level,
                metric,
                group,
                subset,
                statistic,
            ):
                return r
        raise KeyError(f"no meta-evaluation row {(level, metric, group, subset, statistic)}")

    def to_records(self) -> list[dict[str, Any]]:
        """The rows as dicts (e.g. for ``pandas.DataFrame``)."""
        return [dict(r.__dict__) for r in self.rows]

    def table(self, group: str = "all") -> str:
        """A plain-text table of the rows of ``group`` (``"all"``, ``"type"`` or ``"domain"``)."""
        lines = [f"{'level':8} {'metric':10} {'subset':18} {'statistic':18} {'value':>7}  CI"]
        for r in self.rows:
            if r.group == group or (group == "all" and r.level != "segment"):
                lines.append(
                    f"{r.level:8} {r.metric:10} {r.subset:18} {r.statistic:18} "
                    f"{r.value:7.3f}  [{r.ci_low:.3f}, {r.ci_high:.3f}]"
                )
        return "\n".join(lines)
