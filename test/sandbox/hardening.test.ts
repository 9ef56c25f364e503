/**
 * The sandbox's own surfaces (issue #12 item 3), attacked from inside as the workspace user:
 * the daemon's socket and directory, the daemon process, the seccomp filter (every refused
 * syscall answers EPERM), host paths in /proc/self/mountinfo and in pid 1's command line, and a
 * normal git/node/npm/python/compiler workload that must still work. Needs root (build first).
 */
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BwrapExecutor } from '../../src/sandbox/bwrap/index.js';
import type { SandboxHandle, SandboxLimits } from '../../src/sandbox/executor.js';
import { readFileSync } from 'node:fs';
import { DAEMON_DIR, assertDaemonBuilt, isRoot, traversableTempDir } from './helpers.js';

/** How a host path shows as the root of a bind of it in mountinfo: its path inside the filesystem it is on (the longest mount point above it). */
function pathInItsFilesystem(p: string): string {
  let best = { point: '/', root: '/' };
  for (const l of readFileSync('/proc/self/mountinfo', 'utf8').split('\n')) {
    const f = l.split(' ');
    const point = f[4];
    if (point && (p === point || p.startsWith(point === '/' ? '/' : point + '/')) && point.length >= best.point.length) best = { point, root: f[3]! };
  }
  return path.join(best.root, path.relative(best.point, p));
}

const LIMITS: SandboxLimits = { memoryBytes: 512 * 1024 * 1024, pidsMax: 128, cpuQuotaPercent: 100 };

let base: string;
let ex: BwrapExecutor;
let h: SandboxHandle;

async function sh(command: string, timeoutMs = 60_000) {
  return ex.exec(h, { command, timeoutMs });
}

/** x86_64 syscall numbers of what the filter refuses, with harmless arguments. */
const PROBES: Array<[string, number, number[]]> = [
  ['add_key', 248, []],
  ['request_key', 249, []],
  ['keyctl', 250, [0, -3]], // KEYCTL_GET_KEYRING_ID of the session keyring: works unfiltered
  ['bpf', 321, [0, 0, 0]],
  ['userfaultfd', 323, [0]],
  ['perf_event_open', 298, [0, 0, -1, -1, 0]],
  ['mount', 165, [0, 0, 0, 0, 0]],
  ['umount2', 166, [0, 0]],
  ['pivot_root', 155, [0, 0]],
  ['open_tree', 428, [-100, 0, 0]],
  ['move_mount', 429, [-1, 0, -1, 0, 0]],
  ['fsopen', 430, [0, 0]],
  ['kexec_load', 246, [0, 0, 0, 0]],
  ['kexec_file_load', 320, [-1, -1, 0, 0, 0]],
  ['init_module', 175, [0, 0, 0]],
  ['finit_module', 313, [-1, 0, 0]],
  ['delete_module', 176, [0, 0]],
  ['unshare(CLONE_NEWUSER)', 272, [0x10000000]],
  ['unshare(CLONE_NEWNS)', 272, [0x00020000]],
  ['unshare(CLONE_NEWNET)', 272, [0x40000000]],
  ['clone(CLONE_NEWUSER)', 56, [0x10000000 | 17, 0, 0, 0, 0]],
  ['setns', 308, [-1, 0]],
  ['ptrace(PTRACE_TRACEME)', 101, [0, 0, 0, 0]],
  ['process_vm_readv', 310, [1, 0, 0, 0, 0, 0]],
  ['pidfd_getfd', 438, [-1, 0, 0]],
  ['io_uring_setup', 425, [1, 0]],
];

const PROBE_PY = `
import ctypes, json, sys
libc = ctypes.CDLL(None, use_errno=True)
out = {}
for name, nr, args in json.loads(sys.argv[1]):
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])
    out[name] = 'ok' if r >= 0 else {1: 'EPERM', 38: 'ENOSYS'}.get(ctypes.get_errno(), 'errno %d' % ctypes.get_errno())
print(json.dumps(out))
`;

