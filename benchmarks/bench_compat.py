"""Drop-in front ends: the same user code with the import swapped, side by side in one process.

* **LassoCV**: scikit-learn's ``LassoCV`` vs ``rml_fast.compat.sklearn.LassoCV`` (``cv=5``, the
  default 100-alpha grid, ``tol=1e-4``: both certify scikit-learn's duality-gap bound; ours, in
  Gram form on these tall data sets, stops at 0.03 of it, see ``docs/compat.md``) on real data
  shipped with scikit-learn: ``diabetes`` (442 x 10) and ``digits`` (1797 x 64 pixels, the
  digit as a regression target). The note records both ``alpha_``.
* **PLDAccountant**: ``dp_accounting.pld.PLDAccountant`` vs ``rml_fast.compat.dp_accounting.
  PLDAccountant`` on one self-composed Poisson-sampled Gaussian (1000 steps, q = 0.01,
  sigma = 1, ``value_discretization_interval=1e-4``), ``compose`` + ``get_epsilon(1e-5)``; the
  note records both epsilons (ours is an upper bound, like the peer's pessimistic PLD).
* **opacus epoch**: ``opacus.PrivacyEngine().make_private(...)`` vs
  ``rml_fast.compat.opacus.PrivacyEngine().make_private(...)``, one epoch of DP-SGD (Poisson
  sampling, expected batch 64, sigma = 1, C = 1, SGD) on scikit-learn's digits (1797 images)
  with an MLP (64-256-256-10) and a CNN (two 3x3 conv layers, 8x8 input).
* **torch.compile**: an SFConvCNP training step (forward, Gaussian NLL, backward) compiled with
  Inductor vs the same model in eager mode (ours vs ours; the compile time is excluded, the
  compiled function is warmed up first). The NUDFT kernels are ``torch.library`` custom
  operators, so the compiled graph has no breaks.

``--quick`` runs ``diabetes``, the accountant, the MLP epoch and skips the compile case
(Inductor's first compile takes minutes on two cores).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn import datasets
from sklearn.linear_model import LassoCV as SkLassoCV

from rml_fast.benchmarking import Suite, missing_peer
from rml_fast.compat.sklearn import LassoCV

SUITE = "compat"

_LOADERS = {"diabetes": datasets.load_diabetes, "digits": datasets.load_digits}


def _body(suite: Suite, case: dict[str, Any]) -> None:
    {"LassoCV": _lasso_cv, "PLDAccountant": _accountant, "opacus epoch": _opacus_epoch,
     "torch.compile": _compiled_step}[case["task"]](suite, case)


def _lasso_cv(suite: Suite, case: dict[str, Any]) -> None:
    X, y = _LOADERS[case["data"]](return_X_y=True)
    X, y = np.asarray(X, dtype=np.float64), np.asarray(y, dtype=np.float64)
    ours = LassoCV(cv=5).fit(X, y)
    peer = SkLassoCV(cv=5).fit(X, y)
    note = (f"n x m = {X.shape[0]} x {X.shape[1]}; alpha_ ours {ours.alpha_:.4g}, "
            f"sklearn {peer.alpha_:.4g}")
    suite.compare(case, lambda: LassoCV(cv=5).fit(X, y), lambda: SkLassoCV(cv=5).fit(X, y),
                  peer_name="scikit-learn LassoCV", note=note)


def _accountant(suite: Suite, case: dict[str, Any]) -> None:
    missing = missing_peer("dp_accounting")
    if missing:
        suite.skip(case, peer_name="dp-accounting PLDAccountant", reason=missing)
        return
    import dp_accounting
    from dp_accounting.pld.pld_privacy_accountant import PLDAccountant as PeerAccountant

    from rml_fast.compat.dp_accounting import PLDAccountant

    event = dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(case["q"], dp_accounting.GaussianDpEvent(case["sigma"])),
        case["steps"],
    )

    def epsilon(accountant_cls: Any) -> Any:
        return lambda: accountant_cls(value_discretization_interval=1e-4).compose(
            event).get_epsilon(1e-5)

    note = (f"epsilon at delta=1e-5: ours {epsilon(PLDAccountant)():.5f}, "
            f"dp-accounting {epsilon(PeerAccountant)():.5f}")
    suite.compare(case, epsilon(PLDAccountant), epsilon(PeerAccountant),
                  peer_name="dp-accounting PLDAccountant", note=note)


def _digits_loader() -> Any:
    import torch

    X, y = datasets.load_digits(return_X_y=True)
    data = torch.utils.data.TensorDataset(torch.tensor(X / 16.0, dtype=torch.float32),
                                          torch.tensor(y))
    return torch.utils.data.DataLoader(data, batch_size=64)


def _model(kind: str) -> Any:
    import torch
    from torch import nn

    torch.manual_seed(0)
    if kind == "mlp":
        return nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                             nn.Linear(256, 10))
    return nn.Sequential(nn.Unflatten(1, (1, 8, 8)), nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(),
                         nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.Flatten(),
                         nn.Linear(32 * 64, 10))


def _epoch(engine_cls: Any, kind: str) -> Any:
    """The user's code: make_private, then one epoch; only the engine class differs."""
    import torch
    from torch import nn

    def run() -> float:
        model = _model(kind)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model, optimizer, loader = engine_cls().make_private(
            module=model, optimizer=optimizer, data_loader=_digits_loader(),
            noise_multiplier=1.0, max_grad_norm=1.0, poisson_sampling=True)
        loss_fn = nn.CrossEntropyLoss()
        total = 0.0
        for xb, yb in loader:
            if len(xb) == 0:
                continue
            optimizer.zero_grad()
            loss = loss_fn(model(xb), yb)
            loss.backward()
            optimizer.step()
            total += float(loss)
        return total

    return run


