"""ExPLAIND oracles: completeness, exact AdamW replay, reorderings, resume, brute force."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rml_fast.interp._explaind_reference import naive_influence
from rml_fast.interp.explaind import (
    ExactPathKernel,
    TrainingHistory,
    last_position,
    train_with_history,
)

CE = torch.nn.CrossEntropyLoss()


def _mse(o, t):
    return ((o - t) ** 2).sum(1)


def _mlp(seed=0, d_in=3, h=6, c=2):
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Linear(d_in, h), torch.nn.Tanh(), torch.nn.Linear(h, c)
    ).double()


def _data(seed=0, m=12, d_in=3, c=2):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(m, d_in, generator=g, dtype=torch.float64)
    y = torch.randint(0, c, (m,), generator=g)
    return X, y


@pytest.fixture(scope="module")
def mlp_run():
    model = _mlp()
    X, y = _data()
    hist = train_with_history(model, CE, (X, y), n_steps=8, lr=0.05, betas=(0.9, 0.99),
                              weight_decay=0.1, batch_size=5, dtype=torch.float64,
                              progress=False)  # fmt: skip
    return model, hist, (X, y)


# --------------------------------------------------------------------------- exactness


def test_linear_model_is_exact_with_one_point():
    """f = Wx + b: the gradient is constant along each step, so Q = 1 is exact."""
    torch.manual_seed(3)
    model = torch.nn.Linear(4, 3).double()
    X = torch.randn(20, 4, dtype=torch.float64)
    y = torch.randn(20, 3, dtype=torch.float64)
    f0 = model(X).detach()
    hist = train_with_history(model, _mse, (X, y), n_steps=15, lr=0.1, weight_decay=0.5,
                              batch_size=7, dtype=torch.float64, progress=False)  # fmt: skip
    epk = ExactPathKernel(model, hist, _mse, (X, y), n_quad=1, early_steps=0)
    assert float(epk.residual(X).abs().max()) < 1e-12
    rep = epk.completeness(X[:5])
    np.testing.assert_allclose(rep.target, (model(X[:5]) - f0[:5]).detach(), atol=1e-13)
    assert rep.rel_error < 1e-10
    assert rep.quadrature_error < 1e-12


def test_completeness_mlp_and_quadrature_order(mlp_run):
    model, hist, (X, y) = mlp_run
    Xt = X[:4]
    errs = []
    for q in (2, 4, 8):
        epk = ExactPathKernel(model, hist, CE, (X, y), n_quad=q, early_steps=0)
        errs.append(float(epk.residual(Xt).abs().max()))
    assert errs[0] > errs[1] > errs[2] > 0
    assert 2.5 < errs[0] / errs[1] < 6 and 2.5 < errs[1] / errs[2] < 6  # midpoint: O(1/Q^2)
    epk = ExactPathKernel(model, hist, CE, (X, y), n_quad=64, early_steps=0)
    rep = epk.completeness(Xt)
    assert rep.rel_error < 1e-3
    # the remaining error is the quadrature's: data + decay = sum of step influences
    np.testing.assert_allclose(rep.total, rep.path_total, rtol=1e-9, atol=1e-11)


def test_completeness_tiny_transformer(tmp_path):
    """A 1-layer zoo-style transformer on modular addition, with the correct-answer logit."""
    from rml_fast.models.tasks import ModAddTask
    from rml_fast.models.transformer import TinyConfig, TinyTransformer

    task = ModAddTask(p=5, train_frac=0.6)
    cfg = TinyConfig(n_layers=1, d_model=8, n_heads=2, d_mlp=16, n_ctx=3, d_vocab=task.d_vocab,
                     ln=False, act="relu")  # fmt: skip
    model = TinyTransformer(cfg, seed=0).double()
    tokens, ans = task.full_batch("train")
    hist = train_with_history(model, CE, (tokens, ans), n_steps=6, lr=3e-2, betas=(0.9, 0.98),
                              weight_decay=1.0, batch_size=10, output_fn=last_position,
                              dtype=torch.float64, progress=False)  # fmt: skip
    Xt, yt = task.full_batch("test")
    Xt, yt = Xt[:4], yt[:4]
    epk = ExactPathKernel(model, hist, CE, (tokens, ans), output_fn=last_position, n_quad=24,
                          early_steps=0)  # fmt: skip
    assert epk.update_residual() < 1e-10
    rep = epk.completeness(Xt, select=yt)
    assert rep.target.shape == (4, 1)
    assert rep.rel_error < 2e-3
    np.testing.assert_allclose(rep.total, rep.path_total, rtol=1e-8, atol=1e-10)
    # jvp and per-sample contractions give the same data influence
    a = ExactPathKernel(model, hist, CE, (tokens, ans), output_fn=last_position, n_quad=2,
                        early_steps=0, train_grad="jvp").data_influence(Xt, select=yt)  # fmt: skip
    b = ExactPathKernel(model, hist, CE, (tokens, ans), output_fn=last_position, n_quad=2,
                        early_steps=0, train_grad="per_sample").data_influence(Xt, select=yt)  # fmt: skip
    np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)


# --------------------------------------------------------------------------- the log


def test_history_reproduces_torch_adamw_trajectory():
    """The logged run equals a plain torch.optim.AdamW loop on the same batches, and AdamW's
    update re-derived from the log reproduces every step."""
    X, y = _data(1, m=16)
    sched = lambda s: 1.0 / s**0.5  # noqa: E731
    model = _mlp(1)
    ref = _mlp(1)
    hist = train_with_history(model, CE, (X, y), n_steps=12, lr=0.03, betas=(0.8, 0.95),
                              eps=1e-6, weight_decay=0.3, batch_size=6, lr_schedule=sched,
                              seed=4, dtype=torch.float64, progress=False)  # fmt: skip
    opt = torch.optim.AdamW(ref.parameters(), lr=0.03, betas=(0.8, 0.95), eps=1e-6,
                            weight_decay=0.3)  # fmt: skip
    for s in range(1, 13):
        b = hist.batch(s)
        for g in opt.param_groups:
            g["lr"] = 0.03 * sched(s)
        opt.zero_grad()
        CE(ref(X[b]), y[b]).backward()
        opt.step()
        flat = torch.cat([p.detach().reshape(-1) for p in ref.parameters()])
        np.testing.assert_allclose(hist.theta_flat(s), flat, rtol=0, atol=1e-14)
        v = torch.cat([opt.state[p]["exp_avg_sq"].reshape(-1) for p in ref.parameters()])
        np.testing.assert_allclose(hist.row(s)[1], v, rtol=0, atol=1e-16)
    epk = ExactPathKernel(model, hist, CE, (X, y))
    assert epk.update_residual() < 1e-10
    # a wrong loss is detected
    bad = ExactPathKernel(model, hist, lambda o, t: 2 * CE(o, t), (X, y))
    assert bad.update_residual() > 1e-3


def test_history_manual_logging_and_param_groups():
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2).double()
    opt = torch.optim.AdamW([{"params": [model.weight], "lr": 0.1},
                             {"params": [model.bias], "lr": 0.01, "weight_decay": 0.0}])  # fmt: skip
    hist = TrainingHistory(model, opt, dtype=torch.float64)
    X, y = torch.randn(8, 3, dtype=torch.float64), torch.randn(8, 2, dtype=torch.float64)
    for _ in range(4):
        opt.zero_grad()
        _mse(model(X), y).mean().backward()
        opt.step()
        hist.log_step(torch.arange(8))
    assert hist.param_names == ["weight", "bias"]
    np.testing.assert_allclose(hist.row(2)[2], [0.1, 0.01])
    epk = ExactPathKernel(model, hist, _mse, (X, y), n_quad=1, early_steps=0)
    assert epk.update_residual() < 1e-12
    assert epk.completeness(X[:3]).rel_error < 1e-10
    opt.step()
    opt.step()
    with pytest.raises(ValueError, match="optimizer is at step"):
        hist.log_step(torch.arange(8))


def test_resume_gives_the_same_log(tmp_path):
    X, y = _data(2, m=10)

    def run(path, steps, fresh_model=True, model=None):
        model = _mlp(2) if fresh_model else model
        return model, train_with_history(
            model, CE, (X, y), n_steps=steps, lr=0.05, batch_size=4, seed=7, store="disk",
            path=path, dtype=torch.float64, checkpoint_every=3, progress=False)  # fmt: skip

    _, full = run(tmp_path / "a", 10)
    run(tmp_path / "b", 4)  # interrupted after 4 steps (checkpoints at 3 and 4)
    _, resumed = run(tmp_path / "b", 10)  # a fresh process: new model, resumes from disk
    assert resumed.n_steps == full.n_steps == 10
    for s in range(11):
        np.testing.assert_allclose(resumed.theta_flat(s), full.theta_flat(s), rtol=0, atol=1e-13)
    for s in range(1, 11):
        assert torch.equal(resumed.batch(s), full.batch(s))
        np.testing.assert_allclose(resumed.row(s)[1], full.row(s)[1], rtol=0, atol=1e-15)
    # reopened from disk, and a memory log saved and loaded, read back the same rows
    again = TrainingHistory.load(tmp_path / "a")
    np.testing.assert_array_equal(again.theta_flat(7), full.theta_flat(7))
    model = _mlp(2)
    mem = train_with_history(model, CE, (X, y), n_steps=10, lr=0.05, batch_size=4, seed=7,
                             dtype=torch.float64, progress=False)  # fmt: skip
    mem.save(tmp_path / "m")
    back = TrainingHistory.load(tmp_path / "m")
    for s in (0, 5, 10):
        np.testing.assert_array_equal(back.theta_flat(s), mem.theta_flat(s))
    np.testing.assert_allclose(mem.theta_flat(10), full.theta_flat(10), rtol=0, atol=1e-13)
    with pytest.raises(ValueError, match="another configuration"):
        train_with_history(_mlp(2), CE, (X, y), n_steps=12, lr=0.07, batch_size=4, seed=7,
                           store="disk", path=tmp_path / "a", dtype=torch.float64,
                           checkpoint_every=3, progress=False)  # fmt: skip


# --------------------------------------------------------------------------- the scores


def test_matches_the_naive_loops_and_both_orders_agree(mlp_run):
    model, hist, (X, y) = mlp_run
    Xt = X[:3]
    naive = naive_influence(model, hist, CE, (X, y), Xt, n_quad=3)
    epk = ExactPathKernel(model, hist, CE, (X, y), n_quad=3, early_steps=0)
    D_rev, by_rev = epk.data_influence(Xt, by_step=True)
    D_fwd, by_fwd = epk.data_influence(Xt, order="forward", by_step=True)
    np.testing.assert_allclose(D_rev, naive["data"], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(D_fwd, naive["data"], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(by_rev.sum(0), by_fwd.sum(0), rtol=1e-9, atol=1e-12)
    # the forward split is by update step: it sums to the data part of each step
    step, decay = epk.step_influence(Xt, split=True)
    np.testing.assert_allclose(by_fwd.sum(-1), step - decay, rtol=1e-8, atol=1e-11)
    np.testing.assert_allclose(step, naive["step"], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(decay, naive["decay"], rtol=1e-9, atol=1e-12)
    # the reverse split: a sample enters only at the steps whose batch holds it
    for s in range(1, hist.n_steps + 1):
        outside = torch.ones(len(y), dtype=torch.bool)
        outside[hist.batch(s)] = False
        assert float(by_rev[s - 1][..., outside].abs().max()) == 0.0
    # the jvp contraction (no per-sample gradients) gives the same numbers
    jv = ExactPathKernel(model, hist, CE, (X, y), n_quad=3, early_steps=0, train_grad="jvp")
    np.testing.assert_allclose(jv.data_influence(Xt), D_rev, rtol=1e-9, atol=1e-12)
    # blocks of steps (one vmapped call each) split anywhere give the same numbers, also with
    # a finer quadrature for the first steps (blocks never mix two rules)
    for block in (1, 3):
        for grad_mode in ("jvp", "per_sample"):
            e = ExactPathKernel(model, hist, CE, (X, y), n_quad=3, early_steps=0,
                                block_size=block, train_grad=grad_mode)  # fmt: skip
            np.testing.assert_allclose(e.data_influence(Xt), D_rev, rtol=1e-9, atol=1e-12)
            np.testing.assert_allclose(e.data_influence(Xt, order="forward"), D_rev,
                                       rtol=1e-9, atol=1e-12)  # fmt: skip
    early = ExactPathKernel(model, hist, CE, (X, y), n_quad=3, n_quad_early=5, early_steps=2,
                            block_size=4)  # fmt: skip
    st_early = early.step_influence(Xt)
    np.testing.assert_allclose(st_early[2:], step[2:], rtol=1e-9, atol=1e-12)
    assert float((st_early[:2] - step[:2]).abs().max()) > 0  # other rule on steps 1-2
    np.testing.assert_allclose(early.data_influence(Xt).sum(-1) + early.step_influence(
        Xt, split=True)[1].sum(0), st_early.sum(0), rtol=1e-8, atol=1e-11)  # fmt: skip


def test_parameter_and_component_influence(mlp_run):
    model, hist, (X, y) = mlp_run
    Xt = X[:3]
    epk = ExactPathKernel(model, hist, CE, (X, y), n_quad=4, early_steps=0,
                          param_groups={"layer0": ["0.weight", "0.bias"],
                                        "layer2": ["2.weight"]})  # fmt: skip
    assert epk.group_names == ["layer0", "layer2", "other"]
    N = hist.n_steps
    # brute force phi per step and test output
    flat = hist._flat
    from torch.func import functional_call, jacrev

    def f(th):
        return functional_call(model, flat.unflatten(th), (Xt,))

    contrib = []
    for s in range(1, N + 1):
        th0, (th1, _, lr_t, wd_t, _) = hist.theta_flat(s - 1), hist.row(s)
        phi = sum(jacrev(f)(th0 + (q + 0.5) / 4 * (th1 - th0)) for q in range(4)) / 4
        dec = -flat.expand(lr_t) * flat.expand(wd_t) * th0
        contrib.append(phi * (th1 - th0 - dec))  # (n, C, P), the data part
    contrib = torch.stack(contrib)  # (N, n, C, P)
    P_step = epk.parameter_influence(Xt, window=3)
    P_tot = epk.parameter_influence(Xt, window=3, abs_mode="total")
    P_sgn = epk.parameter_influence(Xt, window=3, abs_mode="signed")
    cat = lambda d: torch.cat([d[k] for k in flat.names], -1)  # noqa: E731
    for w, sl in enumerate([slice(0, 3), slice(3, 6), slice(6, 8)]):
        np.testing.assert_allclose(cat(P_step)[w], contrib[sl].abs().sum((0, 2)), atol=1e-12)
        np.testing.assert_allclose(cat(P_tot)[w], contrib[sl].sum(0).abs().sum(1), atol=1e-12)
        np.testing.assert_allclose(cat(P_sgn)[w], contrib[sl].sum((0, 2)), atol=1e-12)
    # signed with decay over every parameter and window = the summed step influences
    P_all = epk.parameter_influence(Xt, window=3, abs_mode="signed", include_decay=True)
    np.testing.assert_allclose(cat(P_all).sum((0, 2)), epk.step_influence(Xt).sum((0, 2)),
                               rtol=1e-9, atol=1e-12)  # fmt: skip
    # components: group sums over tests and parameters; relative columns sum to 1
    raw = epk.component_influence(Xt, window=3, relative=False)
    layer0 = contrib[..., : 3 * 6 + 6].abs().sum((1, 2, 3))  # per step
    np.testing.assert_allclose(raw.loc["layer0"].to_numpy(),
                               [layer0[0:3].sum(), layer0[3:6].sum(), layer0[6:8].sum()],
                               rtol=1e-10)  # fmt: skip
    rel = epk.component_influence(Xt, window=3)
    np.testing.assert_allclose(rel.sum().to_numpy(), 1.0)
    assert list(rel.columns) == ["1-3", "4-6", "7-8"]
    out = epk.decompose(Xt, window=3)
    np.testing.assert_allclose(out["component"].sum(1).T, raw.to_numpy(), rtol=1e-10)
    np.testing.assert_allclose(out["data"], epk.data_influence(Xt), rtol=1e-10, atol=1e-13)


# --------------------------------------------------------------------------- bad input


def test_bad_input_raises_before_work(mlp_run):
    model, hist, (X, y) = mlp_run
    X0 = X.clone()
    with pytest.raises(TypeError, match=r"optimizer must be a torch\.optim\.AdamW"):
        TrainingHistory(model, torch.optim.SGD(model.parameters(), lr=0.1))
    with pytest.raises(ValueError, match="amsgrad=False"):
        TrainingHistory(model, torch.optim.AdamW(model.parameters(), amsgrad=True))
    with pytest.raises(ValueError, match="path is required"):
        TrainingHistory(model, torch.optim.AdamW(model.parameters()), store="disk")
    with pytest.raises(ValueError, match="n_steps"):
        train_with_history(model, CE, (X, y), n_steps=-1)
    with pytest.raises(ValueError, match="same non-zero number of rows"):
        train_with_history(model, CE, (X, y[:3]), n_steps=1)
    with pytest.raises(ValueError, match="betas"):
        train_with_history(model, CE, (X, y), n_steps=1, betas=(1.0, 0.9))
    with pytest.raises(TypeError, match="history must be a TrainingHistory"):
        ExactPathKernel(model, None, CE)
    with pytest.raises(ValueError, match="n_quad"):
        ExactPathKernel(model, hist, CE, n_quad=0)
    with pytest.raises(ValueError, match="train_grad"):
        ExactPathKernel(model, hist, CE, train_grad="magic")
    with pytest.raises(ValueError, match="param_groups"):
        ExactPathKernel(model, hist, CE, param_groups={"a": ["nope"]})
    with pytest.raises(ValueError, match="no parameter"):
        ExactPathKernel(torch.nn.Linear(3, 2), hist, CE)
    epk = ExactPathKernel(model, hist, CE, n_quad=1, early_steps=0)
    with pytest.raises(ValueError, match="dataset"):
        epk.data_influence(X[:2])
    with pytest.raises(ValueError, match="select"):
        epk.predict(X[:2], select=torch.tensor([0, 5]))
    with pytest.raises(ValueError, match="abs_mode"):
        epk.parameter_influence(X[:2], abs_mode="max")
    with pytest.raises(TypeError, match="X must be"):
        epk.predict(X[:2].numpy())
    torch.testing.assert_close(X, X0)


# --------------------------------------------------------------------------- the demo


def test_grokking_demo_quick(tmp_path):
    from rml_fast.interp.demos import grokking

    out = tmp_path / "grok.png"
    res = grokking.run(quick=True, progress=False, out=out)
    assert out.is_file() and out.stat().st_size > 1000
    assert res["p"] == 11 and len(res["windows"]) == 8
    assert set(res["shares"]) == {"embed", "attn", "mlp", "unembed"}
    np.testing.assert_allclose(np.sum(list(res["shares"].values()), axis=0), 1.0, atol=1e-9)
    assert res["train_acc"][-1] >= 0.95  # the quick model memorises its training pairs
    assert res["memorised_at"] is not None
    assert res["update_residual"] < 1e-4  # float32 replay of torch's AdamW
    assert res["completeness_rel_error"] < 0.05  # Q = 2 points per step
    assert "grokking" in grokking.format_table(res)


def test_quadrature_points_in_groups_equal_one_call(mlp_run):
    """Large quadratures (n_quad_early=1000) are summed in memory-bounded groups."""
    model, hist, (X, y) = mlp_run
    epk = ExactPathKernel(model, hist, CE, (X, y))
    th0 = torch.stack([hist.theta_flat(0), hist.theta_flat(3)])
    dth = torch.stack([hist.theta_flat(1), hist.theta_flat(4)]) - th0
    one = epk._funcs.phi_block(th0, dth, X[:3], None, 7, None)
    grouped = epk._funcs.phi_block(th0, dth, X[:3], None, 7, None, budget=1)
    np.testing.assert_allclose(grouped, one, rtol=1e-12, atol=1e-14)
    assert one.shape == (2, 6, hist.n_params)
