"""A tiny convolutional autoencoder (downsampling factor f=4) trained on real image patches.

The project's shared latent autoencoder: :class:`TinyAutoencoder` maps images
``x`` of shape (B, c, H, W) in [0, 1] (H, W multiples of 4) to latents ``z = Enc(x)`` of shape
(B, C, H/4, W/4) and back, ``x_hat = Dec(z)`` in [0, 1] (a sigmoid output). It stands in for the
VAE / DC-AE latent spaces of latent generative models at CPU scale (the DistSeal latent
watermark of :mod:`rml_fast.watermark.distseal` is trained in its latent space).

Data: :func:`image_patches` cuts random square patches from scikit-learn's bundled real images,
the two photographs of ``load_sample_images`` (427 x 640 RGB) and the 1,797 handwritten digits of
``load_digits`` (8 x 8, upsampled); nothing is downloaded.

Training (:meth:`TinyAutoencoder.fit`) minimises ``L1(Dec(Enc(x)), x) + MSE(Dec(Enc(x)), x)``
with Adam, is deterministic from its seed, shows a tqdm bar (``progress=True``) and can be stopped
(``stop_after``) and resumed from a checkpoint file with the result of an uninterrupted run.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from rml_fast._checkpoint import load_checkpoint, save_checkpoint
from rml_fast._validation import Interval, check_scalar

__all__ = ["TinyAutoencoder", "image_patches"]


def _torch_generator(seed: Any, name: str = "seed") -> torch.Generator:
    if isinstance(seed, torch.Generator):
        return seed
    if seed is None:
        return torch.Generator().manual_seed(int(np.random.default_rng().integers(0, 2**62)))
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise TypeError(f"{name} must be a non-negative int, a torch.Generator or None, got {seed!r}")
    return torch.Generator().manual_seed(int(seed))


@lru_cache(maxsize=1)
def _sources() -> dict[str, list[np.ndarray]]:
    from sklearn.datasets import load_digits, load_sample_images

    photos = [np.asarray(im, dtype=np.float32) / 255.0 for im in load_sample_images().images]
    digits = load_digits().images.astype(np.float32) / 16.0
    return {"photos": photos, "digits": list(digits)}


def image_patches(
    n: int,
    size: int = 32,
    *,
    source: str = "photos",
    rng: Any = None,
    dtype: torch.dtype = torch.float32,
) -> Tensor:
    """Random real image patches in [0, 1] from scikit-learn's bundled images.

    Parameters
    ----------
    n : int
        Number of patches.
    size : int, default=32
        Side of the square patches in pixels.
    source : {"photos", "digits", "mixed"}, default="photos"
        ``"photos"``: random crops (with random horizontal flips) of the two RGB photographs of
        ``sklearn.datasets.load_sample_images``; ``"digits"``: random ``load_digits`` images,
        bilinearly upsampled to ``size`` and repeated over the three channels; ``"mixed"``: half
        of each.
    rng : numpy Generator, int seed or None
        Randomness of the crop positions, flips and digit choice.
    dtype : torch.dtype, default=torch.float32

    Returns
    -------
    Tensor of shape (n, 3, size, size)
        RGB patches in [0, 1].

    Examples
    --------
    >>> x = image_patches(4, 32, rng=0)
    >>> tuple(x.shape), bool(x.min() >= 0) and bool(x.max() <= 1)
    ((4, 3, 32, 32), True)
    """
    from rml_fast._validation import check_rng

    n = int(check_scalar(n, "n", Interval("int", 1, None)))
    size = int(check_scalar(size, "size", Interval("int", 4, 427)))
    if source not in ("photos", "digits", "mixed"):
        raise ValueError(f"source must be 'photos', 'digits' or 'mixed', got {source!r}")
    gen = check_rng(rng)
    src = _sources()
    n_digits = {"photos": 0, "digits": n, "mixed": n // 2}[source]
    out = np.empty((n, 3, size, size), dtype=np.float32)
    for i in range(n - n_digits):
        img = src["photos"][int(gen.integers(0, len(src["photos"])))]
        r = int(gen.integers(0, img.shape[0] - size + 1))
        c = int(gen.integers(0, img.shape[1] - size + 1))
        patch = img[r : r + size, c : c + size].transpose(2, 0, 1)
        out[i] = patch[:, :, ::-1] if gen.random() < 0.5 else patch
    if n_digits:
        idx = gen.integers(0, len(src["digits"]), n_digits)
        d = torch.from_numpy(np.stack([src["digits"][j] for j in idx]))[:, None]
        up = torch.nn.functional.interpolate(d, size=(size, size), mode="bilinear",
                                             align_corners=False).clamp(0, 1)
        out[n - n_digits :] = up.expand(-1, 3, -1, -1).numpy()
    return torch.from_numpy(out).to(dtype)


def check_images(x: Any, name: str = "x", channels: int | None = None, multiple: int = 1) -> Tensor:
    """Validate a batch of images (B, c, H, W) with values in [0, 1]; returns it as a tensor."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of shape (B, C, H, W), got {type(x).__name__}")
    if x.device.type == "meta":
        raise ValueError(f"{name} must hold data (a CPU tensor), got a tensor on the meta device")
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor in [0, 1], got dtype {x.dtype}")
    if x.ndim != 4:
        raise ValueError(f"{name} must have shape (B, C, H, W), got shape {tuple(x.shape)}")
    if channels is not None and x.shape[1] != channels:
        raise ValueError(f"{name} must have {channels} channels, got shape {tuple(x.shape)}")
    if x.shape[0] == 0:
        raise ValueError(f"{name} must hold at least one image, got shape {tuple(x.shape)}")
    if multiple > 1 and (x.shape[2] % multiple or x.shape[3] % multiple):
        raise ValueError(
            f"{name} must have height and width divisible by {multiple}, got shape {tuple(x.shape)}"
        )
    with torch.no_grad():
        if not bool(torch.isfinite(x).all()):
            raise ValueError(f"{name} must be finite, got NaN or infinite values")
        if bool((x < 0).any()) or bool((x > 1).any()):
            raise ValueError(
                f"{name} must have values in [0, 1], got range [{float(x.min()):.4g}, "
                f"{float(x.max()):.4g}]"
            )
    return x


