"""B3IT (rml_fast.evaluation.b3it): statistic, tests, sequential rule, monitor, stand-in endpoint.

Oracles: closed forms of the TV distance and a brute-force Counter loop; an exact enumeration of
the permutation distribution; the vectorised resplits against a per-test loop on the same random
draws; scikit-learn's ROC AUC; hand-built series for every clause of the sequential rule and a
direct transcription of the published rule; the nominal level and the power of the test on the
simulated endpoint; the documented detection date on the authors' recorded data (when
``RML_FAST_B3IT_DEMO_DIR`` points at it; the data is not vendored).
"""

from __future__ import annotations

import itertools
import json
import os
import statistics
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import binom, permutation_test
from sklearn.metrics import roc_auc_score

from rml_fast.evaluation import _b3it_counts as bc
from rml_fast.evaluation.b3it import (
    B3ITMonitor,
    ChangeEvent,
    Cost,
    CountingSampler,
    LinearLMEndpoint,
    b3it_test,
    balance_score,
    detect_changes,
    detection_auc,
    find_border_inputs,
    is_unstable,
    null_statistics,
    reference_distributions,
    select_balanced,
    tv_statistic,
    two_sample_statistics,
)


def _tv_counter(a: list[str], b: list[str]) -> float:
    """TV of two empirical distributions, by a plain loop over the token union."""
    ca, cb = Counter(a), Counter(b)
    return 0.5 * sum(abs(ca[t] / len(a) - cb[t] / len(b)) for t in set(ca) | set(cb))


@pytest.fixture(scope="module")
def endpoint() -> LinearLMEndpoint:
    return LinearLMEndpoint(seed=0)


@pytest.fixture(scope="module")
def border(endpoint) -> list[str]:
    """The 20 most balanced of 50 border inputs of the stand-in endpoint."""
    bis = find_border_inputs(
        endpoint, endpoint.candidate_prompts(), target=50, rng=0, progress=False
    )
    return select_balanced(reference_distributions(endpoint, bis, 100, progress=False), 20)


# ------------------------------------------------------------------------------- statistic
def test_tv_closed_forms_and_brute_force():
    rng = np.random.default_rng(0)
    a = rng.integers(0, 6, (7, 5)).astype(float)
    a[:, 0] += 1  # every row non-empty
    b = rng.integers(0, 6, (7, 5)).astype(float)
    b[:, 1] += 1
    assert tv_statistic(a, a) == 0.0
    assert tv_statistic(a, 3 * a) == pytest.approx(0.0, abs=1e-15)  # scale-free
    disjoint_a = np.array([[3, 0, 0, 0], [0, 2, 0, 0]])
    disjoint_b = np.array([[0, 1, 4, 0], [1, 0, 0, 7]])
    assert tv_statistic(disjoint_a, disjoint_b) == pytest.approx(1.0)
    assert tv_statistic(a, b) == pytest.approx(tv_statistic(b, a), rel=1e-15)
    brute = 0.0
    for i in range(a.shape[0]):
        brute += 0.5 * sum(
            abs(a[i, j] / a[i].sum() - b[i, j] / b[i].sum()) for j in range(a.shape[1])
        )
    assert tv_statistic(a, b) == pytest.approx(brute / a.shape[0], rel=1e-12)
    # zero-padded vocabulary columns change nothing
    assert tv_statistic(np.pad(a, ((0, 0), (0, 3))), np.pad(b, ((0, 0), (0, 3)))) == pytest.approx(
        tv_statistic(a, b), rel=1e-12
    )


@pytest.mark.parametrize(
    ("ref", "new", "err", "match"),
    [
        ([[1, 1]], [[1, 1, 0]], ValueError, "same shape"),
        ([[1, -1]], [[1, 1]], ValueError, "non-negative"),
        ([[0, 0], [1, 1]], [[1, 1], [1, 1]], ValueError, "row 0"),
        ([1, 1], [1, 1], ValueError, r"\(P, V\)"),
        ([["a", "b"]], [[1, 1]], TypeError, "ref_counts"),
    ],
)
def test_tv_bad_input(ref, new, err, match):
    with pytest.raises(err, match=match):
        tv_statistic(ref, new)


