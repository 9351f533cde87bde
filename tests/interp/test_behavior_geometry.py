"""Behavioural vs hidden-state geometry (arXiv 2602.00628): PPMI against a dense reference,
RSA against scipy and rsatoolbox, pair indexing against numpy, the synthetic-agent oracle,
trial collection with repairs, the held-out-words regression, and bad input."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.stats import pearsonr, spearmanr

from rml_fast.interp._behavior_geometry_kernels import pair_from_linear
from rml_fast.interp.behavior_geometry import (
    HeldOutWordsRegression,
    SyntheticAgent,
    centered_cosine,
    collect_forced_choice,
    collect_free_association,
    cosine_similarity_rows,
    count_matrix,
    layerwise_rsa,
    ppmi,
    rsa,
    sample_pairs,
)


def _dense_ppmi(C, alpha=1.0):
    C = np.asarray(C, float)
    N = C.sum()
    col = C.sum(0) ** alpha
    col = col / col.sum() * N
    with np.errstate(divide="ignore", invalid="ignore"):
        pmi = np.log(C * N / (C.sum(1, keepdims=True) * col))
    return np.where((C > 0) & (pmi > 0), pmi, 0.0)


@pytest.mark.parametrize("alpha", [1.0, 0.75])
def test_ppmi_matches_a_dense_reference(alpha):
    rng = np.random.default_rng(0)
    C = rng.poisson(0.7, (30, 45)).astype(float)
    C[3] = 0  # an empty cue row
    np.testing.assert_allclose(
        ppmi(sp.csr_matrix(C), alpha).toarray(), _dense_ppmi(C, alpha), rtol=1e-12
    )


def test_ppmi_of_independent_counts_is_zero():
    C = np.outer([1.0, 3.0, 2.0], [4.0, 1.0, 5.0, 2.0])
    assert ppmi(C).nnz == 0


def test_count_matrix_rows_columns_and_self_responses():
    C, rows, cols = count_matrix(
        ["cat", "cat", "dog", "owl"],
        [["dog", "cat"], ["dog"], ["bone", "cat"], ["night"]],
        vocab=["dog", "cat"],
    )
    assert rows == ["dog", "cat"] and cols == ["dog", "bone", "cat"]
    np.testing.assert_array_equal(C.toarray(), [[0, 1, 1], [2, 0, 0]])
    C2, _, cols2 = count_matrix(["cat"], [["Cat ", "DOG"]], drop_self=False)
    assert cols2 == ["cat", "dog"] and C2.sum() == 2


def test_pair_indexing_matches_numpy_triu():
    for n in (2, 3, 7, 50, 2000):
        ii, jj = np.triu_indices(n, 1)
        k = np.arange(ii.size, dtype=np.int64)
        a, b = pair_from_linear(k, n)
        np.testing.assert_array_equal(a, ii)
        np.testing.assert_array_equal(b, jj)
    ii, jj = sample_pairs(1000, 5000, rng=3)
    assert (
        ii.size == 5000
        and np.all(ii < jj)
        and len(set(zip(ii.tolist(), jj.tolist(), strict=True))) == 5000
    )


def test_rsa_against_scipy_and_rsatoolbox():
    rsatoolbox = pytest.importorskip("rsatoolbox")
    rng = np.random.default_rng(1)
    S1 = centered_cosine(rng.normal(size=(25, 4)))
    S2 = centered_cosine(rng.normal(size=(25, 4)) + 0.5 * rng.normal(size=(25, 4)))
    iu = np.triu_indices(25, 1)
    assert rsa(S1, S2) == pytest.approx(pearsonr(S1[iu], S2[iu])[0], abs=1e-12)
    assert rsa(S1, S2, method="spearman") == pytest.approx(spearmanr(S1[iu], S2[iu])[0], abs=1e-12)
    rdms = rsatoolbox.rdm.RDMs(np.stack([1 - S1[iu], 1 - S2[iu]]))
    peer = rsatoolbox.rdm.compare(rdms[0], rdms[1], method="corr")[0, 0]
    assert rsa(S1, S2) == pytest.approx(peer, abs=1e-10)
    # invariances: itself = 1; Pearson under positive affine maps; Spearman under monotone maps
    assert rsa(S1, S1) == pytest.approx(1.0, abs=1e-12)
    assert rsa(S1, 2.0 * S2 + 7.0) == pytest.approx(rsa(S1, S2), abs=1e-12)
    assert rsa(S1, np.exp(3 * S2), method="spearman") == pytest.approx(
        rsa(S1, S2, method="spearman"), abs=1e-12
    )
    pairs = sample_pairs(25, 100, rng=0)
    assert rsa(S1, S2, pairs) == pytest.approx(pearsonr(S1[pairs], S2[pairs])[0], abs=1e-12)


def test_rsa_follows_added_noise():
    rng = np.random.default_rng(2)
    Z = rng.normal(size=(60, 6))
    S = centered_cosine(Z)
    scores = [
        rsa(S, centered_cosine(Z + s * rng.normal(size=Z.shape))) for s in (0.0, 0.3, 1.0, 3.0)
    ]
    assert scores[0] == pytest.approx(1.0) and all(np.diff(scores) < 0), scores


def test_synthetic_agent_rsa_grows_with_trials_and_vanishes_without_signal():
    rng = np.random.default_rng(3)
    words = [f"w{i}" for i in range(40)]
    Z = rng.normal(size=(40, 5))
    truth = cosine_similarity_rows(Z)

    def fc_rsa(beta, trials, seed):
        agent = SyntheticAgent(words, Z, beta, rng=seed)
        out = collect_forced_choice(
            agent.forced_choice, words, words, n_candidates=8, trials_per_cue=trials, rng=seed
        )
        C, rows, cols = count_matrix(out["cues"], out["responses"], vocab=words)
        assert rows == words and set(cols) <= set(words)
        return rsa(cosine_similarity_rows(ppmi(C)), truth)

    curve = [fc_rsa(6.0, t, 0) for t in (2, 8, 32)]
    assert curve[0] < curve[1] < curve[2] and curve[2] > 0.5, curve
    null = [fc_rsa(0.0, 16, s) for s in range(3)]
    assert abs(np.mean(null)) < 0.05, null


def test_forced_choice_retries_then_repairs_invalid_replies():
    words = [f"w{i}" for i in range(12)]

    def flaky(cue, candidates, attempt):
        return ["not-a-candidate", candidates[0]] if attempt == 0 else candidates[:2]

    out = collect_forced_choice(flaky, words[:3], words, n_candidates=4, rng=0)
    assert out["n_retried"] == out["n_trials"] == 3 * 3 and out["n_repaired"] == 0

    def broken(cue, candidates, attempt):
        return [candidates[0]] * 2

    out = collect_forced_choice(broken, words[:2], words, n_candidates=4, max_retries=2, rng=0)
    assert out["n_repaired"] == out["n_trials"]
    assert all(len(set(r)) == 2 for r in out["responses"])


def test_free_association_normalises_replies():
    out = collect_free_association(
        lambda cue, run: [" Dog", "dog", cue, "", "Bone"], ["Cat"], n_runs=2
    )
    assert out["responses"] == [["dog", "bone"], ["dog", "bone"]] and out["n_short"] == 2


def test_layerwise_rsa_on_sampled_pairs_equals_the_full_matrices():
    rng = np.random.default_rng(4)
    H = rng.normal(size=(50, 3, 7))
    S = centered_cosine(rng.normal(size=(50, 4)))
    pairs = sample_pairs(50, 300, rng=1)
    out = layerwise_rsa(H, S, baselines={"self": S}, pairs=pairs)
    for layer in range(3):
        assert out["layers"][layer] == pytest.approx(
            rsa(centered_cosine(H[:, layer]), S, pairs), abs=1e-10
        )
    assert out["self"] == pytest.approx(1.0)


def test_cosine_rows_sparse_dense_and_svd():
    rng = np.random.default_rng(5)
    A = rng.poisson(0.5, (20, 30)).astype(float)
    A[0] = 0
    np.testing.assert_allclose(
        cosine_similarity_rows(sp.csr_matrix(A)), cosine_similarity_rows(A), atol=1e-12
    )
    assert np.all(cosine_similarity_rows(A)[0] == 0)
    full_rank = cosine_similarity_rows(A, svd_dim=19)
    np.testing.assert_allclose(full_rank, cosine_similarity_rows(A), atol=1e-6)


def test_held_out_regression_credits_the_informative_predictor():
    rng = np.random.default_rng(6)
    Z = rng.normal(size=(70, 5))
    Q = np.linalg.qr(rng.normal(size=(8, 5)))[0].T
    H = np.stack([(Z @ Q) + 0.1 * rng.normal(size=(70, 8)), rng.normal(size=(70, 8))], axis=1)
    feats = {"noise": centered_cosine(rng.normal(size=(70, 5))), "behav": centered_cosine(Z)}
    reg = HeldOutWordsRegression(
        {"base": ["noise"], "full": ["noise", "behav"]}, n_train_pairs=600, seeds=(0, 1)
    )
    rows = reg.fit_score(H, feats)
    assert len(rows) == 2 * 2 * 2
    r2 = {(r["seed"], r["layer"], r["set"]): r["r2"] for r in rows}
    for seed in (0, 1):
        assert r2[(seed, 0, "full")] > 0.8 and r2[(seed, 0, "base")] < 0.1
        assert r2[(seed, 1, "full")] < 0.1  # an unrelated layer stays unexplained


def test_bad_input_is_named():
    words = [f"w{i}" for i in range(10)]
    with pytest.raises(ValueError, match=r"n_picks .* must be smaller"):
        collect_forced_choice(lambda *a: [], words, words, n_candidates=2, n_picks=2)
    with pytest.raises(ValueError, match="vocab must have more than"):
        collect_forced_choice(lambda *a: [], words, words[:5], n_candidates=8)
    with pytest.raises(TypeError, match="model must be callable"):
        collect_free_association("gpt", words)
    with pytest.raises(ValueError, match="same length"):
        count_matrix(["a"], [])
    with pytest.raises(TypeError, match="not a str"):
        count_matrix(["a"], ["dog"])
    with pytest.raises(ValueError, match="non-negative"):
        ppmi(np.array([[1.0, -1.0]]))
    with pytest.raises(ValueError, match="S2 must have the shape"):
        rsa(np.eye(4), np.eye(5))
    with pytest.raises(ValueError, match="0 <= i < j"):
        rsa(np.eye(4), np.eye(4), pairs=(np.array([1, 2]), np.array([0, 3])))
    with pytest.raises(ValueError, match="features lacks"):
        HeldOutWordsRegression({"a": ["x"]}).fit_score(np.zeros((5, 1, 2)), {})
    with pytest.raises(ValueError, match="Z must have shape"):
        SyntheticAgent(words, np.zeros((3, 2)), 1.0)
