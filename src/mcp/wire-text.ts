/**
 * The text block of a large result, serialized once (docs/architecture.md, "Results").
 *
 * A large result (a files_read of a big range, a long git_diff, an artifact chunk) is sent as one
 * text block holding the result's JSON, and that text is itself a string inside the JSON-RPC answer:
 * the content is JSON-escaped twice. Done the plain way, JSON.stringify(result) and then
 * JSON.stringify(message) each walk the whole megabyte character by character (on this machine's
 * Node 20 about 6 ms per MiB each, more than the daemon takes to read the file), and the answer is
 * then copied once more into a Buffer.
 *
 * Here the small rest of the result is serialized as usual, and each large string field is escaped
 * straight to its final form on the wire (both escapings in one step) and never concatenated into
 * one big string: the pieces are written to the socket as they are. The escaping is done by a tiny
 * native addon (src/mcp/wire-native.ts: one C pass to count, one to fill a Buffer) when it is
 * loaded, else in JavaScript with V8's native search and replace (no per-character JavaScript). The
 * text a client receives is exactly the same JSON either way (test/unit/mcp-wire-text.test.ts and
 * test/unit/mcp-wire-native.test.ts compare it with the plain serialization).
 */
import { giveBackBlock, leaseBlock, rawText, releaseRawText } from '../core/raw-text.js';

export { pooledBlocks } from '../core/raw-text.js';
import { wireNative } from './wire-native.js';

/** A top-level string field at least this long is escaped on its own, straight to the wire form. */
export const LARGE_FIELD_CHARS = 16 * 1024;

/** A large result's text block, as the inside of the JSON string that carries it in the JSON-RPC answer. */
export interface WireText {
  /** The inside of the JSON string (no surrounding quotes), as UTF-8 bytes, in pieces, in order. */
  readonly pieces: Buffer[];
  /** The text itself (JSON.stringify of the result), for a transport that cannot send pieces. */
  text(): string;
  /**
   * The pieces have been written out and nothing holds them any more (say, the response's 'finish'):
   * their memory, and that of the bytes they were escaped from, may serve the next large result
   * (text() cannot be called after). Optional to call: unreleased memory is simply collected.
   */
  release(): void;
}

/**
 * Output in a pooled block (core/raw-text.ts), reused from one large result to the next. `write`
 * fills a target and returns the length it needs (written when the target is that long; < 0: cannot).
 */
function intoPooled(min: number, write: (target: Buffer) => number, blocks: Buffer[]): Buffer | undefined {
  let block = leaseBlock(min);
  let n = write(block);
  if (n >= 0 && n > block.length) {
    giveBackBlock(block);
    block = leaseBlock(n);
    n = write(block);
  }
  if (n < 0 || n > block.length) {
    giveBackBlock(block);
    return undefined;
  }
  blocks.push(block);
  return block.subarray(0, n);
}

// Stands for a large field while the rest is serialized. Should a small field hold this very text,
// the frame splits into more pieces than expected and the result goes the plain way.
const PLACEHOLDER = 'atelier\u0001wire\u0001field';
const ESCAPED_PLACEHOLDER = JSON.stringify(JSON.stringify(PLACEHOLDER)).slice(3, -3);

/** The JSON-string escape of the JSON-string escape of one character (what JSON.stringify(JSON.stringify(c)) puts between the quotes). */
const TWICE: Record<string, string> = {};
for (let c = 0; c < 0x20; c++) TWICE[String.fromCharCode(c)] = JSON.stringify(JSON.stringify(String.fromCharCode(c))).slice(3, -3);
TWICE['"'] = JSON.stringify(JSON.stringify('"')).slice(3, -3);
TWICE['\\'] = JSON.stringify(JSON.stringify('\\')).slice(3, -3);

/** Control characters other than the common whitespace ones (those are replaced one by one). */
const RARE_CONTROL = /[\u0000-\u0008\u000b\u000c\u000e-\u001f]/;
const RARE_CONTROL_G = /[\u0000-\u0008\u000b\u000c\u000e-\u001f]/g;

/**
 * JSON.stringify(JSON.stringify(s)) without its outer quotes, computed with native search and
 * replace passes instead of two character-by-character walks. For text outside ASCII (where
 * replaceAll on V8's two-byte strings is slower than the serializer, and lone surrogates must be
 * written as \uXXXX) it is the serializer twice.
 */
export function escapeTwice(s: string): string {
  return escapedTwice(s).text;
}

/** escapeTwice as UTF-8 bytes: by the addon when it is loaded, else in JavaScript. */
export function escapeTwiceBytes(s: string): Buffer {
  const native = wireNative();
  if (native) return native.escapeTwice(s);
  const field = escapedTwice(s);
  // Writing a string to a socket costs more than making the Buffer first (measured); ASCII is a plain copy.
  return Buffer.from(field.text, field.ascii ? 'latin1' : 'utf8');
}

