#!/usr/bin/python3
"""A real Prometheus (Debian's /usr/bin/prometheus) scrapes a live quill-server every
second, with Quill's recording rules loaded; after a few streamed requests its query API
must return generated tokens, a TTFT median, the recorded generation rate and prefix-cache
hit ratio, and the KV cache's type and block size as `quill info` reports them."""

import json
import math
import os
import subprocess
import tempfile
import threading
import time
import unittest
import urllib.parse

import e2e_util
from e2e_util import CLI, SOURCE_DIR, QuillServer, http_get, run

WAIT_SECONDS = 60


def query(base, expr):
    """Instant query -> list of (labels, float value)."""
    url = "%s/api/v1/query?%s" % (base, urllib.parse.urlencode({"query": expr}))
    body = json.loads(http_get(url))
    if body.get("status") != "success":
        raise RuntimeError("query %r failed: %s" % (expr, body))
    return [(r["metric"], float(r["value"][1])) for r in body["data"]["result"]]


class PrometheusScrapeTest(unittest.TestCase):
    def test_prometheus_scrapes_quill(self):
        prometheus = e2e_util.require_program("prometheus")
        rules_dir = os.path.join(SOURCE_DIR, "deploy", "prometheus", "rules")
        with QuillServer() as server, tempfile.TemporaryDirectory(prefix="quill-prom-") as tmp:
            config = os.path.join(tmp, "prometheus.yml")
            with open(config, "w") as f:
                f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                        "rule_files:\n  - %s/quill-recording.yml\n"
                        "scrape_configs:\n  - job_name: quill\n    static_configs:\n"
                        "      - targets: ['127.0.0.1:%d']\n" % (rules_dir, server.metrics_port))
            port = e2e_util.free_port()
            base = "http://127.0.0.1:%d" % port
            log = open(os.path.join(tmp, "prometheus.log"), "w+")
            process = subprocess.Popen(
                [prometheus, "--config.file=" + config, "--storage.tsdb.path=" + os.path.join(tmp, "data"),
                 "--web.listen-address=127.0.0.1:%d" % port, "--log.level=warn"],
                stdout=log, stderr=subprocess.STDOUT)
            stop = threading.Event()
            traffic = None
            try:
                self.wait_for(lambda: self.ready(base), "Prometheus ready", process, log)
                self.wait_for(lambda: [v for _, v in query(base, 'up{job="quill"}') if v == 1],
                              "the quill target up", process, log)
                traffic = threading.Thread(target=self.stream_requests, args=(server, stop), daemon=True)
                traffic.start()
                tokens = self.wait_for(
                    lambda: [v for _, v in query(base, "sum(quill_generated_tokens_total)") if v > 0],
                    "quill_generated_tokens_total > 0", process, log)
                ttft = self.wait_for(
                    lambda: [v for _, v in query(base, "histogram_quantile(0.5, sum(rate("
                                                 "quill_time_to_first_token_seconds_bucket[30s])) by (le))")
                             if math.isfinite(v)],
                    "a TTFT median", process, log)
                recorded = self.wait_for(
                    lambda: [v for _, v in query(base, "job:quill_generated_tokens:rate1m") if v > 0],
                    "the recording rule job:quill_generated_tokens:rate1m", process, log)
                # The prefix-cache ratio rule reads the server's real counters: a ratio in
                # [0, 1] (the short prompts fill no 16-token block, so mostly 0).
                hit_ratio = self.wait_for(
                    lambda: [v for _, v in query(base, "job:quill_prefix_cache_hit_tokens:ratio_rate5m")
                             if 0 <= v <= 1],
                    "the recording rule job:quill_prefix_cache_hit_tokens:ratio_rate5m", process, log)
                print("generated tokens %g, TTFT p50 %.2f ms, recorded rate %.1f tok/s, prefix-cache hit "
                      "ratio %.2f" % (tokens[0], ttft[0] * 1e3, recorded[0], hit_ratio[0]))
                self.assertGreater(ttft[0], 0)
                # The KV cache's element and block size as labels: what `quill info` reports.
                info = run([CLI, "info", "--addr", server.addr, "--json"])
                self.assertEqual(info.returncode, 0, info.stderr)
                model = json.loads(info.stdout)
                kv_info = query(base, "quill_kv_cache_info")
                self.assertEqual(len(kv_info), 1, kv_info)
                labels, value = kv_info[0]
                self.assertEqual(value, 1)
                self.assertEqual(labels.get("type"), model["kv_cache_type"])
                self.assertEqual(labels.get("block_size_tokens"),
                                 str(model["limits"]["kv_block_size_tokens"]))
            finally:
                stop.set()
                if traffic is not None:
                    traffic.join(timeout=30)
                e2e_util.stop_process(process)
                log.close()

    @staticmethod
    def ready(base):
        try:
            return "Ready" in http_get(base + "/-/ready", timeout=1)
        except OSError:
            return False

    @staticmethod
    def stream_requests(server, stop):
        while not stop.is_set():
            run([CLI, "generate", "--addr", server.addr, "--max-tokens", "8", "--temperature", "0.8",
                 "In the beginning"], timeout=30)
            stop.wait(0.2)

    def wait_for(self, probe, what, process, log):
        deadline = time.monotonic() + WAIT_SECONDS
        while time.monotonic() < deadline:
            if process.poll() is not None:
                log.seek(0)
                self.fail("prometheus exited with %s:\n%s" % (process.returncode, log.read()))
            try:
                result = probe()
            except (OSError, RuntimeError, ValueError):
                result = None
            if result:
                return result
            time.sleep(0.5)
        log.seek(0)
        self.fail("timed out after %ds waiting for %s; prometheus log:\n%s" % (WAIT_SECONDS, what, log.read()))


if __name__ == "__main__":
    e2e_util.main()
