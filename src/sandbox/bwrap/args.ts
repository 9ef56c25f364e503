/**
 * bubblewrap's arguments for one sandbox: the system binds (/usr and the merged-usr links, /proc,
 * /dev), the generated /etc and the host's read-only /etc files, the caller's mounts, /opt/atelier's
 * files copied in from descriptors, the environment and the working directory. Host files to copy
 * in are left as marks (layout.ts) that launch.ts replaces with descriptors.
 */
import { lstatSync, readdirSync, readlinkSync } from 'node:fs';
import path from 'node:path';
import {
  CREDHELPER_SOURCE,
  DATA_MARK,
  DATA_NOFOLLOW_MARK,
  EGRESS_RUN_SOURCE,
  EXEC_STARTER_SOURCE,
  HOST_STATIC_BASH,
  HOSTNAME,
  IN_CREDHELPER,
  IN_EGRESS_RUN,
  IN_EXEC_STARTER,
  IN_NODUMP,
  IN_OPT,
  IN_STATIC_BASH,
  LOCALE_MARK,
  NODUMP_SOURCE,
  SANDBOX_USER,
} from './layout.js';
import type { RunPaths } from './rundir.js';

/** Top-level host entries mirrored from /usr (symlinks on merged-usr systems). */
const USR_TOPS = ['bin', 'sbin', 'lib', 'lib32', 'lib64', 'libx32'];

export const GENERATED_ETC = ['passwd', 'group', 'hosts', 'hostname', 'nsswitch.conf'] as const;

export interface Mount {
  source: string;
  target: string;
  readOnly: boolean;
}

/** A file copied into the sandbox from a descriptor (--ro-bind-data): no host path shows in mountinfo. */
export interface DataFile {
  source: string;
  target: string;
  mode?: string;
  noFollow?: boolean;
}

/** What every sandbox of this driver gets from the host besides its own mounts (the driver's options). */
export interface HostBinds {
  etcFiles: string[];
  extraRoBinds: { source: string; target: string }[];
}

export function bwrapArgs(
  host: HostBinds,
  plan: {
    mounts: Mount[];
    tmpfs: string[];
    etcDir: string;
    /** Files copied into the sandbox from descriptors (--ro-bind-data): no host path shows in mountinfo. */
    data: DataFile[];
    env: Record<string, string>;
    cwd: string;
    /** Privileged: uid 0 inside a new user namespace, every capability scoped to that namespace. */
    asRoot?: boolean;
    /**
     * uid 0 with only these capabilities in a user namespace whose id map the launcher writes
     * (SandboxSpec.rootUserNamespace: the Kubernetes fixture's hostUsers: false Pods). bubblewrap
     * then waits for the map (--userns-block-fd, added by the launcher), which --disable-userns
     * cannot go with; the seccomp filter still refuses new user namespaces.
     */
    mappedRoot?: { capabilities: string[] };
    /** The daemon's sandbox: binds of the language-server packages from their mounted image (lsp-image.ts). */
    languageServers?: Mount[];
  },
): string[] {
  const id = plan.mappedRoot
    ? ['--uid', '0', '--gid', '0', '--cap-drop', 'ALL', ...plan.mappedRoot.capabilities.flatMap((c) => ['--cap-add', `CAP_${c.replace(/^CAP_/, '')}`])]
    : plan.asRoot ? ['--uid', '0', '--gid', '0', '--cap-add', 'ALL'] : ['--uid', String(SANDBOX_USER.uid), '--gid', String(SANDBOX_USER.gid)];
  const a = [
    '--unshare-all', '--unshare-user', ...(plan.mappedRoot ? [] : ['--disable-userns']), '--die-with-parent', '--new-session', '--clearenv',
    ...id, '--hostname', HOSTNAME,
    ...systemArgs(),
    LOCALE_MARK,
    '--dir', '/etc',
  ];
  for (const f of GENERATED_ETC) a.push('--ro-bind-data', `${DATA_MARK}${path.join(plan.etcDir, f)}`, `/etc/${f}`);
  for (const f of host.etcFiles) a.push('--ro-bind-try', `/etc/${f}`, `/etc/${f}`);
  a.push('--symlink', '../proc/self/mounts', '/etc/mtab');
  for (const b of host.extraRoBinds) a.push('--ro-bind', b.source, b.target);
  a.push('--dir', '/var', '--symlink', '../tmp', '/var/tmp');
  for (const t of plan.tmpfs) a.push('--tmpfs', t);
  // Parents before children, so a bind below another bind lands on top of it.
  const mounts = [...plan.mounts].sort((x, y) => depth(x.target) - depth(y.target));
  for (const m of mounts) a.push(m.readOnly ? '--ro-bind' : '--bind', m.source, m.target);
  for (const dir of new Set(plan.data.map((d) => path.posix.dirname(d.target)))) a.push('--dir', dir);
  for (const d of plan.data) {
    if (d.mode) a.push('--perms', d.mode);
    a.push('--ro-bind-data', `${d.noFollow ? DATA_NOFOLLOW_MARK : DATA_MARK}${d.source}`, d.target);
  }
  if (plan.data.some((d) => d.target === IN_EXEC_STARTER)) {
    a.push('--symlink', HOST_STATIC_BASH, IN_STATIC_BASH);
    // The daemon's sandbox: the language servers Atelier ships and the LSP libraries, read-only, from their own image (lsp-image.ts; issue #44).
    for (const m of plan.languageServers ?? []) a.push('--ro-bind', m.source, m.target);
  }
  a.push('--remount-ro', '/', '--chdir', plan.cwd);
  for (const [k, v] of Object.entries(plan.env)) a.push('--setenv', k, v);
  return a;
}

