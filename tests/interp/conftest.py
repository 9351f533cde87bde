"""Shared fixtures: one torch thread (the CI/dev machines have 2 busy cores, where torch's
OpenMP pool oversubscribes badly) and an isolated checkpoint cache for trained tiny models."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def zoo_cache(tmp_path_factory):
    """RML_FAST_CACHE pointed at a session temp dir while a zoo model is trained (one path for
    the whole session, so tests/models and tests/interp train each zoo model once)."""
    path = tmp_path_factory.getbasetemp() / "rml_fast_zoo_cache"
    path.mkdir(exist_ok=True)
    return path


def _trained(name, cache):
    import os

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
