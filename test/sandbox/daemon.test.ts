/**
 * The daemon on its own, run on the host (no sandbox) against a temporary workspace: protocol,
 * exec semantics, confinement of cwd, cancellation, and the in-daemon tree kill.
 */
import type { ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ServiceError } from '../../src/core/errors.js';
import { DaemonClient } from '../../src/sandbox/client.js';
import type { ExecResult, ExecStarted } from '../../src/sandbox/daemon/protocol.js';
import { DAEMON_VERSION } from '../../src/sandbox/daemon/protocol.js';
import { assertDaemonBuilt, endsWithin, startTestDaemon, traversableTempDir, until } from './helpers.js';

let base: string;
let workspace: string;
let socketPath: string;
let daemon: ChildProcess;
let client: DaemonClient;

beforeAll(async () => {
  assertDaemonBuilt();
  base = traversableTempDir('atl-d-');
  workspace = path.join(base, 'ws');
  mkdirSync(path.join(workspace, 'sub'), { recursive: true });
  symlinkSync('/', path.join(workspace, 'escape'));
  writeFileSync(path.join(base, 'env.json'), JSON.stringify({ PATH: '/usr/bin:/bin', SHLVL: '1', BASE_VAR: 'base' }));
  ({ daemon, client, socketPath } = await startTestDaemon(base, workspace));
});

afterAll(() => {
  client?.close();
  daemon?.kill('SIGKILL');
  if (base) rmSync(base, { recursive: true, force: true });
});

const exec = (params: Record<string, unknown>, opts: Parameters<DaemonClient['request']>[2] = {}) =>
  client.request<ExecResult>('exec', params, opts);

