"""Every example in README.md and docs/*.md runs.

Each fenced ```python block is one test case, id ``<file>:<line>``. The blocks of one page run
in order in one namespace (a later block may use names an earlier one defined), in a
temporary working directory, with ``RML_FAST_CACHE`` pointed at the session's model cache.
A block written as a doctest (lines starting with ``>>>``) has its printed outputs checked.

An HTML comment on the line right before the fence marks a block:

``<!-- doctest: skip-no-cuda -->``
    needs a CUDA device; skipped with a reason when torch reports none.
``<!-- doctest: slow -->``
    runs under ``@pytest.mark.slow`` (CI runs those too; keep them to a few seconds).

Flags combine with commas. An unknown flag fails the test of that block.

Shell blocks are not run, but every ``rml-fast`` subcommand and ``--option`` they name (and
every inline ``rml-fast ...`` in the prose) must exist in the command-line parser, every
``python path/to/script.py`` must exist in the checkout and every ``python -m module`` must be
importable by name.
"""

from __future__ import annotations

import contextlib
import doctest
import importlib.util
import io
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FLAGS = {"skip-no-cuda", "slow"}


def _cuda_available() -> bool:
    import torch

    return bool(torch.cuda.is_available())


HAS_CUDA = _cuda_available()

_FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,})(?P<lang>[\w+-]*)\s*$")
_MARK = re.compile(r"^\s*<!--\s*doctest:\s*(?P<flags>[^>]*?)\s*-->\s*$")


