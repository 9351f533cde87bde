"""Per-sample clipping: one private training step, rml_fast vs Opacus hooks and ghost clipping.

A step = forward, backward, per-sample norms, clipping, the clipped sum, Gaussian noise and
the parameter update (DP-SGD, same C and sigma on every side). Ours: ``DPC4Optimizer
(algorithm="dpsgd")`` (one backward w.r.t. layer outputs, ghost/instantiated norms by cost,
one row-scaled GEMM per layer, Philox noise). Peers: Opacus ``GradSampleModule`` +
``DPOptimizer`` (hooks: instantiated per-sample gradients) and Opacus ghost clipping
(``GradSampleModuleFastGradientClipping``: two backward passes). Also non-private SGD as
the memory baseline.

Cases: MLP (d=p=1024, B=256), small CNN (32x32, B=128), transformer block (S=128, d=256,
B=16), embedding bag (V=50k, S=64, B=64). ``--quick``: the MLP at d=p=256, B=64. A row
"dpc4 step" vs "rml_fast dpsgd" gives the cost of DP-C4's coupled two-pass step. On a
CUDA machine every case also runs on the GPU.

CPU memory columns: the training peak each side adds on top of the model and the batch,
measured in a fresh process per side (:func:`_probe`). ``python benchmarks/bench_clip.py
--interleaved`` prints best-of-N step times with the sides run in turn (robust to load on a
shared machine; :func:`interleaved`; options in :func:`_cli_interleaved`). Sides ``rml_fast
dpsgd low`` / ``recompute`` are the low-memory modes (``DPC4Optimizer(memory=...)``). The
spec's larger cases (ResNet-18 with GroupNorm at 32x32, B=128; a GPT-2-small-sized block,
d=768, S=128, B=8 and S=512, B=4) are opt-in: ``--large`` / ``RML_FAST_BENCH_LARGE=1``.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from rml_fast.benchmarking import Suite, import_skip_reason
from rml_fast.privacy.dp_c4 import DPC4Optimizer

SUITE = "clip"
SIGMA, C, LR = 1.0, 1.0, 0.01


class Block(nn.Module):
    """Pre-LN transformer block built from Linear/LayerNorm (supported by every side)."""

    def __init__(self, d: int, heads: int = 4) -> None:
        super().__init__()
        self.h = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.o = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.head = nn.Linear(d, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, S, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).reshape(B, S, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4)
        att = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(att.transpose(1, 2).reshape(B, S, d))
        x = x + self.fc2(torch.relu(self.fc1(self.ln2(x))))
        return self.head(x.mean(1))


class EmbedBag(nn.Module):
    def __init__(self, V: int, d: int) -> None:
        super().__init__()
        self.emb, self.fc = nn.Embedding(V, d), nn.Linear(d, 2)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.fc(self.emb(ids).mean(1))


class BasicBlock(nn.Module):
    """ResNet basic block with GroupNorm (BatchNorm couples the samples of a batch, so
    private training replaces it, as Opacus does)."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.gn1 = nn.GroupNorm(32, cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.gn2 = nn.GroupNorm(32, cout)
        self.short = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.GroupNorm(32, cout))
                      if stride != 1 or cin != cout else nn.Identity())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.gn1(self.conv1(x)))
        return torch.relu(self.gn2(self.conv2(h)) + self.short(x))


def resnet18_gn(classes: int = 10) -> nn.Module:
    """ResNet-18 for 32x32 inputs (CIFAR stem: one 3x3 conv, no max-pool), GroupNorm."""
    layers: list[nn.Module] = [nn.Conv2d(3, 64, 3, 1, 1, bias=False), nn.GroupNorm(32, 64), nn.ReLU()]
    cin = 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
        cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, classes)]
    return nn.Sequential(*layers)


# The spec's larger cases (specs/privacy.md 2.6), opt-in (seconds per step on two cores):
# ``--large`` for --interleaved, RML_FAST_BENCH_LARGE=1 for the harness.
LARGE = ["resnet18", "gpt2_block", "gpt2_block_s512"]


