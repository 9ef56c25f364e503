/**
 * Issue #42 item 8, the daemon's part (what a driver without per-exec cgroups relies on: the
 * Kubernetes executor): with endLeftovers, what a command leaves in its process group (`cmd &`,
 * `nohup`) is ended when it returns and counted in backgroundEnded; without it (tasks, async
 * operations) it keeps running; a `setsid` child has left the group and is not reached here (the
 * bubblewrap driver's exec cgroup ends it: test/e2e/exec-background.test.ts).
 */
import type { ChildProcess } from 'node:child_process';
import { readFileSync, readdirSync, rmSync, writeFileSync, mkdirSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DaemonClient } from '../../src/sandbox/client.js';
import type { ExecResult } from '../../src/sandbox/daemon/protocol.js';
import { assertDaemonBuilt, startTestDaemon, traversableTempDir } from './helpers.js';

let base: string;
let daemon: ChildProcess;
let client: DaemonClient;

/** Live (not zombie) processes on this host whose command line is exactly `sleep <n>`. */
function sleeping(n: number): number[] {
  const found: number[] = [];
  for (const p of readdirSync('/proc')) {
    if (!/^\d+$/.test(p)) continue;
    try {
      const stat = readFileSync(`/proc/${p}/stat`, 'utf8');
      if (stat.slice(stat.lastIndexOf(')') + 2).startsWith('Z')) continue;
      if (readFileSync(`/proc/${p}/cmdline`, 'utf8') === `sleep\0${n}\0`) found.push(Number(p));
    } catch {
      // gone meanwhile
    }
  }
  return found;
}

beforeAll(async () => {
  assertDaemonBuilt();
  base = traversableTempDir('atl-left-');
  const workspace = path.join(base, 'ws');
  mkdirSync(workspace);
  writeFileSync(path.join(base, 'env.json'), JSON.stringify({ PATH: '/usr/bin:/bin' }));
  ({ daemon, client } = await startTestDaemon(base, workspace));
});

afterAll(() => {
  for (const n of [321, 322, 323, 324]) for (const pid of sleeping(n)) process.kill(pid, 'SIGKILL');
  try {
    process.kill(Number(readFileSync(path.join(base, 's.pid'), 'utf8')), 'SIGKILL');
  } catch {
    // not started, or gone
  }
  client?.close();
  daemon?.kill('SIGKILL');
  if (base) rmSync(base, { recursive: true, force: true });
});

const exec = (params: Record<string, unknown>) => client.request('exec', params as never) as Promise<ExecResult>;

describe('the daemon ends what a command leaves in its process group', () => {
  it('cmd & and nohup: ended when it returns, and counted', async () => {
    const r = await exec({ command: 'sleep 321 & nohup sleep 322 > /dev/null 2>&1 & echo ok', endLeftovers: true });
    expect(r.stdout).toBe('ok\n');
    expect(r.backgroundEnded).toBe(2);
    expect(sleeping(321)).toEqual([]);
    expect(sleeping(322)).toEqual([]);
  });

  it('nothing left: no field', async () => {
    const r = await exec({ command: 'sleep 0.05 & wait; echo ok', endLeftovers: true });
    expect(r.stdout).toBe('ok\n');
    expect(r).not.toHaveProperty('backgroundEnded');
  });

  it('without endLeftovers (tasks, async operations) it keeps running', async () => {
    const r = await exec({ command: 'sleep 323 > /dev/null 2>&1 & echo ok' });
    expect(r).not.toHaveProperty('backgroundEnded');
    // The background child is forked before the command returns, but its execve of sleep may come
    // a moment later on a loaded machine (its command line is the shell's until then).
    let seen = sleeping(323);
    for (let i = 0; i < 200 && seen.length === 0; i++) {
      await new Promise((resolve) => setTimeout(resolve, 50));
      seen = sleeping(323);
    }
    expect(seen).toHaveLength(1);
    // And it is still running a while after the command returned: nothing ended it.
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(sleeping(323)).toEqual(seen);
  });

  it('a setsid child has left the group: not reached by the daemon (the exec cgroup ends it under bubblewrap)', async () => {
    // The command returns only once the child has its own session (its pid written after setsid).
    const r = await exec({ command: `setsid sh -c 'echo $$ > ${base}/s.pid; exec sleep 324' < /dev/null > /dev/null 2>&1 & until [ -s ${base}/s.pid ]; do sleep 0.01; done; echo ok`, endLeftovers: true });
    expect(r.stdout).toBe('ok\n');
    expect(r).not.toHaveProperty('backgroundEnded');
    const pid = Number(readFileSync(path.join(base, 's.pid'), 'utf8'));
    expect(readFileSync(`/proc/${pid}/stat`, 'utf8')).not.toMatch(/\) Z /);
  });

  it('endLeftovers of the wrong type is refused naming it', async () => {
    await expect(exec({ command: 'true', endLeftovers: 'yes' })).rejects.toThrow(/endLeftovers must be a boolean/);
  });
});
