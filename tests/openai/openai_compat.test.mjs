// The official `openai` npm package against a live quill-server (started by
// run_openai_test.py, which sets the environment below). Run with `node --test`.
//
//   QUILL_HTTP_URL, QUILL_METRICS_URL        the main server (kjv-1m)
//   QUILL_TIGHT_HTTP_URL, QUILL_TIGHT_METRICS_URL
//                                            a server whose KV pool holds one long request
//                                            and whose queue holds one more
//   QUILL_CLI, QUILL_GRPC_ADDR               the `quill` CLI and the main server's gRPC address
//   QUILL_CHAT_HTTP_URL, QUILL_CHAT_GRPC_ADDR
//                                            a server with --chat-template QUILL_CHAT_TEMPLATE
//   QUILL_RUN, QUILL_MODEL                   quill-run (renders chat prompts) and kjv-1m

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';

const env = process.env;
const client = new OpenAI({ baseURL: `${env.QUILL_HTTP_URL}/v1`, apiKey: 'unused', maxRetries: 0 });
const tight = new OpenAI({ baseURL: `${env.QUILL_TIGHT_HTTP_URL}/v1`, apiKey: 'unused', maxRetries: 0 });
const chat = new OpenAI({ baseURL: `${env.QUILL_CHAT_HTTP_URL}/v1`, apiKey: 'unused', maxRetries: 0 });
const PROMPT = 'In the beginning';

// A scrape is idempotent: one retry covers a kept-alive connection the metrics server
// closed just as fetch reused it ("fetch failed", seen once in a loaded ctest run).
async function scrape(url) {
  try {
    return await (await fetch(url)).text();
  } catch (e) {
    if (!(e instanceof TypeError)) throw e;
    return await (await fetch(url)).text();
  }
}

async function metric(url, name, labels = '') {
  const text = await scrape(url);
  const line = text.split('\n').find((l) => l.startsWith(`${name}${labels} `) ||
                                            (labels === '' && l.startsWith(`${name} `)));
  assert.ok(line, `${name}${labels} not in /metrics`);
  return Number(line.split(' ')[1]);
}

async function waitFor(what, check, timeoutMs = 10000) {
  const end = Date.now() + timeoutMs;
  while (Date.now() < end) {
    if (await check()) return;
    await new Promise((r) => setTimeout(r, 20));
  }
  assert.fail(`timed out waiting for ${what}`);
}

// The gRPC stream of the same request, through the quill CLI (`generate --json`).
function grpcText(args, addr = env.QUILL_GRPC_ADDR) {
  const out = execFileSync(env.QUILL_CLI, ['generate', '--addr', addr, '--json', ...args],
                           { encoding: 'utf8' });
  return out.trim().split('\n').map((l) => JSON.parse(l).text ?? '').join('');
}

test('models.list echoes the served model', async () => {
  const models = await client.models.list();
  assert.equal(models.data.length, 1);
  assert.equal(models.data[0].id, 'kjv-1m');
  const one = await client.models.retrieve('kjv-1m');
  assert.equal(one.id, 'kjv-1m');
});

test('non-streaming completion has text, usage and finish_reason', async () => {
  const r = await client.completions.create({ model: 'whatever', prompt: PROMPT, max_tokens: 20,
                                              temperature: 0 });
  assert.equal(r.object, 'text_completion');
  assert.equal(r.model, 'kjv-1m');
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.ok(r.choices[0].text.length > 0);
  assert.equal(r.usage.completion_tokens, 20);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + 20);
  assert.equal(r.choices[0].text, grpcText(['--max-tokens', '20', PROMPT]));
});

test('streaming completion equals the non-streaming one and ends with usage', async () => {
  const whole = await client.completions.create({ model: 'm', prompt: PROMPT, max_tokens: 20,
                                                  temperature: 0 });
  const stream = await client.completions.create({ model: 'm', prompt: PROMPT, max_tokens: 20,
                                                   temperature: 0, stream: true,
                                                   stream_options: { include_usage: true } });
  let text = '';
  let finish = null;
  let usage = null;
  let chunks = 0;
  for await (const chunk of stream) {
    ++chunks;
    assert.equal(chunk.object, 'text_completion');
    for (const choice of chunk.choices) {
      assert.equal(finish, null, 'no choice after the finish_reason');
      text += choice.text;
      finish = choice.finish_reason;
    }
    if (chunk.usage) usage = chunk.usage;
  }
  assert.ok(chunks >= 3);
  assert.equal(text, whole.choices[0].text);
  assert.equal(finish, 'length');
  assert.deepEqual(usage, whole.usage);
});

