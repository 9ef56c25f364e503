/**
 * A large text field that arrives as bytes and stays bytes until something reads it as a string
 * (docs/architecture.md, "Results"). files_read's `content` comes from the daemon as a raw body
 * frame; most of the time the next thing that happens to it is being escaped onto the wire, which
 * the native escaper (src/mcp/wire-native.ts) does from the bytes. Making a 1 MiB string first cost
 * a copy and, worse, a megabyte in V8's old generation per call: the service ran a full garbage
 * collection every ten such reads (a few ms each on this machine).
 *
 * The field is an ordinary enumerable property whose getter decodes the bytes once, on first read,
 * exactly as the daemon client decodes a body (decodeRawText here, the same rule as decodeBody of
 * sandbox/daemon/protocol.ts, which the daemon's copy cannot import from core; a unit test holds
 * them equal), so everything that reads it
 * (JSON.stringify, spread, redaction, a handler) sees the same string as before. `rawText` tells the
 * one reader that can use the bytes whether the property is still that untouched getter.
 */
import { isAscii } from 'node:buffer';

export type RawEncoding = 'utf-8' | 'base64';

/** The text of raw bytes: base64 of them, or their UTF-8 (ASCII copied as Latin-1: the same string, without decoding). */
export function decodeRawText(bytes: Buffer, encoding: RawEncoding): string {
  if (encoding === 'base64') return bytes.toString('base64');
  return isAscii(bytes) ? bytes.toString('latin1') : bytes.toString('utf8');
}

export interface RawText {
  /** The bytes as they came (for 'utf-8': the text's UTF-8; for 'base64': what the text is the base64 of). */
  readonly bytes: Buffer;
  readonly encoding: RawEncoding;
}

/** The bytes of one raw field, shared by every copy of the field (copyText). */
interface Source extends RawText {
  /** Given back to the block pool (releaseRawText): reading the text from now on throws. */
  released: boolean;
}

interface Field {
  readonly key: string;
  readonly get: () => string;
  readonly source: Source;
}

const fields = new WeakMap<object, Field[]>();

/** Defines `target[key]` as the text of `bytes` (decoded on first read). */
export function defineRawText(target: Record<string, unknown>, key: string, bytes: Buffer, encoding: RawEncoding): void {
  defineField(target, key, { bytes, encoding, released: false });
}

function defineField(target: Record<string, unknown>, key: string, source: Source): void {
  let value: string | undefined;
  const get = (): string => {
    if (value === undefined) {
      // A use after release would read another call's bytes: refused loudly instead.
      if (source.released) throw new Error(`${key}: read after its bytes were released to the block pool`);
      value = decodeRawText(source.bytes, source.encoding);
    }
    return value;
  };
  Object.defineProperty(target, key, {
    get,
    // An assignment replaces the field with a plain value (and rawText then says nothing about it).
    set(v: unknown) {
      Object.defineProperty(target, key, { value: v, writable: true, enumerable: true, configurable: true });
    },
    enumerable: true,
    configurable: true,
  });
  const list = fields.get(target)?.filter((f) => f.key !== key) ?? [];
  list.push({ key, get, source });
  fields.set(target, list);
}

function field(target: object, key: string): Field | undefined {
  const f = fields.get(target)?.find((x) => x.key === key);
  return f && !f.source.released && Object.getOwnPropertyDescriptor(target, key)?.get === f.get ? f : undefined;
}

/** The bytes behind `target[key]` while it is still the field defineRawText made; undefined otherwise. */
export function rawText(target: object, key: string): RawText | undefined {
  const f = field(target, key);
  return f ? { bytes: f.source.bytes, encoding: f.source.encoding } : undefined;
}

/** Sets `to[toKey]` to `from[key]`, as bytes still when it is a raw field (nothing decoded). */
export function copyText(from: Record<string, unknown>, key: string, to: Record<string, unknown>, toKey = key): void {
  const f = field(from, key);
  if (f) defineField(to, toKey, f.source);
  else to[toKey] = from[key];
}

/**
 * `{ ...head, ...from }`, except that a raw field of `from` stays bytes (copyText) instead of being
 * read as a string by the spread: a tool adding a few fields in front of a service's result.
 */
export function withFields(head: Record<string, unknown>, from: object): Record<string, unknown> {
  const out: Record<string, unknown> = { ...head };
  for (const key of Object.keys(from)) copyText(from as Record<string, unknown>, key, out);
  return out;
}

/**
 * The bytes behind `target[key]` are no longer needed (they have been escaped onto the wire): when
 * they live in a pooled block, the block goes back to the pool, and reading the text of any copy of
 * the field that was not read before throws from now on (instead of reading the next call's bytes).
 */
export function releaseRawText(target: object, key: string): void {
  const f = field(target, key);
  if (!f || !isPooled(f.source.bytes)) return;
  f.source.released = true;
  giveBackBlock(f.source.bytes);
}

// ---------- the block pool ----------

/**
 * Megabyte-sized blocks reused from one large result to the next: the daemon client's body of a
 * large reply and the escaped output of a large result. A new Buffer each time is external memory
 * V8 counts toward its next full collection (with a MiB read every few milliseconds, a full
 * collection every ten reads or so, a few ms each on this machine). A block is only ever used up to
 * what was written into it.
 */
const POOL_KEEP = 8;
/** At most this much memory waits in the pool (a few MiB in use: a read's body and its output). */
const POOL_BYTES = 32 * 1024 * 1024;
const BLOCK_MIN = 64 * 1024;
const BLOCK_MAX = 16 * 1024 * 1024;
const pool: ArrayBuffer[] = [];
const ours = new WeakSet<ArrayBufferLike>();

/** A block of at least `min` bytes (its contents are whatever was in it before). */
export function leaseBlock(min: number): Buffer {
  let best = -1;
  for (let i = 0; i < pool.length; i++) if (pool[i]!.byteLength >= min && (best < 0 || pool[i]!.byteLength < pool[best]!.byteLength)) best = i;
  if (best >= 0) return Buffer.from(pool.splice(best, 1)[0]!);
  const block = Buffer.allocUnsafeSlow(Math.max(BLOCK_MIN, 2 ** Math.ceil(Math.log2(Math.max(1, min)))));
  ours.add(block.buffer);
  return block;
}

/**
 * Memory for `n` bytes about to be filled: from the pool when it is large enough to be worth it (a
 * block is at least 64 KiB), else a Buffer of its own. Exactly `n` long; its contents are undefined.
 */
export function leaseBytes(n: number): Buffer {
  return (n >= BLOCK_MIN ? leaseBlock(n) : Buffer.allocUnsafeSlow(n)).subarray(0, n);
}

/** Whether these bytes live in a block of the pool. */
export function isPooled(bytes: Buffer): boolean {
  return ours.has(bytes.buffer);
}

/** Gives a leased block (or any view of it) back; nothing may use it afterwards. */
export function giveBackBlock(bytes: Buffer): void {
  const ab = bytes.buffer as ArrayBuffer;
  if (!ours.has(ab) || ab.byteLength > BLOCK_MAX || pool.length >= POOL_KEEP || pool.includes(ab)) return;
  if (pool.reduce((n, b) => n + b.byteLength, ab.byteLength) > POOL_BYTES) return;
  pool.push(ab);
}

/** For tests: how many blocks wait for reuse. */
export function pooledBlocks(): number {
  return pool.length;
}
