/**
 * The dynamic mode (issue #45 item 2; docs/access.md "Dynamic toolsets") against the real
 * `atelier serve`, with both official clients: a 2025-11-25 client (the v1 SDK, with its session)
 * and a 2026-07-28 client (the v2 SDK, with a subscriptions/listen stream asking for
 * toolsListChanged). The starting list is the core toolsets and the discovery tools; enabling a
 * toolset sends the list change to that connection only and the next list has it; a narrowed or
 * read-only token cannot reach beyond its access; a client a list change cannot reach gets the
 * static list and is told why; hostile input is refused naming the field.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { Client as ClientV1 } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport as TransportV1 } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { encode } from 'gpt-tokenizer/encoding/o200k_base';
import { call, httpRequest, runCli, startService, type AnyClient, type Service } from './harness.js';
import { ALL_TOOLS } from './spec.js';
import { CATALOG } from '../../src/tools/index.js';
import { CORE_TOOLS as CORE, TOOLSETS } from '../../src/core/toolsets.js';

let svc: Service;
beforeAll(async () => {
  svc = await startService();
}, 60_000);
afterAll(async () => {
  await svc?.dispose();
});

const DYNAMIC = { 'X-MCP-Dynamic-Toolsets': 'true' };
const CORE_TOOLS = CATALOG.filter((d) => CORE.has(d.name)).map((d) => d.name);
const STARTING = [...CORE_TOOLS, 'toolsets_list', 'toolsets_enable'].sort();
const inToolset = (ts: string) => CATALOG.filter((d) => d.domain === TOOLSETS[ts]).map((d) => d.name);

/** What the starting list costs: its bytes and its o200k tokens (the unit of issue #45's goals), as `tools/list` sends it. */
export function startingListCost(tools: unknown[]): { tools: number; bytes: number; tokens: number } {
  const json = JSON.stringify({ tools });
  return { tools: tools.length, bytes: Buffer.byteLength(json), tokens: encode(json).length };
}

async function token(...flags: string[]): Promise<string> {
  const r = await runCli(['token', 'create', '--name', 'dynamic e2e', '--json', ...flags, '--data-dir', svc.dataDir]);
  if (r.code !== 0) throw new Error(r.stderr);
  return (JSON.parse(r.stdout) as { token: string }).token;
}

