#!/usr/bin/env bash
# Builds Quill and runs the whole test suite (unit, golden, integration, end-to-end).
# Tests that need ../shared (models, golden outputs, tokenizer vectors) skip with a
# message when it is absent; CI always has it.
set -euo pipefail
cd "$(dirname "$0")/.."
# Tests that run a server inside the test process share the runner's cores with other
# test processes: libgomp's default spin (300,000 rounds, milliseconds after every parallel
# region) would hold those cores from each other. quill-server itself keeps the default.
export GOMP_SPINCOUNT="${GOMP_SPINCOUNT:-1000}"
build_dir="${QUILL_BUILD_DIR:-build}"
scripts/build.sh
# Each test binary runs its cases in one process (scripts/ctest_batched.py; ctest per case
# measured 143 s, batched 95 s); tests with fixtures or expected output run through ctest.
# Arguments are ctest's selection flags (-R REGEX, -L LABEL, -E REGEX).
/usr/bin/python3 scripts/ctest_batched.py "$build_dir" --timeout 900 -j "${QUILL_TEST_JOBS:-2}" "$@"
