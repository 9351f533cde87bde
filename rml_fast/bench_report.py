"""One self-contained HTML page of benchmark results: every suite's table and ratio plot.

``rml-fast bench --report DIR`` runs the selected suites and writes ``DIR/index.html``;
``rml-fast bench --report DIR --from-json RESULTS`` renders JSON results written earlier
(e.g. a checkout's ``benchmarks/results/*.json``) without running anything. The page has a
summary (per suite: rows, skipped peers, median / min / max ratio), then per suite the machine
note, the bar chart of :func:`rml_fast.benchmarking.plot_ratios` and the table (case, peer,
device, medians with their 20-80 % quantiles, ratio, peak memory, note, skip reason, extra
fields). The ratio is ``peer_median_s / ours_median_s`` (> 1: rml_fast is faster).

Result files of another shape (side tables such as ``sgg_calibration.json``) are shown as
plain tables (a list of flat records) or as collapsed JSON. Everything taken from a file is
HTML-escaped. The plots need matplotlib (the ``bench`` extra); the page itself needs nothing
beyond the standard library: the PNGs sit beside ``index.html`` or, with ``inline=True``, are
embedded as base64 ``data:`` URIs (a single file to mail around).
"""

from __future__ import annotations

import base64
import datetime
import html
import json
import math
import numbers
import os
import statistics
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

__all__ = ["format_ratio", "is_suite_rows", "load_results", "render_html", "write_report"]

# keys every Suite row has; anything else in a row is shown in the "more" column
_ROW_KEYS = frozenset({
    "suite", "case", "device", "peer", "skipped", "ours_median_s", "ours_q20_s", "ours_q80_s",
    "peer_median_s", "peer_q20_s", "peer_q80_s", "ratio", "ours_peak_mb", "peer_peak_mb",
    "repeat", "note", "quick", "machine",
})
_MAX_GENERIC_ROWS = 300
_MAX_JSON_CHARS = 20_000


def format_ratio(ratio: float | None) -> str:
    """The ratio as the report writes it: ``"2.50x"`` (3 significant digits below 0.1).

    Parameters
    ----------
    ratio : float or None
        ``peer_median_s / ours_median_s``; None for a skipped row.

    Returns
    -------
    str

    Raises
    ------
    TypeError
        If ``ratio`` is neither a real number nor None.

    Examples
    --------
    >>> format_ratio(2.5), format_ratio(0.0123), format_ratio(float("inf")), format_ratio(None)
    ('2.50x', '0.0123x', 'infx', '-')
    """
    if ratio is None:
        return "-"
    if isinstance(ratio, bool) or not isinstance(ratio, numbers.Real):
        raise TypeError(f"ratio must be a real number or None, got {type(ratio).__name__} {ratio!r}")
    return _format_ratio(float(ratio))


def _format_ratio(r: float) -> str:
    if math.isfinite(r) and 0 < abs(r) < 0.1:
        return f"{r:.3g}x"
    return f"{r:.2f}x"


def is_suite_rows(data: Any) -> bool:
    """Whether ``data`` (parsed JSON) is a benchmark suite's rows (a non-empty list of dicts
    each with ``case`` and ``peer``), as :meth:`rml_fast.benchmarking.Suite.save` writes.

    Examples
    --------
    >>> is_suite_rows([{"case": {"n": 1}, "peer": "numpy", "ratio": 2.0}])
    True
    >>> is_suite_rows([{"epsilon": 1.0, "mse": 0.2}]), is_suite_rows({"rows": []})
    (False, False)
    """
    return (
        isinstance(data, list)
        and len(data) > 0
        and all(isinstance(r, dict) and "case" in r and "peer" in r for r in data)
    )


