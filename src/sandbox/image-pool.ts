/**
 * The image pool (issue #33; docs/checkpoints.md, "The image pool"): where the data directory's own
 * filesystem has no reflinks (ext4 here), the runner keeps one XFS filesystem with reflinks in a
 * sparse file, <dataDir>/image-pool.xfs, loop-mounted nosuid,nodev,noexec,discard at
 * <dataDir>/image-pool (root's, 0700), and every image copies are made between lives in it:
 * workspace disks and their spares (disks/), checkpoints (checkpoints/), templates (templates/),
 * restore and fork temporaries (beside them). A checkpoint, fork, restore or template start is then
 * a reflink clone (cp --reflink=always: the extent map is shared, blocks are copied only when
 * either side writes), milliseconds and nearly no disk. `discard` hands blocks freed in the pool
 * back to the host file, so deleted images cost the host nothing.
 *
 * Every path here is the runner's: made from the data directory and fixed names, in root-owned
 * directories no workspace can write to. A workspace sees only its own image, mounted at its root.
 *
 * Setting (`--image-pool`): `auto` uses the pool when workspaces have images (bubblewrap driver,
 * sandboxDiskMb > 0, root), the data directory has no reflinks of its own and mkfs.xfs is present;
 * `xfs` requires it (start fails saying why not); `off` never makes one. An existing pool file is
 * always mounted and used, whatever the setting: its images are the data directory's, and it is
 * never formatted again. A data directory that already holds images outside a pool (an upgrade)
 * keeps them where they are and makes no pool (auto; `xfs` refuses to start): see imagesOutside.
 */
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, readdirSync, realpathSync, renameSync, rmSync, statSync, statfsSync, truncateSync, writeFileSync, chmodSync } from 'node:fs';
import { join } from 'node:path';
import { ConfigError } from '../core/config.js';
import { mountAt } from './runfs.js';

export const POOL_FILE = 'image-pool.xfs';
export const POOL_DIR = 'image-pool';
/** The folders of images, under the images root (the pool's mount point, or the data directory). */
export const IMAGE_FOLDERS = ['disks', 'checkpoints', 'templates'] as const;
const MOUNT_OPTIONS = 'loop,nosuid,nodev,noexec,noatime,discard';

export interface ImagePoolSettings {
  dataDir: string;
  setting: 'auto' | 'xfs' | 'off';
  sizeMb: number;
  /** Workspaces have images at all (bubblewrap driver, sandboxDiskMb > 0). */
  imagesUsed: boolean;
  /** serve: make the pool when it is missing; one-shot commands only mount an existing one. */
  create: boolean;
}

export interface ImagePool {
  /** Where disks/, checkpoints/ and templates/ are: the pool's mount point, or the data directory. */
  root: string;
  /** 'xfs': the images are in the pool; 'off': in the data directory (reason says why). */
  state: 'xfs' | 'off';
  reason: string;
  /** The pool file and its mount point (set when state is 'xfs'). */
  file?: string;
  mountPoint?: string;
  /** Whether this process answers for the mount: it mounted it, or it is the serving runner that found it mounted (only then does release unmount it). */
  mountedHere: boolean;
  /** Size and use of the pool's filesystem now (statfs), or undefined when there is none. */
  usage(): { sizeBytes: number; usedBytes: number; hostFileBytes: number } | undefined;
  /** Unmounts the pool when this process mounted it and nothing in it is in use (no workspace image mounted from it); lazily never. */
  release(): boolean;
}