def test_b3it_statistic_matches_counter_loop():
    rng = np.random.default_rng(1)
    toks = ["a", "b", "c", "d"]
    ref = {f"p{i}": list(rng.choice(toks, 30, p=[0.5, 0.3, 0.1, 0.1])) for i in range(6)}
    new = {f"p{i}": list(rng.choice(toks[1:], 8)) for i in range(6)}
    res = b3it_test(ref, new, n_permutations=0)
    brute = np.mean([_tv_counter(ref[p], new[p]) for p in ref])
    assert res.statistic == pytest.approx(brute, rel=1e-12)
    assert np.isnan(res.pvalue)
    # Counters are accepted in place of token lists
    res_c = b3it_test({p: Counter(v) for p, v in ref.items()}, new, n_permutations=0)
    assert res_c.statistic == pytest.approx(brute, rel=1e-12)


def test_permutation_pvalue_matches_exact_enumeration():
    ref = {"x": ["a", "a", "a", "b"], "y": ["c", "c", "d"]}
    new = {"x": ["b", "b"], "y": ["d", "d", "c"]}
    t_obs = np.mean([_tv_counter(ref[p], new[p]) for p in ref])
    # exact permutation distribution: every split of every prompt's pooled samples
    splits = []
    for p in ref:
        pooled = ref[p] + new[p]
        n1 = len(ref[p])
        splits.append(
            [
                _tv_counter(
                    [pooled[i] for i in c], [pooled[i] for i in range(len(pooled)) if i not in c]
                )
                for c in itertools.combinations(range(len(pooled)), n1)
            ]
        )
    exact = np.mean([np.mean(c) >= t_obs - 1e-12 for c in itertools.product(*splits)])
    b = 20000
    res = b3it_test(ref, new, n_permutations=b, rng=3)
    assert res.statistic == pytest.approx(t_obs)
    mc = (res.pvalue * (b + 1) - 1) / b
    assert abs(mc - exact) < 4 * np.sqrt(exact * (1 - exact) / b)
    # one prompt: scipy's exact permutation test with the TV statistic is the peer
    x = np.array([0, 0, 0, 1, 1, 1, 2])
    y = np.array([1, 1, 2, 2])

    def tv(a, b, axis=-1):
        ca = np.stack([(a == k).mean(axis=axis) for k in range(3)])
        cb = np.stack([(b == k).mean(axis=axis) for k in range(3)])
        return 0.5 * np.abs(ca - cb).sum(axis=0)

    peer = permutation_test(
        (x, y), tv, permutation_type="independent", n_resamples=np.inf, alternative="greater"
    )
    one = b3it_test({"p": [str(v) for v in x]}, {"p": [str(v) for v in y]}, b, rng=4)
    assert one.statistic == pytest.approx(peer.statistic)
    mc = (one.pvalue * (b + 1) - 1) / b
    assert abs(mc - peer.pvalue) < 4 * np.sqrt(peer.pvalue * (1 - peer.pvalue) / b)
    # reproducible from the seed, and the caller's data is untouched
    assert b3it_test(ref, new, n_permutations=50, rng=9) == b3it_test(
        ref, new, n_permutations=50, rng=9
    )
    assert ref == {"x": ["a", "a", "a", "b"], "y": ["c", "c", "d"]}


def test_b3it_level_on_unchanged_endpoint(endpoint, border):
    """1000 null tests (fresh reference and detection samples of the unchanged endpoint).

    A valid level-0.05 test rejects Bin(1000, <= 0.05) times; at exactly 0.05 the band
    [30, 70] holds with probability 1 - 0.004 (the seed is fixed, so the test is not flaky).
    """
    n_tests = 1000
    assert binom.cdf(29, n_tests, 0.05) + binom.sf(70, n_tests, 0.05) < 0.005
    rng = np.random.default_rng(11)
    pvals = np.array(
        [
            b3it_test(
                {p: endpoint(p, 50) for p in border},
                {p: endpoint(p, 10) for p in border},
                n_permutations=99,
                rng=rng,
            ).pvalue
            for _ in range(n_tests)
        ]
    )
    assert 0.03 <= np.mean(pvals <= 0.05) <= 0.07


def test_b3it_power_weight_noise_and_swap(endpoint, border):
    rng = np.random.default_rng(12)
    changed = endpoint.changed(1e-3, seed=3)  # weight noise of the jitter's size
    swapped = LinearLMEndpoint(seed=7)  # another model behind the endpoint
    for other, min_power in ((changed, 0.9), (swapped, 1.0)):
        pvals = [
            b3it_test(
                {p: endpoint(p, 50) for p in border},
                {p: other(p, 10) for p in border},
                n_permutations=99,
                rng=rng,
            ).pvalue
            for _ in range(60)
        ]
        assert np.mean(np.array(pvals) <= 0.05) >= min_power


