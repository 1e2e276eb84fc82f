#!/usr/bin/python3
"""`quill chat` against a live quill-server given --chat-template (kjv-1m has no template of
its own): one-shot and interactive (stdin piped), history, --system, /reset, end of input,
and errors. Every expected answer is `quill generate` on the prompt `quill-run
--render-chat` prints for the conversation so far, never the chat path's own output."""

import json
import re
import os
import tempfile
import unittest

import e2e_util
from e2e_util import BINARY_DIR, SHARED_DIR, QuillServer, http_get, run

QUILL_RUN = os.path.join(BINARY_DIR, "engine", "tools", "quill-run")
TEMPLATE = os.path.join(SHARED_DIR, "chat_templates", "Qwen-Qwen2.5-7B-Instruct.jinja")
SYSTEM = "You are a preacher."
MAX_TOKENS = "16"


class ChatCliTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        e2e_util.require_binaries(QUILL_RUN, TEMPLATE)
        cls.server = QuillServer(["--chat-template", TEMPLATE, "--precision", "exact"]).__enter__()
        cls.plain = QuillServer().__enter__()

    @classmethod
    def tearDownClass(cls):
        cls.plain.__exit__(None, None, None)
        cls.server.__exit__(None, None, None)

    def expected_answer(self, messages):
        """The greedy answer to `messages`: quill-run renders, quill generate answers."""
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump(messages, f)
        try:
            r = run([QUILL_RUN, "--render-chat", f.name, "-m", self.server.model,
                     "--chat-template", TEMPLATE])
        finally:
            os.unlink(f.name)
        self.assertEqual(r.returncode, 0, r.stderr)
        g = self.server.cli("generate", "--max-tokens", MAX_TOKENS, "--", r.stdout)
        self.assertEqual(g.returncode, 0, g.stderr)
        return g.stdout

    @staticmethod
    def as_line(answer):
        return answer if answer.endswith("\n") else answer + "\n"

    def test_one_shot_answers_the_question(self):
        want = self.expected_answer([{"role": "system", "content": SYSTEM},
                                     {"role": "user", "content": "Who made the heaven?"}])
        r = self.server.cli("chat", "--system", SYSTEM, "--max-tokens", MAX_TOKENS, "--stats",
                            "Who", "made", "the", "heaven?")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, self.as_line(want))
        self.assertRegex(r.stderr, r"\[finish_reason: (LENGTH|EOS|STOP)\] usage: \d+ prompt")

    def test_interactive_keeps_the_history_and_reset_starts_over(self):
        first = [{"role": "system", "content": SYSTEM},
                 {"role": "user", "content": "Who made the heaven?"}]
        answer1 = self.expected_answer(first)
        second = first + [{"role": "assistant", "content": answer1},
                          {"role": "user", "content": "And then?"}]
        answer2 = self.expected_answer(second)
        # Blank lines are skipped; end of input (Ctrl-D) quits with 0.
        r = self.server.cli("chat", "--system", SYSTEM, "--max-tokens", MAX_TOKENS,
                            input_text="Who made the heaven?\n\nAnd then?\n/reset\n"
                                       "Who made the heaven?\n")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout,
                         self.as_line(answer1) + self.as_line(answer2) + self.as_line(answer1))

    def drafted_tokens(self):
        text = http_get(self.server.metrics_url)
        m = re.search(r"^quill_spec_draft_tokens_total(?:\{[^}]*\})? (\S+)$", text, re.M)
        self.assertIsNotNone(m, "quill_spec_draft_tokens_total not exported")
        return float(m.group(1))

    def test_disable_speculation_gives_the_same_answer_with_nothing_drafted(self):
        # A repetitive question, so that the n-gram drafter has something to propose.
        question = "the LORD the LORD the LORD the LORD the LORD"
        want = self.expected_answer([{"role": "user", "content": question}])
        before = self.drafted_tokens()
        r = self.server.cli("chat", "--max-tokens", MAX_TOKENS, "--disable-speculation",
                            question)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, self.as_line(want))
        # The server counts a step's drafts after sending its tokens; a last one-token
        # request makes sure the counts of the chat have landed.
        self.server.cli("generate", "--max-tokens", "1", "--disable-speculation", "x")
        self.assertEqual(self.drafted_tokens(), before)

    def test_without_system(self):
        want = self.expected_answer([{"role": "user", "content": "In the beginning"}])
        r = self.server.cli("chat", "--max-tokens", MAX_TOKENS, input_text="In the beginning\n")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, self.as_line(want))

    def test_a_failed_turn_is_reported_and_dropped(self):
        # --max-tokens too large for the context: every turn fails, the session goes on.
        r = self.server.cli("chat", "--max-tokens", "100000", input_text="one\ntwo\n")
        self.assertEqual(r.returncode, 1)
        self.assertEqual(r.stdout, "")
        self.assertEqual(r.stderr.count("error: INVALID_ARGUMENT: max_tokens"), 2)

    def test_server_without_a_template_is_failed_precondition(self):
        r = self.plain.cli("chat", "hello")
        self.assertEqual(r.returncode, 1)
        self.assertIn("error: FAILED_PRECONDITION: ", r.stderr)
        self.assertIn("--chat-template", r.stderr)


if __name__ == "__main__":
    e2e_util.main()
