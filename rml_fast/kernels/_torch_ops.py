"""Registration of native kernels as torch operators (``torch.ops.rml_fast.*``).

Uses the low-level ``torch.library`` API (``define`` / ``impl`` / ``register_fake`` /
``register_autograd``) rather than ``torch.library.custom_op``: the latter wraps every kernel call
in a Dynamo-disable guard whose first call imports ``torch._dynamo`` (seconds, on every process
that calls a kernel once), while these registrations cost nothing until a model is traced.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

__all__ = ["define_op"]


def define_op(
    name: str,
    schema: str,
    impl: Callable[..., Any],
    fake: Callable[..., Any],
    backward: Callable[..., Any],
    setup_context: Callable[..., Any],
) -> Any:
    """Define ``rml_fast::<name>`` with one implementation for every device, a fake
    (meta) implementation for tracing and an autograd formula; return its overload packet's
    ``default`` (callable like the implementation).

    Examples
    --------
    >>> from rml_fast.kernels import nudft  # registers rml_fast::nudft_type1 / _type2
    >>> import torch
    >>> hasattr(torch.ops.rml_fast, "nudft_type1")
    True
    """
    qualname = f"rml_fast::{name}"
    torch.library.define(qualname, schema)
    torch.library.impl(qualname, "CompositeExplicitAutograd", impl)
    torch.library.register_fake(qualname, fake)
    torch.library.register_autograd(qualname, backward, setup_context=setup_context)
    return getattr(torch.ops.rml_fast, name).default
