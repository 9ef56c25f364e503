/**
 * The template pieces that need no service: the search for setup-only values in a stopped build's
 * tree (follows nothing, finds values across read chunks, in names and in unreadable files), and
 * the store (a saved image started from is a sparse copy with the same bytes).
 */
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync, openSync, writeSync, closeSync, ftruncateSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { MAX_DEPTH, searchValues } from '../../src/services/workspaces/templates/search.js';
import { save, startFrom, templateImage } from '../../src/services/workspaces/templates/store.js';

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

const BOUNDS = { maxBytes: 1 << 30, maxMs: 60_000 };
const search = (root: string, values: Array<{ name: string; value: string }>, bounds = BOUNDS) => searchValues(root, values, bounds);

describe('searchValues', () => {
  it('finds nothing in a clean tree and follows no symbolic link out of it', async () => {
    const outside = tmp();
    writeFileSync(join(outside, 'secret.txt'), `x ${VALUE} y`);
    const root = tmp();
    mkdirSync(join(root, 'repo/a'), { recursive: true });
    writeFileSync(join(root, 'repo/a/file.txt'), 'nothing here');
    symlinkSync(join(outside, 'secret.txt'), join(root, 'repo/link-to-file'));
    symlinkSync(outside, join(root, 'repo/link-to-dir'));
    // Relative links climbing out of the tree's layout, and one into the host through /proc.
    symlinkSync(`../../../../../../../../..${join(outside, 'secret.txt')}`, join(root, 'repo/a/climb'));
    symlinkSync('/proc/self/root' + join(outside, 'secret.txt'), join(root, 'repo/proc-link'));
    expect(await search(root, [{ name: 'TOKEN', value: VALUE }])).toMatchObject({ kind: 'clean' });
  });

  it('finds a value deep in an unreadable file, across a read-chunk boundary, and in a name', async () => {
    const root = tmp();
    mkdirSync(join(root, 'home/.cache/x'), { recursive: true });
    writeFileSync(join(root, 'home/.cache/x/npmrc'), `//r/:_authToken=${VALUE}\n`);
    chmodSync(join(root, 'home/.cache/x/npmrc'), 0o000);
    expect(await search(root, [{ name: 'TOKEN', value: VALUE }])).toEqual({ kind: 'hit', name: 'TOKEN', path: 'home/.cache/x/npmrc' });

    const big = tmp();
    const buf = Buffer.alloc((1 << 20) + 100, 'a');
    Buffer.from(VALUE).copy(buf, (1 << 20) - 10); // straddles the first 1 MiB read
    writeFileSync(join(big, 'blob.bin'), buf);
    expect(await search(big, [{ name: 'OTHER', value: 'not-there-at-all' }, { name: 'TOKEN', value: VALUE }])).toEqual({ kind: 'hit', name: 'TOKEN', path: 'blob.bin' });

    const named = tmp();
    writeFileSync(join(named, `cache-${VALUE}`), 'content');
    expect(await search(named, [{ name: 'TOKEN', value: VALUE }])).toEqual({ kind: 'hit', name: 'TOKEN', path: `cache-${VALUE}` });
  });

  it('a link whose text holds the value is a hit, and so is a link (relative, or absolute as the sandbox sees it) to a file of the tree holding it', async () => {
    const text = tmp();
    mkdirSync(join(text, 'repo'));
    symlinkSync(`/nowhere/${VALUE}`, join(text, 'repo/l'));
    expect(await search(text, [{ name: 'TOKEN', value: VALUE }])).toEqual({ kind: 'hit', name: 'TOKEN', path: 'repo/l', via: 'the text of the symbolic link' });

    // The target is read through the link (once: the walk does not read it again under its own name).
    for (const [target, at] of [['../home/.npmrc', 'home/.npmrc'], ['/home/user/.npmrc', 'home/.npmrc'], ['/tmp/../home/user/./.npmrc', 'home/.npmrc'], ['chain', 'home/.npmrc']] as const) {
      const root = tmp();
      mkdirSync(join(root, 'home'));
      mkdirSync(join(root, 'repo'));
      writeFileSync(join(root, 'home/.npmrc'), `token=${VALUE}`);
      symlinkSync('/home/user/.npmrc', join(root, 'repo/chain2'));
      if (target === 'chain') symlinkSync('chain2', join(root, 'repo/a-link'));
      else symlinkSync(target, join(root, 'repo/a-link'));
      const r = await search(root, [{ name: 'TOKEN', value: VALUE }]);
      expect(r.kind, target).toBe('hit');
      if (r.kind === 'hit' && r.path.startsWith('repo/')) expect(r.via).toBe(`the symbolic link's target ${at}`);
    }
    // A loop of links ends (not followed past 40 hops), a link to a directory is not followed.
    const loop = tmp();
    mkdirSync(join(loop, 'repo'));
    symlinkSync('b', join(loop, 'repo/a'));
    symlinkSync('a', join(loop, 'repo/b'));
    symlinkSync('.', join(loop, 'repo/self'));
    expect(await search(loop, [{ name: 'TOKEN', value: VALUE }])).toMatchObject({ kind: 'clean' });
  });

  it('does not cross a mount point inside the tree', async () => {
    const root = tmp();
    mkdirSync(join(root, 'repo/mnt'), { recursive: true });
    const { execFileSync } = await import('node:child_process');
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=1m', 'tpl-unit', join(root, 'repo/mnt')]);
    try {
      writeFileSync(join(root, 'repo/mnt/other-fs'), VALUE);
      symlinkSync('mnt/other-fs', join(root, 'repo/into-mount'));
      expect(await search(root, [{ name: 'TOKEN', value: VALUE }])).toMatchObject({ kind: 'clean' });
    } finally {
      execFileSync('umount', [join(root, 'repo/mnt')]);
    }
  });

  it('a name that is not UTF-8 is searched like any other', async () => {
    const root = tmp();
    const name = Buffer.concat([Buffer.from(root + '/'), Buffer.from([0x66, 0xff, 0xfe, 0x2e, 0x74])]);
    writeFileSync(name, `x${VALUE}x`);
    const r = await search(root, [{ name: 'TOKEN', value: VALUE }]);
    expect(r.kind).toBe('hit');
  });

  it('is bounded: a huge sparse file ends the search at once (incomplete), as do the byte and time bounds', async () => {
    const root = tmp();
    mkdirSync(join(root, 'tmp'));
    const fd = openSync(join(root, 'tmp/huge'), 'w');
    ftruncateSync(fd, 2 ** 40); // 1 TiB, nothing allocated
    closeSync(fd);
    const t0 = Date.now();
    const r = await search(root, [{ name: 'TOKEN', value: VALUE }], { maxBytes: 256 << 20, maxMs: 60_000 });
    expect(Date.now() - t0).toBeLessThan(5_000);
    expect(r).toMatchObject({ kind: 'incomplete', path: 'tmp/huge' });
    expect(r.kind === 'incomplete' && r.reason).toMatch(/^tmp\/huge is 1099511627776 bytes long \(0 allocated\), more than is left/);

    const many = tmp();
    for (let i = 0; i < 4; i++) writeFileSync(join(many, `f${i}`), Buffer.alloc(1 << 20, 'b'));
    expect(await search(many, [{ name: 'TOKEN', value: VALUE }], { maxBytes: 3 << 20, maxMs: 60_000 })).toMatchObject({ kind: 'incomplete' });
    expect(await search(many, [{ name: 'TOKEN', value: VALUE }], { maxBytes: 5 << 20, maxMs: 60_000 })).toMatchObject({ kind: 'clean', files: 4 });
    expect(await search(many, [{ name: 'TOKEN', value: VALUE }], { maxBytes: 5 << 20, maxMs: -1 })).toMatchObject({ kind: 'incomplete', reason: expect.stringMatching(/time bound/) });
  });

  it('a tree nested deeper than MAX_DEPTH is incomplete, not a crash', async () => {
    const root = tmp();
    let p = root;
    const parts: string[] = [];
    for (let i = 0; i <= MAX_DEPTH + 1; i++) parts.push('d');
    // Made with relative mkdirs (the full path passes PATH_MAX long before the kernel's own limit).
    const { execFileSync } = await import('node:child_process');
    execFileSync('bash', ['-c', `cd "$1" && for i in $(seq ${parts.length}); do mkdir d && cd d || exit 1; done`, '_', root]);
    p = root;
    expect(await search(p, [{ name: 'TOKEN', value: VALUE }])).toMatchObject({ kind: 'incomplete', reason: expect.stringMatching(/deeper than 256/) });
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
