/**
 * Coding subagents against an external gateway that the test stops and starts: routing rule 8
 * (UNAVAILABLE at spawn), agent rule 2 (killed between the checks: cancelled, FAILED once the
 * gateway confirms cleanup), and a runner restart leaving running agents INTERRUPTED.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawn as spawnProc, type ChildProcess } from 'node:child_process';
import { createServer } from 'node:http';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BIN, call, connectV2, startService, type Service } from './harness.js';
import { startAgentEnv, runtimeProcesses, type AgentEnv } from './agents-fixture.js';

async function freePort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', () => r()));
  const p = (s.address() as { port: number }).port;
  await new Promise((r) => s.close(r));
  return p;
}

const dir = mkdtempSync(join(tmpdir(), 'atelier-agw-'));
const secretFile = join(dir, 'secret');
writeFileSync(secretFile, 'agents-test-shared-admin-secret-0123456789\n', { mode: 0o600 });
let port = 0;
let gw: ChildProcess | null = null;
async function startGw(): Promise<void> {
  const p = spawnProc(process.execPath, [BIN, 'gateway', '--port', String(port), '--admin-secret-file', secretFile], { stdio: ['ignore', 'pipe', 'pipe'] });
  await new Promise<void>((resolve, reject) => {
    let out = '';
    p.stdout!.on('data', (d) => {
      out += d;
      if (out.includes('listening at')) resolve();
    });
    p.once('exit', (c) => reject(new Error(`gateway exited ${c}`)));
  });
  gw = p;
}
async function stopGw(): Promise<void> {
  const p = gw;
  if (!p) return;
  gw = null;
  p.kill('SIGKILL');
  await new Promise((r) => p.once('exit', r));
}

let e: AgentEnv;
let args: string[];
const dataDir = mkdtempSync(join(tmpdir(), 'atelier-agw-data-'));
beforeAll(async () => {
  port = await freePort();
  await startGw();
  args = ['--gateway-url', `http://127.0.0.1:${port}`, '--gateway-admin-secret-file', secretFile];
  e = await startAgentEnv({ args, env: { ATELIER_TEST_AGENT_LAUNCH_DELAY_MS: '1500' }, dataDir });
  await e.makeProfile('gw-chat', 'chat-completions');
}, 180_000);
afterAll(async () => {
  await e?.dispose();
  await stopGw();
  rmSync(dir, { recursive: true, force: true });
  rmSync(dataDir, { recursive: true, force: true });
});

const spawnArgs = (name: string) => ({ workspaceId: e.ws, idempotencyKey: `gw-${name}-${Date.now()}`, profileId: 'gw-chat', prompt: `#agent=${name} go`, proxyOperations: ['files_read'], repositoryContext: 'none' });

describe('the gateway at spawn (routing rule 8, agent rule 2)', () => {
  it('answers UNAVAILABLE when the gateway is down at spawn', async () => {
    await stopGw();
    const r = await e.tool('agent_spawn', spawnArgs('down'));
    expect(!r.ok && r.error.code).toBe('UNAVAILABLE');
    await startGw();
    // The restarted gateway lost its profiles: the next spawn pushes again and runs.
    e.fake.scripts.set('up', () => ({ text: 'up again' }));
    const ok = await e.ok('agent_spawn', spawnArgs('up'));
    expect(await e.waitEnd(ok.agentId)).toMatchObject({ status: 'SUCCEEDED', summary: 'up again' });
  }, 60_000);

  it('cancels an agent whose gateway vanished between the checks and ends it FAILED once the gateway confirms cleanup', async () => {
    e.fake.scripts.set('between', () => ({ text: 'never' }));
    const r = await e.ok('agent_spawn', spawnArgs('between'));
    expect(r.status).toBe('SPAWNING');
    await stopGw(); // during the launch delay, after the first check
    const c = await e.waitFor(r.agentId, (s) => s.status === 'CANCELLING', 20_000);
    expect(c.endReason).toContain('final check');
    await new Promise((res) => setTimeout(res, 1000));
    expect((await e.ok('agent_status', { agentId: r.agentId })).status).toBe('CANCELLING');
    await startGw();
    const end = await e.waitEnd(r.agentId, 20_000);
    expect(end.status).toBe('FAILED');
    expect(end.endReason).toContain('confirmed');
    expect(end.error.code).toBe('UNAVAILABLE');
    expect(e.fake.requests.filter((q) => q.script === 'between')).toEqual([]);
    expect(end.leaseId).toBeNull();
  }, 60_000);
});

describe('runner restart', () => {
  it('leaves agents that were running INTERRUPTED, with their open spend settled or unreconciled', async () => {
    e.fake.scripts.set('long', (c) => (c.hasTools ? { calls: [{ name: 'files_read', args: { path: 'README.md' } }], delayMs: 800 } : { text: 'x' }));
    const r = await e.ok('agent_spawn', spawnArgs('long'));
    await e.waitFor(r.agentId, (s) => s.status === 'RUNNING' && s.budgets.maxInputTokens.used > 0, 30_000);
    await e.mcp.close().catch(() => undefined);
    await e.svc.stop('SIGKILL');
    // The sandbox dies with the runner.
    const until = Date.now() + 10_000;
    while (runtimeProcesses().length && Date.now() < until) await new Promise((res) => setTimeout(res, 200));
    expect(runtimeProcesses()).toEqual([]);
    const svc2: Service = await startService({ dataDir, args, env: { ATELIER_TEST_AGENT_LAUNCH_DELAY_MS: '0' } });
    try {
      const c2 = await connectV2(svc2, e.svc.token);
      const st = await call(c2, 'agent_status', { workspaceId: e.ws, agentId: r.agentId });
      expect(st.ok, st.ok ? '' : st.text).toBe(true);
      if (st.ok) {
        expect(st.result.status).toBe('INTERRUPTED');
        expect(st.result.endReason).toContain('runner stopped');
        expect((st.result.spend as { reservedMicros: number }).reservedMicros).toBe(0);
        expect((st.result.spend as { totalMicros: number }).totalMicros).toBeGreaterThan(0);
      }
      const lg = await call(c2, 'agent_logs', { workspaceId: e.ws, agentId: r.agentId });
      expect(lg.ok && String(lg.result.text)).toContain('"INTERRUPTED"');
      await c2.close();
    } finally {
      await svc2.stop();
    }
  }, 90_000);
});
