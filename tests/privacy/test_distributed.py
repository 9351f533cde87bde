"""DP-C4 / DP-SGD under torch.distributed (gloo, 2 processes on loopback) equal the single
process for the same seeds; uneven non-Poisson batches and a failing rank raise clearly."""

from __future__ import annotations

import math
import os
import socket

import pytest
import torch
from torch import nn

from rml_fast.privacy.distributed import (
    DistributedDPC4Optimizer,
    ShardPoissonBatchSampler,
    check_even_batches,
    shard_poisson_sampler,
)
from rml_fast.privacy.dp_c4 import DPC4Optimizer, PoissonBatchSampler, train_private

N, Q, STEPS, SEED, MASK_SEED, DELTA = 48, 0.25, 5, 11, 5, 1e-5
CONFIGS = {
    "dpc4": {"algorithm": "dpc4", "beta0": 0.7},
    "dpsgd": {"algorithm": "dpsgd"},
    "dpc4-low": {"algorithm": "dpc4", "beta0": 0.7, "memory": "low"},
}


def _data() -> torch.utils.data.TensorDataset:
    g = torch.Generator().manual_seed(3)
    x = torch.randn(N, 4, generator=g, dtype=torch.float64)
    return torch.utils.data.TensorDataset(x, (x[:, 0] + x[:, 1] > 0).long())


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2)).double()


def _opt_kwargs(name: str) -> dict:
    return dict(lr=0.5, noise_multiplier=0.8, expected_batch_size=round(Q * N), sample_rate=Q,
                anchor_clip=0.5, seed=SEED, **CONFIGS[name])


def _train(opt_cls: type, sampler: torch.utils.data.Sampler, name: str) -> tuple[list, float]:
    model = _model()
    opt = opt_cls(model, **_opt_kwargs(name))
    loader = torch.utils.data.DataLoader(_data(), batch_sampler=sampler)
    eps = train_private(model, opt, loader, nn.CrossEntropyLoss(), 1, DELTA, progress=False)
    return [p.detach().clone() for p in model.parameters()], eps[-1]


def _train_even(opt_cls: type, rank: int, world: int) -> list:
    model = _model()
    kw = {"poisson": False} if world > 1 else {}
    opt = opt_cls(model, **_opt_kwargs("dpc4"), **kw)
    x, y = _data().tensors
    per = 8 // world
    for t in range(STEPS):
        a = 8 * t + per * rank
        opt.step(nn.CrossEntropyLoss(), x[a:a + per], y[a:a + per])
    return [p.detach().clone() for p in model.parameters()]


