/**
 * The native escaper of large results (src/mcp/wire-native.ts) against the plain serialization,
 * byte for byte, and the JavaScript path it stands in for: the addon is built here with gcc and
 * Node's headers (skipped, and said so, on a machine without them: the service then escapes in
 * JavaScript, tested below with the addon unloaded).
 */
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WIRE_NATIVE_HASH, buildWireNative, loadWireNative, loadWireNativeFile, setWireNative, wireNative, type WireNative } from '../../src/mcp/wire-native.js';
import { pooledBlocks, wireText } from '../../src/mcp/wire-text.js';
import { LARGE_RESULT_CHARS } from '../../src/mcp/registry.js';
import { copyText, defineRawText, leaseBlock, rawText, releaseRawText } from '../../src/core/raw-text.js';

const twice = (s: string) => Buffer.from(JSON.stringify(JSON.stringify(s)).slice(3, -3), 'utf8');
const wire = (w: { pieces: Buffer[] }) => `"${Buffer.concat(w.pieces).toString('utf8')}"`;

const compilerPresent = (() => {
  try {
    execFileSync('gcc', ['--version'], { stdio: 'ignore' });
    return [path.resolve(path.dirname(process.execPath), '../include/node'), '/usr/include/node'].some((d) => existsSync(path.join(d, 'node_api.h')));
  } catch {
    return false;
  }
})();

const every = Array.from({ length: 0x80 }, (_, c) => String.fromCharCode(c)).join('');
/** Several MiB of every ASCII character, controls included, in runs and alone. */
const hostileUnit = every + '\\"\\\\"\n\t\r' + '"'.repeat(40) + '\\'.repeat(33) + '\u0001'.repeat(17) + 'plain text of no interest '.repeat(3);
const hostile = hostileUnit.repeat(Math.ceil((3 * 1048576 + 1000) / hostileUnit.length));

let dir: string;
let addon: WireNative;

