"""S(H)NAP interventional attribution: closed-form games, axioms, shapiq, samplers, toy, tabular."""

from __future__ import annotations

import doctest
import itertools
import math

import numpy as np
import pytest

from rml_fast.audit import _interventional_toy
from rml_fast.audit.interventional import (
    FeatureGroupGenerator,
    GenerativeInterventionalAttribution,
    InpaintingGenerator,
    InterventionGame,
    OracleSceneGenerator,
    ToyRiskModel,
    coalition_values,
    exact_attribution,
    exact_attribution_reference,
    insertion_curve,
    kernel_sampling,
    make_object_scene,
    permutation_sampling,
)

INDICES = ["SII", "BII", "STII", "Moebius", "FSII"]


def table_game(v: np.ndarray):
    n = int(v.size).bit_length() - 1
    return lambda keep: v[(np.asarray(keep, dtype=np.int64) << np.arange(n)).sum(1)]


def table(fn, n: int) -> np.ndarray:
    """Value table of a set function ``fn(frozenset) -> float`` by bitmask."""
    return np.array([fn(frozenset(i for i in range(n) if s >> i & 1)) for s in range(1 << n)])


# --- exact transforms ----------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 3, 5])
@pytest.mark.parametrize("index", INDICES)
def test_exact_equals_definition(n, index):
    v = np.random.default_rng(n).normal(size=1 << n)
    ours, ref = exact_attribution(v, index), exact_attribution_reference(v, index)
    np.testing.assert_allclose(ours.values, ref.values, atol=1e-12)
    np.testing.assert_allclose(ours.first_order, ref.first_order, atol=1e-11)
    np.testing.assert_allclose(ours.interactions, ref.interactions, atol=1e-11)
    np.testing.assert_allclose(ours.extra["moebius"], ref.extra["moebius"], atol=1e-12)


def test_shapley_equals_brute_force_permutations():
    n = 6
    v = np.random.default_rng(0).normal(size=1 << n)
    phi = np.zeros(n)
    for perm in itertools.permutations(range(n)):
        s = 0
        for i in perm:
            phi[i] += v[s | 1 << i] - v[s]
            s |= 1 << i
    np.testing.assert_allclose(exact_attribution(v).values, phi / math.factorial(n), atol=1e-12)


def test_additive_game():
    w = np.array([1.0, -2.0, 0.5, 3.0])
    v = table(lambda S: 7.0 + sum(w[i] for i in S), 4)
    for index in INDICES:
        res = exact_attribution(v, index)
        np.testing.assert_allclose(res.values, w, atol=1e-12)
        np.testing.assert_allclose(res.interactions, 0.0, atol=1e-12)
    fs = exact_attribution(v, "FSII")
    np.testing.assert_allclose(fs.first_order, w, atol=1e-12)
    assert fs.extra["r2"] == pytest.approx(1.0)
    assert fs.baseline == 7.0


def test_pure_pair_game():
    v = table(lambda S: float({1, 3} <= S), 5)
    expected_phi = np.array([0, 0.5, 0, 0.5, 0])
    for index in INDICES:
        res = exact_attribution(v, index)
        np.testing.assert_allclose(res.values, expected_phi, atol=1e-12)
        want = np.zeros((5, 5))
        want[1, 3] = want[3, 1] = 1.0
        np.testing.assert_allclose(res.interactions, want, atol=1e-12)
    assert exact_attribution(v, "FSII").extra["r2"] == pytest.approx(1.0)


def test_unanimity_game_of_three():
    n, T = 5, {0, 2, 4}
    v = table(lambda S: float(T <= S), n)
    pair_value = {"SII": 1 / 2, "BII": 1 / 2, "STII": 1 / 3, "Moebius": 0.0}
    for index, val in pair_value.items():
        res = exact_attribution(v, index)
        np.testing.assert_allclose(res.values, [1 / 3, 0, 1 / 3, 0, 1 / 3], atol=1e-12)
        assert res.interactions[0, 2] == pytest.approx(val)
        assert res.interactions[2, 4] == pytest.approx(val)
        assert res.interactions[0, 1] == pytest.approx(0.0, abs=1e-12)
    assert exact_attribution(v, "BII").first_order[0] == pytest.approx(1 / 4)  # Banzhaf
    assert exact_attribution(v, "FSII").extra["r2"] < 1.0  # an order-3 game is not LMPI-exact


