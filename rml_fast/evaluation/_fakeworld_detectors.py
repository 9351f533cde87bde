"""Reference detectors for the FakeWorld harness and the OmniChecker orchestrator.

* :class:`ConstantDetector` — the trivial baseline ("everything is real and veracious");
* :class:`OracleDetector` — returns the gold labels, rationale and evidence (scores 1.0);
* :class:`PixelStatsDetector` — authenticity: logistic regression on log-FFT-magnitude
  features of each 2-D frame (spec §3.7 baseline);
* :class:`DigitCaptionChecker` — veracity: a digit classifier on the image (and video frames)
  compared with the caption's digit (spec §3.7 baseline);
* :class:`OmniChecker` — PROPOSED agent: per-modality authenticity tools, a cross-modal
  consistency tool and a fact-check tool, aggregated into one evidence-backed prediction.
"""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Callable
from typing import Any

import numpy as np

from rml_fast.evaluation._fakeworld_types import CONTENT_CLASSES, Instance, Prediction

_DIGIT = re.compile(r"\b(\d)\b")


class ConstantDetector:
    """Predict the same media score and content label for every instance.

    Parameters
    ----------
    media : float or bool, default=0.0
        P(synthetic) given to every labelled modality (0.0 = "real").
    content : str or None, default="veracious"
    rationale : str, default=""

    Examples
    --------
    >>> from rml_fast.evaluation.fakeworld import make_fakeworld_mini
    >>> ConstantDetector()(make_fakeworld_mini(1)[0]).content
    'veracious'
    """

    def __init__(self, media: float | bool = 0.0, content: str | None = "veracious",
                 rationale: str = "") -> None:
        self.media = media
        self.content = content
        self.rationale = rationale

    def __call__(self, inst: Instance) -> Prediction:
        """Return the constant prediction for ``inst``'s labelled modalities.

        Parameters
        ----------
        inst : Instance

        Returns
        -------
        prediction : Prediction

        Examples
        --------
        >>> from rml_fast.evaluation.fakeworld import make_fakeworld_mini
        >>> ConstantDetector(media=1.0)(make_fakeworld_mini(1, p_streaming=0.0)[0]).media
        {'image': 1.0}
        """
        return Prediction({m: self.media for m in inst.media_labels}, self.content,
                          rationale=self.rationale)


class OracleDetector:
    """Return the gold labels (as 0/1 scores), the gold rationale and the gold evidence.

    Examples
    --------
    >>> from rml_fast.evaluation.fakeworld import make_fakeworld_mini
    >>> inst = make_fakeworld_mini(1)[0]
    >>> OracleDetector()(inst).content == inst.content_label
    True
    """

    def __call__(self, inst: Instance) -> Prediction:
        """The gold :class:`Prediction` of ``inst``.

        Parameters
        ----------
        inst : Instance

        Returns
        -------
        prediction : Prediction

        Examples
        --------
        >>> from rml_fast.evaluation.fakeworld import make_fakeworld_mini
        >>> OracleDetector()(make_fakeworld_mini(1)[0]).media
        {'image': 1.0, 'video': 0.0}
        """
        return Prediction({m: float(y) for m, y in inst.media_labels.items()},
                          inst.content_label, rationale=inst.rationale, evidence=inst.evidence)


def _frames(inst: Instance, m: str, shape: tuple[int, ...] | None) -> np.ndarray:
    arr = np.asarray(inst.media[m], dtype=np.float64)
    frames = arr[None] if m == "image" else arr
    if frames.ndim != 3 or (shape is not None and frames.shape[1:] != shape):
        want = f"{shape}" if shape is not None else "(H, W)"
        raise ValueError(f"Instance {inst.id!r}: media[{m!r}] has shape {arr.shape}; this "
                         f"detector needs grey-scale frames of shape {want}")
    return frames


def _fft_features(frames: np.ndarray) -> np.ndarray:
    return np.log1p(np.abs(np.fft.rfft2(frames))).reshape(frames.shape[0], -1)


