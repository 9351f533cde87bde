"""Regression tests for the fuzzer's contract violations fixed in federated, verification,
compat.dp_accounting, trees, parallel, bench_report and config (issue 25 section 1).

Each test feeds the input the fuzzer found and asserts a ValueError / TypeError whose message
names the argument (as a word, like the fuzzer's check), raised before any work and without
touching the caller's data; plus that the valid call still gives the same result.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch


def _names(exc: pytest.ExceptionInfo, name: str) -> bool:
    return re.search(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])", str(exc.value)) is not None


# --- bench_report / config / parallel ------------------------------------------------------


def test_format_ratio_names_ratio_for_a_string():
    from rml_fast.bench_report import format_ratio

    assert format_ratio(2.5) == "2.50x" and format_ratio(None) == "-"
    with pytest.raises(TypeError) as exc:
        format_ratio("not-a-value")
    assert _names(exc, "ratio")


def test_write_report_checks_out_dir_and_flags_before_writing(tmp_path):
    from rml_fast.bench_report import write_report

    rows = [{"suite": "demo", "case": {"n": 8}, "peer": "numpy", "ratio": 2.5}]
    for kwargs, name in (({"out_dir": None}, "out_dir"), ({"out_dir": 3}, "out_dir"),
                         ({"out_dir": tmp_path / "a", "plot": "yes"}, "plot"),
                         ({"out_dir": tmp_path / "b", "plot": False, "inline": 1}, "inline")):
        with pytest.raises(TypeError) as exc:
            write_report({"demo": rows}, **kwargs)
        assert _names(exc, name)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
    assert write_report({"demo": rows}, tmp_path / "c", plot=False).name == "index.html"


@pytest.mark.parametrize(("bad", "kind"), [(math.nan, ValueError), (None, TypeError),
                                       ("not-a-value", TypeError), (True, TypeError)])
def test_check_memory_names_estimate(bad, kind):
    from rml_fast.config import check_memory

    with pytest.raises(kind) as exc:
        check_memory(bad, "a buffer")
    assert _names(exc, "estimate")
    check_memory(10, "a buffer")  # a small valid estimate passes


def test_item_seeds_names_rng_for_a_negative_seed():
    from rml_fast.parallel import item_seeds

    for bad in (-1, [3, -2]):
        with pytest.raises(ValueError, match="rng") as exc:
            item_seeds(bad, 3)
        assert _names(exc, "rng")
    assert item_seeds(0, 3)[:2] == item_seeds(0, 2)
    assert item_seeds([1, 2], 2) == item_seeds((1, 2), 2)


def test_parallel_map_names_items_when_not_iterable():
    from rml_fast.parallel import parallel_map

    with pytest.raises(TypeError) as exc:
        parallel_map(abs, None)
    assert _names(exc, "items")
    assert parallel_map(abs, iter([-1, 2])) == [1, 2]


def test_sgg_event_mechanism_names_sensitivity_scale():
    pytest.importorskip("dp_accounting")
    from rml_fast.compat.dp_accounting import SGGDpEvent

    event = SGGDpEvent(dim=4, sigma=1.0)
    for bad, kind in ((math.nan, ValueError), (-2.0, ValueError), (0.0, ValueError),
                      (math.inf, ValueError), (None, TypeError), ("x", TypeError)):
        with pytest.raises(kind) as exc:
            event.mechanism(bad)
        assert _names(exc, "sensitivity_scale")
    assert event.mechanism(2.0).sensitivity == 2.0


# --- federated ---------------------------------------------------------------------------


def test_fedavg_client_names_server_round():
    from rml_fast.federated.fedavg import FedAvgClient, make_mlp

    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(8, 3)).astype(np.float32), np.arange(8) % 2
    client = FedAvgClient(lambda: make_mlp(3, [], 2, seed=0), X, y, client_id=1)
    for bad, kind in ((math.nan, TypeError), (-1, ValueError), (None, TypeError),
                      ("not-a-value", TypeError), (1.5, TypeError)):
        for call in (lambda r: client.round_rng(r), lambda r: client.handle("fit", r, {}),
                     lambda r: client.train_local({}, r)):
            with pytest.raises(kind) as exc:
                call(bad)
            assert _names(exc, "server_round")
    a = client.round_rng(np.int64(2)).integers(1 << 30)
    assert a == client.round_rng(2).integers(1 << 30)


def test_shamir_field_names_x_and_ids():
    from rml_fast.federated.threshold_watermark import ShamirField

    f = ShamirField(2, 3, frac_bits=2)
    with pytest.raises(ValueError, match="wrap-around") as exc:
        f.encode([0.5, math.nan])
    assert _names(exc, "x") and "wrap-around" in str(exc.value)
    for bad in (None, ["a"]):
        with pytest.raises(TypeError) as exc:
            f.encode(bad)
        assert _names(exc, "x")
    with pytest.raises(TypeError) as exc:
        f.lagrange_at_zero(None)
    assert _names(exc, "ids")
    assert f.lagrange_at_zero([0, 1]).tolist() == [2, 2**61 - 2]
    assert f.encode([0.5, -0.25]).tolist() == [2, 2**61 - 2]


def _agent():
    from rml_fast.federated.sohip import SoHipAgent

    return SoHipAgent(64, 10, arch=2, memory_dim=16, image_shape=(8, 8), seed=0)


@pytest.mark.parametrize(("method", "args", "where", "bad"), [
    ("extract", (torch.randn(3, 64),), 0, np.zeros((3, 64), np.float32)),
    ("extract", (torch.randn(3, 64),), 0, torch.zeros(3, 64, device="meta")),
    ("extract", (torch.randn(3, 64),), 0, torch.zeros(1, 3, 64)),
    ("extract", (torch.randn(3, 64),), 0, torch.zeros(3, 64, dtype=torch.int64)),
    ("extract", (torch.randn(3, 64),), 0, torch.zeros(3, 64, dtype=torch.complex128)),
    ("extract", (torch.randn(3, 64),), 0, torch.full((3, 64), math.nan)),
    ("forward", (torch.randn(3, 64),), 0, torch.zeros(3, 63)),
    ("short_term_memory", (torch.randn(3, 16), torch.tensor([0, 1, 1])), 0, torch.zeros(0, 16)),
    ("short_term_memory", (torch.randn(3, 16), torch.tensor([0, 1, 1])), 1, torch.tensor([0, 1])),
    ("short_term_memory", (torch.randn(3, 16), torch.tensor([0, 1, 1])), 1, torch.tensor([0, 1, 10])),
    ("short_term_memory", (torch.randn(3, 16), torch.tensor([0, 1, 1])), 1, np.array([0, 1, 1])),
    ("consolidate", (torch.randn(3, 32), torch.tensor([0, 1, 1])), 0, torch.zeros(3, 5)),
    ("forward_train", (torch.randn(3, 64), torch.tensor([0, 1, 1]), "not-a-value"), 2, None),
])
def test_sohip_agent_methods_name_their_tensors(method, args, where, bad):
    import inspect

    agent = _agent()
    fn = getattr(agent, method)
    if method == "consolidate":  # h is (B, feature_dim)
        args = (torch.randn(3, agent.feature_dim), args[1])
    if bad is None:  # the string itself is the bad value
        bad = args[where]
    args = list(args)
    args[where] = bad
    name = list(inspect.signature(fn).parameters)[where]
    before = agent.memory().clone(), agent.counts().clone()
    with pytest.raises((TypeError, ValueError)) as exc:
        fn(*args)
    assert _names(exc, name), str(exc.value)
    assert torch.equal(agent.memory(), before[0]) and torch.equal(agent.counts(), before[1])


def test_sohip_agent_valid_calls_unchanged():
    agent = _agent()
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(6, 64, generator=g), torch.tensor([0, 0, 1, 1, 1, 3])
    h = agent.extract(x)
    assert torch.equal(h, agent.extractor(x))
    mem = agent.consolidate(h, y)
    assert agent.counts().tolist()[:4] == [2, 3, 0, 1] and mem.shape == (10, 16)
    assert torch.equal(agent(x), agent._forward(x))
    logits, q = agent.forward_train(x, y, agent.memory(), agent.counts(), commit=False)
    ref_logits, ref_q = agent._forward_train(x, y, agent.memory(), agent.counts(), commit=False)
    assert torch.equal(logits, ref_logits) and torch.equal(q, ref_q)


def test_finetune_attack_refuses_nan_and_bad_labels():
    from rml_fast.federated.fedavg import make_mlp
    from rml_fast.federated.threshold_watermark import finetune_attack

    m = make_mlp(3, [], 2, seed=0)
    X, y = np.eye(3, dtype=np.float32).repeat(4, 0), np.arange(12) % 2
    Xn = X.copy()
    Xn[0, 0] = np.nan
    for kwargs, name, kind in (({"X": Xn}, "X", ValueError), ({"X": X.astype(str)}, "X", TypeError),
                               ({"X": X.astype(object)}, "X", TypeError),
                               ({"y": np.array(1)}, "y", ValueError),
                               ({"y": y[:0]}, "y", ValueError)):
        call = {"X": X, "y": y, **kwargs}
        with pytest.raises(kind) as exc:
            finetune_attack(m, call["X"], call["y"], fraction=0.5, epochs=1, rng=0)
        assert _names(exc, name)
    assert np.isnan(Xn[0, 0])  # the caller's array is untouched
    out = finetune_attack(m, X, y, fraction=0.5, epochs=1, rng=0)
    again = finetune_attack(m, X, y, fraction=0.5, epochs=1, rng=0)
    assert torch.equal(out[0].weight, again[0].weight)


# --- trees --------------------------------------------------------------------------------


def _tree_fields():
    return dict(feature=np.array([0, -1, -1], np.int32), orient=np.array([1, -1, -1], np.int8),
                priority=np.array([1, -1, -1], np.int32), second=np.array([2, -1, -1], np.int32),
                risk=np.array([0.5, 1.0, 0.0]), objective=0.1)


@pytest.mark.parametrize(("field", "bad", "kind"), [
    ("risk", np.array([0.5, np.nan, 0.0]), ValueError),
    ("risk", np.array([0.5, 1.0]), ValueError),
    ("feature", np.array([], np.int32), ValueError),
    ("orient", np.array([1.0, -1, -1]), TypeError),
    ("objective", math.nan, ValueError),
    ("tau", "half", TypeError),
])
def test_falling_tree_validates_its_fields(field, bad, kind):
    from rml_fast.trees import FallingTree

    with pytest.raises(kind) as exc:
        FallingTree(**{**_tree_fields(), field: bad})
    assert _names(exc, field)
    t = FallingTree(**_tree_fields())
    assert t.n_leaves == 2 and t.leaf_risks.tolist() == [1.0, 0.0]


def test_binarizers_name_X_when_fit_on_no_rows():
    from rml_fast.trees import QuantileBinarizer, ThresholdGuessBinarizer

    for est, args in ((QuantileBinarizer(3), ()), (ThresholdGuessBinarizer(n_estimators=2, rng=0),
                                                   (np.zeros(0),))):
        with pytest.raises(ValueError, match="X") as exc:
            est.fit(np.zeros((0, 2)), *args)
        assert _names(exc, "X")
    with pytest.raises(ValueError, match="X") as exc:
        ThresholdGuessBinarizer(n_estimators=2, rng=0).fit(np.zeros((0, 2)), np.zeros(100))
    assert _names(exc, "X")


# --- verification -------------------------------------------------------------------------


def _verifier():
    from rml_fast.verification import ConceptVerifier

    return ConceptVerifier(5, 2, hidden=(8,), generator=torch.Generator().manual_seed(0))


def test_morgana_loss_names_its_arguments():
    from rml_fast.verification import morgana_loss

    logits, y = torch.tensor([[2.0, 0.0, 1.0]]), torch.tensor([1])
    p = logits.softmax(-1)
    assert math.isclose(float(morgana_loss(logits, y)), float(-(p[0, 1] + p[0, 2]).log()),
                        rel_tol=1e-6)
    cases = [((logits[:0], y), "logits"), ((logits.numpy(), y), "logits"),
             ((logits, y.numpy()), "y"), ((logits.to(torch.complex128), y), "logits"),
             ((logits[None], y), "logits"), ((logits, y[None]), "y"),
             ((logits.long(), y), "logits"), ((logits, torch.tensor([2])), "y")]
    for args, name in cases:
        with pytest.raises((TypeError, ValueError)) as exc:
            morgana_loss(*args)
        assert _names(exc, name), str(exc.value)
    # NaN logits propagate (documented): the loss is not finite
    assert not torch.isfinite(morgana_loss(torch.tensor([[math.nan, 0.0, 1.0]]), y)).all()


def test_concept_verifier_and_prover_name_their_tensors():
    from rml_fast.verification import ConceptVerifier, KSparseProver

    with pytest.raises(TypeError) as exc:
        ConceptVerifier(4, 2, hidden=None)
    assert _names(exc, "hidden")
    v = _verifier()
    z, s = torch.randn(3, 5), torch.ones(3, 5)
    assert torch.equal(v(z, s), v._forward(z, s))
    assert torch.equal(v(z, s.bool()), v(z, s))  # a bool mask still works
    for args, name in (((z[:0], s), "z"), ((z, s[:0]), "s"), ((z.numpy(), s), "z"),
                       ((z, s.to("meta")), "s"), ((z.to(torch.complex128), s), "z"),
                       ((z[None], s), "z")):
        with pytest.raises((TypeError, ValueError)) as exc:
            v(*args)
        assert _names(exc, name), str(exc.value)
    prover = KSparseProver(2, "merlin", "exact")
    y = torch.tensor([0, 1, 0])
    masks, scores = prover.select(v, z, y)
    assert masks.sum(1).tolist() == [2.0, 2.0, 2.0] and scores.shape == (3,)
    for args, name in (((v, z[:0], y), "z"), ((v, z, y[:0]), "y"), ((v, z.numpy(), y), "z"),
                       ((v, z, y.numpy()), "y"), ((v, z.long(), y), "z"), ((v, z, y[None]), "y"),
                       ((None, z, y), "verifier")):
        with pytest.raises((TypeError, ValueError)) as exc:
            prover.select(*args)
        assert _names(exc, name), str(exc.value)


@pytest.fixture(scope="module")
def ncv():
    from rml_fast.verification import NeuralConceptVerifier

    Z = np.eye(4)[np.arange(40) % 4]
    y = np.arange(40) % 2
    return NeuralConceptVerifier(k=1, epochs=2, random_state=0).fit(Z, y), Z, y


def test_neural_concept_verifier_prediction_errors_name_X_and_y(ncv):
    est, Z, y = ncv
    bad_X = (Z[:0], Z.astype(np.complex128), Z[None], Z.ravel())
    for method in ("predict", "predict_proba", "predict_or_reject", "explain"):
        for X in bad_X:
            with pytest.raises(ValueError, match="X") as exc:
                getattr(est, method)(X)
            assert _names(exc, "X"), (method, str(exc.value))
    # scikit-learn's own wording is kept (check_estimator matches "Reshape your data")
    with pytest.raises(ValueError, match="Reshape your data"):
        est.predict(Z[0])
    with pytest.raises(ValueError, match="y") as exc:
        est.adversarial_masks(Z, y[:0])
    assert _names(exc, "y")
    masks, fooled = est.adversarial_masks(Z, y)
    assert masks.shape == Z.shape and fooled.shape == y.shape
