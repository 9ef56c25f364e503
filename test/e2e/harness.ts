/**
 * End-to-end harness: starts the real `bin/atelier serve` as a child process on a free port with a
 * temporary data directory, and connects the official MCP clients (v2 and v1) to it.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { request as httpRequestRaw } from 'node:http';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { Client as ClientV1 } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport as TransportV1 } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { afterEach } from 'vitest';

export const ROOT = resolve(import.meta.dirname, '../..');
export const BIN = join(ROOT, 'bin/atelier');

export interface Service {
  url: string; // http://127.0.0.1:PORT
  mcpUrl: string;
  token: string;
  loginLink: string;
  dataDir: string;
  proc: ChildProcess;
  stdout: () => string;
  stderr: () => string;
  stop(signal?: NodeJS.Signals): Promise<number | null>;
  /** Stops the process (if running) and removes the data directory. */
  dispose(): Promise<void>;
}

export interface StartOptions {
  dataDir?: string;
  args?: string[];
  env?: Record<string, string>;
  /** Resolve once the banner is printed; when false, wait for exit instead (for start-up errors). */
  expectStart?: boolean;
}

/** The services this test file started, newest last (for the logs of a failed test). */
const started: Array<{ port: string; log: () => string; running: () => boolean }> = [];
const FAILED_TEST_LOG_LINES = 60;

// A failed test shows the end of the log of each service of its file still running (the service
// logs to stderr): what a timeout in CI needs to be understood afterwards.
afterEach(({ task }) => {
  if (task.result?.state !== 'fail') return;
  for (const s of started.filter((x) => x.running()).slice(-3)) {
    const lines = s.log().trimEnd().split('\n').slice(-FAILED_TEST_LOG_LINES);
    console.error(`--- "${task.name}" failed: the last ${lines.length} log lines of the service on port ${s.port} ---\n${lines.join('\n')}\n--- end of log ---`);
  }
});

