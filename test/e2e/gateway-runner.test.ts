/**
 * The runner's side of the gateway (issue #8): rule 8 lease checks, the usage ledger, the embedded
 * child of `atelier serve`, REST GET /api/v1/model-spend and /api/v1/spend-policies, and the
 * model_spend_summary tool.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { execFileSync, spawn } from 'node:child_process';
import { createServer } from 'node:http';
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { startFakeProvider, type FakeProvider } from '../fixtures/fake-provider.js';
import { BIN, call, connectV2, dashboardLogin, startService, type Service, httpRequest } from './harness.js';
import { sleep, until } from './gateway-harness.js';

let fake: FakeProvider;
beforeAll(async () => {
  fake = await startFakeProvider();
});
afterAll(async () => {
  await fake?.close();
});

/** The gateway children of a process ("PID ARGS" lines); ps exits 1 when there are none. */
function children(ppid: number): string[] {
  try {
    return execFileSync('ps', ['-o', 'pid=,args=', '--ppid', String(ppid)], { encoding: 'utf8' }).split('\n').filter((l) => l.includes(' gateway '));
  } catch {
    return [];
  }
}

async function freePort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', () => r()));
  const p = (s.address() as { port: number }).port;
  await new Promise((r) => s.close(r));
  return p;
}

