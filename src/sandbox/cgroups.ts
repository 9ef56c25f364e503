/**
 * cgroup v1 management for sandboxes.
 *
 * Layout, per controller hierarchy: <parent>/<sandbox id>/ holds the limits of one sandbox, and
 * (freezer only) <parent>/<sandbox id>/e-<exec>/ holds the processes of one exec, so a timed-out
 * exec can be killed completely even when some of its processes called setsid and lost their
 * parent. The default parent is "<the runner's own cgroup>/atelier" in each hierarchy, which
 * respects a delegated subtree (systemd Delegate=yes) and keeps the runner itself outside every
 * sandbox cgroup.
 *
 * A whole cgroup is killed by freezing it, SIGKILLing every member, and thawing it: frozen
 * processes cannot fork or escape while the kill is under way.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmdirSync } from 'node:fs';
import { mkdir, readdir, readFile, rmdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { ServiceError } from '../core/errors.js';
import type { SandboxLimits, SandboxStats } from './executor.js';

export const CONTROLLERS = ['memory', 'pids', 'cpu', 'cpuacct', 'cpuset', 'freezer'] as const;
export type Controller = (typeof CONTROLLERS)[number];

const CFS_PERIOD_US = 100_000;

export interface Hierarchy {
  /** Where the hierarchy is mounted on the host. */
  mount: string;
  /** The runner's own cgroup in it, as a path inside the hierarchy (e.g. "/" or "/system.slice/x"). */
  own: string;
}

/** Flags of the cgroup2 root: a cgroup2 mount sets or clears every one of them at once. */
const CGROUP2_ROOT_FLAGS = ['nsdelegate', 'favordynmods', 'memory_localevents', 'memory_recursiveprot', 'memory_hugetlb_accounting', 'pids_localevents'];

/**
 * Moving a task between cgroups takes the kernel's global cgroup_threadgroup_rwsem for writing,
 * and a writer after a quiet spell first waits a whole RCU grace period (rcu_sync): on this
 * machine a cgroup.procs write 25 ms after the previous one took 6.6 ms p50 and up to 18 ms,
 * against 0.04 ms back to back. A sandbox moves every spare exec starter into its own group (and a
 * held exec after it starts), a few moves every few commands, so nearly every round paid it.
 * `favordynmods` (Linux 6.1+) keeps that rwsem in its slow-reader mode for good: moves take about
 * 0.1 ms, and forks and exits pay one shared atomic more (not measurable here: `bash -c true` 0.94
 * vs 0.94 ms). It is a flag of the cgroup2 root, set by mounting cgroup2 with it, and it stays
 * after the mount is gone; the rwsem it acts on is the one v1 moves take too.
 *
 * So, once per runner and as root, this mounts cgroup2 on a private directory with the flags the
 * host's cgroup2 mount already has (a cgroup2 mount sets all of them: nsdelegate must not be
 * cleared) plus favordynmods, and unmounts it. Nothing else changes; an operator who wants it off
 * sets sandboxFavorDynmods to off (docs/sandbox.md). Returns what happened, for the log.
 */
export function favorDynamicCgroupModifications(privateDir: string): 'set' | 'already set' | `not set: ${string}` {
  if (process.getuid?.() !== 0) return 'not set: not root';
  const hostOpts = mounts().find((m) => m.fstype === 'cgroup2')?.superOpts ?? [];
  if (hostOpts.includes('favordynmods')) return 'already set';
  const flags = hostOpts.filter((o) => CGROUP2_ROOT_FLAGS.includes(o));
  let dir: string | undefined;
  try {
    dir = mkdtempSync(path.join(privateDir, 'cg2-'));
    execFileSync('mount', ['-t', 'cgroup2', '-o', [...flags, 'favordynmods'].join(','), 'none', dir], { stdio: 'pipe', timeout: 5_000 });
    execFileSync('umount', [dir], { stdio: 'pipe', timeout: 5_000 });
    return 'set';
  } catch (err) {
    const e = err as { stderr?: Buffer; message: string };
    return `not set: ${(e.stderr?.toString() || e.message).trim().split('\n')[0]}`;
  } finally {
    if (dir) {
      try {
        rmdirSync(dir);
      } catch {
        // still mounted (umount failed): left for the operator, named in the reason above
      }
    }
  }
}

/**
 * The mounted v1 hierarchies of the wanted controllers, from /proc/self/mountinfo and
 * /proc/self/cgroup. A controller that is missing is simply absent from the map.
 */
