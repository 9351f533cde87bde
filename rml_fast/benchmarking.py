"""Timing harness shared by the benchmark suites in ``benchmarks/``.

Ours and a named peer run in the same process, alternately, after warm-up; each side is
timed over several runs and summarised by the median and the 20/80 % quantiles. The ratio
is ``peer_median / ours_median`` (> 1 means rml_fast is faster). Peak memory is the peak
resident-set growth during one extra call (CPU, sampled every millisecond) or
``torch.cuda.max_memory_allocated`` (CUDA). Results are rows of plain JSON.

A peer that is not installed is not silently dropped: :meth:`Suite.skip` records a row with
``skipped`` (the reason) and no timings, shown in the table, the JSON and the plot's note.
A ``quick`` suite saves to ``<name>.quick.json`` so that it never replaces full results.
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib.metadata
import importlib.util
import json
import logging
import os
import platform
import re
import textwrap
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rml_fast._validation import Interval, check_scalar

__all__ = [
    "Suite",
    "Timing",
    "checkpointing",
    "import_skip_reason",
    "machine_info",
    "machine_note",
    "missing_dependency_message",
    "missing_peer",
    "optional_extra",
    "peak_memory_mb",
    "plot_ratios",
    "time_call",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Timing:
    """Wall-clock seconds of repeated calls: median, 20 % and 80 % quantiles, all runs."""

    median_s: float
    q20_s: float
    q80_s: float
    runs_s: tuple[float, ...]

    def __post_init__(self) -> None:
        for name in ("median_s", "q20_s", "q80_s"):
            check_scalar(getattr(self, name), name, Interval("real", 0, None))
        if not isinstance(self.runs_s, (tuple, list)) or not self.runs_s:
            raise TypeError(f"runs_s must be a non-empty tuple of seconds, got {self.runs_s!r}")
        for t in self.runs_s:
            check_scalar(t, "runs_s", Interval("real", 0, None))


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

    Examples
    --------
    >>> import numpy as np
    >>> mb = peak_memory_mb(lambda: np.ones(2**22).sum())  # a 32 MiB temporary
    >>> mb is None or mb >= 0
    True
    """
    if not callable(fn):
        raise TypeError(f"fn must be a callable taking no arguments, got {type(fn).__name__}")
    if not isinstance(device, str):
        raise TypeError(f"device must be a device string such as 'cpu', got {device!r}")
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
    """Cores, threads and versions, recorded with every benchmark row.

    Examples
    --------
    >>> info = machine_info()
    >>> info["cpu_count"] >= 1
    True
    """
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
        "cpu_model": _cpu_model(),
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


def _cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux), else the platform's processor string."""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_note(machine: dict[str, Any] | None, *, quick: bool = False) -> str:
    """One line naming the machine (CPU, cores, threads, versions) and quick mode, for plots.

    Examples
    --------
    >>> machine_note({"cpu_model": "Xeon", "cpu_count": 2, "torch_threads": 2,
    ...               "openmp_threads": 2}, quick=True)
    'Xeon, 2 CPUs, torch threads 2, OpenMP threads 2 | QUICK MODE: smallest sizes only'
    """
    m = machine or {}
    parts = [str(m.get("cpu_model") or m.get("processor") or "unknown CPU")]
    if m.get("cpu_count"):
        parts.append(f"{m['cpu_count']} CPUs")
    if m.get("cuda_device"):
        parts.append(f"GPU {m['cuda_device']}")
    for key, label in (("torch_threads", "torch threads"), ("openmp_threads", "OpenMP threads")):
        if m.get(key) is not None:
            parts.append(f"{label} {m[key]}")
    for key in ("rml_fast", "torch"):
        if m.get(key):
            parts.append(f"{key} {m[key]}")
    note = ", ".join(parts)
    return note + (" | QUICK MODE: smallest sizes only" if quick else "")


