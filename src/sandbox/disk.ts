/**
 * Per-workspace disk limit: each workspace's root directory is the mount point of its own ext4
 * filesystem in a sparse image file (<dataDir>/disks/<id>.img), loop-mounted nosuid,nodev. A
 * workspace that fills its disk gets ENOSPC inside itself; the service's disk and other workspaces
 * are untouched. The image costs only what is written. Mounts survive a runner restart; ensure()
 * re-mounts what is missing.
 */
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, rm, rmdir, truncate, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { ServiceError } from '../core/errors.js';

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

async function isMountPoint(dir: string): Promise<boolean> {
  try {
    await run('mountpoint', ['-q', dir]);
    return true;
  } catch {
    return false;
  }
}

/** Creates (first time) and mounts the workspace filesystem at rootDir. */
export async function ensureWorkspaceDisk(o: DiskOptions, id: string, rootDir: string): Promise<void> {
  await mkdir(join(o.dataDir, 'disks'), { recursive: true, mode: 0o700 });
  await mkdir(rootDir, { recursive: true });
  if (await isMountPoint(rootDir)) return;
  const img = imagePath(o.dataDir, id);
  try {
    if (!existsSync(img)) {
      await writeFile(img, '', { mode: 0o600 });
      await truncate(img, o.sizeMb * 1024 * 1024);
      await run('mkfs.ext4', ['-q', '-F', '-m', '0', '-E', `lazy_itable_init=1,lazy_journal_init=1,root_owner=${o.uid}:${o.gid}`, img]);
    }
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
