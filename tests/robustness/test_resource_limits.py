"""Resource limits (issue 25 §5): work whose memory is predictable is refused before it
allocates, with the estimate and the limit in the message, under a tiny limit; the default
limit lets the same calls run; streamed paths run under the tiny limit.

"Before it allocates" is checked by spying on the function that would allocate (the
einsum of the reference NUDFT, the Lasso backend, the batched circuit forward): it is never
called.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

import rml_fast.config as config
from rml_fast.config import check_memory, get_memory_limit, memory_limit, set_memory_limit
from rml_fast.exceptions import ResourceLimitError


@pytest.fixture(autouse=True)
def _restore_limit():
    yield
    set_memory_limit(None)


def _estimate(err: pytest.ExceptionInfo) -> int:
    """The byte count the message states (and the attribute agrees)."""
    m = re.search(r"needs about (?:\S+ \S+ \((\d+) bytes\)|(\d+) bytes)", str(err.value))
    assert m is not None, str(err.value)
    assert int(m.group(1) or m.group(2)) == err.value.estimate
    assert "memory limit of" in str(err.value) and "RML_FAST_MEMORY_LIMIT" in str(err.value)
    assert "nothing was allocated" in str(err.value)
    return err.value.estimate


# --------------------------------------------------------------------------- the limit itself


def test_exception_classes() -> None:
    assert issubclass(ResourceLimitError, MemoryError)
    assert issubclass(ResourceLimitError, ValueError)
    with memory_limit(100), pytest.raises(ResourceLimitError) as err:
        check_memory(101, "a buffer")
    assert err.value.limit == 100 and _estimate(err) == 101
    with memory_limit(100):
        check_memory(100, "a buffer")  # at the limit: allowed


def test_limit_settings(monkeypatch) -> None:
    monkeypatch.delenv("RML_FAST_MEMORY_LIMIT", raising=False)
    default = get_memory_limit()
    assert 0 < default <= config._available_bytes()
    monkeypatch.setenv("RML_FAST_MEMORY_LIMIT", "1.5G")
    assert get_memory_limit() == int(1.5 * 2**30)
    set_memory_limit("64M")  # an explicit setting wins over the environment
    assert get_memory_limit() == 64 * 2**20
    with memory_limit(1234):
        assert get_memory_limit() == 1234
    assert get_memory_limit() == 64 * 2**20
    set_memory_limit(None)
    assert get_memory_limit() == int(1.5 * 2**30)
    monkeypatch.setenv("RML_FAST_MEMORY_LIMIT", "lots")
    with pytest.raises(ValueError, match="RML_FAST_MEMORY_LIMIT"):
        get_memory_limit()


@pytest.mark.parametrize(("bad", "exc"), [(0, ValueError), (-5, ValueError), (1.5, TypeError),
                                      (True, TypeError), ("12 parsecs", ValueError)])
def test_bad_limits_are_refused(bad, exc) -> None:
    with pytest.raises(exc, match="nbytes"):
        set_memory_limit(bad)
    with pytest.raises(exc, match="nbytes"), memory_limit(bad):
        pass


# --------------------------------------------------------------------------- NUDFT


def test_reference_nudft_refuses_before_materialising(monkeypatch) -> None:
    from rml_fast.kernels import nudft

    grid = nudft.FrequencyGrid(2, 3.0, 0.5)
    F = grid.xi.shape[0]
    x, v = torch.rand(2, 300, 2), torch.rand(2, 300, 3)
    expected = nudft.nudft_type1_reference(x, v, grid)  # the default limit lets it run
    calls = []
    real = torch.einsum
    monkeypatch.setattr(torch, "einsum", lambda *a, **k: (calls.append(a[0]), real(*a, **k))[1])
    with memory_limit(10_000):
        with pytest.raises(ResourceLimitError) as err:
            nudft.nudft_type1_reference(x, v, grid)
        assert _estimate(err) == 3 * 2 * 300 * F * 4  # theta, cos, sin; float32
        assert "(2, 300, " in str(err.value) and "backend='native'" in str(err.value)
        plan = nudft.NUDFTPlan(grid, x, backend="reference")
        with pytest.raises(ResourceLimitError):
            plan.type1(v)
        assert calls == []  # nothing was materialised
        got = nudft.nudft_type1(x, v, grid, backend="native")  # streams: runs under the limit
    torch.testing.assert_close(got[0], expected[0], rtol=1e-4, atol=1e-4)


# --------------------------------------------------------------------------- Lasso


def test_lasso_path_refuses_before_solving(monkeypatch) -> None:
    from rml_fast.kernels import lasso

    rng = np.random.default_rng(0)
    D = rng.standard_normal((30, 200))
    Y = D[:, :3] @ rng.standard_normal((3, 4))
    lams = lasso.lambda_grid(D, Y[:, 0], n_lambdas=5)
    ref = lasso.lasso_path(D, Y, lams, n_threads=1)  # the default limit lets it run
    calls = []
    real = lasso._path
    monkeypatch.setattr(lasso, "_path", lambda *a, **k: (calls.append(1), real(*a, **k))[1])
    with memory_limit(40_000):
        with pytest.raises(ResourceLimitError) as err:
            lasso.lasso_path(D, Y, lams, n_threads=1)
        # dense coefficients L*B*m float64 + one Gram cache of min(m, 1024)^2 float64
        assert _estimate(err) == 5 * 4 * 200 * 8 + 200 * 200 * 8
        assert "sparse=True" in str(err.value)
    assert calls == []
    with memory_limit(5 * 4 * 200 * 8 + 200 * 200 * 8):
        got = lasso.lasso_path(D, Y, lams, n_threads=1)
    np.testing.assert_allclose(got.coefs, ref.coefs, rtol=1e-9, atol=1e-12)


# --------------------------------------------------------------------------- circuit batches


def test_circuit_chunk_refused_and_default_chunks_stream(monkeypatch) -> None:
    from rml_fast.interp import EdgeGraph, LogitDiff, circuit_eval, evaluate_masks
    from rml_fast.models import TinyConfig, TinyTransformer

    torch.set_num_threads(1)
    model = TinyTransformer(TinyConfig(n_layers=2, d_model=16, n_heads=2, d_vocab=10), seed=0)
    g = EdgeGraph.from_model(model)
    clean, corrupt = torch.tensor([[1, 2, 3, 5]]), torch.tensor([[1, 4, 3, 5]])
    metric = LogitDiff(pos=-1, answer=2, wrong=(4,))
    gen = torch.Generator().manual_seed(0)
    masks = torch.rand((64, *g.real_edge_mask.shape), generator=gen) < 0.5
    ref = evaluate_masks(model, g, clean, corrupt, masks, metric, chunk=64)
    per_mask = (g.n_fwd + 4 * 2) * 4 * 16 * 4
    calls = []
    real = circuit_eval._batched_forward
    monkeypatch.setattr(circuit_eval, "_batched_forward",
                        lambda *a, **k: (calls.append(1), real(*a, **k))[1])
    with memory_limit(10 * per_mask):
        with pytest.raises(ResourceLimitError) as err:
            evaluate_masks(model, g, clean, corrupt, masks, metric, chunk=64)
        assert _estimate(err) == 64 * per_mask and "smaller chunk" in str(err.value)
        assert calls == []
        got = evaluate_masks(model, g, clean, corrupt, masks, metric, chunk=8)  # fits: runs
    assert len(calls) == 8
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)


# --------------------------------------------------------------------------- Rashomon sets


def test_rashomon_search_memory_limit_stops_cleanly() -> None:
    """The native search has its own limit (MiB of search state): reached, it stops and says
    so (IncompleteSearchError with on_incomplete='raise'), never an out-of-memory kill."""
    from rml_fast.trees import FallingRashomonSet
    from rml_fast.trees.falling import IncompleteSearchError

    rng = np.random.default_rng(0)
    X = rng.integers(0, 2, size=(300, 12))
    y = (rng.random(300) < 0.2 + 0.6 * X[:, 0]).astype(int)
    with pytest.raises(IncompleteSearchError, match="memory limit"):
        FallingRashomonSet(depth_budget=4, regularization=0.001, memory_limit=1e-3,
                           on_incomplete="raise", progress=False).fit(X, y)


def test_rashomon_search_uses_the_process_limit_by_default() -> None:
    from rml_fast.trees import FallingRashomonSet
    from rml_fast.trees.falling import IncompleteSearchError

    rng = np.random.default_rng(0)
    X = rng.integers(0, 2, size=(300, 12))
    y = (rng.random(300) < 0.2 + 0.6 * X[:, 0]).astype(int)
    est = FallingRashomonSet(depth_budget=4, regularization=0.001, on_incomplete="raise",
                             progress=False)
    with memory_limit(1024), pytest.raises(IncompleteSearchError, match="process memory limit"):
        est.fit(X, y)
    small = FallingRashomonSet(depth_budget=2, progress=False).fit(X, y)  # default: completes
    assert small.complete_
