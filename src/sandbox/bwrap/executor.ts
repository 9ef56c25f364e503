/**
 * The bubblewrap executor: the embedded default driver for sandboxes on one Linux host.
 *
 * How a sandbox is started (the runner is root):
 *
 *   runner ─spawn(detached)→ /bin/sh launcher (root)
 *     writes its own pid into the sandbox's cgroup.procs files (every v1 hierarchy), sets
 *     oom_score_adj and RLIMIT_CORE=0, then
 *   exec setpriv --reuid/--regid=<sandbox uid> --clear-groups --no-new-privs --inh-caps=-all
 *   [exec /bin/sh keeper]          long-lived sandboxes only: bwrap's parent, so the sandbox
 *                                  survives a runner restart yet still dies with its keeper
 *   bwrap --args FD -- node /opt/atelier/daemon/main.js   (or the ephemeral command)
 *     the options, read from a descriptor so no host path shows in the sandbox's pid 1 command
 *     line: --seccomp FD (native.ts) --unshare-all --unshare-user --disable-userns
 *     --die-with-parent --new-session --clearenv --uid 1000 --gid 1000 ...
 *
 * So every process of the sandbox is born inside its cgroups, privileges are dropped before
 * bubblewrap runs (bubblewrap itself is unprivileged and relies on user namespaces), and the
 * runner never enters a sandbox cgroup.
 *
 * Filesystem inside: /usr read-only plus the merged-usr links (/bin, /lib, /lib64, /sbin), a
 * generated /etc (passwd, group, hosts, hostname, nsswitch.conf) with a few read-only host files
 * that toolchains need (certificates, ld.so cache, alternatives, time zone...), /proc, /dev,
 * /workspace = rootDir/repo, /home/user = rootDir/home, /tmp = rootDir/tmp (all read-write),
 * /opt/atelier (daemon code, its env file and nodump.so, copied in from descriptors with
 * --ro-bind-data), /run/atelier (the daemon socket's directory, root's once the daemon listens)
 * and /run/egress (read-only; holds proxy.sock with a proxy), both from the sandbox's private
 * tmpfs (runfs.ts), so no host path shows in its mountinfo. The root itself is
 * remounted read-only. Never bound: the host's /, /run, /root, /home, /var, /tmp or the
 * service's data directory.
 *
 * Network: always a fresh network namespace with only loopback. With a proxy the daemon runs a
 * bridge on 127.0.0.1:3128 to /run/egress/proxy.sock (the runner's relay to the host proxy
 * socket, listening in the sandbox's tmpfs; a restarted runner listens there again: see
 * attachProxy) and the usual proxy variables point at the bridge.
 *
 * Exec timeouts: every exec runs in a per-exec freezer cgroup (cgroups.ts). Usually the command
 * starts in a spare exec starter the runner placed there ahead of time (see exec()); otherwise the
 * daemon holds each exec before it runs the command, and the runner moves the held process into
 * its cgroup and releases it. On timeout or cancel
 * the daemon kills the process group and attached descendants, and the runner then kills whatever
 * is left in the exec's cgroup, which includes processes that used setsid and were re-parented.
 */
import { openRelay } from '../relay.js';
import { spawn, type ChildProcess, type StdioOptions } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { existsSync, lstatSync, mkdirSync, readFileSync, readdirSync, readlinkSync } from 'node:fs';
import { constants as fsConstants } from 'node:fs';
import { constants as osConstants } from 'node:os';
import { chown, lstat, mkdir, open, readFile, readdir, rm, stat, writeFile, type FileHandle } from 'node:fs/promises';
import type { Server } from 'node:net';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { ServiceError } from '../../core/errors.js';
import { CgroupManager, favorDynamicCgroupModifications, type SandboxCgroup } from '../cgroups.js';
import { DaemonClient } from '../client.js';
import { HeadTailCapture } from '../daemon/output.js';
import { execParams } from '../exec-params.js';
import { DAEMON_VERSION, type DaemonMethod, type ExecParams, type ExecResult, type ExecStarted, type FsReadParams, type FsReadReply, type ParamsOf, type ReplyOf } from '../daemon/protocol.js';
import { FileHandoff, type DescriptorCalls } from '../handoff.js';
import {
  EPHEMERAL_CREDHELPER,
  type EphemeralBind,
  type EphemeralSpec,
  type ExecRequest,
  type Executor,
  type SandboxHandle,
  type SandboxLimits,
  type SandboxNetwork,
  type SandboxSpec,
  type SandboxStats,
  type DaemonDeath,
  type WorkspaceStorage,
} from '../executor.js';
import { assertTraversable, lockDaemonSocket, prepareRootDir, removeTreeNoFollow, type SandboxIds } from '../rootdir.js';
import { nativeArtifacts, type NativeArtifacts } from '../native.js';
import { HOST_LOCALE_DIR, localeArchive, type LocaleArchive } from '../locale.js';
import { closeRelays, mountRunFs, relaySocket, unmountRunFs } from '../runfs.js';

export { removeSandboxRoot } from '../rootdir.js';

