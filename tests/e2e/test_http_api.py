#!/usr/bin/python3
"""The OpenAI-compatible HTTP API at the curl level against a live quill-server: the exact
server-sent-event framing (`data: <json>\\n\\n` ... `data: [DONE]\\n\\n`) over HTTP/1.1 chunked
and HTTP/1.0 read-to-close, headers, /health and /v1/models, Expect: 100-continue and the
413 for bodies beyond --max-message-bytes."""

import json
import re
import shutil
import subprocess
import unittest

import e2e_util
from e2e_util import QuillServer


def curl(*args, timeout=60, input_text=None):
    path = shutil.which("curl")
    if path is None:
        e2e_util.skip("curl not found (Debian package curl)")
    # Bytes, not text mode: the framing's \r\n must reach the checks unchanged.
    r = subprocess.run([path, "-sS", "--max-time", "30"] + list(args), capture_output=True,
                       timeout=timeout,
                       input=None if input_text is None else input_text.encode("utf-8"))
    r.stdout = r.stdout.decode("utf-8")
    r.stderr = r.stderr.decode("utf-8")
    return r


def split_head(output):
    """curl -i output -> (status, headers dict (lower-case names), body); skips 100 Continue."""
    while True:
        head, _, rest = output.partition("\r\n\r\n")
        status = int(head.split(" ", 2)[1])
        if status != 100:
            break
        output = rest
    headers = {}
    for line in head.split("\r\n")[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return status, headers, rest


class HttpApiTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = QuillServer(["--max-message-bytes", "8KiB"]).__enter__()

    @classmethod
    def tearDownClass(cls):
        cls.server.__exit__(None, None, None)

    def post(self, path, body, *extra):
        return curl("-i", "-N", "-H", "Content-Type: application/json", "--data-binary", "@-",
                    *extra, self.server.http_url + path, input_text=json.dumps(body))

    def check_sse(self, body):
        """Strict framing: only `data: X\\n\\n` events, [DONE] last; returns the JSON events."""
        self.assertTrue(body.endswith("data: [DONE]\n\n"), body[-200:])
        events = body.split("\n\n")
        self.assertEqual(events[-1], "")
        payloads = []
        for event in events[:-1]:
            self.assertTrue(event.startswith("data: "), event)
            self.assertNotIn("\n", event)
            payloads.append(event[len("data: "):])
        self.assertEqual(payloads[-1], "[DONE]")
        self.assertNotIn("[DONE]", payloads[:-1])
        return [json.loads(p) for p in payloads[:-1]]

    def test_sse_framing_over_chunked_http11(self):
        r = self.post("/v1/completions", {"prompt": "In the beginning", "max_tokens": 12,
                                          "temperature": 0, "stream": True,
                                          "stream_options": {"include_usage": True}})
        self.assertEqual(r.returncode, 0, r.stderr)
        status, headers, body = split_head(r.stdout)
        self.assertEqual(status, 200)
        self.assertEqual(headers["content-type"], "text/event-stream")
        self.assertEqual(headers["transfer-encoding"], "chunked")
        self.assertEqual(headers["cache-control"], "no-cache")
        events = self.check_sse(body)
        text = "".join(c["text"] for e in events for c in e["choices"])
        finishes = [c["finish_reason"] for e in events for c in e["choices"]]
        self.assertEqual(finishes[-1], "length")
        self.assertTrue(all(f is None for f in finishes[:-1]))
        self.assertEqual(events[-1]["choices"], [])
        self.assertEqual(events[-1]["usage"]["completion_tokens"], 12)
        # The same request without streaming gives the same text.
        r = self.post("/v1/completions", {"prompt": "In the beginning", "max_tokens": 12,
                                          "temperature": 0})
        status, headers, body = split_head(r.stdout)
        self.assertEqual(status, 200)
        self.assertEqual(int(headers["content-length"]), len(body.encode("utf-8")))
        self.assertEqual(json.loads(body)["choices"][0]["text"], text)

    def test_sse_over_http10_reads_to_close(self):
        r = self.post("/v1/completions", {"prompt": "And God said", "max_tokens": 6,
                                          "stream": True, "stream_options": {"include_usage": True}},
                      "--http1.0")
        self.assertEqual(r.returncode, 0, r.stderr)
        status, headers, body = split_head(r.stdout)
        self.assertEqual(status, 200)
        self.assertNotIn("transfer-encoding", headers)
        self.assertEqual(headers["connection"], "close")
        # Tokens that arrive while the client is busy share a chunk, so count them by usage.
        events = self.check_sse(body)
        self.assertGreaterEqual(len(events), 2)
        self.assertEqual(events[-1]["usage"]["completion_tokens"], 6)

    def test_health_models_and_errors(self):
        r = curl("-i", self.server.http_url + "/health")
        status, _, body = split_head(r.stdout)
        self.assertEqual((status, json.loads(body)), (200, {"status": "ok"}))
        r = curl(self.server.http_url + "/v1/models")
        self.assertEqual(json.loads(r.stdout)["data"][0]["id"], "kjv-1m")
        r = curl("-i", self.server.http_url + "/v2/whatever")
        status, headers, body = split_head(r.stdout)
        self.assertEqual(status, 404)
        self.assertEqual(headers["content-type"], "application/json")
        self.assertIn("error", json.loads(body))
        r = self.post("/v1/completions", {"prompt": "x", "n": 0})
        status, _, body = split_head(r.stdout)
        self.assertEqual(status, 400)
        self.assertEqual(json.loads(body)["error"]["param"], "n")

    def test_expect_continue_and_too_large(self):
        # With `Expect: 100-continue` curl waits for the go-ahead before sending the body.
        fits = {"prompt": "In the beginning " + "x" * 3000, "max_tokens": 1}
        r = self.post("/v1/completions", fits, "-v", "-H", "Expect: 100-continue",
                      "--expect100-timeout", "20")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("< HTTP/1.1 100 Continue", r.stderr)
        status, _, body = split_head(r.stdout)
        self.assertEqual(status, 400, body)  # 3000 x's are too many tokens for kjv-1m
        self.assertEqual(json.loads(body)["error"]["param"], "prompt")
        too_big = {"prompt": "y" * 20000}
        r = self.post("/v1/completions", too_big, "-H", "Expect: 100-continue",
                      "--expect100-timeout", "20")
        status, headers, body = split_head(r.stdout)
        self.assertEqual(status, 413)
        self.assertEqual(headers["connection"], "close")
        self.assertRegex(json.loads(body)["error"]["message"], r"larger than .* 8192 bytes")
        # Still serving.
        r = curl(self.server.http_url + "/health")
        self.assertEqual(json.loads(r.stdout)["status"], "ok")

    def test_log_names_the_http_listener(self):
        self.assertTrue(re.search(r"http on http://127\.0\.0\.1:\d+", self.server.log.text()))


if __name__ == "__main__":
    e2e_util.main()
