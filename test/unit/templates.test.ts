/**
 * The template pieces that need no service: the search for setup-only values in a stopped build's
 * tree (follows nothing, finds values across read chunks, in names and in unreadable files), and
 * the store (a saved image started from is a sparse copy with the same bytes).
 */
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync, openSync, writeSync, closeSync, ftruncateSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { findValues } from '../../src/services/templates/service.js';
import { save, startFrom, templateImage } from '../../src/services/templates/store.js';

const dirs: string[] = [];
const tmp = () => {
  const d = mkdtempSync(join(tmpdir(), 'tpl-unit-'));
  dirs.push(d);
  return d;
};
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

const VALUE = 'setup-only-value-0123456789';

describe('findValues', () => {
  it('finds nothing in a clean tree and follows no symbolic link out of it', async () => {
    const outside = tmp();
    writeFileSync(join(outside, 'secret.txt'), `x ${VALUE} y`);
    const root = tmp();
    mkdirSync(join(root, 'repo/a'), { recursive: true });
    writeFileSync(join(root, 'repo/a/file.txt'), 'nothing here');
    symlinkSync(join(outside, 'secret.txt'), join(root, 'repo/link-to-file'));
    symlinkSync(outside, join(root, 'repo/link-to-dir'));
    expect(await findValues(root, [{ name: 'TOKEN', value: VALUE }])).toBeNull();
  });

  it('finds a value deep in an unreadable file, across a read-chunk boundary, and in a name', async () => {
    const root = tmp();
    mkdirSync(join(root, 'home/.cache/x'), { recursive: true });
    writeFileSync(join(root, 'home/.cache/x/npmrc'), `//r/:_authToken=${VALUE}\n`);
    chmodSync(join(root, 'home/.cache/x/npmrc'), 0o000);
    expect(await findValues(root, [{ name: 'TOKEN', value: VALUE }])).toEqual({ name: 'TOKEN', path: 'home/.cache/x/npmrc' });

    const big = tmp();
    const buf = Buffer.alloc((1 << 20) + 100, 'a');
    Buffer.from(VALUE).copy(buf, (1 << 20) - 10); // straddles the first 1 MiB read
    writeFileSync(join(big, 'blob.bin'), buf);
    expect(await findValues(big, [{ name: 'OTHER', value: 'not-there-at-all' }, { name: 'TOKEN', value: VALUE }])).toEqual({ name: 'TOKEN', path: 'blob.bin' });

    const named = tmp();
    writeFileSync(join(named, `cache-${VALUE}`), 'content');
    expect(await findValues(named, [{ name: 'TOKEN', value: VALUE }])).toEqual({ name: 'TOKEN', path: `cache-${VALUE}` });
  });
});

describe('store', () => {
  it('saves an image and starts a new one from it as a sparse copy with the same bytes', async () => {
    const data = tmp();
    mkdirSync(join(data, 'disks'));
    const img = join(data, 'disks', 'build.img');
    const fd = openSync(img, 'w');
    ftruncateSync(fd, 64 * 1024 * 1024);
    writeSync(fd, Buffer.from('start'), 0, 5, 0);
    writeSync(fd, Buffer.from('middle'), 0, 6, 32 * 1024 * 1024);
    closeSync(fd);
    const id = 'tpl_abcdefghijklmnopqrstuvwx';
    const { sizeBytes } = await save(data, id, img);
    expect(sizeBytes).toBeLessThan(1024 * 1024);
    expect((statSync(join(data, 'templates')).mode & 0o777).toString(8)).toBe('700');
    const to = join(data, 'disks', 'ws_copy.img');
    const r = await startFrom(data, id, to);
    expect(['reflink', 'sparse-copy']).toContain(r.method);
    expect(statSync(to).size).toBe(64 * 1024 * 1024);
    expect(statSync(to).blocks * 512).toBeLessThan(1024 * 1024);
    expect(readFileSync(to).equals(readFileSync(templateImage(data, id)))).toBe(true);
    expect(() => templateImage(data, '../escape')).toThrow();
  });
});