export interface BwrapExecutorOptions {
  /** Host directory for per-sandbox sockets and runtime files; keep it short (socket paths < 108 bytes). */
  runDir?: string;
  /** Compiled daemon directory (holding main.js) bound at /opt/atelier/daemon; default: ./daemon next to this module. */
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

/** Inside every sandbox. */
export const SANDBOX_USER = { name: 'user', uid: 1000, gid: 1000, home: '/home/user' } as const;
const HOSTNAME = 'workspace';
const IN_SOCKET_DIR = '/run/atelier';
const IN_SOCKET = `${IN_SOCKET_DIR}/d.sock`;
const IN_PROXY_SOCKET = '/run/egress/proxy.sock';
const PROXY_PORT = 3128;
const PROXY_URL = `http://127.0.0.1:${PROXY_PORT}`;
const IN_OPT = '/opt/atelier';
const IN_NODUMP = `${IN_OPT}/lib/nodump.so`;
const IN_EXEC_STARTER = `${IN_OPT}/lib/exec-starter`;
/**
 * Beside the exec starter, a link named `bash` to Debian's bash-static: a command line started
 * through it reads as bash in every name the kernel keeps (comm, `ps`, `pgrep -x bash`) while
 * skipping the dynamic loader (daemon/exec.ts). Dangling when bash-static is not installed, and the
 * daemon then starts /bin/bash.
 */
const IN_STATIC_BASH = `${IN_OPT}/lib/bash`;
const HOST_STATIC_BASH = '/usr/bin/bash-static';
const IN_EGRESS_RUN = `${IN_OPT}/lib/egress-run`;
/** git's credential helper in short-lived git sandboxes (native.ts CREDHELPER_C). */
const IN_CREDHELPER = EPHEMERAL_CREDHELPER;
/** bwrap reads the seccomp program from this descriptor (stdio slot 3 of the launcher). */
const SECCOMP_FD = 3;
/** Marks a --ro-bind-data argument that names a host file; launch() replaces it with a descriptor. */
const DATA_MARK = '\0data:';
/** The same for a caller's file (EphemeralBind): opened O_NOFOLLOW. */
const DATA_NOFOLLOW_MARK = '\0data-nofollow:';
/** Stands for the locale archive and its mounts (src/sandbox/locale.ts; expanded, or dropped, in launchWithSeccomp()). */
const LOCALE_MARK = '\0locale';
/** Stands for the native nodump.so (resolved in launch()). */
const NODUMP_SOURCE = '\0nodump';
/** Stand for the native programs (resolved in launchWithSeccomp()). */
const EXEC_STARTER_SOURCE = '\0exec-starter';
const EGRESS_RUN_SOURCE = '\0egress-run';
const CREDHELPER_SOURCE = '\0credhelper';
/**
 * Spare exec starters each sandbox keeps placed in their own exec cgroups, ready for the next
 * execs: one per 64 of the sandbox's process limit, from 2 to 8 (each waiting spare is a process
 * of the sandbox; 8 cover a burst of eight concurrent commands at the default limit of 512).
 */
const MIN_SPARES = 2;
const MAX_SPARES = 8;
const PIDS_PER_SPARE = 64;
/** How long an exec that found no spare ready waits for one being placed before it goes without. */
const SPARE_WAIT_MS = 50;

export function spareTarget(pidsMax: number | undefined): number {
  if (pidsMax === undefined) return MIN_SPARES;
  return Math.max(MIN_SPARES, Math.min(MAX_SPARES, Math.floor(pidsMax / PIDS_PER_SPARE)));
}
const SOCKET_PATH_MAX = 107;

const DEFAULT_ETC_FILES = [
  'alternatives', 'ssl', 'ca-certificates', 'ca-certificates.conf', 'ld.so.cache', 'ld.so.conf', 'ld.so.conf.d',
  'localtime', 'timezone', 'mime.types', 'protocols', 'services', 'bash.bashrc', 'profile', 'inputrc',
  'gai.conf', 'host.conf', 'os-release', 'debian_version', 'magic', 'magic.mime', 'perl', 'python3',
  'java-17-openjdk',
];
/** Top-level host entries mirrored from /usr (symlinks on merged-usr systems). */
const USR_TOPS = ['bin', 'sbin', 'lib', 'lib32', 'lib64', 'libx32'];

const PROXY_ENV: Record<string, string> = {
  HTTP_PROXY: PROXY_URL,
  HTTPS_PROXY: PROXY_URL,
  http_proxy: PROXY_URL,
  https_proxy: PROXY_URL,
  npm_config_proxy: PROXY_URL,
  npm_config_https_proxy: PROXY_URL,
  YARN_HTTP_PROXY: PROXY_URL,
  YARN_HTTPS_PROXY: PROXY_URL,
  NO_PROXY: 'localhost,127.0.0.1,::1',
  no_proxy: 'localhost,127.0.0.1,::1',
};

/**
 * Runs as root: joins the cgroups named in its arguments, then execs the rest.
 * Arguments: <oom_score_adj or -> <n> <n cgroup.procs files> <command...>
 */
const LAUNCH_SCRIPT = `oom=$1; n=$2; shift 2
while [ "$n" -gt 0 ]; do
  echo $$ > "$1" || { echo "atelier: cannot join cgroup $1" >&2; exit 121; }
  shift; n=$((n - 1))
done
[ "$oom" = - ] || echo "$oom" 2>/dev/null > /proc/self/oom_score_adj || true
ulimit -c 0
exec "$@"`;
/** Keeps running as bwrap's parent (not exec'd away: a command follows). */
const KEEPER_SCRIPT = '"$@"; exit $?';
/**
 * Keeps the daemon out of the OOM killer's way (best effort: lowering it needs CAP_SYS_RESOURCE).
 * The daemon resets it to 0 for every exec.
 */
const DAEMON_OOM_SCORE_ADJ = -900;
/**
 * Node flags of the in-sandbox daemon. Its V8 heap is capped at 96 MiB (its resident set under
 * sustained mixed load is about 50 MiB: bench/soak): a runaway inside the daemon ends the daemon
 * (with "Reached heap limit" in its log, see daemonDeath) long before the workspace's memory
 * cgroup (64 MiB to 1 TiB, default 2 GiB) has to kill anything else. Everything it keeps per
 * terminal, exec and request is bounded in bytes and in objects (docs/sandbox.md, "Daemon memory").
 */
export const DAEMON_NODE_FLAGS = ['--max-old-space-size=96', '--v8-pool-size=2'];
/** Signal names by number, to read a shell's 128+n exit status. */
const SIGNAL_NAMES = new Map<number, string>();
// The first name of each number (SIGABRT before its alias SIGIOT).
for (const [name, n] of Object.entries(osConstants.signals)) if (!SIGNAL_NAMES.has(n)) SIGNAL_NAMES.set(n, name);
/** Bytes of the daemon's log read back when it died (its last lines). */
const DEATH_LOG_BYTES = 4096;

interface RunPaths {
  dir: string;
  state: string;
  log: string;
  etc: string;
  opt: string;
  /** The sandbox's private tmpfs (runfs.ts): the socket directory and the egress directory are in it. */
  mnt: string;
  egress: string;
  sockDir: string;
  socket: string;
}

/** How the egress proxy socket reaches the sandbox: relayed from its tmpfs (see attachProxy). */
type ProxyState = { mode: 'relay'; source: string };

/** <runDir>/<key>/state.json, written when a sandbox has started; read by recover(). */
interface RunState {
  id: string;
  pid: number;
  startedAt: string;
  proxy: ProxyState | null;
}

/** A spare exec starter placed in its exec cgroup, ready for an exec. */
interface Spare {
  id: string;
  dir: string;
}

interface SparePool {
  ready: Spare[];
  /** Spares started and being moved into their exec cgroups. */
  placing: number;
  /** Execs that found no spare ready, waiting (SPARE_WAIT_MS at most) for one being placed. */
  waiters: Array<(spare: Spare | undefined) => void>;
  filling: boolean;
  /** The daemon has no exec starter (an older daemon, or no cgroups): every exec is placed after it starts. */
  unsupported: boolean;
  /** The first fill ends spares an earlier runner left in the daemon. */
  fresh: boolean;
}

interface Mount {
  source: string;
  target: string;
  readOnly: boolean;
}

export class BwrapExecutor implements Executor {
  readonly storage: WorkspaceStorage | undefined;
  private readonly runDir: string;
  private readonly daemonDir: string;
  private readonly ids: SandboxIds;
  private readonly bwrapPath: string;
  private readonly setprivPath: string;
  private readonly nodePath: string;
  private readonly etcFiles: string[];
  private readonly extraRoBinds: { source: string; target: string }[];
  private readonly startTimeoutMs: number;
  private readonly orphanGraceMs: number;
  private readonly allowNoCgroups: boolean;
  private readonly cgroupParent: string | undefined;
  private readonly favorDynmods: boolean;
  private readonly onNote: ((message: string) => void) | undefined;
  private locale: Promise<LocaleArchive | undefined> | undefined;
  private cgroupManager: CgroupManager | null | undefined;
  private native: Promise<NativeArtifacts> | undefined;
  private daemonFiles: string[] | undefined;
  private readonly specs = new Map<string, SandboxSpec>();
  private readonly clients = new Map<string, DaemonClient>();
  /** Per sandbox: the keeper pid of the sandbox whose daemon `clients` holds (set at start and recovery; see alive()). */
  private readonly keepers = new Map<string, number>();
  /** Per sandbox: its cgroup once seen to exist, for exec() (dropped at stop). */
  private readonly execCgroups = new Map<string, SandboxCgroup>();
  /** Per sandbox: spare exec starters already in their exec cgroups (see exec()). */
  private readonly spares = new Map<string, SparePool>();
  /** files_read's descriptor handoff (handoff.ts), per sandbox. */
  private readonly handoff: FileHandoff;
  /** Per long-lived sandbox: the relay of its egress proxy socket (runfs.ts). */
  private readonly relays = new Map<string, Server[]>();
  /** Per sandbox started by this runner: how its keeper (and so its daemon) ended, for daemonDeath(). */
  private readonly exits = new Map<string, { pid: number | undefined; code: number | null; signal: NodeJS.Signals | null }>();

  constructor(opts: BwrapExecutorOptions = {}) {
    this.storage = opts.storage;
    this.runDir = path.resolve(opts.runDir ?? '/run/atelier');
    this.daemonDir = path.resolve(opts.daemonDir ?? fileURLToPath(new URL('../daemon/', import.meta.url)));
    this.ids = { uid: opts.uid ?? 64000, gid: opts.gid ?? 64000 };
    if (this.ids.uid === 0 || this.ids.gid === 0) throw new ServiceError('INVALID_ARGUMENT', 'the sandbox uid/gid must not be 0');
    this.bwrapPath = opts.bwrapPath ?? '/usr/bin/bwrap';
    this.setprivPath = opts.setprivPath ?? '/usr/bin/setpriv';
    this.nodePath = opts.nodePath ?? '/usr/bin/node';
    this.etcFiles = opts.etcFiles ?? DEFAULT_ETC_FILES;
    this.extraRoBinds = opts.extraRoBinds ?? [];
    this.startTimeoutMs = opts.startTimeoutMs ?? 15_000;
    this.orphanGraceMs = opts.orphanGraceMs ?? 900_000;
    this.allowNoCgroups = opts.allowNoCgroups ?? false;
    this.cgroupParent = opts.cgroupParent;
    this.favorDynmods = opts.favorDynmods ?? false;
    this.onNote = opts.onNote;
    this.handoff = new FileHandoff(opts.descriptorCalls ?? (() => null), (m) => this.onNote?.(m));
  }

  async create(spec: SandboxSpec): Promise<SandboxHandle> {
    validateSpec(spec);
    if (this.specs.has(spec.id)) {
      throw new ServiceError('CONFLICT', 'sandbox is already running; stop it first', { id: spec.id });
    }
    const handle = await this.start(spec);
    this.specs.set(spec.id, spec);
    return handle;
  }