describe.skipIf(!compilerPresent)('the addon (built with gcc and Node\'s headers)', () => {
  beforeAll(async () => {
    dir = mkdtempSync(path.join(tmpdir(), 'atelier-wire-native-'));
    const file = await buildWireNative(path.join(dir, WIRE_NATIVE_HASH));
    addon = loadWireNativeFile(file)!;
    expect(addon).not.toBeNull();
  }, 120_000);
  afterAll(() => {
    setWireNative(null);
    rmSync(dir, { recursive: true, force: true });
  });

  describe('escapeTwice (a string)', () => {
    it.each([
      ['empty', ''],
      ['plain ASCII', 'abc'],
      ['every ASCII character, controls and DEL included', every.repeat(3)],
      ['quotes and backslashes, adjacent', '\\"\\\\""\\'.repeat(50)],
      ['long runs of one escaped character', '"'.repeat(5000) + '\\'.repeat(5001) + '\u0000'.repeat(4999) + '\n'.repeat(77)],
      ['non-ASCII', 'héllo “wörld” 日本語 ✓ \u2028\u2029 😀\n"'],
      ['lone surrogates, first, last, paired the wrong way round', '\ud800a\udc00b\udbff\ud800\ud800\udc00\udc00\ud83d'],
      ['an escape sequence spelled out', '\\u0001 \\n \\" \\\\'],
    ])('%s: the serializer twice', (_, s) => {
      expect(addon.escapeTwice(s).equals(twice(s))).toBe(true);
    });

    it('every byte value 0-127 alone, in runs, and at every position of a 16- and 8-character block', () => {
      for (let c = 0; c < 0x80; c++) {
        const ch = String.fromCharCode(c);
        for (let at = 0; at < 40; at++) {
          const s = 'a'.repeat(at) + ch + 'b'.repeat(40 - at);
          expect(addon.escapeTwice(s).equals(twice(s)), `char ${c} at ${at}`).toBe(true);
          const t = 'ä'.repeat(at) + ch + 'b'.repeat(40 - at); // the same through the UTF-16 path
          expect(addon.escapeTwice(t).equals(twice(t)), `char ${c} at ${at} (UTF-16)`).toBe(true);
        }
        expect(addon.escapeTwice(ch.repeat(1000)).equals(twice(ch.repeat(1000)))).toBe(true);
      }
    });

    it('every UTF-16 code unit, alone and between ASCII', () => {
      for (let u = 0; u < 0x10000; u++) {
        const ch = String.fromCharCode(u);
        const s = `ab${ch}cd${ch}0123456789abcdefghij`;
        if (!addon.escapeTwice(s).equals(twice(s))) expect.fail(`code unit ${u.toString(16)}`);
      }
    });

    it('several MiB of hostile text, ASCII and not', () => {
      expect(hostile.length).toBeGreaterThan(3 * 1048576);
      expect(addon.escapeTwice(hostile).equals(twice(hostile))).toBe(true);
      const mixed = hostile.slice(0, 1048576) + '\ud800 ü 😀' + hostile.slice(0, 1048576);
      expect(addon.escapeTwice(mixed).equals(twice(mixed))).toBe(true);
    });

    it('refuses what is not a string', () => {
      expect(() => (addon.escapeTwice as (x: unknown) => Buffer)(42)).toThrow(/string/);
    });
  });

  describe('escapeTwiceAsciiInto (the bytes of ASCII text)', () => {
    it('is the serializer twice, for every length around the block sizes, and writes nothing past its length', () => {
      for (const tail of ['', '"', '\\', '\u0001', '\n', 'x']) {
        for (let len = 0; len < 70; len++) {
          const s = every.repeat(2).slice(len % 50, (len % 50) + len) + tail;
          const want = twice(s);
          const space = Buffer.alloc(want.length + 64, 0xee);
          const n = addon.escapeTwiceAsciiInto(Buffer.from(s, 'latin1'), space.subarray(0, want.length));
          expect(n).toBe(want.length);
          expect(space.subarray(0, n).equals(want)).toBe(true);
          expect(space.subarray(n).every((b) => b === 0xee), `nothing written past ${n}`).toBe(true);
        }
      }
    });

    it('says the length it needs, and writes nothing past the target, when the target is too short', () => {
      const s = Buffer.from('a"b\\c\n'.repeat(100), 'latin1');
      for (const size of [0, 10, 23, 24, 25, 100, 599]) {
        const space = Buffer.alloc(size + 64, 0xee);
        const n = addon.escapeTwiceAsciiInto(s, space.subarray(0, size));
        expect(n).toBe(twice(s.toString('latin1')).length);
        expect(space.subarray(size).every((b) => b === 0xee)).toBe(true);
      }
      // Non-ASCII after the point where the target ran out is still found.
      const late = Buffer.concat([s, Buffer.from('é')]);
      expect(addon.escapeTwiceAsciiInto(late, Buffer.alloc(10))).toBe(-1);
    });

    it('answers -1 for a byte that is not ASCII, wherever it is', () => {
      for (let at = 0; at < 40; at++) {
        const b = Buffer.alloc(40, 0x61);
        b[at] = 0x80 + at;
        expect(addon.escapeTwiceAsciiInto(b, Buffer.alloc(100))).toBe(-1);
      }
    });

    it('several MiB of hostile ASCII', () => {
      const want = twice(hostile);
      const target = Buffer.allocUnsafe(want.length);
      expect(addon.escapeTwiceAsciiInto(Buffer.from(hostile, 'latin1'), target)).toBe(want.length);
      expect(target.equals(want)).toBe(true);
    });
  });

  describe('base64Into', () => {
    it('is Buffer.toString("base64") for every length up to 600 and for 3 MiB', () => {
      const bytes = Buffer.from(Array.from({ length: 3 * 1048576 + 2 }, (_, i) => (i * 7919 + (i >> 8)) & 255));
      const target = Buffer.alloc(4 * 1048576 + 16);
      for (let len = 0; len < 600; len++) {
        const n = addon.base64Into(bytes.subarray(len, len * 2), target);
        expect(target.subarray(0, n).toString('latin1')).toBe(bytes.subarray(len, len * 2).toString('base64'));
      }
      const n = addon.base64Into(bytes, target);
      expect(target.subarray(0, n).toString('latin1')).toBe(bytes.toString('base64'));
      const small = Buffer.alloc(3, 0xee);
      expect(addon.base64Into(bytes.subarray(0, 10), small)).toBe(16);
      expect(small.every((b) => b === 0xee)).toBe(true);
    });

    it('is Buffer.toString("base64") for random bytes at every offset and length around the 12-byte SIMD step, writing nothing past its length', () => {
      const bytes = randomBytes(4096);
      const target = Buffer.alloc(8192);
      const seen = new Set<string>();
      for (let offset = 0; offset < 16; offset++) {
        for (let len = 0; len < 200; len++) {
          target.fill(0xee);
          const src = bytes.subarray(offset * 200 + offset, offset * 200 + offset + len);
          const n = addon.base64Into(src, target);
          const text = target.subarray(0, n).toString('latin1');
          expect(text).toBe(src.toString('base64'));
          expect(target.subarray(n).every((b) => b === 0xee)).toBe(true);
          for (const ch of text) seen.add(ch);
        }
      }
      expect(seen.size).toBe(65); // the 64 symbols and '='
    });
  });

  describe('wireText with the addon loaded', () => {
    beforeAll(() => setWireNative(addon));
    afterAll(() => setWireNative(null));

    const raw = (fields: Record<string, unknown>, key: string, bytes: Buffer, encoding: 'utf-8' | 'base64') => {
      const r: Record<string, unknown> = { ...fields };
      defineRawText(r, key, bytes, encoding);
      return r;
    };

    it('a text field still the daemon\'s bytes: escaped from the bytes, the plain serialization byte for byte', () => {
      const text = hostile.slice(0, 1048576 + 7);
      const result = raw({ path: 'a "b".txt', encoding: 'utf-8', content: '', eof: true }, 'content', Buffer.from(text, 'latin1'), 'utf-8');
      const w = wireText(result, LARGE_RESULT_CHARS)!;
      expect(rawText(result, 'content')).toBeDefined(); // not read as a string on the way
      expect(wire(w)).toBe(JSON.stringify(JSON.stringify({ path: 'a "b".txt', encoding: 'utf-8', content: text, eof: true })));
      w.release();
    });

    it('base64 content from the bytes; text outside ASCII read as a string; both the plain serialization', () => {
      const bytes = Buffer.from(Array.from({ length: 300_001 }, (_, i) => (i * 31) & 255));
      const bin = raw({ path: 'x.bin', encoding: 'base64', content: '', eof: false }, 'content', bytes, 'base64');
      expect(wire(wireText(bin, LARGE_RESULT_CHARS)!)).toBe(JSON.stringify(JSON.stringify({ path: 'x.bin', encoding: 'base64', content: bytes.toString('base64'), eof: false })));
      const text = ('ü "x" \\ \u0001 😀\n' + every).repeat(3000);
      const utf = raw({ path: 'u.txt', content: '' }, 'content', Buffer.from(text, 'utf8'), 'utf-8');
      expect(wire(wireText(utf, LARGE_RESULT_CHARS)!)).toBe(JSON.stringify(JSON.stringify({ path: 'u.txt', content: text })));
    });

    it('a field replaced after it came (say, by redaction) is the replacement, not the bytes', () => {
      const text = 'secret-value '.repeat(10_000);
      const result = raw({ content: '' }, 'content', Buffer.from(text, 'latin1'), 'utf-8');
      result.content = text.replaceAll('secret-value', '[redacted:S]');
      expect(rawText(result, 'content')).toBeUndefined();
      expect(wire(wireText(result, LARGE_RESULT_CHARS)!)).toBe(JSON.stringify(JSON.stringify({ content: text.replaceAll('secret-value', '[redacted:S]') })));
    });

    it('keeps to the plain rule about what is large (a small raw field stays a plain result)', () => {
      const small = raw({ content: '' }, 'content', Buffer.from('x'.repeat(LARGE_RESULT_CHARS - 100)), 'utf-8');
      expect(wireText(small, LARGE_RESULT_CHARS)).toBeUndefined();
      expect(pooledBlocks()).toBeLessThanOrEqual(4);
    });

    it('reuses output memory once released, and only the written part of it is sent', () => {
      const big = raw({ content: '' }, 'content', Buffer.from('y'.repeat(200_000)), 'utf-8');
      const first = wireText(big, LARGE_RESULT_CHARS)!;
      first.release();
      const pooled = pooledBlocks();
      expect(pooled).toBeGreaterThan(0);
      const small = raw({ content: '' }, 'content', Buffer.from('"z"'.repeat(30_000)), 'utf-8');
      const second = wireText(small, LARGE_RESULT_CHARS)!;
      expect(pooledBlocks()).toBe(pooled - 1); // the released block, reused
      expect(wire(second)).toBe(JSON.stringify(JSON.stringify({ content: '"z"'.repeat(30_000) })));
      second.release();
      second.release(); // twice is harmless
      expect(pooledBlocks()).toBe(pooled);
    });
  });

  it('a file that is not the addon does not load, and nothing changes', () => {
    const bogus = path.join(dir, 'bogus.node');
    writeFileSync(bogus, 'not a shared object');
    setWireNative(null);
    expect(loadWireNativeFile(bogus)).toBeNull();
    expect(loadWireNativeFile(path.join(dir, 'absent.node'))).toBeNull();
    expect(wireNative()).toBeNull();
  });
});

