/**
 * A release as a filesystem of its own (issue #31 item 7; docs/packages.md "Releases are images").
 *
 * /proc/self/mountinfo shows, for each mount, the path of its root inside the filesystem it comes
 * from, so a release directory of the data directory bound into a sandbox named its host path
 * there, however it was bound. A release is therefore a read-only squashfs image made by root from
 * root's own copy of the built tree (tree.ts), loop-mounted read-only on the host once per runner
 * and bound from that mount: inside, mountinfo shows `/ /opt/packages/... - squashfs /dev/loopN`.
 *
 * The image is what is verified: its SHA-256 and size are recorded when it is made, and every mount
 * opens the image O_NOFOLLOW, checks that it is a regular file of root's that nobody else may
 * write, hashes it through that descriptor, attaches a read-only loop device to it and checks that
 * the loop device is backed by that very inode before mounting it (nosuid, nodev). A missing,
 * replaced (a symbolic link, another kind of file) or changed image is refused with an ImageProblem
 * naming why; nothing is mounted then.
 */
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { constants as C } from 'node:fs';
import { chmod, mkdir, open, readFile, rmdir, type FileHandle } from 'node:fs/promises';
import type { BigIntStats } from 'node:fs';
import { promisify } from 'node:util';
import { isMountPoint } from '../../sandbox/host-fs.js';

const run = promisify(execFile);

export const IMAGE_FORMAT = 'squashfs';
const MKSQUASHFS = 'mksquashfs';
const CHUNK = 1 << 20;

/** What the release record keeps of its image (manifest_json.image). */
export interface ReleaseImage {
  format: typeof IMAGE_FORMAT;
  sha256: string;
  bytes: number;
}

/** Why an image cannot be mounted: `reason` for the record, the message for people. */
export class ImageProblem extends Error {
  constructor(
    readonly reason: 'missing' | 'replaced' | 'corrupt' | 'unconvertible' | 'unavailable',
    message: string,
  ) {
    super(message);
  }
}

let mksquashfs: Promise<boolean> | undefined;

/** Whether this runner can make release images (Debian's squashfs-tools). Asked once per process. */
export function imagesAvailable(): Promise<boolean> {
  mksquashfs ??= new Promise((resolve) => execFile(MKSQUASHFS, ['-version'], { timeout: 10_000 }, (err) => resolve(!err)));
  return mksquashfs;
}

export const IMAGES_UNAVAILABLE = "releases are squashfs images and this runner has no mksquashfs: install Debian's squashfs-tools (scripts/setup.sh does)";

/**
 * Makes the image `img` (which must not exist, in a directory only root can write) of the tree
 * `tree` (root's own copy, which nothing else can change), readable by root only, and returns
 * what the release records of it. The tree's modes are kept, every entry becomes root's, symbolic
 * links stay links (mksquashfs never follows them).
 */
export async function makeReleaseImage(tree: string, img: string): Promise<ReleaseImage> {
  if (!(await imagesAvailable())) throw new ImageProblem('unavailable', IMAGES_UNAVAILABLE);
  try {
    await run(MKSQUASHFS, [tree, img, '-noappend', '-quiet', '-no-progress', '-no-recovery', '-all-root', '-no-xattrs', '-no-exports', '-comp', 'lz4'], { maxBuffer: 1 << 20 });
  } catch (e) {
    throw new Error(`mksquashfs could not make the release image: ${((e as { stderr?: string }).stderr ?? (e as Error).message).trim().slice(0, 500)}`);
  }
  await chmod(img, 0o400);
  const fh = await open(img, C.O_RDONLY | C.O_NOFOLLOW);
  try {
    const st = await fh.stat();
    return { format: IMAGE_FORMAT, sha256: await hashOf(fh), bytes: st.size };
  } finally {
    await fh.close();
  }
}

async function hashOf(fh: FileHandle): Promise<string> {
  const h = createHash('sha256');
  const buf = Buffer.allocUnsafe(CHUNK);
  for (let pos = 0; ; ) {
    const { bytesRead } = await fh.read(buf, 0, CHUNK, pos);
    if (bytesRead === 0) break;
    h.update(buf.subarray(0, bytesRead));
    pos += bytesRead;
  }
  return h.digest('hex');
}

/** A device number as losetup prints it (major:minor; glibc's encoding of st_dev). */
function majorMinor(dev: bigint): string {
  const major = ((dev >> 8n) & 0xfffn) | ((dev >> 32n) & ~0xfffn);
  const minor = (dev & 0xffn) | ((dev >> 12n) & ~0xffn);
  return `${major}:${minor}`;
}

/**
 * Opens the image (never following a link) and checks it against what the release recorded: a
 * regular file of root's nobody else may write, of the recorded size and SHA-256 (hashed through
 * this descriptor). Throws ImageProblem saying what is wrong.
 */
