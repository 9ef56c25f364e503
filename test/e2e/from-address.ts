/**
 * HTTP requests that leave from a chosen loopback address (127.0.0.x): to the service they are
 * different clients, without any header being trusted (test/e2e/login-throttle.test.ts,
 * reverse-proxy.test.ts, oauth-cimd-dns.test.ts).
 */
import { request as httpRequestRaw, type IncomingMessage } from 'node:http';

export interface Answer {
  status: number;
  body: string;
  headers: IncomingMessage['headers'];
}

/** A request to `baseUrl` (http://127.0.0.1:PORT) from the loopback address `from`; Host is the target's unless `headers` set it. */
export function requestFrom(baseUrl: string, from: string, method: string, path: string, headers: Record<string, string> = {}, body?: string): Promise<Answer> {
  const u = new URL(baseUrl);
  return new Promise((resolve, reject) => {
    const req = httpRequestRaw(
      { host: u.hostname, port: u.port, method, path, localAddress: from, agent: false, headers: { host: u.host, ...headers, ...(body !== undefined ? { 'content-length': String(Buffer.byteLength(body)) } : {}) } },
      (res) => {
        let b = '';
        res.on('data', (d) => (b += d));
        res.on('end', () => resolve({ status: res.statusCode!, body: b, headers: res.headers }));
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}
