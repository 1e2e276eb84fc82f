"""Shared helpers for Quill's end-to-end tests: locate the binaries and the model, run a
real quill-server on 127.0.0.1 with free ports, run commands with bounded waits, and always
clean up the processes they start.

Environment (set by tests/e2e/CMakeLists.txt): QUILL_SOURCE_DIR, QUILL_BINARY_DIR,
QUILL_SHARED_DIR. A test exits with SKIP_CODE (77, ctest's SKIP_RETURN_CODE) and a message
when something it needs is absent.
"""

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import unittest
import urllib.request

SKIP_CODE = 77
SOURCE_DIR = os.environ.get("QUILL_SOURCE_DIR") or os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BINARY_DIR = os.environ.get("QUILL_BINARY_DIR") or os.path.join(SOURCE_DIR, "build")
SHARED_DIR = os.environ.get("QUILL_SHARED_DIR") or os.path.join(SOURCE_DIR, "..", "shared")

SERVER = os.path.join(BINARY_DIR, "server", "quill-server")
CLI = os.path.join(BINARY_DIR, "client", "quill")
PYTHON = "/usr/bin/python3"

# The metric families quill-server exports (checked on a real scrape): one list, kept in
# scripts/check_deploy.py, which also checks the dashboard covers them.
sys.path.insert(0, os.path.join(SOURCE_DIR, "scripts"))
from check_deploy import SERVER_METRICS, SERVER_METRIC_TYPES  # noqa: E402


def skip(message):
    """Skips the current test (or, before unittest starts, the whole script: see main)."""
    raise unittest.SkipTest(message)


def require_binaries(*paths):
    for path in paths:
        if not os.path.exists(path):
            skip("%s is not built (build the whole tree first)" % path)


def require_program(name):
    path = shutil.which(name)
    if path is None:
        skip("%s not found on PATH (Debian package `prometheus`; CI installs it)" % name)
    return path


def model_path():
    for candidate in (os.path.join(SHARED_DIR, "models", "kjv-1m.gguf"),
                      os.path.join(SOURCE_DIR, "models", "kjv-1m.gguf")):
        if os.path.exists(candidate):
            return os.path.abspath(candidate)
    skip("kjv-1m.gguf not found in %s/models or %s/models" % (SHARED_DIR, SOURCE_DIR))


def free_port():
    """A port that was free a moment ago (for programs that cannot take port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url, timeout=5.0):
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.read().decode("utf-8")


def run(args, timeout=60, input_text=None, env=None):
    """Runs a command to completion (bounded); returns CompletedProcess with text output."""
    return subprocess.run(args, input=input_text, capture_output=True, text=True,
                          timeout=timeout, env=env)


def stop_process(process, timeout=15.0):
    """SIGTERM, then SIGKILL after `timeout`; never raises."""
    if process is None or process.poll() is not None:
        return
    try:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)
    except OSError:
        pass


class LogReader:
    """Collects a process's merged stdout/stderr lines on a thread."""

    def __init__(self, process):
        self.lines = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._read, args=(process,), daemon=True)
        self._thread.start()

    def _read(self, process):
        for line in process.stdout:
            with self._lock:
                self.lines.append(line.rstrip("\n"))

    def join(self, timeout=10.0):
        self._thread.join(timeout)

    def text(self):
        with self._lock:
            return "\n".join(self.lines)

    def search(self, pattern):
        match = re.search(pattern, self.text())
        return match


class QuillServer:
    """A real quill-server on 127.0.0.1 with --port 0 --metrics-port 0 --http-port 0.

    Use as a context manager: waits (<= 60 s) for the two log lines with the ports and for
    health SERVING; always stops the process on exit.
    """

    def __init__(self, extra_args=(), startup_timeout=60.0, health_args=()):
        require_binaries(SERVER, CLI)
        self.model = model_path()
        self.extra_args = list(extra_args)
        self.health_args = list(health_args)  # e.g. --tls-ca for a TLS server
        self.startup_timeout = startup_timeout
        self.process = None
        self.log = None
        self.port = None
        self.metrics_port = None
        self.http_port = None

    @property
    def addr(self):
        return "127.0.0.1:%d" % self.port

    @property
    def http_url(self):
        return "http://127.0.0.1:%d" % self.http_port

    @property
    def metrics_url(self):
        return "http://127.0.0.1:%d/metrics" % self.metrics_port

    def __enter__(self):
        args = [SERVER, "--model", self.model, "--host", "127.0.0.1", "--port", "0",
                "--metrics-port", "0", "--http-port", "0", "--drain-timeout", "5s"] + self.extra_args
        env = dict(os.environ)
        env.pop("QUILL_ADDR", None)
        self.process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        text=True, env=env)
        self.log = LogReader(self.process)
        try:
            self._wait_ready()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _wait_ready(self):
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError("quill-server exited with %s during startup:\n%s"
                                   % (self.process.returncode, self.log.text()))
            listening = self.log.search(r"listening on 127\.0\.0\.1:(\d+)")
            metrics = self.log.search(r"metrics on http://127\.0\.0\.1:(\d+)/metrics")
            http = self.log.search(r"http on https?://127\.0\.0\.1:(\d+)")
            if listening and metrics and http:
                self.port = int(listening.group(1))
                self.metrics_port = int(metrics.group(1))
                self.http_port = int(http.group(1))
                if run([CLI, "health", "--addr", self.addr, "--timeout", "2s"] + self.health_args,
                       timeout=10).returncode == 0:
                    return
            time.sleep(0.1)
        raise RuntimeError("quill-server not SERVING within %gs:\n%s"
                           % (self.startup_timeout, self.log.text()))

    def __exit__(self, *exc):
        stop_process(self.process)
        if self.log is not None:
            self.log.join()
        if self.process is not None and self.process.stdout is not None:
            self.process.stdout.close()
        return False

    def cli(self, *args, timeout=60, input_text=None):
        """Runs `quill <args>` against this server (the --addr is added after the subcommand)."""
        return run([CLI, args[0], "--addr", self.addr] + list(args[1:]), timeout=timeout,
                   input_text=input_text)


def main(needs_server=True):
    """unittest.main for ctest: skips (exit 77) up front when the server, the CLI or the model
    is missing, so that no test half-runs; failures give a non-zero exit code."""
    try:
        if needs_server:
            require_binaries(SERVER, CLI)
            model_path()
    except unittest.SkipTest as e:
        print("SKIPPED: %s" % e)
        sys.exit(SKIP_CODE)
    program = unittest.main(verbosity=2, exit=False)
    result = program.result
    if not result.wasSuccessful():
        sys.exit(1)
    if result.testsRun > 0 and len(result.skipped) == result.testsRun:
        print("SKIPPED: every test skipped: %s" % "; ".join(reason for _, reason in result.skipped))
        sys.exit(SKIP_CODE)
    sys.exit(0)
