/**
 * The CIMD fetcher cannot starve the runner (issue #42 item 4), through the real `atelier serve`
 * with a real workspace: the service asks a name server on loopback (ATELIER_OAUTH_CIMD_DNS_SERVERS)
 * that receives every query and never answers. While 50 authorization requests whose
 * client_id is a metadata document URL on such a host arrive from ten client addresses, tool
 * calls that read files keep the latency they had in the same run without that load, and no
 * thread of the service's libuv pool (the one file I/O, scrypt and zlib share) is ever held by a
 * lookup: the threads are sampled from /proc while the load runs. (files_read is served by the
 * workspace's daemon; password logins, scrypt on the runner's pool, are timed beside it as the
 * probe of that pool. libuv lets getaddrinfo take at most half of the pool, so before the fix the
 * lookups held two of its four threads: the sampled count is what tells the two apart.) Every authorization request is
 * answered (a page), none after more than the fetch deadline plus a margin.
 */
import { createSocket, type Socket as UdpSocket } from 'node:dgram';
import { mkdtempSync, readdirSync, readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Client } from '@modelcontextprotocol/client';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { call, connectV2, runCli, type Service } from './harness.js';
import { startGitHost, startWorkspaceService } from './workspace-fixture.js';
import { requestFrom } from './from-address.js';
import type { GitHost } from '../fixtures/githost.js';

let dns: UdpSocket;
let queries = 0;
let git: GitHost;
let svc: Service;
let c: Client;
let ws: string;

beforeAll(async () => {
  dns = createSocket('udp4');
  dns.on('message', () => queries++); // received, never answered
  await new Promise<void>((r) => dns.bind(0, '127.0.0.1', r));
  git = await startGitHost();
  const repoUrl = (await git.createRepo('approved/cimd-dns', { 'README.md': '# demo\n', 'notes/a.txt': 'x'.repeat(4096) })).url;
  // An owner password: a password check is scrypt on the runner's own libuv pool, the pool a lookup would hold.
  const dataDir = mkdtempSync(join(tmpdir(), 'atelier-ws-'));
  const pw = await runCli(['owner', 'set-password', '--data-dir', dataDir], { input: PASSWORD + '\n' });
  if (pw.code !== 0) throw new Error(pw.stderr);
  svc = await startWorkspaceService(git, { dataDir, env: { ATELIER_OAUTH_CIMD_DNS_SERVERS: `127.0.0.1:${dns.address().port}` } });
  c = await connectV2(svc);
  const r = await call(c, 'workspace_open', { repositoryUrl: repoUrl, idempotencyKey: 'open-cimd-dns' });
  if (!r.ok) throw new Error(r.text);
  ws = r.result.workspaceId as string;
}, 180_000);

afterAll(async () => {
  await c?.close();
  await svc?.dispose();
  await git?.close();
  dns?.close();
});

const PASSWORD = 'correct horse battery staple';

/** One password login's latency, ms (scrypt on the service's libuv pool). */
async function loginOnce(): Promise<number> {
  const t0 = performance.now();
  const r = await requestFrom(svc.url, '127.0.0.90', 'POST', '/login', { 'content-type': 'application/json' }, JSON.stringify({ password: PASSWORD }));
  if (r.status !== 200) throw new Error(`login: ${r.status} ${r.body}`);
  return performance.now() - t0;
}

/** One files_read call's latency, ms. */
async function readOnce(): Promise<number> {
  const t0 = performance.now();
  const r = await call(c, 'files_read', { workspaceId: ws, path: 'notes/a.txt' });
  if (!r.ok) throw new Error(r.text);
  return performance.now() - t0;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

/**
 * x86_64 system calls getaddrinfo waits for a name server in (poll, ppoll, select, pselect6,
 * recvfrom, recvmsg). No other thread of a node process but the main one waits in these (the main
 * thread and the platform's loop wait in epoll; idle pool and V8 threads in futex).
 */
const NETWORK_WAITS = new Set([7, 271, 23, 270, 45, 47]);

/** Threads of the service process other than its main thread blocked on a name server now: pool threads a lookup holds. */
function poolThreadsOnNetwork(pid: number): number {
  let n = 0;
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    if (Number(tid) === pid) continue;
    try {
      const sys = readFileSync(`/proc/${pid}/task/${tid}/syscall`, 'utf8').split(' ')[0]!;
      if (NETWORK_WAITS.has(Number(sys))) n++;
    } catch {
      // the thread ended meanwhile
    }
  }
  return n;
}

