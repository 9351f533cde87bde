"""In-context tabular predictors: the attention formula, causality, resumable meta-training and
ASR recourse through the transformer ICL predictor.

Oracles: :class:`AttentionICL` against a per-query loop of its formula; the transformer's
logits at example j do not change when later examples change (causal reading of the context);
a query's probabilities do not depend on the other queries of the batch; k steps + checkpoint +
resume to N equal N uninterrupted steps (same weights to float tolerance); recourse through
the transformer: every counterfactual re-queried alone predicts the target and the counting
wrapper sees exactly ``n_queries.sum()`` rows.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.datasets import load_iris

from rml_fast.decisions.icl_predictor import (
    AttentionICL,
    ICLTabularNet,
    TransformerICL,
    train_icl_transformer,
)
from rml_fast.decisions.recourse import AdaptiveSubspaceRecourse

TINY = {"d_max": 4, "k_max": 3, "n_max": 12, "d_model": 16, "n_heads": 2, "d_mlp": 32}


@pytest.fixture(autouse=True)
def _one_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def test_attention_icl_matches_formula_loop():
    X, y = load_iris(return_X_y=True)
    rng = np.random.default_rng(0)
    idx = rng.choice(len(X), 30, replace=False)
    icl = AttentionICL(X[idx], y[idx], temperature=0.7)
    Q = X[:7] + 0.1
    mean, std = X[idx].mean(0), X[idx].std(0)
    expected = []
    for q in Q:
        a = -(((q - mean) / std - (X[idx] - mean) / std) ** 2).sum(1) / 0.7
        w = np.exp(a - a.max())
        w /= w.sum()
        expected.append([w[y[idx] == k].sum() for k in range(3)])
    np.testing.assert_allclose(icl.predict_proba(Q), expected, rtol=1e-10, atol=1e-12)
    assert np.array_equal(icl.classes_, [0, 1, 2])
    with pytest.raises(ValueError, match="features"):
        icl.predict_proba(Q[:, :2])
    with pytest.raises(ValueError, match="context_y"):
        AttentionICL(X[:5], y[:4])
    with pytest.raises(ValueError, match="temperature"):
        AttentionICL(X[:5], y[:5], temperature=0.0)


def test_transformer_reads_the_context_causally_and_queries_independently():
    net = ICLTabularNet(seed=1, **TINY).eval()
    g = torch.Generator().manual_seed(0)
    xs, ys = torch.randn(2, 10, 4, generator=g), torch.randint(0, 3, (2, 10), generator=g)
    xs2, ys2 = xs.clone(), ys.clone()
    xs2[:, 6:] += 1.0
    ys2[:, 6:] = (ys2[:, 6:] + 1) % 3
    ys3 = ys.clone()
    ys3[:, 6] = (ys3[:, 6] + 1) % 3
    with torch.no_grad():
        a, b, c = net(xs, ys), net(xs2, ys2), net(xs, ys3)
    torch.testing.assert_close(a[:, :6], b[:, :6])  # later examples are not read
    assert not torch.allclose(a[:, 6:], b[:, 6:])
    torch.testing.assert_close(a[:, :7], c[:, :7])  # nor an example's own label
    assert not torch.allclose(a[:, 7:], c[:, 7:])
    X, y = load_iris(return_X_y=True)
    icl = TransformerICL(X[::10], y[::10], net)
    P = icl.predict_proba(X[:9])
    single = np.concatenate([icl.predict_proba(X[i : i + 1]) for i in range(9)])
    np.testing.assert_allclose(P, single, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(P.sum(1), 1.0, rtol=1e-12)
    with pytest.raises(ValueError, match="d_max"):
        TransformerICL(np.zeros((3, 5)), np.array([0, 1, 0]), net)
    with pytest.raises(ValueError, match="k_max"):
        TransformerICL(X[:6, :4], np.arange(6) % 5, net)


def test_training_resumes_to_the_same_weights(tmp_path):
    full = train_icl_transformer(6, batch=4, progress=False, checkpoint_every=2, **TINY)
    ck = tmp_path / "icl.pt"
    train_icl_transformer(3, batch=4, progress=False, checkpoint=ck, **TINY)
    resumed = train_icl_transformer(6, batch=4, progress=False, checkpoint=ck, **TINY)
    for (k, v), (_, w) in zip(full.state_dict().items(), resumed.state_dict().items(),
                              strict=True):
        torch.testing.assert_close(v, w, rtol=1e-5, atol=1e-6, msg=k)
    fresh = train_icl_transformer(0, batch=4, progress=False, **TINY)
    assert any(not torch.allclose(v, w) for v, w in
               zip(full.state_dict().values(), fresh.state_dict().values(), strict=True))
    with pytest.raises(ValueError, match="another configuration"):
        train_icl_transformer(6, batch=8, progress=False, checkpoint=ck, **TINY)
    with pytest.raises(ValueError, match="steps"):
        train_icl_transformer(-1, progress=False, **TINY)


def test_recourse_through_transformer_icl_is_valid_and_counted():
    torch.manual_seed(0)
    net = train_icl_transformer(20, batch=8, progress=False, seed=2, **TINY)
    X, y = load_iris(return_X_y=True)
    icl = TransformerICL(X[::12], y[::12], net)

    class Counting:
        classes_ = icl.classes_
        rows = 0

        def predict_proba(self, Z):
            Counting.rows += len(Z)
            return icl.predict_proba(Z)

    pred = icl.predict(X)
    src = X[pred == np.bincount(pred).argmax()][:6]
    est = AdaptiveSubspaceRecourse(Counting(), immutable=[1], max_queries=150, random_state=0,
                                   progress=False).fit(X)
    res = est.generate(src)  # any class but the current one
    assert Counting.rows == res.n_queries.sum() and np.all(res.n_queries <= 150)
    assert res.validity >= 0.5
    cf = res.x_cf[res.found]
    assert np.all(icl.predict(cf) != res.original_class[res.found])  # re-queried alone
    assert np.all(cf[:, 1] == src[res.found][:, 1])
