"""DistSeal end to end on a CPU (``rml-fast demo watermark distseal``).

Data: random 32 x 32 patches of scikit-learn's two sample photographs (``load_sample_images``),
1,024 for training and 128 held out (``--quick``: 16 px, fewer of each).

1. Train :class:`~rml_fast.models.autoencoder.TinyAutoencoder` (f = 4, 4 latent channels).
2. Train the post-hoc latent watermarker (:class:`~rml_fast.watermark.distseal.LatentWatermarker`,
   K = 16 bits, grid read-out) for 450 steps: the cosine strength schedule from s = 1.0 down to
   0.25, the pixel L1 term ``lambda_perc = 1`` against ``x_hat``, and the augmentation layer
   (identity, JPEG, resize, blur, brightness, noise; one op per batch) switched on halfway
   (``aug_start = 0.5``). These are the CPU-scale recipe (PROPOSED, see
   :mod:`rml_fast.watermark.distseal`); crop is left out of training because the grid read-out
   cannot learn an unknown shift, and is reported as an attack.
   Decoder distillation uses ``w_ext = 0.3`` (the paper: 0.1) and 400 steps at lr 3e-3 (PROPOSED:
   at s = 0.25 the L1 term alone moves the decoder too slowly to reach the teacher).
3. Report on held-out patches: bit accuracy with the right key, a wrong key and on clean
   (autoencoded) images; PSNR / SSIM of ``x_w`` against ``x_hat = Dec(z)``; TPR at FPR = 1% of
   the exact binomial test; bit accuracy under JPEG 50 / 80, crop 0.5, resize 0.5,
   brightness 1.5 and blur k = 5.
4. Distil a fixed key into the decoder (:func:`~rml_fast.watermark.distseal.distill_decoder`):
   ``||Dec'(z) - Dec(z_w*)||_1`` and the bit accuracy of ``Dec'(z)`` before / after.
5. Distil it into a generator (:func:`~rml_fast.watermark.distseal.distill_generator`): a
   :class:`~rml_fast.watermark.distseal.TinyLatentDDPM` trained on the watermarked latents vs
   one trained on the clean latents; the bit accuracy (key) of decoded samples of each.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import numpy as np
import torch

from rml_fast.models.autoencoder import TinyAutoencoder, image_patches
from rml_fast.watermark import augment as A
from rml_fast.watermark.distseal import (
    LatentWatermarker,
    TinyLatentDDPM,
    distill_decoder,
    distill_generator,
    random_message,
    watermark_latent_dataset,
)
from rml_fast.watermark.metrics import bit_accuracy, psnr, ssim, tpr_at_fpr

__all__ = ["ATTACKS", "format_table", "run"]

#: the robustness attacks of the table: name -> function of a batch
ATTACKS: dict[str, Any] = {
    "none": lambda x: x,
    "jpeg 80": lambda x: A.jpeg(x, 80),
    "jpeg 50": lambda x: A.jpeg(x, 50),
    "crop 0.5": lambda x: A.crop(x, 0.5, center=True),
    "resize 0.5": lambda x: A.resize(x, 0.5),
    "brightness 1.5": lambda x: A.brightness(x, 1.5),
    "blur k=5": lambda x: A.gaussian_blur(x, 5),
}

#: augmentation ops of the watermark training (switched on at ``aug_start``)
AUG_OPS = ["identity", "jpeg", "resize", "blur", "brightness", "noise"]

_FULL = {"size": 32, "n_train": 1024, "n_test": 128, "ae_width": 16, "ae_steps": 300,
         "nbits": 16, "width": 24, "pool": "grid", "wm_steps": 450, "wm_lr": 3e-3,
         "schedule": (1.0, 0.25), "lambda_perc": 1.0, "aug_start": 0.5,
         "distill_steps": 400, "distill_lr": 3e-3, "distill_w_ext": 0.3,
         "ddpm_steps": 300, "ddpm_width": 32, "ddpm_T": 50}
_QUICK = {"size": 16, "n_train": 96, "n_test": 16, "ae_width": 8, "ae_steps": 15,
          "nbits": 8, "width": 8, "pool": "grid", "wm_steps": 15, "wm_lr": 5e-3,
          "schedule": (2.0, 2.0), "lambda_perc": 0.0, "aug_start": 0.5,
          "distill_steps": 10, "distill_lr": 1e-3, "distill_w_ext": 0.1,
          "ddpm_steps": 10, "ddpm_width": 8, "ddpm_T": 10}


def _acc(wm: LatentWatermarker, x: torch.Tensor, m: torch.Tensor) -> float:
    return float(bit_accuracy(wm.extract(x), m).mean())


def run(*, seed: int = 0, quick: bool = False, out: str | Path | None = None,
        progress: bool = True) -> dict[str, Any]:
    """Train and evaluate the DistSeal pipeline; optionally draw the figure.

    Parameters
    ----------
    seed : int, default=0
    quick : bool, default=False
        Tiny sizes (seconds) instead of the full demo (a few minutes on two cores).
    out : path, optional
        PNG path for the figure (needs matplotlib).
    progress : bool, default=True
        tqdm bars for the training loops.

    Returns
    -------
    dict
        ``config``; ``ae_psnr`` (dB, autoencoder vs original); ``bit_acc`` / ``bit_acc_wrong_key`` /
        ``bit_acc_clean``; ``psnr`` / ``ssim`` of ``x_w`` vs ``x_hat``; ``tpr_at_1pct``;
        ``robustness`` (attack -> bit accuracy); ``distill_l1_before`` / ``_after``,
        ``distill_bit_acc_before`` / ``_after``; ``generator_bit_acc_wm`` / ``_clean``.

    Examples
    --------
    >>> res = run(quick=True, progress=False)  # doctest: +SKIP
    """
    cfg: dict[str, Any] = dict(_QUICK if quick else _FULL)
    g = torch.Generator().manual_seed(seed)
    size, K = cfg["size"], cfg["nbits"]
    train = image_patches(cfg["n_train"], size, rng=seed)
    test = image_patches(cfg["n_test"], size, rng=seed + 1)
    ae = TinyAutoencoder(width=cfg["ae_width"], seed=seed).fit(
        train, steps=cfg["ae_steps"], batch_size=32, lr=3e-3, seed=seed, progress=progress)
    with torch.no_grad():
        z_test = ae.encode(test)
        xhat = ae.decode(z_test)
        z_train = ae.encode(train)
    aug = A.Augmenter(AUG_OPS, num_augs=1, generator=seed + 1)
    wm = LatentWatermarker(ae, nbits=K, width=cfg["width"], extractor_pool=cfg["pool"], seed=seed)
    s0, s1 = cfg["schedule"]
    wm.fit(train, steps=cfg["wm_steps"], batch_size=32, lr=cfg["wm_lr"], lambda_adv=0.0,
           lambda_perc=cfg["lambda_perc"], scaling_schedule=("cosine", s0, s1), augmenter=aug,
           aug_start=cfg["aug_start"], seed=seed, progress=progress)
    m = torch.randint(0, 2, (len(test), K), generator=g).to(torch.float32)
    wrong = torch.randint(0, 2, (len(test), K), generator=g).to(torch.float32)
    xw = wm.embed(test, m)
    res: dict[str, Any] = {"config": cfg, "scaling": wm.scaling}
    res["ae_psnr"] = float(psnr(xhat, test).mean())
    res["bit_acc"] = _acc(wm, xw, m)
    res["bit_acc_wrong_key"] = _acc(wm, xw, wrong)
    res["bit_acc_clean"] = _acc(wm, xhat, m)
    res["psnr"] = float(psnr(xw, xhat).mean())
    res["ssim"] = float(ssim(xw, xhat).mean())
    n_wm = np.round(bit_accuracy(wm.extract(xw), m) * K).astype(int)
    n_clean = np.round(bit_accuracy(wm.extract(xhat), m) * K).astype(int)
    res["tpr_at_1pct"] = tpr_at_fpr(n_wm, K, 0.01)
    res["fpr_at_1pct"] = tpr_at_fpr(n_clean, K, 0.01)
    res["robustness"] = {name: _acc(wm, f(xw), m) for name, f in ATTACKS.items()}

    # decoder distillation with a fixed key
    key = random_message(K, generator=seed + 2)
    zw_test = watermark_latent_dataset(z_test, wm, key, scaling=wm.scaling)
    with torch.no_grad():
        target = ae.decode(zw_test)
    student = distill_decoder(ae.decoder, wm, key, z_train, scaling=wm.scaling,
                              steps=cfg["distill_steps"], lr=cfg["distill_lr"],
                              w_ext=cfg["distill_w_ext"], batch_size=32, seed=seed,
                              progress=progress)
    with torch.no_grad():
        x_student = student(z_test).clamp(0, 1)
    res["distill_l1_before"] = float((xhat - target).abs().mean())
    res["distill_l1_after"] = float((x_student - target).abs().mean())
    res["distill_bit_acc_before"] = _acc(wm, xhat, key)
    res["distill_bit_acc_after"] = _acc(wm, x_student, key)
    res["distill_bit_acc_teacher"] = _acc(wm, target, key)
    res["distill_psnr"] = float(psnr(x_student, xhat).mean())

    # generator distillation: latent DDPMs on watermarked vs clean latents
    def train_fn(latents: torch.Tensor) -> TinyLatentDDPM:
        return TinyLatentDDPM(ae.latent_channels, width=cfg["ddpm_width"], n_steps=cfg["ddpm_T"],
                              seed=seed).fit(latents, steps=cfg["ddpm_steps"], batch_size=64,
                                             seed=seed, progress=progress)

    hw = (size // 4, size // 4)
    gen_wm = cast(TinyLatentDDPM, distill_generator(train_fn, wm, key, z_train, scaling=wm.scaling))
    gen_clean = train_fn(z_train)
    with torch.no_grad():
        s_wm = ae.decode(gen_wm.sample(len(test), hw, generator=seed + 3)).clamp(0, 1)
        s_clean = ae.decode(gen_clean.sample(len(test), hw, generator=seed + 3)).clamp(0, 1)
    res["generator_bit_acc_wm"] = _acc(wm, s_wm, key)
    res["generator_bit_acc_clean"] = _acc(wm, s_clean, key)
    if out is not None:
        _figure(test, xhat, xw, x_student, s_wm, res, Path(out))
    return res


def _figure(x, xhat, xw, xs, samples, res, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = 6
    fig = plt.figure(figsize=(12, 6.5))
    gs = fig.add_gridspec(5, n, left=0.08, right=0.58, top=0.9, bottom=0.05, wspace=0.05,
                          hspace=0.1)
    rows = [("original x", x), ("x_hat = Dec(z)", xhat), ("x_w = Dec(z_w)", xw),
            ("|x_w - x_hat| x5", (5 * (xw - xhat).abs()).clamp(0, 1)),
            ("Dec'(z) (distilled)", xs)]
    for r, (name, imgs) in enumerate(rows):
        for c in range(n):
            ax = fig.add_subplot(gs[r, c])
            ax.imshow(imgs[c].permute(1, 2, 0).numpy(), interpolation="nearest")
            ax.set_xticks([])
            ax.set_yticks([])
            if c == 0:
                ax.set_ylabel(name, fontsize=7)
    ax = fig.add_axes((0.7, 0.1, 0.27, 0.78))
    names = list(res["robustness"])
    ax.barh(names, [res["robustness"][k] for k in names], color="tab:blue")
    ax.axvline(0.5, color="k", lw=0.8, ls="--")
    ax.set_xlim(0.4, 1.0)
    ax.invert_yaxis()
    ax.set_xlabel("bit accuracy (held-out patches)")
    ax.set_title(f"K={res['config']['nbits']} bits, PSNR {res['psnr']:.1f} dB vs x_hat", fontsize=9)
    fig.suptitle("DistSeal latent watermark (TinyAutoencoder, sample-image patches)")
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)


def format_table(result: dict[str, Any]) -> str:
    """The demo's numbers as a plain-text table.

    Examples
    --------
    >>> r = {"config": {"nbits": 8}, "scaling": 1.0, "ae_psnr": 20.0, "bit_acc": 0.9,
    ...      "bit_acc_wrong_key": 0.5, "bit_acc_clean": 0.5, "psnr": 30.0, "ssim": 0.9,
    ...      "tpr_at_1pct": 0.8, "fpr_at_1pct": 0.0, "robustness": {"none": 0.9},
    ...      "distill_l1_before": 0.1, "distill_l1_after": 0.01, "distill_bit_acc_before": 0.5,
    ...      "distill_bit_acc_after": 0.9, "distill_bit_acc_teacher": 0.9, "distill_psnr": 30.0,
    ...      "generator_bit_acc_wm": 0.8, "generator_bit_acc_clean": 0.5}
    >>> print(format_table(r).splitlines()[0])
    DistSeal (K=8 bits, s=1.00)
    """
    r = result
    lines = [
        f"DistSeal (K={r['config']['nbits']} bits, s={r['scaling']:.2f})",
        f"  autoencoder PSNR vs original      {r['ae_psnr']:7.2f} dB",
        f"  bit accuracy, key                 {r['bit_acc']:7.3f}",
        f"  bit accuracy, wrong key           {r['bit_acc_wrong_key']:7.3f}",
        f"  bit accuracy, clean images        {r['bit_acc_clean']:7.3f}",
        f"  PSNR / SSIM of x_w vs x_hat       {r['psnr']:7.2f} dB / {r['ssim']:.3f}",
        f"  TPR / FPR at nominal FPR 1%       {r['tpr_at_1pct']:7.3f} / {r['fpr_at_1pct']:.3f}",
        "  robustness (bit accuracy):",
    ]
    lines += [f"    {k:<18}              {v:7.3f}" for k, v in r["robustness"].items()]
    lines += [
        "  decoder distillation:",
        f"    L1 to Dec(z_w*) before / after  {r['distill_l1_before']:.4f} / {r['distill_l1_after']:.4f}",
        f"    bit acc Dec(z) / Dec'(z) / Dec(z_w*)  {r['distill_bit_acc_before']:.3f} / "
        f"{r['distill_bit_acc_after']:.3f} / {r['distill_bit_acc_teacher']:.3f}",
        f"    PSNR of Dec'(z) vs Dec(z)       {r['distill_psnr']:7.2f} dB",
        "  generator distillation (latent DDPM samples, bit acc with the key):",
        f"    trained on z_w* / on clean z    {r['generator_bit_acc_wm']:.3f} / "
        f"{r['generator_bit_acc_clean']:.3f}",
    ]
    return "\n".join(lines)