# ------------------------------------------------------------------------------- resplits
def _loop_statistics(pool_ref, pool_new, n_prompts, n_ref, n_det, n_tests, seed):
    """Per-test loop over the same draws as the vectorised code, with Counter-based TV."""
    prompts = list(pool_ref)
    l_ref = np.array([len(pool_ref[p]) for p in prompts])
    l_new = None if pool_new is None else np.array([len(pool_new[p]) for p in prompts])
    det_pool = pool_ref if pool_new is None else pool_new
    out = []
    draws = bc.resplit_draws(
        np.random.default_rng(seed), l_ref, l_new, n_prompts, n_ref, n_det, n_tests
    )
    for prompt_idx, ref_idx, det_idx in draws:
        for t in range(prompt_idx.shape[0]):
            tvs = []
            for j, pi in enumerate(prompt_idx[t]):
                p = prompts[pi]
                r = [pool_ref[p][i] for i in ref_idx[t, j]]
                d = [det_pool[p][i] for i in det_idx[t, j]]
                if pool_new is None:
                    assert not set(ref_idx[t, j]) & set(det_idx[t, j])  # disjoint resplit
                tvs.append(_tv_counter(r, d))
            assert len(set(prompt_idx[t])) == n_prompts  # distinct prompts
            out.append(np.mean(tvs))
    return np.array(out)


def test_null_statistics_equal_per_test_loop():
    rng = np.random.default_rng(4)
    pool = {
        f"p{i}": list(rng.choice(["a", "b", "c"], int(rng.integers(40, 60)), p=[0.6, 0.3, 0.1]))
        for i in range(8)
    }
    new = {p: list(rng.choice(["a", "b", "d"], 30)) for p in pool}
    n_tests = 600  # more than one chunk of draws
    fast = null_statistics(pool, 3, 25, 10, n_tests, rng=5)
    slow = _loop_statistics(pool, None, 3, 25, 10, n_tests, 5)
    np.testing.assert_allclose(fast, slow, rtol=1e-12, atol=1e-15)
    fast2 = two_sample_statistics(pool, new, 4, 30, 7, 300, rng=6)
    slow2 = _loop_statistics(pool, new, 4, 30, 7, 300, 6)
    np.testing.assert_allclose(fast2, slow2, rtol=1e-12, atol=1e-15)
    with pytest.raises(ValueError, match="at least ref_per_prompt"):
        null_statistics(pool, 3, 40, 30, 10)
    with pytest.raises(ValueError, match="n_prompts"):
        null_statistics(pool, 9, 5, 5, 10)


def test_detection_auc_matches_sklearn():
    rng = np.random.default_rng(0)
    t0 = np.round(rng.random(300), 2)  # ties on purpose
    t1 = np.round(rng.random(200) + 0.2, 2)
    y = np.r_[np.zeros(t0.size), np.ones(t1.size)]
    assert detection_auc(t0, t1) == pytest.approx(roc_auc_score(y, np.r_[t0, t1]), rel=1e-12)


def test_border_inputs_beat_random_prompts_at_equal_budget(endpoint, border):
    """AUC of the in-vitro protocol (5 prompts, 50 reference + 10 detection samples each)."""
    random_prompts = list(
        np.random.default_rng(5).choice(endpoint.candidate_prompts(), 20, replace=False)
    )
    aucs = {}
    for s in (0.0, 3e-4, 1e-3, 3e-3):
        changed = endpoint.changed(s, seed=3)
        for name, prompts in (("bi", border), ("random", random_prompts)):
            pool = {p: endpoint(p, 200) for p in prompts}
            new = {p: changed(p, 60) for p in prompts}
            t0 = null_statistics(pool, 5, 50, 10, 500, rng=1)
            t1 = two_sample_statistics(pool, new, 5, 50, 10, 500, rng=2)
            aucs[name, s] = detection_auc(t0, t1)
    assert abs(aucs["bi", 0.0] - 0.5) < 0.07  # no change: chance
    assert aucs["bi", 3e-4] < aucs["bi", 1e-3] < aucs["bi", 3e-3]  # grows with the change
    assert aucs["bi", 3e-3] > 0.99
    for s in (3e-4, 1e-3, 3e-3):
        assert aucs["bi", s] >= aucs["random", s] + 0.2


