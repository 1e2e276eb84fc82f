#!/usr/bin/env bash
# Serving benchmark (on demand, not a test): starts quill-server on a TinyLlama-1.1B-shaped
# random model and drives it with `quill bench` at several concurrencies, printing one line
# per run: output tokens/s, TTFT and inter-token latency p50/p99.
#   scripts/bench_serving.sh [MODEL.gguf] [CONCURRENCIES]     (defaults: a bf16 model, "1 4 16 64")
# SERVER_FLAGS adds quill-server flags (e.g. "--max-batch-tokens 128"). APIS="grpc http" runs
# each concurrency over gRPC and then over the OpenAI-compatible HTTP API, on one server.
# ROUNDS (default 2) is requests per stream; WARMUP=1 leaves each stream's first request out
# of the latency figures (the closed loop's synchronized start; `quill bench --warmup`).
# The model is made with quill-make-model (tokenizer from ../shared) when it does not exist.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="${QUILL_BUILD_DIR:-build}"
model="${1:-/tmp/quill-tinyllama-bf16.gguf}"
concurrencies="${2:-1 4 16 64}"
prompt_tokens="${PROMPT_TOKENS:-32}"
max_tokens="${MAX_TOKENS:-64}"
threads="${THREADS:-2}"
port="${PORT:-50291}"
http_port="${HTTP_PORT:-50292}"
apis="${APIS:-grpc}"

if [ ! -f "$model" ]; then
  "$build_dir/engine/tools/quill-make-model" --out "$model" --type bf16 \
    --tokenizer_from ../shared/models/mini-random-bf16.gguf
fi

"$build_dir/server/quill-server" --model "$model" --port "$port" --metrics-port -1 \
  --http-port "$http_port" \
  --threads "$threads" --kv-cache-bytes 2GiB --log-level warn ${SERVER_FLAGS:-} &
server_pid=$!
trap 'kill -TERM $server_pid 2>/dev/null; wait $server_pid 2>/dev/null || true' EXIT
for _ in $(seq 1 600); do
  "$build_dir/client/quill" health --addr "127.0.0.1:$port" >/dev/null 2>&1 && break
  sleep 0.2
done

printf '%-5s %-8s %9s %10s %11s %11s %10s %10s\n' api streams completed "out tok/s" "TTFT p50 ms" "TTFT p99 ms" "ITL p50 ms" "ITL p99 ms"
for c in $concurrencies; do
  requests=$(( c * ${ROUNDS:-2} ))
  warmup=0
  if [ "${WARMUP:-0}" = 1 ]; then warmup=$c; fi
  for api in $apis; do
  json=$("$build_dir/client/quill" bench --addr "127.0.0.1:$port" --api "$api" \
    --http-addr "127.0.0.1:$http_port" --concurrency "$c" \
    --requests "$requests" --warmup "$warmup" --prompt-tokens "$prompt_tokens" --max-tokens "$max_tokens" \
    --timeout 10m --json --quiet)
  /usr/bin/python3 - "$api" "$c" "$json" <<'PY'
import json, sys
api, c, r = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
def get(*path):
    v = r
    for p in path: v = v[p]
    return v
print(f"{api:<5} {c:<8} {get('completed'):>9} {get('output_token_throughput'):>10.1f} "
      f"{get('ttft_ms','p50'):>11.1f} {get('ttft_ms','p99'):>11.1f} "
      f"{get('itl_ms','p50'):>10.1f} {get('itl_ms','p99'):>10.1f}")
PY
  done
done