/** GET /oauth/authorize from the loopback address `from`: its answer and how long it took. */
async function authorize(from: string, i: number): Promise<{ status: number; ms: number; body: string }> {
  const q = new URLSearchParams({ response_type: 'code', client_id: `https://c${i}.never-answers.test/client.json`, redirect_uri: 'http://127.0.0.1:9/cb', state: 's', code_challenge: 'x'.repeat(43), code_challenge_method: 'S256', resource: svc.mcpUrl });
  const t0 = performance.now();
  const a = await requestFrom(svc.url, from, 'GET', `/oauth/authorize?${q}`);
  return { status: a.status, body: a.body, ms: performance.now() - t0 };
}

describe('a name server that never answers', () => {
  it('50 authorization requests hold no pool thread, and file reads keep their latency', async () => {
    const pid = svc.proc.pid!;
    // Baseline of this run: file reads with no authorization load.
    await readOnce();
    await loginOnce();
    const baseline: number[] = [];
    for (let i = 0; i < 15; i++) baseline.push(await readOnce());
    const loginBaseline: number[] = [];
    for (let i = 0; i < 5; i++) loginBaseline.push(await loginOnce());

    // The load: ten client addresses, each sending five authorization requests one after another.
    let done = false;
    let maxHeld = 0;
    const sampler = (async () => {
      while (!done) {
        maxHeld = Math.max(maxHeld, poolThreadsOnNetwork(pid));
        await new Promise((r) => setTimeout(r, 20));
      }
    })();
    const streams = Array.from({ length: 10 }, async (_, a) => {
      const out: Array<{ status: number; ms: number; body: string }> = [];
      for (let k = 0; k < 5; k++) out.push(await authorize(`127.0.0.${60 + a}`, a * 5 + k));
      return out;
    });
    const loaded: number[] = [];
    const all = Promise.all(streams);
    let finished = false;
    void all.finally(() => (finished = true));
    const loginLoaded: number[] = [];
    const logins = (async () => {
      while (!finished) loginLoaded.push(await loginOnce());
    })();
    while (!finished) {
      loaded.push(await readOnce());
      await new Promise((r) => setTimeout(r, 20)); // paced: a steady reader, not a flood of its own
    }
    await logins;
    const answers = (await all).flat();
    done = true;
    await sampler;

    console.log(
      `files_read median: ${Math.round(median(baseline))} ms without load, ${Math.round(median(loaded))} ms under it (${loaded.length} calls); ` +
        `password login median: ${Math.round(median(loginBaseline))} ms without, ${Math.round(median(loginLoaded))} ms under it (${loginLoaded.length}); ` +
        `name server queries ${queries}; pool threads held by a lookup at most ${maxHeld}`,
    );
    expect(answers).toHaveLength(50);
    expect(queries).toBeGreaterThan(0); // the service really asked the silent name server
    for (const a of answers) {
      // A page each: the host could not be resolved (400), or fetches are busy (503) or over this address's limit (429).
      expect([400, 429, 503], a.body.slice(0, 300)).toContain(a.status);
      expect(a.body).toContain('Authorization request refused');
      expect(a.ms).toBeLessThan(15_000);
    }
    expect(answers.some((a) => a.status === 400 && /could not be resolved|no complete answer within 5 s/.test(a.body))).toBe(true);
    expect(maxHeld).toBe(0);
    // Generous: under a loaded machine the ratio moves; a starved pool makes it hundreds.
    expect(loaded.length).toBeGreaterThan(3);
    expect(median(loaded), `baseline ${baseline.map(Math.round)} loaded ${loaded.map(Math.round)}`).toBeLessThan(median(baseline) * 5 + 250);
    expect(loginLoaded.length).toBeGreaterThan(0);
    expect(median(loginLoaded), `baseline ${loginBaseline.map(Math.round)} loaded ${loginLoaded.map(Math.round)}`).toBeLessThan(median(loginBaseline) * 5 + 500);
  }, 120_000);
});
