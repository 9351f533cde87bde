"""CYBERTEAM workflow engine: DAG order and cycles against networkx / graphlib, the ancestors-only
visibility invariant, determinism across ``max_workers``, journal resume, the module
implementations against hand-annotated text and scikit-learn, and the scorers against closed
forms. (The spec's REX peers ``iocextract`` / ``ioc-finder`` are not installed here; REX is
checked against hand-annotated indicators instead.)
"""

from __future__ import annotations

import graphlib
import itertools
import json
import threading

import networkx as nx
import numpy as np
import pytest

from rml_fast.evaluation.cyberteam import (
    MODULES,
    STAGES,
    CVSSVectorError,
    TaskResult,
    TaskSpec,
    TfidfRetriever,
    Workflow,
    WorkflowCycleError,
    aggregate_scores,
    cvss_score,
    default_modules,
    example_knowledge,
    example_samples,
    example_tasks,
    extract_json,
    heuristic_llm,
    llm_selector,
    load_cyberteam_json,
    map_lookup,
    normalize_entity,
    open_ended_baseline,
    rex_extract,
    rouge_l,
    score_task,
    sim_score,
)

# ------------------------------------------------------------------------------ helpers


def _random_dag(rng, n, p):
    """Random DAG on n tasks (edges only from lower to higher index), shuffled declaration."""
    deps = {i: tuple(f"t{j}" for j in range(i) if rng.random() < p) for i in range(n)}
    order = rng.permutation(n)
    return [TaskSpec(f"t{i}", "behavior", depends_on=deps[i]) for i in order]


def _echo_module(ctx):
    """Deterministic module: records what it saw (upstream task names, earlier modules)."""
    return {f"seen_{ctx.task.name}": sorted(ctx.upstream), "prev": sorted(ctx.previous),
            "len": len(ctx.text)}


def _llm_echo(prompt):
    # deterministic JSON from the prompt (its length and first tag)
    return json.dumps({"answer": [prompt[1:4], str(len(prompt) % 97)]})


class _CountingLLM:
    def __init__(self, fail_after=None):
        self.calls = 0
        self.fail_after = fail_after
        self.lock = threading.Lock()

    def __call__(self, prompt):
        with self.lock:
            self.calls += 1
            if self.fail_after is not None and self.calls > self.fail_after:
                raise RuntimeError("simulated crash of the LLM endpoint")
        return heuristic_llm(prompt)


def _plain(res):
    return {k: v.to_dict() for k, v in res.items()}


# ------------------------------------------------------------------------------ DAG


def test_topological_order_matches_graph_libraries_on_random_dags():
    rng = np.random.default_rng(0)
    for _ in range(60):
        tasks = _random_dag(rng, int(rng.integers(1, 12)), float(rng.uniform(0.1, 0.6)))
        wf = Workflow(tasks, stages=None)
        order = wf.topological_order()
        pos = {n: i for i, n in enumerate(order)}
        assert sorted(order) == sorted(t.name for t in tasks)
        g = nx.DiGraph()
        g.add_nodes_from(t.name for t in tasks)
        g.add_edges_from((d, t.name) for t in tasks for d in t.depends_on)
        for a, b in g.edges:
            assert pos[a] < pos[b]
        ts = graphlib.TopologicalSorter({t.name: t.depends_on for t in tasks})
        assert set(ts.static_order()) == set(order)
        for t in tasks:  # ancestors equal networkx's
            assert wf.ancestors(t.name) == nx.ancestors(g, t.name)


