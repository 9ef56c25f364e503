/**
 * Limits that hold as written (issue #12 item 4), through the real service: the MCP body limit at the
 * edge the tool schemas allow (checked with the official MCP client and raw HTTP at the exact byte),
 * nesting depth on every free-form field of the catalog, and the HTTP server's bounds on clients that
 * trickle headers or bodies or never authenticate.
 */
import { createHash } from 'node:crypto';
import { connect, type Socket } from 'node:net';
import { copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Client } from '@modelcontextprotocol/client';
import { call, connectV2, startService, type Service } from './harness.js';
import { ALL_TOOLS } from './spec.js';
import { REPO_FILES, startGitHost, startWorkspaceService } from './workspace-fixture.js';
import type { GitHost } from '../fixtures/githost.js';
import { MCP_MAX_BODY_BYTES } from '../../src/mcp/http.js';
import { MAX_ARGUMENT_DEPTH } from '../../src/tools/validate.js';

let host: GitHost;
let svc: Service;
let c: Client;
let ws: string;
let repoUrl: string;

beforeAll(async () => {
  host = await startGitHost();
  repoUrl = (await host.createRepo('approved/limits', REPO_FILES)).url;
  svc = await startWorkspaceService(host);
  c = await connectV2(svc);
  const r = await call(c, 'workspace_open', { repositoryUrl: repoUrl, idempotencyKey: 'limits-open-1' });
  if (!r.ok) throw new Error(r.text);
  ws = r.result.workspaceId as string;
}, 180_000);

afterAll(async () => {
  await c?.close();
  await svc?.dispose();
  await host?.close();
});

const sha = (s: string) => createHash('sha256').update(s, 'utf8').digest('hex');

/** Raw POST to /mcp with a body of exactly the given bytes. */
async function postMcp(body: Buffer | string, token = svc.token): Promise<{ status: number; text: string }> {
  const r = await fetch(svc.mcpUrl, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
    body,
  });
  return { status: r.status, text: await r.text() };
}

describe('the MCP body limit admits the largest valid request', () => {
  it('files_write of 1048576 control characters (6 MiB of escaped JSON) is written whole', async () => {
    const content = Array.from({ length: 1048576 }, (_, i) => String.fromCharCode(1 + (i % 7))).join('');
    expect(JSON.stringify(content).length).toBeGreaterThan(6 * 1024 * 1024);
    const w = await call(c, 'files_write', { workspaceId: ws, path: 'ctl.bin', content });
    if (!w.ok) throw new Error(w.text);
    expect(w.result.sha256 ?? w.result.newSha256).toBe(sha(content));
    const r = await call(c, 'files_read', { workspaceId: ws, path: 'ctl.bin', limit: 16 });
    if (!r.ok) throw new Error(r.text);
    expect(r.result.sha256).toBe(sha(content));
    expect(r.result.size).toBe(1048576);
  });

  it('files_write of one character more is INVALID_ARGUMENT naming content, not HTTP 413', async () => {
    const r = await call(c, 'files_write', { workspaceId: ws, path: 'too-big.bin', content: '\u0001'.repeat(1048577) });
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.error).toMatchObject({ code: 'INVALID_ARGUMENT', details: { field: 'content' } });
  });

  it('a six-file batch of 900 KiB each (5.4 MB) is written', async () => {
    const files = Array.from({ length: 6 }, (_, i) => ({ path: `batch/f${i}.txt`, content: String(i).repeat(900 * 1024) }));
    const r = await call(c, 'files_write_batch', { workspaceId: ws, files });
    if (!r.ok) throw new Error(r.text);
    for (let i = 0; i < 6; i++) {
      const f = await call(c, 'files_read', { workspaceId: ws, path: `batch/f${i}.txt`, limit: 1 });
      if (!f.ok) throw new Error(f.text);
      expect(f.result.sha256).toBe(sha(files[i]!.content));
    }
  });

  // Content that JSON would escape heavily crosses the daemon protocol as base64 (wireContent in
  // src/services/files.ts), so even 16 MiB of control characters (96 MiB escaped) fits one line of
  // the daemon's 32 MiB limit.
  it('a batch of six files of 1048576 control characters (36 MiB of escaped JSON) is written', async () => {
    const content = Array.from({ length: 1048576 }, (_, i) => String.fromCharCode(1 + (i % 7))).join('');
    const files = Array.from({ length: 6 }, (_, i) => ({ path: `ctl/f${i}.bin`, content }));
    const r = await call(c, 'files_write_batch', { workspaceId: ws, files });
    if (!r.ok) throw new Error(r.text);
    const f = await call(c, 'files_read', { workspaceId: ws, path: 'ctl/f5.bin', limit: 1 });
    if (!f.ok) throw new Error(f.text);
    expect(f.result.sha256).toBe(sha(content));
  }, 120_000);

  it('a batch past the 16 MiB content bound reaches the tool and is refused naming files, not by the transport', async () => {
    const files = Array.from({ length: 17 }, (_, i) => ({ path: `big/f${i}.txt`, content: 'x'.repeat(1048576) }));
    const r = await call(c, 'files_write_batch', { workspaceId: ws, files });
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.error).toMatchObject({ code: 'INVALID_ARGUMENT', details: { field: 'files' } });
  }, 120_000);

  it('a body of exactly the limit is read; one byte more is HTTP 413', async () => {
    const call = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'workspace_list', arguments: {} } });
    const atLimit = Buffer.alloc(MCP_MAX_BODY_BYTES, 0x20);
    atLimit.write(call, 0, 'utf8');
    const ok = await postMcp(atLimit);
    expect(ok.status).toBe(200);
    expect(ok.text).toContain('"workspaces"');
    const over = Buffer.alloc(MCP_MAX_BODY_BYTES + 1, 0x20);
    over.write(call, 0, 'utf8');
    // The server answers 413 and stops reading; a client still writing may meet the closed socket
    // (EPIPE/ECONNRESET) before it reads the answer, which happens on a loaded machine.
    const refused = await postMcp(over).catch((e: Error & { cause?: { code?: string } }) => ({ status: 0, text: String(e.cause?.code ?? e.message) }));
    if (refused.status !== 413) expect(refused.text).toMatch(/EPIPE|ECONNRESET/);
  }, 120_000);

  it('an unauthenticated body is never read: 401 at once, whatever its size', async () => {
    const r = await postMcp(Buffer.alloc(MCP_MAX_BODY_BYTES + 1, 0x20), 'atl_wrong');
    expect(r.status).toBe(401);
  }, 60_000);
});