function sh(cmd: string, args: string[]): string {
  return execFileSync(cmd, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
}

function stderrOf(e: unknown): string {
  return ((e as { stderr?: string }).stderr ?? '').toString().trim() || (e as Error).message;
}

/** The program's path when it is on root's usual PATH, else undefined. */
export function findProgram(name: string): string | undefined {
  for (const d of ['/usr/local/sbin', '/usr/local/bin', '/usr/sbin', '/usr/bin', '/sbin', '/bin']) if (existsSync(join(d, name))) return join(d, name);
  return undefined;
}

/** Whether the filesystem holding `dir` makes reflink clones (a probe file cloned with cp --reflink=always). */
export function hasReflinks(dir: string): boolean {
  const a = join(dir, `.reflink-probe-${randomBytes(6).toString('hex')}`);
  try {
    writeFileSync(a, 'probe', { mode: 0o600 });
    sh('cp', ['--reflink=always', '--', a, `${a}.b`]);
    return true;
  } catch {
    return false;
  } finally {
    rmSync(a, { force: true });
    rmSync(`${a}.b`, { force: true });
  }
}

/** Images of the data directory that are outside a pool (spares and half-made copies aside). */
export function imagesOutside(dataDir: string): string[] {
  const out: string[] = [];
  for (const f of IMAGE_FOLDERS) {
    for (const n of readdirSafe(join(dataDir, f))) if (n.endsWith('.img') && !n.startsWith('.')) out.push(`${f}/${n}`);
  }
  return out;
}

function readdirSafe(dir: string): string[] {
  try {
    return readdirSync(dir);
  } catch {
    return [];
  }
}

/** The backing file of a loop device (/sys/block/loopN/loop/backing_file), or undefined. */
function loopBackingFile(dev: string): string | undefined {
  const m = /^\/dev\/(loop\d+)$/.exec(dev);
  if (!m) return undefined;
  try {
    return readFileSync(`/sys/block/${m[1]}/loop/backing_file`, 'utf8').trim();
  } catch {
    return undefined;
  }
}

/** Loop devices whose backing file is inside `dir` (the backing_file of each /sys/block/loopN). */
export function loopsIn(dir: string): string[] {
  const out: string[] = [];
  for (const n of readdirSafe('/sys/block')) {
    if (!n.startsWith('loop')) continue;
    const f = loopBackingFile(`/dev/${n}`);
    if (f && f.startsWith(`${dir}/`)) out.push(`/dev/${n}`);
  }
  return out;
}

/** Bytes the pool file takes on the host disk (its filesystem's written blocks). */
function allocated(file: string): number {
  try {
    return statSync(file).blocks * 512;
  } catch {
    return 0;
  }
}

function offPool(root: string, reason: string): ImagePool {
  return { root, state: 'off', reason, mountedHere: false, usage: () => undefined, release: () => false };
}

/** The default size: the filesystem holding the data directory, in MiB (sparse: nothing is taken until written). */
function defaultSizeMb(dataDir: string): number {
  const s = statfsSync(dataDir);
  return Math.max(1024, Math.floor((s.blocks * s.bsize) / 1_048_576));
}

/**
 * Decides where images live and mounts (or makes and mounts) the pool (start-up, synchronous: a
 * few tens of milliseconds). Throws ConfigError when the pool is required and cannot be had, or
 * when an existing pool cannot be mounted (its images would otherwise be lost from view).
 */
export function openImagePool(o: ImagePoolSettings): ImagePool {
  const file = join(o.dataDir, POOL_FILE);
  const mnt = join(o.dataDir, POOL_DIR);
  const exists = existsSync(file);
  const need = (why: string): ImagePool => {
    if (o.setting === 'xfs') throw new ConfigError(`--image-pool xfs: ${why}`);
    return offPool(o.dataDir, why);
  };
  if (!exists) {
    if (o.setting === 'off') return offPool(o.dataDir, 'off (--image-pool off)');
    if (!o.imagesUsed) return offPool(o.dataDir, 'workspaces have no images (sandboxDiskMb 0 or another executor)');
    if (process.getuid?.() !== 0) return need('the runner is not root (mounting needs root)');
    if (!o.create) return offPool(o.dataDir, 'no pool made yet (only atelier serve makes it)');
    if (!findProgram('mkfs.xfs')) return need('mkfs.xfs is not installed (Debian package xfsprogs)');
    if (o.setting === 'auto' && hasReflinks(o.dataDir)) return offPool(o.dataDir, 'the data directory has reflinks of its own');
    const outside = imagesOutside(o.dataDir);
    if (outside.length > 0)
      return need(`the data directory already holds ${outside.length} image(s) outside a pool (${outside.slice(0, 3).join(', ')}${outside.length > 3 ? ', ...' : ''}); they stay where they are and no pool is made while any is left (close those workspaces, delete those checkpoints and templates, then restart)`);
  }
  mkdirSync(mnt, { recursive: true, mode: 0o700 });
  chmodSync(mnt, 0o700);
  let mountedHere = false;
  const cur = mountAt(mnt);
  if (cur) {
    // Mounted by an earlier runner (the pool stays mounted while workspace images in it are): it must be this pool.
    const backing = loopBackingFile(cur.source);
    const real = existsSync(file) ? realpathSync(file) : file;
    if (cur.fstype !== 'xfs' || backing?.replace(/ \(deleted\)$/, '') !== real)
      throw new ConfigError(`the image pool's mount point ${mnt} has ${cur.fstype} from ${backing ?? cur.source} mounted on it, not ${file}; unmount it`);
    // The serving runner takes it over (it unmounts it at its stop when nothing in it is mounted); a one-shot command leaves it be.
    mountedHere = o.create;
  } else {
    if (!exists) {
      const sizeMb = o.sizeMb > 0 ? o.sizeMb : defaultSizeMb(o.dataDir);
      const tmp = `${file}.new-${randomBytes(4).toString('hex')}`;
      try {
        writeFileSync(tmp, '', { mode: 0o600 });
        truncateSync(tmp, sizeMb * 1_048_576);
        sh(findProgram('mkfs.xfs')!, ['-q', '-K', '-m', 'reflink=1', '-L', 'atelierpool', tmp]);
        // Renamed into place only when formatted: a crash mid-format leaves no half pool to mount.
        renameSync(tmp, file);
      } catch (e) {
        rmSync(tmp, { force: true });
        return need(`making the image pool (${file}, ${sizeMb} MiB) failed: ${stderrOf(e)}`);
      }
    }
    try {
      sh('mount', ['-t', 'xfs', '-o', MOUNT_OPTIONS, file, mnt]);
      mountedHere = true;
    } catch (e) {
      // Never formatted over: its images are in it.
      throw new ConfigError(`the image pool ${file} could not be mounted at ${mnt}: ${stderrOf(e)} (it is never formatted again; repair it with xfs_repair, or move it away to start without it)`);
    }
  }
  chmodSync(mnt, 0o700); // the pool's own root directory, now mounted over the mount point
  for (const f of IMAGE_FOLDERS) {
    mkdirSync(join(mnt, f), { recursive: true, mode: 0o700 });
    chmodSync(join(mnt, f), 0o700);
  }
  // Spares an earlier runner made outside the pool are of no use now.
  for (const n of readdirSafe(join(o.dataDir, 'disks'))) if (n.startsWith('.spare-')) rmSync(join(o.dataDir, 'disks', n), { force: true });
  const pool: ImagePool = {
    root: mnt,
    state: 'xfs',
    reason: exists ? 'an existing pool' : 'made now',
    file,
    mountPoint: mnt,
    mountedHere,
    usage() {
      try {
        const s = statfsSync(mnt);
        return { sizeBytes: s.blocks * s.bsize, usedBytes: (s.blocks - s.bfree) * s.bsize, hostFileBytes: allocated(file) };
      } catch {
        return undefined;
      }
    },
    release() {
      if (!pool.mountedHere || !mountAt(mnt)) return false;
      // A workspace image in it is still mounted (loop device on a file of the pool): it stays, like that mount does.
      if (loopsIn(mnt).length > 0) return false;
      // None: a loop device a close just detached can take a moment to let go of its file (autoclear runs after the last close).
      for (let i = 0; i < 20; i++) {
        try {
          sh('umount', [mnt]);
          pool.mountedHere = false;
          return true;
        } catch {
          if (loopsIn(mnt).length > 0) return false;
          Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 100);
        }
      }
      return false;
    },
  };
  return pool;
}
