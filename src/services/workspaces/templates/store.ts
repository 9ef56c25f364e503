/**
 * Storage of workspace templates (docs/templates.md): a template is a saved workspace filesystem
 * image (the sparse ext4 image of src/sandbox/disk.ts, unmounted) under <dataDir>/templates/
 * (root's, 0700: nothing a workspace can reach or change). Two operations, kept apart from the
 * template bookkeeping so the mechanics can be shared with other saved-image features:
 *   save(from)        an unmounted workspace image becomes a template (a rename, same filesystem)
 *   startFrom(to)     a template becomes a new workspace image: a reflink where the data
 *                     directory's filesystem has them (btrfs, xfs with reflink), else a sparse copy
 *                     (only the blocks the template uses are read and written)
 * Every path here is made by the runner from ids it minted; none comes from a workspace.
 */
import { execFile } from 'node:child_process';
import { mkdir, readdir, rename, rm, stat } from 'node:fs/promises';
import { basename, join } from 'node:path';
import { promisify } from 'node:util';
import { ServiceError } from '../../../core/errors.js';

const run = promisify(execFile);
const ID_RE = /^tpl_[A-Za-z0-9_-]{10,80}$/;
const COPY_PREFIX = '.copy-';

export type CopyMethod = 'reflink' | 'sparse-copy';

export function templatesDir(dataDir: string): string {
  return join(dataDir, 'templates');
}

export function templateImage(dataDir: string, templateId: string): string {
  if (!ID_RE.test(templateId)) throw new ServiceError('INTERNAL', 'not a template id');
  return join(templatesDir(dataDir), `${templateId}.img`);
}

/** Bytes a file occupies on disk (its allocated blocks: a sparse image costs only what is written). */
export async function allocatedBytes(path: string): Promise<number> {
  const st = await stat(path);
  return st.blocks * 512;
}

/** Moves an unmounted workspace image into the template store; returns its size on disk. */
export async function save(dataDir: string, templateId: string, fromImage: string): Promise<{ sizeBytes: number }> {
  await mkdir(templatesDir(dataDir), { recursive: true, mode: 0o700 });
  const to = templateImage(dataDir, templateId);
  await rename(fromImage, to);
  return { sizeBytes: await allocatedBytes(to) };
}

/**
 * Makes `toImage` (which must not exist) a copy of the template: a reflink when the filesystem
 * offers one, else a sparse copy. Written beside the target and renamed, so a failure leaves nothing.
 */
export async function startFrom(dataDir: string, templateId: string, toImage: string): Promise<{ method: CopyMethod; ms: number }> {
  const from = templateImage(dataDir, templateId);
  // Written in the store (same filesystem as the target) and renamed; one a stop interrupted is removed at the next start (removeCopies).
  const tmp = join(templatesDir(dataDir), `${COPY_PREFIX}${basename(toImage)}`);
  await mkdir(templatesDir(dataDir), { recursive: true, mode: 0o700 });
  const t0 = performance.now();
  let method: CopyMethod = 'reflink';
  try {
    try {
      await run('cp', ['--reflink=always', '--', from, tmp]);
    } catch {
      await rm(tmp, { force: true });
      method = 'sparse-copy';
      await run('cp', ['--sparse=always', '--', from, tmp]);
    }
    await rename(tmp, toImage);
  } catch (e) {
    await rm(tmp, { force: true });
    const why = (e as { stderr?: string }).stderr?.trim() || (e as Error).message;
    // The images' filesystem (the image pool, docs/checkpoints.md, or the data directory's) is full: said so, not an internal error.
    if (/No space left on device/i.test(why))
      throw new ServiceError('RESOURCE_EXHAUSTED', `could not start the workspace from template ${templateId}: the filesystem holding ${dataDir} has no space left (${dataDir.endsWith('/image-pool') ? 'the image pool; its size is set when it is made, --image-pool-size-mb' : 'the data directory'}); close workspaces or delete checkpoints and templates to make room`, { rule: 'image store full', directory: dataDir }, false);
    throw new ServiceError('INTERNAL', `could not start the workspace from template ${templateId}: ${why}`);
  }
  return { method, ms: Math.round(performance.now() - t0) };
}

/**
 * Detaches a stopped workspace filesystem from its mount point so it can be saved: its free blocks
 * are discarded first (fstrim punches them out of the sparse image, so what a deleted file held
 * is not kept in the image), then it is unmounted.
 */
export async function detach(mountPoint: string): Promise<void> {
  try {
    await run('fstrim', [mountPoint]);
    await run('umount', [mountPoint]);
  } catch (e) {
    throw new ServiceError('INTERNAL', `could not detach the template filesystem: ${(e as { stderr?: string }).stderr?.trim() || (e as Error).message}`);
  }
}

/** Removes copies a stop interrupted (at start, before any open). */
export async function removeCopies(dataDir: string): Promise<void> {
  const names = await readdir(templatesDir(dataDir)).catch(() => [] as string[]);
  for (const n of names) if (n.startsWith(COPY_PREFIX)) await rm(join(templatesDir(dataDir), n), { force: true });
}

/** Deletes a template's image (a missing one is fine). */
export async function remove(dataDir: string, templateId: string): Promise<void> {
  await rm(templateImage(dataDir, templateId), { force: true });
}
