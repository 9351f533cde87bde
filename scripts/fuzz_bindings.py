"""Coverage-guided fuzzing (atheris) of the native kernels' bindings and their input checks.

Usage::

    python scripts/fuzz_bindings.py [--seconds-per-family 60] [--families sgg,lasso,...]
                                    [--out DIR] [--corpus DIR] [--timeout 30]

Every family (random, sgg, clip, lasso, gravitree, nudft, circuits) is fuzzed in its own
subprocess for a bounded time with two kinds of inputs, chosen by the fuzzer's bytes:

* **public calls**: the ``rml_fast.kernels.<family>`` public functions with mostly valid,
  small arguments, each perturbed by the fuzzer: wrong dtypes, shapes off by one, empty and
  non-contiguous arrays, read-only arrays, NaN / inf / huge values, negative / huge / non-int
  scalars, wrong types (None, str, list), unknown backends and devices;
* **native calls**: the ``rml_fast._C.<family>`` entry points called directly with the
  arguments that the public functions pass them (recorded once from valid seed calls), one or
  two of which are mutated the same way -- this exercises the bindings' own validation
  (shapes, dtypes, strides, sizes, writability), which the Python layer normally shields.

A call passes when it returns or raises ``ValueError`` / ``TypeError`` (pybind11 turns a
wrong argument type into ``TypeError``), and when it did not modify its input arrays (hashed
before and after; ``out=`` buffers of native calls excepted). Anything else -- another
exception, a mutated input, a crash (signal), or an input running past ``--timeout`` seconds --
is reported with the decoded call and the crashing input file (libFuzzer's ``crash-*`` /
``timeout-*`` artifact in ``--out``; replay with ``--family F --replay FILE``).

Coverage: atheris instruments the Python code of ``rml_fast`` (the kernels' wrappers and the
validation helpers), so inputs that reach new checks are kept. The C++ code is built by GCC
without ``-fsanitize=fuzzer`` and gives no coverage feedback; run this script under the
ASan/UBSan build (``scripts/sanitize.sh`` with ``SANITIZE_BUILD_ONLY=1``, then this script with
that environment, see docs/reliability.md) to turn silent memory errors into reports.

Exit status: 0 when no family reported anything, 1 otherwise. A JSON summary (executions and
outcomes per family) is written to ``--out``/summary.json.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import warnings

FAMILIES = ("random", "sgg", "clip", "lasso", "gravitree", "nudft", "circuits")
_EXPECTED = (ValueError, TypeError)
VERBOSE = False


class Finding(Exception):
    """A call broke the contract (mutated input, unexpected exception)."""

    key = ""


# --------------------------------------------------------------------------------------------
# Input generation from the fuzzer's bytes


class Gen:
    """Draws structured values from an ``atheris.FuzzedDataProvider``."""

    def __init__(self, fdp):
        self.fdp = fdp

    def int(self, lo: int, hi: int) -> int:
        return self.fdp.ConsumeIntInRange(lo, hi)

    def bool(self, p_true: int = 50) -> bool:
        return self.fdp.ConsumeIntInRange(0, 99) < p_true

    def pick(self, items):
        return items[self.fdp.ConsumeIntInRange(0, len(items) - 1)]

    def weird_int(self, value: int, *, size: bool = True):
        """Usually ``value``; sometimes a boundary, a negative, a huge or a non-int value.

        With ``size`` (the default) no huge but valid value (2**31) is drawn: asking for a
        16 GB result legitimately takes long and is the resource limits' business, not a crash.
        """
        if self.bool(70):
            return value
        big = [] if size else [2**31 - 1, 2**31, 2**40]
        return self.pick([0, -1, 1, 2, value - 1, value + 1, 2 * value + 3, -(2**31), 2**63 - 1,
                          2**63, -(2**63), 2**64, 1.5, float("nan"), None, "3", True, [value],
                          *big])

    def weird_float(self, value: float):
        """Usually ``value``; sometimes 0, negative, NaN, inf, huge, tiny or a non-number."""
        if self.bool(70):
            return value
        return self.pick([0.0, -0.0, -value, float("nan"), float("inf"), float("-inf"), 1e308,
                          -1e308, 5e-324, 1e-300, 2.0 * value + 1.0, None, "1.0", [value],
                          self.fdp.ConsumeRegularFloat()])

    def array(self, shape: tuple, dtype="float64", lo: float = -1.0, hi: float = 1.0):
        """A NumPy array of about ``shape`` and ``dtype``, perturbed with probability ~1/3."""
        import numpy as np

        shape = tuple(shape)
        if self.bool(12) and shape:  # a dimension off by one, or emptied
            ax = self.int(0, len(shape) - 1)
            shape = (*shape[:ax], max(0, shape[ax] + self.pick([-1, 1, -shape[ax]])), *shape[ax + 1:])
        if self.bool(6):  # one dimension more or less
            shape = shape[:-1] if (shape and self.bool()) else (*shape, self.int(0, 3))
        if self.bool(10):
            dtype = self.pick(["float32", "float64", "int64", "int32", "complex128", "bool",
                               "uint8", "float16", "object"])
        n = int(np.prod(shape)) if shape else 1
        vals = np.asarray(self.fdp.ConsumeFloatListInRange(min(n, 64), lo, hi) or [0.0])
        flat = np.resize(vals, n)
        if self.bool(10) and n:
            flat = flat.copy()
            flat[self.int(0, n - 1)] = self.pick([np.nan, np.inf, -np.inf, 1e300, -1e300])
        try:
            a = flat.reshape(shape).astype(dtype)
        except (ValueError, TypeError, OverflowError):
            a = flat.reshape(shape)
        if self.bool(10) and a.ndim:  # non-contiguous view with the same shape
            big = np.repeat(a, 2, axis=a.ndim - 1)
            a = big[..., ::2]
        elif self.bool(6) and a.ndim >= 2:  # Fortran order
            a = np.asfortranarray(a)
        if self.bool(5):
            a.setflags(write=False)
        if self.bool(3):
            return self.pick([None, "array", a.tolist(), 1.0])
        return a

    def tensor(self, shape: tuple, dtype="float64", lo: float = -1.0, hi: float = 1.0):
        """A torch tensor built like :meth:`array` (sometimes left as NumPy or a list)."""
        import numpy as np
        import torch

        a = self.array(shape, dtype, lo, hi)
        if not isinstance(a, np.ndarray) or self.bool(4):
            return a
        try:
            t = torch.from_numpy(np.ascontiguousarray(a))
        except TypeError:
            return a
        if self.bool(8) and t.ndim >= 2:  # a non-contiguous tensor
            t = t.transpose(-1, -2).contiguous().transpose(-1, -2)
        if self.bool(5):
            t = t.requires_grad_(True) if t.is_floating_point() else t
        return t

    def backend(self, valid: tuple = ("auto", "native", "reference")) -> str:
        if self.bool(90):
            return self.pick(list(valid))
        return self.pick(["triton", "cuda", "bogus", "", None, 3])

    def device(self):
        return self.pick([None, None, "cpu", "cpu", "meta", "cuda", "xyz", 0])


# --------------------------------------------------------------------------------------------
# Public-call cases per family: each takes a Gen and returns (label, callable, args, kwargs).


def _cases_random(g: Gen):
    from rml_fast.kernels import random as R

    n = g.weird_int(g.int(0, 200))
    seed, offset = g.weird_int(g.int(0, 2**32), size=False), g.weird_int(g.int(0, 2**40), size=False)
    which = g.int(0, 4)
    if which <= 1:
        fn = R.uniform if which == 0 else R.normal
        return fn, (n, seed, offset), {"device": g.device(), "backend": g.backend()}
    if which == 2:
        return R.philox4x32_reference, (seed, g.array((g.int(0, 8),), "uint64", 0, 1e6)), {}
    if which == 3:
        return R.seed_from_rng, (g.pick([None, 0, -1, 2**70, 1.5, "x", g.int(0, 99)]),), {}
    fn = g.pick([R.uniform_reference, R.normal_reference])
    return fn, (n, seed, offset), {}


def _pmf(g: Gen, n: int):
    import numpy as np

    a = g.array((n,), "float64", 0.0, 1.0)
    if isinstance(a, np.ndarray) and a.dtype == np.float64 and a.size and g.bool(70):
        with np.errstate(all="ignore"):
            a = a / max(float(np.nansum(np.abs(a))), 1e-300)
    return a


def _cases_sgg(g: Gen):
    from rml_fast.kernels import sgg as S

    which = g.int(0, 8)
    dim = g.weird_int(g.int(1, 6))
    sigma, k, p = g.weird_float(1.0), g.weird_float(g.pick([1.0, 2.0, 3.0])), g.weird_float(2.0)
    if which == 0:
        return S.sgg_sample, (g.weird_int(g.int(0, 50)), dim, sigma, k, p, g.weird_int(7),
                              g.weird_int(0)), {"dtype": g.pick(["float64", "float32", "int64", None]),
                                                "device": g.device(), "backend": g.backend()}
    if which == 1:
        return g.pick([S.counters_per_row, S.fft_good_size]), (g.weird_int(g.int(1, 5000)),), {}
    if which == 2:
        return S.pld_convolve, (_pmf(g, g.int(0, 40)), _pmf(g, g.int(0, 40))), {"backend": g.backend()}
    if which in (3, 4):
        fn = S.pld_delta_for_epsilon if which == 3 else S.pld_epsilon_for_delta
        lo, hi = (-2.0, 5.0) if which == 3 else (0.0, 1.0)
        return fn, (_pmf(g, g.int(0, 40)), g.weird_int(g.int(-30, 5)), g.weird_float(0.1),
                    g.weird_float(0.0), g.array((g.int(0, 6),), "float64", lo, hi)), {"backend": g.backend()}
    if which == 5:
        m = g.int(0, 30)
        return S.pld_self_convolve, (_pmf(g, m), g.weird_int(g.int(1, 9)), g.weird_int(g.int(1, 300)),
                                     g.weird_int(g.int(0, 5))), {"backend": g.backend()}
    if which == 6:
        return S.sgg_loss_cdf, (g.array((g.int(0, 6),), "float64", -3, 3), dim, sigma, k, p,
                                g.weird_float(1.0)), {"num_nodes": g.weird_int(g.int(2, 40)),
                                                      "backend": g.backend()}
    if which == 7:
        return S.radius_nodes, (dim, sigma, k, p, g.weird_int(g.int(2, 40))), {}
    return S.noise_like, (g.tensor((g.int(0, 5), g.int(1, 4))), sigma, k, p, g.weird_int(3)), {
        "backend": g.backend()}


def _cases_clip(g: Gen):
    from rml_fast.kernels import clip as C

    B, S, d, p = g.int(0, 4), g.int(0, 5), g.int(0, 6), g.int(0, 6)
    dt = g.pick(["float64", "float32"])
    A, D = g.tensor((B, S, d), dt), g.tensor((B, S, p), dt)
    which = g.int(0, 3)
    if which <= 1:
        fn = C.ghost_norm_sq if which == 0 else C.ghost_norm_sq_blas
        args = (A, D)
        if g.bool(40):
            S2 = g.int(0, 5)
            args = (A, D, g.tensor((B, S2, d), dt), g.tensor((B, S2, p), dt))
        kw = {"backend": g.backend()} if which == 0 else {"max_scratch": g.weird_int(g.int(1, 4096))}
        return fn, args, kw
    A2, D2 = g.tensor((B * S, d), dt), g.tensor((B * S, p), dt)
    fn = C.scaled_outer_accumulate if which == 2 else C.scaled_outer_accumulate_reference
    kw = {"noise_std": g.weird_float(g.pick([0.0, 0.5])), "seed": g.weird_int(1), "offset": g.weird_int(0)}
    if which == 2:
        kw["backend"] = g.backend()
    return fn, (A2, D2, g.tensor((B,), dt), g.weird_int(S)), kw


def _cases_lasso(g: Gen):
    from rml_fast.kernels import lasso as L

    n, m = g.int(0, 12), g.int(0, 10)
    dt = g.pick(["float64", "float32"])
    D = g.array((n, m), dt)
    Y = g.array((n,), dt) if g.bool() else g.array((n, g.int(1, 3)), dt)
    which = g.int(0, 5)
    if which == 0:
        lam = g.array((g.int(0, 5),), "float64", 0.0, 0.5)
        kw = {"tol": g.weird_float(1e-6), "max_epochs": g.weird_int(g.int(1, 200)),
              "ws_start": g.weird_int(g.int(1, 50)), "anderson_k": g.weird_int(g.int(0, 6)),
              "screening": g.pick(["gap_safe", None, "bogus"]), "working_set": g.bool(),
              "sparse": g.bool(), "n_threads": g.pick([None, 1, 2, 0, -1]),
              "backend": g.backend()}
        if g.bool(20):
            kw["warm_start"] = g.array((m,), dt)
        if g.bool(20):
            kw["col_norm2"] = g.array((m,), "float64", 0.0, 3.0)
        return L.lasso_path, (D, Y, lam), kw
    if which == 1:
        return L.lasso, (D, g.array((n,), dt), g.weird_float(0.1)), {"max_epochs": g.int(1, 100)}
    if which == 2:
        return L.lambda_max, (D, Y), {}
    if which == 3:
        return L.lambda_grid, (D, Y, g.weird_int(g.int(1, 20)), g.weird_float(1e-3)), {}
    if which == 4:
        return L.ridge_refit, (D, g.array((n,), dt), g.array((m,), "bool"), g.weird_float(0.1)), {}
    lam = g.array((g.int(0, 4),), "float64", 0.0, 0.5)
    return L.lasso_path_reference, (D, Y, lam), {"max_epochs": g.int(1, 50)}


def _cases_gravitree(g: Gen):
    from rml_fast.kernels import gravitree as G

    n, f = g.int(0, 20), g.int(0, 6)
    X = g.array((n, f), "float64", 0.0, 1.99)
    import numpy as np

    if isinstance(X, np.ndarray) and X.dtype.kind == "f" and g.bool(80):
        with np.errstate(invalid="ignore"):
            X = np.floor(X)
    y = g.array((n,), "float64", 0.0, 1.99)
    if isinstance(y, np.ndarray) and y.dtype.kind == "f" and g.bool(80):
        with np.errstate(invalid="ignore"):
            y = np.floor(y)
    w = g.array((n,), "float64", 0.0, 2.0) if g.bool(25) else None
    kw = {"regularization": g.weird_float(0.05), "depth": g.weird_int(g.int(1, 3)),
          "loss": g.pick(["misclassification", "balanced", "weighted", "bogus"]),
          "tau": g.weird_float(0.5), "falling": g.bool(),
          "bound_mode": g.pick(["multiplier", "additive", "count", "bogus"]),
          "bound_value": g.weird_float(0.05), "max_trees": g.weird_int(g.int(1, 500)),
          "time_limit": g.pick([None, 2.0, 0.0, -1.0]), "prune": g.bool(),
          "max_leaves": g.pick([None, g.int(1, 6), 0, -2]), "n_threads": g.pick([1, 2, 0, -1]),
          "backend": g.backend()}
    if g.bool(20):
        kw["memory_limit"] = g.weird_float(1e6)
    if g.bool(10):
        kw["branch"] = g.weird_int(2)
    fn = G.gravitree_fit if g.bool(85) else G.prepare_problem
    if fn is G.prepare_problem:
        kw.pop("backend")
    return fn, (X, y, w), kw


def _grid(g: Gen, dim: int):
    from rml_fast.kernels.nudft import FrequencyGrid

    # Valid grids only: the constructor's own bad input is case 0 of _cases_nudft.
    return FrequencyGrid(dim, g.pick([1.0, 2.0, 3.0]), g.pick([0.5, 1.0, 0.25]))


def _cases_nudft(g: Gen):
    from rml_fast.kernels import nudft as N

    dim = g.pick([1, 2])
    which = g.int(0, 5)
    if which == 0:
        return N.FrequencyGrid, (g.weird_int(dim), g.weird_float(2.0), g.weird_float(0.5)), {}
    grid = _grid(g, dim)
    B, Np, C = g.int(0, 3), g.int(0, 8), g.int(0, 3)
    dt = g.pick(["float64", "float32"])
    cdt = "complex128" if dt == "float64" else "complex64"
    x = g.tensor((B, Np, dim), dt, -2.0, 2.0)
    bk = ("auto", "native", "nufft", "reference")
    if which == 1:
        v = g.tensor((B, Np, C), g.pick([dt, cdt]))
        return N.nudft_type1, (x, v, grid), {"density": g.bool(), "sign": g.weird_int(-1),
                                             "backend": g.backend(bk)}
    F = grid.n_freq
    if which == 2:
        return N.nudft_type2, (x, g.tensor((B, F, C), cdt), grid, g.tensor((F,), dt)), {
            "sign": g.weird_int(1), "backend": g.backend(bk)}
    if which == 3:
        return N.nudft_type2_hermitian, (g.tensor((B, F, C), cdt), x, grid), {"backend": g.backend(bk)}
    if which == 4:
        return N.NUDFTPlan, (grid, x, g.pick([None, x])), {"backend": g.backend(bk)}
    v = g.tensor((B, Np, C), dt)
    return N.nudft_type1_reference, (x, v, grid), {"density": g.bool()}


def _cases_circuits(g: Gen):
    from rml_fast.kernels import circuits as K

    N_, S, J, K_ = g.int(0, 3), g.int(0, 4), g.int(0, 4), g.int(0, 6)
    dt = g.pick(["float64", "float32"])
    sf = g.bool(30)
    delta = g.tensor((S + g.int(0, 2), N_, K_) if sf else (N_, S + g.int(0, 2), K_), dt)
    mask = g.tensor((N_, S, J), g.pick(["bool", "bool", "uint8"]), 0.0, 1.99)
    base = g.tensor((J, K_), dt)
    kw = {"source_first": sf, "path": g.pick(["auto", "dense", "sparse", "bogus"]),
          "backend": g.backend()}
    if g.bool(30) and K_:
        Dn = g.pick([k for k in range(1, K_ + 1) if K_ % k == 0] + [K_ + 1])
        kw["ln"] = (g.tensor((Dn,), dt), g.pick([None, g.tensor((Dn,), dt)]), g.weird_float(1e-5))
    if g.bool(20):
        kw["out"] = g.tensor((J, N_, K_) if sf else (N_, J, K_), dt)
    if g.bool(15):
        kw["need"] = g.tensor((N_, J), "bool", 0.0, 1.99)
    fn = K.masked_mix if g.bool(85) else K.masked_mix_reference
    if fn is K.masked_mix_reference:
        kw = {k: v for k, v in kw.items() if k in ("source_first", "ln")}
    return fn, (delta, mask, base), kw


CASES = {"random": _cases_random, "sgg": _cases_sgg, "clip": _cases_clip, "lasso": _cases_lasso,
         "gravitree": _cases_gravitree, "nudft": _cases_nudft, "circuits": _cases_circuits}

# Valid seed calls of the public functions; the _C calls they make are recorded and mutated.
SEEDS = {
    "random": ["R.uniform(10, 1, 2)", "R.normal(9, 3, 0)"],
    "sgg": ["S.sgg_sample(4, 3, 1.0, 2.0, 2.0, 7)", "S.sgg_sample(3, 2, 1.0, 1.0, 2.0, 1, dtype=np.float32)",
            "S.pld_convolve(np.full(5, .2), np.full(7, 1/7), backend='native')",
            "S.pld_delta_for_epsilon(np.full(6, 1/6), -2, 0.1, 0.0, np.array([0.0, 0.1]))",
            "S.pld_epsilon_for_delta(np.full(6, 1/6), -2, 0.1, 0.0, np.array([1e-3, 0.1]))",
            "S.pld_self_convolve(np.full(6, 1/6), 3, 64, 0, backend='native')",
            "S.sgg_loss_cdf(np.linspace(-1, 1, 5), 2, 1.0, 2.0, 2.0, num_nodes=40)"],
    "clip": ["C.ghost_norm_sq(torch.randn(2, 3, 4, dtype=torch.float64), torch.randn(2, 3, 5, dtype=torch.float64))",
             "C.ghost_norm_sq(torch.randn(2, 3, 4), torch.randn(2, 3, 5), torch.randn(2, 2, 4), torch.randn(2, 2, 5))",
             "C.scaled_outer_accumulate(torch.randn(6, 4), torch.randn(6, 5), torch.rand(2), 3, noise_std=0.5)"],
    "lasso": ["L.lasso_path(np.asfortranarray(rng.standard_normal((8, 5))), rng.standard_normal(8), np.array([0.3, 0.1]))",
              "L.lasso_path(rng.standard_normal((8, 5)).astype(np.float32), rng.standard_normal((8, 2)).astype(np.float32), np.array([0.2]), sparse=True)"],
    "gravitree": ["G.gravitree_fit(rng.integers(0, 2, (16, 4)).astype(float), rng.integers(0, 2, 16).astype(float), depth=2, regularization=0.05)"],
    "nudft": ["N.nudft_type1(torch.rand(2, 5, 1, dtype=torch.float64), torch.randn(2, 5, 2, dtype=torch.float64), N.FrequencyGrid(1, 2.0, 0.5), backend='native')",
              "N.nudft_type1(torch.rand(1, 4, 2), torch.randn(1, 4, 1), N.FrequencyGrid(2, 1.0, 0.5), backend='native')",
              "N.nudft_type2(torch.rand(1, 4, 1), torch.randn(1, N.FrequencyGrid(1, 2.0, 0.5).n_freq, 2, dtype=torch.complex64), N.FrequencyGrid(1, 2.0, 0.5), torch.ones(N.FrequencyGrid(1, 2.0, 0.5).n_freq), backend='native')",
              "N.nudft_type1(torch.rand(1, 300, 1, dtype=torch.float64), torch.randn(1, 300, 2, dtype=torch.float64), N.FrequencyGrid(1, 40.0, 0.5), backend='nufft')",
              "N.nudft_type1(torch.rand(1, 300, 2, dtype=torch.float64), torch.randn(1, 300, 2, dtype=torch.float64), N.FrequencyGrid(2, 8.0, 0.5), backend='nufft')",
              "N.nudft_type2(torch.rand(1, 300, 1, dtype=torch.float64), torch.randn(1, N.FrequencyGrid(1, 40.0, 0.5).n_freq, 2, dtype=torch.complex128), N.FrequencyGrid(1, 40.0, 0.5), torch.ones(N.FrequencyGrid(1, 40.0, 0.5).n_freq, dtype=torch.float64), backend='nufft')",
              "N.nudft_type2(torch.rand(1, 300, 2, dtype=torch.float64), torch.randn(1, N.FrequencyGrid(2, 8.0, 0.5).n_freq, 2, dtype=torch.complex128), N.FrequencyGrid(2, 8.0, 0.5), torch.ones(N.FrequencyGrid(2, 8.0, 0.5).n_freq, dtype=torch.float64), backend='nufft')"],
    "circuits": ["K.masked_mix(torch.randn(2, 3, 4), torch.rand(2, 3, 2) > 0.5, torch.randn(2, 4), path='sparse', backend='native')",
                 "K.masked_mix(torch.randn(3, 2, 4, dtype=torch.float64), torch.rand(2, 3, 2) > 0.5, torch.randn(2, 4, dtype=torch.float64), path='sparse', backend='native', source_first=True, ln=(torch.ones(2, dtype=torch.float64), None, 1e-5))"],
}


# Native parameters that are trusted by contract and never mutated: ``gemm`` is the address of
# a BLAS routine (the Python layer passes SciPy's); any other integer there is a wild call.
TRUSTED_PARAMS = frozenset({"gemm"})


def _param_names(fn) -> list[str]:
    """Parameter names of a pybind11 function, from its signature line."""
    head = (getattr(fn, "__doc__", "") or "").split("\n", 1)[0]
    return re.findall(r"(?:\(|, )(\w+): ", head)


def _changed(x, y) -> bool:
    import numpy as np

    return isinstance(x, np.ndarray) and not np.array_equal(x, y, equal_nan=x.dtype.kind in "fc")


def record_native_calls(family: str) -> list[tuple]:
    """Run the family's seed calls and record every ``_C.<family>`` call they make."""
    import numpy as np
    import torch

    from rml_fast._native import _C
    from rml_fast.kernels import circuits as K  # noqa: F401
    from rml_fast.kernels import clip as C  # noqa: F401
    from rml_fast.kernels import gravitree as G  # noqa: F401
    from rml_fast.kernels import lasso as L  # noqa: F401
    from rml_fast.kernels import nudft as N  # noqa: F401
    from rml_fast.kernels import random as R  # noqa: F401
    from rml_fast.kernels import sgg as S  # noqa: F401

    sub = getattr(_C, family)
    recorded: list[tuple] = []
    originals = {}
    for name in dir(sub):
        fn = getattr(sub, name)
        if name.startswith("_") or not callable(fn) or isinstance(fn, type):
            continue
        originals[name] = fn

        def wrapper(*args, __name=name, __fn=fn, **kwargs):
            a0, k0 = _snapshot(args), _snapshot(kwargs)
            res = __fn(*args, **kwargs)
            # The arrays the entry point wrote are its outputs (not hashed when fuzzing).
            outs = tuple(i for i, (x, y) in enumerate(zip(args, a0, strict=True)) if _changed(x, y))
            out_keys = tuple(k for k in kwargs if _changed(kwargs[k], k0[k]))
            names = _param_names(__fn)
            trusted = tuple(i for i, nm in enumerate(names[:len(args)]) if nm in TRUSTED_PARAMS)
            recorded.append((__name, a0, k0, outs, out_keys, trusted))
            return res

        setattr(sub, name, wrapper)
    rng = np.random.default_rng(0)
    env = {"np": np, "torch": torch, "rng": rng, **{k: v for k, v in locals().items() if len(k) == 1}}
    try:
        for src in SEEDS[family]:
            eval(src, env)
    finally:
        for name, fn in originals.items():
            setattr(sub, name, fn)
    return recorded


