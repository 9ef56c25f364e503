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
    const short = member('node_modules/f', '0', { size: 1 << 30 });
    expect(await refusal(Readable.from([Buffer.concat([member('node_modules/', '5'), short.subarray(0, 512), Buffer.alloc(512)])]))).toMatch(/ended inside/);
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