async function openVerified(img: string, expected: ReleaseImage): Promise<{ fh: FileHandle; st: BigIntStats }> {
  let fh: FileHandle;
  try {
    fh = await open(img, C.O_RDONLY | C.O_NOFOLLOW | C.O_NONBLOCK | C.O_NOCTTY);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') throw new ImageProblem('missing', 'its image is missing on disk');
    if (code === 'ELOOP') throw new ImageProblem('replaced', 'its image was replaced by a symbolic link (never followed)');
    throw e;
  }
  try {
    const st = await fh.stat({ bigint: true });
    if (!st.isFile()) throw new ImageProblem('replaced', 'its image was replaced by something that is not a regular file (never followed)');
    if (st.uid !== 0n || (st.mode & 0o022n) !== 0n) throw new ImageProblem('replaced', "its image is no longer root's alone (owner or mode changed)");
    if (expected.format !== IMAGE_FORMAT) throw new ImageProblem('corrupt', `its image is of an unknown format (${String(expected.format)})`);
    if (st.size !== BigInt(expected.bytes)) throw new ImageProblem('corrupt', `its image has ${st.size} bytes, the release recorded ${expected.bytes}: it changed on disk`);
    if ((await hashOf(fh)) !== expected.sha256) throw new ImageProblem('corrupt', 'its image does not match the SHA-256 recorded when the release was made: it changed on disk');
    return { fh, st };
  } catch (e) {
    await fh.close();
    throw e;
  }
}

/** Whether the image is in place and is what the release recorded (see openVerified). */
export async function imageMatches(img: string, expected: ReleaseImage): Promise<boolean> {
  try {
    await (await openVerified(img, expected)).fh.close();
    return true;
  } catch (e) {
    if (e instanceof ImageProblem) return false;
    throw e;
  }
}

/**
 * Verifies the image `img` against `expected` and mounts it read-only (nosuid, nodev) at
 * `mountPoint` (made if missing; its parents root's). Throws ImageProblem when the image is
 * missing, is not a regular file of root's (a symbolic link is never followed), or does not hash
 * to what the release recorded.
 */
export async function mountReleaseImage(img: string, expected: ReleaseImage, mountPoint: string): Promise<void> {
  const { fh, st } = await openVerified(img, expected);
  try {
    const dev = (await run('losetup', ['--find', '--show', '--read-only', img])).stdout.trim();
    try {
      // The loop device must be backed by the inode just hashed (root's directory; checked anyway).
      const [ino, majmin] = (await run('losetup', ['--list', '--noheadings', '--output', 'BACK-INO,BACK-MAJ:MIN', dev])).stdout.trim().split(/\s+/);
      if (ino !== String(st.ino) || majmin !== majorMinor(st.dev)) throw new ImageProblem('replaced', 'its image was replaced while it was being attached');
      await mkdir(mountPoint, { recursive: true, mode: 0o755 });
      await run('mount', ['-t', IMAGE_FORMAT, '-o', 'ro,nosuid,nodev,noatime', dev, mountPoint]);
    } catch (e) {
      if (e instanceof ImageProblem) throw e;
      throw new ImageProblem('unavailable', `its image cannot be mounted here: ${((e as { stderr?: string }).stderr ?? (e as Error).message).trim().slice(0, 300)}`);
    } finally {
      // Mounted: the device is freed with the last mount of it (autoclear); not mounted: freed now.
      await run('losetup', ['--detach', dev]).catch(() => undefined);
    }
  } finally {
    await fh.close();
  }
}

/** Unmounts what is mounted at mountPoint (lazily when something on the host still holds it) and removes the mount point. */
export async function unmountRelease(mountPoint: string): Promise<void> {
  if (await isMountPoint(mountPoint)) {
    try {
      await run('umount', [mountPoint]);
    } catch {
      await run('umount', ['-l', mountPoint]);
    }
  }
  await rmdir(mountPoint).catch((e: NodeJS.ErrnoException) => {
    if (e.code !== 'ENOENT') throw e;
  });
}

/** Mount points strictly below dir (from /proc/self/mountinfo, octal escapes decoded), deepest first. */
export async function mountPointsBelow(dir: string): Promise<string[]> {
  const prefix = dir.endsWith('/') ? dir : `${dir}/`;
  const out: string[] = [];
  for (const line of (await readFile('/proc/self/mountinfo', 'utf8')).split('\n')) {
    const field = line.split(' ')[4];
    if (!field) continue;
    const mp = field.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8)));
    if (mp.startsWith(prefix)) out.push(mp);
  }
  return [...new Set(out)].sort((a, b) => b.length - a.length);
}
