/** Starts the real `atelier gateway` process and drives its admin API (the runner's side of it). */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { BIN } from './harness.js';

export interface GatewayProc {
  url: string;
  bootId: string;
  secret: string;
  proc: ChildProcess;
  stderr: () => string;
  admin<T = any>(method: string, path: string, body?: unknown): Promise<{ status: number; body: T }>;
  push(snapshot: Record<string, unknown>): Promise<any>;
  lease(req: { agentId: string; profileId: string; revision?: number; budgets?: Partial<{ maxInputTokens: number; maxOutputTokens: number; maxCostMicros: number }>; expiresAt?: string }): Promise<{ token: string; leaseId: string }>;
  leaseInfo(id: string): Promise<any>;
  usage(after?: number): Promise<{ events: any[]; lastSeq: number; bootId: string }>;
  stop(): Promise<void>;
}

export async function startGatewayProc(opts: { env?: Record<string, string>; args?: string[] } = {}): Promise<GatewayProc> {
  const dir = mkdtempSync(join(tmpdir(), 'atelier-gw-'));
  const secret = randomBytes(24).toString('base64url');
  const file = join(dir, 'admin.secret');
  writeFileSync(file, secret + '\n', { mode: 0o600 });
  const proc = spawn(process.execPath, [BIN, 'gateway', '--port', '0', '--admin-secret-file', file, ...(opts.args ?? [])], { env: { ...process.env, ...opts.env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  proc.stderr!.on('data', (d) => (err += d));
  const m = await new Promise<RegExpExecArray>((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`gateway did not start: ${err}`)), 15_000);
    proc.stdout!.on('data', (d) => {
      out += d;
      const x = /listening at (\S+) \((boot_\S+)\)/.exec(out);
      if (x) {
        clearTimeout(t);
        resolve(x);
      }
    });
    proc.once('exit', (c) => reject(new Error(`gateway exited ${c}: ${err}`)));
  });
  const url = m[1]!;
  const admin = async (method: string, path: string, body?: unknown) => {
    const r = await fetch(url + path, { method, headers: { authorization: `Bearer ${secret}`, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });
    return { status: r.status, body: (await r.json()) as any };
  };
  const g: GatewayProc = {
    url,
    bootId: m[2]!,
    secret,
    proc,
    stderr: () => err,
    admin,
    async push(s) {
      const r = await admin('PUT', '/admin/snapshot', s);
      if (r.status !== 200) throw new Error(`push failed ${r.status}: ${JSON.stringify(r.body)}`);
      return r.body;
    },
    async lease(req) {
      const r = await admin('POST', '/admin/leases', {
        revision: 1,
        expiresAt: new Date(Date.now() + 600_000).toISOString(),
        ...req,
        budgets: { maxInputTokens: 200000, maxOutputTokens: 32000, maxCostMicros: 10_000_000, ...(req.budgets ?? {}) },
      });
      if (r.status !== 201) throw new Error(`lease failed ${r.status}: ${JSON.stringify(r.body)}`);
      return r.body;
    },
    async leaseInfo(id) {
      return (await admin('GET', `/admin/leases/${id}`)).body;
    },
    async usage(after = 0) {
      return (await admin('GET', `/admin/usage?after=${after}`)).body;
    },
    async stop() {
      if (proc.exitCode === null && proc.signalCode === null) {
        proc.kill('SIGTERM');
        await new Promise((r) => proc.once('exit', r));
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
  return g;
}

export const PRICES = { inputMicrosPerMillionTokens: 2_000_000, outputMicrosPerMillionTokens: 8_000_000, cachedReadMicrosPerMillionTokens: 500_000, cachedWriteMicrosPerMillionTokens: null };

export function route(profileId: string, provider: string, apiMode: 'chat-completions' | 'responses', key: string, extra: Record<string, unknown> = {}) {
  return { profileId, revision: 1, provider, apiMode, model: `model-${profileId}`, credential: { id: 'cred_' + 'x'.repeat(20), key, ...((extra.credential as object) ?? {}) }, pricing: PRICES, ...extra, ...(extra.credential ? { credential: { id: 'cred_' + 'x'.repeat(20), key, ...(extra.credential as object) } } : {}) };
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Polls until fn returns truthy. */
export async function until<T>(fn: () => Promise<T> | T, ms = 5000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error('condition not met in time');
    await sleep(20);
  }
}
