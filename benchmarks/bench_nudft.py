"""Set-Fourier convolution layer, forward + backward on CPU: rml_fast's NUDFT kernels vs the
same layer on other transforms.

Providers (all compute the same SFConv layer, float32, 2-D inputs via the same grid):

* ours: ``SetFourierConv(backend="auto")``: per transform the C++ direct sums (no
  ``(B, N, F)`` phases) or the C++/FFT NUFFT path where its cost model predicts a win (from
  ~27 points per set on the default 1-D grid in float32, ~370 on the 2-D image grid), and the split
  spectral product (one fused autograd node for the blocked group layout) (envelope folded into the filter, rank-one density term); in the
  ``direct_too`` cases also against our own direct sums (``backend="native"``);
* einsum: ``backend="reference"``, the reference code's strategy (materialised phases, the
  ``2C``-channel embedding and plane-wise spectral product);
* pytorch-finufft: the transforms by ``pytorch_finufft.functional.finufft_type1/2``
  (exact to 1e-6, points batched by a Python loop), if installed; the rest of the layer is
  ours (split product), so the ratio isolates the transforms;
* torchkbnufft: ``KbNufftAdjoint`` / ``KbNufft`` (batched trajectories, Kaiser-Bessel
  interpolation, ~1e-3 accurate), if installed, likewise;
* scaling cases: a TNP-style self-attention layer over the context (``scaled_dot_product_attention``),
  quadratic in ``N``, against our linear-in-``N`` layer.

Sizes (spec np_alignment §1.6): 1-D ``B=64, F=50, G=4``, ``N in {50, 500, 5000}``,
``M in {128, 1000}``, ``C in {128, 288}``; 2-D ``B=16, N in {256, 1024}, M=1024, F=1225, C=256,
G=128``. ``--quick``: the smallest 1-D case (``B=16``) against einsum and torchkbnufft only.

The harness times one side after the other with glibc's mmap threshold fixed at 32 MiB (no
page faults on re-allocated tensors; the einsum layer's time otherwise depends on the process's
allocation history), then measures the peak memory of one call of each side with a 128 KiB
threshold (every large tensor mapped on allocation, so the resident-set growth is the peak;
until round 4 the timings also ran under that setting, which made both sides page-fault). The
docs table comes from ``benchmarks/nudft_alternate.py``, which alternates the providers round
by round.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from rml_fast.benchmarking import Suite, missing_peer, peak_memory_mb
from rml_fast.kernels.nudft import FrequencyGrid
from rml_fast.neural_processes.sfconv import SetFourierConv

SUITE = "nudft"


# --- peer transforms behind the NUDFTPlan interface ------------------------------------------


def _wrap(theta: torch.Tensor) -> torch.Tensor:
    return torch.remainder(theta + math.pi, 2 * math.pi) - math.pi


def _hermitian_full(H: torch.Tensor, grid: FrequencyGrid) -> torch.Tensor:
    """Half-space spectrum (..., F) -> full (..., 2K0+1[, 2K1+1]) with the type-2 weights folded in."""
    if grid.dim == 1:
        neg = H[..., 1:].flip(-1).conj()
        zero = H[..., :1].real.to(H.dtype)
        return torch.cat([neg, zero, H[..., 1:]], dim=-1)
    K0, K1 = grid.K
    H = H.reshape(*H.shape[:-1], 2 * K0 + 1, K1 + 1)
    neg = H[..., 1:].flip(-1).flip(-2).conj()
    zero = 0.5 * (H[..., :1] + H[..., :1].flip(-2).conj())
    return torch.cat([neg, zero, H[..., 1:]], dim=-1)


class _PeerPlan:
    """Duck-types :class:`rml_fast.kernels.nudft.NUDFTPlan` with a peer's type-1/type-2."""

    def __init__(self, grid: FrequencyGrid, x_kv: torch.Tensor, x_q: torch.Tensor) -> None:
        self.grid, self.x_kv, self.x_q = grid, x_kv, x_q
        res = torch.tensor(grid.resolution, dtype=x_kv.dtype)
        self._theta = {"kv": _wrap(2 * math.pi * x_kv * res), "q": _wrap(2 * math.pi * x_q * res)}
        K = grid.K
        self.modes = tuple(2 * k + 1 for k in K)

    def _keep_half(self, full: torch.Tensor) -> torch.Tensor:  # (..., modes) -> (..., F)
        if self.grid.dim == 1:
            return full[..., self.grid.K[0] :]
        return full[..., self.grid.K[1] :].flatten(-2)

    def type1(self, v: torch.Tensor, *, density: bool = True):
        vals = (
            torch.cat([v, torch.ones_like(v[..., :1])], dim=-1).transpose(1, 2).to(torch.complex64)
        )
        full = self._t1(self._theta["kv"], vals)  # (B, C+1, modes)
        half = self._keep_half(full).transpose(1, 2)  # (B, F, C+1)
        return half[..., :-1], half[..., -1]

    def type1_planes(self, v: torch.Tensor, *, density: bool = True):
        Z, D = self.type1(v)
        return Z.real, Z.imag, D.real, D.imag

    def type2_planes(self, re: torch.Tensor, im: torch.Tensor, at: str = "q") -> torch.Tensor:
        return self.type2(torch.complex(re, im), at)

    def type2(self, yhat: torch.Tensor, at: str = "q") -> torch.Tensor:
        full = _hermitian_full(yhat.transpose(1, 2), self.grid) * self.grid.dV  # (B, O, modes)
        return self._t2(self._theta[at], full.contiguous()).real.transpose(1, 2)


