import { describe, expect, it } from 'vitest';
import { HeadTailCapture } from '../../src/sandbox/daemon/output.js';
import { LineSplitter, decodeBody } from '../../src/sandbox/daemon/protocol.js';

describe('HeadTailCapture', () => {
  it('keeps everything under the limit', () => {
    const c = new HeadTailCapture(100);
    c.push(Buffer.from('hello '));
    c.push(Buffer.from('world'));
    expect(c.text()).toBe('hello world');
    expect(c.truncated).toBe(false);
    expect(c.totalBytes).toBe(11);
  });

  it('keeps head and tail and marks the omitted middle', () => {
    const c = new HeadTailCapture(10);
    for (let i = 0; i < 100; i++) c.push(Buffer.from(String(i % 10)));
    expect(c.truncated).toBe(true);
    expect(c.totalBytes).toBe(100);
    expect(c.text()).toBe('01234\n[... 90 bytes omitted ...]\n56789');
  });

  it('handles chunks larger than the whole budget', () => {
    const c = new HeadTailCapture(8);
    c.push(Buffer.from('abcdefghijklmnopqrstuvwxyz'));
    c.push(Buffer.from('0123'));
    expect(c.text()).toBe('abcd\n[... 22 bytes omitted ...]\n0123');
  });

  it('never splits a UTF-8 character at the marker', () => {
    const c = new HeadTailCapture(6);
    c.push(Buffer.from('ééééééééé')); // 2 bytes each
    const text = c.text();
    expect(text).not.toContain('\uFFFD');
    expect(text).toMatch(/^é+\n\[\.\.\. \d+ bytes omitted \.\.\.\]\né+$/);
  });

  it('holds a bounded amount of memory however much is pushed', () => {
    const c = new HeadTailCapture(1024);
    const chunk = Buffer.alloc(4096, 120);
    for (let i = 0; i < 10_000; i++) c.push(chunk);
    expect(c.totalBytes).toBe(4096 * 10_000);
    expect(c.text().length).toBeLessThan(1100);
  });

  it('bytes() is what text() decodes from, for any bytes, chunking and limit (large output crosses the daemon socket as those bytes)', () => {
    // A seeded generator: the same cases every run. Bytes drawn to hit UTF-8's edges: ASCII, valid
    // two-, three- and four-byte characters, lone continuation bytes, cut sequences, 0xC0/0xF8-0xFF.
    let seed = 0x2545f491;
    const rnd = (n: number) => {
      seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
      return seed % n;
    };
    const pieces = [Buffer.from('a'), Buffer.from('\n'), Buffer.from('é'), Buffer.from('漢'), Buffer.from('😀'), Buffer.from([0x80]), Buffer.from([0xe6, 0xbc]), Buffer.from([0xf0, 0x9f]), Buffer.from([0xc0]), Buffer.from([0xff]), Buffer.from('[... 3 bytes omitted ...]')];
    for (let round = 0; round < 400; round++) {
      const parts: Buffer[] = [];
      const length = rnd(400);
      for (let i = 0; i < length; i++) parts.push(pieces[rnd(pieces.length)]!);
      const all = Buffer.concat(parts);
      const c = new HeadTailCapture(2 + rnd(300));
      for (let at = 0; at < all.length; ) {
        const n = 1 + rnd(40);
        c.push(all.subarray(at, at + n));
        at += n;
      }
      const bytes = c.bytes();
      expect(decodeBody(bytes, 'utf-8')).toBe(c.text());
      expect(bytes.toString('utf8')).toBe(c.text());
      if (!c.truncated) expect(bytes.equals(all)).toBe(true);
      expect(c.keptBytes).toBeLessThanOrEqual(all.length);
    }
  });
});

describe('LineSplitter', () => {
  it('splits across chunk boundaries', () => {
    const s = new LineSplitter();
    expect(s.push(Buffer.from('{"a":1}\n{"b"'))).toEqual(['{"a":1}']);
    expect(s.push(Buffer.from(':2}\n\n'))).toEqual(['{"b":2}', '']);
  });

  it('refuses a line longer than the limit', () => {
    const s = new LineSplitter(16);
    expect(() => s.push(Buffer.alloc(10, 97))).not.toThrow();
    expect(() => s.push(Buffer.alloc(10, 97))).toThrow(/too long/);
  });
});