describe('daemon protocol', () => {
  it('answers ping with pid, uid and version', async () => {
    const pong = await client.ping();
    expect(pong).toEqual({ pid: daemon.pid, uid: process.getuid!(), version: DAEMON_VERSION  });
  });

  it('rejects unknown methods and malformed requests', async () => {
    await expect(client.request('nope')).rejects.toMatchObject({ code: 'NOT_IMPLEMENTED' });
    const raw = connect(socketPath);
    const reply = await new Promise<string>((resolve) => {
      raw.once('data', (d) => resolve(d.toString()));
      raw.write('not json\n');
    });
    raw.destroy();
    expect(JSON.parse(reply)).toMatchObject({ id: null, error: { code: 'INVALID_ARGUMENT' } });
  });

  it('validates exec parameters', async () => {
    await expect(exec({})).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    await expect(exec({ argv: ['true'], command: 'true' })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    await expect(exec({ command: 'true', timeoutMs: 0 })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
  });
});

describe('daemon env.set (a warm Pod learns its environment after start)', () => {
  it('later execs start from the new environment; hostile lines over the socket are refused and the daemon still answers', async () => {
    const raw = async (line: string): Promise<Record<string, unknown>> => {
      const sock = connect(socketPath);
      const reply = await new Promise<string>((resolve) => {
        let buf = '';
        sock.on('data', (d) => {
          buf += d.toString();
          if (buf.includes('\n')) resolve(buf.slice(0, buf.indexOf('\n')));
        });
        sock.write(line + '\n');
      });
      sock.destroy();
      return JSON.parse(reply) as Record<string, unknown>;
    };
    // Deeply nested and huge values: refused whole, naming the rule.
    const deep = '{"id":1,"method":"env.set","params":{"env":{"A":' + '['.repeat(200_000) + ']'.repeat(200_000) + '}}}';
    expect(await raw(deep)).toMatchObject({ error: { code: 'INVALID_ARGUMENT' } });
    expect(await raw(JSON.stringify({ id: 2, method: 'env.set', params: { env: { A: 'x'.repeat(2 * 1024 * 1024) } } }))).toMatchObject({ id: 2, error: { code: 'INVALID_ARGUMENT', message: expect.stringMatching(/at most \d+ bytes/) } });
    expect(await raw(JSON.stringify({ id: 3, method: 'env.set', params: { env: { A: { B: 'x' } } } }))).toMatchObject({ id: 3, error: { code: 'INVALID_ARGUMENT', message: expect.stringMatching(/every value must be a string/) } });
    expect((await exec({ command: 'echo "$BASE_VAR"' })).stdout).toBe('base\n');
    try {
      expect(await client.request('env.set', { env: { PATH: '/usr/bin:/bin', NEW_VAR: 'after', OWNER_SECRET: 's3' } })).toEqual({ set: 3 });
      expect((await exec({ command: 'echo "$NEW_VAR $OWNER_SECRET ${BASE_VAR:-unset}"' })).stdout).toBe('after s3 unset\n');
    } finally {
    // Put back what the other tests expect.
      await client.request('env.set', { env: { PATH: '/usr/bin:/bin', SHLVL: '1', BASE_VAR: 'base' } });
    }
    expect(await client.ping()).toMatchObject({ pid: daemon.pid });
  });
});

describe('daemon exec', () => {
  it('runs argv and shell commands with exit codes and signals', async () => {
    expect(await exec({ argv: ['sh', '-c', 'exit 7'] })).toMatchObject({ exitCode: 7, signal: null, timedOut: false });
    expect(await exec({ command: 'kill -TERM $$' })).toMatchObject({ exitCode: null, signal: 'SIGTERM' });
    const r = await exec({ command: 'echo out; echo err >&2' });
    expect(r).toMatchObject({ exitCode: 0, stdout: 'out\n', stderr: 'err\n', stdoutBytes: 4, stderrBytes: 4 });
  });

  it('merges env over the base environment and feeds stdin', async () => {
    const r = await exec({
      command: 'echo "$BASE_VAR $EXTRA"; cat',
      env: { EXTRA: 'extra' },
      stdin: Buffer.from('from stdin').toString('base64'),
    });
    expect(r.stdout).toBe('base extra\nfrom stdin');
  });

  it('confines cwd to the workspace, symlinks included', async () => {
    expect((await exec({ command: 'pwd', cwd: 'sub' })).stdout).toBe(`${path.join(workspace, 'sub')}\n`);
    await expect(exec({ command: 'pwd', cwd: '../' })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    await expect(exec({ command: 'pwd', cwd: '/etc' })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    await expect(exec({ command: 'pwd', cwd: 'escape' })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    await expect(exec({ command: 'pwd', cwd: 'missing' })).rejects.toMatchObject({ code: 'NOT_FOUND' });
  });

  it('keeps head and tail of large output', async () => {
    const r = await exec({ command: 'head -c 100000 /dev/zero | tr "\\0" a; echo END', maxOutputBytes: 1024 });
    expect(r.stdoutTruncated).toBe(true);
    expect(r.stdoutBytes).toBe(100004);
    expect(r.stdout).toMatch(/^a{512}\n\[\.\.\. 98980 bytes omitted \.\.\.\]\na{508}END\n$/);
  });

  it('streams output events before the reply', async () => {
    const chunks: string[] = [];
    const events: string[] = [];
    const r = await exec(
      { command: 'echo one; sleep 0.1; echo two', stream: true },
      {
        onEvent: (event, data) => {
          events.push(event);
          if (event === 'stdout') chunks.push(Buffer.from(data as string, 'base64').toString());
        },
      },
    );
    expect(events[0]).toBe('started');
    expect(chunks.join('')).toBe('one\ntwo\n');
    expect(r.stdout).toBe('one\ntwo\n');
  });

  it('holds an exec until it is released', async () => {
    // The command records when it really ran; a hold that does not hold shows up as a marker
    // written before the release (and a start time before it).
    const marker = path.join(base, `held-${Date.now()}`);
    let started: ExecStarted | undefined;
    const pending = exec(
      { command: `date +%s%3N > ${marker}; echo ran`, hold: true },
      {
        onEvent: (event, data) => {
          if (event === 'started') started = data as ExecStarted;
        },
      },
    );
    while (!started) await sleep(5);
    await sleep(300);
    expect(existsSync(marker)).toBe(false);
    const releasedAt = Date.now();
    await client.request('release', { execId: started.execId });
    const r = await pending;
    expect(r.stdout).toBe('ran\n');
    expect(Number(readFileSync(marker, 'utf8').trim())).toBeGreaterThanOrEqual(releasedAt - 5);
  });

  it('kills the process group and attached descendants on timeout', async () => {
    const marker = path.join(base, 'tree.pids');
    const t0 = Date.now();
    const r = await exec({
      // A background child in the group, and a setsid child whose parent is still alive.
      command: `sleep 1000 & setsid sh -c 'trap "" TERM; sleep 1000' & echo "$! $(jobs -p | tr '\\n' ' ')" > ${marker}; wait`,
      timeoutMs: 300,
      killGraceMs: 100,
    });
    expect(r.timedOut).toBe(true);
    expect(Date.now() - t0).toBeLessThan(3000);
    const pids = readFileSync(marker, 'utf8').trim().split(/\s+/).map(Number);
    expect(pids.length).toBe(3);
    for (const pid of pids) expect(await endsWithin(pid)).toBe(true);
  });

  it('cancels through an AbortSignal with a partial result', async () => {
    const ctl = new AbortController();
    setTimeout(() => ctl.abort(), 200);
    const t0 = Date.now();
    const r = await exec({ command: 'echo before; sleep 1000' }, { signal: ctl.signal });
    expect(r).toMatchObject({ cancelled: true, signal: 'SIGKILL', stdout: 'before\n' });
    expect(Date.now() - t0).toBeLessThan(3000);
  });

  it('gives up at the client timeout and cancels the request in the daemon', async () => {
    const marker = path.join(base, 'timeout.pid');
    const t0 = Date.now();
    await expect(exec({ command: `echo $$ > ${marker}; sleep 1000` }, { timeoutMs: 1_000 })).rejects.toMatchObject({
      code: 'DEADLINE_EXCEEDED',
    });
    expect(Date.now() - t0).toBeLessThan(4_000);
    expect(await endsWithin(Number(readFileSync(marker, 'utf8')))).toBe(true);
  });

  it('signals a running exec by id', async () => {
    let execId: string | undefined;
    const pending = exec(
      { command: 'sleep 1000' },
      {
        onEvent: (event, data) => {
          if (event === 'started') execId = (data as ExecStarted).execId;
        },
      },
    );
    while (!execId) await sleep(5);
    await client.request('kill', { execId, signal: 'SIGINT' });
    expect(await pending).toMatchObject({ signal: 'SIGINT', cancelled: false });
    await expect(client.request('kill', { execId })).rejects.toMatchObject({ code: 'NOT_FOUND' });
  });

  it('stops what a connection started when the connection drops', async () => {
    const other = new DaemonClient(socketPath);
    const marker = path.join(base, 'drop.pid');
    const pending = other.request('exec', { command: `echo $$ > ${marker}; sleep 1000` });
    // The command is running once it wrote its pid (a fixed wait may end before that on a loaded machine).
    const pid = Number(await until(() => (existsSync(marker) && readFileSync(marker, 'utf8').endsWith('\n') ? readFileSync(marker, 'utf8') : undefined), 'the command to start'));
    other.close();
    await expect(pending).rejects.toBeInstanceOf(ServiceError);
    expect(await endsWithin(pid)).toBe(true);
  });
});
