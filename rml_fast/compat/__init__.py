"""Drop-in front ends for libraries users already run, with rml_fast's kernels inside.

One module per library, each importable on its own (the peer library is imported only by the
module that needs it):

- :mod:`rml_fast.compat.sklearn`: ``Lasso``, ``LassoCV`` and ``lasso_path`` with
  scikit-learn's semantics on the native Lasso kernel.
- :mod:`rml_fast.compat.dp_accounting`: a ``dp_accounting.PrivacyAccountant`` backed by
  rml_fast's privacy-loss distributions.
- :mod:`rml_fast.compat.opacus`: a ``PrivacyEngine`` with opacus' ``make_private`` API on
  rml_fast's clipping engine and PLD accountant.
"""

from __future__ import annotations

__all__: list[str] = []  # the public names live in the submodules
