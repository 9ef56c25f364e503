/**
 * The executor: what the workspace service needs from a sandbox runtime. The bubblewrap driver
 * (./bwrap/) is the embedded default; the same interface maps onto one pod per workspace.
 *
 * Handles are plain data ({ id, socketPath, pid }) so they can be stored and survive a runner
 * restart; `recover(spec)` turns a spec back into a live handle when the sandbox is still running.
 */
import type { DaemonMethod, ExecResult, ParamsOf, ReplyOf } from './daemon/protocol.js';

export type { ExecResult } from './daemon/protocol.js';

export interface SandboxLimits {
  memoryBytes: number;
  pidsMax: number;
  /** CPU time per period; 100 = one core. */
  cpuQuotaPercent: number;
  /** cpuset list, e.g. "0" or "0-1"; defaults to the parent's CPUs. */
  cpus?: string;
}

/** 'none': loopback only. Proxy: still no direct network; HTTP(S) goes through the host proxy socket. */
export type SandboxNetwork = 'none' | { proxySocket: string };

export interface SandboxSpec {
  /** Workspace id (e.g. ws_xxx): [A-Za-z0-9_-], at most 100 characters. */
  id: string;
  /** Host directory holding repo/, home/ and tmp/, owned by the sandbox uid (create() makes sure). */
  rootDir: string;
  limits: SandboxLimits;
  /** `proxySocket` is exposed inside as http://127.0.0.1:3128 through an in-sandbox bridge. */
  network: SandboxNetwork;
  /** Extra environment for every command, over the defaults (HOME, PATH, USER, LANG, TMPDIR...). */
  env?: Record<string, string>;
  /** Extra host directories bound read-only (managed-package releases). */
  mounts?: EphemeralBind[];
  /**
   * The daemon runs as uid 0 in a user namespace whose id map the runner writes (`idMap`: lines of
   * `inside outside count`, for uids and gids), holding only `capabilities` (names without
   * `CAP_`). bubblewrap driver only, and only for the Kubernetes fixture's kubelet: a Pod with
   * `hostUsers: false` and `runAsUser: 0` (test/fixtures/kube-apiserver/runtime.ts). The service
   * never sets it.
   */
  rootUserNamespace?: { idMap: string; capabilities: string[] };
}

export interface SandboxHandle {
  id: string;
  /** Host path of the daemon's Unix socket. */
  socketPath: string;
  /** Host pid of the sandbox's outermost process (its keeper). */
  pid: number;
  /**
   * Where the sandbox runs when it is not a bubblewrap sandbox on the runner's host (absent):
   * the cluster object a driver made for it (workspace_status, /metrics).
   */
  placement?: SandboxPlacement;
}

/** What a sandbox is: see sandboxKind(). */
export type SandboxKind = 'bubblewrap' | 'kubernetes-pod' | 'kubernetes-sandbox';

/**
 * A sandbox in a cluster (issue #34: "detect, and say which was used"): a Pod with a
 * PersistentVolumeClaim, or an agent-sandbox Sandbox whose controller makes the Pod.
 */
export interface SandboxPlacement {
  kind: Exclude<SandboxKind, 'bubblewrap'>;
  /** The object's apiVersion and kind: v1 Pod, or agents.x-k8s.io/<version> Sandbox. */
  apiVersion: string;
  objectKind: 'Pod' | 'Sandbox';
  namespace: string;
  name: string;
  /** The Pod running the daemon (a Pod's own name; a Sandbox's Pod). */
  pod: string;
  /** A Sandbox taken through a SandboxClaim from a warm pool: the claim, and whether the Sandbox was warm (adopted) or made for it (cold). */
  claim?: { name: string; pool: string; launch: 'warm' | 'cold' };
}

/** The kind of a sandbox: its placement's, else a bubblewrap sandbox on the runner's host. */
export function sandboxKind(h: SandboxHandle): SandboxKind {
  return h.placement?.kind ?? 'bubblewrap';
}

/** Every kind, for gauges that show zero as well as counts (/metrics). */
export const SANDBOX_KINDS: readonly SandboxKind[] = ['bubblewrap', 'kubernetes-pod', 'kubernetes-sandbox'];

