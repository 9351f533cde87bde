"""Preference objectives: rml_fast's fused loss + incentive-score decomposition vs TRL's DPO loss.

Two levels, forward + backward each time (the step a trainer takes):

``logits``
    Policy logits of shape (2B, T, V) (chosen and rejected halves) with fixed reference
    log-probs. Ours: :func:`~rml_fast.alignment.preference.sequence_logps` +
    :func:`~rml_fast.alignment.preference.preference_step` (the DPO loss *and* the analytic
    incentives ``d_w, d_l``, ``r`` and ``log r``). Peer: TRL's ``selective_log_softmax`` and
    its ``sigmoid`` (DPO) loss formula (TRL 1.16 computes the loss inline in
    ``DPOTrainer._compute_loss``; the formula is copied as TRL writes it).
``trainer``
    A small random Llama (no download) and one padded TRL batch: ``trl.DPOTrainer.compute_loss``
    (``loss_type="sigmoid"``) vs ``PreferenceDPOTrainer.compute_loss`` on the same model and
    batch, with the decomposition only (``dpo``), with the band diagnostic (two extra
    head-restricted backward passes), with reward calibration (``dpo+rc``) and with RC refreshing
    its score norms every 4 steps (``rc_every=4``, PROPOSED).

A ratio > 1 means ours is faster; ~1 means the diagnostic is free. Rows skip when ``trl``
(the ``alignment`` extra) is missing. ``--quick``: one small size per level.

``python benchmarks/bench_alignment.py --interleaved [--quick] [--rounds N]`` times the trainer
level with the sides run in turn, round after round (robust to load on a shared machine), and
adds the band diagnostic through ``autograd.grad`` (``fast_geometry=False``) for comparison.
"""

from __future__ import annotations

import copy
import statistics
import tempfile
import time
import warnings
from typing import Any

import torch
import torch.nn.functional as F

from rml_fast.alignment.preference import preference_step, sequence_logps
from rml_fast.benchmarking import Suite, import_skip_reason

SUITE = "alignment"
BETA = 0.1


def _logits_case(suite: Suite, case: dict[str, Any]) -> None:
    try:
        from trl.trainer.utils import selective_log_softmax
    except ImportError as exc:
        suite.skip(case, peer_name="TRL sigmoid loss", reason=import_skip_reason(exc))
        return
    b, t, v = case["B"], case["T"], case["V"]
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2 * b, t, v, generator=g).requires_grad_(True)
    labels = torch.randint(0, v, (2 * b, t), generator=g)
    mask = torch.rand(2 * b, t, generator=g) < 0.8
    ref = -torch.rand(2 * b, generator=g) * t * 5

    def ours() -> None:
        logits.grad = None
        logps = sequence_logps(logits, labels, mask)
        zw, zl = logps.chunk(2)
        rw, rl = ref.chunk(2)
        out = preference_step("dpo", zw, zl, rw, rl, beta=BETA)
        out.loss.backward()

    def peer() -> None:
        logits.grad = None
        per_token = selective_log_softmax(logits, labels) * mask
        logps = per_token.sum(1)
        zw, zl = logps.chunk(2)
        rw, rl = ref.chunk(2)
        loss = -F.logsigmoid(BETA * ((zw - rw) - (zl - rl))).mean()
        loss.backward()

    suite.compare(case, ours, peer, peer_name="TRL selective_log_softmax + sigmoid loss")


