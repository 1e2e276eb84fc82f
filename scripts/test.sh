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
ctest --test-dir "$build_dir" --output-on-failure --timeout 900 -j "${QUILL_TEST_JOBS:-2}" "$@"