  request<M extends DaemonMethod>(
    h: SandboxHandle,
    method: M,
    params: ParamsOf<M>,
    opts: { signal?: AbortSignal; timeoutMs?: number; onEvent?: (event: string, data: unknown) => void } = {},
  ): Promise<ReplyOf<M>> {
    if (method === 'exec' || method === 'release') throw new ServiceError('INVALID_ARGUMENT', `use exec() for ${method}: it places the command in its cgroup`);
    if (method === 'fs.read') return this.readFile(h, params as FsReadParams, opts) as Promise<ReplyOf<M>>;
    return this.client(h).request(method, params, opts);
  }

  /** Preview URLs: a fresh daemon connection in relay mode (relay.ts). */
  relay(h: SandboxHandle, port: number): Promise<import('node:net').Socket> {
    return openRelay(h.socketPath, port);
  }

  fileHandoffs(): { taken: number; refused: number } {
    return { ...this.handoff.counts };
  }

  /**
   * fs.read, a large range through the descriptor handoff when this sandbox has it (handoff.ts):
   * the daemon names its open descriptor and the runner reads the bytes itself. The first read of
   * a sandbox sets the handoff up (or finds it unavailable); a handoff that fails switches it off for
   * the sandbox and the read is asked again the ordinary way.
   */
  private async readFile(h: SandboxHandle, params: FsReadParams, opts: { signal?: AbortSignal; timeoutMs?: number }): Promise<FsReadReply> {
    const { handOff: _ignored, release: _theirs, ...plain } = params;
    const client = this.client(h);
    if (!this.handoff.enabled(h.id)) {
      const reply = await client.request('fs.read', plain, opts);
      // Set up once the connection is open (its peer is the daemon), when the addon is loaded.
      if (!this.handoff.known(h.id) && this.handoff.calls()) {
        const spec = this.specs.get(h.id);
        const cg = this.existingCgroup(h.id);
        if (spec) await this.handoff.prepare(h.id, client, spec.rootDir, cg ? () => cg.members() : undefined).catch(() => undefined);
      }
      return reply;
    }
    const reply = await client.request('fs.read', { ...plain, handOff: true, release: this.handoff.releases(h.id) }, opts);
    if (!reply.handOff) return reply;
    try {
      return this.handoff.take(h.id, client, reply);
    } catch (err) {
      this.handoff.off(h.id, (err as Error).message);
      return client.request('fs.read', plain, opts);
    }
  }

  /**
   * Runs one command in the sandbox's daemon. With cgroups every exec runs in its own freezer
   * sub-cgroup (so a foreground command's leftovers die with it, setsid'd or not). The fast path
   * takes a spare exec starter the daemon started earlier and this runner already moved into a new
   * exec cgroup: the command is born there, with no process start or cgroup write on the way.
   * Without a ready spare, the daemon holds a new process, the runner places it and releases it.
   * Used spares are replaced in the background.
   */
  async exec(
    h: SandboxHandle,
    req: ExecRequest,
    onOutput?: (stream: 'stdout' | 'stderr', chunk: Buffer) => void,
    signal?: AbortSignal,
  ): Promise<ExecResult> {
    const cg = this.execCgroup(h.id);
    const spare = cg ? (this.spares.get(h.id)?.ready.shift() ?? (await this.nextSpare(h, cg))) : undefined;
    try {
      return await this.execOnce(h, cg, spare, req, onOutput, signal);
    } catch (err) {
      // The spare ended before it was used (killed from inside): start the exec the other way.
      if (spare && err instanceof ServiceError && err.details.daemonCode === 'NOT_FOUND' && err.details.spare === spare.id) {
        return this.execOnce(h, cg, undefined, req, onOutput, signal);
      }
      throw err;
    } finally {
      if (cg) this.fillSpares(h, cg);
    }
  }

  private async execOnce(
    h: SandboxHandle,
    cg: SandboxCgroup | undefined,
    spare: Spare | undefined,
    req: ExecRequest,
    onOutput: ((stream: 'stdout' | 'stderr', chunk: Buffer) => void) | undefined,
    signal: AbortSignal | undefined,
  ): Promise<ExecResult> {
    const client = this.client(h);
    const params: ExecParams = {
      ...execParams(req, onOutput !== undefined),
      hold: cg !== undefined && spare === undefined,
      spare: spare?.id,
    };
    let execGroup: string | undefined = spare?.dir;
    let placement: Promise<void> | undefined;
    let placementError: unknown;
    const onEvent = (event: string, data: unknown): void => {
      if ((event === 'stdout' || event === 'stderr') && typeof data === 'string') {
        onOutput?.(event, Buffer.from(data, 'base64'));
      } else if (event === 'started' && cg && !spare) {
        const { execId, pid } = data as ExecStarted;
        placement = (async () => {
          try {
            execGroup = await cg.attachExec(execId, pid);
            await client.request('release', { execId });
          } catch (err) {
            placementError = err;
            await client.request('kill', { execId }).catch(() => undefined);
          }
        })();
      }
    };
    // The daemon enforces timeoutMs; this only guards against a daemon that stopped answering.
    const safetyMs = (req.timeoutMs ?? 60_000) + (req.killGraceMs ?? 0) + 30_000;
    let result: ExecResult | undefined;
    try {
      result = await client.request('exec', params, { onEvent, signal, timeoutMs: safetyMs });
    } finally {
      await placement;
      if (cg && execGroup) {
        // A foreground command takes its whole session with it when it ends (exit, timeout, cancel,
        // failure): whatever it left behind, setsid'd or re-parented, is in its exec cgroup and goes.
        // Only callers that asked for background processes (async operations, tasks) keep them
        // after a normal exit. An unused spare (the exec was refused) is ended the same way.
        const killLeftovers = !result || result.timedOut || result.cancelled || placementError !== undefined || req.keepBackground !== true;
        // Empty (nothing left behind, the common case): nothing to kill, and nothing can enter it
        // again, so it is removed off the reply's path. Otherwise kill what is left when asked to,
        // then remove; background processes a caller asked to keep keep it (swept later).
        if (cg.execIsEmpty(execGroup)) cg.releaseExecLater(execGroup);
        else if (killLeftovers) {
          await cg.killExec(execGroup);
          if (!cg.releaseExec(execGroup)) cg.releaseExecLater(execGroup);
        }
      }
    }
    if (placementError) throw placementError;
    return result;
  }

  /**
   * No spare is ready (a burst of execs used them all): start a round if none is under way and
   * wait a little for the next spare placed, which is sooner than starting and placing a held
   * process for this exec alone. Undefined when none comes in time (the exec is then placed after
   * it starts).
   */
  private nextSpare(h: SandboxHandle, cg: SandboxCgroup): Promise<Spare | undefined> {
    this.fillSpares(h, cg);
    const p = this.spares.get(h.id);
    if (!p || p.unsupported || (!p.filling && p.placing === 0)) return Promise.resolve(p?.ready.shift());
    return new Promise<Spare | undefined>((resolve) => {
      const waiter = (s: Spare | undefined): void => {
        clearTimeout(timer);
        resolve(s);
      };
      const timer = setTimeout(() => {
        const i = p.waiters.indexOf(waiter);
        if (i >= 0) p.waiters.splice(i, 1);
        resolve(undefined);
      }, SPARE_WAIT_MS);
      p.waiters.push(waiter);
    });
  }

  /** Hands ready spares to waiting execs; once no round is under way, waiting execs go without. */
  private serveWaiters(p: SparePool): void {
    while (p.waiters.length > 0 && p.ready.length > 0) p.waiters.shift()!(p.ready.shift());
    if (!p.filling && p.placing === 0) for (const w of p.waiters.splice(0)) w(undefined);
  }

  /**
   * Tops up a sandbox's spare exec starters in the background (one filler at a time): one `spare`
   * request starts the whole round in the daemon (one process start, see daemon/exec.ts), and its
   * spares are placed in their exec cgroups side by side, so consecutive placements share the
   * kernel's wait for a quiet cgroup state instead of paying it one after the other.
   */
  private fillSpares(h: SandboxHandle, cg: SandboxCgroup): void {
    let pool = this.spares.get(h.id);
    if (!pool) {
      pool = { ready: [], placing: 0, waiters: [], filling: false, unsupported: false, fresh: true };
      this.spares.set(h.id, pool);
    }
    const target = spareTarget(this.specs.get(h.id)?.limits.pidsMax);
    // Topped up in rounds once half are used, not after every exec: most execs then run while no
    // spare is being started or placed (a placement briefly holds up every fork and exit on the
    // host), and the placements of one round follow each other closely, which makes them cheaper.
    if (pool.filling || pool.unsupported || pool.ready.length + pool.placing > Math.floor(target / 2)) return;
    const p = pool;
    p.filling = true;
    void (async () => {
      const client = this.client(h);
      let placementFailed = false;
      try {
        while (!placementFailed && p.ready.length + p.placing < target && this.spares.get(h.id) === p) {
          // One request, one process start in the daemon, for the whole round.
          const s = await client.request('spare', { fresh: p.fresh, count: target - p.ready.length - p.placing }, { timeoutMs: 10_000 });
          p.fresh = false;
          for (const one of [{ spareId: s.spareId, pid: s.pid }, ...(s.more ?? [])]) {
            p.placing++;
            void this.placeSpare(client, cg, h.id, p, one).then((ok) => {
              p.placing--;
              // A spare that cannot be placed ends this round; the next exec tries again.
              if (!ok) placementFailed = true;
              this.serveWaiters(p);
            });
          }
        }
      } catch (err) {
        // No starter in this daemon: never ask again. Anything else (out of pids, the sandbox
        // stopping): the next exec tries again; until then execs are placed after they start.
        if (err instanceof ServiceError && err.details.daemonCode === 'NOT_IMPLEMENTED') p.unsupported = true;
      } finally {
        p.filling = false;
        this.serveWaiters(p);
      }
    })();
  }