test('stop strings end the text before them with finish_reason stop', async () => {
  const whole = await client.completions.create({ model: 'm', prompt: PROMPT, max_tokens: 40,
                                                  temperature: 0 });
  const text = whole.choices[0].text;
  const cut = text.indexOf(' ', 1);
  assert.ok(cut > 0);
  const stop = text.slice(cut, cut + 4);
  for (const stream of [false, true]) {
    const r = await client.completions.create({ model: 'm', prompt: PROMPT, max_tokens: 40,
                                                temperature: 0, stop: [stop], stream });
    let got = '';
    let finish = null;
    if (stream) {
      for await (const chunk of r) {
        for (const c of chunk.choices) { got += c.text; finish = c.finish_reason ?? finish; }
      }
    } else {
      got = r.choices[0].text;
      finish = r.choices[0].finish_reason;
    }
    assert.equal(got, text.slice(0, cut), `stream=${stream}`);
    assert.equal(finish, 'stop');
  }
});

test('a seed reproduces the gRPC stream of the same request', async () => {
  const args = { model: 'm', prompt: 'And God said', max_tokens: 32, temperature: 0.8,
                 top_p: 0.95, seed: 4242 };
  const a = await client.completions.create(args);
  const b = await client.completions.create({ ...args, stream: false });
  assert.equal(a.choices[0].text, b.choices[0].text);
  const grpc = grpcText(['--max-tokens', '32', '--temperature', '0.8', '--top-p', '0.95',
                         '--seed', '4242', 'And God said']);
  assert.equal(a.choices[0].text, grpc);
  const other = await client.completions.create({ ...args, seed: 4243 });
  assert.notEqual(other.choices[0].text, a.choices[0].text);
});

test('n choices: choice 0 is the n = 1 answer, and a stream splits by index', async () => {
  const args = { model: 'm', prompt: 'And God said', max_tokens: 32, temperature: 0.8,
                 top_p: 0.95, seed: 4242, n: 3 };
  const r = await client.completions.create(args);
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1, 2]);
  const one = await client.completions.create({ ...args, n: 1 });
  assert.equal(r.choices[0].text, one.choices[0].text);
  assert.notEqual(r.choices[1].text, r.choices[0].text);
  assert.equal(r.usage.prompt_tokens, one.usage.prompt_tokens);
  const stream = await client.completions.create({ ...args, stream: true });
  const texts = ['', '', ''];
  const finished = [];
  for await (const chunk of stream) {
    for (const c of chunk.choices) {
      texts[c.index] += c.text;
      if (c.finish_reason) finished.push(c.index);
    }
  }
  assert.deepEqual(texts, r.choices.map((c) => c.text));
  assert.deepEqual(finished.sort(), [0, 1, 2]);
});

test('lm-eval loglikelihood form: a batch of token prompts, echo, logprobs 1', async () => {
  const ids = [[1, 300, 261, 345, 17], [1, 52, 9]];
  const r = await client.completions.create({ model: 'm', prompt: ids, max_tokens: 1,
                                              logprobs: 1, echo: true, temperature: 0 });
  assert.equal(r.choices.length, 2);
  for (const [i, choice] of r.choices.entries()) {
    const lp = choice.logprobs;
    assert.equal(lp.token_logprobs.length, ids[i].length + 1);
    assert.equal(lp.token_logprobs[0], null);
    assert.equal(lp.top_logprobs[0], null);
    for (let j = 1; j < lp.token_logprobs.length; j++) {
      assert.ok(lp.token_logprobs[j] <= 0, `${i}:${j}`);
      // The greedy answer's logprob is its top alternative's.
      assert.ok(lp.token_logprobs[j] <= Math.max(...Object.values(lp.top_logprobs[j])) + 1e-6);
    }
    const last = lp.token_logprobs.length - 1;
    assert.equal(lp.token_logprobs[last], Math.max(...Object.values(lp.top_logprobs[last])));
  }
  assert.equal(r.usage.prompt_tokens, ids[0].length + ids[1].length);
});

test('logit_bias and the penalties give the gRPC stream of the same request', async () => {
  const args = { model: 'm', prompt: 'And God said', max_tokens: 24, temperature: 0,
                 frequency_penalty: 1.2, presence_penalty: 0.6, logit_bias: { 100: -100 } };
  const r = await client.completions.create(args);
  const grpc = grpcText(['--max-tokens', '24', '--frequency-penalty', '1.2',
                         '--presence-penalty', '0.6', '--logit-bias', '100=-100', 'And God said']);
  assert.equal(r.choices[0].text, grpc);
  const plain = await client.completions.create({ model: 'm', prompt: 'And God said',
                                                  max_tokens: 24, temperature: 0 });
  assert.notEqual(r.choices[0].text, plain.choices[0].text);
});

