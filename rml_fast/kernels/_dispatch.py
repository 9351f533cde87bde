"""The dispatch pattern every kernel family follows.

A family module (``rml_fast.kernels.<family>``) creates one :class:`Kernel` per public
function, registers its implementations by backend, validates inputs in the public
function and then calls the kernel with a resolved :class:`Device`::

    _uniform = Kernel("random.uniform")

    @_uniform.register("reference")
    def _uniform_reference(n, seed, offset, *, device): ...

    @_uniform.register("native")
    def _uniform_native(n, seed, offset, *, device): ...

    def uniform(n, seed, offset=0, *, device=None, backend="auto"):
        ...validate...
        return _uniform(n, seed, offset, device=resolve_device(device), backend=backend)

Backends: ``"native"`` (the C++ extension, CPU memory), ``"triton"`` (CUDA tensors, or CPU
tensors under ``TRITON_INTERPRET=1``), ``"reference"`` (plain NumPy/torch, any device).
``backend="auto"`` picks Triton for CUDA tensors and native code otherwise.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

BACKENDS = ("native", "triton", "reference")


@dataclass(frozen=True)
class Device:
    """Where a kernel's inputs and outputs live.

    Attributes
    ----------
    kind : {"numpy", "cpu", "cuda"}
        ``"numpy"`` means NumPy arrays; ``"cpu"``/``"cuda"`` mean torch tensors.
    torch_device : str or None
        The torch device string (``"cpu"``, ``"cuda:0"``), None for NumPy.
    """

    kind: str
    torch_device: str | None = None

    @property
    def is_torch(self) -> bool:
        return self.kind != "numpy"


NUMPY = Device("numpy")


def resolve_device(device: Any, name: str = "device") -> Device:
    """Turn a user's ``device`` argument into a :class:`Device`.

    None or ``"numpy"`` selects NumPy arrays; ``"cpu"``, ``"cuda"``, ``"cuda:N"`` or a
    ``torch.device`` select torch tensors on that device.

    Raises
    ------
    TypeError
        If ``device`` is neither None, a string nor a torch.device.
    ValueError
        If the string names no supported device, or CUDA is requested but unavailable.
    """
    if device is None or device == "numpy":
        return NUMPY
    if not isinstance(device, str):
        if type(device).__name__ == "device" and type(device).__module__.startswith("torch"):
            device = str(device)
        else:
            raise TypeError(
                f"{name} must be None, 'numpy', 'cpu', 'cuda[:N]' or a torch.device, "
                f"got {type(device).__name__}"
            )
    kind = device.split(":", 1)[0]
    if kind not in ("cpu", "cuda") or (kind == "cpu" and device != "cpu"):
        raise ValueError(f"{name} must be None, 'numpy', 'cpu', 'cuda' or 'cuda:N', got {device!r}")
    if kind == "cuda":
        suffix = device[5:]
        if suffix and not (suffix.startswith(":") and suffix[1:].isdigit()):
            raise ValueError(f"{name} must be 'cuda' or 'cuda:N', got {device!r}")
        import torch

        if not torch.cuda.is_available():
            raise ValueError(f"{name}={device!r} requested but torch reports no CUDA device")
        if device == "cuda":
            device = f"cuda:{torch.cuda.current_device()}"
    return Device(kind, device)


def device_of(x: Any) -> Device:
    """The :class:`Device` of an array (NumPy array or torch tensor)."""
    dev = getattr(x, "device", None)
    if dev is not None and type(x).__module__.startswith("torch"):
        return Device(dev.type, str(dev))
    return NUMPY


def triton_available() -> bool:
    """Whether Triton is installed (checked without importing it)."""
    return importlib.util.find_spec("triton") is not None


def triton_interpreting() -> bool:
    """Whether Triton kernels run in the CPU interpreter (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


class Kernel:
    """The implementations of one kernel, keyed by backend.

    Parameters
    ----------
    name : str
        Dotted name used in error messages, e.g. ``"random.uniform"``.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._impls: dict[str, Callable[..., Any]] = {}

    def register(self, backend: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorator registering ``fn`` as this kernel's implementation for ``backend``."""
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")

        def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
            if backend in self._impls:
                raise ValueError(f"{self.name}: backend {backend!r} registered twice")
            self._impls[backend] = fn
            return fn

        return deco

    @property
    def backends(self) -> tuple[str, ...]:
        return tuple(b for b in BACKENDS if b in self._impls)

    def select(self, device: Device, backend: str = "auto") -> str:
        """The backend that runs for ``device``; raises if ``backend`` cannot run there."""
        if backend == "auto":
            backend = "triton" if device.kind == "cuda" else "native"
        if backend not in BACKENDS:
            raise ValueError(f"backend must be 'auto' or one of {BACKENDS}, got {backend!r}")
        if backend not in self._impls:
            raise ValueError(f"{self.name} has no {backend!r} implementation (has {self.backends})")
        if backend == "native" and device.kind == "cuda":
            raise ValueError(
                f"{self.name}: the native backend runs on CPU memory, not {device.torch_device}"
            )
        if backend == "triton":
            if not triton_available():
                raise ImportError(
                    f"{self.name} on {device.torch_device or 'numpy'} needs Triton: "
                    "pip install 'rml_fast[gpu]' (or pass backend='reference')"
                )
            if device.kind != "cuda" and not (device.kind == "cpu" and triton_interpreting()):
                raise ValueError(
                    f"{self.name}: the triton backend needs CUDA tensors "
                    "(or CPU torch tensors with TRITON_INTERPRET=1)"
                )
        return backend

    def __call__(self, *args: Any, device: Device, backend: str = "auto", **kwargs: Any) -> Any:
        chosen = self.select(device, backend)
        return self._impls[chosen](*args, device=device, **kwargs)