class PixelStatsDetector:
    """Authenticity baseline: logistic regression on log |FFT| features of each frame.

    A frame x of shape (H, W) is mapped to log(1 + |rfft2(x)|) (H * (W // 2 + 1) features,
    standardised); P(synthetic) of an image is the classifier's probability, of a video the
    mean over its frames. Only visual modalities (image, video) are judged.

    Parameters
    ----------
    C : float, default=1.0
        Inverse L2 strength of the logistic regression.

    Attributes
    ----------
    frame_shape_ : tuple of int
        The (H, W) seen in :meth:`fit`; other shapes raise.

    Examples
    --------
    >>> from rml_fast.evaluation.fakeworld import make_fakeworld_mini
    >>> det = PixelStatsDetector().fit(make_fakeworld_mini(300, random_state=1))
    >>> 0.0 <= det(make_fakeworld_mini(1)[0]).media["image"] <= 1.0
    True
    """

    def __init__(self, C: float = 1.0) -> None:
        self.C = C

    def fit(self, instances: list[Instance]) -> PixelStatsDetector:
        """Fit on the image / video frames of labelled instances (a video frame gets its
        video's label).

        Parameters
        ----------
        instances : list of Instance

        Returns
        -------
        self

        Examples
        --------
        >>> from rml_fast.evaluation.fakeworld import make_fakeworld_mini
        >>> PixelStatsDetector().fit(make_fakeworld_mini(100)).frame_shape_
        (8, 8)
        """
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler

        xs, ys, shape = [], [], None
        for inst in instances:
            for m, y in inst.media_labels.items():
                if m in ("image", "video"):
                    fr = _frames(inst, m, shape)
                    shape = fr.shape[1:]
                    xs.append(_fft_features(fr))
                    ys.extend([y] * fr.shape[0])
        if len(set(ys)) < 2:
            raise ValueError("instances must contain both real and synthetic image/video media")
        self.frame_shape_ = shape
        self.model_ = make_pipeline(StandardScaler(), LogisticRegression(C=self.C, max_iter=2000))
        self.model_.fit(np.concatenate(xs), np.array(ys))
        return self

    def score_payload(self, modality: str, payload: Any) -> tuple[float, str]:
        """P(synthetic) of one image (H, W) or video (T, H, W) and a one-line note.

        Parameters
        ----------
        modality : {"image", "video"}
        payload : ndarray

        Returns
        -------
        score : float
        note : str

        Examples
        --------
        >>> from rml_fast.evaluation.fakeworld import make_fakeworld_mini
        >>> det = PixelStatsDetector().fit(make_fakeworld_mini(100))
        >>> det.score_payload("image", np.zeros((3, 3)))
        Traceback (most recent call last):
        ...
        ValueError: Instance 'payload': media['image'] has shape (3, 3); this detector needs grey-scale frames of shape (8, 8)
        """
        return self._score(Instance("payload", "web", {modality: payload}, {}, ""), modality)

    def _score(self, inst: Instance, modality: str) -> tuple[float, str]:
        if not hasattr(self, "model_"):
            raise RuntimeError("PixelStatsDetector is not fitted; call fit(instances) first")
        fr = _frames(inst, modality, self.frame_shape_)
        p = float(self.model_.predict_proba(_fft_features(fr))[:, 1].mean())
        word = "synthetic" if p > 0.5 else "authentic"
        return p, f"the {modality} looks {word} (spectral statistics, P(synthetic)={p:.2f})"

    def __call__(self, inst: Instance) -> Prediction:
        """Authenticity-only prediction for ``inst`` (content None).

        Parameters
        ----------
        inst : Instance

        Returns
        -------
        prediction : Prediction

        Examples
        --------
        >>> from rml_fast.evaluation.fakeworld import make_fakeworld_mini
        >>> det = PixelStatsDetector().fit(make_fakeworld_mini(100))
        >>> det(make_fakeworld_mini(1)[0]).content is None
        True
        """
        media, notes = {}, []
        for m in inst.media_labels:
            if m in ("image", "video"):
                media[m], note = self._score(inst, m)
                notes.append(note)
        ev = tuple({"modality": m} for m, s in media.items() if s > 0.5)
        return Prediction(media, None, rationale="; ".join(notes), evidence=ev)


