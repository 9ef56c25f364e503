/**
 * The little HTTP/1.1 the egress proxy speaks: reading one request head (strictly, with a size
 * cap, rejecting binary at once) and answering an error with a short text body before closing.
 */
import type { Socket } from 'node:net';

export const STATUS_TEXT: Record<number, string> = {
  400: 'Bad Request',
  403: 'Forbidden',
  408: 'Request Timeout',
  431: 'Request Header Fields Too Large',
  502: 'Bad Gateway',
  503: 'Service Unavailable',
  504: 'Gateway Timeout',
};

const TOKEN = "[!#$%&'*+\\-.^_`|~0-9A-Za-z]+";
const REQUEST_LINE = new RegExp(`^(${TOKEN}) ([\\x21-\\x7e]+) HTTP/1\\.[01]$`);
const HEADER_LINE = new RegExp(`^${TOKEN}:[\\t\\x20-\\x7e]*$`);

/** How long a refused client may linger after the answer before it is destroyed. */
const LINGER_MS = 2_000;

export type HeadState =
  /** The head is not complete yet: push more. */
  | { state: 'more' }
  /** The head is refused (400 or 431); method is '' unless the request line parsed. */
  | { state: 'error'; status: 400 | 431; reason: string; method: string }
  /** The head is complete and well formed; `rest` is what followed it (to unshift). */
  | { state: 'done'; method: string; target: string; rest: Buffer };

/**
 * Reads one request head (request line + headers + CRLFCRLF) from pushed chunks. Only printable
 * ASCII, tab, CR and LF may appear in a head, and a LF must follow a CR: binary (a TLS ClientHello
 * sent without CONNECT) is refused at its first byte, not at the timeout. A head past
 * `maxHeaderBytes` is 431 as soon as that is known. Each byte is checked once.
 */
export class RequestHeadReader {
  private chunks: Buffer[] = [];
  private size = 0;
  private scanFrom = 0;

  constructor(private readonly maxHeaderBytes: number) {}

  push(chunk: Buffer): HeadState {
    this.chunks.push(chunk);
    this.size += chunk.length;
    const buf = this.chunks.length === 1 ? chunk : Buffer.concat(this.chunks);
    if (this.chunks.length > 1) this.chunks = [buf];
    const end = buf.indexOf('\r\n\r\n');
    const limit = end >= 0 ? end + 4 : Math.min(buf.length, this.maxHeaderBytes + 1);
    for (let i = this.scanFrom; i < limit; i++) {
      const c = buf[i]!;
      const ok = (c >= 0x20 && c <= 0x7e) || c === 0x09 || c === 0x0d || (c === 0x0a && i > 0 && buf[i - 1] === 0x0d);
      if (!ok) return { state: 'error', status: 400, reason: 'malformed request: invalid bytes in request header', method: '' };
    }
    this.scanFrom = limit;
    if (end < 0 ? this.size > this.maxHeaderBytes : end + 4 > this.maxHeaderBytes) {
      return { state: 'error', status: 431, reason: 'request header too large', method: '' };
    }
    if (end < 0) return { state: 'more' };
    return parseHead(buf.subarray(0, end), buf.subarray(end + 4));
  }
}

/** Parses a complete head (without its final CRLFCRLF). */
export function parseHead(head: Buffer, rest: Buffer): HeadState {
  const lines = head.toString('latin1').split('\r\n');
  const m = REQUEST_LINE.exec(lines[0]!);
  if (!m) return { state: 'error', status: 400, reason: 'malformed request line', method: '' };
  const method = m[1]!;
  for (const line of lines.slice(1)) {
    if (!HEADER_LINE.test(line)) return { state: 'error', status: 400, reason: 'malformed header line', method };
  }
  return { state: 'done', method, target: m[2]!, rest };
}

/** The bytes of an error answer: status line, text/plain body "atelier egress: <reason>", Connection: close. */
export function errorAnswer(status: number, reason: string): string {
  const body = `atelier egress: ${reason}\n`;
  return (
    `HTTP/1.1 ${status} ${STATUS_TEXT[status] ?? 'Error'}\r\n` +
    'Content-Type: text/plain; charset=utf-8\r\n' +
    `Content-Length: ${Buffer.byteLength(body)}\r\n` +
    'Connection: close\r\n\r\n' +
    body
  );
}

/** Answers an error status and closes the connection. */
export function answer(client: Socket, status: number, reason: string): void {
  if (client.destroyed) return;
  client.end(errorAnswer(status, reason));
  // Drain whatever else the client sends so it sees the answer rather than a reset, and
  // destroy it if it lingers.
  client.resume();
  const timer = setTimeout(() => client.destroy(), LINGER_MS);
  timer.unref();
  client.once('close', () => clearTimeout(timer));
}