  /** Moves one new spare into its own exec cgroup and makes it ready (or ends it). */
  private async placeSpare(client: DaemonClient, cg: SandboxCgroup, id: string, p: SparePool, s: { spareId: string; pid: number }): Promise<boolean> {
    let dir: string;
    try {
      dir = await cg.attachExec(s.spareId, s.pid);
    } catch {
      await client.request('kill', { execId: s.spareId }).catch(() => undefined);
      return false;
    }
    if (this.spares.get(id) !== p) {
      // The sandbox stopped meanwhile.
      await client.request('kill', { execId: s.spareId }).catch(() => undefined);
      return true;
    }
    p.ready.push({ id: s.spareId, dir });
    return true;
  }

  async stop(h: SandboxHandle): Promise<void> {
    const pool = this.spares.get(h.id);
    this.spares.delete(h.id);
    if (pool) for (const w of pool.waiters.splice(0)) w(undefined);
    this.keepers.delete(h.id);
    this.execCgroups.delete(h.id);
    this.handoff.forget(h.id);
    this.clients.get(h.id)?.close();
    this.clients.delete(h.id);
    this.specs.delete(h.id);
    const p = this.paths(h.id);
    const cg = this.existingCgroup(h.id);
    if (cg) await cg.killAll();
    else await killKeeper(h.pid);
    await closeRelays(this.relays.get(h.id) ?? []);
    this.relays.delete(h.id);
    await rm(p.socket, { force: true });
    await rm(p.state, { force: true });
    await unmountRunFs(p.mnt);
  }

  async whileFrozen<T>(h: SandboxHandle, fn: () => Promise<T>): Promise<{ value: T; frozen: boolean }> {
    const cg = this.existingCgroup(h.id);
    if (!cg) return { value: await fn(), frozen: false };
    await cg.freeze();
    try {
      return { value: await fn(), frozen: true };
    } finally {
      await cg.thaw();
    }
  }

  async destroy(h: SandboxHandle): Promise<void> {
    await this.stop(h);
    this.exits.delete(h.id);
    await this.existingCgroup(h.id)?.remove();
    await removeTreeNoFollow(this.paths(h.id).dir);
  }

  async recover(spec: SandboxSpec): Promise<SandboxHandle | null> {
    validateSpec(spec);
    const p = this.paths(spec.id);
    let state: RunState;
    try {
      state = JSON.parse(await readFile(p.state, 'utf8')) as RunState;
    } catch {
      return null;
    }
    if (!this.existingCgroup(spec.id) && !this.allowNoCgroups) return null;
    const client = new DaemonClient(p.socket, { connectTimeoutMs: 1_000 });
    try {
      const pong = await client.ping(2_000);
      if (pong.version !== DAEMON_VERSION) throw new Error('daemon version differs');
      // The egress proxy lives in the runner, so after a restart its socket is a new file.
      if (!(await this.reattachProxy(spec.id, p, state, spec.network))) throw new Error('egress proxy cannot be reattached');
    } catch {
      client.close();
      return null;
    }
    this.clients.get(spec.id)?.close();
    this.clients.set(spec.id, client);
    this.handoff.forget(spec.id);
    this.keepers.set(spec.id, state.pid);
    this.specs.set(spec.id, spec);
    return { id: spec.id, socketPath: p.socket, pid: state.pid };
  }

  /**
   * Whether the sandbox still runs: its keeper (bwrap's parent, h.pid) is alive. The keeper ends
   * when bwrap does, and bwrap ends when the daemon (its main child) dies, e.g. of a `kill -9 -1`
   * from inside, an OOM kill or the orphan bound.
   */
  async alive(h: SandboxHandle): Promise<boolean> {
    // Every call on a workspace asks this first, so the common case costs no file reads: this
    // runner's open connection to the daemon of exactly this sandbox (started or recovered with
    // this keeper) means the daemon runs, and with it bwrap and the keeper. The connection closes
    // when the daemon ends (the checks below then answer).
    if (this.keepers.get(h.id) === h.pid && this.clients.get(h.id)?.connected) return true;
    if (!isAlive(h.pid)) return false;
    try {
      const cmdline = readFileSync(`/proc/${h.pid}/cmdline`, 'utf8');
      if (!cmdline.split('\0').includes('atelier-keeper')) return false;
      // A recycled pid that happens to be another sandbox's keeper is not this one.
      if (this.existingCgroup(h.id)) {
        const cgroups = readFileSync(`/proc/${h.pid}/cgroup`, 'utf8');
        return cgroups.includes(`/${h.id}\n`) || cgroups.includes(`/${h.id}/`);
      }
      return true;
    } catch {
      return false;
    }
  }

  async daemonDeath(h: SandboxHandle): Promise<DaemonDeath> {
    const ended = this.exits.get(h.id);
    let exit: string | null = null;
    if (ended && ended.pid === h.pid) {
      if (ended.signal) exit = `signal ${ended.signal}`;
      else if (ended.code !== null && ended.code > 128 && SIGNAL_NAMES.has(ended.code - 128)) exit = `signal ${SIGNAL_NAMES.get(ended.code - 128)} (exit ${ended.code})`;
      else exit = `exit ${ended.code}`;
    }
    const cg = this.existingCgroup(h.id);
    const oomKills = cg ? await cg.oomKills() : null;
    // The log is root's file in the runner's own directory (the daemon writes it through an
    // inherited descriptor); only its end is read, and shown as plain text.
    const text = await tailBytes(this.paths(h.id).log, DEATH_LOG_BYTES);
    const lines = text.split('\n').slice(text.length >= DEATH_LOG_BYTES ? 1 : 0);
    const stderrTail = lines
      .map((l) => l.replace(/[\u0000-\u001f\u007f-\u009f]/g, ' ').trimEnd().slice(0, 300))
      .filter((l) => l !== '')
      .slice(-8);
    return { exit, oomKills, stderrTail };
  }

  async stats(h: SandboxHandle): Promise<SandboxStats> {
    const cg = this.existingCgroup(h.id);
    if (!cg) throw new ServiceError('FAILED_PRECONDITION', 'sandbox statistics need cgroups', { id: h.id });
    return cg.stats();
  }

  /**
   * Bind mounts are fixed when a sandbox starts, so a different policy restarts it: every process
   * is killed, files are kept, the socket path stays the same and `h.pid` is updated in place.
   * The same policy again is a no-op.
   */
  async setNetworkPolicy(h: SandboxHandle, network: SandboxNetwork): Promise<void> {
    const spec = this.specs.get(h.id);
    if (!spec) throw new ServiceError('FAILED_PRECONDITION', 'sandbox is not known to this executor; recover it first', { id: h.id });
    if (sameNetwork(spec.network, network)) return;
    const next = { ...spec, network };
    validateSpec(next);
    await this.stop(h);
    const fresh = await this.start(next);
    this.specs.set(h.id, next);
    h.pid = fresh.pid;
  }

