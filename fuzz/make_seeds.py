#!/usr/bin/python3
"""Writes the fuzzers' seed corpora (fuzz/corpus/<fuzzer>/) from scratch, deterministically.

The seeds are committed; rerun this only to change them:

    /usr/bin/python3 fuzz/make_seeds.py

  gguf_model_fuzzer  tiny GGUF files: a valid 1-layer Llama with a SentencePiece vocabulary,
                     a valid GPT-2 (byte-level BPE) vocabulary-only file, the metadata of a
                     Gemma 2, a Qwen2 and a GPT-2 model, and a few files broken in one field
                     each (truncated, bad magic, huge count, wrong type).
  tokenizer_fuzzer   byte 0 selects the tokenizer and flags, the rest is the text.
  request_fuzzer     serialized quill.v1.GenerateRequest / TokenizeRequest messages.
  chat_template_fuzzer  byte 0 even: a template source; odd: byte 1 picks a template and
                     the rest is a messages JSON array.
  openai_request_fuzzer  byte 0 even: a /v1/completions body; odd: a /v1/chat/completions
                     body, the other bits picking the template; the rest is the body.
"""

import os
import shutil
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "corpus")

# --- GGUF (v3, little endian) -------------------------------------------------------------

U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
GGML_F32 = 0


def gguf_string(s):
    b = s.encode("utf-8") if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def gguf_value(vtype, value):
    if vtype == STRING:
        return gguf_string(value)
    if vtype == ARRAY:
        etype, items = value
        out = struct.pack("<IQ", etype, len(items))
        return out + b"".join(gguf_value(etype, v) for v in items)
    fmt = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f",
           BOOL: "<?", U64: "<Q", I64: "<q", F64: "<d"}[vtype]
    return struct.pack(fmt, value)


def gguf_file(kvs, tensors, alignment=32):
    """kvs: [(key, type, value)]; tensors: [(name, dims)] of F32 zeros."""
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs))
    for key, vtype, value in kvs:
        out += gguf_string(key) + struct.pack("<I", vtype) + gguf_value(vtype, value)
    offset = 0
    sizes = []
    for name, dims in tensors:
        n = 1
        for d in dims:
            n *= d
        sizes.append(4 * n)
        out += gguf_string(name) + struct.pack("<I", len(dims))
        out += b"".join(struct.pack("<Q", d) for d in dims)
        out += struct.pack("<IQ", GGML_F32, offset)
        offset += (4 * n + alignment - 1) // alignment * alignment
    out += b"\0" * ((-len(out)) % alignment)
    for size in sizes:
        out += b"\0" * size + b"\0" * ((-size) % alignment)
    return out


def spm_vocab():
    tokens = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)]
    pieces = ["\u2581", "\u2581t", "he", "\u2581the", "\u2581a", "in", "\u2581in", "\u00e9", "\u2581\u00e9t\u00e9"]
    tokens += pieces
    scores = [0.0] * 3 + [-1000.0] * 256 + [-float(i) for i in range(len(pieces))]
    types = [2, 3, 3] + [6] * 256 + [1] * len(pieces)
    return tokens, scores, types


def decoder_model(vocab_kvs, vocab_size, arch="llama", d=8, heads=2, kv_heads=1, ffn=16,
                  layers=1, ctx=32, extra_kvs=(), norm_key="layer_norm_rms_epsilon"):
    """A tiny decoder of `arch` with llama-style tensors (the fuzzer reads metadata only)."""
    hd = d // heads
    kvs = [("general.architecture", STRING, arch), ("general.name", STRING, "fuzz-seed"),
           (arch + ".embedding_length", U32, d), (arch + ".block_count", U32, layers),
           (arch + ".attention.head_count", U32, heads),
           (arch + ".attention.head_count_kv", U32, kv_heads),
           (arch + ".feed_forward_length", U32, ffn), (arch + ".context_length", U32, ctx),
           (arch + ".rope.freq_base", F32, 10000.0),
           (arch + ".attention." + norm_key, F32, 1e-5)] + list(extra_kvs) + vocab_kvs
    tensors = [("token_embd.weight", [d, vocab_size]), ("output_norm.weight", [d])]
    for i in range(layers):
        b = "blk.%d." % i
        tensors += [(b + "attn_norm.weight", [d]), (b + "attn_q.weight", [d, heads * hd]),
                    (b + "attn_k.weight", [d, kv_heads * hd]),
                    (b + "attn_v.weight", [d, kv_heads * hd]),
                    (b + "attn_output.weight", [heads * hd, d]), (b + "ffn_norm.weight", [d]),
                    (b + "ffn_gate.weight", [d, ffn]), (b + "ffn_up.weight", [d, ffn]),
                    (b + "ffn_down.weight", [ffn, d])]
    return gguf_file(kvs, tensors)


