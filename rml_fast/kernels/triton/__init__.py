"""Triton kernels. Imported lazily by the kernel families, only for CUDA tensors (or under
``TRITON_INTERPRET=1``); importing :mod:`rml_fast` never imports this package."""

from __future__ import annotations

__all__: list[str] = []  # the public names live in the submodules
