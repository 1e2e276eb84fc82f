#!/usr/bin/env bash
# Fuzz stage: runs every libFuzzer target of the ASan+UBSan build (scripts/sanitize.sh) for
# SECONDS (default 60) each, all at once, starting from its seed corpus in fuzz/corpus/.
# New inputs go to a scratch directory, never into the repository; a crash leaves its
# input in $build_dir/fuzz-artifacts/ and fails the stage.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
build_dir="${QUILL_ASAN_BUILD_DIR:-build-asan}"
export ASAN_OPTIONS="halt_on_error=1:abort_on_error=1:detect_leaks=1:suppressions=$PWD/tests/sanitizers/asan.supp"
export LSAN_OPTIONS="suppressions=$PWD/tests/sanitizers/lsan.supp:print_suppressions=0"
symbolizer=/usr/lib/llvm-14/bin/llvm-symbolizer
[ -x "$symbolizer" ] && export ASAN_SYMBOLIZER_PATH="$symbolizer" TSAN_SYMBOLIZER_PATH="$symbolizer"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
export QUILL_SHARED_DIR="${QUILL_SHARED_DIR:-$PWD/../shared}"
artifacts="$build_dir/fuzz-artifacts"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$artifacts"

pids=()
names=()
for corpus in fuzz/corpus/*/; do
  name="$(basename "$corpus")"
  binary="$build_dir/fuzz/$name"
  [ -x "$binary" ] || { echo "fuzz: $binary is not built" >&2; exit 1; }
  mkdir -p "$scratch/$name"
  "$binary" -max_total_time="$seconds" -print_final_stats=1 -artifact_prefix="$artifacts/$name-" \
    "$scratch/$name" "$corpus" >"$scratch/$name.log" 2>&1 &
  pids+=($!)
  names+=("$name")
done
status=0
for i in "${!pids[@]}"; do
  if wait "${pids[$i]}"; then
    runs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$scratch/${names[$i]}.log" | awk '{print $2}')
    echo "fuzz: ${names[$i]}: ${runs:-?} inputs in ${seconds}s, no findings"
  else
    echo "fuzz: ${names[$i]} FAILED; its log:" >&2
    tail -n 60 "$scratch/${names[$i]}.log" >&2
    status=1
  fi
done
exit $status