# import name -> distribution name, where the two differ beyond '-' vs '_'
_DIST_OF_MODULE = {"sklearn": "scikit-learn", "skopt": "scikit-optimize"}
_EXTRA_PREFERENCE = ("federated", "gpu", "bench", "test")  # the smallest extra that provides it first


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def _check_module_name(module: Any) -> None:
    if not isinstance(module, str) or not module.strip(". "):
        raise TypeError(f"module must be a non-empty module name (str), got {module!r}")


def optional_extra(module: str) -> str | None:
    """The pip extra of rml_fast that installs ``module`` (e.g. ``"bench"``), or None.

    Read from the installed package's metadata, so it follows ``pyproject.toml``; None for a
    core dependency or a module no extra provides.

    Examples
    --------
    >>> optional_extra("numpy") is None  # a core dependency
    True
    """
    _check_module_name(module)
    top = module.split(".")[0]
    dist = _normalise(_DIST_OF_MODULE.get(top, top))
    try:
        requires = importlib.metadata.requires("rml_fast") or []
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - not installed
        return None
    extras = set()
    for req in requires:
        spec, _, marker = req.partition(";")
        name = re.split(r"[<>=!~\[ ;]", spec.strip(), maxsplit=1)[0]
        found = re.search(r"extra\s*==\s*['\"]([^'\"]+)['\"]", marker)
        if found and _normalise(name) == dist:
            extras.add(found.group(1))
    for extra in _EXTRA_PREFERENCE:
        if extra in extras:
            return extra
    return min(extras) if extras else None


def missing_dependency_message(exc: BaseException) -> str | None:
    """One line for an optional dependency that is not installed, or None.

    Follows the chain of ``exc`` (``raise ... from``) to a ``ModuleNotFoundError`` whose
    module one of rml_fast's pip extras provides, and names the extra to install; None for
    anything else (a missing core module or an error inside rml_fast is a bug, not an
    optional peer).

    Examples
    --------
    >>> missing_dependency_message(ModuleNotFoundError("no module", name="numpy")) is None
    True
    """
    seen: set[int] = set()
    err: BaseException | None = exc
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, ModuleNotFoundError) and err.name:
            extra = optional_extra(err.name)
            if extra is not None:
                top = err.name.split(".")[0]
                return (
                    f"the optional dependency {top!r} is not installed: "
                    f"pip install 'rml_fast[{extra}]' (or pip install {_DIST_OF_MODULE.get(top, top)})"
                )
        err = err.__cause__ or err.__context__
    return None


def missing_peer(module: str) -> str | None:
    """None where the peer library ``module`` can be imported, else the reason to skip its rows.

    Examples
    --------
    >>> missing_peer("json") is None
    True
    >>> missing_peer("no_such_peer_module")
    'no_such_peer_module is not installed'
    """
    _check_module_name(module)
    top = module.split(".")[0]
    if importlib.util.find_spec(top) is not None:
        return None
    extra = optional_extra(top)
    hint = f" (pip install 'rml_fast[{extra}]')" if extra else ""
    return f"{top} is not installed{hint}"


def import_skip_reason(exc: ImportError) -> str:
    """The reason for a skipped row when importing a peer raised ``exc``.

    Examples
    --------
    >>> import_skip_reason(ModuleNotFoundError("no module", name="no_such_peer_module"))
    'no_such_peer_module is not installed'
    """
    name = getattr(exc, "name", None)
    if isinstance(exc, ModuleNotFoundError) and name:
        return missing_peer(name) or f"{name} failed to import: {exc}"
    return f"import failed: {exc}"


