/**
 * The language servers Atelier ships (issue #44, docs/code-intelligence.md) reach the daemon's
 * sandbox as a filesystem of their own, never as a bind of the install's node_modules.
 *
 * /proc/self/mountinfo shows, for each mount, the path of its root inside the filesystem it comes
 * from, so a bind of `<install>/node_modules/pyright` named the install's host path inside the
 * sandbox (the hardening rule: neither the install nor the data directory shows there). The
 * packages are therefore one read-only squashfs image, made by root once per install (scripts/
 * setup.sh: `dist/lsp/<key>.sqfs`; without it the runner makes one under its run directory on first
 * use), loop-mounted read-only while a daemon sandbox is being started and bound from that mount:
 * inside, mountinfo shows `/pyright /opt/atelier/node_modules/pyright ... squashfs /dev/loopN`.
 *
 * The host mount is held only while sandboxes are starting (counted, so concurrent starts share
 * it): a sandbox's binds are mounts of its own namespace and keep the image's filesystem (and its
 * loop device, freed by autoclear with the last of them) after the host mount is gone. So nothing
 * stays mounted on the host when the runner stops or is killed between starts; a mount left by a
 * runner killed during a start is unmounted by the next acquire.
 */
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { constants as C, existsSync, readFileSync } from 'node:fs';
import { lstat, mkdir, open, readdir, rename, rm } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { IN_OPT } from './layout.js';
import type { Mount } from './args.js';

const run = promisify(execFile);

/** npm packages the daemon's language servers need (src/sandbox/daemon/lsp/), at /opt/atelier/node_modules/<name>. */
export const LANGUAGE_SERVER_PACKAGES = ['vscode-jsonrpc', 'vscode-languageserver-protocol', 'vscode-languageserver-types', 'typescript-language-server', 'typescript-lsp-tsserver', 'pyright'];

/** This install's node_modules (dist/sandbox/bwrap/ is three levels below the install). */
const INSTALL_MODULES = fileURLToPath(new URL('../../../node_modules/', import.meta.url));
/** Where scripts/setup.sh puts the image: dist/lsp/. */
export const INSTALL_IMAGE_DIR = fileURLToPath(new URL('../../lsp/', import.meta.url));

/** The packages installed here, and the image's key: a digest of their package.json files (name and version say what is in them). */
export function languageServerPackages(modules = INSTALL_MODULES): { names: string[]; key: string } {
  const names = LANGUAGE_SERVER_PACKAGES.filter((p) => existsSync(path.join(modules, p, 'package.json')));
  const h = createHash('sha256');
  for (const p of names) h.update(p).update('\0').update(readFileSync(path.join(modules, p, 'package.json'))).update('\0');
  return { names, key: h.digest('hex').slice(0, 16) };
}

/**
 * Makes the image of the installed packages at `out` (atomically: a temporary name, then a rename),
 * readable by root only; each package a top-level directory of it. Links stay links (mksquashfs
 * never follows them), every entry becomes root's.
 */
export async function makeLanguageServerImage(out: string, modules = INSTALL_MODULES): Promise<void> {
  const { names } = languageServerPackages(modules);
  if (names.length === 0) throw new Error('no language-server package is installed');
  await mkdir(path.dirname(out), { recursive: true, mode: 0o755 });
  const tmp = `${out}.${process.pid}.tmp`;
  await rm(tmp, { force: true });
  await run('mksquashfs', [...names.map((p) => path.join(modules, p)), tmp, '-noappend', '-quiet', '-no-progress', '-no-recovery', '-all-root', '-no-xattrs', '-no-exports', '-comp', 'lz4'], { maxBuffer: 1 << 20 });
  const fh = await open(tmp, C.O_RDONLY | C.O_NOFOLLOW);
  await fh.chmod(0o400);
  await fh.close();
  await rename(tmp, out);
}

/** An image that root alone may change: a regular file of root's, not group- or world-writable (never through a link). */
async function trusted(img: string): Promise<boolean> {
  try {
    const fh = await open(img, C.O_RDONLY | C.O_NOFOLLOW | C.O_NONBLOCK);
    try {
      const st = await fh.stat();
      return st.isFile() && st.uid === 0 && (st.mode & 0o022) === 0;
    } finally {
      await fh.close();
    }
  } catch {
    return false;
  }
}

