"""Timing harness shared by the benchmark suites in ``benchmarks/``.

Ours and a named peer run in the same process, alternately, after warm-up; each side is
timed over several runs and summarised by the median and the 20/80 % quantiles. The ratio
is ``peer_median / ours_median`` (> 1 means rml_fast is faster). Peak memory is the peak
resident-set growth during one extra call (CPU, sampled every millisecond) or
``torch.cuda.max_memory_allocated`` (CUDA). Results are rows of plain JSON.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rml_fast._validation import Interval, check_scalar

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Timing:
    """Wall-clock seconds of repeated calls: median, 20 % and 80 % quantiles, all runs."""

    median_s: float
    q20_s: float
    q80_s: float
    runs_s: tuple[float, ...]


def time_call(
    fn: Callable[[], Any],
    *,
    warmup: int = 1,
    repeat: int = 5,
    sync: Callable[[], None] | None = None,
) -> Timing:
    """Time ``fn()`` ``repeat`` times after ``warmup`` untimed calls.

    Parameters
    ----------
    fn : callable taking no arguments
    warmup : int, default=1
        Untimed calls first (JIT compilation, caches, allocator).
    repeat : int, default=5
        Timed calls; at least 1.
    sync : callable, optional
        Called before each clock read (e.g. ``torch.cuda.synchronize``).

    Returns
    -------
    Timing

    Examples
    --------
    >>> t = time_call(lambda: sum(range(1000)), repeat=3)
    >>> len(t.runs_s), t.q20_s <= t.median_s <= t.q80_s
    (3, True)
    """
    warmup = int(check_scalar(warmup, "warmup", Interval("int", 0, None)))
    repeat = int(check_scalar(repeat, "repeat", Interval("int", 1, None)))
    sync = sync or (lambda: None)
    for _ in range(warmup):
        fn()
    sync()
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        sync()
        runs.append(time.perf_counter() - start)
    arr = np.asarray(runs)
    return Timing(
        float(np.median(arr)),
        float(np.quantile(arr, 0.2)),
        float(np.quantile(arr, 0.8)),
        tuple(runs),
    )


def _status_kib(field: str) -> int | None:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def _reset_peak_rss() -> bool:
    """Reset the kernel's resident-set high-water mark (VmHWM) of this process (Linux >= 4.0)."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        return False
    return True


def _sampled_peak_kib(fn: Callable[[], Any], base: int) -> int:
    peak = base
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, _status_kib("VmRSS") or 0)
            time.sleep(0.001)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        fn()
    finally:
        done.set()
        thread.join()
    return max(peak, _status_kib("VmRSS") or 0)


def peak_memory_mb(fn: Callable[[], Any], *, device: str = "cpu") -> float | None:
    """Peak memory growth in MiB while ``fn()`` runs once; None where it cannot be measured.

    On CPU this is the growth of the process's resident set: exactly, from the kernel's
    high-water mark reset just before the call (Linux ``/proc/self/clear_refs``), or else by
    sampling every millisecond (which can miss short peaks). Memory the allocator reuses
    without new pages does not count. On CUDA it is the caching allocator's peak.
    """
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base_cuda = torch.cuda.memory_allocated()
        fn()
        torch.cuda.synchronize()
        return (torch.cuda.max_memory_allocated() - base_cuda) / 2**20
    base = _status_kib("VmRSS")
    if base is None:
        return None
    if _reset_peak_rss():
        fn()
        peak = _status_kib("VmHWM") or base
    else:
        peak = _sampled_peak_kib(fn, base)
    return max(peak - base, 0) / 1024


