"""Machinery of the entry-point fuzzer: collect, record a valid call, mutate, check the contract.

1. :func:`collect_entry_points` walks rml_fast's public modules (no ``_`` component, no
   ``*.demos``), takes each ``__all__`` and keeps the functions and classes, deduplicated by
   identity (a re-export is one entry point).
2. :func:`record_baselines` runs every docstring example with each entry point wrapped by a
   recorder that keeps (a deep copy of) the arguments of its first top-level call; for a class,
   the constructor call and the first call of each public method it defines (with a snapshot of
   ``self`` taken just before). These are known-good calls.
3. :func:`mutations` derives from a baseline call one changed argument at a time (NaN / inf,
   empty, wrong ndim, wrong dtype, non-contiguous and Fortran-ordered views, a torch tensor for
   an array and a NumPy array or a "meta" tensor for a tensor, negative / zero / huge scalars,
   None, a string) and :func:`run_case` checks the contract on each: the call returns (the
   baseline's result where the input is equivalent, e.g. a strided view) or raises a
   ValueError/TypeError whose message names the argument; never another exception, a hang, or
   a change to the caller's arrays.
"""

from __future__ import annotations

import contextlib
import copy
import doctest
import hashlib
import importlib
import inspect
import math
import re
import signal
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

try:
    import torch
except ImportError:  # pragma: no cover - torch is a dependency
    torch = None

# --- 1. collection -------------------------------------------------------------------------


def public_modules() -> list[str]:
    """Public module names minus the demos (experiments, not API)."""
    from rml_fast._info import public_module_names

    return [
        m for m in public_module_names()
        if not any(p in ("demo", "demos") for p in m.split(".")[1:])
    ]


@dataclass
class EntryPoint:
    """One public function or class, under the first public module exporting it."""

    name: str  # "<module>.<name>" where first found
    obj: Any
    kind: str  # "function" or "class"


def _is_function(obj: Any) -> bool:
    return inspect.isfunction(inspect.unwrap(obj)) if callable(obj) else False


def collect_entry_points() -> list[EntryPoint]:
    """Every function and class named in a public module's ``__all__``, once."""
    seen: dict[int, EntryPoint] = {}
    for mod_name in public_modules():
        module = importlib.import_module(mod_name)
        for name in getattr(module, "__all__", None) or []:
            obj = getattr(module, name, None)
            if id(obj) in seen or obj is None:
                continue
            if inspect.isclass(obj):
                kind = "class"
            elif _is_function(obj):
                kind = "function"
            else:
                continue
            if not (getattr(obj, "__module__", "") or "").startswith("rml_fast"):
                continue  # a peer's type re-exported for convenience
            seen[id(obj)] = EntryPoint(f"{mod_name}.{name}", obj, kind)
    return list(seen.values())


def public_methods(cls: type) -> list[str]:
    """Public methods (plain, class- and static-) that ``cls`` defines itself."""
    out = []
    for name, attr in vars(cls).items():
        if name.startswith("_"):
            continue
        if isinstance(attr, (classmethod, staticmethod)):
            attr = attr.__func__
        if inspect.isfunction(attr):
            out.append(name)
    return out


# --- 2. recording baselines from the doctests --------------------------------------------


@dataclass
class Call:
    """A recorded call: ``target(*args, **kwargs)``; for a method, on a snapshot of ``self``."""

    label: str  # "f", "Cls()", "Cls.fit"
    entry: str
    func: Callable[..., Any]  # the original callable (class, function, or unbound method)
    args: tuple
    kwargs: dict
    self_obj: Any = None  # snapshot of self for an instance method
    method: str | None = None
    binding: str = "plain"  # "plain", "method", "classmethod", "staticmethod"


def _copy(obj: Any) -> Any:
    """A deep copy; parts that refuse to be copied (immutable objects) are shared."""
    try:
        return copy.deepcopy(obj)
    except Exception:
        if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
            return tuple(_copy(o) for o in obj)
        if isinstance(obj, list):
            return [_copy(o) for o in obj]
        if isinstance(obj, dict):
            return {k: _copy(v) for k, v in obj.items()}
        return obj