def _snapshot(obj):
    import numpy as np

    if isinstance(obj, np.ndarray):
        return obj.copy(order="K")
    if isinstance(obj, (list, tuple)):
        return type(obj)(_snapshot(o) for o in obj)
    if isinstance(obj, dict):
        return {k: _snapshot(v) for k, v in obj.items()}
    return obj


def mutate(g: Gen, value):
    """One perturbation of a recorded native argument."""
    import numpy as np

    if isinstance(value, np.ndarray):
        kind = g.int(0, 9)
        a = value.copy(order="K")
        if kind == 0 and a.ndim:
            return a[tuple(slice(0, max(0, s - 1)) if i == g.int(0, a.ndim - 1) else slice(None)
                           for i, s in enumerate(a.shape))]
        if kind == 1 and a.ndim:
            return np.concatenate([a, a[-1:] if a.shape[0] else np.zeros((1, *a.shape[1:]), a.dtype)])
        if kind == 2:
            return a.astype(g.pick(["float32", "float64", "int64", "int32", "complex128", "bool",
                                    "uint8", "uint64"]))
        if kind == 3 and a.ndim:
            return np.repeat(a, 2, axis=a.ndim - 1)[..., ::2]
        if kind == 4:
            a.setflags(write=False)
            return a
        if kind == 5 and a.size and a.dtype.kind in "fc":
            a.reshape(-1)[g.int(0, a.size - 1)] = g.pick([np.nan, np.inf, -np.inf, 1e300, -1e300, 0.0])
            return a
        if kind == 6:
            return a.reshape(-1) if a.ndim != 1 else a.reshape(1, -1)
        if kind == 7:
            return np.zeros((0,) * max(a.ndim, 1), a.dtype)
        if kind == 8 and a.ndim >= 2:
            return np.asfortranarray(a) if a.flags.c_contiguous else np.ascontiguousarray(a)
        return g.pick([None, 1.0, [1.0, 2.0], "x"])
    if isinstance(value, bool):
        return g.pick([not value, None, 2])
    if isinstance(value, int):
        return g.weird_int(value) if g.bool(80) else g.pick([-1, 0, 2**63, -(2**62), value + 1])
    if isinstance(value, float):
        return g.weird_float(value) if g.bool(80) else g.pick([float("nan"), float("inf"), -1.0])
    if isinstance(value, (list, tuple)):
        items = list(value)
        if items and g.bool(60):
            i = g.int(0, len(items) - 1)
            items[i] = mutate(g, items[i])
        elif g.bool():
            items = items[:-1]
        else:
            items = items + items[-1:]
        return type(value)(items)
    if value is None:
        return g.pick([np.zeros(3), np.zeros((2, 2), np.float32), 0, "x"])
    return value


