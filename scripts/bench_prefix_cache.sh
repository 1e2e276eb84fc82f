#!/usr/bin/env bash
# Prefix-cache benchmark (on demand, not a test): a chat-like workload where every request
# shares a long system prompt (SHARED random ids) and adds its own OWN ids, run once with
# --no-prefix-cache and once with the cache on, one server at a time. Prints TTFT and
# throughput for both, and the cache's hit/query token counters from /metrics.
#   scripts/bench_prefix_cache.sh [MODEL.gguf]
# Env: SHARED (1000), OWN (50), MAX_TOKENS (16), CONCURRENCY (4), REQUESTS (24), THREADS (2),
# SERVER_FLAGS (extra quill-server flags). The default model (random weights, bf16, 2048
# context, ~100M parameters) is made with quill-make-model when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="${QUILL_BUILD_DIR:-build}"
model="${1:-/tmp/quill-prefix-bench-bf16.gguf}"
shared="${SHARED:-1000}"
own="${OWN:-50}"
max_tokens="${MAX_TOKENS:-16}"
concurrency="${CONCURRENCY:-4}"
requests="${REQUESTS:-24}"
threads="${THREADS:-2}"
port="${PORT:-50391}"
metrics_port="${METRICS_PORT:-50392}"

if [ ! -f "$model" ]; then
  "$build_dir/engine/tools/quill-make-model" --out "$model" --type bf16 --d_model 768 \
    --layers 8 --heads 12 --kv_heads 4 --ffn 2048 --context 2048 \
    --tokenizer_from ../shared/models/mini-random-bf16.gguf
fi

echo "load: $(uptime)"
printf '%-6s %9s %11s %11s %11s %10s %12s %12s\n' cache completed "TTFT p50 ms" "TTFT p90 ms" \
  "TTFT p99 ms" "out tok/s" "hit tokens" "query tokens"
for mode in off on; do
  flag="--prefix-cache=true"
  [ "$mode" = off ] && flag="--no-prefix-cache"
  "$build_dir/server/quill-server" --model "$model" --port "$port" --metrics-port "$metrics_port" \
    --http-port -1 --threads "$threads" --kv-cache-bytes 1GiB --log-level warn $flag \
    ${SERVER_FLAGS:-} &
  server_pid=$!
  trap 'kill -TERM $server_pid 2>/dev/null; wait $server_pid 2>/dev/null || true' EXIT
  for _ in $(seq 1 600); do
    "$build_dir/client/quill" health --addr "127.0.0.1:$port" >/dev/null 2>&1 && break
    sleep 0.2
  done
  json=$("$build_dir/client/quill" bench --addr "127.0.0.1:$port" --concurrency "$concurrency" \
    --requests "$requests" --shared-prefix-tokens "$shared" --prompt-tokens "$own" \
    --max-tokens "$max_tokens" --timeout 30m --json --quiet)
  metrics=$(curl -s "http://127.0.0.1:$metrics_port/metrics")
  kill -TERM "$server_pid"; wait "$server_pid" 2>/dev/null || true
  trap - EXIT
  /usr/bin/python3 - "$mode" "$json" "$metrics" <<'PY'
import json, sys
mode, r, metrics = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
def metric(name):
    for line in metrics.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return float("nan")
print(f"{mode:<6} {r['completed']:>9} {r['ttft_ms']['p50']:>11.1f} {r['ttft_ms']['p90']:>11.1f} "
      f"{r['ttft_ms']['p99']:>11.1f} {r['output_token_throughput']:>10.1f} "
      f"{metric('quill_prefix_cache_hit_tokens_total'):>12.0f} "
      f"{metric('quill_prefix_cache_query_tokens_total'):>12.0f}")
PY
done
echo "load: $(uptime)"