export function discoverHierarchies(): Map<Controller, Hierarchy> {
  const own = new Map<string, string>();
  for (const line of readFileSync('/proc/self/cgroup', 'utf8').split('\n')) {
    const [, names, p] = line.split(':');
    if (names === undefined || p === undefined) continue;
    for (const name of names.split(',')) own.set(name, p);
  }
  const found = new Map<Controller, Hierarchy>();
  for (const { fstype, superOpts, mountRoot, mountPoint } of mounts()) {
    if (fstype !== 'cgroup') continue;
    for (const opt of superOpts) {
      const c = CONTROLLERS.find((x) => x === opt);
      if (!c || found.has(c)) continue;
      const ownPath = own.get(c) ?? '/';
      // Inside a cgroup namespace or a container the mount may show only a subtree.
      const rel = ownPath.startsWith(mountRoot) ? ownPath.slice(mountRoot.length) : ownPath;
      found.set(c, { mount: mountPoint, own: '/' + rel.replace(/^\/+/, '') });
    }
  }
  return found;
}

/** This process's mounts, from /proc/self/mountinfo: type, superblock options, the root shown and where. */
function mounts(): Array<{ fstype: string; superOpts: string[]; mountRoot: string; mountPoint: string }> {
  const out = [];
  for (const line of readFileSync('/proc/self/mountinfo', 'utf8').split('\n')) {
    const sep = line.indexOf(' - ');
    if (sep < 0) continue;
    const pre = line.slice(0, sep).split(' ');
    const [fstype, , superOpts] = line.slice(sep + 3).split(' ');
    if (!fstype || !superOpts) continue;
    out.push({ fstype, superOpts: superOpts.split(','), mountRoot: unescapeMount(pre[3]!), mountPoint: unescapeMount(pre[4]!) });
  }
  return out;
}

function unescapeMount(s: string): string {
  return s.replace(/\\([0-7]{3})/g, (_, oct: string) => String.fromCharCode(parseInt(oct, 8)));
}

export class CgroupManager {
  /** Host directory of the parent cgroup, per controller. */
  private constructor(private readonly parents: Record<Controller, string>) {}

  /**
   * Finds every controller and the parent directory to use. `parent` is a path inside each
   * hierarchy (e.g. "/atelier"); by default "<runner's cgroup>/atelier". Throws FAILED_PRECONDITION
   * naming the missing controllers.
   */
  static discover(parent?: string): CgroupManager {
    const hierarchies = discoverHierarchies();
    const missing = CONTROLLERS.filter((c) => !hierarchies.has(c));
    if (missing.length > 0) {
      throw new ServiceError('FAILED_PRECONDITION', `cgroup v1 controllers not mounted: ${missing.join(', ')}`, {
        missing,
      });
    }
    const parents = {} as Record<Controller, string>;
    for (const c of CONTROLLERS) {
      const h = hierarchies.get(c)!;
      parents[c] = path.join(h.mount, parent ?? path.posix.join(h.own, 'atelier'));
    }
    return new CgroupManager(parents);
  }

  /** The cgroup of sandbox `name`, without touching the filesystem. */
  group(name: string): SandboxCgroup {
    const dirs = {} as Record<Controller, string>;
    for (const c of CONTROLLERS) dirs[c] = path.join(this.parents[c], name);
    return new SandboxCgroup(dirs);
  }

  /** Creates (or reuses) the cgroup of sandbox `name` and applies the limits. */
  async create(name: string, limits: SandboxLimits): Promise<SandboxCgroup> {
    const group = this.group(name);
    for (const c of uniqueControllers(group.dirs)) await ensureDir(c, group.dirs[c]);
    await group.configure(limits);
    return group;
  }
}

export class SandboxCgroup {
  constructor(readonly dirs: Record<Controller, string>) {}

  exists(): boolean {
    return CONTROLLERS.every((c) => existsSync(this.dirs[c]));
  }

  /** The cgroup.procs files a launcher writes its pid into (one per distinct hierarchy). */
  procsFiles(): string[] {
    return uniqueControllers(this.dirs).map((c) => path.join(this.dirs[c], 'cgroup.procs'));
  }

