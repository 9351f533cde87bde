"""Regression tests for the fuzzer's contract violations fixed in watermark.augment, audit,
evaluation and security (issue 25 section 1).

Each test feeds the input the fuzzer found and asserts a ValueError / TypeError whose message
names the argument (as a word, like the fuzzer's check), raised before any work, plus that the
valid call still gives its documented result.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch


def _word(name: str) -> str:
    return rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])"


def _names(exc: pytest.ExceptionInfo, name: str) -> bool:
    return re.search(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])",
                     str(exc.value)) is not None


# --- watermark.augment -----------------------------------------------------------------------


@pytest.mark.parametrize("op", ["identity", "jpeg", "resize", "crop", "rotate", "hflip",
                                "gaussian_blur", "median_filter", "brightness", "contrast",
                                "saturation", "hue", "grayscale", "gaussian_noise"])
def test_augment_refuses_a_meta_tensor(op):
    from rml_fast.watermark import augment as A

    with pytest.raises(ValueError, match=_word("x")) as exc:
        getattr(A, op)(torch.rand(1, 3, 8, 8).to("meta"))
    assert _names(exc, "x") and "meta" in str(exc.value)


def test_resize_refuses_a_huge_scale_before_allocating():
    from rml_fast.watermark.augment import resize

    assert tuple(resize(torch.rand(1, 3, 8, 8), 2.0).shape) == (1, 3, 16, 16)
    with pytest.raises(ValueError, match=_word("scale")) as exc:
        resize(torch.rand(1, 3, 8, 8), 1e300)
    assert _names(exc, "scale")


# --- audit -------------------------------------------------------------------------------------


def test_attribution_result_refuses_nan_values():
    from rml_fast.audit import AttributionResult, exact_attribution

    res = exact_attribution(np.array([0.0, 1.0, 2.0, 5.0]))
    np.testing.assert_array_equal(res.values, [2.0, 3.0])
    for field in ("values", "first_order", "interactions"):
        bad = getattr(res, field).copy()
        bad.reshape(-1)[0] = np.nan
        kw = {f: getattr(res, f) for f in ("index", "baseline", "values", "first_order",
                                            "interactions", "full", "n_evaluations")}
        kw[field] = bad
        with pytest.raises(ValueError, match=_word(field)) as exc:
            AttributionResult(**kw)
        assert _names(exc, field)


def test_exact_attribution_reference_refuses_nan():
    from rml_fast.audit import exact_attribution_reference

    with pytest.raises(ValueError, match=_word("values")) as exc:
        exact_attribution_reference([0.0, 1.0, 2.0, math.nan])
    assert _names(exc, "values")


def test_intervention_game_refuses_nan_and_empty_x():
    from rml_fast.audit import InterventionGame

    gen = lambda x, keep, s: keep * x  # noqa: E731
    game = InterventionGame(lambda b: b.sum(1), gen, np.array([1.0, 2.0]), 2)
    np.testing.assert_array_equal(game(np.array([[True, False], [True, True]])), [1.0, 3.0])
    for x in (np.array([1.0, np.nan]), np.zeros(0)):
        with pytest.raises(ValueError, match=_word("x")) as exc:
            InterventionGame(lambda b: b.sum(1), gen, x, 2)
        assert _names(exc, "x")


def test_object_scene_checks_its_fields_and_insert_arguments():
    from rml_fast.audit import ObjectScene, make_object_scene

    scene = make_object_scene(2, size=16, rng=0)
    assert scene.background.flags.c_contiguous
    bg = scene.background.copy()
    bg[3, 4] = np.nan
    with pytest.raises(ValueError, match=_word("background")) as exc:
        ObjectScene(bg, scene.masks, scene.amplitudes, scene.centers)
    assert _names(exc, "background")
    with pytest.raises(ValueError, match=_word("amplitudes")) as exc:
        ObjectScene(scene.background, scene.masks, np.array([1.0, np.nan]), scene.centers)
    assert _names(exc, "amplitudes")
    for kwargs, name, kind in (
        ({"x": bg}, "x", ValueError),
        ({"x": np.zeros((0, 16))}, "x", ValueError),
        ({"obj": 57}, "obj", ValueError),
        ({"obj": None}, "obj", TypeError),
        ({"center": (8.0, math.nan)}, "center", ValueError),
        ({"center": ()}, "center", ValueError),
        ({"center": None}, "center", TypeError),
    ):
        args = {"x": scene.background, "obj": 0, "center": (8.0, 8.0)} | kwargs
        with pytest.raises(kind) as exc:
            scene.insert(**args)
        assert _names(exc, name)
    with pytest.raises(ValueError, match=_word("keep")) as exc:
        scene.render(np.ones(2, bool))
    assert _names(exc, "keep")


def test_toy_risk_model_presence_and_inpainting_masks():
    from rml_fast.audit import InpaintingGenerator, ToyRiskModel, make_object_scene

    scene = make_object_scene(2, size=12, rng=0)
    f = ToyRiskModel(scene, [1.0, 1.0])
    assert f.presence(scene.image[None]).round(6).tolist() == [[1.0, 1.0]]
    assert f.presence(np.zeros((0, 12, 12))).shape == (0, 2)
    with pytest.raises(ValueError, match=_word("images")) as exc:
        f.presence(scene.image[None, None])
    assert _names(exc, "images")
    with pytest.raises(ValueError, match=_word("masks")) as exc:
        InpaintingGenerator(np.zeros((0, 12, 12), bool))
    assert _names(exc, "masks")


def test_insertion_curve_names_x_bg_and_positions():
    from rml_fast.audit import insertion_curve

    f = lambda b: np.asarray(b).sum(axis=1)  # noqa: E731
    ins = lambda x, p, s: x + np.eye(3)[p] * (3 - p)  # noqa: E731
    out = insertion_curve(f, ins, np.zeros(3), [0, 1, 2])
    np.testing.assert_array_equal(out["deltas"], [3.0, 2.0, 1.0])
    for kwargs, name in (({"x_bg": np.zeros(0)}, "x_bg"), ({"x_bg": np.zeros((1, 3))}, "x_bg"),
                         ({"x_bg": np.array(0.0)}, "x_bg"), ({"positions": None}, "positions"),
                         ({"radii": [0.0, math.nan, 1.0]}, "radii")):
        args = {"x_bg": np.zeros(3), "positions": [0, 1, 2]} | kwargs
        with pytest.raises((ValueError, TypeError)) as exc:
            insertion_curve(f, ins, **args)
        assert _names(exc, name)


# --- evaluation ------------------------------------------------------------------------------


def test_parsers_name_text():
    from rml_fast.evaluation.bite import arena_hard_verdict
    from rml_fast.evaluation.culture_mt import parse_judge_output
    from rml_fast.evaluation.cyberteam import cvss_attributes_to_vector, extract_json
    from rml_fast.evaluation.valueflow import parse_ranking

    assert arena_hard_verdict("[[A>B]]") == 1
    assert parse_ranking("[2, 1]", 2) == [1, 0]
    for fn, bad in ((arena_hard_verdict, "__no_such_option__"),
                    (parse_judge_output, "__no_such_option__"), (parse_judge_output, None),
                    (parse_judge_output, 3), (cvss_attributes_to_vector, "__no_such_option__"),
                    (extract_json, "__no_such_option__")):
        with pytest.raises((ValueError, TypeError)) as exc:
            fn(bad)
        assert _names(exc, "text"), fn.__name__
    with pytest.raises(ValueError, match=_word("text")) as exc:
        parse_ranking("__no_such_option__", 5)
    assert _names(exc, "text")
    for k, kind in ((0, ValueError), (24, ValueError), (math.nan, TypeError), (None, TypeError),
                    ("x", TypeError), (5.5, TypeError)):
        with pytest.raises(kind) as exc:
            parse_ranking("[3, 1, 4, 2, 5]", k)
        assert _names(exc, "k")


def test_cvss31_roundup_names_x():
    from rml_fast.evaluation.cyberteam import cvss31_roundup

    assert cvss31_roundup(4.02) == 4.1
    for x, kind in ((math.nan, ValueError), (math.inf, ValueError), (None, TypeError),
                    ("not-a-value", TypeError)):
        with pytest.raises(kind) as exc:
            cvss31_roundup(x)
        assert _names(exc, "x")


def test_two_sample_statistics_names_det_per_prompt():
    from rml_fast.evaluation.b3it import two_sample_statistics

    ref = {"x": ["a"] * 50 + ["b"] * 50}
    with pytest.raises(ValueError, match=_word("det_per_prompt")) as exc:
        two_sample_statistics(ref, {"x": ["c"] * 20}, 1, 50, 85, n_tests=3, rng=0)
    assert _names(exc, "det_per_prompt")


def test_value_hierarchy_and_workflow_name_the_node_argument():
    from rml_fast.datasets import load_pvq_hierarchy
    from rml_fast.evaluation.cyberteam import Workflow, example_tasks
    from rml_fast.evaluation.valueflow import ValueHierarchy

    h = ValueHierarchy(load_pvq_hierarchy())
    for a, b, name in ((None, "hedonism", "a"), ("hedonism", "__no_such_option__", "b"),
                       (3, "hedonism", "a")):
        with pytest.raises(ValueError, match=_word(name)) as exc:
            h.tree_distance(a, b)
        assert _names(exc, name)
    wf = Workflow(example_tasks())
    for bad in (None, "__no_such_option__", 3):
        with pytest.raises(ValueError, match=_word("name")) as exc:
            wf.ancestors(bad)
        assert _names(exc, "name")


def test_valueflow_losses_refuse_meta_tensors():
    from rml_fast.evaluation.valueflow import anchor_infonce_loss, hmce_loss

    z = torch.tensor([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
    labels = torch.tensor([[0, 0, 0], [0, 0, 0], [1, 2, 0], [1, 2, 0]])
    ids = torch.tensor([0, 0, 1, 1])
    for fn, args, name in ((hmce_loss, (z.to("meta"), labels), "z"),
                           (hmce_loss, (z, labels.to("meta")), "labels"),
                           (anchor_infonce_loss, (z.to("meta"), ids), "z"),
                           (anchor_infonce_loss, (z, ids.to("meta")), "anchor_ids")):
        with pytest.raises(ValueError, match=_word(name)) as exc:
            fn(*args)
        assert _names(exc, name)


def test_result_dataclasses_refuse_nan():
    from rml_fast.evaluation.bite import AttackResult
    from rml_fast.evaluation.irt import ConsistencyReport

    arr = np.array([1.0, np.nan])
    base = dict(question="q", original="o", best_response="b", original_score=0.0,
                best_score=1.0, best_arm=0, best_explanation="", judge_type="pointwise",
                arm_names=("a",), arms=np.zeros(2, np.int64), scores=np.ones(2),
                rewards=np.ones(2), texts=["x", "y"], best_so_far=np.ones(2),
                pool_mean=np.ones(2), replaced=np.zeros(2, bool), replacement_ratio=0.0,
                ci_width=np.ones(2), ucb_gap=np.ones(2), lift_per_1k_tokens=np.ones(2),
                n_cold_start=0, n_judge_calls=2)
    assert AttackResult(**base).lift == 1.0
    for field in ("scores", "rewards", "best_so_far", "pool_mean", "ci_width", "ucb_gap",
                  "lift_per_1k_tokens"):
        with pytest.raises(ValueError, match=_word(field)) as exc:
            AttackResult(**(base | {field: arr}))
        assert _names(exc, field)
    ok = dict(a=np.ones(2), b=np.array([[1.0, -np.inf], [0.5, -1.0]]), cv_a=0.0,
              threshold_drift=0.0, theta_stability=np.array([1.0, np.nan]), theta=np.zeros(3),
              psd=np.ones(3), reliability=0.5, model=None)
    ConsistencyReport(**ok)  # +-inf thresholds and an undefined stability are legitimate
    for field, bad in (("a", arr), ("theta", arr), ("psd", arr),
                       ("b", np.array([[np.nan, 0.0], [0.0, 0.0]]))):
        with pytest.raises(ValueError, match=_word(field)) as exc:
            ConsistencyReport(**(ok | {field: bad}))
        assert _names(exc, field)


def test_meta_report_get_names_the_unknown_argument():
    from rml_fast.evaluation.culture_mt import MetaReport, MetaRow

    row = MetaRow("segment", "bleu", "all", "all", "kendall_tau_b", 0.5, 0.4, 0.6, 10)
    rep = MetaReport((row,), 10, 0.95)
    assert rep.get("bleu", "kendall_tau_b") is row
    for kwargs, name in (({"metric": None}, "metric"), ({"statistic": "__x__"}, "statistic"),
                         ({"metric": 3}, "metric")):
        args = {"metric": "bleu", "statistic": "kendall_tau_b"} | kwargs
        with pytest.raises(ValueError, match=_word(name)) as exc:
            rep.get(**args)
        assert _names(exc, name)


def test_graded_response_model_from_params_names_a():
    from rml_fast.evaluation.irt import GradedResponseModel

    with pytest.raises(ValueError, match=_word("a")) as exc:
        GradedResponseModel.from_params([], [[0.5, -0.5]])
    assert _names(exc, "a")


# --- security --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_adapter():
    from rml_fast.models.digits_vlm import TinyVLM
    from rml_fast.security import TinyVLMAdapter

    return TinyVLMAdapter(TinyVLM(seed=0))


def test_tiny_vlm_adapter_names_its_arguments(tiny_adapter):
    ad = tiny_adapter
    px = torch.zeros(2, 1, 16, 16)
    inp = ad.prepare(px, "what digit is this ?")
    emb = ad.splice(inp, ad.image_embeds(inp))
    assert tuple(emb.shape) == (2, 22, 48)
    bad_px = px.clone()
    bad_px[0, 0, 0, 0] = math.nan
    cases = [
        (lambda: ad.prepare(bad_px, "what digit is this ?"), "pixel_values"),
        (lambda: ad.prepare(px[:0], "what digit is this ?"), "pixel_values"),
        (lambda: ad.prepare(px, None), "prompt"),
        (lambda: ad.prepare(px, "__no_such_option__"), "prompt"),
        (lambda: ad.prepare(px, 3), "prompt"),
        (lambda: ad.splice(inp, torch.zeros(0, 16, 48)), "image_embeds"),
        (lambda: ad.splice(inp, torch.zeros(1, 2, 48).numpy()), "image_embeds"),
        (lambda: ad.last_hidden(inp, emb.to("meta")), "inputs_embeds"),
        (lambda: ad.logits(inp, emb.to(torch.complex128)), "inputs_embeds"),
        (lambda: ad.logits(inp, emb[None]), "inputs_embeds"),
        (lambda: ad.generate_from_embeds(inp, emb.masked_fill(emb == emb, math.nan)),
         "inputs_embeds"),
        (lambda: ad.generate_from_embeds(inp, emb, -1), "max_new_tokens"),
        (lambda: ad.generate_from_embeds(inp, emb, 12), "max_new_tokens"),
        (lambda: ad.generate_from_embeds(inp, emb, None), "max_new_tokens"),
    ]
    for call, name in cases:
        with pytest.raises((ValueError, TypeError)) as exc:
            call()
        assert _names(exc, name), (name, str(exc.value))
    assert tuple(ad.generate_from_embeds(inp, emb, 0).shape) == (2, 0)


def test_vlm_inputs_topk_mask_and_attack_success_rate(tiny_adapter):
    from rml_fast.security import VLMInputs, attack_success_rate, topk_mask

    px = torch.zeros(1, 1, 16, 16)
    inp = tiny_adapter.prepare(px, "what digit is this ?")
    bad = px.clone()
    bad[0, 0, 1, 1] = math.nan
    for call in (lambda: VLMInputs(inp.input_ids, bad, inp.image_token_id),
                 lambda: inp.with_pixels(bad)):
        with pytest.raises(ValueError, match=_word("pixel_values")) as exc:
            call()
        assert _names(exc, "pixel_values")
    E = torch.arange(12.0).reshape(4, 3)
    _, idx = topk_mask(E, torch.tensor([0.1, 0.9, 0.5, 0.2]), mask_rate=50)
    assert idx.tolist() == [1, 2]
    for scores, name, kind in ((torch.tensor([0.1, math.nan, 0.5, 0.2]), "scores", ValueError),
                               (torch.zeros(4, dtype=torch.complex64), "scores", TypeError)):
        with pytest.raises(kind) as exc:
            topk_mask(E, scores, mask_rate=50)
        assert _names(exc, name)
    with pytest.raises(ValueError, match=_word("image_embeds")) as exc:
        topk_mask(E[None], torch.zeros(4), mask_rate=50)
    assert _names(exc, "image_embeds")
    assert attack_success_rate(["seven <eos>", "one"], "seven") == 0.5
    for targets in (None, 3):
        with pytest.raises(TypeError) as exc:
            attack_success_rate(["seven <eos>"], targets)
        assert _names(exc, "targets")


def test_image_hijack_pgd_names_its_arguments(tiny_adapter):
    from rml_fast.security import image_hijack_pgd

    x = torch.full((1, 16, 16), 0.5)
    for kwargs, name in (({"image": torch.zeros(0, 16, 16)}, "image"),
                         ({"image": x.to("meta")}, "image"),
                         ({"prompts": "__no_such_option__"}, "prompts"),
                         ({"target_ids": None}, "target_ids"),
                         ({"target_ids": "__no_such_option__"}, "target_ids"),
                         ({"target_ids": 3}, "target_ids")):
        args = {"image": x, "prompts": "what digit is this ?", "target_ids": "seven <eos>"}
        with pytest.raises((ValueError, TypeError)) as exc:
            image_hijack_pgd(tiny_adapter, **(args | kwargs), steps=2, accum=2)
        assert _names(exc, name), (name, str(exc.value))
