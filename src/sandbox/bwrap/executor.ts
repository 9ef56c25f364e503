/**
 * The bubblewrap executor: the embedded default driver for sandboxes on one Linux host. This
 * class is its lifecycle (create, stop, destroy, recover, alive) and the door every call goes
 * through; the work is in the modules beside it (index.ts lists what leaves the folder):
 *
 *   start.ts      starting a long-lived sandbox (keeper, daemon, first ping, state file)
 *   ephemeral.ts  short-lived sandboxes (runEphemeral), their binds and socket relays
 *   launch.ts     the launcher: cgroups joined as root, setpriv, keeper, bwrap --args/--seccomp
 *   args.ts       bubblewrap's arguments, the generated /etc, /opt/atelier's files
 *   env.ts        the environments inside (commands', the daemon's)
 *   layout.ts     in-sandbox paths, the sandbox user, the marks args.ts leaves for launch.ts
 *   rundir.ts     a sandbox's runtime directory on the host and its state file
 *   exec.ts       the exec path (exec cgroups), with spares.ts (spare exec starters)
 *   read.ts       fs.read through the descriptor handoff
 *   proxy.ts      the egress proxy socket relayed into a sandbox
 *   cgroup-access.ts  the sandboxes' cgroups as the driver reaches them
 *   keeper.ts     the keeper process (alive, killed without cgroups)
 *   death.ts      why a daemon died
 *   collect.ts    a short-lived sandbox's output and end
 *   validate.ts   checks of the caller's specs
 *   probe.ts      whether this host can run the driver (doctor, serve's start check)
 *   options.ts    the options and their defaults
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
 * proxy.ts) and the usual proxy variables point at the bridge.
 *
 * Exec timeouts: every exec runs in a per-exec freezer cgroup (cgroups.ts). Usually the command
 * starts in a spare exec starter the runner placed there ahead of time (exec.ts, spares.ts); otherwise the
 * daemon holds each exec before it runs the command, and the runner moves the held process into
 * its cgroup and releases it. On timeout or cancel
 * the daemon kills the process group and attached descendants, and the runner then kills whatever
 * is left in the exec's cgroup, which includes processes that used setsid and were re-parented.
 */
import type { Socket } from 'node:net';
import { randomBytes } from 'node:crypto';
import { readFile as readText, rm } from 'node:fs/promises';
import { ServiceError } from '../../core/errors.js';
import { DaemonClient } from '../client.js';
import { DAEMON_VERSION, type DaemonMethod, type ExecResult, type FsReadParams, type FsReadReply, type ParamsOf, type ReplyOf } from '../daemon/protocol.js';
import type {
  DaemonDeath,
  EphemeralSpec,
  ExecRequest,
  Executor,
  SandboxHandle,
  SandboxNetwork,
  SandboxSpec,
  SandboxStats,
  WorkspaceStorage,
} from '../executor.js';
import { LanguageServerMounts } from './lsp-image.js';
import { FileHandoff } from '../handoff.js';
import { openRelay } from '../relay.js';
import { removeTreeNoFollow } from '../rootdir.js';
import { unmountRunFs } from '../runfs.js';
import { DaemonCode } from './args.js';
import { CgroupAccess } from './cgroup-access.js';
import { daemonDeath, type KeeperExit } from './death.js';
import { runEphemeral } from './ephemeral.js';
import { runExec } from './exec.js';
import { keeperRuns, killKeeper } from './keeper.js';
import { Launcher } from './launch.js';
import { bwrapSettings, type BwrapExecutorOptions, type BwrapSettings } from './options.js';
import { ProxyRelays } from './proxy.js';
import { readFile } from './read.js';
import { runPaths, sweepRunDir, type RunState } from './rundir.js';
import { Spares } from './spares.js';
import { startSandbox, type StartContext } from './start.js';
import { validateSpec } from './validate.js';

