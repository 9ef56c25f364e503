/** What the search methods share: limits, the tools they run, parameter checks, search roots. */
import { closeSync, constants as FS, existsSync, openSync, read } from 'node:fs';
import { promisify } from 'node:util';
import { Confinement, fdPath, parentRel } from '../files/index.js';
import { DaemonError } from '../protocol.js';


export const readAsync = promisify(read);

export const SEARCH_LIMITS = {
  patternChars: 4096,
  globChars: 512,
  maxResults: 500,
  /** Characters of a matching line returned; longer lines are cut and marked. */
  lineChars: 1000,
  /** A search stops (partial result, timedOut) after this long. */
  defaultTimeoutMs: 120_000,
  /** Files larger than this are not given to ctags. */
  symbolFileBytes: 1024 * 1024,
  /** Tags kept per file. */
  tagsPerFile: 5000,
  /** Directories watched with inotify; beyond it the index rescans on every query. */
  maxWatches: 8192,
  /** Dirty directories handled one by one; more means a full rescan. */
  maxDirtyDirs: 64,
  /** A full (stat) rescan at least this often, as a net under lost events. */
  fullRescanMs: 60_000,
  /** One ctags request longer than this kills that ctags (the file is skipped). */
  ctagsFileTimeoutMs: 20_000,
  /** Files listed for the index at most (ripgrep is stopped beyond; the index is then partial). */
  maxListedFiles: 400_000,
  /** Files indexed and symbols kept at most: the daemon's heap is small (see docs/files.md). */
  maxIndexedFiles: 100_000,
  maxSymbols: 600_000,
} as const;

export const O_DIR_NOFOLLOW = FS.O_RDONLY | FS.O_DIRECTORY | FS.O_NOFOLLOW;
export const O_READ = FS.O_RDONLY | FS.O_NOFOLLOW | FS.O_NONBLOCK;
export const IGNORE_FILES = new Set(['.gitignore', '.ignore', '.rgignore']);
export const TMP_PREFIX = '.atelier-tmp-';

export const invalid = (message: string, details: Record<string, unknown> = {}) => new DaemonError('INVALID_ARGUMENT', message, details);

function findBinary(candidates: string[]): string | undefined {
  return candidates.find((p) => existsSync(p));
}

export const RG = findBinary(['/usr/bin/rg', '/usr/local/bin/rg', '/bin/rg']);
export const CTAGS = findBinary(['/usr/bin/ctags-universal', '/usr/bin/universal-ctags', '/usr/bin/ctags', '/usr/local/bin/ctags']);

export function childEnv(): Record<string, string> {
  return { PATH: '/usr/bin:/bin', LANG: 'C.UTF-8', LC_ALL: 'C.UTF-8' };
}

// ---------------------------------------------------------------------------------------------
// Parameters
// ---------------------------------------------------------------------------------------------

export function obj(v: unknown): Record<string, unknown> {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw invalid('params must be an object');
  return v as Record<string, unknown>;
}

export function text(v: unknown, name: string, min: number, max: number): string {
  if (typeof v !== 'string' || v.length < min || v.length > max) throw invalid(`${name} must be a string of ${min}-${max} characters`, { field: name });
  if (v.includes('\0')) throw invalid(`${name} must not contain NUL`, { field: name });
  return v;
}

export function maxResultsOf(v: unknown): number {
  if (v === undefined) return 100;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 1 || v > SEARCH_LIMITS.maxResults) throw invalid(`maxResults must be an integer from 1 to ${SEARCH_LIMITS.maxResults}`, { field: 'maxResults' });
  return v;
}

// ---------------------------------------------------------------------------------------------
// Search roots
// ---------------------------------------------------------------------------------------------

export interface SearchRoot {
  /** Open directory ripgrep runs in. */
  fd: number;
  /** Its real root-relative path. */
  rel: string;
  /** The argument given to ripgrep: './' or './<file name>'. */
  arg: string;
}

/** Resolves the path a search runs under: a directory, or one regular file (searched from its directory). */
export function searchRoot(c: Confinement, p: unknown): SearchRoot {
  const shown = String(p ?? '.');
  const e = c.resolve(p ?? '.', { follow: true });
  if (!e.st) {
    closeSync(e.dir);
    throw new DaemonError('NOT_FOUND', `path: ${shown} does not exist`, { field: 'path', path: shown });
  }
  if (e.name === '') return { fd: e.dir, rel: '.', arg: './' };
  if (e.st.isDirectory()) {
    try {
      return { fd: openSync(fdPath(e.dir, e.name), O_DIR_NOFOLLOW), rel: e.rel, arg: './' };
    } catch {
      throw new DaemonError('PERMISSION_DENIED', `path: ${shown} changed while the search started`, { field: 'path', path: shown });
    } finally {
      closeSync(e.dir);
    }
  }
  if (e.st.isFile()) return { fd: e.dir, rel: parentRel(e.rel), arg: `./${e.name}` };
  closeSync(e.dir);
  throw new DaemonError('PERMISSION_DENIED', `path: ${shown} is not a regular file or directory`, { field: 'path', path: shown });
}