def _tiny_trl(hidden: int, vocab: int, layers: int, n: int, prompt: int, resp: int) -> Any:
    from datasets import Dataset
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
    from trl import DPOConfig, DPOTrainer

    from rml_fast.alignment.trl_dpo import preference_dpo_trainer_class

    words = [f"w{i}" for i in range(vocab - 3)]
    vmap = {"<pad>": 0, "<eos>": 1, "<unk>": 2, **{w: i + 3 for i, w in enumerate(words)}}
    tk = Tokenizer(models.WordLevel(vmap, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=tk, eos_token="<eos>", pad_token="<pad>", unk_token="<unk>"
    )
    g = torch.Generator().manual_seed(0)

    def text(k: int) -> str:
        return " ".join(words[j] for j in torch.randint(0, len(words), (k,), generator=g).tolist())

    ds = Dataset.from_list(
        [{"prompt": text(prompt), "chosen": " " + text(resp), "rejected": " " + text(resp)}
         for _ in range(n)]
    )
    cfg = LlamaConfig(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=4 * hidden,
        num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=4,
        max_position_embeddings=prompt + resp + 8, tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg)
    ref = copy.deepcopy(model)
    out_dir = tempfile.mkdtemp(prefix="bench_alignment_")

    def args() -> Any:
        return DPOConfig(
            output_dir=out_dir, per_device_train_batch_size=n, report_to=[], use_cpu=True,
            save_strategy="no", disable_tqdm=True, bf16=False, beta=BETA, max_steps=1,
        )

    peer = DPOTrainer(model=model, ref_model=ref, args=args(), train_dataset=ds,
                      processing_class=tok)
    cls = preference_dpo_trainer_class()
    variants = {
        "dpo": cls(model=model, ref_model=ref, args=args(), train_dataset=ds,
                   processing_class=tok, preference_loss="dpo"),
        "dpo+band": cls(model=model, ref_model=ref, args=args(), train_dataset=ds,
                        processing_class=tok, preference_loss="dpo", band_diagnostic=True),
        "dpo+rc": cls(model=model, ref_model=ref, args=args(), train_dataset=ds,
                      processing_class=tok, preference_loss="dpo", reward_calibration=True),
        "dpo+rc every 4": cls(model=model, ref_model=ref, args=args(), train_dataset=ds,
                              processing_class=tok, preference_loss="dpo",
                              reward_calibration=True, rc_every=4),
    }
    batch = next(iter(peer.get_train_dataloader()))
    return model, peer, variants, batch


def _trainer_case(suite: Suite, case: dict[str, Any]) -> None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model, peer, variants, batch = _tiny_trl(
                case["hidden"], case["V"], case["layers"], case["B"], case["prompt"], case["resp"]
            )
    except ImportError as exc:
        for name in ("dpo", "dpo+band", "dpo+rc", "dpo+rc every 4"):
            suite.skip({**case, "ours": name}, peer_name="TRL DPOTrainer (sigmoid)",
                       reason=import_skip_reason(exc))
        return

    def step(trainer: Any) -> Any:
        def fn() -> None:
            model.zero_grad(set_to_none=True)
            trainer.compute_loss(model, batch).backward()

        return fn

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, ours in variants.items():
            suite.compare({**case, "ours": name}, step(ours), step(peer),
                          peer_name="TRL DPOTrainer (sigmoid)", memory=False)


def interleaved(*, quick: bool = False, rounds: int = 15) -> list[dict[str, Any]]:
    """Trainer-level step times with every side run once per round; returns one row per side.

    Each row: ``side``, ``median_s``, ``min_s`` and ``ratio`` (TRL median / side median).
    """
    case = _cases(quick)[-1]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model, peer, variants, batch = _tiny_trl(
            case["hidden"], case["V"], case["layers"], case["B"], case["prompt"], case["resp"]
        )
        cls = type(variants["dpo"])
        auto = cls.__new__(cls)
        auto.__dict__.update(variants["dpo+band"].__dict__)
        auto._closed_form = False  # the band through two autograd.grad calls
        sides = {"TRL DPOTrainer": peer, **variants, "dpo+band (autograd)": auto}

        def step(trainer: Any) -> None:
            model.zero_grad(set_to_none=True)
            trainer.compute_loss(model, batch).backward()

        times: dict[str, list[float]] = {k: [] for k in sides}
        for trainer in sides.values():
            step(trainer)
        for _ in range(rounds):
            for name, trainer in sides.items():
                t0 = time.perf_counter()
                step(trainer)
                times[name].append(time.perf_counter() - t0)
    base = statistics.median(times["TRL DPOTrainer"])
    return [
        {"side": k, "median_s": statistics.median(v), "min_s": min(v),
         "ratio": base / statistics.median(v)}
        for k, v in times.items()
    ]


def _cases(quick: bool) -> list[dict[str, Any]]:
    if quick:
        return [
            {"level": "logits", "B": 2, "T": 64, "V": 2048},
            {"level": "trainer", "hidden": 64, "layers": 1, "V": 512, "B": 4, "prompt": 16,
             "resp": 16},
        ]
    return [
        {"level": "logits", "B": 4, "T": 128, "V": 8192},
        {"level": "logits", "B": 4, "T": 256, "V": 32000},
        {"level": "trainer", "hidden": 256, "layers": 2, "V": 8192, "B": 8, "prompt": 32,
         "resp": 32},
    ]


def _body(suite: Suite, case: dict[str, Any]) -> None:
    (_logits_case if case["level"] == "logits" else _trainer_case)(suite, case)


def run(*, quick: bool = False, progress: bool = True, repeat: int = 5) -> Suite:
    cases = _cases(quick)
    return Suite(SUITE, quick=quick, progress=progress, repeat=repeat).run(cases, _body)


if __name__ == "__main__":  # python benchmarks/bench_alignment.py [--quick] [--out DIR] ...
    import sys

    if "--interleaved" in sys.argv[1:]:
        argv = sys.argv[1:]
        n = int(argv[argv.index("--rounds") + 1]) if "--rounds" in argv else 15
        for row in interleaved(quick="--quick" in argv, rounds=n):
            print(f"{row['side']:24s} median {row['median_s'] * 1e3:8.1f} ms  "
                  f"min {row['min_s'] * 1e3:8.1f} ms  TRL/ours {row['ratio']:.2f}x")
        raise SystemExit(0)

    from run_all import main

    raise SystemExit(main(sys.argv[1:], suite=SUITE))
