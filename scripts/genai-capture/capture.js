// Records the OTLP traces that GenAI instrumentations of the official openai
// client export, for the fixtures in testdata/genai/. Run by hand (see
// README.md): node capture.js [outdir]
//
// The parent starts a fake OpenAI-compatible server and an OTLP/HTTP JSON
// capture endpoint on loopback ports, then runs this file again as a child
// per library and team (an instrumentation patches openai when it is first
// required, so each library needs its own process). Each child makes the
// calls of its team: team "search" a chat and an embeddings call, team
// "assistant" a streamed chat with include_usage, a tool call and a call the
// server refuses (HTTP 429). The server's token counts are fixed per call
// (USAGE below): the tests compute the expected cost from them by hand.
'use strict';

const http = require('node:http');
const fs = require('node:fs');
const path = require('node:path');
const { spawn } = require('node:child_process');

const LIBRARIES = {
  otel: '@opentelemetry/instrumentation-openai',
  traceloop: '@traceloop/instrumentation-openai',
  openinference: '@arizeai/openinference-instrumentation-openai',
  // The Vercel AI SDK records its own spans (experimental_telemetry):
  // no instrumentation package, the openai provider of the SDK.
  vercel: 'ai',
};
const TEAMS = ['search', 'assistant'];
const RESPONSE_MODEL = 'gpt-4o-mini-2024-07-18';

// The usage the fake server reports for each call, keyed by the user
// message (or the embeddings input).
const USAGE = {
  'chat': { prompt_tokens: 1200, completion_tokens: 300, cached_tokens: 1024 },
  'stream': { prompt_tokens: 900, completion_tokens: 150, cached_tokens: 0 },
  'tool': { prompt_tokens: 2000, completion_tokens: 40, cached_tokens: 1536 },
  'embed': { prompt_tokens: 16 },
};

function usageOf(u) {
  return {
    prompt_tokens: u.prompt_tokens,
    completion_tokens: u.completion_tokens,
    total_tokens: u.prompt_tokens + u.completion_tokens,
    prompt_tokens_details: { cached_tokens: u.cached_tokens, audio_tokens: 0 },
    completion_tokens_details: { reasoning_tokens: 0, audio_tokens: 0, accepted_prediction_tokens: 0, rejected_prediction_tokens: 0 },
  };
}

function readBody(req) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => resolve(Buffer.concat(chunks)));
    req.on('error', reject);
  });
}

