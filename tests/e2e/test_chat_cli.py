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

    def test_tools_a_forced_call_is_printed_and_slash_tool_answers_it(self):
        # A compact template that lists the tools and writes calls as Qwen2.5 and Hermes do
        # (Qwen2.5's own tool prompt outgrows kjv-1m's context). The expected answers are
        # `quill generate` with the call's schema on the prompts written out here.
        template = ('{% if tools %}<tools>{% for t in tools %}{{ t.function.name }}'
                    '{% if not loop.last %},{% endif %}{% endfor %}</tools>{% endif %}'
                    '{% for m in messages %}<{{ m.role }}>{% if m.content %}{{ m.content }}'
                    '{% endif %}{% for c in m.tool_calls or [] %}<tool_call>{"name": '
                    '"{{ c.function.name }}", "arguments": {{ c.function.arguments | tojson }}}'
                    '</tool_call>{% endfor %}{% endfor %}'
                    '{% if add_generation_prompt %}<assistant>{% endif %}')
        parameters = {"type": "object", "properties": {"book": {"enum": ["Genesis", "Exodus"]}},
                      "required": ["book"], "additionalProperties": False}
        schema = {"type": "object",
                  "properties": {"name": {"const": "get_verse"}, "arguments": parameters},
                  "required": ["name", "arguments"], "additionalProperties": False}
        # Both shapes --tools takes: OpenAI's tool, and the function object alone.
        tools = [{"type": "function", "function": {"name": "get_verse", "parameters": parameters}},
                 {"name": "get_time"}]
        with tempfile.TemporaryDirectory() as scratch:
            paths = {}
            for name, content in (("template.jinja", template), ("tools.json", json.dumps(tools)),
                                  ("schema.json", json.dumps(schema))):
                paths[name] = os.path.join(scratch, name)
                with open(paths[name], "w") as f:
                    f.write(content)
            sampling = ["--temperature", "0.8", "--seed", "8", "--max-tokens", "140"]
            with QuillServer(["--chat-template", paths["template.jinja"]]) as server:
                prompt = "<tools>get_verse,get_time</tools><user>Find the verse<assistant>"
                first = server.cli("generate", "--json-schema", paths["schema.json"], *sampling,
                                   "--", prompt)
                self.assertEqual(first.returncode, 0, first.stderr)
                call = json.loads(first.stdout)
                second_prompt = (prompt + '<tool_call>{"name": "get_verse", "arguments": '
                                 '{"book": "%s"}}</tool_call><tool>Amen<assistant>'
                                 % call["arguments"]["book"])
                second = server.cli("generate", "--json-schema", paths["schema.json"], *sampling,
                                    "--", second_prompt)
                self.assertEqual(second.returncode, 0, second.stderr)

                r = server.cli("chat", "--tools", paths["tools.json"], "--tool-choice",
                               "get_verse", *sampling,
                               input_text="/tool too early\nFind the verse\n/tool Amen\n")
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertIn("(no tool call is waiting for a result)", r.stderr)
                lines = r.stdout.splitlines()
                self.assertEqual(len(lines), 4, r.stdout)
                self.assertEqual(lines[0], first.stdout.rstrip("\n"))
                m = re.fullmatch(r"\[tool call (call_\S+)\] get_verse (.*)", lines[1])
                self.assertIsNotNone(m, lines[1])
                self.assertEqual(json.loads(m.group(2)), call["arguments"])
                self.assertEqual(lines[2], second.stdout.rstrip("\n"))
                self.assertRegex(lines[3], r"^\[tool call call_\S+\] get_verse \{")

                bad = server.cli("chat", "--tools", os.path.join(scratch, "missing.json"), "x")
                self.assertEqual(bad.returncode, 2, bad.stderr)
                self.assertIn("error: --tools: ", bad.stderr)

    def test_server_without_a_template_is_failed_precondition(self):
        r = self.plain.cli("chat", "hello")
        self.assertEqual(r.returncode, 1)
        self.assertIn("error: FAILED_PRECONDITION: ", r.stderr)
        self.assertIn("--chat-template", r.stderr)


class ReasoningChatCliTest(unittest.TestCase):
    """A reasoning model's template (DeepSeek R1's opens the thought for the model; kjv-1m
    never closes it, so its whole answer is thought): the thought streams to stderr, the
    answer (empty here) to stdout; --hide-reasoning drops the thought, --reasoning-in-text
    prints the answer as written. Expected: `quill generate` on quill-run's render."""

    R1 = os.path.join(SHARED_DIR, "chat_templates",
                      "deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja")

    @classmethod
    def setUpClass(cls):
        e2e_util.require_binaries(QUILL_RUN, cls.R1)
        cls.server = QuillServer(["--chat-template", cls.R1, "--precision", "exact"]).__enter__()

    @classmethod
    def tearDownClass(cls):
        cls.server.__exit__(None, None, None)

    def test_the_thought_goes_to_stderr(self):
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump([{"role": "user", "content": "Where"}], f)
        try:
            r = run([QUILL_RUN, "--render-chat", f.name, "-m", self.server.model,
                     "--chat-template", self.R1])
        finally:
            os.unlink(f.name)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(r.stdout.startswith("<s>") and r.stdout.endswith("<think>\n"), r.stdout)
        # The template writes the BOS token's text, which the chat path reads as BOS; quill
        # generate adds BOS itself and reads the text as text.
        g = self.server.cli("generate", "--max-tokens", MAX_TOKENS, "--", r.stdout[len("<s>"):])
        self.assertEqual(g.returncode, 0, g.stderr)
        thought = g.stdout
        self.assertNotEqual(thought.strip(), "")

        info = self.server.cli("info")
        self.assertRegex(info.stdout, r"Reasoning\s+.*reasoning")

        shown = self.server.cli("chat", "--max-tokens", MAX_TOKENS, "Where")
        self.assertEqual(shown.returncode, 0, shown.stderr)
        self.assertEqual(shown.stdout, "\n")
        self.assertIn(ChatCliTest.as_line(thought), shown.stderr)

        hidden = self.server.cli("chat", "--max-tokens", MAX_TOKENS, "--hide-reasoning", "Where")
        self.assertEqual(hidden.returncode, 0, hidden.stderr)
        self.assertEqual(hidden.stdout, "\n")
        self.assertNotIn(thought.strip(), hidden.stderr)

        raw = self.server.cli("chat", "--max-tokens", MAX_TOKENS, "--reasoning-in-text", "Where")
        self.assertEqual(raw.returncode, 0, raw.stderr)
        self.assertEqual(raw.stdout, ChatCliTest.as_line(thought))
        self.assertNotIn(thought.strip(), raw.stderr)


if __name__ == "__main__":
    e2e_util.main()