def test_cycles_detected_and_named_like_networkx():
    rng = np.random.default_rng(1)
    n_cyclic = 0
    for _ in range(80):
        n = int(rng.integers(2, 8))
        deps = {i: tuple(f"t{j}" for j in range(n) if j != i and rng.random() < 0.25)
                for i in range(n)}
        tasks = [TaskSpec(f"t{i}", "behavior", depends_on=deps[i]) for i in range(n)]
        g = nx.DiGraph()
        g.add_nodes_from(t.name for t in tasks)
        g.add_edges_from((d, t.name) for t in tasks for d in t.depends_on)
        if nx.is_directed_acyclic_graph(g):
            Workflow(tasks, stages=None)
            continue
        n_cyclic += 1
        with pytest.raises(WorkflowCycleError) as info:
            Workflow(tasks, stages=None)
        path = str(info.value).split(": ", 1)[1].split(" -> ")
        assert path[0] == path[-1] and len(path) >= 3
        for a, b in itertools.pairwise(path):  # every step is an edge parent -> child
            assert g.has_edge(a, b), (a, b, str(info.value))
    assert n_cyclic > 10


def test_bad_workflows_raise_clear_errors():
    with pytest.raises(WorkflowCycleError, match="a -> a"):
        Workflow([TaskSpec("a", "behavior", depends_on=("a",))])
    with pytest.raises(ValueError, match=r"task 'b' depends on missing task\(s\) \['zz'\]"):
        Workflow([TaskSpec("a", "behavior"), TaskSpec("b", "behavior", depends_on=("zz",))])
    with pytest.raises(ValueError, match="repeated"):
        Workflow([TaskSpec("a", "behavior"), TaskSpec("a", "response")])
    with pytest.raises(ValueError, match="later stage 'response'"):
        Workflow([TaskSpec("fix", "response"),
                  TaskSpec("who", "attribution", depends_on=("fix",))])
    with pytest.raises(ValueError, match="stage 'triage'"):
        Workflow([TaskSpec("a", "triage")])
    with pytest.raises(ValueError, match="non-empty"):
        Workflow([])
    with pytest.raises(ValueError, match="scorer must be one of"):
        TaskSpec("a", "behavior", scorer="bleu")
    with pytest.raises(TypeError, match="depends_on must be a tuple of str"):
        TaskSpec("a", "behavior", depends_on="b")
    wf = Workflow([TaskSpec("a", "behavior", modules=("NOPE",))])
    with pytest.raises(ValueError, match=r"unknown module\(s\) \['NOPE'\]"):
        wf.run({"text": "x"})
    with pytest.raises(ValueError, match="'text'"):
        Workflow([TaskSpec("a", "behavior")]).run({"id": 1})
    with pytest.raises(ValueError, match="max_workers"):
        Workflow([TaskSpec("a", "behavior")]).run({"text": "x"}, max_workers=0)
    with pytest.raises(ValueError, match="no llm callable"):
        Workflow([TaskSpec("a", "behavior", modules=("CLS",))]).run({"text": "x"})


# ------------------------------------------------------------------------------ engine


def _wide_workflow():
    rng = np.random.default_rng(3)
    tasks = _random_dag(rng, 10, 0.3)
    return Workflow([TaskSpec(t.name, t.stage, t.depends_on, modules=("ECHO", "CLS", "ECHO2"))
                     for t in tasks], stages=None)


def test_node_sees_only_ancestors_and_results_do_not_depend_on_workers():
    wf = _wide_workflow()
    mods = {"ECHO": _echo_module, "ECHO2": _echo_module}
    sample = {"id": "s", "text": "report text"}
    r1 = wf.run(sample, _llm_echo, mods)
    for name, res in r1.items():
        anc = wf.ancestors(name)
        assert set(res.upstream) == anc
        assert res.modules["ECHO"][f"seen_{name}"] == sorted(anc)
        assert res.modules["ECHO2"]["prev"] == ["CLS", "ECHO"]
        for p in wf.tasks[name].depends_on:
            assert r1[p].seq < res.seq
    r2 = wf.run(sample, _llm_echo, mods)
    r4 = wf.run(sample, _llm_echo, mods, max_workers=4)
    assert _plain(r1) == _plain(r2) == _plain(r4)
    assert aggregate_scores(wf, [r4])["dag_consistency"] == 1.0


