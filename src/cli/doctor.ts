/**
 * `atelier doctor`: checks what the service needs on this machine and says how to fix what is
 * missing. Exit code 0 when everything needed is there, 1 otherwise.
 */
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { promisify } from 'node:util';
import { probeSandboxSupport } from '../sandbox/bwrap/index.js';

const run = promisify(execFile);

export interface Check {
  what: string;
  ok: boolean;
  detail: string;
  fix?: string;
}

async function tryRun(cmd: string, args: string[]): Promise<{ ok: boolean; out: string }> {
  try {
    const r = await run(cmd, args, { timeout: 15_000 });
    return { ok: true, out: (r.stdout + r.stderr).trim() };
  } catch (e) {
    const err = e as { stderr?: string; message: string };
    return { ok: false, out: (err.stderr || err.message).trim().split('\n')[0] ?? '' };
  }
}

const APT = 'apt-get update && apt-get install -y';

export async function collectChecks(bwrapPath = '/usr/bin/bwrap'): Promise<Check[]> {
  const checks: Check[] = [];
  const bin = async (what: string, cmd: string, args: string[], pkg: string, match?: RegExp) => {
    const r = await tryRun(cmd, args);
    const ok = r.ok && (!match || match.test(r.out));
    checks.push({ what, ok, detail: ok ? r.out.split('\n')[0]! : r.out || 'not found', fix: ok ? undefined : `${APT} ${pkg}` });
    return ok;
  };
  const hasBwrap = await bin('bubblewrap', bwrapPath, ['--version'], 'bubblewrap');
  await bin('git', 'git', ['--version'], 'git');
  await bin('ripgrep', 'rg', ['--version'], 'ripgrep');
  await bin('universal-ctags', 'ctags', ['--version'], 'universal-ctags', /Universal Ctags/);
  // Managed packages: each release is a squashfs image (docs/packages.md); without it no plan can be built.
  await bin('squashfs-tools', 'mksquashfs', ['-version'], 'squashfs-tools', /mksquashfs version/);

  const userns = await tryRun('unshare', ['--user', '--map-root-user', 'true']);
  checks.push({
    what: 'user namespaces',
    ok: userns.ok,
    detail: userns.ok ? 'available' : userns.out,
    fix: userns.ok ? undefined : 'sysctl -w kernel.unprivileged_userns_clone=1 user.max_user_namespaces=15000',
  });
  const netns = await tryRun('unshare', ['--user', '--map-root-user', '--net', 'true']);
  checks.push({ what: 'network namespaces', ok: netns.ok, detail: netns.ok ? 'available' : netns.out, fix: netns.ok ? undefined : 'enable CONFIG_NET_NS and user namespaces in the kernel' });
  if (hasBwrap) {
    // The same probe the executor relies on: setpriv + bwrap with every namespace, cgroups writable.
    const probe = await probeSandboxSupport({ bwrapPath });
    checks.push({
      what: 'bubblewrap sandbox',
      ok: probe.ok,
      detail: probe.ok ? 'a sandbox like a workspace starts (setpriv, bwrap, namespaces, cgroups)' : probe.problems.map((p) => p.what).join('; '),
      fix: probe.ok ? undefined : probe.problems.map((p) => p.fix).join('; '),
    });
  }
  const cgroupV2 = existsSync('/sys/fs/cgroup/cgroup.controllers');
  for (const c of ['memory', 'pids', 'cpu', 'cpuset', 'freezer']) {
    const ok = !cgroupV2 && existsSync(`/sys/fs/cgroup/${c}`);
    checks.push({
      what: `cgroup ${c}`,
      ok,
      detail: ok ? 'cgroup v1 hierarchy mounted' : cgroupV2 ? 'cgroup v2 only: the bubblewrap driver needs the v1 hierarchies' : 'not mounted',
      fix: ok ? undefined : `mount the ${c} controller (cgroup v1: mount -t cgroup -o ${c} cgroup /sys/fs/cgroup/${c})`,
    });
  }
  const loop = await tryRun('losetup', ['-f']);
  checks.push({
    what: 'loop devices',
    ok: loop.ok,
    detail: loop.ok ? 'available (each workspace gets its own size-limited filesystem)' : loop.out,
    fix: loop.ok ? undefined : 'modprobe loop, or start with --sandbox-disk-mb 0 (no per-workspace disk limit)',
  });
  const nodeMajor = Number(process.versions.node.split('.')[0]);
  const nodeMinor = Number(process.versions.node.split('.')[1]);
  const nodeOk = nodeMajor > 20 || (nodeMajor === 20 && nodeMinor >= 18);
  checks.push({ what: 'node', ok: nodeOk, detail: process.versions.node, fix: nodeOk ? undefined : 'install Node.js 20.18 or newer' });
  return checks;
}

export async function runDoctor(): Promise<number> {
  const checks = await collectChecks();
  for (const c of checks) {
    process.stdout.write(`${c.ok ? 'ok     ' : 'MISSING'}  ${c.what.padEnd(20)} ${c.detail}\n`);
    if (c.fix) process.stdout.write(`         fix: ${c.fix}\n`);
  }
  const bad = checks.filter((c) => !c.ok);
  process.stdout.write(bad.length === 0 ? '\neverything the service needs is here\n' : `\n${bad.length} problem(s): run the fix commands above\n`);
  return bad.length === 0 ? 0 : 1;
}

/** The problems that make sandboxed workspaces impossible (bubblewrap, namespaces, cgroups). */
export async function sandboxProblems(bwrapPath?: string): Promise<Check[]> {
  const checks = await collectChecks(bwrapPath);
  return checks.filter((c) => !c.ok && /bubblewrap|namespaces|cgroup|loop/.test(c.what));
}