def llama_model(vocab_kvs, vocab_size, **shape):
    return decoder_model(vocab_kvs, vocab_size, "llama", **shape)


def gpt2_vocab_kvs():
    # GPT-2 byte-to-unicode symbols for every byte, then a few merges.
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + \
        list(range(0xAE, 0x100))
    symbols = {}
    n = 0
    for b in range(256):
        if b in printable:
            symbols[b] = chr(b)
        else:
            symbols[b] = chr(256 + n)
            n += 1
    tokens = [symbols[b] for b in range(256)]
    merges = ["\u0120 t", "h e", "\u0120t he", "i n", "\u0120 a"]
    tokens += ["\u0120t", "he", "\u0120the", "in", "\u0120a", "<|endoftext|>"]
    types = [1] * (len(tokens) - 1) + [3]
    return [("tokenizer.ggml.model", STRING, "gpt2"), ("tokenizer.ggml.pre", STRING, "gpt-2"),
            ("tokenizer.ggml.tokens", ARRAY, (STRING, tokens)),
            ("tokenizer.ggml.token_type", ARRAY, (I32, types)),
            ("tokenizer.ggml.merges", ARRAY, (STRING, merges)),
            ("tokenizer.ggml.bos_token_id", U32, len(tokens) - 1),
            ("tokenizer.ggml.eos_token_id", U32, len(tokens) - 1)]


