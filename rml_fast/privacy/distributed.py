"""DP-C4 / DP-SGD under ``torch.distributed`` (data parallel, any backend; tested with gloo).

One private step of :class:`~rml_fast.privacy.dp_c4.DPC4Optimizer` on a global batch
``B_t = B_t^(0) u ... u B_t^(W-1)`` split over ``W`` ranks:

* every rank clips its own samples (per-sample clipping is local: the factors of sample ``i``
  depend on ``g_i`` only) and forms its weighted sums ``S^(r) = sum_{i in B_t^(r)} w_i g_i``
  (anchor and drift terms, already divided by the global expected batch size ``B``);
* the sums are all-reduced, ``S = sum_r S^(r)`` (the sums of the single-process step, up to
  the order of the float additions);
* the Gaussian noise ``std * z`` is added ONCE to ``S``: ``z`` is the Philox normal stream
  of the optimizer's key ``seed`` at the step's counter offset, the key is broadcast from
  rank 0 at construction, so every rank draws the same ``z`` and adds it to the same ``S``
  (no broadcast per step); the result is the single-process update for the same seed;
* the accountant sees the global sampling rate ``q = B / n`` (``sample_rate`` is the global
  rate, the step count is shared): the epsilon equals the single-process one.

Poisson sampling across ranks (:func:`shard_poisson_sampler`): index ``i`` of the whole data
set (size ``n``) belongs to rank ``i mod W``; every rank draws the same uniform mask
``u ~ U(0, 1)^n`` from a shared generator and keeps ``{i : u_i < q, i mod W = r}``. Each
index joins with probability ``q`` independently, so the union over ranks is a Poisson sample
of the whole data set -- exactly the batch of the single-process
:class:`~rml_fast.privacy.dp_c4.PoissonBatchSampler` for the same generator seed. Per-rank
batch sizes differ (that is what Poisson sampling means). Without Poisson sampling
(``poisson=False``), every step checks that the ranks hold equally many samples and raises
``ValueError`` ("an unsupported DDP setting") before any pass if they do not.

Without an initialised process group (or ``world_size == 1``) everything here is the
single-process code path.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from rml_fast._validation import Interval, check_scalar
from rml_fast.privacy.clipping import _philox_normal
from rml_fast.privacy.dp_c4 import (
    DPC4Optimizer,
    PoissonBatchSampler,
    _check_dataset,
    _collate_or_empty,
    calibrate_noise_multiplier,
)

__all__ = [
    "DistributedDPC4Optimizer",
    "ShardPoissonBatchSampler",
    "check_even_batches",
    "make_private_dpc4_distributed",
    "rank_and_world_size",
    "shard_poisson_sampler",
]

_UNSUPPORTED = "an unsupported DDP setting"


def rank_and_world_size(group: Any = None) -> tuple[int, int]:
    """``(rank, world_size)`` in ``group`` (the default group if None); ``(0, 1)`` when
    ``torch.distributed`` is unavailable or not initialised.

    Examples
    --------
    >>> from rml_fast.privacy.distributed import rank_and_world_size
    >>> rank_and_world_size()
    (0, 1)
    """
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return 0, 1
    return dist.get_rank(group), dist.get_world_size(group)


def _active(group: Any) -> bool:
    return rank_and_world_size(group)[1] > 1


def _src(group: Any) -> int:
    import torch.distributed as dist

    return 0 if group is None else dist.get_global_rank(group, 0)


def _broadcast_int(value: int, group: Any) -> int:
    """Rank 0's ``value`` on every rank (int64)."""
    import torch.distributed as dist

    if not _active(group):
        return int(value)
    t = torch.tensor([int(value)], dtype=torch.int64)
    dist.broadcast(t, _src(group), group=group)
    return int(t.item())


def _gather_objects(obj: Any, group: Any) -> list[Any]:
    import torch.distributed as dist

    if not _active(group):
        return [obj]
    out: list[Any] = [None] * rank_and_world_size(group)[1]
    dist.all_gather_object(out, obj, group=group)
    return out


