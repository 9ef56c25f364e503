/**
 * Credential broker for git network operations. For one operation it serves git's credential
 * protocol on a fresh Unix socket that only that operation's short-lived sandbox has mounted;
 * it answers only for the approved repository's host (and path), and only "get". The token goes
 * from the runner's memory to git's memory inside the short-lived sandbox: never to a file, an
 * environment variable, a git config or the workspace's own sandbox.
 */
import { createServer, type Server } from 'node:net';
import { chmod, chown, mkdtemp, rm } from 'node:fs/promises';
import { join } from 'node:path';
import type { ParsedRepoUrl } from './policy.js';

export interface BrokerLease {
  /** Host directory holding the socket, to bind into the sandbox at CRED_SOCKET_DIR. */
  dir: string;
  /** How many credentials it handed out (for audit and tests). */
  served(): number;
  close(): Promise<void>;
}

/** Where the socket directory is mounted inside the short-lived sandbox. */
export const CRED_SOCKET_DIR = '/run/atelier-cred';
export const CRED_SOCKET_NAME = 'cred.sock';

function parseRequest(text: string): Record<string, string> {
  const out: Record<string, string> = Object.create(null) as Record<string, string>; // no inherited keys: `host` is the request's or absent
  for (const line of text.split('\n')) {
    const eq = line.indexOf('=');
    if (eq > 0) out[line.slice(0, eq)] = line.slice(eq + 1);
  }
  return out;
}

export async function startCredentialBroker(opts: {
  runDir: string;
  repo: ParsedRepoUrl;
  credential: { username: string; token: string } | null;
  uid: number;
  gid: number;
  onRequest?: (d: { host: string; path: string; answered: boolean }) => void;
}): Promise<BrokerLease> {
  // Root-owned and 0711: the sandbox user reaches the socket (its own) but cannot add, replace or
  // link anything in the directory root later removes.
  const dir = await mkdtemp(join(opts.runDir, 'cred-'));
  await chmod(dir, 0o711);
  const sock = join(dir, CRED_SOCKET_NAME);
  let served = 0;
  // Containment (docs/architecture.md, "Containing bytes from a workspace"): git's side of this
  // socket is code in a sandbox. One request per connection, at most 16 KiB, decoded as UTF-8
  // across chunk boundaries; anything after the request, a half-close or a reset is ignored, and
  // nothing in the callback can throw (the audit hook is guarded).
  const server: Server = createServer((conn) => {
    let buf = '';
    let answered = false;
    conn.setEncoding('utf8');
    conn.setTimeout(10_000, () => conn.destroy());
    conn.on('data', (chunk: string) => {
      if (answered) return;
      buf += chunk;
      if (buf.length > 16_384) return conn.destroy();
      if (!buf.includes('\n\n')) return;
      answered = true;
      const [action, ...rest] = buf.split('\n');
      const req = parseRequest(rest.join('\n'));
      const host = (req.host ?? '').toLowerCase();
      const path = '/' + (req.path ?? '').replace(/^\/+/, '');
      const samePath = !req.path || path.replace(/\.git$/, '') === opts.repo.path.replace(/\.git$/, '');
      const ok = action === 'get' && req.protocol === 'https' && host === opts.repo.authority && samePath && opts.credential !== null;
      try {
        opts.onRequest?.({ host, path, answered: ok });
      } catch {
        // The audit hook's failure is not the requester's.
      }
      if (ok) {
        served++;
        conn.end(`username=${opts.credential!.username}\npassword=${opts.credential!.token}\n\n`);
      } else {
        conn.end('\n');
      }
    });
    conn.on('error', () => undefined);
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(sock, () => resolve());
  });
  await chown(sock, opts.uid, opts.gid);
  return {
    dir,
    served: () => served,
    async close() {
      await new Promise<void>((r) => server.close(() => r()));
      await rm(dir, { recursive: true, force: true });
    },
  };
}