class _Recorder:
    def __init__(self) -> None:
        self.calls: dict[str, Call] = {}
        self.unrecordable: dict[str, str] = {}
        self.top_level: set[str] = set()
        self.depth = 0
        self.patches: list[tuple[Any, str, bool, Any]] = []  # (owner, attr, had_own, old)

    # -- patching
    def _set(self, owner: Any, attr: str, value: Any) -> None:
        had = attr in vars(owner)
        self.patches.append((owner, attr, had, vars(owner).get(attr)))
        setattr(owner, attr, value)

    def restore(self) -> None:
        for owner, attr, had, old in reversed(self.patches):
            if had:
                setattr(owner, attr, old)
            else:
                with contextlib.suppress(AttributeError):
                    delattr(owner, attr)
        self.patches.clear()

    def _keep(self, label: str, make: Callable[[], Call]) -> None:
        """Keep the first top-level call; an inner call (from package code) only until then."""
        if label in self.calls and (self.depth > 0 or label in self.top_level):
            return
        if self.depth == 0:
            self.top_level.add(label)
        try:
            self.calls[label] = make()
        except Exception as exc:  # an argument that cannot be deep-copied: no baseline
            self.unrecordable[label] = f"{type(exc).__name__}: {exc}"[:200]

    def wrap_function(self, ep: EntryPoint) -> Callable[..., Any]:
        orig = ep.obj
        rec = self

        def recorder(*args, **kwargs):
            if ep.name not in rec.top_level:
                rec._keep(
                    ep.name,
                    lambda: Call(ep.name, ep.name, orig, _copy(args),
                                 _copy(kwargs)),
                )
            rec.depth += 1
            try:
                return orig(*args, **kwargs)
            finally:
                rec.depth -= 1

        recorder.__wrapped__ = orig  # type: ignore[attr-defined]
        recorder.__signature__ = _signature(orig)  # type: ignore[attr-defined]
        return recorder

    def patch_class(self, ep: EntryPoint) -> None:
        cls = ep.obj
        rec = self
        if issubclass(cls, BaseException):
            return
        init = cls.__init__
        label = f"{ep.name}()"

        def init_recorder(this, *args, **kwargs):
            if label not in rec.top_level and type(this) is cls:
                rec._keep(
                    label,
                    lambda: Call(label, ep.name, cls, _copy(args),
                                 _copy(kwargs)),
                )
            rec.depth += 1
            try:
                if init is object.__init__:
                    return init(this)
                return init(this, *args, **kwargs)
            finally:
                rec.depth -= 1

        if "__new__" not in vars(cls) and not _is_namedtuple(cls):
            self._set(cls, "__init__", init_recorder)
        else:  # NamedTuple and friends: __new__ takes the fields
            new = cls.__new__

            def new_recorder(klass, *args, **kwargs):
                if label not in rec.top_level and klass is cls:
                    rec._keep(
                        label,
                        lambda: Call(label, ep.name, cls, _copy(args),
                                     _copy(kwargs)),
                    )
                rec.depth += 1
                try:
                    return new(klass, *args, **kwargs)
                finally:
                    rec.depth -= 1

            self._set(cls, "__new__", staticmethod(new_recorder))
        for name in public_methods(cls):
            self._patch_method(ep, cls, name)

    def _patch_method(self, ep: EntryPoint, cls: type, name: str) -> None:
        raw = vars(cls)[name]
        label = f"{ep.name}.{name}"
        rec = self
        if isinstance(raw, staticmethod):
            fn = raw.__func__

            def static_rec(*args, **kwargs):
                if label not in rec.top_level:
                    rec._keep(label, lambda: Call(label, ep.name, fn, _copy(args),
                                                  _copy(kwargs),
                                                  binding="staticmethod"))
                rec.depth += 1
                try:
                    return fn(*args, **kwargs)
                finally:
                    rec.depth -= 1

            self._set(cls, name, staticmethod(static_rec))
        elif isinstance(raw, classmethod):
            fn = raw.__func__

            def class_rec(klass, *args, **kwargs):
                if label not in rec.top_level and klass is cls:
                    rec._keep(label, lambda: Call(label, ep.name, fn, _copy(args),
                                                  _copy(kwargs), self_obj=cls,
                                                  method=name, binding="classmethod"))
                rec.depth += 1
                try:
                    return fn(klass, *args, **kwargs)
                finally:
                    rec.depth -= 1

            self._set(cls, name, classmethod(class_rec))
        else:
            fn = raw

            def method_rec(this, *args, **kwargs):
                if label not in rec.top_level and type(this) is cls:
                    rec._keep(label, lambda: Call(label, ep.name, fn, _copy(args),
                                                  _copy(kwargs),
                                                  self_obj=_copy(this), method=name,
                                                  binding="method"))
                rec.depth += 1
                try:
                    return fn(this, *args, **kwargs)
                finally:
                    rec.depth -= 1

            method_rec.__wrapped__ = fn  # type: ignore[attr-defined]
            self._set(cls, name, method_rec)


