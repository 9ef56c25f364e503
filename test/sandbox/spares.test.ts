/**
 * The daemon's spare exec starters on their own (on the host, no sandbox, no cgroups): a round of
 * spares from one process start (the native starter's batch mode and its reaper), execs in them
 * with exit codes, signals, output and stdin as through a new process, spares that end unused,
 * bad counts, and a reaper killed under a running command.
 */
import type { ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ServiceError } from '../../src/core/errors.js';
import { DaemonClient } from '../../src/sandbox/client.js';
import type { SpareStarted } from '../../src/sandbox/daemon/protocol.js';
import { nativeArtifacts } from '../../src/sandbox/native.js';
import { assertDaemonBuilt, isAlive, startTestDaemon, traversableTempDir } from './helpers.js';

let base: string;
let daemon: ChildProcess;
let client: DaemonClient;

beforeAll(async () => {
  assertDaemonBuilt();
  base = traversableTempDir('atl-sp-');
  const workspace = path.join(base, 'ws');
  mkdirSync(workspace);
  writeFileSync(path.join(base, 'env.json'), JSON.stringify({ PATH: '/usr/bin:/bin', BASE_VAR: 'base' }));
  const { execStarter } = await nativeArtifacts(path.join(os.tmpdir(), 'atelier-native-test'));
  // As in a sandbox (bwrap/args.ts): the starter, and beside it a link named bash to bash-static.
  const lib = path.join(base, 'lib');
  mkdirSync(lib);
  symlinkSync(execStarter, path.join(lib, 'exec-starter'));
  symlinkSync('/usr/bin/bash-static', path.join(lib, 'bash'));
  ({ daemon, client } = await startTestDaemon(base, workspace, { extraArgs: ['--exec-starter', path.join(lib, 'exec-starter')], stdout: 'ignore' }));
});

afterAll(async () => {
  // Spares of the last round still wait: end them with the daemon's own kill, then the daemon.
  for (const s of left) await client.request('kill', { execId: s.spareId }).catch(() => undefined);
  client?.close();
  daemon?.kill('SIGKILL');
  if (base) rmSync(base, { recursive: true, force: true });
});

const left: Array<{ spareId: string; pid: number }> = [];
const round = async (count?: number): Promise<Array<{ spareId: string; pid: number }>> => {
  const s: SpareStarted = await client.request('spare', count === undefined ? {} : { count });
  const all = [{ spareId: s.spareId, pid: s.pid }, ...(s.more ?? [])];
  left.push(...all);
  return all;
};
const take = (s: { spareId: string }) => left.splice(left.findIndex((x) => x.spareId === s.spareId), 1);
const run = (s: { spareId: string }, params: Record<string, unknown>) => {
  take(s);
  return client.request('exec', { ...params, spare: s.spareId });
};

