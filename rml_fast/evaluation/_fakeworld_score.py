"""Turn (instances, normalised predictions) into a FakeWorld :class:`Report`."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from rml_fast._validation import check_rng
from rml_fast.evaluation import _fakeworld_metrics as fm
from rml_fast.evaluation._fakeworld_types import Instance, Prediction


def _is_score(v: Any) -> bool:
    return not isinstance(v, (bool, np.bool_))


def score_arrays(ev: Any, instances: list[Instance], preds: list[Prediction | None]) -> Any:
    from rml_fast.evaluation.fakeworld import Report

    classes = ev.content_classes
    k = len(classes)
    n = len(instances)
    thr = ev.threshold
    for inst in instances:
        if inst.content_label not in classes:
            raise ValueError(f"Instance {inst.id!r}: content_label {inst.content_label!r} is not "
                             f"one of content_classes {classes}")
    failed = np.array([p is None for p in preds])
    # an axis no prediction addresses is left out, unless every prediction failed (all wrong)
    media_axis = bool(failed.all()) or any(p is not None and p.media for p in preds)
    content_axis = bool(failed.all()) or any(p is not None and p.content is not None
                                             for p in preds)

    # ---------------------------------------------------------------- authenticity
    y_syn = np.array([max(i.media_labels.values(), default=0) for i in instances], np.int64)
    pred_syn = np.zeros(n, np.int64)
    s_syn = np.full(n, np.nan)
    media_ok = np.ones(n, bool)
    media_scores = media_axis
    mod_rows: dict[str, list[tuple[int, int, int, float]]] = {}
    for i, (inst, p) in enumerate(zip(instances, preds, strict=True)):
        missing = False
        hard_any, score_max = 0, -math.inf
        for m, g in inst.media_labels.items():
            v = None if (p is None or not media_axis) else p.media.get(m)
            if v is None:
                missing = True
                h, s = 1 - g, float(1 - g)
            else:
                h = int(v > thr) if _is_score(v) else int(bool(v))
                s = float(v)
                media_scores = media_scores and _is_score(v)
            mod_rows.setdefault(m, []).append((i, g, h, s))
            hard_any, score_max = max(hard_any, h), max(score_max, s)
            media_ok[i] &= h == g
        pred_syn[i] = 1 - y_syn[i] if missing else hard_any
        s_syn[i] = float(1 - y_syn[i]) if missing else score_max
    if not media_axis:
        media_ok[:] = True

    # ---------------------------------------------------------------- content
    yt = np.array([classes.index(i.content_label) for i in instances], np.int64)
    yp = np.full(n, k, np.int64)
    s_false = np.full(n, np.nan)
    content_scores = content_axis
    for i, p in enumerate(preds):
        lab = None if p is None else p.content_label(classes)
        if lab is not None:
            yp[i] = classes.index(lab)
        if p is not None and isinstance(p.content, dict):
            c = p.content
            s_false[i] = 1.0 - c.get(classes[0], 0.0) / sum(c.values())
        elif lab is None:
            s_false[i] = float(yt[i] != 0)  # missing: worst case
        else:
            content_scores = False
    false_true = (yt != 0).astype(np.int64)
    false_pred = np.where(yp < k, (yp != 0), 1 - false_true).astype(np.int64)

    # ---------------------------------------------------------------- joint
    fake_true = np.maximum(y_syn, false_true)
    given = [p is not None and p.fake is not None for p in preds]
    joint_axis = (media_axis and content_axis) or (any(given) and all(
        g or p is None for g, p in zip(given, preds, strict=True)))
    fake_pred = np.maximum(pred_syn, false_pred)
    s_fake = np.maximum(s_syn, s_false)
    fake_scores = joint_axis and media_scores and content_scores
    if any(given):
        fake_scores = joint_axis
        for i, p in enumerate(preds):
            if p is not None and p.fake is not None:
                fake_pred[i] = int(p.fake > thr) if _is_score(p.fake) else int(bool(p.fake))
                s_fake[i] = float(p.fake)
                fake_scores = fake_scores and _is_score(p.fake)
            elif p is not None and not (media_axis and content_axis):
                fake_pred[i] = 1 - fake_true[i]
                s_fake[i] = float(1 - fake_true[i])
    fake_pred[failed] = 1 - fake_true[failed]
    s_fake[failed] = (1 - fake_true[failed]).astype(float)
    q_true = 2 * y_syn + false_true
    q_pred = 2 * pred_syn + false_pred
    exact = (media_ok & (yp == yt)).astype(np.float64)

    # ---------------------------------------------------------------- rationale / evidence
    per: dict[str, np.ndarray] = {}
    for name, fn in (("rougeL", fm.rouge_l), ("token_f1", fm.token_f1)):
        if name in ev.rationale_metrics:
            per[name] = np.array([0.0 if p is None else fn(p.rationale, inst.rationale)
                                  for inst, p in zip(instances, preds, strict=True)])
    if ev.judge is not None:
        vals = []
        for inst, p in zip(instances, preds, strict=True):
            v = 0.0 if p is None else ev.judge(inst, p)
            if isinstance(v, (bool, np.bool_)) or not (0.0 <= float(v) <= 1.0):
                raise ValueError(f"judge must return a score in [0, 1], got {v!r} for "
                                 f"instance {inst.id!r}")
            vals.append(float(v))
        per["judge"] = np.array(vals)
    hit, iou = _evidence(instances, preds)

    # ---------------------------------------------------------------- metric table
    specs: dict[str, tuple] = {}
    if media_axis:
        for key in ("accuracy", "balanced_accuracy", "macro_f1"):
            specs[f"authenticity/{key}"] = ("conf", y_syn, pred_syn, 2, key)
        if media_scores:
            specs["authenticity/auroc"] = ("auroc", y_syn, s_syn)
            conf = np.where(pred_syn == 1, s_syn, 1.0 - s_syn)
            specs["authenticity/ece"] = ("ece", conf, pred_syn == y_syn)
            specs["authenticity/brier"] = ("mean", (s_syn - y_syn) ** 2)
    if content_axis:
        for key in ("accuracy", "balanced_accuracy", "macro_f1"):
            specs[f"content/{key}"] = ("conf", yt, yp, k, key)
        if content_scores:
            specs["content/auroc"] = ("auroc", false_true, s_false)
    if joint_axis:
        if media_axis and content_axis:
            specs["joint/exact_match"] = ("mean", exact)
            specs["joint/quadrant_accuracy"] = ("mean", (q_true == q_pred).astype(float))
        specs["joint/fake_accuracy"] = ("conf", fake_true, fake_pred, 2, "accuracy")
        specs["joint/fake_f1"] = ("conf", fake_true, fake_pred, 2, "f1")
        if fake_scores:
            specs["joint/fake_auroc"] = ("auroc", fake_true, s_fake)
    for name, per_vals in per.items():
        specs[f"rationale/{name}"] = ("mean", per_vals)
    if hit.size:
        specs["evidence/modality_hit"] = ("mean_sub", hit[:, 0].astype(np.int64), hit[:, 1])
    if iou.size:
        specs["evidence/iou"] = ("mean_sub", iou[:, 0].astype(np.int64), iou[:, 1])
    specs["parse_failure_rate"] = ("mean", failed.astype(float))

    full = np.arange(n, dtype=np.int64)[None, :]
    metrics = {name: float(_eval(spec, full, ev.ece_bins, n)[0]) for name, spec in specs.items()}
    if media_axis and media_scores:
        metrics["authenticity/ap"] = fm.average_precision(y_syn, s_syn)
    ci: dict[str, tuple[float, float]] = {}
    if ev.n_bootstrap > 0:
        rng = check_rng(ev.random_state, "random_state")
        strata = q_true if ev.stratify else np.zeros(n, np.int64)
        reps: dict[str, list[np.ndarray]] = {name: [] for name in specs}
        for idx in fm.resample_chunks(strata, ev.n_bootstrap, rng):
            for name, spec in specs.items():
                reps[name].append(_eval(spec, idx, ev.ece_bins, n))
        alpha = 100 * (1 - ev.confidence) / 2
        for name, chunks in reps.items():
            r = np.concatenate(chunks)
            r = r[~np.isnan(r)]
            ci[name] = ((float(np.percentile(r, alpha)), float(np.percentile(r, 100 - alpha)))
                        if r.size else (math.nan, math.nan))

    confusion: dict[str, np.ndarray] = {}
    if media_axis and content_axis:
        confusion["quadrant"] = fm.confusion_counts(q_true, q_pred, 4, full)[0, :, :4] \
            .astype(np.int64)
    if media_axis:
        confusion["authenticity"] = fm.confusion_counts(y_syn, pred_syn, 2, full)[0, :, :2] \
            .astype(np.int64)
    if content_axis:
        confusion["content"] = fm.confusion_counts(yt, yp, k, full)[0].astype(np.int64)
    breakdown = _breakdown(instances, mod_rows, y_syn, pred_syn, yt, yp, k, exact,
                           media_axis, content_axis, media_scores)
    per_instance = {"id": np.array([i.id for i in instances]), "quadrant": q_true,
                    "media_correct": media_ok, "content_correct": yp == yt,
                    "parse_failure": failed, **per}
    return Report(metrics, ci, confusion, breakdown, per_instance)


def _eval(spec: tuple, idx: np.ndarray, bins: int, n: int) -> np.ndarray:
    kind = spec[0]
    if kind == "conf":
        _, yt, yp, k, key = spec
        return fm.from_confusion(fm.confusion_counts(yt, yp, k, idx))[key]
    if kind == "auroc":
        return fm.auroc_rows(spec[1], spec[2], idx)
    if kind == "ece":
        return fm.ece_rows(spec[1], spec[2], bins, idx)
    if kind == "mean":
        return fm.mean_rows(spec[1], idx)
    # mean over the instances listed in spec[1] (with multiplicity in the resample)
    _, who, vals = spec
    w = fm.row_counts(idx, n)[:, who]
    tot = w.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(tot > 0, (w * vals).sum(axis=1) / np.where(tot > 0, tot, 1), np.nan)


def _evidence(instances: list[Instance], preds: list[Any]) -> tuple[np.ndarray, np.ndarray]:
    hit, iou = [], []
    for i, (inst, p) in enumerate(zip(instances, preds, strict=True)):
        if not inst.evidence:
            continue
        pe = () if p is None else p.evidence
        gold_m = {e["modality"] for e in inst.evidence}
        hit.append((i, float(any(e.get("modality") in gold_m for e in pe))))
        vals = []
        for g in inst.evidence:
            for key, fn in (("box", fm.box_iou), ("segment", fm.interval_iou)):
                if key in g:
                    cands = [fn(tuple(g[key]), tuple(e[key])) for e in pe
                             if e.get("modality") == g["modality"] and key in e]
                    vals.append(max(cands, default=0.0))
        if vals:
            iou.append((i, float(np.mean(vals))))
    return np.array(hit).reshape(-1, 2), np.array(iou).reshape(-1, 2)


def _breakdown(instances, mod_rows, y_syn, pred_syn, yt, yp, k, exact, media_axis,
               content_axis, media_scores) -> dict[str, dict[str, dict[str, float]]]:
    out: dict[str, dict[str, dict[str, float]]] = {"scenario": {}, "modality": {}}
    scen = np.array([i.scenario for i in instances])
    for s in sorted(set(scen)):
        sel = np.flatnonzero(scen == s)[None, :]
        row: dict[str, float] = {"n": float(sel.size)}
        if media_axis:
            for key, v in fm.from_confusion(fm.confusion_counts(y_syn, pred_syn, 2, sel)).items():
                if key != "f1":
                    row[f"authenticity/{key}"] = float(v[0])
        if content_axis:
            for key, v in fm.from_confusion(fm.confusion_counts(yt, yp, k, sel)).items():
                row[f"content/{key}"] = float(v[0])
        if media_axis and content_axis:
            row["joint/exact_match"] = float(exact[sel[0]].mean())
        out["scenario"][str(s)] = row
    if media_axis:
        for m, rows in sorted(mod_rows.items()):
            a = np.array(rows, dtype=np.float64)
            g, h, sc = a[:, 1].astype(np.int64), a[:, 2].astype(np.int64), a[:, 3]
            sel = np.arange(len(rows))[None, :]
            st = fm.from_confusion(fm.confusion_counts(g, h, 2, sel))
            row = {"n": float(len(rows)), "accuracy": float(st["accuracy"][0]),
                   "balanced_accuracy": float(st["balanced_accuracy"][0])}
            if media_scores:
                row["auroc"] = float(fm.auroc_rows(g, sc, sel)[0])
            out["modality"][m] = row
    return out
