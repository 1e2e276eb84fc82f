#!/usr/bin/env bash
# From a fresh Debian 12 machine: install dependencies, build, start quill-server on the
# built-in model (models/kjv-1m.gguf, a small Llama trained on the King James Bible) and
# stream a generation from it with the `quill` CLI. The server keeps running in the
# foreground afterwards; Ctrl-C stops it (gracefully).
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="${QUILL_BUILD_DIR:-build}"
port="${QUILL_PORT:-50051}"
metrics_port="${QUILL_METRICS_PORT:-9090}"

bash scripts/setup.sh
bash scripts/build.sh

"$build_dir/server/quill-server" --model models/kjv-1m.gguf --host 127.0.0.1 \
  --port "$port" --metrics-port "$metrics_port" &
server_pid=$!
trap 'kill -TERM $server_pid 2>/dev/null; wait $server_pid 2>/dev/null' INT TERM EXIT

for _ in $(seq 1 100); do
  if "$build_dir/client/quill" health --addr "127.0.0.1:$port" >/dev/null 2>&1; then break; fi
  if ! kill -0 "$server_pid" 2>/dev/null; then echo "quill-server exited; see its log above" >&2; exit 1; fi
  sleep 0.1
done

echo
echo "== quill generate \"In the beginning God created\" =="
"$build_dir/client/quill" generate --addr "127.0.0.1:$port" --max-tokens 120 --temperature 0.7 --seed 7 \
  "In the beginning God created"
echo
echo "Quill is serving on 127.0.0.1:$port (metrics: http://127.0.0.1:$metrics_port/metrics)."
echo "Try: $build_dir/client/quill generate --addr 127.0.0.1:$port \"And the LORD said\"   (Ctrl-C here stops the server)"
wait "$server_pid"