@dataclass
class Block:
    page: Path
    line: int  # 1-based line of the opening fence
    lang: str
    code: str
    flags: frozenset[str] = field(default_factory=frozenset)

    @property
    def id(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def parse_blocks(page: Path) -> list[Block]:
    """The fenced code blocks of a markdown page, with the doctest flags of each."""
    lines = page.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        start, fence, indent = i, m["fence"], len(m["indent"])
        body: list[str] = []
        i += 1
        while i < len(lines) and lines[i].strip() != fence:
            body.append(lines[i][indent:] if lines[i][:indent].isspace() else lines[i])
            i += 1
        if i == len(lines):
            raise AssertionError(f"{page.name}:{start + 1}: unclosed code fence")
        i += 1
        flags: frozenset[str] = frozenset()
        if start > 0 and (mark := _MARK.match(lines[start - 1])):
            flags = frozenset(f.strip() for f in mark["flags"].split(",") if f.strip())
        blocks.append(Block(page, start + 1, m["lang"].lower(), "\n".join(body) + "\n", flags))
    return blocks


ALL_BLOCKS = {page: parse_blocks(page) for page in PAGES}
PY_BLOCKS = {p: [b for b in bs if b.lang in ("python", "py", "pycon")] for p, bs in ALL_BLOCKS.items()}
SHELL_BLOCKS = [b for bs in ALL_BLOCKS.values() for b in bs if b.lang in ("", "bash", "sh", "console", "shell")]


def _params():
    out = []
    for page, blocks in PY_BLOCKS.items():
        for index, block in enumerate(blocks):
            marks = [pytest.mark.slow] if "slow" in block.flags else []
            out.append(pytest.param(page, index, id=block.id, marks=marks))
    return out


def _skip_reason(block: Block) -> str | None:
    if "skip-no-cuda" in block.flags and not HAS_CUDA:
        return f"{block.id} needs a CUDA device (marked skip-no-cuda)"
    return None


def _run(block: Block, ns: dict) -> None:
    """Execute one block in ``ns``; a ``>>>`` block is run as a doctest with outputs checked."""
    if any(line.lstrip().startswith(">>>") for line in block.code.splitlines()):
        parser = doctest.DocTestParser()
        test = parser.get_doctest(block.code, ns, block.id, str(block.page), block.line)
        runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
        report = io.StringIO()
        runner.run(test, out=report.write, clear_globs=False)
        ns.update(test.globs)
        assert runner.failures == 0, f"{block.id}: doctest failed\n{report.getvalue()}"
    else:
        # pad with blank lines so tracebacks point at the markdown line
        source = "\n" * block.line + block.code
        exec(compile(source, str(block.page), "exec"), ns)


class _PageState:
    def __init__(self) -> None:
        self.ns: dict = {"__name__": "__docs_example__"}
        self.attempted: set[int] = set()


@pytest.fixture(scope="module")
def page_states():
    return {}


@pytest.fixture
def example_env(tmp_path_factory, zoo_cache, monkeypatch):
    """Run in a per-page temp dir, on one torch thread, with the shared model cache."""
    import torch

    monkeypatch.setenv("RML_FAST_CACHE", str(zoo_cache))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield tmp_path_factory
    torch.set_num_threads(threads)


@pytest.mark.parametrize(("page", "index"), _params())
def test_python_block(page, index, page_states, example_env, monkeypatch):
    blocks = PY_BLOCKS[page]
    block = blocks[index]
    unknown = block.flags - FLAGS
    assert not unknown, f"{block.id}: unknown doctest flag(s) {sorted(unknown)}; known: {sorted(FLAGS)}"
    if (reason := _skip_reason(block)) is not None:
        pytest.skip(reason)
    state = page_states.get(page)
    if state is None:
        state = page_states[page] = _PageState()
        state.cwd = example_env.mktemp(page.stem)
    monkeypatch.chdir(state.cwd)
    # when a case is run alone (-k), first run the page's earlier blocks it may depend on
    for earlier in range(index):
        if earlier not in state.attempted and _skip_reason(blocks[earlier]) is None:
            state.attempted.add(earlier)
            _run(blocks[earlier], state.ns)
    state.attempted.add(index)
    with contextlib.redirect_stdout(io.StringIO()):
        _run(block, state.ns)


def test_pages_have_python_examples():
    """The parser finds the examples (guards against a fence regex that silently matches none)."""
    n = sum(len(bs) for bs in PY_BLOCKS.values())
    assert n >= 10, n
    assert PY_BLOCKS[ROOT / "README.md"], "README.md has no python example"


# --- shell blocks: the commands they name exist --------------------------------------------


def _cli_help(*argv: str) -> tuple[int, str]:
    from rml_fast import cli

    out = io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            code = cli.main([*argv, "--help"])
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    return code, out.getvalue()


_HELP_CACHE: dict[tuple[str, ...], tuple[int, str]] = {}


def _check_rml_fast(tokens: list[str], where: str) -> None:
    """``tokens`` follow ``rml-fast``: the subcommand must exist, and each --option in its help."""
    words = [t for t in tokens if not t.startswith("-") and not t.startswith("[")]
    if not words:
        return
    key = tuple(words[:2]) if words[0] == "demo" and len(words) > 1 else (words[0],)
    if key not in _HELP_CACHE:
        _HELP_CACHE[key] = _cli_help(*key)
    code, text = _HELP_CACHE[key]
    assert code == 0, f"{where}: `rml-fast {' '.join(key)}` is not a valid command:\n{text}"
    for tok in tokens:
        opt = tok.strip("[]").split("=", 1)[0]
        if opt.startswith("--") and len(opt) > 2:
            assert re.search(rf"(?<![\w-]){re.escape(opt)}(?![\w-])", text), (
                f"{where}: `rml-fast {' '.join(key)}` has no option {opt}"
            )


def _commands(text: str):
    """(tokens, line offset) for each shell command in a block (split on ``&&``, ``;``, ``|``)."""
    for offset, raw in enumerate(text.splitlines()):
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        for part in re.split(r"&&|;|\|\|?", line):
            try:
                tokens = shlex.split(part)
            except ValueError:
                tokens = part.split()
            while tokens and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", tokens[0]):
                tokens = tokens[1:]  # VAR=value prefixes
            if tokens:
                yield tokens, offset


def _check_command(tokens: list[str], where: str) -> bool:
    """Check one command; returns whether it was one we know how to check."""
    prog = Path(tokens[0]).name
    if prog == "rml-fast":
        _check_rml_fast(tokens[1:], where)
        return True
    if re.fullmatch(r"python(3(\.\d+)?)?", prog) and len(tokens) > 1:
        if tokens[1] == "-m" and len(tokens) > 2:
            module = tokens[2]
            if module in ("pytest", "pip", "venv"):
                return True
            assert importlib.util.find_spec(module) is not None, f"{where}: no module {module}"
            return True
        if tokens[1].endswith(".py"):
            assert (ROOT / tokens[1]).is_file(), f"{where}: no script {tokens[1]}"
            return True
    return False


def test_shell_blocks_name_existing_commands():
    checked = 0
    for block in SHELL_BLOCKS:
        for tokens, offset in _commands(block.code):
            checked += _check_command(tokens, f"{block.page.relative_to(ROOT)}:{block.line + 1 + offset}")
    assert checked >= 5, f"only {checked} commands recognised in the shell blocks"


_INLINE = re.compile(r"`((?:\.venv/bin/)?rml-fast [^`]*|python3? (?:-m \S+|\S+\.py)[^`]*)`")


def test_inline_commands_exist():
    checked = 0
    for page in PAGES:
        for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), start=1):
            for m in _INLINE.finditer(line):
                # usage notation ("[--plot]", "[FAMILY ...]"): drop the brackets, keep the words
                cmd = re.sub(r"[\[\]]|\.\.\.", " ", m.group(1))
                for tokens, _ in _commands(cmd):
                    checked += _check_command(tokens, f"{page.relative_to(ROOT)}:{n}")
    assert checked >= 3, checked


def test_command_checks_reject_what_does_not_exist():
    """The checkers above fail on a missing subcommand, option, script or module."""
    assert _check_command(["rml-fast", "bench", "--quick"], "ok")
    for bad in (
        ["rml-fast", "frobnicate"],
        ["rml-fast", "bench", "--no-such-option"],
        ["python", "benchmarks/bench_nothing.py"],
        ["python", "-m", "rml_fast.no_such_module"],
    ):
        with pytest.raises(AssertionError):
            _check_command(bad, "bad")
    assert not _check_command(["pip", "install", "x"], "other")


def test_markers_are_parsed(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "text\n\n<!-- doctest: slow, skip-no-cuda -->\n```python\nx = 1\n```\n\n```bash\nls\n```\n",
        encoding="utf-8",
    )
    blocks = parse_blocks(page)
    assert [(b.lang, b.line, b.flags) for b in blocks] == [
        ("python", 4, frozenset({"slow", "skip-no-cuda"})),
        ("bash", 8, frozenset()),
    ]
    assert blocks[0].code == "x = 1\n"
