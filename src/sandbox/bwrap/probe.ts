/**
 * Whether this host can run the bubblewrap driver's sandboxes (root, bubblewrap, setpriv, node,
 * namespaces, the seccomp filter, cgroups), each problem with its fix: `atelier doctor` and
 * serve's start-up check.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { CgroupManager } from '../cgroups.js';
import { nativeArtifacts } from '../native.js';
import { systemArgs } from './args.js';
import type { BwrapExecutorOptions } from './options.js';

export interface SandboxProblem {
  what: string;
  fix: string;
}

/**
 * Checks that this host can run bubblewrap sandboxes the way BwrapExecutor does: root, bubblewrap
 * (>= 0.8.0 for --disable-userns), setpriv, node for the daemon, user and network namespaces for
 * the sandbox uid, and writable cgroup v1 controllers. Used by `atelier doctor` and at start-up.
 */
export async function probeSandboxSupport(opts: BwrapExecutorOptions = {}): Promise<{ ok: boolean; problems: SandboxProblem[] }> {
  const problems: SandboxProblem[] = [];
  const bwrap = opts.bwrapPath ?? '/usr/bin/bwrap';
  const setpriv = opts.setprivPath ?? '/usr/bin/setpriv';
  const node = opts.nodePath ?? '/usr/bin/node';
  const root = process.getuid?.() === 0;
  if (!root) {
    problems.push({ what: 'the runner is not root', fix: 'run atelier serve as root; every sandbox drops to its own unprivileged uid' });
  }

  const version = await runProbe([bwrap, '--version']);
  const v = /(\d+)\.(\d+)\.(\d+)/.exec(version.stdout)?.slice(1).map(Number);
  if (!version.ok || !v) {
    problems.push({ what: `bubblewrap not found at ${bwrap}`, fix: 'apt-get install -y bubblewrap' });
  } else if (v[0]! * 1_000_000 + v[1]! * 1_000 + v[2]! < 8_000) {
    problems.push({ what: `bubblewrap ${v.join('.')} is too old (--disable-userns needs 0.8.0)`, fix: 'install bubblewrap 0.8.0 or later' });
  }
  const setprivOk = existsSync(setpriv);
  if (!setprivOk) problems.push({ what: `setpriv not found at ${setpriv}`, fix: 'apt-get install -y util-linux' });
  const nodeVersion = await runProbe([node, '--version']);
  if (!nodeVersion.ok || Number(/^v(\d+)/.exec(nodeVersion.stdout)?.[1] ?? 0) < 20) {
    problems.push({ what: `node 20 or later not found at ${node} (runs the in-sandbox daemon)`, fix: 'install nodejs >= 20 under /usr' });
  }

  if (root && setprivOk && version.ok) {
    const drop = [setpriv, `--reuid=${opts.uid ?? 64000}`, `--regid=${opts.gid ?? 64000}`, '--clear-groups', '--no-new-privs', '--inh-caps=-all', '--', bwrap];
    const checks: { flags: string[]; what: string; fix: string }[] = [
      {
        flags: ['--unshare-user', '--unshare-pid'],
        what: 'user namespaces are not available to the sandbox uid',
        fix: 'allow unprivileged user namespaces: sysctl user.max_user_namespaces=15000 (plus kernel.unprivileged_userns_clone=1 on older Debian kernels, kernel.apparmor_restrict_unprivileged_userns=0 on Ubuntu 24.04+)',
      },
      {
        flags: ['--unshare-user', '--unshare-net'],
        what: 'network namespaces cannot be created in a user namespace',
        fix: 'enable CONFIG_NET_NS in the kernel and allow network namespaces for unprivileged users',
      },
      {
        flags: ['--unshare-all', '--unshare-user', '--disable-userns', '--die-with-parent', '--new-session', '--clearenv'],
        what: 'the full sandbox command fails',
        fix: 'see the error: bubblewrap must be able to run every sandbox flag for an unprivileged user',
      },
    ];
    for (const c of checks) {
      const r = await runProbe([...drop, ...c.flags, ...systemArgs(), '--', '/bin/true']);
      if (!r.ok) problems.push({ what: `${c.what}: ${r.stderr.trim() || 'exit status ' + r.code}`, fix: c.fix });
    }
  }

  try {
    await nativeArtifacts(path.resolve(opts.runDir ?? '/run/atelier'));
  } catch (err) {
    problems.push({ what: `sandbox seccomp filter: ${err instanceof Error ? err.message : String(err)}`, fix: 'run scripts/setup.sh (apt-get install gcc libseccomp-dev)' });
  }

  try {
    const mgr = CgroupManager.discover(opts.cgroupParent);
    const group = await mgr.create(`probe-${process.pid}-${randomBytes(4).toString('hex')}`, {
      memoryBytes: 64 * 1024 * 1024,
      pidsMax: 16,
      cpuQuotaPercent: 10,
    });
    await group.remove();
  } catch (err) {
    problems.push({
      what: `sandbox cgroups: ${err instanceof Error ? err.message : String(err)}`,
      fix: 'mount the cgroup v1 memory (with swap accounting), pids, cpu, cpuacct, cpuset and freezer hierarchies writable by root; cgroup v2-only hosts are not supported by this driver yet',
    });
  }
  return { ok: problems.length === 0, problems };
}

function runProbe(argv: string[]): Promise<{ ok: boolean; code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    let stdout = '';
    let stderr = '';
    const child = spawn(argv[0]!, argv.slice(1), { stdio: ['ignore', 'pipe', 'pipe'], env: { PATH: '/usr/bin:/bin' }, timeout: 10_000 });
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.on('error', (err) => resolve({ ok: false, code: null, stdout, stderr: err.message }));
    child.on('close', (code) => resolve({ ok: code === 0, code, stdout, stderr }));
  });
}
