"""Test-session setup: Triton runs in its CPU interpreter when there is no CUDA device.

``TRITON_INTERPRET`` must be set before any ``@triton.jit`` function is defined, so it is
set here, before test modules import the kernels.
"""

from __future__ import annotations

import os

import pytest


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


HAS_CUDA = _cuda_available()
if not HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if HAS_CUDA:
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)


# --- trained tiny-transformer zoo models shared by tests/models and tests/interp -------------


@pytest.fixture(scope="session")
def zoo_cache(tmp_path_factory):
    """RML_FAST_CACHE pointed at a session temp dir while a zoo model is trained (one path for
    the whole session, so tests/models and tests/interp train each zoo model once)."""
    path = tmp_path_factory.getbasetemp() / "rml_fast_zoo_cache"
    path.mkdir(exist_ok=True)
    return path


def _trained(name, cache):
    import torch

    from rml_fast.models import tiny_model

    old = os.environ.get("RML_FAST_CACHE")
    os.environ["RML_FAST_CACHE"] = str(cache)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # session fixtures run before the module-scoped thread fixture
    try:
        return tiny_model(name, progress=False)
    finally:
        torch.set_num_threads(threads)
        if old is None:
            del os.environ["RML_FAST_CACHE"]
        else:
            os.environ["RML_FAST_CACHE"] = old


@pytest.fixture(scope="session")
def induction_small(zoo_cache):
    """(model, task) of the zoo's 'induction-small' (2L attention-only, trained in seconds)."""
    return _trained("induction-small", zoo_cache)


@pytest.fixture(scope="session")
def ioi_small(zoo_cache):
    """(model, task) of the zoo's 'ioi-small' (2L4H with MLPs, ~10 s)."""
    return _trained("ioi-small", zoo_cache)
