"""A tiny latent diffusion model (DDPM over (C, h, w) latent grids) for generator distillation."""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from rml_fast._checkpoint import load_checkpoint, save_checkpoint
from rml_fast._validation import Interval, check_scalar, check_tensor
from rml_fast.models.autoencoder import _torch_generator
from rml_fast.models.diffusion import DDPMSchedule

__all__ = ["TinyLatentDDPM"]


class TinyLatentDDPM(nn.Module):
    """Epsilon-prediction DDPM (Ho et al. 2020) on latent grids, with a small conv denoiser.

    ``eps_theta(z_t, t)``: conv3x3 -> 3 residual conv blocks with an additive sinusoidal time
    embedding -> conv3x3; trained with the simple loss ``E ||eps - eps_theta(sqrt(ab_t) z0 +
    sqrt(1 - ab_t) eps, t)||^2`` (:class:`rml_fast.models.diffusion.DDPMSchedule`, linear betas) and
    sampled by ancestral sampling.

    Parameters
    ----------
    latent_channels : int, default=4
    width : int, default=48
    n_steps : int, default=100
        Diffusion steps ``T``.
    seed : int, default=0

    Examples
    --------
    >>> g = TinyLatentDDPM(4, width=8, n_steps=10)
    >>> tuple(g.sample(2, (4, 4), generator=0).shape)
    (2, 4, 4, 4)
    """

    scale: torch.Tensor  # buffer: the data scale

    def __init__(self, latent_channels: int = 4, width: int = 48, n_steps: int = 100,
                 seed: int = 0) -> None:
        super().__init__()
        C = int(check_scalar(latent_channels, "latent_channels", Interval("int", 1, None)))
        w = int(check_scalar(width, "width", Interval("int", 1, None)))
        T = int(check_scalar(n_steps, "n_steps", Interval("int", 2, None)))
        self.latent_channels, self.width, self.n_steps, self.seed = C, w, T, seed
        self.schedule = DDPMSchedule(n_steps=T)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.inp = nn.Conv2d(C, w, 3, padding=1)
            self.temb = nn.Sequential(nn.Linear(w, w), nn.SiLU(), nn.Linear(w, 3 * w))
            self.blocks = nn.ModuleList(
                nn.Sequential(nn.GroupNorm(4 if w % 4 == 0 else 1, w), nn.SiLU(),
                              nn.Conv2d(w, w, 3, padding=1), nn.SiLU(),
                              nn.Conv2d(w, w, 3, padding=1)) for _ in range(3))
            self.outp = nn.Sequential(nn.SiLU(), nn.Conv2d(w, C, 3, padding=1))
        self.losses_: list[float] = []
        self.register_buffer("scale", torch.ones(()))

    def _t_embed(self, t: Tensor) -> Tensor:
        half = self.width // 2
        freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32) / max(half, 1))
        a = t.to(torch.float32)[:, None] * freqs[None]
        e = torch.cat([torch.sin(a), torch.cos(a)], 1)
        if e.shape[1] < self.width:
            e = torch.cat([e, torch.zeros(len(t), self.width - e.shape[1])], 1)
        return e

    def forward(self, z_t: Tensor, t: Tensor) -> Tensor:
        """Predicted noise (B, C, h, w) of noisy latents ``z_t`` (B, C, h, w) at steps ``t`` (B,).

        Examples
        --------
        >>> g = TinyLatentDDPM(2, width=8, n_steps=10)
        >>> g(torch.zeros(1, 2, 4, 4), torch.tensor([3])).shape
        torch.Size([1, 2, 4, 4])
        """
        check_tensor(z_t, "z_t", ndim=4, nonempty=True)
        if z_t.shape[1] != self.latent_channels:
            raise ValueError(f"z_t must have shape (B, {self.latent_channels}, h, w), "
                             f"got {tuple(z_t.shape)}")
        check_tensor(t, "t", ndim=1, floating=False)
        if t.dtype.is_complex or t.dtype == torch.bool or len(t) != len(z_t):
            raise ValueError(f"t must be an integer tensor of shape ({len(z_t)},), got "
                             f"{t.dtype} of shape {tuple(t.shape)}")
        if len(t) and (int(t.min()) < 0 or int(t.max()) >= self.n_steps):
            raise ValueError(f"t must hold steps in [0, {self.n_steps - 1}]")
        z_t = z_t.to(torch.float32)
        h = self.inp(z_t)
        te = self.temb(self._t_embed(t)).view(len(t), 3, self.width, 1, 1)
        for i, blk in enumerate(self.blocks):
            h = h + blk(h + te[:, i])
        return self.outp(h)

    def fit(self, latents: Tensor, *, steps: int = 2000, batch_size: int = 64, lr: float = 2e-3,
            seed: int = 0, checkpoint: str | os.PathLike[str] | None = None,
            checkpoint_every: int = 500, stop_after: int | None = None,
            progress: bool = True) -> TinyLatentDDPM:
        """Train on latents (N, C, h, w) with the simple DDPM loss (Adam, cosine learning rate).

        Latents are divided by their overall standard deviation (stored in ``scale``; samples are
        multiplied back). Resumable from ``checkpoint`` like
        :meth:`rml_fast.models.autoencoder.TinyAutoencoder.fit`.

        Returns
        -------
        self

        Examples
        --------
        >>> g = TinyLatentDDPM(2, width=8, n_steps=10).fit(torch.randn(16, 2, 4, 4), steps=3,
        ...                                                batch_size=4, progress=False)
        >>> len(g.losses_)
        3
        """
        check_tensor(latents, "latents", ndim=4, nonempty=True)
        if latents.shape[1] != self.latent_channels or len(latents) == 0:
            raise ValueError(f"latents must be a tensor of shape (N, {self.latent_channels}, h, w)")
        if not bool(torch.isfinite(latents).all()):
            raise ValueError("latents must be finite")
        steps = int(check_scalar(steps, "steps", Interval("int", 1, None)))
        bs = int(check_scalar(batch_size, "batch_size", Interval("int", 1, None)))
        lr = float(check_scalar(lr, "lr", Interval("real", 0.0, None, "neither")))
        check_scalar(seed, "seed", Interval("int", 0, None))
        hp = {"steps": steps, "batch_size": bs, "lr": lr, "seed": seed, "n": len(latents),
              "shape": tuple(latents.shape[1:]),
              "arch": (self.latent_channels, self.width, self.n_steps, self.seed)}
        data = latents.detach().to(torch.float32)
        self.scale.fill_(float(data.std()) or 1.0)
        data = data / self.scale
        opt = torch.optim.Adam(self.parameters(), lr=lr)
        sched = torch.optim.lr_scheduler.LambdaLR(
            opt, lambda i: 0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * min(i, steps) / steps)))
        gen = torch.Generator().manual_seed(seed)
        losses: list[float] = []
        start = 0
        path = Path(checkpoint) if checkpoint is not None else None
        st = (load_checkpoint(path, kind="TinyLatentDDPM.fit", fingerprint=hp)
              if path is not None else None)
        if st is not None:
            self.load_state_dict(st["model"])
            opt.load_state_dict(st["opt"])
            sched.load_state_dict(st["sched"])
            gen.set_state(st["gen"])
            losses, start = list(st["losses"]), int(st["step"])
        end = steps if stop_after is None else min(steps, int(stop_after))
        bar = None
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=steps, initial=start, desc="TinyLatentDDPM")
        self.train()
        for step in range(start, end):
            idx = torch.randint(0, len(data), (bs,), generator=gen)
            t = torch.randint(0, self.n_steps, (bs,), generator=gen)
            noise = torch.randn(data[idx].shape, generator=gen)
            zt = self.schedule.q_sample(data[idx], t, noise)
            loss = ((self(zt, t) - noise) ** 2).mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            losses.append(float(loss.detach()))
            if not np.isfinite(losses[-1]):
                raise FloatingPointError(f"non-finite DDPM loss at step {step}")
            if bar is not None:
                bar.update(1)
                bar.set_postfix(loss=f"{losses[-1]:.4f}")
            done = step + 1
            if path is not None and (done % checkpoint_every == 0 or done == end):
                save_checkpoint(path, {"model": self.state_dict(), "opt": opt.state_dict(),
                                       "sched": sched.state_dict(), "gen": gen.get_state(),
                                       "losses": losses, "step": done},
                                kind="TinyLatentDDPM.fit", fingerprint=hp)
        if bar is not None:
            bar.close()
        self.eval()
        self.losses_ = losses
        return self

    @torch.no_grad()
    def sample(self, n: int, size: tuple[int, int], generator: object = None) -> Tensor:
        """Ancestral DDPM sampling of ``n`` latents of spatial ``size`` (h, w) -> (n, C, h, w).

        Examples
        --------
        >>> TinyLatentDDPM(1, width=4, n_steps=5).sample(1, (2, 2), generator=0).shape
        torch.Size([1, 1, 2, 2])
        """
        n = int(check_scalar(n, "n", Interval("int", 1, None)))
        if (not isinstance(size, (tuple, list)) or len(size) != 2
                or not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= 1
                           for v in size)):
            raise ValueError(f"size must be a pair (h, w) of positive ints, got {size!r}")
        g = _torch_generator(generator, "generator")
        s = self.schedule
        z = torch.randn((n, self.latent_channels, *size), generator=g)
        for step in range(self.n_steps - 1, -1, -1):
            t = torch.full((n,), step, dtype=torch.long)
            mean = s.reverse_mean(z, self(z, t), t)
            if step:
                z = mean + math.sqrt(float(s.betas[step])) * torch.randn(z.shape, generator=g)
            else:
                z = mean
        return z * self.scale
