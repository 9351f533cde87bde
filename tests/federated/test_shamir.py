"""Exact GF(2^61 - 1) arithmetic and Shamir (t, K) sharing: Python-int oracles, every t-subset,
uniformity of t - 1 shares, bad input."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import stats

from rml_fast.federated import _field, _shamir
from rml_fast.federated.threshold_watermark import (
    FIELD_PRIME,
    KeyShare,
    ShamirField,
    generate_key,
    trustless_keygen,
)

P = FIELD_PRIME


def _edge_values(rng, n):
    edges = np.array([0, 1, 2, P - 1, P - 2, 2**32 - 1, 2**32, 2**32 + 1, 2**60, 2**61 - 2**29, 2**29 - 1],
                     dtype=np.uint64)
    rand = rng.integers(0, P, size=n, dtype=np.uint64)
    return np.concatenate([edges, rand])


def test_prime_is_mersenne_61():
    assert P == 2**61 - 1
    assert pow(3, P - 1, P) == 1  # Fermat witness (P is prime)


def test_mulmod_and_dot_match_python_integers():
    rng = np.random.default_rng(0)
    a = _edge_values(rng, 5000)
    b = np.concatenate([a[:11][::-1], rng.integers(0, P, size=5000, dtype=np.uint64)])
    pairs = list(itertools.product(a[:11].tolist(), repeat=2))
    ea = np.array([x for x, _ in pairs], dtype=np.uint64)
    eb = np.array([y for _, y in pairs], dtype=np.uint64)
    a, b = np.concatenate([a, ea]), np.concatenate([b, eb])
    exact = np.array([int(x) * int(y) % P for x, y in zip(a.tolist(), b.tolist(), strict=True)], dtype=np.uint64)
    np.testing.assert_array_equal(_field.mulmod(a, b), exact)
    np.testing.assert_array_equal(_field.mulmod_numpy(a, b), exact)
    dot = sum(int(x) * int(y) for x, y in zip(a.tolist(), b.tolist(), strict=True)) % P
    assert _field.dot(a, b) == dot
    assert _field.dot_numpy(a, b) == dot
    assert _field.dots(a, [b, a], block=1000) == [dot, _field.dot(a, a)]


def test_blocked_threaded_dots_on_long_vectors(monkeypatch):
    rng = np.random.default_rng(5)
    a = rng.integers(0, P, size=300_001, dtype=np.uint64)
    bs = [rng.integers(0, P, size=a.size, dtype=np.uint64) for _ in range(3)]
    expect = [_field.dot_numpy(a, b) for b in bs]
    monkeypatch.setattr(_field, "PARALLEL_MIN", 1000)  # force the threaded split on 2 threads
    monkeypatch.setattr(_field.numba, "get_num_threads", lambda: 2)
    assert _field.dots(a, bs) == expect


def test_fixed_point_encoding_is_signed_and_checks_range():
    f = ShamirField(1, 1, frac_bits=24)
    x = np.array([0.0, 1.0, -1.0, 0.5, -2.0**-24, 1234.5678, -1234.5678])
    enc = f.encode(x)
    assert enc.dtype == np.uint64
    assert int(enc[2]) == P - 2**24 and int(enc[4]) == P - 1
    np.testing.assert_allclose(f.decode(enc), np.rint(x * 2**24) / 2**24, rtol=0, atol=0)
    with pytest.raises(ValueError, match="wrap-around"):
        f.encode([2.0**37])
    with pytest.raises(ValueError, match="wrap-around"):
        f.encode([np.nan])


def test_any_t_shares_reconstruct_bit_exactly():
    rng = np.random.default_rng(1)
    key = {"a": rng.normal(size=(6, 7)), "b": rng.normal(size=(5,)) * 100}
    for t, K in ((1, 1), (1, 3), (3, 5), (5, 5)):
        field = ShamirField(t, K)
        shares = field.share(key, rng=t * 10 + K)
        expect = {k: field.encode(v) for k, v in key.items()}
        for subset in itertools.combinations(range(K), t):
            rec = field.reconstruct_field([shares[j] for j in subset])
            for k in key:
                np.testing.assert_array_equal(rec[k], expect[k])
        # more than t shares also reconstruct
        rec = field.reconstruct(shares)
        for k in key:
            np.testing.assert_array_equal(rec["a" if k == "a" else k], field.decode(expect[k]))


def test_numba_sharing_matches_plain_python():
    rng = np.random.default_rng(2)
    secret = rng.integers(0, P, size=40, dtype=np.uint64)
    coeffs = rng.integers(0, P, size=(3, 40), dtype=np.uint64)
    ours = _field.horner_shares(secret, coeffs, np.arange(1, 7, dtype=np.uint64))
    py = _shamir.share_array_python(secret.tolist(), 4, 6, coeffs.tolist())
    np.testing.assert_array_equal(ours, np.array(py, dtype=np.uint64))
    back = _shamir.reconstruct_array_python([py[1], py[3], py[4], py[5]], [2, 4, 5, 6])
    assert back == secret.tolist()


def test_lagrange_weights_interpolate_polynomials():
    field = ShamirField(4, 9)
    ids = [0, 3, 5, 8]
    lam = [int(v) for v in field.lagrange_at_zero(ids)]
    assert sum(lam) % P == 1  # a constant polynomial
    coeffs = [17, P - 5, 123456789, 2**60]  # degree 3
    values = [sum(c * (i + 1) ** e for e, c in enumerate(coeffs)) % P for i in ids]
    assert sum(lj * v for lj, v in zip(lam, values, strict=True)) % P == 17
    with pytest.raises(ValueError, match="distinct"):
        field.lagrange_at_zero([0, 0, 1, 2])


@pytest.mark.parametrize("secret_value", [0.0, 0.75])
def test_t_minus_one_shares_are_uniform(secret_value):
    # 30000 independent sharings of the same secret with t = 3: any 2 shares should be uniform on
    # GF(P)^2 -> a chi-square test of their joint 8 x 8 histogram, and of each marginal on 64 bins
    n, t, K = 30000, 3, 5
    field = ShamirField(t, K)
    shares = field.share({"s": np.full(n, secret_value)}, rng=7)
    for j1, j2 in ((0, 1), (2, 4)):
        u1 = shares[j1].arrays["s"].astype(np.float64) / P
        u2 = shares[j2].arrays["s"].astype(np.float64) / P
        joint = np.histogram2d(u1, u2, bins=8, range=[[0, 1], [0, 1]])[0].ravel()
        assert stats.chisquare(joint).pvalue > 1e-3
        assert stats.chisquare(np.histogram(u1, bins=64, range=(0, 1))[0]).pvalue > 1e-3
        assert abs(np.corrcoef(u1, u2)[0, 1]) < 0.03
    # while t shares determine it
    rec = field.reconstruct([shares[0], shares[1], shares[2]])["s"]
    assert np.all(rec == secret_value)


def test_bad_thresholds_and_foreign_shares():
    with pytest.raises(ValueError, match="t must satisfy"):
        ShamirField(4, 3)
    with pytest.raises(ValueError, match="t must be"):
        ShamirField(0, 3)
    with pytest.raises(TypeError, match="t must be"):
        ShamirField(1.5, 3)
    field = ShamirField(2, 3)
    key = generate_key({"w": (3, 2)}, seed=0)
    shares = field.share(key, rng=0)
    foreign = KeyShare(1, 2, 3, 2**31 - 1, 24, dict(shares[1].arrays))
    with pytest.raises(ValueError, match="another field"):
        field.reconstruct([shares[0], foreign])
    other_bits = KeyShare(1, 2, 3, P, 16, dict(shares[1].arrays))
    with pytest.raises(ValueError, match="fixed-point bits"):
        field.reconstruct([shares[0], other_bits])
    big = KeyShare(1, 2, 3, P, 24, {"w": np.full((3, 2), P, dtype=np.uint64)})
    with pytest.raises(ValueError, match=">= P"):
        field.reconstruct([shares[0], big])
    signed = KeyShare(1, 2, 3, P, 24, {"w": shares[1].arrays["w"].astype(np.int64)})
    with pytest.raises(TypeError, match="uint64"):
        field.reconstruct([shares[0], signed])
    wrong_shape = KeyShare(1, 2, 3, P, 24, {"w": np.zeros((2, 3), dtype=np.uint64)})
    with pytest.raises(ValueError, match="shape"):
        field.reconstruct([shares[0], wrong_shape])
    with pytest.raises(ValueError, match="at least t = 2"):
        field.reconstruct([shares[0]])
    with pytest.raises(ValueError, match="distinct parties"):
        field.reconstruct([shares[0], shares[0]])
    with pytest.raises(ValueError, match=r"\(3, 4\) sharing"):
        field.reconstruct([shares[0], ShamirField(3, 4).share(key, rng=0)[1]])
    with pytest.raises(TypeError, match="KeyShare"):
        field.reconstruct([shares[0], {"w": shares[1].arrays["w"]}])


def test_share_messages_round_trip():
    field = ShamirField(2, 3)
    share = field.share(generate_key({"w": (4,), "v": (2, 2)}, seed=1), rng=0)[2]
    back = KeyShare.from_message(share.to_message())
    assert (back.party, back.t, back.K, back.prime, back.frac_bits) == (2, 2, 3, P, 24)
    for k in share.arrays:
        np.testing.assert_array_equal(back.arrays[k], share.arrays[k])
    with pytest.raises(ValueError, match="share_meta"):
        KeyShare.from_message({"share/w": np.zeros(2, np.uint64)})


def test_trustless_keygen_shares_the_sum_of_additive_shares():
    additive, shamir, norms = trustless_keygen({"w": (8, 5), "b": (5,)}, t=3, K=4, seed=9)
    field = ShamirField(3, 4)
    for subset in itertools.combinations(range(4), 3):
        rec = field.reconstruct([shamir[j] for j in subset])
        for k in ("w", "b"):
            np.testing.assert_array_equal(rec[k], sum(a[k] for a in additive))
    key = field.reconstruct(shamir[:3])
    for k in key:
        assert abs(np.linalg.norm(key[k]) - 1.0) < 1e-5
        assert norms[k] > 0
