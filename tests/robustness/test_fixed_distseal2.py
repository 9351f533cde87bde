"""Regression tests for the fuzz-contract fixes of DistSeal's autoencoder (issue 25)."""

from __future__ import annotations

import pytest
import torch

from rml_fast.models.autoencoder import TinyAutoencoder
from rml_fast.watermark.distseal import LatentWatermarker


@pytest.fixture(scope="module")
def ae():
    return TinyAutoencoder(width=4, seed=0)


def test_encode_rejects_a_meta_tensor_naming_x(ae):
    with pytest.raises(ValueError, match=r"\bx\b.*meta"):
        ae.encode(torch.empty(1, 3, 8, 8, device="meta"))


def test_fit_rejects_a_meta_tensor_naming_images(ae):
    with pytest.raises(ValueError, match=r"\bimages\b.*meta"):
        ae.fit(torch.empty(4, 3, 8, 8, device="meta"), steps=1, progress=False)


def test_extract_rejects_a_meta_tensor_naming_x(ae):
    wm = LatentWatermarker(ae, nbits=4, width=4)
    with pytest.raises(ValueError, match=r"\bx\b.*meta"):
        wm.extract(torch.empty(1, 3, 8, 8, device="meta"))
