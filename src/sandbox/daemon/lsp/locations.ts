/**
 * Turning what a server answers (URIs, LSP ranges) into what callers get: a workspace path with a
 * 1-based range and the line's text, or a location marked outside the workspace (Atelier's bundled
 * libraries, the sandbox's /usr) that never names a host path.
 *
 * Imports node built-ins and sibling daemon files only.
 */
import { closeSync, fstatSync, openSync } from 'node:fs';
import { constants as FS } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Confinement } from '../files/index.js';
import type { CodeLocation } from '../protocol.js';
import { readWhole, readWorkspaceFile } from './manager.js';
import { Lines, shapeRange, type LspRange } from './positions.js';
import { modulesDir } from './servers.js';

/** External files read for a line's text at most this large. */
const EXTERNAL_TEXT_BYTES = 8 * 1024 * 1024;

/**
 * External files' lines across calls (a definition in TypeScript's lib.dom.d.ts, 2 MB, would be read
 * and split on every call otherwise), by path, checked against the file's size and mtime; at most
 * EXTERNAL_CACHE_FILES files and EXTERNAL_CACHE_CHARS characters, the least recently used dropped.
 */
const EXTERNAL_CACHE_FILES = 16;
const EXTERNAL_CACHE_CHARS = 32 * 1024 * 1024;
const externalCache = new Map<string, { stamp: string; lines: Lines }>();

function cachedExternal(abs: string, stamp: string, read: () => Lines | undefined): Lines | undefined {
  const hit = externalCache.get(abs);
  if (hit && hit.stamp === stamp) {
    externalCache.delete(abs);
    externalCache.set(abs, hit);
    return hit.lines;
  }
  const lines = read();
  externalCache.delete(abs);
  if (!lines) return undefined;
  externalCache.set(abs, { stamp, lines });
  let chars = 0;
  for (const v of externalCache.values()) chars += v.lines.text.length;
  for (const [k, v] of externalCache) {
    if (externalCache.size <= EXTERNAL_CACHE_FILES && chars <= EXTERNAL_CACHE_CHARS) break;
    externalCache.delete(k);
    chars -= v.lines.text.length;
  }
  return lines;
}

export class LocationShaper {
  private readonly cache = new Map<string, Lines | undefined>();
  private readonly mods = modulesDir();

  constructor(private readonly c: Confinement) {}

  /** The lines of a workspace file (undefined when it cannot be read now). */
  linesOf(rel: string): Lines | undefined {
    if (!this.cache.has(rel)) {
      try {
        this.cache.set(rel, new Lines(readWorkspaceFile(this.c, rel, 'path', 16 * 1024 * 1024).text));
      } catch {
        this.cache.set(rel, undefined);
      }
    }
    return this.cache.get(rel);
  }

  /** Seeds the cache with text the daemon already holds (an open document). */
  seed(rel: string, lines: Lines): void {
    this.cache.set(rel, lines);
  }

  /** A workspace path of a URI, or undefined when it is outside the workspace. */
  relOf(uri: string): string | undefined {
    const abs = absOf(uri);
    if (abs === undefined) return undefined;
    return this.c.inside(abs) ? this.c.relOf(abs) : undefined;
  }

  shape(uri: string, range: LspRange): CodeLocation {
    const abs = absOf(uri);
    if (abs !== undefined && this.c.inside(abs)) {
      const rel = this.c.relOf(abs);
      return { path: rel, ...shapeRange(this.linesOf(rel), range) };
    }
    const external = this.external(uri, abs);
    const lines = abs !== undefined && external.root !== 'sandbox' ? this.externalLines(abs) : undefined;
    return { path: null, outsideWorkspace: true, external, ...shapeRange(lines, range) };
  }

  private external(uri: string, abs: string | undefined): NonNullable<CodeLocation['external']> {
    if (abs === undefined) return { root: 'uri', path: uri.slice(0, 500) };
    if (abs.startsWith(this.mods + '/')) return { root: 'atelier', path: abs.slice(this.mods.length + 1) };
    if (abs.startsWith('/usr/')) return { root: 'system', path: abs };
    // Anything else (the sandbox's /home/user, /tmp): shown by its base name only.
    return { root: 'sandbox', path: path.posix.basename(abs) };
  }

  private externalLines(abs: string): Lines | undefined {
    const key = `\0${abs}`;
    if (this.cache.has(key)) return this.cache.get(key);
    let lines: Lines | undefined;
    try {
      const fd = openSync(abs, FS.O_RDONLY | FS.O_NONBLOCK | FS.O_NOFOLLOW);
      try {
        const st = fstatSync(fd);
        if (st.isFile() && st.size <= EXTERNAL_TEXT_BYTES) {
          lines = cachedExternal(abs, `${st.dev}:${st.ino}:${st.size}:${st.mtimeMs}`, () => new Lines(readWhole(fd, st.size).toString('utf8')));
        }
      } finally {
        closeSync(fd);
      }
    } catch {
      lines = undefined;
    }
    this.cache.set(key, lines);
    return lines;
  }
}

function absOf(uri: string): string | undefined {
  if (typeof uri !== 'string' || !uri.startsWith('file://')) return undefined;
  try {
    return path.posix.normalize(fileURLToPath(uri));
  } catch {
    return undefined;
  }
}
