"""Image augmentations for training and attacking watermarks (DistSeal's augmentation layer).

DistSeal (arXiv 2601.16140) trains its extractor on augmented watermarked images
``X_phi(A(x_w))``: ``num_augs = 2`` operations per batch drawn uniformly from identity, JPEG
(quality 40-80), resize (x0.7-1.5), crop (x0.5-1.0 of the side), rotation (+-10 degrees), horizontal
flip, Gaussian blur (kernel 3-17), median filter (3), brightness / contrast / saturation
(x0.5-2), hue (+-0.1), grayscale, plus additive Gaussian noise here. Every function takes images
``x`` of shape (B, C, H, W) with values in [0, 1] and returns images in [0, 1] (crop and resize
change H and W; the extractor averages over space).

Differentiability: the non-differentiable ops (JPEG through Pillow, median filter) are
straight-through: the forward value is the real op's output ``y``, the gradient is the identity
(computed as ``y.detach() + (x - x.detach())``, so the forward value is ``y`` bit for bit). The
others are differentiable torch ops.

Not implemented: the perspective warp of the paper's list (left out; the other geometric ops
are here). :class:`Augmenter` draws the ops and their parameters once per call (per batch, not
per image).
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from rml_fast._validation import Interval, check_scalar
from rml_fast.models.autoencoder import _torch_generator, check_images

__all__ = [
    "OPS",
    "Augmenter",
    "brightness",
    "contrast",
    "crop",
    "gaussian_blur",
    "gaussian_noise",
    "grayscale",
    "hflip",
    "hue",
    "identity",
    "jpeg",
    "median_filter",
    "resize",
    "rotate",
    "saturation",
]


def _check_x(x: Any, name: str = "x") -> Tensor:
    """Validate a batch of images (B, C, H, W) in [0, 1]; a ``meta`` tensor is refused first."""
    if isinstance(x, Tensor) and x.device.type == "meta":
        raise ValueError(f"{name} must hold values, got a tensor on the 'meta' device")
    return check_images(x, name)


def _st(x: Tensor, y: Tensor) -> Tensor:
    """Straight-through: forward value ``y`` exactly, gradient identity w.r.t. ``x``."""
    return y.detach() + (x - x.detach())


def identity(x: Tensor) -> Tensor:
    """Return ``x`` itself (bitwise the input).

    Examples
    --------
    >>> x = torch.rand(1, 3, 8, 8); identity(x) is x
    True
    """
    _check_x(x, "x")
    return x


def jpeg(x: Tensor, quality: int = 50) -> Tensor:
    """JPEG compression through Pillow, straight-through.

    Each image is rounded to 8 bits (``round(255 x)``), saved by ``PIL.Image.save(format="JPEG",
    quality=quality)`` (RGB for 3 channels, ``"L"`` for 1), decoded and divided by 255.

    Parameters
    ----------
    x : Tensor of shape (B, 1|3, H, W), values in [0, 1]
    quality : int in [1, 100], default=50

    Returns
    -------
    Tensor, same shape and dtype: the decoded JPEG (gradient: identity).

    Examples
    --------
    >>> y = jpeg(torch.rand(2, 3, 16, 16), quality=80)
    >>> tuple(y.shape), bool(((y * 255) - (y * 255).round()).abs().max() < 1e-3)
    ((2, 3, 16, 16), True)
    """
    from PIL import Image

    _check_x(x, "x")
    if x.shape[1] not in (1, 3):
        raise ValueError(f"x must have 1 or 3 channels for JPEG, got shape {tuple(x.shape)}")
    q = int(check_scalar(quality, "quality", Interval("int", 1, 100)))
    arr = (x.detach().cpu().double() * 255.0).round().clamp(0, 255).to(torch.uint8).numpy()
    out = np.empty(arr.shape, dtype=np.float64)
    for i in range(arr.shape[0]):
        img = Image.fromarray(arr[i, 0]) if arr.shape[1] == 1 else Image.fromarray(
            arr[i].transpose(1, 2, 0))
        buf = io.BytesIO()
        img.save(buf, format="JPEG", quality=q)
        buf.seek(0)
        dec = np.asarray(Image.open(buf).convert("L" if arr.shape[1] == 1 else "RGB"))
        out[i] = dec[None] if arr.shape[1] == 1 else dec.transpose(2, 0, 1)
    y = torch.from_numpy(out / 255.0).to(dtype=x.dtype, device=x.device)
    return _st(x, y)


#: the largest output side :func:`resize` makes (larger requests are refused, not allocated)
_MAX_SIDE = 1 << 15


def resize(x: Tensor, scale: float = 0.5) -> Tensor:
    """Bilinear resize of both sides by ``scale`` (antialiased when shrinking).

    Parameters
    ----------
    x : Tensor of shape (B, C, H, W)
    scale : float > 0
        New side ``max(1, round(scale * H))`` x ``max(1, round(scale * W))``.

    Returns
    -------
    Tensor of shape (B, C, round(scale H), round(scale W))

    Examples
    --------
    >>> tuple(resize(torch.rand(1, 3, 32, 32), 0.5).shape)
    (1, 3, 16, 16)
    """
    _check_x(x, "x")
    s = float(check_scalar(scale, "scale", Interval("real", 0.0, None, "neither")))
    h, w = max(1, round(s * x.shape[2])), max(1, round(s * x.shape[3]))
    if max(h, w) > _MAX_SIDE:
        raise ValueError(
            f"scale gives an output of side {max(h, w)} for input shape {tuple(x.shape)}; "
            f"the largest side allowed is {_MAX_SIDE}"
        )
    if (h, w) == tuple(x.shape[2:]):
        return x
    return F.interpolate(x, size=(h, w), mode="bilinear", align_corners=False,
                         antialias=s < 1).clamp(0, 1)


def crop(x: Tensor, scale: float = 0.5, generator: Any = None, center: bool = False) -> Tensor:
    """Crop a window of side ``scale`` times the image's (same window for the whole batch).

    Parameters
    ----------
    x : Tensor of shape (B, C, H, W)
    scale : float in (0, 1]
        Relative side of the window (``scale = 0.5`` keeps a quarter of the area).
    generator : torch.Generator, int seed or None
        Draws the window position (ignored when ``center``).
    center : bool, default=False
        Take the central window.

    Returns
    -------
    Tensor of shape (B, C, round(scale H), round(scale W))

    Examples
    --------
    >>> x = torch.rand(1, 3, 8, 8)
    >>> bool((crop(x, 0.5, center=True) == x[:, :, 2:6, 2:6]).all())
    True
    """
    _check_x(x, "x")
    s = float(check_scalar(scale, "scale", Interval("real", 0.0, 1.0, "right")))
    H, W = x.shape[2], x.shape[3]
    h, w = max(1, round(s * H)), max(1, round(s * W))
    if center:
        r, c = (H - h) // 2, (W - w) // 2
    else:
        g = _torch_generator(generator, "generator")
        r = int(torch.randint(0, H - h + 1, (1,), generator=g))
        c = int(torch.randint(0, W - w + 1, (1,), generator=g))
    return x[:, :, r : r + h, c : c + w]


def rotate(x: Tensor, degrees: float = 10.0) -> Tensor:
    """Rotation by ``degrees`` about the centre (bilinear, zero fill), same shape.

    Examples
    --------
    >>> x = torch.rand(1, 3, 8, 8)
    >>> bool(torch.allclose(rotate(x, 0.0), x, atol=1e-6))
    True
    """
    _check_x(x, "x")
    a = math.radians(float(check_scalar(degrees, "degrees", Interval("real", None, None))))
    theta = torch.tensor([[math.cos(a), -math.sin(a), 0.0], [math.sin(a), math.cos(a), 0.0]],
                         dtype=x.dtype, device=x.device).expand(x.shape[0], 2, 3)
    grid = F.affine_grid(theta, list(x.shape), align_corners=False)
    return F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros",
                         align_corners=False).clamp(0, 1)


def hflip(x: Tensor) -> Tensor:
    """Horizontal flip (last axis reversed).

    Examples
    --------
    >>> hflip(torch.tensor([[[[0.0, 1.0]]]]))
    tensor([[[[1., 0.]]]])
    """
    _check_x(x, "x")
    return x.flip(-1)


def gaussian_blur(x: Tensor, kernel_size: int = 5, sigma: float | None = None) -> Tensor:
    """Separable Gaussian blur with reflect padding, same shape.

    Parameters
    ----------
    x : Tensor of shape (B, C, H, W)
    kernel_size : odd int >= 1
    sigma : float, optional
        Defaults to torchvision's ``0.3 ((k - 1) / 2 - 1) + 0.8``.

    Examples
    --------
    >>> x = torch.full((1, 1, 9, 9), 0.25)
    >>> bool(torch.allclose(gaussian_blur(x, 5), x))
    True
    """
    _check_x(x, "x")
    k = int(check_scalar(kernel_size, "kernel_size", Interval("int", 1, None)))
    if k % 2 == 0:
        raise ValueError(f"kernel_size must be odd, got {k}")
    if k == 1:
        return x
    sg = 0.3 * ((k - 1) * 0.5 - 1) + 0.8 if sigma is None else float(
        check_scalar(sigma, "sigma", Interval("real", 0.0, None, "neither")))
    t = torch.arange(k, dtype=x.dtype, device=x.device) - (k - 1) / 2
    g = torch.exp(-0.5 * (t / sg) ** 2)
    g = g / g.sum()
    C = x.shape[1]
    pad = k // 2
    mode = "reflect" if min(x.shape[2:]) > pad else "replicate"
    y = F.pad(x, (pad, pad, pad, pad), mode=mode)
    y = F.conv2d(y, g.view(1, 1, 1, k).expand(C, 1, 1, k), groups=C)
    y = F.conv2d(y, g.view(1, 1, k, 1).expand(C, 1, k, 1), groups=C)
    return y.clamp(0, 1)


def median_filter(x: Tensor, kernel_size: int = 3) -> Tensor:
    """Median filter (reflect padding), straight-through.

    Examples
    --------
    >>> x = torch.zeros(1, 1, 5, 5); x[0, 0, 2, 2] = 1.0
    >>> float(median_filter(x, 3).max())
    0.0
    """
    _check_x(x, "x")
    k = int(check_scalar(kernel_size, "kernel_size", Interval("int", 1, None)))
    if k % 2 == 0:
        raise ValueError(f"kernel_size must be odd, got {k}")
    pad = k // 2
    B, C, H, W = x.shape
    mode = "reflect" if min(H, W) > pad else "replicate"
    xp = F.pad(x.detach(), (pad, pad, pad, pad), mode=mode)
    patches = F.unfold(xp, k)  # (B, C*k*k, H*W)
    y = patches.view(B, C, k * k, H * W).median(dim=2).values.view(B, C, H, W)
    return _st(x, y)


def _gray(x: Tensor) -> Tensor:
    if x.shape[1] == 1:
        return x
    w = torch.tensor([0.299, 0.587, 0.114], dtype=x.dtype, device=x.device).view(1, 3, 1, 1)
    return (x * w).sum(1, keepdim=True)


def brightness(x: Tensor, factor: float = 1.5) -> Tensor:
    """Brightness: ``clamp(factor * x, 0, 1)``.

    Examples
    --------
    >>> brightness(torch.tensor([[[[0.2, 0.8]]]]), 1.5)
    tensor([[[[0.3000, 1.0000]]]])
    """
    _check_x(x, "x")
    f = float(check_scalar(factor, "factor", Interval("real", 0.0, None)))
    return (x * f).clamp(0, 1)


def contrast(x: Tensor, factor: float = 1.5) -> Tensor:
    """Contrast: blend with the mean grey level, ``clamp(mean + factor (x - mean))``.

    Examples
    --------
    >>> x = torch.rand(1, 3, 4, 4); bool(torch.allclose(contrast(x, 1.0), x))
    True
    """
    _check_x(x, "x")
    f = float(check_scalar(factor, "factor", Interval("real", 0.0, None)))
    m = _gray(x).mean(dim=(1, 2, 3), keepdim=True)
    return (m + f * (x - m)).clamp(0, 1)


def saturation(x: Tensor, factor: float = 1.5) -> Tensor:
    """Saturation: blend with the greyscale image, ``clamp(g + factor (x - g))``.

    Examples
    --------
    >>> x = torch.rand(1, 3, 4, 4); bool(torch.allclose(saturation(x, 1.0), x))
    True
    """
    _check_x(x, "x")
    f = float(check_scalar(factor, "factor", Interval("real", 0.0, None)))
    g = _gray(x)
    return (g + f * (x - g)).clamp(0, 1)


def grayscale(x: Tensor) -> Tensor:
    """Greyscale (ITU-R 601 luma) repeated over the channels, same shape.

    Examples
    --------
    >>> grayscale(torch.ones(1, 3, 2, 2)).shape
    torch.Size([1, 3, 2, 2])
    """
    _check_x(x, "x")
    return _gray(x).expand_as(x).clone()


def hue(x: Tensor, shift: float = 0.1) -> Tensor:
    """Hue rotation by ``shift`` turns (in [-0.5, 0.5]) in the YIQ chroma plane (RGB only).

    Examples
    --------
    >>> x = torch.rand(1, 3, 4, 4); bool(torch.allclose(hue(x, 0.0), x, atol=1e-6))
    True
    """
    _check_x(x, "x")
    if x.shape[1] != 3:
        raise ValueError(f"x must be RGB for hue, got shape {tuple(x.shape)}")
    h = float(check_scalar(shift, "shift", Interval("real", -0.5, 0.5)))
    to_yiq = torch.tensor([[0.299, 0.587, 0.114], [0.596, -0.274, -0.322],
                           [0.211, -0.523, 0.312]], dtype=torch.float64)
    a = 2 * math.pi * h
    rot = torch.tensor([[1.0, 0.0, 0.0], [0.0, math.cos(a), -math.sin(a)],
                        [0.0, math.sin(a), math.cos(a)]], dtype=torch.float64)
    M = (torch.linalg.inv(to_yiq) @ rot @ to_yiq).to(x.dtype).to(x.device)
    return torch.einsum("ij,bjhw->bihw", M, x).clamp(0, 1)


def gaussian_noise(x: Tensor, std: float = 0.05, generator: Any = None) -> Tensor:
    """Additive Gaussian noise ``clamp(x + std * eps, 0, 1)``.

    Examples
    --------
    >>> x = torch.rand(1, 3, 4, 4); bool(torch.equal(gaussian_noise(x, 0.0, generator=0), x))
    True
    """
    _check_x(x, "x")
    s = float(check_scalar(std, "std", Interval("real", 0.0, None)))
    g = _torch_generator(generator, "generator")
    eps = torch.randn(x.shape, generator=g, dtype=x.dtype).to(x.device)
    return (x + s * eps).clamp(0, 1)


#: the names :class:`Augmenter` draws from with ``ops="all"``
OPS = ("identity", "jpeg", "resize", "crop", "rotate", "hflip", "blur", "median", "brightness",
       "contrast", "saturation", "hue", "grayscale", "noise")


class Augmenter:
    """Random augmentation layer ``A``: ``num_augs`` ops drawn uniformly, applied in sequence.

    Parameter ranges (the paper's): JPEG quality U{40..80}; resize x U[0.7, 1.5]; crop side
    x U[0.5, 1.0]; rotation U[-10, 10] degrees; blur kernel odd in [3, 17] (capped at the image
    side); median 3; brightness / contrast / saturation x U[0.5, 2]; hue U[-0.1, 0.1]; noise std
    U[0, 0.08] (ours). One draw per call, applied to the whole batch.

    Parameters
    ----------
    ops : "all" or sequence of str, default="all"
        Names from :data:`OPS`.
    num_augs : int, default=2
        Ops per call (drawn with replacement).
    generator : torch.Generator, int seed or None
        Draws the ops and their parameters.

    Examples
    --------
    >>> aug = Augmenter(ops=["jpeg", "hflip"], num_augs=2, generator=0)
    >>> y, names = aug(torch.rand(2, 3, 16, 16))
    >>> tuple(y.shape), len(names)
    ((2, 3, 16, 16), 2)
    """

    def __init__(self, ops: str | Sequence[str] = "all", num_augs: int = 2,
                 generator: Any = None) -> None:
        names = OPS if ops == "all" else tuple(ops)
        if isinstance(ops, str) and ops != "all":
            raise ValueError(f"ops must be 'all' or a sequence of names from {OPS}, got {ops!r}")
        bad = [n for n in names if n not in OPS]
        if bad or not names:
            raise ValueError(f"ops must be names from {OPS}, got {list(names)!r}")
        self.ops = names
        self.num_augs = int(check_scalar(num_augs, "num_augs", Interval("int", 0, None)))
        self.generator = _torch_generator(generator, "generator")

    def _u(self, lo: float, hi: float) -> float:
        return lo + (hi - lo) * float(torch.rand((), generator=self.generator, dtype=torch.float64))

    def _apply(self, name: str, x: Tensor) -> tuple[Tensor, str]:
        g = self.generator
        if name == "identity":
            return x, "identity"
        if name == "jpeg":
            q = int(torch.randint(40, 81, (), generator=g))
            return jpeg(x, q), f"jpeg({q})"
        if name == "resize":
            s = self._u(0.7, 1.5)
            return resize(x, s), f"resize({s:.2f})"
        if name == "crop":
            s = self._u(0.5, 1.0)
            return crop(x, s, generator=g), f"crop({s:.2f})"
        if name == "rotate":
            d = self._u(-10.0, 10.0)
            return rotate(x, d), f"rotate({d:.1f})"
        if name == "hflip":
            return hflip(x), "hflip"
        if name == "blur":
            kmax = max(3, min(17, (min(x.shape[2:]) - 1) // 2 * 2 + 1))
            k = 3 + 2 * int(torch.randint(0, (kmax - 3) // 2 + 1, (), generator=g))
            return gaussian_blur(x, k), f"blur({k})"
        if name == "median":
            return median_filter(x, 3), "median(3)"
        if name in ("brightness", "contrast", "saturation"):
            f = self._u(0.5, 2.0)
            fn = {"brightness": brightness, "contrast": contrast, "saturation": saturation}[name]
            return fn(x, f), f"{name}({f:.2f})"
        if name == "hue":
            h = self._u(-0.1, 0.1)
            return (hue(x, h) if x.shape[1] == 3 else x), f"hue({h:.3f})"
        if name == "grayscale":
            return grayscale(x), "grayscale"
        s = self._u(0.0, 0.08)
        return gaussian_noise(x, s, generator=g), f"noise({s:.3f})"

    def __call__(self, x: Tensor) -> tuple[Tensor, list[str]]:
        """Apply ``num_augs`` random ops to the batch ``x`` (B, C, H, W) in [0, 1].

        Returns
        -------
        (Tensor, list of str)
            The augmented batch (H, W may change) and the ops applied, with their parameters.

        Examples
        --------
        >>> x = torch.rand(1, 3, 8, 8)
        >>> y, names = Augmenter(ops=["identity"], generator=0)(x)
        >>> y is x, names
        (True, ['identity', 'identity'])
        """
        _check_x(x, "x")
        names = []
        for _ in range(self.num_augs):
            i = int(torch.randint(0, len(self.ops), (), generator=self.generator))
            x, nm = self._apply(self.ops[i], x)
            names.append(nm)
        return x, names
