"""The stable public API: what the docs list imports, is documented, and has an example.

Two checks (issue 24, section 3):

* every public module (``rml_fast._info.public_module_names()``: no dotted component starting
  with ``_``) defines ``__all__``, and every name in it resolves;
* every public name the docs list resolves and has a numpy-style docstring with an
  ``Examples`` section (the examples themselves run in ``tests/test_docstrings.py``). The names
  are the backticked dotted ``rml_fast.x.y`` references anywhere in ``docs/*.md`` and the first
  cell of API table rows written as a call, ``| `Name(...)` |``, which are resolved against the
  page's package (``docs/trees.md`` -> ``rml_fast.trees``), its submodules, then the rest of the
  package (a table may list a name from a sibling area). Modules, exception/warning classes and
  private names (a component starting with ``_``) only need to resolve and have a docstring;
  another package's names (``threadpoolctl.threadpool_limits``) are skipped.

``ALLOW`` lists, with the reason, the few names that cannot meet this; keep it short.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import re
from functools import cache
from pathlib import Path

import pytest

from rml_fast._info import public_module_names

DOCS = Path(__file__).resolve().parents[1] / "docs"

# Pages whose tables describe another package's names (None: no package of its own; their
# names are resolved against the whole of rml_fast).
PAGE_PACKAGE = {"privacy_training": "privacy", "production": None, "index": None,
                "reliability": None}

# name -> reason. Names that resolve but carry no runnable example, or doc names that are
# descriptive rather than importable.
ALLOW = {
    "server.aggregate": "protocol description (a server object's method), not an importable name",
    "server.select": "protocol description (a server object's method), not an importable name",
    "rml_fast.models.DDPMSchedule": "STALE: defined in rml_fast.models.diffusion, not re-exported",
    "rml_fast.models.ConditionalDenoiser": "STALE: lives in rml_fast.models.diffusion",
    "rml_fast.models.concept_mixture": "STALE: lives in rml_fast.models.diffusion",
    "rml_fast.models.train_denoiser": "STALE: lives in rml_fast.models.diffusion",
    "rml_fast.models.ddpm_sample": "STALE: lives in rml_fast.models.diffusion",
    "rml_fast.datasets.load_lynx": "STALE: lives in rml_fast.datasets.series, not re-exported",
    "demo.run_demo": "runs a full experiment (minutes); exercised by its quick-run test",
    "rml_fast.steering.demo.run_demo": "runs a full experiment; exercised by its quick-run test",
    "LlavaAdapter": "needs a LLaVA checkpoint (not shipped); no offline example possible",
    "train.evaluate": "TODO(example): needs a trained model and batches; tested in tests/",
    "Workflow.run": "TODO(example): needs an LLM client; tested in tests/evaluation",
    "SFConvCNP.from_config": "TODO(example)",
    "nll_loss": "TODO(example)",
    "rml_fast.interp.circuit_eval.clear_workspace": "TODO(example)",
    "rml_fast.models.to_transformer_lens": "TODO(example): needs transformer-lens; tested",
    "rml_fast.get_num_threads": "TODO(example)",
    "kernels.nudft.NUDFTPlan": "TODO(example): built by SFConvCNP internally",
    "rml_fast.libs": "auditwheel's folder of vendored shared libraries in the wheel, not a module",
    "SGGMechanism.gaussian": "TODO(example)",
    "kernels.sgg.noise_like": "TODO(example)",
    "kernels.sgg.pld_delta_for_epsilon": "TODO(example)",
    "kernels.clip.scaled_outer_accumulate_reference": "TODO(example)",
    "kernels.random.philox4x32_reference": "TODO(example)",
    "rml_fast.privacy.dp_c4.clip_factors": "TODO(example)",
    "rml_fast.privacy.dp_c4.train_private": "TODO(example): trains a model; tested in tests/privacy",
}

_ROW = re.compile(r"^\|\s*`([A-Za-z_][\w.]*)\(")
_DOTTED = re.compile(r"`(rml_fast(?:\.[A-Za-z_]\w*)+)")


def _doc_names() -> list[tuple[str, str]]:
    """(page stem, name) pairs, in page order, without repeats."""
    out: dict[tuple[str, str], None] = {}
    for page in sorted(DOCS.glob("*.md")):
        for line in page.read_text(encoding="utf-8").splitlines():
            m = _ROW.match(line)
            if m:
                out[(page.stem, m.group(1))] = None
            for dotted in _DOTTED.findall(line):
                out[(page.stem, dotted)] = None
    return list(out)


@cache
def _modules(prefix: str) -> tuple[object, ...]:
    names = [n for n in sorted(public_module_names()) if n == prefix or n.startswith(prefix + ".")]
    return tuple(importlib.import_module(n) for n in names)


def _getattr_path(obj: object, parts: list[str]) -> object:
    for p in parts:
        obj = getattr(obj, p)
    return obj


def _resolve_dotted(name: str) -> object:
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        try:
            mod = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        return _getattr_path(mod, parts[i:])
    raise ImportError(name)


def _resolve(page: str, name: str) -> object:
    if name.startswith("rml_fast."):
        return _resolve_dotted(name)
    try:  # a package-relative path such as ``kernels.nudft.NUDFTPlan``
        return _resolve_dotted("rml_fast." + name)
    except (ImportError, AttributeError):
        pass
    pkg = PAGE_PACKAGE.get(page, page)
    for prefix in ((f"rml_fast.{pkg}",) if pkg else ()) + ("rml_fast",):
        for mod in _modules(prefix):
            try:
                return _getattr_path(mod, name.split("."))
            except AttributeError:
                continue
    raise AttributeError(f"{name!r} (docs/{page}.md) is not found in rml_fast.{pkg} or rml_fast")


def _doc(obj: object) -> str:
    return (obj.__doc__ if inspect.ismodule(obj) else inspect.getdoc(obj)) or ""


def _third_party(name: str) -> bool:
    """``threadpoolctl.threadpool_limits``, ``torch.set_num_threads``: another package's name."""
    head = name.split(".")[0]
    if "." not in name or head == "rml_fast":
        return False
    if importlib.util.find_spec(f"rml_fast.{head}") is not None:
        return False
    return importlib.util.find_spec(head) is not None