  async runEphemeral(spec: EphemeralSpec): Promise<ExecResult> {
    const id = spec.id ?? `eph-${randomBytes(8).toString('hex')}`;
    validateId(id);
    validateLimits(spec.limits);
    validateNetwork(spec.network);
    if ((spec.argv === undefined) === (spec.command === undefined)) {
      throw new ServiceError('INVALID_ARGUMENT', 'exactly one of argv and command is required');
    }
    if (spec.argv !== undefined && spec.argv.length === 0) throw new ServiceError('INVALID_ARGUMENT', 'argv must not be empty');
    const binds = spec.binds.map(validateBind);
    for (const b of binds) await assertTraversable(b.source, this.ids);
    const proxy = spec.network === 'none' ? undefined : spec.network.proxySocket;
    if (proxy) await this.checkProxySocket(proxy);

    const p = this.paths(id);
    const cg = await this.sandboxCgroup(id, spec.limits);
    const started = Date.now();
    const relays: Server[] = [];
    const dirs: FileHandle[] = [];
    try {
      const env = commandEnv(spec.env, spec.network);
      // Sockets shared with the host come from the sandbox's own tmpfs (runfs.ts), relayed.
      const withSockets = proxy !== undefined || binds.some((b) => b.sockets);
      await this.prepareRunDir(p, env, withSockets);
      const mounts: Mount[] = [];
      const files: { source: string; target: string; noFollow: boolean }[] = [];
      for (const [i, b] of binds.entries()) {
        const st = b.sockets ? undefined : await lstat(b.source);
        if (b.sockets) {
          mounts.push({ source: await this.relayDirectory(p, i, b.source, relays, dirs), target: b.target, readOnly: true });
        } else if (b.readOnly && st!.isFile() && st!.mode & 0o004) {
          // A read-only file anyone may read (a CA bundle, a package.json) is copied in from a
          // descriptor (opened O_NOFOLLOW): no host path shows. Others stay binds (what the sandbox user may read of them is unchanged).
          files.push({ source: b.source, target: b.target, noFollow: true });
        } else {
          mounts.push({ source: b.source, target: b.target, readOnly: b.readOnly ?? false });
        }
      }
      if (proxy) {
        await mkdir(p.egress, { mode: 0o755 });
        relays.push(await relaySocket(path.join(p.egress, path.basename(IN_PROXY_SOCKET)), () => proxy, this.ids));
        mounts.push({ source: p.egress, target: path.dirname(IN_PROXY_SOCKET), readOnly: true });
      }
      const bound = new Set(binds.map((b) => b.target));
      const argv = spec.argv ?? ['/bin/bash', '-c', spec.command!];
      // With a proxy the native egress runner starts the bridge and execs the command (native.ts).
      const command = proxy ? [IN_EGRESS_RUN, String(PROXY_PORT), IN_PROXY_SOCKET, ...argv] : argv;
      const args = this.bwrapArgs({
        mounts,
        tmpfs: ['/tmp', SANDBOX_USER.home].filter((t) => !bound.has(t)),
        etcDir: p.etc,
        data: [...this.optData(p, false), ...files],
        env,
        cwd: spec.cwd ?? '/',
        asRoot: spec.privileged === true,
      });
      // collect() listens from the moment of the spawn (launchWithSeccomp's `attach`).
      const { done } = await this.launchWithSeccomp(cg, undefined, false, [...args, '--', ...command], ['pipe', 'pipe', 'pipe'], (child) => ({
        done: collect(child, spec, started, async () => {
          if (cg) await cg.killAll();
          else killGroup(child.pid);
        }),
      }));
      return await done;
    } finally {
      // Nothing of the sandbox may outlive it: its pid namespace ended with the command, so its
      // cgroup is normally empty and goes at once; anything left is killed first. Its runtime
      // files (its relays and tmpfs first) go at the same time.
      await Promise.all([
        (async () => {
          if (cg && !(await cg.removeIfEmpty())) {
            await cg.killAll();
            await cg.remove();
          }
        })(),
        (async () => {
          await closeRelays(relays);
          for (const d of dirs) await d.close();
          await unmountRunFs(p.mnt);
          await removeTreeNoFollow(p.dir);
        })(),
      ]);
    }
  }

  // ---- internals ----

  private async start(spec: SandboxSpec): Promise<SandboxHandle> {
    const p = this.paths(spec.id);
    await this.checkDaemon();
    const proxy = spec.network === 'none' ? undefined : spec.network.proxySocket;
    if (proxy) await this.checkProxySocket(proxy);
    // Leftover processes are killed first: nothing of the sandbox may run while root walks its tree.
    const cg = await this.sandboxCgroup(spec.id, spec.limits);
    let pid: number | undefined;
    try {
      await prepareRootDir(spec.rootDir, this.ids);
      await assertTraversable(path.join(spec.rootDir, 'repo'), this.ids);
      await this.prepareRunDir(p, commandEnv(spec.env, spec.network), true);
      await mkdir(p.sockDir, { mode: 0o700 });
      await chown(p.sockDir, this.ids.uid, this.ids.gid);
      await mkdir(p.egress, { mode: 0o755 });
      const proxyState = proxy ? await this.attachProxy(spec.id, p, proxy) : null;
      const mounts: Mount[] = [
        { source: path.join(spec.rootDir, 'repo'), target: '/workspace', readOnly: false },
        { source: path.join(spec.rootDir, 'home'), target: SANDBOX_USER.home, readOnly: false },
        { source: path.join(spec.rootDir, 'tmp'), target: '/tmp', readOnly: false },
        { source: p.sockDir, target: IN_SOCKET_DIR, readOnly: false },
        { source: p.egress, target: path.dirname(IN_PROXY_SOCKET), readOnly: true },
      ];
      // Managed-package releases: always read-only.
      for (const m of spec.mounts ?? []) mounts.push({ ...validateBind(m), readOnly: true });
      // The daemon alone preloads nodump.so (PR_SET_DUMPABLE 0); commands get the env file's environment.
      const args = this.bwrapArgs({ mounts, tmpfs: [], etcDir: p.etc, data: this.optData(p, true), env: { ...daemonEnv(), LD_PRELOAD: IN_NODUMP }, cwd: '/workspace' });
      const daemon = [
        this.nodePath, ...DAEMON_NODE_FLAGS, `${IN_OPT}/daemon/main.js`,
        '--socket', IN_SOCKET, '--workspace', '/workspace', '--env-file', `${IN_OPT}/env.json`, '--orphan-grace-ms', String(this.orphanGraceMs),
        '--exec-starter', IN_EXEC_STARTER,
        ...(proxy ? ['--egress-socket', IN_PROXY_SOCKET, '--egress-port', String(PROXY_PORT)] : []),
      ];
      const log = await open(p.log, 'a', 0o600);
      let child: ChildProcess;
      // An early end is seen however soon it comes (launchWithSeccomp's `attach` runs at the spawn).
      let exited: string | undefined;
      try {
        child = await this.launchWithSeccomp(cg, DAEMON_OOM_SCORE_ADJ, true, [...args, '--', ...daemon], ['ignore', log.fd, log.fd], (c) => {
          c.once('exit', (code, sig) => {
            exited = sig ?? `exit ${code}`;
            // The keeper's status is bwrap's, which is the daemon's (128+n when a signal ended it).
            this.exits.set(spec.id, { pid: c.pid, code, signal: sig });
          });
          c.once('error', (err) => {
            exited = `cannot start: ${err.message}`;
          });
          return c;
        });
      } finally {
        await log.close();
      }
      // The sandbox outlives the runner (recover() reattaches), so the runner does not wait for it.
      child.unref();
      pid = child.pid!;
      const client = await this.waitReady(p, () => exited);
      // Listening now, and no workspace process exists yet: the socket and its directory become
      // root's, so no workspace process can connect to, replace or remove them (docs/sandbox.md).
      await lockDaemonSocket(p.sockDir, path.basename(p.socket));
      this.clients.get(spec.id)?.close();
      this.clients.set(spec.id, client);
      this.handoff.forget(spec.id);
      this.keepers.set(spec.id, pid);
      const state: RunState = { id: spec.id, pid, startedAt: new Date().toISOString(), proxy: proxyState };
      await writeFile(p.state, JSON.stringify(state), { mode: 0o600 });
      const handle = { id: spec.id, socketPath: p.socket, pid };
      // Spares ready before the first exec (an open's first command included).
      this.spares.delete(spec.id);
      if (cg) this.fillSpares(handle, cg);
      return handle;
    } catch (err) {
      if (cg) {
        await cg.killAll();
        await cg.remove();
      } else if (pid !== undefined) {
        await killKeeper(pid);
      }
      await closeRelays(this.relays.get(spec.id) ?? []);
      this.relays.delete(spec.id);
      await unmountRunFs(p.mnt).catch(() => undefined);
      throw err;
    }
  }

  /** The sandboxes' locale archive (src/sandbox/locale.ts), made once; undefined when there is none. */
  private localeArchive(): Promise<LocaleArchive | undefined> {
    this.locale ??= localeArchive(this.runDir, HOST_LOCALE_DIR, (why) => this.onNote?.(why));
    return this.locale;
  }

  private nativeArtifacts(): Promise<NativeArtifacts> {
    this.native ??= nativeArtifacts(this.runDir).catch((err) => {
      this.native = undefined;
      throw err;
    });
    return this.native;
  }

