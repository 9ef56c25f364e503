/**
 * Leases lapsing into the recoverable state, resuming, surviving a runner restart, environments with
 * secrets (injection only when confirmed, redaction everywhere), context and capabilities.
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Client } from '@modelcontextprotocol/client';
import { call, connectV2, runCli, type Service } from './harness.js';
import { REPO_FILES, configFor, startGitHost, startWorkspaceService } from './workspace-fixture.js';
import type { GitHost } from '../fixtures/githost.js';

const SECRET = 'sk-live-7f3a9c2e41b8d6';
const GLOBAL_SECRET = 'gl-secret-55aa33cc';

let host: GitHost;
let svc: Service;
let c: Client;
let repoUrl: string;
let envId: string;
const dataDir = mkdtempSync(join(tmpdir(), 'atelier-wsl-'));

async function ok(name: string, args: Record<string, unknown>): Promise<Record<string, unknown>> {
  const r = await call(c, name, args);
  if (!r.ok) throw new Error(`${name} failed: ${r.text}`);
  return r.result;
}
const sh = async (workspaceId: string, command: string, extra: Record<string, unknown> = {}) => (await ok('exec_run', { workspaceId, command, ...extra })) as { stdout: string; stderr: string; exitCode: number };
const waitFor = async (what: () => Promise<boolean>, ms: number) => {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (await what()) return true;
    await new Promise((r) => setTimeout(r, 500));
  }
  return false;
};

beforeAll(async () => {
  host = await startGitHost();
  repoUrl = (await host.createRepo('approved/life', REPO_FILES)).url;
  await configFor(host, dataDir);
  const created = await runCli(['env', 'create', 'ci-env', '--description', 'for tests', '--data-dir', dataDir]);
  expect(created.code, created.stderr).toBe(0);
  envId = created.stdout.split(/\s+/)[0]!;
  expect((await runCli(['env', 'set', 'ci-env', 'API_TOKEN', '--secret', '--description', 'the API token', '--data-dir', dataDir], { input: SECRET + '\n' })).code).toBe(0);
  expect((await runCli(['env', 'set', 'global', 'GLOBAL_SECRET', '--secret', '--data-dir', dataDir], { input: GLOBAL_SECRET })).code).toBe(0);
  expect((await runCli(['env', 'set', 'ci-env', 'PLAIN_VAR=hello-plain', '--data-dir', dataDir])).code).toBe(0);
  svc = await startWorkspaceService(host, { dataDir, args: ['--idle-lease-seconds', '10'] });
  c = await connectV2(svc);
}, 120_000);

let restarted: Service | undefined;

afterAll(async () => {
  await restarted?.stop();
  await c?.close();
  await svc?.dispose();
  await host?.close();
});

describe('environments and secrets', () => {
  it('refuses injection without confirmEnvironmentInjection, naming the field', async () => {
    const r = await call(c, 'workspace_open', { repositoryUrl: repoUrl, idempotencyKey: 'env-noconfirm', environmentId: envId });
    expect(r.ok).toBe(false);
    if (!r.ok) {
      expect(r.error.code).toBe('INVALID_ARGUMENT');
      expect(r.error.details.field).toBe('confirmEnvironmentInjection');
    }
  });

  it('injects variables and secrets when confirmed, and redacts secret values from every output', async () => {
    const w = await ok('workspace_open', { repositoryUrl: repoUrl, idempotencyKey: 'env-confirm', environmentId: envId, confirmEnvironmentInjection: true });
    const id = w.workspaceId as string;
    const r = await sh(id, 'echo "token=$API_TOKEN global=$GLOBAL_SECRET plain=$PLAIN_VAR"; echo "$API_TOKEN" >&2; echo -n "$API_TOKEN" | wc -c');
    expect(r.stdout).toContain('token=[redacted:API_TOKEN] global=[redacted:GLOBAL_SECRET] plain=hello-plain');
    expect(r.stderr).toContain('[redacted:API_TOKEN]');
    expect(r.stdout).toContain(String(SECRET.length)); // the real value is there, only the output is redacted
    // Large output (it crosses the daemon hop as raw bytes, and the wire from them when nothing reads
    // it): the secret at the start, in the middle and at the very end of 300 KB is redacted all the same.
    const big = await sh(id, 'echo "$API_TOKEN"; for i in $(seq 1 5000); do echo "line $i of filler text to make the output large enough"; done; echo "mid=$API_TOKEN"; seq 1 20000; echo -n "$API_TOKEN"', { maxOutputBytes: 1048576 });
    expect(big.stdout.length).toBeGreaterThan(200_000);
    expect(big.stdout).not.toContain(SECRET);
    expect(big.stdout.startsWith('[redacted:API_TOKEN]\nline 1 of')).toBe(true);
    expect(big.stdout).toContain('mid=[redacted:API_TOKEN]\n1\n');
    expect(big.stdout.endsWith('20000\n[redacted:API_TOKEN]')).toBe(true);
    const list = await ok('secrets_list', { workspaceId: id });
    const names = (list.secrets as Array<{ name: string; scope: string; description: string }>).map((s) => `${s.scope}:${s.name}`);
    expect(names.sort()).toEqual(['environment:API_TOKEN', 'global:GLOBAL_SECRET']);
    const text = JSON.stringify(list);
    expect(text).not.toContain(SECRET);
    expect(text).not.toContain(GLOBAL_SECRET);
    const filtered = await ok('secrets_list', { environmentId: envId, query: 'api' });
    expect((filtered.secrets as unknown[]).length).toBe(1);
    await ok('workspace_close', { workspaceId: id });
  });

  it('a secret the CLI stores while the service runs is redacted from the next result on', async () => {
    const w = await ok('workspace_open', { repositoryUrl: repoUrl, idempotencyKey: 'env-live-set' });
    const id = w.workspaceId as string;
    const late = 'late-secret-' + 'q'.repeat(20);
    expect((await sh(id, `echo ${late}`)).stdout).toContain(late);
    expect((await runCli(['env', 'set', 'global', 'LATE_SECRET', '--secret', '--data-dir', svc.dataDir], { input: late + '\n' })).code).toBe(0);
    const r = await sh(id, `echo ${late}`);
    expect(r.stdout).toContain('[redacted:LATE_SECRET]');
    expect(r.stdout).not.toContain(late);
    await ok('workspace_close', { workspaceId: id });
  });

  it('a large files_read (its text block written from pieces) is redacted like any result', async () => {
    const w = await ok('workspace_open', { repositoryUrl: repoUrl, idempotencyKey: 'env-large-read' });
    const id = w.workspaceId as string;
    const value = 'big-read-secret-' + 'z'.repeat(24);
    // 300 KiB of ASCII with the value in it, and control characters, quotes and backslashes.
    const content = Array.from({ length: 3000 }, (_, i) => `line ${i} "q" \\ \t\u0001 ${value}\n`).join('');
    await ok('files_write', { workspaceId: id, path: 'big.txt', content });
    const plain = await ok('files_read', { workspaceId: id, path: 'big.txt', readAll: true });
    expect(plain.content).toBe(content);
    expect((await runCli(['env', 'set', 'global', 'BIG_READ_SECRET', '--secret', '--data-dir', svc.dataDir], { input: value + '\n' })).code).toBe(0);
    const text = await ok('files_read', { workspaceId: id, path: 'big.txt', readAll: true });
    expect(text.content).toBe(content.replaceAll(value, '[redacted:BIG_READ_SECRET]'));
    await ok('workspace_close', { workspaceId: id });
  });

  it('a workspace without an environment gets nothing injected', async () => {
    const w = await ok('workspace_open', { repositoryUrl: repoUrl, idempotencyKey: 'env-none' });
    const r = await sh(w.workspaceId as string, 'echo "[${API_TOKEN:-unset}] [${GLOBAL_SECRET:-unset}]"');
    expect(r.stdout.trim()).toBe('[unset] [unset]');
    await ok('workspace_close', { workspaceId: w.workspaceId });
  });
});

describe('context and capabilities', () => {
  it('workspace_context gives branch, lease, identity and a repository overview by client profile', async () => {
    const w = await ok('workspace_open', { repositoryUrl: repoUrl, idempotencyKey: 'context-1' });
    const id = w.workspaceId as string;
    await sh(id, 'git config user.name "Ada"; git config user.email ada@example.invalid');
    const all = await ok('workspace_context', { workspaceId: id });
    expect(all).toMatchObject({ activeWorkspaceId: id, branch: 'main', gitIdentity: { name: 'Ada', email: 'ada@example.invalid' } });
    const ov = all.repositoryOverview as Record<string, Array<Record<string, unknown>>>;
    expect(ov.languages!.map((l) => l.language)).toEqual(expect.arrayContaining(['TypeScript', 'Python']));
    expect(ov.testCommands!.map((t) => t.command)).toEqual(expect.arrayContaining(['npm test', 'make test']));
    expect(ov.instructions!.map((i) => i.path).sort()).toEqual(['AGENTS.md', 'CLAUDE.md']);
    const codex = await ok('workspace_context', { workspaceId: id, clientProfile: 'profile_b', include: ['instructions'], contentMode: 'excerpt', maxBytes: 4096 });
    const inst = (codex.repositoryOverview as Record<string, Array<Record<string, unknown>>>).instructions!;
    expect(inst.map((i) => i.path)).toEqual(['AGENTS.md']);
    expect(inst[0]!.excerpt).toContain('Run npm test');
    const p1 = await ok('workspace_context', { workspaceId: id, limit: 2 });
    expect(p1.nextCursor).toBeTypeOf('string');
    const p2 = await ok('workspace_context', { workspaceId: id, limit: 2, cursor: p1.nextCursor });
    expect(JSON.stringify(p2.repositoryOverview)).not.toBe(JSON.stringify(p1.repositoryOverview));
  });

  it('workspace_capabilities lists its authorization and the repohostActions list, minting no token', async () => {
    const w = await ok('workspace_open', { repositoryUrl: repoUrl, idempotencyKey: 'capabilities-1' });
    const cap = await ok('workspace_capabilities', { workspaceId: w.workspaceId });
    expect(Array.isArray(cap.repohostActions)).toBe(true);
    expect(cap.tokensMinted).toBe(false);
    expect((cap.git as { push: boolean }).push).toBe(true);
    expect(JSON.stringify(cap)).not.toContain(host.token);
    await ok('workspace_close', { workspaceId: w.workspaceId });
  });
});

describe('idle expiry, resume and restart', () => {
  it('an idle workspace lapses into expired_recoverable with its files, and resumes', async () => {
    const w = await ok('workspace_open', { repositoryUrl: repoUrl, idempotencyKey: 'idle-lease-1' });
    const id = w.workspaceId as string;
    // A background process started by a tool made for that (an async operation keeps its leftovers).
    const op = await ok('exec_run', { workspaceId: id, command: 'echo kept > kept.txt; sleep 600 > /dev/null 2>&1 &', async: true });
    await ok('operation_wait', { operationId: op.operationId, timeoutMs: 10_000 });
    // The operation's shell forks the child before it ends; its execve of sleep may come a moment later.
    expect((await sh(id, 'for i in $(seq 200); do pgrep -x sleep >/dev/null && echo sleeping && exit 0; sleep 0.05; done')).stdout).toBe('sleeping\n');
    expect(await waitFor(async () => (await ok('workspace_status', { workspaceId: id })).state === 'expired_recoverable', 30_000)).toBe(true);
    const refused = await call(c, 'exec_run', { workspaceId: id, command: 'true' });
    expect(!refused.ok && refused.error.code).toBe('FAILED_PRECONDITION');
    if (!refused.ok) expect(refused.error.message).toMatch(/workspace_recover|workspace_lease_renew/);
    // Recovery works on the expired workspace without resuming it.
    const st = await ok('workspace_recover', { workspaceId: id, mode: 'status' });
    expect((st.uncommittedChanges as Array<{ path: string }>).map((x) => x.path)).toEqual(['kept.txt']);
    const resumed = await ok('workspace_recover', { workspaceId: id, mode: 'resume' });
    expect(resumed.state).toBe('active');
    const r = await sh(id, 'cat kept.txt; pgrep -x sleep || echo no-sleep');
    expect(r.stdout).toBe('kept\nno-sleep\n'); // files kept, processes were stopped
    // A renewal also reactivates.
    expect(await waitFor(async () => (await ok('workspace_status', { workspaceId: id })).state === 'expired_recoverable', 30_000)).toBe(true);
    const renewed = await ok('workspace_lease_renew', { workspaceId: id, extensionSeconds: 60 });
    expect(renewed).toMatchObject({ state: 'active', reactivated: true, leaseCapped: false });
    expect((await sh(id, 'cat kept.txt')).stdout).toBe('kept\n');
  }, 90_000);

  it('after a runner restart every active workspace works again without the client doing anything', async () => {
    const w = await ok('workspace_open', { repositoryUrl: repoUrl, idempotencyKey: 'restart-1' });
    const id = w.workspaceId as string;
    await ok('workspace_lease_renew', { workspaceId: id, extensionSeconds: 600 });
    await sh(id, 'echo before-restart > state.txt');
    const token = svc.token;
    await c.close();
    expect(await svc.stop('SIGTERM')).toBe(0);
    const { startService } = await import('./harness.js');
    const again = await startService({ dataDir, args: ['--idle-lease-seconds', '10'] });
    restarted = again;
    c = await connectV2({ ...again, token });
    const status = await ok('workspace_status', { workspaceId: id });
    expect(status.state).toBe('active');
    expect((await sh(id, 'cat state.txt')).stdout).toBe('before-restart\n');
  }, 90_000);
});