def test_resume_from_journal_gives_the_same_result(tmp_path):
    wf = Workflow(example_tasks())
    know = example_knowledge()
    sample = example_samples()[0]
    full_llm = _CountingLLM()
    full = wf.run(sample, full_llm, knowledge=know)
    journal = tmp_path / "run.jsonl"
    for workers in (1, 3):
        if journal.exists():
            journal.unlink()
        crashing = _CountingLLM(fail_after=2)
        with pytest.raises(RuntimeError, match="simulated crash"):
            wf.run(sample, crashing, knowledge=know, journal=journal, max_workers=workers)
        lines = journal.read_text().splitlines()
        assert 1 < len(lines) < 1 + len(full)  # header + some finished tasks
        again = _CountingLLM()
        resumed = wf.run(sample, again, knowledge=know, journal=journal, max_workers=workers)
        assert _plain(resumed) == _plain(full)
        assert again.calls < full_llm.calls  # finished tasks were not recomputed
        # a completed journal replays without any LLM call
        none = _CountingLLM(fail_after=0)
        assert _plain(wf.run(sample, none, knowledge=know, journal=journal)) == _plain(full)
    # a journal of another workflow is refused, with the difference named
    other = Workflow(example_tasks()[:2])
    with pytest.raises(ValueError, match="only in the journal"):
        other.run(sample, heuristic_llm, journal=journal)
    # resume=False starts afresh
    fresh = other.run(sample, heuristic_llm, journal=journal, resume=False)
    assert set(fresh) == {"malware_identification", "infrastructure_extraction"}


def test_evaluate_resumes_across_samples(tmp_path):
    wf = Workflow(example_tasks())
    know = example_knowledge()
    samples = example_samples()
    ref = wf.evaluate(samples, heuristic_llm, knowledge=know, progress=False)
    journal = tmp_path / "eval.jsonl"
    with pytest.raises(RuntimeError):
        wf.evaluate(samples, _CountingLLM(fail_after=9), knowledge=know, journal=journal,
                    progress=False)
    rep = wf.evaluate(samples, heuristic_llm, knowledge=know, journal=journal, progress=True)
    assert [_plain(r) for r in rep["results"]] == [_plain(r) for r in ref["results"]]
    for key in ("mean_task_score", "dag_consistency", "module_success"):
        assert rep[key] == ref[key]


def test_example_workflow_scores():
    wf = Workflow(example_tasks())
    rep = wf.evaluate(example_samples(), heuristic_llm, knowledge=example_knowledge(),
                      progress=False)
    pt = rep["per_task"]
    # deterministic modules are exact on the example set
    assert pt["severity_scoring"]["within_0_5"] == 1.0
    assert pt["severity_scoring"]["abs_error"] == 0.0
    assert pt["infrastructure_extraction"]["f1"] == 1.0
    assert pt["weakness_mapping"]["f1"] == 1.0
    assert rep["dag_consistency"] == 1.0 and rep["module_success"] == 1.0
    assert 0.0 < pt["mitigation_recommendation"]["rouge_l"] < 1.0
    primaries = [pt[n][m] for n, m in (
        ("malware_identification", "f1"), ("infrastructure_extraction", "f1"),
        ("actor_identification", "f1"), ("ttp_extraction", "f1"),
        ("severity_scoring", "within_0_5"), ("attack_vector_classification", "correct"),
        ("weakness_mapping", "f1"), ("mitigation_recommendation", "rouge_l"))]
    assert rep["mean_task_score"] == pytest.approx(np.mean(primaries))


def test_select_skips_tasks_and_scores_them_as_empty():
    wf = Workflow(example_tasks())

    def select(stage, cands, sample):
        return cands[:1]  # first task of each stage only

    res = wf.run(example_samples()[0], heuristic_llm, knowledge=example_knowledge(),
                 select=select)
    assert res["infrastructure_extraction"].status == "skipped"
    assert res["actor_identification"].status == "skipped"
    assert res["ttp_extraction"].status == "ok"
    assert "infrastructure_extraction" not in res["actor_identification"].upstream
    agg = aggregate_scores(wf, [res], [example_samples()[0]["gold"]])
    assert agg["per_task"]["infrastructure_extraction"]["f1"] == 0.0
    with pytest.raises(ValueError, match="not among its tasks"):
        wf.run(example_samples()[0], heuristic_llm, select=lambda s, c, x: ["nope"])


