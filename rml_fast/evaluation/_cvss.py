"""CVSS v3.1 / v3.0 and v4.0 score calculators (the MATH module of CYBERTEAM).

Written from the FIRST specifications:

* CVSS v3.1 Specification Document, section 7 (base metric equations), 7.4 (metric values) and
  Appendix A (the ``Roundup`` function that avoids floating-point error); v3.0 base scores use the
  same equations with the plain ``Roundup`` (smallest one-decimal number >= x).
* CVSS v2.0 complete documentation (FIRST), section 3.2.1 (base equation), 3.2.4 (rounding to
  one decimal) and 3.3.1 (parameters) -- the format of most NVD records before 2016 and of
  the released CYBERTEAM CVSS samples.
* CVSS v4.0 Specification Document, section 8 (MacroVectors and the six equivalence sets
  EQ1..EQ6, the MacroVector score lookup table, the severity distance to the highest-severity
  vectors of a MacroVector and the interpolation); the 270 MacroVector scores, the highest
  vectors of every EQ level and the EQ depths are the data published with FIRST's calculator.

Public entry points are re-exported by :mod:`rml_fast.evaluation.cyberteam`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from itertools import product
from typing import Any

import numpy as np

from rml_fast._validation import Interval, check_scalar
from rml_fast.evaluation._cvss4_data import EQ_DEPTH, EQ_MAX_VECTORS, MACROVECTOR_SCORES

__all__ = [
    "CVSSVectorError",
    "cvss2_base",
    "cvss31_base",
    "cvss31_base_scores",
    "cvss31_roundup",
    "cvss40_macrovector",
    "cvss40_score",
    "cvss_attributes_to_vector",
    "cvss_score",
    "cvss_severity",
]


class CVSSVectorError(ValueError):
    """A CVSS vector string is malformed; the message names the vector and what is wrong.

    Subclasses :class:`ValueError`.

    Examples
    --------
    >>> from rml_fast.evaluation.cyberteam import CVSSVectorError, cvss31_base
    >>> try:
    ...     cvss31_base("CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H")
    ... except CVSSVectorError as err:
    ...     print(err)
    malformed CVSS vector 'CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H': missing base metric(s) A
    """


def cvss_severity(score: float) -> str:
    """Qualitative severity rating of a CVSS v3.x / v4.0 score (the specs' rating scale).

    ``0.0`` None, ``0.1-3.9`` Low, ``4.0-6.9`` Medium, ``7.0-8.9`` High, ``9.0-10.0`` Critical.

    Parameters
    ----------
    score : float
        A score in [0, 10].

    Returns
    -------
    str
        One of ``"None"``, ``"Low"``, ``"Medium"``, ``"High"``, ``"Critical"``.

    Examples
    --------
    >>> from rml_fast.evaluation.cyberteam import cvss_severity
    >>> [cvss_severity(s) for s in (0.0, 3.9, 4.0, 8.9, 9.0)]
    ['None', 'Low', 'Medium', 'High', 'Critical']
    """
    if isinstance(score, (bool, np.bool_)) or not isinstance(score, (int, float, np.number)):
        raise TypeError(f"score must be a real number in [0, 10], got {score!r}")
    s = float(score)
    if not (0.0 <= s <= 10.0):
        raise ValueError(f"score must be a real number in [0, 10], got {score!r}")
    if s == 0.0:
        return "None"
    if s < 4.0:
        return "Low"
    if s < 7.0:
        return "Medium"
    if s < 9.0:
        return "High"
    return "Critical"


# --------------------------------------------------------------------------------------------
# parsing shared by both versions
# --------------------------------------------------------------------------------------------


def _split(vector: Any, prefix: str, allowed: dict[str, tuple[str, ...]],
           mandatory: tuple[str, ...]) -> dict[str, str]:
    if not isinstance(vector, str):
        raise TypeError(f"vector must be a CVSS vector string, got {type(vector).__name__} "
                        f"{vector!r}")

    def bad(why: str) -> CVSSVectorError:
        return CVSSVectorError(f"malformed CVSS vector {vector!r}: {why}")

    text = vector.strip()
    if not text.startswith(prefix):
        raise bad(f"it must start with {prefix!r}")
    body = text[len(prefix):]
    if not body:
        raise bad("no metrics after the version prefix")
    out: dict[str, str] = {}
    for part in body.split("/"):
        if part.count(":") != 1:
            raise bad(f"component {part!r} is not of the form METRIC:VALUE")
        key, val = part.split(":")
        if key not in allowed:
            raise bad(f"unknown metric {key!r}")
        if key in out:
            raise bad(f"metric {key!r} appears more than once")
        if val not in allowed[key]:
            raise bad(f"metric {key} has value {val!r}; expected one of {list(allowed[key])}")
        out[key] = val
    missing = [m for m in mandatory if m not in out]
    if missing:
        raise bad(f"missing base metric(s) {', '.join(missing)}")
    return out


# --------------------------------------------------------------------------------------------
# CVSS v3.1 / v3.0
# --------------------------------------------------------------------------------------------

_V3_BASE = ("AV", "AC", "PR", "UI", "S", "C", "I", "A")
_V3_ALLOWED: dict[str, tuple[str, ...]] = {
    "AV": ("N", "A", "L", "P"), "AC": ("L", "H"), "PR": ("N", "L", "H"), "UI": ("N", "R"),
    "S": ("U", "C"), "C": ("H", "L", "N"), "I": ("H", "L", "N"), "A": ("H", "L", "N"),
    # temporal and environmental metrics are validated but do not enter the base score
    "E": ("X", "U", "P", "F", "H"), "RL": ("X", "O", "T", "W", "U"), "RC": ("X", "U", "R", "C"),
    "CR": ("X", "L", "M", "H"), "IR": ("X", "L", "M", "H"), "AR": ("X", "L", "M", "H"),
    "MAV": ("X", "N", "A", "L", "P"), "MAC": ("X", "L", "H"), "MPR": ("X", "N", "L", "H"),
    "MUI": ("X", "N", "R"), "MS": ("X", "U", "C"), "MC": ("X", "H", "L", "N"),
    "MI": ("X", "H", "L", "N"), "MA": ("X", "H", "L", "N"),
}
# metric weights, CVSS v3.1 specification section 7.4
_AV_W = {"N": 0.85, "A": 0.62, "L": 0.55, "P": 0.2}
_AC_W = {"L": 0.77, "H": 0.44}
_PR_W_U = {"N": 0.85, "L": 0.62, "H": 0.27}
_PR_W_C = {"N": 0.85, "L": 0.68, "H": 0.5}
_UI_W = {"N": 0.85, "R": 0.62}
_CIA_W = {"H": 0.56, "L": 0.22, "N": 0.0}


def cvss31_roundup(x: float) -> float:
    """CVSS v3.1 ``Roundup``: the smallest number with one decimal that is >= ``x``.

    Implemented as in the v3.1 specification, Appendix A, on integers so that floating-point
    error cannot push an exact one-decimal value up: ``i = round(x * 100000)``; if
    ``i % 10000 == 0`` return ``i / 100000``, else ``(floor(i / 10000) + 1) / 10``.

    Parameters
    ----------
    x : float
        A non-negative real number.

    Returns
    -------
    float

    Examples
    --------
    >>> from rml_fast.evaluation.cyberteam import cvss31_roundup
    >>> cvss31_roundup(4.02), cvss31_roundup(4.00), cvss31_roundup(4.000000000000001)
    (4.1, 4.0, 4.0)
    """
    return _roundup31(check_scalar(x, "x", Interval("real", None, None)))


def _roundup31(x: float) -> float:
    i = round(float(x) * 100000)
    if i % 10000 == 0:
        return i / 100000.0
    return (math.floor(i / 10000) + 1) / 10.0


def _roundup30(x: float) -> float:
    return math.ceil(x * 10) / 10


def _v3_base(m: dict[str, str], version: str) -> float:
    changed = m["S"] == "C"
    iss = 1.0 - (1.0 - _CIA_W[m["C"]]) * (1.0 - _CIA_W[m["I"]]) * (1.0 - _CIA_W[m["A"]])
    if changed:
        impact = 7.52 * (iss - 0.029) - 3.25 * (iss - 0.02) ** 15
    else:
        impact = 6.42 * iss
    pr = (_PR_W_C if changed else _PR_W_U)[m["PR"]]
    expl = 8.22 * _AV_W[m["AV"]] * _AC_W[m["AC"]] * pr * _UI_W[m["UI"]]
    if impact <= 0:
        return 0.0
    rnd = _roundup31 if version == "3.1" else _roundup30
    if changed:
        return rnd(min(1.08 * (impact + expl), 10.0))
    return rnd(min(impact + expl, 10.0))


def _parse_v3(vector: Any) -> tuple[dict[str, str], str]:
    if isinstance(vector, str) and vector.strip().startswith("CVSS:3.0/"):
        return _split(vector, "CVSS:3.0/", _V3_ALLOWED, _V3_BASE), "3.0"
    return _split(vector, "CVSS:3.1/", _V3_ALLOWED, _V3_BASE), "3.1"


def cvss31_base(vector: str) -> tuple[float, str]:
    """CVSS v3.1 (or v3.0) base score and severity of one vector string.

    Implements the v3.1 base equations (specification section 7.1)::

        ISS = 1 - (1 - C) (1 - I) (1 - A)
        Impact = 6.42 ISS                                   (Scope Unchanged)
               = 7.52 (ISS - 0.029) - 3.25 (ISS - 0.02)^15  (Scope Changed)
        Exploitability = 8.22 AV AC PR UI
        Base = 0 if Impact <= 0, else
               Roundup(min(Impact + Exploitability, 10))          (S:U)
               Roundup(min(1.08 (Impact + Exploitability), 10))   (S:C)

    with the weights of section 7.4 (PR is 0.68 / 0.50 for L / H when Scope is Changed) and the
    integer ``Roundup`` of Appendix A. A ``CVSS:3.0/`` vector is scored with the same equations
    and v3.0's plain ``Roundup``. Temporal and environmental metrics may be present; they are
    validated and ignored (this is the base score).

    Parameters
    ----------
    vector : str
        ``"CVSS:3.1/AV:_/AC:_/PR:_/UI:_/S:_/C:_/I:_/A:_[/...]"``; metrics in any order, each once.

    Returns
    -------
    score : float
        Base score in [0, 10], one decimal.
    severity : str
        ``"None"``, ``"Low"``, ``"Medium"``, ``"High"`` or ``"Critical"``.

    Raises
    ------
    CVSSVectorError
        A malformed vector (wrong prefix, unknown or repeated metric, bad value, missing base
        metric); the message quotes the vector.

    Examples
    --------
    >>> from rml_fast.evaluation.cyberteam import cvss31_base
    >>> cvss31_base("CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H")   # Shellshock, spec examples
    (9.8, 'Critical')
    >>> cvss31_base("CVSS:3.1/AV:N/AC:L/PR:N/UI:R/S:C/C:L/I:L/A:N")   # CVE-2013-1937
    (6.1, 'Medium')
    """
    m, version = _parse_v3(vector)
    score = _v3_base(m, version)
    return score, cvss_severity(score)


def cvss31_base_scores(vectors: Iterable[str]) -> np.ndarray:
    """Base scores of many CVSS v3.1 / v3.0 vectors, shape (n,), float64.

    Each distinct vector string is parsed and scored once and memoised in a dict (there are
    only 2592 distinct v3.1 base vectors), so scoring 10^6 vectors costs one hash look-up per
    vector plus a few thousand formula evaluations. The scores equal :func:`cvss31_base`
    element by element.

    Parameters
    ----------
    vectors : iterable of str
        The vector strings.

    Returns
    -------
    ndarray of shape (n,)

    Raises
    ------
    CVSSVectorError
        If any vector is malformed (the first malformed one is named).

    Examples
    --------
    >>> from rml_fast.evaluation.cyberteam import cvss31_base_scores
    >>> cvss31_base_scores(["CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:N/A:N",
    ...                     "CVSS:3.1/AV:N/AC:H/PR:N/UI:R/S:U/C:L/I:N/A:N"]).tolist()
    [7.5, 3.1]
    """
    if isinstance(vectors, str):
        raise TypeError("vectors must be an iterable of vector strings, got one str; wrap it "
                        "in a list or call cvss31_base")
    vecs = list(vectors)
    cache: dict[str, float] = {}
    out = np.empty(len(vecs), dtype=np.float64)
    for i, v in enumerate(vecs):
        if type(v) is not str:
            raise TypeError(f"vectors must hold strings; item {i} is {type(v).__name__} {v!r}")
        score = cache.get(v)
        if score is None:
            score = cache[v] = _v3_base(*_parse_v3(v))
        out[i] = score
    return out


# --------------------------------------------------------------------------------------------
# CVSS v2.0
# --------------------------------------------------------------------------------------------

_V2_BASE = ("AV", "AC", "Au", "C", "I", "A")
_V2_ALLOWED: dict[str, tuple[str, ...]] = {
    "AV": ("L", "A", "N"), "AC": ("H", "M", "L"), "Au": ("M", "S", "N"),
    "C": ("N", "P", "C"), "I": ("N", "P", "C"), "A": ("N", "P", "C"),
    "E": ("U", "POC", "F", "H", "ND"), "RL": ("OF", "TF", "W", "U", "ND"),
    "RC": ("UC", "UR", "C", "ND"), "CDP": ("N", "L", "LM", "MH", "H", "ND"),
    "TD": ("N", "L", "M", "H", "ND"), "CR": ("L", "M", "H", "ND"), "IR": ("L", "M", "H", "ND"),
    "AR": ("L", "M", "H", "ND"),
}
_V2_AV = {"L": 0.395, "A": 0.646, "N": 1.0}
_V2_AC = {"H": 0.35, "M": 0.61, "L": 0.71}
_V2_AU = {"M": 0.45, "S": 0.56, "N": 0.704}
_V2_CIA = {"N": 0.0, "P": 0.275, "C": 0.660}


def _round_half_up_1(x: float) -> float:
    return math.floor(x * 10 + 0.5 + 1e-9) / 10


def _v2_base(m: dict[str, str]) -> float:
    impact = 10.41 * (1 - (1 - _V2_CIA[m["C"]]) * (1 - _V2_CIA[m["I"]]) * (1 - _V2_CIA[m["A"]]))
    expl = 20 * _V2_AV[m["AV"]] * _V2_AC[m["AC"]] * _V2_AU[m["Au"]]
    f = 0.0 if impact == 0 else 1.176
    return max(0.0, _round_half_up_1((0.6 * impact + 0.4 * expl - 1.5) * f))


def _v2_severity(score: float) -> str:
    return "Low" if score < 4.0 else "Medium" if score < 7.0 else "High"


def cvss2_base(vector: str) -> tuple[float, str]:
    """CVSS v2.0 base score and NVD v2 severity of one vector.

    Implements the v2 base equation (CVSS v2 documentation, section 3.2.1)::

        Impact = 10.41 (1 - (1 - C) (1 - I) (1 - A))
        Exploitability = 20 AV AC Au
        Base = round_to_1_decimal((0.6 Impact + 0.4 Exploitability - 1.5) f(Impact)),
        f(Impact) = 0 if Impact = 0 else 1.176

    with AV L/A/N = .395/.646/1.0, AC H/M/L = .35/.61/.71, Au M/S/N = .45/.56/.704,
    C/I/A N/P/C = 0/.275/.660, rounded half up. Severity is NVD's v2 scale: Low < 4.0 <= Medium
    < 7.0 <= High. Temporal / environmental metrics are validated and ignored.

    Parameters
    ----------
    vector : str
        ``"AV:_/AC:_/Au:_/C:_/I:_/A:_"``, optionally prefixed ``"CVSS:2.0/"`` or in parentheses.

    Returns
    -------
    score : float
    severity : str

    Raises
    ------
    CVSSVectorError
        A malformed vector; the message quotes it.

    Examples
    --------
    >>> from rml_fast.evaluation.cyberteam import cvss2_base
    >>> cvss2_base("AV:N/AC:L/Au:N/C:P/I:P/A:P")
    (7.5, 'High')
    >>> cvss2_base("CVSS:2.0/AV:N/AC:M/Au:S/C:N/I:P/A:N")
    (3.5, 'Low')
    """
    if not isinstance(vector, str):
        raise TypeError(f"vector must be a CVSS vector string, got {type(vector).__name__} "
                        f"{vector!r}")
    text = vector.strip()
    if text.startswith("(") and text.endswith(")"):
        text = text[1:-1]
    if not text.startswith("CVSS:2.0/"):
        text = "CVSS:2.0/" + text
    try:
        m = _split(text, "CVSS:2.0/", _V2_ALLOWED, _V2_BASE)
    except CVSSVectorError as exc:
        why = str(exc).split(": ", 1)[1]
        raise CVSSVectorError(f"malformed CVSS vector {vector!r}: {why}") from None
    score = _v2_base(m)
    return score, _v2_severity(score)


_ATTR_KEYS = {
    "attack vector": "AV", "access vector": "AV", "attack complexity": "AC",
    "access complexity": "AC", "privileges required": "PR", "user interaction": "UI",
    "scope": "S", "authentication": "Au", "confidentiality impact": "C",
    "integrity impact": "I", "availability impact": "A", "confidentiality": "C",
    "integrity": "I", "availability": "A",
}
_ATTR_VALUES = {
    "network": "N", "adjacent network": "A", "adjacent": "A", "local": "L", "physical": "P",
    "low": "L", "medium": "M", "high": "H", "none": "N", "required": "R", "unchanged": "U",
    "changed": "C", "single": "S", "multiple": "M", "partial": "P", "complete": "C",
}


def cvss_attributes_to_vector(text: str) -> str:
    """Turn ``"Attribute: Value, ..."`` text (the CYBERTEAM CVSS task's answer format) into a
    vector string: CVSS v2.0 when it names ``Authentication`` (or Partial / Complete impacts),
    else CVSS v3.1.

    Parameters
    ----------
    text : str
        E.g. ``"Access Vector: Network, Access Complexity: Low, Authentication: None,
        Confidentiality Impact: Partial, ..."``; case-insensitive; ``CVSS: x`` items and unknown
        attributes are ignored.

    Returns
    -------
    str
        ``"AV:N/AC:L/Au:N/C:P/I:P/A:P"`` (v2) or ``"CVSS:3.1/AV:.../A:..."``.

    Raises
    ------
    CVSSVectorError
        A value that does not fit its attribute, or missing base metrics (named).

    Examples
    --------
    >>> from rml_fast.evaluation.cyberteam import cvss_attributes_to_vector
    >>> cvss_attributes_to_vector("Access Vector: Network, Access Complexity: Low, "
    ...     "Authentication: None, Confidentiality Impact: Partial, Integrity Impact: Partial, "
    ...     "Availability Impact: Partial")
    'AV:N/AC:L/Au:N/C:P/I:P/A:P'
    >>> cvss_attributes_to_vector("CVSS: 3.1, Attack Vector: Local, Attack Complexity: Low, "
    ...     "Privileges Required: Low, User Interaction: None, Scope: Unchanged, "
    ...     "Confidentiality Impact: None, Integrity Impact: None, Availability Impact: High")
    'CVSS:3.1/AV:L/AC:L/PR:L/UI:N/S:U/C:N/I:N/A:H'
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    found: dict[str, str] = {}
    for part in re.split(r"[,;\n]+", text.strip().strip("`")):
        if ":" not in part:
            continue
        key, val = (x.strip().lower() for x in part.split(":", 1))
        if key in _ATTR_KEYS and val in _ATTR_VALUES:
            found[_ATTR_KEYS[key]] = _ATTR_VALUES[val]
    v2 = "Au" in found or any(found.get(k) in ("P", "C") for k in ("C", "I", "A"))
    keys = _V2_BASE if v2 else _V3_BASE
    allowed = _V2_ALLOWED if v2 else _V3_ALLOWED
    missing = [k for k in keys if k not in found]
    if missing:
        raise CVSSVectorError(f"malformed CVSS attributes in text {text!r}: missing base metric(s) "
                              f"{', '.join(missing)}")
    bad = [k for k in keys if found[k] not in allowed[k]]
    if bad:
        raise CVSSVectorError(f"malformed CVSS attributes in text {text!r}: value(s) of {bad} do not "
                              f"fit CVSS {'v2.0' if v2 else 'v3.1'}")
    body = "/".join(f"{k}:{found[k]}" for k in keys)
    return body if v2 else "CVSS:3.1/" + body


# --------------------------------------------------------------------------------------------
# CVSS v4.0
# --------------------------------------------------------------------------------------------

_V4_BASE = ("AV", "AC", "AT", "PR", "UI", "VC", "VI", "VA", "SC", "SI", "SA")
_V4_ALLOWED: dict[str, tuple[str, ...]] = {
    "AV": ("N", "A", "L", "P"), "AC": ("L", "H"), "AT": ("N", "P"), "PR": ("N", "L", "H"),
    "UI": ("N", "P", "A"), "VC": ("H", "L", "N"), "VI": ("H", "L", "N"), "VA": ("H", "L", "N"),
    "SC": ("H", "L", "N"), "SI": ("H", "L", "N"), "SA": ("H", "L", "N"),
    # threat
    "E": ("X", "A", "P", "U"),
    # environmental
    "CR": ("X", "H", "M", "L"), "IR": ("X", "H", "M", "L"), "AR": ("X", "H", "M", "L"),
    "MAV": ("X", "N", "A", "L", "P"), "MAC": ("X", "L", "H"), "MAT": ("X", "N", "P"),
    "MPR": ("X", "N", "L", "H"), "MUI": ("X", "N", "P", "A"), "MVC": ("X", "H", "L", "N"),
    "MVI": ("X", "H", "L", "N"), "MVA": ("X", "H", "L", "N"), "MSC": ("X", "H", "L", "N"),
    "MSI": ("X", "S", "H", "L", "N"), "MSA": ("X", "S", "H", "L", "N"),
    # supplemental (never change the score)
    "S": ("X", "N", "P"), "AU": ("X", "N", "Y"), "R": ("X", "A", "U", "I"), "V": ("X", "D", "C"),
    "RE": ("X", "L", "M", "H"), "U": ("X", "Clear", "Green", "Amber", "Red"),
}
# severity levels used for the distance to a MacroVector's highest vectors (spec section 8.2)
_LEVELS: dict[str, dict[str, float]] = {
    "AV": {"N": 0.0, "A": 0.1, "L": 0.2, "P": 0.3},
    "PR": {"N": 0.0, "L": 0.1, "H": 0.2},
    "UI": {"N": 0.0, "P": 0.1, "A": 0.2},
    "AC": {"L": 0.0, "H": 0.1},
    "AT": {"N": 0.0, "P": 0.1},
    "VC": {"H": 0.0, "L": 0.1, "N": 0.2},
    "VI": {"H": 0.0, "L": 0.1, "N": 0.2},
    "VA": {"H": 0.0, "L": 0.1, "N": 0.2},
    "SC": {"H": 0.1, "L": 0.2, "N": 0.3},
    "SI": {"S": 0.0, "H": 0.1, "L": 0.2, "N": 0.3},
    "SA": {"S": 0.0, "H": 0.1, "L": 0.2, "N": 0.3},
    "CR": {"H": 0.0, "M": 0.1, "L": 0.2},
    "IR": {"H": 0.0, "M": 0.1, "L": 0.2},
    "AR": {"H": 0.0, "M": 0.1, "L": 0.2},
}
_DIST_ORDER = ("AV", "PR", "UI", "AC", "AT", "VC", "VI", "VA", "SC", "SI", "SA", "CR", "IR", "AR")


def _effective(m: dict[str, str]) -> dict[str, str]:
    """Effective metric values: modified metrics override base ones; X means the worst case."""
    eff: dict[str, str] = {}
    for k in _V4_BASE:
        mod = m.get("M" + k, "X")
        eff[k] = m[k] if mod == "X" else mod
    e = m.get("E", "X")
    eff["E"] = "A" if e == "X" else e
    for k in ("CR", "IR", "AR"):
        v = m.get(k, "X")
        eff[k] = "H" if v == "X" else v
    eff["MSI"] = m.get("MSI", "X")
    eff["MSA"] = m.get("MSA", "X")
    return eff


def _macrovector(e: dict[str, str]) -> tuple[int, int, int, int, int, int]:
    av, pr, ui = e["AV"], e["PR"], e["UI"]
    if av == "N" and pr == "N" and ui == "N":
        eq1 = 0
    elif (av == "N" or pr == "N" or ui == "N") and av != "P":
        eq1 = 1
    else:
        eq1 = 2
    eq2 = 0 if (e["AC"] == "L" and e["AT"] == "N") else 1
    vc, vi, va = e["VC"], e["VI"], e["VA"]
    if vc == "H" and vi == "H":
        eq3 = 0
    elif vc == "H" or vi == "H" or va == "H":
        eq3 = 1
    else:
        eq3 = 2
    if e["MSI"] == "S" or e["MSA"] == "S":
        eq4 = 0
    elif e["SC"] == "H" or e["SI"] == "H" or e["SA"] == "H":
        eq4 = 1
    else:
        eq4 = 2
    eq5 = {"A": 0, "P": 1, "U": 2}[e["E"]]
    eq6 = 0 if ((e["CR"] == "H" and vc == "H") or (e["IR"] == "H" and vi == "H")
                or (e["AR"] == "H" and va == "H")) else 1
    return eq1, eq2, eq3, eq4, eq5, eq6


def _lookup(mv: tuple[int, ...]) -> float:
    return MACROVECTOR_SCORES.get("".join(map(str, mv)), math.nan)


def _v4_score(m: dict[str, str]) -> float:
    e = _effective(m)
    if all(e[k] == "N" for k in ("VC", "VI", "VA", "SC", "SI", "SA")):
        return 0.0
    mv = _macrovector(e)
    eq1, eq2, eq3, eq4, eq5, eq6 = mv
    value = _lookup(mv)
    # 1a. score of the next lower MacroVector in each EQ (NaN where there is none)
    lower1 = _lookup((eq1 + 1, eq2, eq3, eq4, eq5, eq6))
    lower2 = _lookup((eq1, eq2 + 1, eq3, eq4, eq5, eq6))
    if eq3 == 0 and eq6 == 0:  # two lower neighbours (00 -> 01, 00 -> 10): the higher one
        left = _lookup((eq1, eq2, eq3, eq4, eq5, eq6 + 1))
        right = _lookup((eq1, eq2, eq3 + 1, eq4, eq5, eq6))
        lower36 = left if left > right else right
    elif eq3 == 1 and eq6 == 0:
        lower36 = _lookup((eq1, eq2, eq3, eq4, eq5, eq6 + 1))
    elif eq6 == 1 and eq3 in (0, 1):
        lower36 = _lookup((eq1, eq2, eq3 + 1, eq4, eq5, eq6))
    else:  # 21 -> 32 does not exist
        lower36 = math.nan
    lower4 = _lookup((eq1, eq2, eq3, eq4 + 1, eq5, eq6))
    lower5 = _lookup((eq1, eq2, eq3, eq4, eq5 + 1, eq6))
    # 1b. severity distance to the first highest-severity vector of the MacroVector that is
    #     at least as severe as the scored vector in every metric
    parts = (EQ_MAX_VECTORS["eq1"][eq1], EQ_MAX_VECTORS["eq2"][eq2],
             EQ_MAX_VECTORS["eq3eq6"][(eq3, eq6)], EQ_MAX_VECTORS["eq4"][eq4])
    dist: dict[str, float] = {}
    for combo in product(*parts):
        mx: dict[str, str] = {}
        for chunk in combo:
            mx.update(chunk)
        dist = {k: _LEVELS[k][e[k]] - _LEVELS[k][mx[k]] for k in _DIST_ORDER}
        if all(d >= 0 for d in dist.values()):
            break
    d1 = dist["AV"] + dist["PR"] + dist["UI"]
    d2 = dist["AC"] + dist["AT"]
    d36 = dist["VC"] + dist["VI"] + dist["VA"] + dist["CR"] + dist["IR"] + dist["AR"]
    d4 = dist["SC"] + dist["SI"] + dist["SA"]
    step = 0.1
    # 1c-d. proportion of the EQ's depth times the available score difference; 2. mean
    n_lower = 0
    total = 0.0
    for avail_lower, d, depth in (
        (lower1, d1, EQ_DEPTH["eq1"][eq1]),
        (lower2, d2, EQ_DEPTH["eq2"][eq2]),
        (lower36, d36, EQ_DEPTH["eq3eq6"][(eq3, eq6)]),
        (lower4, d4, EQ_DEPTH["eq4"][eq4]),
    ):
        available = value - avail_lower
        if not math.isnan(available):
            n_lower += 1
            total += available * (d / (depth * step))
    if not math.isnan(value - lower5):  # EQ5 has one level per MacroVector: proportion 0
        n_lower += 1
    mean = total / n_lower if n_lower else 0.0
    value = min(max(value - mean, 0.0), 10.0)
    # 3. round half up to one decimal (1e-6 guards values such as 8.649999999)
    return math.floor((value + 1e-6) * 10 + 0.5) / 10


def cvss40_macrovector(vector: str) -> str:
    """The CVSS v4.0 MacroVector (EQ1..EQ6 levels) of a vector, as a six-digit string.

    Equivalence sets of the v4.0 specification (Table 24-29), on the effective metrics
    (modified environmental values override base ones; ``E:X`` counts as ``A``, ``CR/IR/AR:X``
    as ``H``): EQ1 from AV/PR/UI (0..2), EQ2 from AC/AT (0..1), EQ3 from VC/VI/VA (0..2), EQ4
    from SC/SI/SA and MSI/MSA:S (0..2), EQ5 from E (0..2), EQ6 from CR/IR/AR x VC/VI/VA (0..1).

    Parameters
    ----------
    vector : str
        A ``CVSS:4.0/...`` vector string.

    Returns
    -------
    str
        E.g. ``"000200"``.

    Examples
    --------
    >>> from rml_fast.evaluation.cyberteam import cvss40_macrovector
    >>> cvss40_macrovector("CVSS:4.0/AV:N/AC:L/AT:N/PR:N/UI:N/VC:H/VI:H/VA:H/SC:N/SI:N/SA:N")
    '000200'
    """
    m = _split(vector, "CVSS:4.0/", _V4_ALLOWED, _V4_BASE)
    return "".join(map(str, _macrovector(_effective(m))))


def cvss40_score(vector: str) -> tuple[float, str]:
    """CVSS v4.0 score (CVSS-B, -BT, -BE or -BTE) and severity of one vector string.

    Follows the v4.0 specification, section 8: the vector's MacroVector (six equivalence
    sets, :func:`cvss40_macrovector`) gives the score of its highest-severity vectors from the
    published table of 270 MacroVector scores; the vector is then placed below it by
    interpolation: for each EQ with a next lower MacroVector, the available score difference
    ``value(MV) - value(next lower MV)`` is multiplied by the proportion
    ``severity distance / (depth of the EQ * 0.1)``, where the severity distance sums the
    per-metric level differences between the vector and the first of the MacroVector's highest
    vectors that dominates it; the score is ``value(MV)`` minus the mean of these terms over
    the EQs that have a lower MacroVector, clipped to [0, 10] and rounded half up to one
    decimal. A vector with no impact (VC=VI=VA=SC=SI=SA=N, effective values) scores 0.

    Threat (``E``) and environmental metrics, when present, enter as the spec says (modified
    metrics replace base metrics; ``X`` is the worst case); supplemental metrics are validated
    and never change the score.

    Parameters
    ----------
    vector : str
        ``"CVSS:4.0/AV:_/AC:_/AT:_/PR:_/UI:_/VC:_/VI:_/VA:_/SC:_/SI:_/SA:_[/...]"``.

    Returns
    -------
    score : float
        In [0, 10], one decimal.
    severity : str
        ``"None"``, ``"Low"``, ``"Medium"``, ``"High"`` or ``"Critical"``.

    Raises
    ------
    CVSSVectorError
        A malformed vector; the message quotes it.

    Examples
    --------
    >>> from rml_fast.evaluation.cyberteam import cvss40_score
    >>> cvss40_score("CVSS:4.0/AV:N/AC:L/AT:N/PR:N/UI:N/VC:H/VI:H/VA:H/SC:N/SI:N/SA:N")
    (9.3, 'Critical')
    >>> cvss40_score("CVSS:4.0/AV:N/AC:L/AT:N/PR:N/UI:P/VC:L/VI:N/VA:N/SC:L/SI:N/SA:L")
    (5.3, 'Medium')
    """
    m = _split(vector, "CVSS:4.0/", _V4_ALLOWED, _V4_BASE)
    score = _v4_score(m)
    return score, cvss_severity(score)


def cvss_score(vector: str) -> tuple[float, str]:
    """Score a CVSS vector of any supported version (v2.0, v3.0, v3.1 base; v4.0), by its prefix.

    Parameters
    ----------
    vector : str
        Starts with ``CVSS:3.0/``, ``CVSS:3.1/`` or ``CVSS:4.0/``; a v2 vector
        (``CVSS:2.0/`` or bare ``AV:_/AC:_/Au:_/...``) is scored by :func:`cvss2_base`.

    Returns
    -------
    score : float
    severity : str

    Raises
    ------
    CVSSVectorError
        Unknown version prefix or malformed vector.

    Examples
    --------
    >>> from rml_fast.evaluation.cyberteam import cvss_score
    >>> cvss_score("CVSS:3.1/AV:L/AC:L/PR:H/UI:N/S:U/C:L/I:L/A:L")
    (4.2, 'Medium')
    >>> cvss_score("CVSS:4.0/AV:N/AC:L/AT:N/PR:N/UI:N/VC:H/VI:H/VA:H/SC:H/SI:H/SA:H")
    (10.0, 'Critical')
    """
    if not isinstance(vector, str):
        raise TypeError(f"vector must be a CVSS vector string, got {type(vector).__name__} "
                        f"{vector!r}")
    head = vector.strip()[:9]
    if head == "CVSS:4.0/":
        return cvss40_score(vector)
    if head in ("CVSS:3.1/", "CVSS:3.0/"):
        return cvss31_base(vector)
    if head == "CVSS:2.0/" or "/Au:" in vector:
        return cvss2_base(vector)
    raise CVSSVectorError(f"malformed CVSS vector {vector!r}: unknown version prefix; "
                          "expected 'CVSS:3.0/', 'CVSS:3.1/', 'CVSS:4.0/' or a v2 vector "
                          "('AV:_/AC:_/Au:_/...')")