class TinyAutoencoder(nn.Module):
    """Convolutional autoencoder with downsampling factor 4: ``z = Enc(x)``, ``x_hat = Dec(z)``.

    Encoder: conv3x3 -> (stride-2 conv4x4, conv3x3) x 2 -> conv1x1 to ``latent_channels``
    (SiLU between layers); decoder: the mirror with transposed convolutions and a final sigmoid,
    so that ``Dec(z)`` lies in [0, 1].

    Parameters
    ----------
    in_channels : int, default=3
        Image channels ``c``.
    latent_channels : int, default=4
        Latent channels ``C``.
    width : int, default=16
        Channels of the first stage (the second has ``2 * width``).
    seed : int, default=0
        Seeds the initialisation.

    Attributes
    ----------
    encoder, decoder : nn.Module
        The two halves; ``decoder`` alone maps (B, C, h, w) latents to (B, c, 4h, 4w) images.
    factor : int
        The spatial downsampling factor, 4.
    losses_ : list of float
        Training loss per step (after :meth:`fit`).

    Examples
    --------
    >>> ae = TinyAutoencoder(seed=0)
    >>> z = ae.encode(torch.rand(2, 3, 32, 32))
    >>> tuple(z.shape), tuple(ae.decode(z).shape)
    ((2, 4, 8, 8), (2, 3, 32, 32))
    """

    factor = 4

    def __init__(self, in_channels: int = 3, latent_channels: int = 4, width: int = 16,
                 seed: int = 0) -> None:
        super().__init__()
        for name, v in (("in_channels", in_channels), ("latent_channels", latent_channels),
                        ("width", width)):
            check_scalar(v, name, Interval("int", 1, None))
        check_scalar(seed, "seed", Interval("int", 0, None))
        self.in_channels, self.latent_channels, self.width = in_channels, latent_channels, width
        self.seed = seed
        w, w2 = width, 2 * width
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.encoder = nn.Sequential(
                nn.Conv2d(in_channels, w, 3, padding=1), nn.SiLU(),
                nn.Conv2d(w, w, 4, stride=2, padding=1), nn.SiLU(),
                nn.Conv2d(w, w2, 3, padding=1), nn.SiLU(),
                nn.Conv2d(w2, w2, 4, stride=2, padding=1), nn.SiLU(),
                nn.Conv2d(w2, latent_channels, 1),
            )
            self.decoder = nn.Sequential(
                nn.Conv2d(latent_channels, w2, 3, padding=1), nn.SiLU(),
                nn.ConvTranspose2d(w2, w, 4, stride=2, padding=1), nn.SiLU(),
                nn.Conv2d(w, w, 3, padding=1), nn.SiLU(),
                nn.ConvTranspose2d(w, w, 4, stride=2, padding=1), nn.SiLU(),
                nn.Conv2d(w, in_channels, 3, padding=1), nn.Sigmoid(),
            )
        self.losses_: list[float] = []

    def encode(self, x: Tensor) -> Tensor:
        """Latents ``z = Enc(x)``.

        Parameters
        ----------
        x : Tensor of shape (B, c, H, W)
            Images in [0, 1]; H and W divisible by 4.

        Returns
        -------
        Tensor of shape (B, C, H/4, W/4)

        Examples
        --------
        >>> tuple(TinyAutoencoder().encode(torch.rand(1, 3, 16, 16)).shape)
        (1, 4, 4, 4)
        """
        check_images(x, "x", self.in_channels, self.factor)
        return self.encoder(x.to(self._dtype()))

    def decode(self, z: Tensor) -> Tensor:
        """Images ``x_hat = Dec(z)`` in [0, 1].

        Parameters
        ----------
        z : Tensor of shape (B, C, h, w)

        Returns
        -------
        Tensor of shape (B, c, 4h, 4w)

        Examples
        --------
        >>> tuple(TinyAutoencoder().decode(torch.zeros(1, 4, 4, 4)).shape)
        (1, 3, 16, 16)
        """
        if not isinstance(z, Tensor) or z.ndim != 4 or z.shape[1] != self.latent_channels:
            shape = tuple(z.shape) if isinstance(z, Tensor) else type(z).__name__
            raise ValueError(f"z must be a tensor of shape (B, {self.latent_channels}, h, w), "
                             f"got {shape}")
        return self.decoder(z.to(self._dtype()))

    def forward(self, x: Tensor) -> Tensor:
        """Reconstruction ``Dec(Enc(x))`` of images (B, c, H, W) in [0, 1], same shape.

        Examples
        --------
        >>> tuple(TinyAutoencoder()(torch.rand(1, 3, 8, 8)).shape)
        (1, 3, 8, 8)
        """
        return self.decode(self.encode(x))

    def _dtype(self) -> torch.dtype:
        return next(self.parameters()).dtype

    def fit(
        self,
        images: Tensor,
        *,
        steps: int = 1500,
        batch_size: int = 64,
        lr: float = 2e-3,
        seed: int = 0,
        checkpoint: str | os.PathLike[str] | None = None,
        checkpoint_every: int = 250,
        stop_after: int | None = None,
        progress: bool = True,
    ) -> TinyAutoencoder:
        """Train on ``images`` with ``L1 + MSE`` reconstruction loss (Adam, cosine lr decay).

        Parameters
        ----------
        images : Tensor of shape (N, c, H, W)
            Training images in [0, 1] (e.g. :func:`image_patches`), H and W divisible by 4.
        steps : int, default=1500
            Optimiser steps on random mini-batches of ``batch_size`` images.
        batch_size : int, default=64
        lr : float, default=2e-3
            Peak learning rate (cosine-decayed to 5% of it).
        seed : int, default=0
            Seeds the batches.
        checkpoint : path, optional
            Saved every ``checkpoint_every`` steps and at the end; an existing file with the
            same hyper-parameters resumes the run, to the weights an uninterrupted run gives.
        checkpoint_every : int, default=250
        stop_after : int, optional
            Stop (and checkpoint) after this many total steps, to be resumed later.
        progress : bool, default=True
            Show a tqdm bar with the running loss.

        Returns
        -------
        self

        Examples
        --------
        >>> ae = TinyAutoencoder(width=8).fit(image_patches(32, 16, rng=0), steps=3,
        ...                                   batch_size=8, progress=False)
        >>> len(ae.losses_)
        3
        """
        check_images(images, "images", self.in_channels, self.factor)
        steps = int(check_scalar(steps, "steps", Interval("int", 1, None)))
        batch_size = int(check_scalar(batch_size, "batch_size", Interval("int", 1, None)))
        lr = float(check_scalar(lr, "lr", Interval("real", 0.0, None, "neither")))
        check_scalar(seed, "seed", Interval("int", 0, None))
        check_scalar(checkpoint_every, "checkpoint_every", Interval("int", 1, None))
        hp = {"steps": steps, "batch_size": batch_size, "lr": lr, "seed": seed,
              "n_images": int(images.shape[0]), "shape": tuple(images.shape[1:]),
              "arch": (self.in_channels, self.latent_channels, self.width, self.seed)}
        data = images.detach().to(self._dtype())
        opt = torch.optim.Adam(self.parameters(), lr=lr)
        sched = torch.optim.lr_scheduler.LambdaLR(
            opt, lambda i: 0.05 + 0.95 * 0.5 * (1 + np.cos(np.pi * min(i, steps) / steps)))
        gen = torch.Generator().manual_seed(seed)
        losses: list[float] = []
        start = 0
        path = Path(checkpoint) if checkpoint is not None else None
        state = (load_checkpoint(path, kind="TinyAutoencoder.fit", fingerprint=hp)
                 if path is not None else None)
        if state is not None:
            self.load_state_dict(state["model"])
            opt.load_state_dict(state["opt"])
            sched.load_state_dict(state["sched"])
            gen.set_state(state["gen"])
            losses, start = list(state["losses"]), int(state["step"])
        end = steps if stop_after is None else min(steps, int(stop_after))
        bar = None
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=steps, initial=start, desc="TinyAutoencoder")
        self.train()
        for step in range(start, end):
            idx = torch.randint(0, len(data), (batch_size,), generator=gen)
            x = data[idx]
            rec = self.decoder(self.encoder(x))
            loss = (rec - x).abs().mean() + ((rec - x) ** 2).mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            losses.append(float(loss.detach()))
            if not np.isfinite(losses[-1]):
                raise FloatingPointError(f"non-finite autoencoder loss at step {step}")
            if bar is not None:
                bar.update(1)
                bar.set_postfix(loss=f"{losses[-1]:.4f}")
            done = step + 1
            if path is not None and (done % checkpoint_every == 0 or done == end):
                save_checkpoint(path, {"model": self.state_dict(), "opt": opt.state_dict(),
                                       "sched": sched.state_dict(), "gen": gen.get_state(),
                                       "losses": losses, "step": done},
                                kind="TinyAutoencoder.fit", fingerprint=hp)
        if bar is not None:
            bar.close()
        self.eval()
        for p in self.parameters():
            p.requires_grad_(True)
        self.losses_ = losses
        return self