def test_axioms_efficiency_symmetry_null_additivity():
    rng = np.random.default_rng(3)
    n = 6

    def sym_game(S):  # players 0 and 1 symmetric, player 5 null
        k = len(S - {5})
        return math.sin(k) + 0.3 * (0 in S) * (2 in S) + 0.3 * (1 in S) * (2 in S)

    v = table(sym_game, n)
    w = rng.normal(size=1 << n)
    w[32:] = w[:32]  # player 5 null in w too
    for index in INDICES:
        a, b, ab = (exact_attribution(x, index) for x in (v, w, v + w))
        assert a.values.sum() == pytest.approx(v[-1] - v[0])
        assert b.values.sum() == pytest.approx(w[-1] - w[0])
        assert a.values[0] == pytest.approx(a.values[1])
        assert a.interactions[0, 2] == pytest.approx(a.interactions[1, 2])
        np.testing.assert_allclose([a.values[5], b.values[5]], 0.0, atol=1e-12)
        np.testing.assert_allclose(a.interactions[5], 0.0, atol=1e-12)
        np.testing.assert_allclose(b.interactions[:, 5], 0.0, atol=1e-12)
        np.testing.assert_allclose(ab.values, a.values + b.values, atol=1e-12)
        np.testing.assert_allclose(ab.interactions, a.interactions + b.interactions, atol=1e-12)


# --- shapiq on the same game --------------------------------------------------------------------


@pytest.mark.parametrize("index", ["SV", "BV", "SII", "BII", "STII", "Moebius", "FSII"])
def test_matches_shapiq_exact_computer(index):
    shapiq = pytest.importorskip("shapiq")
    n = 6
    rng = np.random.default_rng(11)
    w, u = rng.normal(size=n), rng.normal(size=(n, n))

    def game(keep):
        k = np.asarray(keep, dtype=np.float64)
        return np.tanh(k @ w + np.einsum("bi,ij,bj->b", k, u, k) * 0.3) + k[:, 0] * k[:, 1] * k[:, 2]

    v = coalition_values(game, n)
    iv = shapiq.ExactComputer(game, n_players=n)(index=index, order=1 if index in ("SV", "BV")
                                                  else 2)
    ours = exact_attribution(v, {"SV": "SII", "BV": "BII"}.get(index, index))
    single = ours.values if index == "SV" else ours.first_order
    for i in range(n):
        assert iv[(i,)] == pytest.approx(single[i], abs=1e-8), (index, i)
    if index not in ("SV", "BV"):
        for i, j in itertools.combinations(range(n), 2):
            assert iv[(i, j)] == pytest.approx(ours.interactions[i, j], abs=1e-8), (index, i, j)


# --- samplers ------------------------------------------------------------------------------------


def test_permutation_sampling_converges_and_is_exact_on_pair_games():
    n = 8
    v = np.random.default_rng(5).normal(size=1 << n)
    exact = exact_attribution(v, "SII")
    game = table_game(v)
    small = permutation_sampling(game, n, 400, rng=0)
    big = permutation_sampling(game, n, 40000, rng=0)
    err_small = np.abs(small.values - exact.values).max()
    err_big = np.abs(big.values - exact.values).max()
    assert err_big < 0.1 and err_big < err_small
    assert np.abs(big.interactions - exact.interactions).max() < 0.5
    assert big.values.sum() == pytest.approx(v[-1] - v[0])  # efficiency per permutation
    assert big.n_evaluations <= 1 << n
    # a game of order <= 2 has constant discrete derivatives: SII exact from any adjacency
    pair = np.random.default_rng(0).normal(size=(n, n))
    pg = lambda k: np.einsum("bi,ij,bj->b", k.astype(float), np.triu(pair, 1), k.astype(float))  # noqa: E731
    res = permutation_sampling(pg, n, 2000, rng=1)
    mask = res.extra["pair_counts"] > 0
    np.testing.assert_allclose(res.interactions[mask], (np.triu(pair, 1) + np.triu(pair, 1).T)[mask],
                               atol=1e-12)


