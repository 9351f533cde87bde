"""One infeasibility error for every program and constraint set that has no feasible point."""

from __future__ import annotations

import numpy as np
import pytest

from rml_fast.exceptions import InfeasibleError


def test_every_infeasibility_error_is_one_class():
    from rml_fast.fairness import multiclass
    from rml_fast.strategic.ambiguity import InfeasibleRevealedSetError
    from rml_fast.strategic.decision_dependent import InfeasibleProgramError

    assert multiclass.InfeasibleError is InfeasibleError
    assert issubclass(InfeasibleProgramError, InfeasibleError)
    assert issubclass(InfeasibleRevealedSetError, InfeasibleError)


def test_a_negative_tolerance_is_caught_as_infeasible():
    from rml_fast.fairness.multiclass import exact_fair_lp

    rng = np.random.default_rng(0)
    eta = rng.dirichlet(np.ones(3), size=20)
    group_proba = rng.dirichlet(np.ones(2), size=20)
    assert exact_fair_lp(eta, group_proba, xi=0.0)["violation"] <= 1e-6
    with pytest.raises(InfeasibleError):
        exact_fair_lp(eta, group_proba, xi=-0.1)
