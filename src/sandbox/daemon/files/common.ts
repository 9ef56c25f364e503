/**
 * What every file method shares: the limits, the open flags, the error constructors and the
 * parameter checks. Imports node built-ins and sibling daemon files only.
 */
import { constants as FS, type BigIntStats, type Stats } from 'node:fs';
import { DaemonError, type EntryType } from '../protocol.js';

export const FILE_LIMITS = {
  /** files_write / files_write_batch content, in characters (the spec's limit). */
  contentChars: 1_048_576,
  /** files_apply_patch oldText and newText, in characters. */
  patchChars: 262_144,
  /** files_read bytes per call (and in total with readAll). */
  readBytes: 1_048_576,
  /** Largest file files_apply_patch loads. */
  patchFileBytes: 16 * 1024 * 1024,
  /** Entries per files_list page. */
  listPage: 500,
  /** files_write_batch entries, and the total bytes of one batch. */
  batchFiles: 1000,
  batchBytes: 16 * 1024 * 1024,
  /** Symlinks followed while resolving one path. */
  symlinkHops: 8,
  /** Locations reported when oldText occurs more than once. */
  patchLocations: 20,
} as const;

export const O_DIR = FS.O_RDONLY | FS.O_DIRECTORY;
export const O_DIR_NOFOLLOW = O_DIR | FS.O_NOFOLLOW;
export const O_READ = FS.O_RDONLY | FS.O_NOFOLLOW | FS.O_NONBLOCK;
export const TMP_PREFIX = '.atelier-tmp-';
export const DEFAULT_FILE_MODE = 0o644;
export const DEFAULT_DIR_MODE = 0o755;

/** An unpaired UTF-16 surrogate. */
export const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

export const denied = (message: string, details: Record<string, unknown> = {}) => new DaemonError('PERMISSION_DENIED', message, details);
export const invalid = (message: string, details: Record<string, unknown> = {}) => new DaemonError('INVALID_ARGUMENT', message, details);
export const notFound = (message: string, details: Record<string, unknown> = {}) => new DaemonError('NOT_FOUND', message, details);
export const precondition = (message: string, details: Record<string, unknown> = {}) => new DaemonError('FAILED_PRECONDITION', message, details);
export const conflict = (message: string, details: Record<string, unknown> = {}) => new DaemonError('CONFLICT', message, details);

export const errno = (e: unknown): string | undefined => (e as NodeJS.ErrnoException | undefined)?.code;

/** Names the kind of a non-regular file, for messages. */
export function kindOf(st: Stats | BigIntStats): EntryType {
  if (st.isFile()) return 'file';
  if (st.isDirectory()) return 'directory';
  if (st.isSymbolicLink()) return 'symlink';
  if (st.isFIFO()) return 'fifo';
  if (st.isSocket()) return 'socket';
  if (st.isCharacterDevice()) return 'char-device';
  if (st.isBlockDevice()) return 'block-device';
  return 'other';
}

export type { EntryType } from '../protocol.js';

export const modeString = (mode: number): string => (mode & 0o7777).toString(8).padStart(4, '0');

export function parseSha(v: unknown, field: string): string | undefined {
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'string' || !/^[0-9a-fA-F]{64}$/.test(v)) throw invalid(`${field} must be 64 hexadecimal characters`, { field });
  return v.toLowerCase();
}

export function obj(v: unknown, what = 'params'): Record<string, unknown> {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw invalid(`${what} must be an object`);
  return v as Record<string, unknown>;
}

export function intParam(v: unknown, name: string, min: number, max: number, def: number): number {
  if (v === undefined || v === null) return def;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) throw invalid(`${name} must be an integer from ${min} to ${max}`, { field: name });
  return v;
}
