"""One torch thread, and the trained TinyVLM shared by the GTM tests (trained once, in seconds)."""

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
def trained_vlm(tmp_path_factory):
    """A TinyVLM trained on the digits (the defaults: seed 0, 600 steps of 32 images)."""
    from rml_fast.models.digits_vlm import train_digits_vlm

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        ckpt = tmp_path_factory.mktemp("gtm") / "vlm.pt"
        return train_digits_vlm(checkpoint=ckpt)
    finally:
        torch.set_num_threads(before)