describe('spare exec starters in rounds', () => {
  it('starts a round of distinct waiting spares, each in a session of its own', async () => {
    const spares = await round(4);
    expect(spares).toHaveLength(4);
    expect(new Set(spares.map((s) => s.spareId)).size).toBe(4);
    expect(new Set(spares.map((s) => s.pid)).size).toBe(4);
    for (const s of spares) {
      expect(isAlive(s.pid)).toBe(true);
      // comm is the starter's, and the spare leads its own session (so an exec's process group is
      // its own); a spare just forked may take a moment to get there (it does before it reads a request).
      const statOf = () => readFileSync(`/proc/${s.pid}/stat`, 'utf8');
      for (let i = 0; i < 100 && !statOf().includes('(exec-starter)'); i++) await sleep(10);
      const stat = statOf();
      expect(stat).toContain('(exec-starter)');
      const [pgrp, session] = stat.slice(stat.lastIndexOf(')') + 2).split(' ').slice(2, 4).map(Number);
      expect(pgrp).toBe(s.pid);
      expect(session).toBe(s.pid);
    }
    // One spare without count, as older runners ask.
    expect(await round()).toHaveLength(1);
  });

  it('runs commands in spares with exit codes, signals, output, stdin and environment as usual', async () => {
    const [a, b, c, d] = await round(4);
    const [ra, rb, rc, rd] = await Promise.all([
      run(a!, { command: 'echo "out $BASE_VAR $X"; echo err >&2; exit 7', env: { X: 'x' } }),
      run(b!, { command: 'kill -TERM $$' }),
      run(c!, { command: 'cat', stdin: Buffer.from('fed in').toString('base64') }),
      run(d!, { argv: ['no-such-command-here'] }),
    ]);
    expect(ra).toMatchObject({ exitCode: 7, signal: null, stdout: 'out base x\n', stderr: 'err\n', timedOut: false });
    expect(rb).toMatchObject({ exitCode: null, signal: 'SIGTERM' });
    expect(rc).toMatchObject({ exitCode: 0, stdout: 'fed in' });
    expect(rd).toMatchObject({ exitCode: 127 });
    expect(isAlive(a!.pid) || isAlive(b!.pid) || isAlive(c!.pid) || isAlive(d!.pid)).toBe(false);
  });

  it('runs a command line under bash-static where installed, reading as /bin/bash; argv as given', async () => {
    const [a, b, c] = await round(3);
    const probe = 'echo "$0|$BASH|$BASH_VERSION|$(readlink /proc/$$/exe)|$(cat /proc/$$/comm)"; shopt | md5sum; set -o | md5sum';
    const [ra, rb, rc] = await Promise.all([
      run(a!, { command: probe }),
      run(b!, { argv: ['/bin/bash', '-c', probe] }),
      run(c!, { argv: ['sh', '-c', 'echo "$0"'] }),
    ]);
    const [lineA, ...modesA] = ra.stdout.trim().split('\n');
    const [lineB, ...modesB] = rb.stdout.trim().split('\n');
    const [zeroA, bashA, versionA, exeA, commA] = lineA!.split('|');
    const [zeroB, bashB, versionB, exeB, commB] = lineB!.split('|');
    // The same shell as an explicit /bin/bash: name, $BASH, version, the kernel's name (comm: ps,
    // pgrep), options (shopt, set -o).
    expect([zeroA, bashA, versionA, commA]).toEqual([zeroB, bashB, versionB, commB]);
    expect(commA).toBe('bash');
    expect(zeroA).toBe('/bin/bash');
    expect(modesA).toEqual(modesB);
    expect(exeB).toBe('/usr/bin/bash');
    // bash-static is part of setup (scripts/setup.sh); without it the command runs /bin/bash itself.
    expect(exeA).toBe(existsSync('/bin/bash-static') ? '/usr/bin/bash-static' : '/usr/bin/bash');
    expect(rc).toMatchObject({ exitCode: 0, stdout: 'sh\n' });
  });

  it('reads a request larger than one read (argv and environment of hundreds of KiB) whole', async () => {
    const [a, b] = await round(2);
    const big = 'v'.repeat(100_000); // one string may not pass 128 KiB (the kernel's MAX_ARG_STRLEN)
    const many = Array.from({ length: 2000 }, (_, i) => `arg${i}`);
    const [ra, rb] = await Promise.all([
      run(a!, { command: 'echo $((${#BIG} + ${#BIG2} + ${#BIG3})) $EMPTY_OK', env: { BIG: big, BIG2: big, BIG3: big, EMPTY_OK: '' } }),
      run(b!, { argv: ['/bin/sh', '-c', 'echo $# "$1" "${2000}"', 'sh', ...many] }),
    ]);
    expect(ra).toMatchObject({ exitCode: 0, stdout: '300000\n' });
    expect(rb).toMatchObject({ exitCode: 0, stdout: '2000 arg0 arg1999\n' });
  });

  it('times out a command in a spare and kills its tree', async () => {
    const [s] = await round(1);
    const t0 = Date.now();
    const r = await run(s!, { command: 'sleep 30 & sleep 30', timeoutMs: 300 });
    expect(r).toMatchObject({ timedOut: true, signal: 'SIGKILL' });
    expect(Date.now() - t0).toBeLessThan(5_000);
  });

  it('refuses a spare that ended unused (killed from outside) with NOT_FOUND naming it, and forgets it', async () => {
    const [s, t] = await round(2);
    process.kill(s!.pid, 'SIGKILL');
    for (let i = 0; i < 100 && isAlive(s!.pid); i++) await sleep(10);
    await sleep(50);
    const err = await run(s!, { command: 'true' }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ServiceError);
    expect((err as ServiceError).details).toMatchObject({ daemonCode: 'NOT_FOUND', spare: s!.spareId });
    // Its neighbour from the same round is untouched.
    expect(await run(t!, { command: 'echo fine' })).toMatchObject({ exitCode: 0, stdout: 'fine\n' });
  });

  it('refuses counts outside 1-16', async () => {
    for (const count of [0, 17, 1.5, 'two', -1]) {
      const err = await client.request('spare', { count } as never).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ServiceError);
      expect((err as ServiceError).details.daemonCode).toBe('INVALID_ARGUMENT');
      expect((err as ServiceError).message).toMatch(/count must be an integer from 1 to 16/);
    }
  });

  it('reports a command whose reaper was killed as ended with an unknown status, with its output', async () => {
    const [s, t] = await round(2);
    const reaper = Number(readFileSync(`/proc/${s!.pid}/stat`, 'utf8').split(') ')[1]!.split(' ')[1]);
    expect(readFileSync(`/proc/${reaper}/comm`, 'utf8').trim()).toBe('spare-reaper');
    const pending = run(s!, { command: 'echo before; sleep 0.5; echo after' });
    await sleep(150);
    process.kill(reaper, 'SIGKILL');
    const r = await pending;
    expect(r).toMatchObject({ exitCode: null, signal: null, timedOut: false, stdout: 'before\nafter\n' });
    // The other spare of that round still runs commands; its exit status is unknown the same way.
    expect(await run(t!, { command: 'echo still' })).toMatchObject({ stdout: 'still\n', exitCode: null, signal: null });
  });
});

describe('how many spares a sandbox keeps', () => {
  it('keeps one per 64 of its process limit, from 2 to 8', async () => {
    const { spareTarget } = await import('../../src/sandbox/bwrap/index.js');
    expect([undefined, 16, 64, 128, 200, 512, 4096, 1_000_000].map((n) => spareTarget(n))).toEqual([2, 2, 2, 2, 3, 8, 8, 8]);
  });
});
