#!/usr/bin/env bash
# Build rml_fast._C with AddressSanitizer + UndefinedBehaviorSanitizer and run the tests that call
# the native kernels under it; exits non-zero on any sanitizer report or test failure.
#
# Usage:  scripts/sanitize.sh [pytest arguments...]
#         scripts/sanitize.sh --fuzz [scripts/fuzz_bindings.py arguments...]
#   With no arguments it runs tests/kernels and the other test files that call the native kernels
#   (SANITIZE_TESTS below). Arguments replace that list, e.g. `scripts/sanitize.sh tests/kernels/test_sgg.py`.
#   --fuzz runs the atheris fuzzer (scripts/fuzz_bindings.py) under the sanitizer build instead.
#
# Environment:
#   PYTHON                 interpreter whose site-packages hold the dependencies (numpy, torch, pytest,
#                          pybind11, ...); default: .venv/bin/python of this checkout, else python3.
#   RML_FAST_SANITIZE_DIR  work directory (default /tmp/rml-asan-$USER): build/, stage/, venv/, logs/.
#   SANITIZE_JOBS          parallel compile jobs (default: nproc).
#   SANITIZE_BUILD_ONLY=1  build and stage the sanitizer variant, run nothing.
#
# Nothing in the checkout or in $PYTHON's environment is modified: the extension is configured and
# built with CMake into $WORK/build (-DRML_FAST_SANITIZE=ON), the checkout's rml_fast/ is copied to
# $WORK/stage together with that _C, and a throwaway venv ($WORK/venv, made from $PYTHON's base
# interpreter) sees $WORK/stage first and then $PYTHON's site-packages through a .pth file. Plain
# path lines in a .pth do not run that site-packages' own .pth hooks, so an editable install of
# rml_fast there (scikit-build-core's import finder) cannot shadow the staged copy.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WORK="${RML_FAST_SANITIZE_DIR:-/tmp/rml-asan-${USER:-$(id -un)}}"
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x "$ROOT/.venv/bin/python" ]]; then PYTHON="$ROOT/.venv/bin/python"; else PYTHON="$(command -v python3)"; fi
fi
JOBS="${SANITIZE_JOBS:-$(nproc)}"
SANITIZE_TESTS=(
  tests/kernels
  tests/privacy/test_clipping.py
  tests/privacy/test_pld.py
  tests/privacy/test_pld_pessimistic.py
  tests/privacy/test_dp_c4.py
  tests/trees/test_falling.py
  tests/steering/test_srls.py
  tests/neural_processes/test_sfconv.py
  tests/interp/test_query_circuits.py
)
FUZZ=0
if [[ "${1:-}" == "--fuzz" ]]; then FUZZ=1; shift; fi
if [[ $# -gt 0 || $FUZZ == 1 ]]; then TESTS=("$@"); else TESTS=("${SANITIZE_TESTS[@]}"); fi

say() { printf '[sanitize %(%H:%M:%S)T] %s\n' -1 "$*"; }
t0=$SECONDS
mkdir -p "$WORK"

# 1. Configure + build (incremental when $WORK/build exists). Debug: assert() stays on; the
#    RML_FAST_SANITIZE option appends -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=all.
say "configure + build into $WORK/build ($JOBS jobs)"
GEN=()
if command -v ninja >/dev/null 2>&1; then GEN=(-G Ninja); fi
if [[ ! -f "$WORK/build/CMakeCache.txt" ]]; then
  cmake -S "$ROOT" -B "$WORK/build" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Debug -DRML_FAST_SANITIZE=ON \
    -DPython_EXECUTABLE="$("$PYTHON" -c 'import sys; print(sys.executable)')" \
    -Dpybind11_DIR="$("$PYTHON" -m pybind11 --cmakedir)" >"$WORK/configure.log" 2>&1 \
    || { cat "$WORK/configure.log"; exit 2; }
fi
cmake --build "$WORK/build" -j "$JOBS" >"$WORK/build.log" 2>&1 || { tail -50 "$WORK/build.log"; exit 2; }
SO="$(ls "$WORK"/build/_C*.so | head -1)"
t_build=$((SECONDS - t0))
say "built $SO in ${t_build}s"

# 2. Stage the package with the sanitizer _C, and the throwaway venv that imports it.
rm -rf "$WORK/stage"
mkdir -p "$WORK/stage"
(cd "$ROOT" && tar --exclude=__pycache__ --exclude='_C*.so' -cf - rml_fast) | tar -xf - -C "$WORK/stage"
cp "$SO" "$WORK/stage/rml_fast/"
if [[ ! -x "$WORK/venv/bin/python" ]]; then
  "$("$PYTHON" -c 'import sys; print(getattr(sys, "_base_executable", sys.executable))')" \
    -m venv --without-pip "$WORK/venv"
fi
VPY="$WORK/venv/bin/python"
SITE="$("$VPY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
DEPS="$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
printf '%s\n%s\n' "$WORK/stage" "$DEPS" >"$SITE/rml_fast_sanitize.pth"

# 3. The sanitizer runtime environment (inherited by the tests' subprocesses).
LIBASAN="$(gcc -print-file-name=libasan.so)"
LIBUBSAN="$(gcc -print-file-name=libubsan.so)"
export LD_PRELOAD="$LIBASAN:$LIBUBSAN"
# detect_leaks=0: CPython, numpy and torch keep allocations until exit by design.
# allocator_may_return_null=1: a refused huge allocation becomes numpy's MemoryError, as in a
# normal build, instead of an ASan abort. Reports go to $WORK/logs/{asan,ubsan}.<pid> as well.
rm -rf "$WORK/logs" && mkdir -p "$WORK/logs"
export ASAN_OPTIONS="detect_leaks=0:allocator_may_return_null=1:halt_on_error=1:abort_on_error=0:log_path=$WORK/logs/asan"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$WORK/logs/ubsan"
# The checkout's own rml_fast/ (no _C) must never come first on sys.path, also in subprocesses
# that the tests start with `python -c` from the repository root.
export PYTHONSAFEPATH=1
export RML_FAST_SANITIZE_BUILD=1

"$VPY" - "$WORK/stage" <<'EOF'
import sys
import rml_fast._C as C
info = C.build_info()
assert C.__file__.startswith(sys.argv[1]), f"wrong _C imported: {C.__file__}"
assert "-fsanitize=address,undefined" in info["cxx_flags"], info
print(f"using {C.__file__}\n  {info}")
EOF
if [[ "${SANITIZE_BUILD_ONLY:-0}" == 1 ]]; then say "build only: done"; exit 0; fi

# 4. The tests (or the fuzzer).
t1=$SECONDS
cd "$ROOT"
set +e
if [[ $FUZZ == 1 ]]; then
  say "fuzz_bindings.py ${TESTS[*]}"
  "$VPY" "$ROOT/scripts/fuzz_bindings.py" --out "$WORK/fuzz" "${TESTS[@]}" 2>&1 | tee "$WORK/logs/pytest.log"
  cp "$WORK"/fuzz/*.log "$WORK/logs/" 2>/dev/null
else
  say "pytest ${TESTS[*]}"
  "$VPY" -m pytest -q -p no:cacheprovider "${TESTS[@]}" 2>&1 | tee "$WORK/logs/pytest.log"
fi
rc=${PIPESTATUS[0]}
set -e
t_tests=$((SECONDS - t1))

# 5. Any sanitizer report anywhere (pytest output, per-process log files) fails the run.
PATTERN='ERROR: AddressSanitizer|runtime error:|SUMMARY: (Address|UndefinedBehavior|Leak)Sanitizer|ERROR: LeakSanitizer'
reports=$(grep -E -l "$PATTERN" "$WORK"/logs/* 2>/dev/null || true)
summary=$(grep -E -o '[0-9]+ (passed|failed|skipped|errors?|xfailed|xpassed)' "$WORK/logs/pytest.log" | tr '\n' ' ')
say "build ${t_build}s, tests ${t_tests}s, total $((SECONDS - t0))s; pytest: ${summary:-?} (rc=$rc)"
if [[ -n "$reports" ]]; then
  say "SANITIZER REPORTS in:"
  for f in $reports; do echo "---- $f"; grep -E -A25 "$PATTERN" "$f" | head -60; done
  exit 1
fi
say "zero sanitizer reports"
exit "$rc"
