"""Loads the compiled extension ``rml_fast._C`` with an actionable error when it is missing."""

from __future__ import annotations

_BUILD_HINT = (
    "rml_fast's native extension rml_fast._C is not built. Install the package so that "
    "scikit-build-core compiles it, e.g. `pip install torch==2.13.0 -e '.[test]'` from a "
    "checkout (needs a C++17 compiler, CMake >= 3.18 and pybind11), or `pip install rml_fast`."
)

try:
    from rml_fast import _C
except ImportError as exc:  # pragma: no cover - exercised in a subprocess test
    raise ImportError(f"{_BUILD_HINT} (original error: {exc})") from exc

__all__ = ["_C"]
