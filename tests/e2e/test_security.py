#!/usr/bin/python3
"""quill-server with TLS and API keys, driven by the quill CLI and examples/python/stream.py:
keys via --api-key and QUILL_API_KEY, refusals without them, and SIGHUP re-reading the key
file. Certificates are made by the openssl tool for the test."""

import json
import os
import shutil
import signal
import ssl
import subprocess
import tempfile
import time
import unittest
import urllib.error
import urllib.request

import e2e_util
from e2e_util import CLI, PYTHON, SOURCE_DIR, QuillServer, run

EXAMPLE = os.path.join(SOURCE_DIR, "examples", "python", "stream.py")


def make_certificates(directory):
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    ext = os.path.join(directory, "san.ext")
    with open(ext, "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    steps = [
        ["openssl", "req", "-x509"] + ec + ["-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
                                            "-subj", "/CN=quill-e2e-ca"],
        ["openssl", "req"] + ec + ["-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=localhost"],
        ["openssl", "x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
         "-CAcreateserial", "-days", "2", "-extfile", ext, "-out", "server.pem"],
    ]
    for step in steps:
        subprocess.run(step, cwd=directory, check=True, capture_output=True, timeout=60)


class SecurityTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if shutil.which("openssl") is None:
            raise unittest.SkipTest("the openssl tool is not installed")
        cls.dir = tempfile.mkdtemp(prefix="quill-e2e-security-")
        make_certificates(cls.dir)
        cls.ca = os.path.join(cls.dir, "ca.pem")
        cls.keys = os.path.join(cls.dir, "api-keys")
        with open(cls.keys, "w") as f:
            f.write("# e2e\nfirst-key\n")
        cls.server = QuillServer(
            extra_args=["--tls-cert", os.path.join(cls.dir, "server.pem"),
                        "--tls-key", os.path.join(cls.dir, "server.key"),
                        "--api-keys-file", cls.keys],
            health_args=["--tls-ca", cls.ca]).__enter__()

    @classmethod
    def tearDownClass(cls):
        cls.server.__exit__(None, None, None)
        shutil.rmtree(cls.dir, ignore_errors=True)

    def generate(self, *args, env_key=None):
        env = dict(os.environ)
        env.pop("QUILL_API_KEY", None)
        if env_key is not None:
            env["QUILL_API_KEY"] = env_key
        return run([CLI, "generate", "--addr", self.server.addr, "--max-tokens", "12"] + list(args)
                   + ["In the beginning"], env=env)

    def test_cli_needs_tls_and_a_key(self):
        ok = self.generate("--tls-ca", self.ca, "--api-key", "first-key")
        self.assertEqual(ok.returncode, 0, ok.stderr)
        self.assertTrue(ok.stdout.strip())
        from_env = self.generate("--tls-ca", self.ca, env_key="first-key")
        self.assertEqual(from_env.returncode, 0, from_env.stderr)
        self.assertEqual(from_env.stdout, ok.stdout)
        no_key = self.generate("--tls-ca", self.ca)
        self.assertEqual(no_key.returncode, 1)
        self.assertIn("UNAUTHENTICATED", no_key.stderr)
        plaintext = self.generate("--api-key", "first-key", "--timeout", "5s")
        self.assertEqual(plaintext.returncode, 1)
        self.assertIn("UNAVAILABLE", plaintext.stderr)
        missing_ca = self.generate("--tls-ca", "/nonexistent/ca.pem", "--api-key", "first-key")
        self.assertEqual(missing_ca.returncode, 1)
        self.assertIn("--tls-ca /nonexistent/ca.pem", missing_ca.stderr)

    def test_python_example_with_tls_and_a_key(self):
        example = run([PYTHON, EXAMPLE, "--addr", self.server.addr, "--max-tokens", "12",
                       "--tls-ca", self.ca, "--api-key", "first-key", "In the beginning"])
        self.assertEqual(example.returncode, 0, example.stderr)
        cli = self.generate("--tls-ca", self.ca, "--api-key", "first-key")
        self.assertEqual(example.stdout, cli.stdout)
        refused = run([PYTHON, EXAMPLE, "--addr", self.server.addr, "--tls-ca", self.ca, "hello"],
                      env={k: v for k, v in os.environ.items() if k != "QUILL_API_KEY"})
        self.assertEqual(refused.returncode, 1)
        self.assertIn("error: UNAUTHENTICATED", refused.stderr)

    def https(self, path, body=None, key=None, context=None):
        """(status, parsed JSON body) of a request to the HTTP API over TLS."""
        headers = {"Content-Type": "application/json"}
        if key is not None:
            headers["Authorization"] = "Bearer " + key
        url = "https://127.0.0.1:%d%s" % (self.server.http_port, path)
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(url, data=data, headers=headers)
        context = context or ssl.create_default_context(cafile=self.ca)
        try:
            with urllib.request.urlopen(request, context=context, timeout=30) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read())

    def test_http_api_over_tls_with_a_key(self):
        body = {"prompt": "In the beginning", "max_tokens": 6, "temperature": 0}
        status, answer = self.https("/v1/completions", body, key="first-key")
        self.assertEqual(status, 200, answer)
        self.assertEqual(answer["usage"]["completion_tokens"], 6)
        status, answer = self.https("/v1/completions", body)
        self.assertEqual(status, 401)
        self.assertEqual(answer["error"]["code"], "invalid_api_key")
        status, answer = self.https("/v1/models", key="wrong-key")
        self.assertEqual(status, 401)
        status, answer = self.https("/health")
        self.assertEqual((status, answer["status"]), (200, "ok"))
        # A client that does not trust the CA cannot connect, nor can plaintext HTTP.
        with self.assertRaises(urllib.error.URLError):
            self.https("/health", context=ssl.create_default_context())
        with self.assertRaises(Exception):
            urllib.request.urlopen("http://127.0.0.1:%d/health" % self.server.http_port, timeout=10)

    def test_sighup_rereads_the_keys(self):
        with open(self.keys, "w") as f:
            f.write("first-key\nsecond-key\n")
        reloads = self.server.log.text().count("api keys: reloaded")
        self.server.process.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while self.server.log.text().count("api keys: reloaded") == reloads:
            self.assertLess(time.monotonic(), deadline, "no reload logged:\n" + self.server.log.text())
            time.sleep(0.05)
        r = self.generate("--tls-ca", self.ca, "--api-key", "second-key")
        self.assertEqual(r.returncode, 0, r.stderr)
        # The server keeps serving after the signal.
        self.assertIsNone(self.server.process.poll())


if __name__ == "__main__":
    e2e_util.main()
