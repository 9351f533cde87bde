"""Hot kernels: one public function per kernel, dispatching by device and dtype.

CUDA tensors go to Triton (imported lazily, only then), CPU memory to the C++ extension
``rml_fast._C``; every kernel also has a ``*_reference`` twin in plain NumPy/torch that the
tests compare against. See :mod:`rml_fast.kernels._dispatch` for the shared pattern.
"""

from __future__ import annotations

__all__: list[str] = []  # the public names live in the submodules