describe('the runner (atelier serve) against an external gateway: routing rule 8 and the usage ledger', () => {
  const dir = mkdtempSync(join(tmpdir(), 'atelier-gwc-'));
  const secretFile = join(dir, 'secret');
  writeFileSync(secretFile, 'a-very-long-shared-admin-secret\n', { mode: 0o600 });
  const configPath = join(dir, 'config.json');
  let port = 0;
  let proc: ReturnType<typeof spawn> | null = null;
  const startGw = async () => {
    const p = spawn(process.execPath, [BIN, 'gateway', '--port', String(port), '--admin-secret-file', secretFile], { stdio: ['ignore', 'pipe', 'pipe'] });
    await new Promise<void>((resolve, reject) => {
      let out = '';
      p.stdout!.on('data', (d) => {
        out += d;
        if (out.includes('listening at')) resolve();
      });
      p.once('exit', (c) => reject(new Error(`gateway exited ${c}`)));
    });
    proc = p;
  };
  const stopGw = async () => {
    const p = proc;
    if (!p) return;
    proc = null;
    p.kill('SIGKILL');
    await new Promise((r) => p.once('exit', r));
  };
  afterAll(async () => {
    await stopGw();
    rmSync(dir, { recursive: true, force: true });
  });

  let svc: Service | undefined;
  afterAll(async () => {
    await svc?.dispose();
  });

  it('atelier serve pushes its routes, ledgers usage, marks a dead boot unreconciled and pushes again after a restart', async () => {
    port = await freePort();
    await startGw();
    const gwUrl = `http://127.0.0.1:${port}`;
    const dataDir = mkdtempSync(join(tmpdir(), 'atelier-gwc-serve-'));
    writeFileSync(join(dataDir, 'config.json'), JSON.stringify({ providers: { provider_a: { baseUrl: fake.url + '/v1' } } }));
    svc = await startService({ args: ['--unsafe-dev-no-sandbox', '--gateway-url', gwUrl, '--gateway-admin-secret-file', secretFile], dataDir });
    const s = svc;
    const disposeSvc = s.dispose.bind(s);
    s.dispose = async () => {
      await disposeSvc();
      rmSync(dataDir, { recursive: true, force: true });
    };
    const admin = async (method: string, path: string, body?: unknown) => {
      const r = await fetch(gwUrl + path, { method, headers: { authorization: 'Bearer a-very-long-shared-admin-secret', 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });
      return { status: r.status, body: (await r.json()) as any };
    };
    const { cookie, csrf } = await dashboardLogin(s);
    const rest = async (method: string, path: string, body?: unknown) => {
      const r = await httpRequest(s.url, method, path, { cookie, 'x-csrf-token': csrf, ...(body === undefined ? {} : { 'content-type': 'application/json' }) }, body === undefined ? undefined : JSON.stringify(body));
      return { status: r.status, body: JSON.parse(r.body || '{}') };
    };
    const spendDay = async () => (await rest('GET', '/api/v1/model-spend?period=day')).body.windows[0] as Record<string, number>;

    // The owner makes a profile on the dashboard; activating it pushes the route to the external gateway.
    const cred = await rest('POST', '/api/v1/provider-credentials', { provider: 'provider_a', key: 'KEY-RUNNER' });
    expect(cred.status).toBe(201);
    const PRICING = { inputMicrosPerMillionTokens: 2_000_000, outputMicrosPerMillionTokens: 8_000_000, cachedReadMicrosPerMillionTokens: 500_000, cachedWriteMicrosPerMillionTokens: null };
    const made = await rest('POST', '/api/v1/agent-model-profiles', { profileId: 'prof', displayName: 'P', credentialId: cred.body.credential.id, model: 'm-1', apiMode: 'chat-completions', pricing: PRICING, limits: { maxInputTokens: 100000, maxOutputTokens: 1000, maxCostMicros: 1_000_000 }, maxProxyOperations: [], idempotencyKey: 'gwc-prof-1' });
    expect(made.status, JSON.stringify(made.body)).toBe(201);
    const act = await rest('POST', '/api/v1/agent-model-profiles/prof/activate', { expectedGeneration: 1 });
    expect(act.body.gatewayPush).toEqual({ ok: true });
    const st = (await admin('GET', '/admin/status')).body;
    expect(st).toMatchObject({ noProfilesSinceRestart: false, profileCount: 1 });

    // A lease as agent_spawn will issue it (the agent tools are not built yet: the test asks the gateway's admin API).
    const leaseReq = { agentId: 'agent_' + 'b'.repeat(22), profileId: 'prof', revision: 1, budgets: { maxInputTokens: 100000, maxOutputTokens: 1000, maxCostMicros: 1_000_000 }, expiresAt: new Date(Date.now() + 600_000).toISOString() };
    const lease = (await admin('POST', '/admin/leases', leaseReq)).body as { token: string };
    const c = new OpenAI({ baseURL: gwUrl + '/v1', apiKey: lease.token, maxRetries: 0 });
    await c.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'hi' }] });
    expect(fake.requests.at(-1)!.headers.authorization).toBe('Bearer KEY-RUNNER');
    // The runner pulls the gateway's usage into its ledger (every 2 s and before every summary).
    await until(async () => (await spendDay()).settledMicros === 450, 10_000);
    expect(await spendDay()).toMatchObject({ settledMicros: 450, reservedMicros: 0, unreconciledMicros: 0 });

    // An open reservation when the gateway dies becomes unreconciled at its reserved amount once a new boot is seen.
    const stream = await c.chat.completions.create({ model: 'm', stream: true, messages: [{ role: 'user', content: '#deltas=50 #deltaDelay=20' }] });
    const it = stream[Symbol.asyncIterator]();
    await it.next();
    await until(async () => (await spendDay()).reservedMicros > 0, 10_000);
    await stopGw();
    // While it is down the runner says so.
    await until(async () => (await rest('GET', '/api/v1/agent-model-config-status')).body.gateway?.answered === false, 10_000);
    await startGw();
    // The runner's next pull sees the new boot and closes the dead boot's open reservation.
    await until(async () => (await spendDay()).reservedMicros === 0, 15_000);
    expect((await admin('GET', '/admin/status')).body).toMatchObject({ noProfilesSinceRestart: true, profileCount: 0 });
    // Rule 8: the next push (here the owner saving a policy; agent_spawn pushes before its lease) restores the routes.
    const saved = await rest('PUT', '/api/v1/spend-policies', { dailyCapMicros: 5_000_000 });
    expect(saved.body.gatewayPush).toEqual({ ok: true });
    expect((await admin('GET', '/admin/status')).body).toMatchObject({ noProfilesSinceRestart: false, profileCount: 1 });
    const w = await spendDay();
    expect(w.settledMicros).toBe(450);
    expect(w.unreconciledMicros).toBeGreaterThan(0);
    // The pushed baseline carries the earlier boot's spend, so policies hold across the restart.
    await until(async () => (await admin('GET', '/admin/windows')).body.windows[0].baselineMicros === w.totalMicros, 10_000);
  }, 120_000);
});

