/**
 * The runner's parser of a tree a Pod sends back (src/sandbox/kubernetes/untar.ts): hostile tar
 * streams are refused with the member named, and nothing is written outside the destination.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, lstatSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { extractTar, TarRefusal } from '../../src/sandbox/kubernetes/untar.js';

/** One ustar header + data, as a hostile Pod could write it. */
function member(name: string, type: string, opts: { data?: Buffer | string; link?: string; mode?: number; size?: number } = {}): Buffer {
  const data = typeof opts.data === 'string' ? Buffer.from(opts.data) : (opts.data ?? Buffer.alloc(0));
  const h = Buffer.alloc(512);
  h.write(name, 0, 100, 'utf8');
  h.write((opts.mode ?? 0o644).toString(8).padStart(7, '0') + '\0', 100, 'latin1');
  h.write('0000000\0', 108, 'latin1');
  h.write('0000000\0', 116, 'latin1');
  h.write((opts.size ?? data.length).toString(8).padStart(11, '0') + '\0', 124, 'latin1');
  h.write('00000000000\0', 136, 'latin1');
  h.write('        ', 148, 'latin1');
  h.write(type, 156, 'latin1');
  if (opts.link) h.write(opts.link, 157, 100, 'utf8');
  h.write('ustar\0', 257, 'latin1');
  h.write('00', 263, 'latin1');
  let sum = 0;
  for (const b of h) sum += b;
  h.write(sum.toString(8).padStart(6, '0') + '\0 ', 148, 'latin1');
  const pad = Buffer.alloc((512 - (data.length % 512)) % 512);
  return Buffer.concat([h, data, pad]);
}
/** A pax extended header ('x') carrying `records` (each as `<length> <key>=<value>\n`). */
function pax(records: Record<string, string>, raw?: string): Buffer {
  const body =
    raw ??
    Object.entries(records)
      .map(([k, v]) => {
        const rest = ` ${k}=${v}\n`;
        let n = rest.length + 1;
        while (String(n).length + rest.length !== n) n++;
        return `${n}${rest}`;
      })
      .join('');
  return member('PaxHeaders/x', 'x', { data: body });
}
const END = Buffer.alloc(1024);
const tar = (...parts: Buffer[]): Readable => Readable.from([Buffer.concat([...parts, END])]);

let base: string;
let dest: string;
let outside: string;
beforeEach(() => {
  base = mkdtempSync(join(tmpdir(), 'atl-untar-'));
  dest = join(base, 'work');
  outside = join(base, 'outside');
  mkdirSync(dest);
  mkdirSync(outside);
  writeFileSync(join(outside, 'keep'), 'untouched');
});
afterEach(() => rmSync(base, { recursive: true, force: true }));

async function refusal(stream: Readable, maxBytes = 1 << 20): Promise<string> {
  try {
    await extractTar(stream, dest, 'node_modules', maxBytes);
  } catch (e) {
    expect(e).toBeInstanceOf(TarRefusal);
    return (e as Error).message;
  }
  throw new Error('not refused');
}
/** Nothing but dest's own tree was written; outside is as it was. */
function outsideIntact(): void {
  expect(readdirSync(outside)).toEqual(['keep']);
  expect(readFileSync(join(outside, 'keep'), 'utf8')).toBe('untouched');
  expect(readdirSync(base).sort()).toEqual(['outside', 'work']);
}

