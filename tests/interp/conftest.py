"""One torch thread for these tests: the CI/dev machines have 2 busy cores, where torch's
OpenMP pool oversubscribes badly. The trained zoo fixtures live in tests/conftest.py."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