/** escapeTwice, and whether the result is ASCII (then its Latin-1 bytes are its UTF-8 bytes, and copied rather than encoded). */
function escapedTwice(s: string): { text: string; ascii: boolean } {
  // Buffer.byteLength equals the length only for ASCII; cheap on one-byte strings (V8's Latin-1 form).
  if (Buffer.byteLength(s, 'utf8') !== s.length) return { text: JSON.stringify(JSON.stringify(s)).slice(3, -3), ascii: false };
  // Backslashes first: every later replacement adds backslashes of its own.
  if (s.includes('\\')) s = s.replaceAll('\\', TWICE['\\']!);
  if (s.includes('"')) s = s.replaceAll('"', TWICE['"']!);
  if (s.includes('\n')) s = s.replaceAll('\n', TWICE['\n']!);
  if (s.includes('\t')) s = s.replaceAll('\t', TWICE['\t']!);
  if (s.includes('\r')) s = s.replaceAll('\r', TWICE['\r']!);
  if (RARE_CONTROL.test(s)) s = s.replace(RARE_CONTROL_G, (c) => TWICE[c]!);
  return { text: s, ascii: true };
}

/**
 * A `content` field next to `encoding: 'base64'` (files_read of a binary file, artifacts_read) is
 * made by Buffer.toString('base64'): nothing in it needs escaping, so it is not even scanned. The
 * one way something else could be in it is a redaction marker (a secret's name), and then it is
 * escaped like any text.
 */
function isBase64Content(structured: Record<string, unknown>, key: string, value: string): boolean {
  return key === 'content' && structured.encoding === 'base64' && !value.includes('[redacted:');
}

/**
 * The wire form of a result whose large string fields (top level, each at least LARGE_FIELD_CHARS)
 * add up to at least minChars; undefined otherwise (the caller serializes it the plain way). Fields
 * that short can only make a JSON text of at least minChars, so the decision matches the plain rule.
 *
 * With the addon loaded, a field that is still the bytes it came as (core/raw-text.ts: files_read's
 * content, when nothing read it as a string) is escaped from those bytes and never made a string:
 * ASCII text (its length in characters is its length in bytes) and base64 (made from the bytes).
 * Anything else is read as a string, as before.
 */
export function wireText(structured: Record<string, unknown>, minChars: number): WireText | undefined {
  const native = wireNative();
  const large: Array<{ key: string; piece?: Buffer }> = [];
  const blocks: Buffer[] = [];
  const fromBytes: string[] = [];
  const giveBackOutput = () => {
    for (const b of blocks.splice(0)) giveBackBlock(b);
  };
  // Output blocks, and the bytes of raw fields escaped from them (the daemon client's pooled body):
  // after this, text() cannot read those fields again (it is for a transport that never took the pieces).
  const release = () => {
    giveBackOutput();
    for (const key of fromBytes.splice(0)) releaseRawText(structured, key);
  };
  let total = 0;
  for (const key of Object.keys(structured)) {
    const raw = native ? rawText(structured, key) : undefined;
    if (native && raw && raw.bytes.length >= LARGE_FIELD_CHARS) {
      // From the bytes: base64 made from them; ASCII text (its length in characters is its length in
      // bytes) escaped; text with other characters is read as a string below.
      const piece =
        raw.encoding === 'base64'
          ? intoPooled(Math.ceil(raw.bytes.length / 3) * 4, (t) => native.base64Into(raw.bytes, t), blocks)
          : intoPooled(raw.bytes.length + (raw.bytes.length >> 2), (t) => native.escapeTwiceAsciiInto(raw.bytes, t), blocks);
      if (piece) {
        large.push({ key, piece });
        fromBytes.push(key);
        total += raw.encoding === 'base64' ? piece.length : raw.bytes.length;
        continue;
      }
    }
    const v = structured[key];
    if (typeof v === 'string' && v.length >= LARGE_FIELD_CHARS) {
      large.push({ key });
      total += v.length;
    }
  }
  // Not taken (the plain way follows, which reads the fields): only the output blocks go back.
  const giveUp = () => void giveBackOutput();
  if (total < minChars) return giveUp();
  const isLarge = new Set(large.map((l) => l.key));
  const small: Record<string, unknown> = {};
  for (const key of Object.keys(structured)) small[key] = isLarge.has(key) ? PLACEHOLDER : structured[key];
  // The rest of the result, escaped twice by the serializer (it is small); the placeholders split it.
  const frame = JSON.stringify(JSON.stringify(small)).slice(1, -1).split(ESCAPED_PLACEHOLDER);
  if (frame.length !== large.length + 1) return giveUp(); // cannot happen (see PLACEHOLDER); the plain way then
  const pieces: Buffer[] = [Buffer.from(frame[0]!, 'utf8')];
  large.forEach(({ key, piece }, i) => {
    if (!piece) {
      const value = structured[key] as string;
      piece = isBase64Content(structured, key, value) ? Buffer.from(value, 'latin1') : escapeTwiceBytes(value);
    }
    pieces.push(piece, Buffer.from(frame[i + 1]!, 'utf8'));
  });
  return { pieces, text: () => JSON.stringify(structured), release };
}