describe.skipIf(!isRoot)('sandbox hardening', () => {
  beforeAll(async () => {
    assertDaemonBuilt();
    base = traversableTempDir('atl-h-');
    ex = new BwrapExecutor({ runDir: path.join(base, 'run'), daemonDir: DAEMON_DIR });
    h = await ex.create({ id: `ws_hard${process.pid}`, rootDir: path.join(base, 'ws'), limits: LIMITS, network: 'none' });
  }, 60_000);

  afterAll(async () => {
    if (h) await ex.destroy(h).catch(() => undefined);
    const { rm } = await import('node:fs/promises');
    await rm(base, { recursive: true, force: true });
  });

  it('every refused syscall answers EPERM (clone3: ENOSYS, so libc falls back to clone)', async () => {
    const r = await sh(`cat > /tmp/probe.py <<'PY'\n${PROBE_PY}\nPY\npython3 /tmp/probe.py '${JSON.stringify(PROBES)}'; python3 -c 'import ctypes; l=ctypes.CDLL(None, use_errno=True); print(l.syscall(435, 0, 0), ctypes.get_errno())'`);
    expect(r.exitCode, r.stderr).toBe(0);
    const [line, clone3] = r.stdout.trim().split('\n');
    const got = JSON.parse(line!) as Record<string, string>;
    for (const [name] of PROBES) expect(got[name], name).toBe('EPERM');
    expect(clone3).toBe('-1 38');
    expect((await sh('grep ^Seccomp: /proc/self/status')).stdout).toMatch(/Seccomp:\s+2/);
  });

  it('the workspace user cannot connect to, replace or remove the daemon socket, nor add to its directory', async () => {
    const r = await sh(
      `python3 -c 'import socket; s=socket.socket(socket.AF_UNIX)\ntry:\n  s.connect("/run/atelier/d.sock"); print("connected")\nexcept OSError as e: print("refused", e.errno)'; ` +
        'mv /run/atelier/d.sock /tmp/stolen 2>&1 || echo mv-refused; rm -f /run/atelier/d.sock 2>&1 || echo rm-refused; ' +
        'ln -s /tmp /run/atelier/x 2>&1 || echo ln-refused; chmod 777 /run/atelier 2>&1 || echo chmod-refused; ' +
        'python3 -c \'import socket,os; s=socket.socket(socket.AF_UNIX); s.bind("/run/atelier/d2.sock")\' 2>&1 | tail -1',
    );
    expect(r.stdout).toContain('refused 13');
    expect(r.stdout).not.toContain('connected');
    for (const m of ['mv-refused', 'rm-refused', 'ln-refused', 'chmod-refused']) expect(r.stdout).toContain(m);
    expect(r.stdout).toMatch(/PermissionError/);
    // The runner still reaches the daemon.
    expect((await sh('echo still')).stdout).toBe('still\n');
  });

  it('the workspace user cannot trace the daemon or read its memory, environment or descriptors', async () => {
    const pong = await ex.request<{ pid: number }>(h, 'ping', {});
    const pid = pong.pid;
    const r = await sh(
      `cat /proc/${pid}/environ >/dev/null 2>&1 && echo environ-read || echo environ-refused; ` +
        `ls /proc/${pid}/fd >/dev/null 2>&1 && echo fd-listed || echo fd-refused; ` +
        `python3 -c 'open("/proc/${pid}/mem","rb")' 2>/dev/null && echo mem-opened || echo mem-refused; ` +
        `python3 -c 'import ctypes; l=ctypes.CDLL(None, use_errno=True); r=l.ptrace(16, ${pid}, 0, 0); print("attach", r, ctypes.get_errno())'; ` +
        `stat -c '%U' /proc/${pid}/mem`,
    );
    expect(r.stdout).toContain('environ-refused');
    expect(r.stdout).toContain('fd-refused');
    expect(r.stdout).toContain('mem-refused');
    expect(r.stdout).toContain('attach -1 1');
    expect(r.stdout.trim().split('\n').pop()).toBe('nobody');
    // A command's own processes stay dumpable (debuggers of their own tools are another matter: ptrace is refused).
    expect((await sh('cat /proc/self/environ | tr "\\0" "\\n" | grep -c ^PATH=')).stdout.trim()).toBe('1');
  });

  it('no host path of the data directory or the install shows in mountinfo (except the socket directories) or pid 1\'s command line', async () => {
    const r = await sh('cat /proc/self/mountinfo; echo ===; tr "\\0" " " < /proc/1/cmdline');
    const [mountinfo, cmdline] = r.stdout.split('===');
    const install = path.resolve(DAEMON_DIR, '../../..');
    expect(mountinfo).not.toContain(install);
    // A bind names its source as a path inside the source's filesystem (mountinfo's root field):
    // under /work/main on a /work filesystem that is /main/..., which the check above cannot see.
    const seen = pathInItsFilesystem(install);
    expect(mountinfo!.split('\n').filter((l) => (l.split(' ')[3] ?? '').startsWith(seen + '/')).map((l) => l.split(' ').slice(3, 5).join(' '))).toEqual([]);
    expect(cmdline).not.toContain(install);
    expect(cmdline).not.toContain(base);
    const leaking = mountinfo!.split('\n').filter((l) => l.includes(base)).map((l) => l.split(' ')[4]);
    // Bound from the host by necessity: the workspace tree (here without its own filesystem). The
    // two socket directories come from the sandbox's own tmpfs (src/sandbox/runfs.ts).
    expect(leaking.sort()).toEqual(['/home/user', '/tmp', '/workspace']);
    const sockets = mountinfo!.split('\n').filter((l) => / \/run\/(atelier|egress) /.test(l));
    expect(sockets.map((l) => [l.split(' ')[3], l.split(' ')[4], l.split(' - ')[1]?.split(' ')[0]])).toEqual([
      ['/s', '/run/atelier', 'tmpfs'],
      ['/egress', '/run/egress', 'tmpfs'],
    ]);
  });

  it('commands load the C.UTF-8 locale from one read-only archive (src/sandbox/locale.ts), and it is UTF-8', async () => {
    const r = await sh(
      'x=é; echo "len ${#x}"; locale charmap; grep -c locale-archive /proc/self/maps; ' +
        'touch /usr/lib/locale/x 2>/dev/null && echo written || echo read-only; ' +
        'echo > /usr/lib/locale/locale-archive 2>/dev/null && echo archive-written || echo archive-read-only; ls /usr/lib/locale',
    );
    expect(r.exitCode, r.stderr).toBe(0);
    const [len, charmap, maps, dir, archive, ...listing] = r.stdout.trim().split('\n');
    expect(len).toBe('len 1');
    expect(charmap).toBe('UTF-8');
    // grep itself (dynamically linked, LANG=C.UTF-8) has the archive mapped.
    expect(Number(maps)).toBeGreaterThan(0);
    expect(dir).toBe('read-only');
    expect(archive).toBe('archive-read-only');
    expect(listing).toContain('C.utf8');
    expect(listing).toContain('locale-archive');
  });

  it('a normal coding workload still works: git, node (with worker threads), npm, python threads, a C compiler', async () => {
    const r = await sh(
      [
        'set -e',
        'cd /workspace && git init -q demo && cd demo',
        'git -c user.name=a -c user.email=a@b.c commit -q --allow-empty -m one && git log --oneline | wc -l',
        `node -e 'const { Worker } = require("worker_threads"); new Worker("process.exit(0)", { eval: true }).on("exit", (c) => console.log("worker", c))'`,
        'npm --version >/dev/null && echo npm-ok',
        'npm init -y >/dev/null && echo npm-init-ok',
        `python3 -c 'import threading, subprocess; t=threading.Thread(target=lambda: None); t.start(); t.join(); print(subprocess.run(["true"]).returncode)'`,
        'if command -v gcc >/dev/null; then printf "int main(){return 0;}" > t.c && gcc -o t t.c && ./t && echo cc-ok; else echo cc-ok; fi',
      ].join('\n'),
      120_000,
    );
    expect(r.stderr).toBe('');
    expect(r.stdout.trim().split('\n')).toEqual(['1', 'worker 0', 'npm-ok', 'npm-init-ok', '0', 'cc-ok']);
    expect(r.exitCode).toBe(0);
  }, 180_000);
});

