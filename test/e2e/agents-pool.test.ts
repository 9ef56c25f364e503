/**
 * The pool of pre-started agent runtimes (docs/agents.md "Pre-started runtimes"), through the real
 * `atelier serve`, its gateway and the scripted fake provider: an idle runtime holds no lease and
 * no secret (its environment, command line, mounts and memory are searched) and cannot reach the
 * gateway; the job goes to it, its lease token appears only then; it is never reused after the
 * job; pool size 0 still runs agents (on demand); a bad pool size is refused at start-up.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { closeSync, mkdtempSync, openSync, readFileSync, readSync, rmSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { serveExpectingFailure } from './harness.js';
import { PROVIDER_KEY, idleRuntimes, runtimeProcesses, startAgentEnv, type AgentEnv, runtimesLeft } from './agents-fixture.js';

const idOf = (r: Record<string, any>) => r.agentId as string;

/** Whether `needle` is anywhere in the process's writable memory (root reads /proc/<pid>/mem). */
function memoryHas(pid: number, needle: string): boolean {
  const want = Buffer.from(needle);
  const maps = readFileSync(`/proc/${pid}/maps`, 'utf8').split('\n');
  const fd = openSync(`/proc/${pid}/mem`, 'r');
  let scanned = 0;
  try {
    for (const m of maps) {
      const r = /^([0-9a-f]+)-([0-9a-f]+) rw/.exec(m);
      if (!r) continue;
      const start = parseInt(r[1]!, 16);
      const end = parseInt(r[2]!, 16);
      for (let at = start; at < end; at += 1 << 20) {
        const buf = Buffer.alloc(Math.min(1 << 20, end - at) + want.length);
        let n = 0;
        try {
          n = readSync(fd, buf, 0, Math.min(buf.length, end - at), at);
        } catch {
          continue; // an unreadable page (guard, reserved)
        }
        scanned += n;
        if (buf.subarray(0, n).includes(want)) return true;
      }
    }
  } finally {
    closeSync(fd);
  }
  expect(scanned, 'the scan read the process memory').toBeGreaterThan(1 << 20);
  return false;
}

function alive(pid: number): boolean {
  try {
    return !readFileSync(`/proc/${pid}/stat`, 'utf8').includes(') Z ');
  } catch {
    return false;
  }
}

/** What a connection to a Unix socket answers to an HTTP request within `ms` (closed: the bytes so far). */
function probe(path: string, ms = 3000): Promise<{ bytes: string; closed: boolean }> {
  return new Promise((resolve) => {
    let bytes = '';
    const s = connect(path);
    const t = setTimeout(() => {
      s.destroy();
      resolve({ bytes, closed: false });
    }, ms);
    s.on('connect', () => s.write('GET /v1/models HTTP/1.1\r\nhost: x\r\nauthorization: Bearer atlg_probe\r\n\r\n'));
    s.on('data', (d) => (bytes += d));
    s.on('error', () => undefined);
    s.on('close', () => {
      clearTimeout(t);
      resolve({ bytes, closed: true });
    });
  });
}

async function poolFigures(e: AgentEnv): Promise<{ size: number; idle: number; ready: number; running: number }> {
  const r = await e.rest('GET', '/api/v1/agents?limit=1');
  expect(r.status).toBe(200);
  return r.body.pool;
}