/** Waits for `cond`, polling (generous bound; never a fixed sleep standing in for the event). */
async function until(cond: () => boolean, what: string, ms = 15_000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

interface Watched<C> {
  client: C;
  /** Lists the client refreshed on a list change (its SDK's listChanged handler). */
  changes: string[][];
}

/** A 2026-07-28 client that listens for list changes (the v2 SDK opens subscriptions/listen at connect). */
async function modern(tok: string, headers: Record<string, string> = DYNAMIC, listen = true): Promise<Watched<Client>> {
  const changes: string[][] = [];
  const client = new Client(
    { name: 'dynamic-e2e-v2', version: '1.0.0' },
    {
      // The v2 client negotiates 2025-11-25 unless told otherwise.
      versionNegotiation: { mode: { pin: '2026-07-28' } },
      ...(listen ? { listChanged: { tools: { debounceMs: 0, onChanged: (err, tools) => void (err ? undefined : changes.push((tools ?? []).map((t) => t.name).sort())) } } } : {}),
    },
  );
  await client.connect(new StreamableHTTPClientTransport(new URL(svc.mcpUrl), { requestInit: { headers: { Authorization: `Bearer ${tok}`, ...headers } } }));
  return { client, changes };
}

/** A 2025-11-25 client with its session (the v1 SDK keeps the Mcp-Session-Id it got at initialize). */
async function legacy(tok: string, headers: Record<string, string> = DYNAMIC): Promise<Watched<ClientV1>> {
  const changes: string[][] = [];
  const client = new ClientV1(
    { name: 'dynamic-e2e-v1', version: '1.0.0' },
    { listChanged: { tools: { debounceMs: 0, onChanged: (err, tools) => void (err ? undefined : changes.push((tools ?? []).map((t) => t.name).sort())) } } },
  );
  await client.connect(new TransportV1(new URL(svc.mcpUrl), { requestInit: { headers: { Authorization: `Bearer ${tok}`, ...headers } } }));
  return { client, changes };
}

const names = async (c: AnyClient): Promise<string[]> => ((await (c as Client).listTools()).tools as Array<{ name: string }>).map((t) => t.name).sort();

describe.each([
  ['2025-11-25 (v1 SDK, with a session)', legacy],
  ['2026-07-28 (v2 SDK, subscriptions/listen)', modern],
] as const)('the dynamic mode, %s', (_era, connect) => {
  it('starts with the core and the discovery tools, and enabling a toolset sends the list change; the next list has it', async () => {
    // A token of its own: a 2026-07-28 connection is its token (there is no session to tell two apart).
    const { client, changes } = await connect(await token());
    try {
      const start = (await (client as Client).listTools()).tools;
      expect(start.map((t) => t.name).sort()).toEqual(STARTING);
      const cost = startingListCost(start);
      console.log(`dynamic mode starting list (${_era}): ${cost.tools} tools, ${cost.bytes} bytes, ${cost.tokens} tokens (o200k)`);

      const listed = await call(client, 'toolsets_list', {});
      expect(listed.ok).toBe(true);
      if (!listed.ok) return;
      expect(listed.result.mode).toBe('dynamic');
      const sets = listed.result.toolsets as Array<{ name: string; summary: string; listed: boolean; tools: string[] }>;
      expect(sets.find((s) => s.name === 'knowledge')).toMatchObject({ listed: false, tools: inToolset('knowledge') });
      // A core toolset starts with its core tools listed; the rest of it is one enable away.
      const git = sets.find((s) => s.name === 'git')!;
      expect(git).toMatchObject({ listed: false, listedTools: git.tools.filter((t) => CORE.has(t)).length });
      expect(git.listedTools).toBeGreaterThan(5);
      for (const s of sets) expect(s.summary.length, s.name).toBeGreaterThan(10);

      const r = await call(client, 'toolsets_enable', { toolsets: ['knowledge', 'lsp'] });
      expect(r.ok).toBe(true);
      if (!r.ok) return;
      expect(r.result).toMatchObject({ added: ['code-intel', 'knowledge'], enabled: ['code-intel', 'knowledge'], listChanged: 'sent' });
      await until(() => changes.length > 0, 'the list change');
      const expected = [...STARTING, ...inToolset('knowledge'), ...inToolset('code-intel')].sort();
      expect(changes.at(-1)).toEqual(expected);
      expect(await names(client)).toEqual(expected);
      // A newly listed tool is called.
      const k = await call(client, 'knowledge_list', { scope: 'owner' });
      expect(k.ok, JSON.stringify(k)).toBe(true);

      // A core toolset enabled lists the rest of its tools.
      const gitRest = inToolset('git').filter((t) => !CORE.has(t));
      expect(gitRest).toContain('worktrees_create');
      const seen = changes.length;
      const g = await call(client, 'toolsets_enable', { toolsets: ['git'] });
      expect(g.ok && g.result).toMatchObject({ added: ['git'], tools: gitRest, listChanged: 'sent' });
      await until(() => changes.length > seen, 'the second list change');
      expect(await names(client)).toEqual([...expected, ...gitRest].sort());

      // Enabling again changes nothing and sends nothing.
      const again = await call(client, 'toolsets_enable', { toolsets: ['knowledge'] });
      expect(again.ok && again.result).toMatchObject({ added: [], listChanged: 'unchanged' });
    } finally {
      await client.close();
    }
  });

  it('a narrowed token cannot enable beyond its access; what it has not enabled stays callable within it', async () => {
    const tok = await token('--toolsets', 'code,knowledge', '--dynamic-toolsets');
    const { client } = await connect(tok, {});
    try {
      expect(await names(client)).toEqual(STARTING);
      const r = await call(client, 'toolsets_enable', { toolsets: ['knowledge', 'agents'] });
      expect(r.ok).toBe(false);
      if (r.ok) return;
      expect(r.error.code).toBe('PERMISSION_DENIED');
      expect(r.error.details).toMatchObject({ field: 'toolsets', rule: 'toolset not granted' });
      expect(r.error.message).toContain('agents');
      // Nothing was enabled by the refused call.
      expect(await names(client)).toEqual(STARTING);
      // Not listed, but in the token's access: callable (the mode saves context; access is the token's).
      const k = await call(client, 'knowledge_list', { scope: 'owner' });
      expect(k.ok, JSON.stringify(k)).toBe(true);
      // Beyond the access: refused as always.
      const a = await call(client, 'agent_list', {});
      expect(!a.ok && a.error.code).toBe('PERMISSION_DENIED');
      const listed = await call(client, 'toolsets_list', {});
      expect(listed.ok && (listed.result.toolsets as Array<{ name: string }>).map((s) => s.name).sort()).toEqual(['commands', 'files', 'git', 'knowledge', 'workspace']);
    } finally {
      await client.close();
    }
  });

  it('a read-only token enables (the list is no data) and is listed only the read-only tools', async () => {
    const tok = await token('--read-only', '--dynamic-toolsets');
    const { client, changes } = await connect(tok, {});
    try {
      const readOnly = new Set(CATALOG.filter((d) => d.badges.includes('readOnly')).map((d) => d.name));
      const start = await names(client);
      expect(start).toEqual(STARTING.filter((n) => readOnly.has(n)));
      expect(start).toContain('toolsets_enable');
      const r = await call(client, 'toolsets_enable', { toolsets: ['knowledge'] });
      expect(r.ok && r.result.tools).toEqual(inToolset('knowledge').filter((n) => readOnly.has(n)));
      await until(() => changes.length > 0, 'the list change');
      expect(await names(client)).toEqual([...start, ...inToolset('knowledge').filter((n) => readOnly.has(n))].sort());
      const w = await call(client, 'knowledge_create', { title: 'x', body: 'y' });
      expect(!w.ok && w.error.code).toBe('PERMISSION_DENIED');
    } finally {
      await client.close();
    }
  });

  it('an unknown or hostile toolset name is refused naming the field', async () => {
    const { client } = await connect(await token());
    try {
      const unknown = await call(client, 'toolsets_enable', { toolsets: ['nosuchset'] });
      expect(!unknown.ok && unknown.error).toMatchObject({ code: 'INVALID_ARGUMENT', details: { field: 'toolsets' } });
      expect(!unknown.ok && unknown.error.message).toContain('unknown toolset "nosuchset"');
      for (const args of [{ toolsets: ['x'.repeat(100_000)] }, { toolsets: Array.from({ length: 5000 }, (_, i) => `t${i}`) }, { toolsets: [] }, { toolsets: 'knowledge' }, { toolsets: [{ deep: [[[[['knowledge']]]]] }] }, {}]) {
        const r = await call(client, 'toolsets_enable', args as Record<string, unknown>);
        expect(!r.ok && r.error.code, JSON.stringify(args).slice(0, 80)).toBe('INVALID_ARGUMENT');
        expect(!r.ok && String(r.error.details.field)).toMatch(/^toolsets/);
      }
      expect(await names(client)).toEqual(STARTING);
    } finally {
      await client.close();
    }
  });
});

describe('who gets the static list', () => {
  it('without the opt-in: the static list, no discovery tools, and toolsets_enable says how to ask', async () => {
    const { client } = await modern(svc.token, {});
    try {
      const all = await names(client);
      expect(all.length).toBe(ALL_TOOLS);
      expect(all).not.toContain('toolsets_enable');
      const r = await call(client, 'toolsets_enable', { toolsets: ['knowledge'] });
      expect(!r.ok && r.error).toMatchObject({ code: 'FAILED_PRECONDITION', details: { field: 'toolsets' } });
      expect(!r.ok && r.error.message).toContain('X-MCP-Dynamic-Toolsets: true');
    } finally {
      await client.close();
    }
  });

  it('a 2026-07-28 client that opens no listen stream: the static list and toolsets_list, which says why', async () => {
    const { client } = await modern(svc.token, DYNAMIC, false);
    try {
      expect(client.getServerCapabilities()?.tools?.listChanged).toBe(true);
      expect(client.getInstructions()).toContain('Dynamic toolsets');
      const all = await names(client);
      expect(all.length).toBe(ALL_TOOLS + 1);
      expect(all).toContain('toolsets_list');
      expect(all).not.toContain('toolsets_enable');
      const l = await call(client, 'toolsets_list', {});
      expect(l.ok && l.result).toMatchObject({ mode: 'static' });
      expect(l.ok && String(l.result.reason)).toContain('subscriptions/listen');
      const r = await call(client, 'toolsets_enable', { toolsets: ['knowledge'] });
      expect(!r.ok && r.error.code).toBe('FAILED_PRECONDITION');
    } finally {
      await client.close();
    }
  });

  it('a 2025-era client that keeps no session: the static list', async () => {
    const headers = { Authorization: `Bearer ${svc.token}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-11-25', ...DYNAMIC };
    const r = await httpRequest(svc.url, 'POST', '/mcp', headers, JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list', params: {} }));
    expect(r.status).toBe(200);
    const tools = (JSON.parse(r.body) as { result: { tools: Array<{ name: string }> } }).result.tools.map((t) => t.name);
    expect(tools.length).toBe(ALL_TOOLS + 1);
    expect(tools).toContain('toolsets_list');
  });

  it('X-MCP-Dynamic-Toolsets: false turns a dynamic token off; a malformed value is refused naming the header', async () => {
    const tok = await token('--dynamic-toolsets');
    const { client } = await modern(tok, { 'X-MCP-Dynamic-Toolsets': 'false' });
    try {
      expect((await names(client)).length).toBe(ALL_TOOLS);
      expect(client.getServerCapabilities()?.tools?.listChanged).toBe(false);
    } finally {
      await client.close();
    }
    const bad = await httpRequest(svc.url, 'POST', '/mcp', { Authorization: `Bearer ${svc.token}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'X-MCP-Dynamic-Toolsets': 'maybe' }, '{}');
    expect(bad.status).toBe(400);
    expect(JSON.parse(bad.body).error).toMatchObject({ code: 'INVALID_ARGUMENT', details: { field: 'X-MCP-Dynamic-Toolsets' } });
  });
});

