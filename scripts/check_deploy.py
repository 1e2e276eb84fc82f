#!/usr/bin/python3
"""Checks Quill's deployment files: Dockerfile, deploy/docker-compose.yml, deploy/k8s/,
deploy/prometheus/ and deploy/grafana/.

Every YAML file must parse (all documents) and every JSON file must load; then the fields
that matter are asserted to agree with each other and with quill-server's flags: native
gRPC probes on the gRPC port, resources, ports vs the ConfigMap's QUILL_* values, the
termination grace period vs the drain timeout and preStop, the HPA metric, the PDB, the
Prometheus/Grafana wiring of the compose file, and the metrics: the dashboard shows every
metric quill-server always exports, every quill_* series a panel, dashboard variable or
rule reads is one it exports (histograms as _bucket/_sum/_count), every recorded series
read is defined by a recording rule, and the metric list here is the one
server/metrics/quill_metrics.cc registers.

    /usr/bin/python3 scripts/check_deploy.py [--build-dir build]

With --build-dir, also checks that the Dockerfile's runtime packages provide every shared
library the built binaries load (ldd + dpkg -S). Exits 1 listing every failure, else 0.
Needs only python3 and python3-yaml (Debian's kubectl predates gRPC probes, so no schema
validation is attempted).
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT_ROOT = ROOT  # this script's repository (ROOT may be set to another tree)

# The metric families quill-server exports (server/metrics/quill_metrics.cc, which is
# checked to register exactly these), by type. SERVER_METRICS are always exported (a real
# scrape has every one: tests/e2e/test_promtool.py) and the dashboard must show each;
# PER_TENANT_METRICS only with --metrics-per-tenant.
SERVER_METRIC_TYPES = {
    "quill_time_to_first_token_seconds": "histogram", "quill_inter_token_latency_seconds": "histogram",
    "quill_request_duration_seconds": "histogram", "quill_queue_wait_seconds": "histogram",
    "quill_prefill_duration_seconds": "histogram", "quill_decode_duration_seconds": "histogram",
    "quill_engine_step_duration_seconds": "histogram", "quill_batch_tokens": "histogram",
    "quill_requests_total": "counter", "quill_prompt_tokens_total": "counter",
    "quill_generated_tokens_total": "counter", "quill_reasoning_tokens_total": "counter",
    "quill_prefix_cache_query_tokens_total": "counter",
    "quill_prefix_cache_hit_tokens_total": "counter",
    "quill_prefix_cache_waited_requests_total": "counter", "quill_spec_draft_tokens_total": "counter",
    "quill_spec_accepted_tokens_total": "counter", "quill_requests_running": "gauge",
    "quill_requests_waiting": "gauge", "quill_requests_paused": "gauge",
    "quill_kv_cache_capacity_blocks": "gauge", "quill_kv_cache_blocks_used": "gauge",
    "quill_prefix_cache_blocks": "gauge", "quill_kv_cache_bytes_used": "gauge",
    "quill_kv_cache_bytes_capacity": "gauge", "quill_kv_cache_usage_ratio": "gauge",
    "quill_model_weights_bytes": "gauge", "quill_process_resident_memory_bytes": "gauge",
    "quill_kv_cache_info": "gauge",
}
PER_TENANT_METRIC_TYPES = {
    "quill_tenant_requests_total": "counter", "quill_tenant_queue_wait_seconds": "histogram",
    "quill_tenant_time_to_first_token_seconds": "histogram",
}
SERVER_METRICS = list(SERVER_METRIC_TYPES)
PER_TENANT_METRICS = list(PER_TENANT_METRIC_TYPES)
METRICS_SOURCE = os.path.join("server", "metrics", "quill_metrics.cc")
# Margin between the grace period and preStop + drain: gRPC's own shutdown grace (5 s).
SHUTDOWN_MARGIN_SECONDS = 5
# Libraries the base image (debian:bookworm-slim) always has.
BASE_IMAGE_PACKAGES = {"libc6", "libgcc-s1", "libstdc++6"}


class Checker:
    def __init__(self):
        self.failures = []
        self.passed = 0

    def check(self, condition, message):
        if condition:
            self.passed += 1
        else:
            self.failures.append(message)
        return condition


def exported_series():
    """{series name: family} of every series quill-server can export: a counter or gauge
    is its own series; a histogram X is X_bucket, X_sum and X_count (never bare X)."""
    series = {}
    for family, kind in list(SERVER_METRIC_TYPES.items()) + list(PER_TENANT_METRIC_TYPES.items()):
        if kind == "histogram":
            for suffix in ("_bucket", "_sum", "_count"):
                series[family + suffix] = family
        else:
            series[family] = family
    return series


def series_read_by(expr):
    """The series names a PromQL expression (or a Grafana label_values() query) reads:
    (quill_* names, recorded level:metric:operations names). Quoted strings (label values)
    are skipped; other identifiers (functions, label names, keywords) are ignored."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\[[^\]]*\]", "", text)  # ranges and subqueries: [5m], [1h:1m]
    names = re.findall(r"[A-Za-z_][A-Za-z0-9_:]*", text)
    quill = sorted({n for n in names if n.startswith("quill_") and ":" not in n})
    recorded = sorted({n for n in names if ":" in n})
    return quill, recorded