export async function startService(opts: StartOptions = {}): Promise<Service> {
  const dataDir = opts.dataDir ?? mkdtempSync(join(tmpdir(), 'atelier-e2e-'));
  const proc = spawn(process.execPath, [BIN, 'serve', '--port', '0', '--data-dir', dataDir, '--log-level', 'info', ...(opts.args ?? [])], {
    // The local embedding model is loaded only by the tests that search by meaning (they pass
    // ATELIER_KNOWLEDGE_EMBEDDINGS on): it costs every start about 1.3 s of CPU and 115 MB, on a
    // suite that starts a few hundred services on two cores. Lexical search, owner notes and
    // every other tool work the same with it off; a flag or the test's own env still decides.
    env: { ATELIER_KNOWLEDGE_EMBEDDINGS: 'off', ...process.env, ...opts.env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  proc.stdout!.on('data', (d) => (out += d));
  proc.stderr!.on('data', (d) => (err += d));
  const exited = new Promise<number | null>((r) => proc.once('exit', (code) => r(code)));
  await new Promise<void>((resolvePromise, reject) => {
    const timer = setTimeout(() => reject(new Error(`service did not start in time\nstdout:\n${out}\nstderr:\n${err}`)), 90_000); // generous: a loaded 2-core machine starts it in 40 s or more
    const check = () => {
      if (/Dashboard:\s+\S+/.test(out)) {
        clearTimeout(timer);
        resolvePromise();
      }
    };
    proc.stdout!.on('data', check);
    void exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`service exited with ${code} before starting\nstdout:\n${out}\nstderr:\n${err}`));
    });
  });
  const mcpUrl = /MCP URL:\s+(\S+)/.exec(out)![1]!;
  started.push({ port: new URL(mcpUrl).port, log: () => err, running: () => proc.exitCode === null && proc.signalCode === null });
  const token = /Owner token:\s+(atl_\S+)/.exec(out)?.[1] ?? '';
  const loginLink = /Dashboard:\s+(\S+)/.exec(out)![1]!;
  const stop = async (signal: NodeJS.Signals = 'SIGTERM') => {
    if (proc.exitCode !== null || proc.signalCode !== null) return proc.exitCode;
    proc.kill(signal);
    return exited;
  };
  return {
    url: mcpUrl.replace(/\/mcp$/, ''),
    mcpUrl,
    token,
    loginLink,
    dataDir,
    proc,
    stdout: () => out,
    stderr: () => err,
    stop,
    async dispose() {
      await stop();
      if (opts.dataDir) return;
      unmountUnder(dataDir);
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/**
 * Lazily unmounts whatever is mounted under `dir`, deepest first: workspace filesystems and the
 * image pool a stopped service leaves mounted (they stay mounted across a restart by design), so
 * removing a test's data directory never walks into a mount and no loop device is left behind.
 */
export function unmountUnder(dir: string): void {
  const points = readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .map((l) => l.split(' ')[4]?.replace(/\\040/g, ' '))
    .filter((m): m is string => !!m && m.startsWith(`${dir}/`))
    .sort((a, b) => b.length - a.length);
  for (const m of points) spawnSync('umount', ['-l', m], { stdio: 'ignore' });
}

/** `atelier serve` that is expected to refuse to start: its exit code and stderr (killed after 15 s). */
export function serveExpectingFailure(args: string[], env: Record<string, string> = {}): Promise<{ code: number | null; stderr: string }> {
  return new Promise((resolve) => {
    const p = spawn(process.execPath, [BIN, 'serve', ...args], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let stderr = '';
    p.stderr.on('data', (d) => (stderr += d));
    const t = setTimeout(() => p.kill('SIGKILL'), 60_000); // only a bound on a start that hangs: a loaded machine takes 15 s or more to load the CLI
    p.on('exit', (code) => {
      clearTimeout(t);
      resolve({ code, stderr });
    });
  });
}

/** Runs the CLI to completion. */
export function runCli(args: string[], opts: { input?: string; env?: Record<string, string> } = {}): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolvePromise) => {
    const p = spawn(process.execPath, [BIN, ...args], { env: { ...process.env, ...opts.env }, stdio: ['pipe', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    p.stdout.on('data', (d) => (stdout += d));
    p.stderr.on('data', (d) => (stderr += d));
    p.stdin.end(opts.input ?? '');
    p.on('exit', (code) => resolvePromise({ code, stdout, stderr }));
  });
}

export type AnyClient = Client | ClientV1;

export async function connectV2(svc: Service, token = svc.token): Promise<Client> {
  const c = new Client({ name: 'atelier-e2e-v2', version: '1.0.0' });
  await c.connect(new StreamableHTTPClientTransport(new URL(svc.mcpUrl), { requestInit: { headers: { Authorization: `Bearer ${token}` } } }));
  return c;
}

export async function connectV1(svc: Service, token = svc.token): Promise<ClientV1> {
  const c = new ClientV1({ name: 'atelier-e2e-v1', version: '1.0.0' });
  await c.connect(new TransportV1(new URL(svc.mcpUrl), { requestInit: { headers: { Authorization: `Bearer ${token}` } } }));
  return c;
}

export interface ToolError {
  code: string;
  message: string;
  retryable: boolean;
  details: Record<string, unknown>;
}

/**
 * Calls a tool and returns either its structured result or its structured error. `timeoutMs`: the
 * client's request timeout for calls that move hundreds of megabytes (the client's own default is
 * 60 s, which a 200 MiB restore on a loaded 2-core machine can pass).
 */
export async function call(c: AnyClient, name: string, args: Record<string, unknown>, timeoutMs?: number): Promise<{ ok: true; result: Record<string, unknown> } | { ok: false; error: ToolError; text: string }> {
  const r = (await (c as Client).callTool({ name, arguments: args }, timeoutMs ? { timeout: timeoutMs } : undefined)) as { isError?: boolean; structuredContent?: Record<string, unknown>; content: Array<{ type: string; text?: string }> };
  if (r.isError) return { ok: false, error: r.structuredContent!.error as ToolError, text: r.content.map((x) => x.text ?? '').join('') };
  // Large results come once, as the JSON text block only (docs/architecture.md, "Results").
  return { ok: true, result: r.structuredContent ?? (JSON.parse(r.content[0]!.text!) as Record<string, unknown>) };
}

export function cleanupDir(dir: string): void {
  rmSync(dir, { recursive: true, force: true });
}

export interface RawResponse {
  status: number;
  body: string;
  headers: Record<string, string | string[] | undefined>;
}

/** Raw HTTP to the service with full control over headers, Host included (fetch cannot set Host). */
export function httpRequest(baseUrl: string, method: string, path: string, headers: Record<string, string> = {}, body?: string): Promise<RawResponse> {
  const u = new URL(baseUrl);
  return new Promise((resolve, reject) => {
    const req = httpRequestRaw({ host: u.hostname, port: u.port, method, path, headers: { host: u.host, ...headers } }, (res) => {
      let b = '';
      res.on('data', (d) => (b += d));
      res.on('end', () => resolve({ status: res.statusCode!, body: b, headers: res.headers }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

/** Logs in to the dashboard with the one-time link printed at start; returns the session cookie and CSRF token. */
export async function dashboardLogin(svc: Service): Promise<{ cookie: string; csrf: string }> {
  const link = new URL(svc.loginLink);
  const first = await httpRequest(svc.url, 'GET', link.pathname + link.search);
  const cookie = String(first.headers['set-cookie']).split(';')[0]!;
  const csrf = JSON.parse((await httpRequest(svc.url, 'GET', '/api/v1/session', { cookie })).body).csrfToken as string;
  return { cookie, csrf };
}
