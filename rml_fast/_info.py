"""``backend_info()``: what this installation of rml_fast runs on."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import pkgutil
import platform
from typing import Any


def _dist_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def backend_info() -> dict[str, Any]:
    """Describe the build and the devices rml_fast can dispatch to.

    Imports torch (to query devices) but never triton: Triton's presence is read from the
    installed distribution metadata.

    Returns
    -------
    info : dict
        ``version``, ``python``, ``platform``, ``cpu_count``; ``native`` (a dict with
        ``built``, ``compiler``, ``cxx_flags``, ``build_type``, ``openmp``,
        ``openmp_max_threads``); ``torch`` (``version``, ``cuda_available``, ``devices``,
        ``num_threads``) or None; ``triton`` (``installed``, ``version``, ``interpret``).

    Examples
    --------
    >>> import rml_fast
    >>> info = rml_fast.backend_info()
    >>> info["native"]["built"]
    True
    """
    from rml_fast import __version__
    from rml_fast._native import _C

    native = {"built": True, **dict(_C.build_info())}
    torch_info: dict[str, Any] | None = None
    if importlib.util.find_spec("torch") is not None:
        import torch

        cuda = bool(torch.cuda.is_available())
        torch_info = {
            "version": torch.__version__,
            "cuda_available": cuda,
            "devices": (
                [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
                if cuda
                else []
            ),
            "num_threads": torch.get_num_threads(),
        }
    return {
        "version": __version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "native": native,
        "torch": torch_info,
        "triton": {
            "installed": importlib.util.find_spec("triton") is not None,
            "version": _dist_version("triton"),
            "interpret": os.environ.get("TRITON_INTERPRET", "0") == "1",
        },
    }


def public_module_names() -> list[str]:
    """Sorted names of rml_fast's public modules (no dotted component after ``rml_fast``
    starts with ``_``), found without importing them; the package itself included."""
    import rml_fast

    names = ["rml_fast"]
    for info in pkgutil.walk_packages(rml_fast.__path__, "rml_fast."):
        if not any(part.startswith("_") for part in info.name.split(".")[1:]):
            names.append(info.name)
    return sorted(names)