@dataclass
class Suite:
    """A benchmark suite: cases of ours-vs-peer comparisons and their result rows.

    Parameters
    ----------
    name : str
        Family name; results go to ``<out_dir>/<name>.json`` (``<name>.quick.json`` when
        ``quick``).
    quick : bool, default=False
        Run every case at its smallest size (the suite module decides the sizes). Its results
        are saved under another name, so a quick run never replaces full results.
    repeat, warmup : int
        Passed to :func:`time_call`.
    progress : bool, default=True
        Show a rich progress bar over cases.
    checkpoint : str or Path, optional
        A partial-results JSON, rewritten atomically after every row and every finished case
        (default: ``<dir>/<result_name>.partial.json`` inside a :func:`checkpointing` block,
        as ``benchmarks/run_all.py`` uses; else none). :meth:`save` removes it.
    resume : bool, default=False
        Load ``checkpoint`` if it exists (of the same name, ``quick`` and ``repeat``, else
        ``ValueError``): :meth:`run` skips the cases it finished (their rows are re-used in
        order) and :meth:`compare` / :meth:`skip` re-use the rows of a case it had started,
        so the final rows equal an uninterrupted run's except for the timings of rows that
        were re-measured.
    """

    name: str
    quick: bool = False
    repeat: int = 5
    warmup: int = 1
    progress: bool = True
    rows: list[dict[str, Any]] = field(default_factory=list)
    checkpoint: str | os.PathLike[str] | None = None
    resume: bool = False

    def __post_init__(self) -> None:
        ctx = _CHECKPOINTING.get()
        if self.checkpoint is None and ctx is not None:
            self.checkpoint = Path(ctx[0]) / f"{self.result_name}.partial.json"
            self.resume = self.resume or ctx[1]
        self._done: dict[str, list[dict[str, Any]]] = {}  # finished case key -> its rows
        self._started: dict[str, dict[str, Any]] = {}  # row key -> row of an unfinished case
        self._done_order: list[str] = []
        self._seen_cases: dict[str, int] = {}
        self._seen_rows: dict[str, int] = {}
        self._case_rows: dict[str, list[dict[str, Any]]] = {}
        self.resumed_rows = 0
        # fixed at creation: a body that changes ``repeat`` for a case must not change it
        self._fp = {"suite": self.name, "quick": self.quick, "repeat": self.repeat,
                    "warmup": self.warmup}
        if self.resume and self.checkpoint is not None and Path(self.checkpoint).exists():
            data = json.loads(Path(self.checkpoint).read_text())
            mine = self._fingerprint()
            if data.get("fingerprint") != mine:
                raise ValueError(
                    f"checkpoint {str(self.checkpoint)!r} holds partial results of "
                    f"{data.get('fingerprint')}, not of {mine}; delete it or run without resume"
                )
            for key, rows in data["done"]:
                self._done[key] = rows
            self._started = dict(data["started"])
            logger.info("bench %s: resuming %s (%d cases done)", self.name, self.checkpoint,
                        len(self._done))

    def _fingerprint(self) -> dict[str, Any]:
        return self._fp

    def _write_partial(self) -> None:
        if self.checkpoint is None:
            return
        from rml_fast._checkpoint import atomic_write_text

        done = [[k, self._done[k]] for k in self._done_order]
        data = {"fingerprint": self._fingerprint(), "done": done, "started": self._started}
        atomic_write_text(self.checkpoint, json.dumps(data, default=_json_default) + "\n")

    def _row_key(self, case: dict[str, Any], peer_name: str, device: str) -> str:
        base = json.dumps([case, peer_name, device], sort_keys=True, default=_json_default)
        k = self._seen_rows.get(base, 0)
        self._seen_rows[base] = k + 1
        return f"{base}#{k}"

    def _resumed(self, key: str) -> dict[str, Any] | None:
        row = self._started.get(key)
        if row is not None:
            self.rows.append(row)
            self.resumed_rows += 1
        return row

    def _record(self, key: str, row: dict[str, Any]) -> None:
        self.rows.append(row)
        self._started[key] = json.loads(json.dumps(row, default=_json_default))
        self._write_partial()

    @property
    def result_name(self) -> str:
        """File stem of the saved results: ``name``, or ``name + ".quick"`` for a quick run."""
        return f"{self.name}.quick" if self.quick else self.name

    @property
    def skipped(self) -> list[dict[str, Any]]:
        """The rows of peers that did not run (each with its ``skipped`` reason)."""
        return [r for r in self.rows if r.get("skipped")]

    def skip(
        self,
        case: dict[str, Any],
        *,
        peer_name: str,
        reason: str,
        device: str = "cpu",
    ) -> dict[str, Any]:
        """Record that ``peer_name`` did not run on ``case`` (e.g. not installed); returns the row.

        The row has the keys of a timed row with ``None`` timings and ``skipped`` = ``reason``;
        the table and the JSON show it, the plot names it in its note.
        """
        key = self._row_key(case, peer_name, device)
        if (old := self._resumed(key)) is not None:
            return old
        logger.info("bench %s: %s skipped on %s: %s", self.name, peer_name, _case_str(case), reason)
        row: dict[str, Any] = {
            "suite": self.name,
            "case": dict(case),
            "device": device,
            "peer": peer_name,
            "skipped": str(reason),
            **dict.fromkeys(
                (
                    "ours_median_s",
                    "ours_q20_s",
                    "ours_q80_s",
                    "peer_median_s",
                    "peer_q20_s",
                    "peer_q80_s",
                    "ratio",
                    "ours_peak_mb",
                    "peer_peak_mb",
                )
            ),
            "repeat": self.repeat,
            "note": None,
        }
        self._record(key, row)
        return row

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
        """Time ``ours`` and ``peer`` on one case and append the row; returns the row.

        When resuming, a row of this case, peer and device already measured is re-used
        (nothing is timed)."""
        key = self._row_key(case, peer_name, device)
        if (old := self._resumed(key)) is not None:
            return old
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
        self._record(key, row)
        return row

    def run(
        self, cases: Iterable[dict[str, Any]], body: Callable[[Suite, dict[str, Any]], None]
    ) -> Suite:
        """Call ``body(self, case)`` for every case, with a progress bar.

        With a checkpoint, the partial results are written after each case; when resuming,
        a case finished before is not run again (its rows are appended as they were)."""
        cases = list(cases)
        if not self.progress:
            for case in cases:
                self._run_case(case, body)
            return self
        from rich.progress import Progress

        with Progress(transient=True) as bar:
            task = bar.add_task(f"bench {self.name}", total=len(cases))
            for case in cases:
                bar.update(task, description=f"bench {self.name} {_case_str(case)}")
                self._run_case(case, body)
                bar.advance(task)
        return self

    def _run_case(self, case: dict[str, Any], body: Callable[[Suite, dict[str, Any]], None]) -> None:
        base = json.dumps(case, sort_keys=True, default=_json_default)
        k = self._seen_cases.get(base, 0)
        self._seen_cases[base] = k + 1
        key = f"{base}#{k}"
        if key in self._done:
            rows = self._done[key]
            self.rows.extend(rows)
            self.resumed_rows += len(rows)
            self._done_order.append(key)
            # the row keys of a skipped case still count (repeated cases keep their numbers)
            for r in rows:
                self._row_key(r["case"], r["peer"], r["device"])
            return
        start = len(self.rows)
        body(self, case)
        self._done[key] = json.loads(json.dumps(self.rows[start:], default=_json_default))
        self._done_order.append(key)
        self._write_partial()

    def table(self) -> Any:
        """The rows as a ``rich.table.Table``."""
        from rich.markup import escape
        from rich.table import Table

        quick = " (quick mode: smallest sizes)" if self.quick else ""
        table = Table(
            title=escape(f"rml_fast bench: {self.name}{quick}, ratio = peer time / our time")
        )
        for col in ("case", "peer", "ours median", "peer median", "ratio", "ours MiB", "peer MiB"):
            table.add_column(col, justify="left" if col in ("case", "peer") else "right")
        for r in self.rows:
            if r.get("skipped"):
                reason = escape("(skipped: " + str(r["skipped"]) + ")")
                table.add_row(
                    escape(_case_str(r["case"])),
                    f"{escape(r['peer'])} [yellow]{reason}[/yellow]",
                    "-",
                    "-",
                    "[yellow]skipped[/yellow]",
                    "-",
                    "-",
                )
                continue
            table.add_row(
                escape(_case_str(r["case"])),
                escape(r["peer"]),
                _fmt_s(r["ours_median_s"]),
                _fmt_s(r["peer_median_s"]),
                f"{r['ratio']:.2f}x",
                _fmt_mb(r["ours_peak_mb"]),
                _fmt_mb(r["peer_peak_mb"]),
            )
        return table

    def save(self, out_dir: str | os.PathLike[str], *, plot: bool = False) -> Path:
        """Write ``<out_dir>/<result_name>.json`` (and ``.png`` if ``plot``); returns the JSON path.

        ``result_name`` is ``<name>`` or, for a quick suite, ``<name>.quick``. Every row gets
        the machine's description (:func:`machine_info`) and ``quick``.
        """
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        machine = machine_info()
        rows = [{**r, "quick": self.quick, "machine": machine} for r in self.rows]
        path = out / f"{self.result_name}.json"
        path.write_text(json.dumps(rows, indent=2, default=_json_default) + "\n")
        if self.checkpoint is not None:  # the full results are written: the partial ones go
            Path(self.checkpoint).unlink(missing_ok=True)
        if plot:
            plot_ratios(
                rows, out / f"{self.result_name}.png", title=self.name, quick=self.quick,
                machine=machine,
            )
        return path

    def plot(self, path: str | os.PathLike[str]) -> Path:
        """Bar chart of the ratios per case and peer (needs matplotlib); see :func:`plot_ratios`."""
        return plot_ratios(self.rows, path, title=self.name, quick=self.quick)


