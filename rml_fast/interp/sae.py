"""TopK sparse autoencoders (Gao et al. 2024) and a small, resumable trainer for the zoo.

A TopK SAE on activations ``x`` of width ``d`` with ``m`` latents keeps, per row, only the ``k``
largest encoder pre-activations (then a ReLU) and reconstructs with unit-norm decoder rows::

    z     = ReLU(TopK_k((x - b_dec) @ W_enc + b_enc))        # (n, m), at most k non-zero
    x_hat = z @ W_dec + b_dec                                 # (n, d), ||W_dec[j]|| = 1

:func:`train_topk_sae` minimises the mean squared error ``mean((x - x_hat)**2)`` with Adam on
random minibatches, renormalising the decoder rows after every step (and removing the gradient
component parallel to each row before it, as Gao et al.). It stops early once the full-data MSE
(checked every ``eval_every`` steps) reaches ``target_mse`` and can be interrupted and resumed
from a checkpoint file without changing the result.

References
----------
Gao et al., "Scaling and evaluating sparse autoencoders", arXiv:2406.04093 (2024).
"""

from __future__ import annotations

import logging
from os import PathLike
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from rml_fast._validation import Interval, check_rng, check_scalar, check_tensor
from rml_fast.interp._checks import not_meta

logger = logging.getLogger(__name__)

__all__ = ["TopKSAE", "train_topk_sae"]


