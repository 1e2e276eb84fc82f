#!/usr/bin/python3
"""scripts/check_deploy.py passes on the repository's deployment files, and fails with a
clear message on copies broken in each way it is meant to catch."""

import os
import re
import shutil
import tempfile
import unittest

import e2e_util
from e2e_util import BINARY_DIR, PYTHON, SOURCE_DIR, run

SCRIPT = os.path.join(SOURCE_DIR, "scripts", "check_deploy.py")


BINARIES = [os.path.join(BINARY_DIR, p) for p in
            ("server/quill-server", "client/quill", "engine/tools/quill-run")]


class CheckDeployTest(unittest.TestCase):
    def test_repository_passes(self):
        args = [PYTHON, SCRIPT]
        if all(os.path.exists(b) for b in BINARIES):
            args += ["--build-dir", BINARY_DIR]  # also checks the Dockerfile's runtime packages
        else:
            print("binaries not built: Dockerfile runtime packages not checked")
        r = run(args)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("check_deploy: OK", r.stdout)

    def broken_copy_fails(self, path, old, new, expected_message, extra_args=()):
        """Copies the deploy files, replaces `old` with `new` in `path`, expects a failure."""
        with tempfile.TemporaryDirectory(prefix="quill-deploy-") as root:
            shutil.copytree(os.path.join(SOURCE_DIR, "deploy"), os.path.join(root, "deploy"))
            for name in ("Dockerfile", ".dockerignore"):
                shutil.copy(os.path.join(SOURCE_DIR, name), root)
            target = os.path.join(root, path)
            if not os.path.exists(target) and old is not None:  # e.g. a server source file
                os.makedirs(os.path.dirname(target), exist_ok=True)
                shutil.copy(os.path.join(SOURCE_DIR, path), target)
            if old is None:
                os.remove(target)
            else:
                with open(target) as f:
                    text = f.read()
                self.assertIn(old, text, "test setup: %r not in %s" % (old, path))
                with open(target, "w") as f:
                    f.write(text.replace(old, new, 1))
            r = run([PYTHON, SCRIPT, "--root", root] + list(extra_args))
        self.assertEqual(r.returncode, 1, "check_deploy accepted a broken %s:\n%s" % (path, r.stdout))
        self.assertRegex(r.stderr, expected_message)

    def test_short_grace_period(self):
        self.broken_copy_fails("deploy/k8s/deployment.yaml", "terminationGracePeriodSeconds: 45",
                               "terminationGracePeriodSeconds: 30",
                               r"terminationGracePeriodSeconds 30 < preStop 5s \+ QUILL_DRAIN_TIMEOUT 30s")

    def test_long_drain_in_configmap(self):
        self.broken_copy_fails("deploy/k8s/configmap.yaml", "QUILL_DRAIN_TIMEOUT: 30s",
                               "QUILL_DRAIN_TIMEOUT: 2m", r"QUILL_DRAIN_TIMEOUT 120s")

    def test_probe_on_the_wrong_port(self):
        self.broken_copy_fails("deploy/k8s/deployment.yaml", "readinessProbe:\n            grpc:\n              port: 50051",
                               "readinessProbe:\n            grpc:\n              port: 9090",
                               r"readinessProbe probes port 9090, not the gRPC port 50051")

    def test_http_probe_instead_of_grpc(self):
        self.broken_copy_fails("deploy/k8s/deployment.yaml", "livenessProbe:\n            grpc:\n              port: 50051",
                               "livenessProbe:\n            tcpSocket:\n              port: 50051",
                               r"livenessProbe is not a native gRPC probe")

    def test_port_mismatch_with_configmap(self):
        self.broken_copy_fails("deploy/k8s/configmap.yaml", 'QUILL_METRICS_PORT: "9090"',
                               'QUILL_METRICS_PORT: "9100"',
                               r"container port 'metrics' is 9090 but QUILL_METRICS_PORT is 9100")

    def test_missing_memory_limit(self):
        self.broken_copy_fails("deploy/k8s/deployment.yaml", "              cpu: \"4\"\n              memory: 6Gi",
                               "              cpu: \"4\"", r"resources.limits.memory is missing")

    def test_hpa_metric(self):
        self.broken_copy_fails("deploy/k8s/hpa.yaml", "name: quill_requests_waiting",
                               "name: quill_requests_running", r"quill_requests_waiting")

    def test_no_pdb(self):
        self.broken_copy_fails("deploy/k8s/pdb.yaml", None, None, r"no PodDisruptionBudget")

    def test_invalid_yaml(self):
        self.broken_copy_fails("deploy/k8s/service.yaml", "  type: ClusterIP", "  type: [ClusterIP",
                               r"service.yaml: YAML does not parse")

    def test_compose_without_dashboards(self):
        self.broken_copy_fails("deploy/docker-compose.yml",
                               "      - ./grafana/dashboards:/var/lib/grafana/dashboards:ro\n", "",
                               r"grafana does not mount deploy/grafana/dashboards")

    def test_compose_scrape_target(self):
        self.broken_copy_fails("deploy/prometheus/prometheus.yml", '"quill:9090"', '"quill:9091"',
                               r"job quill scrapes \['quill:9091'\], not quill:9090")

    def test_dashboard_metric_missing(self):
        self.broken_copy_fails("deploy/grafana/dashboards/quill.json", "quill_process_resident_memory_bytes",
                               "process_resident_memory_bytes", r"no panel shows quill_process_resident_memory_bytes")

    def test_dashboard_reads_a_metric_the_server_does_not_export(self):
        # The acceptance-ratio panel still reads the real name, so only the new check can fail.
        self.broken_copy_fails("deploy/grafana/dashboards/quill.json", "quill_spec_draft_tokens_total{",
                               "quill_spec_drafted_tokens_total{",
                               r"panel 'Speculative decoding: drafted vs accepted tokens per second' reads "
                               r"quill_spec_drafted_tokens_total, which quill-server does not export")

    def test_dashboard_reads_a_histogram_without_its_suffix(self):
        self.broken_copy_fails("deploy/grafana/dashboards/quill.json", "quill_batch_tokens_bucket{",
                               "quill_batch_tokens{",
                               r"reads quill_batch_tokens, which quill-server does not export "
                               r"\(a histogram: read quill_batch_tokens_bucket")

    def test_dashboard_variable_reads_a_metric_the_server_does_not_export(self):
        self.broken_copy_fails("deploy/grafana/dashboards/quill.json", "label_values(quill_requests_running,",
                               "label_values(quill_running_requests,",
                               r"variable 'instance' reads quill_running_requests")

    def test_recording_rule_reads_a_metric_the_server_does_not_export(self):
        self.broken_copy_fails("deploy/prometheus/rules/quill-recording.yml", "quill_spec_draft_tokens_total[5m]",
                               "quill_spec_drafts_total[5m]",
                               r"job:quill_spec_accepted_tokens:ratio_rate5m reads quill_spec_drafts_total, "
                               r"which quill-server does not export")

    def test_alert_reads_an_undefined_recorded_series(self):
        self.broken_copy_fails("deploy/prometheus/rules/quill-alerts.yml", "job:quill_requests_error:ratio_rate5m",
                               "job:quill_request_errors:ratio_rate5m",
                               r"QuillHighErrorRate reads job:quill_request_errors:ratio_rate5m, which no "
                               r"recording rule")

    def test_metric_list_follows_the_server_source(self):
        # A metric renamed in the server: the list (and so the dashboard check) must follow.
        self.broken_copy_fails("server/metrics/quill_metrics.cc", '"quill_prefix_cache_blocks"',
                               '"quill_prefix_cache_blocks_cached"',
                               r"registers quill_prefix_cache_blocks_cached \(gauge\), which "
                               r"scripts/check_deploy.py's metric list lacks")

    def test_prometheus_rule_drift(self):
        self.broken_copy_fails("deploy/prometheus/rules/quill-alerts.yml", "> 0.9", "> 0.8",
                               r"PrometheusRule groups differ")

    def test_dockerfile_healthcheck(self):
        self.broken_copy_fails("Dockerfile", "CMD quill health --addr 127.0.0.1:50051",
                               "CMD true", r"HEALTHCHECK must run")

    def test_dockerfile_missing_runtime_library(self):
        if not all(os.path.exists(b) for b in BINARIES):
            self.skipTest("binaries not built")
        self.broken_copy_fails("Dockerfile", "libspdlog1.10 ", "",
                               r"quill-server.* needs \S+libspdlog\S+ from package libspdlog1\.10",
                               extra_args=["--build-dir", BINARY_DIR])


if __name__ == "__main__":
    e2e_util.main(needs_server=False)