class ShardPoissonBatchSampler(PoissonBatchSampler):
    """Poisson batches of one rank's shard of ``range(n)`` at the GLOBAL rate ``q``.

    Index ``i`` belongs to rank ``i mod world_size``. Each step draws the uniform mask
    ``u ~ U(0, 1)^n`` of the whole data set from ``generator`` (the same stream on every rank)
    and yields ``{i : u_i < q, i mod world_size = rank}`` (global indices, increasing). The
    union over the ranks is the batch :class:`~rml_fast.privacy.dp_c4.PoissonBatchSampler`
    yields for the same generator state: a Poisson sample of rate ``q`` of the whole data
    set. Use :func:`shard_poisson_sampler` to build one with a generator shared by all ranks.

    Parameters
    ----------
    n : int
        Size of the WHOLE data set.
    sample_rate : float
        Global Poisson rate ``q`` in (0, 1].
    rank, world_size : int
        This rank and the number of ranks (``0 <= rank < world_size``).
    steps : int, optional
        Batches per epoch (default ``round(1 / q)``).
    generator : torch.Generator, optional
        Must be in the same state on every rank.

    Examples
    --------
    >>> import torch
    >>> from rml_fast.privacy.distributed import ShardPoissonBatchSampler
    >>> a = ShardPoissonBatchSampler(10, 0.5, rank=0, world_size=2, steps=1,
    ...                              generator=torch.Generator().manual_seed(0))
    >>> b = ShardPoissonBatchSampler(10, 0.5, rank=1, world_size=2, steps=1,
    ...                              generator=torch.Generator().manual_seed(0))
    >>> all(i % 2 == 0 for i in next(iter(a))) and all(i % 2 == 1 for i in next(iter(b)))
    True
    """

    def __init__(self, n: int, sample_rate: float, *, rank: int, world_size: int,
                 steps: int | None = None, generator: torch.Generator | None = None) -> None:
        self.world_size = int(check_scalar(world_size, "world_size", Interval("int", 1, None)))
        self.rank = int(check_scalar(rank, "rank", Interval("int", 0, self.world_size - 1)))
        if steps is not None:
            steps = int(check_scalar(steps, "steps", Interval("int", 1, None)))
        super().__init__(n, sample_rate, steps=steps, generator=generator)

    def __iter__(self) -> Iterator[list[int]]:
        """Yield this rank's ``steps`` batches (lists of global indices)."""
        for _ in range(self.steps):
            mask = torch.rand(self.n, generator=self.generator) < self.sample_rate
            idx = mask.nonzero().flatten()
            yield idx[idx % self.world_size == self.rank].tolist()


def shard_poisson_sampler(n: int, sample_rate: float, *, seed: int | None = None,
                          steps: int | None = None, group: Any = None) -> ShardPoissonBatchSampler:
    """This rank's :class:`ShardPoissonBatchSampler` with a generator shared by all ranks.

    Parameters
    ----------
    n : int
        Size of the WHOLE data set (every rank holds it, or at least its own shard).
    sample_rate : float
        Global Poisson rate ``q = B / n``.
    seed : int, optional
        Seed of the shared generator; None draws one on rank 0 and broadcasts it. With the
        same seed the union of the ranks' batches equals
        ``PoissonBatchSampler(n, q, generator=torch.Generator().manual_seed(seed))``'s.
    steps : int, optional
        Batches per epoch (default ``round(1 / q)``).
    group : ProcessGroup, optional
        The process group (default: the default group; none initialised: one rank).

    Returns
    -------
    ShardPoissonBatchSampler

    Examples
    --------
    >>> from rml_fast.privacy.distributed import shard_poisson_sampler
    >>> s = shard_poisson_sampler(100, 0.1, seed=0)  # no process group: rank 0 of 1
    >>> (s.rank, s.world_size, len(s))
    (0, 1, 10)
    """
    if seed is None:
        seed = int(torch.randint(0, 2**62, (1,)).item())
    seed = int(check_scalar(seed, "seed", Interval("int", 0, None)))
    seed = _broadcast_int(seed, group)
    rank, world = rank_and_world_size(group)
    return ShardPoissonBatchSampler(n, sample_rate, rank=rank, world_size=world, steps=steps,
                                    generator=torch.Generator().manual_seed(seed))