def _is_namedtuple(cls: type) -> bool:
    return issubclass(cls, tuple) and hasattr(cls, "_fields")


def _signature(obj: Any) -> inspect.Signature | None:
    try:
        return inspect.signature(obj)
    except (TypeError, ValueError):
        return None


def doctest_modules(entries: list[EntryPoint]) -> list[str]:
    """The public modules and the (possibly private) modules defining an entry point."""
    names = set(public_modules())
    names.update(getattr(ep.obj, "__module__", "") for ep in entries)
    areas = {".".join(ep.name.split(".")[:2]) for ep in entries}
    if len(entries) < len(collect_entry_points()):  # a partial run: the entries' areas
        names = {n for n in names if ".".join(n.split(".")[:2]) in areas}
    return sorted(n for n in names if n.startswith("rml_fast")
                  and not any(p in ("demo", "demos") for p in n.split(".")[1:]))


_DOCTEST_OUT = lambda s: None  # noqa: E731
DOCTEST_TIMEOUT = 10.0


@contextlib.contextmanager
def _global_state_kept():
    """Restore torch's and NumPy's global settings that an example may change."""
    import rml_fast.config as config

    saved_np = np.geterr()
    saved_cfg = (config._memory_limit, config.get_num_threads())
    saved = None
    if torch is not None:
        saved = (torch.get_num_threads(), torch.is_grad_enabled(), torch.get_default_dtype(),
                 torch.is_anomaly_enabled(), torch.are_deterministic_algorithms_enabled())
    try:
        yield
    finally:
        np.seterr(**saved_np)
        config._memory_limit = saved_cfg[0]
        config.set_num_threads(saved_cfg[1])
        if saved is not None:
            torch.set_num_threads(saved[0])
            torch.set_grad_enabled(saved[1])
            torch.set_default_dtype(saved[2])
            torch.autograd.set_detect_anomaly(saved[3])
            torch.use_deterministic_algorithms(saved[4])


@contextlib.contextmanager
def _time_guard(seconds: float, repeat: float = 0.0):
    """Raise :class:`_Timeout` in the main thread after ``seconds`` (Python code only)."""
    use = seconds > 0 and hasattr(signal, "setitimer")
    if use:
        old = signal.signal(signal.SIGALRM, _alarm)
        signal.setitimer(signal.ITIMER_REAL, seconds, repeat)
    try:
        yield
    finally:
        if use:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
DOCTEST_SECONDS: dict[str, float] = {}