  async configure(limits: SandboxLimits): Promise<void> {
    const { memory, pids, cpu, cpuset } = this.dirs;
    const memsw = path.join(memory, 'memory.memsw.limit_in_bytes');
    const hasMemsw = existsSync(memsw);
    // memsw must stay >= limit at every step: lift it, set the limit, then pin it (no swap).
    if (hasMemsw) await put(memsw, '-1');
    await put(path.join(memory, 'memory.limit_in_bytes'), String(limits.memoryBytes));
    if (hasMemsw) await put(memsw, String(limits.memoryBytes));
    else await put(path.join(memory, 'memory.swappiness'), '0');
    await put(path.join(pids, 'pids.max'), String(limits.pidsMax));
    await put(path.join(cpu, 'cpu.cfs_period_us'), String(CFS_PERIOD_US));
    const quota = Math.max(1000, Math.round((limits.cpuQuotaPercent / 100) * CFS_PERIOD_US));
    await put(path.join(cpu, 'cpu.cfs_quota_us'), String(quota));
    const parentCpus = (await readFile(path.join(path.dirname(cpuset), 'cpuset.cpus'), 'utf8')).trim();
    await put(path.join(cpuset, 'cpuset.cpus'), limits.cpus ?? parentCpus);
  }

  /**
   * OOM kills in this cgroup so far: cgroup v1 memory.oom_control's oom_kill (kernel 4.13+), or
   * v2 memory.events' oom_kill; null when the kernel does not count them.
   */
  async oomKills(): Promise<number | null> {
    for (const file of ['memory.oom_control', 'memory.events']) {
      try {
        const m = /^oom_kill (\d+)$/m.exec(await readFile(path.join(this.dirs.memory, file), 'utf8'));
        if (m) return Number(m[1]);
      } catch {
        // not this hierarchy's file
      }
    }
    return null;
  }

  /** Host pids of every process in the sandbox, exec sub-cgroups included. */
  members(): Promise<number[]> {
    return treeMembers(this.dirs.freezer);
  }

  /** Kills every process in the sandbox (freeze, SIGKILL all, thaw) and waits until none is left. */
  async killAll(): Promise<void> {
    await killCgroup(this.dirs.freezer);
  }

  /**
   * Freezes every process of the sandbox (its exec sub-cgroups too: the v1 freezer is
   * hierarchical) and resolves once the kernel reports FROZEN, for a consistent checkpoint (issue
   * #33, src/sandbox/snapshot.ts). A task in uninterruptible sleep can keep it FREEZING: after
   * timeoutMs the group is thawed again and this throws UNAVAILABLE. Undo with thaw().
   */
  async freeze(timeoutMs = 10_000): Promise<void> {
    const state = path.join(this.dirs.freezer, 'freezer.state');
    await put(state, 'FROZEN');
    const until = Date.now() + timeoutMs;
    while ((await readFile(state, 'utf8')).trim() !== 'FROZEN') {
      if (Date.now() > until) {
        await put(state, 'THAWED');
        throw new ServiceError('UNAVAILABLE', `the workspace's processes did not freeze within ${timeoutMs} ms (a process in uninterruptible sleep); try again`);
      }
      await sleep(5);
    }
  }

  /** Lets the processes freeze() stopped run again. */
  async thaw(): Promise<void> {
    await put(path.join(this.dirs.freezer, 'freezer.state'), 'THAWED');
  }

  async stats(): Promise<SandboxStats> {
    const num = async (file: string): Promise<number> => Number((await readFile(file, 'utf8')).trim());
    return {
      memoryBytes: await num(path.join(this.dirs.memory, 'memory.usage_in_bytes')),
      pids: await num(path.join(this.dirs.pids, 'pids.current')),
      cpuUsageNs: await num(path.join(this.dirs.cpuacct, 'cpuacct.usage')),
    };
  }

  /**
   * Moves the process with pid `nsPid` (as the sandbox sees it) into a new freezer sub-cgroup for
   * one exec and returns that sub-cgroup's directory. The process must not run the command yet
   * (the daemon holds it), so nothing it starts can be outside the sub-cgroup.
   */
  private lastSweep = 0;

  async attachExec(execId: string, nsPid: number): Promise<string> {
    // Both come from the daemon: execId names a directory root makes, so it is checked here too.
    if (!isExecId(execId) || !Number.isSafeInteger(nsPid) || nsPid <= 0) throw new ServiceError('INTERNAL', 'the sandbox daemon named an exec with an invalid id or pid');
    // Groups left busy by background processes are swept now and then, not on every exec.
    if (Date.now() - this.lastSweep > 10_000) {
      this.lastSweep = Date.now();
      await this.removeIdleExecGroups();
    }
    const hostPid = await this.hostPidOf(nsPid);
    if (hostPid === undefined) {
      throw new ServiceError('INTERNAL', 'exec process not found in the sandbox cgroup', { execId, pid: nsPid });
    }
    const dir = path.join(this.dirs.freezer, `e-${execId}-${Date.now().toString(36)}`);
    await mkdir(dir);
    try {
      // Asynchronous: moving a task between cgroups can take milliseconds (the kernel waits for an
      // RCU grace period), which must not stall the runner's event loop.
      await writeFile(path.join(dir, 'cgroup.procs'), String(hostPid));
    } catch (err) {
      await rmdir(dir).catch(() => undefined);
      throw new ServiceError('FAILED_PRECONDITION', `cannot place exec ${execId} in its cgroup: ${(err as Error).message}`);
    }
    return dir;
  }