  /**
   * launch() with bubblewrap's arguments passed through a descriptor (`bwrap --args FD`, so the
   * sandbox's pid 1 shows no host path in its command line), the seccomp program on descriptor
   * SECCOMP_FD (`--seccomp`), and every --ro-bind-data file opened and passed as a descriptor.
   *
   * `attach` gets the child in the same tick as the spawn, before this function's own clean-up
   * awaits anything: a child that ends within those awaits would otherwise have its output
   * drained and discarded by Node (an unread pipe is flushed at exit) and its 'close' emitted
   * before anyone listens, which is how a short-lived sandbox came back empty or never answered.
   */
  private async launchWithSeccomp<T>(
    cg: SandboxCgroup | undefined,
    oomScoreAdj: number | undefined,
    keeper: boolean,
    bwrapArgv: string[],
    stdio: StdioOptions,
    attach: (child: ChildProcess) => T,
  ): Promise<T> {
    const native = await this.nativeArtifacts();
    const open_: FileHandle[] = [];
    const fds: number[] = [];
    const fdFor = async (file: string, noFollow = false): Promise<number> => {
      const fh = await open(file, noFollow ? fsConstants.O_RDONLY | fsConstants.O_NOFOLLOW : 'r');
      open_.push(fh);
      fds.push(fh.fd);
      return 2 + fds.length; // stdio slot in the child
    };
    try {
      const seccompSlot = await fdFor(native.seccompBpf);
      const argv = ['--seccomp', String(seccompSlot)];
      // Options go through the file; bwrap takes the command (after --) from its real command line.
      const sep = bwrapArgv.indexOf('--');
      const options = sep < 0 ? bwrapArgv : bwrapArgv.slice(0, sep);
      const command = sep < 0 ? [] : bwrapArgv.slice(sep);
      for (const arg of options) {
        if (arg === LOCALE_MARK) {
          // A tmpfs over /usr/lib/locale holding the archive (a copy: no runner path shows inside)
          // and the host's compiled locales (read-only binds), then made read-only.
          const loc = await this.localeArchive();
          if (!loc) continue;
          argv.push('--tmpfs', HOST_LOCALE_DIR);
          for (const l of loc.locales) argv.push('--ro-bind', path.join(loc.hostDir, l), path.posix.join(HOST_LOCALE_DIR, l));
          argv.push('--perms', '0444', '--ro-bind-data', String(await fdFor(loc.archive)), path.posix.join(HOST_LOCALE_DIR, 'locale-archive'), '--remount-ro', HOST_LOCALE_DIR);
          continue;
        }
        if (arg.startsWith(DATA_NOFOLLOW_MARK)) {
          argv.push(String(await fdFor(arg.slice(DATA_NOFOLLOW_MARK.length), true)));
          continue;
        }
        if (!arg.startsWith(DATA_MARK)) {
          argv.push(arg);
          continue;
        }
        const source = arg.slice(DATA_MARK.length);
        const nativeFile: Record<string, string> = {
          [NODUMP_SOURCE]: native.nodumpSo,
          [EXEC_STARTER_SOURCE]: native.execStarter,
          [EGRESS_RUN_SOURCE]: native.egressRun,
          [CREDHELPER_SOURCE]: native.credHelper,
        };
        argv.push(String(await fdFor(nativeFile[source] ?? source)));
      }
      const argsFile = path.join(this.runDir, `args-${process.pid}-${randomBytes(6).toString('hex')}`);
      await writeFile(argsFile, argv.map((x) => `${x}\0`).join(''), { mode: 0o600 });
      try {
        const argsSlot = await fdFor(argsFile);
        return attach(this.launch(cg, oomScoreAdj, keeper, ['--args', String(argsSlot), ...command], [...(stdio as unknown[]).slice(0, 3), ...fds] as StdioOptions));
      } finally {
        await rm(argsFile, { force: true });
      }
    } finally {
      for (const fh of open_) await fh.close();
    }
  }

  private launch(
    cg: SandboxCgroup | undefined,
    oomScoreAdj: number | undefined,
    keeper: boolean,
    bwrapArgv: string[],
    stdio: StdioOptions,
  ): ChildProcess {
    const procs = cg?.procsFiles() ?? [];
    const setpriv = [
      this.setprivPath, `--reuid=${this.ids.uid}`, `--regid=${this.ids.gid}`, '--clear-groups',
      '--no-new-privs', '--inh-caps=-all', '--bounding-set=-all', '--',
    ];
    const argv = [
      '-c', LAUNCH_SCRIPT, 'atelier-launch', oomScoreAdj === undefined ? '-' : String(oomScoreAdj), String(procs.length),
      ...procs, ...setpriv, ...(keeper ? ['/bin/sh', '-c', KEEPER_SCRIPT, 'atelier-keeper'] : []),
      this.bwrapPath, ...bwrapArgv,
    ];
    return spawn('/bin/sh', argv, { detached: true, stdio, env: { PATH: '/usr/sbin:/usr/bin:/sbin:/bin' } });
  }

  private bwrapArgs(plan: {
    mounts: Mount[];
    tmpfs: string[];
    etcDir: string;
    /** Files copied into the sandbox from descriptors (--ro-bind-data): no host path shows in mountinfo. */
    data: { source: string; target: string; mode?: string; noFollow?: boolean }[];
    env: Record<string, string>;
    cwd: string;
    /** Privileged: uid 0 inside a new user namespace, every capability scoped to that namespace. */
    asRoot?: boolean;
  }): string[] {
    const id = plan.asRoot ? ['--uid', '0', '--gid', '0', '--cap-add', 'ALL'] : ['--uid', String(SANDBOX_USER.uid), '--gid', String(SANDBOX_USER.gid)];
    const a = [
      '--unshare-all', '--unshare-user', '--disable-userns', '--die-with-parent', '--new-session', '--clearenv',
      ...id, '--hostname', HOSTNAME,
      ...systemArgs(),
      LOCALE_MARK,
      '--dir', '/etc',
    ];
    for (const f of GENERATED_ETC) a.push('--ro-bind-data', `${DATA_MARK}${path.join(plan.etcDir, f)}`, `/etc/${f}`);
    for (const f of this.etcFiles) a.push('--ro-bind-try', `/etc/${f}`, `/etc/${f}`);
    a.push('--symlink', '../proc/self/mounts', '/etc/mtab');
    for (const b of this.extraRoBinds) a.push('--ro-bind', b.source, b.target);
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
    if (plan.data.some((d) => d.target === IN_EXEC_STARTER)) a.push('--symlink', HOST_STATIC_BASH, IN_STATIC_BASH);
    a.push('--remount-ro', '/', '--chdir', plan.cwd);
    for (const [k, v] of Object.entries(plan.env)) a.push('--setenv', k, v);
    return a;
  }

  /**
   * /opt/atelier: the env file and package.json of this sandbox and, for the daemon's sandbox, the
   * daemon code below it and nodump.so, all copied in from descriptors, so neither the data
   * directory nor the install path appears in the sandbox's /proc/self/mountinfo.
   */
  private optData(p: RunPaths, withNodump: boolean): { source: string; target: string; mode?: string }[] {
    // The daemon's modules, its subdirectories (files/, search/, overview/) included; shallower first
    // so that each directory is made before the ones inside it.
    this.daemonFiles ??= (readdirSync(this.daemonDir, { recursive: true }) as string[])
      .filter((f) => f.endsWith('.js'))
      .sort((a, b) => a.split('/').length - b.split('/').length || (a < b ? -1 : a > b ? 1 : 0));
    return [
      { source: path.join(p.opt, 'package.json'), target: `${IN_OPT}/package.json` },
      { source: path.join(p.opt, 'env.json'), target: `${IN_OPT}/env.json` },
      // Only the daemon's sandbox runs the daemon: a short-lived one (a clone) is not made to copy its code in.
      ...(withNodump ? this.daemonFiles.map((f) => ({ source: path.join(this.daemonDir, f), target: `${IN_OPT}/daemon/${f}` })) : []),
      // The daemon's sandbox: nodump.so and the exec starter; short-lived ones: the egress runner and git's credential helper.
      ...(withNodump
        ? [{ source: NODUMP_SOURCE, target: IN_NODUMP }, { source: EXEC_STARTER_SOURCE, target: IN_EXEC_STARTER, mode: '0555' }]
        : [{ source: EGRESS_RUN_SOURCE, target: IN_EGRESS_RUN, mode: '0555' }, { source: CREDHELPER_SOURCE, target: IN_CREDHELPER, mode: '0555' }]),
    ];
  }

