/**
 * The bubblewrap executor end to end on this host: real user/pid/net namespaces, cgroup v1
 * limits and the compiled daemon. Needs root (build first: npx tsc -p .).
 */
import { chmodSync, existsSync, mkdirSync, readFileSync, readdirSync, statSync, symlinkSync, unlinkSync, writeFileSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import { createServer, type Server } from 'node:net';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BwrapExecutor, probeSandboxSupport, removeSandboxRoot, type BwrapExecutorOptions } from '../../src/sandbox/bwrap/index.js';
import { CgroupManager } from '../../src/sandbox/cgroups.js';
import type { SandboxHandle, SandboxLimits, SandboxSpec } from '../../src/sandbox/executor.js';
import { DAEMON_DIR, assertDaemonBuilt, isAlive, isRoot, traversableTempDir } from './helpers.js';

const UID = 64000;
const LIMITS: SandboxLimits = { memoryBytes: 128 * 1024 * 1024, pidsMax: 64, cpuQuotaPercent: 50 };

let base: string;
let dataDir: string;
let options: BwrapExecutorOptions;
let ex: BwrapExecutor;
const live: SandboxHandle[] = [];
let seq = 0;

function spec(overrides: Partial<SandboxSpec> = {}): SandboxSpec {
  const id = `ws_test${process.pid}x${++seq}`;
  return { id, rootDir: path.join(dataDir, 'workspaces', id), limits: LIMITS, network: 'none', ...overrides };
}

async function create(s: SandboxSpec, executor = ex): Promise<SandboxHandle> {
  const h = await executor.create(s);
  live.push(h);
  return h;
}

function cgroup(id: string) {
  return CgroupManager.discover().group(id);
}

/** A host Unix socket standing in for the egress proxy: answers every request with 200 and what it saw. */
async function fakeProxy(socketPath: string, tag: string): Promise<{ server: Server; seen: string[] }> {
  const seen: string[] = [];
  const server = createServer((c) => {
    c.once('data', (d) => {
      const line = d.toString().split('\r\n')[0]!;
      seen.push(line);
      const body = `${tag}: ${line}`;
      c.end(`HTTP/1.1 200 OK\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n${body}`);
    });
  });
  await new Promise<void>((resolve) => server.listen(socketPath, resolve));
  chmodSync(socketPath, 0o666);
  return { server, seen };
}