def check_series_exist(c, where, expr, records):
    """Every quill_* series `expr` reads is one quill-server exports, and every recorded
    series it reads is defined by a recording rule."""
    exported = exported_series()
    quill, recorded = series_read_by(expr)
    for name in quill:
        if name in exported:
            c.check(True, "")
            continue
        hint = ""
        if name in SERVER_METRIC_TYPES or name in PER_TENANT_METRIC_TYPES:
            hint = " (a histogram: read %s_bucket, _sum or _count)" % name
        c.check(False, "%s reads %s, which quill-server does not export%s" % (where, name, hint))
    for name in recorded:
        c.check(name in records, "%s reads %s, which no recording rule in deploy/prometheus/rules defines"
                % (where, name))


def check_metrics_source(c):
    """The metric list above is the one server/metrics/quill_metrics.cc registers (from
    the checked root, else this script's own repository), with the same types."""
    path = os.path.join(ROOT, METRICS_SOURCE)
    if not os.path.exists(path):
        path = os.path.join(SCRIPT_ROOT, METRICS_SOURCE)
    if not os.path.exists(path):
        print("check_deploy: %s not found; the metric list is not checked against it" % METRICS_SOURCE)
        return
    with open(path) as f:
        source = f.read()
    registered = {}
    for kind, name in re.findall(r'\b(counter|gauge|histogram)\(\s*"(quill_\w+)"', source):
        registered[name] = kind
    for kind, name in re.findall(r'Build(Counter|Gauge|Histogram)\(\)\s*\.Name\("(quill_\w+)"\)', source):
        registered[name] = kind.lower()
    known = dict(SERVER_METRIC_TYPES, **PER_TENANT_METRIC_TYPES)
    c.check(registered, "%s: no metric registrations found (has the way metrics are defined changed?)"
            % METRICS_SOURCE)
    for name, kind in sorted(registered.items()):
        if c.check(name in known, "%s registers %s (%s), which scripts/check_deploy.py's metric list lacks"
                   % (METRICS_SOURCE, name, kind)):
            c.check(known[name] == kind, "%s registers %s as a %s; scripts/check_deploy.py lists a %s"
                    % (METRICS_SOURCE, name, kind, known[name]))
    for name in sorted(set(known) - set(registered)):
        c.check(False, "scripts/check_deploy.py lists %s, which %s does not register" % (name, METRICS_SOURCE))


def set_root(root):
    global ROOT
    ROOT = os.path.abspath(root)


def rel(path):
    return os.path.relpath(path, ROOT)


# --- units ---------------------------------------------------------------------------------

