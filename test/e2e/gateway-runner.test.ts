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
import Database from 'better-sqlite3';
import { startFakeProvider, type FakeProvider } from '../fixtures/fake-provider.js';
import { BIN, call, connectV2, startService, type Service, httpRequest } from './harness.js';
import { route, sleep, until } from './gateway-harness.js';
import { migrate } from '../../src/store/db.js';
import { SpendService } from '../../src/services/spend.js';
import { GatewayClient } from '../../src/services/gateway-client.js';
import { createLogger } from '../../src/core/log.js';
import type { Config } from '../../src/core/config.js';

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

describe('runner lease checks (routing rule 8) and the usage ledger, against an external gateway', () => {
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

  it('pushes on first use and after a restart, issues leases, reports UNAVAILABLE when unreachable, and ledgers usage', async () => {
    port = await freePort();
    writeFileSync(configPath, JSON.stringify({ providers: { provider_a: { baseUrl: fake.url + '/v1' } } }));
    await startGw();
    const db = new Database(':memory:');
    migrate(db);
    const spend = new SpendService(db);
    const config = { gatewayUrl: `http://127.0.0.1:${port}`, gatewayAdminSecretFile: secretFile, configPath, dataDir: dir, modelGatewaySessionHeader: '' } as unknown as Config;
    const gc = new GatewayClient({ config, spend, log: createLogger('silent') });
    gc.routeSource = () => [route('prof', 'provider_a', 'chat-completions', 'KEY-A') as never];
    await gc.start();
    const leaseReq = { agentId: 'agent_' + 'b'.repeat(22), profileId: 'prof', revision: 1, budgets: { maxInputTokens: 100000, maxOutputTokens: 1000, maxCostMicros: 1_000_000 }, expiresAt: new Date(Date.now() + 600_000).toISOString() };
    const l1 = await gc.issueLease(leaseReq);
    expect(l1.token).toMatch(/^atlg_/);
    const c = new OpenAI({ baseURL: l1.gatewayUrl + '/v1', apiKey: l1.token, maxRetries: 0 });
    await c.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'hi' }] });
    await gc.syncUsage();
    expect(spend.window('day')).toMatchObject({ settledMicros: 450, reservedMicros: 0, unreconciledMicros: 0 });

    // An open reservation when the gateway dies becomes unreconciled at its reserved amount once a new boot is seen.
    const stream = await c.chat.completions.create({ model: 'm', stream: true, messages: [{ role: 'user', content: '#deltas=50 #deltaDelay=20' }] });
    const it = stream[Symbol.asyncIterator]();
    await it.next();
    await gc.syncUsage();
    expect(spend.window('day').reservedMicros).toBeGreaterThan(0);
    await stopGw();
    await expect(gc.issueLease(leaseReq)).rejects.toMatchObject({ code: 'UNAVAILABLE' });
    await startGw();
    const st = await gc.status();
    expect(st.noProfilesSinceRestart).toBe(true);
    const l2 = await gc.issueLease(leaseReq); // rule 8: pushed again first
    expect(l2.token).toMatch(/^atlg_/);
    expect((await gc.status()).noProfilesSinceRestart).toBe(false);
    await gc.syncUsage();
    const w = spend.window('day');
    expect(w.reservedMicros).toBe(0);
    expect(w.settledMicros).toBe(450);
    expect(w.unreconciledMicros).toBeGreaterThan(0);
    // The pushed baseline carries the earlier boot's spend, so policies hold across the restart.
    const win = await fetch(`http://127.0.0.1:${port}/admin/windows`, { headers: { authorization: 'Bearer a-very-long-shared-admin-secret' } }).then((r) => r.json());
    expect(win.windows[0].baselineMicros).toBe(w.totalMicros);
    await gc.stop();
  });
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
    await sleep(300);
    expect(() => process.kill(pid, 0)).toThrow();
  });
});
