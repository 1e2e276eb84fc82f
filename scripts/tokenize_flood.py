#!/usr/bin/python3
"""Floods a Quill server with large Tokenize requests, as an abusive client would.

    /usr/bin/python3 scripts/tokenize_flood.py --addr 127.0.0.1:50051 --clients 4 \\
        --bytes 3900000 --duration 20

Each of --clients threads sends Tokenize requests of --bytes of text back to back for
--duration seconds and counts the answers by status code. Run a normal client next to it
(e.g. `quill bench --concurrency 1 --duration 20s`) to see what the flood costs everyone
else (issue 10: TTFT went from 2 ms to 710 ms). Needs python3-grpcio and python3-grpc-tools.
"""

import argparse
import collections
import os
import sys
import tempfile
import threading
import time

import grpc

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples",
                                "python"))
from stream import load_stubs  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--addr", default="127.0.0.1:50051")
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--bytes", type=int, default=3900000, help="text bytes per request")
    parser.add_argument("--duration", type=float, default=20.0, help="seconds")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        pb2, pb2_grpc = load_stubs(tmp)
        # Words of the built-in model's vocabulary: about 2.6 bytes per token.
        words = "and the LORD said unto Moses , "
        text = (words * (args.bytes // len(words) + 1))[: args.bytes]
        request = pb2.TokenizeRequest(text=text, add_special_tokens=True)
        options = [("grpc.max_send_message_length", 64 << 20),
                   ("grpc.max_receive_message_length", 256 << 20)]
        counts = collections.Counter()
        latencies = []
        lock = threading.Lock()
        stop_at = time.monotonic() + args.duration

        def client():
            channel = grpc.insecure_channel(args.addr, options=options)
            stub = pb2_grpc.GeneratorStub(channel)
            while time.monotonic() < stop_at:
                start = time.monotonic()
                try:
                    stub.Tokenize(request, timeout=60)
                    code = "OK"
                except grpc.RpcError as e:
                    code = e.code().name
                with lock:
                    counts[code] += 1
                    latencies.append(time.monotonic() - start)

        threads = [threading.Thread(target=client) for _ in range(args.clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        latencies.sort()
        p50 = latencies[len(latencies) // 2] * 1000 if latencies else 0
        print("tokenize_flood: %d clients x %d bytes for %.0f s: %d requests %s, p50 %.1f ms" %
              (args.clients, args.bytes, args.duration, len(latencies), dict(counts), p50))


if __name__ == "__main__":
    main()