def parse_go_duration(text):
    """'30s', '1m30s', '1.5m', '250ms' -> seconds (the format of absl::ParseDuration)."""
    text = str(text).strip()
    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}
    parts = re.findall(r"(\d+(?:\.\d*)?)(ms|us|ns|h|m|s)", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError("not a duration: %r" % text)
    return sum(float(n) * units[u] for n, u in parts)


def parse_k8s_quantity(text):
    """'5Gi', '4', '250m', '2G' -> a number (bytes or cores)."""
    text = str(text).strip()
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T|m)?", text)
    if not match:
        raise ValueError("not a Kubernetes quantity: %r" % text)
    factor = {None: 1, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
              "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}[match.group(2)]
    return float(match.group(1)) * factor


def parse_quill_bytes(text):
    """quill-server's byte sizes: '2GiB', '512MiB', '64M' (=MiB), '500MB', '1000'."""
    text = str(text).strip()
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([KMGT]i?B?|B)?", text, re.IGNORECASE)
    if not match:
        raise ValueError("not a byte size: %r" % text)
    unit = (match.group(2) or "B").upper()
    powers = {"K": 1, "M": 2, "G": 3, "T": 4}
    if unit == "B":
        factor = 1
    elif unit.endswith("IB") or len(unit) == 1:
        factor = 1024 ** powers[unit[0]]
    else:
        factor = 1000 ** powers[unit[0]]
    return float(match.group(1)) * factor


# --- loading -------------------------------------------------------------------------------

def load_deploy_files(c):
    """Parses every YAML (multi-document) and JSON file under deploy/. Returns {path: docs}."""
    loaded = {}
    for directory, _, files in os.walk(os.path.join(ROOT, "deploy")):
        for name in sorted(files):
            path = os.path.join(directory, name)
            if name.endswith((".yml", ".yaml")):
                try:
                    with open(path) as f:
                        loaded[path] = [d for d in yaml.safe_load_all(f) if d is not None]
                    c.check(True, "")
                except yaml.YAMLError as e:
                    c.check(False, "%s: YAML does not parse: %s" % (rel(path), e))
            elif name.endswith(".json"):
                try:
                    with open(path) as f:
                        loaded[path] = [json.load(f)]
                    c.check(True, "")
                except ValueError as e:
                    c.check(False, "%s: JSON does not parse: %s" % (rel(path), e))
    c.check(len(loaded) > 0, "deploy/: no YAML or JSON files found")
    return loaded


def k8s_objects(loaded):
    objects = []
    for path, docs in loaded.items():
        if os.sep + "k8s" + os.sep not in path:
            continue
        for doc in docs:
            if isinstance(doc, dict) and "kind" in doc:
                objects.append((path, doc))
    return objects


def of_kind(objects, kind):
    return [(p, o) for p, o in objects if o.get("kind") == kind]


def selector_matches(selector, labels):
    return all(labels.get(k) == v for k, v in (selector or {}).items())


# --- Kubernetes ----------------------------------------------------------------------------

def check_deployment(c, path, dep, objects):
    where = "%s: Deployment %s" % (rel(path), dep["metadata"]["name"])
    pod = dep["spec"]["template"]["spec"]
    pod_labels = dep["spec"]["template"]["metadata"].get("labels", {})
    c.check(selector_matches(dep["spec"]["selector"].get("matchLabels"), pod_labels),
            "%s: spec.selector does not match the pod template labels" % where)
    containers = [x for x in pod["containers"] if x["name"] == "quill"]
    if not c.check(len(containers) == 1, "%s: no container named quill" % where):
        return None
    container = containers[0]

    # Flags come from the ConfigMap(s) in envFrom, overridden by env.
    env = {}
    for source in container.get("envFrom", []):
        name = source.get("configMapRef", {}).get("name")
        maps = [o for _, o in of_kind(objects, "ConfigMap") if o["metadata"]["name"] == name]
        if c.check(len(maps) == 1, "%s: envFrom ConfigMap %r not found in deploy/k8s" % (where, name)):
            env.update({k: str(v) for k, v in maps[0].get("data", {}).items()})
    for item in container.get("env", []):
        if "value" in item:
            env[item["name"]] = str(item["value"])
    for key in ("QUILL_PORT", "QUILL_METRICS_PORT", "QUILL_HOST", "QUILL_DRAIN_TIMEOUT",
                "QUILL_MODEL", "QUILL_KV_CACHE_BYTES"):
        c.check(key in env, "%s: %s is not set (ConfigMap or env)" % (where, key))
    if not all(k in env for k in ("QUILL_PORT", "QUILL_METRICS_PORT", "QUILL_DRAIN_TIMEOUT")):
        return None
    grpc_port = int(env["QUILL_PORT"])
    metrics_port = int(env["QUILL_METRICS_PORT"])
    c.check(env.get("QUILL_HOST") == "0.0.0.0",
            "%s: QUILL_HOST must be 0.0.0.0 in a pod (got %r): probes and Services reach the pod IP"
            % (where, env.get("QUILL_HOST")))

    ports = {p.get("name"): p["containerPort"] for p in container.get("ports", [])}
    c.check(ports.get("grpc") == grpc_port,
            "%s: container port 'grpc' is %s but QUILL_PORT is %d" % (where, ports.get("grpc"), grpc_port))
    c.check(ports.get("metrics") == metrics_port,
            "%s: container port 'metrics' is %s but QUILL_METRICS_PORT is %d"
            % (where, ports.get("metrics"), metrics_port))
    http_port = int(env["QUILL_HTTP_PORT"]) if "QUILL_HTTP_PORT" in env else None
    if http_port is not None and http_port >= 0:
        c.check(ports.get("http") == http_port,
                "%s: container port 'http' is %s but QUILL_HTTP_PORT is %d"
                % (where, ports.get("http"), http_port))

    for probe_name in ("readinessProbe", "livenessProbe", "startupProbe"):
        probe = container.get(probe_name)
        if probe is None:
            c.check(probe_name == "startupProbe", "%s: no %s" % (where, probe_name))
            continue
        grpc = probe.get("grpc")
        if c.check(isinstance(grpc, dict), "%s: %s is not a native gRPC probe (grpc: {port: ...})"
                   % (where, probe_name)):
            port = grpc.get("port")
            # gRPC probes take a port number only (no named ports).
            c.check(port == grpc_port,
                    "%s: %s probes port %r, not the gRPC port %d" % (where, probe_name, port, grpc_port))

    resources = container.get("resources", {})
    for kind in ("requests", "limits"):
        for resource in ("cpu", "memory"):
            c.check(resource in resources.get(kind, {}),
                    "%s: resources.%s.%s is missing" % (where, kind, resource))
    try:
        for resource in ("cpu", "memory"):
            request = parse_k8s_quantity(resources["requests"][resource])
            limit = parse_k8s_quantity(resources["limits"][resource])
            c.check(request <= limit, "%s: %s request %s exceeds its limit %s"
                    % (where, resource, resources["requests"][resource], resources["limits"][resource]))
        if "QUILL_KV_CACHE_BYTES" in env:
            kv = parse_quill_bytes(env["QUILL_KV_CACHE_BYTES"])
            memory = parse_k8s_quantity(resources["requests"]["memory"])
            c.check(memory > kv, "%s: memory request %s does not even cover QUILL_KV_CACHE_BYTES=%s"
                    % (where, resources["requests"]["memory"], env["QUILL_KV_CACHE_BYTES"]))
        if "QUILL_THREADS" in env and int(env["QUILL_THREADS"]) > 0:
            c.check(int(env["QUILL_THREADS"]) <= parse_k8s_quantity(resources["limits"]["cpu"]),
                    "%s: QUILL_THREADS=%s exceeds the CPU limit %s"
                    % (where, env["QUILL_THREADS"], resources["limits"]["cpu"]))
    except (KeyError, ValueError) as e:
        c.check(False, "%s: bad resources: %s" % (where, e))

    # Shutdown: grace >= preStop sleep + drain + gRPC's shutdown grace.
    drain = parse_go_duration(env["QUILL_DRAIN_TIMEOUT"])
    pre_stop = 0.0
    command = (container.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command"))
    sleep_action = container.get("lifecycle", {}).get("preStop", {}).get("sleep")
    if command and len(command) == 2 and command[0] == "sleep":
        pre_stop = float(command[1])
    elif sleep_action:
        pre_stop = float(sleep_action["seconds"])
    else:
        c.check(False, "%s: no preStop sleep (exec [sleep, N] or sleep: {seconds: N})" % where)
    grace = pod.get("terminationGracePeriodSeconds", 30)
    needed = pre_stop + drain + SHUTDOWN_MARGIN_SECONDS
    c.check(grace >= needed,
            "%s: terminationGracePeriodSeconds %s < preStop %gs + QUILL_DRAIN_TIMEOUT %gs + %ds margin"
            % (where, grace, pre_stop, drain, SHUTDOWN_MARGIN_SECONDS))
    liveness = container.get("livenessProbe", {})
    window = liveness.get("periodSeconds", 10) * liveness.get("failureThreshold", 3)
    c.check(window >= pre_stop + drain,
            "%s: livenessProbe gives up after %ds, shorter than preStop + drain (%gs): it would kill "
            "a draining pod" % (where, window, pre_stop + drain))

    # The model path lives on a mounted volume.
    mounts = {m["name"]: m["mountPath"] for m in container.get("volumeMounts", [])}
    model = env.get("QUILL_MODEL", "")
    on_volume = [n for n, p in mounts.items() if model.startswith(p.rstrip("/") + "/")]
    if c.check(on_volume, "%s: QUILL_MODEL=%s is not under any volumeMount" % (where, model)):
        volume = [v for v in pod.get("volumes", []) if v["name"] == on_volume[0]]
        if c.check(volume, "%s: volume %s is not defined" % (where, on_volume[0])):
            claim = volume[0].get("persistentVolumeClaim", {}).get("claimName")
            if claim:
                c.check(any(o["metadata"]["name"] == claim for _, o in of_kind(objects, "PersistentVolumeClaim")),
                        "%s: PersistentVolumeClaim %s is not defined in deploy/k8s" % (where, claim))
            else:
                c.check("emptyDir" in volume[0] and pod.get("initContainers"),
                        "%s: the model volume is neither a PVC nor an emptyDir filled by an initContainer"
                        % where)
    return {"labels": pod_labels, "grpc_port": grpc_port, "metrics_port": metrics_port, "http_port": http_port,
            "name": dep["metadata"]["name"]}


def check_k8s(c, loaded):
    objects = k8s_objects(loaded)
    deployments = of_kind(objects, "Deployment")
    if not c.check(deployments, "deploy/k8s: no Deployment"):
        return
    c.check(any("persistentVolumeClaim" in str(o) for _, o in deployments),
            "deploy/k8s: no Deployment mounts the model from a PersistentVolumeClaim")
    infos = [i for i in (check_deployment(c, p, d, objects) for p, d in deployments) if i]
    if not infos:
        return
    info = infos[0]
    labels, names = info["labels"], {i["name"] for i in infos}

    services = of_kind(objects, "Service")
    c.check(any(s["spec"].get("clusterIP") == "None" for _, s in services),
            "deploy/k8s: no headless Service (clusterIP: None) for client-side balancing")
    served = set()
    for path, service in services:
        where = "%s: Service %s" % (rel(path), service["metadata"]["name"])
        c.check(selector_matches(service["spec"].get("selector"), labels) and service["spec"].get("selector"),
                "%s: selector does not match the Deployment's pod labels" % where)
        for port in service["spec"]["ports"]:
            target = port.get("targetPort", port["port"])
            known = {"grpc": info["grpc_port"], "metrics": info["metrics_port"]}
            if info.get("http_port") is not None:
                known["http"] = info["http_port"]
            c.check(target in known or target in known.values(),
                    "%s: port %s targets %r, which is no container port" % (where, port.get("name"), target))
            served.add(port.get("name"))
    c.check({"grpc", "metrics"} <= served, "deploy/k8s: the Services do not expose both grpc and metrics ports")

    monitors = of_kind(objects, "PodMonitor") + of_kind(objects, "ServiceMonitor")
    if c.check(monitors, "deploy/k8s: no PodMonitor or ServiceMonitor"):
        for path, monitor in monitors:
            endpoints = monitor["spec"].get("podMetricsEndpoints") or monitor["spec"].get("endpoints") or []
            c.check(any(e.get("port") == "metrics" for e in endpoints),
                    "%s: %s does not scrape the port named metrics" % (rel(path), monitor["kind"]))
            if monitor["kind"] == "PodMonitor":
                c.check(selector_matches(monitor["spec"]["selector"].get("matchLabels"), labels),
                        "%s: PodMonitor selector does not match the pods" % rel(path))

    hpas = of_kind(objects, "HorizontalPodAutoscaler")
    if c.check(hpas, "deploy/k8s: no HorizontalPodAutoscaler"):
        for path, hpa in hpas:
            c.check(hpa["apiVersion"] == "autoscaling/v2", "%s: HPA must be autoscaling/v2" % rel(path))
            c.check(hpa["spec"]["scaleTargetRef"].get("name") in names,
                    "%s: HPA targets %r, not the Deployment" % (rel(path), hpa["spec"]["scaleTargetRef"].get("name")))
            metric_names = [m.get("pods", {}).get("metric", {}).get("name") for m in hpa["spec"].get("metrics", [])]
            c.check("quill_requests_waiting" in metric_names,
                    "%s: HPA does not scale on the pods metric quill_requests_waiting (has %s)" % (rel(path), metric_names))
    adapter_ok = False
    for path, cm in of_kind(objects, "ConfigMap"):
        for value in cm.get("data", {}).values():
            if "seriesQuery" not in str(value):
                continue
            config = yaml.safe_load(value)
            for rule in config.get("rules", []):
                if ("quill_requests_waiting" in rule.get("seriesQuery", "")
                        and rule.get("name", {}).get("as") == "quill_requests_waiting"
                        and {"namespace", "pod"} <= set(rule.get("resources", {}).get("overrides", {}))):
                    adapter_ok = True
    c.check(adapter_ok, "deploy/k8s: no prometheus-adapter rule exposing quill_requests_waiting per pod")

    pdbs = of_kind(objects, "PodDisruptionBudget")
    if c.check(pdbs, "deploy/k8s: no PodDisruptionBudget"):
        for path, pdb in pdbs:
            c.check(selector_matches(pdb["spec"]["selector"].get("matchLabels"), labels),
                    "%s: PDB selector does not match the pods" % rel(path))
            c.check("minAvailable" in pdb["spec"] or "maxUnavailable" in pdb["spec"],
                    "%s: PDB has neither minAvailable nor maxUnavailable" % rel(path))

    rules = of_kind(objects, "PrometheusRule")
    if c.check(rules, "deploy/k8s: no PrometheusRule"):
        groups = []
        for name in ("quill-recording.yml", "quill-alerts.yml"):
            path = os.path.join(ROOT, "deploy", "prometheus", "rules", name)
            groups += loaded.get(path, [{}])[0].get("groups", [])
        c.check(rules[0][1]["spec"]["groups"] == groups,
                "%s: PrometheusRule groups differ from deploy/prometheus/rules/*.yml" % rel(rules[0][0]))


# --- Prometheus, Grafana, compose ----------------------------------------------------------

def check_prometheus(c, loaded):
    """Checks prometheus.yml and the rules; returns (the quill scrape job or None, the
    names the recording rules define)."""
    records, alerts = set(), set()
    rules = []
    for name in ("quill-recording.yml", "quill-alerts.yml"):
        for group in loaded.get(os.path.join(ROOT, "deploy", "prometheus", "rules", name), [{}])[0].get("groups", []):
            for rule in group.get("rules", []):
                rules.append((name, rule))
                if "record" in rule:
                    records.add(rule["record"])
                if "alert" in rule:
                    alerts.add(rule["alert"])
    # Every series a rule reads exists: exported by quill-server or recorded by a rule.
    for name, rule in rules:
        where = "prometheus rules: %s %s" % (name, rule.get("record") or rule.get("alert"))
        check_series_exist(c, where, str(rule.get("expr", "")), records)
    for needed in ("job:quill_time_to_first_token_seconds:p50_rate1m", "job:quill_time_to_first_token_seconds:p99_rate1m",
                   "job:quill_inter_token_latency_seconds:p50_rate1m", "job:quill_inter_token_latency_seconds:p99_rate1m",
                   "job:quill_generated_tokens:rate1m", "instance:quill_kv_cache_utilization:ratio",
                   "job:quill_prefix_cache_hit_tokens:ratio_rate5m", "job:quill_spec_accepted_tokens:ratio_rate5m"):
        c.check(needed in records, "prometheus rules: recording rule %s is missing" % needed)
    for needed in ("QuillHighQueueWait", "QuillKvCacheNearlyFull", "QuillHighErrorRate", "QuillNoSuccessfulRequests"):
        c.check(needed in alerts, "prometheus rules: alert %s is missing" % needed)

    config_path = os.path.join(ROOT, "deploy", "prometheus", "prometheus.yml")
    config = loaded.get(config_path, [None])[0]
    if not c.check(isinstance(config, dict), "deploy/prometheus/prometheus.yml missing or empty"):
        return None, records
    jobs = {j["job_name"]: j for j in config.get("scrape_configs", [])}
    c.check("quill" in jobs, "prometheus.yml: no scrape job named quill")
    for rule_file in config.get("rule_files", []):
        c.check(os.path.exists(os.path.join(os.path.dirname(config_path), rule_file)),
                "prometheus.yml: rule file %s does not exist" % rule_file)
    return jobs.get("quill"), records


def panel_targets(dashboard):
    for panel in dashboard.get("panels", []):
        for inner in [panel] + panel.get("panels", []):
            for target in inner.get("targets", []):
                yield inner, target


def check_grafana(c, loaded, records):
    datasource_path = os.path.join(ROOT, "deploy", "grafana", "provisioning", "datasources", "prometheus.yml")
    provider_path = os.path.join(ROOT, "deploy", "grafana", "provisioning", "dashboards", "quill.yml")
    dashboard_path = os.path.join(ROOT, "deploy", "grafana", "dashboards", "quill.json")
    for path in (datasource_path, provider_path, dashboard_path):
        c.check(path in loaded, "%s is missing or does not parse" % rel(path))
    if not all(p in loaded for p in (datasource_path, provider_path, dashboard_path)):
        return {}
    datasources = loaded[datasource_path][0].get("datasources", [])
    uids = {d.get("uid") for d in datasources}
    dashboard = loaded[dashboard_path][0]
    expressions = []
    for panel, target in panel_targets(dashboard):
        uid = (target.get("datasource") or panel.get("datasource") or {}).get("uid")
        c.check(uid in uids, "quill.json: panel %r uses datasource uid %r, not a provisioned one (%s)"
                % (panel.get("title"), uid, sorted(uids)))
        expressions.append(target.get("expr", ""))
        check_series_exist(c, "quill.json: panel %r" % panel.get("title"), target.get("expr", ""), records)
    for variable in dashboard.get("templating", {}).get("list", []):
        query = variable.get("query")
        query = query.get("query", "") if isinstance(query, dict) else str(query or "")
        check_series_exist(c, "quill.json: variable %r" % variable.get("name"), query, records)
    text = "\n".join(expressions)
    for metric in SERVER_METRICS:
        c.check(metric in text, "quill.json: no panel shows %s" % metric)
    for title_word in ("outcome", "waiting", "first token", "Inter-token", "prompt", "prefill", "KV cache", "Resident",
                       "Prefix cache hit ratio", "Prefix cache blocks", "drafted vs accepted", "acceptance ratio"):
        c.check(any(title_word.lower() in p.get("title", "").lower() for p in dashboard["panels"]),
                "quill.json: no panel titled with %r" % title_word)
    check_promql(c, expressions)
    return {"datasource_urls": [d.get("url") for d in datasources],
            "provider_paths": [p.get("options", {}).get("path") for p in loaded[provider_path][0].get("providers", [])]}


def check_promql(c, expressions):
    """Validates the dashboard's queries with promtool (Grafana variables substituted)."""
    promtool = shutil.which("promtool")
    if promtool is None or not expressions:
        print("check_deploy: promtool not found; dashboard PromQL not validated")
        return
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": "dashboard:expr_%d" % i,
         "expr": e.replace("$__rate_interval", "1m").replace("$instance", ".*")}
        for i, e in enumerate(expressions)]}]}
    with tempfile.NamedTemporaryFile("w", suffix=".yml") as f:
        yaml.safe_dump(rules, f)
        f.flush()
        result = subprocess.run([promtool, "check", "rules", f.name], capture_output=True, text=True)
    c.check(result.returncode == 0, "quill.json: a panel query is not valid PromQL:\n%s%s"
            % (result.stdout, result.stderr))


