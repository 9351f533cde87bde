"""FakeWorld two-axis harness: metrics vs scikit-learn, closed forms of the reference
detectors, bootstrap vs a brute-force loop, journal resume, and input errors."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from sklearn.datasets import load_digits
from sklearn.metrics import (
    accuracy_score,
    average_precision_score,
    balanced_accuracy_score,
    confusion_matrix,
    f1_score,
    roc_auc_score,
)

from rml_fast.evaluation import _fakeworld_metrics as fm
from rml_fast.evaluation.fakeworld import (
    CONTENT_CLASSES,
    ConstantDetector,
    DigitCaptionChecker,
    Instance,
    OmniChecker,
    OracleDetector,
    PixelStatsDetector,
    Prediction,
    TwoAxisEvaluator,
    axis_metrics,
    make_fakeworld_mini,
    parse_prediction,
)


@pytest.fixture(scope="module")
def data():
    return make_fakeworld_mini(240, random_state=3)


def _random_preds(data, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for inst in data:
        media = {m: float(np.clip(0.35 * y + 0.65 * rng.random(), 0, 1))
                 for m, y in inst.media_labels.items()}
        sc = rng.random(3) + 0.8 * np.eye(3)[CONTENT_CLASSES.index(inst.content_label)]
        out.append(Prediction(media, dict(zip(CONTENT_CLASSES, sc.tolist(), strict=True)),
                              rationale=" ".join(rng.choice(["image", "synthetic", "caption",
                                                             "a", "the", "real"], 5))))
    return out


def _truth(data):
    y_syn = np.array([max(d.media_labels.values()) for d in data])
    yt = np.array([CONTENT_CLASSES.index(d.content_label) for d in data])
    return y_syn, yt


def _derived(preds):
    p_syn = np.array([max(p.media.values()) for p in preds])
    yp = np.array([int(np.argmax([p.content[c] for c in CONTENT_CLASSES])) for p in preds])
    s_false = np.array([1 - p.content["veracious"] / sum(p.content.values()) for p in preds])
    return p_syn, yp, s_false


def test_point_metrics_match_sklearn(data):
    preds = _random_preds(data)
    rep = TwoAxisEvaluator(n_bootstrap=0).score(data, preds)
    m = rep.metrics
    y_syn, yt = _truth(data)
    s_syn, yp, s_false = _derived(preds)
    h_syn = (s_syn > 0.5).astype(int)
    assert m["authenticity/accuracy"] == pytest.approx(accuracy_score(y_syn, h_syn))
    assert m["authenticity/balanced_accuracy"] == pytest.approx(
        balanced_accuracy_score(y_syn, h_syn))
    assert m["authenticity/macro_f1"] == pytest.approx(f1_score(y_syn, h_syn, average="macro"))
    assert m["authenticity/auroc"] == pytest.approx(roc_auc_score(y_syn, s_syn))
    assert m["authenticity/ap"] == pytest.approx(average_precision_score(y_syn, s_syn))
    assert m["authenticity/brier"] == pytest.approx(np.mean((s_syn - y_syn) ** 2))
    conf = np.where(h_syn == 1, s_syn, 1 - s_syn)
    ece = sum(abs(np.sum(conf[b] - (h_syn == y_syn)[b])) for b in
              (np.minimum((conf * 15).astype(int), 14) == j for j in range(15))) / len(data)
    assert m["authenticity/ece"] == pytest.approx(ece)
    assert m["content/accuracy"] == pytest.approx(accuracy_score(yt, yp))
    assert m["content/balanced_accuracy"] == pytest.approx(balanced_accuracy_score(yt, yp))
    assert m["content/macro_f1"] == pytest.approx(f1_score(yt, yp, average="macro"))
    assert m["content/auroc"] == pytest.approx(roc_auc_score(yt != 0, s_false))
    fake_t = np.maximum(y_syn, yt != 0)
    fake_p = np.maximum(h_syn, yp != 0)
    assert m["joint/fake_f1"] == pytest.approx(f1_score(fake_t, fake_p))
    assert m["joint/fake_auroc"] == pytest.approx(roc_auc_score(fake_t, np.maximum(s_syn,
                                                                                   s_false)))
    q_t, q_p = 2 * y_syn + (yt != 0), 2 * h_syn + (yp != 0)
    np.testing.assert_array_equal(rep.confusion["quadrant"],
                                  confusion_matrix(q_t, q_p, labels=range(4)))
    np.testing.assert_array_equal(rep.confusion["content"][:, :3], confusion_matrix(yt, yp))
    np.testing.assert_array_equal(rep.confusion["authenticity"], confusion_matrix(y_syn, h_syn))
    exact = [all((p.media[k] > 0.5) == y for k, y in d.media_labels.items()) and a == b
             for d, p, a, b in zip(data, preds, yt, yp, strict=True)]
    assert m["joint/exact_match"] == pytest.approx(np.mean(exact))
    # breakdown per scenario and modality equals sklearn on the subsets
    web = np.array([d.scenario == "web" for d in data])
    assert rep.breakdown["scenario"]["web"]["content/macro_f1"] == pytest.approx(
        f1_score(yt[web], yp[web], average="macro"))
    vid = [(d.media_labels["video"], p.media["video"]) for d, p in zip(data, preds, strict=True)
           if "video" in d.media_labels]
    g, s = np.array(vid).T
    assert rep.breakdown["modality"]["video"]["auroc"] == pytest.approx(roc_auc_score(g, s))


def test_invariant_under_permutation(data):
    preds = _random_preds(data, seed=1)
    ev = TwoAxisEvaluator(n_bootstrap=0)
    a = ev.score(data, preds).metrics
    perm = np.random.default_rng(0).permutation(len(data))
    b = ev.score([data[i] for i in perm], [preds[i] for i in perm]).metrics
    assert a.keys() == b.keys()
    for k in a:
        assert b[k] == pytest.approx(a[k], abs=1e-12), k


def test_oracle_scores_one(data):
    rep = TwoAxisEvaluator(n_bootstrap=50).evaluate(OracleDetector(), data)
    for k, v in rep.metrics.items():
        want = 0.0 if k.endswith(("ece", "brier", "parse_failure_rate")) else 1.0
        assert v == pytest.approx(want), k
        if k in rep.ci:
            assert rep.ci[k] == pytest.approx((want, want)), k


def test_constant_baseline_closed_form(data):
    rep = TwoAxisEvaluator(n_bootstrap=0).evaluate(ConstantDetector(), data)
    m = rep.metrics
    y_syn, yt = _truth(data)
    p = np.mean(y_syn == 0)
    v = np.mean(yt == 0)
    assert m["authenticity/accuracy"] == pytest.approx(p)
    assert m["authenticity/balanced_accuracy"] == 0.5
    assert m["authenticity/macro_f1"] == pytest.approx(p / (1 + p))  # (2p/(1+p) + 0) / 2
    assert m["authenticity/auroc"] == 0.5
    assert m["content/balanced_accuracy"] == pytest.approx(1 / 3)
    assert m["content/macro_f1"] == pytest.approx(2 * v / (1 + v) / 3)
    assert m["joint/fake_f1"] == 0.0
    assert m["joint/exact_match"] == pytest.approx(np.mean((y_syn == 0) & (yt == 0)))
    assert m["rationale/rougeL"] == 0.0


def _brute_ci(data, preds, metric, stratify, B, seed, conf=0.95):
    y_syn, yt = _truth(data)
    s_syn, yp, _ = _derived(preds)
    h = (s_syn > 0.5).astype(int)
    strata = 2 * y_syn + (yt != 0) if stratify else np.zeros(len(data), int)
    rng = np.random.default_rng(seed)
    codes = np.unique(strata)
    members = [np.flatnonzero(strata == c) for c in codes]
    stats = []
    done = 0
    while done < B:  # the documented draw order: chunks of 64, strata in ascending order
        rows = min(64, B - done)
        idx = np.concatenate([mm[rng.integers(0, mm.size, size=(rows, mm.size), dtype=np.int32)]
                              for mm in members], axis=1)
        for r in idx:
            stats.append(metric(y_syn[r], h[r], s_syn[r], yt[r], yp[r]))
        done += rows
    a = 100 * (1 - conf) / 2
    return np.percentile(stats, a), np.percentile(stats, 100 - a)


@pytest.mark.parametrize("stratify", [True, False])
def test_bootstrap_matches_brute_force_loop(data, stratify):
    sub, preds = data[:90], _random_preds(data[:90], seed=2)
    rep = TwoAxisEvaluator(n_bootstrap=150, random_state=7, stratify=stratify).score(sub, preds)
    cases = {
        "authenticity/balanced_accuracy": lambda y, h, s, t, p: balanced_accuracy_score(y, h),
        "authenticity/auroc": lambda y, h, s, t, p: roc_auc_score(y, s),
        "content/macro_f1": lambda y, h, s, t, p: f1_score(t, p, average="macro"),
        "content/accuracy": lambda y, h, s, t, p: accuracy_score(t, p),
    }
    for name, fn in cases.items():
        lo, hi = _brute_ci(sub, preds, fn, stratify, 150, 7)
        assert rep.ci[name] == pytest.approx((lo, hi), abs=1e-12), name
        assert lo <= rep.metrics[name] <= hi, name


def test_auroc_rows_with_ties_match_sklearn():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 200)
    s = rng.integers(0, 6, 200) / 5.0  # heavy ties
    idx = rng.integers(0, 200, size=(5, 200))
    got = fm.auroc_rows(y, s, idx)
    want = [roc_auc_score(y[r], s[r]) for r in idx]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)


def test_rouge_l_and_token_f1():
    rng = np.random.default_rng(1)
    for _ in range(30):
        a = list(rng.choice(list("abcd"), rng.integers(0, 7)))
        b = list(rng.choice(list("abcd"), rng.integers(0, 7)))
        brute = max((r for r in range(len(a) + 1) for sub in itertools.combinations(a, r)
                     if _is_subsequence(list(sub), b)), default=0)
        assert fm.lcs_length(a, b) == brute
    # "the cat sat" vs "the cat was sat here": LCS 3, P = 1, R = 3/5 -> F = 0.75
    assert fm.rouge_l("The cat, sat!", "the cat was sat here") == pytest.approx(0.75)
    assert fm.token_f1("a a b", "a b b c") == pytest.approx(2 * (2 / 3) * 0.5 / (2 / 3 + 0.5))
    assert fm.token_f1("", "") == 1.0 and fm.rouge_l("", "x") == 0.0


def _is_subsequence(sub, seq):
    it = iter(seq)
    return all(t in it for t in sub)


def test_evidence_iou_and_judge():
    inst = Instance("e", "streaming", {"text": "this is a 1", "image": np.zeros((8, 8)),
                                       "video": np.zeros((4, 8, 8))},
                    {"image": 1, "video": 0}, "cross_modal_inconsistent", "gold",
                    evidence=({"modality": "image", "box": (0, 0, 4, 4)},
                              {"modality": "video", "segment": (1, 4)}))
    pred = Prediction({"image": 1.0, "video": 0.0}, "cross_modal_inconsistent",
                      evidence=({"modality": "image", "box": (2, 2, 6, 6)},
                                {"modality": "video", "segment": (2, 4)}))
    rep = TwoAxisEvaluator(n_bootstrap=0, judge=lambda i, p: 0.25).score([inst], [pred])
    assert rep.metrics["evidence/iou"] == pytest.approx((4 / 28 + 2 / 3) / 2)
    assert rep.metrics["evidence/modality_hit"] == 1.0
    assert rep.metrics["rationale/judge"] == 0.25
    with pytest.raises(ValueError, match="judge must return a score in"):
        TwoAxisEvaluator(n_bootstrap=0, judge=lambda i, p: 2.0).score([inst], [pred])


def test_resume_from_journal_equals_uninterrupted(data, tmp_path):
    sub = data[:70]
    ev = TwoAxisEvaluator(n_bootstrap=100, random_state=3)
    base = _random_preds(sub, seed=5)
    by_id = {d.id: p for d, p in zip(sub, base, strict=True)}
    calls = []

    def detector(inst, stop_at=None):
        calls.append(inst.id)
        if stop_at is not None and len(calls) > stop_at:
            raise KeyboardInterrupt
        return by_id[inst.id]

    full = ev.evaluate(detector, sub, batch_size=8)
    journal = tmp_path / "run.jsonl"
    calls.clear()
    with pytest.raises(KeyboardInterrupt):
        ev.evaluate(lambda i: detector(i, stop_at=30), sub, batch_size=8, journal=journal)
    calls.clear()
    resumed = ev.evaluate(detector, sub, batch_size=8, journal=journal)
    assert len(calls) == 70 - 24  # three finished batches of 8 were journaled
    assert resumed.metrics == full.metrics
    assert resumed.ci == full.ci
    for k in full.per_instance:
        np.testing.assert_array_equal(resumed.per_instance[k], full.per_instance[k])
    # a finished journal needs no calls; another instance set is refused
    calls.clear()
    assert ev.evaluate(detector, sub, journal=journal).metrics == full.metrics and not calls
    with pytest.raises(ValueError, match="belongs to other instances"):
        ev.evaluate(detector, data[:10], journal=journal)
    assert ev.evaluate(detector, data[:10], journal=journal, resume=False).metrics
    header = json.loads(journal.read_text().splitlines()[0])
    assert header["n"] == 10


def test_raw_outputs_and_parse_failures(data):
    sub = data[:40]
    outs = []
    for i, d in enumerate(sub):
        if i % 4 == 0:
            outs.append("sorry, I cannot tell")
        else:
            media = {m: ("synthetic" if y else "real") for m, y in d.media_labels.items()}
            outs.append("```json\n" + json.dumps({"media": media, "content": d.content_label})
                        + "\n```")
    rep = TwoAxisEvaluator(n_bootstrap=0).score(sub, outs)
    assert rep.metrics["parse_failure_rate"] == pytest.approx(10 / 40)
    assert rep.metrics["content/accuracy"] == pytest.approx(30 / 40)
    assert rep.metrics["authenticity/accuracy"] == pytest.approx(30 / 40)
    assert rep.metrics["joint/exact_match"] == pytest.approx(30 / 40)
    assert rep.confusion["content"][:, 3].sum() == 10  # failures in the last column
    assert parse_prediction('{"media": {"image": 2}}') is None


def test_invalid_predictions_raise_or_count(data):
    sub = data[:12]
    bad = [Prediction({m: 0.0 for m in d.media_labels}, "banana") for d in sub]
    with pytest.raises(ValueError, match=r"instance 'fwm-00000'.*'banana' is not one of"):
        TwoAxisEvaluator(n_bootstrap=0).score(sub, bad)
    rep = TwoAxisEvaluator(n_bootstrap=0, on_invalid="count").score(sub, bad)
    assert rep.metrics["parse_failure_rate"] == 1.0 and rep.metrics["content/accuracy"] == 0.0
    with pytest.raises(ValueError, match=r"media\['image'\] must be a bool or a probability"):
        TwoAxisEvaluator(n_bootstrap=0).score(sub, [Prediction({"image": 1.5})] * 12)
    with pytest.raises(ValueError, match="modality 'audio', which the instance does not label"):
        TwoAxisEvaluator(n_bootstrap=0).score(sub, [Prediction({"audio": 0.5})] * 12)
    with pytest.raises(ValueError, match="predictions has length 11 but instances has length 12"):
        TwoAxisEvaluator(n_bootstrap=0).score(sub, bad[:11])
    with pytest.raises(TypeError, match="detector must return a Prediction, dict, str or None, got int"):
        TwoAxisEvaluator(n_bootstrap=0).evaluate(lambda inst: 3, sub)

    class Batched:
        def predict_batch(self, chunk):
            return [None] * (len(chunk) - 1)

    with pytest.raises(ValueError, match="predict_batch returned 3 predictions for 4"):
        TwoAxisEvaluator(n_bootstrap=0).evaluate(Batched(), sub[:4], batch_size=4)
    with pytest.raises(ValueError, match="unique ids"):
        TwoAxisEvaluator(n_bootstrap=0).score([sub[0], sub[0]], [None, None])
    with pytest.raises(ValueError, match="n_bootstrap must be an int"):
        TwoAxisEvaluator(n_bootstrap=-1)
    with pytest.raises(ValueError, match="on_invalid must be"):
        TwoAxisEvaluator(on_invalid="ignore")


def test_bad_instances_and_images(data):
    with pytest.raises(ValueError, match=r"Instance 'x': media\['image'\] must have ndim in"):
        Instance("x", "web", {"image": np.zeros(64)}, {"image": 0}, "veracious")
    with pytest.raises(ValueError, match=r"media_labels\['image'\] must be 0/'real'"):
        Instance("x", "web", {"image": np.zeros((8, 8))}, {"image": 2}, "veracious")
    with pytest.raises(ValueError, match="scenario must be one of"):
        Instance("x", "tv", {"text": "t"}, {}, "veracious")
    with pytest.raises(ValueError, match="content_label 'odd' is not one of"):
        TwoAxisEvaluator(n_bootstrap=0).score(
            [Instance("x", "web", {"text": "t"}, {}, "odd")], [None])
    det = PixelStatsDetector().fit(data[:120])
    big = Instance("big", "web", {"image": np.zeros((16, 16))}, {"image": 0}, "veracious")
    with pytest.raises(ValueError, match=r"'big': media\['image'\] has shape \(16, 16\)"):
        det(big)
    with pytest.raises(RuntimeError, match="not fitted"):
        DigitCaptionChecker()(data[0])


def test_fakeworld_mini_is_deterministic_and_documented():
    a = make_fakeworld_mini(120, random_state=5)
    b = make_fakeworld_mini(120, random_state=5)
    digits = load_digits()
    real = digits.data.reshape(-1, 8, 8) / 16.0
    flat = {r.tobytes() for r in real}
    for x, y in zip(a, b, strict=True):
        assert x.id == y.id and x.rationale == y.rationale and x.content_label == y.content_label
        np.testing.assert_array_equal(x.media["image"], y.media["image"])
        img = x.media["image"]
        assert np.all(img * 16 == np.round(img * 16))  # every image on the 1/16 grid
        if x.media_labels["image"] == 0:
            assert img.tobytes() in flat  # real = an untouched scikit-learn digit
        elif "box" not in (x.evidence[0] if x.evidence else {}):
            assert img.tobytes() not in flat  # resynthesised / blended
        if x.content_label == "factual_error":
            assert "claims a" in x.rationale and x.evidence[-1]["modality"] == "text"
        if x.content_label == "cross_modal_inconsistent":
            assert x.scenario == "streaming" and "video" in x.media
    assert {x.content_label for x in a} == set(CONTENT_CLASSES)


def test_reference_pipeline_beats_constant():
    train = make_fakeworld_mini(700, random_state=11)
    test = make_fakeworld_mini(240, random_state=12)
    pix = PixelStatsDetector().fit(train)
    chk = DigitCaptionChecker().fit(train)
    agent = OmniChecker({"image": lambda x: pix.score_payload("image", x),
                         "video": lambda x: pix.score_payload("video", x)},
                        consistency=chk.consistency, factcheck=chk.factcheck, output="scores")
    ev = TwoAxisEvaluator(n_bootstrap=200)
    rep = ev.evaluate(agent, test)
    const = ev.evaluate(ConstantDetector(), test)
    for k in ("authenticity/balanced_accuracy", "content/balanced_accuracy",
              "joint/quadrant_accuracy", "rationale/token_f1"):
        assert rep.ci[k][0] > const.metrics[k] + 0.05, k
    # the label-output agent applies the threshold rule: same media labels, content by rules
    hard = OmniChecker(agent.authenticity, chk.consistency, chk.factcheck)
    p = hard(test[0])
    assert isinstance(p.content, str) and isinstance(p.fake, bool)


def test_axis_metrics_arrays():
    rng = np.random.default_rng(4)
    yt = rng.integers(0, 3, 500)
    yp = np.where(rng.random(500) < 0.6, yt, rng.integers(0, 3, 500))
    out = axis_metrics(yt, yp, n_bootstrap=0)
    assert out["accuracy"][0] == pytest.approx(accuracy_score(yt, yp))
    assert out["balanced_accuracy"][0] == pytest.approx(balanced_accuracy_score(yt, yp))
    assert out["macro_f1"][0] == pytest.approx(f1_score(yt, yp, average="macro"))
    assert np.isnan(out["accuracy"][1]) and "auroc" not in out
    yb, s = (yt > 0).astype(int), rng.random(500) + 0.3 * (yt > 0)
    res = axis_metrics(yb, (s > 0.6).astype(int), s, n_bootstrap=300, strata=yb)
    assert res["auroc"][0] == pytest.approx(roc_auc_score(yb, s))
    assert res["auroc"][1] < res["auroc"][0] < res["auroc"][2]
    with pytest.raises(ValueError, match=r"y_pred must have the shape of y_true \(500,\)"):
        axis_metrics(yt, yp[:10])
    with pytest.raises(ValueError, match="auroc needs a binary y_true"):
        axis_metrics(yt, yp, s)


def test_progress_and_batched_detector_give_the_same_report(data):
    sub = data[:30]
    ev = TwoAxisEvaluator(n_bootstrap=40)
    plain = ev.evaluate(OracleDetector(), sub)

    class Batched:
        def predict_batch(self, chunk):
            return [OracleDetector()(inst) for inst in chunk]

    other = ev.evaluate(Batched(), sub, batch_size=7, progress=True)
    assert other.metrics == plain.metrics and other.ci == plain.ci
    threaded = ev.evaluate(OracleDetector(), sub, batch_size=8, n_jobs=2)
    assert threaded.metrics == plain.metrics and threaded.ci == plain.ci


def test_rouge_l_matches_rouge_score_package():
    rouge_scorer = pytest.importorskip("rouge_score.rouge_scorer")
    scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=False)
    data = make_fakeworld_mini(20, random_state=9)
    for a, b in itertools.pairwise(data):
        want = scorer.score(b.rationale, a.rationale)["rougeL"].fmeasure
        assert fm.rouge_l(a.rationale, b.rationale) == pytest.approx(want)