describe('extractTar', () => {
  it('takes what GNU tar makes of a real tree: files with their modes, directories, links kept as links (never followed)', async () => {
    const src = mkdtempSync(join(tmpdir(), 'atl-untar-src-'));
    mkdirSync(join(src, 'node_modules', 'a', 'bin'), { recursive: true });
    writeFileSync(join(src, 'node_modules', 'a', 'bin', 'cli.js'), '#!/usr/bin/env node\n', { mode: 0o755 });
    writeFileSync(join(src, 'node_modules', 'a', `${'long-name-'.repeat(15)}.js`), 'x');
    symlinkSync('/', join(src, 'node_modules', 'a', 'root-link'));
    const stream = Readable.from([execFileSync('tar', ['-c', '-f', '-', '--format=gnu', '-C', src, 'node_modules'])]);
    const bytes = await extractTar(stream, dest, 'node_modules', 1 << 20);
    expect(bytes).toBeGreaterThan(0);
    expect(lstatSync(join(dest, 'node_modules/a/bin/cli.js')).mode & 0o777).toBe(0o755);
    expect(existsSync(join(dest, 'node_modules/a', `${'long-name-'.repeat(15)}.js`))).toBe(true);
    expect(readlinkSync(join(dest, 'node_modules/a/root-link'))).toBe('/');
    rmSync(src, { recursive: true, force: true });
    outsideIntact();
  });

  it('refuses a member written through a symbolic link the stream planted (a link to / then a file under it)', async () => {
    const msg = await refusal(tar(member('node_modules/', '5', { mode: 0o755 }), member('node_modules/esc', '2', { link: outside }), member('node_modules/esc/planted', '0', { data: 'x' })));
    expect(msg).toMatch(/node_modules\/esc\/planted: its parent node_modules\/esc is a symbolic link/);
    expect(existsSync(join(outside, 'planted'))).toBe(false);
    outsideIntact();
  });

  it('refuses .. names, absolute names and names outside the asked directory', async () => {
    for (const name of ['node_modules/../outside/keep', '../outside/x', '/etc/x', 'other/x', 'node_modules/./x', 'node_modules//x']) {
      rmSync(dest, { recursive: true, force: true });
      mkdirSync(dest);
      const msg = await refusal(tar(member('node_modules/', '5'), member(name, '0', { data: 'x' })));
      expect(msg, name).toMatch(/not a relative name|a name with|outside node_modules/);
      outsideIntact();
    }
  });

  it('refuses a hard link (even to a file outside the tree), a device, a fifo', async () => {
    expect(await refusal(tar(member('node_modules/', '5'), member('node_modules/h', '1', { link: '/etc/shadow' })))).toMatch(/node_modules\/h: a hard link \(to \/etc\/shadow\)/);
    rmSync(join(dest, 'node_modules'), { recursive: true });
    expect(await refusal(tar(member('node_modules/', '5'), member('node_modules/dev', '3')))).toMatch(/node_modules\/dev: a special file/);
    rmSync(join(dest, 'node_modules'), { recursive: true });
    expect(await refusal(tar(member('node_modules/', '5'), member('node_modules/p', '6')))).toMatch(/node_modules\/p: a special file/);
    outsideIntact();
  });

  it('refuses a stream over the limit (a huge tar) and a member whose declared size runs past the stream', async () => {
    const big = Buffer.alloc(4 << 20, 0x61);
    expect(await refusal(tar(member('node_modules/', '5'), member('node_modules/big', '0', { data: big })), 1 << 20)).toMatch(/more than 1048576 bytes/);
    rmSync(join(dest, 'node_modules'), { recursive: true, force: true });
    // Streamed in small chunks: refused as the limit passes, never more than the limit written.
    const chunks = Buffer.concat([member('node_modules/', '5'), member('node_modules/big', '0', { data: big }), END]);
    const pieces = Array.from({ length: Math.ceil(chunks.length / 65536) }, (_, i) => chunks.subarray(i * 65536, (i + 1) * 65536));
    expect(await refusal(Readable.from(pieces), 1 << 20)).toMatch(/more than 1048576 bytes/);
    expect(existsSync(join(dest, 'node_modules/big')) ? lstatSync(join(dest, 'node_modules/big')).size : 0).toBeLessThanOrEqual(1 << 20);
    rmSync(join(dest, 'node_modules'), { recursive: true, force: true });
    const short = member('node_modules/f', '0', { size: 1 << 19 });
    expect(await refusal(Readable.from([Buffer.concat([member('node_modules/', '5'), short.subarray(0, 512), Buffer.alloc(512)])]))).toMatch(/ended inside/);
    outsideIntact();
  });

  it('a pax size replaces the ustar size: the data and its padding follow it, and the members after parse at the right offset', async () => {
    const big = Buffer.alloc(1500, 0x62);
    const small = Buffer.from('ten bytes!');
    await extractTar(
      tar(
        member('node_modules/', '5'),
        // pax larger than ustar (writers put 0 or a truncated size there for files over 8 GiB): 1500 bytes, 3 blocks.
        pax({ size: '1500' }),
        member('node_modules/big', '0', { data: big, size: 0 }),
        member('node_modules/after-big', '0', { data: 'A' }),
        // pax smaller than ustar: 10 bytes, one block, though the ustar field says 5000 (10 blocks).
        pax({ size: '10' }),
        member('node_modules/small', '0', { data: small, size: 5000 }),
        member('node_modules/after-small', '0', { data: 'B' }),
        // A directory whose ustar size says one block of data, pax 0: no block is skipped.
        pax({ size: '0' }),
        member('node_modules/d/', '5', { size: 512 }),
        member('node_modules/d/in', '0', { data: 'C' }),
      ),
      dest,
      'node_modules',
      1 << 20,
    );
    expect(readFileSync(join(dest, 'node_modules/big')).equals(big)).toBe(true);
    expect(readFileSync(join(dest, 'node_modules/after-big'), 'utf8')).toBe('A');
    expect(readFileSync(join(dest, 'node_modules/small'), 'utf8')).toBe('ten bytes!');
    expect(readFileSync(join(dest, 'node_modules/after-small'), 'utf8')).toBe('B');
    expect(readFileSync(join(dest, 'node_modules/d/in'), 'utf8')).toBe('C');
    outsideIntact();
  });

  it('refuses a hostile pax size (not plain decimal digits, or over the limit) and a malformed pax record', async () => {
    for (const size of ['1e3', '0x10', '-1', '', ' 12', '12 ', '1.5', '99999999999999999999']) {
      expect(await refusal(tar(member('node_modules/', '5'), pax({ size }), member('node_modules/f', '0', { data: 'x' })))).toMatch(/node_modules\/f: a pax size .* \(decimal digits only\)/);
      rmSync(join(dest, 'node_modules'), { recursive: true, force: true });
    }
    // A size the whole tree could not hold: refused before a byte of it is read.
    expect(await refusal(tar(member('node_modules/', '5'), pax({ size: String(1 << 30) }), member('node_modules/f', '0', { data: 'x' })), 1 << 20)).toMatch(/node_modules\/f: a size of 1073741824 bytes, more than the 1048576/);
    rmSync(join(dest, 'node_modules'), { recursive: true, force: true });
    for (const raw of ['0x10 size=1\n', '13 size=1500X', '+12 size=150\n', '99999999 size=1\n']) {
      expect(await refusal(tar(member('node_modules/', '5'), pax({}, raw), member('node_modules/f', '0', { data: 'x' })))).toMatch(/a bad pax record/);
      rmSync(join(dest, 'node_modules'), { recursive: true, force: true });
    }
    outsideIntact();
  });

  it('refuses a bad checksum, a duplicate path, a top that is not a directory, a stream without end blocks', async () => {
    const bad = member('node_modules/', '5');
    bad[0] = 0x4d;
    expect(await refusal(tar(bad))).toMatch(/bad checksum/);
    expect(await refusal(tar(member('node_modules/', '5'), member('node_modules/a', '0', { data: 'x' }), member('node_modules/a', '0', { data: 'y' })))).toMatch(/node_modules\/a: appears twice/);
    rmSync(join(dest, 'node_modules'), { recursive: true });
    expect(await refusal(tar(member('node_modules', '2', { link: '/' })))).toMatch(/the top must be a directory/);
    expect(await refusal(Readable.from([member('node_modules/', '5')]))).toMatch(/without the end-of-archive/);
    rmSync(join(dest, 'node_modules'), { recursive: true, force: true });
    // A setuid bit is dropped.
    await extractTar(tar(member('node_modules/', '5'), member('node_modules/s', '0', { data: 'x', mode: 0o4755 })), dest, 'node_modules', 1 << 20);
    expect(lstatSync(join(dest, 'node_modules/s')).mode & 0o7777).toBe(0o755);
    outsideIntact();
  });
});
