"""Package-level behaviour: import cost, the missing-extension error, backend_info, stubs."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import types
from pathlib import Path

import rml_fast
from rml_fast import _C


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)


def test_import_loads_neither_torch_nor_triton():
    res = _run(
        "import sys, rml_fast, rml_fast.kernels.random;"
        "print(int('torch' in sys.modules), int('triton' in sys.modules))"
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["0", "0"]


def test_missing_extension_gives_build_instructions():
    code = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name == 'rml_fast._C':
            raise ImportError('simulated: no compiled module')
sys.meta_path.insert(0, Block())
try:
    import rml_fast
except ImportError as exc:
    print('ERR', exc)
"""
    res = _run(code)
    assert res.stdout.startswith("ERR"), res.stdout + res.stderr
    assert "not built" in res.stdout and "pip install" in res.stdout


def test_backend_info_reports_native_build():
    info = rml_fast.backend_info()
    assert info["version"] == rml_fast.__version__
    native = info["native"]
    assert native["built"] is True
    assert "-O3" in native["cxx_flags"] and "-march=native" not in native["cxx_flags"]
    assert isinstance(native["openmp"], bool) and native["openmp_max_threads"] >= 1
    assert info["torch"]["version"].startswith("2.")
    assert set(info["triton"]) == {"installed", "version", "interpret"}
    json.dumps(info)  # plain data


def _stub_functions() -> dict[str, set[str]]:
    tree = ast.parse((Path(rml_fast.__file__).parent / "_C.pyi").read_text())
    found: dict[str, set[str]] = {"": set()}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            found[""].add(node.name)
        elif isinstance(node, ast.ClassDef):
            found[node.name] = {
                n.name for n in node.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))
            }
    return found


def _module_functions() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {"": set()}
    for name in dir(_C):
        obj = getattr(_C, name)
        if isinstance(obj, types.ModuleType):
            found[name] = {
                n for n in dir(obj) if callable(getattr(obj, n)) and not n.startswith("_")
            }
        elif callable(obj) and not name.startswith("_"):
            found[""].add(name)
    return found


def test_stubs_match_extension():
    assert _stub_functions() == _module_functions()
