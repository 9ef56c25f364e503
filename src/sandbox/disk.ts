/**
 * Per-workspace disk limit: each workspace's root directory is the mount point of its own ext4
 * filesystem in a sparse image file (<dataDir>/disks/<id>.img), loop-mounted nosuid,nodev. A
 * workspace that fills its disk gets ENOSPC inside itself; the service's disk and other workspaces
 * are untouched. The image costs only what is written. Mounts survive a runner restart; ensure()
 * re-mounts what is missing.
 *
 * Formatting is done ahead of time: one spare image, formatted for the configured size and owner
 * (<dataDir>/disks/.spare-<size>m-<uid>-<gid>-<random>.img), waits for the next workspace, which
 * takes it with a rename, so an open only mounts. The spare is a freshly made filesystem that was
 * never mounted; one that does not match the configuration is deleted (cleanSpareImages).
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, readdir, rename, rm, rmdir, truncate, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { ServiceError } from '../core/errors.js';
import { isMountPoint } from './runfs.js';

const run = promisify(execFile);

export interface DiskOptions {
  dataDir: string;
  sizeMb: number;
  uid: number;
  gid: number;
}

export function imagePath(dataDir: string, id: string): string {
  return join(dataDir, 'disks', `${id}.img`);
}

async function makeImage(o: Pick<DiskOptions, 'sizeMb' | 'uid' | 'gid'>, img: string): Promise<void> {
  await writeFile(img, '', { mode: 0o600 });
  await truncate(img, o.sizeMb * 1024 * 1024);
  await run('mkfs.ext4', ['-q', '-F', '-m', '0', '-E', `lazy_itable_init=1,lazy_journal_init=1,root_owner=${o.uid}:${o.gid}`, img]);
}

/**
 * A filesystem of its own for one package build (docs/packages.md): a fresh sparse ext4 image of
 * sizeMb at `img`, its root root's, loop-mounted nosuid,nodev at `dir`. What the builder sandbox
 * is given from it shows in its mountinfo as a path of that filesystem, not of the host.
 */
export async function mountScratchDisk(img: string, sizeMb: number, dir: string): Promise<void> {
  try {
    await makeImage({ sizeMb, uid: 0, gid: 0 }, img);
    await run('mount', ['-o', 'loop,nosuid,nodev,noatime', img, dir]);
  } catch (e) {
    throw new ServiceError('INTERNAL', `could not make the build filesystem: ${(e as { stderr?: string }).stderr?.trim() || (e as Error).message}`);
  }
}

/** Unmounts what mountScratchDisk mounted at dir (lazily when something still holds it). */
export async function unmountScratchDisk(dir: string): Promise<void> {
  if (!(await isMountPoint(dir))) return;
  try {
    await run('umount', [dir]);
  } catch {
    await run('umount', ['-l', dir]);
  }
}

const SPARE_PREFIX = '.spare-';
const spareStem = (o: DiskOptions): string => `${SPARE_PREFIX}${o.sizeMb}m-${o.uid}-${o.gid}-`;
const isSpare = (o: DiskOptions, name: string): boolean => name.startsWith(spareStem(o)) && name.endsWith('.img');

async function diskEntries(o: Pick<DiskOptions, 'dataDir'>): Promise<string[]> {
  return readdir(join(o.dataDir, 'disks')).catch(() => []);
}

/** Formats one spare image for the next workspace unless one is waiting already. */
export async function prepareSpareImage(o: DiskOptions): Promise<void> {
  const dir = join(o.dataDir, 'disks');
  await mkdir(dir, { recursive: true, mode: 0o700 });
  if ((await diskEntries(o)).some((n) => isSpare(o, n))) return;
  const stem = join(dir, `${spareStem(o)}${randomBytes(6).toString('hex')}`);
  try {
    await makeImage(o, `${stem}.tmp`);
    await rename(`${stem}.tmp`, `${stem}.img`);
  } catch (e) {
    await rm(`${stem}.tmp`, { force: true });
    throw e;
  }
}

/** Deletes spare images that do not match the configuration, and half-made ones (a crash while formatting). */
export async function cleanSpareImages(o: DiskOptions): Promise<void> {
  for (const n of await diskEntries(o)) {
    if (n.startsWith(SPARE_PREFIX) && !isSpare(o, n)) await rm(join(o.dataDir, 'disks', n), { force: true });
  }
}

/** Moves a waiting spare image to `img`; false when none is left. */
async function takeSpareImage(o: DiskOptions, img: string): Promise<boolean> {
  for (const n of await diskEntries(o)) {
    if (!isSpare(o, n)) continue;
    try {
      await rename(join(o.dataDir, 'disks', n), img);
      return true;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e; // another open took it first
    }
  }
  return false;
}

/** Creates (first time, from a spare image when one waits) and mounts the workspace filesystem at rootDir. */
export async function ensureWorkspaceDisk(o: DiskOptions, id: string, rootDir: string): Promise<void> {
  await mkdir(join(o.dataDir, 'disks'), { recursive: true, mode: 0o700 });
  await mkdir(rootDir, { recursive: true });
  if (await isMountPoint(rootDir)) return;
  const img = imagePath(o.dataDir, id);
  try {
    if (!existsSync(img) && !(await takeSpareImage(o, img))) await makeImage(o, img);
    await run('mount', ['-o', 'loop,nosuid,nodev,noatime', img, rootDir]);
  } catch (e) {
    throw new ServiceError('INTERNAL', `could not make the workspace filesystem: ${(e as { stderr?: string }).stderr?.trim() || (e as Error).message}`);
  }
}

/** Unmounts and deletes the workspace filesystem; the mount point is removed too. */
export async function releaseWorkspaceDisk(o: Pick<DiskOptions, 'dataDir'>, id: string, rootDir: string): Promise<void> {
  if (await isMountPoint(rootDir)) {
    try {
      await run('umount', [rootDir]);
    } catch {
      // Something still holds it (a process that escaped): detach now, the kernel frees it later.
      await run('umount', ['-l', rootDir]);
    }
  }
  await rm(imagePath(o.dataDir, id), { force: true });
  await rmdir(rootDir).catch(() => undefined);
}
