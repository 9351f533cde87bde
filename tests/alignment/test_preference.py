"""Oracles for rml_fast.alignment.preference (spec np_alignment §3.4)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from rml_fast.alignment.preference import (
    LOSSES,
    PreferenceLoss,
    RewardCalibrator,
    disentanglement_band,
    incentives,
    pairwise_loss,
    predicted_delta,
    preference_step,
    score_geometry,
    sequence_logps,
)

DT = torch.float64


def _inputs(seed: int, b: int = 7):
    g = torch.Generator().manual_seed(seed)
    zw = -5 + torch.randn(b, generator=g, dtype=DT)
    zl = -6 + torch.randn(b, generator=g, dtype=DT)
    # rewards r = z - z_ref of order 0.3, r_l < log 2 (DDRO's domain)
    zw_ref = zw - 0.3 * torch.randn(b, generator=g, dtype=DT)
    zl_ref = zl - 0.3 * torch.rand(b, generator=g, dtype=DT) + 0.1
    lw = torch.randint(1, 9, (b,), generator=g).to(DT)
    ll = torch.randint(1, 9, (b,), generator=g).to(DT)
    return zw, zl, zw_ref, zl_ref, lw, ll


HP = {
    "dpo": {"beta": 0.3},
    "ipo": {"tau": 0.7},
    "simpo": {"beta": 2.0, "gamma": 0.5},
    "cpo": {"beta": 0.2, "lam": 0.5},
    "slic": {"gamma": 1.0, "lam": 0.1},
    "bce": {},
    "lsif": {},
    "ukl": {},
    "ddro": {},
}


@pytest.mark.parametrize("kind", sorted(LOSSES))
@pytest.mark.parametrize("length_norm", [False, True])
def test_incentives_equal_autograd(kind, length_norm):
    zw, zl, zw_ref, zl_ref, lw, ll = _inputs(1)
    if kind == "slic":  # keep away from the hinge's kink
        zl = torch.where((zw / (lw if length_norm else 1) - zl / (ll if length_norm else 1)
                          - 1.0).abs() < 0.05, zl - 0.3, zl)
    zw_ = zw.clone().requires_grad_(True)
    zl_ = zl.clone().requires_grad_(True)
    hp = {**HP[kind], "length_norm": length_norm}
    loss = pairwise_loss(kind, zw_, zl_, zw_ref, zl_ref, lw, ll, **hp)
    gw, gl = torch.autograd.grad(loss.sum(), [zw_, zl_])
    dw, dl = incentives(kind, zw, zl, zw_ref, zl_ref, lw, ll, **hp)
    torch.testing.assert_close(dw, -gw, rtol=0, atol=1e-10)
    torch.testing.assert_close(dl, gl, rtol=0, atol=1e-10)


@pytest.mark.parametrize("kind", sorted(LOSSES))
def test_gradcheck_float64(kind):
    zw, zl, zw_ref, zl_ref, lw, ll = _inputs(2, b=4)
    if kind == "slic":
        zl = zw - torch.tensor([0.2, 0.5, 1.6, 2.5], dtype=DT)  # m away from gamma = 1

    def f(a, b):
        return pairwise_loss(kind, a, b, zw_ref, zl_ref, lw, ll, **HP[kind])

    assert torch.autograd.gradcheck(f, (zw.requires_grad_(True), zl.requires_grad_(True)))


def test_closed_forms_at_init():
    z = torch.full((3,), -4.0, dtype=DT)
    for beta in (0.1, 0.5, 2.0):
        dw, dl = incentives("dpo", z, z, z, z, beta=beta)
        torch.testing.assert_close(dw, torch.full_like(z, beta / 2), rtol=0, atol=1e-15)
        torch.testing.assert_close(dl, dw)
        loss = pairwise_loss("dpo", z, z, z, z, beta=beta)
        torch.testing.assert_close(loss, torch.full_like(z, math.log(2)), rtol=0, atol=1e-15)
    for tau in (0.1, 1.0, 3.0):
        dw, dl = incentives("ipo", z, z, z, z, tau=tau)
        torch.testing.assert_close(dw, torch.full_like(z, 1 / tau), rtol=0, atol=1e-12)
        torch.testing.assert_close(dl, dw)
    # UKL / DDRO at r = 0: d_w = 1, d_l = 1 (e^0 / (2 - e^0)); BCE: 1/2, 1/2; LSIF: 1, 1
    for kind, want in (("ukl", (1, 1)), ("ddro", (1, 1)), ("bce", (0.5, 0.5)), ("lsif", (1, 1))):
        dw, dl = incentives(kind, z, z, z, z)
        assert torch.allclose(dw, torch.full_like(z, want[0]))
        assert torch.allclose(dl, torch.full_like(z, want[1]))


def test_reductions_to_known_objectives():
    zw, zl, zw_ref, zl_ref, lw, ll = _inputs(3)
    beta = 0.4
    m_t = (zw - zw_ref) - (zl - zl_ref)
    # DPO: -log sigmoid(beta m~)
    torch.testing.assert_close(pairwise_loss("dpo", zw, zl, zw_ref, zl_ref, beta=beta),
                               -F.logsigmoid(beta * m_t), rtol=0, atol=1e-12)
    # SimPO: -log sigmoid(beta (zw/|yw| - zl/|yl|) - gamma) on raw sums
    want = -F.logsigmoid(beta * (zw / lw - zl / ll) - 0.7)
    got = pairwise_loss("simpo", zw, zl, len_w=lw, len_l=ll, beta=beta, gamma=0.7)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    # SimPO with gamma = 0, unit lengths == DPO with a zero reference; CPO with lam = 0 too
    zero = torch.zeros_like(zw)
    dpo0 = pairwise_loss("dpo", zw, zl, zero, zero, beta=beta)
    torch.testing.assert_close(pairwise_loss("simpo", zw, zl, beta=beta, gamma=0.0), dpo0)
    torch.testing.assert_close(pairwise_loss("cpo", zw, zl, beta=beta, lam=0.0), dpo0)
    # IPO: (m~ - 1/(2 tau))^2
    torch.testing.assert_close(pairwise_loss("ipo", zw, zl, zw_ref, zl_ref, tau=0.25),
                               (m_t - 2.0) ** 2, rtol=0, atol=1e-12)
    # SLiC with lam = 0 is the hinge
    torch.testing.assert_close(pairwise_loss("slic", zw, zl, gamma=1.5, lam=0.0),
                               torch.relu(1.5 - (zw - zl)))


def _toy_geometry():
    theta = torch.tensor([0.4, -0.3, 0.2], dtype=DT, requires_grad=True)
    a = torch.tensor([[1.0, 0.2, 0.0], [0.9, 0.1, 0.3]], dtype=DT)
    b = torch.tensor([[2.0, 0.5, 0.1], [2.2, 0.3, 0.4]], dtype=DT)
    return theta, a, b


def test_rc_forward_identity_and_gradient_scaling():
    theta, a, b = _toy_geometry()
    zw, zl = a @ theta, b @ theta
    zw_ref, zl_ref = zw.detach() - 0.1, zl.detach() + 0.05
    rc = RewardCalibrator([theta], ema=0.5)
    for kind in sorted(LOSSES):
        zw, zl = a @ theta, b @ theta
        zw_rc, zl_rc = rc(kind, zw, zl, zw_ref, zl_ref, **HP[kind])
        alpha = rc.state["alpha"]
        assert alpha != 1.0
        base = pairwise_loss(kind, zw, zl, zw_ref, zl_ref, **HP[kind])
        cal = pairwise_loss(kind, zw_rc, zl_rc, zw_ref, zl_ref, **HP[kind])
        torch.testing.assert_close(cal, base, rtol=0, atol=1e-14)
        # gradient w.r.t. zw scaled by alpha, zl by 1/alpha
        zw_leaf = zw.detach().requires_grad_(True)
        zl_leaf = zl.detach().requires_grad_(True)
        zw_c = alpha * zw_leaf + (1 - alpha) * zw_leaf.detach()
        zl_c = zl_leaf / alpha + (1 - 1 / alpha) * zl_leaf.detach()
        gw, gl = torch.autograd.grad(
            pairwise_loss(kind, zw_c, zl_c, zw_ref, zl_ref, **HP[kind]).sum(), [zw_leaf, zl_leaf])
        dw, dl = incentives(kind, zw, zl, zw_ref, zl_ref, **HP[kind])
        torch.testing.assert_close(-gw, alpha * dw, rtol=1e-12, atol=1e-14)
        torch.testing.assert_close(gl, dl / alpha, rtol=1e-12, atol=1e-14)
        # and through the calibrator itself, w.r.t. theta
        (g_theta,) = torch.autograd.grad(cal.sum(), [theta])
        want = -(alpha * dw) @ a + (dl / alpha) @ b
        torch.testing.assert_close(g_theta, want, rtol=1e-12, atol=1e-14)


def test_rc_alpha_targets_band_centre_and_state():
    theta, a, b = _toy_geometry()
    zw, zl = a @ theta, b @ theta
    rc = RewardCalibrator([theta], ema=0.98)
    rc("dpo", zw, zl, zw.detach(), zl.detach(), beta=0.1)
    gw, gl = a.mean(0), b.mean(0)
    r_star = float(gl.norm() / gw.norm())
    # first step initialises the EMAs: alpha^2 r = r* with r = 1 for DPO
    assert rc.state["alpha"] ** 2 == pytest.approx(r_star, rel=1e-12)
    assert rc.state["log_sl"] - rc.state["log_sw"] == pytest.approx(math.log(r_star), rel=1e-12)
    st = rc.state_dict()
    rc2 = RewardCalibrator([theta])
    rc2.load_state_dict(st)
    assert rc2.state == rc.state
    # eval mode and no-grad: pass-through, state untouched
    rc.train(False)
    out = rc("dpo", zw, zl, zw.detach(), zl.detach())
    assert out[0] is zw and rc.state["steps"] == 1
    rc.train(True)
    with torch.no_grad():
        zw0 = a @ theta
        assert rc("dpo", zw0, zw0, zw0, zw0)[0] is zw0
    # joint clipping keeps the ratio
    rc3 = RewardCalibrator([theta], max_grad_norm=1e-3)
    rc3("dpo", zw, zl, zw.detach(), zl.detach())
    assert rc3.state["alpha"] == pytest.approx(math.sqrt(r_star))
    assert rc3.last["sw_sq"] < float(gw @ gw)


def test_band_endpoints():
    lo, hi = disentanglement_band(2.0, 3.0, rho=1.0)
    assert lo == pytest.approx(1.5) and hi == pytest.approx(1.5)
    assert disentanglement_band(1.0, 3.0, rho=0.5) == pytest.approx((1.5, 6.0))
    assert disentanglement_band(1.0, 3.0, rho=-0.2) == (0.0, math.inf)
    v = torch.tensor([1.0, 0.0], dtype=DT)
    w = torch.tensor([1.0, 1.0], dtype=DT)
    lo, hi = disentanglement_band(v, w)
    rho = 1 / math.sqrt(2)
    assert (lo, hi) == pytest.approx((rho * math.sqrt(2), math.sqrt(2) / rho))
    # the band is where the predicted step disentangles: check on a grid of r
    sw, sl, rho = 1.3, 2.1, 0.6
    lo, hi = disentanglement_band(sw, sl, rho=rho)
    for r in torch.linspace(0.05, 8.0, 300).tolist():
        dzw, dzl = predicted_delta(r, 1.0, sw**2, sl**2, rho * sw * sl, lr=1.0)
        inside = lo <= r <= hi
        assert inside == (dzw >= -1e-12 and dzl <= 1e-12)


def test_predicted_delta_matches_finite_step():
    # log-linear policy pi(y|x) = softmax(X_x theta): one small SGD step on the DPO loss
    g = torch.Generator().manual_seed(0)
    feats = torch.randn(5, 6, 4, generator=g, dtype=DT)  # contexts x responses x dim
    theta = (0.3 * torch.randn(4, generator=g, dtype=DT)).requires_grad_(True)
    yw = torch.tensor([0, 1, 2, 3, 4])
    yl = torch.tensor([5, 4, 3, 2, 1])

    def scores(t):
        logp = torch.log_softmax(feats @ t, dim=-1)
        idx = torch.arange(5)
        return logp[idx, yw], logp[idx, yl]

    n_signs = 0
    for kind in ("dpo", "bce", "cpo", "ipo", "simpo", "ukl"):
        for i in range(5):  # one pair at a time: the first-order prediction is then exact to O(lr^2)
            zw, zl = (s[i : i + 1] for s in scores(theta))
            ref_w, ref_l = zw.detach() - 0.2, zl.detach() + 0.1
            loss = pairwise_loss(kind, zw, zl, ref_w, ref_l, **HP[kind]).sum()
            geo = score_geometry(zw, zl, [theta])
            (grad,) = torch.autograd.grad(loss, [theta])
            dw, dl = incentives(kind, zw, zl, ref_w, ref_l, **HP[kind])
            lr = 1e-5
            pw, pl = predicted_delta(dw, dl, geo["sw_sq"], geo["sl_sq"], geo["dot"], lr)
            with torch.no_grad():
                zw1, zl1 = (s[i : i + 1] for s in scores(theta - lr * grad))
                fw, fl = float(zw1 - zw), float(zl1 - zl)
            assert fw == pytest.approx(float(pw), rel=1e-3), kind
            assert fl == pytest.approx(float(pl), rel=1e-3), kind
            n_signs += (fw > 0) + 2 * (fl > 0)
    assert n_signs > 0  # not all moves in one direction


def test_predicted_delta_exact_for_uniform_incentives():
    theta, a, b = _toy_geometry()
    zw, zl = a @ theta, b @ theta
    ref = zw.detach(), zl.detach()
    out = preference_step("dpo", zw, zl, *ref, params=[theta], beta=0.1)
    out.loss.backward()
    pw, pl = predicted_delta(float(out.d_w[0]), float(out.d_l[0]), out.geometry["sw_sq"],
                             out.geometry["sl_sq"], out.geometry["dot"], lr=0.5)
    with torch.no_grad():
        new = theta - 0.5 * theta.grad
        assert float((a @ new - zw).mean()) == pytest.approx(float(pw), rel=1e-10)
        assert float((b @ new - zl).mean()) == pytest.approx(float(pl), rel=1e-10)
    # this toy is outside the band for DPO: both likelihoods fall
    assert pw < 0 and pl < 0 and not out.inside.any()


def test_preference_step_with_rc_is_inside_band():
    theta, a, b = _toy_geometry()
    loss_fn = PreferenceLoss("dpo", params=[theta], calibrate=True, ema=0.0, beta=0.1)
    zw, zl = a @ theta, b @ theta
    out = loss_fn(zw, zl, zw.detach(), zl.detach())
    assert out.inside.all() and out.alpha > 1
    out.loss.backward()
    with torch.no_grad():
        new = theta - 0.5 * theta.grad
        assert float((a @ new - zw).mean()) > 0 > float((b @ new - zl).mean())
    sd = loss_fn.state_dict()
    loss2 = PreferenceLoss("dpo", params=[theta], calibrate=True)
    loss2.load_state_dict(sd)
    assert loss2.calibrator.state == loss_fn.calibrator.state


def test_sequence_logps_brute_force():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 5, 7, generator=g, dtype=DT)
    labels = torch.randint(0, 7, (3, 5), generator=g)
    labels[0, 3:] = -100
    mask = torch.ones(3, 5, dtype=torch.bool)
    mask[2, 0] = False
    lp = torch.log_softmax(logits, -1)
    want = torch.zeros(3, dtype=DT)
    n = torch.zeros(3, dtype=DT)
    for i in range(3):
        for t in range(5):
            if labels[i, t] != -100 and mask[i, t]:
                want[i] += lp[i, t, labels[i, t]]
                n[i] += 1
    torch.testing.assert_close(sequence_logps(logits, labels, mask), want)
    torch.testing.assert_close(sequence_logps(logits, labels, mask, average=True), want / n)


def test_bad_input():
    z = torch.zeros(3)
    with pytest.raises(ValueError, match="kind must be one of"):
        pairwise_loss("orpo", z, z, z, z)
    with pytest.raises(ValueError, match="zl must have shape"):
        pairwise_loss("dpo", z, torch.zeros(4), z, z)
    with pytest.raises(ValueError, match="zw_ref must have shape"):
        pairwise_loss("dpo", z, z, torch.zeros(2), z)
    with pytest.raises(ValueError, match="zw must be finite"):
        pairwise_loss("dpo", torch.tensor([0.0, math.nan, 1.0]), z, z, z)
    with pytest.raises(ValueError, match="zl_ref must be finite"):
        incentives("bce", z, z, z, torch.tensor([0.0, math.inf, 1.0]))
    with pytest.raises(ValueError, match="beta"):
        pairwise_loss("dpo", z, z, z, z, beta=0.0)
    with pytest.raises(ValueError, match="beta"):
        pairwise_loss("simpo", z, z, beta=-1.0)
    with pytest.raises(ValueError, match="tau"):
        pairwise_loss("ipo", z, z, z, z, tau=0)
    with pytest.raises(ValueError, match="needs the reference"):
        pairwise_loss("dpo", z, z)
    with pytest.raises(TypeError, match="unknown hyper-parameter"):
        pairwise_loss("dpo", z, z, z, z, gamma=1.0)
    with pytest.raises(TypeError, match=r"zw must be a torch\.Tensor"):
        pairwise_loss("dpo", [0.0], z, z, z)
    with pytest.raises(ValueError, match="len_w must be positive"):
        pairwise_loss("simpo", z, z, len_w=torch.tensor([1.0, 0.0, 2.0]))
    with pytest.raises(ValueError, match="params must be"):
        RewardCalibrator([])
    with pytest.raises(ValueError, match="calibrate=True needs params"):
        PreferenceLoss("dpo", calibrate=True)
    with pytest.raises(ValueError, match="rho is required"):
        disentanglement_band(1.0, 2.0)
    with pytest.raises(ValueError, match="lr"):
        predicted_delta(1.0, 1.0, 1.0, 1.0, 0.0, lr=-1.0)
    with pytest.raises(ValueError, match="logits must be"):
        sequence_logps(torch.zeros(2, 3), torch.zeros(2, 3, dtype=torch.long))


def test_sequence_logps_gradcheck_and_grad():
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(2, 4, 6, generator=g, dtype=DT, requires_grad=True)
    labels = torch.randint(0, 6, (2, 4), generator=g)
    labels[1, 0] = -100
    assert torch.autograd.gradcheck(lambda x: sequence_logps(x, labels, average=True), (logits,))
    lp = torch.log_softmax(logits, -1).gather(-1, labels.clamp_min(0)[..., None])[..., 0]
    want = torch.autograd.grad((lp * (labels != -100)).sum(), logits)[0]
    got = torch.autograd.grad(sequence_logps(logits, labels).sum(), logits)[0]
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-14)


def test_rc_every_amortises_the_geometry(monkeypatch):
    from rml_fast.alignment import preference as P

    calls = []
    real = P.score_geometry
    monkeypatch.setattr(P, "score_geometry", lambda *a, **k: calls.append(1) or real(*a, **k))
    theta, a, b = _toy_geometry()
    loss_fn = PreferenceLoss("dpo", params=[theta], calibrate=True, rc_every=3, beta=0.1)
    alphas = []
    for _ in range(7):
        out = loss_fn(a @ theta, b @ theta, (a @ theta).detach() - 0.1, (b @ theta).detach())
        out.loss.backward()
        alphas.append(out.alpha)
    assert len(calls) == 3  # steps 0, 3, 6
    assert loss_fn.calibrator.state["steps"] == 7
    # on a fixed toy the reused norms are the fresh ones: alpha is that of every=1
    ref_fn = PreferenceLoss("dpo", params=[theta], calibrate=True, beta=0.1)
    for x in alphas:
        out = ref_fn(a @ theta, b @ theta, (a @ theta).detach() - 0.1, (b @ theta).detach())
        assert out.alpha == pytest.approx(x, rel=1e-12) and x > 1.1
    with pytest.raises(ValueError, match="every"):
        RewardCalibrator([theta], every=0)
