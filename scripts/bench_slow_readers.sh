#!/usr/bin/env bash
# Slow-reader memory benchmark (on demand, not a test; README "Memory bounds"): starts
# quill-server, records its RSS, opens STREAMS Generate calls that are never read
# (tests/load/slow_readers.cc) and records the RSS while they are held, with a normal
# client's time to first token before and during.
#   scripts/bench_slow_readers.sh [MODEL.gguf] [STREAMS]   (defaults: kjv-1m, 2000)
# SERVER_FLAGS adds quill-server flags (e.g. "--stream-stall-timeout 0").
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="${QUILL_BUILD_DIR:-build}"
model="${1:-../shared/models/kjv-1m.gguf}"
streams="${2:-2000}"
port="${PORT:-50391}"
hold="${HOLD:-20s}"

"$build_dir/server/quill-server" --model "$model" --port "$port" --metrics-port -1 \
  --http-port -1 --threads "${THREADS:-2}" --log-level warn ${SERVER_FLAGS:-} &
server_pid=$!
trap 'kill -TERM $server_pid 2>/dev/null; wait $server_pid 2>/dev/null || true' EXIT
for _ in $(seq 1 600); do
  "$build_dir/client/quill" health --addr "127.0.0.1:$port" >/dev/null 2>&1 && break
  sleep 0.2
done
rss() { awk '/VmRSS/ {printf "%.0f MiB", $2 / 1024}' "/proc/$server_pid/status"; }

"$build_dir/client/quill" generate --addr "127.0.0.1:$port" --max-tokens 32 \
  "In the beginning" >/dev/null  # warm up
echo "server RSS idle: $(rss)"
"$build_dir/tests/load/quill-slow-readers" --addr "127.0.0.1:$port" --streams "$streams" \
  --hold "$hold" | while IFS= read -r line; do
  echo "$line"
  case "$line" in
    holding | "with slow readers"*)
      echo "server RSS with $streams never-read streams: $(rss)" ;;
  esac
done
echo "server RSS after they closed: $(rss)"