// fakeOpenAI answers /v1/chat/completions and /v1/embeddings as OpenAI does.
async function fakeOpenAI(req, res) {
  const body = JSON.parse((await readBody(req)).toString() || '{}');
  const json = (status, v) => {
    res.writeHead(status, { 'content-type': 'application/json', 'x-request-id': 'req_capture' });
    res.end(JSON.stringify(v));
  };
  if (req.url === '/v1/embeddings') {
    const inputs = Array.isArray(body.input) ? body.input : [body.input];
    return json(200, {
      object: 'list', model: body.model,
      data: inputs.map((_, i) => ({ object: 'embedding', index: i, embedding: [0.011, -0.022, 0.033] })),
      usage: { prompt_tokens: USAGE.embed.prompt_tokens, total_tokens: USAGE.embed.prompt_tokens },
    });
  }
  if (req.url !== '/v1/chat/completions') {
    return json(404, { error: { message: 'not found', type: 'invalid_request_error' } });
  }
  const last = body.messages[body.messages.length - 1].content;
  if (last === 'error') {
    return json(429, { error: { message: 'Rate limit reached for gpt-4o-mini', type: 'requests', code: 'rate_limit_exceeded' } });
  }
  const u = USAGE[last];
  const id = 'chatcmpl-capture-' + last;
  const created = Math.floor(Date.now() / 1000);
  if (body.stream) {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    const chunk = (choices, usage) => res.write('data: ' + JSON.stringify({
      id, object: 'chat.completion.chunk', created, model: RESPONSE_MODEL, system_fingerprint: 'fp_capture',
      choices, ...(usage === undefined ? {} : { usage }),
    }) + '\n\n');
    const withUsage = body.stream_options && body.stream_options.include_usage;
    chunk([{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null }], withUsage ? null : undefined);
    for (const w of ['Streamed ', 'answer.']) {
      chunk([{ index: 0, delta: { content: w }, finish_reason: null }], withUsage ? null : undefined);
    }
    chunk([{ index: 0, delta: {}, finish_reason: 'stop' }], withUsage ? null : undefined);
    if (withUsage) chunk([], usageOf(u));
    res.end('data: [DONE]\n\n');
    return undefined;
  }
  const message = last === 'tool'
    ? { role: 'assistant', content: null, tool_calls: [{ id: 'call_capture', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] }
    : { role: 'assistant', content: 'An answer.' };
  return json(200, {
    id, object: 'chat.completion', created, model: RESPONSE_MODEL, system_fingerprint: 'fp_capture',
    choices: [{ index: 0, message, logprobs: null, finish_reason: last === 'tool' ? 'tool_calls' : 'stop' }],
    usage: usageOf(u), service_tier: 'default',
  });
}

async function parent(outdir) {
  const captured = {};
  let current = null;
  const server = http.createServer((req, res) => {
    if (req.url === '/v1/traces') {
      readBody(req).then((b) => {
        captured[current].push(JSON.parse(b.toString()));
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end('{}');
      });
      return;
    }
    fakeOpenAI(req, res).catch((e) => { res.writeHead(500); res.end(String(e)); });
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  const base = `http://127.0.0.1:${server.address().port}`;
  fs.mkdirSync(outdir, { recursive: true });
  for (const lib of Object.keys(LIBRARIES)) {
    captured[lib] = [];
    current = lib;
    for (const team of TEAMS) {
      await new Promise((resolve, reject) => {
        const child = spawn(process.execPath, [__filename, '--child', lib, team, base], { stdio: 'inherit' });
        child.on('exit', (code) => (code === 0 ? resolve() : reject(new Error(`${lib} ${team}: exit ${code}`))));
      });
    }
    // One ExportTraceServiceRequest per library: every request's
    // resourceSpans, in the order received.
    const merged = { resourceSpans: captured[lib].flatMap((r) => r.resourceSpans || []) };
    const file = path.join(outdir, `openai-${lib}.json`);
    fs.writeFileSync(file, JSON.stringify(merged, null, 1) + '\n');
    const spans = merged.resourceSpans.flatMap((rs) => rs.scopeSpans.flatMap((ss) => ss.spans)).length;
    console.log(`${file}: ${spans} spans`);
  }
  server.close();
}

async function child(lib, team, base) {
  const { NodeTracerProvider } = require('@opentelemetry/sdk-trace-node');
  const { SimpleSpanProcessor } = require('@opentelemetry/sdk-trace-base');
  const { OTLPTraceExporter } = require('@opentelemetry/exporter-trace-otlp-http');
  const { resourceFromAttributes } = require('@opentelemetry/resources');
  const { registerInstrumentations } = require('@opentelemetry/instrumentation');

  const provider = new NodeTracerProvider({
    resource: resourceFromAttributes({ 'service.name': `capture-${team}`, team }),
    spanProcessors: [new SimpleSpanProcessor(new OTLPTraceExporter({ url: `${base}/v1/traces` }))],
  });
  provider.register();
  if (lib === 'vercel') {
    await vercelCalls(team, base);
    await provider.forceFlush();
    await provider.shutdown();
    return;
  }
  const mod = require(LIBRARIES[lib]);
  const Instrumentation = { otel: mod.OpenAIInstrumentation, traceloop: mod.OpenAIInstrumentation, openinference: mod.OpenAIInstrumentation }[lib];
  const inst = new Instrumentation();
  registerInstrumentations({ instrumentations: [inst] });
  const OpenAI = require('openai');
  if (lib === 'traceloop' && inst.manuallyInstrument) {
    // Its patch runs on require too; manuallyInstrument is idempotent there.
  }
  const client = new OpenAI({ apiKey: 'sk-capture', baseURL: `${base}/v1`, maxRetries: 0 });
  const chat = (content, extra = {}) => client.chat.completions.create({
    model: 'gpt-4o-mini', messages: [{ role: 'user', content }], ...extra,
  });
  if (team === 'search') {
    await chat('chat');
    await client.embeddings.create({ model: 'text-embedding-3-small', input: ['first text', 'second text'] });
  } else {
    const stream = await chat('stream', { stream: true, stream_options: { include_usage: true } });
    for await (const _ of stream) { /* drain */ } // eslint-disable-line no-unused-vars
    await chat('tool', {
      tools: [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } } }],
    });
    try {
      await chat('error');
      throw new Error('the refused call succeeded');
    } catch (e) {
      if (!(e instanceof OpenAI.APIError) || e.status !== 429) throw e;
    }
  }
  await provider.forceFlush();
  await provider.shutdown();
}

// vercelCalls makes the team's calls with the Vercel AI SDK, telemetry on,
// through its OpenAI provider's chat completions model (the fake server has
// no Responses API).
async function vercelCalls(team, base) {
  const { generateText, streamText, embedMany, tool, jsonSchema } = require('ai');
  const { createOpenAI } = require('@ai-sdk/openai');
  const openai = createOpenAI({ apiKey: 'sk-capture', baseURL: `${base}/v1` });
  const telemetry = { isEnabled: true, functionId: `capture-${team}` };
  const model = openai.chat('gpt-4o-mini');
  if (team === 'search') {
    await generateText({ model, prompt: 'chat', experimental_telemetry: telemetry, maxRetries: 0 });
    await embedMany({ model: openai.embeddingModel('text-embedding-3-small'), values: ['first text', 'second text'], experimental_telemetry: telemetry, maxRetries: 0 });
    return;
  }
  const stream = streamText({ model, prompt: 'stream', experimental_telemetry: telemetry, maxRetries: 0 });
  for await (const _ of stream.textStream) { /* drain */ } // eslint-disable-line no-unused-vars
  await stream.usage;
  await generateText({
    model, prompt: 'tool', experimental_telemetry: telemetry, maxRetries: 0,
    tools: { get_weather: tool({ description: 'weather', inputSchema: jsonSchema({ type: 'object', properties: { city: { type: 'string' } } }) }) },
  });
  try {
    await generateText({ model, prompt: 'error', experimental_telemetry: telemetry, maxRetries: 0 });
    throw new Error('the refused call succeeded');
  } catch (e) {
    if (!String(e && e.message).includes('Rate limit')) throw e;
  }
}

if (process.argv[2] === '--child') {
  child(process.argv[3], process.argv[4], process.argv[5]).catch((e) => { console.error(e); process.exit(1); });
} else {
  parent(process.argv[2] || path.join(__dirname, '..', '..', 'testdata', 'genai')).catch((e) => { console.error(e); process.exit(1); });
}
