"""Threshold watermark: keys from Philox, the analytic null, threshold verification == plaintext z,
the trusted/untrusted identity, resume, the digits K = 16 claim, attacks and bad input."""

from __future__ import annotations

import numpy as np
import pytest

from rml_fast.federated import run_federated
from rml_fast.federated.demos.threshold_watermark import format_table, run
from rml_fast.federated.fedavg import iid_partition, make_mlp, model_to_arrays, pack_weights
from rml_fast.federated.threshold_watermark import (
    ShamirField,
    ThresholdWatermarkClient,
    ThresholdWatermarkServer,
    additive_shares,
    empirical_null,
    finetune_attack,
    generate_key,
    noise_attack,
    null_sigma,
    overwrite_attack,
    partial_inner_products,
    prune_attack,
    threshold_verify,
    watermark_score,
    watermark_shapes,
    z_score,
)
from rml_fast.kernels.random import normal, uniform


def test_keys_come_from_the_philox_stream():
    shapes = {"a": (4, 5), "b": (7,)}
    g = generate_key(shapes, kind="gaussian", seed=11, frac_bits=None)
    z = normal(27, 11).astype(np.float64)
    np.testing.assert_allclose(g["a"].ravel(), z[:20] / np.linalg.norm(z[:20]), rtol=1e-12)
    np.testing.assert_allclose(g["b"], z[20:] / np.linalg.norm(z[20:]), rtol=1e-12)
    r = generate_key(shapes, seed=11)
    signs = np.where(uniform(27, 11) < 0.5, 1.0, -1.0)
    np.testing.assert_allclose(r["a"].ravel() * np.sqrt(20), signs[:20], atol=1e-6)
    for k, v in r.items():  # on the 2^-24 grid, unit norm, reproducible, seed-dependent
        np.testing.assert_array_equal(v * 2**24, np.rint(v * 2**24))
        assert abs(np.linalg.norm(v) - 1) < 1e-6
        np.testing.assert_array_equal(generate_key(shapes, seed=11)[k], v)
    assert not np.array_equal(generate_key(shapes, seed=12)["a"], r["a"])


def test_additive_shares_sum_to_the_key():
    key = generate_key({"w": (30, 4), "b": (4,)}, seed=0)
    shares = additive_shares(key, 6, rng=1)
    for k in key:
        np.testing.assert_allclose(sum(s[k] for s in shares), key[k], atol=1e-12)
        assert np.linalg.norm(shares[0][k]) > 0.3  # a mask, not a slice of the key


def test_score_and_null_closed_forms():
    assert null_sigma({"a": (10,), "b": (2, 20), "c": (40,)}) == pytest.approx(np.sqrt(0.1 + 0.025 + 0.025) / 3)
    theta = {"w": np.array([[3.0, 0.0], [0.0, 4.0]]), "b": np.array([1.0, 1.0])}
    key = {"w": np.array([[1.0, 0.0], [0.0, 0.0]]), "b": np.array([1.0, -1.0]) / np.sqrt(2)}
    assert watermark_score(theta, key) == pytest.approx((0.6 + 0.0) / 2)


def test_analytic_null_matches_random_keys():
    rng = np.random.default_rng(0)
    model = make_mlp(20, [16], 5, seed=0)
    weights = model_to_arrays(model)
    shapes = watermark_shapes(model)
    mu, sd = empirical_null(weights, shapes, n_keys=3000, rng=1)
    assert abs(sd / null_sigma(shapes) - 1) < 0.05
    assert abs(mu) < 4 * sd / np.sqrt(3000)
    # z-scores of 1000 independent Philox keys on a fixed model: mean ~ 0, std ~ 1
    zs = np.array([z_score(weights, generate_key(shapes, seed=int(s))) for s in rng.integers(0, 2**62, 1000)])
    assert abs(zs.mean()) < 0.15 and abs(zs.std() - 1) < 0.08
    zs_emp = z_score(weights, generate_key(shapes, seed=5), null="empirical", n_keys=2000, rng=2)
    assert zs_emp == pytest.approx(z_score(weights, generate_key(shapes, seed=5)), abs=0.15)


