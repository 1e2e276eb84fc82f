#!/usr/bin/python3
"""`quill bench` against a live quill-server: 20 s closed loop at concurrency 4, then a
short open-loop run; the JSON report must show throughput and ordered percentiles."""

import json
import math
import unittest

import e2e_util
from e2e_util import QuillServer

LATENCIES = ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms")


class BenchTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = QuillServer().__enter__()

    @classmethod
    def tearDownClass(cls):
        cls.server.__exit__(None, None, None)

    def check_report(self, report, prompt_tokens, max_tokens):
        self.assertGreater(report["completed"], 0)
        self.assertEqual(report["failed"], 0, report["errors"])
        self.assertGreater(report["request_throughput"], 0)
        self.assertGreater(report["output_token_throughput"], 0)
        # ignore_eos: every request generates exactly max_tokens tokens.
        self.assertEqual(report["output_tokens"], report["completed"] * max_tokens)
        self.assertEqual(report["prompt_tokens"], report["completed"] * prompt_tokens)
        for name in LATENCIES:
            s = report[name]
            self.assertGreater(s["count"], 0, name)
            for key in ("min", "p50", "p90", "p99", "max", "mean"):
                self.assertTrue(isinstance(s[key], float) and math.isfinite(s[key]), (name, key, s))
            self.assertLessEqual(s["min"], s["p50"], name)
            self.assertLessEqual(s["p50"], s["p90"], name)
            self.assertLessEqual(s["p90"], s["p99"], name)
            self.assertLessEqual(s["p99"], s["max"], name)
        self.assertEqual(report["ttft_ms"]["count"], report["completed"])
        # One ITL sample per streamed message after the first: at most max_tokens - 1 each.
        self.assertLessEqual(report["itl_ms"]["count"], report["completed"] * (max_tokens - 1))

    def test_closed_loop_20s(self):
        r = self.server.cli("bench", "--concurrency", "4", "--duration", "20s",
                            "--prompt-tokens", "32", "--max-tokens", "32", "--json", timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        report = json.loads(r.stdout)
        print("closed loop:", json.dumps({k: report[k] for k in (
            "duration_s", "completed", "request_throughput", "output_token_throughput")}),
            {name: (report[name]["p50"], report[name]["p90"], report[name]["p99"]) for name in LATENCIES})
        self.check_report(report, 32, 32)
        self.assertEqual(report["config"]["mode"], "closed-loop")
        self.assertGreaterEqual(report["duration_s"], 20.0)
        # The progress line (not a TTY here: one line per update) showed up on stderr.
        self.assertRegex(r.stderr, r"\[\s*\d+\.\ds\] started \d+, done \d+, failed 0")

    def test_open_loop_and_human_report(self):
        r = self.server.cli("bench", "--rate", "20", "--concurrency", "8", "--requests", "30",
                            "--prompt-tokens", "16", "--max-tokens", "8", "--json", "--quiet",
                            timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        report = json.loads(r.stdout)
        self.check_report(report, 16, 8)
        self.assertEqual(report["completed"], 30)
        self.assertEqual(report["config"]["mode"], "open-loop")
        self.assertEqual(r.stderr, "")
        human = self.server.cli("bench", "--requests", "8", "--concurrency", "2",
                                "--prompt-tokens", "8", "--max-tokens", "4", "--quiet")
        self.assertEqual(human.returncode, 0, human.stderr)
        self.assertIn("Successful requests:", human.stdout)
        self.assertRegex(human.stdout, r"Time to first token\s+[0-9.]+")

    def test_same_load_over_http(self):
        """--api http: the OpenAI-compatible stream, with exact token counts per event."""
        r = self.server.cli("bench", "--api", "http", "--http-addr",
                            "127.0.0.1:%d" % self.server.http_port, "--concurrency", "4",
                            "--requests", "40", "--prompt-tokens", "16", "--max-tokens", "16",
                            "--json", "--quiet", timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        report = json.loads(r.stdout)
        self.check_report(report, 16, 16)
        self.assertEqual(report["completed"], 40)
        self.assertEqual(report["config"]["api"], "http")
        # Pointed at a port with no HTTP API, every request fails and the exit code says so.
        bad = self.server.cli("bench", "--api", "http", "--http-addr",
                              "127.0.0.1:%d" % e2e_util.free_port(), "--requests", "2",
                              "--prompt-tokens", "4", "--max-tokens", "2", "--json", "--quiet")
        self.assertEqual(bad.returncode, 1, bad.stdout)
        self.assertEqual(json.loads(bad.stdout)["failed"], 2)

    def test_rejects_requests_longer_than_the_context(self):
        r = self.server.cli("bench", "--requests", "1", "--prompt-tokens", "250", "--max-tokens", "10")
        self.assertEqual(r.returncode, 2)
        self.assertIn("exceeds the model's context length 256", r.stderr)


if __name__ == "__main__":
    e2e_util.main()
