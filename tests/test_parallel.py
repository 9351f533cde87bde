"""parallel_map and the grid/many helpers: a local Ray instance (started here) and a thread
pool give the serial results, in item order."""

from __future__ import annotations

import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch

from rml_fast.parallel import item_seeds, parallel_map

ray = pytest.importorskip("ray")

pytestmark = [
    # Ray's own start-up/shutdown leaves files and subprocesses to its reaper (not ours)
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
    pytest.mark.filterwarnings("ignore:Tip. In future versions of Ray:FutureWarning"),
]


@pytest.fixture(scope="module")
def local_ray():
    old = os.environ.get("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO")
    os.environ["RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO"] = "0"
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        yield "ray"
    finally:
        ray.shutdown()
        if old is None:
            os.environ.pop("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", None)
        else:
            os.environ["RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO"] = old


def _slow_square(x: int, seed: int) -> tuple[int, int, float]:
    time.sleep(0.05 * (3 - x % 4))  # later items tend to finish first
    return x, x * x, float(np.random.default_rng(seed).random())


def test_parallel_map_ray_and_pool_equal_serial_in_order(local_ray: str) -> None:
    items = list(range(8))
    serial = parallel_map(_slow_square, items, rng=7, seeds=True)
    assert [r[:2] for r in serial] == [(x, x * x) for x in items]
    assert [r[2] for r in serial] == [float(np.random.default_rng(s).random())
                                      for s in item_seeds(7, 8)]
    assert parallel_map(_slow_square, items, backend=local_ray, rng=7, seeds=True) == serial
    with ThreadPoolExecutor(3) as pool:
        assert parallel_map(_slow_square, items, backend=pool, rng=7, seeds=True) == serial


def test_bad_backend_and_missing_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="backend must be one of"):
        parallel_map(abs, [1], backend="dask")
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    with pytest.raises(ImportError, match=r"pip install 'rml_fast\[ray\]'"):
        parallel_map(abs, [1], backend="ray")
    with pytest.raises(ValueError, match="n must be"):
        item_seeds(0, -1)


def test_rashomon_grid_on_ray_equals_serial_sweep(local_ray: str) -> None:
    from rml_fast.trees.falling import rashomon_sweep
    from rml_fast.trees.grid import rashomon_grid

    rng = np.random.default_rng(1)
    X = rng.integers(0, 2, size=(120, 5))
    y = (rng.random(120) < 0.2 + 0.5 * X[:, 0] * X[:, 1] + 0.2 * X[:, 2]).astype(int)
    regs, depths = [0.005, 0.02, 0.05], [1, 2, 3]
    got = rashomon_grid(X, y, regs, depths, backend=local_ray, rashomon_multiplier=0.1)
    ref = rashomon_sweep(X, y, regs, depths, progress=False, rashomon_multiplier=0.1)
    assert len(got) == len(ref) == 9
    for g, r in zip(got, ref, strict=True):
        assert g.keys() == r.keys()
        for k in g:
            if k == "objectives":
                np.testing.assert_array_equal(g[k], r[k])
            else:
                assert g[k] == r[k], k
    assert len({r["n_trees"] for r in got}) > 1  # the grid points differ
    with pytest.raises(TypeError, match="regularization"):
        rashomon_grid(X, y, regs, depths, regularization=0.1)


def test_srls_many_on_ray_equals_serial(local_ray: str) -> None:
    from rml_fast.steering.srls_many import srls_many

    rng = np.random.default_rng(0)
    D = rng.standard_normal((24, 60))
    D /= np.linalg.norm(D, axis=0)
    concepts = {}
    for c, atoms in enumerate([[1, 7], [12, 30, 44], [5], [50, 51]]):
        delta = np.zeros(60)
        delta[atoms] = 1.0 + c
        deltas = D @ delta + 0.02 * rng.standard_normal((30, 24))
        concepts[f"c{c}"] = (deltas, np.arange(30) // 2)
    kw = dict(support="cv", cv=3, n_alphas=15, n_threads=1)
    serial = srls_many(D, concepts, rng=3, **kw)
    par = srls_many(D, concepts, backend=local_ray, rng=3, **kw)
    assert list(par) == list(concepts)
    for name in concepts:
        np.testing.assert_array_equal(par[name].support_, serial[name].support_)
        np.testing.assert_allclose(par[name].coef_, serial[name].coef_, rtol=1e-10, atol=1e-12)
    assert set(serial["c0"].support_.tolist()) >= {1, 7}
    with pytest.raises(TypeError, match="rng"):
        srls_many(D, concepts, rng=0, **{"rng": 1})


def test_query_circuits_many_on_ray_equals_serial(local_ray: str) -> None:
    from rml_fast.interp import LogitDiff
    from rml_fast.interp.circuit_search_many import query_circuits_many
    from rml_fast.models import TinyConfig, TinyTransformer

    model = TinyTransformer(TinyConfig(n_layers=2, d_model=16, n_heads=2, d_vocab=12), seed=0)
    prompts = [(torch.tensor([[a, 2, 3, a]]), torch.tensor([[a, 4, 3, a]])) for a in (1, 5, 7)]
    kw = dict(n_edges=[4, 10], n_samples=4, sampler="noise", steps=3)
    metric = LogitDiff(-1, 2, (4,))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as in a Ray worker with one CPU
    try:
        serial = query_circuits_many(model, prompts, metric, random_state=0, **kw)
    finally:
        torch.set_num_threads(threads)
    par = query_circuits_many(model, prompts, metric, backend=local_ray, random_state=0, **kw)
    assert len(par) == 3
    for s, p in zip(serial, par, strict=True):
        assert torch.equal(s.circuit_, p.circuit_)
        np.testing.assert_allclose(p.ndf_all_, s.ndf_all_, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="metric"):
        query_circuits_many(model, prompts, n_edges=3)