describe('without the addon (JavaScript)', () => {
  beforeAll(() => setWireNative(null));

  it('without gcc the addon is not built: loading answers null, says why, never throws, and leaves JavaScript in use', async () => {
    const cache = mkdtempSync(path.join(tmpdir(), 'atelier-wire-nogcc-'));
    const pathBefore = process.env.PATH;
    process.env.PATH = path.join(cache, 'no-bin');
    try {
      const why: string[] = [];
      await expect(loadWireNative(cache, (m) => why.push(m))).resolves.toBeNull();
      expect(why.join('\n')).toMatch(/cannot build the wire-text addon|headers/);
      expect(wireNative()).toBeNull();
    } finally {
      process.env.PATH = pathBefore;
      rmSync(cache, { recursive: true, force: true });
    }
  });

  it('escapes the same bytes: raw fields are read as strings', () => {
    expect(wireNative()).toBeNull();
    const text = hostile.slice(0, 1048576 + 3);
    const result: Record<string, unknown> = { path: 'p', content: '', eof: true };
    defineRawText(result, 'content', Buffer.from(text, 'latin1'), 'utf-8');
    expect(wire(wireText(result, LARGE_RESULT_CHARS)!)).toBe(JSON.stringify(JSON.stringify({ path: 'p', content: text, eof: true })));
    const bytes = Buffer.from(Array.from({ length: 100_000 }, (_, i) => (i * 13) & 255));
    const bin: Record<string, unknown> = { encoding: 'base64', content: '' };
    defineRawText(bin, 'content', bytes, 'base64');
    expect(wire(wireText(bin, LARGE_RESULT_CHARS)!)).toBe(JSON.stringify(JSON.stringify({ encoding: 'base64', content: bytes.toString('base64') })));
  });
});