def record_baselines(entries: list[EntryPoint]) -> tuple[dict[str, Call], dict[str, str]]:
    """Run every docstring example with the entry points wrapped; the first calls seen."""
    finder = doctest.DocTestFinder()
    tests = []  # found before patching: the finder skips functions defined elsewhere
    for mod_name in doctest_modules(entries):
        module = importlib.import_module(mod_name)
        tests.extend(finder.find(module, mod_name))
    rec = _Recorder()
    wrappers = {}
    for ep in entries:
        if ep.kind == "function":
            wrappers[id(ep.obj)] = rec.wrap_function(ep)
        else:
            rec.patch_class(ep)
    # replace each function wherever an rml_fast module holds it by name
    for mod in list(sys.modules.values()):
        if not (getattr(mod, "__name__", "") or "").startswith("rml_fast"):
            continue
        for attr, val in list(vars(mod).items()):
            w = wrappers.get(id(val))
            if w is not None:
                rec._set(mod, attr, w)
    runner = doctest.DocTestRunner(
        optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False
    )
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for test in tests:
                for k, v in list(test.globs.items()):
                    w = wrappers.get(id(v))
                    if w is not None:
                        test.globs[k] = w
                t0 = time.perf_counter()
                try:
                    with _global_state_kept(), _time_guard(DOCTEST_TIMEOUT, repeat=0.05):
                        runner.run(test, out=_DOCTEST_OUT, clear_globs=False)
                except _Timeout:
                    pass  # the calls recorded so far are kept
                DOCTEST_SECONDS[test.name] = time.perf_counter() - t0
    finally:
        rec.restore()
    return rec.calls, rec.unrecordable


# --- 3. mutations ---------------------------------------------------------------------------


@dataclass
class Mutation:
    """Argument ``where`` (a positional index or a keyword) replaced by ``value``.

    ``expect``: "same" (an equivalent input: the result must equal the baseline's),
    "same_or_error" (equal result, or a ValueError/TypeError naming the argument),
    "reject" (NaN: must be refused with a ValueError/TypeError naming the argument, or give
    a result that is itself not finite), "any" (a result, or such an error).
    """

    where: int | str
    kind: str
    value: Any
    expect: str


def _is_array(v: Any) -> bool:
    return isinstance(v, np.ndarray) and v.dtype.kind in "biuf" and v.dtype != object


def _is_tensor(v: Any) -> bool:
    return torch is not None and isinstance(v, torch.Tensor)


def _noncontig_np(a: np.ndarray) -> np.ndarray:
    big = np.repeat(a, 2, axis=-1)
    return big[..., ::2]


def _with_nan(a: np.ndarray, value: float, pos: int) -> np.ndarray:
    b = np.array(a, dtype=a.dtype, copy=True)
    b.flat[pos % b.size] = value  # (reshape(-1) would copy a Fortran-ordered array)
    return b


def array_mutations(a: np.ndarray, pos: int = 0) -> list[tuple[str, Any, str]]:
    out: list[tuple[str, Any, str]] = []
    if a.ndim >= 1 and a.size > 0:
        out.append(("noncontiguous", _noncontig_np(a), "same"))
    if a.ndim >= 2 and a.size > 0:
        out.append(("fortran", np.asfortranarray(a), "same"))
    if a.dtype.kind == "f" and a.size > 0:
        out.append(("nan", _with_nan(a, np.nan, pos), "reject"))
        out.append(("inf", _with_nan(a, np.inf, pos), "any"))
    if a.ndim >= 1:
        out.append(("empty", a[:0].copy(), "any"))
    out.append(("extra_dim", a[None].copy(), "any"))
    if a.ndim >= 2 or (a.ndim == 1 and a.size > 0):
        out.append(("ravel_or_scalar", a.reshape(-1)[:1].reshape(()) if a.ndim == 1
                    else a.reshape(-1).copy(), "any"))
    out.append(("complex", a.astype(np.complex128), "any"))
    out.append(("object", a.astype(object), "any"))
    out.append(("str", a.astype(str), "any"))
    if a.dtype.kind != "b":
        out.append(("bool", a.astype(bool), "any"))
    if torch is not None and a.dtype.kind in "fiub":
        out.append(("torch_tensor", torch.from_numpy(np.ascontiguousarray(a).copy()),
                    "same_or_error"))
    return out