describe.skipIf(!isRoot)('bubblewrap executor', () => {
  beforeAll(() => {
    assertDaemonBuilt();
    base = traversableTempDir('atl-b-');
    dataDir = path.join(base, 'data');
    mkdirSync(path.join(dataDir, 'workspaces'), { recursive: true, mode: 0o711 });
    chmodSync(dataDir, 0o711);
    writeFileSync(path.join(dataDir, 'atelier.db'), 'host secret', { mode: 0o600 });
    options = { runDir: path.join(base, 'run'), daemonDir: DAEMON_DIR, uid: UID, gid: UID };
    ex = new BwrapExecutor(options);
  });

  afterAll(async () => {
    for (const h of live) await ex.destroy(h).catch(() => undefined);
    if (base) await rm(base, { recursive: true, force: true });
  });

  it('finds everything it needs on this host', async () => {
    expect(await probeSandboxSupport(options)).toEqual({ ok: true, problems: [] });
  });

  it('a daemon that ends at once is reported at once, not after the start-up timeout', async () => {
    const quick = new BwrapExecutor({ ...options, nodePath: '/bin/false', startTimeoutMs: 30_000 });
    const s = spec();
    const t0 = Date.now();
    await expect(quick.create(s)).rejects.toMatchObject({ code: 'FAILED_PRECONDITION', message: 'sandbox ended during start-up (exit 1)' });
    expect(Date.now() - t0).toBeLessThan(10_000);
    expect(cgroup(s.id).exists()).toBe(false);
  });

  describe('one sandbox', () => {
    let s: SandboxSpec;
    let h: SandboxHandle;
    const hostCgroupBefore = readFileSync('/proc/self/cgroup', 'utf8');

    beforeAll(async () => {
      process.env.ATELIER_TEST_HOST_SECRET = 'must-not-leak';
      s = spec({ env: { FROM_SPEC: 'yes' } });
      h = await create(s);
    });

    it('runs as an unprivileged user, on the host too', async () => {
      const r = await ex.exec(h, {
        command: 'id -u; id -g; id -un; grep ^NoNewPrivs /proc/self/status; unshare -U true 2>/dev/null && echo userns || echo no-userns; grep ^Cap /proc/self/status',
      });
      const [uid, gid, name, nnp, userns, ...caps] = r.stdout.trim().split('\n');
      expect([uid, gid, name, nnp, userns]).toEqual(['1000', '1000', 'user', 'NoNewPrivs:\t1', 'no-userns']);
      for (const c of caps) expect(c).toMatch(/:\s+0+$/);
      const members = await cgroup(h.id).members();
      expect(members.length).toBeGreaterThan(0);
      for (const pid of members) {
        const status = readFileSync(`/proc/${pid}/status`, 'utf8');
        expect(/^Uid:\s+(.*)$/m.exec(status)![1]!.split(/\s+/)).toEqual([String(UID), String(UID), String(UID), String(UID)]);
      }
    });

    it('keeps the runner out of the sandbox cgroups', () => {
      expect(readFileSync('/proc/self/cgroup', 'utf8')).toBe(hostCgroupBefore);
    });

    it('shows none of the host filesystem beyond what it binds', async () => {
      const r = await ex.exec(h, {
        command: [
          'ls /root 2>&1',
          'test -e /etc/shadow && echo shadow-visible',
          `test -e ${dataDir} && echo datadir-visible`,
          `test -e ${base} && echo base-visible`,
          'ls /home /run',
          'find / \\( -path /proc -o -path /usr -o -path /sys \\) -prune -o -name atelier.db -print 2>/dev/null',
          'touch /usr/x /etc/x /x 2>&1 | wc -l',
          'echo ok > /workspace/w && echo ok > /home/user/h && echo ok > /tmp/t && echo writable',
        ].join('; '),
      });
      expect(r.stdout).toContain('ls: cannot access \'/root\': No such file or directory');
      expect(r.stdout).not.toMatch(/visible|atelier\.db/);
      expect(r.stdout).toContain('/home:\nuser\n\n/run:\natelier\negress\n');
      expect(r.stdout).toMatch(/\n3\nwritable\n$/);
      // The sandbox's files land on the host, owned by the sandbox uid.
      expect(statSync(path.join(s.rootDir, 'repo', 'w')).uid).toBe(UID);
    });

    it('has no network but its own loopback', async () => {
      const host = createServer((c) => c.end('reached'));
      await new Promise<void>((resolve) => host.listen(0, '127.0.0.1', resolve));
      const port = (host.address() as { port: number }).port;
      try {
        const r = await ex.exec(h, {
          command: [
            'curl -sS -m 3 http://1.1.1.1/ 2>&1; echo "curl=$?"',
            `node -e "require('net').connect(${port}, '127.0.0.1').on('connect', () => { console.log('host loopback reached'); process.exit(0); }).on('error', (e) => { console.log(e.code); process.exit(0); })"`,
            "cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' '",
          ].join('; '),
          timeoutMs: 10_000,
        });
        expect(r.stdout).toMatch(/curl=7/);
        expect(r.stdout).toContain('ECONNREFUSED');
        expect(r.stdout).not.toContain('reached');
        expect(r.stdout.trim().endsWith('\nlo')).toBe(true);
      } finally {
        host.close();
      }
    });

    it('starts commands from a clean environment', async () => {
      const r = await ex.exec(h, { argv: ['env'], env: { PER_EXEC: '1' } });
      const env = Object.fromEntries(r.stdout.trim().split('\n').map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]));
      expect(env).toMatchObject({ HOME: '/home/user', USER: 'user', PATH: '/usr/local/bin:/usr/bin:/bin', LANG: 'C.UTF-8', FROM_SPEC: 'yes', PER_EXEC: '1' });
      expect(r.stdout).not.toContain('must-not-leak');
      expect(Object.keys(env).filter((k) => /proxy/i.test(k))).toEqual([]);
    });

    it('reports exit codes, signals, stdin and streamed output', async () => {
      expect(await ex.exec(h, { command: 'exit 3' })).toMatchObject({ exitCode: 3, signal: null, timedOut: false });
      expect(await ex.exec(h, { command: 'kill -KILL $$' })).toMatchObject({ exitCode: null, signal: 'SIGKILL' });
      expect((await ex.exec(h, { argv: ['tr', 'a-z', 'A-Z'], stdin: 'hello' })).stdout).toBe('HELLO');
      const chunks: string[] = [];
      const r = await ex.exec(h, { command: 'echo a; sleep 0.05; echo b >&2', cwd: '.' }, (stream, chunk) => chunks.push(`${stream}:${chunk}`));
      expect(chunks).toEqual(['stdout:a\n', 'stderr:b\n']);
      expect(r).toMatchObject({ stdout: 'a\n', stderr: 'b\n' });
      await expect(ex.exec(h, { command: 'pwd', cwd: '../..' })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    });

    it('kills a timed-out tree, including a setsid grandchild that ignores SIGTERM', async () => {
      const t0 = Date.now();
      const r = await ex.exec(h, {
        command: [
          // The grandchild leaves the session and process group, and its parent exits at once.
          `( setsid sh -c 'trap "" TERM; echo $$ > /tmp/gc.pid; exec sleep 1000' </dev/null >/dev/null 2>&1 & )`,
          'sleep 0.3',
          'ps -o ppid=,sid= -p $(cat /tmp/gc.pid) > /tmp/gc.info',
          'sleep 1000',
        ].join('; '),
        timeoutMs: 800,
        killGraceMs: 200,
      });
      expect(r.timedOut).toBe(true);
      expect(Date.now() - t0).toBeLessThan(5_000);
      const check = await ex.exec(h, { command: 'cat /tmp/gc.pid /tmp/gc.info; kill -0 $(cat /tmp/gc.pid) 2>/dev/null && echo alive || echo gone' });
      const [gcPid, info, verdict] = check.stdout.trim().split('\n');
      // It really had escaped: re-parented to the sandbox's init and in its own session.
      expect(info!.trim().split(/\s+/)).toEqual(['1', gcPid!.trim()]);
      expect(verdict).toBe('gone');
    });

    it('kills only the exec that timed out, not its neighbours', async () => {
      const [slow, doomed] = await Promise.all([
        ex.exec(h, { command: 'sleep 0.6; echo neighbour-done' }),
        ex.exec(h, { command: 'sleep 1000 & sleep 1000', timeoutMs: 200 }),
      ]);
      expect(doomed.timedOut).toBe(true);
      expect(slow).toMatchObject({ exitCode: 0, stdout: 'neighbour-done\n', timedOut: false });
    });

    it('a finished foreground command takes its background processes with it; keepBackground keeps them', async () => {
      const fg = await ex.exec(h, { command: 'setsid sleep 1000 </dev/null >/dev/null 2>&1 & echo $!' });
      // Dead is gone or a zombie: a killed process the sandbox's init has not reaped yet (on a loaded
      // machine that can take a moment) still answers kill -0, but it runs nothing.
      const p = fg.stdout.trim();
      expect((await ex.exec(h, { command: `if [ ! -e /proc/${p} ] || grep -q '^State:[[:space:]]*Z' /proc/${p}/status 2>/dev/null; then echo gone; else echo alive; fi` })).stdout).toBe('gone\n');
      const bg = await ex.exec(h, { command: 'setsid sleep 1000 </dev/null >/dev/null 2>&1 & echo $!', keepBackground: true });
      const pid = bg.stdout.trim();
      expect((await ex.exec(h, { command: `kill -0 ${pid} && echo alive` })).stdout).toBe('alive\n');
      await ex.exec(h, { command: `kill ${pid}` });
    });

    it('removes the exec cgroup of every command that left nothing behind, after the reply', async () => {
      // Groups an earlier test left for the periodic sweep (a background process killed later) do not count.
      const before = new Set(readdirSync(cgroup(h.id).dirs.freezer));
      const groups = (): string[] => readdirSync(cgroup(h.id).dirs.freezer).filter((e) => e.startsWith('e-') && !before.has(e));
      // Twenty quick commands, a burst of them at once included: afterwards only the waiting spares'
      // groups remain (one each), none of a finished command.
      for (let i = 0; i < 10; i++) expect((await ex.exec(h, { command: `echo ${i}` })).stdout).toBe(`${i}\n`);
      const burst = await Promise.all(Array.from({ length: 10 }, (_, i) => ex.exec(h, { command: `echo b${i}` })));
      expect(burst.map((r) => r.stdout)).toEqual(Array.from({ length: 10 }, (_, i) => `b${i}\n`));
      // Of the groups made since: at most one per spare (spareTarget(64) is 2), each holding its spare.
      let left = groups();
      for (let i = 0; i < 100 && left.length > 2; i++) {
        await sleep(20);
        left = groups();
      }
      expect(left.length).toBeLessThanOrEqual(2);
      for (const g of left) expect(readFileSync(path.join(cgroup(h.id).dirs.freezer, g, 'cgroup.procs'), 'utf8').trim().split('\n')).toHaveLength(1);
    });

    it('starts commands from spare exec starters already placed in their own exec cgroups, and falls back when a spare is gone', async () => {
      // Spares (two) are made in the background after an exec and then placed; the command looking
      // at them runs in one. Each waiting spare sits in an exec cgroup of its own, never in the
      // sandbox's own group (a spare still being placed is not used: wait until none is).
      const waiting = async (): Promise<string[]> =>
        (await ex.exec(h, { command: 'for p in $(pgrep -x exec-starter); do grep freezer /proc/$p/cgroup; done' })).stdout.trim().split('\n').filter(Boolean);
      const placed = (lines: string[]): boolean => lines.length >= 1 && lines.every((l) => /\/e-s\d+-[0-9a-z]+$/.test(l));
      let freezer = await waiting();
      for (let i = 0; i < 100 && !placed(freezer); i++) {
        await sleep(50);
        freezer = await waiting();
      }
      expect(placed(freezer)).toBe(true);
      expect(freezer.length).toBeLessThanOrEqual(2);
      expect(new Set(freezer).size).toBe(freezer.length);
      // An exec through a spare: own exec cgroup, cwd, argv lookup in PATH, env, stdin, exit codes.
      const r = await ex.exec(h, { argv: ['sh', '-c', 'grep freezer /proc/self/cgroup; pwd; echo "$PER_EXEC"; cat; exit 4'], cwd: '.', env: { PER_EXEC: 'a\nb' }, stdin: 'in' });
      expect(r.exitCode).toBe(4);
      const [own, ...rest] = r.stdout.split('\n');
      expect(own).toMatch(/\/e-s\d+-[0-9a-z]+$/);
      expect(rest.join('\n')).toBe('/workspace\na\nb\nin');
      expect(await ex.exec(h, { argv: ['no-such-command-here'] })).toMatchObject({ exitCode: 127 });
      expect((await ex.exec(h, { command: 'cat; echo done' })).stdout).toBe('done\n'); // no stdin: /dev/null
      // A workspace process killing every waiting spare costs nothing but the fast path.
      await ex.exec(h, { command: 'pkill -KILL -x exec-starter; sleep 0.1' });
      expect(await ex.exec(h, { command: 'echo still-works' })).toMatchObject({ exitCode: 0, stdout: 'still-works\n' });
    });

    it('cancels through an AbortSignal', async () => {
      const ctl = new AbortController();
      setTimeout(() => ctl.abort(), 300);
      const t0 = Date.now();
      const r = await ex.exec(h, { command: 'echo started; sleep 1000' }, undefined, ctl.signal);
      expect(r).toMatchObject({ cancelled: true, stdout: 'started\n' });
      expect(Date.now() - t0).toBeLessThan(3_000);
    });

    it('caps output at head and tail', async () => {
      const r = await ex.exec(h, { command: 'seq 1 100000', maxOutputBytes: 2048 });
      expect(r.stdoutTruncated).toBe(true);
      expect(r.stdout.startsWith('1\n2\n3\n')).toBe(true);
      expect(r.stdout.endsWith('99999\n100000\n')).toBe(true);
      expect(r.stdout).toMatch(/\[\.\.\. \d+ bytes omitted \.\.\.\]/);
    });

    it('reports usage from its cgroups', async () => {
      const st = await ex.stats(h);
      expect(st.pids).toBeGreaterThan(2);
      expect(st.pids).toBeLessThanOrEqual(LIMITS.pidsMax);
      expect(st.memoryBytes).toBeGreaterThan(0);
      expect(st.cpuUsageNs).toBeGreaterThan(0);
    });

    it('refuses a second create for a running sandbox', async () => {
      await expect(ex.create(s)).rejects.toMatchObject({ code: 'CONFLICT' });
    });
  });

  describe('limits', () => {
    let h: SandboxHandle;
    beforeAll(async () => {
      h = await create(spec());
    });

    it('contains a fork bomb with pids.max while the runner stays responsive', async () => {
      let maxLag = 0;
      let last = Date.now();
      const tick = setInterval(() => {
        const now = Date.now();
        maxLag = Math.max(maxLag, now - last - 10);
        last = now;
      }, 10);
      let maxPids = 0;
      const sampling = (async () => {
        for (let i = 0; i < 15; i++) {
          maxPids = Math.max(maxPids, (await ex.stats(h)).pids);
          await sleep(100);
        }
      })();
      try {
        const r = await ex.exec(h, { command: ':(){ :|:& };:; sleep 1000', timeoutMs: 2_000 });
        await sampling;
        expect(r.timedOut).toBe(true);
        expect(maxPids).toBeGreaterThan(LIMITS.pidsMax / 2);
        expect(maxPids).toBeLessThanOrEqual(LIMITS.pidsMax);
        // The executor runs in this process: a runner the bomb froze would stall for the exec's whole
        // 2 s; a loaded 2-core machine (the suite's other worker) delays a timer by a few hundred ms
        // on its own, so the bound tells the two apart without depending on that noise.
        expect(maxLag).toBeLessThan(1500);
      } finally {
        clearInterval(tick);
      }
      // The exec's cgroup took the whole bomb with it; the daemon is fine. The pids controller counts
      // a killed process until the sandbox's init has reaped it, which a loaded machine may do a
      // moment after the reply: the count must fall, not be low at that instant.
      let pidsAfter = (await ex.stats(h)).pids;
      for (let i = 0; i < 100 && pidsAfter >= 20; i++) {
        await sleep(100);
        pidsAfter = (await ex.stats(h)).pids;
      }
      expect(pidsAfter).toBeLessThan(20);
      expect((await ex.exec(h, { command: 'echo still here' })).stdout).toBe('still here\n');
    });

    it('kills a memory hog at the memory limit and keeps the daemon', async () => {
      const r = await ex.exec(h, {
        argv: ['node', '-e', 'const a = []; for (;;) a.push(Buffer.alloc(1 << 20, 1));'],
        timeoutMs: 20_000,
      });
      expect(r).toMatchObject({ signal: 'SIGKILL', timedOut: false });
      expect((await ex.stats(h)).memoryBytes).toBeLessThanOrEqual(LIMITS.memoryBytes);
      expect((await ex.exec(h, { command: 'echo survived' })).stdout).toBe('survived\n');
    });

    it('tells nproc the truth with a cpuset', async () => {
      const h1 = await create(spec({ limits: { ...LIMITS, cpus: '0' } }));
      expect((await ex.exec(h1, { argv: ['nproc'] })).stdout).toBe('1\n');
    });
  });

  describe('lifecycle', () => {
    it('stop() kills every process and keeps the files', async () => {
      const s = spec();
      const h = await create(s);
      await ex.exec(h, { command: 'echo kept > /workspace/f; setsid sleep 1000 </dev/null >/dev/null 2>&1 & sleep 1000 </dev/null >/dev/null 2>&1 &' });
      const cg = cgroup(h.id);
      expect((await cg.members()).length).toBeGreaterThan(3);
      await ex.stop(h);
      expect(await cg.members()).toEqual([]);
      expect(isAlive(h.pid)).toBe(false);
      expect(existsSync(h.socketPath)).toBe(false);
      expect(readFileSync(path.join(s.rootDir, 'repo', 'f'), 'utf8')).toBe('kept\n');
      await expect(ex.exec(h, { command: 'true' })).rejects.toMatchObject({ code: 'UNAVAILABLE' });
      expect(await ex.recover(s)).toBeNull();
      // And it starts again on the same files.
      const again = await create(s);
      expect((await ex.exec(again, { command: 'cat f' })).stdout).toBe('kept\n');
    });

    it('recover() reattaches a new executor to a live daemon', async () => {
      const s = spec();
      const h = await create(s);
      await ex.exec(h, { command: 'echo 42 > /tmp/state' });
      const restarted = new BwrapExecutor(options);
      const again = await restarted.recover(s);
      expect(again).toEqual(h);
      expect((await restarted.exec(again!, { command: 'cat /tmp/state' })).stdout).toBe('42\n');
      // A policy that does not match what runs is not reattached.
      expect(await restarted.recover({ ...s, network: { proxySocket: '/nonexistent.sock' } })).toBeNull();
      expect(await restarted.recover(spec())).toBeNull();
    });

    it('destroy() removes cgroups and runtime files; removeSandboxRoot removes the tree without following links', async () => {
      const s = spec();
      const h = await create(s);
      await ex.exec(h, { command: 'mkdir -p locked/deep && echo x > locked/deep/f && chmod 000 locked && ln -s /etc/passwd pw && ln -s / rootlink' });
      const runDir = path.dirname(path.dirname(h.socketPath));
      await ex.destroy(h);
      expect(cgroup(h.id).exists()).toBe(false);
      expect(existsSync(runDir)).toBe(false);
      const outside = path.join(base, 'outside.txt');
      writeFileSync(outside, 'survives');
      symlinkSync(outside, path.join(s.rootDir, 'home', 'link-out'));
      await removeSandboxRoot(s.rootDir, { uid: UID, gid: UID });
      expect(existsSync(s.rootDir)).toBe(false);
      expect(readFileSync(outside, 'utf8')).toBe('survives');
      expect(existsSync('/etc/passwd')).toBe(true);
    });

    it('fails create() clearly when the data directory is not traversable', async () => {
      const closed = path.join(base, 'closed');
      mkdirSync(closed, { mode: 0o700 });
      const s = spec({ rootDir: path.join(closed, 'ws') });
      await expect(ex.create(s)).rejects.toMatchObject({ code: 'FAILED_PRECONDITION', message: expect.stringContaining('cannot traverse') });
      expect(cgroup(s.id).exists()).toBe(false);
    });
  });

  describe('without cgroups', () => {
    // A cpuset the host does not have makes the cgroup set-up fail.
    const badLimits = { ...LIMITS, cpus: '4095' };

    it('refuses to start unless allowNoCgroups is set', async () => {
      const s = spec({ limits: badLimits });
      await expect(ex.create(s)).rejects.toMatchObject({
        code: 'FAILED_PRECONDITION',
        message: expect.stringContaining('cannot set up sandbox cgroups'),
      });
      expect(cgroup(s.id).exists()).toBe(false);
    });

    it('runs, times out and stops through the keeper with allowNoCgroups (development)', async () => {
      const dev = new BwrapExecutor({ ...options, allowNoCgroups: true });
      const s = spec({ limits: badLimits });
      const h = await dev.create(s);
      try {
        expect(cgroup(s.id).exists()).toBe(false);
        expect((await dev.exec(h, { command: 'id -u' })).stdout).toBe('1000\n');
        const r = await dev.exec(h, { command: 'sleep 1000 & sleep 1000', timeoutMs: 200 });
        expect(r.timedOut).toBe(true);
        // Kept running (keepBackground, as a task's would be): without it the daemon ends what the
        // command leaves in its group when it returns, which a setsid not yet done still is.
        await dev.exec(h, { command: 'setsid sleep 7654321 </dev/null >/dev/null 2>&1 &', keepBackground: true });
        await expect(dev.stats(h)).rejects.toMatchObject({ code: 'FAILED_PRECONDITION' });
        const marked = () =>
          readdirSync('/proc')
            .filter((p) => /^\d+$/.test(p) && isAlive(Number(p)))
            .filter((p) => {
              try {
                return readFileSync(`/proc/${p}/cmdline`, 'utf8').includes('7654321');
              } catch {
                return false;
              }
            });
        // The background child is forked before the command returns, but its execve of sleep may
        // come a moment later on a loaded machine (its cmdline is bash's until then).
        for (let i = 0; i < 100 && marked().length === 0; i++) await sleep(50);
        expect(marked().length).toBe(1);
        await dev.stop(h);
        for (let i = 0; i < 200 && marked().length > 0; i++) await sleep(50);
        expect(marked()).toEqual([]);
        expect(isAlive(h.pid)).toBe(false);
      } finally {
        await dev.destroy(h);
      }
    });
  });

  describe('egress through a proxy socket', () => {
    it('bridges 127.0.0.1:3128 to the host proxy socket, after a policy change and a proxy restart', async () => {
      const proxySocket = path.join(base, 'proxy.sock');
      const first = await fakeProxy(proxySocket, 'first');
      const s = spec();
      const h = await create(s);
      try {
        await ex.exec(h, { command: 'echo before > /workspace/f' });
        const pid = h.pid;
        await ex.setNetworkPolicy(h, { proxySocket });
        expect(h.pid).not.toBe(pid);
        const r = await ex.exec(h, {
          command: 'cat f; curl -sS -m 5 http://registry.example/pkg; echo; curl -sS -m 3 --noproxy "*" http://1.1.1.1/ 2>&1 | head -c 20; echo; env | grep -c -i _proxy',
          timeoutMs: 15_000,
        });
        const lines = r.stdout.trim().split('\n');
        expect(lines[0]).toBe('before');
        expect(lines[1]).toBe('first: GET http://registry.example/pkg HTTP/1.1');
        expect(lines[2]).toMatch(/^curl: \(7\)/);
        expect(Number(lines[3])).toBeGreaterThanOrEqual(6);
        expect(first.seen).toEqual(['GET http://registry.example/pkg HTTP/1.1']);

        // The runner restarts: its proxy comes back on a new socket file, the sandbox stays.
        await new Promise<void>((resolve) => first.server.close(() => resolve()));
        if (existsSync(proxySocket)) unlinkSync(proxySocket);
        const second = await fakeProxy(proxySocket, 'second');
        try {
          const restarted = new BwrapExecutor(options);
          const again = await restarted.recover({ ...s, network: { proxySocket } });
          expect(again).toEqual(h);
          const r2 = await restarted.exec(again!, { command: 'curl -sS -m 5 https://registry.example/x 2>&1 | head -c 80', timeoutMs: 15_000 });
          expect(second.seen).toEqual(['CONNECT registry.example:443 HTTP/1.1']);
          expect(r2.exitCode).toBe(0);
        } finally {
          second.server.close();
        }
        await ex.setNetworkPolicy(h, 'none');
        expect((await ex.exec(h, { command: 'env | grep -ci proxy; curl -sS -m 2 http://127.0.0.1:3128/ 2>&1 | head -c 9' })).stdout).toBe('0\ncurl: (7)');
      } finally {
        first.server.close();
      }
    });
  });

  describe('ephemeral sandboxes', () => {
    it('run one command with their own binds and no network', async () => {
      const dir = path.join(base, 'eph-repo');
      mkdirSync(dir);
      chmodSync(dir, 0o777);
      const runEntries = readdirSync(options.runDir!).length;
      const r = await ex.runEphemeral({
        id: `eph-test-${process.pid}`,
        binds: [{ source: dir, target: '/workspace' }],
        limits: LIMITS,
        network: 'none',
        cwd: '/workspace',
        command: 'id -u; echo made > made.txt; test -e /run/atelier/d.sock || echo no-daemon; curl -sS -m 2 http://1.1.1.1/ >/dev/null 2>&1 || echo no-net',
      });
      expect(r).toMatchObject({ exitCode: 0, stdout: '1000\nno-daemon\nno-net\n', timedOut: false });
      expect(statSync(path.join(dir, 'made.txt')).uid).toBe(UID);
      expect(cgroup(`eph-test-${process.pid}`).exists()).toBe(false);
      expect(readdirSync(options.runDir!).length).toBe(runEntries);
    });

    it('leave nothing running after a normal exit: a setsid\'d leftover dies with the sandbox, its cgroup is gone', async () => {
      const id = `eph-left-${process.pid}`;
      const r = await ex.runEphemeral({
        id,
        binds: [],
        limits: LIMITS,
        network: 'none',
        command: `( setsid sh -c 'trap "" TERM HUP; exec sleep 1001' & ); ( sleep 1002 & ); echo started`,
      });
      expect(r).toMatchObject({ exitCode: 0, stdout: 'started\n', timedOut: false });
      expect(cgroup(id).exists()).toBe(false);
      const sleepers = readdirSync('/proc').filter((p) => {
        try {
          return /^\d+$/.test(p) && /^sleep\x00100[12]\x00$/.test(readFileSync(`/proc/${p}/cmdline`, 'utf8'));
        } catch {
          return false;
        }
      });
      expect(sleepers).toEqual([]);
    });

    it('are killed with their cgroup on timeout', async () => {
      const t0 = Date.now();
      const r = await ex.runEphemeral({
        binds: [],
        limits: LIMITS,
        network: 'none',
        command: `( setsid sh -c 'trap "" TERM; sleep 1000' & ); echo waiting; sleep 1000`,
        timeoutMs: 500,
      });
      expect(r).toMatchObject({ timedOut: true, signal: 'SIGKILL', stdout: 'waiting\n' });
      expect(Date.now() - t0).toBeLessThan(3_000);
    });

    it('reach the proxy through the bridge, with extra read-only binds', async () => {
      const proxySocket = path.join(base, 'eph-proxy.sock');
      const proxy = await fakeProxy(proxySocket, 'eph');
      const secretDir = path.join(base, 'helper');
      mkdirSync(secretDir, { mode: 0o755 });
      writeFileSync(path.join(secretDir, 'note'), 'read-only');
      try {
        const out: Buffer[] = [];
        const r = await ex.runEphemeral({
          binds: [{ source: secretDir, target: '/run/helper', readOnly: true }],
          limits: LIMITS,
          network: { proxySocket },
          argv: ['sh', '-c', 'cat /run/helper/note; echo; echo x 2>/dev/null >/run/helper/note || echo ro; curl -sS -m 5 http://git.example/repo.git/info/refs'],
          onOutput: (_stream, chunk) => out.push(chunk),
          timeoutMs: 15_000,
        });
        expect(r.exitCode).toBe(0);
        expect(r.stdout).toBe('read-only\nro\neph: GET http://git.example/repo.git/info/refs HTTP/1.1');
        expect(Buffer.concat(out).toString()).toBe(r.stdout);
      } finally {
        proxy.server.close();
      }
    });

    it('started eight at a time, each answers with its whole output (a quick end before anyone listened once lost it, or the answer)', { timeout: 60_000 }, async () => {
      // Eight launches at once keep the thread pool busy between each spawn and the first listener;
      // `id -u` ends within that gap. Before the fix the output was drained away (ok, empty stdout)
      // or 'close' came before the listener and the call never answered.
      const dir = path.join(base, 'eph-many');
      mkdirSync(dir);
      chmodSync(dir, 0o777);
      for (let round = 0; round < 3; round++) {
        const runs = await Promise.all(
          Array.from({ length: 8 }, (_, i) =>
            Promise.race([
              ex.runEphemeral({ binds: [{ source: dir, target: '/workspace' }], limits: LIMITS, network: 'none', cwd: '/workspace', command: 'id -u; echo done >&2', privileged: i % 2 === 0, timeoutMs: 20_000 }),
              sleep(25_000).then(() => 'no answer' as const),
            ]),
          ),
        );
        runs.forEach((r, i) => {
          expect(r, `round ${round}, run ${i}`).toMatchObject({ exitCode: 0, stdout: i % 2 === 0 ? '0\n' : '1000\n', stderr: 'done\n', timedOut: false });
        });
      }
    });
  });
});