# ------------------------------------------------------------------------------- discovery
def test_discovery_finds_near_ties_and_counts_cost(endpoint):
    sampler = CountingSampler(endpoint)
    bis = find_border_inputs(
        sampler, endpoint.candidate_prompts(), target=30, rng=2, progress=False
    )
    assert len(bis) == 30
    # two tokens in 3 queries needs a top-2 gap of a few jitter sd (6 sd: P(flip) ~ 1e-5)
    assert all(endpoint.top2_gap(p) < 6 * endpoint.jitter for p in bis)
    # the candidates are tried in the rng's order; the search stops at the 30th BI
    order = np.random.default_rng(2).permutation(4096)
    cands = endpoint.candidate_prompts()
    last = [cands[i] for i in order].index(bis[-1])
    assert sampler.cost == Cost(3 * (last + 1), 2 * 3 * (last + 1), 3 * (last + 1))
    # every skipped candidate before it answered one token three times: its gap is not tiny
    skipped = [cands[i] for i in order[: last + 1] if cands[i] not in bis]
    assert np.median([endpoint.top2_gap(p) for p in skipped]) > 20 * endpoint.jitter


def test_reference_and_balance():
    ref = reference_distributions(
        lambda p, n: (["a"] * 3 + ["b"]) * (n // 4), ["x", "y"], 8, progress=False
    )
    assert ref == {"x": Counter(a=6, b=2), "y": Counter(a=6, b=2)}
    assert balance_score(Counter(a=6, b=2)) == pytest.approx(1 / 3)
    assert balance_score(Counter(a=5)) == 0.0
    ref = {
        "p": Counter(a=9, b=1),
        "q": Counter(a=5, b=5),
        "r": Counter(a=1),
        "s": Counter(b=4, a=4),
    }
    assert select_balanced(ref, 3) == ["q", "s", "p"]  # stable on ties


def test_bad_inputs():
    ep = LinearLMEndpoint(seed=0)
    with pytest.raises(ValueError, match="queries_per_input"):
        find_border_inputs(ep, ["t01"], queries_per_input=1)
    with pytest.raises(TypeError, match="candidates"):
        find_border_inputs(ep, "t01 t02")
    with pytest.raises(TypeError, match="sampler"):
        find_border_inputs("not callable", ["t01"])
    with pytest.raises(ValueError, match="same prompts"):
        b3it_test({"a": ["x"]}, {"b": ["x"]})
    with pytest.raises(TypeError, match="str token"):
        b3it_test({"a": [1, 2]}, {"a": ["x"]})
    with pytest.raises(ValueError, match="must return a list of 2"):
        CountingSampler(lambda p, n: ["x"])("p", 2)
    with pytest.raises(ValueError, match="min_baseline"):
        detect_changes([("d", 0.1)], window=3, min_baseline=5)
    with pytest.raises(ValueError, match="finite"):
        detect_changes([("d", float("nan"))])
    with pytest.raises(ValueError, match="reinitialize"):
        B3ITMonitor(reinitialize="sometimes")


# ------------------------------------------------------------------------------- sequential rule
def _flat(n: int) -> list[float]:
    return [0.10 + 0.01 * (i % 2) for i in range(n)]


def _days(values):
    return [(i, v) for i, v in enumerate(values)]


def test_rule_fires_at_onset_with_persistence():
    series = _flat(20) + [0.6] * 5
    assert detect_changes(_days(series)) == [20]
    two_day = [*_flat(20), 0.6, 0.6, *_flat(10)]
    assert detect_changes(_days(two_day)) == []  # persistence=3 needs three days
    assert detect_changes(_days(two_day), persistence=2) == [20]
    three_day = _flat(20) + [0.6] * 3 + _flat(10)
    assert detect_changes(_days(three_day)) == [20]
    small = _flat(20) + [0.28] * 5  # 0.175 above the baseline: under abs_delta=0.2
    assert detect_changes(_days(small)) == []
    assert detect_changes(_days(small), abs_delta=0.1) == [20]


def test_rule_exclusion_window():
    """Day 21's baseline contains day 20's jump unless the last `exclusion` days are left out.

    With exclusion=0 the jump inflates the baseline sd (0.11 -> 4 sd = 0.44 > the 0.39
    deviation), so the streak breaks at day 21 and never completes; exclusion=4 keeps it out.
    """
    series = _flat(20) + [0.5] * 10
    assert detect_changes(_days(series), exclusion=4) == [20]
    assert detect_changes(_days(series), exclusion=0) == []


def test_rule_cooldown_and_min_baseline():
    rule = dict(window=5, exclusion=0, min_baseline=5, persistence=1)
    spikes = [*_flat(10), 0.9, *_flat(5), 0.9, *_flat(5)]  # spikes on days 10 and 16
    assert detect_changes(_days(spikes), cooldown=10, **rule) == [10]
    assert detect_changes(_days(spikes), cooldown=7, **rule) == [10]
    assert detect_changes(_days(spikes), cooldown=6, **rule) == [10, 16]
    # a jump on day 8: the baseline of day i is [0, i - 4), so day 8 is skipped for want of
    # 5 baseline days and the streak starts on the first day that has min_baseline of them
    early = _flat(8) + [0.7] * 5
    assert detect_changes(_days(early)) == [9]
    assert detect_changes(_days(early), min_baseline=4) == [8]
    assert detect_changes(_days(early), min_baseline=6) == [10]


def _published_rule(
    values, window, exclusion, min_baseline, sigma_k, abs_delta, persistence, cooldown
):
    """The production rule as published, with a causal baseline (no slice from the end)."""
    events, streak, last = [], 0, None
    for i in range(len(values)):
        base = values[max(0, i - exclusion - window) : max(0, i - exclusion)]
        if len(base) < min_baseline:
            continue
        mean, sd = statistics.mean(base), statistics.stdev(base)
        dev = abs(values[i] - mean)
        streak = streak + 1 if dev > abs_delta and dev > sigma_k * sd else 0
        if streak == persistence:
            onset = i - persistence + 1
            if last is None or onset - last >= cooldown:
                events.append(onset)
                last = onset
    return events


def test_rule_matches_published_rule_and_is_causal():
    rng = np.random.default_rng(8)
    n_events = 0
    for _ in range(150):
        n = int(rng.integers(10, 80))
        v = 0.1 + 0.02 * rng.standard_normal(n)
        for start in rng.integers(0, n, 3):
            v[start : start + int(rng.integers(1, 8))] += rng.choice([0.5, -0.05, 0.8])
        params = dict(
            window=int(rng.integers(3, 15)),
            exclusion=int(rng.integers(0, 5)),
            min_baseline=3,
            sigma_k=float(rng.choice([2.0, 4.0])),
            abs_delta=0.2,
            persistence=int(rng.integers(1, 4)),
            cooldown=int(rng.integers(0, 12)),
        )
        got = detect_changes(_days(list(v)), **params)
        assert got == _published_rule(list(v), **params)
        n_events += len(got)
        cut = int(rng.integers(1, n))  # no look-ahead: a prefix gives the events of the prefix
        assert detect_changes(_days(list(v[:cut])), **params) == [
            e for e in got if e + params["persistence"] - 1 < cut
        ]
    assert n_events > 50  # the random series did exercise the rule


def test_is_unstable():
    assert is_unstable(_days([0.1] * 20 + [0.5] * 8))  # median of the last 14 = 0.5
    assert not is_unstable(_days([0.1] * 20 + [0.5] * 7))  # median (0.1 + 0.5) / 2 = 0.3
    assert is_unstable(_days([0.1] * 20 + [0.5] * 7), threshold=0.3)
    assert not is_unstable([])


# ------------------------------------------------------------------------------- monitor
def test_monitor_quiet_then_detects_swap_on_the_day(endpoint):
    seen: list[ChangeEvent] = []
    mon = B3ITMonitor(on_event=seen.append, progress=False, rng=0).fit(endpoint)
    assert len(mon.prompts_) == 20 and len(mon.border_inputs_) == 50
    disc = mon.cost_by_phase_["discovery"]
    assert disc.requests % 3 == 0 and disc.input_tokens == 2 * disc.requests
    assert mon.cost_by_phase_["reference"] == Cost(5000, 10000, 5000)
    swapped = LinearLMEndpoint(seed=5)
    values = [mon.step(endpoint, day) for day in range(40)]
    assert mon.events_ == [] and not mon.unstable_  # unchanged: no false alarm in 40 days
    values += [mon.step(swapped, day) for day in range(40, 46)]
    assert [e.onset for e in mon.events_] == [40]
    assert seen == mon.events_ and seen[0].detected_at == 42
    assert seen[0].value == values[40]
    assert mon.cost_by_phase_["monitoring"] == Cost(46 * 200, 46 * 400, 46 * 200)
    assert mon.cost_ == disc + mon.cost_by_phase_["reference"] + mon.cost_by_phase_["monitoring"]


def test_monitor_detects_weight_noise(endpoint):
    mon = B3ITMonitor(progress=False, rng=1).fit(endpoint)
    changed = endpoint.changed(3e-3, seed=2)
    for day in range(25):
        mon.step(endpoint, day)
    for day in range(25, 30):
        mon.step(changed, day)
    assert [e.onset for e in mon.events_] == [25]


def test_monitor_batches_and_reinitialisation(endpoint):
    mon = B3ITMonitor(progress=False, rng=0).fit(endpoint)
    batch = {p: endpoint(p, 10) for p in mon.prompts_}
    batch["not monitored"] = ["x"]
    expected = np.mean(
        [_tv_counter(list(mon.reference_[p].elements()), batch[p]) for p in mon.prompts_]
    )
    assert mon.step(batch, "2026-01-01") == pytest.approx(expected, rel=1e-12)
    assert np.isnan(mon.step({}, "2026-01-02")) and len(mon.series_) == 1  # outage: skipped
    assert mon.cost_by_phase_["monitoring"].requests == 200

    re = B3ITMonitor(reinitialize="event", progress=False, rng=0).fit(endpoint)
    old_prompts = list(re.prompts_)
    swapped = LinearLMEndpoint(seed=5)
    for day in range(20):
        re.step(endpoint, day)
    for day in range(20, 40):
        re.step(swapped, day)
    assert [e.onset for e in re.events_] == [20]  # refitted on the swapped model: quiet after
    assert re.prompts_ != old_prompts and len(re.series_) == 40 - 23
    assert not re.unstable_


def test_monitor_needs_border_inputs():
    with pytest.raises(RuntimeError, match="min_bis"):
        B3ITMonitor(progress=False).fit(lambda p, n: ["same"] * n, ["a", "b", "c"])


# ------------------------------------------------------------------------------- stand-in
def test_linear_endpoint_reproducible_and_consistent():
    a, b = LinearLMEndpoint(seed=3), LinearLMEndpoint(seed=3)
    prompts = a.candidate_prompts()[:50]
    assert [a(p, 5) for p in prompts] == [b(p, 5) for p in prompts]
    np.testing.assert_array_equal(a.changed(0.0).logits("t01 t02"), a.logits("t01 t02"))
    quiet = LinearLMEndpoint(seed=3, jitter=0.0)
    for p in prompts:
        assert quiet(p, 2) == [a.vocabulary[int(np.argmax(a.logits(p)))]] * 2
    # words outside the vocabulary are hashed to a token, deterministically
    assert np.array_equal(a.logits("hello world"), b.logits("hello world"))
    # the logits of a 2-word prompt: bias + the two positional weight rows
    np.testing.assert_allclose(
        a.logits("t05 t09"), a.bias + a.weights[0, 9] + a.weights[1, 5], rtol=1e-15
    )


# ------------------------------------------------------------------------------- real data
DEMO_DIR = os.environ.get("RML_FAST_B3IT_DEMO_DIR")


@pytest.mark.skipif(
    not DEMO_DIR, reason="set RML_FAST_B3IT_DEMO_DIR to the b3it_demo endpoint data"
)
def test_replay_recorded_endpoint_finds_documented_date():
    """mistral-7b-instruct-v0.3 on Together, silently swapped on 2026-01-29; flagged 2026-01-30.

    RML_FAST_B3IT_DEMO_DIR is the folder of phase_2.json in the authors' repository
    (timothee-chauvin/token-efficient-change-detection-llm-apis,
    b3it_demo/data/mistralai2fmistral-7b-instruct-v0.323together); it is not vendored.
    """
    data = json.loads((Path(DEMO_DIR) / "phase_2.json").read_text())
    stamps = sorted({ts for batches in data.values() for ts in batches})
    ref = {p: [tok for _, tok in b[stamps[0]]] for p, b in data.items() if stamps[0] in b}
    mon = B3ITMonitor().fit(ref)
    assert len(mon.prompts_) == 20
    for ts in stamps[1:]:
        mon.step({p: [tok for _, tok in data[p].get(ts, [])] for p in mon.prompts_}, ts)
    assert [e.onset[:10] for e in mon.events_] == ["2026-01-30"]
    assert [t[:10] for t in detect_changes(mon.series_)] == ["2026-01-30"]
    assert mon.unstable_  # the epoch reference no longer describes the endpoint