describe('atelier serve: the embedded gateway child, spend REST and model_spend_summary', () => {
  let svc: Service;
  beforeAll(async () => {
    svc = await startService({ args: ['--unsafe-dev-no-sandbox'] });
  });
  afterAll(async () => {
    await svc?.dispose();
  });

  const raw = (method: string, path: string, headers: Record<string, string> = {}, body?: string) => httpRequest(svc.url, method, path, headers, body);

  it('starts the gateway child with a private admin secret, restarts it when it dies, and stops it on shutdown', async () => {
    const secretFile = join(svc.dataDir, 'state', 'gateway-admin.secret');
    expect(statSync(secretFile).mode & 0o777).toBe(0o600);
    const kids = () => children(svc.proc.pid!);
    const first = await until(() => kids()[0]);
    const pid = Number(first.trim().split(/\s+/)[0]);
    process.kill(pid, 'SIGKILL');
    const second = await until(() => {
      const k = kids()[0];
      return k && Number(k.trim().split(/\s+/)[0]) !== pid ? k : undefined;
    }, 10_000);
    expect(second).toContain('--admin-secret-file');
    expect(readFileSync(secretFile, 'utf8').length).toBeGreaterThan(20);
    await until(() => svc.stderr().split('snapshot applied').length >= 3, 10_000); // pushed again after the restart
  });

  it('spend policies on REST (session + CSRF), GET /api/v1/model-spend and model_spend_summary agree', async () => {
    const link = new URL(svc.loginLink);
    const first = await raw('GET', link.pathname + link.search);
    const cookie = String(first.headers['set-cookie']).split(';')[0]!;
    const csrf = JSON.parse((await raw('GET', '/api/v1/session', { cookie })).body).csrfToken as string;
    expect((await raw('GET', '/api/v1/model-spend')).status).toBe(401);
    expect((await raw('PUT', '/api/v1/spend-policies', { cookie, 'content-type': 'application/json' }, '{"dailyCapMicros":1}')).status).toBe(403);
    const bad = await raw('PUT', '/api/v1/spend-policies', { cookie, 'x-csrf-token': csrf, 'content-type': 'application/json' }, JSON.stringify({ dailyCapMicros: -5 }));
    expect(bad.status).toBe(400);
    const put = await raw('PUT', '/api/v1/spend-policies', { cookie, 'x-csrf-token': csrf, 'content-type': 'application/json' }, JSON.stringify({ dailyCapMicros: 5_000_000, monthlyCapMicros: 50_000_000 }));
    expect(put.status).toBe(200);
    expect(JSON.parse(put.body)).toMatchObject({ policies: { dailyCapMicros: 5_000_000, monthlyCapMicros: 50_000_000, perAgentCapMicros: null }, gatewayPush: { ok: true } });
    const rest = JSON.parse((await raw('GET', '/api/v1/model-spend', { cookie })).body);
    expect(rest).toMatchObject({ estimate: true, unit: 'micro-USD', policies: { dailyCapMicros: 5_000_000 } });
    expect(rest.note).toMatch(/not provider invoices/);
    expect(rest.windows.map((w: { period: string }) => w.period)).toEqual(['day', 'month']);
    expect(rest.windows[0]).toMatchObject({ settledMicros: 0, reservedMicros: 0, unreconciledMicros: 0, policy: { capMicros: 5_000_000, remainingMicros: 5_000_000 } });
    const day = JSON.parse((await raw('GET', '/api/v1/model-spend?period=day', { cookie })).body);
    expect(day.windows).toHaveLength(1);
    const c = await connectV2(svc);
    const r = await call(c, 'model_spend_summary', { period: 'month' });
    expect(r.ok).toBe(true);
    if (r.ok) expect(r.result).toMatchObject({ windows: [{ period: 'month', policy: { capMicros: 50_000_000 } }], estimate: true });
    await c.close();
  });

  it('stops the gateway child with the service', async () => {
    const kids = children(svc.proc.pid!);
    const pid = Number(kids[0]!.trim().split(/\s+/)[0]);
    await svc.stop();
    const gone = () => {
      try {
        process.kill(pid, 0);
        return false;
      } catch {
        return true;
      }
    };
    // Polled: the child ends a moment after the service on a loaded machine.
    expect(await until(gone, 10_000).catch(() => false)).toBe(true);
  });
});