export interface ExecRequest {
  /** Exact argv (argv[0] looked up in PATH). Exactly one of argv and command. */
  argv?: string[];
  /** Shell command line, run by /bin/bash -c. */
  command?: string;
  /** Working directory relative to /workspace (=.); must stay inside it after resolving symlinks. */
  cwd?: string;
  env?: Record<string, string>;
  stdin?: string | Buffer;
  /** Default 60000. On expiry the command, its process group and every process it started are killed. */
  timeoutMs?: number;
  /** Bytes kept per stream, half head and half tail (default 262144). */
  maxOutputBytes?: number;
  /** On timeout or cancel, SIGTERM first and SIGKILL this many ms later; 0 (default) kills at once. */
  killGraceMs?: number;
  /**
   * true: processes the command leaves behind keep running after it exits normally (async
   * operations and tasks, tools made for background work). Otherwise (default) a command's whole
   * session and everything it started are killed when it ends, whichever way.
   */
  keepBackground?: boolean;
}

/** Inside every short-lived sandbox: git's credential helper (for `credential.helper = !<path>`; forwards to a broker socket bound at /run/atelier-cred). */
export const EPHEMERAL_CREDHELPER = '/opt/atelier/lib/credhelper';

/**
 * Where a driver's short-lived sandboxes take what the runner gives a git operation, when not at
 * the bubblewrap driver's paths (a Kubernetes Pod's root is its image's: runner sockets and files
 * go under the Pod's own /dev/shm/atelier there). Absent: the credential socket directory at
 * /run/atelier-cred, the CA bundle at /run/atelier-ca.pem, the helper EPHEMERAL_CREDHELPER.
 */
export interface EphemeralLayout {
  /** Where a collected directory (EphemeralBind.collect: a package build's) is bound; absent, anywhere (the builder uses /build). */
  buildDir?: string;
  /** Where the credential broker's socket directory is bound (EphemeralBind.sockets). */
  credSocketDir: string;
  /** Where the extra CA bundle file is placed. */
  caFile: string;
  /** git's credential helper command (after `!`), given the broker socket's path inside. */
  credentialHelper(socket: string): string;
  /** Where an agent runtime's socket directory is bound (default /run/agent), told to it with --socket-dir. */
  agentSocketDir?: string;
}

export interface EphemeralBind {
  /** Host path. */
  source: string;
  /** Absolute path inside the sandbox. */
  target: string;
  readOnly?: boolean;
  /**
   * The source is a directory of Unix sockets the runner serves (an agent's control and gateway,
   * the credential broker's): the sandbox gets a directory of relays to the sockets in it at the
   * start, from its own tmpfs, instead of a bind of the host directory (no host path shows in its
   * mountinfo; src/sandbox/runfs.ts). Read-only. A read-only bind of a regular file anyone may
   * read is copied in (no host path either; opened O_NOFOLLOW); other binds are bind mounts.
   */
  sockets?: boolean;
  /**
   * A read-write directory whose result the runner takes back (a package build's installed
   * tree): under bubblewrap an ordinary bind. A driver that cannot bind host directories
   * (Kubernetes) copies the directory's contents in before the command and, after a command that
   * exited 0, brings back the sub-directory `name` as a tar stream the runner parses itself
   * (kubernetes/untar.ts), at most `maxBytes`; a refused stream rejects with a ServiceError whose
   * details.reason is 'tree_refused' and details.refusal says why.
   */
  collect?: { name: string; maxBytes: number };
}

/**
 * A short-lived sandbox for one command (git network operations, the bash toolbox target). The
 * command fields are ExecRequest's, except that cwd is absolute and there is no kill grace.
 */
export interface EphemeralSpec extends Omit<ExecRequest, 'cwd' | 'killGraceMs' | 'keepBackground'> {
  /** Names the cgroup; generated when omitted. */
  id?: string;
  /**
   * Host directories/files to bind, e.g. a repository at /workspace. Without a bind on /tmp or
   * /home/user those are empty tmpfs. Read-only binds also carry sockets such as a credential helper's.
   */
  binds: EphemeralBind[];
  limits: SandboxLimits;
  network: SandboxNetwork;
  /** Absolute working directory inside the sandbox (=/). */
  cwd?: string;
  onOutput?: (stream: 'stdout' | 'stderr', chunk: Buffer) => void;
  /** Aborting kills the sandbox; the result then has cancelled: true. */
  signal?: AbortSignal;
  /**
   * Run as uid 0 inside a new user namespace with every capability scoped to it (approved
   * privileged commands). It maps to the same unprivileged host uid: nothing of the host opens up.
   */
  privileged?: boolean;
}

export interface DaemonDeath {
  /** "exit 1", "signal SIGABRT" (a shell's 128+n read back as the signal), or null when this runner did not start it. */
  exit: string | null;
  /** OOM kills counted in the sandbox's memory cgroup so far (the cgroup lives across restarts); null when unknown. */
  oomKills: number | null;
  /** The last lines of the daemon's stderr (its log), control characters removed, each cut to 300 characters. */
  stderrTail: string[];
}

