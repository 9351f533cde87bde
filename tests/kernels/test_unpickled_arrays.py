"""Native kernels accept arrays whose dtype is equal to, but not the same object as, numpy's
float64 (unpickled or memory-mapped arrays, as joblib and scikit-learn's checks hand over): the
binding compares dtypes by equivalence, not identity."""

from __future__ import annotations

import pickle

import numpy as np

from rml_fast.kernels.lasso import lasso_path
from rml_fast.privacy.pld import PrivacyLossDistribution


def test_lasso_path_accepts_unpickled_arrays():
    rng = np.random.default_rng(0)
    D = np.asfortranarray(rng.standard_normal((6, 9)))
    y = rng.standard_normal(6)
    D2, y2 = pickle.loads(pickle.dumps(D)), pickle.loads(pickle.dumps(y))
    assert D2.dtype is not D.dtype and D2.dtype == D.dtype  # the case the binding must accept
    a = lasso_path(D2, y2, [0.1, 0.05], backend="native")
    b = lasso_path(D, y, [0.1, 0.05], backend="native")
    np.testing.assert_array_equal(a.coefs, b.coefs)


def test_lasso_path_accepts_memory_mapped_design(tmp_path):
    rng = np.random.default_rng(1)
    D = np.asfortranarray(rng.standard_normal((5, 7)))
    path = tmp_path / "D.npy"
    np.save(path, D)
    Dm = np.load(path, mmap_mode="r")
    y = rng.standard_normal(5)
    np.testing.assert_array_equal(lasso_path(Dm, y, [0.05]).coefs, lasso_path(D, y, [0.05]).coefs)


def test_unpickled_privacy_loss_distribution_reads_out():
    pld = PrivacyLossDistribution.from_gaussian(1.0, h=1e-3).self_compose(4)
    again = pickle.loads(pickle.dumps(pld))
    assert again.get_epsilon_for_delta(1e-5) == pld.get_epsilon_for_delta(1e-5)
    assert again.get_delta_for_epsilon(1.0) == pld.get_delta_for_epsilon(1.0)