def mount_sources(service):
    """compose volume strings 'src:dst[:ro]' -> {dst: src}."""
    mounts = {}
    for volume in service.get("volumes", []):
        if isinstance(volume, str):
            parts = volume.split(":")
            if len(parts) >= 2:
                mounts[parts[1]] = parts[0]
    return mounts


def check_compose(c, loaded, quill_job, grafana):
    path = os.path.join(ROOT, "deploy", "docker-compose.yml")
    if not c.check(path in loaded, "deploy/docker-compose.yml is missing or does not parse"):
        return
    services = loaded[path][0].get("services", {})
    for name in ("quill", "prometheus", "grafana"):
        c.check(name in services, "docker-compose.yml: no %s service" % name)
    if not all(n in services for n in ("quill", "prometheus", "grafana")):
        return
    quill = services["quill"]
    env = {k: str(v) for k, v in quill.get("environment", {}).items()}
    metrics_port = int(env.get("QUILL_METRICS_PORT", 9090))
    grpc_port = int(env.get("QUILL_PORT", 50051))
    c.check(env.get("QUILL_HOST") == "0.0.0.0", "docker-compose.yml: quill needs QUILL_HOST=0.0.0.0")
    published = [str(p).split(":")[-1] for p in quill.get("ports", [])]
    for service_name, service in services.items():
        for port in service.get("ports", []):
            c.check(str(port).startswith("127.0.0.1:"),
                    "docker-compose.yml: %s publishes %r on every interface; publish on 127.0.0.1 "
                    "only (no TLS or API keys are configured there)" % (service_name, port))
    c.check(str(grpc_port) in published, "docker-compose.yml: the gRPC port %d is not published" % grpc_port)
    drain = parse_go_duration(env.get("QUILL_DRAIN_TIMEOUT", "30s"))
    grace = parse_go_duration(str(quill.get("stop_grace_period", "10s")))
    c.check(grace > drain, "docker-compose.yml: stop_grace_period %gs <= QUILL_DRAIN_TIMEOUT %gs" % (grace, drain))

    # Prometheus: the config and rules mounted, and a scrape target on quill's metrics port.
    prometheus_mounts = mount_sources(services["prometheus"])
    config_mounts = [src for dst, src in prometheus_mounts.items() if dst.endswith("prometheus.yml")]
    c.check(config_mounts and os.path.normpath(os.path.join(ROOT, "deploy", config_mounts[0]))
            == os.path.join(ROOT, "deploy", "prometheus", "prometheus.yml"),
            "docker-compose.yml: prometheus does not mount deploy/prometheus/prometheus.yml")
    c.check(any(src.rstrip("/").endswith("prometheus/rules") for src in prometheus_mounts.values()),
            "docker-compose.yml: prometheus does not mount deploy/prometheus/rules")
    if quill_job:
        targets = [t for sc in quill_job.get("static_configs", []) for t in sc.get("targets", [])]
        c.check("quill:%d" % metrics_port in targets,
                "prometheus.yml: job quill scrapes %s, not quill:%d (QUILL_METRICS_PORT)" % (targets, metrics_port))

    # Grafana: provisioning and the dashboard directory mounted where the provider looks.
    grafana_mounts = mount_sources(services["grafana"])
    c.check(any(src.rstrip("/").endswith("grafana/provisioning/datasources") for src in grafana_mounts.values())
            or any(src.rstrip("/").endswith("grafana/provisioning") for src in grafana_mounts.values()),
            "docker-compose.yml: grafana does not mount the datasource provisioning")
    dashboard_dirs = [dst for dst, src in grafana_mounts.items() if src.rstrip("/").endswith("grafana/dashboards")]
    c.check(dashboard_dirs, "docker-compose.yml: grafana does not mount deploy/grafana/dashboards")
    for path_in_container in grafana.get("provider_paths", []):
        c.check(path_in_container in dashboard_dirs,
                "grafana provisioning: dashboards are read from %s but compose mounts them at %s"
                % (path_in_container, dashboard_dirs))
    for url in grafana.get("datasource_urls", []):
        c.check(url and "prometheus:9090" in url,
                "grafana datasource url %r does not point at the compose prometheus service" % url)


