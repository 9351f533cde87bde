"""The unlearning demo shows its effect: before unlearning the toy DDPM draws concept c* in c*'s
mode, after it (MSE, Hellinger, chi2 with Adam; MSE with SGD) nearly all c* samples land in the
anchor's mode (chi2 with SGD most of them), while the other concepts move far less than the target did -- margins that a
no-op unlearner (erasure 0) fails; on two seeds."""

from __future__ import annotations

import pytest

from rml_fast.alignment.demos import load_demo, unlearning


@pytest.fixture(scope="module", params=[0, 1])
def result(request, tmp_path_factory):
    out = tmp_path_factory.mktemp("unlearn") / "unlearning.png"
    res = unlearning.run(seed=request.param, quick=True, out=str(out), progress=False)
    res["_png"] = out
    return res


def test_unlearning_erases_and_preserves(result):
    curves = result["curves"]
    for opt, objectives in (("adam", ("mse", "hellinger", "chi2")), ("sgd", ("mse", "chi2"))):
        for obj in objectives:
            level = 0.6 if (opt, obj) == ("sgd", "chi2") else 0.85
            cur = curves[opt][obj]
            assert cur["step"][0] == 0 and cur["step"][-1] == result["config"]["unlearn_steps"]
            assert cur["erasure"][0] < 0.05  # the original model draws c* where it should
            assert cur["erasure"][-1] > level, (opt, obj)  # unlearned: off c*'s mode ...
            assert cur["anchor"][-1] > level - 0.05, (opt, obj)  # ... and into the anchor's
            assert cur["others_sw"][0] == 0.0  # same noise, same model
            # the other concepts (radius-2 circle, modes 2.8 apart) move much less than c* did
            assert cur["others_sw"][-1] < 0.5, (opt, obj)
    # prior preservation through PCGrad: same erasure, much less damage to the other concepts
    prior, plain = curves["adam+prior"]["mse"], curves["adam"]["mse"]
    assert prior["erasure"][-1] > 0.85
    assert prior["others_sw"][-1] < 0.6 * plain["others_sw"][-1]
    assert prior["anchor_sw"][-1] < 0.6 * plain["anchor_sw"][-1]
    # with the same learning rate, SGD's Hellinger step is 1/(8 sigma^2) of MSE's: it erases less
    assert curves["sgd"]["hellinger"]["erasure"][-1] < curves["sgd"]["mse"]["erasure"][-1] - 0.3
    assert curves["sgd"]["hellinger"]["others_sw"][-1] < curves["sgd"]["mse"]["others_sw"][-1]


def test_outputs(result):
    assert result["_png"].stat().st_size > 5000
    table = unlearning.format_table(result)
    assert table.count("\n") == 8 and "steps to 90%" in table
    rows = {(r["arm"], r["objective"]): r for r in result["summary"]}
    assert rows[("adam", "mse")]["steps_to_erasure"] is not None
    assert 0 < rows[("adam", "mse")]["steps_to_erasure"] <= result["config"]["unlearn_steps"]
    assert load_demo("unlearning") is unlearning
