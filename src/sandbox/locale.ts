/**
 * A locale archive for sandboxes. Commands run with LANG=C.UTF-8, and on a Debian host without the
 * `locales` package's archive the C library loads that locale from thirteen separate files under
 * /usr/lib/locale/C.utf8: about seventy system calls at every process start (a failed open, an open,
 * a stat, a map and a close per category, and the alias file). From one archive it is one open and
 * one map. Measured here for a `bash -c true` with LANG=C.UTF-8: 0.87 ms from the files, 0.73 ms from
 * the archive (docs/sandbox.md, "Fourth pass").
 *
 * The archive is made once by the runner with the host's own localedef from the host's compiled
 * locales (nothing a workspace can touch), into <cacheDir>/locale-<hash of those locales>, and
 * copied into each sandbox (--ro-bind-data onto a tmpfs over /usr/lib/locale, beside read-only
 * binds of the host's locale directories), so no runner path shows inside. A host that already
 * has an archive, or where localedef fails, is left as it is.
 */
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { readdir, rename, rm, stat, mkdir } from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import { buildDirAtomically } from '../core/native-build.js';

const run = promisify(execFile);

export const HOST_LOCALE_DIR = '/usr/lib/locale';

export interface LocaleArchive {
  /** The archive file (copied into the sandbox at /usr/lib/locale/locale-archive). */
  archive: string;
  /** Where the host's compiled locales are (/usr/lib/locale). */
  hostDir: string;
  /** The host's compiled locale directories (names under hostDir), bound read-only beside it. */
  locales: string[];
}

/** The host's compiled locales: directories under /usr/lib/locale holding an LC_CTYPE. */
async function hostLocales(dir: string): Promise<Array<{ name: string; size: number; mtimeMs: number }>> {
  const out: Array<{ name: string; size: number; mtimeMs: number }> = [];
  for (const e of await readdir(dir, { withFileTypes: true })) {
    if (!e.isDirectory() || !/^[A-Za-z0-9_.@-]+$/.test(e.name)) continue;
    const ctype = await stat(path.join(dir, e.name, 'LC_CTYPE')).catch(() => undefined);
    if (ctype?.isFile()) out.push({ name: e.name, size: ctype.size, mtimeMs: ctype.mtimeMs });
  }
  return out.sort((a, b) => a.name.localeCompare(b.name));
}

/**
 * The archive for sandboxes, built once into cacheDir; undefined when the host needs none (it has an
 * archive of its own, or no compiled locale) or one cannot be made (no localedef). `hostDir` is for tests.
 */
export async function localeArchive(cacheDir: string, hostDir = HOST_LOCALE_DIR, onNote?: (why: string) => void): Promise<LocaleArchive | undefined> {
  try {
    if (!(await stat(hostDir)).isDirectory() || existsSync(path.join(hostDir, 'locale-archive'))) return undefined;
    const locales = await hostLocales(hostDir);
    if (locales.length === 0) return undefined;
    const hash = createHash('sha256').update(hostDir).update(JSON.stringify(locales)).digest('hex').slice(0, 16);
    const dir = path.join(cacheDir, `locale-${hash}`);
    const archive = path.join(dir, 'locale-archive');
    if (!existsSync(archive)) {
      await buildDirAtomically(dir, async (tmp) => {
        // localedef writes <prefix>/usr/lib/locale/locale-archive.
        await mkdir(path.join(tmp, 'usr/lib/locale'), { recursive: true });
        await run('localedef', [`--prefix=${tmp}`, '--add-to-archive', ...locales.map((l) => path.join(hostDir, l.name))], { timeout: 60_000 });
        await rename(path.join(tmp, 'usr/lib/locale/locale-archive'), path.join(tmp, 'locale-archive'));
        await rm(path.join(tmp, 'usr'), { recursive: true, force: true });
      });
    }
    return { archive, hostDir, locales: locales.map((l) => l.name) };
  } catch (err) {
    onNote?.(`sandboxes load locales from separate files (no locale archive could be made: ${(err as Error).message.split('\n')[0]})`);
    return undefined;
  }
}
