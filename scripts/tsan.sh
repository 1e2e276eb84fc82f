#!/usr/bin/env bash
# TSan stage: the engine's threaded tests (engine loop, inbox, admission, sinks, shutdown;
# no gRPC in these binaries) built with clang-14 -fsanitize=thread into ./build-tsan (or
# $QUILL_TSAN_BUILD_DIR), plus the stage's self-checks: a deliberate race that must be
# reported, and absl::Mutex/Notification hand-offs that must not be (tests/tsan/README.md).
# OpenMP regions run in Debian's uninstrumented libgomp, so OMP_NUM_THREADS=1 here: the
# engine thread and its callers are checked, the kernels' own parallel loops are not.
set -euo pipefail
cd "$(dirname "$0")/.."
# Tests that run a server inside the test process share the runner's cores with other
# test processes: libgomp's default spin (300,000 rounds, milliseconds after every parallel
# region) would hold those cores from each other. quill-server itself keeps the default.
export GOMP_SPINCOUNT="${GOMP_SPINCOUNT:-1000}"
build_dir="${QUILL_TSAN_BUILD_DIR:-build-tsan}"
jobs="${QUILL_BUILD_JOBS:-$(nproc)}"
# The engine's threads (inbox, engine thread, sinks) are the same whatever the model, so
# the fake-model engine tests cover them; engine_test's real model adds only OpenMP, which
# runs single-threaded here (OMP_NUM_THREADS=1: libgomp is not instrumented) and would cost
# compiling the kernels and the model under TSan.
tests=(engine/runtime/runtime_core_test engine/runtime/engine_fake_test
       tests/tsan/tsan_absl_sync_test)
targets=()
for t in "${tests[@]}" tests/tsan/tsan_race_canary; do targets+=("$(basename "$t")"); done

cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 -DQUILL_SANITIZE=thread
cmake --build "$build_dir" -j "$jobs" --target "${targets[@]}"

export OMP_NUM_THREADS=1
symbolizer=/usr/lib/llvm-14/bin/llvm-symbolizer
[ -x "$symbolizer" ] && export TSAN_SYMBOLIZER_PATH="$symbolizer"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1"
export QUILL_SHARED_DIR="${QUILL_SHARED_DIR:-$PWD/../shared}"
if "$build_dir/tests/tsan/tsan_race_canary" >/dev/null 2>&1; then
  echo "tsan: the deliberate race in tsan_race_canary was NOT reported; TSan is not working" >&2
  exit 1
fi
echo "tsan: tsan_race_canary reported its race, as it must"
for t in "${tests[@]}"; do
  echo "tsan: $t"
  "$build_dir/$t" --gtest_brief=1
done
