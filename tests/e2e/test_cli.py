#!/usr/bin/python3
"""The `quill` CLI against a live quill-server: generate (text and --json), tokenize, info,
health, help, and error reporting."""

import json
import os
import math
import re
import tempfile
import unittest

import e2e_util
from e2e_util import CLI, QuillServer, run


def parse_size(text):
    """'3.50 MiB' -> bytes, as `quill info` prints sizes."""
    value, unit = text.split()
    return float(value) * {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}[unit]


class CliTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = QuillServer().__enter__()

    @classmethod
    def tearDownClass(cls):
        cls.server.__exit__(None, None, None)

    def test_generate_streams_text_and_reports_on_stderr(self):
        r = self.server.cli("generate", "--max-tokens", "24", "In the beginning God created")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(r.stdout.strip(), "no generated text")
        self.assertRegex(r.stderr, r"\[finish_reason: (LENGTH|EOS|STOP)\]")
        self.assertRegex(r.stderr, r"usage: \d+ prompt \+ \d+ completion tokens")
        self.assertRegex(r.stderr, r"ttft [0-9.]+ ms, total [0-9.]+ ms")

    def test_generate_is_deterministic_when_greedy(self):
        args = ("generate", "--max-tokens", "16", "And God said")
        first, second = self.server.cli(*args), self.server.cli(*args)
        self.assertEqual(first.returncode, 0, first.stderr)
        self.assertEqual(first.stdout, second.stdout)

    def test_generate_reads_the_prompt_from_stdin(self):
        r = self.server.cli("generate", "--max-tokens", "8", input_text="And the LORD said")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(r.stdout.strip())

    def test_generate_json_prints_one_object_per_message(self):
        r = self.server.cli("generate", "--json", "--max-tokens", "12", "--logprobs", "2",
                            "--temperature", "0.8", "--seed", "3", "In the beginning")
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = [json.loads(line) for line in r.stdout.splitlines()]
        self.assertGreaterEqual(len(lines), 1)
        tokens = sum(len(m["token_ids"]) for m in lines)
        last = lines[-1]
        self.assertIn(last["finish_reason"], ("LENGTH", "EOS", "STOP"))
        self.assertEqual(last["usage"]["completion_tokens"], tokens)
        self.assertLessEqual(tokens, 12)
        with_logprobs = [m for m in lines if m["token_ids"]]
        for message in with_logprobs:
            self.assertEqual(len(message["logprobs"]), len(message["token_ids"]))
            for entry in message["logprobs"]:
                self.assertLessEqual(entry["logprob"], 0.0)
                self.assertEqual(len(entry["top"]), 2)
        for message in lines[:-1]:
            self.assertNotIn("finish_reason", message)

    def test_generate_json_object_answers_with_a_json_object(self):
        # kjv-1m never writes JSON unless JSON mode masks everything else.
        r = self.server.cli("generate", "--json-object", "--max-tokens", "120", "--temperature",
                            "0.8", "--seed", "77", "And God said")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stderr, r"\[finish_reason: EOS\]")
        self.assertIsInstance(json.loads(r.stdout), dict)
        r = self.server.cli("generate", "--json-object", "--ignore-eos", "x")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("json_object", r.stderr)

    def test_generate_json_schema_answers_with_the_schemas_object(self):
        schema = {"type": "object", "additionalProperties": False,
                  "properties": {"holy": {"type": "boolean"}, "verse": {"type": "integer"}},
                  "required": ["holy", "verse"]}
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "schema.json")
            with open(path, "w") as f:
                json.dump(schema, f)
            r = self.server.cli("generate", "--json-schema", path, "--max-tokens", "200",
                                "--temperature", "0.8", "--seed", "5", "And God said")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertRegex(r.stderr, r"\[finish_reason: EOS\]")
            answer = json.loads(r.stdout)
            self.assertEqual(sorted(answer), ["holy", "verse"])
            self.assertIsInstance(answer["holy"], bool)
            self.assertIsInstance(answer["verse"], int)
            schema["properties"]["verse"]["minimum"] = 1
            with open(path, "w") as f:
                json.dump(schema, f)
            r = self.server.cli("generate", "--json-schema", path, "x")
            self.assertEqual(r.returncode, 1)
            self.assertIn('INVALID_ARGUMENT: json_schema at "/properties/verse": "minimum" is '
                          "not supported", r.stderr)
            r = self.server.cli("generate", "--json-schema", os.path.join(tmp, "none.json"), "x")
            self.assertEqual(r.returncode, 2)
            self.assertIn("--json-schema: cannot read", r.stderr)

    def test_generate_sampling_flags_reach_the_server(self):
        def ids(*flags):
            r = self.server.cli("generate", "--json", "--max-tokens", "12", *flags, "And God said")
            self.assertEqual(r.returncode, 0, r.stderr)
            return [i for line in r.stdout.splitlines() for i in json.loads(line)["token_ids"]]
        plain = ids()
        banned = ids("--logit-bias", "%d=-100" % plain[0])
        self.assertNotIn(plain[0], banned)
        forced = ids("--logit-bias", "100=100", "--ignore-eos")
        self.assertEqual(forced, [100] * 12)
        # The greedy continuation repeats tokens: the penalties change it.
        self.assertNotEqual(ids("--frequency-penalty", "2", "--presence-penalty", "1"), plain)
        r = self.server.cli("generate", "--logit-bias", "100", "x")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--logit-bias", r.stderr)
        r = self.server.cli("generate", "--presence-penalty", "2.5", "x")
        self.assertEqual(r.returncode, 1)
        self.assertIn("INVALID_ARGUMENT: sampling.presence_penalty", r.stderr)

    def test_generate_stops_at_max_tokens_with_length(self):
        r = self.server.cli("generate", "--json", "--max-tokens", "5", "--ignore-eos", "And")
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = [json.loads(line) for line in r.stdout.splitlines()]
        self.assertEqual(lines[-1]["finish_reason"], "LENGTH")
        self.assertEqual(sum(len(m["token_ids"]) for m in lines), 5)

    def test_generate_error_shows_status_code_and_message(self):
        r = self.server.cli("generate", "--max-tokens", "0", "hello")
        self.assertEqual(r.returncode, 1)
        self.assertRegex(r.stderr, r"error: INVALID_ARGUMENT: \S+")
        r = self.server.cli("generate", "--json", "--max-tokens", "0", "hello")
        self.assertEqual(r.returncode, 1)
        error = json.loads(r.stdout.splitlines()[-1])["error"]
        self.assertEqual(error["code"], "INVALID_ARGUMENT")
        self.assertTrue(error["message"])

    def test_tokenize(self):
        r = self.server.cli("tokenize", "--json", "In the beginning")
        self.assertEqual(r.returncode, 0, r.stderr)
        result = json.loads(r.stdout)
        self.assertGreater(len(result["token_ids"]), 0)
        self.assertEqual(len(result["pieces"]), len(result["token_ids"]))
        self.assertEqual(result["text"], "In the beginning")
        special = json.loads(self.server.cli("tokenize", "--json", "--add-special-tokens",
                                             "In the beginning").stdout)
        self.assertEqual(special["token_ids"][0], 1)  # kjv-1m's BOS
        human = self.server.cli("tokenize", "In the beginning")
        self.assertEqual(human.returncode, 0, human.stderr)
        self.assertIn("%d tokens; decoded: \"In the beginning\"" % len(result["token_ids"]), human.stdout)

    def test_score_gives_each_tokens_logprob_and_the_perplexity(self):
        text = "In the beginning God created the heaven and the earth."
        r = self.server.cli("score", "--json", "--top", "1", text)
        self.assertEqual(r.returncode, 0, r.stderr)
        scores = json.loads(r.stdout)
        t = self.server.cli("tokenize", "--json", "--add-special-tokens", text)
        ids = json.loads(t.stdout)["token_ids"]
        self.assertEqual([tok["token_id"] for tok in scores["tokens"]], ids)
        self.assertIsNone(scores["tokens"][0]["logprob"])
        logprobs = [tok["logprob"] for tok in scores["tokens"][1:]]
        self.assertEqual(scores["scored_tokens"], len(ids) - 1)
        self.assertAlmostEqual(scores["logprob_sum"], sum(logprobs), places=3)
        self.assertAlmostEqual(scores["perplexity"],
                               math.exp(-scores["logprob_sum"] / len(logprobs)), places=6)
        for tok in scores["tokens"][1:]:
            self.assertLessEqual(tok["logprob"], tok["top"][0]["logprob"] + 1e-6)
        # Each score is what the model gives that token next: the greedy continuation of a
        # prefix, generated with logprobs, is its most likely token with the same logprob.
        body = json.dumps({"prompt": ids[:9], "max_tokens": 1, "logprobs": 1,
                           "temperature": 0})
        g = run(["curl", "-sS", "-H", "Content-Type: application/json", "-d", body,
                 self.server.http_url + "/v1/completions"])
        self.assertEqual(g.returncode, 0, g.stderr)
        first = json.loads(g.stdout)["choices"][0]["logprobs"]
        self.assertAlmostEqual(scores["tokens"][9]["top"][0]["logprob"],
                               first["token_logprobs"][0], places=5)
        # Bible text is likelier than nonsense.
        nonsense = json.loads(self.server.cli("score", "--json", "zebra quantum the of").stdout)
        self.assertGreater(nonsense["perplexity"], scores["perplexity"])
        one = self.server.cli("score", "")
        self.assertNotEqual(one.returncode, 0)
        self.assertIn("nothing to score", one.stderr)

    def test_info(self):
        r = self.server.cli("info", "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        info = json.loads(r.stdout)
        self.assertEqual(info["vocab_size"], 1024)
        self.assertEqual(info["context_length"], 256)
        self.assertEqual(info["block_count"], 4)
        self.assertEqual(info["bos_token_id"], 1)
        self.assertGreater(info["limits"]["kv_cache_blocks"], 0)
        # The server's default precision is fast, whose KV cache stores f16: 2 bytes per value
        # of K and V (4 layers x 2 KV heads x 32 dims), and the blocks fill the budget.
        self.assertEqual(info["precision"], "fast")
        self.assertEqual(info["kv_bytes_per_token"], 2 * 4 * 2 * 32 * 2)
        self.assertEqual(info["kv_cache_type"], "f16")
        limits = info["limits"]
        self.assertEqual(limits["kv_cache_bytes"], limits["kv_cache_blocks"] *
                         limits["kv_block_size_tokens"] * info["kv_bytes_per_token"])
        human = self.server.cli("info")
        self.assertEqual(human.returncode, 0, human.stderr)
        self.assertIn("Context                256 tokens", human.stdout)
        self.assertIn("4 layers, 4 heads / 2 KV heads", human.stdout)
        self.assertIn("KV cache per token     1.00 KiB (f16)", human.stdout)
        # kjv-1m has no chat template: no tool calls to read back.
        self.assertEqual(info["tool_call_syntax"], "none")
        self.assertIn("Tool calls             none read back", human.stdout)

    def test_info_reports_memory(self):
        info = json.loads(self.server.cli("info", "--json").stdout)
        self.assertGreater(info["resident_memory_bytes"], 0)
        self.assertEqual(info["mapped_weights_bytes"], 1024 * 128 * 4)  # kjv-1m's F32 embedding
        human = self.server.cli("info")
        self.assertEqual(human.returncode, 0, human.stderr)
        size = r"([0-9.]+ (?:B|KiB|MiB|GiB))"
        m = re.search(r"^Memory +RSS %s = ([0-9.]+) x \(weights %s \+ KV budget %s\)$" %
                      (size, size, size), human.stdout, re.MULTILINE)
        self.assertIsNotNone(m, human.stdout)
        rss, weights, kv = (parse_size(m.group(i)) for i in (1, 3, 4))
        ratio = float(m.group(2))
        # Sizes print with 2 decimals in their unit.
        self.assertAlmostEqual(weights, info["weights_bytes"] + info["mapped_weights_bytes"],
                               delta=0.006 * weights)
        self.assertAlmostEqual(kv, info["limits"]["kv_cache_bytes"], delta=0.006 * kv)
        self.assertGreater(rss, 0)
        # The ratio is of the unrounded bytes, and the RSS is read per call: it lies between
        # the ratios of a call just before and one just after.
        after = json.loads(self.server.cli("info", "--json").stdout)
        ratios = [i["resident_memory_bytes"] /
                  (i["weights_bytes"] + i["mapped_weights_bytes"] + i["limits"]["kv_cache_bytes"])
                  for i in (info, after)]
        self.assertGreaterEqual(ratio, min(ratios) - 0.006)
        self.assertLessEqual(ratio, max(ratios) + 0.006)
        self.assertIn("token embedding read from the file mapping", human.stdout)

    def test_health(self):
        r = self.server.cli("health")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.strip(), "SERVING")
        r = self.server.cli("health", "--service", "quill.v1.Generator")
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_health_of_a_dead_address_fails(self):
        r = run([CLI, "health", "--addr", "127.0.0.1:%d" % e2e_util.free_port(), "--timeout", "2s"])
        self.assertEqual(r.returncode, 1)
        self.assertIn("error: UNAVAILABLE", r.stderr)

    def test_help(self):
        for args in (["help"], ["--help"]):
            r = run([CLI] + args)
            self.assertEqual(r.returncode, 0)
            for command in ("generate", "chat", "tokenize", "info", "health", "bench"):
                self.assertIn(command, r.stdout)
        for command in ("generate", "chat", "tokenize", "info", "health", "bench"):
            r = run([CLI, command, "--help"])
            self.assertEqual(r.returncode, 0, command)
            self.assertIn("--addr", r.stdout)
            self.assertEqual(run([CLI, "help", command]).stdout, r.stdout)
        r = run([CLI, "generate", "--no-such-flag"])
        self.assertEqual(r.returncode, 2)
        self.assertIn("unknown flag --no-such-flag", r.stderr)
        self.assertEqual(run([CLI, "frobnicate"]).returncode, 2)


if __name__ == "__main__":
    e2e_util.main()