def test_llm_selector_and_non_json_outputs():
    wf = Workflow(example_tasks())

    def chooser(prompt):
        if prompt.startswith("[SELECT] Stage: prioritization"):
            return '{"tasks": ["severity_scoring", "made_up"]}'
        if prompt.startswith("[SELECT] Stage: response"):
            return "no JSON at all"
        return heuristic_llm(prompt)

    res = wf.run(example_samples()[0], chooser, knowledge=example_knowledge(),
                 select=llm_selector(chooser))
    assert res["severity_scoring"].status == "ok"
    assert res["attack_vector_classification"].status == "skipped"
    assert res["mitigation_recommendation"].status == "ok"  # unparseable choice: run all
    bad = Workflow([TaskSpec("a", "behavior", modules=("X",))])
    with pytest.raises(TypeError, match="JSON-serialisable"):
        bad.run({"text": "t"}, modules={"X": lambda ctx: {"s": {1, 2}}})


def test_unparseable_llm_reply_is_a_failed_module_call():
    wf = Workflow([TaskSpec("vec", "prioritization", modules=("CLS",), scorer="classification",
                            answer_key="label")])
    res = wf.run({"id": "a", "text": "t", "gold": {"vec": "network"}}, lambda p: "no idea")
    r = res["vec"]
    assert r.status == "partial" and r.module_ok == {"CLS": False}
    assert r.scores == {"correct": 0.0}
    assert aggregate_scores(wf, [res])["module_success"] == 0.0
    # on_error="record" turns a module exception into a failed call too
    boom = {"CLS": lambda ctx: 1 / 0}
    assert wf.run({"text": "t"}, modules=boom, on_error="record")["vec"].module_ok == {
        "CLS": False}
    with pytest.raises(ZeroDivisionError):
        wf.run({"text": "t"}, modules=boom)


def test_task_result_round_trip_and_registry():
    assert sorted(default_modules()) == sorted(MODULES)
    assert STAGES == ("attribution", "behavior", "prioritization", "response")
    r = TaskResult("a", "ok", output={"x": [1]}, module_ok={"REX": True}, seq=2)
    assert TaskResult.from_dict(json.loads(json.dumps(r.to_dict()))) == r


# ------------------------------------------------------------------------------ modules


def test_rex_against_hand_annotation():
    text = ("Dropper 44d88612fea8a8f36de82e1278abb02f (md5), "
            "3395856ce81f2b7382dee72602f798b642f14140 (sha1) and sha256 "
            "275a021bbfb6489e54d471899f7db9d1663fc695ec2fe2a2c4538aabf651fd0f "
            "phoned home to 10.20.30.40, evil-domain[.]com and hxxps://c2.bad-site.org/gate.php?id=1. "
            "Contact: ops@mail.bad-site.org at 2023-03-14T09:26:53Z; see CVE-2023-23397 and "
            "technique T1059.001. Not IOCs: payload.exe, version 1.2.3, 999.1.1.1.")
    out = rex_extract(text)
    assert out["md5"] == ["44d88612fea8a8f36de82e1278abb02f"]
    assert out["sha1"] == ["3395856ce81f2b7382dee72602f798b642f14140"]
    assert out["sha256"] == ["275a021bbfb6489e54d471899f7db9d1663fc695ec2fe2a2c4538aabf651fd0f"]
    assert out["ipv4"] == ["10.20.30.40"]
    assert out["domain"] == ["evil-domain.com"]
    assert out["url"] == ["https://c2.bad-site.org/gate.php?id=1"]
    assert out["email"] == ["ops@mail.bad-site.org"]
    assert out["timestamp"] == ["2023-03-14T09:26:53Z"]
    assert out["cve"] == ["CVE-2023-23397"]
    assert out["technique"] == ["T1059.001"]
    assert rex_extract("1.2.3[.]4", defanged=False)["ipv4"] == []
    with pytest.raises(TypeError, match="text must be a str"):
        rex_extract(None)