@pytest.mark.parametrize(("t", "K"), [(1, 1), (2, 3), (5, 8)])
def test_threshold_verification_equals_plaintext_z(t, K):
    rng = np.random.default_rng(t)
    model = make_mlp(30, [40], 10, seed=t)
    key = generate_key(watermark_shapes(model), seed=t)
    weights = model_to_arrays(model)
    for wmark in (0.0, 0.3):  # a clean and a watermarked model
        theta = {k: v + wmark * np.linalg.norm(v) * key[k] if k in key else v for k, v in weights.items()}
        shares = ShamirField(t, K).share(key, rng=0)
        for _ in range(3):
            coalition = [shares[j] for j in rng.choice(K, size=int(rng.integers(t, K + 1)), replace=False)]
            det = threshold_verify(theta, coalition, return_details=True)
            assert det["z"] == pytest.approx(z_score(theta, key), abs=1e-6)
            assert all(len(v) == len(key) for v in det["revealed"].values())  # L scalars per member
            j = coalition[0]
            assert det["revealed"][j.party] == partial_inner_products(theta, j)  # what member j computes
    # a wrong key does not verify
    other = ShamirField(t, K).share(generate_key(watermark_shapes(model), seed=99), rng=0)
    assert abs(threshold_verify(theta, other[:t])) < 4


def test_partial_inner_products_are_exact_field_dots():
    field = ShamirField(1, 1, frac_bits=24)
    key = {"w": np.array([0.5, -0.25, 0.125])}
    share = field.share(key, rng=0)[0]
    theta = {"w": np.array([1.5, 2.0, -4.0])}
    y = partial_inner_products(theta, share, theta_frac_bits=10)["w"]
    # theta^fx = (1536, 2048, -4096), key^fx = (2^23, -2^22, 2^21): <.,.> = -2^32 (= -0.25 * 2^34)
    expect = (1536 * 2**23 - 2048 * 2**22 - 4096 * 2**21) % field.prime
    assert y == expect == (-(2**32)) % field.prime


def test_bad_input_is_named():
    key = generate_key({"w": (3, 4)}, seed=0)
    shares = ShamirField(2, 3).share(key, rng=0)
    with pytest.raises(ValueError, match="shape"):
        threshold_verify({"w": np.zeros((4, 3))}, shares[:2])
    with pytest.raises(ValueError, match="no tensor 'w'"):
        z_score({"v": np.zeros((3, 4))}, key)
    with pytest.raises(ValueError, match="at least t = 2"):
        threshold_verify({"w": np.ones((3, 4))}, shares[:1])
    with pytest.raises(TypeError, match="float array"):
        z_score({"w": np.ones((3, 4))}, {"w": np.ones((3, 4), dtype=np.int64)})
    with pytest.raises(ValueError, match="null"):
        z_score({"w": np.ones((3, 4))}, key, null="bootstrap")
    with pytest.raises(ValueError, match="kind"):
        generate_key({"w": (3,)}, kind="uniform")
    with pytest.raises(ValueError, match="too large"):
        threshold_verify({"w": np.full((3, 4), 1e12)}, shares[:2])
    fn = lambda: make_mlp(4, [3], 2, seed=0)  # noqa: E731
    X, y = np.zeros((4, 4), np.float32), np.zeros(4, np.int64)
    with pytest.raises(ValueError, match="variant"):
        ThresholdWatermarkClient(fn, X, y, client_id=0, key=key, variant="honest")
    with pytest.raises(ValueError, match="strength"):
        ThresholdWatermarkClient(fn, X, y, client_id=0, key=key, strength="linear")
    client = ThresholdWatermarkClient(fn, X, y, client_id=0, key=key)
    with pytest.raises(ValueError, match="no tensors"):
        client.handle("fit", 0, pack_weights(model_to_arrays(fn())))


def _small(variant, c=1.0, K=4, rounds=3, checkpoint=None, stop_after=None):
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    X = (X / 16.0).astype(np.float32)
    parts = iid_partition(800, K, rng=0)
    fn = lambda: make_mlp(64, [16], 10, seed=1)  # noqa: E731
    key = generate_key(watermark_shapes(fn()), seed=3)
    shares = additive_shares(key, K, rng=4)
    server = ThresholdWatermarkServer(fn(), variant=variant, model_fn=fn, test_data=(X[1500:], y[1500:]),
                                      monitor_key=key)

    def client_fn(cid):
        return ThresholdWatermarkClient(fn, X[parts[cid]], y[parts[cid]], client_id=cid, variant=variant,
                                        key=key if variant == "trusted" else shares[cid], c=c, lr=1e-2)

    history = run_federated(server, client_fn, K, rounds, checkpoint=checkpoint, progress=False,
                            stop_after=stop_after)
    return server, history


