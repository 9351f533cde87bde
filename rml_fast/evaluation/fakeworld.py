"""FakeWorld: two-axis evaluation of fake-media detectors (media authenticity x content veracity).

An instance carries media of several modalities (text, audio, image, video), a per-modality
authenticity label (0 = real, 1 = synthetic), a content label in
``("veracious", "cross_modal_inconsistent", "factual_error")`` and a reference rationale. A
detector is any callable ``instance -> Prediction`` (or a raw JSON string, parsed leniently; what
does not parse counts as wrong and is reported as the parse-failure rate). The joint label is

    fake = (exists j: y^med_j = synthetic) or (y^con != veracious),

and the quadrant is ``q = 2 * synthetic + (content != veracious)`` (0 real & veracious, 1 real &
false content, 2 synthetic & veracious, 3 synthetic & false content = "mixed source").

Only the two axes, the modalities, the scenarios (web / streaming) and per-instance rationales
come from the paper (FakeWorld 1.0, ICML 2026; only its abstract was available). The metric set,
the parse-failure rule, the bootstrap (percentile, stratified by quadrant) and FakeWorld-mini
are PROPOSED (spec ``robust_media`` §3).
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rml_fast._validation import Interval, check_rng, check_scalar
from rml_fast.evaluation import _fakeworld_metrics as fm
from rml_fast.evaluation._fakeworld_data import make_instances
from rml_fast.evaluation._fakeworld_detectors import (
    ConstantDetector,
    DigitCaptionChecker,
    OmniChecker,
    OracleDetector,
    PixelStatsDetector,
)
from rml_fast.evaluation._fakeworld_journal import (
    from_record,
    json_default,
    open_journal,
    to_record,
)
from rml_fast.evaluation._fakeworld_types import (
    CONTENT_CLASSES,
    MODALITIES,
    SCENARIOS,
    Instance,
    Prediction,
)

__all__ = [
    "CONTENT_CLASSES",
    "MODALITIES",
    "SCENARIOS",
    "ConstantDetector",
    "DigitCaptionChecker",
    "Instance",
    "OmniChecker",
    "OracleDetector",
    "PixelStatsDetector",
    "Prediction",
    "Report",
    "TwoAxisEvaluator",
    "axis_metrics",
    "make_fakeworld_mini",
    "parse_prediction",
]


def make_fakeworld_mini(
    n: int = 2000,
    random_state: Any = 0,
    *,
    p_synthetic: float = 0.5,
    p_streaming: float = 0.5,
    n_frames: int = 4,
) -> list[Instance]:
    """Build FakeWorld-mini, the offline example set (PROPOSED, spec §3.7).

    Real images are scikit-learn digits (8x8, values in [0, 1]); synthetic ones come from three
    class-preserving manipulations (PCA resynthesis, same-class blend, 3x3 patch splice).
    ``web`` instances have a caption and an image; ``streaming`` ones add a video of shape
    (n_frames, 8, 8). Content: ``veracious`` / ``factual_error`` (the caption names another
    digit) / ``cross_modal_inconsistent`` (streaming: the video switches to another digit).

    Parameters
    ----------
    n : int, default=2000
        Number of instances.
    random_state : int, numpy Generator or None, default=0
        Seed; the set is a deterministic function of it.
    p_synthetic : float in [0, 1], default=0.5
        Probability that each visual modality is synthetic.
    p_streaming : float in [0, 1], default=0.5
        Probability of the ``streaming`` scenario.
    n_frames : int >= 2, default=4
        Video length.

    Returns
    -------
    instances : list of Instance

    Examples
    --------
    >>> data = make_fakeworld_mini(6, random_state=0)
    >>> data[0].media["image"].shape, data[0].media["text"]
    ((8, 8), 'this is a 2')
    >>> sorted({inst.scenario for inst in data})
    ['streaming', 'web']
    """
    n = check_scalar(n, "n", Interval("int", 1, None))
    p_synthetic = check_scalar(p_synthetic, "p_synthetic", Interval("real", 0, 1))
    p_streaming = check_scalar(p_streaming, "p_streaming", Interval("real", 0, 1))
    n_frames = check_scalar(n_frames, "n_frames", Interval("int", 2, None))
    rng = check_rng(random_state, "random_state")
    return [Instance(**f) for f in make_instances(n, rng, p_synthetic, p_streaming, n_frames)]


_AXIS_METRICS = ("accuracy", "balanced_accuracy", "macro_f1", "auroc")


def axis_metrics(
    y_true: Any,
    y_pred: Any,
    scores: Any = None,
    *,
    metrics: Sequence[str] = _AXIS_METRICS,
    n_bootstrap: int = 1000,
    strata: Any = None,
    confidence: float = 0.95,
    random_state: Any = 0,
) -> dict[str, tuple[float, float, float]]:
    """Array-level metrics of one axis with stratified percentile bootstrap intervals.

    The kernel behind :class:`TwoAxisEvaluator`, for predictions that are already arrays.
    ``accuracy``, ``balanced_accuracy`` (mean recall over classes present in ``y_true``) and
    ``macro_f1`` (mean F1 over classes present in ``y_true`` or ``y_pred``) follow
    scikit-learn; a prediction equal to ``n_classes = y_true.max() + 1`` or more is a parse
    failure (never right, not a class). ``auroc`` (binary ``y_true`` only, needs ``scores``)
    is the Mann-Whitney statistic with ties counted 1/2. Each bootstrap replicate resamples
    the instances with replacement within each stratum; all metrics share the replicates.

    Parameters
    ----------
    y_true : array-like of int, shape (n,)
        Class codes 0..K-1.
    y_pred : array-like of int, shape (n,)
        Predicted codes; values >= K count as failures.
    scores : array-like of float, shape (n,), optional
        Scores of class 1 (for ``auroc``).
    metrics : sequence of str, default=("accuracy", "balanced_accuracy", "macro_f1", "auroc")
        ``auroc`` is skipped when ``scores`` is None.
    n_bootstrap : int >= 0, default=1000
    strata : array-like of int, shape (n,), optional
        Resampling strata (default: one stratum).
    confidence : float in (0, 1), default=0.95
    random_state : int, Generator or None, default=0

    Returns
    -------
    result : dict of str to (point, low, high)
        NaN bounds when ``n_bootstrap`` is 0.

    Examples
    --------
    >>> out = axis_metrics([0, 0, 1, 1, 2, 2], [0, 1, 1, 1, 2, 0], n_bootstrap=200)
    >>> round(out["accuracy"][0], 3), round(out["macro_f1"][0], 3)
    (0.667, 0.656)
    >>> out["accuracy"][1] <= out["accuracy"][0] <= out["accuracy"][2]
    True
    """
    from rml_fast._validation import check_array

    yt = check_array(y_true, "y_true", dtypes=(np.int64,), ndim=1)
    yp = check_array(y_pred, "y_pred", dtypes=(np.int64,), ndim=1)
    if yt.shape != yp.shape:
        raise ValueError(f"y_pred must have the shape of y_true {yt.shape}, got {yp.shape}")
    if yt.size == 0 or yt.min() < 0 or yp.min() < 0:
        raise ValueError("y_true and y_pred must be non-empty non-negative class codes")
    k = int(yt.max()) + 1
    yp = np.minimum(yp, k)
    bad = [m for m in metrics if m not in _AXIS_METRICS]
    if bad:
        raise ValueError(f"metrics must be among {_AXIS_METRICS}, got {bad}")
    s = None
    if scores is not None:
        s = check_array(scores, "scores", ndim=1)
        if s.shape != yt.shape:
            raise ValueError(f"scores must have the shape of y_true {yt.shape}, got {s.shape}")
        if k > 2:
            raise ValueError("auroc needs a binary y_true (codes 0/1)")
    st = np.zeros(yt.size, np.int64) if strata is None else check_array(
        strata, "strata", dtypes=(np.int64,), ndim=1)
    if st.shape != yt.shape:
        raise ValueError(f"strata must have the shape of y_true {yt.shape}, got {st.shape}")
    n_bootstrap = check_scalar(n_bootstrap, "n_bootstrap", Interval("int", 0, None))
    confidence = check_scalar(confidence, "confidence", Interval("real", 0, 1, "neither"))
    rng = check_rng(random_state, "random_state")
    names = [m for m in metrics if m != "auroc" or s is not None]

    def stats(idx: np.ndarray) -> dict[str, np.ndarray]:
        out = {}
        if any(m != "auroc" for m in names):
            out = fm.from_confusion(fm.confusion_counts(yt, yp, k, idx))
        if s is not None and "auroc" in names:
            out["auroc"] = fm.auroc_rows(yt, s, idx)
        return out

    point = stats(np.arange(yt.size, dtype=np.int64)[None, :])
    reps: dict[str, list[np.ndarray]] = {m: [] for m in names}
    for idx in fm.resample_chunks(st, n_bootstrap, rng) if n_bootstrap else ():
        r = stats(idx)
        for m in names:
            reps[m].append(r[m])
    alpha = 100 * (1 - confidence) / 2
    result = {}
    for m in names:
        rs = np.concatenate(reps[m]) if reps[m] else np.array([])
        rs = rs[~np.isnan(rs)]
        lo, hi = ((float(np.percentile(rs, alpha)), float(np.percentile(rs, 100 - alpha)))
                  if rs.size else (math.nan, math.nan))
        result[m] = (float(point[m][0]), lo, hi)
    return result


_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.S)


def parse_prediction(text: str) -> Prediction | None:
    """Parse a raw model output into a :class:`Prediction`, or None if it does not parse.

    Accepts a JSON object with the fields of :class:`Prediction`, bare or inside a ```json
    fence, or the first ``{...}`` block of the text; ``media`` values may be numbers, booleans
    or the words "real"/"synthetic". Anything else (no JSON, wrong types, unknown labels)
    returns None, which the evaluator counts as a parse failure (wrong on every axis).

    Parameters
    ----------
    text : str
        The raw output.

    Returns
    -------
    prediction : Prediction or None

    Examples
    --------
    >>> parse_prediction('```json {"media": {"image": "synthetic"}, "content": "veracious"} ```')
    Prediction(media={'image': 1.0}, content='veracious', fake=None, rationale='', evidence=())
    >>> parse_prediction("I think it is fake") is None
    True
    """
    if not isinstance(text, str):
        return None
    m = _FENCE.search(text)
    blob = m.group(1) if m else text
    if not blob.strip().startswith("{"):
        s, e = blob.find("{"), blob.rfind("}")
        if s < 0 or e < s:
            return None
        blob = blob[s : e + 1]
    try:
        obj = json.loads(blob)
        media = {k: {"real": 0.0, "synthetic": 1.0}.get(v, v) if isinstance(v, str) else v
                 for k, v in dict(obj.get("media", {})).items()}
        pred = Prediction(media=media, content=obj.get("content"), fake=obj.get("fake"),
                          rationale=obj.get("rationale", ""), evidence=obj.get("evidence", ()))
        pred.check()
    except (ValueError, TypeError, AttributeError):
        return None
    return pred


@dataclass(frozen=True)
class Report:
    """Result of :meth:`TwoAxisEvaluator.score`.

    Attributes
    ----------
    metrics : dict of str to float
        Point estimates, keys ``"<axis>/<metric>"`` (axes ``authenticity``, ``content``,
        ``joint``, ``rationale``, ``evidence``) and ``"parse_failure_rate"``.
    ci : dict of str to (float, float)
        Percentile bootstrap interval of each metric that has one.
    confusion : dict of str to ndarray
        ``"authenticity"`` (2, 2); ``"content"`` (K, K + 1), last column = parse failures;
        ``"quadrant"`` (4, 4); rows are true, columns predicted (sklearn's orientation).
    breakdown : dict
        ``{"scenario": {name: {metric: value}}, "modality": {name: {metric: value}}}``.
    per_instance : dict of str to ndarray
        ``id``, ``quadrant``, ``media_correct``, ``content_correct``, ``parse_failure`` and the
        rationale scores, one entry per instance.
    """

    metrics: dict[str, float]
    ci: dict[str, tuple[float, float]]
    confusion: dict[str, np.ndarray]
    breakdown: dict[str, dict[str, dict[str, float]]]
    per_instance: dict[str, np.ndarray] = field(repr=False)

    def table(self) -> str:
        """The metrics with their intervals as aligned plain text, one per line.

        Returns
        -------
        text : str

        Examples
        --------
        >>> data = make_fakeworld_mini(20, random_state=0)
        >>> rep = TwoAxisEvaluator(n_bootstrap=50).evaluate(OracleDetector(), data)
        >>> print(rep.table().splitlines()[0])
        authenticity/accuracy         1.000  [1.000, 1.000]
        """
        lines = []
        for k, v in self.metrics.items():
            lo, hi = self.ci.get(k, (math.nan, math.nan))
            ci = f"  [{lo:.3f}, {hi:.3f}]" if not math.isnan(lo) else ""
            lines.append(f"{k:<32}{v:>7.3f}{ci}")
        return "\n".join(lines)


Detector = Callable[[Instance], "Prediction | str | None"]


class TwoAxisEvaluator:
    """Run detectors over instances and score both axes, jointly, with bootstrap intervals.

    Metrics (PROPOSED set, spec §3.1): per axis accuracy, balanced accuracy, macro-F1, AUROC and
    average precision when every prediction of the axis is a score (not a bool), expected
    calibration error and Brier score for the authenticity scores; joint exact match (every
    modality and the content class right), quadrant accuracy and 4x4 confusion, fake/real F1
    and accuracy; rationale ROUGE-L F and token F1 against the gold rationale and an optional
    judge; evidence modality hit rate and box / temporal IoU; breakdowns per scenario and per
    modality. Intervals: percentile bootstrap, resampling instances within quadrants
    (``stratify=True``), ``n_bootstrap`` replicates.

    The authenticity axis is scored per instance (synthetic = any modality synthetic; a score
    is the max over modalities) and per modality in the breakdown. An axis the detector never
    predicts (all ``media`` empty, or all ``content`` None) is left out; a partly missing one
    counts the missing entries wrong.

    Parameters
    ----------
    content_classes : sequence of str, default=CONTENT_CLASSES
        Content labels; the first is the veracious one.
    rationale_metrics : sequence of {"rougeL", "token_f1"}, default=("rougeL", "token_f1")
    judge : callable or None, default=None
        ``judge(instance, prediction) -> float in [0, 1]``, averaged as ``rationale/judge``.
    n_bootstrap : int >= 0, default=1000
        Bootstrap replicates; 0 skips the intervals.
    confidence : float in (0, 1), default=0.95
    stratify : bool, default=True
        Resample within true quadrants (else over all instances).
    threshold : float in [0, 1], default=0.5
        Scores above it are "synthetic" / "fake".
    ece_bins : int >= 1, default=15
    on_invalid : {"raise", "count"}, default="raise"
        A Prediction with an unknown modality, a label outside ``content_classes`` or a score
        outside [0, 1]: raise a ValueError naming the instance, or count it as a parse failure
        (the spec's rule for unparseable MLLM outputs). None or an unparseable string is always
        counted.
    random_state : int, Generator or None, default=0
        Seed of the bootstrap.

    Examples
    --------
    >>> data = make_fakeworld_mini(40, random_state=1)
    >>> ev = TwoAxisEvaluator(n_bootstrap=100)
    >>> rep = ev.evaluate(ConstantDetector(), data)
    >>> rep.metrics["authenticity/balanced_accuracy"], rep.metrics["content/balanced_accuracy"]
    (0.5, 0.3333333333333333)
    >>> ev.evaluate(OracleDetector(), data).metrics["joint/exact_match"]
    1.0
    """

    def __init__(
        self,
        content_classes: Sequence[str] = CONTENT_CLASSES,
        rationale_metrics: Sequence[str] = ("rougeL", "token_f1"),
        judge: Callable[[Instance, Prediction], float] | None = None,
        n_bootstrap: int = 1000,
        random_state: Any = 0,
        *,
        confidence: float = 0.95,
        stratify: bool = True,
        threshold: float = 0.5,
        ece_bins: int = 15,
        on_invalid: str = "raise",
    ) -> None:
        classes = tuple(content_classes)
        if len(classes) < 2 or len(set(classes)) != len(classes) or not all(
                isinstance(c, str) for c in classes):
            raise ValueError(f"content_classes must be >= 2 distinct strings, got {classes!r}")
        bad = [m for m in rationale_metrics if m not in ("rougeL", "token_f1")]
        if bad:
            raise ValueError(f"rationale_metrics must be among ('rougeL', 'token_f1'), got {bad}")
        if judge is not None and not callable(judge):
            raise TypeError(f"judge must be callable or None, got {type(judge).__name__}")
        if on_invalid not in ("raise", "count"):
            raise ValueError(f"on_invalid must be 'raise' or 'count', got {on_invalid!r}")
        self.content_classes = classes
        self.rationale_metrics = tuple(rationale_metrics)
        self.judge = judge
        self.n_bootstrap = check_scalar(n_bootstrap, "n_bootstrap", Interval("int", 0, None))
        self.confidence = check_scalar(confidence, "confidence", Interval("real", 0, 1, "neither"))
        self.stratify = bool(stratify)
        self.threshold = check_scalar(threshold, "threshold", Interval("real", 0, 1))
        self.ece_bins = check_scalar(ece_bins, "ece_bins", Interval("int", 1, None))
        self.on_invalid = on_invalid
        check_rng(random_state, "random_state")
        self.random_state = random_state

    # ------------------------------------------------------------------ running detectors

    def evaluate(
        self,
        detector: Any,
        instances: Sequence[Instance],
        *,
        batch_size: int = 32,
        n_jobs: int = 1,
        progress: bool = False,
        journal: str | os.PathLike[str] | None = None,
        resume: bool = True,
    ) -> Report:
        """Call ``detector`` on every instance and :meth:`score` the predictions.

        Parameters
        ----------
        detector : callable or object with ``predict_batch``
            ``detector(instance)`` returns a :class:`Prediction`, a dict of its fields, a raw
            string (see :func:`parse_prediction`) or None; an object with
            ``predict_batch(list_of_instances) -> list`` is called once per batch instead.
        instances : sequence of Instance
        batch_size : int >= 1, default=32
            Instances per call of ``predict_batch`` and per journal flush.
        n_jobs : int >= 1, default=1
            Threads calling a per-instance detector concurrently within a batch (for detectors
            that wait on an API); the predictions keep the instance order, so the report does
            not depend on it.
        progress : bool, default=False
            Show a tqdm bar.
        journal : path or None, default=None
            JSON-lines file; each finished batch is appended, so an interrupted run resumes
            where it stopped with the same result. Its header stores the instance ids; a
            journal of other instances is refused (ValueError).
        resume : bool, default=True
            Reuse the journal's predictions; False starts it afresh.

        Returns
        -------
        report : Report

        Examples
        --------
        >>> data = make_fakeworld_mini(10, random_state=0)
        >>> TwoAxisEvaluator(n_bootstrap=0).evaluate(OracleDetector(), data).metrics[
        ...     "rationale/rougeL"]
        1.0
        """
        instances = _check_instances(instances)
        batch_size = check_scalar(batch_size, "batch_size", Interval("int", 1, None))
        n_jobs = check_scalar(n_jobs, "n_jobs", Interval("int", 1, None))
        if not (callable(detector) or hasattr(detector, "predict_batch")):
            raise TypeError(f"detector must be callable, got {type(detector).__name__}")
        ids = [inst.id for inst in instances]
        done: dict[str, Any] = {}
        fh = None
        if journal is not None:
            done, fh = open_journal(journal, ids, resume)
        todo = [inst for inst in instances if inst.id not in done]
        bar = None
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(instances), initial=len(instances) - len(todo), desc="fakeworld")
        try:
            for s in range(0, len(todo), batch_size):
                chunk = todo[s : s + batch_size]
                if hasattr(detector, "predict_batch"):
                    outs = list(detector.predict_batch(chunk))
                    if len(outs) != len(chunk):
                        raise ValueError(f"detector.predict_batch returned {len(outs)} "
                                         f"predictions for {len(chunk)} instances")
                elif n_jobs > 1:
                    from concurrent.futures import ThreadPoolExecutor

                    with ThreadPoolExecutor(n_jobs) as pool:
                        outs = list(pool.map(detector, chunk))
                else:
                    outs = [detector(inst) for inst in chunk]
                outs = [to_record(o) for o in outs]
                for inst, o in zip(chunk, outs, strict=True):
                    done[inst.id] = o
                if fh is not None:
                    for inst, o in zip(chunk, outs, strict=True):
                        fh.write(json.dumps({"id": inst.id, "out": o}, default=json_default) + "\n")
                    fh.flush()
                if bar is not None:
                    bar.update(len(chunk))
        finally:
            if fh is not None:
                fh.close()
            if bar is not None:
                bar.close()
        return self.score(instances, [from_record(done[i]) for i in ids])

    # ------------------------------------------------------------------ metrics

    def score(self, instances: Sequence[Instance], predictions: Sequence[Any]) -> Report:
        """Score predictions against instances (pure metrics, no detector calls).

        Parameters
        ----------
        instances : sequence of Instance, length n
        predictions : sequence of length n
            A :class:`Prediction`, dict, raw string or None per instance, same order.

        Returns
        -------
        report : Report

        Examples
        --------
        >>> data = make_fakeworld_mini(30, random_state=0)
        >>> preds = [Prediction(media={m: 0.0 for m in d.media_labels}, content="veracious")
        ...          for d in data]
        >>> rep = TwoAxisEvaluator(n_bootstrap=0).score(data, preds)
        >>> int(rep.confusion["quadrant"].sum()), rep.metrics["parse_failure_rate"]
        (30, 0.0)
        """
        from rml_fast.evaluation._fakeworld_score import score_arrays

        instances = _check_instances(instances)
        if len(predictions) != len(instances):
            raise ValueError(f"predictions has length {len(predictions)} but instances has "
                             f"length {len(instances)}; give one prediction per instance")
        pairs = zip(instances, predictions, strict=True)
        preds = [self._normalise(inst, p) for inst, p in pairs]
        return score_arrays(self, instances, preds)

    def _normalise(self, inst: Instance, p: Any) -> Prediction | None:
        if isinstance(p, str):
            p = parse_prediction(p)
        elif isinstance(p, dict):
            try:
                p = Prediction(**p)
            except TypeError as exc:
                if self.on_invalid == "raise":
                    raise ValueError(f"detector output for instance {inst.id!r}: {exc}") from exc
                return None
        if p is None:
            return None
        if not isinstance(p, Prediction):
            raise TypeError(f"detector output for instance {inst.id!r} must be a Prediction, "
                            f"dict, str or None, got {type(p).__name__}")
        try:
            p.check(self.content_classes, inst)
        except (ValueError, TypeError) as exc:
            if self.on_invalid == "raise":
                raise ValueError(f"detector returned an invalid prediction for instance "
                                 f"{inst.id!r}: {exc}") from exc
            return None
        return p


# ---------------------------------------------------------------------- helpers


def _check_instances(instances: Sequence[Instance]) -> list[Instance]:
    if isinstance(instances, (str, bytes)) or not isinstance(instances, Sequence):
        raise TypeError(f"instances must be a sequence of Instance, got {type(instances).__name__}")
    if len(instances) == 0:
        raise ValueError("instances must not be empty")
    for i, inst in enumerate(instances):
        if not isinstance(inst, Instance):
            raise TypeError(f"instances[{i}] must be an Instance, got {type(inst).__name__}")
    ids = [inst.id for inst in instances]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise ValueError(f"instances must have unique ids; {dup!r} appears more than once")
    return list(instances)
