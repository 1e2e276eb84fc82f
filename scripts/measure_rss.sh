#!/usr/bin/env bash
# Steady and load-peak RSS of quill-server for one model (README "Memory bounds"):
#   scripts/measure_rss.sh MODEL.gguf [extra quill-server flags]
# Starts the server alone (KV_CACHE_BYTES, default 256MiB; 2 threads), reads VmHWM once it
# serves (the load's peak), sends 4 short completions and one 561-token prompt over HTTP,
# then prints /proc's VmRSS / RssAnon / RssFile and `quill info`'s Weights and Memory lines.
set -euo pipefail
cd "$(dirname "$0")/.."
build="${QUILL_BUILD_DIR:-build}"
model=$1
shift
grpc_port=50871 http_port=18871 metrics_port=19871
log=$(mktemp)
"$build/server/quill-server" --model "$model" --port $grpc_port --http-port $http_port \
  --metrics-port $metrics_port --kv-cache-bytes "${KV_CACHE_BYTES:-256MiB}" --threads 2 "$@" \
  >"$log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -f "$log"' EXIT
until curl -sf localhost:$http_port/health >/dev/null 2>&1; do
  kill -0 $pid 2>/dev/null || { cat "$log"; exit 1; }
  sleep 0.5
done
sleep 2
status() { awk -v k="$1:" '$1 == k {print $2 * 1024}' /proc/$pid/status; }
echo "load peak (VmHWM): $(status VmHWM) B"
long=$(python3 -c "print(' '.join(['the light of the world'] * 80))")
complete() {
  curl -s localhost:$http_port/v1/completions -H 'Content-Type: application/json' \
    -d "{\"prompt\": \"$1\", \"max_tokens\": $2, \"temperature\": 0}" >/dev/null
}
for prompt in "In the beginning" "And God said" \
  "The quick brown fox jumps over the lazy dog and then" "Once upon a time"; do
  complete "$prompt" 32
done
complete "$long" 16  # refused (400) by models with a shorter context
sleep 2
echo "steady: VmRSS $(status VmRSS) B (RssAnon $(status RssAnon), RssFile $(status RssFile))"
grep "weights held" "$log" || true
"$build/client/quill" info --addr localhost:$grpc_port | grep -A1 -E "^(Weights|Memory)"
