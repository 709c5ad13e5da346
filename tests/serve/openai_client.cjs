// The official `openai` npm client against `quarry serve`, unmodified: chat.completions.create plain,
// streaming (with the usage chunk) and with response_format json_schema, /v1/models, and a wrong API
// key. Prints one JSON line of what it got; tests/serve/test_serve.cpp checks it.
// Environment: QUARRY_NPM_DIR (where `openai` is installed), QUARRY_BASE_URL, QUARRY_API_KEY,
// QUARRY_MODEL, QUARRY_SCHEMA (a JSON Schema), QUARRY_PROMPT (the user message).
'use strict';
const path = require('path');
const mod = require(path.join(process.env.QUARRY_NPM_DIR, 'node_modules', 'openai'));
const OpenAI = mod.default || mod;
const AuthenticationError = mod.AuthenticationError || OpenAI.AuthenticationError;

async function main() {
  const baseURL = process.env.QUARRY_BASE_URL;
  const model = process.env.QUARRY_MODEL;
  const schema = JSON.parse(process.env.QUARRY_SCHEMA);
  const client = new OpenAI({ baseURL, apiKey: process.env.QUARRY_API_KEY, maxRetries: 0, timeout: 120000 });
  const messages = [
    { role: 'system', content: 'Extract the invoice fields as JSON.' },
    { role: 'user', content: process.env.QUARRY_PROMPT },
  ];
  const out = {};

  const plain = await client.chat.completions.create({ model, messages, max_tokens: 24, temperature: 0 });
  out.plain = {
    id: plain.id, object: plain.object, model: plain.model, content: plain.choices[0].message.content,
    role: plain.choices[0].message.role, finish_reason: plain.choices[0].finish_reason, usage: plain.usage,
  };

  const stream = await client.chat.completions.create({
    model, messages, max_tokens: 24, temperature: 0, stream: true, stream_options: { include_usage: true },
  });
  const s = { content: '', chunks: 0, role: null, finish_reason: null, usage: null, ids: new Set() };
  for await (const chunk of stream) {
    s.chunks++;
    s.ids.add(chunk.id);
    if (chunk.usage) s.usage = chunk.usage;
    const c = chunk.choices[0];
    if (!c) continue;
    if (c.delta.role) s.role = c.delta.role;
    if (c.delta.content) s.content += c.delta.content;
    if (c.finish_reason) s.finish_reason = c.finish_reason;
  }
  out.stream = { content: s.content, chunks: s.chunks, role: s.role, finish_reason: s.finish_reason, usage: s.usage,
                 ids: s.ids.size };

  const js = await client.chat.completions.create({
    model, messages, max_tokens: 200, temperature: 0,
    response_format: { type: 'json_schema', json_schema: { name: 'invoice', strict: true, schema } },
  });
  out.json_schema = { content: js.choices[0].message.content, finish_reason: js.choices[0].finish_reason };

  // json_schema streamed: the deltas add up to the same JSON.
  const js_stream = await client.chat.completions.create({
    model, messages, max_tokens: 200, temperature: 0, stream: true,
    response_format: { type: 'json_schema', json_schema: { name: 'invoice', strict: true, schema } },
  });
  let js_text = '';
  for await (const chunk of js_stream) if (chunk.choices[0] && chunk.choices[0].delta.content) js_text += chunk.choices[0].delta.content;
  out.json_schema_stream = { content: js_text };

  out.models = (await client.models.list()).data.map((m) => m.id);

  const bad = new OpenAI({ baseURL, apiKey: 'sk-not-the-key', maxRetries: 0 });
  try {
    await bad.chat.completions.create({ model, messages, max_tokens: 4 });
    out.bad_key = { thrown: false };
  } catch (e) {
    out.bad_key = { thrown: true, authentication_error: e instanceof AuthenticationError, status: e.status ?? null,
                    code: e.code ?? null, name: e.constructor && e.constructor.name };
  }
  process.stdout.write(JSON.stringify(out) + '\n');
}

main().catch((e) => {
  console.error(String((e && e.stack) || e));
  process.exit(1);
});