def check_dockerfile(c):
    path = os.path.join(ROOT, "Dockerfile")
    if not c.check(os.path.exists(path), "Dockerfile is missing"):
        return []
    with open(path) as f:
        text = f.read()
    stages = re.findall(r"^FROM\s+(\S+)", text, re.MULTILINE)
    c.check(len(stages) >= 2 and all(s.startswith("debian:bookworm-slim") for s in stages),
            "Dockerfile: expected a multi-stage build on debian:bookworm-slim (got %s)" % stages)
    c.check(re.search(r"^EXPOSE\s+.*\b50051\b.*\b9090\b", text, re.MULTILINE) is not None,
            "Dockerfile: must EXPOSE 50051 and 9090")
    c.check(re.search(r"^HEALTHCHECK\b(.|\\\n)*CMD\s+quill health --addr 127\.0\.0\.1:50051", text, re.MULTILINE) is not None,
            "Dockerfile: HEALTHCHECK must run `quill health --addr 127.0.0.1:50051`")
    users = re.findall(r"^USER\s+(\S+)", text, re.MULTILINE)
    c.check(users and users[-1].split(":")[0] not in ("root", "0"), "Dockerfile: the runtime stage must not run as root")
    c.check("scripts/setup.sh" in text and "scripts/build.sh" in text,
            "Dockerfile: the build stage must use scripts/setup.sh and scripts/build.sh (as CI does)")
    c.check("QUILL_MODEL=/usr/share/quill/models/kjv-1m.gguf" in text and "/usr/share/quill/models/kjv-1m.gguf" in text,
            "Dockerfile: the built-in model must be at /usr/share/quill/models/kjv-1m.gguf and be the QUILL_MODEL default")
    runtime = text.split("FROM", 2)[-1] if len(stages) >= 2 else text
    match = re.search(r"apt-get install(?:[^\n]*\\\n)*[^\n]*", runtime)
    packages = re.findall(r"\b(lib[a-z0-9+.\-]+|zlib1g)\b", match.group(0)) if match else []
    c.check(packages, "Dockerfile: no apt-get install of runtime libraries in the last stage")
    ignore = os.path.join(ROOT, ".dockerignore")
    if c.check(os.path.exists(ignore), ".dockerignore is missing"):
        with open(ignore) as f:
            entries = [line.strip().rstrip("/") for line in f if line.strip() and not line.startswith("#")]
        c.check("build" in entries and ".git" in entries, ".dockerignore must exclude build/ and .git")
    return packages


