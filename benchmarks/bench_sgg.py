"""SGG mechanisms and PLD accounting: rml_fast vs NumPy, torch and dp-accounting.

Cases
- sampling: n x dim SGG noise (``sgg_sample``, C++ on the Philox stream) vs NumPy
  (``rng.gamma`` + ``rng.standard_normal`` + normalise) and torch (``torch._standard_gamma`` +
  ``torch.randn``); 1e6 x 128 (``--quick``: 3e4 x 128), float64 (p = 2, 1) and float32 (p = 2).
- fft: our C++ FFT (``pld_self_convolve``: real FFT, N-th power, inverse; ``pld_convolve``)
  vs the same computation on ``numpy.fft``, at the sizes of the N = 1000 composition.
- pld_compose: Gaussian PLD at h = 1e-4 composed N = 1000 times and read out at delta =
  1e-5, vs dp-accounting (its default connect-the-dots PLD, and its pessimistic PLD, which
  is the same discretisation as ours); also the Poisson-subsampled Gaussian (q = 0.01).
- calibrate: the Gaussian's sigma for (epsilon, 1e-5) after N releases (dim 10) vs
  dp-accounting's ``calibrate_dp_mechanism`` on its PLD accountant. The l2 member has no
  peer: its calibration times over dim {1,2,5,10,100} x eps {0.1,1,4} x N {1,100,1000} go
  to ``results/sgg_calibration.json``.
- The MSE table (best SGG member vs Gaussian vs l2, dim 1..20) is written to
  ``results/sgg_mse.json`` (dim 1 only, to ``sgg_mse_quick.json``, with ``--quick``).
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rml_fast.benchmarking import Suite, missing_peer
from rml_fast.kernels.sgg import _radius_nodes, angle_cdf_table, sgg_sample
from rml_fast.privacy import PrivacyLossDistribution, SGGMechanism, optimal_sgg
from rml_fast.privacy.sgg import _composed_pld

SUITE = "sgg"
HERE = Path(__file__).resolve().parent


def _numpy_sgg(n: int, dim: int, sigma: float, k: float, p: float, rng: np.random.Generator) -> np.ndarray:
    g = rng.gamma(k / p, size=n)
    z = rng.standard_normal((n, dim))
    return z * (sigma * g ** (1 / p) / np.linalg.norm(z, axis=1))[:, None]


def _torch_sgg(n: int, dim: int, sigma: float, k: float, p: float, gen: torch.Generator) -> torch.Tensor:
    g = torch._standard_gamma(torch.full((n,), k / p, dtype=torch.float64), generator=gen)
    z = torch.randn(n, dim, dtype=torch.float64, generator=gen)
    return z * (sigma * g ** (1 / p) / torch.linalg.norm(z, dim=1))[:, None]


def _sampling(suite: Suite, case: dict[str, Any]) -> None:
    n, dim, p = case["n"], case["dim"], case["p"]
    rng = np.random.default_rng(0)
    gen = torch.Generator().manual_seed(0)
    dtype = np.float32 if case.get("dtype") == "float32" else np.float64
    ours = lambda: sgg_sample(n, dim, 1.0, float(dim), p, seed=1, dtype=dtype)  # noqa: E731
    suite.compare(case, ours, lambda: _numpy_sgg(n, dim, 1.0, dim, p, rng), peer_name="numpy (gamma+normal+normalise)")
    suite.compare(case, ours, lambda: _torch_sgg(n, dim, 1.0, dim, p, gen), peer_name="torch (cpu)")


def _dp_accounting() -> Any:
    try:
        import dp_accounting
    except ImportError:  # pragma: no cover - the bench extra installs it
        return None
    return dp_accounting


def _compose(suite: Suite, case: dict[str, Any]) -> None:
    dpa = _dp_accounting()
    if dpa is None:
        for est, name in (("connect_dots", "connect-dots"), ("bucket", "pessimistic")):
            suite.skip({**case, "estimator": est}, peer_name=f"dp-accounting ({name})",
                       reason=missing_peer("dp_accounting") or "dp_accounting failed to import")
        return
    from dp_accounting.pld import privacy_loss_distribution as dpl

    std, q, n = case["std"], case["q"], case["n_comp"]

    def ours(estimator: str) -> float:
        pld = PrivacyLossDistribution.from_gaussian(std, h=1e-4, sampling_prob=q, estimator=estimator)
        return pld.self_compose(n).get_epsilon_for_delta(1e-5)

    def peer(connect_dots: bool) -> float:
        pld = dpl.from_gaussian_mechanism(
            std, sampling_prob=q, value_discretization_interval=1e-4, use_connect_dots=connect_dots
        )
        return pld.self_compose(n).get_epsilon_for_delta(1e-5)

    for est, dots, name in (("connect_dots", True, "connect-dots"), ("bucket", False, "pessimistic")):
        eps_o, eps_p = ours(est), peer(dots)
        suite.compare(
            {**case, "estimator": est}, lambda est=est: ours(est), lambda dots=dots: peer(dots),
            peer_name=f"dp-accounting ({name})", note=f"eps ours={eps_o:.6f} peer={eps_p:.6f}",
        )


def _calibrate(suite: Suite, case: dict[str, Any]) -> None:
    """Gaussian calibration: ours (closed form) vs dp-accounting's PLD calibration."""
    dpa = _dp_accounting()
    if dpa is None:
        suite.skip(case, peer_name="dp-accounting calibrate_dp_mechanism",
                   reason=missing_peer("dp_accounting") or "dp_accounting failed to import")
        return
    dim, eps, n = case["dim"], case["eps"], case["n_comp"]

    def peer() -> float:
        def event(sigma: float) -> Any:
            return dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(sigma), n)

        return dpa.calibrate_dp_mechanism(
            lambda: dpa.pld.PLDAccountant(value_discretization_interval=1e-4), event, eps, 1e-5
        )

    ours = lambda: SGGMechanism.calibrate(dim, eps, 1e-5, num_compositions=n)  # noqa: E731
    std = ours().sigma / math.sqrt(2)
    saved = suite.repeat
    suite.repeat = 1
    try:
        suite.compare(case, ours, peer, peer_name="dp-accounting calibrate_dp_mechanism",
                      memory=False, note=f"std ours={std:.6g} peer={peer():.6g}")
    finally:
        suite.repeat = saved