class _FinufftPlan(_PeerPlan):
    def _t1(self, theta, vals):
        from pytorch_finufft.functional import finufft_type1

        out = [
            finufft_type1(
                theta[b].T.contiguous(), vals[b].contiguous(), self.modes, isign=-1, modeord=0
            )
            for b in range(theta.shape[0])
        ]
        return torch.stack(out)

    def _t2(self, theta, full):
        from pytorch_finufft.functional import finufft_type2

        out = [
            finufft_type2(theta[b].T.contiguous(), full[b], isign=1, modeord=0)
            for b in range(theta.shape[0])
        ]
        return torch.stack(out)


class _KbPlan(_PeerPlan):
    def __init__(self, grid, x_kv, x_q):
        super().__init__(grid, x_kv, x_q)
        import torchkbnufft as tkbn

        grid_size = tuple(2 * m for m in self.modes)
        self.adj = tkbn.KbNufftAdjoint(im_size=self.modes, grid_size=grid_size)
        self.fwd = tkbn.KbNufft(im_size=self.modes, grid_size=grid_size)

    def _t1(self, theta, vals):
        # torchkbnufft's adjoint is sum_n data e^{+i omega.n}: pass omega = -theta
        return self.adj(vals, -theta.transpose(1, 2).contiguous())

    def _t2(self, theta, full):
        return self.fwd(full, -theta.transpose(1, 2).contiguous())


# --- the timed bodies --------------------------------------------------------------------------


def _layer(case: dict[str, Any], backend: str) -> SetFourierConv:
    torch.manual_seed(0)
    d = case["d"]
    mf, res = (4.9, 0.1) if d == 1 else (4.8, 0.2)
    return SetFourierConv(d, case["C"], case["C"], mf, res, groups=case["G"], backend=backend)


def _inputs(case: dict[str, Any]):
    g = torch.Generator().manual_seed(1)
    B, N, M, C, d = case["B"], case["N"], case["M"], case["C"], case["d"]
    lo, hi = (-3.0, 3.0) if d == 1 else (-1.5, 1.5)
    xc = torch.rand(B, N, d, generator=g) * (hi - lo) + lo
    xq = torch.rand(B, M, d, generator=g) * (hi - lo) + lo
    z = torch.randn(B, N, C, generator=g).requires_grad_()
    return xc, xq, z


def _step(layer: SetFourierConv, xc, xq, z, plan_cls=None):
    def run() -> None:
        layer.zero_grad(set_to_none=True)
        z.grad = None
        plan = None if plan_cls is None else plan_cls(layer.grid, xc, xq)
        layer(z, xq, xc, plan).square().mean().backward()

    return run


def _check_peer(ours: SetFourierConv, peer: SetFourierConv, xc, xq, z, plan_cls) -> str:
    with torch.no_grad():
        a = ours(z[:2], xq[:2], xc[:2])
        b = peer(z[:2], xq[:2], xc[:2], plan_cls(peer.grid, xc[:2], xq[:2]))
    return f"max rel. diff of outputs vs ours {float((a - b).abs().max() / a.abs().max()):.1e}"


def _mallopt(mmap_threshold: int, trim_threshold: int, trim: bool = False) -> None:
    """Fix glibc's mmap and trim thresholds, and with ``trim`` hand the heap's free pages back
    to the OS (``malloc_trim``) so that blocks reused from the heap count again when touched
    (no-op elsewhere)."""
    import contextlib
    import ctypes
    import sys

    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):  # not glibc
            libc = ctypes.CDLL("libc.so.6")
            libc.mallopt(-3, mmap_threshold)  # M_MMAP_THRESHOLD
            libc.mallopt(-1, trim_threshold)  # M_TRIM_THRESHOLD
            if trim:
                libc.malloc_trim(0)


def _timing_malloc() -> None:
    """Timing: blocks below 32 MiB come from the heap and stay there, so repeated calls do not
    page-fault on fresh mmaps (glibc's default dynamic threshold made the einsum layer's time
    depend on the allocation history of the process; this setting is its fastest)."""
    _mallopt(32 * 2**20, 2**30)


def _memory_malloc() -> None:
    """Peak memory: with a 128 KiB threshold every large tensor is mapped on allocation and
    returned on free, so the growth of the resident set during one call is its peak."""
    _mallopt(128 * 2**10, 128 * 2**10, trim=True)


