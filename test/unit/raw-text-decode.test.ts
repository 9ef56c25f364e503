/**
 * core/raw-text.ts decodes a raw field without importing the daemon's protocol (issue #43 item 5):
 * its decodeRawText and the protocol's decodeBody (which the daemon's copy keeps, importing nothing
 * of the runner) are one rule, held equal here on ASCII, UTF-8, invalid UTF-8 and base64 bodies.
 */
import { describe, expect, it } from 'vitest';
import { decodeRawText } from '../../src/core/raw-text.js';
import { decodeBody } from '../../src/sandbox/daemon/protocol.js';

const BODIES = [Buffer.from('plain ascii text\n'), Buffer.from('ünïcödé ✓ 𝄞'), Buffer.from([0xff, 0xfe, 0x41, 0xc3]), Buffer.alloc(0), Buffer.from(Array.from({ length: 256 }, (_, i) => i))];

describe('raw text and the daemon protocol decode alike', () => {
  it.each(['utf-8', 'base64'] as const)('%s', (encoding) => {
    for (const bytes of BODIES) expect(decodeRawText(bytes, encoding)).toBe(decodeBody(bytes, encoding));
    expect(decodeRawText(Buffer.from('ab'), encoding)).toBe(encoding === 'base64' ? 'YWI=' : 'ab');
  });
});