def test_kernel_sampling_converges_to_faith_shap():
    n = 9
    v = np.random.default_rng(7).normal(size=1 << n)
    exact = exact_attribution(v, "FSII")
    game = table_game(v)
    full = kernel_sampling(game, n, 1 << n, rng=0)  # every coalition: the exact WLS
    np.testing.assert_allclose(full.first_order, exact.first_order, atol=1e-9)
    np.testing.assert_allclose(full.interactions, exact.interactions, atol=1e-9)
    assert full.extra["r2"] == pytest.approx(exact.extra["r2"], abs=1e-9)
    errs = [np.abs(kernel_sampling(game, n, b, rng=0).interactions - exact.interactions).max()
            for b in (100, 400)]
    assert errs[1] < errs[0]
    sv = kernel_sampling(game, n, 1 << n, order=1, rng=0)  # KernelSHAP = Shapley values
    np.testing.assert_allclose(sv.values, exact_attribution(v).values, atol=1e-9)


# --- the 2-D toy with planted ground truth ------------------------------------------------------


def _toy(n=6):
    scene = make_object_scene(n, size=24, rng=1)
    w = np.array([1.0, -0.5, 2.0, 0.0, 0.3, 0.7])[:n]
    G = np.zeros((n, n))
    G[0, 2] = G[2, 0] = 1.5
    G[1, 4] = G[4, 1] = -0.8
    return scene, w, G, ToyRiskModel(scene, w, G, bias=0.2)


def test_toy_oracle_recovers_planted_effects():
    scene, w, G, f = _toy()
    audit = GenerativeInterventionalAttribution(f, OracleSceneGenerator(scene), batch_size=16)
    audit.fit(scene.image, 6)
    np.testing.assert_allclose(audit.shapley_values_, w + 0.5 * G.sum(1), atol=1e-9)
    np.testing.assert_allclose(audit.interactions_, G, atol=1e-9)
    np.testing.assert_allclose(audit.beta_, w, atol=1e-9)  # LMPI main effects
    np.testing.assert_allclose(audit.beta2_, G, atol=1e-9)
    assert audit.beta0_ == pytest.approx(0.2) and audit.r2_ == pytest.approx(1.0)
    assert audit.generator_bias_ == pytest.approx(0.0, abs=1e-9)
    assert audit.mode_ == "exact" and audit.n_evaluations_ == 64
    moeb = audit.moebius_
    assert moeb[1 << 0 | 1 << 2] == pytest.approx(1.5)
    assert abs(moeb[0b111]) < 1e-9


def test_toy_inpainting_with_seeds_and_ci():
    scene, w, G, f = _toy()
    gen = InpaintingGenerator(scene.masks, noise=0.05)
    audit = GenerativeInterventionalAttribution(f, gen, n_seeds=4, random_state=3).fit(scene.image, 6)
    np.testing.assert_allclose(audit.interactions_, G, atol=0.15)
    np.testing.assert_allclose(audit.shapley_values_, w + 0.5 * G.sum(1), atol=0.25)
    lo, hi = audit.ci_["shapley_values"]
    assert np.all(lo <= audit.shapley_values_ + 1e-12) and np.all(audit.shapley_values_ <= hi + 1e-12)
    live = np.array([0, 1, 2, 4, 5])
    assert np.all(hi[live] > lo[live])
    assert hi[3] == lo[3] == pytest.approx(0.0, abs=1e-12)  # w_3 = 0: a null player in every seed
    again = GenerativeInterventionalAttribution(f, gen, n_seeds=4, random_state=3).fit(scene.image, 6)
    np.testing.assert_array_equal(again.values_, audit.values_)  # reproducible from the seed
    other = GenerativeInterventionalAttribution(f, gen, n_seeds=4, random_state=4).fit(scene.image, 6)
    assert not np.array_equal(other.values_, audit.values_)


