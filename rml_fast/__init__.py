"""rml_fast: fast, trustworthy machine learning with native (C++ / Triton) kernels.

Importing the package loads only NumPy and the compiled extension; torch and Triton are
imported lazily by the functions that need them.
"""

from __future__ import annotations

from rml_fast._info import backend_info
from rml_fast._native import _C
from rml_fast.config import (
    get_memory_limit,
    get_num_threads,
    memory_limit,
    num_threads,
    set_memory_limit,
    set_num_threads,
)

__version__ = "0.1.0"

__all__ = [
    "_C",
    "__version__",
    "backend_info",
    "get_memory_limit",
    "get_num_threads",
    "memory_limit",
    "num_threads",
    "set_memory_limit",
    "set_num_threads",
]
