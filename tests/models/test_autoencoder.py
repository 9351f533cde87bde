"""TinyAutoencoder and the real-image patches it trains on."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rml_fast.models.autoencoder import TinyAutoencoder, image_patches


@pytest.fixture(scope="module")
def patches():
    return image_patches(256, 16, source="mixed", rng=0)


def test_image_patches_are_real_crops_and_seeded():
    from sklearn.datasets import load_sample_images

    x = image_patches(6, 12, rng=3)
    assert x.shape == (6, 3, 12, 12) and x.dtype == torch.float32
    assert torch.equal(x, image_patches(6, 12, rng=3))
    assert not torch.equal(x, image_patches(6, 12, rng=4))
    # every photo patch is a window (possibly mirrored) of one of the two photographs
    photos = [np.asarray(im, dtype=np.float32) / 255 for im in load_sample_images().images]
    p = x[0].numpy().transpose(1, 2, 0)
    hits = 0
    for img in photos:
        for cand in (p, p[:, ::-1]):
            rows, cols = np.nonzero((img == cand[0, 0]).all(axis=2))
            hits += any(np.array_equal(img[r : r + 12, c : c + 12], cand)
                        for r, c in zip(rows, cols, strict=True))
    assert hits >= 1
    d = image_patches(4, 16, source="digits", rng=0)
    assert torch.equal(d[:, 0], d[:, 1]) and torch.equal(d[:, 1], d[:, 2])
    assert d.min() >= 0 and d.max() <= 1


def test_shapes_and_range():
    ae = TinyAutoencoder(width=8, latent_channels=3, seed=1)
    x = torch.rand(2, 3, 24, 16)
    z = ae.encode(x)
    assert z.shape == (2, 3, 6, 4)
    y = ae.decode(z)
    assert y.shape == x.shape and y.min() >= 0 and y.max() <= 1
    assert torch.equal(TinyAutoencoder(width=8, latent_channels=3, seed=1).encode(x), z)


def test_training_reduces_reconstruction_error_and_is_seeded(patches):
    held = image_patches(32, 16, rng=9)
    ae = TinyAutoencoder(width=8, seed=0)
    with torch.no_grad():
        before = ((ae(held) - held) ** 2).mean().item()
    ae.fit(patches, steps=40, batch_size=16, lr=3e-3, progress=False)
    with torch.no_grad():
        after = ((ae(held) - held) ** 2).mean().item()
    assert after < 0.5 * before
    assert np.mean(ae.losses_[-10:]) < np.mean(ae.losses_[:10])


def test_checkpoint_resume_gives_the_uninterrupted_result(patches, tmp_path):
    kw = {"steps": 12, "batch_size": 8, "lr": 3e-3, "progress": False}
    full = TinyAutoencoder(width=8, seed=2).fit(patches, **kw)
    ck = tmp_path / "ae.pt"
    TinyAutoencoder(width=8, seed=2).fit(patches, checkpoint=ck, stop_after=5, **kw)
    resumed = TinyAutoencoder(width=8, seed=2).fit(patches, checkpoint=ck, **kw)
    assert len(resumed.losses_) == 12
    np.testing.assert_allclose(resumed.losses_, full.losses_, rtol=1e-4)
    for a, b in zip(full.parameters(), resumed.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
    with pytest.raises(ValueError, match="checkpoint"):
        TinyAutoencoder(width=8, seed=2).fit(patches, checkpoint=ck, steps=13, batch_size=8,
                                             progress=False)


def test_bad_input_names_the_argument():
    ae = TinyAutoencoder(width=8)
    with pytest.raises(ValueError, match="x must have values in"):
        ae.encode(torch.full((1, 3, 8, 8), 2.0))
    with pytest.raises(ValueError, match="divisible by 4"):
        ae.encode(torch.rand(1, 3, 10, 8))
    with pytest.raises(ValueError, match="3 channels"):
        ae.encode(torch.rand(1, 1, 8, 8))
    with pytest.raises(TypeError, match=r"x must be a torch\.Tensor"):
        ae.encode(np.zeros((1, 3, 8, 8), dtype=np.float32))
    with pytest.raises(ValueError, match="z must be a tensor of shape"):
        ae.decode(torch.zeros(1, 3, 2, 2))
    with pytest.raises(ValueError, match="images must have shape"):
        ae.fit(torch.rand(3, 8, 8))
    with pytest.raises(ValueError, match="steps"):
        ae.fit(torch.rand(2, 3, 8, 8), steps=0)
    with pytest.raises(ValueError, match="source"):
        image_patches(2, source="imagenet")
