"""GTM end to end on the offline toy VLM: train, attack, defend (``rml-fast demo security gtm``).

1. :func:`~rml_fast.models.digits_vlm.train_digits_vlm` trains the TinyVLM (16 image tokens)
   to answer "what digit is this ?" on scikit-learn's digits (seconds to a minute on a CPU).
2. :func:`~rml_fast.security.gtm.image_hijack_pgd` attacks held-out images whose digit is not 7
   with the target response "seven <eos>": an 8 x 8 patch (4 of the 16 image tokens) and an
   L-infinity ball of radius 64/255 over the whole image, over the four prompt templates.
3. :class:`~rml_fast.security.gtm.GTMDefense` masks ``r`` % of the image tokens with the
   target position ``"first_text"`` (the reference code's) or ``"last"`` (**PROPOSED**); the
   table reports clean accuracy on the whole held-out split and the attack success rate (prefix
   match, prompt 0) for each ``r``, and the Spearman correlation of HSGN with the attacker's
   gradient norms.

Run ``python -m rml_fast.security.demo [--quick] [--out gtm.png]``.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import torch

from rml_fast.models.digits_vlm import (
    PROMPTS,
    TinyVLM,
    digit_of_token,
    digits_vlm_images,
    digits_vlm_split,
    train_digits_vlm,
)
from rml_fast.security.gtm import (
    GTMDefense,
    TinyVLMAdapter,
    attack_success_rate,
    image_hijack_pgd,
    ranking_consistency,
)

__all__ = [
    "RATES",
    "TARGET",
    "TARGETS",
    "format_table",
    "main",
    "run",
]

TARGET = "seven <eos>"
RATES = (0.0, 6.25, 12.5, 25.0)
TARGETS = ("first_text", "last")


def run(
    *,
    seed: int = 0,
    quick: bool = False,
    out: str | None = None,
    progress: bool = True,
    model: TinyVLM | None = None,
) -> dict[str, Any]:
    """Train (unless ``model`` is given), attack and defend; returns the measured numbers.

    Parameters
    ----------
    seed : int, default=0
        Seeds the training, the image choice and the attack.
    quick : bool, default=False
        300 training steps, 8 attacked images, 160 attack steps, the patch attack only
        (full: 600 steps, 32 images, 400 attack steps, both attacks).
    out : str, optional
        PNG path for the figure (matplotlib).
    progress : bool, default=True
    model : TinyVLM, optional
        A trained model to use instead of training one.

    Returns
    -------
    dict
        ``clean_accuracy[target][rate]``, ``asr[attack][target][rate]``,
        ``spearman[attack][target]``, ``in_patch_fraction[target][rate]`` (share of the masked
        tokens that overlap the patch), ``random_mask_1_asr_patch`` (control: one random token
        masked), ``n_attacked``, ``n_clean``, ``rates``.

    Examples
    --------
    >>> res = run(quick=True, progress=False, model=TinyVLM(seed=0))   # untrained: fast
    >>> sorted(res["asr"]), sorted(res["clean_accuracy"])
    (['patch'], ['first_text', 'last'])
    """
    if model is None:
        trained = train_digits_vlm(steps=300 if quick else 600, seed=seed, progress=progress)
        model = trained.model
    elif not isinstance(model, TinyVLM):
        raise TypeError(f"model must be a TinyVLM or None, got {type(model).__name__}")
    ad = TinyVLMAdapter(model)
    x, y = digits_vlm_images(model.cfg.image_size)
    _, te = digits_vlm_split(seed)
    n_att = 8 if quick else 32
    sel = te[y[te] != 7][:n_att]
    xs = x[sel]
    gen = torch.Generator().manual_seed(seed)
    attacks: dict[str, dict[str, Any]] = {"patch": {"patch": "s8", "alpha": 0.05}}
    if not quick:
        attacks["linf64"] = {"eps": 64 / 255, "alpha": 2 / 255}
    steps = 160 if quick else 400

    clean_inp = ad.prepare(x[te], PROMPTS[0])
    clean: dict[str, dict[float, float]] = {}
    for tgt in TARGETS:
        clean[tgt] = {}
        for rate in RATES:
            first = GTMDefense(rate, target=tgt).generate(ad, clean_inp, 1)[:, 0]
            clean[tgt][rate] = float((digit_of_token(first) == y[te]).float().mean())

    asr: dict[str, dict[str, dict[float, float]]] = {}
    rho: dict[str, dict[str, float]] = {}
    advs: dict[str, torch.Tensor] = {}
    in_patch: dict[str, dict[float, float]] = {}
    patch_tokens = _patch_tokens(model, 8)
    for name, kw in attacks.items():
        adv = image_hijack_pgd(ad, xs, list(PROMPTS), TARGET, steps=steps, accum=4,
                               generator=gen, progress=progress, **kw)
        advs[name] = adv
        inp = ad.prepare(adv, PROMPTS[0])
        asr[name], rho[name] = {}, {}
        for tgt in TARGETS:
            asr[name][tgt] = {}
            if name == "patch":
                in_patch[tgt] = {}
            for rate in RATES:
                gtm = GTMDefense(rate, target=tgt)
                emb, idx = gtm.defend(ad, inp, return_indices=True)
                ids = ad.generate_from_embeds(inp, emb, 2)
                asr[name][tgt][rate] = attack_success_rate([ad.decode(r) for r in ids], "seven")
                if name == "patch" and idx.numel():
                    hits = sum(i in patch_tokens for i in idx.flatten().tolist())
                    in_patch[tgt][rate] = hits / idx.numel()
            rc = ranking_consistency(ad, ad.prepare(adv, PROMPTS[0], TARGET), target=tgt, k=2)
            rho[name][tgt] = rc["spearman"]
    # control: mask one random image token per image instead of the top-HSGN one (5 draws)
    inp = ad.prepare(advs["patch"], PROMPTS[0])
    control = []
    for _ in range(5):
        with torch.no_grad():
            e = ad.image_embeds(inp)
            for b in range(e.shape[0]):
                e[b, torch.randperm(e.shape[1], generator=gen)[:1]] = 0.0
            ids = ad.generate_from_embeds(inp, ad.splice(inp, e), 2)
        control.append(attack_success_rate([ad.decode(r) for r in ids], "seven"))
    result = {
        "random_mask_1_asr_patch": sum(control) / len(control),
        "in_patch_fraction": in_patch,
        "clean_accuracy": clean,
        "asr": asr,
        "spearman": rho,
        "n_attacked": len(sel),
        "n_clean": len(te),
        "rates": list(RATES),
    }
    if out is not None:
        _figure(result, ad, xs, advs["patch"], out)
    return result


def _patch_tokens(model: TinyVLM, size: int) -> set[int]:
    """Indices of the image tokens overlapping a bottom-right ``size`` x ``size`` patch."""
    p, side = model.cfg.patch, model.cfg.image_size
    g = side // p
    lo = (side - size) // p
    return {r * g + c for r in range(lo, g) for c in range(lo, g)}


def _figure(result: dict[str, Any], ad: TinyVLMAdapter, xs: torch.Tensor, adv: torch.Tensor,
            out: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rates = result["rates"]
    fig, axes = plt.subplots(1, 4, figsize=(14, 3.4), gridspec_kw={"width_ratios": [2.2, 1, 1, 1]})
    ax = axes[0]
    for tgt, style in (("first_text", "--"), ("last", "-")):
        ax.plot(rates, [result["clean_accuracy"][tgt][r] for r in rates], "o" + style,
                color="tab:green", label=f"clean accuracy ({tgt})")
        for att, color in (("patch", "tab:red"), ("linf64", "tab:purple")):
            if att in result["asr"]:
                ax.plot(rates, [result["asr"][att][tgt][r] for r in rates], "s" + style,
                        color=color, label=f"ASR {att} ({tgt})")
    ax.set_xlabel("mask rate r (%) of 16 image tokens")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title("TinyVLM: GTM vs image hijack")
    ax.legend(fontsize=6.5, loc="center right")
    gtm = GTMDefense(6.25, target="last")
    inp = ad.prepare(adv, PROMPTS[0])
    scores = gtm.scores(ad, inp)
    top = scores.argmax(1).tolist()
    patch = _patch_tokens(ad.model, 8)
    j = next((b for b, i in enumerate(top) if i in patch), 0)  # an image where GTM hits the patch
    s = scores[j]
    idx = torch.tensor([[top[j]]])
    xs, adv = xs[j : j + 1], adv[j : j + 1]
    g = round(s.numel() ** 0.5)
    axes[1].imshow(xs[0, 0].numpy(), cmap="gray", vmin=0, vmax=1)
    axes[1].set_title("clean")
    axes[2].imshow(adv[0, 0].numpy(), cmap="gray", vmin=0, vmax=1)
    axes[2].set_title('patch attack -> "seven"')
    axes[3].imshow(s.view(g, g).numpy(), cmap="magma")
    for i in idx[0].tolist():
        axes[3].add_patch(plt.Rectangle((i % g - 0.5, i // g - 0.5), 1, 1, fill=False,
                                        edgecolor="cyan", linewidth=2))
    axes[3].set_title("HSGN (target last), masked")
    for a in axes[1:]:
        a.set_xticks([])
        a.set_yticks([])
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


def format_table(result: dict[str, Any]) -> str:
    """The result of :func:`run` as a plain-text table.

    Examples
    --------
    >>> res = {"rates": [0.0], "clean_accuracy": {"last": {0.0: 0.97}},
    ...        "asr": {"patch": {"last": {0.0: 0.8}}}, "spearman": {"patch": {"last": 0.8}},
    ...        "n_attacked": 8, "n_clean": 449}
    >>> print(format_table(res).splitlines()[1])
    target      r (%)  clean acc  ASR patch
    """
    rates = result["rates"]
    attacks = list(result["asr"])
    lines = [
        f"GTM on TinyVLM: clean accuracy on {result['n_clean']} held-out digits, attack success "
        f"(prefix 'seven') on {result['n_attacked']} attacked images",
        f"{'target':<10}  {'r (%)':>5}  {'clean acc':>9}" + "".join(f"  {'ASR ' + a:>10}" for a in attacks),
    ]
    for tgt in result["clean_accuracy"]:
        for r in rates:
            row = f"{tgt:<10}  {r:>5.2f}  {result['clean_accuracy'][tgt][r]:>9.3f}"
            row += "".join(f"  {result['asr'][a][tgt][r]:>10.3f}" for a in attacks)
            lines.append(row)
    if result.get("in_patch_fraction"):
        lines.append(
            "fraction of masked tokens inside the patch: "
            + ", ".join(f"{t} r={r:g}: {v:.2f}" for t, d in result["in_patch_fraction"].items()
                        for r, v in d.items())
        )
    if "random_mask_1_asr_patch" in result:
        lines.append(f"control, one random token masked: ASR patch {result['random_mask_1_asr_patch']:.3f}")
    lines.append(
        "Spearman(HSGN, attacker gradient norms): "
        + ", ".join(f"{a}/{t}: {v:.2f}" for a in attacks for t, v in result["spearman"][a].items())
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry: ``python -m rml_fast.security.demo [--quick] [--out PNG]``."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    print(format_table(run(seed=a.seed, quick=a.quick, out=a.out)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