def gguf_seeds():
    tokens, scores, types = spm_vocab()
    spm_kvs = [("tokenizer.ggml.model", STRING, "llama"),
               ("tokenizer.ggml.tokens", ARRAY, (STRING, tokens)),
               ("tokenizer.ggml.scores", ARRAY, (F32, scores)),
               ("tokenizer.ggml.token_type", ARRAY, (I32, types)),
               ("tokenizer.ggml.bos_token_id", U32, 1), ("tokenizer.ggml.eos_token_id", U32, 2),
               ("tokenizer.ggml.add_bos_token", BOOL, True)]
    spm_model = llama_model(spm_kvs, len(tokens))
    gpt2 = gguf_file([("general.architecture", STRING, "llama")] + gpt2_vocab_kvs(), [])
    seeds = {"spm_model.gguf": spm_model, "gpt2_vocab.gguf": gpt2,
             "gqa_two_layers.gguf": llama_model(spm_kvs, len(tokens), d=16, heads=4,
                                                kv_heads=2, layers=2),
             "truncated.gguf": spm_model[: len(spm_model) // 2],
             "bad_magic.gguf": b"GGUG" + spm_model[4:200],
             "huge_tensor_count.gguf": spm_model[:8] + struct.pack("<Q", 1 << 62) +
             spm_model[16:400],
             "wrong_key_type.gguf": gguf_file([("general.architecture", U32, 7),
                                               ("tokenizer.ggml.model", I32, 1)], []),
             # The other families' metadata (DecoderDescription / ResolveDecoder): Gemma 2's
             # key_length, soft-caps and sliding window; GPT-2's LayerNorm epsilon.
             "gemma2_model.gguf": decoder_model(
                 spm_kvs, len(tokens), "gemma2", d=16, heads=2, kv_heads=1, layers=2,
                 extra_kvs=[("gemma2.attention.key_length", U32, 16),
                            ("gemma2.attention.value_length", U32, 16),
                            ("gemma2.attn_logit_softcapping", F32, 50.0),
                            ("gemma2.final_logit_softcapping", F32, 30.0),
                            ("gemma2.attention.sliding_window", U32, 8)]),
             "qwen2_model.gguf": decoder_model(spm_kvs, len(tokens), "qwen2", d=16, heads=4,
                                               kv_heads=2),
             "gpt2_model.gguf": decoder_model(gpt2_vocab_kvs(), 256 + 3, "gpt2",
                                              norm_key="layer_norm_epsilon")}
    return seeds


# --- tokenizer inputs ---------------------------------------------------------------------

def tokenizer_seeds():
    texts = ["In the beginning God created the heaven and the earth.", "Hello world",
             "  leading and  double  spaces\n\ttabs\r\n", "caf\u00e9 \u00e9t\u00e9 na\u00efve",
             "\u4e2d\u6587\u5b57\u7b26 \U0001F600\U0001F680", "<s></s><|endoftext|><unk>",
             "a" * 300, "1234567890 3.14159 -42", "'s 're 'll 've don't", ""]
    seeds = {}
    for selector in range(4):  # bit 0: add_special; bit 1..: which tokenizer
        for i, text in enumerate(texts):
            seeds["t%d_%02d" % (selector, i)] = bytes([selector * 2 + (i % 2)]) + \
                text.encode("utf-8")
    seeds["invalid_utf8"] = b"\x00caf\xc3"
    return seeds


# --- protobuf requests --------------------------------------------------------------------

def varint(n):
    n &= (1 << 64) - 1
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def field(num, wire, payload):
    key = varint((num << 3) | wire)
    if wire == 0:
        return key + varint(payload)
    if wire == 2:
        data = payload.encode("utf-8") if isinstance(payload, str) else payload
        return key + varint(len(data)) + data
    if wire == 5:
        return key + struct.pack("<f", payload)
    raise ValueError(wire)


def request_seeds():
    sampling = field(1, 5, 0.8) + field(2, 0, 40) + field(3, 5, 0.95) + field(4, 5, 0.05) + \
        field(5, 5, 1.1) + field(6, 0, 42)
    ids = field(1, 2, b"".join(varint(i) for i in [1, 300, 261, 345]))
    # frequency_penalty, presence_penalty, and logit_bias map entries (key varint, value float).
    penalties = field(1, 5, 0.7) + field(7, 5, 0.5) + field(8, 5, -1.0) + \
        field(9, 2, field(1, 0, 5) + field(2, 5, -100.0)) + \
        field(9, 2, field(1, 0, 300) + field(2, 5, 2.5)) + \
        field(9, 2, field(1, 0, 5000) + field(2, 5, 1.0))
    seeds = {
        "text_prompt": field(1, 2, "req-1") + field(2, 2, "In the beginning") + field(4, 0, 16),
        "token_ids": field(3, 2, ids) + field(4, 0, 8) + field(9, 0, 3) + field(11, 0, 1),
        "sampling_and_stops": field(2, 2, "And God said") + field(4, 0, 32) +
        field(5, 2, sampling) + field(6, 2, "\n\n") + field(6, 2, "Amen") + field(7, 0, 2) +
        field(8, 0, 1),
        "newline_request_id": field(1, 2, "a\nb") + field(2, 2, "x") + field(4, 0, 1),
        "negative_values": field(2, 2, "x") + field(4, 0, -1) + field(9, 0, -5),
        "penalties_and_logit_bias": field(2, 2, "And God said") + field(4, 0, 16) +
        field(5, 2, penalties),
        "tokenize_request": field(1, 2, "Blessed are the meek") + field(2, 0, 1),
        "not_utf8_prompt": field(2, 2, b"\xff\xfe") + field(4, 0, 4),
        "empty": b"",
    }
    return seeds


def chat_template_seeds():
    templates = [
        "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}",
        "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}"
        "[INST] {{ message['content'] | trim }} [/INST]{% else %}{{ message['content'] }}"
        "{{ eos_token }}{% endif %}{% endfor %}",
        "{%- set ns = namespace(n=0) -%}{%- for m in messages -%}{%- set ns.n = ns.n + 1 -%}"
        "{{ loop.index }}:{{ m.content[:5] | upper }}{{ m | tojson }}{%- endfor -%}{{ ns.n }}",
        "{% macro f(x) %}{{ x * 2 }}{% endmacro %}{{ f(21) }}{{ raise_exception('no') }}",
        "{% if messages|length > 1 %}{{ messages[1]['content'].split(' ')|join(',') }}"
        "{% endif %}{{ strftime_now('%Y-%m-%d') }}",
        "{{ '%s' % 1 }}{{ range(3)|list }}{{ {'a': 1}.items()|list }}{% generation %}x"
        "{% endgeneration %}",
        # Writes calls as Hermes does: the tool-call probe recognizes it.
        "{% for m in messages %}<{{ m.role }}>{{ m.content or '' }}{% for c in m.tool_calls"
        " or [] %}<tool_call>{\"name\": \"{{ c.function.name }}\", \"arguments\": "
        "{{ c.function.arguments | tojson }}}</tool_call>{% endfor %}{% endfor %}"
        "{% if add_generation_prompt %}<assistant>{% endif %}",
    ]
    conversations = [
        '[{"role": "user", "content": "Hello"}]',
        '[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},'
        ' {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "2+2?"}]',
        '[{"role": "user", "content": [{"type": "text", "text": "multi"}]}]',
        '[{"role": "assistant", "content": null, "tool_calls": [{"type": "function",'
        ' "function": {"name": "f", "arguments": {"x": 1}}}]}]',
        '[{"role": "user", "content": "<|im_start|>system\\n\\u00e9 \\ud83d\\ude00"}]',
        '[]',
        # Read as a model's answer too: calls in each syntax.
        'Sure. <tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n'
        '</tool_call><tool_call>{"name": "f", "arguments": "{}"}',
        ' {"name": "f", "parameters": {"x": [1, {"y": "}"}]}}',
    ]
    seeds = {}
    for i, t in enumerate(templates):
        seeds["template_%02d" % i] = b"\x00" + t.encode("utf-8")
    for i, c in enumerate(conversations):
        for pick in (0, 7, 19, 255):
            seeds["messages_%02d_t%03d" % (i, pick)] = bytes([1, pick]) + c.encode("utf-8")
    return seeds


def openai_request_seeds():
    completions = {
        "text": '{"model": "kjv-1m", "prompt": "In the beginning", "max_tokens": 8}',
        "ids": '{"prompt": [1, 300, 261, 345], "max_tokens": 4, "temperature": 0}',
        "nested_ids": '{"prompt": [[1, 300]], "stop": ["\\n", "Amen"], "logprobs": 2,'
                      ' "seed": 42, "top_p": 0.9, "top_k": -1, "stream": true,'
                      ' "stream_options": {"include_usage": true}}',
        "refused": '{"prompt": "x", "n": 2, "echo": true, "best_of": 3,'
                   ' "suffix": "end", "tools": [{"type": "function"}],'
                   ' "response_format": {"type": "json_object"}}',
        "choices": '{"prompt": "x", "n": 4, "best_of": 4, "seed": 9, "stream": true}',
        "echo": '{"prompt": [1, 300, 261], "echo": true, "logprobs": 1, "max_tokens": 1}',
        "batch": '{"prompt": ["In the", [1, 300, 261], [], "x"], "n": 2, "echo": true}',
        "penalties_and_logit_bias": '{"prompt": "x", "frequency_penalty": 0.5,'
                                    ' "presence_penalty": -1, "logit_bias": {"5": -100,'
                                    ' "300": 2.5, "abc": 1, "99999": 1e40}}',
        "out_of_range": '{"prompt": "x", "max_tokens": 1e999, "temperature": -1e400,'
                        ' "seed": 18446744073709551615, "stop_token_ids": [99999]}',
        "long_prompt": '{"prompt": "' + "And God said, Let there be light. " * 60 + '"}',
        "deep": '{"prompt": ' + "[" * 70 + "]" * 70 + "}",
        "not_json": '{"prompt": "x",',
        "json_schema": '{"prompt": "x", "response_format": {"type": "json_schema", "json_schema":'
                       ' {"name": "t", "strict": true, "schema": {"$ref": "#/$defs/n", "$defs":'
                       ' {"n": {"type": "object", "properties": {"v": {"type": ["integer",'
                       ' "null"]}, "k": {"enum": ["a", 1, true, null]}, "c": {"type": "array",'
                       ' "items": {"anyOf": [{"$ref": "#/$defs/n"}, {"type": "string"}]}}},'
                       ' "required": ["v"], "additionalProperties": {"const": 2.5}}}}}}}',
        "json_schema_refused": '{"prompt": "x", "response_format": {"type": "json_schema",'
                               ' "json_schema": {"schema": {"type": "object", "properties":'
                               ' {"s": {"type": "string", "pattern": "a+"}, "o": {"anyOf":'
                               ' [{"type": "object"}, {"type": "object"}]}}}}}}',
    }
    chats = {
        "user": '{"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 16}',
        "conversation": '{"messages": [{"role": "system", "content": "Be brief."},'
                        ' {"role": "user", "content": "Hi"}, {"role": "assistant",'
                        ' "content": "Hello!"}, {"role": "user", "content": "2+2?"}],'
                        ' "logprobs": true, "top_logprobs": 3, "max_completion_tokens": 5}',
        "parts": '{"messages": [{"role": "user", "content": [{"type": "text", "text": "a"},'
                 ' {"type": "text", "text": "b"}]}], "stream": true}',
        "tool_call": '{"messages": [{"role": "assistant", "content": null, "tool_calls":'
                     ' [{"type": "function", "function": {"name": "f", "arguments":'
                     ' "{}"}}]}, {"role": "tool", "content": "1"}]}',
        "tools_forced": '{"messages": [{"role": "user", "content": "Weather?"}], "tools":'
                        ' [{"type": "function", "function": {"name": "get_weather",'
                        ' "parameters": {"type": "object", "properties": {"city": {"type":'
                        ' "string"}, "days": {"type": "integer"}}, "required": ["city"]}}},'
                        ' {"type": "function", "function": {"name": "now"}}], "tool_choice":'
                        ' {"type": "function", "function": {"name": "get_weather"}}, "stream": true}',
        "control_tokens": '{"messages": [{"role": "user", "content":'
                          ' "<|im_start|>system\\n\\u00e9 \\ud83d\\ude00</s>"}]}',
        "bad_shapes": '{"messages": [{"role": ""}, 3], "max_tokens": 0}',
        "empty": '{"messages": []}',
    }
    seeds = {}
    for name, body in completions.items():
        seeds["completions_" + name] = b"\x00" + body.encode("utf-8")
    for name, body in chats.items():
        for pick in (1, 3, 15, 255):
            seeds["chat_%s_t%03d" % (name, pick)] = bytes([pick]) + body.encode("utf-8")
    return seeds


def write(name, seeds):
    directory = os.path.join(CORPUS, name)
    shutil.rmtree(directory, ignore_errors=True)
    os.makedirs(directory)
    for file_name, data in sorted(seeds.items()):
        with open(os.path.join(directory, file_name), "wb") as f:
            f.write(data)
    print("%s: %d seeds, %d bytes" % (name, len(seeds), sum(len(d) for d in seeds.values())))


def main():
    write("gguf_model_fuzzer", gguf_seeds())
    write("tokenizer_fuzzer", tokenizer_seeds())
    write("request_fuzzer", request_seeds())
    write("chat_template_fuzzer", chat_template_seeds())
    write("openai_request_fuzzer", openai_request_seeds())


if __name__ == "__main__":
    main()
