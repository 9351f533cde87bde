"""A tiny image diffusion prior and a tiny classifier on scikit-learn's 8x8 digits.

Both train offline on a CPU (the 1,797 digits ship inside the scikit-learn wheel) and are what
:mod:`rml_fast.interp.energy_dps` runs on when no large pretrained model is at hand:

* :class:`DigitsEpsNet` -- an epsilon-prediction conv net ``eps(x_t, t)`` for (B, 1, 8, 8)
  images in [-1, 1] (residual 3x3 conv blocks at full resolution with a sinusoidal step
  embedding, ~60k parameters), trained by :func:`train_digits_ddpm` with the simple DDPM loss
  ``|eps - eps(sqrt(ab_t) x_0 + sqrt(1 - ab_t) eps, t)|^2`` (Ho et al. 2020);
* :class:`DigitsCNN` -- a two-conv classifier on images in [0, 1] whose conv channels and
  logits serve as "units" to explain, trained by :func:`train_digits_classifier`.

Training is seeded (same seed, same weights on a given machine), shows progress when asked,
and resumes from a checkpoint file without changing its result.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from rml_fast._validation import Interval, check_scalar, check_tensor
from rml_fast.models.diffusion import _timestep_embedding

__all__ = [
    "DigitsCNN",
    "DigitsDDPM",
    "DigitsEpsNet",
    "digits_images",
    "linear_betas",
    "train_digits_classifier",
    "train_digits_ddpm",
]


def digits_images(*, scale: str = "[-1,1]") -> tuple[Tensor, Tensor]:
    """scikit-learn's digits as float32 images (N = 1797, 1, 8, 8) and int64 labels (N,).

    Parameters
    ----------
    scale : {"[-1,1]", "[0,1]"}, default="[-1,1]"
        Pixel range (the raw data are 0..16).

    Examples
    --------
    >>> x, y = digits_images()
    >>> tuple(x.shape), float(x.min()), float(x.max()), int(y[0])
    ((1797, 1, 8, 8), -1.0, 1.0, 0)
    """
    from sklearn.datasets import load_digits

    if scale not in ("[-1,1]", "[0,1]"):
        raise ValueError(f"scale must be '[-1,1]' or '[0,1]', got {scale!r}")
    d = load_digits()
    x = torch.as_tensor(d.images / 16.0, dtype=torch.float32)[:, None]
    if scale == "[-1,1]":
        x = 2.0 * x - 1.0
    return x, torch.as_tensor(d.target, dtype=torch.int64)


def linear_betas(n_steps: int = 200, beta_start: float = 1e-4, beta_end: float = 0.02) -> Tensor:
    """Linear DDPM betas rescaled to ``n_steps`` (Ho et al.'s 1e-4..0.02 at 1000 steps).

    ``beta_start`` and ``beta_end`` are given for 1000 steps and multiplied by
    ``1000 / n_steps`` (the rescaling of improved DDPM), float64 of shape (n_steps,).

    Examples
    --------
    >>> b = linear_betas(1000)
    >>> float(b[0]), round(float(b[-1]), 6)
    (0.0001, 0.02)
    """
    n_steps = int(check_scalar(n_steps, "n_steps", Interval("int", 2, None)))
    s = 1000.0 / n_steps
    if not 0 < beta_start <= beta_end or beta_end * s >= 1:
        raise ValueError(
            f"rescaled betas must stay below 1: beta_end * 1000 / n_steps = {beta_end * s:g} "
            f"(use more steps or a smaller beta_end)"
        )
    return torch.linspace(beta_start * s, beta_end * s, n_steps, dtype=torch.float64)


class _ResBlock(nn.Module):
    def __init__(self, ch: int, emb: int) -> None:
        super().__init__()
        self.norm1 = nn.GroupNorm(8, ch)
        self.conv1 = nn.Conv2d(ch, ch, 3, padding=1)
        self.emb = nn.Linear(emb, ch)
        self.norm2 = nn.GroupNorm(8, ch)
        self.conv2 = nn.Conv2d(ch, ch, 3, padding=1)

    def forward(self, x: Tensor, e: Tensor) -> Tensor:
        h = self.conv1(torch.nn.functional.silu(self.norm1(x)))
        h = h + self.emb(e)[:, :, None, None]
        h = self.conv2(torch.nn.functional.silu(self.norm2(h)))
        return x + h


class DigitsEpsNet(nn.Module):
    """Epsilon predictor ``eps(x_t, t)`` for (B, 1, 8, 8) images.

    Parameters
    ----------
    channels : int, default=48
        Width of the residual blocks (a multiple of 8).
    n_blocks : int, default=3
    n_steps : int, default=200
        Length of the schedule the step embedding is scaled to.
    seed : int, default=0
        Seed of the weight initialisation.

    Examples
    --------
    >>> net = DigitsEpsNet(channels=16, n_blocks=1)
    >>> tuple(net(torch.zeros(2, 1, 8, 8), torch.tensor([0, 5])).shape)
    (2, 1, 8, 8)
    """

    def __init__(self, channels: int = 48, n_blocks: int = 3, n_steps: int = 200, seed: int = 0):
        super().__init__()
        check_scalar(channels, "channels", Interval("int", 8, None))
        if channels % 8:
            raise ValueError(f"channels must be a multiple of 8, got {channels}")
        check_scalar(n_blocks, "n_blocks", Interval("int", 1, None))
        self.n_steps = int(check_scalar(n_steps, "n_steps", Interval("int", 2, None)))
        self.emb_dim = 64
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.embed = nn.Sequential(nn.Linear(64, 64), nn.SiLU(), nn.Linear(64, 64))
            self.inp = nn.Conv2d(1, channels, 3, padding=1)
            self.blocks = nn.ModuleList(_ResBlock(channels, 64) for _ in range(n_blocks))
            self.out = nn.Sequential(
                nn.GroupNorm(8, channels), nn.SiLU(), nn.Conv2d(channels, 1, 3, padding=1)
            )

    def forward(self, x_t: Tensor, t: Tensor) -> Tensor:
        """Predicted noise, the shape of ``x_t`` (B, 1, 8, 8); ``t``: LongTensor (B,)."""
        _check_images(x_t, "x_t")
        check_tensor(t, "t", ndim=1, floating=False)
        if t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
            raise TypeError(f"t must be an integer (Long) tensor of steps, got {t.dtype}")
        if t.shape[0] != x_t.shape[0] or t.device != x_t.device:
            raise ValueError(
                f"t must have shape ({x_t.shape[0]},) (one step per image of x_t) on x_t's "
                f"device, got {tuple(t.shape)} on {t.device}"
            )
        e = self.embed(_timestep_embedding(t, 64, self.n_steps).to(x_t.dtype))
        h = self.inp(x_t)
        for blk in self.blocks:
            h = blk(h, e)
        return self.out(h)


def _check_images(x: Any, name: str) -> Tensor:
    """Images (B, 1, H, W): a real floating tensor with values (non-finite values propagate)."""
    check_tensor(x, name, ndim=4, finite=False)
    if x.shape[1] != 1:
        raise ValueError(f"{name} must have shape (B, 1, H, W), got {tuple(x.shape)}")
    return x


def _check_losses(losses: Any, name: str = "losses") -> list[float]:
    """A training-loss record: a list of finite real numbers."""
    if not isinstance(losses, (list, tuple)):
        raise TypeError(f"{name} must be a list of floats, got {type(losses).__name__}")
    for v in losses:
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
            raise TypeError(f"{name} must hold real numbers, got {type(v).__name__} {v!r}")
        if not math.isfinite(float(v)):
            raise ValueError(f"{name} must be finite, got {v!r}")
    return list(losses)


@dataclass
class DigitsDDPM:
    """A trained digits prior: the epsilon network and its betas (float64, (T,)).

    Raises ``TypeError``/``ValueError`` naming the field for an ``eps_model`` that is not a
    :class:`DigitsEpsNet`, ``betas`` that are not a finite 1-D tensor in (0, 1) of length
    ``eps_model.n_steps``, or non-finite ``losses``.
    """

    eps_model: DigitsEpsNet
    betas: Tensor
    losses: list[float]

    def __post_init__(self) -> None:
        if not isinstance(self.eps_model, DigitsEpsNet):
            raise TypeError(f"eps_model must be a DigitsEpsNet, got {type(self.eps_model).__name__}")
        check_tensor(self.betas, "betas", ndim=1, nonempty=True)
        if self.betas.shape[0] != self.eps_model.n_steps:
            raise ValueError(
                f"betas must have eps_model.n_steps = {self.eps_model.n_steps} entries, got "
                f"{self.betas.shape[0]}"
            )
        if bool((self.betas <= 0).any()) or bool((self.betas >= 1).any()):
            raise ValueError("betas must lie in (0, 1)")
        self.losses = _check_losses(self.losses)


def _save(path: Path, state: dict[str, Any]) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)


def train_digits_ddpm(
    *,
    n_steps: int = 200,
    steps: int = 3000,
    batch_size: int = 128,
    lr: float = 2e-3,
    channels: int = 48,
    n_blocks: int = 3,
    seed: int = 0,
    checkpoint: str | os.PathLike[str] | None = None,
    checkpoint_every: int = 500,
    stop_after: int | None = None,
    progress: bool = False,
) -> DigitsDDPM:
    """Train :class:`DigitsEpsNet` on all 1,797 digits with the simple DDPM loss (Adam).

    Parameters
    ----------
    n_steps : int, default=200
        Diffusion steps ``T`` (linear betas, :func:`linear_betas`).
    steps : int, default=3000
        Optimiser steps (batches of ``batch_size`` images, uniform ``t``).
    batch_size, lr, channels, n_blocks
        The obvious.
    seed : int, default=0
        Seeds the initialisation, the batches, the steps and the noise.
    checkpoint : path, optional
        Saved every ``checkpoint_every`` steps and at the end; an existing file resumes the
        run (its hyper-parameters must match) and gives the weights an uninterrupted run gives.
    checkpoint_every : int, default=500
    stop_after : int, optional
        Stop (and checkpoint) after this many total steps, to be resumed later.
    progress : bool, default=False
        A tqdm bar with the running loss.

    Returns
    -------
    DigitsDDPM
        The network (eval mode), the betas and the loss per step.

    Examples
    --------
    >>> prior = train_digits_ddpm(steps=20, channels=16, n_blocks=1)
    >>> tuple(prior.betas.shape), len(prior.losses)
    ((200,), 20)
    """
    hp = {
        "n_steps": n_steps,
        "steps": steps,
        "batch_size": batch_size,
        "lr": lr,
        "channels": channels,
        "n_blocks": n_blocks,
        "seed": seed,
    }
    check_scalar(steps, "steps", Interval("int", 1, None))
    check_scalar(batch_size, "batch_size", Interval("int", 1, None))
    check_scalar(lr, "lr", Interval("real", 0.0, None, "neither"))
    check_scalar(checkpoint_every, "checkpoint_every", Interval("int", 1, None))
    net = DigitsEpsNet(channels, n_blocks, n_steps, seed)
    betas = linear_betas(n_steps)
    ab = torch.cumprod(1.0 - betas, 0).to(torch.float32)
    x0_all, _ = digits_images()
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(seed)
    losses: list[float] = []
    start = 0
    path = Path(checkpoint) if checkpoint is not None else None
    if path is not None and path.exists():
        state = torch.load(path, weights_only=False)
        if state["hp"] != hp:
            raise ValueError(f"checkpoint {path} was made with {state['hp']}, not {hp}")
        net.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        gen.set_state(state["gen"])
        losses, start = state["losses"], state["step"]
    end = steps if stop_after is None else min(steps, int(stop_after))
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=steps, initial=start, desc="digits DDPM")
    net.train()
    for step in range(start, end):
        idx = torch.randint(0, len(x0_all), (batch_size,), generator=gen)
        t = torch.randint(0, n_steps, (batch_size,), generator=gen)
        noise = torch.randn(batch_size, 1, 8, 8, generator=gen)
        a = ab[t].view(-1, 1, 1, 1)
        x_t = a.sqrt() * x0_all[idx] + (1 - a).sqrt() * noise
        loss = torch.mean((net(x_t, t) - noise) ** 2)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
        if bar is not None:
            bar.update(1)
            bar.set_postfix(loss=f"{losses[-1]:.4f}")
        done = step + 1
        if path is not None and (done % checkpoint_every == 0 or done == end):
            _save(
                path,
                {
                    "hp": hp,
                    "model": net.state_dict(),
                    "opt": opt.state_dict(),
                    "gen": gen.get_state(),
                    "losses": losses,
                    "step": done,
                },
            )
    if bar is not None:
        bar.close()
    net.eval()
    return DigitsDDPM(net, betas, losses)


class DigitsCNN(nn.Module):
    """A small classifier of (B, 1, 8, 8) digits in [0, 1]: ``conv1 -> conv2 -> pool -> fc``.

    ``conv1`` (16 channels, 8x8) and ``conv2`` (32 channels, 4x4) are ReLU feature maps whose
    channels, like the 10 logits of ``fc``, serve as units to explain.

    Examples
    --------
    >>> tuple(DigitsCNN()(torch.zeros(3, 1, 8, 8)).shape)
    (3, 10)
    """

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.conv1 = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU())
            self.conv2 = nn.Sequential(nn.Conv2d(16, 32, 3, padding=1, stride=2), nn.ReLU())
            self.fc = nn.Linear(32, 10)

    def forward(self, x: Tensor) -> Tensor:
        """Logits (B, 10) of images ``x`` (B, 1, 8, 8)."""
        _check_images(x, "x")
        return self.fc(self.conv2(self.conv1(x)).mean(dim=(2, 3)))


def train_digits_classifier(
    *,
    steps: int = 600,
    batch_size: int = 128,
    lr: float = 3e-3,
    seed: int = 0,
    test_size: float = 0.25,
    progress: bool = False,
) -> tuple[DigitsCNN, float]:
    """Train :class:`DigitsCNN` (Adam, cross-entropy) on a seeded split of the digits.

    Parameters
    ----------
    steps : int, default=600
    batch_size : int, default=128
    lr : float, default=3e-3
    seed : int, default=0
    test_size : float, default=0.25
        Held-out fraction for the returned accuracy.
    progress : bool, default=False

    Returns
    -------
    model : DigitsCNN (eval mode)
    test_accuracy : float

    Examples
    --------
    >>> model, acc = train_digits_classifier(steps=300)
    >>> acc > 0.75
    True
    """
    check_scalar(steps, "steps", Interval("int", 1, None))
    check_scalar(test_size, "test_size", Interval("real", 0.0, 1.0, "neither"))
    x, y = digits_images(scale="[0,1]")
    perm = np.random.default_rng(seed).permutation(len(x))
    n_test = round(test_size * len(x))
    te, tr = torch.as_tensor(perm[:n_test]), torch.as_tensor(perm[n_test:])
    model = DigitsCNN(seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(seed)
    it: Any = range(steps)
    if progress:
        from tqdm.auto import tqdm

        it = tqdm(it, desc="digits CNN")
    model.train()
    for _ in it:
        idx = tr[torch.randint(0, len(tr), (batch_size,), generator=gen)]
        loss = nn.functional.cross_entropy(model(x[idx]), y[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        acc = float((model(x[te]).argmax(1) == y[te]).float().mean())
    return model, acc