def _worker(rank: int, world: int, port: int, out: str) -> None:
    import datetime

    import torch.distributed as dist

    torch.set_num_threads(1)
    # a short timeout: a broken collective fails the test instead of hanging it for 30 min
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=120))
    try:
        res: dict = {}
        for name in CONFIGS:
            sampler = shard_poisson_sampler(N, Q, seed=MASK_SEED, steps=STEPS)
            res[name] = _train(DistributedDPC4Optimizer, sampler, name)
        # fixed-size batches split evenly over the ranks (poisson=False): the single process
        # on the whole batches
        res["even"] = _train_even(DistributedDPC4Optimizer, rank, world)
        # without Poisson sampling, uneven per-rank batches raise on every rank before a pass
        model = _model()
        opt = DistributedDPC4Optimizer(model, poisson=False, **_opt_kwargs("dpc4"))
        x, y = _data().tensors
        b = 4 + rank
        try:
            opt.step(nn.CrossEntropyLoss(), x[:b], y[:b])
        except ValueError as exc:
            res["uneven"] = (str(exc), opt.steps, model[0].weight.grad is None)
        # a NaN on rank 1: rank 1 raises its ValueError, rank 0 a RuntimeError, no deadlock
        xb = x[:6].clone()
        if rank == 1:
            xb[0, 0] = math.nan
        before = [p.detach().clone() for p in model.parameters()]
        try:
            opt.step(nn.CrossEntropyLoss(), xb, y[:6])
        except (ValueError, RuntimeError) as exc:
            same = all(torch.equal(a, p) for a, p in zip(before, model.parameters(), strict=True))
            res["nan"] = (type(exc).__name__, str(exc), same)
        ds = torch.utils.data.TensorDataset(torch.zeros(10 + rank, 2))
        try:
            check_even_batches(torch.utils.data.DataLoader(ds, batch_size=5))
        except ValueError as exc:
            res["loader"] = str(exc)
        torch.save(res, os.path.join(out, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def ddp_results(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    import torch.multiprocessing as mp

    out = tmp_path_factory.mktemp("ddp")
    mp.spawn(_worker, args=(2, _free_port(), str(out)), nprocs=2, join=True)
    return [torch.load(out / f"rank{r}.pt", weights_only=False) for r in range(2)]


@pytest.mark.parametrize("name", list(CONFIGS))
def test_two_ranks_equal_single_process(ddp_results: list[dict], name: str) -> None:
    sampler = PoissonBatchSampler(N, Q, steps=STEPS, generator=torch.Generator().manual_seed(MASK_SEED))
    ref, eps = _train(DPC4Optimizer, sampler, name)
    untrained = list(_model().parameters())
    for res in ddp_results:
        weights, eps_r = res[name]
        assert eps_r == eps  # the accountant sees the global rate q and the shared step count
        for w, r, u in zip(weights, ref, untrained, strict=True):
            torch.testing.assert_close(w, r, rtol=1e-10, atol=1e-12)
            assert not torch.allclose(w, u)  # it trained
    # both ranks hold the same model
    for a, b in zip(ddp_results[0][name][0], ddp_results[1][name][0], strict=True):
        assert torch.equal(a, b)


def test_even_fixed_batches_equal_single_process(ddp_results: list[dict]) -> None:
    ref = _train_even(DPC4Optimizer, 0, 1)
    for res in ddp_results:
        for w, r in zip(res["even"], ref, strict=True):
            torch.testing.assert_close(w, r, rtol=1e-10, atol=1e-12)


def test_uneven_batches_without_poisson_raise(ddp_results: list[dict]) -> None:
    for res in ddp_results:
        msg, steps, untouched = res["uneven"]
        assert "an unsupported DDP setting" in msg and "[4, 5]" in msg
        assert steps == 0 and untouched
        assert "an unsupported DDP setting" in res["loader"]


def test_a_failing_rank_does_not_hang_the_others(ddp_results: list[dict]) -> None:
    kind0, msg0, same0 = ddp_results[0]["nan"]
    kind1, msg1, same1 = ddp_results[1]["nan"]
    assert (kind0, kind1) == ("RuntimeError", "ValueError")
    assert "another rank failed" in msg0 and "inputs" in msg1
    assert same0 and same1


def test_shard_union_is_the_single_process_poisson_batch() -> None:
    gen = torch.Generator().manual_seed(MASK_SEED)
    full = list(PoissonBatchSampler(N, Q, steps=STEPS, generator=gen))
    shards = [list(ShardPoissonBatchSampler(N, Q, rank=r, world_size=3, steps=STEPS,
                                            generator=torch.Generator().manual_seed(MASK_SEED)))
              for r in range(3)]
    for t in range(STEPS):
        parts = [shards[r][t] for r in range(3)]
        assert sorted(i for p in parts for i in p) == full[t]
        assert all(i % 3 == r for r, p in enumerate(parts) for i in p)


def test_single_process_fallback_and_bad_arguments() -> None:
    s = shard_poisson_sampler(N, Q, seed=MASK_SEED, steps=STEPS)
    assert list(s) == list(PoissonBatchSampler(N, Q, steps=STEPS,
                                               generator=torch.Generator().manual_seed(MASK_SEED)))
    with pytest.raises(ValueError, match="rank"):
        ShardPoissonBatchSampler(N, Q, rank=2, world_size=2)
    with pytest.raises(TypeError, match="poisson"):
        DistributedDPC4Optimizer(_model(), poisson="yes", **_opt_kwargs("dpc4"))
