/**
 * src/core/display.ts: what the owner sees of untrusted text (approvals on REST and the dashboard).
 * Every character that displays as something else or as nothing is a visible escape, and reported.
 */
import { describe, expect, it } from 'vitest';
import { displaySegments, displayText, quoted } from '../../src/core/display.js';

const esc = (s: string, multiline = true) => displayText(s, { multiline });

describe('displayText', () => {
  it('escapes the bidirectional controls U+202A-U+202E and U+2066-U+2069 and flags them as bidi', () => {
    for (let cp = 0x202a; cp <= 0x202e; cp++) expect(esc(`a${String.fromCodePoint(cp)}b`).text).toBe(`a\\u{${cp.toString(16).toUpperCase()}}b`);
    for (let cp = 0x2066; cp <= 0x2069; cp++) expect(esc(String.fromCodePoint(cp)).hidden).toEqual([{ codePoint: `U+${cp.toString(16).toUpperCase()}`, kind: 'bidi', count: 1 }]);
    // The classic: a comment that reads one way and runs another.
    const trojan = 'rm -rf ./build \u202E# safe \u2066cleanup\u2069';
    const d = esc(trojan);
    expect(d.text).toBe('rm -rf ./build \\u{202E}# safe \\u{2066}cleanup\\u{2069}');
    expect(d.hidden.map((h) => h.codePoint)).toEqual(['U+202E', 'U+2066', 'U+2069']);
  });

  it('escapes zero-width characters (U+200B-U+200F, U+2060, U+FEFF)', () => {
    for (const cp of [0x200b, 0x200c, 0x200d, 0x200e, 0x200f, 0x2060, 0xfeff]) {
      const d = esc(`x${String.fromCodePoint(cp)}y`);
      expect(d.text).toBe(`x\\u{${cp.toString(16).toUpperCase()}}y`);
      expect(d.hidden).toHaveLength(1);
    }
    expect(esc('cu\u200Brl').hidden[0]).toEqual({ codePoint: 'U+200B', kind: 'zero_width', count: 1 });
  });

  it('escapes C0 controls but keeps newline and tab in multi-line text; escapes them too in a single-line field', () => {
    expect(esc('echo safe\rrm -rf ~\n\tok\u0007\u001b[2K').text).toBe('echo safe\\u{000D}rm -rf ~\n\tok\\u{0007}\\u{001B}[2K');
    expect(esc('a\nb\tc', false).text).toBe('a\\u{000A}b\\u{0009}c');
    expect(esc('\u0000').text).toBe('\\u{0000}');
    expect(esc('\u007F').text).toBe('\\u{007F}');
  });

  it('escapes C1 controls U+0080-U+009F (NEL and CSI included)', () => {
    for (let cp = 0x80; cp <= 0x9f; cp++) expect(esc(String.fromCodePoint(cp)).hidden[0]).toMatchObject({ kind: 'control', count: 1 });
    expect(esc('a\u0085b\u009B2Jc').text).toBe('a\\u{0085}b\\u{009B}2Jc');
  });

  it('escapes other format characters (Cf), default-ignorables, line separators, odd spaces, private use and lone surrogates', () => {
    expect(esc('soft\u00ADhyphen').text).toBe('soft\\u{00AD}hyphen');
    expect(esc('tag\u{E0041}\u{E007F}').text).toBe('tag\\u{E0041}\\u{E007F}'); // "ASCII smuggling" tag characters
    expect(esc('one\u2028two\u2029three').hidden.map((h) => h.kind)).toEqual(['line_separator', 'line_separator']);
    expect(esc('rm -rf /\u00A0tmp').text).toBe('rm -rf /\\u{00A0}tmp');
    expect(esc('\u3000').hidden[0]!.kind).toBe('space');
    expect(esc('\u3164').hidden[0]!.kind).toBe('invisible'); // a Hangul filler looks like nothing
    expect(esc('\uE000').hidden[0]!.kind).toBe('private_use');
    expect(esc('a\uD800b').text).toBe('a\\u{D800}b');
    expect(esc('a\uD800b').hidden[0]!.kind).toBe('surrogate');
  });

  it('leaves ordinary text alone: every script, emoji, quotes, backslashes, the ASCII space', () => {
    for (const s of ['ls -la | grep "x" && echo \'y\' \\n', 'Grüße, 你好, שלום, مرحبا, Привет', 'deploy 🚀 done', '']) {
      const d = esc(s);
      expect(d.text).toBe(s);
      expect(d.hidden).toEqual([]);
    }
  });

  it('counts each hidden character once per code point, in order of first appearance', () => {
    expect(esc('\u202E\u200B\u202E\u202E').hidden).toEqual([
      { codePoint: 'U+202E', kind: 'bidi', count: 3 },
      { codePoint: 'U+200B', kind: 'zero_width', count: 1 },
    ]);
  });

  it('segments join to the escaped text and mark exactly the escapes (what the dashboard highlights)', () => {
    const input = 'a\u202Eb\\u{202E}c';
    const segs = displaySegments(input);
    expect(segs.map((s) => s.text).join('')).toBe(displayText(input).text);
    // A literal backslash sequence in the input stays plain text: only real hidden characters are marked.
    expect(segs.filter((s) => s.hidden).map((s) => s.text)).toEqual(['\\u{202E}']);
    expect(segs.filter((s) => !s.hidden).map((s) => s.text)).toEqual(['a', 'b\\u{202E}c']);
  });
});

describe('quoted', () => {
  it('keeps a value on one line: newlines, quotes and backslashes escaped, so it cannot forge a line', () => {
    const v = 'node x.js\nplanDigest: 0000\n  "evil": "x"';
    const q = quoted(v);
    expect(q.split('\n')).toHaveLength(1);
    expect(JSON.parse(q)).toBe(v);
    expect(quoted(undefined)).toBe('""');
  });
});