_CHECKPOINTING: contextvars.ContextVar[tuple[Path, bool] | None] = contextvars.ContextVar(
    "rml_fast_bench_checkpointing", default=None)


@contextlib.contextmanager
def checkpointing(out_dir: str | os.PathLike[str], *, resume: bool = False) -> Iterator[None]:
    """Every :class:`Suite` created inside the block keeps partial results in ``out_dir``.

    Each suite writes ``<out_dir>/<result_name>.partial.json`` after every row and case
    (atomically) and removes it in :meth:`Suite.save`; with ``resume=True`` a suite loads
    its partial file if there is one and skips the finished cases. ``benchmarks/run_all.py``
    (``rml-fast bench``) runs every suite in such a block (``--resume``).

    Examples
    --------
    >>> import tempfile
    >>> from rml_fast.benchmarking import Suite, checkpointing
    >>> with tempfile.TemporaryDirectory() as d, checkpointing(d):
    ...     Suite("demo", quick=True).checkpoint.name
    'demo.quick.partial.json'
    """
    token = _CHECKPOINTING.set((Path(out_dir), bool(resume)))
    try:
        yield
    finally:
        _CHECKPOINTING.reset(token)


_MAX_BARS = 60


def plot_ratios(
    rows: list[dict[str, Any]],
    path: str | os.PathLike[str],
    *,
    title: str,
    quick: bool = False,
    machine: dict[str, Any] | None = None,
) -> Path:
    """Horizontal bars of ``ratio`` (peer time / our time) per row, written to ``path`` (PNG).

    One bar per timed row, labelled with its case and peer (wrapped, never clipped), its value
    written next to it, and a line at parity (1x); past 60 rows, one bar per peer at the
    median ratio with each case as a dot. The ratio axis is logarithmic when the
    ratios span more than a factor of 10 (bars then start at 1x, so slower cases point left),
    else linear from 0. A note at the bottom names the machine (CPU, cores, threads; from
    ``machine`` or the rows' ``machine``), quick mode, and any skipped peer rows.
    Needs matplotlib (the ``bench`` extra).
    """
    try:
        import matplotlib
    except ImportError as exc:
        raise ImportError("plotting needs matplotlib: pip install 'rml_fast[bench]'") from exc

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    timed = [r for r in rows if not r.get("skipped") and r.get("ratio") is not None]
    skipped = [r for r in rows if r.get("skipped")]
    if machine is None:
        machine = next((r["machine"] for r in rows if r.get("machine")), None) or machine_info()
    # one bar per row; past _MAX_BARS rows one bar per peer at the median, with every case's
    # ratio as a dot (a 300-row suite would otherwise be a figure metres tall)
    summary = len(timed) > _MAX_BARS
    items: list[tuple[str, np.ndarray]] = []
    if summary:
        for peer in dict.fromkeys(r["peer"] for r in timed):
            vals = np.array([float(r["ratio"]) for r in timed if r["peer"] == peer])
            items.append((f"vs {peer} ({vals.size} cases)", vals))
    else:
        items = [
            (f"{_case_str(r['case'])} | vs {r['peer']}", np.array([float(r["ratio"])]))
            for r in timed
        ]
    labels = [textwrap.fill(label, 55, break_long_words=False) for label, _ in items]
    n_lines = sum(label.count("\n") + 1 for label in labels)
    note = textwrap.fill(machine_note(machine, quick=quick), 120)
    if summary:
        note += (
            f"\n{len(timed)} timed rows: bar = median per peer, dots = its cases "
            "(every row is in the JSON)"
        )
    if skipped:
        names = sorted({f"{r['peer']} ({r['skipped']})" for r in skipped})
        note += "\n" + textwrap.fill(f"skipped {len(skipped)} peer rows: " + "; ".join(names), 120)
    height = 1.6 + 0.24 * max(n_lines, 2) + 0.15 * len(items) + 0.13 * (note.count("\n") + 1)
    fig, ax = plt.subplots(figsize=(10.0, height))
    if items:
        bars = np.array([float(np.median(v)) for _, v in items])
        every = np.concatenate([v for _, v in items])
        finite = every[np.isfinite(every) & (every > 0)]
        log = finite.size > 0 and finite.max() / finite.min() > 10
        lo = min(finite.min(), 1.0) if finite.size else 1.0
        hi = max(finite.max(), 1.0) if finite.size else 1.0
        shown = np.clip(bars, lo, hi)  # inf / 0 drawn at the axis ends, written as they are
        ys = np.arange(len(items))
        colors = ["tab:green" if x >= 1 else "tab:red" for x in bars]
        if log:
            ax.set_xscale("log")
            ax.barh(ys, shown - 1.0, left=1.0, color=colors, height=0.6)
            ax.set_xlim(lo / 3.0, hi * 3.0)
        else:
            ax.barh(ys, shown, color=colors, height=0.6)
            ax.set_xlim(0, hi * 1.25)
        for y, (_, vals) in zip(ys, items, strict=True):
            if vals.size > 1:
                ax.scatter(np.clip(vals, lo, hi), np.full(vals.size, y), s=6, color="black",
                           alpha=0.5, zorder=3)
        for y, x, (_, vals) in zip(ys, bars, items, strict=True):
            text = f"{x:.3g}x" if vals.size == 1 else f"median {x:.3g}x"
            end = float(np.clip(vals, lo, hi).max())
            if log and x < 1 and vals.size == 1:
                ax.text(shown[y] / 1.08, float(y), text, va="center", ha="right", fontsize=8)
            else:
                at = max(end, shown[y], 1.0 if log else 0.0)
                ax.text(at * 1.08 if log else at + 0.015 * hi, float(y), text, va="center", ha="left",
                        fontsize=8)
        ax.axvline(1.0, color="black", lw=0.9)
        ax.set_yticks(ys, labels, fontsize=8)
        ax.set_ylim(len(items) - 0.5, -0.5)  # first row on top, no empty margin
        ax.grid(axis="x", alpha=0.3, which="both" if log else "major")
    else:
        ax.text(0.5, 0.5, "no timed rows", ha="center", va="center", transform=ax.transAxes)
        ax.set_yticks([])
    ax.set_xlabel("speed-up of rml_fast (peer time / rml_fast time; > 1: rml_fast faster)")
    ax.set_title(f"rml_fast bench: {title}" + (" (quick mode)" if quick else ""))
    fig.text(0.01, 0.01, note, fontsize=7, color="dimgray", ha="left", va="bottom")
    note_inches = 0.1 + 0.13 * (note.count("\n") + 1)
    fig.tight_layout(rect=(0, min(note_inches / height, 0.5), 1, 1))
    fig.savefig(path, dpi=120, bbox_inches="tight")
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
