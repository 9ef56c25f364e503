/**
 * Issue #42 item 7 through the real service (`bin/atelier serve --executor kubernetes` against the
 * fixture API server, official MCP client): a workspace server whose preview client reads
 * nothing cannot make the runner buffer its answer. The server in the workspace Pod answers one
 * request with 256 MiB written as fast as its socket takes them (and says how much it wrote);
 * the client sends the request through the preview link and reads nothing. What the server got
 * to write is bounded by the buffers between (the exec stream pauses while the relay is behind),
 * the runner's memory does not grow by the answer, and another client's tool calls keep
 * answering. Needs root (every Pod is a bubblewrap sandbox) and a build.
 */
import { readFileSync, mkdtempSync, rmSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Client } from '@modelcontextprotocol/client';
import { call, connectV2, startService, unmountUnder, type Service } from './harness.js';
import { REPO_FILES, configFor, startGitHost } from './workspace-fixture.js';
import type { GitHost } from '../fixtures/githost.js';
import type { KubeApiServer } from '../fixtures/kube-apiserver/index.js';
import { startKubeTarget } from './kube-fixture.js';

const isRoot = process.getuid?.() === 0;
const MiB = 1024 * 1024;
const PORT = 8471;

/** 256 MiB to each request, as fast as the socket takes them; the count written to /tmp/sent every 50 ms. */
const SERVER = String.raw`
const fs = require('node:fs');
let n = 0;
setInterval(() => fs.writeFileSync('/tmp/sent', String(n)), 50);
require('node:http').createServer((req, res) => {
  res.writeHead(200, { 'content-type': 'application/octet-stream' });
  const b = Buffer.alloc(65536, 7);
  let mine = 0;
  const go = () => { while (mine < 256 * 1048576) { mine += b.length; n += b.length; if (!res.write(b)) return res.once('drain', go); } res.end(); };
  go();
}).listen(${PORT}, '127.0.0.1');
`;

function rssOf(pid: number): number {
  const m = /^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return Number(m?.[1] ?? 0) * 1024;
}

describe.skipIf(!isRoot)('a preview whose client reads nothing, in a Kubernetes workspace', () => {
  let host: GitHost;
  let api: KubeApiServer;
  let svc: Service;
  let c: Client;
  let ws = '';
  const dataDir = mkdtempSync(join(tmpdir(), 'atelier-kbp-'));

  async function ok(name: string, a: Record<string, unknown>): Promise<Record<string, unknown>> {
    const r = await call(c, name, a);
    if (!r.ok) throw new Error(`${name} failed: ${r.text}`);
    return r.result;
  }
  const written = async (): Promise<number> => Number(String((await ok('exec_run', { workspaceId: ws, command: 'cat /tmp/sent 2>/dev/null || echo 0' })).stdout).trim() || 0);

  beforeAll(async () => {
    host = await startGitHost();
    const kube = await startKubeTarget();
    api = kube.api!;
    await configFor(host, dataDir, { sandboxDiskMb: 0 });
    svc = await startService({ dataDir, args: kube.args });
    c = await connectV2(svc);
    const repoUrl = (await host.createRepo('approved/kube-backpressure', REPO_FILES)).url;
    ws = (await ok('workspace_open', { repositoryUrl: repoUrl, idempotencyKey: 'kbp-open-1' })).workspaceId as string;
    await ok('files_write', { workspaceId: ws, path: 'server.js', content: SERVER });
    await ok('tasks_run', { workspaceId: ws, command: 'exec node server.js', timeoutMs: 3_600_000, idempotencyKey: 'kbp-server-1' });
    const probe = await ok('exec_run', { workspaceId: ws, command: `for i in $(seq 1 200); do test -f /tmp/sent && exit 0; sleep 0.1; done; exit 1` });
    expect(probe.exitCode).toBe(0);
  }, 240_000);

  afterAll(async () => {
    if (ws && c) await call(c, 'workspace_close', { workspaceId: ws }).catch(() => undefined);
    await c?.close();
    await svc?.stop('SIGTERM').catch(() => undefined);
    await api?.close();
    await host?.close();
    unmountUnder(dataDir);
    rmSync(dataDir, { recursive: true, force: true });
  });

  it('the server writes a few MiB of its 256, the runner holds none of it, other tool calls answer, the runner stays up', async () => {
    const preview = await ok('preview_open', { workspaceId: ws, port: PORT, ttlSeconds: 3600 });
    const u = new URL(String(preview.url));
    const pid = svc.proc.pid!;
    const rss0 = rssOf(pid);
    const sock = connect(Number(u.port), u.hostname);
    sock.on('error', () => undefined);
    await new Promise<void>((r) => sock.once('connect', () => r()));
    sock.write(`GET ${u.pathname} HTTP/1.1\r\nHost: ${u.host}\r\nAuthorization: Bearer ${svc.token}\r\n\r\n`);
    // The answer's first bytes, then nothing more is read.
    await new Promise<void>((r) => sock.once('data', () => (sock.pause(), r())));
    let last = -1;
    let total = 0;
    // Until the server's count stops growing (it is held back), each read a tool call of its own.
    for (let quiet = 0; quiet < 4; ) {
      await new Promise((r) => setTimeout(r, 500));
      total = await written();
      quiet = total === last ? quiet + 1 : 0;
      last = total;
    }
    const grown = rssOf(pid) - rss0;
    console.log(`preview through the service, client not reading: the server in the Pod wrote ${(total / MiB).toFixed(2)} MiB of 256; the runner's RSS grew by ${(grown / MiB).toFixed(1)} MiB`);
    expect(total).toBeLessThan(48 * MiB);
    expect(grown).toBeLessThan(128 * MiB);
    // Another client's calls keep answering; the runner is the same process.
    const other = await connectV2(svc);
    expect((await call(other, 'exec_run', { workspaceId: ws, command: 'echo alive' })).result).toMatchObject({ exitCode: 0, stdout: 'alive\n' });
    await other.close();
    sock.destroy();
    expect(svc.proc.exitCode).toBeNull();
    expect((await fetch(`${svc.url}/healthz`)).status).toBe(200);
  }, 180_000);
});