def test_rex_token_prefilter_equals_one_regex_over_the_text():
    from rml_fast.evaluation.cyberteam import _rex_reference

    rng = np.random.default_rng(11)
    words = ["the", "actor", "moved", "staged", "data.", "logs,", "T1059", "CVE-2020-0601",
             "10.0.0.1", "a.b", "evil[.]com", "hxxp://x.example[.]org/a?b=1", "(see", "it)",
             "2024-01-02T03:04:05+01:00", "user@corp.net;", "d41d8cd98f00b204e9800998ecf8427e",
             "ftp://files.bad.ru/x", "[1.2.3.4]", '"quoted.io"', "x" * 40, "payload.exe"]
    for _ in range(200):
        text = " ".join(words[i] for i in rng.integers(0, len(words), 30))
        assert rex_extract(text) == _rex_reference(text), text


def test_math_module_scores_vectors_in_text():
    wf = Workflow([TaskSpec("sev", "prioritization", modules=("MATH",), scorer="numeric",
                            answer_key="cvss_score")])
    v31 = "CVSS:3.1/AV:N/AC:H/PR:N/UI:N/S:U/C:H/I:H/A:H"
    v40 = "CVSS:4.0/AV:L/AC:L/AT:N/PR:L/UI:N/VC:H/VI:H/VA:H/SC:N/SI:N/SA:N"
    res = wf.run({"text": f"scores {v31} and {v40}; bad CVSS:3.1/AV:N/AC:L",
                  "gold": {"sev": cvss_score(v31)[0]}})["sev"]
    found = res.output["cvss"]
    assert [f["score"] for f in found[:2]] == [cvss_score(v31)[0], cvss_score(v40)[0]]
    assert "missing base metric" in found[2]["error"]
    assert res.answer == max(cvss_score(v31)[0], cvss_score(v40)[0])
    # the released samples' "<CVSS Scores>: x.y" field when no vector is present
    res2 = wf.run({"text": "<Description>: overflow <CVSS Scores>: 6.5"})["sev"]
    assert res2.answer == 6.5 and res2.output["severity"] == "Medium"
    with pytest.raises(CVSSVectorError):
        cvss_score("CVSS:3.1/AV:N/AC:L")


def test_extract_json_variants():
    assert extract_json('```json\n{"a": 1}\n```') == {"a": 1}
    assert extract_json('text {"a": {"b": [1, 2]}, "c": "}{"} tail') == {"a": {"b": [1, 2]},
                                                                         "c": "}{"}
    assert extract_json("[1, 2]") == [1, 2]
    assert extract_json('{broken {"ok": true}') == {"ok": True}
    with pytest.raises(ValueError, match="no JSON object"):
        extract_json("nothing here")


def test_sim_and_retrieval_against_sklearn():
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.metrics.pairwise import cosine_similarity

    a, b = "credential dumping from lsass memory", "dumping lsass process memory for hashes"
    pat = r"[a-z0-9]+(?:[._-][a-z0-9]+)*"
    x = TfidfVectorizer(token_pattern=pat).fit_transform([a, b])
    assert sim_score(a, b) == pytest.approx(cosine_similarity(x[0], x[1])[0, 0], abs=1e-12)
    ta, tb = set(a.split()), set(b.split())
    assert sim_score(a, b, "jaccard") == pytest.approx(len(ta & tb) / len(ta | tb))
    docs = example_knowledge()["corpus"]
    r = TfidfRetriever().fit(docs)
    q = "smb exploit on port 445"
    vec = TfidfVectorizer(token_pattern=pat, ngram_range=(1, 2)).fit(docs)
    sims = cosine_similarity(vec.transform(docs), vec.transform([q])).ravel()
    got = r.query(q, k=3)
    assert [i for i, _ in got] == [int(i) for i in np.argsort(-sims, kind="stable")[:3]
                                  if sims[i] > 0]
    np.testing.assert_allclose([s for _, s in got], np.sort(sims)[::-1][:len(got)], atol=1e-12)
    with pytest.raises(ValueError, match="method"):
        sim_score(a, b, "bm25")
    with pytest.raises(RuntimeError, match="not fitted"):
        TfidfRetriever().query("x")