def _batch_len(inputs: Any) -> int | None:
    """Length of dimension 0 of the first tensor in ``inputs`` (None if there is none)."""
    if isinstance(inputs, torch.Tensor):
        return int(inputs.shape[0]) if inputs.ndim else None
    if isinstance(inputs, (list, tuple)):
        items: Any = inputs
    elif isinstance(inputs, dict):
        items = list(inputs.values())
    else:
        return None
    for item in items:
        n = _batch_len(item)
        if n is not None:
            return n
    return None


class _AllReduceEngine:
    """A :class:`~rml_fast.privacy.clipping.ClippingEngine` whose ``accumulate`` all-reduces
    the clipped sums and then adds the (shared) noise once; everything else is delegated."""

    def __init__(self, engine: Any, group: Any) -> None:
        self._engine, self._group, self.entered = engine, group, False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    def signal(self, ok: bool) -> None:
        """The per-step status collective: raise if any rank failed before its sums."""
        import torch.distributed as dist

        flag = torch.tensor([1 if ok else 0], dtype=torch.int64)
        dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=self._group)
        if ok and int(flag.item()) == 0:
            raise RuntimeError(
                "another rank failed in this step before its clipped sums were formed (see "
                "its error); the parameters and the optimizer state were left as they were")

    def accumulate(self, terms: Any, *, noise_std: float = 0.0, seed: int = 0, offset: int = 0,
                   consume: bool = False) -> None:
        import torch.distributed as dist

        noise_std = float(check_scalar(noise_std, "noise_std", Interval("real", 0.0, None)))
        self.entered = True
        self.signal(True)
        self._engine.accumulate(terms, noise_std=0.0, seed=seed, offset=offset, consume=consume)
        params = self._engine.params
        flat = torch.cat([p.grad.reshape(-1) for p in params])
        dist.all_reduce(flat, op=dist.ReduceOp.SUM, group=self._group)
        o = 0
        for p in params:
            k = p.numel()
            g = flat[o:o + k].view(p.shape).clone()
            if noise_std > 0.0:
                g.add_(_philox_normal(k, seed, offset + o, p).view(p.shape), alpha=noise_std)
            p.grad = g
            o += k


