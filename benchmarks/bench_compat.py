"""Drop-in front ends: scikit-learn's ``LassoCV`` vs ``rml_fast.compat.sklearn.LassoCV``.

The same user code with the import swapped, side by side in one process: ``LassoCV(cv=5)``
with its default 100-alpha grid and ``tol=1e-4`` (both stop at the same certified duality gap,
see ``docs/compat.md``). Real data shipped with scikit-learn, no download: ``diabetes``
(442 x 10) and ``digits`` (1797 x 64 pixels, the digit as a regression target); ``--quick``
runs ``diabetes`` only. Each row's note records whether both chose the same ``alpha_``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn import datasets
from sklearn.linear_model import LassoCV as SkLassoCV

from rml_fast.benchmarking import Suite
from rml_fast.compat.sklearn import LassoCV

SUITE = "compat"

_LOADERS = {"diabetes": datasets.load_diabetes, "digits": datasets.load_digits}


def _body(suite: Suite, case: dict[str, Any]) -> None:
    X, y = _LOADERS[case["data"]](return_X_y=True)
    X, y = np.asarray(X, dtype=np.float64), np.asarray(y, dtype=np.float64)
    ours = LassoCV(cv=5).fit(X, y)
    peer = SkLassoCV(cv=5).fit(X, y)
    note = (f"n x m = {X.shape[0]} x {X.shape[1]}; alpha_ ours {ours.alpha_:.4g}, "
            f"sklearn {peer.alpha_:.4g}")
    suite.compare(case, lambda: LassoCV(cv=5).fit(X, y), lambda: SkLassoCV(cv=5).fit(X, y),
                  peer_name="scikit-learn LassoCV", note=note)


def run(*, quick: bool = False, progress: bool = True, repeat: int = 5) -> Suite:
    names = ["diabetes"] if quick else ["diabetes", "digits"]
    cases = [{"task": "LassoCV", "data": d} for d in names]
    return Suite(SUITE, quick=quick, progress=progress, repeat=repeat).run(cases, _body)


if __name__ == "__main__":  # python benchmarks/bench_compat.py [--quick] [--out DIR] ...
    import sys

    from run_all import main

    raise SystemExit(main(sys.argv[1:], suite=SUITE))
