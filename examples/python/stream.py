#!/usr/bin/env python3
"""Streams a generation from a Quill server (gRPC), printing text as it arrives.

The Python stubs are generated from the repository's proto/ at run time (grpc_tools.protoc
into a temporary directory), so nothing generated is checked in.

    /usr/bin/python3 examples/python/stream.py --addr 127.0.0.1:50051 "In the beginning"

Needs the Debian packages python3-grpcio and python3-grpc-tools.
"""

import argparse
import importlib
import os
import sys
import tempfile
import time

import grpc
from grpc_tools import protoc

PROTO_DIR = os.path.normpath(
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "proto"))
QUILL_PROTO = "quill/v1/quill.proto"


def load_stubs(out_dir):
    """Generates quill_pb2 / quill_pb2_grpc into out_dir and imports them."""
    rc = protoc.main([
        "grpc_tools.protoc",
        "--proto_path=" + PROTO_DIR,
        "--python_out=" + out_dir,
        "--grpc_python_out=" + out_dir,
        QUILL_PROTO,
    ])
    if rc != 0:
        raise RuntimeError("protoc failed on %s (exit %d)" % (os.path.join(PROTO_DIR, QUILL_PROTO), rc))
    sys.path.insert(0, out_dir)
    pb2 = importlib.import_module("quill.v1.quill_pb2")
    pb2_grpc = importlib.import_module("quill.v1.quill_pb2_grpc")
    return pb2, pb2_grpc


def parse_args():
    parser = argparse.ArgumentParser(description="Stream a generation from a Quill server.")
    parser.add_argument("prompt", nargs="*", help="prompt words (read from stdin when absent)")
    parser.add_argument("--addr", default=os.environ.get("QUILL_ADDR", "127.0.0.1:50051"),
                        help="server HOST:PORT (env QUILL_ADDR; default %(default)s)")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=0.0, help="0 is greedy")
    parser.add_argument("--top-p", type=float, default=0.0, help="0 is off")
    parser.add_argument("--top-k", type=int, default=0, help="0 is off")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    parser.add_argument("--timeout", type=float, default=60.0, help="deadline in seconds")
    parser.add_argument("--tls-ca", help="use TLS, trusting these PEM CA certificates")
    parser.add_argument("--tls-cert", help="PEM client certificate (mutual TLS)")
    parser.add_argument("--tls-key", help="PEM private key of --tls-cert")
    parser.add_argument("--api-key", default=os.environ.get("QUILL_API_KEY"),
                        help="API key, sent as 'authorization: Bearer KEY' (env QUILL_API_KEY)")
    return parser.parse_args()


def read_file(path):
    with open(path, "rb") as f:
        return f.read()


def open_channel(args):
    """Plaintext, or TLS (with a client certificate for mutual TLS)."""
    if not (args.tls_ca or args.tls_cert):
        return grpc.insecure_channel(args.addr)
    credentials = grpc.ssl_channel_credentials(
        root_certificates=read_file(args.tls_ca) if args.tls_ca else None,
        private_key=read_file(args.tls_key) if args.tls_key else None,
        certificate_chain=read_file(args.tls_cert) if args.tls_cert else None)
    return grpc.secure_channel(args.addr, credentials)


def main():
    args = parse_args()
    prompt = " ".join(args.prompt) if args.prompt else sys.stdin.read()
    if not prompt:
        print("error: empty prompt", file=sys.stderr)
        return 2

    with tempfile.TemporaryDirectory(prefix="quill-stubs-") as out_dir:
        pb2, pb2_grpc = load_stubs(out_dir)
        request = pb2.GenerateRequest(
            prompt=prompt,
            max_tokens=args.max_tokens,
            sampling=pb2.SamplingParams(temperature=args.temperature, top_p=args.top_p,
                                        top_k=args.top_k, seed=args.seed),
            stop=args.stop)
        # Plain metadata, not call credentials: gRPC sends those over TLS only, and a
        # loopback server may use keys without TLS.
        metadata = [("authorization", "Bearer " + args.api_key)] if args.api_key else None
        with open_channel(args) as channel:
            stub = pb2_grpc.GeneratorStub(channel)
            start = time.monotonic()
            ttft = None
            last = None
            try:
                for response in stub.Generate(request, timeout=args.timeout, metadata=metadata):
                    if ttft is None and response.token_ids:
                        ttft = time.monotonic() - start
                    sys.stdout.write(response.text)
                    sys.stdout.flush()
                    last = response
            except grpc.RpcError as error:
                print("\nerror: %s: %s" % (error.code().name, error.details()), file=sys.stderr)
                return 1
            total = time.monotonic() - start

    print(file=sys.stderr)
    if last is not None:
        print("[finish_reason: %s] usage: %d prompt + %d completion tokens; ttft %.1f ms, total %.1f ms"
              % (pb2.FinishReason.Name(last.finish_reason), last.usage.prompt_tokens,
                 last.usage.completion_tokens, (ttft or 0.0) * 1e3, total * 1e3),
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