class DigitCaptionChecker:
    """Veracity baseline: classify the digit in the image (and each video frame) and compare
    it with the digit named in the caption.

    With P_img the image's class probabilities, d = argmax P_img, k the caption's digit and
    P_t those of video frame t, c = the second smallest P_t[d] over frames (at least two
    frames must disagree; 1 without a video); the content scores are
    cross_modal_inconsistent = 1 - c, factual_error = c (1 - P_img[k]), veracious = c P_img[k].

    Parameters
    ----------
    C : float, default=1.0
        Inverse L2 strength of the logistic regression.

    Examples
    --------
    >>> from rml_fast.evaluation.fakeworld import make_fakeworld_mini
    >>> chk = DigitCaptionChecker().fit(make_fakeworld_mini(300, random_state=1))
    >>> sorted(chk(make_fakeworld_mini(1)[0]).content)
    ['cross_modal_inconsistent', 'factual_error', 'veracious']
    """

    def __init__(self, C: float = 1.0) -> None:
        self.C = C

    @staticmethod
    def _caption_digit(inst: Instance) -> int:
        m = _DIGIT.search(str(inst.media.get("text", "")))
        if m is None:
            raise ValueError(f"Instance {inst.id!r}: media['text'] must name a digit 0-9, got "
                             f"{inst.media.get('text')!r}")
        return int(m.group(1))

    def fit(self, instances: list[Instance]) -> DigitCaptionChecker:
        """Fit the digit classifier on the images and video frames of ``veracious`` instances
        (the caption's digit is the label).

        Parameters
        ----------
        instances : list of Instance

        Returns
        -------
        self

        Examples
        --------
        >>> from rml_fast.evaluation.fakeworld import make_fakeworld_mini
        >>> DigitCaptionChecker().fit(make_fakeworld_mini(200)).frame_shape_
        (8, 8)
        """
        from sklearn.linear_model import LogisticRegression

        xs, ys, shape = [], [], None
        for inst in instances:
            if inst.content_label != "veracious":
                continue
            for m in ("image", "video"):
                if m in inst.media:
                    fr = _frames(inst, m, shape)
                    shape = fr.shape[1:]
                    xs.append(fr.reshape(fr.shape[0], -1))
                    ys.extend([self._caption_digit(inst)] * fr.shape[0])
        if len(set(ys)) < 10:
            raise ValueError("instances must contain veracious captioned images of all 10 digits")
        self.frame_shape_ = shape
        self.model_ = LogisticRegression(C=self.C, max_iter=2000).fit(np.concatenate(xs), ys)
        return self

    def _probs(self, inst: Instance) -> tuple[np.ndarray, np.ndarray | None, int]:
        if not hasattr(self, "model_"):
            raise RuntimeError("DigitCaptionChecker is not fitted; call fit(instances) first")
        k = self._caption_digit(inst)
        p_img = self.model_.predict_proba(_frames(inst, "image", self.frame_shape_)
                                          .reshape(1, -1))[0]
        p_vid = None
        if "video" in inst.media:
            fr = _frames(inst, "video", self.frame_shape_)
            p_vid = self.model_.predict_proba(fr.reshape(fr.shape[0], -1))
        return p_img, p_vid, k

    def consistency(self, inst: Instance) -> tuple[float, str, list[dict[str, Any]]]:
        """P(cross-modal inconsistency) = 1 - c, a note and evidence (the worst video frames).

        Parameters
        ----------
        inst : Instance

        Returns
        -------
        score : float
        note : str
        evidence : list of dict

        Examples
        --------
        >>> from rml_fast.evaluation.fakeworld import make_fakeworld_mini
        >>> chk = DigitCaptionChecker().fit(make_fakeworld_mini(200))
        >>> chk.consistency(make_fakeworld_mini(1, p_streaming=0.0)[0])[0]  # no video
        0.0
        """
        p_img, p_vid, _ = self._probs(inst)
        if p_vid is None:
            return 0.0, "no second visual modality to cross-check", []
        agree = p_vid[:, int(p_img.argmax())]
        s = float(1.0 - np.sort(agree)[min(1, agree.size - 1)])
        bad = np.flatnonzero(agree < 0.5)
        ev = [{"modality": "video", "segment": (int(bad[0]), int(agree.size))}] if bad.size else []
        d_img, d_vid = int(p_img.argmax()), int(p_vid[agree.argmin()].argmax())
        note = (f"the video shows a {d_vid} while the image shows a {d_img}" if s > 0.5
                else f"image and video both show a {d_img}")
        return s, note, ev

    def factcheck(self, inst: Instance) -> tuple[float, str, list[dict[str, Any]]]:
        """P(factual error) = 1 - P_img[k] for the caption's digit k, a note and evidence.

        Parameters
        ----------
        inst : Instance

        Returns
        -------
        score : float
        note : str
        evidence : list of dict

        Examples
        --------
        >>> from rml_fast.evaluation.fakeworld import make_fakeworld_mini
        >>> chk = DigitCaptionChecker().fit(make_fakeworld_mini(200))
        >>> 0.0 <= chk.factcheck(make_fakeworld_mini(1)[0])[0] <= 1.0
        True
        """
        p_img, _, k = self._probs(inst)
        s = float(1.0 - p_img[k])
        d = int(p_img.argmax())
        if s > 0.5:
            return s, f"the caption claims a {k} but the image shows a {d}", [{"modality": "text"}]
        return s, f"the caption correctly says {k}", []

    def __call__(self, inst: Instance) -> Prediction:
        """Content-only prediction (media empty) with the scores of the class docstring.

        Parameters
        ----------
        inst : Instance

        Returns
        -------
        prediction : Prediction

        Examples
        --------
        >>> from rml_fast.evaluation.fakeworld import make_fakeworld_mini
        >>> chk = DigitCaptionChecker().fit(make_fakeworld_mini(200))
        >>> chk(make_fakeworld_mini(1)[0]).media
        {}
        """
        sc, note_c, ev_c = self.consistency(inst)
        sf, note_f, ev_f = self.factcheck(inst)
        c = 1.0 - sc
        content = {CONTENT_CLASSES[0]: c * (1 - sf), CONTENT_CLASSES[1]: sc,
                   CONTENT_CLASSES[2]: c * sf}
        notes = [note_f] + ([note_c] if "video" in inst.media else [])
        return Prediction({}, content, rationale="; ".join(notes), evidence=tuple(ev_c + ev_f))