/** One line saying what DaemonDeath found, for logs and workspace_status's sandboxNote. */
export function describeDeath(d: DaemonDeath): string {
  const parts = [d.exit ? `ended with ${d.exit}` : 'exit status unknown (the daemon was started by an earlier runner process)'];
  if (d.oomKills !== null) parts.push(`cgroup OOM kills ${d.oomKills}`);
  const last = d.stderrTail.filter((l) => l.trim() !== '').slice(-3);
  if (last.length > 0) parts.push(`last stderr: ${last.join(' | ')}`);
  return parts.join('; ');
}

export interface SandboxStats {
  memoryBytes: number;
  pids: number;
  cpuUsageNs: number;
}

/**
 * A workspace's files on the runner's host (the bubblewrap driver: the workspace's own filesystem
 * image mounted at rootDir, its repo/, home/ and tmp/ made by descriptor). A driver without it
 * keeps a workspace's files itself (Kubernetes: the workspace's claim).
 */
/** How an image copy was made: 'reflink' shares the blocks until either side writes (copy-on-write); 'copy' wrote every allocated block. */
export type CopyMode = 'reflink' | 'copy';

/** The rule named in the RESOURCE_EXHAUSTED a copy answers when the disk holding the images is full. */
export const IMAGE_STORE_FULL = 'image store full';

/** A workspace's state at rest: one filesystem image file. */
export interface StoredState {
  /** Host path of the image (root's, in a 0700 directory). */
  image: string;
  /** The image's size (the filesystem's size; holes included). */
  sizeBytes: number;
  /** Blocks the image references on the host disk (a reflink clone's are shared with its source until either writes). */
  diskBytes: number;
  /** What making it added to the host disk: for a copy every allocated block (diskBytes); for a reflink clone only the extents it does not share (none, as it is made). */
  addedBytes: number;
  mode: CopyMode;
}

/** What a snapshot needs of a workspace. */
export interface SnapshotSource {
  /** The workspace filesystem's mount point (root's; the workspace cannot replace it). */
  rootDir: string;
  /** Its image file. */
  image: string;
  /**
   * Runs fn with every process of the workspace frozen (cgroup freezer), when it has any running;
   * `frozen` says whether processes were frozen.
   */
  freeze: <T>(fn: () => Promise<T>) => Promise<{ value: T; frozen: boolean }>;
}

export interface SnapshotResult extends StoredState {
  /** Whether the workspace's processes were frozen for the copy (false: none ran). */
  processesFrozen: boolean;
  /** How long the workspace stood still (processes frozen and its filesystem frozen), ms. */
  frozenMs: number;
  /** The whole snapshot, ms. */
  ms: number;
}

/**
 * Copies of whole workspace images (checkpoints, restores, forks: issue #33), for a storage that
 * keeps each workspace's filesystem in one host image file (WorkspaceStorage.image).
 */
export interface WorkspaceImageCopies {
  /** A consistent copy of a live workspace's filesystem at dest (its processes and filesystem frozen for the copy). */
  snapshot(source: SnapshotSource, dest: string): Promise<SnapshotResult>;
  /** A new, independent image at `image` from a stored state. */
  materialize(state: Pick<StoredState, 'image'>, image: string): Promise<{ mode: CopyMode; ms: number; addedBytes: number }>;
  /** Flushes the workspace filesystem mounted at rootDir so its image's size is current. */
  settle(rootDir: string): Promise<void>;
  /** Apparent and allocated size of an image file. */
  usage(file: string): Promise<{ sizeBytes: number; diskBytes: number }>;
  /** Thaws a filesystem an earlier runner left frozen at rootDir; whether one was. */
  unfreezeLeftover(rootDir: string): Promise<boolean>;
}

