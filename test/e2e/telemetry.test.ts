/**
 * Traces and metrics (issue #35 items 4 and 5) through the real `atelier serve`, its gateway child,
 * real agent runtimes and the official MCP client: an OTLP/HTTP receiver on loopback (this file's
 * collector) gets the spans of a workspace open, an exec, a commit and push, and an agent run, with
 * their parent links across the runner, the agent runtime and the gateway; no attribute holds a
 * token, a key or file content. /metrics is read with a Prometheus text parser.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Client } from '@modelcontextprotocol/client';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
// @ts-expect-error no type declarations
import parsePrometheusTextFormat from 'parse-prometheus-text-format';
import { startAgentEnv, PROVIDER_KEY, REPO, type AgentEnv } from './agents-fixture.js';
import { call, httpRequest } from './harness.js';

interface OtlpSpan {
  service: string;
  traceId: string;
  spanId: string;
  parentSpanId: string;
  name: string;
  kind: number;
  attributes: Record<string, unknown>;
  status: { code?: number; message?: string };
  raw: unknown;
}

/** A minimal OTLP/HTTP JSON traces receiver (what the exporter sends: ExportTraceServiceRequest as JSON). */
async function startCollector(): Promise<{ url: string; spans: OtlpSpan[]; bodies: string[]; close(): Promise<void> }> {
  const spans: OtlpSpan[] = [];
  const bodies: string[] = [];
  const hex = (v: unknown) => (typeof v === 'string' ? (/^[0-9a-f]*$/.test(v) ? v : Buffer.from(v, 'base64').toString('hex')) : '');
  const value = (v: Record<string, unknown>): unknown => v.stringValue ?? v.boolValue ?? (v.intValue !== undefined ? Number(v.intValue) : undefined) ?? v.doubleValue ?? v.arrayValue ?? v.kvlistValue ?? v.bytesValue;
  const attrs = (list: unknown) => Object.fromEntries(((list as Array<{ key: string; value: Record<string, unknown> }>) ?? []).map((a) => [a.key, value(a.value)]));
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      const text = Buffer.concat(chunks).toString('utf8');
      if (req.method !== 'POST' || req.url !== '/v1/traces' || !String(req.headers['content-type']).includes('json')) {
        res.writeHead(415).end();
        return;
      }
      bodies.push(text);
      const body = JSON.parse(text) as { resourceSpans: Array<{ resource: { attributes: unknown }; scopeSpans: Array<{ spans: Array<Record<string, unknown>> }> }> };
      for (const rs of body.resourceSpans ?? []) {
        const service = String(attrs(rs.resource?.attributes)['service.name']);
        for (const ss of rs.scopeSpans ?? [])
          for (const s of ss.spans ?? [])
            spans.push({ service, traceId: hex(s.traceId), spanId: hex(s.spanId), parentSpanId: hex(s.parentSpanId ?? ''), name: String(s.name), kind: Number(s.kind), attributes: attrs(s.attributes), status: (s.status ?? {}) as OtlpSpan['status'], raw: s });
      }
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, spans, bodies, close: () => new Promise((r) => server.close(() => r())) };
}

let e: AgentEnv;
let collector: Awaited<ReturnType<typeof startCollector>>;
const SECRET_FILE_TEXT = 'telemetry-file-content-marker-7f3a9c';

/** Waits (polling the collector) until the spans satisfy pred; exports are batched, so they come in a while. */
async function spansUntil(what: string, pred: (s: OtlpSpan[]) => boolean, ms = 60_000): Promise<OtlpSpan[]> {
  const until = Date.now() + ms;
  while (Date.now() < until) {
    if (pred(collector.spans)) return collector.spans;
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`spans never showed ${what}; got: ${collector.spans.map((s) => `${s.service}:${s.name}`).join(', ')}`);
}

const byId = (id: string) => collector.spans.find((s) => s.spanId === id);

beforeAll(async () => {
  collector = await startCollector();
  e = await startAgentEnv({ args: ['--otlp-traces-endpoint', `${collector.url}/v1/traces`] });
  await e.makeProfile('coder-chat', 'chat-completions');
}, 180_000);
afterAll(async () => {
  await e?.dispose();
  await collector?.close();
});