def _tool_out(out: Any, name: str) -> tuple[float, str, list[dict[str, Any]]]:
    if isinstance(out, tuple):
        score, note, ev = ((*tuple(out), "", []))[:3]
    else:
        score, note, ev = out, "", []
    if (isinstance(score, (bool, np.bool_)) or not isinstance(score, numbers.Real)
            or not math.isfinite(score) or not 0.0 <= float(score) <= 1.0):
        raise ValueError(f"OmniChecker tool {name!r} must return a score in [0, 1] (optionally "
                         f"with a note and evidence), got {out!r}")
    return float(score), str(note) or f"{name}: score {float(score):.2f}", list(ev)


class OmniChecker:
    """PROPOSED OmniCheck(er) agent: planner -> authenticity tools -> consistency -> fact-check
    -> aggregator -> evidence-backed report (spec §3.1). Every tool is a callable.

    The planner calls the authenticity tool of each labelled modality that has one, then the
    consistency and fact-check tools. Aggregation (``output="label"``, the spec's default rule):
    a modality is synthetic if its score > its threshold; content is cross_modal_inconsistent
    if the consistency score > its threshold, else factual_error if the fact-check score > its
    threshold, else veracious; fake = any tool above its threshold. ``output="scores"``
    (PROPOSED) returns scores instead: content {inconsistent: c, factual: (1 - c) f,
    veracious: (1 - c)(1 - f)} and fake = 1 - prod_t (1 - s_t) (noisy-or). The rationale
    concatenates the tools' notes; evidence is the union of the tools' evidence plus
    ``{"modality": m}`` for each flagged modality.

    Parameters
    ----------
    authenticity : dict of str to callable
        Modality -> ``tool(payload) -> score`` or ``(score, note)`` or
        ``(score, note, evidence)``, score = P(synthetic) in [0, 1].
    consistency, factcheck : callable or None
        ``tool(instance) -> score`` (same return forms), P(inconsistent) / P(factual error).
    thresholds : dict of str to float or None
        Per tool name (a modality, "consistency", "factcheck"); 0.5 where not given.
    output : {"label", "scores"}, default="label"

    Examples
    --------
    >>> from rml_fast.evaluation.fakeworld import make_fakeworld_mini
    >>> agent = OmniChecker({"image": lambda x: float(x.mean() > 0.3)},
    ...                     factcheck=lambda inst: (0.9, "wrong digit"))
    >>> agent(make_fakeworld_mini(1)[0]).content
    'factual_error'
    """

    def __init__(self, authenticity: dict[str, Callable[..., Any]],
                 consistency: Callable[[Instance], Any] | None = None,
                 factcheck: Callable[[Instance], Any] | None = None,
                 thresholds: dict[str, float] | None = None, output: str = "label") -> None:
        if not isinstance(authenticity, dict) or not all(callable(f)
                                                         for f in authenticity.values()):
            raise TypeError("authenticity must be a dict modality -> callable")
        for name, f in (("consistency", consistency), ("factcheck", factcheck)):
            if f is not None and not callable(f):
                raise TypeError(f"{name} must be callable or None, got {type(f).__name__}")
        if output not in ("label", "scores"):
            raise ValueError(f"output must be 'label' or 'scores', got {output!r}")
        self.thresholds = dict(thresholds or {})
        for key, t in self.thresholds.items():
            if not isinstance(t, numbers.Real) or not 0.0 <= t <= 1.0:
                raise ValueError(f"thresholds[{key!r}] must be in [0, 1], got {t!r}")
        self.authenticity = authenticity
        self.consistency = consistency
        self.factcheck = factcheck
        self.output = output

    def __call__(self, inst: Instance) -> Prediction:
        """Run the tools on ``inst`` and aggregate them into one :class:`Prediction`.

        Parameters
        ----------
        inst : Instance

        Returns
        -------
        prediction : Prediction

        Examples
        --------
        >>> from rml_fast.evaluation.fakeworld import make_fakeworld_mini
        >>> p = OmniChecker({"image": lambda x: 0.8}, output="scores")(make_fakeworld_mini(1)[0])
        >>> p.media, p.fake
        ({'image': 0.8}, 0.8)
        """
        media, notes, ev, scores = {}, [], [], []
        flagged = False
        for m in inst.media_labels:
            if m in self.authenticity:
                s, note, e = _tool_out(self.authenticity[m](inst.media[m]), m)
                media[m] = s
                notes.append(note)
                ev.extend(e)
                scores.append(s)
                if s > self.thresholds.get(m, 0.5):
                    flagged = True
                    ev.append({"modality": m})
        c = f = 0.0
        for name, tool in (("consistency", self.consistency), ("factcheck", self.factcheck)):
            if tool is not None:
                s, note, e = _tool_out(tool(inst), name)
                notes.append(note)
                ev.extend(e)
                scores.append(s)
                if name == "consistency":
                    c = s
                else:
                    f = s
        c_flag = c > self.thresholds.get("consistency", 0.5)
        f_flag = f > self.thresholds.get("factcheck", 0.5)
        if self.output == "scores":
            content: Any = {CONTENT_CLASSES[0]: (1 - c) * (1 - f), CONTENT_CLASSES[1]: c,
                            CONTENT_CLASSES[2]: (1 - c) * f}
            fake: Any = float(1.0 - np.prod([1.0 - s for s in scores])) if scores else 0.0
        else:
            content = (CONTENT_CLASSES[1] if c_flag else CONTENT_CLASSES[2] if f_flag
                       else CONTENT_CLASSES[0])
            fake = bool(flagged or c_flag or f_flag)
        if self.consistency is None and self.factcheck is None:
            content = None
        return Prediction(media, content, fake=fake, rationale="; ".join(notes),
                          evidence=tuple(ev))
