#!/usr/bin/python3
"""examples/python/stream.py (stubs generated at run time) against a live quill-server."""

import os
import unittest

import e2e_util
from e2e_util import PYTHON, SOURCE_DIR, QuillServer, run

EXAMPLE = os.path.join(SOURCE_DIR, "examples", "python", "stream.py")


class PythonExampleTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = QuillServer().__enter__()

    @classmethod
    def tearDownClass(cls):
        cls.server.__exit__(None, None, None)

    def test_streams_a_generation(self):
        r = run([PYTHON, EXAMPLE, "--addr", self.server.addr, "--max-tokens", "24",
                 "In the beginning"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(r.stdout.strip())
        self.assertRegex(r.stderr, r"\[finish_reason: (LENGTH|EOS|STOP)\] usage: \d+ prompt \+ \d+ completion")

    def test_same_text_as_the_cli(self):
        example = run([PYTHON, EXAMPLE, "--addr", self.server.addr, "--max-tokens", "16", "And God said"])
        cli = self.server.cli("generate", "--max-tokens", "16", "And God said")
        self.assertEqual(example.returncode, 0, example.stderr)
        self.assertEqual(example.stdout, cli.stdout)

    def test_server_error(self):
        r = run([PYTHON, EXAMPLE, "--addr", self.server.addr, "--max-tokens", "0", "hello"])
        self.assertEqual(r.returncode, 1)
        self.assertIn("error: INVALID_ARGUMENT", r.stderr)


if __name__ == "__main__":
    e2e_util.main()