def tensor_mutations(t: Any, pos: int = 0) -> list[tuple[str, Any, str]]:
    out: list[tuple[str, Any, str]] = []
    t = t.detach() if not t.requires_grad else t
    base = t.detach().clone()
    if base.ndim >= 1 and base.numel() > 0:
        nc = torch.repeat_interleave(base, 2, dim=-1)[..., ::2]
        out.append(("noncontiguous", nc.requires_grad_(t.requires_grad)
                    if t.is_floating_point() else nc, "same"))
    if base.is_floating_point() and base.numel() > 0:
        for kind, val, expect in (("nan", math.nan, "reject"), ("inf", math.inf, "any")):
            b = base.clone()
            b.view(-1)[pos % b.numel()] = val
            out.append((kind, b, expect))
    if base.ndim >= 1:
        out.append(("empty", base[:0].clone(), "any"))
    out.append(("extra_dim", base[None].clone(), "any"))
    out.append(("meta", base.to("meta"), "any"))
    if base.dtype not in (torch.bfloat16,) and not base.is_complex():
        out.append(("numpy_array", base.numpy().copy(), "same_or_error"))
    if base.is_floating_point():
        out.append(("complex", base.to(torch.complex128), "any"))
        out.append(("int", base.to(torch.int64), "any"))
    return out


def scalar_mutations(v: Any) -> list[tuple[str, Any, str]]:
    if isinstance(v, bool):
        return [("none", None, "any"), ("string", "not-a-value", "any"), ("int_for_bool", 2, "any")]
    if isinstance(v, (int, np.integer)):
        # no huge ints: a size of 2**63 makes some callers allocate until the machine
        # runs out of memory (resource limits are issue 25 section 5, not fuzzed here)
        return [("negative", -1, "any"), ("zero", 0, "any"),
                ("float", float(v) + 0.5, "any"), ("nan", math.nan, "any"),
                ("none", None, "any"), ("string", "not-a-value", "any")]
    if isinstance(v, (float, np.floating)):
        return [("negative", -abs(float(v)) - 1.0, "any"), ("zero", 0.0, "any"),
                ("huge", 1e300, "any"), ("nan", math.nan, "any"), ("inf", math.inf, "any"),
                ("none", None, "any"), ("string", "not-a-value", "any")]
    if isinstance(v, str):
        return [("bogus_string", "__no_such_option__", "any"), ("none", None, "any"),
                ("int", 3, "any")]
    return []


def mutations(call: Call, pos: int = 0) -> list[Mutation]:
    """One changed argument at a time, for every argument of a recorded call."""
    out: list[Mutation] = []
    slots: list[tuple[int | str, Any]] = list(enumerate(call.args)) + list(call.kwargs.items())
    for where, v in slots:
        if _is_array(v):
            muts = array_mutations(v, pos)
        elif _is_tensor(v):
            muts = tensor_mutations(v, pos)
        elif isinstance(v, (bool, int, float, str, np.integer, np.floating)):
            muts = scalar_mutations(v)
        elif isinstance(v, (list, tuple)) and v and all(
            isinstance(e, (int, float)) and not isinstance(e, bool) for e in v
        ):
            arr = np.asarray(v)
            muts = [("nan_in_list", type(v)([*list(v[:-1]), math.nan]), "reject")] if (
                arr.dtype.kind == "f") else []
            muts += [("empty_list", type(v)(), "any"), ("none", None, "any")]
        elif v is None:
            muts = [("string_for_none", "not-a-value", "any")]
        else:
            muts = []
        out.extend(Mutation(where, k, val, e) for k, val, e in muts)
    return out


# --- 4. running one case and checking the contract ---------------------------------------


class _Timeout(BaseException):
    pass


def _alarm(signum, frame):  # pragma: no cover - fires only on a hang
    raise _Timeout()