def dependency_closure(packages):
    """The packages plus everything they depend on (as apt would install), from dpkg's
    records on this machine. For alternatives (a | b) every installed one is followed."""
    closure, todo = set(), list(packages)
    while todo:
        package = todo.pop()
        if package in closure:
            continue
        closure.add(package)
        result = subprocess.run(["dpkg-query", "-W", "-f=${Depends},${Pre-Depends}", package],
                                capture_output=True, text=True)
        if result.returncode != 0:
            continue
        for alternative in re.split(r"[,|]", result.stdout):
            name = re.sub(r"\(.*?\)|\[.*?\]", "", alternative).strip().split(":")[0]
            if name:
                todo.append(name)
    return closure


def package_owners(paths):
    """{path: Debian package} for the paths dpkg knows, in one dpkg -S call. dpkg records
    /usr/lib paths (merged /usr), while ldd may print /lib ones: both spellings are asked."""
    spellings = {}
    for path in paths:
        spellings[path] = path
        if path.startswith("/lib/"):
            spellings["/usr" + path] = path
        elif path.startswith("/usr/lib/"):
            spellings[path[len("/usr"):]] = path
    result = subprocess.run(["dpkg", "-S"] + sorted(spellings), capture_output=True, text=True)
    owners = {}
    for line in result.stdout.splitlines():
        package, _, path = line.partition(": ")
        if path in spellings:
            owners[spellings[path]] = package.split(":")[0]
    return owners