  /**
   * Removes one exec's sub-cgroup when nothing runs in it any more (kept while background processes
   * live); true when it is gone. An empty cgroup is removed atomically (rmdir fails with EBUSY while
   * any process is in it, and only a member could add one), so for a foreground command that left
   * nothing behind, the common case, this one rmdir replaces the freeze-kill-thaw of killExec.
   */
  releaseExec(dir: string): boolean {
    try {
      rmdirSync(dir);
      return true;
    } catch (err) {
      // EBUSY: a background process still uses it; the periodic sweep removes it later
      return (err as NodeJS.ErrnoException).code === 'ENOENT';
    }
  }

  /**
   * Whether nothing runs in one exec's sub-cgroup any more. A tiny cgroupfs read that takes no
   * cgroup-wide lock (unlike rmdir, which waits on cgroup_mutex while any cgroup move anywhere is
   * under way). An empty exec group stays empty: only a member's fork or the runner itself (root)
   * can put a process into it, and the runner places each spare in a group of its own.
   */
  execIsEmpty(dir: string): boolean {
    try {
      return readFileSync(path.join(dir, 'cgroup.procs'), 'utf8').trim() === '';
    } catch (err) {
      return (err as NodeJS.ErrnoException).code === 'ENOENT';
    }
  }

  /**
   * Removes an empty exec sub-cgroup off the caller's path (execIsEmpty first): asynchronously, so
   * a runner never stalls on cgroup_mutex, and after the exec's reply has gone. An exited task may
   * keep the group busy for a moment: one retry, then the periodic sweep takes it.
   */
  releaseExecLater(dir: string): void {
    const attempt = (retry: boolean): void => {
      rmdir(dir).catch((err: NodeJS.ErrnoException) => {
        if (retry && err.code === 'EBUSY') setTimeout(() => attempt(false), 100).unref();
      });
    };
    // Started once this turn of the event loop is over (the reply written), so neither handing it
    // to the thread pool nor the pool thread's rmdir competes with the reply for two CPUs.
    setImmediate(() => attempt(true));
  }

  /** Kills every process of one exec's sub-cgroup; resolves with how many distinct processes were signalled. */
  killExec(dir: string): Promise<number> {
    return killCgroup(dir);
  }

  /** Removes exec sub-cgroups that no process uses any more (background processes keep theirs). */
  async removeIdleExecGroups(): Promise<void> {
    for (const entry of await readdir(this.dirs.freezer, { withFileTypes: true })) {
      if (!entry.isDirectory() || !entry.name.startsWith('e-')) continue;
      // A group made in the last 30 s may belong to an exec that is being placed right now (still
      // empty): leave it; its own exec removes it when done.
      const made = parseInt(entry.name.slice(entry.name.lastIndexOf('-') + 1), 36);
      if (Number.isFinite(made) && Date.now() - made < 30_000) continue;
      await rmdir(path.join(this.dirs.freezer, entry.name)).catch(() => undefined); // EBUSY: in use
    }
  }

  /**
   * Removes the sandbox's cgroups when no process is left in them, without freezing anything: the
   * rmdir of its freezer group fails (EBUSY) while a process is in it, atomically, and every
   * process of a sandbox is born in that group. False when something is left (killAll, then remove).
   */
  async removeIfEmpty(): Promise<boolean> {
    try {
      await rmdir(this.dirs.freezer);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') return false;
    }
    await this.remove();
    return true;
  }

  /** Removes the sandbox's cgroups; every process must be gone (killAll first). */
  async remove(): Promise<void> {
    for (const c of uniqueControllers(this.dirs)) await removeTree(this.dirs[c]);
  }

  /**
   * Host pid of a process of this sandbox given its pid inside. A new exec sits in the sandbox's own
   * freezer group (newest pids last), so that one file is read first; the whole tree is the fallback.
   * Tiny procfs/cgroupfs reads, done synchronously: with spare exec starters this is off the
   * exec's path, and the reads never wait on the kernel the way a cgroup move does.
   */
  private async hostPidOf(nsPid: number): Promise<number | undefined> {
    const match = (pid: number): boolean => {
      let status: string;
      try {
        status = readFileSync(`/proc/${pid}/status`, 'utf8');
      } catch {
        return false;
      }
      const nspid = /^NSpid:\s*(.+)$/m.exec(status)?.[1]?.trim().split(/\s+/);
      return !!nspid && Number(nspid[nspid.length - 1]) === nsPid;
    };
    try {
      const direct = readFileSync(path.join(this.dirs.freezer, 'cgroup.procs'), 'utf8').split('\n').filter(Boolean).map(Number).reverse();
      for (const pid of direct) if (match(pid)) return pid;
    } catch {
      // fall through to the whole tree
    }
    for (const pid of await this.members()) if (match(pid)) return pid;
    return undefined;
  }

}

