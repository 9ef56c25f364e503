/**
 * The sandboxes' locale archive (src/sandbox/locale.ts), made with the host's localedef from a copy of
 * the host's compiled locales: built once and reused, rebuilt when the locales change, and not made
 * at all where the host has an archive or no compiled locale, or where localedef cannot run.
 */
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { HOST_LOCALE_DIR, localeArchive } from '../../src/sandbox/locale.js';

const hostHasCUtf8 = existsSync(path.join(HOST_LOCALE_DIR, 'C.utf8', 'LC_CTYPE'));

describe.skipIf(!hostHasCUtf8)('the sandboxes locale archive', () => {
  let dir: string;
  let host: string;
  let cache: string;
  beforeEach(() => {
    dir = mkdtempSync(path.join(tmpdir(), 'atelier-locale-'));
    host = path.join(dir, 'host');
    cache = path.join(dir, 'cache');
    mkdirSync(host);
    mkdirSync(cache);
    cpSync(path.join(HOST_LOCALE_DIR, 'C.utf8'), path.join(host, 'C.utf8'), { recursive: true });
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('is built once from the compiled locales, and reused', async () => {
    const a = await localeArchive(cache, host);
    expect(a).toBeDefined();
    expect(a!.locales).toEqual(['C.utf8']);
    expect(a!.hostDir).toBe(host);
    expect(statSync(a!.archive).size).toBeGreaterThan(1000);
    const before = statSync(a!.archive).mtimeMs;
    const again = await localeArchive(cache, host);
    expect(again!.archive).toBe(a!.archive);
    expect(statSync(again!.archive).mtimeMs).toBe(before);
  });

  it('is made anew when the host locales change', async () => {
    const a = await localeArchive(cache, host);
    // The same data with another time (a glibc update): a new archive, in a directory of its own.
    utimesSync(path.join(host, 'C.utf8', 'LC_CTYPE'), new Date(), new Date(Date.now() + 5000));
    expect(readFileSync(path.join(host, 'C.utf8', 'LC_CTYPE')).length).toBeGreaterThan(0);
    const b = await localeArchive(cache, host);
    expect(b!.archive).not.toBe(a!.archive);
  });

  it('is not made where the host has an archive, or no compiled locale (names not like a locale are ignored)', async () => {
    writeFileSync(path.join(host, 'locale-archive'), '');
    expect(await localeArchive(cache, host)).toBeUndefined();
    const empty = path.join(dir, 'empty');
    mkdirSync(path.join(empty, 'no locale;'), { recursive: true });
    writeFileSync(path.join(empty, 'no locale;', 'LC_CTYPE'), 'x');
    expect(await localeArchive(cache, empty)).toBeUndefined();
    expect(await localeArchive(cache, path.join(dir, 'missing'))).toBeUndefined();
  });

  it('is not made, with a note, where localedef cannot run; nothing half-built stays', async () => {
    const notes: string[] = [];
    const saved = process.env.PATH;
    process.env.PATH = path.join(dir, 'no-such-bin');
    try {
      expect(await localeArchive(cache, host, (n) => notes.push(n))).toBeUndefined();
    } finally {
      process.env.PATH = saved;
    }
    expect(notes).toHaveLength(1);
    expect(notes[0]).toMatch(/no locale archive could be made/);
    expect(readdirSync(cache)).toEqual([]);
  });
});
