#!/usr/bin/python3
"""promtool on Quill's Prometheus files (config, rules, rule unit tests) and on a real
/metrics scrape of a live quill-server."""

import os
import unittest

import e2e_util
from e2e_util import SOURCE_DIR, QuillServer, http_get, run

PROMETHEUS_DIR = os.path.join(SOURCE_DIR, "deploy", "prometheus")

# promtool exits 1 when the exposition does not parse and 3 for lint findings; Quill's
# exposition must pass with no finding at all (the pool size is the gauge
# quill_kv_cache_capacity_blocks: "_total" is reserved for counters).


class PromtoolFilesTest(unittest.TestCase):
    def setUp(self):
        self.promtool = e2e_util.require_program("promtool")

    def test_check_config(self):
        r = run([self.promtool, "check", "config", os.path.join(PROMETHEUS_DIR, "prometheus.yml")])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_check_rules(self):
        rules = os.path.join(PROMETHEUS_DIR, "rules")
        files = sorted(os.path.join(rules, f) for f in os.listdir(rules) if f.endswith(".yml"))
        self.assertGreaterEqual(len(files), 2)
        r = run([self.promtool, "check", "rules"] + files)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_rule_unit_tests(self):
        r = run([self.promtool, "test", "rules",
                 os.path.join(PROMETHEUS_DIR, "tests", "quill-rules.test.yml")])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)


class PromtoolMetricsTest(unittest.TestCase):
    def test_check_metrics_on_a_real_scrape(self):
        promtool = e2e_util.require_program("promtool")
        with QuillServer() as server:
            # Some traffic first, so that histograms and counters have samples.
            r = server.cli("generate", "--max-tokens", "8", "In the beginning")
            self.assertEqual(r.returncode, 0, r.stderr)
            text = http_get(server.metrics_url)
        # Every family check_deploy.py knows as always exported, with the type it lists.
        for metric, kind in e2e_util.SERVER_METRIC_TYPES.items():
            self.assertIn("# TYPE %s %s\n" % (metric, kind), text)
        r = run([promtool, "check", "metrics"], input_text=text)
        self.assertEqual(r.returncode, 0, "promtool check metrics:\n" + r.stdout + r.stderr)
        self.assertEqual((r.stdout + r.stderr).strip(), "", "promtool check metrics findings")


if __name__ == "__main__":
    e2e_util.main(needs_server=False)