test('response_format json_object: the gRPC json_object answer, a JSON object', async () => {
  // kjv-1m writes scripture; only JSON mode's mask makes this JSON.
  const args = { model: 'm', prompt: 'And God said', max_tokens: 120, temperature: 0.8,
                 seed: 77, response_format: { type: 'json_object' } };
  const r = await client.completions.create(args);
  assert.equal(r.choices[0].finish_reason, 'stop');
  const object = JSON.parse(r.choices[0].text);
  assert.equal(typeof object, 'object');
  assert.ok(!Array.isArray(object) && object !== null);
  const grpc = grpcText(['--max-tokens', '120', '--temperature', '0.8', '--seed', '77',
                         '--json-object', 'And God said']);
  assert.equal(r.choices[0].text, grpc);
  await assert.rejects(
    client.completions.create({ ...args, response_format: { type: 'json_schema' } }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'response_format');
});

test('response_format json_schema: the gRPC json_schema answer, an object of the schema', async () => {
  const schema = { type: 'object', additionalProperties: false, required: ['holy', 'verse'],
                   properties: { holy: { type: 'boolean' }, verse: { type: 'integer' } } };
  const args = { model: 'm', prompt: 'And God said', max_tokens: 200, temperature: 0.8, seed: 5,
                 response_format: { type: 'json_schema',
                                    json_schema: { name: 'verse', strict: true, schema } } };
  const r = await client.completions.create(args);
  assert.equal(r.choices[0].finish_reason, 'stop');
  const object = JSON.parse(r.choices[0].text);
  assert.deepEqual(Object.keys(object).sort(), ['holy', 'verse']);
  assert.equal(typeof object.holy, 'boolean');
  assert.ok(Number.isInteger(object.verse));
  const dir = mkdtempSync(join(tmpdir(), 'quill-schema-'));
  try {
    const file = join(dir, 'schema.json');
    writeFileSync(file, JSON.stringify(schema));
    const grpc = grpcText(['--max-tokens', '200', '--temperature', '0.8', '--seed', '5',
                           '--json-schema', file, 'And God said']);
    assert.equal(r.choices[0].text, grpc);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  const unsupported = { ...schema, properties: { ...schema.properties,
                                                 verse: { type: 'integer', minimum: 1 } } };
  await assert.rejects(
    client.completions.create({ ...args, response_format: { type: 'json_schema',
                                json_schema: { name: 'verse', schema: unsupported } } }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'response_format' &&
           e.message.includes('"minimum" is not supported'));
});

test('invalid input is a 400 naming the field', async () => {
  for (const [extra, param] of [[{ n: 0 }, 'n'], [{ temperature: -1 }, 'temperature'],
                                [{ max_tokens: 100000 }, 'max_tokens'],
                                [{ frequency_penalty: 3 }, 'frequency_penalty'],
                                [{ logit_bias: { 99999: 1 } }, 'logit_bias'],
                                [{ suffix: 'the end' }, 'suffix']]) {
    await assert.rejects(
      client.completions.create({ model: 'm', prompt: PROMPT, ...extra }),
      (e) => {
        assert.ok(e instanceof OpenAI.BadRequestError, String(e));
        assert.equal(e.status, 400);
        assert.equal(e.param, param);
        assert.equal(e.type, 'invalid_request_error');
        return true;
      });
  }
  await assert.rejects(client.models.retrieve('no-such-model'),
                       (e) => e instanceof OpenAI.NotFoundError && e.status === 404);
});

test('a full queue is a 429 with Retry-After', async () => {
  // The tight server runs one 240-token request at a time (its KV pool) and queues one
  // more: of eight sent at once, the rest are refused at once.
  const long = { model: 'm', prompt: PROMPT, max_tokens: 240, ignore_eos: true };
  const results = await Promise.allSettled(
    Array.from({ length: 8 }, () => tight.completions.create(long)));
  const refused = results.filter((r) => r.status === 'rejected');
  const served = results.filter((r) => r.status === 'fulfilled');
  assert.ok(refused.length >= 1, 'no request was refused');
  assert.ok(served.length >= 1, 'no request was served');
  for (const r of refused) {
    assert.ok(r.reason instanceof OpenAI.RateLimitError, String(r.reason));
    assert.equal(r.reason.status, 429);
    assert.equal(r.reason.headers['retry-after'], '1');
    assert.equal(r.reason.code, 'rate_limit_exceeded');
  }
  for (const r of served) assert.equal(r.value.usage.completion_tokens, 240);
  await waitFor('every KV block back', async () =>
    (await metric(env.QUILL_TIGHT_METRICS_URL, 'quill_kv_cache_blocks_used')) === 0);
  assert.equal(await metric(env.QUILL_TIGHT_METRICS_URL, 'quill_requests_total',
                            '{api="http",outcome="rejected"}'), refused.length);
});

test('aborting mid-stream frees the KV blocks', async () => {
  const cancelled = '{api="http",outcome="cancelled"}';
  // kjv-1m writes 240 tokens in a fraction of a second; on a loaded machine the whole
  // answer may be out before the client reacts. Such a try ends as "length"; try again.
  for (let attempt = 1; ; ++attempt) {
    const before = await metric(env.QUILL_METRICS_URL, 'quill_requests_total', cancelled);
    const controller = new AbortController();
    const stream = await client.completions.create(
      { model: 'm', prompt: PROMPT, max_tokens: 240, ignore_eos: true, stream: true },
      { signal: controller.signal });
    let seen = 0;
    let finished = false;
    // The package ends the iteration quietly (or with an abort error) once aborted.
    try {
      for await (const chunk of stream) {
        if (chunk.choices.some((c) => c.finish_reason)) finished = true;
        if (++seen === 3) controller.abort();
      }
    } catch (e) {
      assert.ok(e instanceof OpenAI.APIUserAbortError || e.name === 'AbortError', String(e));
    }
    assert.ok(seen >= 3, `saw ${seen} chunks`);
    if (finished && attempt < 5) continue;
    assert.ok(!finished, 'every try finished before the abort');
    await waitFor('the cancellation', async () =>
      (await metric(env.QUILL_METRICS_URL, 'quill_kv_cache_blocks_used')) === 0 &&
      (await metric(env.QUILL_METRICS_URL, 'quill_requests_total', cancelled)) === before + 1);
    return;
  }
});

// ---------------------------------------------------------------------------------------
// Chat. The expected answer is the gRPC stream of the prompt `quill-run --render-chat`
// prints for the same messages and template, never the server's own chat path.

const MESSAGES = [
  { role: 'system', content: 'You are a preacher.' },
  { role: 'user', content: 'Who made the heaven and the earth?' },
];

function renderedPrompt(messages) {
  const dir = mkdtempSync(join(tmpdir(), 'quill-chat-'));
  try {
    const file = join(dir, 'messages.json');
    writeFileSync(file, JSON.stringify(messages));
    return execFileSync(env.QUILL_RUN, ['--render-chat', file, '-m', env.QUILL_MODEL,
                                        '--chat-template', env.QUILL_CHAT_TEMPLATE],
                        { encoding: 'utf8' });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

test('chat.completions.create answers like Generate on the rendered prompt', async () => {
  const r = await chat.chat.completions.create({ model: 'm', messages: MESSAGES, max_tokens: 24,
                                                 temperature: 0 });
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.model, 'kjv-1m');
  assert.ok(r.id.startsWith('chatcmpl-'));
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].message.role, 'assistant');
  const want = grpcText(['--max-tokens', '24', renderedPrompt(MESSAGES)], env.QUILL_CHAT_GRPC_ADDR);
  assert.equal(r.choices[0].message.content, want);
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.usage.completion_tokens, 24);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + 24);
});