def _opacus_epoch(suite: Suite, case: dict[str, Any]) -> None:
    missing = missing_peer("opacus")
    if missing:
        suite.skip(case, peer_name="opacus PrivacyEngine", reason=missing)
        return
    import warnings

    from opacus import PrivacyEngine as PeerEngine

    from rml_fast.compat.opacus import PrivacyEngine

    with warnings.catch_warnings():  # opacus warns about its secure RNG and full backward hooks
        warnings.simplefilter("ignore")
        suite.compare(case, _epoch(PrivacyEngine, case["model"]), _epoch(PeerEngine, case["model"]),
                      peer_name="opacus PrivacyEngine",
                      note="one epoch of digits, expected batch 64, Poisson sampling")


def _compiled_step(suite: Suite, case: dict[str, Any]) -> None:
    import torch

    from rml_fast.neural_processes.models import SFConvCNP

    torch.manual_seed(0)
    model = SFConvCNP(embed_channels=32, feedforward_channels=64, num_layers=2, groups=4)
    g = torch.Generator().manual_seed(1)
    xc, xq = torch.rand(16, 64, 1, generator=g), torch.rand(16, 64, 1, generator=g)
    yc, yq = torch.sin(8 * xc), torch.sin(8 * xq)

    def step(m: Any) -> Any:
        def run() -> None:
            dist = m(xc, yc, xq)
            (-dist.log_prob(yq).mean()).backward()
        return run

    eager = step(model)
    torch._dynamo.reset()
    compiled = torch.compile(step(model))
    compiled()  # the compile itself is not timed
    suite.compare(case, compiled, eager, peer_name="ours, eager",
                  note="SFConvCNP train step, B=16, 64 context / 64 target points")


def run(*, quick: bool = False, progress: bool = True, repeat: int = 5) -> Suite:
    names = ["diabetes"] if quick else ["diabetes", "digits"]
    cases: list[dict[str, Any]] = [{"task": "LassoCV", "data": d} for d in names]
    cases.append({"task": "PLDAccountant", "steps": 1000, "q": 0.01, "sigma": 1.0})
    cases += [{"task": "opacus epoch", "model": m} for m in (["mlp"] if quick else ["mlp", "cnn"])]
    if not quick:
        cases.append({"task": "torch.compile", "model": "SFConvCNP"})
    return Suite(SUITE, quick=quick, progress=progress, repeat=repeat).run(cases, _body)


if __name__ == "__main__":  # python benchmarks/bench_compat.py [--quick] [--out DIR] ...
    import sys

    from run_all import main

    raise SystemExit(main(sys.argv[1:], suite=SUITE))
