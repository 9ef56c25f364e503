/**
 * Repository credentials (issue #6, item 6) end to end: the owner adds a token and a GitHub App
 * with `atelier credentials`, the real service clones and pushes over HTTPS through the broker,
 * the app's installation tokens are minted from a fake GitHub API speaking GitHub's protocol
 * (JWT RS256 checked, tokens scoped to one repository), rotation and removal take effect at once,
 * and the dashboard REST manages the same store. No secret is ever printed, answered or stored in
 * clear.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Client } from '@modelcontextprotocol/client';
import { call, connectV2, dashboardLogin, httpRequest, runCli, startService, type Service } from './harness.js';
import { filesHolding } from './secret-scan.js';
import { releaseDataDir } from './cleanup.js';
import { REPO_FILES, startGitHost } from './workspace-fixture.js';
import type { GitHost } from '../fixtures/githost.js';
import { mountFakeGitHubApp, type FakeGitHubApp } from '../fixtures/fake-github-app.js';

let host: GitHost;
let gh: FakeGitHubApp;
let svc: Service;
let c: Client;
let dataDir: string;
let appCred: string;
let tokCred: string;
const urls: Record<string, string> = {};

const cli = (args: string[], input?: string) => runCli([...args, '--data-dir', dataDir], input === undefined ? {} : { input });

async function ok(name: string, args: Record<string, unknown>): Promise<Record<string, unknown>> {
  const r = await call(c, name, args);
  if (!r.ok) throw new Error(`${name} failed: ${r.text}`);
  return r.result;
}
async function err(name: string, args: Record<string, unknown>): Promise<{ code: string; message: string }> {
  const r = await call(c, name, args);
  if (r.ok) throw new Error(`${name} unexpectedly succeeded: ${JSON.stringify(r.result)}`);
  return r.error as never;
}
const sh = async (ws: string, command: string) => (await ok('exec_run', { workspaceId: ws, command, timeoutMs: 60_000 })) as { exitCode: number; stdout: string };

beforeAll(async () => {
  host = await startGitHost();
  for (const name of ['app', 'tok', 'noinst']) urls[name] = (await host.createRepo(`approved/${name}`, REPO_FILES)).url;
  gh = mountFakeGitHubApp(host, { installations: { 'approved/app': 77, 'other/thing': 78 } });
  dataDir = mkdtempSync(join(tmpdir(), 'atelier-cred-'));
  writeFileSync(join(dataDir, 'config.json'), JSON.stringify({ repositories: { allow: [`${host.url}/approved/*`], extraCaCertificates: [host.caCertPath] }, sandboxMemoryMb: 256, sandboxPidsMax: 128, sandboxDiskMb: 256 }));
  const keyFile = join(dataDir, 'app.pem');
  writeFileSync(keyFile, gh.privateKeyPem, { mode: 0o600 });

  const app = await cli(['credentials', 'add-github-app', `${host.url}/approved/`, '--app-id', gh.appId, '--private-key-file', keyFile, '--api-url', gh.apiUrl, '--json']);
  expect(app.code, app.stderr).toBe(0);
  appCred = JSON.parse(app.stdout).id;
  const tok = await cli(['credentials', 'add-token', `${host.url}/approved/tok.git`, '--username', 'x-access-token', '--label', 'deploy token', '--json'], host.token + '\n');
  expect(tok.code, tok.stderr).toBe(0);
  tokCred = JSON.parse(tok.stdout).id;
  // The key file was the owner's: the service keeps only the sealed copy.
  writeFileSync(keyFile, 'gone');

  svc = await startService({ dataDir });
  c = await connectV2(svc);
}, 120_000);

afterAll(async () => {
  await c?.close();
  await svc?.dispose();
  await host?.close();
  // The service kept its workspaces' disks mounted for a restart: release them with the data directory.
  if (dataDir) releaseDataDir(dataDir);
});

describe('atelier credentials (CLI)', () => {
  it('lists metadata only; no secret on any output or in clear anywhere in the data directory', async () => {
    const list = await cli(['credentials', 'list', '--json']);
    expect(list.code).toBe(0);
    const creds = JSON.parse(list.stdout) as Array<Record<string, unknown>>;
    expect(creds).toEqual([
      expect.objectContaining({ id: appCred, prefix: `${host.url}/approved/`, kind: 'github_app', appId: gh.appId, apiUrl: gh.apiUrl, installationId: null, fingerprint: expect.stringMatching(/^SHA256:/) }),
      expect.objectContaining({ id: tokCred, prefix: `${host.url}/approved/tok.git/`, kind: 'token', username: 'x-access-token', label: 'deploy token', secretVersion: 1, fingerprint: expect.stringMatching(/^sha256:/) }),
    ]);
    const human = await cli(['credentials', 'list']);
    expect(human.stdout).toContain(tokCred);
    for (const out of [list.stdout, human.stdout, human.stderr]) {
      expect(out).not.toContain(host.token);
      expect(out).not.toContain('PRIVATE KEY');
    }
    // Every file of the data directory (database, WAL, logs, config, images in the pool's mount).
    expect(filesHolding(dataDir, [host.token])).toEqual([]);
    expect(filesHolding(dataDir, [gh.privateKeyPem.split('\n')[1]!])).toEqual([]);
  });

  it('refuses bad input with the field and the rule, and a second credential for the same prefix', async () => {
    const dup = await cli(['credentials', 'add-token', `${host.url}/approved/tok.git/`], 'another-token-value\n');
    expect(dup.code).toBe(2);
    expect(dup.stderr).toContain(`already has credential ${tokCred}`);
    const plain = await cli(['credentials', 'add-token', 'http://example.com/'], 'another-token-value\n');
    expect(plain.stderr).toMatch(/prefix: must use https:\/\//);
    const notAKey = await cli(['credentials', 'add-github-app', 'https://git.example/', '--app-id', '1', '--private-key-file', join(dataDir, 'config.json')]);
    expect(notAKey.stderr).toMatch(/privateKey: must be the PEM text/);
    const usage = await cli(['credentials', 'frobnicate']);
    expect(usage.code).toBe(2);
    expect(usage.stderr).toMatch(/add-github-app PREFIX --app-id ID --private-key-file FILE/);
  });
});

describe('the broker uses them', () => {
  let tokWs: string;
  let appWs: string;

  it('clones and pushes with the owner-managed token (the longest prefix wins over the app)', async () => {
    tokWs = (await ok('workspace_open', { repositoryUrl: urls.tok, idempotencyKey: 'open-tok' })).workspaceId as string;
    const caps = await ok('workspace_capabilities', { workspaceId: tokWs });
    expect(caps.git).toMatchObject({ push: true, credentialSource: 'broker (owner-managed token)' });
    await ok('git_identity_set', { workspaceId: tokWs, name: 'Ada', email: 'ada@example.invalid' });
    await sh(tokWs, 'echo change >> README.md');
    await ok('git_commit', { workspaceId: tokWs, message: 'with a token', all: true });
    expect(await ok('git_push', { workspaceId: tokWs })).toMatchObject({ ref: 'refs/heads/main', outcome: 'fast-forward' });
    expect(gh.minted).toHaveLength(0);
  });

  it('mints a GitHub App installation token scoped to the one repository, reuses it, and keeps it out of the workspace', async () => {
    appWs = (await ok('workspace_open', { repositoryUrl: urls.app, idempotencyKey: 'open-app' })).workspaceId as string;
    expect(gh.calls.map((x) => `${x.method} ${x.path} ${x.jwtValid}`)).toEqual(['GET /repos/approved/app/installation true', 'POST /app/installations/77/access_tokens true']);
    expect(gh.minted).toHaveLength(1);
    expect(gh.minted[0]!.repositories).toEqual(['approved/app']);
    const caps = await ok('workspace_capabilities', { workspaceId: appWs });
    expect((caps.git as Record<string, unknown>).credentialSource).toMatch(/GitHub App installation token/);

    await ok('git_identity_set', { workspaceId: appWs, name: 'Ada', email: 'ada@example.invalid' });
    await sh(appWs, 'echo app >> README.md');
    await ok('git_commit', { workspaceId: appWs, message: 'through the app', all: true });
    expect(await ok('git_push', { workspaceId: appWs })).toMatchObject({ outcome: 'fast-forward' });
    await ok('git_fetch', { workspaceId: appWs });
    expect(gh.minted).toHaveLength(1); // reused: it has more than five minutes to live
    const pushes = host.requests.filter((q) => q.path.startsWith('/approved/app.git/git-receive-pack'));
    expect(pushes.length).toBeGreaterThan(0);
    expect(pushes.every((q) => q.authorized)).toBe(true);

    const minted = gh.minted[0]!.token;
    const leak = await sh(appWs, `grep -rlaF '${minted}' /workspace 2>/dev/null; env | grep -cF 'ghs_' || true; git config --list | grep -ci 'ghs_\\|extraheader' || true`);
    expect(leak.stdout.trim().split('\n')).toEqual(['0', '0']);
    expect(JSON.stringify(await cli(['credentials', 'list', '--json']))).not.toContain(minted);

    // A token with less than five minutes to live is not reused: a new key version mints anew, and
    // with a short lifetime every operation mints its own.
    const pemFile = join(dataDir, 'app-again.pem');
    writeFileSync(pemFile, gh.privateKeyPem, { mode: 0o600 });
    expect(JSON.parse((await cli(['credentials', 'rotate', appCred, '--private-key-file', pemFile, '--json'])).stdout)).toMatchObject({ secretVersion: 2 });
    gh.tokenTtlSec = 240;
    await ok('git_fetch', { workspaceId: appWs });
    await ok('git_fetch', { workspaceId: appWs });
    expect(gh.minted).toHaveLength(3);
    gh.tokenTtlSec = 3600;
  });

  it('says clearly when the app is not installed on a repository, and records it on the credential', async () => {
    const e = await err('workspace_open', { repositoryUrl: urls.noinst, idempotencyKey: 'open-noinst' });
    expect(e.code).toBe('FAILED_PRECONDITION');
    expect(e.message).toContain(`repository credential ${appCred} (GitHub App ${gh.appId}): the app is not installed on approved/noinst`);
    const open = (await ok('workspace_list', {})).workspaces as Array<{ repositoryUrl: string }>;
    expect(open.map((w) => w.repositoryUrl)).not.toContain(urls.noinst); // a failed open leaves nothing
    const list = JSON.parse((await cli(['credentials', 'list', '--json'])).stdout) as Array<Record<string, unknown>>;
    expect(list.find((x) => x.id === appCred)!.lastError).toMatch(/not installed on approved\/noinst/);
  });

  it('tests a credential the way git uses it, and a rotation takes effect on the next operation', async () => {
    const good = await cli(['credentials', 'test', tokCred, urls.tok!]);
    expect(good.code, good.stderr).toBe(0);
    expect(good.stdout).toMatch(/^ok: the host accepted the credential/);
    const appTest = await cli(['credentials', 'test', appCred, urls.app!, '--json']);
    expect(JSON.parse(appTest.stdout)).toMatchObject({ ok: true, minted: true, httpStatus: 200, expiresAt: expect.any(String) });
    const notCovered = await cli(['credentials', 'test', tokCred, urls.app!]);
    expect(notCovered.stderr).toContain(`is not covered by ${tokCred}`);

    expect((await cli(['credentials', 'rotate', tokCred], 'a-wrong-token-value\n')).code).toBe(0);
    const bad = await cli(['credentials', 'test', tokCred, urls.tok!]);
    expect(bad.code).toBe(1);
    expect(bad.stdout).toMatch(/FAILED: the host refused the credential \(HTTP 401\)/);
    const refused = await err('git_fetch', { workspaceId: tokWs });
    expect(refused.message).toMatch(/401|Authentication failed|could not read Username/i);

    const rotated = await cli(['credentials', 'rotate', tokCred, '--json'], host.token + '\n');
    expect(JSON.parse(rotated.stdout)).toMatchObject({ secretVersion: 3 });
    await ok('git_fetch', { workspaceId: tokWs });
  });

  it('removing a credential takes effect at once: the broader app credential now covers the repository', async () => {
    expect((await cli(['credentials', 'remove', tokCred])).stdout).toContain(`removed ${tokCred}`);
    // The app's prefix covers approved/tok too: it is not installed there, so nothing is minted.
    const e = await err('git_push', { workspaceId: tokWs });
    expect(e.message).toMatch(/not installed on approved\/tok/);
  });
});

describe('the retired config-file credentials', () => {
  it('stop start-up with a message that says where credentials went', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'atelier-cred-old-'));
    writeFileSync(join(dir, 'config.json'), JSON.stringify({ repositories: { allow: [], credentials: [{ prefix: 'https://git.example/', tokenFile: '/etc/token' }] } }));
    const failed = await startService({ dataDir: dir, expectStart: false }).then(
      () => null,
      (e: Error) => e.message,
    );
    expect(failed).toMatch(/exited with 2[\s\S]*"repositories.credentials" is no longer read[\s\S]*atelier credentials add-token/);
    rmSync(dir, { recursive: true, force: true });
  });
});

describe('dashboard REST', () => {
  it('manages the same store: create, read, rotate, test and delete; secrets go in, never out', async () => {
    const { cookie, csrf } = await dashboardLogin(svc);
    const j = (m: string, p: string, body?: unknown, withCsrf = true) =>
      httpRequest(svc.url, m, `/api/v1${p}`, { cookie, 'content-type': 'application/json', ...(withCsrf ? { 'x-csrf-token': csrf } : {}) }, body === undefined ? undefined : JSON.stringify(body));

    const noCsrf = await j('POST', '/repository-credentials', { kind: 'token', prefix: `${host.url}/approved/tok/`, token: host.token }, false);
    expect(noCsrf.status).toBe(403);
    const unknown = await j('POST', '/repository-credentials', { kind: 'token', prefix: `${host.url}/approved/tok/`, token: host.token, tokenFile: '/x' });
    expect(unknown.status).toBe(400);
    expect(JSON.parse(unknown.body).error.message).toMatch(/^tokenFile: unknown field/);
    const badKind = await j('POST', '/repository-credentials', { kind: 'ssh', prefix: 'https://x/' });
    expect(JSON.parse(badKind.body).error).toMatchObject({ code: 'INVALID_ARGUMENT', details: { field: 'kind' } });

    const created = await j('POST', '/repository-credentials', { kind: 'token', prefix: `${host.url}/approved/tok/`, token: host.token, label: 'from the dashboard' });
    expect(created.status).toBe(201);
    expect(created.body).not.toContain(host.token);
    const id = JSON.parse(created.body).credential.id as string;
    const list = await j('GET', '/repository-credentials');
    expect(JSON.parse(list.body).credentials.map((x: { id: string }) => x.id)).toEqual(expect.arrayContaining([appCred, id]));
    expect(list.body).not.toContain(host.token);

    const tested = JSON.parse((await j('POST', `/repository-credentials/${id}/test`, { repositoryUrl: urls.tok })).body);
    expect(tested).toMatchObject({ ok: true, httpStatus: 200, minted: false });
    await ok('git_fetch', { workspaceId: (await ok('workspace_open', { repositoryUrl: urls.tok, idempotencyKey: 'open-tok-2' })).workspaceId as string });

    const rotated = await j('POST', `/repository-credentials/${id}/rotate`, { token: 'x'.repeat(20) });
    expect(JSON.parse(rotated.body).credential).toMatchObject({ secretVersion: 2 });
    const wrongField = await j('POST', `/repository-credentials/${id}/rotate`, { privateKey: 'x' });
    expect(wrongField.status).toBe(400);
    const appRest = await j('POST', '/repository-credentials', { kind: 'github_app', prefix: `${host.url}/other/`, appId: gh.appId, privateKey: gh.privateKeyPem, installationId: '78', apiUrl: gh.apiUrl });
    expect(appRest.status).toBe(201);
    expect(appRest.body).not.toContain('PRIVATE KEY');
    expect(JSON.parse(appRest.body).credential).toMatchObject({ kind: 'github_app', installationId: '78' });

    expect(JSON.parse((await j('DELETE', `/repository-credentials/${id}`)).body)).toMatchObject({ deleted: true, id });
    expect((await j('GET', `/repository-credentials/${id}`)).status).toBe(404);

    expect((await cli(['credentials', 'list', '--json'])).stdout).not.toContain(id);
  });
});