# --------------------------------------------------------------------------------------------
# Checks around one call


def _digest(obj, acc):
    import numpy as np

    try:
        import torch
    except ImportError:  # pragma: no cover
        torch = None
    if isinstance(obj, np.ndarray):
        if obj.dtype != object:
            acc.update(str((obj.shape, obj.dtype.str)).encode())
            acc.update(np.ascontiguousarray(obj).tobytes())
    elif torch is not None and isinstance(obj, torch.Tensor):
        acc.update(str((tuple(obj.shape), obj.dtype)).encode())
        if obj.device.type == "cpu":
            acc.update(obj.detach().contiguous().numpy().tobytes() if obj.dtype != torch.bfloat16
                       else obj.detach().float().numpy().tobytes())
    elif isinstance(obj, (list, tuple)):
        for o in obj:
            _digest(o, acc)
    elif isinstance(obj, dict):
        for k in sorted(obj, key=str):
            _digest(obj[k], acc)
    return acc


def _describe(obj) -> str:
    import numpy as np

    try:
        import torch
    except ImportError:  # pragma: no cover
        torch = None
    if isinstance(obj, np.ndarray):
        flags = ("C" if obj.flags.c_contiguous else "") + ("F" if obj.flags.f_contiguous else "")
        ro = "" if obj.flags.writeable else ",readonly"
        return f"ndarray(shape={obj.shape},dtype={obj.dtype},{flags or 'strided'}{ro})"
    if torch is not None and isinstance(obj, torch.Tensor):
        return f"tensor(shape={tuple(obj.shape)},dtype={obj.dtype},contig={obj.is_contiguous()})"
    if isinstance(obj, (list, tuple)) and len(obj) > 16:
        return f"{type(obj).__name__}(len={len(obj)})"
    if isinstance(obj, (list, tuple)):
        inner = ", ".join(_describe(o) for o in obj)
        return f"[{inner}]" if isinstance(obj, list) else f"({inner})"
    if isinstance(obj, dict):
        return "{" + ", ".join(f"{k}={_describe(v)}" for k, v in obj.items()) + "}"
    if hasattr(obj, "n_freq"):
        return f"FrequencyGrid(K={getattr(obj, 'K', '?')})"
    return repr(obj)[:80]