def _case(name: str, quick: bool) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    if name == "resnet18":
        model, B = resnet18_gn(), 128
        x = torch.randn(B, 3, 32, 32)
    elif name.startswith("gpt2_block"):  # GPT-2-small-sized block: d = 768, 12 heads
        S = 512 if name.endswith("s512") else 128
        model, B = Block(768, heads=12), 8 if S == 128 else 4
        x = torch.randn(B, S, 768)
    elif name == "mlp":
        d, B = (256, 64) if quick else (1024, 256)
        model = nn.Sequential(nn.Linear(d, d), nn.ReLU(), nn.Linear(d, d), nn.ReLU(), nn.Linear(d, 2))
        x = torch.randn(B, d)
    elif name == "cnn":
        model = nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 64, 3, stride=2, padding=1),
            nn.ReLU(), nn.Conv2d(64, 64, 3, stride=2, padding=1), nn.ReLU(), nn.Flatten(),
            nn.Linear(64 * 8 * 8, 2))
        B = 128
        x = torch.randn(B, 3, 32, 32)
    elif name == "transformer":
        model, B = Block(256), 16
        x = torch.randn(B, 128, 256)
    else:
        model, B = EmbedBag(50_000, 64), 64
        x = torch.randint(0, 50_000, (B, 64))
    return model, x, torch.randint(0, 2, (B,))


def _ours(model: nn.Module, x: torch.Tensor, y: torch.Tensor,
          algorithm: str = "dpsgd", memory: str = "fast") -> Callable[[], Any]:
    opt = DPC4Optimizer(model, lr=LR, noise_multiplier=SIGMA, expected_batch_size=x.shape[0],
                        anchor_clip=C, algorithm=algorithm, memory=memory, seed=0)
    loss = nn.CrossEntropyLoss()
    step = lambda: opt.step(loss, x, y)  # noqa: E731
    if algorithm == "dpc4":
        step()  # past t = 0, so every timed step runs the coupled (two-pass) update
    return step