export interface WorkspaceStorage {
  /** Makes rootDir ready for the sandbox (idempotent). */
  prepare(id: string, rootDir: string): Promise<void>;
  /** Deletes every file of the workspace (an absent rootDir is fine). */
  remove(id: string, rootDir: string): Promise<void>;
  /** Readies storage for the next workspace ahead of time; false when this storage has nothing to ready. */
  prepareSpare(): Promise<boolean>;
  /** Removes what spare preparation left (at start-up). */
  cleanSpares(): Promise<void>;
  /**
   * The host file holding the workspace's whole filesystem, its directory made (checkpoints and
   * forks copy it, issue #33); undefined when this storage keeps no such image (then there are no
   * checkpoints).
   */
  image?(id: string): string | undefined;
  /** Unmounts the workspace's filesystem (before its image is replaced); prepare() mounts it again. */
  unmount?(id: string, rootDir: string): Promise<void>;
  /**
   * A filesystem of its own, sizeMb large, on the host file `img`, mounted at `dir` (a package
   * build's directory, as a workspace's disk: a build that fills it fails alone). Absent, the
   * directory stays a plain directory of the data directory (a driver whose builds run elsewhere
   * bounds what comes back by EphemeralBind.collect.maxBytes).
   */
  mountScratch?(img: string, sizeMb: number, dir: string): Promise<void>;
  /** Unmounts what mountScratch mounted at dir; nothing mounted there, nothing done. */
  unmountScratch?(dir: string): Promise<void>;
  /** Copies of workspace images (with image()); absent, there are no checkpoints or forks. */
  readonly copies?: WorkspaceImageCopies;
}

export interface Executor {
  /** Optional (see WorkspaceStorage): absent, the driver keeps the files. */
  readonly storage?: WorkspaceStorage;
  /** Optional (see EphemeralLayout): absent, the bubblewrap paths. */
  readonly ephemeralLayout?: EphemeralLayout;
  /** Starts the long-lived sandbox running the daemon; resolves once the daemon answers ping. */
  create(spec: SandboxSpec): Promise<SandboxHandle>;
  /**
   * Runs a command through the daemon. Aborting `signal` kills the command and resolves with the
   * partial result (cancelled: true).
   */
  exec(
    h: SandboxHandle,
    req: ExecRequest,
    onOutput?: (stream: 'stdout' | 'stderr', chunk: Buffer) => void,
    signal?: AbortSignal,
  ): Promise<ExecResult>;
  /** Kills every process of the sandbox (files are kept). */
  stop(h: SandboxHandle): Promise<void>;
  /** Whether the sandbox (its daemon) still runs. */
  alive(h: SandboxHandle): Promise<boolean>;
  /**
   * Why a sandbox's daemon ended, read before the sandbox is stopped or restarted (issue #35): its
   * exit status, the last lines it wrote to stderr and its cgroup's OOM kills. Optional: a driver
   * that cannot tell leaves it out.
   */
  daemonDeath?(h: SandboxHandle): Promise<DaemonDeath>;
  /** stop() and remove the sandbox's cgroups and runtime files. rootDir is the caller's to remove. */
  destroy(h: SandboxHandle): Promise<void>;
  /** After a runner restart: the handle of a sandbox whose daemon still answers, else null. */
  recover(spec: SandboxSpec): Promise<SandboxHandle | null>;
  /**
   * At start, once every sandbox the service keeps has been recovered or restarted: removes the
   * host runtime files (and filesystems mounted for them) of sandboxes no live sandbox of this
   * runner owns, what an earlier runner left when it was killed mid-start or mid-command (issue #42
   * item 12). Optional: a driver whose sandboxes leave nothing on the host leaves it out.
   */
  sweepRuntime?(): Promise<void>;
  stats(h: SandboxHandle): Promise<SandboxStats>;
  /** Changes the network policy; see the driver for whether this restarts the sandbox. */
  setNetworkPolicy(h: SandboxHandle, network: SandboxNetwork): Promise<void>;
  runEphemeral(spec: EphemeralSpec): Promise<ExecResult>;
  /**
   * Calls any other daemon method (files, search, overview, PTYs as they are added); daemon errors
   * reject as ServiceError with the daemon's code.
   */
  request<M extends DaemonMethod>(h: SandboxHandle, method: M, params: ParamsOf<M>, opts?: { signal?: AbortSignal; timeoutMs?: number; onEvent?: (event: string, data: unknown) => void }): Promise<ReplyOf<M>>;
  /**
   * Runs fn with every process of the sandbox frozen (cgroup freezer), thawing afterwards whatever
   * fn does: a checkpoint's consistent instant (issue #33, src/sandbox/snapshot.ts). Without
   * cgroups there is nothing to freeze and fn runs as it is (false as the second value).
   */
  whileFrozen?<T>(h: SandboxHandle, fn: () => Promise<T>): Promise<{ value: T; frozen: boolean }>;
  /**
   * A byte pipe to a loopback port inside the sandbox, through the daemon (preview URLs; the
   * sandbox keeps no inbound network). The socket comes paused at the first relayed byte.
   */
  relay?(h: SandboxHandle, port: number): Promise<import('node:net').Socket>;
  /** Counters for /metrics: files_read ranges taken through a handed-off descriptor, and handoffs refused (read the ordinary way). */
  fileHandoffs?(): { taken: number; refused: number };
}