def check_call(label: str, fn, args: tuple, kwargs: dict, *, skip_args: tuple = (),
               skip_keys: tuple = ("out",)) -> str:
    """Call ``fn``; return "ok"/"ValueError"/"TypeError" or raise :class:`Finding`.

    Arrays at positions ``skip_args`` and keywords ``skip_keys`` are outputs, not hashed.
    """
    hashed_args = tuple(a for i, a in enumerate(args) if i not in skip_args)
    hashed_kw = {k: v for k, v in kwargs.items() if k not in skip_keys}
    before = _digest((hashed_args, hashed_kw), hashlib.sha256()).hexdigest()
    call = f"{label}(*{_describe(args)}, **{_describe(kwargs)})"
    if VERBOSE:  # replay: say what is called before a crash can hide it
        print(f"calling {call}", file=sys.stderr, flush=True)
    try:
        fn(*args, **kwargs)
        outcome = "ok"
    except _EXPECTED as exc:
        outcome = type(exc).__mro__[[c in _EXPECTED for c in type(exc).__mro__].index(True)].__name__
    except Exception as exc:
        finding = Finding(f"{type(exc).__name__}: {exc}\n  call: {call}")
        finding.key = f"{label}: {type(exc).__name__}"
        raise finding from exc
    if _digest((hashed_args, hashed_kw), hashlib.sha256()).hexdigest() != before:
        finding = Finding(f"input mutated\n  call: {call}")
        finding.key = f"{label}: input mutated"
        raise finding
    return outcome


