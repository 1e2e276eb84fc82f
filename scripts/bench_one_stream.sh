#!/usr/bin/env bash
# One stream through quill-server against quill-bench's tg128 on the same file (issue 11 §4),
# on demand, not a test:
#   scripts/bench_one_stream.sh MODEL.gguf [ROUNDS]     (default 2 rounds, alternated)
# Each round runs quill-bench --tg 128, then a fresh server (--log-level trace) decoding
# 4 requests of 128 tokens one at a time (speculation off: quill-bench does not speculate).
# Printed per round, in tokens/s: quill-bench; the client's rate (1 / mean time per output
# token); the engine's step-to-step rate and its forward-only rate, from the trace. The
# step-to-step figure is everything the server does per token; set against the forward-only
# figure from the same process it is immune to the host's speed drifting between runs,
# which on a shared VM moves the first two columns by tens of percent within minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
build="${QUILL_BUILD_DIR:-build}"
model=$1
rounds="${2:-2}"
port="${PORT:-50491}"
log=$(mktemp /tmp/quill-one-stream.XXXXXX)
trap 'rm -f "$log"' EXIT

printf '%-5s %12s %12s %14s %14s %10s\n' round "bench t/s" "client t/s" "step-step t/s" "forward t/s" "step/fwd"
for round in $(seq 1 "$rounds"); do
  bench=$("$build/engine/tools/quill-bench" -m "$model" --pp 0 --tg 128 --reps 2 --threads 2 \
    --bandwidth_mib 0 2>/dev/null | grep 'tg128 ' | awk -F'|' '{print $(NF-3)}' | awk '{print $1}')
  "$build/server/quill-server" --model "$model" --port "$port" --metrics-port -1 --http-port -1 \
    --threads 2 --log-level trace >"$log" 2>&1 &
  pid=$!
  for _ in $(seq 1 600); do
    "$build/client/quill" health --addr "127.0.0.1:$port" >/dev/null 2>&1 && break
    sleep 0.2
  done
  client=$("$build/client/quill" bench --addr "127.0.0.1:$port" --concurrency 1 --requests 5 \
    --warmup 1 --prompt-tokens 4 --max-tokens 128 --disable-speculation --json --quiet |
    /usr/bin/python3 -c "import json,sys; print('%.2f' % (1000 / json.load(sys.stdin)['tpot_ms']['mean']))")
  kill -TERM "$pid"
  wait "$pid" 2>/dev/null || true
  /usr/bin/python3 - "$log" "$round" "$bench" "$client" <<'PY'
import re, sys
path, rnd, bench, client = sys.argv[1:5]
# A decode step of the one request alone; fields between prefill= and predicted_ms= (the
# queue's running/paused/waiting counts) are skipped, so that lines the engine adds later
# still match.
step = re.compile(r"\[\d{4}-\d\d-\d\d \d\d:(\d\d):(\d\d\.\d+)\] .*engine step: decode=1 drafts=0 "
                  r"prefill=0 (?:\w+=\d+ )*predicted_ms=[\d.]+ ms=([\d.]+)")
rows = [(int(m.group(1)) * 60 + float(m.group(2)), float(m.group(3)))
        for m in map(step.search, open(path)) if m]
def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]
if not rows:
    sys.exit(f"{path}: no decode-step trace lines matched (did the engine-step line change?)")
forward = median([ms for _, ms in rows])
# Consecutive decode steps of one request; a gap over 1 s is a new request or the hour wrap.
gaps = [(b - a) * 1e3 for (a, _), (b, _) in zip(rows, rows[1:]) if 0 < b - a < 1]
between = median(gaps)
print(f"{rnd:<5} {bench:>12} {client:>12} {1e3 / between:>14.2f} {1e3 / forward:>14.2f} "
      f"{forward / between:>10.3f}")
PY
done