describe('traces', () => {
  it('a workspace open is one trace: the tools/call span (SERVER) with the registry steps under it', async () => {
    const spans = await spansUntil('workspace_open', (s) => s.some((x) => x.name === 'tools/call workspace_open'));
    const open = spans.find((x) => x.name === 'tools/call workspace_open')!;
    expect(open.kind).toBe(2); // SERVER
    expect(open.attributes).toMatchObject({ 'mcp.method.name': 'tools/call', 'gen_ai.tool.name': 'workspace_open', 'atelier.outcome': 'ok', 'atelier.workspace.id': e.ws });
    const children = spans.filter((x) => x.parentSpanId === open.spanId).map((x) => x.name);
    // A keyed call runs under the idempotency step; a state-changing one is audited.
    expect(children).toEqual(expect.arrayContaining(['registry.access', 'registry.parse', 'registry.resolve', 'registry.idempotent', 'registry.redact', 'registry.audit']));
    const keyed = spans.find((x) => x.parentSpanId === open.spanId && x.name === 'registry.idempotent')!;
    expect(spans.some((x) => x.parentSpanId === keyed.spanId && x.name === 'registry.run')).toBe(true);
  });

  it('an exec parented by params._meta.traceparent (SEP-414): the call, its run step and the daemon request in the caller\'s trace', async () => {
    const traceId = '4bf92f3577b34da6a3ce929d0e0e4736';
    const parent = '00f067aa0ba902b7';
    const r = (await e.mcp.callTool({ name: 'exec_run', arguments: { workspaceId: e.ws, command: 'echo hello-from-exec' }, _meta: { traceparent: `00-${traceId}-${parent}-01` } })) as { isError?: boolean };
    expect(r.isError).not.toBe(true);
    const spans = await spansUntil('the exec under the given parent', (s) => s.some((x) => x.name === 'tools/call exec_run' && x.traceId === traceId));
    const exec = spans.find((x) => x.name === 'tools/call exec_run' && x.traceId === traceId)!;
    expect(exec.parentSpanId).toBe(parent);
    const run = spans.find((x) => x.parentSpanId === exec.spanId && x.name === 'registry.run')!;
    expect(run).toBeDefined();
    // The daemon request is somewhere below the run step, in the same trace.
    const inTrace = spans.filter((x) => x.traceId === traceId);
    const daemon = inTrace.filter((x) => x.name.startsWith('daemon '));
    expect(daemon.length).toBeGreaterThan(0);
    for (const d of daemon) {
      expect(d.kind).toBe(3); // CLIENT
      let p = byId(d.parentSpanId);
      while (p && p.spanId !== exec.spanId) p = byId(p.parentSpanId);
      expect(p?.spanId).toBe(exec.spanId);
    }
  });

  it('the traceparent header parents a call too; a malformed one is ignored and the call still answers', async () => {
    const traceId = 'a1b2c3d4e5f60718293a4b5c6d7e8f90';
    const parent = '1122334455667788';
    const client = new Client({ name: 'telemetry-header', version: '1.0.0' });
    await client.connect(new StreamableHTTPClientTransport(new URL(e.svc.mcpUrl), { requestInit: { headers: { Authorization: `Bearer ${e.svc.token}`, traceparent: `00-${traceId}-${parent}-01` } } }));
    expect((await call(client, 'git_status', { workspaceId: e.ws })).ok).toBe(true);
    await client.close();
    const spans = await spansUntil('git_status under the header parent', (s) => s.some((x) => x.name === 'tools/call git_status' && x.traceId === traceId));
    expect(spans.find((x) => x.name === 'tools/call git_status' && x.traceId === traceId)!.parentSpanId).toBe(parent);
    // git's own span (the subcommand only) under the call.
    expect(spans.some((x) => x.traceId === traceId && x.name === 'git status')).toBe(true);

    const bad = new Client({ name: 'telemetry-bad-header', version: '1.0.0' });
    await bad.connect(new StreamableHTTPClientTransport(new URL(e.svc.mcpUrl), { requestInit: { headers: { Authorization: `Bearer ${e.svc.token}`, traceparent: 'zz-not-a-trace' } } }));
    const r = (await bad.callTool({ name: 'git_status', arguments: { workspaceId: e.ws }, _meta: { traceparent: '00-00000000000000000000000000000000-0000000000000000-01' } })) as { isError?: boolean };
    expect(r.isError).not.toBe(true);
    await bad.close();
  });

  it('a commit and push: git spans under the call, the network half a CLIENT span naming the host only', async () => {
    await e.ok('files_write', { workspaceId: e.ws, path: 'notes.txt', content: `${SECRET_FILE_TEXT}\n` });
    await e.ok('git_add', { workspaceId: e.ws, paths: ['notes.txt'] });
    await e.ok('git_commit', { workspaceId: e.ws, message: 'telemetry notes', authorName: 'Tele Metry', authorEmail: 'tm@example.com' });
    const pushed = await e.ok('git_push', { workspaceId: e.ws, idempotencyKey: 'telemetry-push' });
    expect(pushed.outcome).toBe('fast-forward');
    const spans = await spansUntil('git_push with its network span', (s) => {
      const push = s.find((x) => x.name === 'tools/call git_push');
      return !!push && s.some((x) => x.name === 'git network' && x.traceId === push.traceId);
    });
    const push = spans.find((x) => x.name === 'tools/call git_push')!;
    const net = spans.find((x) => x.name === 'git network' && x.traceId === push.traceId)!;
    expect(net.kind).toBe(3);
    expect(net.attributes['server.address']).toBe('127.0.0.1');
    expect(net.attributes['atelier.exit_code']).toBe(0);
    const commit = spans.find((x) => x.name === 'tools/call git_commit')!;
    expect(spans.some((x) => x.traceId === commit.traceId && x.name === 'git commit')).toBe(true);
  });

  it('an agent run: invoke_agent under the agent_spawn call, turns under it, each model request (gateway, GenAI conventions) and proxied call under its turn', async () => {
    const name = 'telemetry-agent';
    e.fake.scripts.set(name, (c) => {
      if (!c.hasTools) return { text: 'summary' };
      if (c.step === 0) return { calls: [{ name: 'exec_run', args: { command: 'echo agent-exec' } }] };
      return { text: 'done with telemetry' };
    });
    const r = await e.ok('agent_spawn', { workspaceId: e.ws, idempotencyKey: 'telemetry-agent-1', profileId: 'coder-chat', prompt: `#agent=${name} run echo`, proxyOperations: ['exec_run', 'files_read'] });
    const agentId = r.agentId as string;
    const end = await e.waitEnd(agentId, 120_000);
    expect(end.status, JSON.stringify(end)).toBe('SUCCEEDED');
    // The runtime sent its turns' context to the gateway (through the runner's relay).
    const spans = await spansUntil('the agent tree', (s) => {
      const run = s.find((x) => x.name === 'invoke_agent' && x.attributes['gen_ai.agent.id'] === agentId);
      return !!run && s.filter((x) => x.service === 'atelier-gateway' && x.traceId === run.traceId).length >= 2 && s.filter((x) => x.name === 'agent turn' && x.traceId === run.traceId).length >= 2;
    }, 90_000);
    const spawn = spans.find((x) => x.name === 'tools/call agent_spawn')!;
    const run = spans.find((x) => x.name === 'invoke_agent' && x.attributes['gen_ai.agent.id'] === agentId)!;
    expect(run.traceId).toBe(spawn.traceId);
    // invoke_agent hangs from the spawn call (through its run step).
    let p = byId(run.parentSpanId);
    while (p && p.spanId !== spawn.spanId) p = byId(p.parentSpanId);
    expect(p?.spanId).toBe(spawn.spanId);
    expect(run.attributes).toMatchObject({ 'gen_ai.operation.name': 'invoke_agent', 'gen_ai.request.model': 'agent-model', 'atelier.agent.status': 'SUCCEEDED' });
    const turns = spans.filter((x) => x.name === 'agent turn' && x.traceId === run.traceId);
    for (const t of turns) expect(t.parentSpanId).toBe(run.spanId);
    const turnIds = new Set(turns.map((t) => t.spanId));
    const gw = spans.filter((x) => x.service === 'atelier-gateway' && x.traceId === run.traceId);
    for (const g of gw) {
      expect(turnIds.has(g.parentSpanId), `gateway span ${g.name} parent ${g.parentSpanId}`).toBe(true);
      expect(g.name).toBe('chat agent-model');
      expect(g.kind).toBe(3);
      expect(g.attributes).toMatchObject({ 'gen_ai.operation.name': 'chat', 'gen_ai.provider.name': 'provider_a', 'gen_ai.request.model': 'agent-model', 'atelier.agent.id': agentId });
      expect(g.attributes['gen_ai.usage.input_tokens']).toBeGreaterThan(0);
      expect(g.attributes['gen_ai.usage.output_tokens']).toBeGreaterThan(0);
      expect(g.attributes['atelier.gen_ai.cost_micros']).toBeGreaterThan(0);
    }
    // The proxied exec_run: a tools/call span under the first turn, with the agent as actor.
    const proxied = spans.find((x) => x.name === 'tools/call exec_run' && x.traceId === run.traceId)!;
    expect(proxied.attributes['atelier.actor']).toBe(agentId);
    expect(turnIds.has(proxied.parentSpanId)).toBe(true);
  }, 240_000);

  it('an egress decision is a span of its own trace: host, port, verdict and reason, never the request', async () => {
    const st = await e.ok('workspace_status', { workspaceId: e.ws });
    const r = await e.ok('workspace_open', { repositoryUrl: st.repositoryUrl, idempotencyKey: 'telemetry-deps', networkProfile: 'dependency-access' });
    const id = r.workspaceId as string;
    try {
      const x = await e.ok('exec_run', { workspaceId: id, command: 'curl -s -m 10 -o /dev/null -w "%{http_code}" https://example.com/telemetry-path?q=secret-query || true' });
      expect(String(x.stdout)).toContain('000');
      const refused = (y: OtlpSpan) => y.name === 'egress CONNECT' && y.attributes['atelier.workspace.id'] === id && y.attributes['server.address'] === 'example.com';
      const spans = await spansUntil('the egress decision', (s) => s.some(refused));
      const d = spans.find(refused)!;
      expect(d.parentSpanId).toBe('');
      expect(d.attributes).toMatchObject({ 'server.address': 'example.com', 'server.port': 443, 'atelier.egress.allowed': false });
      expect(String(d.attributes['atelier.egress.reason'])).toMatch(/not in the allowed/);
      expect(d.status.code).toBe(2); // ERROR
      expect(JSON.stringify(d.raw)).not.toContain('secret-query');
    } finally {
      await e.ok('workspace_close', { workspaceId: id });
      await e.ok('workspace_set_active', { workspaceId: e.ws });
    }
  }, 180_000);

  it('no attribute of any span holds a token, a key, a lease or file content (hostile check over every span)', async () => {
    await spansUntil('some spans', (s) => s.length > 20);
    const forbidden = [e.svc.token, PROVIDER_KEY, e.host.token, SECRET_FILE_TEXT, 'hello-from-exec', 'agent-exec', ...Object.values(REPO).map((t) => t.trim()).filter((t) => t.length > 8)].filter(Boolean);
    // The gateway leases (atlg_…) and owner tokens (atl_…) by shape too, and no Authorization value.
    const shapes = [/atlg_[A-Za-z0-9_-]{10,}/, /\batl_[A-Za-z0-9_-]{10,}/, /Bearer /i, /sk-agent/];
    for (const body of collector.bodies) {
      const parsed = JSON.parse(body) as { resourceSpans: Array<{ resource: { attributes: Array<{ value: unknown }> }; scopeSpans: Array<{ spans: Array<{ attributes?: Array<{ key: string; value: unknown }>; events?: unknown; name: string; status?: unknown }> }> }> };
      for (const rs of parsed.resourceSpans) {
        const values: string[] = [JSON.stringify(rs.resource.attributes)];
        for (const ss of rs.scopeSpans) for (const s of ss.spans) values.push(s.name, JSON.stringify(s.attributes ?? []), JSON.stringify(s.events ?? []), JSON.stringify(s.status ?? {}));
        for (const v of values) {
          for (const f of forbidden) expect(v.includes(f), `a span carries ${f.slice(0, 12)}…: ${v.slice(0, 300)}`).toBe(false);
          for (const re of shapes) expect(re.test(v), `a span matches ${re}: ${v.slice(0, 300)}`).toBe(false);
        }
      }
    }
  });
});

