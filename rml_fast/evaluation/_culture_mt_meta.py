"""Meta-evaluation of CULTURE-MT: how well each metric tracks CE, with item-bootstrap CIs.

Called by :meth:`rml_fast.evaluation.culture_mt.CultureMTHarness.meta_evaluate`, which checks the
arguments and documents the statistics.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from rml_fast.evaluation import _culture_mt_stats as _st
from rml_fast.evaluation._culture_mt_metrics import MetricSpec, corpus_from_stats
from rml_fast.evaluation._culture_mt_report import MetaRow, Report


def meta_rows(
    report: Report,
    items: Sequence[Any],
    specs: Sequence[MetricSpec],
    n_boot: int,
    conf: float,
    model_sizes: Mapping[str, float] | None,
    gen: np.random.Generator,
) -> list[MetaRow]:
    """All meta-evaluation rows: segment level (overall, per type, per domain), system level,
    and model size vs CE; CIs from ``n_boot`` item resamples drawn from ``gen``."""
    systems = report.systems
    S, n = len(systems), len(items)
    metrics = [m for m in report.higher_is_better]
    sign = {m: 1.0 if report.higher_is_better[m] else -1.0 for m in metrics}
    CE = np.stack([report.ce[s] for s in systems])  # (S, n)
    rows: list[MetaRow] = []

    def ci(b: np.ndarray) -> tuple[float, float]:
        return _st.percentile_ci(b, conf) if n_boot else (math.nan, math.nan)

    # -- segment level: overall, per type, per domain (item-cluster bootstrap)
    subsets: list[tuple[str, str, np.ndarray]] = [("all", "all", np.arange(n))]
    for grp, attr in (("type", "type"), ("domain", "domain")):
        vals = [getattr(it, attr) for it in items]
        for v in sorted(set(vals)):
            subsets.append((grp, v, np.array([i for i, x in enumerate(vals) if x == v])))
    all_counts = _st.bootstrap_counts(n, n_boot, gen)
    for grp, sub, idx in subsets:
        counts = all_counts if grp == "all" else _st.bootstrap_counts(idx.size, n_boot, gen)
        for m in metrics:
            X = np.stack([report.segment[s][m][idx] for s in systems]) * sign[m]  # (S, k)
            valid = np.isfinite(X)
            local = np.broadcast_to(np.arange(idx.size), X.shape)[valid]
            x, y = X[valid], CE[:, idx][valid]
            t0, r0 = _st.rank_correlations(x, y, np.ones((1, idx.size), np.int64), local)
            tb, rb = _st.rank_correlations(x, y, counts, local)
            tau, rho = np.concatenate([t0, tb]), np.concatenate([r0, rb])
            for stat, vals_ in (("kendall_tau_b", tau), ("spearman", rho)):
                lo, hi = ci(vals_[1:])
                rows.append(
                    MetaRow("segment", m, grp, sub, stat, float(vals_[0]), lo, hi, int(x.size))
                )

    # -- system level (same item resamples as the overall segment level)
    ce_sys = CE.mean(axis=1)
    ce_boot = (all_counts @ CE.T) / n  # (B, S)
    for m in metrics:
        xs = np.array([report.corpus[s][m] for s in systems]) * sign[m]
        xb = np.empty((n_boot, S))
        spec = next(sp for sp in specs if sp.name == m)
        for j, s in enumerate(systems):
            if spec.kind == "sacrebleu":
                xb[:, j] = corpus_from_stats(spec, all_counts @ report.stats[s][m]) if n_boot else 0
            else:
                seg = report.segment[s][m]
                ok = np.isfinite(seg)
                cnt = all_counts[:, ok].sum(axis=1)
                with np.errstate(invalid="ignore", divide="ignore"):
                    xb[:, j] = (all_counts[:, ok] @ seg[ok]) / cnt
        xb *= sign[m]
        rows.extend(_system_rows("system", m, xs, ce_sys, xb, ce_boot, ci))

    if model_sizes:
        names = [s for s in systems if s in model_sizes]
        cols = [systems.index(s) for s in names]
        xs = np.log10([float(model_sizes[s]) for s in names])
        xb = np.broadcast_to(xs, (n_boot, len(names)))
        rows.extend(
            _system_rows(
                "size", "log10_size", xs, ce_sys[cols], xb, ce_boot[:, cols], ci, accuracy=False
            )
        )
    return rows


def _system_rows(level, metric, xs, ys, xb, yb, ci, accuracy=True) -> list[MetaRow]:
    """Pearson, Spearman (NaN below 3 systems) and pairwise accuracy rows with bootstrap CIs."""
    S = xs.size
    out = []
    stats = [("pearson", _st.pearson_rows), ("spearman", _st.spearman_rows)]
    if accuracy:
        stats.append(("pairwise_accuracy", _st.pairwise_accuracy_rows))
    for name, fn in stats:
        if name != "pairwise_accuracy" and S < 3:
            val, lo, hi = math.nan, math.nan, math.nan
        else:
            val = float(fn(xs[None], ys[None])[0])
            ok = np.isfinite(xb).all(axis=1)
            lo, hi = ci(fn(xb[ok], yb[ok])) if ok.any() else (math.nan, math.nan)
        out.append(MetaRow(level, metric, "all", "all", name, val, lo, hi, S))
    return out