async function isMounted(dir: string): Promise<boolean> {
  const want = path.resolve(dir);
  try {
    return readFileSync('/proc/self/mountinfo', 'utf8')
      .split('\n')
      .some((l) => l.split(' ')[4]?.replace(/\\040/g, ' ') === want);
  } catch {
    return false;
  }
}

/** A counted hold on the mounted image: the binds to add to a daemon sandbox, and its release. */
export interface LanguageServerHold {
  binds: Mount[];
  release(): Promise<void>;
}

/**
 * The image, mounted under the runner's run directory while daemon sandboxes are starting. When
 * no package is installed, or the image cannot be made or mounted here (no squashfs-tools, no loop
 * devices), a sandbox starts without them and the code-intel tools say the server is not installed.
 */
export class LanguageServerMounts {
  private holders = 0;
  private mounting: Promise<string | null> | null = null;
  /** The unmount of the last hold's mount, under way (a new mount waits for it; a start does not). */
  private unmounting: Promise<void> = Promise.resolve();
  private unavailable: string | null = null;

  constructor(
    private readonly runDir: string,
    private readonly onNote?: (message: string) => void,
    private readonly modules = INSTALL_MODULES,
  ) {}

  async acquire(): Promise<LanguageServerHold | null> {
    if (this.unavailable !== null) return null;
    this.holders++;
    this.mounting ??= this.mount();
    const root = await this.mounting;
    if (root === null) {
      await this.release();
      return null;
    }
    const { names } = languageServerPackages(this.modules);
    let released = false;
    return {
      binds: names.map((p) => ({ source: path.join(root, p), target: `${IN_OPT}/node_modules/${p}`, readOnly: true })),
      release: async () => {
        if (released) return;
        released = true;
        await this.release();
      },
    };
  }

  private async release(): Promise<void> {
    this.holders--;
    if (this.holders > 0 || this.mounting === null) return;
    const was = this.mounting;
    this.mounting = null;
    const root = await was;
    // A start that began meanwhile mounts again (its own `mounting`, after this unmount); this one's
    // mount goes, without holding up the start that released it.
    if (root !== null && this.mounting === null)
      this.unmounting = run('umount', ['-l', root]).then(
        () => undefined,
        () => undefined,
      );
  }

  /**
   * At start, after recovery: an image mount under the run directory that no start holds (one a
   * runner killed during a start left) is unmounted. Only real directories of root's named
   * lsp-<key> are looked at; a link is never followed.
   */
  async sweep(): Promise<void> {
    if (this.holders > 0 || this.mounting !== null) return;
    await this.unmounting;
    let names: string[];
    try {
      names = await readdir(this.runDir);
    } catch {
      return;
    }
    for (const name of names) {
      if (!/^lsp-[0-9a-f]{16}$/.test(name)) continue;
      const dir = path.join(this.runDir, name);
      try {
        const st = await lstat(dir);
        if (!st.isDirectory() || st.uid !== 0) continue;
        if (await isMounted(dir)) {
          await run('umount', ['-l', dir]);
          this.onNote?.(`language servers: unmounted the image a stopped runner left at ${dir}`);
        }
      } catch {
        // gone meanwhile, or not ours to touch
      }
    }
  }

  private async mount(): Promise<string | null> {
    try {
      const { names, key } = languageServerPackages(this.modules);
      if (names.length === 0) {
        this.unavailable = 'no language-server package is installed';
        return null;
      }
      let img = path.join(INSTALL_IMAGE_DIR, `${key}.sqfs`);
      if (!(await trusted(img))) {
        // Not made by setup (or not root's alone): made once under the run directory, root's.
        img = path.join(this.runDir, `lsp-${key}.sqfs`);
        if (!(await trusted(img))) {
          this.onNote?.('language servers: making their image under the run directory (scripts/setup.sh makes it once per install)');
          await makeLanguageServerImage(img, this.modules);
        }
      }
      const root = path.join(this.runDir, `lsp-${key}`);
      await mkdir(root, { recursive: true, mode: 0o755 });
      await this.unmounting;
      if (await isMounted(root)) await run('umount', ['-l', root]).catch(() => undefined); // left by a runner killed during a start
      await run('mount', ['-t', 'squashfs', '-o', 'loop,ro,nosuid,nodev,noatime', img, root]);
      return root;
    } catch (e) {
      this.unavailable = `the language servers' image cannot be made or mounted here: ${((e as { stderr?: string }).stderr ?? (e as Error).message).trim().slice(0, 300)}`;
      this.onNote?.(this.unavailable);
      return null;
    }
  }
}
