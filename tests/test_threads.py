"""Thread control of the native kernels (rml_fast.set_num_threads, threadpoolctl, OMP_NUM_THREADS)
and thread safety: every kernel family called from a thread pool gives the serial result bit for bit.

``_C.parallel_width()`` opens a parallel region the way the kernels open theirs
(``num_threads(rml::max_threads())``) and returns the team size it got: the observable that
the settings reach the kernels.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import rml_fast
from rml_fast import _C

OPENMP = bool(_C.build_info()["openmp"])
CORES = os.cpu_count() or 1


@pytest.fixture(autouse=True)
def _no_limit_left_behind():
    yield
    rml_fast.set_num_threads(None)


def _in_other_thread(fn):
    out = []
    t = threading.Thread(target=lambda: out.append(fn()))
    t.start()
    t.join()
    return out[0]


def test_process_wide_limit_reaches_every_python_thread():
    rml_fast.set_num_threads(1)
    assert rml_fast.get_num_threads() == 1
    assert _in_other_thread(rml_fast.get_num_threads) == 1
    assert _C.parallel_width() == 1
    assert _in_other_thread(_C.parallel_width) == 1
    rml_fast.set_num_threads(None)
    assert _C.thread_limit() == 0


@pytest.mark.skipif(not OPENMP or CORES < 2, reason="needs OpenMP and 2 cores")
def test_limit_above_one_gives_that_many_threads():
    rml_fast.set_num_threads(2)
    assert _C.parallel_width() == 2
    assert _in_other_thread(_C.parallel_width) == 2


def test_context_manager_restores_the_previous_limit():
    rml_fast.set_num_threads(2)
    with rml_fast.num_threads(1):
        assert rml_fast.get_num_threads() == 1
        assert _in_other_thread(rml_fast.get_num_threads) == 1
    assert _C.thread_limit() == 2
    with pytest.raises(RuntimeError, match="boom"), rml_fast.num_threads(1):
        raise RuntimeError("boom")
    assert _C.thread_limit() == 2


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_bad_thread_counts_raise_and_change_nothing(bad):
    rml_fast.set_num_threads(2)
    with pytest.raises((TypeError, ValueError), match="n must be"):
        rml_fast.set_num_threads(bad)
    with pytest.raises((TypeError, ValueError), match="n must be"), rml_fast.num_threads(bad):
        pass
    assert _C.thread_limit() == 2


@pytest.mark.skipif(not OPENMP, reason="needs OpenMP")
def test_threadpoolctl_limits_the_kernels_of_its_thread():
    threadpoolctl = pytest.importorskip("threadpoolctl")
    # compare with this thread's own value before the block: a fresh thread's default can differ
    # once any library (torch.set_num_threads, for one) has set this thread's OpenMP count
    before = rml_fast.get_num_threads()
    with threadpoolctl.threadpool_limits(limits=1, user_api="openmp"):
        assert rml_fast.get_num_threads() == 1
        assert _C.parallel_width() == 1
    assert rml_fast.get_num_threads() == before


@pytest.mark.skipif(not OPENMP, reason="needs OpenMP")
def test_omp_num_threads_is_respected_and_set_num_threads_overrides_it():
    code = (
        "import rml_fast; from rml_fast import _C\n"
        "print(rml_fast.get_num_threads(), _C.parallel_width())\n"
        "rml_fast.set_num_threads(1); print(rml_fast.get_num_threads())\n"
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["1", "1", "1"]


def test_explicit_n_threads_is_capped_by_the_limit_and_gives_the_same_result():
    from rml_fast.kernels.lasso import lasso_path

    rng = np.random.default_rng(0)
    D = np.asfortranarray(rng.standard_normal((20, 60)))
    Y = rng.standard_normal((20, 4))
    free = lasso_path(D, Y, [0.1, 0.05], n_threads=2)
    with rml_fast.num_threads(1):
        capped = lasso_path(D, Y, [0.1, 0.05], n_threads=2)
    np.testing.assert_array_equal(free.coefs, capped.coefs)


# --- thread safety: each family from a thread pool, bit for bit ----------------------------


def _families():
    import torch

    from rml_fast.kernels import clip
    from rml_fast.kernels.circuits import masked_mix
    from rml_fast.kernels.lasso import lasso_path
    from rml_fast.kernels.nudft import FrequencyGrid, nudft_type1
    from rml_fast.kernels.random import normal
    from rml_fast.kernels.sgg import pld_convolve, sgg_sample
    from rml_fast.privacy.pld import PrivacyLossDistribution

    g = torch.Generator().manual_seed(0)
    rng = np.random.default_rng(0)
    D = np.asfortranarray(rng.standard_normal((24, 80)))
    Y = rng.standard_normal((24, 3))
    x = torch.rand(3, 40, 1, generator=g, dtype=torch.float64) * 4 - 2
    v = torch.randn(3, 40, 2, generator=g, dtype=torch.float64)
    grid = FrequencyGrid(1, 2.0, 0.25)
    A = torch.randn(6, 9, 7, generator=g, dtype=torch.float64)
    G = torch.randn(6, 9, 5, generator=g, dtype=torch.float64)
    delta = torch.randn(4, 11, 37, generator=g, dtype=torch.float64)
    mask = torch.rand(4, 9, 7, generator=g) < 0.3
    base = torch.randn(7, 37, generator=g, dtype=torch.float64)
    a, b = rng.random(3000), rng.random(2000)
    return {
        "random": lambda: np.asarray(normal(50_000, seed=3)),
        "sgg": lambda: np.asarray(sgg_sample(2000, 8, 1.0, 2.0, 1.5, seed=5)),
        "pld": lambda: np.array([
            pld_convolve(a, b)[::97].sum(),
            PrivacyLossDistribution.from_gaussian(1.0, h=1e-3).self_compose(6)
            .get_epsilon_for_delta(1e-5),
        ]),
        "lasso": lambda: lasso_path(D, Y, [0.2, 0.1, 0.05]).coefs,
        "nudft": lambda: nudft_type1(x, v, grid, backend="native")[0].numpy(),
        "clip": lambda: clip.ghost_norm_sq(A, G, backend="native").numpy(),
        "circuits": lambda: masked_mix(delta, mask, base, backend="native").numpy(),
    }


@pytest.mark.parametrize("name", ["random", "sgg", "pld", "lasso", "nudft", "clip", "circuits"])
def test_kernels_are_thread_safe_bit_for_bit(name):
    fn = _families()[name]
    serial = fn()
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda _: fn(), range(8)))
    for r in results:
        np.testing.assert_array_equal(r, serial)