def test_map_lookup_and_normalisation():
    table = {"CVE-2021-44228": ["CWE-502"], "bad[.]com": "APT1"}
    assert map_lookup(table, "CVE-2021-44228") == ["CWE-502"]
    assert map_lookup(table, " BAD.COM ") == ["APT1"]
    assert map_lookup(table, "other") == []
    assert normalize_entity("hxxp://A[.]B ") == "http://a.b"


# ------------------------------------------------------------------------------ scorers


def test_extraction_scores_closed_form():
    s = score_task("extraction", ["a", "b", "c"], ["b", "c", "d", "e"])
    assert s == pytest.approx({"precision": 2 / 3, "recall": 2 / 4, "f1": 2 * (2 / 3) * 0.5
                               / (2 / 3 + 0.5)})
    assert score_task("extraction", [], []) == {"precision": 1.0, "recall": 1.0, "f1": 1.0}
    assert score_task("extraction", None, ["x"])["f1"] == 0.0


def test_numeric_and_classification_scores():
    assert score_task("numeric", 7.4, 7.8) == pytest.approx(
        {"abs_error": 0.4, "within_0_5": 1.0, "severity_match": 1.0})
    assert score_task("numeric", 6.9, 7.0)["severity_match"] == 0.0
    assert score_task("numeric", None, 5.0) == {"abs_error": 10.0, "within_0_5": 0.0,
                                                "severity_match": 0.0}
    assert score_task("numeric", "score: 5.0", 5.0)["abs_error"] == 0.0
    assert score_task("classification", " Network ", "network") == {"correct": 1.0}
    with pytest.raises(ValueError, match="task_type"):
        score_task("bleu", 1, 1)
    assert score_task(lambda p, g: {"score": float(p == g)}, 1, 1) == {"score": 1.0}


def test_macro_f1_matches_sklearn():
    from sklearn.metrics import f1_score

    rng = np.random.default_rng(5)
    labels = ["network", "local", "adjacent", "physical"]
    gold = [labels[i] for i in rng.integers(0, 4, 30)]
    pred = [g if rng.random() < 0.6 else labels[rng.integers(0, 4)] for g in gold]
    wf = Workflow([TaskSpec("v", "prioritization", modules=("P",), scorer="classification",
                            answer_key="label")])
    results = [wf.run({"text": "t", "gold": {"v": g}}, modules={"P": lambda ctx, p=p: {
        "label": p}}) for p, g in zip(pred, gold, strict=True)]
    agg = aggregate_scores(wf, results, [{"v": g} for g in gold])["per_task"]["v"]
    assert agg["macro_f1"] == pytest.approx(f1_score(gold, pred, average="macro"))
    assert agg["accuracy"] == pytest.approx(np.mean([p == g for p, g in
                                                     zip(pred, gold, strict=True)]))


def _lcs_bruteforce(a, b):
    best = 0
    for r in range(len(a) + 1):
        for idx in itertools.combinations(range(len(a)), r):
            sub = [a[i] for i in idx]
            it = iter(b)
            if all(w in it for w in sub):
                best = max(best, r)
    return best


def test_rouge_l_against_bruteforce_lcs():
    rng = np.random.default_rng(7)
    vocab = ["patch", "the", "server", "block", "port", "now"]
    for _ in range(40):
        a = [vocab[i] for i in rng.integers(0, 6, int(rng.integers(1, 7)))]
        b = [vocab[i] for i in rng.integers(0, 6, int(rng.integers(1, 7)))]
        lcs = _lcs_bruteforce(a, b)
        p, r = lcs / len(a), lcs / len(b)
        want = 0.0 if lcs == 0 else 2 * p * r / (p + r)
        assert rouge_l(" ".join(a), " ".join(b)) == pytest.approx(want)
    assert score_task("generation", "x", "x", judge=lambda p, g: 0.5) == {"rouge_l": 1.0,
                                                                          "judge": 0.5}


