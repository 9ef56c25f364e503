/**
 * The bubblewrap driver's options (BwrapExecutorOptions, as the runner passes them) and the
 * settings the driver's modules read, with every default filled in once.
 */
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { ServiceError } from '../../core/errors.js';
import type { WorkspaceStorage } from '../executor.js';
import type { DescriptorCalls } from '../handoff.js';
import type { SandboxIds } from '../rootdir.js';

export interface BwrapExecutorOptions {
  /** Host directory for per-sandbox sockets and runtime files; keep it short (socket paths < 108 bytes). */
  runDir?: string;
  /** Compiled daemon directory (holding main.js) bound at /opt/atelier/daemon; default: this install's (the daemon/ folder beside this one). */
  daemonDir?: string;
  /** Host uid/gid every sandbox runs as (default 64000:64000). */
  uid?: number;
  gid?: number;
  /** Parent cgroup path inside each v1 hierarchy; default "<runner's own cgroup>/atelier". */
  cgroupParent?: string;
  /** Development only: run without cgroups (no limits, stop() kills through the keeper, no stats). */
  allowNoCgroups?: boolean;
  bwrapPath?: string;
  setprivPath?: string;
  /** Node used inside the sandbox for the daemon; must live under a read-only bound directory (/usr). */
  nodePath?: string;
  /** Host /etc entries bound read-only when present (replaces the default list). */
  etcFiles?: string[];
  /** Extra read-only binds for every sandbox, e.g. an operator's toolchain directory. */
  extraRoBinds?: { source: string; target: string }[];
  /** How long create() waits for the daemon's first ping (default 15000 ms). */
  startTimeoutMs?: number;
  /**
   * A daemon with no runner connection for this long exits, ending its sandbox: the bound for
   * sandboxes whose runner never comes back (default 900000 ms = 15 min; 0 = never).
   */
  orphanGraceMs?: number;
  /**
   * Set the kernel's favordynmods cgroup flag once, when cgroups are first used (see
   * favorDynamicCgroupModifications in cgroups.ts; the runner's sandboxFavorDynmods setting).
   */
  favorDynmods?: boolean;
  /** Told once what became of favorDynmods, and when a sandbox's files_read handoff is switched off (for the runner's log). */
  onNote?: (message: string) => void;
  /**
   * pidfd_open, pidfd_getfd and SO_PEERCRED (the runner's native addon, once loaded): with them a
   * large files_read takes the daemon's open descriptor instead of its bytes (handoff.ts).
   */
  descriptorCalls?: () => DescriptorCalls | null;
  /** The workspaces' files on this host (host-storage.ts), exposed as Executor.storage. */
  storage?: WorkspaceStorage;
}

const DEFAULT_ETC_FILES = [
  'alternatives', 'ssl', 'ca-certificates', 'ca-certificates.conf', 'ld.so.cache', 'ld.so.conf', 'ld.so.conf.d',
  'localtime', 'timezone', 'mime.types', 'protocols', 'services', 'bash.bashrc', 'profile', 'inputrc',
  'gai.conf', 'host.conf', 'os-release', 'debian_version', 'magic', 'magic.mime', 'perl', 'python3',
  'java-17-openjdk',
];

/** The options with their defaults. */
export interface BwrapSettings {
  readonly runDir: string;
  readonly daemonDir: string;
  readonly ids: SandboxIds;
  readonly bwrapPath: string;
  readonly setprivPath: string;
  readonly nodePath: string;
  readonly etcFiles: string[];
  readonly extraRoBinds: { source: string; target: string }[];
  readonly startTimeoutMs: number;
  readonly orphanGraceMs: number;
  readonly allowNoCgroups: boolean;
  readonly cgroupParent: string | undefined;
  readonly favorDynmods: boolean;
}

export function bwrapSettings(opts: BwrapExecutorOptions): BwrapSettings {
  const ids = { uid: opts.uid ?? 64000, gid: opts.gid ?? 64000 };
  if (ids.uid === 0 || ids.gid === 0) throw new ServiceError('INVALID_ARGUMENT', 'the sandbox uid/gid must not be 0');
  return {
    runDir: path.resolve(opts.runDir ?? '/run/atelier'),
    // The compiled daemon beside this folder (dist/sandbox/daemon/).
    daemonDir: path.resolve(opts.daemonDir ?? fileURLToPath(new URL('../daemon/', import.meta.url))),
    ids,
    bwrapPath: opts.bwrapPath ?? '/usr/bin/bwrap',
    setprivPath: opts.setprivPath ?? '/usr/bin/setpriv',
    nodePath: opts.nodePath ?? '/usr/bin/node',
    etcFiles: opts.etcFiles ?? DEFAULT_ETC_FILES,
    extraRoBinds: opts.extraRoBinds ?? [],
    startTimeoutMs: opts.startTimeoutMs ?? 15_000,
    orphanGraceMs: opts.orphanGraceMs ?? 900_000,
    allowNoCgroups: opts.allowNoCgroups ?? false,
    cgroupParent: opts.cgroupParent,
    favorDynmods: opts.favorDynmods ?? false,
  };
}
