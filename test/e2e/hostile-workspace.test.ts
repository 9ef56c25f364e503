/**
 * Issue #42 item 1 (the surfaces beside the preview relay), through the real service: bytes that
 * processes in a real workspace control reach the runner through command output (exec results,
 * streamed output of operations and tasks, terminals) and through the egress proxy. Each table of
 * hostile input runs while a second client's tool calls keep succeeding, and the runner's pid is
 * the same at the end, /healthz answering.
 *
 * - A run's output log that cannot be written (the runner's disk is full: here a 64 KiB tmpfs over
 *   <dataDir>/state/output) is cut short and said so; before the fix the log's 'error' event had
 *   no listener and ended the runner.
 * - Output of any bytes (invalid UTF-8, NUL, escapes, megabytes without a newline) through exec,
 *   operations and a terminal.
 * - The egress proxy fed binary, oversized and malformed heads, bad ports, half-closes, resets,
 *   hundreds of parallel connections, bytes after CONNECT; it keeps answering.
 * The daemon client, the relay's first reply and the credential broker against hostile peers:
 * test/sandbox/hostile-peers.test.ts.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Client } from '@modelcontextprotocol/client';
import { call, connectV2, httpRequest, type Service, startService } from './harness.js';
import { REPO_FILES, configFor, startGitHost } from './workspace-fixture.js';
import type { GitHost } from '../fixtures/githost.js';
import { releaseDataDir } from './cleanup.js';
import { assertNothingLeft } from './leftovers.js';

let host: GitHost;
let svc: Service;
let hostile: Client;
let bystander: Client;
let ws: string;
let pid: number;
const dataDir = mkdtempSync(join(tmpdir(), 'atelier-hostile-ws-'));
const outputDir = join(dataDir, 'state', 'output');

async function ok(c: Client, name: string, args: Record<string, unknown>, timeoutMs?: number): Promise<Record<string, unknown>> {
  const r = await call(c, name, args, timeoutMs);
  if (!r.ok) throw new Error(`${name} failed: ${r.text}`);
  return r.result;
}

/** The runner is the same process, answers /healthz, and another client's calls succeed. */
async function stillServing(): Promise<void> {
  expect(svc.proc.exitCode).toBeNull();
  expect(svc.proc.pid).toBe(pid);
  expect((await httpRequest(svc.url, 'GET', '/healthz')).status).toBe(200);
  const r = await ok(bystander, 'exec_run', { workspaceId: ws, command: 'echo bystander-$((40+2))' });
  expect(r.stdout).toBe('bystander-42\n');
  const f = await ok(bystander, 'files_read', { workspaceId: ws, path: 'README.md' });
  expect(JSON.stringify(f)).toContain('# demo');
}

/** While `work` runs, the bystander keeps calling; every one of its calls must succeed. */
async function alongside<T>(work: () => Promise<T>): Promise<T> {
  let done = false;
  let calls = 0;
  const bystanding = (async () => {
    while (!done) {
      const r = await ok(bystander, 'exec_run', { workspaceId: ws, command: 'echo still' });
      expect(r.stdout).toBe('still\n');
      calls++;
    }
  })();
  try {
    return await work();
  } finally {
    done = true;
    await bystanding;
    expect(calls).toBeGreaterThan(0);
  }
}

beforeAll(async () => {
  host = await startGitHost();
  const repoUrl = (await host.createRepo('approved/hostile', REPO_FILES)).url;
  await configFor(host, dataDir);
  // The runner's disk for run logs, nearly full from the start.
  mkdirSync(outputDir, { recursive: true, mode: 0o700 });
  execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=64k,mode=0700', 'tmpfs', outputDir]);
  svc = await startService({ dataDir });
  pid = svc.proc.pid!;
  hostile = await connectV2(svc);
  bystander = await connectV2(svc);
  ws = (await ok(hostile, 'workspace_open', { repositoryUrl: repoUrl, idempotencyKey: 'hostile-open', networkProfile: 'dependency-access' })).workspaceId as string;
}, 180_000);

afterAll(async () => {
  await hostile?.close();
  await bystander?.close();
  await svc?.dispose();
  await host?.close();
  releaseDataDir(dataDir);
  await assertNothingLeft(dataDir);
});

describe('command output the runner cannot store', () => {
  it('an operation and a task whose logs fill the disk end with their output cut short; the runner stays up', async () => {
    await alongside(async () => {
      const op = await ok(hostile, 'exec_run', { workspaceId: ws, command: 'head -c 1000000 /dev/zero | tr "\\0" x; echo; echo done', async: true });
      const waited = await ok(hostile, 'operation_wait', { operationId: op.operationId, timeoutMs: 120_000 }, 150_000);
      expect(waited.state).toBe('succeeded');
      expect(waited.outputTruncated).toBe(true);
      const task = await ok(hostile, 'tasks_run', { workspaceId: ws, command: 'head -c 1000000 /dev/urandom; echo done', idempotencyKey: 'hostile-task-full' });
      const end = Date.now() + 120_000;
      let st: Record<string, unknown> = {};
      while (Date.now() < end && (st = await ok(hostile, 'tasks_status', { workspaceId: ws, taskId: task.taskId })).state === 'running') await new Promise((r) => setTimeout(r, 200));
      expect(st.state).toBe('succeeded');
      expect(st.outputTruncated).toBe(true);
    });
    await stillServing();
  }, 300_000);
});