export class BwrapExecutor implements Executor {
  readonly storage: WorkspaceStorage | undefined;
  private readonly settings: BwrapSettings;
  private readonly onNote: ((message: string) => void) | undefined;
  private readonly cgroups: CgroupAccess;
  private readonly launcher: Launcher;
  private readonly daemon: DaemonCode;
  /** Per long-lived sandbox: the relay of its egress proxy socket. */
  private readonly proxies: ProxyRelays;
  /** Per sandbox: spare exec starters already in their exec cgroups (see exec()). */
  private readonly spares: Spares;
  private readonly specs = new Map<string, SandboxSpec>();
  private readonly clients = new Map<string, DaemonClient>();
  /** Per sandbox: the keeper pid of the sandbox whose daemon `clients` holds (set at start and recovery; see alive()). */
  private readonly keepers = new Map<string, number>();
  /** files_read's descriptor handoff (handoff.ts), per sandbox. */
  private readonly handoff: FileHandoff;
  /** Per sandbox started by this runner: how its keeper (and so its daemon) ended, for daemonDeath(). */
  private readonly exits = new Map<string, KeeperExit>();
  /** Runtime directories (runPaths(...).dir) of sandboxes being started or running short-lived now: sweepRuntime leaves them. */
  private readonly inFlight = new Map<string, number>();
  /** Runtime directories sweepRuntime is removing now: a start of the same sandbox waits for it. */
  private readonly sweeping = new Map<string, Promise<void>>();
  /** The language servers' image, mounted while daemon sandboxes start (lsp-image.ts). */
  private readonly languageServers: LanguageServerMounts;