/** A tools/call sent as raw JSON-RPC (the MCP client's own schema walk overflows on such input before sending). */
async function rawCall(name: string, field: string, deepJson: string): Promise<{ ok: boolean; error?: { code: string; details: Record<string, unknown>; message: string } }> {
  const r = await postMcp(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":${JSON.stringify(name)},"arguments":{${JSON.stringify(field)}:${deepJson}}}}`);
  expect(r.status).toBe(200);
  const json = r.text.trimStart().startsWith('{') ? r.text : /^data: (.*)$/m.exec(r.text)![1]!;
  const result = JSON.parse(json).result as { isError?: boolean; structuredContent?: { error?: { code: string; details: Record<string, unknown>; message: string } } };
  return result.isError ? { ok: false, error: result.structuredContent!.error! } : { ok: true };
}

describe('nesting depth', () => {
  /** JSON text nested `levels` deep (built as text: encoders recurse). */
  const nestedJson = (levels: number, kind: 'object' | 'array'): string =>
    kind === 'object' ? '{"a":'.repeat(levels) + '1' + '}'.repeat(levels) : '['.repeat(levels) + '1' + ']'.repeat(levels);
  /** A value nested `levels` deep, built without recursion. */
  const nested = (levels: number, kind: 'object' | 'array'): unknown => {
    let v: unknown = 1;
    for (let i = 0; i < levels; i++) v = kind === 'object' ? { a: v } : [v];
    return v;
  };

  /** Every property of every published tool whose schema takes an arbitrary JSON object (directly or as array items). */
  async function freeFormFields(): Promise<Array<{ tool: string; field: string; array: boolean }>> {
    const out: Array<{ tool: string; field: string; array: boolean }> = [];
    const free = (s: Record<string, unknown> | undefined): boolean =>
      !!s && (s.type === 'object' || s.type === undefined) && s.additionalProperties !== false && !s.enum && !s.const && !s.anyOf && !s.oneOf && !('not' in s);
    for (const t of (await c.listTools()).tools) {
      const props = (t.inputSchema.properties ?? {}) as Record<string, Record<string, unknown>>;
      for (const [field, s] of Object.entries(props)) {
        if (free(s)) out.push({ tool: t.name, field, array: false });
        else if (s.type === 'array' && free(s.items as Record<string, unknown>)) out.push({ tool: t.name, field, array: true });
      }
    }
    return out;
  }

  it('every free-form object field of the catalog answers 5,000 levels with INVALID_ARGUMENT naming the field', async () => {
    const fields = await freeFormFields();
    // skillSets items have a closed shape now (docs/extensions.md); skillOverrides still maps names to objects.
    expect(fields.map((f) => `${f.tool}.${f.field}`)).toEqual(expect.arrayContaining(['workspace_open.skillOverrides']));
    for (const f of fields) {
      const r = await rawCall(f.tool, f.field, f.array ? `[${nestedJson(5000, 'object')}]` : nestedJson(5000, 'object'));
      expect(r.ok, `${f.tool}.${f.field}`).toBe(false);
      expect(r.error?.code, `${f.tool}.${f.field}`).toBe('INVALID_ARGUMENT');
      expect(r.error?.details.field, `${f.tool}.${f.field}`).toBe(f.field);
      expect(r.error?.message).toContain(`deeper than ${MAX_ARGUMENT_DEPTH} levels`);
    }
  });

  it('deep arrays in typed fields of every tool are refused the same way, never INTERNAL', async () => {
    for (const t of (await c.listTools()).tools) {
      const first = Object.keys((t.inputSchema.properties ?? {}) as object)[0] ?? 'anything';
      const r = await rawCall(t.name, first, nestedJson(5000, 'array'));
      expect(r.ok, t.name).toBe(false);
      expect(r.error, t.name).toMatchObject({ code: 'INVALID_ARGUMENT', details: { field: first } });
    }
  });

  it('nesting at the bound still reaches schema validation; one level more is refused', async () => {
    // The arguments object is level 1, skillOverrides level 2: an object nested MAX_ARGUMENT_DEPTH - 1 levels ends at the bound.
    const atBound = await call(c, 'workspace_open', { repositoryUrl: 'https://nowhere.invalid/x.git', idempotencyKey: 'depth-bound-1', skillOverrides: nested(MAX_ARGUMENT_DEPTH - 1, 'object') });
    expect(atBound.ok).toBe(false);
    if (!atBound.ok) expect(atBound.error.details.field).not.toBe('skillOverrides');
    const past = await call(c, 'workspace_open', { repositoryUrl: 'https://nowhere.invalid/x.git', idempotencyKey: 'depth-bound-2', skillOverrides: nested(MAX_ARGUMENT_DEPTH, 'object') });
    expect(past.ok).toBe(false);
    if (!past.ok) expect(past.error).toMatchObject({ code: 'INVALID_ARGUMENT', details: { field: 'skillOverrides' } });
  });
});

describe('workspace_open toolkits while managed packages are off', () => {
  it('a non-default toolkits or allowToolkitWorkspaceChanges is refused naming the field; the defaults open', async () => {
    const tk = await call(c, 'workspace_open', { repositoryUrl: repoUrl, idempotencyKey: 'toolkits-1', toolkits: ['node'] });
    expect(tk.ok).toBe(false);
    if (!tk.ok) expect(tk.error).toMatchObject({ code: 'FAILED_PRECONDITION', details: { field: 'toolkits' } });
    const allow = await call(c, 'workspace_open', { repositoryUrl: repoUrl, idempotencyKey: 'toolkits-2', allowToolkitWorkspaceChanges: true });
    expect(allow.ok).toBe(false);
    if (!allow.ok) expect(allow.error).toMatchObject({ code: 'FAILED_PRECONDITION', details: { field: 'allowToolkitWorkspaceChanges' } });
    const list = await call(c, 'workspace_list', {});
    if (!list.ok) throw new Error(list.text);
    expect((list.result.workspaces as unknown[]).length).toBe(1); // nothing was opened by the refusals
  });
});

describe('a configuration edited while running', () => {
  it('answers FAILED_PRECONDITION naming the setting, never INTERNAL; fixing the file is enough', async () => {
    const file = join(svc.dataDir, 'config.json');
    const good = readFileSync(file, 'utf8');
    const caCopy = join(svc.dataDir, 'extra-ca.pem');
    try {
      // An extra CA file that is removed after start-up.
      copyFileSync(host.caCertPath, caCopy);
      const cfg = JSON.parse(good);
      cfg.repositories.extraCaCertificates = [caCopy];
      writeFileSync(file, JSON.stringify(cfg));
      rmSync(caCopy);
      const gone = await call(c, 'workspace_open', { repositoryUrl: repoUrl, idempotencyKey: 'cfg-edit-1' });
      expect(gone.ok).toBe(false);
      if (!gone.ok) expect(gone.error).toMatchObject({ code: 'FAILED_PRECONDITION', details: { setting: 'repositories.extraCaCertificates' } });
      // A file that is no longer JSON.
      writeFileSync(file, good.slice(0, -5));
      const broken = await call(c, 'workspace_open', { repositoryUrl: repoUrl, idempotencyKey: 'cfg-edit-2' });
      expect(broken.ok).toBe(false);
      if (!broken.ok) {
        expect(broken.error.code).toBe('FAILED_PRECONDITION');
        expect(broken.error.message).toMatch(/not valid JSON/);
      }
      // A rule that breaks its type.
      writeFileSync(file, JSON.stringify({ ...JSON.parse(good), repositories: { allow: 'everything' } }));
      const typed = await call(c, 'workspace_open', { repositoryUrl: repoUrl, idempotencyKey: 'cfg-edit-3' });
      expect(typed.ok).toBe(false);
      if (!typed.ok) expect(typed.error).toMatchObject({ code: 'FAILED_PRECONDITION', details: { setting: 'repositories.allow' } });
    } finally {
      writeFileSync(file, good);
    }
    const fixed = await call(c, 'workspace_status', { workspaceId: ws });
    expect(fixed.ok).toBe(true);
  });
});

describe('clients that hold connections', () => {
  let slow: Service;
  const port = () => Number(new URL(slow.url).port);

  beforeAll(async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'atelier-limits-'));
    writeFileSync(join(dataDir, 'config.json'), JSON.stringify({ httpRequestTimeoutMs: 3000, httpHeadersTimeoutMs: 1500, httpMaxUnauthenticatedConnections: 4 }));
    slow = await startService({ dataDir });
    (slow as Service & { _dir?: string })._dir = dataDir;
  }, 60_000);

  afterAll(async () => {
    await slow?.dispose();
    rmSync((slow as Service & { _dir?: string })._dir!, { recursive: true, force: true });
  });

  /** Opens a socket, writes `head`, then trickles one byte every `everyMs`; resolves with ms until the server closed it and what it answered. */
  function trickle(head: string, everyMs: number, maxMs = 20_000): Promise<{ ms: number; answer: string }> {
    return new Promise((resolve) => {
      const started = Date.now();
      const s: Socket = connect(port(), '127.0.0.1');
      let answer = '';
      let timer: NodeJS.Timeout | undefined;
      s.on('connect', () => {
        s.write(head);
        timer = setInterval(() => {
          if (!s.destroyed && s.writable) s.write('x');
        }, everyMs);
      });
      s.on('data', (d) => (answer += d));
      const done = () => {
        clearInterval(timer);
        resolve({ ms: Date.now() - started, answer });
      };
      s.on('close', done);
      s.on('error', () => undefined);
      setTimeout(() => s.destroy(), maxMs);
    });
  }

  it('trickled headers are cut after the headers timeout', async () => {
    const r = await trickle(`GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:${port()}\r\nX-Slow: `, 200);
    expect(r.ms).toBeLessThan(6000);
  });

  it('an unauthenticated trickled body to /mcp is answered 401 and closed at once', async () => {
    const r = await trickle(`POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:${port()}\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{`, 200);
    expect(r.answer).toMatch(/^HTTP\/1\.1 401/);
    expect(r.ms).toBeLessThan(2000);
  });

  it('an unauthenticated trickled body to the REST API is cut after the request timeout', async () => {
    const r = await trickle(`POST /api/v1/approvals HTTP/1.1\r\nHost: 127.0.0.1:${port()}\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{`, 200);
    expect(r.ms).toBeLessThan(7000);
  });

  it('an authenticated trickled body is cut after the request timeout too', async () => {
    const r = await trickle(
      `POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:${port()}\r\nAuthorization: Bearer ${slow.token}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: 100000\r\n\r\n{`,
      200,
    );
    expect(r.ms).toBeLessThan(7000);
  });

  it('idle unauthenticated connections are capped and time out; the owner still gets in', async () => {
    const sockets: Socket[] = [];
    const closed: boolean[] = [];
    for (let i = 0; i < 20; i++) {
      const s = connect(port(), '127.0.0.1');
      s.on('error', () => undefined);
      const idx = i;
      closed[idx] = false;
      s.on('close', () => (closed[idx] = true));
      sockets.push(s);
      await new Promise((r) => s.once('connect', r));
    }
    await new Promise((r) => setTimeout(r, 300));
    // At most the cap are still open, and they are the newest.
    expect(closed.filter((x) => !x).length).toBeLessThanOrEqual(4);
    expect(closed.slice(0, 16).every(Boolean)).toBe(true);
    // The owner connects and calls while strangers hold the rest.
    const owner = await connectV2(slow);
    expect((await owner.listTools()).tools.length).toBe(ALL_TOOLS);
    await owner.close();
    // Idle strangers are gone after the idle bound.
    for (let i = 0; i < 200 && !closed.every(Boolean); i++) await new Promise((r) => setTimeout(r, 50));
    expect(closed.every(Boolean)).toBe(true);
    for (const s of sockets) s.destroy();
  });
});