/** Controllers whose directories are distinct (co-mounted controllers share one directory). */
function uniqueControllers(dirs: Record<Controller, string>): Controller[] {
  const seen = new Set<string>();
  return CONTROLLERS.filter((c) => {
    if (seen.has(dirs[c])) return false;
    seen.add(dirs[c]);
    return true;
  });
}

async function ensureDir(c: Controller, dir: string): Promise<void> {
  if (existsSync(dir)) return;
  await ensureDir(c, path.dirname(dir));
  try {
    await mkdir(dir);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') {
      throw new ServiceError('FAILED_PRECONDITION', `cannot create cgroup ${dir}: ${(err as Error).message}`);
    }
    return;
  }
  if (c === 'cpuset') {
    // A v1 cpuset admits no task until cpus and mems are set; start from the parent's.
    for (const f of ['cpuset.cpus', 'cpuset.mems']) {
      await put(path.join(dir, f), (await readFile(path.join(path.dirname(dir), f), 'utf8')).trim());
    }
  }
}

async function put(file: string, value: string): Promise<void> {
  try {
    await writeFile(file, value);
  } catch (err) {
    throw new ServiceError('FAILED_PRECONDITION', `cannot write ${value} to ${file}: ${(err as Error).message}`);
  }
}

async function treeMembers(dir: string): Promise<number[]> {
  const pids: number[] = [];
  let procs: string;
  try {
    procs = await readFile(path.join(dir, 'cgroup.procs'), 'utf8');
  } catch {
    return pids; // removed meanwhile
  }
  for (const l of procs.split('\n')) if (l) pids.push(Number(l));
  for (const entry of await readdir(dir, { withFileTypes: true }).catch(() => [])) {
    if (entry.isDirectory()) pids.push(...(await treeMembers(path.join(dir, entry.name))));
  }
  return pids;
}

/** The daemon's exec and spare ids (`x<n>`, `s<n>`, ...): short, and safe in a cgroup directory's name. */
export function isExecId(v: unknown): v is string {
  return typeof v === 'string' && /^[A-Za-z0-9_-]{1,64}$/.test(v);
}

/**
 * Freeze, SIGKILL every member, thaw; repeat until the (freezer) cgroup is empty. Resolves with how
 * many distinct processes it signalled: read while the group is frozen (none can fork meanwhile),
 * so it counts what was running there, setsid'd or re-parented ones included.
 */
async function killCgroup(dir: string): Promise<number> {
  if (!existsSync(dir)) return 0;
  const state = path.join(dir, 'freezer.state');
  await put(state, 'FROZEN');
  // FREEZING can last while a task sits in uninterruptible sleep; do not wait forever for it.
  for (let i = 0; i < 50 && (await readFile(state, 'utf8')).trim() !== 'FROZEN'; i++) await sleep(10);
  const signalled = new Set<number>();
  try {
    for (let round = 0; round < 500; round++) {
      const pids = await treeMembers(dir);
      if (pids.length === 0) return signalled.size;
      for (const pid of pids) {
        signalled.add(pid);
        try {
          process.kill(pid, 'SIGKILL');
        } catch {
          // already gone
        }
      }
      // A frozen task dies of SIGKILL only once thawed.
      if (round === 0) await put(state, 'THAWED');
      await sleep(10);
    }
    throw new ServiceError('INTERNAL', `processes survive in cgroup ${dir}`);
  } finally {
    await put(state, 'THAWED');
  }
}

/** rmdir a cgroup directory after its sub-cgroups; retries briefly while the kernel lets go. */
async function removeTree(dir: string): Promise<void> {
  if (!existsSync(dir)) return;
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    if (entry.isDirectory()) await removeTree(path.join(dir, entry.name));
  }
  for (let i = 0; ; i++) {
    try {
      await rmdir(dir);
      return;
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'ENOENT') return;
      if (code !== 'EBUSY' || i >= 100) {
        throw new ServiceError('INTERNAL', `cannot remove cgroup ${dir}: ${(err as Error).message}`);
      }
      await sleep(10);
    }
  }
}
