/**
 * A large text field that arrives as bytes and stays bytes until something reads it as a string
 * (docs/architecture.md, "Results"). files_read's `content` comes from the daemon as a raw body
 * frame; most of the time the next thing that happens to it is being escaped onto the wire, which
 * the native escaper (src/mcp/wire-native.ts) does from the bytes. Making a 1 MiB string first cost
 * a copy and, worse, a megabyte in V8's old generation per call: the service ran a full garbage
 * collection every ten such reads (a few ms each on this machine).
 *
 * The field is an ordinary enumerable property whose getter decodes the bytes once, on first read,
 * exactly as the daemon client always did (protocol.ts decodeBody), so everything that reads it
 * (JSON.stringify, spread, redaction, a handler) sees the same string as before. `rawText` tells the
 * one reader that can use the bytes whether the property is still that untouched getter.
 */
import { decodeBody } from '../sandbox/daemon/protocol.js';

export type RawEncoding = 'utf-8' | 'base64';

export interface RawText {
  /** The bytes as they came (for 'utf-8': the text's UTF-8; for 'base64': what the text is the base64 of). */
  readonly bytes: Buffer;
  readonly encoding: RawEncoding;
}

interface Field extends RawText {
  readonly key: string;
  readonly get: () => string;
}

const fields = new WeakMap<object, Field[]>();

/** Defines `target[key]` as the text of `bytes` (decoded on first read). */
export function defineRawText(target: Record<string, unknown>, key: string, bytes: Buffer, encoding: RawEncoding): void {
  let value: string | undefined;
  const get = (): string => (value ??= decodeBody(bytes, encoding));
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
  list.push({ key, get, bytes, encoding });
  fields.set(target, list);
}

/** The bytes behind `target[key]` while it is still the field defineRawText made; undefined otherwise. */
export function rawText(target: object, key: string): RawText | undefined {
  const f = fields.get(target)?.find((x) => x.key === key);
  if (!f) return undefined;
  return Object.getOwnPropertyDescriptor(target, key)?.get === f.get ? { bytes: f.bytes, encoding: f.encoding } : undefined;
}

/** Sets `to[toKey]` to `from[key]`, as bytes still when it is a raw field (nothing decoded). */
export function copyText(from: Record<string, unknown>, key: string, to: Record<string, unknown>, toKey = key): void {
  const raw = rawText(from, key);
  if (raw) defineRawText(to, toKey, raw.bytes, raw.encoding);
  else to[toKey] = from[key];
}