def _nonprivate(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> Callable[[], Any]:
    opt = torch.optim.SGD(model.parameters(), lr=LR)

    def step() -> None:
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    return step


def _opacus_hooks(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> Callable[[], Any]:
    from opacus import GradSampleModule
    from opacus.optimizers import DPOptimizer

    gsm = GradSampleModule(model)
    opt = DPOptimizer(torch.optim.SGD(gsm.parameters(), lr=LR), noise_multiplier=SIGMA,
                      max_grad_norm=C, expected_batch_size=x.shape[0])

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(gsm(x), y).backward()
        opt.step()

    return step


def _opacus_ghost(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> Callable[[], Any]:
    from opacus.grad_sample import GradSampleModuleFastGradientClipping
    from opacus.optimizers import DPOptimizerFastGradientClipping
    from opacus.utils.fast_gradient_clipping_utils import DPLossFastGradientClipping

    gsm = GradSampleModuleFastGradientClipping(model, max_grad_norm=C, use_ghost_clipping=True)
    opt = DPOptimizerFastGradientClipping(
        torch.optim.SGD(gsm.parameters(), lr=LR), noise_multiplier=SIGMA, max_grad_norm=C,
        expected_batch_size=x.shape[0])
    crit = DPLossFastGradientClipping(gsm, opt, nn.CrossEntropyLoss(reduction="mean"))

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        crit(gsm(x), y).backward()
        opt.step()

    return step


_SIDES: dict[str, Callable[..., Callable[[], Any]]] = {}


def _probe(name: str, side: str, quick: bool) -> float:
    """Peak memory (MiB) that training steps add on top of the model and the batch.

    Run in a fresh process with a fixed mmap threshold (set by :func:`_peak_training_mb`),
    so that every large tensor is mapped on allocation and unmapped on free: the resident
    set then follows the live tensors. A throw-away copy of the same side first runs two
    steps (loading the BLAS/oneDNN code pages and lazy state, which are not training
    memory), then the resident set is the baseline, its high-water mark (``VmHWM``) is
    reset, and two steps of the measured side run: the growth counts gradients, optimizer
    state (momentum, ``x_{t-1}``), saved activations and every temporary.
    """
    import gc

    from rml_fast.benchmarking import _reset_peak_rss, _status_kib

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model, x, y = _case(name, quick)
        warm = _SIDES[side](copy.deepcopy(model), x, y)
        warm()
        warm()
        del warm
        gc.collect()
        base = _status_kib("VmRSS") or 0
        if not _reset_peak_rss():
            return float("nan")
        step = _SIDES[side](model, x, y)
        step()
        step()
        peak = _status_kib("VmHWM") or 0
    return max(peak - base, 0) / 1024


def _peak_training_mb(name: str, side: str, quick: bool) -> float | None:
    """:func:`_probe` in a subprocess (CPU only); None where it cannot run."""
    if sys.platform != "linux":
        return None
    code = (f"import sys; sys.path.insert(0, {str(Path(__file__).resolve().parent)!r}); import bench_clip as b; "
            f"print(b._probe({name!r}, {side!r}, {quick!r}))")
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": "0"}
    try:
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, timeout=600, check=True).stdout
        return float(json.loads(out.strip().splitlines()[-1]))
    except (subprocess.SubprocessError, ValueError, IndexError):
        return None


def _body(suite: Suite, case: dict[str, Any]) -> None:
    model, x, y = _case(case["model"], suite.quick)
    device = case.get("device", "cpu")
    model, x, y = model.to(device), x.to(device), y.to(device)
    try:
        import opacus  # noqa: F401

        peers = ["opacus hooks", "opacus ghost"]
        missing = ""
    except ImportError as exc:
        peers = []
        missing = import_skip_reason(exc)
    # CPU memory: each side's training peak in a fresh process (see _probe); on CUDA the
    # caching allocator's peak of one step (Suite's default)
    cpu = device == "cpu"
    # (not in --quick, which must stay well under a minute: each memory probe is a process)
    low_sides = [] if suite.quick else ["rml_fast dpsgd low", "rml_fast dpsgd recompute"]
    mem = {side: _peak_training_mb(case["model"], side, suite.quick) if cpu else None
           for side in ["non-private SGD", "rml_fast dpsgd", "rml_fast dpc4", *low_sides, *peers]}

    def compare(row_case: dict[str, Any], ours: Callable[[], Any], peer: Callable[[], Any],
                ours_side: str, peer_side: str) -> None:
        row = suite.compare(row_case, ours, peer, peer_name=peer_side, device=device,
                            memory=not cpu)
        if cpu:
            row["ours_peak_mb"], row["peer_peak_mb"] = mem[ours_side], mem[peer_side]
            row["memory"] = "training peak over model+batch, fresh process (bench_clip._probe)"

    ours = _ours(copy.deepcopy(model), x, y)
    compare(case, ours, _nonprivate(copy.deepcopy(model), x, y),
            "rml_fast dpsgd", "non-private SGD")
    # DP-C4's coupled step (two passes) against our own DP-SGD step: ratio = cost factor^-1
    compare({**case, "ours": "dpc4 step"}, _ours(copy.deepcopy(model), x, y, "dpc4"),
            ours, "rml_fast dpc4", "rml_fast dpsgd")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if peers:
            compare(case, ours, _opacus_hooks(copy.deepcopy(model), x, y),
                    "rml_fast dpsgd", "opacus hooks")
            compare(case, ours, _opacus_ghost(copy.deepcopy(model), x, y),
                    "rml_fast dpsgd", "opacus ghost")
        else:
            for name in ("opacus hooks", "opacus ghost"):
                suite.skip(case, peer_name=name, reason=missing, device=device)
    # the low-memory modes (two backwards, like Opacus ghost) against non-private training,
    # whose memory they match, and against Opacus ghost
    for side in low_sides:
        mine = _SIDES[side](copy.deepcopy(model), x, y)
        row_case = {**case, "ours": side.removeprefix("rml_fast ")}
        compare(row_case, mine, _nonprivate(copy.deepcopy(model), x, y), side, "non-private SGD")
        if peers:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                compare(row_case, mine, _opacus_ghost(copy.deepcopy(model), x, y),
                        side, "opacus ghost")
        else:
            suite.skip(row_case, peer_name="opacus ghost", reason=missing, device=device)


_SIDES.update({
    "rml_fast dpsgd": _ours,
    "rml_fast dpc4": lambda m, x, y: _ours(m, x, y, "dpc4"),
    "rml_fast dpsgd low": lambda m, x, y: _ours(m, x, y, memory="low"),
    "rml_fast dpc4 low": lambda m, x, y: _ours(m, x, y, "dpc4", memory="low"),
    "rml_fast dpsgd recompute": lambda m, x, y: _ours(m, x, y, memory="recompute"),
    "non-private SGD": _nonprivate,
    "opacus hooks": _opacus_hooks,
    "opacus ghost": _opacus_ghost,
})


def run(*, quick: bool = False, progress: bool = True, repeat: int = 5) -> Suite:
    names = ["mlp"] if quick else ["mlp", "cnn", "transformer", "embedding"]
    if not quick and os.environ.get("RML_FAST_BENCH_LARGE") == "1":
        names += LARGE
    cases: list[dict[str, Any]] = [{"model": n} for n in names]
    if torch.cuda.is_available():  # the GPU section: the same cases on CUDA (Triton kernels)
        cases += [{"model": n, "device": "cuda"} for n in names]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return Suite(SUITE, quick=quick, progress=progress, repeat=repeat).run(cases, _body)


def interleaved(names: list[str], *, rounds: int = 7, quick: bool = False,
                sides: tuple[str, ...] = ("rml_fast dpsgd", "rml_fast dpc4", "non-private SGD",
                                          "opacus hooks", "opacus ghost")) -> list[dict[str, Any]]:
    """Best-of-``rounds`` step times with the sides run in turn (ours, peers, ours, ...).

    On a shared machine a load burst during one side's consecutive runs skews a median
    ratio; interleaving exposes every side to the same load, and the minimum is the run
    least disturbed by it. Returns one row per case: seconds per side and ``peer/ours``.
    """
    import time

    rows = []
    for name in names:
        model, x, y = _case(name, quick)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            steps = {s: _SIDES[s](copy.deepcopy(model), x, y) for s in sides}
            best = dict.fromkeys(steps, float("inf"))
            for f in steps.values():
                f()
            for _ in range(rounds):
                for s, f in steps.items():
                    t0 = time.perf_counter()
                    f()
                    best[s] = min(best[s], time.perf_counter() - t0)
        ours = best[sides[0]]
        rows.append({"model": name, "threads": torch.get_num_threads(), "best_s": best,
                     "ratio_vs_ours": {s: v / ours for s, v in best.items()}})
    return rows


def _cli_interleaved(argv: list[str]) -> None:
    """``--interleaved [--quick] [--large] [--cases a,b] [--sides s1,s2] [--rounds N]
    [--memory]``: best-of-N interleaved step times (and, with --memory, the fresh-process
    peak of each side)."""

    def opt(name: str) -> str | None:
        return argv[argv.index(name) + 1] if name in argv else None

    quick = "--quick" in argv
    names = ["mlp"] if quick else ["mlp", "cnn", "transformer", "embedding"]
    if "--large" in argv:
        names = LARGE
    if opt("--cases"):
        names = opt("--cases").split(",")  # type: ignore[union-attr]
    kwargs: dict[str, Any] = {"quick": quick, "rounds": int(opt("--rounds") or 7)}
    if opt("--sides"):
        kwargs["sides"] = tuple(opt("--sides").split(","))  # type: ignore[union-attr]
    for name in names:
        row = interleaved([name], **kwargs)[0]
        if "--memory" in argv:
            row["peak_mb"] = {s: _peak_training_mb(name, s, quick) for s in row["best_s"]}
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    if "--interleaved" in sys.argv:  # python benchmarks/bench_clip.py --interleaved [--quick]
        _cli_interleaved(sys.argv[1:])
        raise SystemExit(0)
    from run_all import main

    raise SystemExit(main(sys.argv[1:], suite=SUITE))