describe.skipIf(!isRoot)('sandboxes whose runner never comes back', () => {
  it('the daemon exits once no runner has been connected for the orphan grace period, ending its sandbox', async () => {
    const dir = traversableTempDir('atl-o-');
    const ex2 = new BwrapExecutor({ runDir: path.join(dir, 'run'), daemonDir: DAEMON_DIR, orphanGraceMs: 1500 });
    const h2 = await ex2.create({ id: `ws_orph${process.pid}`, rootDir: path.join(dir, 'ws'), limits: LIMITS, network: 'none' });
    try {
      await ex2.exec(h2, { command: 'setsid sleep 600 >/dev/null 2>&1 &', keepBackground: true });
      // While the runner stays connected, the sandbox lives past the grace period.
      await new Promise((r) => setTimeout(r, 3000));
      expect(await ex2.alive(h2)).toBe(true);
      // The runner goes away (its connection closes) and does not come back.
      (ex2 as unknown as { clients: Map<string, { close(): void }> }).clients.get(h2.id)!.close();
      const end = Date.now() + 15_000;
      while (Date.now() < end && (await ex2.alive(h2))) await new Promise((r) => setTimeout(r, 200));
      expect(await ex2.alive(h2)).toBe(false);
      // Nothing of it is left running: the background sleep died with its pid namespace.
      const { CgroupManager } = await import('../../src/sandbox/cgroups.js');
      expect(await CgroupManager.discover().group(h2.id).members()).toEqual([]);
    } finally {
      await ex2.destroy(h2).catch(() => undefined);
      const { rm } = await import('node:fs/promises');
      await rm(dir, { recursive: true, force: true });
    }
  }, 60_000);
});
