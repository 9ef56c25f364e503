import { describe, expect, it } from 'vitest';
import { HeadTailCapture } from '../../src/sandbox/daemon/output.js';
import { LineSplitter } from '../../src/sandbox/daemon/protocol.js';

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