# --------------------------------------------------------------------------------------------
# One family in this process (atheris), or the driver running every family in subprocesses


def _instrument_rml_fast(atheris) -> int:
    """Instrument (in place) every Python function and method of the loaded rml_fast modules.

    Done after import rather than with ``atheris.instrument_imports``, which does not see
    modules loaded by an editable install's custom import finder.
    """
    import inspect
    import types

    done = 0
    seen: set[int] = set()

    def visit(obj) -> None:
        nonlocal done
        if id(obj) in seen:
            return
        seen.add(id(obj))
        if isinstance(obj, (staticmethod, classmethod)):
            obj = obj.__func__
        if isinstance(obj, property):
            for f in (obj.fget, obj.fset):
                if f is not None:
                    visit(f)
            return
        if isinstance(obj, types.FunctionType) and (obj.__module__ or "").startswith("rml_fast"):
            try:
                atheris.instrument_func(obj)
                done += 1
            except Exception:
                pass
        elif inspect.isclass(obj) and (obj.__module__ or "").startswith("rml_fast"):
            for v in vars(obj).values():
                visit(v)

    for name, mod in list(sys.modules.items()):
        if name.startswith("rml_fast") and mod is not None:
            for v in list(vars(mod).values()):
                visit(v)
    return done


def run_family(family: str, seconds: int, out: str, timeout: int, replay: str | None,
               corpus: str | None = None) -> None:
    import atheris

    import rml_fast.kernels  # noqa: F401
    from rml_fast import _validation  # noqa: F401
    from rml_fast.kernels import circuits, clip, gravitree, lasso, nudft, random, sgg  # noqa: F401

    n_instrumented = _instrument_rml_fast(atheris)
    import numpy as np
    import torch

    from rml_fast._native import _C

    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    np.seterr(all="ignore")
    recorded = record_native_calls(family)
    sub = getattr(_C, family)
    stats = {"family": family, "native_calls_recorded": len(recorded),
             "functions_instrumented": n_instrumented, "executions": 0, "public": {}, "native": {},
             "findings": {}}
    stats_path = os.path.join(out, f"stats-{family}.json")
    last = [0.0]

    def one_input(data: bytes) -> None:
        stats["executions"] += 1
        try:
            one_call(data)
        except Finding as exc:
            # Recorded (first input per function and exception type) and fuzzing goes on.
            key = exc.key or str(exc).splitlines()[0][:160]
            if key not in stats["findings"]:
                import base64

                stats["findings"][key] = {"message": str(exc), "count": 0,
                                          "input_base64": base64.b64encode(data).decode()}
                print(f"FINDING [{family}] {exc}", file=sys.stderr, flush=True)
                _dump()
            stats["findings"][key]["count"] += 1
        now = time.monotonic()
        if now - last[0] > 2.0:
            last[0] = now
            _dump()

    def _dump() -> None:
        with open(stats_path, "w") as fh:
            json.dump(stats, fh, indent=1)

    def one_call(data: bytes) -> None:
        g = Gen(atheris.FuzzedDataProvider(data))
        if recorded and g.bool(45):
            name, args, kwargs, outs, out_keys, trusted = g.pick(recorded)
            args, kwargs = list(_snapshot(args)), _snapshot(kwargs)
            free = [i for i in range(len(args)) if i not in trusted]
            keys = sorted(k for k in kwargs if k not in TRUSTED_PARAMS)
            for _ in range(g.int(1, 2)):
                if free and (not keys or g.bool(80)):
                    i = g.pick(free)
                    args[i] = mutate(g, args[i])
                elif keys:
                    k = g.pick(keys)
                    kwargs[k] = mutate(g, kwargs[k])
            label = f"_C.{family}.{name}"
            res = check_call(label, getattr(sub, name), tuple(args), kwargs, skip_args=outs,
                             skip_keys=out_keys)
            bucket = stats["native"].setdefault(name, {})
        else:
            fn, args, kwargs = CASES[family](g)
            label = getattr(fn, "__qualname__", str(fn))
            res = check_call(label, fn, args, kwargs)
            bucket = stats["public"].setdefault(label, {})
        bucket[res] = bucket.get(res, 0) + 1

    if replay:
        global VERBOSE
        VERBOSE = True
        if os.path.exists(replay):
            with open(replay, "rb") as fh:
                data = fh.read()
        else:  # the base64 input of a finding in summary.json
            import base64

            data = base64.b64decode(replay)
        one_call(data)
        print(f"replayed {replay}: no finding")
        return
    argv = [sys.argv[0], f"-max_total_time={seconds}", f"-timeout={timeout}", "-rss_limit_mb=8192",
            f"-artifact_prefix={out}/{family}-", "-print_final_stats=1", "-max_len=4096",
            "-report_slow_units=1000000"]
    if corpus:  # kept inputs are written here and replayed first by the next run
        os.makedirs(os.path.join(corpus, family), exist_ok=True)
        argv.append(os.path.join(corpus, family))
    atheris.Setup(argv, one_input)
    atheris.Fuzz()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds-per-family", type=int, default=60)
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "rml_fast-fuzz"),
                    help="logs, crash files and summary.json (default: <tmp>/rml_fast-fuzz)")
    ap.add_argument("--timeout", type=int, default=30, help="seconds one input may run")
    ap.add_argument("--corpus", help="directory of kept inputs per family (read and extended); "
                    "replaying a corpus grown by a coverage-guided run is how the sanitizer run, "
                    "where atheris gets no Python coverage, reaches deep inputs")
    ap.add_argument("--family", help=argparse.SUPPRESS)
    ap.add_argument("--replay", help="with --family: run one saved input (file or base64)")
    a = ap.parse_args(argv)
    os.makedirs(a.out, exist_ok=True)
    if a.family:
        run_family(a.family, a.seconds_per_family, a.out, a.timeout, a.replay, a.corpus)
        return 0
    summary = {}
    bad = 0
    for fam in [f for f in a.families.split(",") if f]:
        if fam not in FAMILIES:
            ap.error(f"--families: unknown family {fam!r}; expected some of {FAMILIES}")
        t0 = time.monotonic()
        log = os.path.join(a.out, f"{fam}.log")
        with open(log, "w") as fh:
            proc = subprocess.run([sys.executable, __file__, "--family", fam, "--out", a.out,
                                   "--seconds-per-family", str(a.seconds_per_family),
                                   "--timeout", str(a.timeout),
                                   *(["--corpus", a.corpus] if a.corpus else [])],
                                  stdout=fh, stderr=subprocess.STDOUT, check=False)
        with open(log, errors="replace") as fh:
            text = fh.read()
        runs = re.findall(r"Done (\d+) runs in (\d+) second", text)
        stats_file = os.path.join(a.out, f"stats-{fam}.json")
        stats = {}
        if os.path.exists(stats_file):
            with open(stats_file) as fh:
                stats = json.load(fh)
        artifacts = [p for p in re.findall(r"Test unit written to (\S+)", text) if "slow-unit" not in p]
        sanitizer = re.findall(r"(ERROR: AddressSanitizer.*|runtime error:.*)", text)
        findings = stats.get("findings", {})
        finding = proc.returncode != 0 or bool(artifacts or sanitizer or findings)
        summary[fam] = {"executions": int(runs[-1][0]) if runs else stats.get("executions"),
                        "seconds": round(time.monotonic() - t0, 1), "returncode": proc.returncode,
                        "artifacts": artifacts, "sanitizer": sanitizer[:3],
                        "native_calls_recorded": stats.get("native_calls_recorded"),
                        "functions_instrumented": stats.get("functions_instrumented"),
                        "findings": findings, "outcomes_public": stats.get("public"),
                        "outcomes_native": stats.get("native")}
        print(f"{fam:10s} {'FINDING' if finding else 'ok':8s} executions="
              f"{summary[fam]['executions']} in {summary[fam]['seconds']} s "
              f"(native calls recorded: {summary[fam]['native_calls_recorded']}, "
              f"distinct findings: {len(findings)}, exit {proc.returncode})", flush=True)
        for key, f in findings.items():
            print(f"  [{key}] x{f['count']}, first: {f['message']}\n"
                  f"    input (base64): {f['input_base64'][:200]}")
        if proc.returncode != 0 or artifacts or sanitizer:
            m = re.search(r"(=== (?:Uncaught Python exception|Timeout).*?)(?:\nstat::|\Z)", text, re.S)
            print(m.group(1)[-3000:] if m else text[-3000:])
        bad += finding
    with open(os.path.join(a.out, "summary.json"), "w") as fh:
        json.dump(summary, fh, indent=1)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
