"""Training and evaluation of neural processes on streams of tasks.

:func:`train` runs AdamW with a cosine learning-rate schedule and gradient clipping (the
reference recipe of arXiv 2606.01172: lr 5e-4 -> 1e-6, clip 0.5), shows progress, keeps the
checkpoint of the best validation log-likelihood, and resumes from its last checkpoint when
the stored run configuration matches (otherwise it raises rather than mixing two runs); an
interrupt (Ctrl-C) or a time limit stops it after saving, without losing finished epochs.
"""

from __future__ import annotations

import logging
import math
import time
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from rml_fast._validation import Interval, check_scalar
from rml_fast.neural_processes.data import Batch, TaskGenerator

__all__ = ["TrainResult", "evaluate", "gaussian_crps", "train"]

log = logging.getLogger(__name__)


def gaussian_crps(mu: torch.Tensor, sigma: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    r"""Closed-form CRPS of ``N(mu, sigma^2)`` at ``y``:
    :math:`\sigma [z (2\Phi(z) - 1) + 2 \phi(z) - 1/\sqrt{\pi}]`, ``z = (y - mu)/sigma``."""
    z = (y - mu) / sigma
    std = torch.distributions.Normal(torch.zeros_like(z), torch.ones_like(z))
    return sigma * (z * (2 * std.cdf(z) - 1) + 2 * std.log_prob(z).exp() - 1 / math.sqrt(math.pi))


@torch.no_grad()
def evaluate(model: nn.Module, batches: Iterable[Batch]) -> dict[str, float]:
    """Mean per-point query log-likelihood (summed over ``dim_y``), RMSE and CRPS.

    Parameters
    ----------
    model : nn.Module
        Maps ``(xc, yc, xq)`` to a ``torch.distributions.Normal``.
    batches : iterable of Batch

    Returns
    -------
    metrics : dict with keys "loglik", "rmse", "crps", "n_points"
    """
    was = model.training
    model.eval()
    ll = se = crps = 0.0
    n = 0
    try:
        for b in batches:
            d = model(b.xc, b.yc, b.xq)
            yq = b.yq.to(d.loc.dtype)
            ll += float(d.log_prob(yq).sum())
            se += float(((d.loc - yq) ** 2).sum())
            crps += float(gaussian_crps(d.loc, d.scale, yq).sum())
            n += yq.shape[0] * yq.shape[1]
            dy = yq.shape[-1]
    finally:
        model.train(was)
    if n == 0:
        raise ValueError("batches is empty")
    return dict(loglik=ll / n, rmse=math.sqrt(se / (n * dy)), crps=crps / (n * dy), n_points=n)


@dataclass
class TrainResult:
    """What :func:`train` did.

    Attributes
    ----------
    history : list of dict
        One entry per finished epoch: epoch, train_loss, val metrics, lr, seconds.
    best_val_loglik : float
    epochs_done : int
    stopped : str
        "finished", "time_limit" or "interrupted".
    start_epoch : int
        The epoch this call started from: 0 for a fresh run, ``> 0`` when it resumed from a
        checkpoint (``start_epoch == epochs_done`` means it trained 0 steps).
    """

    history: list[dict[str, float]] = field(default_factory=list)
    best_val_loglik: float = -math.inf
    epochs_done: int = 0
    stopped: str = "finished"
    start_epoch: int = 0


def _run_config(
    model: nn.Module, generator: TaskGenerator, settings: dict[str, Any]
) -> dict[str, Any]:
    """What a checkpoint must match to be resumed: the model's class and state shapes/dtypes,
    the optimisation settings and the generator's class and scalar settings (not its seed:
    the task stream continues from the checkpointed rng state)."""
    simple = (bool, int, float, str, tuple, type(None), torch.dtype)
    gen = {
        k: repr(v)
        for k, v in sorted(vars(generator).items())
        if k != "rng" and not k.startswith("_") and isinstance(v, simple)
    }
    return dict(
        model=f"{type(model).__module__}.{type(model).__qualname__}",
        state={k: (tuple(v.shape), str(v.dtype)) for k, v in model.state_dict().items()},
        generator=f"{type(generator).__module__}.{type(generator).__qualname__}",
        generator_settings=gen,
        **settings,
    )


def _config_differences(saved: dict[str, Any], now: dict[str, Any]) -> list[str]:
    out = []
    for key in now:
        a, b = saved.get(key), now[key]
        if a == b:
            continue
        if key == "state":
            a = a or {}
            diff = [f"{k} {a[k]} vs {b[k]}" for k in b if k in a and a[k] != b[k]]
            diff += [f"{k} only in this model" for k in b if k not in a]
            diff += [f"{k} only in the checkpoint" for k in a if k not in b]
            more = f" (+{len(diff) - 3} more)" if len(diff) > 3 else ""
            out.append("model state (checkpoint vs this model): " + "; ".join(diff[:3]) + more)
        else:
            out.append(f"{key}: checkpoint {a!r}, this call {b!r}")
    return out


def train(
    model: nn.Module,
    generator: TaskGenerator,
    *,
    epochs: int = 10,
    batches_per_epoch: int = 100,
    val_batches: list[Batch] | None = None,
    lr: float = 5e-4,
    min_lr: float = 1e-6,
    weight_decay: float = 0.0,
    grad_clip: float | None = 0.5,
    checkpoint_dir: str | Path | None = None,
    resume: bool = True,
    time_limit: float | None = None,
    progress: bool = True,
) -> TrainResult:
    """Train a neural process by maximum likelihood on tasks from ``generator``.

    Loss: mean negative log-likelihood over query points and batch
    (:func:`rml_fast.neural_processes.models.nll_loss`). AdamW with a cosine schedule from
    ``lr`` to ``min_lr`` over ``epochs * batches_per_epoch`` steps; gradient-norm clipping.

    Parameters
    ----------
    model : nn.Module
        ``model(xc, yc, xq)`` returns a ``torch.distributions.Normal``.
    generator : TaskGenerator
        Source of training batches (its ``rng`` state is checkpointed).
    epochs : int, default=10
    batches_per_epoch : int, default=100
    val_batches : list of Batch, optional
        Fixed validation set; the best checkpoint is chosen on its log-likelihood.
    lr, min_lr, weight_decay : float
    grad_clip : float or None, default=0.5
    checkpoint_dir : str or Path, optional
        Writes ``last.pt`` after each epoch and ``best.pt`` on a new best validation score.
        ``last.pt`` also stores the run's configuration: the model's class and parameter /
        buffer shapes and dtypes, ``epochs``, ``batches_per_epoch``, ``lr``, ``min_lr``,
        ``weight_decay``, ``grad_clip`` and the generator's class and scalar settings.
    resume : bool, default=True
        If ``checkpoint_dir/last.pt`` exists, continue that run (model, optimiser, schedule
        and the generator's rng state come from it, so an interrupted or time-limited run
        finishes as if uninterrupted). Safe by default: a checkpoint whose stored
        configuration differs from this call's (another ``lr``, model shape, ...), or that
        has none, raises ``ValueError`` naming the differences before anything is loaded;
        resuming a run that already finished loads it, trains 0 steps and warns
        (``UserWarning``). ``False``: start a fresh run and overwrite ``last.pt`` (an old
        ``best.pt`` is removed).
    time_limit : float, optional
        Stop (after saving) once this many seconds have passed; checked after every step.
    progress : bool, default=True
        Show a tqdm progress bar.

    Returns
    -------
    TrainResult

    Examples
    --------
    >>> from rml_fast.neural_processes import SFConvCNP
    >>> from rml_fast.neural_processes.data import GPGenerator
    >>> model = SFConvCNP(embed_channels=8, feedforward_channels=8, num_layers=1)
    >>> res = train(model, GPGenerator(batch_size=2, rng=0), epochs=1, batches_per_epoch=2, progress=False)
    >>> res.epochs_done, len(res.history)
    (1, 1)
    """
    from tqdm.auto import tqdm

    from rml_fast.neural_processes.models import nll_loss

    epochs = int(check_scalar(epochs, "epochs", Interval("int", 1, None)))
    bpe = int(check_scalar(batches_per_epoch, "batches_per_epoch", Interval("int", 1, None)))
    lr = float(check_scalar(lr, "lr", Interval("real", 0, None, "neither")))
    min_lr = float(check_scalar(min_lr, "min_lr", Interval("real", 0, lr)))
    weight_decay = float(check_scalar(weight_decay, "weight_decay", Interval("real", 0, None)))
    if grad_clip is not None:
        grad_clip = float(
            check_scalar(grad_clip, "grad_clip", Interval("real", 0, None, "neither"))
        )
    if time_limit is not None:
        time_limit = float(
            check_scalar(time_limit, "time_limit", Interval("real", 0, None, "neither"))
        )
    if not isinstance(generator, TaskGenerator):
        raise TypeError(f"generator must be a TaskGenerator, got {type(generator).__name__}")

    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    total = epochs * bpe
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=total, eta_min=min_lr)
    result = TrainResult()
    ckpt = Path(checkpoint_dir) if checkpoint_dir is not None else None
    config = _run_config(
        model,
        generator,
        dict(epochs=epochs, batches_per_epoch=bpe, lr=lr, min_lr=min_lr,
             weight_decay=weight_decay, grad_clip=grad_clip),
    )  # fmt: skip
    start_epoch = 0
    if ckpt is not None:
        ckpt.mkdir(parents=True, exist_ok=True)
        last = ckpt / "last.pt"
        if resume and last.exists():
            state = torch.load(last, weights_only=False)
            if "config" not in state:
                raise ValueError(
                    f"checkpoint_dir {str(ckpt)!r} holds a checkpoint without a stored run "
                    f"configuration (written by an older rml_fast), so resuming it cannot be "
                    f"checked; pass resume=False to start a fresh run there (it overwrites "
                    f"last.pt and best.pt) or use another checkpoint_dir"
                )
            diffs = _config_differences(state["config"], config)
            if diffs:  # checked before anything is loaded: model and generator are untouched
                raise ValueError(
                    f"checkpoint_dir {str(ckpt)!r} holds a run with another configuration, so "
                    f"it cannot be resumed: " + "; ".join(diffs) + ". Pass resume=False to "
                    "start a fresh run there (it overwrites last.pt and best.pt) or use "
                    "another checkpoint_dir"
                )
            model.load_state_dict(state["model"])
            opt.load_state_dict(state["optimizer"])
            sched.load_state_dict(state["scheduler"])
            generator.rng.bit_generator.state = state["rng"]
            result = state["result"]
            result.stopped = "finished"
            start_epoch = result.epochs_done
            if start_epoch >= epochs:
                warnings.warn(
                    f"{last} already holds this finished run ({result.epochs_done} epochs): "
                    f"its model was loaded and 0 steps were trained; pass resume=False to "
                    f"train again from scratch",
                    UserWarning,
                    stacklevel=2,
                )
            log.info("resumed from %s at epoch %d", last, start_epoch)
        elif last.exists():
            log.info("resume=False: starting a fresh run; %s will be overwritten", last)
            (ckpt / "best.pt").unlink(missing_ok=True)  # the old run's, not this one's
    result.start_epoch = start_epoch

    def save(best: bool) -> None:
        if ckpt is None:
            return
        state = dict(
            model=model.state_dict(),
            optimizer=opt.state_dict(),
            scheduler=sched.state_dict(),
            rng=generator.rng.bit_generator.state,
            result=result,
            config=config,
        )
        tmp = ckpt / "last.pt.tmp"
        torch.save(state, tmp)
        tmp.replace(ckpt / "last.pt")
        if best:
            torch.save(model.state_dict(), ckpt / "best.pt")

    t0 = time.monotonic()
    bar = tqdm(
        total=total, initial=start_epoch * bpe, disable=not progress, desc="train", leave=False
    )
    model.train()
    try:
        for epoch in range(start_epoch, epochs):
            running, steps = 0.0, 0
            for _ in range(bpe):
                b = generator.sample()
                opt.zero_grad(set_to_none=True)
                loss = nll_loss(model(b.xc, b.yc, b.xq), b.yq)
                loss.backward()
                if grad_clip is not None:
                    nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
                opt.step()
                sched.step()
                running += loss.item()
                steps += 1
                bar.update(1)
                bar.set_postfix(loss=f"{running / steps:.3f}")
                if time_limit is not None and time.monotonic() - t0 > time_limit:
                    result.stopped = "time_limit"
                    break
            entry: dict[str, float] = dict(
                epoch=epoch,
                train_loss=running / max(steps, 1),
                lr=float(sched.get_last_lr()[0]),  # a float (a 0-d tensor only for a tensor lr)
                seconds=time.monotonic() - t0,
            )
            best = False
            if val_batches:
                metrics = evaluate(model, val_batches)
                entry.update({f"val_{k}": v for k, v in metrics.items()})
                if metrics["loglik"] > result.best_val_loglik:
                    result.best_val_loglik, best = metrics["loglik"], True
            result.history.append(entry)
            result.epochs_done = epoch + 1
            log.info("epoch %d: %s", epoch, entry)
            save(best)
            if result.stopped == "time_limit":
                break
    except KeyboardInterrupt:
        result.stopped = "interrupted"
        log.warning("interrupted; last finished epoch %d is saved", result.epochs_done)
    finally:
        bar.close()
    return result
