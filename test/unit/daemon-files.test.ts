/**
 * Host-level tests of the daemon's file methods (src/sandbox/daemon/files/*): each method module is
 * called directly on a temporary directory, no sandbox. The end-to-end behaviour through MCP is in
 * test/e2e/files.test.ts; these pin the semantics and the hostile cases at the method level.
 */
import { createHash } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import { existsSync, lstatSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, readlinkSync, rmSync, statSync, symlinkSync, writeFileSync, chmodSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { DaemonClient } from '../../src/sandbox/client.js';
import { fileMethods } from '../../src/sandbox/daemon/files/index.js';
import { startServer } from '../../src/sandbox/daemon/server.js';
import { FrameReader, bodyHeader } from '../../src/sandbox/daemon/protocol.js';
import { methodCaller } from './daemon-methods.js';

const sha = (s: string | Buffer) => createHash('sha256').update(s).digest('hex');

let base: string;
let root: string;
let outside: string;
let changed: string[][];
let methods: ReturnType<typeof fileMethods>['methods'];

const { call, refusal } = methodCaller(() => methods);

beforeEach(() => {
  base = mkdtempSync(join(tmpdir(), 'atelier-daemon-files-'));
  root = join(base, 'ws');
  outside = join(base, 'outside');
  mkdirSync(root);
  mkdirSync(outside);
  writeFileSync(join(outside, 'secret.txt'), 'TOP SECRET\n');
  changed = [];
  methods = fileMethods({ root, onChange: (rels) => changed.push(rels) }).methods;
});
afterEach(() => rmSync(base, { recursive: true, force: true }));

describe('fs.write and fs.read', () => {
  it('round-trips text byte for byte with its SHA-256, creating parents, and tells the listener', async () => {
    const text = 'line one\r\nzwei ü 😀\n\tend';
    const w = await call('fs.write', { path: 'a/b/c.txt', content: text });
    expect(w).toEqual({ path: 'a/b/c.txt', realPath: 'a/b/c.txt', sha256: sha(text), size: Buffer.byteLength(text), created: true, mode: '0644' });
    expect(readFileSync(join(root, 'a/b/c.txt'), 'utf8')).toBe(text);
    expect(changed).toEqual([['a/b/c.txt']]);
    const r = await call('fs.read', { path: './a//b/c.txt' });
    expect(r).toMatchObject({ path: './a//b/c.txt', realPath: 'a/b/c.txt', encoding: 'utf-8', content: text, sha256: sha(text), eof: true, offset: 0 });
    // No temporary file is left beside the target.
    expect(execFileSync('ls', ['-A', join(root, 'a/b')], { encoding: 'utf8' }).trim()).toBe('c.txt');
  });

  it('reads binary content as base64 and keeps the mode of a replaced file', async () => {
    const bin = Buffer.from([0, 1, 2, 255, 254, 10]);
    writeFileSync(join(root, 'x.bin'), bin);
    const r = await call('fs.read', { path: 'x.bin' });
    expect(r.encoding).toBe('base64');
    expect(Buffer.from(r.content, 'base64').equals(bin)).toBe(true);
    writeFileSync(join(root, 'run.sh'), 'echo 1\n');
    chmodSync(join(root, 'run.sh'), 0o750);
    const w = await call('fs.write', { path: 'run.sh', content: 'echo 2\n' });
    expect(w).toMatchObject({ created: false, mode: '0750' });
    expect(statSync(join(root, 'run.sh')).mode & 0o7777).toBe(0o750);
  });

  it('pages a file on UTF-8 boundaries and refuses a stale cursor hash', async () => {
    const text = 'ab€cd'; // € is three bytes: a page of 3 bytes must stop before it
    writeFileSync(join(root, 'p.txt'), text);
    const p1 = await call('fs.read', { path: 'p.txt', offset: 0, limit: 3 });
    expect(p1).toMatchObject({ content: 'ab', length: 2, nextOffset: 2, eof: false });
    const p2 = await call('fs.read', { path: 'p.txt', offset: p1.nextOffset, limit: 3, expectSha256Prefix: p1.sha256.slice(0, 16) });
    expect(p2).toMatchObject({ content: '€', nextOffset: 5, eof: false });
    writeFileSync(join(root, 'p.txt'), 'changed');
    expect((await refusal('fs.read', { path: 'p.txt', offset: 5, expectSha256Prefix: p1.sha256.slice(0, 16) })).code).toBe('CONFLICT');
    expect((await refusal('fs.read', { path: 'p.txt', offset: 100 })).details.field).toBe('offset');
  });

  it('hands off the open descriptor of a range of 64 KiB or more when asked, holds it until fs.release, and at most 64 at once', async () => {
    const big = 'x'.repeat(70_000);
    writeFileSync(join(root, 'big.txt'), big);
    // The methods run in this process, which other work (vitest's own) opens and closes descriptors
    // in at any time: count only the descriptors open on the file under test, which nothing but the
    // daemon's methods opens. Every read below opens it, so a leak by any of them shows here too.
    const bigPath = join(root, 'big.txt');
    const openOnBig = () =>
      readdirSync('/proc/self/fd')
        .map(Number)
        .filter((fd) => {
          try {
            return readlinkSync(`/proc/self/fd/${fd}`) === bigPath;
          } catch {
            return false; // closed since the listing (the listing's own descriptor among them)
          }
        })
        .sort((a, b) => a - b);
    expect(openOnBig()).toEqual([]);
    const r = await call('fs.read', { path: 'big.txt', offset: 1000, limit: 66_000, handOff: true });
    expect(r).toMatchObject({ offset: 1000, length: 66_000, content: '', eof: false, nextOffset: 67_000, size: 70_000, sha256: sha(big) });
    expect(r.handOff).toEqual({ fd: expect.any(Number), ino: String(statSync(bigPath).ino) });
    expect(openOnBig()).toEqual([r.handOff.fd]);
    expect(await call('fs.release', { fds: [r.handOff.fd] })).toEqual({ released: 1 });
    expect(openOnBig()).toEqual([]);
    // Only what it holds: a second release, any other number, or junk, closes nothing.
    expect(await call('fs.release', { fds: [r.handOff.fd, 0, 1, 2, -1, 'x', 1e9] })).toEqual({ released: 0 });
    expect(await call('fs.release', { fds: 'all' })).toEqual({ released: 0 });
    // Or carried by the next read, released before it opens anything.
    const r2 = await call('fs.read', { path: 'big.txt', limit: 66_000, handOff: true });
    expect(openOnBig()).toEqual([r2.handOff.fd]);
    const r3 = await call('fs.read', { path: 'big.txt', limit: 66_000, handOff: true, release: [r2.handOff.fd] });
    expect(openOnBig()).toEqual([r3.handOff.fd]); // r2's was released before r3 opened the file
    await call('fs.read', { path: 'nope.txt', release: [r3.handOff.fd] }).catch(() => undefined);
    expect(openOnBig()).toEqual([]);
    // Small ranges, and reads that do not ask, come as bytes.
    expect((await call('fs.read', { path: 'big.txt', limit: 65_535, handOff: true })).handOff).toBeUndefined();
    expect((await call('fs.read', { path: 'big.txt', limit: 66_000, offset: 69_000, handOff: true })).handOff).toBeUndefined();
    expect((await call('fs.read', { path: 'big.txt', limit: 66_000 })).handOff).toBeUndefined();
    // A runner that never releases: at most 64 held, then bytes again.
    const held: number[] = [];
    for (let i = 0; i < 70; i++) {
      const x = await call('fs.read', { path: 'big.txt', limit: 66_000, handOff: true });
      if (x.handOff) held.push(x.handOff.fd);
      else expect(x.content).toBe(big.slice(0, 66_000));
    }
    expect(held.length).toBe(64);
    expect(openOnBig()).toEqual([...held].sort((a, b) => a - b));
    expect(await call('fs.release', { fds: held })).toEqual({ released: 64 });
    expect(openOnBig()).toEqual([]);
  });

  it('compares and swaps with expectedSha256: a mismatch changes nothing and names the current hash', async () => {
    await call('fs.write', { path: 'f.txt', content: 'one' });
    const e = await refusal('fs.write', { path: 'f.txt', content: 'two', expectedSha256: sha('other') });
    expect(e.code).toBe('CONFLICT');
    expect(e.details.currentSha256).toBe(sha('one'));
    expect(readFileSync(join(root, 'f.txt'), 'utf8')).toBe('one');
    await call('fs.write', { path: 'f.txt', content: 'two', expectedSha256: sha('one').toUpperCase() });
    expect(readFileSync(join(root, 'f.txt'), 'utf8')).toBe('two');
    expect((await refusal('fs.write', { path: 'new.txt', content: 'x', expectedSha256: sha('x') })).code).toBe('CONFLICT');
    expect(existsSync(join(root, 'new.txt'))).toBe(false);
  });

  it('accepts contentBase64 as the UTF-8 bytes of the text, but not both forms', async () => {
    const text = '\u0001\u0002 control';
    await call('fs.write', { path: 'c.txt', contentBase64: Buffer.from(text).toString('base64') });
    expect(readFileSync(join(root, 'c.txt'), 'utf8')).toBe(text);
    expect((await refusal('fs.write', { path: 'c.txt', content: 'a', contentBase64: 'YQ==' })).code).toBe('INVALID_ARGUMENT');
  });

  it('writes a batch atomically: one failure writes nothing and removes the directories it made', async () => {
    const e = await refusal('fs.writeBatch', { files: [{ path: 'new/dir/a.txt', content: 'a' }, { path: '../escape.txt', content: 'b' }] });
    expect(e.code).toBe('PERMISSION_DENIED');
    expect(e.details.failed).toBe(1);
    expect(existsSync(join(root, 'new'))).toBe(false);
    expect(existsSync(join(base, 'escape.txt'))).toBe(false);
    const ok = await call('fs.writeBatch', { files: [{ path: 'new/a.txt', content: 'a' }, { path: 'new/b.txt', content: 'b' }] });
    expect(ok).toMatchObject({ atomic: true, written: 2, failed: 0 });
    const each = await call('fs.writeBatch', { atomic: false, files: [{ path: 'ok.txt', content: 'a' }, { path: '/abs.txt', content: 'b' }] });
    expect(each).toMatchObject({ atomic: false, written: 1, failed: 1 });
    expect(each.files[1]).toMatchObject({ ok: false, error: { code: 'PERMISSION_DENIED' } });
    expect((await refusal('fs.writeBatch', { files: [{ path: 'd.txt', content: 'a' }, { path: './d.txt', content: 'b' }] })).message).toMatch(/same file/);
  });
});

describe('fs.patch', () => {
  it('replaces exactly one occurrence and says where; zero or several change nothing', async () => {
    writeFileSync(join(root, 'm.ts'), 'const a = 1;\nconst b = 2;\nconst a2 = 1;\n');
    const r = await call('fs.patch', { path: 'm.ts', oldText: 'b = 2', newText: 'b = 3' });
    expect(r).toMatchObject({ replacements: 1, line: 2, column: 7, previousSha256: sha('const a = 1;\nconst b = 2;\nconst a2 = 1;\n') });
    expect(readFileSync(join(root, 'm.ts'), 'utf8')).toBe('const a = 1;\nconst b = 3;\nconst a2 = 1;\n');
    const many = await refusal('fs.patch', { path: 'm.ts', oldText: '= 1;', newText: '= 9;' });
    expect(many).toMatchObject({ code: 'FAILED_PRECONDITION', details: { matches: 2, locations: [{ line: 1, column: 9 }, { line: 3, column: 10 }] } });
    const none = await refusal('fs.patch', { path: 'm.ts', oldText: 'nowhere', newText: 'x' });
    expect(none.details.matches).toBe(0);
    expect((await refusal('fs.patch', { path: 'm.ts', oldText: '', newText: 'x' })).details.field).toBe('oldText');
  });

  it('hints at CRLF line endings when LF oldText does not occur', async () => {
    writeFileSync(join(root, 'w.txt'), 'one\r\ntwo\r\n');
    const e = await refusal('fs.patch', { path: 'w.txt', oldText: 'one\ntwo', newText: 'x' });
    expect(e.message).toMatch(/CRLF/);
  });
});

describe('fs.list, fs.mkdir, fs.move, fs.delete', () => {
  it('lists sorted pages with types and link targets, resumable after a name', async () => {
    for (const n of ['b', 'a', 'c']) writeFileSync(join(root, n), n);
    mkdirSync(join(root, 'dir'));
    symlinkSync('a', join(root, 'link'));
    const p1 = await call('fs.list', { path: '.', limit: 2 });
    expect(p1.entries.map((e) => e.name)).toEqual(['a', 'b']);
    expect(p1).toMatchObject({ total: 5, hasMore: true, last: 'b' });
    const p2 = await call('fs.list', { path: '.', limit: 10, after: 'b' });
    expect(p2.entries.map((e) => [e.name, e.type])).toEqual([['c', 'file'], ['dir', 'directory'], ['link', 'symlink']]);
    expect(p2.entries[2]!.linkTarget).toBe('a');
    expect((await refusal('fs.list', { path: 'a' })).code).toBe('FAILED_PRECONDITION');
  });

  it('makes, moves and deletes without following symlinks', async () => {
    const m = await call('fs.mkdir', { path: 'x/y/z' });
    expect(m).toEqual({ path: 'x/y/z', realPath: 'x/y/z', created: true, createdDirectories: ['x', 'x/y', 'x/y/z'] });
    expect((await refusal('fs.mkdir', { path: 'x', recursive: false })).code).toBe('FAILED_PRECONDITION');
    writeFileSync(join(root, 'x/f.txt'), 'f');
    writeFileSync(join(root, 'g.txt'), 'g');
    expect((await refusal('fs.move', { source: 'g.txt', destination: 'x/f.txt' })).code).toBe('CONFLICT');
    await call('fs.move', { source: 'g.txt', destination: 'x/f.txt', overwrite: true });
    expect(readFileSync(join(root, 'x/f.txt'), 'utf8')).toBe('g');
    symlinkSync(outside, join(root, 'out-link'));
    const d = await call('fs.delete', { path: 'out-link' });
    expect(d).toMatchObject({ type: 'symlink', deleted: true });
    expect(readFileSync(join(outside, 'secret.txt'), 'utf8')).toBe('TOP SECRET\n');
    expect((await refusal('fs.delete', { path: 'x' })).code).toBe('FAILED_PRECONDITION');
    const all = await call('fs.delete', { path: 'x', recursive: true });
    expect(all.removedEntries).toBe(4); // x itself, y, z and f.txt
    expect((await refusal('fs.delete', { path: '.' })).code).toBe('PERMISSION_DENIED');
  });
});

describe('hostile paths', () => {
  it('refuses .., absolute paths, NUL, lone surrogates and over-long paths, naming the field', async () => {
    for (const path of ['../ws/x', 'a/../../x', '/etc/passwd']) {
      const e = await refusal('fs.read', { path });
      expect(e.code).toBe('PERMISSION_DENIED');
      expect(e.details.field).toBe('path');
    }
    expect((await refusal('fs.write', { path: 'a\0b', content: 'x' })).code).toBe('INVALID_ARGUMENT');
    expect((await refusal('fs.write', { path: 'bad\uD800name', content: 'x' })).code).toBe('INVALID_ARGUMENT');
    expect((await refusal('fs.read', { path: 'a/'.repeat(2100) + 'x' })).message).toMatch(/4096/);
    expect((await refusal('fs.read', { path: 'n'.repeat(256) })).code).toBe('INVALID_ARGUMENT');
    expect((await refusal('fs.move', { source: 'a', destination: '../b' })).details.field).toBe('source');
  });

  it('never reads or writes through a symlink that leaves the root, final or in the middle of a path', async () => {
    symlinkSync(join(outside, 'secret.txt'), join(root, 'leak.txt'));
    symlinkSync(outside, join(root, 'outdir'));
    mkdirSync(join(root, 'deep'));
    symlinkSync('../../outside', join(root, 'deep/up'));
    for (const path of ['leak.txt', 'outdir/secret.txt', 'deep/up/secret.txt']) {
      const e = await refusal('fs.read', { path });
      expect(e.code).toBe('PERMISSION_DENIED');
      expect(e.message).not.toContain('TOP SECRET');
    }
    for (const path of ['leak.txt', 'outdir/new.txt', 'deep/up/secret.txt']) {
      expect((await refusal('fs.write', { path, content: 'pwned' })).code).toBe('PERMISSION_DENIED');
    }
    expect((await refusal('fs.patch', { path: 'outdir/secret.txt', oldText: 'TOP', newText: 'x' })).code).toBe('PERMISSION_DENIED');
    expect((await refusal('fs.list', { path: 'outdir' })).code).toBe('PERMISSION_DENIED');
    expect((await refusal('fs.mkdir', { path: 'outdir/made' })).code).toBe('PERMISSION_DENIED');
    expect((await refusal('fs.move', { source: 'deep', destination: 'outdir/moved' })).code).toBe('PERMISSION_DENIED');
    expect(readFileSync(join(outside, 'secret.txt'), 'utf8')).toBe('TOP SECRET\n');
    expect(existsSync(join(outside, 'new.txt')) || existsSync(join(outside, 'made')) || existsSync(join(outside, 'moved'))).toBe(false);
  });

  it('follows symlinks that stay inside (a linked directory in the middle of a path) and reports the real path', async () => {
    mkdirSync(join(root, 'real/sub'), { recursive: true });
    writeFileSync(join(root, 'real/sub/f.txt'), 'inside');
    symlinkSync('real', join(root, 'alias'));
    const r = await call('fs.read', { path: 'alias/sub/f.txt' });
    expect(r).toMatchObject({ content: 'inside', realPath: 'real/sub/f.txt' });
    const w = await call('fs.write', { path: 'alias/sub/g.txt', content: 'g' });
    expect(w.realPath).toBe('real/sub/g.txt');
    expect(lstatSync(join(root, 'alias')).isSymbolicLink()).toBe(true);
    // A dangling link and a loop are refused cleanly.
    symlinkSync('nowhere', join(root, 'dangling'));
    symlinkSync('loop2', join(root, 'loop1'));
    symlinkSync('loop1', join(root, 'loop2'));
    expect((await refusal('fs.read', { path: 'dangling' })).code).toBe('NOT_FOUND');
    expect(['INVALID_ARGUMENT', 'PERMISSION_DENIED', 'CONFLICT']).toContain((await refusal('fs.read', { path: 'loop1' })).code);
    expect(readlinkSync(join(root, 'loop1'))).toBe('loop2');
  });

  it('refuses fifos and devices without blocking, and directories as files', async () => {
    execFileSync('mkfifo', [join(root, 'pipe')]);
    symlinkSync('/dev/zero', join(root, 'zero'));
    expect((await refusal('fs.read', { path: 'pipe' })).details.type).toBe('fifo');
    expect((await refusal('fs.write', { path: 'pipe', content: 'x' })).code).toBe('PERMISSION_DENIED');
    expect((await refusal('fs.read', { path: 'zero' })).code).toBe('PERMISSION_DENIED'); // leaves the root
    mkdirSync(join(root, 'd'));
    expect((await refusal('fs.read', { path: 'd' })).code).toBe('FAILED_PRECONDITION');
  });

  it('handles deeply nested trees and refuses oversized input with the limit named', async () => {
    const deep = Array.from({ length: 300 }, (_, i) => `d${i}`).join('/');
    await call('fs.mkdir', { path: deep });
    await call('fs.write', { path: `${deep}/leaf.txt`, content: 'leaf' });
    expect((await call('fs.read', { path: `${deep}/leaf.txt` })).content).toBe('leaf');
    expect((await call('fs.delete', { path: 'd0', recursive: true })).removedEntries).toBe(301);
    const big = 'x'.repeat(1_048_577);
    expect((await refusal('fs.write', { path: 'big.txt', content: big })).details.limit).toBe(1_048_576);
    expect((await refusal('fs.patch', { path: 'big.txt', oldText: 'x'.repeat(262_145), newText: '' })).details.field).toBe('oldText');
    const many = Array.from({ length: 1001 }, (_, i) => ({ path: `f${i}`, content: '' }));
    expect((await refusal('fs.writeBatch', { files: many })).details.field).toBe('files');
    expect((await refusal('fs.read', { path: 'x', limit: 1_048_577 })).details.field).toBe('limit');
    expect((await refusal('fs.list', { path: '.', limit: 0 })).details.field).toBe('limit');
  });

  it('reads a 1 MiB file whole in one call and no more', async () => {
    writeFileSync(join(root, 'mib.txt'), 'a'.repeat(1_048_576 + 10));
    const r = await call('fs.read', { path: 'mib.txt', limit: 1_048_576 });
    expect(r).toMatchObject({ length: 1_048_576, eof: false, nextOffset: 1_048_576, size: 1_048_586 });
  });
});

describe('body frames on the daemon socket', () => {
  it('reassembles raw bodies and their reply lines whatever the chunking, and refuses oversized frames', () => {
    const body = Buffer.from('x\n#42\n{"not":"a line"}\n' + 'é'.repeat(1000));
    const wire = Buffer.concat([
      Buffer.from('{"id":1,"event":"progress","data":{}}\n'),
      Buffer.from(bodyHeader(body.length)),
      body,
      Buffer.from('{"id":2,"result":{"content":""},"body":{"field":"content","encoding":"utf-8"}}\n{"id":3,"result":null}\n'),
      Buffer.from(bodyHeader(0)),
      Buffer.from('{"id":4,"result":{}}\n'),
    ]);
    for (const size of [1, 2, 7, 64, wire.length]) {
      const reader = new FrameReader();
      const got: Array<{ line: string; body?: Buffer }> = [];
      for (let i = 0; i < wire.length; i += size) got.push(...reader.push(wire.subarray(i, i + size)));
      expect(got.map((m) => JSON.parse(m.line).id)).toEqual([1, 2, 3, 4]);
      expect(got[1]!.body!.equals(body)).toBe(true);
      expect(got[0]!.body).toBeUndefined();
      expect(got[2]!.body).toBeUndefined();
      expect(got[3]!.body!.length).toBe(0);
    }
    // As the runner's client reads: every chunk in the same memory (net onread), overwritten after
    // each push, and bodies in blocks bigger than they are: nothing kept by reference, only n bytes used.
    for (const size of [1, 2, 7, 64, wire.length]) {
      const blocks: Buffer[] = [];
      const reader = new FrameReader(undefined, true, (n) => {
        const b = Buffer.alloc(n + 100, 0xee);
        blocks.push(b);
        return b;
      });
      const into = Buffer.alloc(size);
      const got: Array<{ line: string; body?: Buffer }> = [];
      for (let i = 0; i < wire.length; i += size) {
        const n = wire.copy(into, 0, i, i + size);
        got.push(...reader.push(into.subarray(0, n)));
        into.fill(0x21); // the next read lands here
      }
      expect(got.map((m) => JSON.parse(m.line).id)).toEqual([1, 2, 3, 4]);
      expect(got[1]!.body!.equals(body)).toBe(true);
      expect(got[1]!.body!.buffer).toBe(blocks[0]!.buffer);
      expect(got[3]!.body!.length).toBe(0);
    }
    expect(() => new FrameReader(100).push(Buffer.from(bodyHeader(101)))).toThrow(/body frame/);
    expect(() => new FrameReader().push(Buffer.from('#-1\n'))).toThrow(/body frame/);
    expect(() => new FrameReader().push(Buffer.from('#12abc\n'))).toThrow(/body frame/);
  });
});

describe('fs.read over the daemon socket', () => {
  it('delivers text and binary bodies byte for byte to the runner client, interleaved with other replies', async () => {
    const text = ('0123456789abcdef'.repeat(4) + '\n').repeat(16384).slice(0, 1_048_576);
    const bin = Buffer.alloc(1_048_576);
    for (let i = 0; i < bin.length; i++) bin[i] = (i * 7919) & 0xff;
    writeFileSync(join(root, 'big.txt'), text);
    writeFileSync(join(root, 'big.bin'), bin);
    const server = await startServer(join(base, 'd.sock'), methods);
    const client = new DaemonClient(join(base, 'd.sock'));
    try {
      const [t, b, l, missing, small] = await Promise.all([
        client.request('fs.read', { path: 'big.txt', limit: 1_048_576 }),
        client.request('fs.read', { path: 'big.bin', limit: 1_048_576 }),
        client.request('fs.list', { path: '.' }),
        client.request('fs.read', { path: 'nope.txt' }).catch((e: unknown) => e),
        client.request('fs.read', { path: 'big.txt', offset: 1_048_570, limit: 3 }),
      ]);
      expect(t).toMatchObject({ encoding: 'utf-8', length: 1_048_576, sha256: sha(text) });
      expect(t.content === text).toBe(true);
      expect(b.encoding).toBe('base64');
      expect(Buffer.from(b.content, 'base64').equals(bin)).toBe(true);
      expect(l.entries.map((e) => e.name)).toEqual(['big.bin', 'big.txt']);
      expect(missing).toMatchObject({ code: 'NOT_FOUND' });
      expect(small).toMatchObject({ content: text.slice(1_048_570, 1_048_573), length: 3 });
    } finally {
      client.close();
      await new Promise((r) => server.close(r));
    }
  });
});