class DistributedDPC4Optimizer(DPC4Optimizer):
    """:class:`~rml_fast.privacy.dp_c4.DPC4Optimizer` for data-parallel training.

    Every rank runs the same script with its own part of the global batch; per-sample
    clipping is per rank, the clipped sums are all-reduced, and the Gaussian noise is added
    once to the global sum (the same Philox stream on every rank: the key is broadcast from
    rank 0), so the update equals the single-process one for the same seed and global batch
    (to the order of the float additions). ``expected_batch_size`` and ``sample_rate`` are
    the GLOBAL ``B`` and ``q = B / n``; the accountant (:meth:`privacy_spent`) therefore gives
    the single-process epsilon. At construction the parameters (and buffers) are broadcast
    from rank 0, and the configurations of the ranks are compared.

    Parameters
    ----------
    module : torch.nn.Module
        This rank's replica of the model.
    *args, **kwargs
        As for :class:`~rml_fast.privacy.dp_c4.DPC4Optimizer` (global ``expected_batch_size``
        and ``sample_rate``).
    group : ProcessGroup, optional
        The process group (default group if None; none initialised: single process).
    poisson : bool, default=True
        Whether the batches come from Poisson sampling (:func:`shard_poisson_sampler`), where
        per-rank batch sizes legitimately differ. ``False``: every step all-gathers the
        per-rank batch sizes first and raises ``ValueError`` if they differ (uneven shards of
        fixed-size batches are not the single-process batch structure).
    broadcast_parameters : bool, default=True
        Copy rank 0's parameters and buffers to every rank at construction.

    Notes
    -----
    A rank whose step fails before its sums are formed (a NaN in its batch, a non-finite
    per-sample gradient) raises its error; the other ranks raise ``RuntimeError`` in the same
    step instead of waiting forever, and no rank changes its parameters. ``last_stats
    ["batch_size"]`` is this rank's batch size. With ``train_private(checkpoint=...)`` give
    each rank its own checkpoint path.

    Examples
    --------
    >>> import torch, torch.distributed as dist
    >>> from rml_fast.privacy.distributed import DistributedDPC4Optimizer
    >>> dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    >>> model = torch.nn.Linear(3, 1)
    >>> opt = DistributedDPC4Optimizer(model, lr=0.1, noise_multiplier=1.0,
    ...                                expected_batch_size=8, sample_rate=0.5, seed=0)
    >>> _ = opt.step(torch.nn.MSELoss(), torch.randn(8, 3), torch.randn(8, 1))
    >>> opt.steps
    1
    >>> dist.destroy_process_group()
    """

    def __init__(self, module: nn.Module, *args: Any, group: Any = None, poisson: bool = True,
                 broadcast_parameters: bool = True, **kwargs: Any) -> None:
        if not isinstance(poisson, bool):
            raise TypeError(f"poisson must be a bool, got {poisson!r}")
        if not isinstance(broadcast_parameters, bool):
            raise TypeError(f"broadcast_parameters must be a bool, got {broadcast_parameters!r}")
        super().__init__(module, *args, **kwargs)
        self.group, self.poisson = group, poisson
        self.rank, self.world_size = rank_and_world_size(group)
        if self.world_size == 1:
            return
        import torch.distributed as dist

        mine = {**self._fingerprint(), "poisson": poisson}
        configs = _gather_objects(mine, group)
        for r, other in enumerate(configs):
            if other != mine:
                diff = sorted(k for k in mine if other.get(k) != mine.get(k))
                raise ValueError(f"{_UNSUPPORTED}: rank {r}'s optimizer configuration differs "
                                 f"from rank {self.rank}'s in {diff}; every rank must build the "
                                 "optimizer with the same (global) arguments")
        self.seed = _broadcast_int(self.seed, group)
        if broadcast_parameters:
            with torch.no_grad():
                for t in [*module.parameters(), *module.buffers()]:
                    dist.broadcast(t.data, _src(group), group=group)
        self.engine = _AllReduceEngine(self.engine, group)  # type: ignore[assignment]

    def _check_even(self, inputs: Any) -> None:
        sizes = _gather_objects(_batch_len(inputs), self.group)
        if len(set(sizes)) > 1:
            raise ValueError(
                f"{_UNSUPPORTED}: per-rank batch sizes differ without Poisson sampling "
                f"(step {self.steps}, sizes by rank {sizes}); use equal per-rank batches "
                "(drop_last=True and a divisible data set) or Poisson sampling "
                "(shard_poisson_sampler, poisson=True)")

    def step(  # type: ignore[override]
        self,
        loss_fn: Any = None,
        inputs: Any = None,
        target: Any = None,
        *,
        closure: Any = None,
    ) -> torch.Tensor:
        """One private step on this rank's part ``(inputs, target)`` of the global batch;
        returns this rank's per-sample gradient norms at ``x_t``, (B_r,) float64.

        As :meth:`rml_fast.privacy.dp_c4.DPC4Optimizer.step`; the update (``p.grad`` and
        the parameters afterwards) is the same on every rank.

        Raises
        ------
        ValueError
            Without Poisson sampling, when the ranks' batch sizes differ (on every rank,
            before any pass); and as ``DPC4Optimizer.step``.
        RuntimeError
            When another rank failed in this step before its sums.
        """
        if self.world_size == 1:
            return super().step(loss_fn, inputs, target, closure=closure)
        if not self.poisson:
            self._check_even(inputs)
        engine: Any = self.engine
        engine.entered = False
        try:
            return super().step(loss_fn, inputs, target, closure=closure)
        except Exception:
            if not engine.entered:
                engine.signal(False)
            raise