def test_toy_samplers_through_the_estimator():
    scene, _, G, f = _toy()
    gen = OracleSceneGenerator(scene)
    kern = GenerativeInterventionalAttribution(f, gen, approximator="kernel", budget=40).fit(
        scene.image, 6)
    np.testing.assert_allclose(kern.interactions_, G, atol=1e-8)  # order-2 game: exact fit
    perm = GenerativeInterventionalAttribution(f, gen, approximator="permutation",
                                               budget=600).fit(scene.image, 6)
    np.testing.assert_allclose(perm.shapley_values_.sum(), perm.v_full_ - perm.v_empty_)
    np.testing.assert_allclose(perm.interactions_[perm.result_.extra["pair_counts"] > 0],
                               G[perm.result_.extra["pair_counts"] > 0], atol=1e-9)


def test_insertion_curve_detects_radial_bias():
    scene = make_object_scene(4, size=32, rng=0)
    rows, cols = np.indices((32, 32))
    dist = np.hypot(rows - 15.5, cols - 15.5)
    sens = np.exp(-dist / 8.0)

    def f(imgs):
        return ((np.asarray(imgs) - scene.background) * sens).reshape(len(imgs), -1).sum(1)

    positions = [(15.5, 15.5 + r) for r in (0, 3, 6, 9, 12)]
    out = insertion_curve(f, lambda x, p, s: scene.insert(x, 0, p), scene.background, positions,
                          radii=[0, 3, 6, 9, 12])
    assert out["spearman_rho"] == pytest.approx(-1.0)
    assert out["slope"] < 0 and np.all(np.diff(out["deltas"]) < 0)
    audit = GenerativeInterventionalAttribution(f, OracleSceneGenerator(scene)).fit(scene.image, 4)
    via = audit.insertion_curve(scene.background, lambda x, p, s: scene.insert(x, 0, p), positions)
    np.testing.assert_allclose(via["deltas"], out["deltas"] + out["baseline"] - audit.v_empty_)


# --- a real tabular risk model ------------------------------------------------------------------