def fingerprint(obj: Any, depth: int = 0) -> Any:
    """Hashes of the arrays and tensors in an argument (nested lists/tuples/dicts)."""
    if depth > 3:
        return None
    if isinstance(obj, np.ndarray):
        if obj.dtype == object:
            return ("obj", obj.shape, repr(obj.tolist())[:10000])
        return ("nd", obj.shape, str(obj.dtype),
                hashlib.sha1(np.ascontiguousarray(obj).tobytes()).hexdigest())
    if _is_tensor(obj):
        if obj.device.type == "meta":
            return ("meta", tuple(obj.shape))
        t = obj.detach().cpu().contiguous()
        if t.dtype == torch.bfloat16:
            t = t.float()
        return ("t", tuple(t.shape), str(t.dtype),
                hashlib.sha1(t.numpy().tobytes()).hexdigest())
    if isinstance(obj, (list, tuple)):
        return tuple(fingerprint(o, depth + 1) for o in obj)
    if isinstance(obj, dict):
        return tuple((k, fingerprint(v, depth + 1)) for k, v in obj.items())
    return None


def _to_np(v: Any) -> Any:
    if _is_tensor(v):
        if v.device.type == "meta":
            return None
        v = v.detach().cpu()
        if v.dtype == torch.bfloat16:
            v = v.float()
        return v.numpy()
    return v


def results_equal(a: Any, b: Any, depth: int = 0) -> bool:
    """Recursive comparison to float tolerance; objects by their array/number attributes."""
    if depth > 4:
        return True
    a, b = _to_np(a), _to_np(b)
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        try:
            a_arr, b_arr = np.asarray(a), np.asarray(b)
        except Exception:
            return False
        if a_arr.shape != b_arr.shape:
            return False
        if a_arr.dtype.kind in "fc" or b_arr.dtype.kind in "fc":
            return bool(np.allclose(a_arr, b_arr, rtol=1e-5, atol=1e-7, equal_nan=True))
        return bool(np.array_equal(a_arr, b_arr))
    if isinstance(a, (float, np.floating)) and isinstance(b, (float, np.floating, int)):
        return math.isclose(float(a), float(b), rel_tol=1e-5, abs_tol=1e-7) or (
            math.isnan(float(a)) and math.isnan(float(b)))
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(results_equal(x, y, depth + 1) for x, y in zip(a, b, strict=False))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(results_equal(a[k], b[k], depth + 1) for k in a)
    if isinstance(a, (int, str, bool, type(None))):
        return a == b or (isinstance(b, float) and results_equal(b, a, depth))
    if type(a) is not type(b):
        return False
    if (hasattr(a, "__dict__") and not callable(a)) or hasattr(a, "get_params"):
        va, vb = vars(a), vars(b)
        keys = [k for k, v in va.items() if isinstance(v, (np.ndarray, float, int, list, tuple))
                or _is_tensor(v)]
        return all(k in vb and results_equal(va[k], vb[k], depth + 1) for k in keys)
    return True  # opaque objects: not compared


def _has_nonfinite(r: Any, depth: int = 0) -> bool:
    if depth > 4:
        return False
    r = _to_np(r)
    if isinstance(r, np.ndarray) and r.dtype.kind in "fc":
        return not bool(np.isfinite(r).all())
    if isinstance(r, (float, np.floating, complex)):
        return not math.isfinite(abs(r))
    if isinstance(r, (list, tuple)):
        return any(_has_nonfinite(x, depth + 1) for x in r)
    if isinstance(r, dict):
        return any(_has_nonfinite(x, depth + 1) for x in r.values())
    if hasattr(r, "__dict__") and not callable(r):
        return any(_has_nonfinite(x, depth + 1) for k, x in vars(r).items()
                   if k.endswith("_") and not k.startswith("_"))
    return False


