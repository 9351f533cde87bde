"""The augmentation layer: invariants, Pillow JPEG, straight-through gradients, closed forms."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from PIL import Image

from rml_fast.watermark import augment as A


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _images(b=3, c=3, h=32, w=24, seed=0):
    return torch.rand(b, c, h, w, generator=torch.Generator().manual_seed(seed))


def test_identity_returns_the_input_bitwise():
    x = _images()
    before = x.clone()
    assert A.identity(x) is x
    y, names = A.Augmenter(ops=["identity"], num_augs=3, generator=0)(x)
    assert y is x and names == ["identity"] * 3
    assert torch.equal(x, before)


@pytest.mark.parametrize("quality", [30, 50, 80])
@pytest.mark.parametrize("c", [1, 3])
def test_jpeg_equals_pil_jpeg_at_the_same_quality(quality, c):
    x = _images(2, c, 32, 40, seed=quality)
    y = A.jpeg(x, quality)
    for i in range(2):
        arr = (x[i].double() * 255).round().clamp(0, 255).to(torch.uint8).numpy()
        img = Image.fromarray(arr[0] if c == 1 else arr.transpose(1, 2, 0))
        buf = io.BytesIO()
        img.save(buf, format="JPEG", quality=quality)
        ref = np.asarray(Image.open(io.BytesIO(buf.getvalue()))).astype(np.float64) / 255
        ref = ref[None] if c == 1 else ref.transpose(2, 0, 1)
        np.testing.assert_allclose(y[i].double().numpy(), ref, atol=1e-7)
    assert not torch.equal(y, x)  # it did compress


@pytest.mark.parametrize("op", [lambda x: A.jpeg(x, 50), lambda x: A.median_filter(x, 3)])
def test_straight_through_ops_have_identity_gradient(op):
    x = _images(2, 3, 16, 16).requires_grad_(True)
    w = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(1))
    (op(x) * w).sum().backward()
    assert torch.equal(x.grad, w)


def test_median_filter_matches_scipy():
    from scipy.ndimage import median_filter

    x = _images(1, 1, 12, 12)
    ours = A.median_filter(x, 3)[0, 0].numpy()
    ref = median_filter(x[0, 0].numpy(), size=3, mode="mirror")
    np.testing.assert_allclose(ours, ref, atol=0)


def test_blur_preserves_constants_and_matches_closed_form_kernel():
    x = torch.full((1, 3, 11, 11), 0.3)
    torch.testing.assert_close(A.gaussian_blur(x, 5), x)
    d = torch.zeros(1, 1, 11, 11)
    d[0, 0, 5, 5] = 1.0
    out = A.gaussian_blur(d, 5, sigma=1.0)[0, 0]
    t = torch.arange(5.0) - 2
    g = torch.exp(-0.5 * t**2)
    g = g / g.sum()
    torch.testing.assert_close(out[3:8, 3:8], torch.outer(g, g), atol=1e-6, rtol=1e-5)


def test_geometric_ops_shapes_and_values():
    x = _images(2, 3, 32, 24)
    assert tuple(A.resize(x, 0.5).shape) == (2, 3, 16, 12)
    assert tuple(A.resize(x, 1.5).shape) == (2, 3, 48, 36)
    c = A.crop(x, 0.5, generator=3)
    assert tuple(c.shape) == (2, 3, 16, 12)
    # the crop is a window of x
    found = any(torch.equal(c, x[:, :, r : r + 16, s : s + 12]) for r in range(17) for s in range(13))
    assert found
    assert torch.equal(A.hflip(A.hflip(x)), x)
    r4 = A.rotate(x[:, :, :24, :24], 90.0)
    torch.testing.assert_close(r4, torch.rot90(x[:, :, :24, :24], 1, dims=(2, 3)), atol=1e-5, rtol=0)


def test_photometric_closed_forms():
    x = _images(2, 3, 8, 8)
    torch.testing.assert_close(A.brightness(x, 0.5), x * 0.5)
    g = A.grayscale(x)
    torch.testing.assert_close(g[:, 0], 0.299 * x[:, 0] + 0.587 * x[:, 1] + 0.114 * x[:, 2])
    torch.testing.assert_close(A.saturation(x, 0.0), g)
    torch.testing.assert_close(A.hue(g, 0.07), g, atol=1e-5, rtol=0)  # grey has no hue
    torch.testing.assert_close(A.contrast(x, 0.0), g.mean(dim=(1, 2, 3), keepdim=True).expand_as(x))
    n1 = A.gaussian_noise(x, 0.05, generator=4)
    n2 = A.gaussian_noise(x, 0.05, generator=4)
    assert torch.equal(n1, n2) and not torch.equal(n1, x)


def test_augmenter_is_reproducible_from_its_seed():
    x = _images(2, 3, 32, 32)
    a1, n1 = A.Augmenter(num_augs=2, generator=5)(x)
    a2, n2 = A.Augmenter(num_augs=2, generator=5)(x)
    assert n1 == n2 and torch.equal(a1, a2)
    names = set()
    aug = A.Augmenter(generator=0)
    for _ in range(40):
        y, nm = aug(x)
        names.update(s.split("(")[0] for s in nm)
        assert y.min() >= 0 and y.max() <= 1
    assert len(names) >= 10


def test_bad_input_names_the_argument():
    with pytest.raises(ValueError, match="x must have values in"):
        A.jpeg(torch.full((1, 3, 8, 8), 1.5))
    with pytest.raises(ValueError, match="x must have shape"):
        A.resize(torch.rand(3, 8, 8))
    with pytest.raises(TypeError, match=r"x must be a torch\.Tensor"):
        A.hflip(np.zeros((1, 3, 8, 8)))
    with pytest.raises(ValueError, match="quality"):
        A.jpeg(torch.rand(1, 3, 8, 8), 0)
    with pytest.raises(ValueError, match="kernel_size must be odd"):
        A.gaussian_blur(torch.rand(1, 3, 8, 8), 4)
    with pytest.raises(ValueError, match="ops"):
        A.Augmenter(ops=["jpeg", "sharpen"])
