"""The docstring examples of the models / query-circuit modules run and give what they show."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "rml_fast.models",
    "rml_fast.models.transformer",
    "rml_fast.interp.edge_graph",
    "rml_fast.interp.circuit_metrics",
    "rml_fast.interp.circuit_eval",
    "rml_fast.interp.attribution",
    "rml_fast.interp.query_circuits",
    "rml_fast.kernels.circuits",
]


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