def calibration_times(grid: list[tuple[int, float, int]], p: float = 1.0) -> list[dict[str, Any]]:
    """Wall time of SGGMechanism.calibrate for non-Gaussian members (no peer supports them)."""
    rows = []
    for dim, eps, n in grid:
        if dim >= 2:
            angle_cdf_table(dim)  # one-off per dim (~1 s of betainc); not part of the timing
        _composed_pld.cache_clear()  # no cached PLDs or radius rules from earlier calls
        _radius_nodes.cache_clear()
        start = time.perf_counter()
        mech = SGGMechanism.calibrate(dim, eps, 1e-5, p=p, num_compositions=n)
        rows.append({
            "dim": dim, "epsilon": eps, "delta": 1e-5, "num_compositions": n, "p": p,
            "seconds": time.perf_counter() - start, "sigma": mech.sigma, "mse": mech.mse(),
        })
    return rows


def _fft(suite: Suite, case: dict[str, Any]) -> None:
    """Our C++ FFT vs numpy.fft on the same transform (size, N-th power, rotation)."""
    from rml_fast.kernels.sgg import fft_good_size, pld_convolve, pld_self_convolve

    pmf = PrivacyLossDistribution.from_gaussian(case["std"], h=1e-4).pmf
    size = fft_good_size(case["window"])
    suite.compare(
        {**case, "size": size},
        lambda: pld_self_convolve(pmf, case["n_comp"], size, 5),
        lambda: pld_self_convolve(pmf, case["n_comp"], size, 5, backend="reference"),
        peer_name="numpy.fft (rfft, power, irfft)",
    )
    big = np.convolve(pmf, pmf)
    suite.compare(
        {**case, "kind": "fft_convolve", "size": fft_good_size(big.size + pmf.size - 1)},
        lambda: pld_convolve(big, pmf),
        lambda: pld_convolve(big, pmf, backend="reference"),
        peer_name="numpy.fft (rfft, product, irfft)",
    )