# ------------------------------------------------------------------------------ data, baseline


def test_load_cyberteam_json(tmp_path):
    recs = [{"instruction": "Give the CVSS score.",
             "input": "<Description>: Overflow in foo. <Affected Products>: foo 1.0 "
                      "<CVSS Scores>: 9.8", "output": "9.8"},
            {"id": "x7", "instruction": "", "input": "plain text", "output": "a"}]
    p = tmp_path / "task5.json"
    p.write_text(json.dumps(recs))
    q = tmp_path / "task5.jsonl"
    q.write_text("\n".join(json.dumps(r) for r in recs))
    a, b, c = load_cyberteam_json(p), load_cyberteam_json(q), load_cyberteam_json(recs)
    assert a == b == c
    assert a[0]["fields"] == {"Description": "Overflow in foo.", "Affected Products": "foo 1.0",
                              "CVSS Scores": "9.8"}
    assert a[1]["id"] == "x7" and a[1]["fields"] == {}
    with pytest.raises(ValueError, match="record 1"):
        load_cyberteam_json([recs[0], {"instruction": "no input"}])
    with pytest.raises(ValueError, match="cannot read"):
        load_cyberteam_json(tmp_path / "missing.json")


def test_released_cvss_record_format():
    # the shape of data/secure_dataset/task5/CVSS/test/*.json of the reference repository
    rec = {"instruction": "The following is a CVE case: ... determine the CVSS vector ...",
           "input": "<Description>: WebKit in Apple iOS before 9.2 allows remote attackers to "
                    "execute arbitrary code via a crafted web site. <Affected Products>:\n"
                    "Apple\u00bbSafariVersions  up to, including, (<=) 9.0.1cpe:2.3:a:apple",
           "output": "Access Vector: Network, Access Complexity: Medium, Authentication: None, "
                     "Confidentiality Impact: Partial, Integrity Impact: Partial, "
                     "Availability Impact: Partial"}
    (s,) = load_cyberteam_json([rec])
    assert set(s["fields"]) == {"Description", "Affected Products"}
    assert s["fields"]["Affected Products"].endswith("(<=) 9.0.1cpe:2.3:a:apple")
    wf = Workflow([TaskSpec("cvss", "prioritization", modules=("MATH",), scorer="numeric",
                            answer_key="cvss_score")])
    gold = wf.run({"text": s["output"]})["cvss"].answer  # the gold attributes, scored (v2)
    assert gold == 6.8
    pred = wf.run({"text": "Access Vector: Network, Access Complexity: Low, Authentication: "
                           "None, Confidentiality Impact: Partial, Integrity Impact: Partial, "
                           "Availability Impact: Partial", "gold": {"cvss": gold}})["cvss"]
    assert pred.answer == 7.5
    assert pred.scores == pytest.approx({"abs_error": 0.7, "within_0_5": 0.0,
                                         "severity_match": 0.0})


def test_open_ended_baseline():
    tasks = example_tasks()
    sample = example_samples()[0]
    seen = []

    def llm(prompt):
        seen.append(prompt)
        return 'Reasoning... {"severity_scoring": 9.0, "attack_vector_classification": "network"}'

    out = open_ended_baseline(sample, llm, tasks, style="cot")
    assert out["parsed"] and "step by step" in seen[0]
    assert out["answers"]["severity_scoring"] == 9.0
    assert out["scores"]["severity_scoring"]["within_0_5"] == 0.0
    assert out["scores"]["attack_vector_classification"]["correct"] == 1.0
    assert out["scores"]["malware_identification"]["f1"] == 0.0
    bad = open_ended_baseline(sample, lambda p: "I cannot answer", tasks)
    assert not bad["parsed"] and all(v is None for v in bad["answers"].values())
    with pytest.raises(ValueError, match="style"):
        open_ended_baseline(sample, llm, tasks, style="fewshot")