describe('output of any bytes', () => {
  it('exec results and terminals take binary, invalid UTF-8, escapes and megabytes without a newline', async () => {
    await alongside(async () => {
      const binary = await ok(hostile, 'exec_run', { workspaceId: ws, command: 'head -c 2000000 /dev/urandom', maxOutputBytes: 1048576 });
      expect(binary.exitCode).toBe(0);
      expect(binary.stdoutBytes).toBe(2000000);
      expect(binary.stdoutTruncated).toBe(true);
      const odd = await ok(hostile, 'exec_run', { workspaceId: ws, command: "printf '\\377\\376\\000\\033[2J\\303'; printf '\\342\\202' >&2; printf 'x%.0s' $(seq 1 70000) >&2" });
      expect(odd.stdoutBytes).toBe(8);
      expect(odd.stderrBytes).toBe(70002);
      const long = await ok(hostile, 'exec_run', { workspaceId: ws, command: 'head -c 20000000 /dev/zero | tr "\\0" x', maxOutputBytes: 1024 });
      expect(long.stdoutBytes).toBe(20000000);

      const shell = (await ok(hostile, 'shell_open', { workspaceId: ws, idempotencyKey: 'hostile-shell' })).shellId as string;
      let cursor: string | undefined;
      /** Sends `input`, then reads the shell's output until `text` shows (the last 4 KiB kept). */
      const untilSays = async (input: string, text: string): Promise<string> => {
        await ok(hostile, 'shell_io', { workspaceId: ws, shellId: shell, input });
        let seen = '';
        const end = Date.now() + 120_000;
        while (Date.now() < end && !seen.includes(text)) {
          const io = await ok(hostile, 'shell_io', { workspaceId: ws, shellId: shell, cursor, waitMs: 2000 });
          cursor = io.nextCursor as string;
          seen = (seen + String(io.output)).slice(-4096);
        }
        return seen;
      };
      expect(await untilSays('head -c 3000000 /dev/urandom; printf "\\nEND-%s\\n" $((6*7))\n', 'END-42')).toContain('END-42');
      // The terminal still works after it (its line discipline may have taken some bytes as keys).
      expect(await untilSays('\u0003\nstty sane; echo ok-$((1+1))\n', 'ok-2')).toContain('ok-2');
      await ok(hostile, 'shell_close', { workspaceId: ws, shellId: shell });
    });
    await stillServing();
  }, 300_000);
});

/** Runs inside the workspace: one hostile exchange per case with the egress proxy, printing `<case> <first line or closed>`. */
const EGRESS_SCRIPT = String.raw`
const net = require('net');
const one = (name, parts, opts = {}) => new Promise((resolve) => {
  const s = net.connect(3128, '127.0.0.1');
  let got = Buffer.alloc(0);
  const finish = () => { const line = got.toString('latin1').split('\r\n')[0]; resolve(name + ' ' + (line || 'closed')); };
  s.on('data', (d) => { got = Buffer.concat([got, d]).subarray(0, 4096); });
  s.on('error', () => {});
  s.on('close', finish);
  s.setTimeout(15000, () => s.destroy());
  s.on('connect', async () => {
    for (const p of parts) {
      if (s.destroyed) break;
      s.write(p);
      if (opts.slow) await new Promise((r) => setTimeout(r, 2));
    }
    if (opts.half) s.end();
    if (opts.reset) s.destroy();
  });
});
const cases = [
  ['binary', [Buffer.from([0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03])]],
  ['invalid-bytes', [Buffer.concat([Buffer.from('CONNECT a'), Buffer.from([0xe9, 0xff]), Buffer.from('.com:443 HTTP/1.1\r\n\r\n')])]],
  ['huge-header', ['GET http://x/ HTTP/1.1\r\nX: ' + 'a'.repeat(1 << 20) + '\r\n\r\n']],
  ['many-headers', ['GET http://x/ HTTP/1.1\r\n' + 'X-A: b\r\n'.repeat(5000) + '\r\n']],
  ['port-0', ['CONNECT registry.npmjs.org:0 HTTP/1.1\r\n\r\n']],
  ['port-big', ['CONNECT registry.npmjs.org:99999999999 HTTP/1.1\r\n\r\n']],
  ['bad-v6', ['CONNECT [::1:443 HTTP/1.1\r\n\r\n']],
  ['v6-zone', ['CONNECT [fe80::1%eth0]:443 HTTP/1.1\r\n\r\n']],
  ['v4-mapped-v6', ['CONNECT [::ffff:127.0.0.1]:443 HTTP/1.1\r\n\r\n']],
  ['odd-v6', ['CONNECT [::ffff:1.2.3.4.5]:443 HTTP/1.1\r\n\r\n']],
  ['no-host', ['CONNECT :443 HTTP/1.1\r\n\r\n']],
  ['userinfo', ['CONNECT u:p@registry.npmjs.org:443 HTTP/1.1\r\n\r\n']],
  ['long-host', ['CONNECT ' + 'a'.repeat(10000) + ':443 HTTP/1.1\r\n\r\n']],
  ['numeric-host', ['CONNECT 0x7f000001:443 HTTP/1.1\r\n\r\n']],
  ['private-ip', ['CONNECT 127.0.0.1:22 HTTP/1.1\r\n\r\n']],
  ['unlisted-host', ['CONNECT example.com:443 HTTP/1.1\r\n\r\n' + '\x16\x03\x01garbage after the head']],
  ['plain-absolute', ['GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n']],
  ['plain-origin-form', ['GET / HTTP/1.1\r\nHost: x\r\n\r\n']],
  ['bare-newlines', ['\n\n\n\n']],
  ['empty-head', ['\r\n\r\n']],
  ['http-2.0', ['CONNECT registry.npmjs.org:443 HTTP/2.0\r\n\r\n']],
  ['bad-header-line', ['CONNECT registry.npmjs.org:443 HTTP/1.1\r\nno colon here\r\n\r\n']],
  ['byte-by-byte', [...'CONNECT example.org:443 HTTP/1.1\r\n\r\n'].map((c) => Buffer.from(c)), { slow: true }],
  ['half-close-mid-head', ['CONNECT registry.npm'], { half: true }],
  ['reset-mid-head', ['CONNECT registry.npm'], { reset: true }],
  ['reset-after-connect', ['CONNECT registry.npmjs.org:443 HTTP/1.1\r\n\r\n'], { reset: true }],
  ['half-close-after-connect', ['CONNECT registry.npmjs.org:443 HTTP/1.1\r\n\r\n'], { half: true }],
];
(async () => {
  for (const [name, parts, opts] of cases) console.log(await one(name, parts, opts));
  // Hundreds at once, each half a head then gone.
  const many = await Promise.all(Array.from({ length: 300 }, (_, i) => one('parallel-' + i, ['CONNECT exa'], i % 2 ? { half: true } : { reset: true })));
  console.log('parallel ' + many.length);
})();
`;