test('streaming chat: role first, deltas, finish_reason, usage, same text', async () => {
  const args = { model: 'm', messages: MESSAGES, max_completion_tokens: 20, temperature: 0.8,
                 top_p: 0.95, seed: 77 };
  const whole = await chat.chat.completions.create(args);
  const stream = await chat.chat.completions.create({ ...args, stream: true,
                                                      stream_options: { include_usage: true } });
  let text = '';
  let role = null;
  let finish = null;
  let usage = null;
  let chunks = 0;
  for await (const chunk of stream) {
    assert.equal(chunk.object, 'chat.completion.chunk');
    if (chunks++ === 0) role = chunk.choices[0].delta.role;
    for (const choice of chunk.choices) {
      assert.equal(finish, null, 'no choice after the finish_reason');
      text += choice.delta.content ?? '';
      finish = choice.finish_reason;
    }
    if (chunk.usage) usage = chunk.usage;
  }
  assert.equal(role, 'assistant');
  assert.ok(chunks >= 3);
  assert.equal(text, whole.choices[0].message.content);
  assert.equal(finish, whole.choices[0].finish_reason);
  assert.deepEqual(usage, whole.usage);
  const want = grpcText(['--max-tokens', '20', '--temperature', '0.8', '--top-p', '0.95',
                         '--seed', '77', renderedPrompt(MESSAGES)], env.QUILL_CHAT_GRPC_ADDR);
  assert.equal(text, want);
});

test('chat without a chat template is a 400 saying so', async () => {
  // The tight server has no --chat-template, and kjv-1m has none of its own.
  await assert.rejects(
    tight.chat.completions.create({ model: 'm', messages: MESSAGES, max_tokens: 4 }),
    (e) => {
      assert.ok(e instanceof OpenAI.BadRequestError, String(e));
      assert.match(e.message, /no chat template/);
      return true;
    });
  await assert.rejects(
    chat.chat.completions.create({ model: 'm', messages: [], max_tokens: 4 }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'messages');
});