def check_runtime_packages(c, build_dir, packages):
    """Every shared library of the three binaries comes from a package the Dockerfile
    installs, directly or as a dependency that apt-get pulls in."""
    installed = dependency_closure(packages)
    needs = {}  # library -> binaries
    for binary in ("server/quill-server", "client/quill", "engine/tools/quill-run"):
        path = os.path.join(build_dir, binary)
        if not c.check(os.path.exists(path), "--build-dir: %s not built" % path):
            continue
        out = subprocess.run(["ldd", path], capture_output=True, text=True).stdout
        for library in re.findall(r"=>\s+(/\S+)", out):
            needs.setdefault(os.path.realpath(library), []).append(os.path.basename(binary))
    owners = package_owners(list(needs))
    for library, binaries in sorted(needs.items()):
        owner = owners.get(library)
        if c.check(owner is not None, "%s: no Debian package owns %s" % (", ".join(binaries), library)):
            c.check(owner in installed or owner in BASE_IMAGE_PACKAGES,
                    "Dockerfile: %s needs %s from package %s, which the runtime stage does not install"
                    % (", ".join(binaries), library, owner))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build-dir", help="a build tree with quill-server, quill and quill-run")
    parser.add_argument("--root", default=ROOT, help="repository root (default: this script's)")
    args = parser.parse_args()
    set_root(args.root)
    c = Checker()
    loaded = load_deploy_files(c)
    check_k8s(c, loaded)
    check_metrics_source(c)
    quill_job, records = check_prometheus(c, loaded)
    grafana = check_grafana(c, loaded, records)
    check_compose(c, loaded, quill_job, grafana)
    packages = check_dockerfile(c)
    if args.build_dir:
        check_runtime_packages(c, os.path.abspath(args.build_dir), packages)
    if c.failures:
        print("check_deploy: %d problem(s):" % len(c.failures), file=sys.stderr)
        for failure in c.failures:
            print("  - " + failure, file=sys.stderr)
        return 1
    print("check_deploy: OK (%d files, %d checks)" % (len(loaded), c.passed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