def test_untrusted_server_embeds_the_same_watermark_as_trusted():
    trusted, h1 = _small("trusted")
    untrusted, h2 = _small("untrusted")
    for k in trusted.weights:
        np.testing.assert_allclose(untrusted.weights[k], trusted.weights[k], rtol=1e-4, atol=1e-5)
    assert h2.metrics[-1]["z"] == pytest.approx(h1.metrics[-1]["z"], abs=1e-3)
    assert h1.metrics[-1]["z"] > h1.metrics[0]["z"] > 0  # the watermark accumulates


def test_untrusted_uploads_reveal_only_scales():
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    X = (X[:50] / 16.0).astype(np.float32)
    fn = lambda: make_mlp(64, [8], 10, seed=0)  # noqa: E731
    key = generate_key(watermark_shapes(fn()), seed=0)
    client = ThresholdWatermarkClient(fn, X, y[:50], client_id=0, key=additive_shares(key, 2, rng=0)[0],
                                      variant="untrusted")
    reply = client.handle("fit", 0, pack_weights(model_to_arrays(fn())))
    assert sorted(reply) == sorted("scale/" + k for k in key) and all(v.shape == () for v in reply.values())
    state = client.get_state()
    assert any(k.startswith("pending/") for k in state)  # theta_k waits in the client's own state


def test_resume_gives_the_same_model(tmp_path):
    full, _ = _small("untrusted", rounds=4)
    ckpt = tmp_path / "wm.npz"
    _small("untrusted", rounds=4, checkpoint=ckpt, stop_after=2)
    resumed, history = _small("untrusted", rounds=4, checkpoint=ckpt)
    assert history.rounds == 4
    for k in full.weights:
        np.testing.assert_allclose(resumed.weights[k], full.weights[k], rtol=1e-6, atol=1e-7)


def test_strength_is_monotone_in_c():
    zs = [_small("trusted", c=c, rounds=2)[1].metrics[-1]["z"] for c in (0.0, 0.5, 2.0)]
    assert zs[0] < zs[1] < zs[2]


def test_digits_k16_watermark_detected_at_no_accuracy_cost(tmp_path):
    # the demo's quick run: K = 16 IID clients, 10 rounds, same seed with and without watermark
    res = run(quick=True, progress=False, out=tmp_path / "wm.png")
    base = res["baseline"]
    wm = next(r for r in res["rows"] if r["rule"] == "update" and r["c"] == 0.5)
    spec = next(r for r in res["rows"] if r["rule"] == "spec")
    assert wm["z"] >= 4
    assert abs(base["z"]) < 4
    assert base["accuracy"] - wm["accuracy"] <= 0.01
    assert base["accuracy"] > 0.85
    # the spec's quadratic rule at c = 0.1 embeds (almost) nothing on this model (issue 15)
    assert spec["z"] < 4
    # a coalition of 8 of the 16 clients verifies it without the key
    th = res["threshold"]
    assert (th["t"], th["K"], len(th["parties"])) == (8, 16, 8)
    assert th["z_coalition"] == pytest.approx(th["z_plaintext"], abs=1e-6)
    assert th["z_plaintext"] == pytest.approx(wm["z"], rel=1e-9)
    assert {a["attack"].split(" (")[0] for a in res["attacks"]} == {"fine-tune", "magnitude pruning"}
    assert (tmp_path / "wm.png").stat().st_size > 10_000
    assert "threshold verification by t = 8 of K = 16" in format_table(res)


def test_attacks():
    server, history = _small("trusted", c=2.0, rounds=3)
    model, key = server.model(), server.monitor_key
    z0 = history.metrics[-1]["z"]
    pruned = prune_attack(model, 0.5)
    for _, p in pruned.named_parameters():
        assert int((p == 0).sum()) >= int(0.5 * p.numel())
    assert z_score(prune_attack(model, 0.0), key) == pytest.approx(z0, rel=1e-6)
    # heavy noise drowns the watermark, light noise does not
    assert abs(z_score(noise_attack(model, 30.0, rng=0), key)) < abs(z_score(noise_attack(model, 0.01, rng=0), key))
    assert z_score(noise_attack(model, 0.01, rng=0), key) == pytest.approx(z0, rel=0.05)
    # the attacker's own key is detected in the overwritten model, ours still scores the same sign
    over = overwrite_attack(model, 0.5, seed=77)
    theirs = generate_key(watermark_shapes(model), seed=77)
    assert z_score(over, theirs) > 4
    tuned = finetune_attack(model, np.zeros((20, 64), np.float32), np.zeros(20, np.int64), fraction=0.5,
                            epochs=1, rng=0)
    assert any((a != b).any() for a, b in zip(tuned.parameters(), model.parameters(), strict=True))