def _breast_cancer():
    from sklearn.datasets import load_breast_cancer
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    X, y = load_breast_cancer(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    model = LogisticRegression(max_iter=2000).fit(X, y)
    groups = [[k, k + 10, k + 20] for k in range(10)]  # mean / se / worst of each measurement
    return X, model, groups


def test_tabular_baseline_removal_is_additive_in_the_logit():
    X, model, groups = _breast_cancer()
    gen = FeatureGroupGenerator(groups, X[:200])
    audit = GenerativeInterventionalAttribution(model.decision_function, gen).fit(X[300], 10)
    base = X[:200].mean(0)
    want = np.array([model.coef_[0, g] @ (X[300, g] - base[g]) for g in groups])
    np.testing.assert_allclose(audit.shapley_values_, want, atol=1e-9)
    np.testing.assert_allclose(audit.interactions_, 0.0, atol=1e-9)
    assert audit.generator_bias_ == pytest.approx(0.0, abs=1e-12)


def test_tabular_probability_game_matches_shapiq():
    shapiq = pytest.importorskip("shapiq")
    X, model, groups = _breast_cancer()
    gen = FeatureGroupGenerator(groups[:8], X[:100], mode="marginal")
    risk = lambda b: model.predict_proba(b)[:, 1]  # noqa: E731
    audit = GenerativeInterventionalAttribution(risk, gen, n_seeds=3).fit(X[20], 8)
    game = InterventionGame(risk, gen, X[20], 8, seeds=audit.seeds_)
    iv = shapiq.ExactComputer(game, n_players=8)(index="SII", order=2)
    for i, j in itertools.combinations(range(8), 2):
        assert iv[(i, j)] == pytest.approx(audit.interactions_[i, j], abs=1e-9)
    for i in range(8):
        assert iv[(i,)] == pytest.approx(audit.shapley_values_[i], abs=1e-9)
    assert audit.shapley_values_.sum() == pytest.approx(audit.v_full_ - audit.v_empty_)
    assert audit.ci_ is not None


# --- bad input ------------------------------------------------------------------------------------


def test_bad_input_raises_clear_errors():
    scene, _, _, f = _toy()
    good = OracleSceneGenerator(scene)
    with pytest.raises(ValueError, match="one intervened input per coalition"):
        GenerativeInterventionalAttribution(f, lambda x, k, s: scene.render(k)[:1]).fit(
            scene.image, 6)
    with pytest.raises(ValueError, match="risk_fn must return"):
        GenerativeInterventionalAttribution(lambda b: np.zeros((len(b), 2)), good).fit(
            scene.image, 6)
    with pytest.raises(ValueError, match="non-finite"):
        GenerativeInterventionalAttribution(lambda b: np.full(len(b), np.nan), good).fit(
            scene.image, 6)
    game = InterventionGame(f, good, scene.image, 6)
    with pytest.raises(ValueError, match=r"keep must be a boolean array of shape \(B, 6\)"):
        game(np.ones((3, 5), dtype=bool))
    with pytest.raises(ValueError, match="keep must be a boolean"):
        game(np.ones((3, 6)))
    with pytest.raises(ValueError, match="does not match the generator, which has 6 objects"):
        GenerativeInterventionalAttribution(f, InpaintingGenerator(scene.masks)).fit(
            scene.image, 5)
    with pytest.raises(ValueError, match="too large for approximator='exact'"):
        GenerativeInterventionalAttribution(f, good, approximator="exact").fit(scene.image, 20)
    with pytest.raises(ValueError, match="too large for exact enumeration"):
        coalition_values(lambda k: k.sum(1), 30)
    with pytest.raises(ValueError, match="index must be one of"):
        GenerativeInterventionalAttribution(f, good, index="XYZ").fit(scene.image, 6)
    with pytest.raises(ValueError, match="approximator must be"):
        GenerativeInterventionalAttribution(f, good, approximator="mc").fit(scene.image, 6)
    with pytest.raises(ValueError, match="values must be a 1-D table of length 2\\*\\*n"):
        exact_attribution(np.zeros(6))
    with pytest.raises(ValueError, match="budget must be at least"):
        kernel_sampling(lambda k: k.sum(1), 6, 10)
    with pytest.raises(ValueError, match="budget must be at least"):
        permutation_sampling(lambda k: k.sum(1), 6, 5)
    with pytest.raises(TypeError, match="generator must be a callable"):
        InterventionGame(f, object(), scene.image, 6)
    with pytest.raises(TypeError, match="n_seeds"):
        GenerativeInterventionalAttribution(f, good, n_seeds=1.5).fit(scene.image, 6)
    with pytest.raises(ValueError, match="groups must be non-empty, disjoint"):
        FeatureGroupGenerator([[0, 1], [1]], np.zeros((2, 3)))
    with pytest.raises(ValueError, match="main_effects must have shape"):
        ToyRiskModel(scene, [1.0, 2.0])
    with pytest.raises(ValueError, match="radius must fit a grid cell"):
        make_object_scene(16, size=16, radius=3)
    with pytest.raises(ValueError, match="radii must have shape"):
        insertion_curve(f, lambda x, p, s: x, scene.image, [1, 2], radii=[1.0])


def test_coalition_values_bitmask_order_and_caller_data_untouched():
    v = coalition_values(lambda k: (k * np.array([1.0, 10.0, 100.0])).sum(1), 3)
    np.testing.assert_array_equal(v, [0, 1, 10, 11, 100, 101, 110, 111])
    table_in = np.random.default_rng(0).normal(size=8)
    before = table_in.copy()
    exact_attribution(table_in, "FSII")
    np.testing.assert_array_equal(table_in, before)


def test_private_module_doctests():
    res = doctest.testmod(_interventional_toy, optionflags=doctest.ELLIPSIS
                          | doctest.NORMALIZE_WHITESPACE)
    assert res.attempted > 0 and res.failed == 0


def test_spurious_artifact_shows_as_artifact_main_effect():
    from sklearn.linear_model import LogisticRegression

    from rml_fast.audit.interventional import make_toy_lung_dataset, toy_lung_scene

    scenes = [toy_lung_scene(rng=10 + s, malignant=bool(s % 2)) for s in range(4)]
    effects = {}
    for corr in (0.0, 0.9):
        data = make_toy_lung_dataset(400, spurious_artifact_corr=corr, rng=0)
        model = LogisticRegression(C=0.05, max_iter=3000).fit(
            data["images"].reshape(400, -1), data["labels"])
        risk = lambda b, m=model: m.decision_function(np.asarray(b).reshape(len(b), -1))  # noqa: E731
        phi = np.array([GenerativeInterventionalAttribution(risk, InpaintingGenerator(sc.masks))
                        .fit(sc.image, 2).shapley_values_ for sc in scenes])
        effects[corr] = phi
        assert np.all(phi[1::2, 0] > phi[0::2, 0])  # malignant nodules raise the risk more
    # trained with the shortcut: the artifact (player 1) carries risk; without it, hardly any
    assert effects[0.9][:, 1].mean() > 0.6
    assert np.abs(effects[0.0][:, 1]).mean() < 0.35
    assert effects[0.9][:, 1].mean() > 3 * np.abs(effects[0.0][:, 1]).mean()


@pytest.mark.parametrize("index", ["BII", "STII", "Moebius", "FSII"])
def test_estimator_index_option_equals_table_computation(index):
    scene, _, _, f = _toy()
    gen = InpaintingGenerator(scene.masks, noise=0.05)
    audit = GenerativeInterventionalAttribution(f, gen, index=index, n_seeds=2,
                                                random_state=1).fit(scene.image, 6)
    ref = exact_attribution(audit.values_, index)
    np.testing.assert_allclose(audit.interactions_, ref.interactions, atol=1e-12)
    np.testing.assert_allclose(audit.first_order_, ref.first_order, atol=1e-12)
    np.testing.assert_allclose(audit.shapley_values_, exact_attribution(audit.values_).values,
                               atol=1e-12)
    lo, hi = audit.ci_["interactions"]
    assert lo.shape == hi.shape == (6, 6) and np.all(lo <= hi)


def test_auto_switches_to_kernel_sampling_for_many_players():
    n = 30
    w = np.linspace(-1.0, 1.0, n)
    x = np.ones(n)
    gen = FeatureGroupGenerator([[j] for j in range(n)], np.zeros((1, n)))
    audit = GenerativeInterventionalAttribution(lambda b: b @ w + 2.0 * b[:, 3] * b[:, 7],
                                                gen, progress=True, batch_size=512)
    audit.fit(x, n)
    assert audit.mode_ == "kernel" and audit.n_evaluations_ <= 2048
    want = np.zeros((n, n))
    want[3, 7] = want[7, 3] = 2.0
    np.testing.assert_allclose(audit.interactions_, want, atol=1e-8)  # order-2 game: exact
    np.testing.assert_allclose(audit.beta_, w, atol=1e-8)
    assert audit.r2_ == pytest.approx(1.0)
    with pytest.raises(ValueError, match="too large"):
        GenerativeInterventionalAttribution(lambda b: b @ w, gen, approximator="exact").fit(x, n)
