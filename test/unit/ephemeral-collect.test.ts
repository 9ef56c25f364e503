/**
 * How a short-lived sandbox's run is collected (collect() in src/sandbox/bwrap/), with real
 * processes: the output and the end of a normal run, a run whose pipe outlives its kill (it must
 * still answer, after the grace, with what was captured), and a program that cannot start.
 */
import { spawn } from 'node:child_process';
import { afterEach, describe, expect, it } from 'vitest';
import { collect } from '../../src/sandbox/bwrap/index.js';
import type { EphemeralSpec } from '../../src/sandbox/executor.js';

const spec = (over: Partial<EphemeralSpec> = {}): EphemeralSpec => ({ binds: [], limits: { memoryBytes: 1 << 26, pidsMax: 16, cpuQuotaPercent: 100 }, network: 'none', command: 'unused', ...over });
const leftovers: number[] = [];

afterEach(() => {
  for (const pid of leftovers.splice(0)) {
    try {
      process.kill(-pid, 'SIGKILL');
    } catch {
      // gone
    }
  }
});

describe('collecting a short-lived run', () => {
  it('answers with the output and the exit of a run that ends', async () => {
    const child = spawn('/bin/sh', ['-c', 'cat; echo out; echo err >&2; exit 3'], { stdio: ['pipe', 'pipe', 'pipe'] });
    const r = await collect(child, spec({ stdin: 'in\n' }), Date.now(), async () => undefined);
    expect(r).toMatchObject({ exitCode: 3, signal: null, timedOut: false, cancelled: false, stdout: 'in\nout\n', stderr: 'err\n' });
  });

  it('still answers when its pipe outlives the kill: after the grace, timed out, with what was captured', async () => {
    // The background sleep keeps stdout open after sh exits, and the "kill" cannot reach it (as a
    // process outside the sandbox's cgroup would not be): 'close' never comes by itself.
    const child = spawn('/bin/sh', ['-c', 'sleep 30 & echo started'], { stdio: ['pipe', 'pipe', 'pipe'], detached: true });
    leftovers.push(child.pid!);
    const t0 = Date.now();
    let kills = 0;
    const r = await collect(child, spec({ timeoutMs: 300 }), t0, async () => void kills++, 400);
    expect(r).toMatchObject({ timedOut: true, stdout: 'started\n', exitCode: 0 });
    expect(kills).toBe(1);
    expect(Date.now() - t0).toBeGreaterThanOrEqual(650);
    expect(Date.now() - t0).toBeLessThan(5_000);
  });

  it('a cancel answers the same way', async () => {
    const child = spawn('/bin/sh', ['-c', 'sleep 30 & echo started; sleep 30'], { stdio: ['pipe', 'pipe', 'pipe'], detached: true });
    leftovers.push(child.pid!);
    const ac = new AbortController();
    setTimeout(() => ac.abort(), 200);
    const r = await collect(child, spec({ signal: ac.signal }), Date.now(), async () => undefined, 300);
    expect(r).toMatchObject({ cancelled: true, timedOut: false, stdout: 'started\n' });
  });

  it('a program that cannot start rejects once, as INTERNAL', async () => {
    const child = spawn('/nonexistent/program', [], { stdio: ['pipe', 'pipe', 'pipe'] });
    await expect(collect(child, spec(), Date.now(), async () => undefined)).rejects.toMatchObject({ code: 'INTERNAL', message: expect.stringMatching(/cannot start the sandbox/) });
  });
});