describe('/metrics', () => {
  it('is Prometheus text from prom-client: process metrics, calls and latency by tool and outcome, workspaces and agents by state, sandbox totals, spend by window, the login counters', async () => {
    const r = await httpRequest(e.svc.url, 'GET', '/metrics', { authorization: `Bearer ${e.svc.token}` });
    expect(r.status).toBe(200);
    const families = parsePrometheusTextFormat(r.body) as Array<{ name: string; type: string; metrics: Array<{ labels?: Record<string, string>; value?: string; buckets?: Record<string, string>; count?: string }> }>;
    const fam = (n: string) => {
      const f = families.find((x) => x.name === n);
      expect(f, `metric ${n}`).toBeDefined();
      return f!;
    };
    const val = (n: string, labels: Record<string, string> = {}) => Number(fam(n).metrics.find((m) => Object.entries(labels).every(([k, v]) => m.labels?.[k] === v))?.value ?? NaN);
    // Default process metrics.
    for (const n of ['process_cpu_user_seconds_total', 'process_resident_memory_bytes', 'nodejs_heap_size_used_bytes', 'nodejs_eventloop_lag_seconds']) fam(n);
    expect(fam('atelier_info').metrics[0]!.labels!.version).toMatch(/\d+\.\d+/);
    expect(val('atelier_uptime_seconds')).toBeGreaterThanOrEqual(0);
    expect(fam('atelier_tool_calls_total').type).toBe('COUNTER');
    expect(val('atelier_tool_calls_total', { tool: 'exec_run', outcome: 'ok' })).toBeGreaterThanOrEqual(2);
    const hist = fam('atelier_tool_call_duration_seconds');
    expect(hist.type).toBe('HISTOGRAM');
    // This parser folds the series of a labelled histogram into one (its flattenMetrics), so one series is read alone.
    const series = r.body.split('\n').filter((l) => l.startsWith('#') ? l.includes(' atelier_tool_call_duration_seconds ') : l.startsWith('atelier_tool_call_duration_seconds_bucket{') && l.includes('tool="exec_run",outcome="ok"'));
    const execHist = (parsePrometheusTextFormat(series.join('\n') + '\n') as typeof families)[0]!.metrics[0]!;
    expect(Number(execHist.buckets!['+Inf'])).toBeGreaterThanOrEqual(2);
    expect(Number(execHist.buckets!['0.001'])).toBeLessThanOrEqual(Number(execHist.buckets!['+Inf']));
    expect(val('atelier_workspaces', { state: 'active' })).toBeGreaterThanOrEqual(1);
    expect(val('atelier_agents', { state: 'SUCCEEDED' })).toBeGreaterThanOrEqual(1);
    expect(val('atelier_agents', { state: 'RUNNING' })).toBe(0);
    expect(val('atelier_sandboxes_running')).toBeGreaterThanOrEqual(1);
    expect(val('atelier_sandbox_memory_bytes')).toBeGreaterThan(0);
    expect(val('atelier_sandbox_pids')).toBeGreaterThan(0);
    expect(val('atelier_spend_micros', { window: 'day', state: 'settled' })).toBeGreaterThan(0);
    expect(val('atelier_spend_micros', { window: 'month', state: 'settled' })).toBeGreaterThanOrEqual(val('atelier_spend_micros', { window: 'day', state: 'settled' }));
    // Names kept from the hand-written /metrics (tests and docs use them).
    expect(val('atelier_login_password_checks_total', { outcome: 'ok' })).toBeGreaterThanOrEqual(0);
    fam('atelier_login_refused_total');
    expect(val('atelier_login_lockouts_total', { scope: 'overall' })).toBe(0);
    fam('atelier_login_password_checks_running_max');
    fam('atelier_file_handoffs_total');
    // Still behind the owner's bearer token.
    expect((await httpRequest(e.svc.url, 'GET', '/metrics')).status).toBe(401);
  });
});
