/**
 * Workspace state as a file (issue #33): a checkpoint is a copy of the workspace's whole
 * filesystem image (src/sandbox/disk.ts: the checkout with its git directory, home and tmp, on one
 * ext4 image loop-mounted per workspace), taken consistently; a restore or a fork puts such a copy
 * where a workspace's image goes and mounts it. Everything here works on whole image files in
 * root-owned directories (<dataDir>/disks, <dataDir>/checkpoints): root never opens a path inside a
 * workspace, so no symlink, hard link or special file a workspace made is ever followed; each comes
 * back exactly as it was because the filesystem itself is copied, block for block.
 *
 * The reusable pair (template checkpoints can use it too):
 *   snapshot(workspace, dest) -> StoredState   a consistent copy of a live workspace's filesystem
 *   materialize(state, image)                  a new, independent image from a stored state
 *
 * What this kernel offers for copy-on-write, measured (docs/checkpoints.md): no device-mapper
 * (dmsetup: "/dev/mapper/control: No such device"), no reflinks on the host's ext4 (FICLONE answers
 * EOPNOTSUPP), overlayfs yes (file-level copy-up). So a copy is a sparse copy (only the allocated
 * extents are read and written: coreutils cp, SEEK_DATA/SEEK_HOLE and copy_file_range); where the
 * data directory sits on a filesystem with reflinks (XFS, btrfs) the same call clones instead
 * (cp --reflink=always succeeds) and says so: mode 'reflink'.
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { rename, rm, stat } from 'node:fs/promises';
import { dirname } from 'node:path';
import { promisify } from 'node:util';
import { ServiceError } from '../core/errors.js';
import { isMountPoint } from './host-fs.js';
import { IMAGE_STORE_FULL, type CopyMode, type SnapshotResult, type SnapshotSource, type StoredState, type WorkspaceImageCopies } from './executor.js';

export { IMAGE_STORE_FULL, type CopyMode, type SnapshotResult, type SnapshotSource, type StoredState };

const run = promisify(execFile);

function failure(what: string, e: unknown): ServiceError {
  const stderr = (e as { stderr?: string }).stderr?.trim();
  return new ServiceError('INTERNAL', `${what}: ${stderr || (e as Error).message}`);
}

/** Allocated and apparent size of a host file. */
export async function imageUsage(file: string): Promise<{ sizeBytes: number; diskBytes: number }> {
  const st = await stat(file);
  return { sizeBytes: st.size, diskBytes: st.blocks * 512 };
}

/**
 * Copies one image file to `dest` (written under a temporary name in dest's directory, renamed
 * into place only when complete): a reflink clone where the filesystem has them, else a sparse
 * copy. Neither path is a workspace's.
 */
export async function copyImage(src: string, dest: string): Promise<CopyMode> {
  const tmp = `${dest}.part-${randomBytes(6).toString('hex')}`;
  try {
    let mode: CopyMode = 'reflink';
    try {
      await run('cp', ['--reflink=always', '--', src, tmp]);
    } catch {
      mode = 'copy';
      await rm(tmp, { force: true });
      await run('cp', ['--sparse=always', '--', src, tmp]);
    }
    await rename(tmp, dest);
    return mode;
  } catch (e) {
    await rm(tmp, { force: true });
    if (e instanceof ServiceError) throw e;
    if (/No space left on device/i.test(String((e as { stderr?: string }).stderr ?? (e as Error).message)))
      throw new ServiceError('RESOURCE_EXHAUSTED', `copying the workspace image failed: the filesystem holding ${dirname(dest)} has no space left`, { rule: IMAGE_STORE_FULL, directory: dirname(dest) }, false);
    throw failure('copying the workspace image failed', e);
  }
}

/** The `rule` of the error a copy gets when the images' filesystem (the image pool, or the data directory's) is full. */

/**
 * Bytes of `file` not shared with another file (filefrag -v: extents without the "shared" flag):
 * what a reflink clone really added to the disk. A copy shares nothing: its allocated size.
 */
