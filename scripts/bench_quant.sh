#!/usr/bin/env bash
# Issue 8's speed targets on a TinyLlama-shaped random model (d_model 2048, 22 layers,
# 32/4 heads, ffn 5632, vocab 32000: quill-make-model's defaults) in Q8_0, Q4_0 and Q4_K_M:
# quill-bench pp512 and tg128 with 2 threads, each model benchmarked twice (rounds
# interleaved, so a burst of load on a shared machine hits every type), with the load
# average before each run and the process's max RSS from /usr/bin/time -v.
# Targets: Q4_K_M tg128 >= 1.6x Q8_0 tg128, Q4_K_M pp512 >= 0.9x Q8_0 pp512.
#
# Usage: scripts/bench_quant.sh [model_dir]   (default /tmp/quill-bench-quant; the models,
#   about 3 GB together, are made there once and reused). Env: QUILL_BUILD_DIR (build),
#   BENCH_REPS (quill-bench --reps, default 2), BENCH_ROUNDS (default 2), BENCH_TYPES
#   (default "q8_0 q4_0 q4_k_m").
set -euo pipefail
cd "$(dirname "$0")/.."
build="${QUILL_BUILD_DIR:-build}"
dir="${1:-/tmp/quill-bench-quant}"
reps="${BENCH_REPS:-2}"
rounds="${BENCH_ROUNDS:-2}"
read -r -a types <<< "${BENCH_TYPES:-q8_0 q4_0 q4_k_m}"
make_model="$build/engine/tools/quill-make-model"
bench="$build/engine/tools/quill-bench"
for tool in "$make_model" "$bench" /usr/bin/time; do
  [[ -x "$tool" ]] || { echo "bench_quant: $tool not found (build it first)" >&2; exit 2; }
done
mkdir -p "$dir"

for t in "${types[@]}"; do
  model="$dir/tinyllama-shape-$t.gguf"
  if [[ ! -s "$model" ]]; then
    echo "+ $make_model --out $model --type $t --seed 1" >&2
    /usr/bin/time -f "made $t in %e s, max RSS %M KiB" "$make_model" --out "$model" --type "$t" --seed 1
  fi
done

echo "date: $(date -u '+%F %T') UTC; host $(hostname); $(nproc) CPUs; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)"
echo "commit: $(git rev-parse --short HEAD)$(git diff --quiet || echo ' (modified)')"
echo
echo "| round | model | test | t/s | bench RSS | max RSS (time -v) | load avg before (1/5/15 min) |"
echo "| ---: | --- | ---: | ---: | ---: | ---: | --- |"
results="$dir/results.tsv"
: > "$results"
for round in $(seq 1 "$rounds"); do
  for t in "${types[@]}"; do
    model="$dir/tinyllama-shape-$t.gguf"
    load=$(cut -d' ' -f1-3 /proc/loadavg)
    out="$dir/bench-$t-$round.out"
    err="$dir/bench-$t-$round.err"
    # Each round's command, exactly as run:
    cmd=("$bench" -m "$model" --pp 512 --tg 128 --threads 2 --reps "$reps")
    echo "+ ${cmd[*]}" >&2
    /usr/bin/time -v "${cmd[@]}" > "$out" 2> "$err"
    max_rss=$(awk -F': ' '/Maximum resident set size/ {printf "%.0f MiB", $2 / 1024}' "$err")
    # quill-bench rows: | model | type | size | params | mode | threads | test | t/s | RSS |
    awk -F' [|] ' -v r="$round" -v t="$t" -v m="$max_rss" -v l="$load" \
      '/\| (pp|tg)[0-9]+ \|/ {sub(/ \|$/, "", $9); print "| " r " | " t " | " $7 " | " $8 " | " $9 " | " m " | " l " |"}' \
      "$out"
    awk -F' [|] ' -v r="$round" -v t="$t" '/\| (pp|tg)[0-9]+ \|/ {split($8, a, " "); print r "\t" t "\t" $7 "\t" a[1]}' \
      "$out" >> "$results"
  done
done

# Ratios against Q8_0, from the mean over rounds.
echo
awk -F'\t' '{sum[$2 "\t" $3] += $4; n[$2 "\t" $3]++}
  END {
    for (k in sum) mean[k] = sum[k] / n[k]
    for (test_i = 1; test_i <= 2; test_i++) {
      test = test_i == 1 ? "pp512" : "tg128"
      q8 = mean["q8_0\t" test]
      if (q8 == 0) continue
      printf "%s mean t/s: q8_0 %.2f, q4_0 %.2f (%.2fx), q4_k_m %.2f (%.2fx)\n", test, q8,
        mean["q4_0\t" test], mean["q4_0\t" test] / q8, mean["q4_k_m\t" test], mean["q4_k_m\t" test] / q8
    }
  }' "$results"
echo "targets: q4_k_m tg128 >= 1.6x q8_0; q4_k_m pp512 >= 0.9x q8_0"