def machine_info() -> dict[str, Any]:
    """Cores, threads and versions, recorded with every benchmark row."""
    import importlib.metadata as md

    def version(dist: str) -> str | None:
        try:
            return md.version(dist)
        except md.PackageNotFoundError:
            return None

    from rml_fast._native import _C

    build = dict(_C.build_info())
    info: dict[str, Any] = {
        "cpu_count": os.cpu_count(),
        "processor": platform.processor() or platform.machine(),
        "python": platform.python_version(),
        "rml_fast": version("rml_fast"),
        "numpy": np.__version__,
        "torch": version("torch"),
        "triton": version("triton"),
        "openmp_threads": build["openmp_max_threads"],
        "compiler": build["compiler"],
    }
    try:
        import torch

        info["torch_threads"] = torch.get_num_threads()
        info["cuda_device"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except ImportError:
        pass
    return info


@dataclass
class Suite:
    """A benchmark suite: cases of ours-vs-peer comparisons and their result rows.

    Parameters
    ----------
    name : str
        Family name; results go to ``<out_dir>/<name>.json``.
    quick : bool, default=False
        Run every case at its smallest size (the suite module decides the sizes).
    repeat, warmup : int
        Passed to :func:`time_call`.
    progress : bool, default=True
        Show a rich progress bar over cases.
    """

    name: str
    quick: bool = False
    repeat: int = 5
    warmup: int = 1
    progress: bool = True
    rows: list[dict[str, Any]] = field(default_factory=list)

    def compare(
        self,
        case: dict[str, Any],
        ours: Callable[[], Any],
        peer: Callable[[], Any],
        *,
        peer_name: str,
        device: str = "cpu",
        memory: bool = True,
        note: str | None = None,
    ) -> dict[str, Any]:
        """Time ``ours`` and ``peer`` on one case and append the row; returns the row."""
        sync = None
        if device.startswith("cuda"):
            import torch

            sync = torch.cuda.synchronize
        ours_t = time_call(ours, warmup=self.warmup, repeat=self.repeat, sync=sync)
        peer_t = time_call(peer, warmup=self.warmup, repeat=self.repeat, sync=sync)
        row: dict[str, Any] = {
            "suite": self.name,
            "case": dict(case),
            "device": device,
            "peer": peer_name,
            "ours_median_s": ours_t.median_s,
            "ours_q20_s": ours_t.q20_s,
            "ours_q80_s": ours_t.q80_s,
            "peer_median_s": peer_t.median_s,
            "peer_q20_s": peer_t.q20_s,
            "peer_q80_s": peer_t.q80_s,
            "ratio": peer_t.median_s / ours_t.median_s if ours_t.median_s > 0 else float("inf"),
            "ours_peak_mb": peak_memory_mb(ours, device=device) if memory else None,
            "peer_peak_mb": peak_memory_mb(peer, device=device) if memory else None,
            "repeat": self.repeat,
            "note": note,
        }
        self.rows.append(row)
        return row

    def run(
        self, cases: Iterable[dict[str, Any]], body: Callable[[Suite, dict[str, Any]], None]
    ) -> Suite:
        """Call ``body(self, case)`` for every case, with a progress bar."""
        cases = list(cases)
        if not self.progress:
            for case in cases:
                body(self, case)
            return self
        from rich.progress import Progress

        with Progress(transient=True) as bar:
            task = bar.add_task(f"bench {self.name}", total=len(cases))
            for case in cases:
                bar.update(task, description=f"bench {self.name} {_case_str(case)}")
                body(self, case)
                bar.advance(task)
        return self

    def table(self) -> Any:
        """The rows as a ``rich.table.Table``."""
        from rich.table import Table

        table = Table(title=f"rml_fast bench: {self.name} (ratio = peer time / our time)")
        for col in ("case", "peer", "ours median", "peer median", "ratio", "ours MiB", "peer MiB"):
            table.add_column(col, justify="left" if col in ("case", "peer") else "right")
        for r in self.rows:
            table.add_row(
                _case_str(r["case"]),
                r["peer"],
                _fmt_s(r["ours_median_s"]),
                _fmt_s(r["peer_median_s"]),
                f"{r['ratio']:.2f}x",
                _fmt_mb(r["ours_peak_mb"]),
                _fmt_mb(r["peer_peak_mb"]),
            )
        return table

    def save(self, out_dir: str | os.PathLike[str], *, plot: bool = False) -> Path:
        """Write ``<out_dir>/<name>.json`` (and ``<name>.png`` if ``plot``); returns the JSON path."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        machine = machine_info()
        rows = [{**r, "machine": machine} for r in self.rows]
        path = out / f"{self.name}.json"
        path.write_text(json.dumps(rows, indent=2, default=_json_default) + "\n")
        if plot:
            self.plot(out / f"{self.name}.png")
        return path

    def plot(self, path: str | os.PathLike[str]) -> Path:
        """Bar chart of the ratios per case and peer (needs matplotlib)."""
        try:
            import matplotlib
        except ImportError as exc:
            raise ImportError("plotting needs matplotlib: pip install 'rml_fast[bench]'") from exc

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        labels = [f"{_case_str(r['case'])}\nvs {r['peer']}" for r in self.rows]
        ratios = [r["ratio"] for r in self.rows]
        fig, ax = plt.subplots(figsize=(max(6.0, 1.2 * len(labels)), 4.0))
        ax.bar(
            range(len(ratios)), ratios, color=["tab:green" if x >= 1 else "tab:red" for x in ratios]
        )
        ax.axhline(1.0, color="black", lw=0.8)
        ax.set_yscale("log")
        ax.set_xticks(range(len(labels)), labels, fontsize=7, rotation=30, ha="right")
        ax.set_ylabel("speed-up (peer time / rml_fast time)")
        ax.set_title(f"rml_fast: {self.name}")
        fig.tight_layout()
        fig.savefig(path, dpi=120)
        plt.close(fig)
        return Path(path)


def _case_str(case: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in case.items())


def _fmt_s(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.3f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.1f} us"


def _fmt_mb(mb: float | None) -> str:
    return "-" if mb is None else f"{mb:.1f}"


def _json_default(obj: Any) -> Any:
    if isinstance(obj, (np.integer, np.floating)):
        return obj.item()
    if hasattr(obj, "__dataclass_fields__"):
        return asdict(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")