/** The compiled daemon's modules (its subdirectories included), listed once. */
export class DaemonCode {
  private list: string[] | undefined;

  constructor(readonly dir: string) {}

  /** Shallower first, so that each directory is made before the ones inside it. */
  files(): string[] {
    this.list ??= (readdirSync(this.dir, { recursive: true }) as string[])
      .filter((f) => f.endsWith('.js'))
      .sort((a, b) => a.split('/').length - b.split('/').length || (a < b ? -1 : a > b ? 1 : 0));
    return this.list;
  }
}

/**
 * /opt/atelier: the env file and package.json of this sandbox and, for the daemon's sandbox, the
 * daemon code below it and nodump.so, all copied in from descriptors, so neither the data
 * directory nor the install path appears in the sandbox's /proc/self/mountinfo.
 */
export function optData(p: RunPaths, withNodump: boolean, daemon: DaemonCode): DataFile[] {
  // The daemon's modules, its subdirectories (files/, search/, overview/) included.
  const daemonFiles = daemon.files();
  return [
    { source: path.join(p.opt, 'package.json'), target: `${IN_OPT}/package.json` },
    { source: path.join(p.opt, 'env.json'), target: `${IN_OPT}/env.json` },
    // Only the daemon's sandbox runs the daemon: a short-lived one (a clone) is not made to copy its code in.
    ...(withNodump ? daemonFiles.map((f) => ({ source: path.join(daemon.dir, f), target: `${IN_OPT}/daemon/${f}` })) : []),
    // The daemon's sandbox: nodump.so and the exec starter; short-lived ones: the egress runner and git's credential helper.
    ...(withNodump
      ? [{ source: NODUMP_SOURCE, target: IN_NODUMP }, { source: EXEC_STARTER_SOURCE, target: IN_EXEC_STARTER, mode: '0555' }]
      : [{ source: EGRESS_RUN_SOURCE, target: IN_EGRESS_RUN, mode: '0555' }, { source: CREDHELPER_SOURCE, target: IN_CREDHELPER, mode: '0555' }]),
  ];
}

/** /usr read-only, the host's merged-usr links (or directories) next to it, /proc and /dev. */
export function systemArgs(): string[] {
  const a = ['--ro-bind', '/usr', '/usr'];
  for (const top of USR_TOPS) {
    const host = `/${top}`;
    let st;
    try {
      st = lstatSync(host);
    } catch {
      continue;
    }
    if (st.isSymbolicLink()) a.push('--symlink', readlinkSync(host), host);
    else if (st.isDirectory()) a.push('--ro-bind', host, host);
  }
  a.push('--proc', '/proc', '--dev', '/dev');
  return a;
}

export function etcContent(): Record<(typeof GENERATED_ETC)[number], string> {
  const u = SANDBOX_USER;
  return {
    passwd:
      'root:x:0:0:root:/root:/usr/sbin/nologin\n' +
      `${u.name}:x:${u.uid}:${u.gid}:Workspace user:${u.home}:/bin/bash\n` +
      'nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n',
    group: `root:x:0:\n${u.name}:x:${u.gid}:\nnogroup:x:65534:\n`,
    hosts: `127.0.0.1\tlocalhost\n127.0.1.1\t${HOSTNAME}\n::1\tlocalhost ip6-localhost ip6-loopback\n`,
    hostname: `${HOSTNAME}\n`,
    'nsswitch.conf': 'passwd: files\ngroup: files\nshadow: files\nhosts: files dns\nnetworks: files\nprotocols: files\nservices: files\n',
  };
}

function depth(p: string): number {
  return p.split('/').filter(Boolean).length;
}
