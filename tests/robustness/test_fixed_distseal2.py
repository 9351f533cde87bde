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


def test_quantizer_and_ddpm_name_their_arguments():
    from rml_fast.watermark.distseal import StraightThroughQuantizer, TinyLatentDDPM

    with pytest.raises(ValueError, match="n_codes"):
        StraightThroughQuantizer.from_latents(torch.randn(1, 2, 2, 2), n_codes=5)
    with pytest.raises(ValueError, match="codebook"):
        StraightThroughQuantizer(torch.tensor([[float("nan")]]))
    g = TinyLatentDDPM(2, width=4, n_steps=5)
    with pytest.raises(ValueError, match=r"\bz_t\b"):
        g(torch.empty(1, 2, 4, 4, device="meta"), torch.tensor([1]))
    with pytest.raises(ValueError, match=r"\bt\b"):
        g(torch.zeros(1, 2, 4, 4), torch.tensor([7]))
    with pytest.raises(ValueError, match="size"):
        g.sample(1, (0, 2), generator=0)