def load_results(paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]]) -> dict[str, Any]:
    """Read result JSON files: result name (file stem, e.g. ``"lasso"`` or ``"lasso.quick"``)
    -> parsed JSON, sorted by name.

    Parameters
    ----------
    paths : path or iterable of paths
        JSON files, or directories whose ``*.json`` are read (``*.partial.json``, the
        checkpoints of unfinished runs, are left out).

    Raises
    ------
    ValueError
        A path that does not exist, a directory without result JSON, or a file that is not
        valid JSON (named in the message).

    Examples
    --------
    >>> import json, tempfile
    >>> from pathlib import Path
    >>> with tempfile.TemporaryDirectory() as d:
    ...     _ = (Path(d) / "demo.json").write_text(json.dumps([{"case": {}, "peer": "p"}]))
    ...     _ = (Path(d) / "demo.partial.json").write_text("{}")
    ...     sorted(load_results(d))
    ['demo']
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(f for f in p.glob("*.json") if not f.name.endswith(".partial.json"))
            if not found:
                raise ValueError(f"paths: no result *.json files in the directory {str(p)!r}")
            files.extend(found)
        elif p.is_file():
            files.append(p)
        else:
            raise ValueError(f"paths: expected result JSON files or directories, {str(p)!r} does not exist")
    out: dict[str, Any] = {}
    for f in files:
        try:
            data = json.loads(f.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ValueError(f"paths: {str(f)!r} is not valid JSON ({exc})") from None
        out[f.name.removesuffix(".json")] = data
    return dict(sorted(out.items()))


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _anchor(name: str) -> str:
    return "r-" + "".join(c if c.isalnum() or c in "-_" else "-" for c in name)


def _case_str(case: Any) -> str:
    if isinstance(case, dict):
        return " ".join(f"{k}={v}" for k, v in case.items())
    return str(case)


def _fmt_s(seconds: Any) -> str:
    if not isinstance(seconds, (int, float)) or isinstance(seconds, bool):
        return "-"
    s = float(seconds)
    if s >= 1:
        return f"{s:.3f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.2f} ms"
    return f"{s * 1e6:.1f} us"


def _fmt_mb(mb: Any) -> str:
    return "-" if not isinstance(mb, (int, float)) else f"{float(mb):.1f}"


def _fmt_value(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, (dict, list)):
        text = json.dumps(v, default=str)
        return text if len(text) <= 80 else text[:77] + "..."
    return str(v)


def _machine(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    return next((r["machine"] for r in rows if isinstance(r.get("machine"), dict)), None)


def _is_quick(name: str, rows: list[dict[str, Any]]) -> bool:
    return name.endswith(".quick") or any(r.get("quick") for r in rows)


def _ratios(rows: list[dict[str, Any]]) -> list[float]:
    out = []
    for r in rows:
        x = r.get("ratio")
        if not r.get("skipped") and isinstance(x, (int, float)) and math.isfinite(x) and x > 0:
            out.append(float(x))
    return out


def _ratio_cell(ratio: Any) -> str:
    """A row's ratio as text; a value of another type (a hand-edited file) is shown as is."""
    if ratio is None:
        return format_ratio(None)
    if isinstance(ratio, numbers.Real) and not isinstance(ratio, bool):
        return format_ratio(float(ratio))
    return str(ratio)


