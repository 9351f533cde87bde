"""Demo: train a small SFConvCNP and ConvCNP baselines on GP-RBF tasks for the same wall-clock
budget on the CPU, print held-out log-likelihoods next to the exact GP oracle, and plot
predictive bands to PNG. A thin wrapper of ``rml-fast demo np`` (the code lives in
``rml_fast.neural_processes.demo``):

    python benchmarks/demo_np.py --budget 120 --out np_demo.png

Every option of ``rml-fast demo np`` is passed through (``--help`` lists them); progress bars
go to stderr (``--no-progress`` turns them off), and bad values end in a one-line error.
"""

from __future__ import annotations

import sys

from rml_fast.cli import main

if __name__ == "__main__":
    raise SystemExit(main(["demo", "np", *sys.argv[1:]]))