def param_name(call: Call, where: int | str) -> str:
    """The parameter's name for a positional index (from the signature)."""
    if isinstance(where, str):
        return where
    sig = _signature(call.func)
    if sig is None:
        return f"arg{where}"
    params = [p for p in sig.parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if call.binding in ("method", "classmethod"):
        params = params[1:]  # self / cls
    if where < len(params):
        return params[where].name
    var = [p for p in sig.parameters.values() if p.kind == p.VAR_POSITIONAL]
    return var[0].name if var else f"arg{where}"


def names_argument(msg: str, name: str) -> bool:
    """Whether an error message names the argument (as a word; ``x`` in ``x[0]`` counts)."""
    return re.search(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])", msg) is not None


@dataclass
class Outcome:
    kind: str  # "ok", "error" (a good ValueError/TypeError) or a failure kind
    detail: str = ""


FAILURES = ("crash", "unnamed", "hang", "mismatch", "accepted_nan", "mutated_input")


@dataclass
class Stats:
    entry_points: int = 0
    fuzzed: int = 0
    excluded: int = 0
    calls_recorded: int = 0
    examples: int = 0
    failures: dict[str, int] = field(default_factory=dict)
    failed_cases: list[str] = field(default_factory=list)
    outcomes: dict[str, int] = field(default_factory=dict)
    skipped_baselines: dict[str, str] = field(default_factory=dict)
    failed_entries: dict[str, list[str]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "entry_points": self.entry_points, "fuzzed": self.fuzzed,
            "excluded": self.excluded, "calls_recorded": self.calls_recorded,
            "examples": self.examples, "failures": dict(sorted(self.failures.items())),
            "outcomes": dict(sorted(self.outcomes.items())),
            "failed_cases": self.failed_cases,
            "skipped_baselines": self.skipped_baselines,
            "failed_entries": self.failed_entries,
        }


STATS = Stats()


def invoke(call: Call, args: tuple, kwargs: dict, timeout: float) -> Any:
    """Run the call once with a time guard (SIGALRM, main thread only)."""
    if call.binding == "method":
        target = getattr(_copy(call.self_obj), call.method)
    elif call.binding == "classmethod":
        target = getattr(call.self_obj, call.method)
    else:
        target = call.func
    use_alarm = timeout > 0 and hasattr(signal, "setitimer")
    if use_alarm:
        old = signal.signal(signal.SIGALRM, _alarm)
        signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return target(*args, **kwargs)
    finally:
        if use_alarm:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)


def run_case(call: Call, mut: Mutation, baseline: Any, deterministic: bool,
             timeout: float) -> Outcome:
    """Apply one mutation and check the contract."""
    args = list(_copy(call.args))
    kwargs = _copy(call.kwargs)
    if isinstance(mut.where, int):
        args[mut.where] = mut.value
    else:
        kwargs[mut.where] = mut.value
    before = fingerprint((args, kwargs))
    name = param_name(call, mut.where)
    try:
        result = invoke(call, tuple(args), kwargs, timeout)
    except _Timeout:
        return Outcome("hang", f"no answer within {timeout:.0f} s")
    except (ValueError, TypeError) as exc:
        if fingerprint((args, kwargs)) != before:
            return Outcome("mutated_input", name)
        msg = str(exc)
        if not names_argument(msg, name):
            return Outcome("unnamed", f"{type(exc).__name__}: {msg[:200]}")
        return Outcome("error")
    except Exception as exc:
        return Outcome("crash", f"{type(exc).__name__}: {str(exc)[:200]}")
    if fingerprint((args, kwargs)) != before:
        return Outcome("mutated_input", name)
    if (mut.expect in ("same", "same_or_error") and deterministic
            and not results_equal(result, baseline)):
        return Outcome("mismatch", "result differs from the baseline's")
    if mut.expect == "reject" and not _has_nonfinite(result):
        return Outcome("accepted_nan", "NaN input gave a finite result")
    return Outcome("ok")


def timed_baseline(call: Call, timeout: float) -> tuple[Any, float, bool]:
    """(result, seconds, deterministic) of the recorded call, run twice."""
    args, kwargs = _copy(call.args), _copy(call.kwargs)
    before = fingerprint((args, kwargs))
    t0 = time.perf_counter()
    r1 = invoke(call, args, kwargs, timeout)
    dt = time.perf_counter() - t0
    if fingerprint((args, kwargs)) != before:
        raise AssertionError(f"{call.label}: the valid call mutated its input")
    r2 = invoke(call, _copy(call.args), _copy(call.kwargs), timeout)
    return r1, dt, results_equal(r1, r2)


