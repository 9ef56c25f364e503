/**
 * The direct node:http path of /mcp (src/mcp/node-transport.ts) on a real node:http server with the
 * SDK's Server behind it, next to the SDK's own handler for everything else: JSON answers, SSE when
 * a notification or a keep-alive must go first, a disconnect aborting the handler, and requests the
 * SDK must answer reaching it unchanged. The routing predicate is checked against the SDK's classifier.
 */
import { createServer, type Server as HttpServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { classifyInboundRequest, createMcpHandler, parseJSONRPCMessage, PROTOCOL_VERSION_META_KEY, Server } from '@modelcontextprotocol/server';
import { toNodeHandler } from '@modelcontextprotocol/node';
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { Client as ClientV1 } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport as TransportV1 } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { directPath, plainLegacyRequest, plainToolCall, servableRequest, type NodeResponseTransport } from '../../src/mcp/node-transport.js';
import { okResult } from '../../src/mcp/registry.js';

const MAX = 64 * 1024;
/** The server the current describe block talks to (post, fetch). */
let url: string;
let aborted = 0;
let deferredTexts = 0;

/** A large result (src/mcp/wire-text.ts): every character that needs escaping, non-ASCII in the small fields. */
const LARGE = {
  path: 'dir/fïle "q".txt',
  content: ('line "quoted" \\ back\tslash\r\n' + '\u0001\u001f\u007f').repeat(5000),
  second: 'x'.repeat(70000),
  n: 7,
  nothing: null,
};

/** What the test tool is given: the pieces of the SDK's handler context it uses. */
interface EchoCtx {
  signal: AbortSignal;
  notify: (n: { method: 'notifications/progress'; params: Record<string, unknown> }) => Promise<void>;
  who: unknown;
  deferText?: (t: Parameters<NodeResponseTransport['deferText']>[0]) => string;
}

async function echoTool(params: { arguments?: Record<string, unknown>; _meta?: { progressToken?: string | number } }, ctx: EchoCtx) {
  const args = (params.arguments ?? {}) as { sleepMs?: number; progress?: boolean; large?: boolean; fail?: boolean };
  if (args.fail) throw new Error('the handler failed');
  if (args.large) {
    if (args.progress) await ctx.notify({ method: 'notifications/progress', params: { progressToken: params._meta?.progressToken ?? 0, progress: 1, message: 'half' } });
    return okResult(
      LARGE,
      ctx.deferText
        ? (t) => {
            deferredTexts++;
            return ctx.deferText!(t);
          }
        : undefined,
    );
  }
  const token = params._meta?.progressToken;
  if (args.progress && token !== undefined) {
    await ctx.notify({ method: 'notifications/progress', params: { progressToken: token, progress: 1, total: 2, message: 'half' } });
  }
  if (args.sleepMs) {
    await new Promise<void>((resolve) => {
      const t = setTimeout(resolve, args.sleepMs);
      ctx.signal.addEventListener('abort', () => {
        aborted++;
        abortReasons.push(ctx.signal.reason);
        clearTimeout(t);
        resolve();
      });
    });
  }
  return { content: [{ type: 'text', text: 'é ok' }], structuredContent: { ok: true, who: ctx.who } };
}

function factory(direct?: NodeResponseTransport) {
  const s = new Server({ name: 't', version: '1' }, { capabilities: { tools: {} } });
  s.setRequestHandler('tools/list', () => ({ tools: [{ name: 'echo', inputSchema: { type: 'object' } }] }));
  s.setRequestHandler('tools/call', (req, ctx) =>
    echoTool(req.params, { signal: ctx.mcpReq.signal, notify: (n) => ctx.mcpReq.notify(n), who: ctx.http?.authInfo?.clientId, deferText: direct ? (t) => direct.deferText(t) : undefined }) as never,
  );
  return s;
}