describe('the egress proxy', () => {
  it('answers or closes every hostile exchange and keeps answering', async () => {
    const lines = await alongside(async () => {
      await ok(hostile, 'files_write', { workspaceId: ws, path: '.hostile-egress.js', content: EGRESS_SCRIPT });
      const r = await ok(hostile, 'exec_run', { workspaceId: ws, command: 'node .hostile-egress.js', timeoutMs: 240_000 }, 260_000);
      expect(r.exitCode).toBe(0);
      return String(r.stdout).trim().split('\n');
    });
    const by = Object.fromEntries(lines.map((l) => [l.split(' ')[0], l.slice(l.indexOf(' ') + 1)]));
    expect(by).toMatchObject({
      binary: 'HTTP/1.1 400 Bad Request',
      'invalid-bytes': 'HTTP/1.1 400 Bad Request',
      'huge-header': 'HTTP/1.1 431 Request Header Fields Too Large',
      'many-headers': 'HTTP/1.1 431 Request Header Fields Too Large',
      'port-0': 'HTTP/1.1 400 Bad Request',
      'port-big': 'HTTP/1.1 400 Bad Request',
      'bad-v6': 'HTTP/1.1 400 Bad Request',
      'v6-zone': 'HTTP/1.1 400 Bad Request',
      'no-host': 'HTTP/1.1 400 Bad Request',
      userinfo: 'HTTP/1.1 400 Bad Request',
      'long-host': 'HTTP/1.1 400 Bad Request',
      'numeric-host': 'HTTP/1.1 400 Bad Request',
      'private-ip': 'HTTP/1.1 403 Forbidden',
      'unlisted-host': 'HTTP/1.1 403 Forbidden',
      'plain-absolute': 'HTTP/1.1 403 Forbidden',
      'plain-origin-form': 'HTTP/1.1 400 Bad Request',
      'http-2.0': 'HTTP/1.1 400 Bad Request',
      'bad-header-line': 'HTTP/1.1 400 Bad Request',
      'byte-by-byte': 'HTTP/1.1 403 Forbidden',
      'half-close-mid-head': 'closed',
      'reset-mid-head': 'closed',
      parallel: '300',
    });
    // Whatever the proxy made of these, each got an answer or a close (none hung the script).
    for (const k of ['v4-mapped-v6', 'odd-v6', 'bare-newlines', 'empty-head', 'reset-after-connect', 'half-close-after-connect']) expect(by[k]).toBeDefined();
    // And it still decides: a plain request is refused by the proxy itself.
    const after = await ok(hostile, 'exec_run', { workspaceId: ws, command: 'curl -s -m 20 -o /dev/null -w "%{http_code}" -x http://127.0.0.1:3128 http://example.com/' });
    expect(after.stdout).toBe('403');
    await stillServing();
  }, 300_000);
});
