#!/usr/bin/env bash
# Configures and builds Quill in Release mode into ./build (or $QUILL_BUILD_DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="${QUILL_BUILD_DIR:-build}"
jobs="${QUILL_BUILD_JOBS:-$(nproc)}"
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build "$build_dir" -j "$jobs"