/** A node:http server on the direct path: plain tools/call served without a per-request Server when `plain`. */
async function listen(plain: boolean): Promise<{ server: HttpServer; url: string }> {
  const sdk = toNodeHandler(createMcpHandler(() => factory(), { legacy: 'stateless', maxRequestBodySize: MAX }), { maxRequestBodySize: MAX });
  const serve = directPath({
    factory,
    sdk: sdk as never,
    maxBodyBytes: MAX,
    keepAliveMs: 150,
    toolCall: plain
      ? (params, c) => {
          plainServed++;
          return echoTool(params, { signal: c.signal, notify: (n) => c.notify(n), who: (c.authInfo as { clientId?: string } | undefined)?.clientId, deferText: (t) => c.transport.deferText(t) }) as never;
        }
      : undefined,
  });
  const server = createServer((req, res) => {
    (req as { auth?: unknown }).auth = { token: 'x', clientId: 'caller-1', scopes: [] };
    void serve(req, res);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/mcp` };
}

const servers: HttpServer[] = [];
/** Plain calls served without a per-request Server (as /mcp serves them). */
let plainUrl: string;
/** Every call through the SDK's per-request Server (the direct path without toolCall). */
let serverUrl: string;
let plainServed = 0;
const abortReasons: unknown[] = [];

beforeAll(async () => {
  for (const plain of [true, false]) {
    const l = await listen(plain);
    servers.push(l.server);
    if (plain) plainUrl = l.url;
    else serverUrl = l.url;
  }
  url = plainUrl;
});
afterAll(async () => {
  for (const s of servers) {
    s.closeAllConnections();
    await new Promise((r) => s.close(r));
  }
});

const H = { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-06-18' };
const post = async (body: unknown, headers: Record<string, string> = H) => {
  const r = await fetch(url, { method: 'POST', headers, body: typeof body === 'string' ? body : JSON.stringify(body) });
  return { status: r.status, type: r.headers.get('content-type') ?? '', length: r.headers.get('content-length'), text: await r.text() };
};
const call = (id: number, args: Record<string, unknown>, meta?: Record<string, unknown>) => ({
  jsonrpc: '2.0',
  id,
  method: 'tools/call',
  params: { name: 'echo', arguments: args, ...(meta ? { _meta: meta } : {}) },
});


/** The JSON-RPC messages of an SSE body, in order. */
function sseMessages(text: string): Array<Record<string, unknown>> {
  return text
    .split('\n\n')
    .filter((e) => e.startsWith('event: message'))
    .map((e) => JSON.parse(e.split('\ndata: ')[1]!) as Record<string, unknown>);
}

const MODES: Array<[string, () => string]> = [
  ['plain calls served without a per-request Server', () => plainUrl],
  ['every call through the per-request Server', () => serverUrl],
];

describe.each(MODES)('the direct path (%s)', (_mode, urlOf) => {
  beforeAll(() => {
    url = urlOf();
  });
  it('answers a call whose result comes first as one JSON body with its length', async () => {
    const r = await post(call(1, {}));
    expect(r.status).toBe(200);
    expect(r.type).toBe('application/json');
    expect(Number(r.length)).toBe(Buffer.byteLength(r.text));
    expect(JSON.parse(r.text)).toEqual({ jsonrpc: '2.0', id: 1, result: { content: [{ type: 'text', text: 'é ok' }], structuredContent: { ok: true, who: 'caller-1' } } });
  });

  it('streams SSE when a notification goes before the result, the result last', async () => {
    const r = await post(call(2, { progress: true }, { progressToken: 'p1' }));
    expect(r.type).toBe('text/event-stream');
    const events = sseMessages(r.text);
    expect(events).toHaveLength(2);
    expect(events[0]).toMatchObject({ method: 'notifications/progress', params: { progressToken: 'p1', message: 'half' } });
    expect(events[1]).toMatchObject({ id: 2, result: { structuredContent: { ok: true } } });
  });

  it('a call still running after the keep-alive interval gets an SSE stream with keep-alive comments', async () => {
    const r = await post(call(3, { sleepMs: 400 }));
    expect(r.type).toBe('text/event-stream');
    expect(r.text.startsWith(': keepalive\n\n')).toBe(true);
    expect(r.text).toMatch(/\n\nevent: message\ndata: \{.*"id":3\}\n\n$/);
  });

  it('a client that goes away aborts the handler', async () => {
    const before = aborted;
    const ac = new AbortController();
    const p = fetch(url, { method: 'POST', headers: H, body: JSON.stringify(call(4, { sleepMs: 5000 })), signal: ac.signal }).catch(() => 'gone');
    await new Promise((r) => setTimeout(r, 100));
    ac.abort();
    expect(await p).toBe('gone');
    for (let i = 0; i < 50 && aborted === before; i++) await new Promise((r) => setTimeout(r, 20));
    expect(aborted).toBe(before + 1);
  });

  it('leaves to the SDK what it must answer, with its own answers', async () => {
    // A batch, a notification, bad JSON, an empty body, a wrong media type, a missing Accept, an unsupported version, a GET.
    const batch = await post([call(5, {}), call(6, {})]);
    expect(batch.status).toBe(200);
    expect(batch.type).toBe('text/event-stream');
    expect(batch.text).toContain('"id":5');
    expect(batch.text).toContain('"id":6');
    expect((await post({ jsonrpc: '2.0', method: 'notifications/initialized' })).status).toBe(202);
    const bad = await post('{"jsonrpc":');
    expect(bad.status).toBe(400);
    expect(JSON.parse(bad.text).error.code).toBe(-32700);
    expect((await post('')).status).toBe(400);
    expect((await post(call(7, {}), { ...H, 'content-type': 'text/plain' })).status).toBe(415);
    expect((await post(call(8, {}), { ...H, accept: 'application/json' })).status).toBe(406);
    const version = await post(call(9, {}), { ...H, 'mcp-protocol-version': '2024-01-01' });
    expect(version.status).toBe(400);
    expect(version.text).toContain('Unsupported protocol version');
    expect((await fetch(url, { headers: { accept: 'text/event-stream' } })).status).toBe(405);
  });

  it('refuses a body over the bound with 413, whether or not its length was declared', async () => {
    const big = JSON.stringify(call(10, { pad: 'x'.repeat(MAX) }));
    expect((await post(big)).status).toBe(413);
    const chunked = await fetch(url, {
      method: 'POST',
      headers: H,
      body: new ReadableStream({
        start(c) {
          c.enqueue(new TextEncoder().encode(big));
          c.close();
        },
      }),
      duplex: 'half',
    } as RequestInit).catch((e: Error) => e);
    if (!(chunked instanceof Error)) expect(chunked.status).toBe(413);
  });

  it('serves both official clients (v2 and v1), with progress', async () => {
    const onprogress = (progress: string[]) => (p: { message?: string }) => progress.push(p.message ?? '');
    const v2 = new Client({ name: 'x', version: '1' });
    await v2.connect(new StreamableHTTPClientTransport(new URL(url)));
    const p2: string[] = [];
    expect((await v2.callTool({ name: 'echo', arguments: { progress: true } }, { onprogress: onprogress(p2) })).structuredContent).toEqual({ ok: true, who: 'caller-1' });
    expect((await v2.callTool({ name: 'echo', arguments: {} })).structuredContent).toEqual({ ok: true, who: 'caller-1' });
    expect(p2).toEqual(['half']);
    await v2.close();
    const v1 = new ClientV1({ name: 'x', version: '1' });
    await v1.connect(new TransportV1(new URL(url)));
    const p1: string[] = [];
    expect((await v1.callTool({ name: 'echo', arguments: { progress: true } }, undefined, { onprogress: onprogress(p1) })).structuredContent).toEqual({ ok: true, who: 'caller-1' });
    expect((await v1.callTool({ name: 'echo', arguments: {} })).structuredContent).toEqual({ ok: true, who: 'caller-1' });
    expect(p1).toEqual(['half']);
    await v1.close();
  });
});

describe.each(MODES)('a large result, its text block written from pieces (%s)', (_mode, urlOf) => {
  beforeAll(() => {
    url = urlOf();
  });
  const expected = { content: [{ type: 'text', text: JSON.stringify(LARGE) }] };

  it('is the same JSON answer, byte for byte, as the plain serialization, with its length', async () => {
    const before = deferredTexts;
    const r = await post(call(20, { large: true }));
    expect(deferredTexts).toBe(before + 1);
    expect(r.type).toBe('application/json');
    expect(Number(r.length)).toBe(Buffer.byteLength(r.text));
    // The serializer's own output for the same message: the same escapes, nothing more, nothing less.
    expect(JSON.stringify(JSON.parse(r.text))).toBe(r.text);
    expect(JSON.parse(r.text)).toEqual({ jsonrpc: '2.0', id: 20, result: expected });
    expect(r.text).not.toContain('atelier-wire-text');
  });

  it('is the last event of an SSE stream when a notification went first', async () => {
    const r = await post(call(21, { large: true, progress: true }, { progressToken: 'p2' }));
    expect(r.type).toBe('text/event-stream');
    const events = sseMessages(r.text);
    expect(events).toHaveLength(2);
    expect(events[1]).toEqual({ jsonrpc: '2.0', id: 21, result: expected });
  });

  it('is the full text on the SDK path too (a batch)', async () => {
    const before = deferredTexts;
    const r = await post([call(22, { large: true }), call(23, {})]);
    expect(deferredTexts).toBe(before);
    expect(r.text).toContain('"id":22');
    const event = r.text.split('\n\n').find((e) => e.includes('"id":22'))!;
    expect(JSON.parse(event.split('\ndata: ')[1]!)).toEqual({ jsonrpc: '2.0', id: 22, result: expected });
  });

  it('reaches both official clients as the same text', async () => {
    const v2 = new Client({ name: 'x', version: '1' });
    await v2.connect(new StreamableHTTPClientTransport(new URL(url)));
    expect(await v2.callTool({ name: 'echo', arguments: { large: true } })).toEqual(expected);
    await v2.close();
    const v1 = new ClientV1({ name: 'x', version: '1' });
    await v1.connect(new TransportV1(new URL(url)));
    expect(await v1.callTool({ name: 'echo', arguments: { large: true } })).toEqual(expected);
    await v1.close();
  });
});

describe('the routing predicate', () => {
  const cases: Array<[unknown, string | undefined]> = [
    [call(1, {}), undefined],
    [call(1, {}), '2025-06-18'],
    [call(1, {}), '2025-11-25'],
    [call(1, {}), ' 2025-03-26 '],
    [call(1, {}), '2026-07-28'],
    [call(1, {}), '2024-01-01'],
    [call(1, {}, { progressToken: 3 }), '2025-06-18'],
    [call(1, {}, { [PROTOCOL_VERSION_META_KEY]: '2026-07-28' }), undefined],
    [call(1, {}, { [PROTOCOL_VERSION_META_KEY]: '2026-07-28' }), '2026-07-28'],
    [{ jsonrpc: '2.0', id: 'a', method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'x', version: '1' } } }, undefined],
    [{ jsonrpc: '2.0', id: 'a', method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'x', version: '1' } } }, '2026-07-28'],
    [{ jsonrpc: '2.0', id: 1.5, method: 'tools/list' }, undefined],
    [{ jsonrpc: '2.0', id: null, method: 'tools/list' }, undefined],
    [{ jsonrpc: '1.0', id: 1, method: 'tools/list' }, undefined],
    [{ jsonrpc: '2.0', id: 1, method: 'tools/list', result: {} }, undefined],
    [{ jsonrpc: '2.0', id: 1, result: {} }, undefined],
    [{ jsonrpc: '2.0', id: 1, error: { code: 1, message: 'x' } }, undefined],
    [{ jsonrpc: '2.0', method: 'notifications/initialized' }, undefined],
    [{ jsonrpc: '2.0', id: 1, method: 'tools/list', params: [] }, undefined],
    [{ jsonrpc: '2.0', id: 1, method: 'tools/list', params: { _meta: [] } }, undefined],
    [[call(1, {})], undefined],
    ['text', undefined],
    [null, undefined],
  ];

  it('takes only what the SDK routes to its stateless leg as one request', () => {
    let taken = 0;
    for (const [body, version] of cases) {
      if (!servableRequest(JSON.stringify(body), version)) continue;
      expect(plainLegacyRequest(body, version)).toBe(true);
      taken++;
      const sdk = classifyInboundRequest({ httpMethod: 'POST', protocolVersionHeader: version, body });
      expect(sdk.kind, JSON.stringify([body, version])).toBe('legacy');
      expect(['no-claim', 'initialize'], JSON.stringify([body, version])).toContain((sdk as { reason?: string }).reason);
    }
    expect(taken).toBe(6);
  });

  it('serves only a request the SDK transport would dispatch as one', () => {
    expect(servableRequest(JSON.stringify(call(1, {})), '2025-06-18')).toMatchObject({ id: 1, method: 'tools/call' });
    expect(servableRequest(JSON.stringify(call(1, {}, { progressToken: {} })), undefined)).toBeUndefined();
    expect(servableRequest(JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'initialize', params: {} }), undefined)).toBeUndefined();
    expect(servableRequest('', undefined)).toBeUndefined();
    expect(servableRequest('{', undefined)).toBeUndefined();
    expect(servableRequest(JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'x', extra: 1 }), undefined)).toBeUndefined();
  });
});

describe('plain tools/call without a per-request Server', () => {
  const bodies: unknown[] = [
    call(30, {}),
    call(31, { x: [1, { y: null }] }),
    { jsonrpc: '2.0', id: 'k', method: 'tools/call', params: { name: 'echo' } },
    { jsonrpc: '2.0', id: 32, method: 'tools/call', params: { name: '' } },
    call(33, {}, { progressToken: 'p' }),
    call(34, {}, { progressToken: 7 }),
    call(35, { progress: true }, { progressToken: 8 }),
    call(38, {}, {}),
    // Not plain: the per-request Server serves these, with its own checks and answers.
    call(36, {}, { progressToken: 1.5 }),
    call(37, {}, { progressToken: 'p', other: 1 }),
    { jsonrpc: '2.0', id: 39, method: 'tools/call', params: { name: 'echo', arguments: [] } },
    { jsonrpc: '2.0', id: 40, method: 'tools/call', params: { name: 3 } },
    { jsonrpc: '2.0', id: 41, method: 'tools/call', params: { arguments: {} } },
    { jsonrpc: '2.0', id: 42, method: 'tools/call', params: { name: 'echo', arguments: null } },
    { jsonrpc: '2.0', id: 43, method: 'tools/call', params: { name: 'echo', task: { ttl: 1000 } } },
    { jsonrpc: '2.0', id: 44, method: 'tools/call' },
    // Hostile: arguments nested thousands deep (plain: only their being an object is checked here),
    // and an own __proto__ key in params (the SDK's JSON-RPC parse, which every request on this path
    // goes through, drops it: what is left is plain, and answered as the Server answers it).
    { jsonrpc: '2.0', id: 47, method: 'tools/call', params: { name: 'echo', arguments: Array.from({ length: 3000 }).reduce<Record<string, unknown>>((inner) => ({ a: inner }), {}) } },
    '{"jsonrpc":"2.0","id":48,"method":"tools/call","params":{"name":"echo","__proto__":{"arguments":{}}}}',
  ];
  const at = async (u: string, body: unknown) => {
    const r = await fetch(u, { method: 'POST', headers: H, body: typeof body === 'string' ? body : JSON.stringify(body) });
    const text = await r.text();
    return { status: r.status, type: r.headers.get('content-type'), message: r.headers.get('content-type') === 'text/event-stream' ? sseMessages(text) : JSON.parse(text) };
  };

  it('takes only calls the SDK accepts, and answers them as the per-request Server does', async () => {
    let plain = 0;
    for (const body of bodies) {
      // As the direct path sees it: after the SDK's JSON-RPC parse (a message that fails it is the SDK's to answer).
      let params: unknown;
      try {
        params = (parseJSONRPCMessage(typeof body === 'string' ? JSON.parse(body) : body) as { params?: unknown }).params;
      } catch {
        params = undefined;
      }
      const before = plainServed;
      const direct = await at(plainUrl, body);
      const server = await at(serverUrl, body);
      const what = JSON.stringify(body);
      expect(direct, what).toEqual(server);
      if (plainToolCall(params)) {
        plain++;
        expect(plainServed, what).toBe(before + 1);
        // The SDK's own check of tools/call params accepts it: a result, not a JSON-RPC error.
        const last = Array.isArray(server.message) ? server.message.at(-1) : server.message;
        expect(last.result, what).toBeDefined();
      } else expect(plainServed, what).toBe(before);
    }
    expect(plain).toBe(10);
  });

  it('answers a handler that throws as the SDK does (InternalError with its message)', async () => {
    const body = call(45, { fail: true });
    const direct = await at(plainUrl, body);
    expect(direct.message).toEqual({ jsonrpc: '2.0', id: 45, error: { code: -32603, message: 'the handler failed' } });
    expect(direct).toEqual(await at(serverUrl, body));
  });

  it('aborts the handler with the reason the SDK gives when the client goes away', async () => {
    const reasons: string[] = [];
    for (const u of [plainUrl, serverUrl]) {
      const before = abortReasons.length;
      const ac = new AbortController();
      const p = fetch(u, { method: 'POST', headers: H, body: JSON.stringify(call(46, { sleepMs: 5000 })), signal: ac.signal }).catch(() => 'gone');
      await new Promise((r) => setTimeout(r, 100));
      ac.abort();
      expect(await p).toBe('gone');
      for (let i = 0; i < 50 && abortReasons.length === before; i++) await new Promise((r) => setTimeout(r, 20));
      const reason = abortReasons.at(-1) as { name?: string; code?: unknown; message?: string };
      reasons.push(`${reason.name}|${String(reason.code)}|${reason.message}`);
    }
    expect(reasons[0]).toBe(reasons[1]);
    expect(reasons[0]).toContain('Connection closed');
  });
});