describe('raw text fields (core/raw-text.ts)', () => {
  it('read as the decoded string, once, by anything (JSON, spread, entries)', () => {
    const text = 'héllo\n"x"';
    const o: Record<string, unknown> = { a: 1, content: '', z: 2 };
    defineRawText(o, 'content', Buffer.from(text, 'utf8'), 'utf-8');
    expect(JSON.stringify(o)).toBe(JSON.stringify({ a: 1, content: text, z: 2 })); // key order kept
    expect({ ...o }).toEqual({ a: 1, content: text, z: 2 });
    expect(o.content).toBe(text);
    expect(rawText(o, 'content')).toMatchObject({ encoding: 'utf-8' });
    const b: Record<string, unknown> = {};
    defineRawText(b, 'content', Buffer.from([0, 1, 2, 255]), 'base64');
    expect(b.content).toBe('AAEC/w==');
  });

  it('bytes in a pooled block go back once released; the field then refuses to be read (never another call\'s bytes)', () => {
    const block = leaseBlock(100_000);
    const bytes = block.subarray(0, 5);
    bytes.write('hello', 'latin1');
    const a: Record<string, unknown> = { content: '' };
    defineRawText(a, 'content', bytes, 'utf-8');
    const b: Record<string, unknown> = { content: '' };
    copyText(a, 'content', b);
    const before = pooledBlocks();
    releaseRawText(b, 'content');
    expect(pooledBlocks()).toBe(before + 1);
    expect(() => a.content).toThrow(/released/);
    expect(() => JSON.stringify(b)).toThrow(/released/);
    expect(rawText(a, 'content')).toBeUndefined();
    releaseRawText(a, 'content'); // once only
    expect(pooledBlocks()).toBe(before + 1);
    // A field read before its release keeps its text; bytes not from the pool are never given back.
    const c: Record<string, unknown> = {};
    defineRawText(c, 'content', leaseBlock(10).subarray(0, 0), 'utf-8');
    expect(c.content).toBe('');
    releaseRawText(c, 'content');
    expect(c.content).toBe('');
    const d: Record<string, unknown> = {};
    defineRawText(d, 'content', Buffer.from('own'), 'utf-8');
    releaseRawText(d, 'content');
    expect(d.content).toBe('own');
  });

  it('copyText keeps the bytes (and the target\'s key order); a plain field is copied as it is', () => {
    const from: Record<string, unknown> = {};
    defineRawText(from, 'content', Buffer.from('abc'), 'utf-8');
    const to: Record<string, unknown> = { first: 1, content: '', last: 2 };
    copyText(from, 'content', to);
    expect(rawText(to, 'content')?.bytes.toString()).toBe('abc');
    expect(Object.keys(to)).toEqual(['first', 'content', 'last']);
    const plain: Record<string, unknown> = { content: 'just a string' };
    const to2: Record<string, unknown> = {};
    copyText(plain, 'content', to2);
    expect(to2).toEqual({ content: 'just a string' });
    expect(rawText(to2, 'content')).toBeUndefined();
    expect(rawText({ content: 'x' }, 'content')).toBeUndefined();
  });
});
