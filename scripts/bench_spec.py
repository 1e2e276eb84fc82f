#!/usr/bin/env python3
"""Speculative-decoding benchmark (on demand, not a test).

Single-stream decode speed with speculation on and off, on one server started with
--spec-tokens K (and --draft-model D if given: drafts from that model instead of n-gram
lookup): "off" requests set disable_speculation, "on" requests do not, and the two
alternate request by request (the order flips every pair), so other load on the machine
hits both alike. Prints, per prompt, the median decode tokens/s of each mode, the median
of the per-pair on/off ratios, and the acceptance rate (accepted / drafted draft tokens,
from the quill_spec_* counters) and tokens per verification step of the "on" runs.

  scripts/bench_spec.py [--model M.gguf] [--draft-model D.gguf] [--runs 5]
                        [--max-tokens 128] [--spec-tokens 4] [--threads 2]
                        [--precision fast] [--prompt NAME=TEXT ...]

Decode tokens/s = (completion tokens - 1) / the server's decode time (first token to
finish), with ignore_eos so every run generates max_tokens.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

DEFAULT_PROMPTS = [
    ("kjv-genesis", "In the beginning God created the heaven and the earth. And the earth was"),
    ("kjv-moses", "And the LORD spake unto Moses, saying, Speak unto the children of Israel,"),
    ("kjv-psalm", "The LORD is my shepherd; I shall not want. He maketh me to lie down"),
    ("repetitive",
     "And God said, Let there be light: and there was light. And God said, Let there be "
     "light: and there was light. And God said, Let there be light: and there was light. "
     "And God said, Let there be"),
]


def metric(port, name):
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return float("nan")


def generate(client, addr, prompt, max_tokens, disable):
    cmd = [client, "generate", "--addr", addr, "--json", "--ignore-eos", "--max-tokens",
           str(max_tokens), "--timeout", "10m"]
    if disable:
        cmd.append("--disable-speculation")
    out = subprocess.run(cmd + ["--", prompt], check=True, capture_output=True, text=True).stdout
    last = json.loads(out.strip().splitlines()[-1])
    tokens = int(last["usage"]["completion_tokens"])
    decode = float(last["timings"]["decode_seconds"])
    return (tokens - 1) / decode if decode > 0 else float("nan")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--model", default=os.path.join(ROOT, "../shared/models/kjv-1m.gguf"))
    parser.add_argument("--draft-model", default="", help="draft model (default: n-gram)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--spec-tokens", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--precision", default="fast")
    parser.add_argument("--port", type=int, default=50471)
    parser.add_argument("--metrics-port", type=int, default=50472)
    parser.add_argument("--prompt", action="append", default=[], help="NAME=TEXT (repeatable)")
    args = parser.parse_args()
    prompts = [tuple(p.split("=", 1)) for p in args.prompt] or DEFAULT_PROMPTS

    build = os.environ.get("QUILL_BUILD_DIR", os.path.join(ROOT, "build"))
    client = os.path.join(build, "client/quill")
    addr = f"127.0.0.1:{args.port}"
    server = subprocess.Popen(
        [os.path.join(build, "server/quill-server"), "--model", args.model, "--port",
         str(args.port), "--metrics-port", str(args.metrics_port), "--http-port", "-1",
         "--threads", str(args.threads), "--precision", args.precision, "--spec-tokens",
         str(args.spec_tokens), "--log-level", "warn", "--draft-model", args.draft_model])
    try:
        for _ in range(600):
            if subprocess.run([client, "health", "--addr", addr], capture_output=True).returncode == 0:
                break
            time.sleep(0.2)
        print(f"model {os.path.basename(args.model)}, "
              f"drafts from {os.path.basename(args.draft_model) or 'n-gram lookup'}, "
              f"precision {args.precision}, "
              f"spec_tokens {args.spec_tokens}, max_tokens {args.max_tokens}, {args.runs} "
              f"on/off pairs; load: {os.getloadavg()[0]:.1f}")
        print(f"{'prompt':<12} {'on tok/s':>9} {'off tok/s':>9} {'on/off':>7} {'accept':>7} "
              f"{'tok/step':>8}")
        for name, prompt in prompts:
            generate(client, addr, prompt, args.max_tokens, False)  # warm-up
            on, off, ratios = [], [], []
            drafted = accepted = 0.0
            for run in range(args.runs):
                pair = {}
                for disable in ([False, True] if run % 2 == 0 else [True, False]):
                    d0 = metric(args.metrics_port, "quill_spec_draft_tokens_total")
                    a0 = metric(args.metrics_port, "quill_spec_accepted_tokens_total")
                    pair[disable] = generate(client, addr, prompt, args.max_tokens, disable)
                    if not disable:
                        drafted += metric(args.metrics_port, "quill_spec_draft_tokens_total") - d0
                        accepted += metric(args.metrics_port, "quill_spec_accepted_tokens_total") - a0
                on.append(pair[False])
                off.append(pair[True])
                ratios.append(pair[False] / pair[True])
            steps = args.runs * (args.max_tokens - 1) - accepted  # decode steps of "on" runs
            print(f"{name:<12} {statistics.median(on):>9.1f} {statistics.median(off):>9.1f} "
                  f"{statistics.median(ratios):>7.2f} "
                  f"{(accepted / drafted if drafted else 0.0):>7.2f} "
                  f"{args.runs * (args.max_tokens - 1) / steps:>8.2f}")
            sys.stdout.flush()
        print(f"load: {os.getloadavg()[0]:.1f}")
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