export async function unsharedBytes(file: string, mode: CopyMode): Promise<number> {
  const { diskBytes } = await imageUsage(file);
  if (mode === 'copy') return diskBytes;
  try {
    const { stdout } = await run('filefrag', ['-v', '-b4096', '--', file], { maxBuffer: 64 * 1024 * 1024 });
    let blocks = 0;
    for (const line of stdout.split('\n')) {
      const m = /^\s*\d+:\s+\d+\.\.\s*\d+:\s+\d+\.\.\s*\d+:\s+(\d+):.*$/.exec(line);
      if (m && !/\bshared\b/.test(line)) blocks += Number(m[1]);
    }
    return Math.min(diskBytes, blocks * 4096);
  } catch {
    return diskBytes; // not measurable: counted whole
  }
}

/**
 * A consistent copy of a live workspace's filesystem at `dest`: its free blocks trimmed (fstrim, so
 * deleted files cost nothing), its processes frozen, then its
 * filesystem frozen (fsfreeze: the kernel writes everything out, clears the journal and blocks
 * every writer, the ext4 lazy-init thread included), the image copied, then both thawed, in that
 * order, whatever happened. The copy mounts cleanly with no journal to replay. The workspace stands
 * still for the copy (frozenMs): milliseconds for a reflink, the copy's time otherwise.
 */
export async function snapshot(source: SnapshotSource, dest: string): Promise<SnapshotResult> {
  const t0 = Date.now();
  if (!(await isMountPoint(source.rootDir))) throw new ServiceError('FAILED_PRECONDITION', 'the workspace filesystem is not mounted');
  await settleImage(source.rootDir);
  // The image file's own dirty pages (what the loop device wrote) go out now, not inside the
  // freeze: a reflink clone writes out its source's dirty range first (measured on the pool, 1 GiB
  // just written: 655 ms unsynced, 7 ms synced).
  await run('sync', ['-d', source.image]).catch(() => undefined);
  let frozenMs = 0;
  const { value: mode, frozen } = await source.freeze(async () => {
    const f0 = Date.now();
    try {
      await run('fsfreeze', ['--freeze', source.rootDir]);
    } catch (e) {
      throw failure('freezing the workspace filesystem failed', e);
    }
    try {
      return await copyImage(source.image, dest);
    } finally {
      await run('fsfreeze', ['--unfreeze', source.rootDir]).catch(() => undefined);
      frozenMs = Date.now() - f0;
    }
  });
  return { image: dest, ...(await imageUsage(dest)), addedBytes: await unsharedBytes(dest, mode), mode, processesFrozen: frozen, frozenMs, ms: Date.now() - t0 };
}

/**
 * Makes a mounted workspace image say what the workspace holds: its dirty data written out and the
 * journal committed (syncfs: ext4 frees a deleted file's blocks only at the commit), then the free
 * blocks handed back to the host (fstrim; the loop device punches holes), so a deleted file costs
 * nothing in a copy and the image's allocated size is the data in use. Measured: 100 MB deleted
 * and trimmed at once stays 96 MB in the image; after the sync it is gone.
 */
export async function settleImage(rootDir: string): Promise<void> {
  await run('sync', ['-f', rootDir]).catch(() => undefined);
  await run('fstrim', [rootDir]).catch(() => undefined);
}

/** A new, independent image at `image` from a stored state (a restore's or a fork's filesystem). */
export async function materialize(state: Pick<StoredState, 'image'>, image: string): Promise<{ mode: CopyMode; ms: number; addedBytes: number }> {
  const t0 = Date.now();
  const mode = await copyImage(state.image, image);
  const ms = Date.now() - t0;
  return { mode, ms, addedBytes: await unsharedBytes(image, mode) };
}

/** Thaws a workspace filesystem a crashed runner may have left frozen (start-up); not frozen is fine. */
export async function unfreezeLeftover(rootDir: string): Promise<boolean> {
  if (!(await isMountPoint(rootDir))) return false;
  return run('fsfreeze', ['--unfreeze', rootDir]).then(
    () => true,
    () => false,
  );
}

/** The host's image copies, as WorkspaceStorage.copies of the bubblewrap driver's storage. */
export const HOST_IMAGE_COPIES: WorkspaceImageCopies = { snapshot, materialize, settle: settleImage, usage: imageUsage, unfreezeLeftover };
