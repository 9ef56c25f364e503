/**
 * A large result's text block written from pieces (src/mcp/wire-text.ts) is exactly the plain
 * serialization: JSON.stringify of the result, as a JSON string inside the answer.
 */
import { describe, expect, it } from 'vitest';
import { LARGE_FIELD_CHARS, escapeTwice, wireText } from '../../src/mcp/wire-text.js';
import { LARGE_RESULT_CHARS, okResult } from '../../src/mcp/registry.js';

const twice = (s: string) => JSON.stringify(JSON.stringify(s)).slice(3, -3);
const wire = (w: { pieces: Buffer[] }) => `"${Buffer.concat(w.pieces).toString('utf8')}"`;

const every = Array.from({ length: 0x80 }, (_, c) => String.fromCharCode(c)).join('');

describe('escapeTwice', () => {
  it.each([
    ['empty', ''],
    ['plain ASCII', 'abc'],
    ['every ASCII character, controls and DEL included', every.repeat(3)],
    ['newlines, tabs and carriage returns only', 'a\nb\tc\r\n'.repeat(100)],
    ['quotes and backslashes, adjacent', '\\"\\\\""\\'.repeat(50)],
    ['non-ASCII', 'héllo “wörld” 日本語 ✓ \u2028\u2029 😀\n"'],
    ['lone surrogates', 'a\ud800b\udc00c"\n'],
    ['an escape sequence spelled out', '\\u0001 \\n \\" \\\\'],
  ])('%s: the serializer twice', (_, s) => {
    expect(escapeTwice(s)).toBe(twice(s));
  });
});

describe('wireText', () => {
  const big = ('const s = "x\\ty";\n\u0007' + every).repeat(Math.ceil(LARGE_RESULT_CHARS / 100));

  it('is the plain serialization, byte for byte, and keeps key order', () => {
    const result = { path: 'src/ä "b".ts', content: big, size: 3, nested: { a: [1, 'two'] }, eof: true, nextCursor: null };
    const w = wireText(result, LARGE_RESULT_CHARS)!;
    expect(w).toBeDefined();
    expect(wire(w)).toBe(JSON.stringify(JSON.stringify(result)));
    expect(w.text()).toBe(JSON.stringify(result));
  });

  it('handles several large fields, non-ASCII ones among them', () => {
    const result = { a: big, middle: 1, b: 'ü'.repeat(LARGE_FIELD_CHARS), c: 'y'.repeat(LARGE_FIELD_CHARS) };
    expect(wire(wireText(result, LARGE_RESULT_CHARS)!)).toBe(JSON.stringify(JSON.stringify(result)));
  });

  it('base64 content (files_read of a binary file, artifacts_read), and base64 content a redaction marked', () => {
    const b64 = Buffer.from(Array.from({ length: 100_000 }, (_, i) => (i * 7) & 255)).toString('base64');
    const read = { path: 'x.bin', encoding: 'base64', content: b64, eof: true };
    expect(wire(wireText(read, LARGE_RESULT_CHARS)!)).toBe(JSON.stringify(JSON.stringify(read)));
    const redacted = { ...read, content: `${b64.slice(0, 1000)}[redacted:A"B\\C
]${b64.slice(1000)}` };
    expect(wire(wireText(redacted, LARGE_RESULT_CHARS)!)).toBe(JSON.stringify(JSON.stringify(redacted)));
  });

  it('leaves a result whose large fields are under the bound to the plain rule', () => {
    expect(wireText({ content: 'x'.repeat(LARGE_RESULT_CHARS - 1) }, LARGE_RESULT_CHARS)).toBeUndefined();
    // Many small strings that add up: not large fields; the plain serialization decides.
    expect(wireText({ a: 'x'.repeat(LARGE_FIELD_CHARS - 1), b: 'x'.repeat(LARGE_FIELD_CHARS - 1), c: 'x'.repeat(LARGE_FIELD_CHARS - 1), d: 'x'.repeat(LARGE_FIELD_CHARS - 1), e: 'x'.repeat(LARGE_FIELD_CHARS) }, LARGE_RESULT_CHARS)).toBeUndefined();
  });

  it('a small field holding the internal placeholder falls back to the plain way', () => {
    const result = { path: 'atelier\u0001wire\u0001field', content: big };
    const w = wireText(result, LARGE_RESULT_CHARS);
    if (w) expect(wire(w)).toBe(JSON.stringify(JSON.stringify(result)));
    const deferred = okResult(result, () => 'stand-in');
    if (!w) expect(deferred.content[0]!.text).toBe(JSON.stringify(result));
  });

  it('okResult: the same decision about structuredContent either way', () => {
    const small = { content: 'x'.repeat(100) };
    expect(okResult(small, () => 'stand-in')).toEqual(okResult(small));
    expect(okResult(small).structuredContent).toEqual(small);
    const large = { content: big };
    expect(okResult(large)).toEqual({ content: [{ type: 'text', text: JSON.stringify(large) }] });
    let given: unknown;
    const deferred = okResult(large, (t) => {
      given = t;
      return 'stand-in';
    });
    expect(deferred).toEqual({ content: [{ type: 'text', text: 'stand-in' }] });
    expect((given as { text(): string }).text()).toBe(JSON.stringify(large));
  });
});