def _body(suite: Suite, case: dict[str, Any]) -> None:
    kinds = {"sampling": _sampling, "pld_compose": _compose, "calibrate": _calibrate, "fft": _fft}
    kinds[case["kind"]](suite, case)


def mse_table(dims: list[int], h: float = 1e-3) -> list[dict[str, Any]]:
    """MSE of the best SGG member (p-grid + refinement, k = dim) vs Gaussian vs l2."""
    rows = []
    for dim in dims:
        best, table = optimal_sgg(dim, 1.0, 1e-5, value_discretization_interval=h, rtol=1e-4)
        rows.append({
            "dim": dim, "epsilon": 1.0, "delta": 1e-5, "h": h,
            "best_p": best.p, "best_mse": best.mse(),
            "gaussian_mse": float(table["gaussian_mse"]), "l2_mse": float(table["l2_mse"]),
        })
    return rows


PARTS = ("sampling", "fft", "pld_compose", "calibrate", "tables")


def run(
    *, quick: bool = False, progress: bool = True, repeat: int = 5, parts: tuple[str, ...] = PARTS
) -> Suite:
    """Run the cases of ``parts`` (default all; a subset keeps one timed run short)."""
    n = 3 * 10**4 if quick else 10**6
    cases: list[dict[str, Any]] = []
    if "sampling" in parts:
        cases += [{"kind": "sampling", "n": n, "dim": 128, "p": p} for p in (2.0, 1.0)]
        cases += [{"kind": "sampling", "n": n, "dim": 128, "p": 2.0, "dtype": "float32"}]
    if "fft" in parts:
        cases += [{"kind": "fft", "std": 20.0, "n_comp": 1000, "window": 30_000 if quick else 262_833}]
    if "pld_compose" in parts:
        cases += [
            {"kind": "pld_compose", "std": 20.0, "q": 1.0, "n_comp": 1000},
            {"kind": "pld_compose", "std": 1.0, "q": 0.01, "n_comp": 1000},
        ][1 if quick else 0 :]
    if "calibrate" in parts:
        cal = [(2, 1.0, 1)] if quick else [(10, e, nc) for e in (0.1, 1.0, 4.0) for nc in (1, 100, 1000)]
        cases += [{"kind": "calibrate", "dim": d, "eps": e, "n_comp": nc} for d, e, nc in cal]
    if quick:
        repeat = min(repeat, 3)
    suite = Suite(SUITE, quick=quick, progress=progress, repeat=repeat).run(cases, _body)
    if "tables" in parts:
        out = Path(os.environ.get("RML_FAST_BENCH_OUT", HERE / "results"))
        out.mkdir(parents=True, exist_ok=True)
        tag = "_quick" if quick else ""
        rows = mse_table([1] if quick else list(range(1, 21)))
        (out / f"sgg_mse{tag}.json").write_text(json.dumps(rows, indent=2) + "\n")
        grid = [(2, 1.0, 1)] if quick else [
            (d, e, nc) for d in (1, 2, 5, 10, 100) for e in (0.1, 1.0, 4.0) for nc in (1, 100, 1000)
        ]
        (out / f"sgg_calibration{tag}.json").write_text(json.dumps(calibration_times(grid), indent=2) + "\n")
    return suite


if __name__ == "__main__":  # python benchmarks/bench_sgg.py [--quick] [--out DIR] ...
    import sys

    from run_all import main

    raise SystemExit(main(sys.argv[1:], suite=SUITE))
