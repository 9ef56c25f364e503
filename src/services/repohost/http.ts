/**
 * The fetch Octokit uses for the repository host: node:https with the system CAs plus the
 * operator's extra CAs (so a GitHub Enterprise Server behind a private CA works), no redirects
 * followed with a credential, a response size bound and a timeout. Only https:// URLs.
 */
import { request as httpsRequest } from 'node:https';
import { rootCertificates } from 'node:tls';

export const MAX_RESPONSE_BYTES = 16 * 1024 * 1024;

export function httpsFetch(extraCaPem: () => string, timeoutMs = 30_000): typeof fetch {
  return (async (input: string | URL | Request, init?: RequestInit): Promise<Response> => {
    const url = new URL(typeof input === 'string' || input instanceof URL ? input : input.url);
    if (url.protocol !== 'https:') throw new Error(`refusing a non-https repository host URL (${url.protocol})`);
    const headers: Record<string, string> = {};
    new Headers(init?.headers).forEach((v, k) => (headers[k] = v));
    let body: Buffer | undefined;
    if (typeof init?.body === 'string') body = Buffer.from(init.body);
    else if (init?.body instanceof Uint8Array) body = Buffer.from(init.body);
    else if (init?.body != null) throw new Error('unsupported request body');
    if (body) headers['content-length'] = String(body.length);
    const extra = extraCaPem();
    const signal = init?.signal ?? undefined;
    return new Promise<Response>((resolve, reject) => {
      if (signal?.aborted) return reject(signal.reason ?? new Error('aborted'));
      const req = httpsRequest(url, { method: init?.method ?? 'GET', headers, timeout: timeoutMs, ...(extra ? { ca: [...rootCertificates, extra] } : {}) }, (res) => {
        const chunks: Buffer[] = [];
        let n = 0;
        res.on('data', (buf: Buffer) => {
          n += buf.length;
          if (n > MAX_RESPONSE_BYTES) {
            req.destroy(new Error(`the repository host answered more than ${MAX_RESPONSE_BYTES} bytes`));
            return;
          }
          chunks.push(buf);
        });
        res.on('error', reject);
        res.on('end', () => {
          const plainHeaders = new Headers();
          for (let i = 0; i + 1 < res.rawHeaders.length; i += 2) plainHeaders.append(res.rawHeaders[i]!, res.rawHeaders[i + 1]!);
          const status = res.statusCode ?? 502;
          const empty = status === 204 || status === 205 || status === 304;
          const r = new Response(empty ? null : Buffer.concat(chunks), { status: status < 200 || status > 599 ? 502 : status, headers: plainHeaders });
          Object.defineProperty(r, 'url', { value: url.toString() });
          resolve(r);
        });
      });
      const onAbort = () => req.destroy(new Error('cancelled'));
      signal?.addEventListener('abort', onAbort, { once: true });
      req.on('close', () => signal?.removeEventListener('abort', onAbort));
      req.on('timeout', () => req.destroy(new Error(`no answer from the repository host within ${timeoutMs / 1000} s`)));
      req.on('error', reject);
      req.end(body);
    });
  }) as typeof fetch;
}