# --- 5. the driver: all structured mutations, then hypothesis-drawn ones ------------------

PRIORITY = ("nan", "noncontiguous", "fortran", "empty", "torch_tensor", "numpy_array", "meta",
            "negative", "zero", "none", "string", "bogus_string", "str", "complex", "inf",
            "extra_dim", "ravel_or_scalar", "object", "bool", "huge", "float", "int",
            "nan_in_list", "empty_list", "string_for_none", "int_for_bool")


def _order(muts: list[Mutation]) -> list[Mutation]:
    rank = {k: i for i, k in enumerate(PRIORITY)}
    return sorted(muts, key=lambda m: rank.get(m.kind, len(rank)))


def fuzz_call(call: Call, slow_s: float, hypothesis_examples: int,
              budget: dict[str, int]) -> list[str]:
    """Fuzz one recorded call; returns the failures. A call whose baseline takes longer than
    ``slow_s`` seconds gets only its four highest-priority mutations."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    failures: list[str] = []
    try:
        baseline, dt, deterministic = timed_baseline(call, timeout=max(10.0, 0.0))
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        STATS.skipped_baselines[call.label] = f"{type(exc).__name__}: {str(exc)[:120]}"
        return failures
    timeout = max(2.0, 20 * dt)
    # deterministic caps (not a clock): a slow call gets its highest-priority mutations only
    if dt < slow_s:
        cap, hyp = 10**6, hypothesis_examples
    else:  # at most ``slow_labels`` slow calls per entry point, 3 mutations each
        cap, hyp = (3 if budget["slow_labels"] > 0 else 0), 0
        budget["slow_labels"] -= 1

    def check(mut: Mutation) -> None:
        out = run_case(call, mut, baseline, deterministic, timeout)
        STATS.examples += 1
        STATS.outcomes[out.kind] = STATS.outcomes.get(out.kind, 0) + 1
        if out.kind not in ("ok", "error"):
            STATS.failures[out.kind] = STATS.failures.get(out.kind, 0) + 1
            where = param_name(call, mut.where)
            line = f"{call.label} [{where} <- {mut.kind}] {out.kind}: {out.detail}"
            STATS.failed_cases.append(line)
            STATS.failed_entries.setdefault(call.entry, []).append(line)
            failures.append(line)

    muts = _order(mutations(call))
    for mut in muts[:cap]:
        check(mut)
    if hyp <= 0:
        return failures
    slots = [(w, v) for w, v in list(enumerate(call.args)) + list(call.kwargs.items())
             if (_is_array(v) and v.dtype.kind == "f" and v.size > 0)
             or (isinstance(v, (int, float)) and not isinstance(v, bool))]
    if not slots:
        return failures

    @settings(derandomize=True, deadline=None, max_examples=hyp,
              database=None, suppress_health_check=list(HealthCheck))
    @given(st.data())
    def drawn(data):
        where, v = data.draw(st.sampled_from(slots), label="argument")
        if isinstance(v, np.ndarray):
            pos = data.draw(st.integers(0, v.size - 1), label="position")
            bad = data.draw(st.sampled_from([math.nan, math.inf, -math.inf]), label="value")
            mut = Mutation(where, "nan" if math.isnan(bad) else "inf",
                           _with_nan(v, bad, pos), "reject" if math.isnan(bad) else "any")
        elif isinstance(v, int):
            mut = Mutation(where, "drawn_int", data.draw(st.integers(-5, 100)), "any")
        else:
            mut = Mutation(where, "drawn_float", data.draw(
                st.floats(-1e6, 1e6) | st.sampled_from([math.nan, math.inf, 0.0])), "any")
        check(mut)

    drawn()
    return failures