def _suite_table(rows: list[dict[str, Any]]) -> str:
    head = ("case", "peer", "device", "ours median [q20, q80]", "peer median [q20, q80]",
            "ratio", "ours MiB", "peer MiB", "note", "skipped", "more")
    out = ["<table class='rows'><thead><tr>"]
    out += [f"<th>{_e(h)}</th>" for h in head]
    out.append("</tr></thead><tbody>")
    for r in rows:
        skipped = r.get("skipped")
        ratio = r.get("ratio")
        cls = "skip" if skipped else ("fast" if isinstance(ratio, (int, float)) and ratio >= 1
                                      else "slow")

        def timing(side: str, r: dict[str, Any] = r) -> str:
            med = _fmt_s(r.get(f"{side}_median_s"))
            if med == "-":
                return med
            return f"{med} [{_fmt_s(r.get(f'{side}_q20_s'))}, {_fmt_s(r.get(f'{side}_q80_s'))}]"

        more = "; ".join(f"{k}={_fmt_value(v)}" for k, v in r.items() if k not in _ROW_KEYS)
        cells = (
            _case_str(r.get("case")), r.get("peer", ""), r.get("device", ""), timing("ours"),
            timing("peer"), "skipped" if skipped else _ratio_cell(ratio),
            _fmt_mb(r.get("ours_peak_mb")), _fmt_mb(r.get("peer_peak_mb")),
            r.get("note") or "", skipped or "", more,
        )
        out.append(f"<tr class='{cls}'>" + "".join(f"<td>{_e(c)}</td>" for c in cells) + "</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _generic_table(data: list[dict[str, Any]]) -> str:
    cols = list(dict.fromkeys(k for r in data for k in r))
    out = ["<table class='rows'><thead><tr>", *(f"<th>{_e(c)}</th>" for c in cols),
           "</tr></thead><tbody>"]
    for r in data[:_MAX_GENERIC_ROWS]:
        out.append("<tr>" + "".join(f"<td>{_e(_fmt_value(r.get(c, '')))}</td>" for c in cols)
                   + "</tr>")
    out.append("</tbody></table>")
    if len(data) > _MAX_GENERIC_ROWS:
        out.append(f"<p class='note'>first {_MAX_GENERIC_ROWS} of {len(data)} rows</p>")
    return "".join(out)


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:1.5em auto;max-width:1400px;
padding:0 1em;color:#222}
table{border-collapse:collapse;font-size:12px;margin:.5em 0 1.5em}
th,td{border:1px solid #ccc;padding:3px 6px;text-align:left;vertical-align:top}
th{background:#f0f0f0;position:sticky;top:0}
tr.fast td:nth-child(6){color:#176317;font-weight:600}
tr.slow td:nth-child(6){color:#a11;font-weight:600}
tr.skip td{color:#886600}
.note{color:#666;font-size:12px}
img{max-width:100%;border:1px solid #ddd}
pre{font-size:11px;background:#f7f7f7;padding:.5em;overflow:auto}
"""


def render_html(
    results: Mapping[str, Any],
    *,
    images: Mapping[str, str] | None = None,
    title: str = "rml_fast benchmark report",
) -> str:
    """The report page as one HTML string (CSS inline, no scripts, no external resources).

    Parameters
    ----------
    results : mapping
        Result name -> parsed JSON, as :func:`load_results` returns (suite rows, or any other
        JSON: lists of flat records become plain tables, the rest collapsed JSON).
    images : mapping, optional
        Result name -> ``src`` of its plot (a file name beside the page or a ``data:`` URI).
    title : str
        The page's title.

    Returns
    -------
    str
        Every string from the results is HTML-escaped.

    Examples
    --------
    >>> rows = [{"suite": "demo", "case": {"n": 8}, "peer": "numpy", "ratio": 2.5,
    ...          "ours_median_s": 0.001, "peer_median_s": 0.0025, "note": "<b>x</b>"}]
    >>> page = render_html({"demo": rows})
    >>> "2.50x" in page, "&lt;b&gt;x&lt;/b&gt;" in page, "<b>x</b>" in page
    (True, True, False)
    """
    images = dict(images or {})
    suites = {k: v for k, v in results.items() if is_suite_rows(v)}
    others = {k: v for k, v in results.items() if k not in suites}
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    try:
        from rml_fast import __version__ as version
    except ImportError:  # pragma: no cover - always importable inside the package
        version = "?"
    from rml_fast.benchmarking import machine_note

    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{_e(title)}</h1>",
        f"<p class='note'>Written {_e(now)} by rml_fast {_e(version)}. Ratio = peer median time / "
        "rml_fast median time (&gt; 1: rml_fast is faster). Each suite names the machine its "
        "numbers come from.</p>",
    ]
    if suites:
        parts.append("<h2>Summary</h2><table><thead><tr>")
        parts += [f"<th>{h}</th>" for h in ("suite", "mode", "timed rows", "skipped rows",
                                             "median ratio", "min ratio", "max ratio",
                                             "rml_fast faster")]
        parts.append("</tr></thead><tbody>")
        for name, rows in suites.items():
            ratios = _ratios(rows)
            skipped = sum(1 for r in rows if r.get("skipped"))
            cells = [
                f"<a href='#{_anchor(name)}'>{_e(name)}</a>",
                "quick" if _is_quick(name, rows) else "full",
                str(len(rows) - skipped),
                str(skipped),
                _e(format_ratio(statistics.median(ratios)) if ratios else "-"),
                _e(format_ratio(min(ratios)) if ratios else "-"),
                _e(format_ratio(max(ratios)) if ratios else "-"),
                f"{sum(x > 1 for x in ratios)} of {len(ratios)}",
            ]
            parts.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
        parts.append("</tbody></table>")
    for name, rows in suites.items():
        quick = _is_quick(name, rows)
        machine = _machine(rows)
        note = (
            machine_note(machine, quick=quick)
            if machine
            else "machine not recorded" + (" | QUICK MODE: smallest sizes only" if quick else "")
        )
        parts.append(f"<h2 id='{_anchor(name)}'>{_e(name)}</h2>")
        parts.append(f"<p class='note'>{_e(note)}</p>")
        if name in images:
            parts.append(f"<img src='{_e(images[name])}' alt='{_e(name)} ratios'>")
        parts.append(_suite_table(rows))
    if others:
        parts.append("<h2>Other result files</h2>")
        for name, data in others.items():
            parts.append(f"<h3 id='{_anchor(name)}'>{_e(name)}</h3>")
            if isinstance(data, list) and data and all(isinstance(r, dict) for r in data):
                parts.append(_generic_table(data))
            else:
                text = json.dumps(data, indent=1, default=str)
                if len(text) > _MAX_JSON_CHARS:
                    text = text[:_MAX_JSON_CHARS] + "\n... (truncated)"
                parts.append(f"<details><summary>JSON</summary><pre>{_e(text)}</pre></details>")
    if not results:
        parts.append("<p>No results.</p>")
    parts.append("</body></html>\n")
    return "\n".join(parts)


def write_report(
    results: Mapping[str, Any],
    out_dir: str | os.PathLike[str],
    *,
    plot: bool = True,
    inline: bool = False,
    progress: bool = False,
) -> Path:
    """Write ``out_dir/index.html`` (and, with ``plot``, ``out_dir/<name>.png`` per suite).

    Parameters
    ----------
    results : mapping
        Result name -> parsed JSON, as :func:`load_results` returns.
    out_dir : path
        Created if missing; an existing ``index.html`` and PNGs of the same names are replaced.
    plot : bool, default=True
        Draw each suite's ratio chart (:func:`rml_fast.benchmarking.plot_ratios`; needs
        matplotlib).
    inline : bool, default=False
        Embed the charts as base64 ``data:`` URIs, so that ``index.html`` is the only file.
    progress : bool, default=False
        A tqdm bar over the suites while plotting.

    Returns
    -------
    Path
        The written ``index.html``.

    Examples
    --------
    >>> import tempfile
    >>> rows = [{"suite": "demo", "case": {"n": 8}, "peer": "numpy", "ratio": 2.5}]
    >>> with tempfile.TemporaryDirectory() as d:
    ...     page = write_report({"demo": rows}, d, plot=False)
    ...     page.name, "2.50x" in page.read_text()
    ('index.html', True)
    """
    if not isinstance(results, Mapping):
        raise TypeError(f"results: expected a mapping of result name -> JSON, got {type(results).__name__}")
    if not isinstance(out_dir, (str, os.PathLike)):
        raise TypeError(f"out_dir: expected a path (str or os.PathLike), got {type(out_dir).__name__}")
    for flag, value in (("plot", plot), ("inline", inline), ("progress", progress)):
        if not isinstance(value, bool):
            raise TypeError(f"{flag}: expected a bool, got {type(value).__name__} {value!r}")
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ValueError(f"out_dir: expected a directory, got the file {str(out)!r}")
    out.mkdir(parents=True, exist_ok=True)
    images: dict[str, str] = {}
    if plot:
        from tqdm.auto import tqdm

        from rml_fast.benchmarking import plot_ratios

        suites = [(k, v) for k, v in results.items() if is_suite_rows(v)]
        for name, rows in tqdm(suites, desc="report plots", unit="suite", disable=not progress):
            machine = _machine(rows) or {"cpu_model": "machine not recorded"}
            title = rows[0].get("suite") or name.removesuffix(".quick")
            kwargs: dict[str, Any] = {"title": str(title), "quick": _is_quick(name, rows),
                                      "machine": machine}
            if inline:
                with tempfile.TemporaryDirectory() as tmp:
                    png = plot_ratios(rows, Path(tmp) / "plot.png", **kwargs)
                    data = base64.b64encode(png.read_bytes()).decode("ascii")
                images[name] = f"data:image/png;base64,{data}"
            else:
                plot_ratios(rows, out / f"{name}.png", **kwargs)
                images[name] = f"{name}.png"
    page = out / "index.html"
    page.write_text(render_html(results, images=images), encoding="utf-8")
    return page
