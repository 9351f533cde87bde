"""FedAvg server/client pair: the average, the wire format, determinism, resume, bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits

from rml_fast.federated import run_federated
from rml_fast.federated.fedavg import (
    FedAvgClient,
    FedAvgServer,
    arrays_to_model,
    evaluate_accuracy,
    fedavg_aggregate,
    iid_partition,
    make_mlp,
    model_to_arrays,
    pack_weights,
    unpack_weights,
)


@pytest.fixture(scope="module")
def digits():
    X, y = load_digits(return_X_y=True)
    return (X / 16.0).astype(np.float32), y.astype(np.int64)


def _model_fn():
    return make_mlp(64, [32], 10, seed=3)


def _setup(digits, k=4, seed=0):
    X, y = digits
    parts = iid_partition(1400, k, rng=seed)
    server = FedAvgServer(_model_fn(), model_fn=_model_fn, test_data=(X[1400:], y[1400:]))

    def client_fn(cid):
        return FedAvgClient(_model_fn, X[parts[cid]], y[parts[cid]], client_id=cid, seed=seed, lr=3e-3)

    return server, client_fn


def test_aggregate_is_the_weighted_mean_and_max_for_counters():
    rng = np.random.default_rng(0)
    states = {c: {"w": rng.normal(size=(3, 2)).astype(np.float32), "n": np.array(c + 5)} for c in (2, 0, 1)}
    weights = {0: 1.0, 1: 2.0, 2: 5.0}
    out = fedavg_aggregate(states, weights)
    expected = sum(weights[c] * states[c]["w"].astype(np.float64) for c in states) / 8.0
    np.testing.assert_allclose(out["w"], expected, rtol=1e-6)
    assert out["w"].dtype == np.float32
    assert int(out["n"]) == 7 and out["n"].dtype == states[0]["n"].dtype
    uniform = fedavg_aggregate(states)
    np.testing.assert_allclose(uniform["w"], np.mean([states[c]["w"] for c in states], axis=0), rtol=1e-6)


def test_aggregate_rejects_mismatched_clients():
    good = {"w": np.zeros((2, 2))}
    with pytest.raises(ValueError, match="shape"):
        fedavg_aggregate({0: good, 1: {"w": np.zeros((2, 3))}})
    with pytest.raises(ValueError, match="keys"):
        fedavg_aggregate({0: good, 1: {"v": np.zeros((2, 2))}})
    with pytest.raises(ValueError, match="non-empty"):
        fedavg_aggregate({})
    with pytest.raises(ValueError, match="not all zero"):
        fedavg_aggregate({0: good}, {0: 0.0})


def test_model_round_trip_and_shape_errors():
    a, b = make_mlp(5, [4], 3, seed=0), make_mlp(5, [4], 3, seed=1)
    arrays = model_to_arrays(a)
    arrays_to_model(b, arrays)
    for key, value in model_to_arrays(b).items():
        np.testing.assert_array_equal(value, arrays[key])
    assert unpack_weights(pack_weights(arrays)).keys() == arrays.keys()
    before = model_to_arrays(b)
    bad = dict(arrays, **{"0.weight": np.zeros((4, 6), np.float32)})
    with pytest.raises(ValueError, match=r"0\.weight"):
        arrays_to_model(b, bad)
    for key, value in model_to_arrays(b).items():  # nothing was loaded
        np.testing.assert_array_equal(value, before[key])
    with pytest.raises(ValueError, match="missing"):
        arrays_to_model(b, {"0.weight": arrays["0.weight"]})
    with pytest.raises(TypeError, match=r"torch\.nn\.Module"):
        model_to_arrays(np.zeros(3))


def test_iid_partition_is_a_partition():
    parts = iid_partition(103, 7, rng=1)
    allidx = np.concatenate(parts)
    assert sorted(allidx.tolist()) == list(range(103))
    assert max(map(len, parts)) - min(map(len, parts)) <= 1
    with pytest.raises(ValueError, match="num_clients"):
        iid_partition(3, 4)


def test_one_client_one_round_is_local_training(digits):
    X, y = digits
    server = FedAvgServer(_model_fn(), model_fn=_model_fn)
    client = FedAvgClient(_model_fn, X[:300], y[:300], client_id=0, seed=5)
    run_federated(server, lambda cid: FedAvgClient(_model_fn, X[:300], y[:300], client_id=0, seed=5),
                  num_clients=1, rounds=1, progress=False)
    local = client.train_local(model_to_arrays(_model_fn()), 0)
    for key in local:
        np.testing.assert_allclose(server.weights[key], local[key], rtol=1e-6, atol=1e-7)


def test_fedavg_learns_digits_and_is_deterministic(digits):
    server, client_fn = _setup(digits)
    acc0 = evaluate_accuracy(server.model(), digits[0][1400:], digits[1][1400:])
    history = run_federated(server, client_fn, num_clients=4, rounds=6, progress=False)
    assert history.metrics[-1]["accuracy"] > 0.75 > acc0 + 0.5
    again, client_fn2 = _setup(digits)
    run_federated(again, client_fn2, num_clients=4, rounds=6, progress=False)
    for key in server.weights:
        np.testing.assert_allclose(again.weights[key], server.weights[key], rtol=1e-6, atol=1e-7)
    assert history.bytes_up[0] > 0 and history.bytes_down[0] > 0


def test_fedavg_resume_gives_the_same_model(digits, tmp_path):
    full, client_fn = _setup(digits)
    run_federated(full, client_fn, num_clients=4, rounds=4, progress=False)
    ckpt = tmp_path / "run.npz"
    part, client_fn2 = _setup(digits)
    run_federated(part, client_fn2, num_clients=4, rounds=4, checkpoint=ckpt, progress=False, stop_after=2)
    resumed, client_fn3 = _setup(digits)  # a fresh server, as after a crash
    history = run_federated(resumed, client_fn3, num_clients=4, rounds=4, checkpoint=ckpt, progress=False)
    assert history.rounds == 4
    for key in full.weights:
        np.testing.assert_allclose(resumed.weights[key], full.weights[key], rtol=1e-6, atol=1e-7)


def test_server_rejects_mismatched_uploads(digits):
    server = FedAvgServer(_model_fn(), model_fn=_model_fn)
    upload = pack_weights(model_to_arrays(_model_fn()))
    upload["param/0.weight"] = np.zeros((32, 63), np.float32)
    before = {k: v.copy() for k, v in server.weights.items()}
    with pytest.raises(ValueError, match=r"0\.weight"):
        server.aggregate("fit", 0, {0: upload})
    for key in before:
        np.testing.assert_array_equal(server.weights[key], before[key])
    with pytest.raises(ValueError, match="weighting"):
        FedAvgServer(_model_fn(), weighting="median")
    with pytest.raises(TypeError, match="initial"):
        FedAvgServer(3.0)
    with pytest.raises(ValueError, match="optimizer"):
        FedAvgClient(_model_fn, digits[0][:5], digits[1][:5], client_id=0, optimizer="lbfgs")
    with pytest.raises(ValueError, match="same non-zero length"):
        FedAvgClient(_model_fn, digits[0][:5], digits[1][:4], client_id=0)


def test_client_leaves_global_torch_threads_alone(digits):
    before = torch.get_num_threads()
    _, client_fn = _setup(digits, k=2)
    client_fn(0).handle("fit", 0, pack_weights(model_to_arrays(_model_fn())))
    assert torch.get_num_threads() == before