async function waitPoolReady(e: AgentEnv, n = 1): Promise<void> {
  for (let i = 0; i < 600; i++) {
    if ((await poolFigures(e)).ready >= n) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error('the pool did not get a ready runtime');
}

async function runtimeOf(e: AgentEnv, agentId: string): Promise<{ id: string; pooled: boolean }> {
  const line = (await e.logText(agentId)).split('\n').find((l) => l.includes('"status":"RUNNING"'));
  expect(line, 'the RUNNING status line').toBeTruthy();
  return JSON.parse(line!).runtime;
}

describe('agent runtime pool (default size 1)', () => {
  let e: AgentEnv;
  beforeAll(async () => {
    e = await startAgentEnv();
    await e.makeProfile('pool-chat', 'chat-completions');
  }, 180_000);
  afterAll(async () => {
    await e?.dispose();
  });

  it('keeps one idle runtime that holds no lease or secret and cannot reach the gateway, hands it one job, and never reuses it', async () => {
    await waitPoolReady(e);
    expect(await poolFigures(e)).toMatchObject({ size: 1, idle: 1, ready: 1 });
    const idle = idleRuntimes();
    expect(idle.length).toBe(1);
    const { pid, slot, line } = idle[0]!;
    expect(await runtimesLeft()).toEqual([]); // no agent runs

    // Nothing secret before assignment: command line, environment, mounts, memory.
    const environ = readFileSync(`/proc/${pid}/environ`, 'utf8');
    const mounts = readFileSync(`/proc/${pid}/mountinfo`, 'utf8');
    for (const s of [line, environ, mounts]) {
      expect(s).not.toContain(PROVIDER_KEY);
      expect(s).not.toContain(e.host.token);
      expect(s).not.toContain('atlg_');
    }
    expect(mounts).not.toContain('/workspaces/');
    expect(mounts).not.toContain('master.key');
    // No host path of the data directory (issue #31 item 7): the socket directory is relayed from the sandbox's own tmpfs.
    expect(mounts).not.toContain(e.svc.dataDir);
    expect(mounts).toMatch(/^\S+ \S+ \S+ \/x\d+ \/run\/agent \S+.* - tmpfs /m);
    expect(memoryHas(pid, 'atlg_')).toBe(false);
    expect(memoryHas(pid, PROVIDER_KEY)).toBe(false);

    // Its gateway socket relays nothing before assignment; its control socket takes no second connection.
    const dir = join(e.svc.dataDir, 'run', 'agents', `idle-${slot}`);
    expect(await probe(join(dir, 'gateway.sock'))).toEqual({ bytes: '', closed: true });
    const second = await probe(join(dir, 'control.sock'));
    expect(second).toEqual({ bytes: '', closed: true });
    expect(alive(pid)).toBe(true);

    // The job goes to that runtime; its lease token is in its memory only now.
    e.fake.scripts.set('pool-a', (c) => (c.step === 0 ? { text: '', calls: [{ name: 'files_read', args: { path: 'README.md' } }], delayMs: 1500 } : { text: 'pool a done' }));
    const a = idOf(await e.ok('agent_spawn', { idempotencyKey: 'pool-key-a', profileId: 'pool-chat', prompt: '#agent=pool-a go', proxyOperations: ['files_read'], repositoryContext: 'none' }));
    await e.fake.firstRequest('pool-a');
    expect(await runtimeOf(e, a)).toEqual({ id: slot, pooled: true });
    expect(runtimeProcesses().map((l) => Number(l.trim().split(/\s+/)[0]))).toEqual([pid]);
    expect(memoryHas(pid, 'atlg_')).toBe(true); // the scan finds the token once the runtime holds it
    expect(memoryHas(pid, PROVIDER_KEY)).toBe(false);
    const endA = await e.waitEnd(a);
    expect(endA).toMatchObject({ status: 'SUCCEEDED', summary: 'pool a done' });

    // Not reused: the process is gone, its sockets removed, the next agent gets another runtime.
    for (let i = 0; i < 50 && alive(pid); i++) await new Promise((r) => setTimeout(r, 100));
    expect(alive(pid)).toBe(false);
    expect(await runtimesLeft()).toEqual([]);
    await waitPoolReady(e);
    const next = idleRuntimes();
    expect(next.length).toBe(1);
    expect(next[0]!.slot).not.toBe(slot);
    expect(next[0]!.pid).not.toBe(pid);
    expect(memoryHas(next[0]!.pid, 'atlg_')).toBe(false);
    e.fake.scripts.set('pool-b', () => ({ text: 'pool b done' }));
    const b = idOf(await e.ok('agent_spawn', { idempotencyKey: 'pool-key-b', profileId: 'pool-chat', prompt: '#agent=pool-b go', proxyOperations: ['files_read'], repositoryContext: 'none' }));
    expect(await e.waitEnd(b)).toMatchObject({ status: 'SUCCEEDED', summary: 'pool b done' });
    const rb = await runtimeOf(e, b);
    expect(rb.id).not.toBe(slot);
    expect(rb).toEqual({ id: next[0]!.slot, pooled: true });
  }, 180_000);

  it('starts runtimes on demand when a burst empties the pool', async () => {
    e.fake.scripts.set('burst', () => ({ text: 'burst done' }));
    const ids = await Promise.all([0, 1, 2].map((i) => e.ok('agent_spawn', { idempotencyKey: `burst-key-${i}`, profileId: 'pool-chat', prompt: `#agent=burst ${i}`, proxyOperations: ['files_read'], repositoryContext: 'none' }).then(idOf)));
    const ends = await Promise.all(ids.map((id) => e.waitEnd(id, 120_000)));
    for (const s of ends) expect(s).toMatchObject({ status: 'SUCCEEDED', summary: 'burst done' });
    const runtimes = await Promise.all(ids.map((id) => runtimeOf(e, id)));
    expect(new Set(runtimes.map((r) => r.id)).size).toBe(3);
    expect(runtimes.filter((r) => !r.pooled).length).toBeGreaterThanOrEqual(1);
    expect(await runtimesLeft()).toEqual([]);
  }, 180_000);
});

describe('agent runtime pool size 0', () => {
  let e: AgentEnv;
  beforeAll(async () => {
    e = await startAgentEnv({ args: ['--agent-pool-size', '0'] });
    await e.makeProfile('nopool-chat', 'chat-completions');
  }, 180_000);
  afterAll(async () => {
    await e?.dispose();
  });

  it('keeps no idle runtime and starts each agent runtime on demand', async () => {
    await new Promise((r) => setTimeout(r, 3000)); // past the pool's 2 s tending
    expect(await poolFigures(e)).toMatchObject({ size: 0, idle: 0, ready: 0 });
    expect(idleRuntimes()).toEqual([]);
    e.fake.scripts.set('nopool', (c) => (c.step === 0 ? { calls: [{ name: 'files_read', args: { path: 'README.md' } }] } : { text: `read ${c.toolResults[0]?.includes('# demo') ? 'ok' : 'missing'}` }));
    const id = idOf(await e.ok('agent_spawn', { idempotencyKey: 'nopool-1', profileId: 'nopool-chat', prompt: '#agent=nopool go', proxyOperations: ['files_read'], repositoryContext: 'none' }));
    expect(await e.waitEnd(id)).toMatchObject({ status: 'SUCCEEDED', summary: 'read ok' });
    expect((await runtimeOf(e, id)).pooled).toBe(false);
    expect(await runtimesLeft()).toEqual([]);
    expect(idleRuntimes()).toEqual([]);
  }, 120_000);
});

describe('agent runtime pool size setting', () => {
  it('refuses a pool size outside 0-8 at start-up, naming the setting', async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'atelier-pool-cfg-'));
    try {
      for (const [args, env] of [
        [['--agent-pool-size', '9'], {}],
        [['--agent-pool-size', '-1'], {}],
        [['--agent-pool-size', 'two'], {}],
        [[], { ATELIER_AGENT_POOL_SIZE: '1000000000000' }],
      ] as Array<[string[], Record<string, string>]>) {
        const r = await serveExpectingFailure(['--data-dir', dataDir, '--port', '0', ...args], env);
        expect(r.code, r.stderr).toBe(2);
        expect(r.stderr).toContain('--agent-pool-size / ATELIER_AGENT_POOL_SIZE');
        expect(r.stderr).toContain('an integer from 0 to 8');
      }
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  }, 60_000);
});
