/**
 * A sandbox's runtime directory on the host, <runDir>/<hash of its id>/: its layout (state file,
 * daemon log, generated /etc, /opt/atelier's files, the private tmpfs holding the daemon's socket
 * and the egress socket) and how it is made afresh before a start.
 */
import { createHash } from 'node:crypto';
import { execFile } from 'node:child_process';
import { constants as fsConstants, readFileSync } from 'node:fs';
import { chown, lstat, mkdir, open, readdir, realpath, unlink, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import { ServiceError } from '../../core/errors.js';
import { assertTraversable, removeTreeNoFollow, type SandboxIds } from '../rootdir.js';
import { mountRunFs, unmountRunFs } from '../runfs.js';
import { etcContent } from './args.js';
import type { ProxyState } from './proxy.js';

const SOCKET_PATH_MAX = 107;

export interface RunPaths {
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

/** <runDir>/<key>/state.json, written when a sandbox has started; read by recover(). */
export interface RunState {
  id: string;
  pid: number;
  startedAt: string;
  proxy: ProxyState | null;
}

export function runPaths(runDir: string, id: string): RunPaths {
  // A hash keeps the socket path short whatever the id's length.
  const dir = path.join(runDir, createHash('sha256').update(id).digest('hex').slice(0, 16));
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

/**
 * Fresh per-sandbox runtime directory with the generated /etc and /opt/atelier (env file) and,
 * for a sandbox that shares sockets with the host, its private tmpfs (runfs.ts) at p.mnt.
 */
export async function prepareRunDir(runDir: string, ids: SandboxIds, p: RunPaths, env: Record<string, string>, withSockets: boolean): Promise<void> {
  await mkdir(runDir, { recursive: true, mode: 0o711 });
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
  await chown(envFile, ids.uid, ids.gid);
  await assertTraversable(p.etc, ids);
  if (p.socket.length > SOCKET_PATH_MAX) {
    throw new ServiceError('FAILED_PRECONDITION', `socket path too long for a Unix socket; use a shorter runDir: ${p.socket}`);
  }
}

/** Runtime directories are named by 16 hex digits (runPaths); nothing else in the run directory is a sandbox's. */
const RUN_KEY = /^[0-9a-f]{16}$/;
const SANDBOX_ID = /^[A-Za-z0-9_-]{1,128}$/;

export interface RunDirSweep {
  /** A sandbox of this runner owns the runtime directory (started, recovered, or starting now). */
  owned(dir: string): boolean;
  /** The sweep is removing `dir` now (a start of its sandbox waits for `removal`). */
  claim(dir: string, removal: Promise<void>): void;
  /** Whether the sandbox a state file names still runs (its keeper). */
  running(state: RunState): boolean;
  /** Ends a sandbox still running that nothing owns. */
  endSandbox(state: RunState): Promise<void>;
  onNote(message: string): void;
}

/**
 * Removes every runtime directory of `runDir` that no sandbox of this runner owns (issue #42 item
 * 12): what a runner killed mid-start or while a short-lived sandbox ran (a clone, a package
 * build) left, above all the sandbox's socket tmpfs at <dir>/m, which nothing else would ever
 * unmount. A directory whose state file names a sandbox still running that nothing owns (after
 * recovery, no workspace claims it) has that sandbox ended first. These are root's directories in
 * root's 0711 run directory, which no workspace can write to; still, nothing is followed: an entry
 * that is a link is removed as a link, a directory not owned by this runner's user is left alone,
 * every mount point is unmounted only when each path component below the run directory is a
 * directory of this user (no link), and the tree goes by descriptor walk (removeTreeNoFollow).
 */
export async function sweepRunDir(runDir: string, sweep: RunDirSweep): Promise<void> {
  let real: string;
  try {
    real = await realpath(runDir);
  } catch {
    return; // no run directory yet
  }
  for (const name of await readdir(real).catch(() => [] as string[])) {
    if (!RUN_KEY.test(name)) continue;
    const dir = path.join(runDir, name);
    if (sweep.owned(dir)) continue;
    const removal = removeLeftover(runDir, real, name, sweep);
    sweep.claim(dir, removal);
    await removal.then(
      () => sweep.onNote(`removed a sandbox runtime directory no sandbox owns: ${dir}`),
      (e: Error) => sweep.onNote(`a sandbox runtime directory no sandbox owns was not removed: ${dir}: ${e.message}`),
    );
  }
}

const run = promisify(execFile);

async function removeLeftover(runDir: string, real: string, name: string, sweep: RunDirSweep): Promise<void> {
  const here = path.join(real, name);
  const st = await lstat(here);
  if (st.isSymbolicLink()) return void (await unlink(here)); // never followed
  if (!st.isDirectory()) return;
  if (st.uid !== process.getuid?.()) throw new Error(`owned by uid ${st.uid}, not this runner's: left alone`);
  const state = await readState(path.join(here, 'state.json'));
  if (state && runPaths(runDir, state.id).dir === path.join(runDir, name) && sweep.running(state)) {
    sweep.onNote(`sandbox ${state.id} was still running with no workspace claiming it: ended`);
    await sweep.endSandbox(state);
  }
  for (const point of mountPointsUnder(here)) {
    await assertOwnDirs(real, point);
    await run('umount', ['-l', '--no-canonicalize', point]);
  }
  await removeTreeNoFollow(here);
}

/** The state file, read without following a link, when it is one this driver wrote. */
async function readState(file: string): Promise<RunState | undefined> {
  try {
    const fh = await open(file, fsConstants.O_RDONLY | fsConstants.O_NOFOLLOW);
    try {
      const v = JSON.parse(await fh.readFile('utf8')) as Partial<RunState>;
      return typeof v.id === 'string' && SANDBOX_ID.test(v.id) && Number.isSafeInteger(v.pid) && v.pid! > 1 ? (v as RunState) : undefined;
    } finally {
      await fh.close();
    }
  } catch {
    return undefined;
  }
}

/** Mount points at or below `dir` (a real path), deepest first, from /proc/self/mountinfo (its octal escapes decoded). */
export function mountPointsUnder(dir: string): string[] {
  const out: string[] = [];
  for (const line of readFileSync('/proc/self/mountinfo', 'utf8').split('\n')) {
    const field = line.split(' ')[4];
    if (!field) continue;
    const point = field.replace(/\\([0-7]{3})/g, (_m, o: string) => String.fromCharCode(parseInt(o, 8)));
    if (point === dir || point.startsWith(dir + '/')) out.push(point);
  }
  return [...new Set(out)].sort((a, b) => b.length - a.length);
}

/** Every path component of `target` below `root` is a directory (not a link) of this runner's user. */
async function assertOwnDirs(root: string, target: string): Promise<void> {
  const parts = path.relative(root, target).split(path.sep);
  if (parts.includes('..') || path.isAbsolute(path.relative(root, target))) throw new Error(`${target} is not below ${root}`);
  let at = root;
  for (const part of parts) {
    at = path.join(at, part);
    const st = await lstat(at);
    if (!st.isDirectory() || st.uid !== process.getuid?.()) throw new Error(`${at} is not a directory of this runner (a link, or another user's): its mount is left alone`);
  }
}