  /**
   * Makes /run/egress/proxy.sock inside the sandbox reach `proxySocket`: a relay listening in the
   * sandbox's tmpfs (runfs.ts). The tmpfs outlives a runner restart, so a restarted runner, whose
   * proxy listens on a new socket file, listens there again (reattachProxy).
   */
  private async attachProxy(id: string, p: RunPaths, proxySocket: string): Promise<ProxyState> {
    await closeRelays(this.relays.get(id) ?? []);
    this.relays.set(id, [await relaySocket(path.join(p.egress, path.basename(IN_PROXY_SOCKET)), () => proxySocket, this.ids)]);
    return { mode: 'relay', source: proxySocket };
  }

  /** recover(): true when the sandbox's egress matches `network` (relaying the proxy socket again if needed). */
  private async reattachProxy(id: string, p: RunPaths, state: RunState, network: SandboxNetwork): Promise<boolean> {
    if (network === 'none' || state.proxy === null) return network === 'none' && state.proxy === null;
    // A sandbox started before the relays (its proxy socket hard-linked or bound) is started again.
    if (state.proxy.mode !== 'relay' || state.proxy.source !== network.proxySocket) return false;
    await this.checkProxySocket(network.proxySocket);
    await this.attachProxy(id, p, network.proxySocket);
    return true;
  }

  /**
   * A directory of sockets the runner serves (EphemeralBind.sockets), as a directory of relays in
   * the sandbox's tmpfs: `<mnt>/x<i>/<name>` for each socket in it now. The relays reach the
   * sockets through a descriptor of the directory (opened O_NOFOLLOW), so they follow it through a
   * rename (an agent's socket directory is renamed once assigned) and never resolve its path again.
   */
  private async relayDirectory(p: RunPaths, i: number, source: string, relays: Server[], dirs: FileHandle[]): Promise<string> {
    const dir = await open(source, fsConstants.O_RDONLY | fsConstants.O_DIRECTORY | fsConstants.O_NOFOLLOW);
    dirs.push(dir);
    const via = `/proc/self/fd/${dir.fd}`;
    const into = path.join(p.mnt, `x${i}`);
    await mkdir(into, { mode: 0o755 });
    for (const name of await readdir(via)) {
      if (!(await lstat(path.join(via, name))).isSocket()) continue;
      relays.push(await relaySocket(path.join(into, name), () => path.join(via, name), this.ids));
    }
    return into;
  }

  /**
   * Fresh per-sandbox runtime directory with the generated /etc and /opt/atelier (env file) and,
   * for a sandbox that shares sockets with the host, its private tmpfs (runfs.ts) at p.mnt.
   */
  private async prepareRunDir(p: RunPaths, env: Record<string, string>, withSockets: boolean): Promise<void> {
    await mkdir(this.runDir, { recursive: true, mode: 0o711 });
    await unmountRunFs(p.mnt);
    await removeTreeNoFollow(p.dir);
    await mkdir(p.dir, { mode: 0o711 });
    if (withSockets) await mountRunFs(p.mnt);
    await mkdir(p.etc, { mode: 0o755 });
    for (const [name, content] of Object.entries(etcContent())) {
      await writeFile(path.join(p.etc, name), content, { mode: 0o644 });
    }
    await mkdir(p.opt, { mode: 0o755 });
    // Without it node would load the ES modules of /opt/atelier/daemon as CommonJS.
    await writeFile(path.join(p.opt, 'package.json'), '{"type":"module"}\n', { mode: 0o644 });
    const envFile = path.join(p.opt, 'env.json');
    await writeFile(envFile, JSON.stringify(env), { mode: 0o400 });
    await chown(envFile, this.ids.uid, this.ids.gid);
    await assertTraversable(p.etc, this.ids);
    if (p.socket.length > SOCKET_PATH_MAX) {
      throw new ServiceError('FAILED_PRECONDITION', `socket path too long for a Unix socket; use a shorter runDir: ${p.socket}`);
    }
  }

  private async waitReady(p: RunPaths, exitedHow: () => string | undefined): Promise<DaemonClient> {
    const client = new DaemonClient(p.socket, { connectTimeoutMs: 1_000 });
    const deadline = Date.now() + this.startTimeoutMs;
    for (;;) {
      const exited = exitedHow();
      if (exited !== undefined) {
        throw new ServiceError('FAILED_PRECONDITION', `sandbox ended during start-up (${exited})`, { log: await tail(p.log) });
      }
      try {
        const pong = await client.ping(1_000);
        if (pong.version !== DAEMON_VERSION) {
          throw new ServiceError('FAILED_PRECONDITION', `sandbox daemon version ${pong.version}, expected ${DAEMON_VERSION}`);
        }
        return client;
      } catch (err) {
        if (err instanceof ServiceError && err.code === 'FAILED_PRECONDITION') throw err;
      }
      if (Date.now() > deadline) {
        client.close();
        throw new ServiceError('UNAVAILABLE', `sandbox daemon did not answer within ${this.startTimeoutMs} ms`, {
          log: await tail(p.log),
        });
      }
      await sleep(25);
    }
  }

  /** Creates the sandbox's cgroups after killing whatever an unrecovered earlier run left there. */
  private async sandboxCgroup(id: string, limits: SandboxLimits): Promise<SandboxCgroup | undefined> {
    const mgr = this.cgroups();
    if (!mgr) return undefined;
    const group = mgr.group(id);
    try {
      if (group.exists()) await group.killAll();
      return await mgr.create(id, limits);
    } catch (err) {
      await group.remove().catch(() => undefined);
      if (this.allowNoCgroups) return undefined;
      throw cgroupError(err);
    }
  }

  /** existingCgroup() for exec(): after the first look, one stat (the freezer group execs are placed in). */
  private execCgroup(id: string): SandboxCgroup | undefined {
    const known = this.execCgroups.get(id);
    if (known && existsSync(known.dirs.freezer)) return known;
    this.execCgroups.delete(id);
    const cg = this.existingCgroup(id);
    if (cg) this.execCgroups.set(id, cg);
    return cg;
  }

  private existingCgroup(id: string): SandboxCgroup | undefined {
    const group = this.cgroups()?.group(id);
    return group?.exists() ? group : undefined;
  }

  private cgroups(): CgroupManager | undefined {
    if (this.cgroupManager === undefined) {
      try {
        this.cgroupManager = CgroupManager.discover(this.cgroupParent);
        if (this.favorDynmods) {
          mkdirSync(this.runDir, { recursive: true, mode: 0o700 });
          this.onNote?.(`cgroup favordynmods (fast task moves between cgroups): ${favorDynamicCgroupModifications(this.runDir)}`);
        }
      } catch (err) {
        if (!this.allowNoCgroups) throw cgroupError(err);
        this.cgroupManager = null;
      }
    }
    return this.cgroupManager ?? undefined;
  }

  private client(h: SandboxHandle): DaemonClient {
    let client = this.clients.get(h.id);
    if (!client) {
      client = new DaemonClient(h.socketPath);
      this.clients.set(h.id, client);
    }
    return client;
  }

  private paths(id: string): RunPaths {
    // A hash keeps the socket path short whatever the id's length.
    const dir = path.join(this.runDir, createHash('sha256').update(id).digest('hex').slice(0, 16));
    return {
      dir,
      state: path.join(dir, 'state.json'),
      log: path.join(dir, 'daemon.log'),
      etc: path.join(dir, 'etc'),
      opt: path.join(dir, 'opt'),
      mnt: path.join(dir, 'm'),
      egress: path.join(dir, 'm', 'egress'),
      sockDir: path.join(dir, 'm', 's'),
      socket: path.join(dir, 'm', 's', 'd.sock'),
    };
  }

  private async checkDaemon(): Promise<void> {
    const main = path.join(this.daemonDir, 'main.js');
    if (!existsSync(main)) {
      throw new ServiceError('FAILED_PRECONDITION', `compiled sandbox daemon not found at ${main} (build with npx tsc -p .)`);
    }
    await assertTraversable(main, this.ids);
  }