def _compare(suite: Suite, case: dict[str, Any], ours, peer, *, peer_name: str, note=None) -> None:
    """``suite.compare`` timed under :func:`_timing_malloc`, after measuring the peak memory of
    one call of each side under :func:`_memory_malloc` (after one warm-up call each, which
    allocates the persistent gradient buffers; the same procedure as
    ``nudft_alternate.py --memory``)."""
    _memory_malloc()
    ours()
    peer()
    _memory_malloc()
    ours_mb = peak_memory_mb(ours)
    _memory_malloc()
    peer_mb = peak_memory_mb(peer)
    _timing_malloc()
    row = suite.compare(case, ours, peer, peer_name=peer_name, memory=False, note=note)
    row["ours_peak_mb"], row["peer_peak_mb"] = ours_mb, peer_mb


def _peer_available(mod: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(mod) is not None


def _attention_step(case: dict[str, Any], xc, xq, z):
    """TNP-style layer: multi-head self-attention over the context + cross-attention to queries."""
    torch.manual_seed(0)
    C = case["C"]
    heads = 8
    qkv = torch.nn.Linear(C, 3 * C)
    proj = torch.nn.Linear(C, C)
    zq = torch.randn(xq.shape[0], xq.shape[1], C)

    def split(t):
        B, n, _ = t.shape
        return t.reshape(B, n, heads, -1).transpose(1, 2)

    def run() -> None:
        qkv.zero_grad(set_to_none=True)
        z.grad = None
        q, k, v = qkv(z).chunk(3, dim=-1)
        zc = torch.nn.functional.scaled_dot_product_attention(split(q), split(k), split(v))
        zc = proj(zc.transpose(1, 2).reshape_as(z))
        qq = split(qkv(zq)[..., :C])
        out = torch.nn.functional.scaled_dot_product_attention(qq, split(zc), split(zc))
        out.square().mean().backward()

    return run


def _body(suite: Suite, case: dict[str, Any]) -> None:
    xc, xq, z = _inputs(case)
    ours = _layer(case, "auto")
    ours_step = _step(ours, xc, xq, z)
    if case.get("kind") == "scaling":
        _compare(
            suite,
            case,
            ours_step,
            _attention_step(case, xc, xq, z),
            peer_name="self-attention (TNP, SDPA)",
        )
        return
    ref = _layer(case, "reference")
    _compare(
        suite, case, ours_step, _step(ref, xc, xq, z), peer_name="einsum (materialised phases)"
    )
    if case.get("direct_too"):
        direct = _layer(case, "native")
        _compare(
            suite, case, ours_step, _step(direct, xc, xq, z), peer_name="ours, direct sums (native)"
        )
    peers = case.get("peers", "all")
    if peers != "none":
        for mod, name, plan_cls in (
            ("pytorch_finufft", "pytorch-finufft", _FinufftPlan),
            ("torchkbnufft", "torchkbnufft", _KbPlan),
        ):
            if peers == "fast" and mod == "pytorch_finufft":
                continue  # by design (a Python loop over the batch): not a missing peer
            if not _peer_available(mod):
                suite.skip(case, peer_name=name, reason=missing_peer(mod) or "not importable")
                continue
            peer = _layer(case, "reference")
            note = _check_peer(ours, peer, xc, xq, z, plan_cls)
            _compare(
                suite, case, ours_step, _step(peer, xc, xq, z, plan_cls), peer_name=name, note=note
            )


def cases(quick: bool = False) -> list[dict[str, Any]]:
    one = dict(kind="layer", d=1, B=64, G=4)
    if quick:  # smallest size; pytorch-finufft (a Python loop over the batch) only in full runs
        return [dict(one, B=16, N=50, M=128, C=128, peers="fast")]
    out = [dict(one, N=50, M=128, C=128), dict(one, N=500, M=128, C=128, direct_too=True)]
    out += [dict(one, N=5000, M=128, C=128, peers="fast", direct_too=True)]
    out += [dict(one, N=500, M=1000, C=128, peers="fast")]
    out += [dict(one, N=5000, M=1000, C=128, peers="fast", direct_too=True)]
    out.append(dict(one, N=500, M=128, C=288, peers="fast"))
    two = dict(kind="layer", d=2, B=16, G=128, M=1024, C=256)
    out += [dict(two, N=256), dict(two, N=1024, peers="none", direct_too=True)]
    out += [dict(kind="scaling", d=1, B=8, G=4, N=n, M=128, C=128) for n in (256, 1024, 4096)]
    return out


def run(*, quick: bool = False, progress: bool = True, repeat: int = 5) -> Suite:
    return Suite(SUITE, quick=quick, progress=progress, repeat=repeat).run(cases(quick), _body)


if __name__ == "__main__":  # python benchmarks/bench_nudft.py [--quick] [--out DIR] ...
    import sys

    from run_all import main

    raise SystemExit(main(sys.argv[1:], suite=SUITE))