describe('connections are apart', () => {
  it('enabling in one 2025-era session changes no other session of the same token, over many sessions', async () => {
    const first = await legacy(svc.token);
    const others = await Promise.all(Array.from({ length: 12 }, () => legacy(svc.token)));
    try {
      await Promise.all(others.map((o, i) => call(o.client, 'toolsets_enable', { toolsets: [i % 2 ? 'agents' : 'previews'] })));
      for (const o of others) await until(() => o.changes.length > 0, 'each session its own list change');
      expect(first.changes).toEqual([]);
      expect(await names(first.client)).toEqual(STARTING);
      expect(await names(others[1]!.client)).toEqual([...STARTING, ...inToolset('agents')].sort());
      expect(await names(others[0]!.client)).toEqual([...STARTING, ...inToolset('previews')].sort());
    } finally {
      await Promise.all([first, ...others].map((c) => c.client.close()));
    }
  });

  it('a 2026-07-28 change reaches the listen streams of that token only', async () => {
    const other = await token('--dynamic-toolsets');
    const a = await modern(await token());
    const b = await modern(other, {});
    try {
      const r = await call(a.client, 'toolsets_enable', { toolsets: ['artifacts'] });
      expect(r.ok && r.result.listChanged).toBe('sent');
      await until(() => a.changes.length > 0, 'the list change');
      expect(b.changes).toEqual([]);
      expect(await names(b.client)).toEqual(STARTING);
    } finally {
      await a.client.close();
      await b.client.close();
    }
  });
});