  private async checkProxySocket(socket: string): Promise<void> {
    let st;
    try {
      st = await stat(socket);
    } catch {
      throw new ServiceError('FAILED_PRECONDITION', `egress proxy socket does not exist: ${socket}`);
    }
    if (!st.isSocket()) throw new ServiceError('FAILED_PRECONDITION', `egress proxy path is not a socket: ${socket}`);
    await assertTraversable(socket, this.ids);
  }
}

const GENERATED_ETC = ['passwd', 'group', 'hosts', 'hostname', 'nsswitch.conf'] as const;

/** /usr read-only, the host's merged-usr links (or directories) next to it, /proc and /dev. */
function systemArgs(): string[] {
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

function etcContent(): Record<(typeof GENERATED_ETC)[number], string> {
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

/** The environment commands start from. Proxy variables come last so the spec cannot bypass them by accident. */
function commandEnv(extra: Record<string, string> | undefined, network: SandboxNetwork): Record<string, string> {
  const env: Record<string, string> = {
    PATH: '/usr/local/bin:/usr/bin:/bin',
    HOME: SANDBOX_USER.home,
    USER: SANDBOX_USER.name,
    LOGNAME: SANDBOX_USER.name,
    SHELL: '/bin/bash',
    LANG: 'C.UTF-8',
    TMPDIR: '/tmp',
    // As under a login shell; bash -c with SHLVL unset and a socket on stdin would source ~/.bashrc.
    SHLVL: '1',
  };
  // Proxy defaults first, so a caller's explicit variable (e.g. NO_PROXY for a one-host git proxy) wins.
  if (network !== 'none') Object.assign(env, PROXY_ENV);
  for (const [k, v] of Object.entries(extra ?? {})) {
    if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(k) || typeof v !== 'string' || v.includes('\0')) {
      throw new ServiceError('INVALID_ARGUMENT', 'invalid environment variable', { name: k });
    }
    env[k] = v;
  }
  return env;
}

/** The daemon's (or the ephemeral wrapper's) own environment: just enough for node. */
function daemonEnv(): Record<string, string> {
  return { PATH: '/usr/bin:/bin', HOME: SANDBOX_USER.home, LANG: 'C.UTF-8' };
}

/** After a short-lived sandbox was killed (timeout, cancel), how long its end may take to be seen. */
const KILLED_CLOSE_GRACE_MS = 10_000;

/** Streams an ephemeral sandbox's output into bounded captures and waits for it to end (exported for its tests). */
export function collect(
  child: ChildProcess,
  spec: EphemeralSpec,
  started: number,
  kill: () => Promise<void>,
  closeGraceMs = KILLED_CLOSE_GRACE_MS,
): Promise<ExecResult> {
  const maxOutput = spec.maxOutputBytes ?? 262_144;
  const out = { stdout: new HeadTailCapture(maxOutput), stderr: new HeadTailCapture(maxOutput) };
  let timedOut = false;
  let cancelled = false;
  return new Promise<ExecResult>((resolve, reject) => {
    let settled = false;
    let lastResort: NodeJS.Timeout | undefined;
    /** The first end only (close, the last resort, or a failed start): its timers and listener go. */
    const settle = (): boolean => {
      if (settled) return false;
      settled = true;
      clearTimeout(timer);
      clearTimeout(lastResort);
      spec.signal?.removeEventListener('abort', onAbort);
      return true;
    };
    const finish = (code: number | null, sig: NodeJS.Signals | null): void => {
      if (!settle()) return;
      resolve({
        exitCode: code,
        signal: sig,
        timedOut,
        cancelled,
        stdout: out.stdout.text(),
        stderr: out.stderr.text(),
        stdoutBytes: out.stdout.totalBytes,
        stderrBytes: out.stderr.totalBytes,
        stdoutTruncated: out.stdout.truncated,
        stderrTruncated: out.stderr.truncated,
        durationMs: Date.now() - started,
      });
    };
    const stop = (): void => {
      kill().catch(() => undefined);
      // Killed, it must end: should its 'close' still not come (a pipe held open by something
      // outside the sandbox's cgroup, say), the call answers anyway, with what was captured,
      // instead of holding the workspace's lock for good.
      lastResort ??= setTimeout(() => finish(child.exitCode, child.signalCode ?? 'SIGKILL'), closeGraceMs);
    };
    const timer = setTimeout(() => {
      timedOut = true;
      stop();
    }, spec.timeoutMs ?? 60_000);
    const onAbort = (): void => {
      cancelled = true;
      stop();
    };
    spec.signal?.addEventListener('abort', onAbort);
    if (spec.signal?.aborted) onAbort();
    for (const name of ['stdout', 'stderr'] as const) {
      child[name]!.on('data', (chunk: Buffer) => {
        out[name].push(chunk);
        spec.onOutput?.(name, chunk);
      });
    }
    child.stdin!.on('error', () => undefined);
    if (spec.stdin !== undefined) child.stdin!.write(spec.stdin);
    child.stdin!.end();
    child.on('error', (err) => {
      if (settle()) reject(new ServiceError('INTERNAL', `cannot start the sandbox: ${err.message}`));
    });
    child.on('close', (code, sig) => finish(code, sig));
  });
}

/** Kills a keeper we started (no-cgroup mode): its death takes the whole sandbox down. */
async function killKeeper(pid: number): Promise<void> {
  let cmdline: string;
  try {
    cmdline = readFileSync(`/proc/${pid}/cmdline`, 'utf8');
  } catch {
    return;
  }
  // Never signal a recycled pid that is not ours.
  if (!cmdline.split('\0').includes('atelier-keeper')) return;
  killGroup(pid);
  for (let i = 0; i < 200 && isAlive(pid); i++) await sleep(10);
}

function killGroup(pid: number | undefined): void {
  if (pid === undefined) return;
  for (const target of [-pid, pid]) {
    try {
      process.kill(target, 'SIGKILL');
    } catch {
      // gone
    }
  }
}

function isAlive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) !== 'Z';
  } catch {
    return false;
  }
}

/** The last `bytes` bytes of a file (no more is read), as text; '' when it cannot be read. */
async function tailBytes(file: string, bytes: number): Promise<string> {
  let fh: FileHandle | undefined;
  try {
    fh = await open(file, fsConstants.O_RDONLY | fsConstants.O_NOFOLLOW);
    const { size } = await fh.stat();
    const n = Math.min(size, bytes);
    const buf = Buffer.alloc(n);
    await fh.read(buf, 0, n, size - n);
    return buf.toString('utf8');
  } catch {
    return '';
  } finally {
    await fh?.close();
  }
}

async function tail(file: string, bytes = 2048): Promise<string> {
  try {
    const text = await readFile(file, 'utf8');
    return text.slice(-bytes);
  } catch {
    return '';
  }
}

function depth(p: string): number {
  return p.split('/').filter(Boolean).length;
}

function sameNetwork(a: SandboxNetwork, b: SandboxNetwork): boolean {
  if (a === 'none' || b === 'none') return a === b;
  return a.proxySocket === b.proxySocket;
}

function cgroupError(err: unknown): ServiceError {
  const message = err instanceof Error ? err.message : String(err);
  return new ServiceError(
    'FAILED_PRECONDITION',
    `cannot set up sandbox cgroups: ${message} (the runner must be root with cgroup v1 memory, pids, cpu, cpuacct, cpuset and freezer mounted; allowNoCgroups exists for development only)`,
  );
}

function validateId(id: string): void {
  if (!/^[A-Za-z0-9_-]{1,100}$/.test(id)) {
    throw new ServiceError('INVALID_ARGUMENT', 'sandbox id must be 1-100 characters of A-Z a-z 0-9 _ -', { id });
  }
}

function validateLimits(l: SandboxLimits): void {
  const ok =
    Number.isSafeInteger(l.memoryBytes) && l.memoryBytes >= 16 * 1024 * 1024 &&
    Number.isSafeInteger(l.pidsMax) && l.pidsMax >= 8 &&
    Number.isFinite(l.cpuQuotaPercent) && l.cpuQuotaPercent >= 1 &&
    (l.cpus === undefined || /^\d+(-\d+)?(,\d+(-\d+)?)*$/.test(l.cpus));
  if (!ok) {
    throw new ServiceError('INVALID_ARGUMENT', 'invalid sandbox limits (memory >= 16 MiB, pids >= 8, cpu >= 1%, cpus a cpuset list)', {
      limits: l,
    });
  }
}

function validateNetwork(n: SandboxNetwork): void {
  if (n !== 'none' && (typeof n !== 'object' || typeof n.proxySocket !== 'string' || !path.isAbsolute(n.proxySocket))) {
    throw new ServiceError('INVALID_ARGUMENT', "network must be 'none' or { proxySocket: <absolute path> }");
  }
}

function validateSpec(spec: SandboxSpec): void {
  validateId(spec.id);
  validateLimits(spec.limits);
  validateNetwork(spec.network);
  if (!path.isAbsolute(spec.rootDir)) throw new ServiceError('INVALID_ARGUMENT', 'rootDir must be absolute');
}

function validateBind(b: EphemeralBind): EphemeralBind {
  const target = path.posix.normalize(b.target);
  if (!path.isAbsolute(b.source) || !target.startsWith('/') || target === '/' || target !== b.target.replace(/\/+$/, '')) {
    throw new ServiceError('INVALID_ARGUMENT', 'bind source and target must be absolute, normalized and not /', { bind: b });
  }
  if (!existsSync(b.source)) throw new ServiceError('INVALID_ARGUMENT', 'bind source does not exist', { source: b.source });
  return { ...b, target };
}

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