class TopKSAE(nn.Module):
    """A TopK sparse autoencoder ``x -> z -> x_hat`` with unit-norm decoder rows.

    ``z = ReLU(TopK_k((x - b_dec) W_enc + b_enc))`` and ``x_hat = z W_dec + b_dec`` (Gao et al.
    2024, eq. 2). With ``relu=False`` exactly ``k`` latents are non-zero per row (the kept
    pre-activations unchanged); with the default ReLU at most ``k``.

    Parameters
    ----------
    d : int
        Input width.
    n_features : int
        Number of latents ``m``.
    k : int
        Active latents per row, ``1 <= k <= n_features``.
    relu : bool, default=True
        Apply a ReLU after the TopK selection.
    seed : int or None, default=None
        Seeds the initialisation (decoder rows uniform on the sphere, ``W_enc = W_dec.T``,
        zero biases) through a local generator.

    Attributes
    ----------
    W_enc : Parameter of shape (d, n_features)
        Encoder; column ``j`` is the key (read) direction of latent ``j``.
    W_dec : Parameter of shape (n_features, d)
        Decoder; row ``j`` (unit norm) is the value (write) direction of latent ``j``.
    b_enc : Parameter of shape (n_features,)
    b_dec : Parameter of shape (d,)
    history_ : list of (step, mse)
        Full-data MSE checks made by :func:`train_topk_sae`.

    Examples
    --------
    >>> import torch
    >>> from rml_fast.interp.sae import TopKSAE
    >>> sae = TopKSAE(8, 32, k=4, relu=False, seed=0)
    >>> z = sae.encode(torch.randn(5, 8))
    >>> tuple(z.shape), (z != 0).sum(-1).tolist()
    ((5, 32), [4, 4, 4, 4, 4])
    >>> tuple(sae(torch.randn(5, 8)).shape)
    (5, 8)
    """

    def __init__(
        self, d: int, n_features: int, k: int, *, relu: bool = True, seed: int | None = None
    ) -> None:
        super().__init__()
        d = int(check_scalar(d, "d", Interval("int", 1, None)))
        m = int(check_scalar(n_features, "n_features", Interval("int", 1, None)))
        k = int(check_scalar(k, "k", Interval("int", 1, m)))
        if seed is not None:
            # torch.Generator.manual_seed's range (negative seeds wrap around, as before)
            seed = int(check_scalar(seed, "seed", Interval("int", -(2**63), 2**64 - 1)))
        self.d, self.n_features, self.k, self.relu = d, m, k, bool(relu)
        gen = torch.Generator()
        gen.manual_seed(0 if seed is None else int(seed))
        if seed is None:
            gen.seed()
        dec = torch.randn(m, d, generator=gen)
        dec = dec / dec.norm(dim=1, keepdim=True)
        self.W_dec = nn.Parameter(dec)
        self.W_enc = nn.Parameter(dec.T.clone())
        self.b_enc = nn.Parameter(torch.zeros(m))
        self.b_dec = nn.Parameter(torch.zeros(d))
        self.history_: list[tuple[int, float]] = []

    def _check_x(self, x: Any, name: str = "x") -> torch.Tensor:
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
        not_meta(x, name)
        if x.is_complex():
            raise TypeError(f"{name} must hold real numbers, got dtype {x.dtype}")
        if x.shape[-1:] != (self.d,):
            raise ValueError(
                f"{name} must have last dimension d={self.d}, got shape {tuple(x.shape)}"
            )
        return x.to(self.W_enc.dtype)

    def pre_activations(self, x: torch.Tensor) -> torch.Tensor:
        """Encoder pre-activations ``(x - b_dec) W_enc + b_enc``, shape ``(..., n_features)``.

        Examples
        --------
        >>> import torch
        >>> sae = TopKSAE(4, 6, k=2, seed=0)
        >>> tuple(sae.pre_activations(torch.zeros(3, 4)).shape)
        (3, 6)
        """
        x = self._check_x(x)
        return (x - self.b_dec) @ self.W_enc + self.b_enc

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """Sparse codes ``z`` of shape ``(..., n_features)`` (at most ``k`` non-zero per row).

        Ties at the k-th value are broken by ``torch.topk``'s order.

        Examples
        --------
        >>> import torch
        >>> sae = TopKSAE(4, 6, k=2, seed=0)
        >>> int((sae.encode(torch.randn(3, 4)) != 0).sum(-1).max()) <= 2
        True
        """
        pre = self.pre_activations(x)
        vals, idx = pre.topk(self.k, dim=-1)
        if self.relu:
            vals = torch.relu(vals)
        return torch.zeros_like(pre).scatter(-1, idx, vals)

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        """Reconstruction ``z W_dec + b_dec`` of shape ``(..., d)`` from codes ``(..., m)``.

        Examples
        --------
        >>> import torch
        >>> sae = TopKSAE(4, 6, k=2, seed=0)
        >>> z = torch.zeros(1, 6); z[0, 3] = 2.0
        >>> bool(torch.allclose(sae.decode(z)[0], 2 * sae.W_dec[3] + sae.b_dec))
        True
        """
        if not isinstance(z, torch.Tensor) or z.shape[-1:] != (self.n_features,):
            raise ValueError(
                f"z must be a torch.Tensor with last dimension n_features={self.n_features}, "
                f"got {getattr(z, 'shape', type(z).__name__)}"
            )
        check_tensor(z, "z", finite=False)
        return z.to(self.W_dec.dtype) @ self.W_dec + self.b_dec

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Reconstruction ``decode(encode(x))`` of shape ``(..., d)``.

        Examples
        --------
        >>> import torch
        >>> sae = TopKSAE(4, 6, k=6, relu=False, seed=0)
        >>> tuple(sae(torch.randn(2, 4)).shape)
        (2, 4)
        """
        return self.decode(self.encode(x))

    @torch.no_grad()
    def normalize_decoder(self) -> None:
        """Rescale every decoder row to unit norm in place (encoder untouched).

        Examples
        --------
        >>> sae = TopKSAE(4, 6, k=2, seed=0)
        >>> with torch.no_grad():
        ...     _ = sae.W_dec.mul_(3.0)
        >>> sae.normalize_decoder()
        >>> bool(torch.allclose(sae.W_dec.norm(dim=1), torch.ones(6)))
        True
        """
        self.W_dec.div_(self.W_dec.norm(dim=1, keepdim=True).clamp_min(1e-12))

    @torch.no_grad()
    def mse(self, acts: torch.Tensor, batch_size: int = 8192) -> float:
        """Mean squared reconstruction error ``mean((x - x_hat)**2)`` over all entries of ``acts``.

        Examples
        --------
        >>> import torch
        >>> sae = TopKSAE(3, 3, k=3, relu=False, seed=0)
        >>> with torch.no_grad():
        ...     _ = sae.W_dec.copy_(torch.eye(3)); _ = sae.W_enc.copy_(torch.eye(3))
        >>> sae.mse(torch.randn(10, 3)) < 1e-12
        True
        """
        acts = self._check_x(acts, "acts").reshape(-1, self.d)
        tot = 0.0
        for i in range(0, acts.shape[0], batch_size):
            xb = acts[i : i + batch_size]
            tot += float(((self(xb) - xb) ** 2).sum())
        return tot / max(1, acts.numel())


_CONFIG_KEYS = ("d", "n", "n_features", "k", "lr", "batch_size", "seed", "relu", "eval_every")


def train_topk_sae(
    acts: Any,
    *,
    n_features: int,
    k: int,
    steps: int = 2000,
    lr: float = 1e-3,
    batch_size: int = 256,
    rng: Any = None,
    progress: bool = False,
    target_mse: float | None = None,
    checkpoint: str | PathLike[str] | None = None,
    checkpoint_every: int = 200,
    eval_every: int = 50,
    relu: bool = True,
) -> TopKSAE:
    """Train a :class:`TopKSAE` on activations by Adam on the reconstruction MSE.

    Minimises ``mean_{x in batch} mean_j (x_j - x_hat_j)**2`` over minibatches drawn uniformly
    with replacement from ``acts``; after every step the decoder rows are renormalised to unit
    norm (their gradient's parallel component is removed first). ``b_dec`` starts at the data
    mean. The full-data MSE is checked every ``eval_every`` steps (``history_``) and training
    stops as soon as it is ``<= target_mse``.

    Parameters
    ----------
    acts : Tensor or ndarray of shape (n, d)
        Activations (e.g. a residual stream flattened over batch and positions); float32/64.
    n_features : int
        Number of latents ``m``.
    k : int
        Active latents per row.
    steps : int, default=2000
        Maximum number of optimiser steps.
    lr : float, default=1e-3
    batch_size : int, default=256
    rng : numpy Generator, int seed or None, default=None
        Seeds the initialisation and the minibatch stream.
    progress : bool, default=False
        Show a tqdm progress bar.
    target_mse : float or None, default=None
        Stop early once the full-data MSE reaches this value.
    checkpoint : path or None, default=None
        A file holding a resumable state (model, optimiser, data stream, step). If it exists
        the run resumes from it (its configuration must match, else ValueError listing the
        differences); the state is written every ``checkpoint_every`` steps, at the end and on
        ``KeyboardInterrupt``. Training ``a`` steps and then calling again with ``steps=b`` gives
        the same SAE as one call with ``steps=b``.
    checkpoint_every : int, default=200
    eval_every : int, default=50
    relu : bool, default=True
        See :class:`TopKSAE`.

    Returns
    -------
    sae : TopKSAE
        In eval mode, float32 parameters, with ``history_`` (list of ``(step, mse)``) and
        ``n_steps_`` (steps taken in total).

    Raises
    ------
    ValueError
        For a non-2-D or non-finite ``acts``, ``k > n_features``, out-of-range scalars, or a
        checkpoint of a different configuration.

    Examples
    --------
    >>> import torch
    >>> from rml_fast.interp.sae import train_topk_sae
    >>> g = torch.Generator().manual_seed(0)
    >>> atoms = torch.randn(16, 8, generator=g)
    >>> codes = torch.rand(2000, 16, generator=g) * (torch.rand(2000, 16, generator=g) < 0.1)
    >>> sae = train_topk_sae(codes @ atoms, n_features=32, k=4, steps=300, rng=0)
    >>> sae.history_[-1][1] < 0.5 * sae.history_[0][1]
    True
    """
    x = _check_acts(acts)
    n, d = x.shape
    n_features = int(check_scalar(n_features, "n_features", Interval("int", 1, None)))
    k = int(check_scalar(k, "k", Interval("int", 1, None)))
    if k > n_features:
        raise ValueError(f"k must be <= n_features={n_features}, got {k}")
    steps = int(check_scalar(steps, "steps", Interval("int", 0, None)))
    lr = float(check_scalar(lr, "lr", Interval("real", 0, None, "neither")))
    batch_size = int(check_scalar(batch_size, "batch_size", Interval("int", 1, None)))
    checkpoint_every = int(
        check_scalar(checkpoint_every, "checkpoint_every", Interval("int", 1, None))
    )
    eval_every = int(check_scalar(eval_every, "eval_every", Interval("int", 1, None)))
    if target_mse is not None:
        target_mse = float(check_scalar(target_mse, "target_mse", Interval("real", 0, None)))
    seed = int(check_rng(rng).integers(2**62))
    config = {"d": d, "n": n, "n_features": n_features, "k": k, "lr": lr,
              "batch_size": batch_size, "seed": seed, "relu": bool(relu),
              "eval_every": eval_every}  # fmt: skip

    sae = TopKSAE(d, n_features, k, relu=relu, seed=seed)
    with torch.no_grad():
        sae.b_dec.copy_(x.mean(0))
    opt = torch.optim.Adam(sae.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(seed + 1)
    start, done = 0, False
    path = Path(checkpoint) if checkpoint is not None else None
    if path is not None and path.is_file():
        state = torch.load(path, map_location="cpu", weights_only=False)
        diff = {key: (state["config"].get(key), config[key]) for key in _CONFIG_KEYS
                if state["config"].get(key) != config[key]}  # fmt: skip
        if diff:
            raise ValueError(
                f"checkpoint {str(path)!r} was written by a different configuration "
                f"(saved, requested): {diff}; delete it or pass another path"
            )
        sae.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        gen.set_state(state["gen"])
        sae.history_ = list(state["history"])
        start, done = int(state["step"]), bool(state["done"])
        logger.info("resuming %s at step %d", path, start)

    def save(step: int, finished: bool) -> None:
        if path is None:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        torch.save({"config": config, "model": sae.state_dict(), "opt": opt.state_dict(),
                    "gen": gen.get_state(), "step": step, "done": finished,
                    "history": sae.history_}, tmp)  # fmt: skip
        tmp.replace(path)

    def reached(step: int) -> bool:
        mse = sae.mse(x)
        sae.history_.append((step, mse))
        return target_mse is not None and mse <= target_mse

    from tqdm.auto import tqdm

    step = start
    if not done and start == 0 and not sae.history_:
        done = reached(0)
    sae.train()
    bar = tqdm(range(start, steps), desc="TopK SAE", disable=not progress or done, leave=False)
    try:
        for step in bar:
            if done:
                break
            idx = torch.randint(0, n, (batch_size,), generator=gen)
            xb = x[idx]
            loss = ((sae(xb) - xb) ** 2).mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            with torch.no_grad():  # keep ||W_dec[j]|| = 1 to first order (Gao et al.)
                w, g = sae.W_dec, sae.W_dec.grad
                if g is None:  # pragma: no cover - backward() always sets it
                    raise RuntimeError("W_dec has no gradient after backward()")
                g.sub_((g * w).sum(1, keepdim=True) * w)
            opt.step()
            sae.normalize_decoder()
            if (step + 1) % eval_every == 0 or step + 1 == steps:
                done = reached(step + 1)
                bar.set_postfix(mse=f"{sae.history_[-1][1]:.4g}")
            if (step + 1) % checkpoint_every == 0:
                save(step + 1, done)
            step += 1
    except KeyboardInterrupt:
        save(step, done)
        raise
    save(max(step, start), done)
    sae.n_steps_ = max(step, start)  # type: ignore[assignment]
    return sae.eval()


def _check_acts(acts: Any) -> torch.Tensor:
    if isinstance(acts, np.ndarray):
        if acts.dtype.kind != "f":
            raise TypeError(f"acts must hold floats, got dtype {acts.dtype}")
        acts = torch.from_numpy(acts)
    if not isinstance(acts, torch.Tensor):
        raise TypeError(f"acts must be a torch.Tensor or ndarray of shape (n, d), got "
                        f"{type(acts).__name__}")  # fmt: skip
    if acts.ndim != 2 or acts.shape[0] < 1 or acts.shape[1] < 1:
        raise ValueError(f"acts must have shape (n, d) with n, d >= 1, got {tuple(acts.shape)}")
    if not acts.dtype.is_floating_point:
        raise TypeError(f"acts must hold floats, got dtype {acts.dtype}")
    if not bool(torch.isfinite(acts).all()):
        raise ValueError("acts must be finite, got NaN or infinite values")
    return acts.detach().to(torch.float32)