def check_even_batches(loader: Any, *, group: Any = None) -> None:
    """Raise ``ValueError`` unless every rank's fixed-size loader yields equally many batches
    of one size (the non-Poisson DDP setting), before any training.

    Checks, over the ranks: the same ``batch_size`` and number of batches, and a shard size
    divisible by the batch size unless ``drop_last``.

    Examples
    --------
    >>> import torch
    >>> from rml_fast.privacy.distributed import check_even_batches
    >>> ds = torch.utils.data.TensorDataset(torch.zeros(10, 2))
    >>> check_even_batches(torch.utils.data.DataLoader(ds, batch_size=5))
    >>> check_even_batches(torch.utils.data.DataLoader(ds, batch_size=4))
    Traceback (most recent call last):
    ...
    ValueError: an unsupported DDP setting: ...
    """
    batch = getattr(loader, "batch_size", None)
    if batch is None:
        raise ValueError(f"{_UNSUPPORTED}: loader has no fixed batch_size (use Poisson "
                         "sampling: shard_poisson_sampler)")
    shard = len(loader.sampler)
    drop = bool(getattr(loader, "drop_last", False))
    mine = (int(batch), len(loader), shard % batch == 0 or drop)
    found = _gather_objects(mine, group)
    if any(f[2] is False for f in found) or len({f[:2] for f in found}) > 1:
        raise ValueError(
            f"{_UNSUPPORTED}: uneven per-rank batch sizes without Poisson sampling ((batch_size, "
            f"batches, last batch full) by rank: {found}); use drop_last=True with equal "
            "shards, or Poisson sampling (shard_poisson_sampler)")


def make_private_dpc4_distributed(
    model: nn.Module,
    optimizer_kwargs: dict[str, Any],
    data_loader: torch.utils.data.DataLoader,
    target_epsilon: float,
    target_delta: float,
    epochs: int,
    *,
    seed: int | None = None,
    group: Any = None,
) -> tuple[nn.Module, DistributedDPC4Optimizer, torch.utils.data.DataLoader]:
    """:func:`~rml_fast.privacy.dp_c4.make_private_dpc4` for data-parallel training.

    ``data_loader`` is over the WHOLE data set (size ``n``) with the GLOBAL expected batch
    size ``B``: ``q = B / n``, ``T = epochs * round(1 / q)``, the noise multiplier is
    calibrated for ``(target_epsilon, target_delta)`` as in the single-process call (the same
    value on every rank). Returns the model, a :class:`DistributedDPC4Optimizer` and this
    rank's loader over :func:`shard_poisson_sampler` (shared mask stream ``seed``). Train
    with :func:`~rml_fast.privacy.dp_c4.train_private` on every rank.

    Examples
    --------
    >>> import torch
    >>> from rml_fast.privacy.distributed import make_private_dpc4_distributed
    >>> ds = torch.utils.data.TensorDataset(torch.randn(40, 3), torch.randn(40, 1))
    >>> loader = torch.utils.data.DataLoader(ds, batch_size=10)
    >>> model, opt, dl = make_private_dpc4_distributed(
    ...     torch.nn.Linear(3, 1), {"lr": 0.1, "seed": 0}, loader, 5.0, 1e-5, 1, seed=0)
    >>> (opt.sample_rate, len(dl))
    (0.25, 4)
    """
    epochs = int(check_scalar(epochs, "epochs", Interval("int", 1, None)))
    _check_dataset(data_loader, "data_loader")
    dataset = data_loader.dataset
    n = len(dataset)  # type: ignore[arg-type]
    batch = data_loader.batch_size
    if batch is None:
        raise ValueError("data_loader must have a batch_size (the GLOBAL expected Poisson "
                         "batch size)")
    for key in ("noise_multiplier", "expected_batch_size", "sample_rate"):
        if key in optimizer_kwargs:
            raise ValueError(f"optimizer_kwargs must not set {key!r}: "
                             "make_private_dpc4_distributed sets it")
    q = batch / n
    sampler = shard_poisson_sampler(n, q, seed=seed, group=group)
    sigma = calibrate_noise_multiplier(target_epsilon, target_delta, q, epochs * len(sampler))
    loader = torch.utils.data.DataLoader(
        dataset, batch_sampler=sampler, collate_fn=_collate_or_empty(data_loader, dataset),
        num_workers=data_loader.num_workers)
    opt = DistributedDPC4Optimizer(model, noise_multiplier=sigma, expected_batch_size=batch,
                                   sample_rate=q, group=group, poisson=True, **optimizer_kwargs)
    return model, opt, loader
