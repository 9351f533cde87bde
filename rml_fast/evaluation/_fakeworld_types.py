"""Records of the FakeWorld protocol: :class:`Instance` and :class:`Prediction`."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any

import numpy as np

CONTENT_CLASSES = ("veracious", "cross_modal_inconsistent", "factual_error")
MODALITIES = ("text", "audio", "image", "video")
SCENARIOS = ("web", "streaming")
_NDIM = {"audio": (1, 2), "image": (2, 3), "video": (3, 4)}


@dataclass(frozen=True)
class Instance:
    """One evaluation instance (spec §3.1), checked on construction.

    Parameters
    ----------
    id : str
        Unique identifier.
    scenario : {"web", "streaming"}
    media : dict of str to object
        Modality -> payload: ``text`` a str, ``audio`` an array of shape (n,) or (n, channels),
        ``image`` (H, W) or (H, W, C), ``video`` (T, H, W) or (T, H, W, C); arrays finite.
    media_labels : dict of str to int
        Modality -> 0 (real) or 1 (synthetic), for the modalities whose authenticity is judged
        (each must be in ``media``); "real"/"synthetic" are accepted and converted.
    content_label : str
        One of the evaluator's content classes (default ``CONTENT_CLASSES``).
    rationale : str
        Reference rationale.
    evidence : tuple of dict, default=()
        Gold evidence, each ``{"modality": m}`` optionally with ``"box": (r0, c0, r1, c1)``
        or ``"segment": (t0, t1)`` (half-open).

    Examples
    --------
    >>> inst = Instance("a", "web", {"text": "this is a 3", "image": np.zeros((8, 8))},
    ...                 {"image": "real"}, "veracious", "the caption is right")
    >>> inst.media_labels
    {'image': 0}
    """

    id: str
    scenario: str
    media: dict[str, Any]
    media_labels: dict[str, int]
    content_label: str
    rationale: str = ""
    evidence: tuple = ()

    def __post_init__(self) -> None:
        where = f"Instance {self.id!r}"
        if not isinstance(self.id, str):
            raise TypeError(f"Instance id must be a str, got {type(self.id).__name__}")
        if self.scenario not in SCENARIOS:
            raise ValueError(f"{where}: scenario must be one of {SCENARIOS}, got {self.scenario!r}")
        if not isinstance(self.media, dict) or not self.media:
            raise TypeError(f"{where}: media must be a non-empty dict modality -> payload")
        for m, v in self.media.items():
            if m not in MODALITIES:
                raise ValueError(f"{where}: media modality must be one of {MODALITIES}, got {m!r}")
            if m == "text":
                if not isinstance(v, str):
                    raise TypeError(f"{where}: media['text'] must be a str, got {type(v).__name__}")
                continue
            arr = np.asarray(v)
            if arr.dtype.kind not in "biuf":
                raise TypeError(f"{where}: media[{m!r}] must be a numeric array, got {arr.dtype}")
            if arr.ndim not in _NDIM[m]:
                raise ValueError(f"{where}: media[{m!r}] must have ndim in {_NDIM[m]}, got an "
                                 f"array of shape {arr.shape}")
            if arr.dtype.kind == "f" and not np.isfinite(arr).all():
                raise ValueError(f"{where}: media[{m!r}] must be finite")
        labels = {}
        for m, y in dict(self.media_labels).items():
            if m not in self.media:
                raise ValueError(f"{where}: media_labels has {m!r}, which is not in media")
            y = {"real": 0, "synthetic": 1}.get(y, y) if isinstance(y, str) else y
            if isinstance(y, (bool, np.bool_)) or y not in (0, 1):
                raise ValueError(f"{where}: media_labels[{m!r}] must be 0/'real' or "
                                 f"1/'synthetic', got {self.media_labels[m]!r}")
            labels[m] = int(y)
        object.__setattr__(self, "media_labels", labels)
        if not isinstance(self.content_label, str):
            raise TypeError(f"{where}: content_label must be a str")
        if not isinstance(self.rationale, str):
            raise TypeError(f"{where}: rationale must be a str")
        object.__setattr__(self, "evidence", _check_evidence(self.evidence, f"{where}: evidence"))


def _check_evidence(ev: Any, where: str) -> tuple:
    if isinstance(ev, (str, bytes, dict)) or not hasattr(ev, "__iter__"):
        raise TypeError(f"{where} must be a sequence of dicts, got {type(ev).__name__}")
    out = []
    for e in ev:
        if not isinstance(e, dict) or e.get("modality") not in MODALITIES:
            raise ValueError(f"{where} items must be dicts with a 'modality' in {MODALITIES}, "
                             f"got {e!r}")
        for key, size in (("box", 4), ("segment", 2)):
            if key in e:
                v = e[key]
                if (not hasattr(v, "__len__") or len(v) != size
                        or not all(isinstance(x, numbers.Real) for x in v)):
                    raise ValueError(f"{where} {key} must be {size} numbers, got {v!r}")
        out.append(e)
    return tuple(out)


@dataclass(frozen=True)
class Prediction:
    """A detector's output for one instance.

    Parameters
    ----------
    media : dict of str to float or bool
        Modality -> P(synthetic) in [0, 1], or a hard label (bool). Empty if the detector
        does not judge authenticity.
    content : str, dict of str to float, or None
        A content class, or class -> non-negative score (argmax is the label; the scores,
        normalised, give P(not veracious) for the AUROC). None if not judged.
    fake : float, bool or None, default=None
        Overall fake score / label; None derives it from the two axes.
    rationale : str, default=""
    evidence : sequence of dict, default=()
        As :class:`Instance` evidence.

    Examples
    --------
    >>> Prediction(media={"image": 0.9}, content="veracious").content_label(("veracious", "x"))
    'veracious'
    """

    media: dict[str, Any]
    content: Any = None
    fake: Any = None
    rationale: str = ""
    evidence: tuple = ()

    def __post_init__(self) -> None:
        if not isinstance(self.media, dict):
            raise TypeError(f"Prediction media must be a dict, got {type(self.media).__name__}")
        object.__setattr__(self, "evidence", tuple(self.evidence) if not isinstance(
            self.evidence, (str, dict)) else self.evidence)

    def check(self, classes: tuple[str, ...] | None = None, inst: Any = None) -> None:
        """Raise ValueError/TypeError naming the first invalid field.

        Parameters
        ----------
        classes : tuple of str or None
            Allowed content labels (None: any string).
        inst : Instance or None
            If given, every ``media`` key must be a labelled modality of it.

        Examples
        --------
        >>> Prediction(media={"image": 1.5}).check()
        Traceback (most recent call last):
        ...
        ValueError: media['image'] must be a bool or a probability in [0, 1], got 1.5
        """
        for m, v in self.media.items():
            if inst is not None and m not in inst.media_labels:
                raise ValueError(f"media has modality {m!r}, which the instance does not label "
                                 f"(labelled: {sorted(inst.media_labels)})")
            if not _prob_or_bool(v):
                raise ValueError(f"media[{m!r}] must be a bool or a probability in [0, 1], "
                                 f"got {v!r}")
        c = self.content
        if isinstance(c, str):
            if classes is not None and c not in classes:
                raise ValueError(f"content label {c!r} is not one of {classes}")
        elif isinstance(c, dict):
            if not c:
                raise ValueError("content scores must not be empty")
            for k, v in c.items():
                if classes is not None and k not in classes:
                    raise ValueError(f"content label {k!r} is not one of {classes}")
                if (isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Real)
                        or not math.isfinite(v) or v < 0):
                    raise ValueError(f"content score for {k!r} must be a finite number >= 0, "
                                     f"got {v!r}")
            if sum(c.values()) <= 0:
                raise ValueError("content scores must not all be zero")
        elif c is not None:
            raise TypeError(f"content must be a str, a dict of scores or None, got "
                            f"{type(c).__name__}")
        if self.fake is not None and not _prob_or_bool(self.fake):
            raise ValueError(f"fake must be None, a bool or a probability in [0, 1], "
                             f"got {self.fake!r}")
        if not isinstance(self.rationale, str):
            raise TypeError(f"rationale must be a str, got {type(self.rationale).__name__}")
        _check_evidence(self.evidence, "evidence")

    def content_label(self, classes: tuple[str, ...]) -> str | None:
        """The predicted content class (argmax of scores; ties: first in ``classes``).

        Parameters
        ----------
        classes : tuple of str

        Returns
        -------
        label : str or None

        Examples
        --------
        >>> Prediction({}, {"factual_error": 0.7, "veracious": 0.3}).content_label(
        ...     ("veracious", "factual_error"))
        'factual_error'
        """
        c = self.content
        if c is None or isinstance(c, str):
            return c
        return max(classes, key=lambda k: (c.get(k, 0.0), -classes.index(k)))


def _prob_or_bool(v: Any) -> bool:
    if isinstance(v, (bool, np.bool_)):
        return True
    return isinstance(v, numbers.Real) and math.isfinite(v) and 0.0 <= float(v) <= 1.0