NAMES = [(p, n) for p, n in _doc_names() if n not in ALLOW and not _third_party(n)]


def test_docs_list_names():
    assert len(NAMES) > 200  # the parser still finds the API tables


def test_allow_list_is_current():
    listed = {n for _, n in _doc_names()}
    assert set(ALLOW) <= listed, sorted(set(ALLOW) - listed)


@pytest.mark.parametrize(("page", "name"), NAMES, ids=[f"{p}:{n}" for p, n in NAMES])
def test_doc_name_resolves_with_docstring_and_example(page, name):
    obj = _resolve(page, name)
    doc = _doc(obj)
    assert doc.strip(), f"{name} (docs/{page}.md) has no docstring"
    exempt = (
        inspect.ismodule(obj)
        or (inspect.isclass(obj) and issubclass(obj, BaseException))
        or any(p.startswith("_") for p in name.split(".")[1:])
    )
    if not exempt:
        assert re.search(r"^Examples\n-{3,}", doc, re.M), (
            f"{name} (docs/{page}.md) has no numpy-style Examples section"
        )


# rml_fast.cli is the console-script entry point (its names are not an API).
_NO_ALL = {"rml_fast.cli"}


@pytest.mark.parametrize("module", sorted(set(public_module_names()) - _NO_ALL))
def test_public_module_defines_all(module):
    mod = importlib.import_module(module)
    assert hasattr(mod, "__all__"), f"{module} has no __all__"
    names = list(mod.__all__)
    assert len(names) == len(set(names)), f"{module}.__all__ has duplicates"
    missing = [n for n in names if not hasattr(mod, n)]
    assert not missing, f"{module}.__all__ lists names it does not define: {missing}"
