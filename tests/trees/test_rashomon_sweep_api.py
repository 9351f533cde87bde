"""One Rashomon-sweep API: ``rashomon_sweep`` and its alias ``rashomon_grid`` both take
``backend=`` and ``checkpoint=``; every backend gives the serial records exactly, and a
checkpoint written by one resumes in the other."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from rml_fast.parallel import parallel_map
from rml_fast.trees import falling
from rml_fast.trees.falling import rashomon_sweep
from rml_fast.trees.grid import rashomon_grid

rng = np.random.default_rng(3)
X = rng.integers(0, 2, size=(120, 5))
y = (rng.random(120) < 0.2 + 0.5 * X[:, 0] * X[:, 1] + 0.2 * X[:, 2]).astype(int)
REGS, DEPTHS = [0.005, 0.02], [1, 2]


def _same(a: list, b: list) -> None:
    assert len(a) == len(b) == len(REGS) * len(DEPTHS)
    for ra, rb in zip(a, b, strict=True):
        assert ra.keys() == rb.keys()
        for k in ra:
            if k == "objectives":
                np.testing.assert_array_equal(ra[k], rb[k])
            else:
                assert ra[k] == rb[k], k


@pytest.fixture(scope="module")
def serial() -> list:
    return rashomon_sweep(X, y, REGS, DEPTHS, progress=False, rashomon_multiplier=0.1)


def test_parallel_map_on_result_sees_every_item_once():
    seen: dict[int, int] = {}
    with ThreadPoolExecutor(2) as pool:
        out = parallel_map(abs, [-3, 1, -2, 5], backend=pool,
                           on_result=lambda i, r: seen.__setitem__(i, r))
    assert out == [3, 1, 2, 5] and seen == {0: 3, 1: 1, 2: 2, 3: 5}
    with pytest.raises(TypeError, match="on_result"):
        parallel_map(abs, [1], on_result=3)


def test_sweep_on_an_executor_with_a_checkpoint_equals_serial(serial, tmp_path):
    ck = tmp_path / "sweep.ckpt"
    with ThreadPoolExecutor(2) as pool:
        got = rashomon_sweep(X, y, REGS, DEPTHS, backend=pool, checkpoint=ck, progress=False,
                             rashomon_multiplier=0.1)
    _same(got, serial)
    assert ck.exists()
    # the alias resumes the same file: every point is loaded, no search runs
    real = falling.FallingRashomonSet.fit

    def no_fit(self, *a, **kw):  # pragma: no cover - fails the test if reached
        raise AssertionError("a finished grid point was searched again")

    falling.FallingRashomonSet.fit = no_fit
    try:
        again = rashomon_grid(X, y, REGS, DEPTHS, checkpoint=ck, rashomon_multiplier=0.1)
    finally:
        falling.FallingRashomonSet.fit = real
    _same(again, serial)


def test_grid_alias_resumes_a_partial_checkpoint(serial, tmp_path, monkeypatch):
    ck = tmp_path / "grid.ckpt"
    real, fits = falling.FallingRashomonSet.fit, []

    def stop_at_third(self, *a, **kw):
        fits.append((self.regularization, self.depth_budget))
        if len(fits) == 3:
            raise KeyboardInterrupt
        return real(self, *a, **kw)

    monkeypatch.setattr(falling.FallingRashomonSet, "fit", stop_at_third)
    with pytest.raises(KeyboardInterrupt):
        rashomon_grid(X, y, REGS, DEPTHS, checkpoint=ck, rashomon_multiplier=0.1)
    monkeypatch.setattr(falling.FallingRashomonSet, "fit", real)
    with ThreadPoolExecutor(2) as pool:
        got = rashomon_sweep(X, y, REGS, DEPTHS, backend=pool, checkpoint=ck, progress=False,
                             rashomon_multiplier=0.1)
    _same(got, serial)


def test_both_names_check_arguments_before_any_search():
    for fn, name in ((rashomon_sweep, "rashomon_sweep"), (rashomon_grid, "rashomon_grid")):
        with pytest.raises(ValueError, match="backend"):
            fn(X, y, REGS, DEPTHS, backend="dask")
        with pytest.raises(TypeError, match=f"{name} sets 'regularization'"):
            fn(X, y, REGS, DEPTHS, regularization=0.1)
        with pytest.raises(ValueError, match="depth_budgets"):
            fn(X, y, REGS, [0])
