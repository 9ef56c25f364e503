/**
 * The gateway's few HTTP helpers (raw node:http): JSON answers, the OpenAI-shaped error body, a
 * capped body reader and the hop-by-hop header list.
 */
import type { IncomingMessage, OutgoingHttpHeaders, ServerResponse } from 'node:http';

/** Hop-by-hop headers: never relayed from a provider's answer. */
export const HOP_HEADERS: ReadonlySet<string> = new Set(['connection', 'keep-alive', 'transfer-encoding', 'proxy-connection', 'upgrade', 'te', 'trailer']);

export function sendJson(res: ServerResponse, status: number, body: unknown, extra: OutgoingHttpHeaders = {}): void {
  const b = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(b), ...extra });
  res.end(b);
}

/** The error body: OpenAI-shaped, so agent clients surface the message. Clients must not retry 429 and 402. */
export function errorBody(code: string, message: string, details: Record<string, unknown> = {}): { error: { message: string; type: string; code: string; param: null; details: Record<string, unknown> } } {
  return { error: { message, type: 'atelier_gateway_error', code, param: null, details } };
}

export function sendError(res: ServerResponse, status: number, code: string, message: string, details: Record<string, unknown> = {}): void {
  if (res.headersSent) return void res.destroy();
  sendJson(res, status, errorBody(code, message, details), status === 429 || status === 402 ? { 'x-should-retry': 'false' } : {});
}

/** A refusal decided by a pure step (routing, metering), answered by the caller with sendError. */
export interface Refusal {
  status: number;
  code: string;
  message: string;
  details?: Record<string, unknown>;
}

export function sendRefusal(res: ServerResponse, r: Refusal): void {
  sendError(res, r.status, r.code, r.message, r.details);
}

/** The whole body, or null when it passes `cap` bytes (the rest is drained, not kept). */
export function readBody(req: IncomingMessage, cap: number): Promise<Buffer | null> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let n = 0;
    req.on('data', (c: Buffer) => {
      n += c.length;
      if (n > cap) {
        resolve(null);
        req.removeAllListeners('data');
        req.resume();
        return;
      }
      chunks.push(c);
    });
    req.on('end', () => resolve(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, n)));
    req.on('error', reject);
  });
}