  constructor(opts: BwrapExecutorOptions = {}) {
    this.storage = opts.storage;
    this.settings = bwrapSettings(opts);
    this.onNote = opts.onNote;
    this.cgroups = new CgroupAccess(this.settings, this.onNote);
    this.launcher = new Launcher(this.settings, this.onNote);
    this.daemon = new DaemonCode(this.settings.daemonDir);
    this.proxies = new ProxyRelays(this.settings.ids);
    this.spares = new Spares(
      (h) => this.client(h),
      (id) => this.specs.get(id)?.limits.pidsMax,
    );
    this.languageServers = new LanguageServerMounts(this.settings.runDir, this.onNote);
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
  relay(h: SandboxHandle, port: number): Promise<Socket> {
    return openRelay(h.socketPath, port);
  }

  fileHandoffs(): { taken: number; refused: number } {
    return { ...this.handoff.counts };
  }

  /** fs.read, a large range through the descriptor handoff when this sandbox has it (read.ts). */
  private async readFile(h: SandboxHandle, params: FsReadParams, opts: { signal?: AbortSignal; timeoutMs?: number }): Promise<FsReadReply> {
    return readFile(this.handoff, this.client(h), h.id, params, opts, () => {
      const spec = this.specs.get(h.id);
      const cg = this.cgroups.existing(h.id);
      return spec ? { rootDir: spec.rootDir, members: cg ? () => cg.members() : undefined } : undefined;
    });
  }

  /** One command in the sandbox's daemon, in its own exec cgroup (exec.ts). */
  async exec(
    h: SandboxHandle,
    req: ExecRequest,
    onOutput?: (stream: 'stdout' | 'stderr', chunk: Buffer) => void,
    signal?: AbortSignal,
  ): Promise<ExecResult> {
    return runExec((x) => this.client(x), this.spares, this.cgroups.forExec(h.id), h, req, onOutput, signal);
  }

  async stop(h: SandboxHandle): Promise<void> {
    this.spares.drop(h.id);
    this.keepers.delete(h.id);
    this.cgroups.forget(h.id);
    this.handoff.forget(h.id);
    this.clients.get(h.id)?.close();
    this.clients.delete(h.id);
    this.specs.delete(h.id);
    const p = runPaths(this.settings.runDir, h.id);
    const cg = this.cgroups.existing(h.id);
    if (cg) await cg.killAll();
    else await killKeeper(h.pid);
    await this.proxies.close(h.id);
    await rm(p.socket, { force: true });
    await rm(p.state, { force: true });
    await unmountRunFs(p.mnt);
  }

  async whileFrozen<T>(h: SandboxHandle, fn: () => Promise<T>): Promise<{ value: T; frozen: boolean }> {
    const cg = this.cgroups.existing(h.id);
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
    await this.cgroups.existing(h.id)?.remove();
    await removeTreeNoFollow(runPaths(this.settings.runDir, h.id).dir);
  }

  async recover(spec: SandboxSpec): Promise<SandboxHandle | null> {
    validateSpec(spec);
    const p = runPaths(this.settings.runDir, spec.id);
    let state: RunState;
    try {
      state = JSON.parse(await readText(p.state, 'utf8')) as RunState;
    } catch {
      return null;
    }
    if (!this.cgroups.existing(spec.id) && !this.settings.allowNoCgroups) return null;
    const client = new DaemonClient(p.socket, { connectTimeoutMs: 1_000 });
    try {
      const pong = await client.ping(2_000);
      if (pong.version !== DAEMON_VERSION) throw new Error('daemon version differs');
      // The egress proxy lives in the runner, so after a restart its socket is a new file.
      if (!(await this.proxies.reattach(spec.id, p, state, spec.network))) throw new Error('egress proxy cannot be reattached');
    } catch {
      client.close();
      return null;
    }
    this.adopt(spec.id, client, state.pid);
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
    return keeperRuns(h.pid, h.id, () => this.cgroups.existing(h.id) !== undefined);
  }

  async daemonDeath(h: SandboxHandle): Promise<DaemonDeath> {
    return daemonDeath(this.exits.get(h.id), h.pid, this.cgroups.existing(h.id), runPaths(this.settings.runDir, h.id).log);
  }

  async stats(h: SandboxHandle): Promise<SandboxStats> {
    const cg = this.cgroups.existing(h.id);
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

  runEphemeral(spec: EphemeralSpec): Promise<ExecResult> {
    const id = spec.id ?? `eph-${randomBytes(8).toString('hex')}`;
    return this.owning(id, () => runEphemeral({ settings: this.settings, daemon: this.daemon, launcher: this.launcher, cgroups: this.cgroups }, { ...spec, id }));
  }

  /**
   * At start, after recovery (cli/main.ts): every runtime directory no sandbox of this runner owns
   * (started, recovered, or starting now) is removed, its socket filesystem unmounted first; a
   * sandbox still running there that nothing claimed is ended (rundir.ts, sweepRunDir).
   */
  async sweepRuntime(): Promise<void> {
    const owned = (dir: string): boolean => this.inFlight.has(dir) || [...this.specs.keys()].some((id) => runPaths(this.settings.runDir, id).dir === dir);
    await sweepRunDir(this.settings.runDir, {
      owned,
      claim: (dir, removal) => {
        this.sweeping.set(dir, removal);
        void removal.finally(() => this.sweeping.delete(dir)).catch(() => undefined);
      },
      endSandbox: async (state) => {
        const cg = this.cgroups.existing(state.id);
        if (cg) {
          await cg.killAll();
          await cg.remove().catch(() => undefined);
        } else if (keeperRuns(state.pid, state.id, () => false)) await killKeeper(state.pid);
      },
      running: (state) => keeperRuns(state.pid, state.id, () => this.cgroups.existing(state.id) !== undefined),
      onNote: (m) => this.onNote?.(m),
    });
    // The language servers' image mount a runner killed during a start left (lsp-image.ts).
    await this.languageServers.sweep();
  }

  // ---- internals ----

  /** Runs fn (a start or a short-lived sandbox) with sandbox `id`'s runtime directory marked as in use, after a sweep of it ends. */
  private async owning<T>(id: string, fn: () => Promise<T>): Promise<T> {
    const dir = runPaths(this.settings.runDir, id).dir;
    // No await between the last look at `sweeping` and the mark: the sweep checks the mark before it claims a directory.
    for (let removal = this.sweeping.get(dir); removal; removal = this.sweeping.get(dir)) await removal.catch(() => undefined);
    this.inFlight.set(dir, (this.inFlight.get(dir) ?? 0) + 1);
    try {
      return await fn();
    } finally {
      const n = this.inFlight.get(dir)! - 1;
      if (n > 0) this.inFlight.set(dir, n);
      else this.inFlight.delete(dir);
    }
  }

  private start(spec: SandboxSpec): Promise<SandboxHandle> {
    const ctx: StartContext = {
      settings: this.settings,
      daemon: this.daemon,
      launcher: this.launcher,
      cgroups: this.cgroups,
      proxies: this.proxies,
      spares: this.spares,
      languageServers: this.languageServers,
      onExit: (id, exit) => this.exits.set(id, exit),
      adopt: (id, client, pid) => this.adopt(id, client, pid),
    };
    return this.owning(spec.id, () => startSandbox(ctx, spec));
  }

  /** The sandbox's daemon answers on `client` (started or recovered with keeper `pid`): its connection from now on. */
  private adopt(id: string, client: DaemonClient, pid: number): void {
    this.clients.get(id)?.close();
    this.clients.set(id, client);
    this.handoff.forget(id);
    this.keepers.set(id, pid);
  }

  private client(h: SandboxHandle): DaemonClient {
    let client = this.clients.get(h.id);
    if (!client) {
      client = new DaemonClient(h.socketPath);
      this.clients.set(h.id, client);
    }
    return client;
  }
}

function sameNetwork(a: SandboxNetwork, b: SandboxNetwork): boolean {
  if (a === 'none' || b === 'none') return a === b;
  return a.proxySocket === b.proxySocket;
}
