/**
 * Bytes in and out of open files: hashing (with a cache keyed by identity and change times), ranged
 * reads, full writes, and the encoding rule of read replies.
 */
import { isUtf8 } from 'node:buffer';
import { createHash } from 'node:crypto';
import { fsync, read, write, type BigIntStats } from 'node:fs';
import { promisify } from 'node:util';
import { invalid } from './common.js';

const readAsync = promisify(read);
const writeAsync = promisify(write);
export const fsyncAsync = promisify(fsync);

/** SHA-256 of whole files keyed by identity and change times, so paging a big file hashes it once. */
export class HashCache {
  private readonly map = new Map<string, string>();
  constructor(private readonly max = 4096) {}

  private key(st: BigIntStats): string {
    return `${st.dev}:${st.ino}:${st.size}:${st.mtimeNs}:${st.ctimeNs}`;
  }

  get(st: BigIntStats): string | undefined {
    const k = this.key(st);
    const v = this.map.get(k);
    if (v !== undefined) {
      this.map.delete(k);
      this.map.set(k, v);
    }
    return v;
  }

  set(st: BigIntStats, sha: string): void {
    this.map.set(this.key(st), sha);
    if (this.map.size > this.max) this.map.delete(this.map.keys().next().value!);
  }
}

const CHUNK = 1024 * 1024;

/** Hashes an open file from its start, reading in 1 MiB chunks (never blocks the event loop for long). */
export async function hashFd(fd: number): Promise<{ sha256: string; size: number }> {
  const h = createHash('sha256');
  const buf = Buffer.allocUnsafe(CHUNK);
  let pos = 0;
  for (;;) {
    const { bytesRead } = await readAsync(fd, buf, 0, CHUNK, pos);
    if (bytesRead === 0) break;
    h.update(buf.subarray(0, bytesRead));
    pos += bytesRead;
  }
  return { sha256: h.digest('hex'), size: pos };
}

export function sha256(buf: Buffer): string {
  return createHash('sha256').update(buf).digest('hex');
}

export async function readRange(fd: number, offset: number, length: number): Promise<Buffer> {
  const buf = Buffer.allocUnsafe(length);
  let got = 0;
  while (got < length) {
    const { bytesRead } = await readAsync(fd, buf, got, length - got, offset + got);
    if (bytesRead === 0) break;
    got += bytesRead;
  }
  return got === length ? buf : buf.subarray(0, got);
}

export async function writeAll(fd: number, data: Buffer): Promise<void> {
  let done = 0;
  while (done < data.length) {
    const { bytesWritten } = await writeAsync(fd, data, done, data.length - done, null);
    done += bytesWritten;
  }
}

/**
 * Length of the longest prefix that does not end inside a UTF-8 sequence (drops at most 3 bytes of
 * an unfinished character at the end), so pages of a text file stay valid UTF-8 on their own.
 */
export function utf8Boundary(buf: Buffer): number {
  const n = buf.length;
  for (let back = 1; back <= Math.min(3, n); back++) {
    const b = buf[n - back]!;
    if ((b & 0xc0) === 0x80) continue; // continuation byte: look further back
    if (b < 0x80) return n; // ASCII: complete
    const need = b >= 0xf0 ? 4 : b >= 0xe0 ? 3 : b >= 0xc0 ? 2 : 1;
    return need > back ? n - back : n;
  }
  return n;
}

/**
 * Write content may come as `contentBase64` (the UTF-8 bytes of the text, base64) instead of
 * `content`: the runner sends that form when JSON escaping would make the text much larger (control
 * characters become six bytes each), so the largest valid batch fits one protocol line.
 */
export function unpackContent(p: Record<string, unknown>): Record<string, unknown> {
  if (typeof p.contentBase64 !== 'string') return p;
  if (p.content !== undefined) throw invalid('give content or contentBase64, not both', { field: 'content' });
  const { contentBase64, ...rest } = p;
  return { ...rest, content: Buffer.from(contentBase64 as string, 'base64').toString('utf8') };
}

/**
 * fs.read's range as it is answered (by the daemon, or by the runner reading a handed-off
 * descriptor, src/sandbox/handoff.ts): when more of the file follows, cut back to a UTF-8
 * character boundary if the part before it is text; then its encoding.
 */
export function shapeRange(buf: Buffer, offset: number, size: number): { buf: Buffer; end: number; encoding: 'utf-8' | 'base64' } {
  let end = offset + buf.length;
  if (end < size) {
    const cut = utf8Boundary(buf);
    if (cut > 0 && cut < buf.length && buf.indexOf(0) === -1 && isUtf8(buf.subarray(0, cut))) {
      buf = buf.subarray(0, cut);
      end = offset + cut;
    }
  }
  return { buf, end, encoding: encodingOf(buf) };
}

/** The encoding rule: valid UTF-8 without NUL bytes is text, anything else base64. */
export function encodingOf(buf: Buffer): 'utf-8' | 'base64' {
  return buf.indexOf(0) === -1 && isUtf8(buf) ? 'utf-8' : 'base64';
}

// ---------------------------------------------------------------------------------------------
// Methods
