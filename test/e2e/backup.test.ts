/**
 * Backup and restore (issue #35 item 2, docs/operations.md) through the real `atelier serve` and CLI:
 * an instance with every kind of record (owner tokens, a provider credential and a repository
 * credential, a model profile, an owner approval, a spend record from a request through the
 * gateway, a memory note, knowledge items and a link, an artifact, audit entries) is backed up with
 * `atelier backup` WHILE an MCP client keeps writing; the backup is verified, restored into a new
 * data directory and served by a fresh `atelier serve`, and every record is read back through MCP
 * (with the old token) and the dashboard REST. The writes the client made form a prefix in the copy
 * (one consistent snapshot). Then the hostile side: restore into a non-empty directory, without the
 * master key or with another one, from a tampered backup, from a manifest naming `../` or a
 * symlink, and a backup into a non-empty directory, each refused with a message and nothing written.
 */
import { createHash } from 'node:crypto';
import { chmodSync, cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Client } from '@modelcontextprotocol/client';
import { call, connectV1, connectV2, dashboardLogin, httpRequest, runCli, startService, type Service } from './harness.js';
import { REPO_FILES, startGitHost, startWorkspaceService } from './workspace-fixture.js';
import { startFakeProvider, type FakeProvider } from '../fixtures/fake-provider.js';
import { until } from './gateway-harness.js';
import type { GitHost } from '../fixtures/githost.js';

type R = Record<string, unknown>;
const KEY = 'sk-backup-test-' + 'K'.repeat(24);
const PRICING = { inputMicrosPerMillionTokens: 2_000_000, outputMicrosPerMillionTokens: 8_000_000, cachedReadMicrosPerMillionTokens: 500_000, cachedWriteMicrosPerMillionTokens: null };
const LIMITS = { maxInputTokens: 100_000, maxOutputTokens: 8_000, maxCostMicros: 5_000_000 };

let host: GitHost;
let fake: FakeProvider;
let repoUrl: string;
let a: Service; // the original
let b: Service | undefined; // served from the restore
let c: Client;
let work: string; // backups and the restored data directory
let restoredDir: string;
let ownerA: { cookie: string; csrf: string };

async function ok(cl: Client, name: string, args: R, timeoutMs?: number): Promise<R> {
  const r = await call(cl, name, args, timeoutMs);
  if (!r.ok) throw new Error(`${name} failed: ${r.text}`);
  return r.result;
}
async function rest(svc: Service, s: { cookie: string; csrf: string }, method: string, path: string, body?: unknown): Promise<{ status: number; body: any }> {
  const h: Record<string, string> = { cookie: s.cookie, 'x-csrf-token': s.csrf };
  if (body !== undefined) h['content-type'] = 'application/json';
  const r = await httpRequest(svc.url, method, path, h, body === undefined ? undefined : JSON.stringify(body));
  return { status: r.status, body: JSON.parse(r.body || '{}') };
}

/** What the original held at backup time, read back from the restore. */
const before: {
  ws: string;
  tokenB: string;
  tokenIds: string[];
  credId: string;
  repoCredIds: string[];
  approvalId: string;
  noteGeneration: number;
  itemA: string;
  itemB: string;
  linkId: string;
  artifactId: string;
  artifactSha: string;
  auditIds: string[];
  auditCursor: string;
  spendSeries: unknown;
  settledMicros: number;
} = {} as never;

beforeAll(async () => {
  host = await startGitHost();
  fake = await startFakeProvider();
  repoUrl = (await host.createRepo('approved/backup', REPO_FILES)).url;
  work = mkdtempSync(join(tmpdir(), 'atelier-backup-'));
  chmodSync(work, 0o711); // the restored data directory lives here: sandbox users must traverse it
  a = await startWorkspaceService(host, { config: { knowledgeEmbeddings: 'off', sandboxDiskMb: 0, providers: { provider_a: { baseUrl: fake.url + '/v1' } } } });
  c = await connectV2(a);
}, 180_000);

afterAll(async () => {
  await c?.close().catch(() => undefined);
  await b?.dispose();
  await a?.dispose();
  await fake?.close();
  await host?.close();
  rmSync(work, { recursive: true, force: true });
});

describe('a backup taken while calls write, restored and served', () => {
  it('makes a record of every kind on the original', async () => {
    const owner = (ownerA = await dashboardLogin(a));
    // Owner tokens: the first one (from the banner) and one made on the dashboard.
    const t = await rest(a, owner, 'POST', '/api/v1/tokens', { name: 'second' });
    expect(t.status).toBe(201);
    before.tokenB = t.body.token;
    before.tokenIds = (await rest(a, owner, 'GET', '/api/v1/tokens')).body.tokens.map((x: R) => x.id).sort();
    expect(before.tokenIds.length).toBe(2);
    // A workspace (its repository credential is the broker's, added by `atelier credentials add-token`).
    const w = await ok(c, 'workspace_open', { repositoryUrl: repoUrl, idempotencyKey: 'backup-open-1' }, 120_000);
    before.ws = w.workspaceId as string;
    before.repoCredIds = (await rest(a, owner, 'GET', '/api/v1/repository-credentials')).body.credentials.map((x: R) => x.id);
    expect(before.repoCredIds.length).toBe(1);
    // A provider credential (sealed with the master key) and a profile, activated by the owner.
    const cred = await rest(a, owner, 'POST', '/api/v1/provider-credentials', { provider: 'provider_a', key: KEY, label: 'main' });
    expect(cred.status).toBe(201);
    before.credId = cred.body.credential.id;
    await ok(c, 'model_profile_create', { profileId: 'coder', displayName: 'Coder', credentialId: before.credId, model: 'model-a', apiMode: 'chat-completions', pricing: PRICING, limits: LIMITS, maxProxyOperations: ['files_read'], idempotencyKey: 'backup-profile-1' });
    const act = await rest(a, owner, 'POST', '/api/v1/agent-model-profiles/coder/activate', { expectedGeneration: 1 });
    expect(act.status).toBe(200);
    // A spend record: one request through the gateway, settled and synced into the ledger.
    const gwUrl = await until(() => /"url":"(http:\/\/127\.0\.0\.1:\d+)"/.exec(a.stderr())?.[1], 20_000);
    const secret = readFileSync(join(a.dataDir, 'state', 'gateway-admin.secret'), 'utf8').trim();
    const lease = await fetch(gwUrl + '/admin/leases', {
      method: 'POST',
      headers: { authorization: `Bearer ${secret}`, 'content-type': 'application/json' },
      body: JSON.stringify({ agentId: 'agent_' + 'b'.repeat(22), profileId: 'coder', revision: 1, budgets: { maxInputTokens: 10000, maxOutputTokens: 100, maxCostMicros: 100000 }, expiresAt: new Date(Date.now() + 60_000).toISOString() }),
    }).then((r) => r.json());
    const chat = await fetch(gwUrl + '/v1/chat/completions', { method: 'POST', headers: { authorization: `Bearer ${lease.token}`, 'content-type': 'application/json' }, body: JSON.stringify({ model: 'x', messages: [{ role: 'user', content: 'hi' }] }) });
    expect(chat.status).toBe(200);
    await chat.text();
    before.settledMicros = await until(async () => {
      const s = (await rest(a, owner, 'GET', '/api/v1/model-spend?period=day')).body;
      return s.windows[0].settledMicros as number;
    }, 20_000);
    expect(before.settledMicros).toBeGreaterThan(0);
    before.spendSeries = (await rest(a, owner, 'GET', '/api/v1/spend-series?range=month')).body.rows;
    // An owner approval: a privileged command from a client that cannot open the approval page.
    const plain = await connectV1(a);
    const pr = await call(plain, 'exec_run', { workspaceId: before.ws, command: 'id -u', privileged: true });
    await plain.close();
    expect(!pr.ok && pr.error.code).toBe('PERMISSION_DENIED');
    before.approvalId = String(!pr.ok && pr.error.details.approvalRequestId);
    expect(before.approvalId).toMatch(/^apr_/);
    // A memory note, two knowledge items and a link (owner scope: they outlive the workspace).
    const note = await ok(c, 'memories_write', { scope: 'owner', name: 'backup.note', content: 'Restores keep this.', tags: ['ops'] });
    before.noteGeneration = note.generation as number;
    before.itemA = (await ok(c, 'knowledge_create', { scope: 'owner', title: 'Backup A', content: 'first item', tags: ['ops'] })).id as string;
    before.itemB = (await ok(c, 'knowledge_create', { scope: 'owner', kind: 'journal', journalType: 'decision-record', title: 'Backup B', content: 'second item' })).id as string;
    before.linkId = (await ok(c, 'knowledge_link', { sourceId: before.itemA, targetId: before.itemB, relation: 'supports' })).linkId as string;
    // An artifact (its blob is a file under state/artifacts).
    await ok(c, 'exec_run', { workspaceId: before.ws, command: 'head -c 300000 /dev/urandom > art.bin' });
    const art = await ok(c, 'artifacts_snapshot', { workspaceId: before.ws, path: 'art.bin', logicalName: 'art.bin' });
    before.artifactId = art.artifactId as string;
    before.artifactSha = art.sha256 as string;
    // Audit entries so far, and a cursor (sealed with the master key) into the log.
    const audit = (await rest(a, owner, 'GET', '/api/v1/audit-log?limit=500')).body.entries as R[];
    before.auditIds = audit.map((e) => e.id as string);
    expect(before.auditIds.length).toBeGreaterThan(5);
    before.auditCursor = (await rest(a, owner, 'GET', '/api/v1/audit-log?limit=2')).body.nextCursor;
    expect(before.auditCursor).toBeTruthy();
  }, 300_000);

  let backupDir: string;
  let written: number[] = [];

  it('atelier backup takes a consistent copy while an MCP client writes; the manifest checks out', async () => {
    backupDir = join(work, 'b1');
    let stop = false;
    let n = 0;
    written = [];
    // A client writing notes one after another for as long as the backup runs.
    const writer = (async () => {
      while (!stop) {
        const i = n++;
        await ok(c, 'memories_write', { scope: 'owner', name: `during.${String(i).padStart(5, '0')}`, content: `note ${i}` });
        written.push(i);
      }
    })();
    // Let the writer get going first, so the copy is taken with writes in flight.
    await until(() => written.length >= 5, 30_000);
    const r = await runCli(['backup', backupDir, '--data-dir', a.dataDir, '--json']);
    const countAtEnd = written.length;
    stop = true;
    await writer;
    expect(r.code, r.stderr).toBe(0);
    const out = JSON.parse(r.stdout);
    expect(out.backup).toMatchObject({ kind: 'manual', outcome: 'ok', masterKeyIncluded: false });
    const m = out.manifest;
    expect(m).toMatchObject({ format: 'atelier-backup', formatVersion: 1, database: { integrity: 'ok' }, masterKey: { included: false }, workspaces: { included: false, records: 1 } });
    const health = JSON.parse((await httpRequest(a.url, 'GET', '/healthz')).body);
    expect(m.schemaVersion).toBe(health.schema);
    // The master key is not in it; every file's checksum is right; the artifact blob is there.
    expect(existsSync(join(backupDir, 'master.key'))).toBe(false);
    const key = readFileSync(join(a.dataDir, 'master.key'), 'utf8').trim();
    for (const f of readdirSync(backupDir, { recursive: true }) as string[]) {
      const p = join(backupDir, f);
      if (statSync(p).isFile()) expect(readFileSync(p).toString('latin1').includes(key), `${f} holds the master key`).toBe(false);
    }
    for (const f of m.files) expect(createHash('sha256').update(readFileSync(join(backupDir, f.path))).digest('hex')).toBe(f.sha256);
    expect(m.files.map((f: R) => f.path)).toContain(`state/artifacts/blobs/${before.artifactSha.slice(0, 2)}/${before.artifactSha}`);
    expect(m.files.map((f: R) => f.path)).toContain('config.json');
    for (const t of ['api_tokens', 'provider_credentials', 'repo_credentials', 'model_profiles', 'approvals', 'spend_reservations', 'memory_notes', 'knowledge_items', 'knowledge_links', 'artifacts', 'audit_log']) {
      expect(m.database.tables[t], t).toBeGreaterThan(0);
    }
    // Notes written during the backup: the copy holds an unbroken prefix of them (one commit point),
    // at least those done before the backup started.
    expect(m.database.tables.memory_notes).toBeGreaterThanOrEqual(1 + 5);
    expect(m.database.tables.memory_notes).toBeLessThanOrEqual(1 + countAtEnd + 1);
    const v = await runCli(['backup', 'verify', backupDir]);
    expect(v.code, v.stderr).toBe(0);
    expect(v.stdout).toMatch(/complete and intact/);
    // The original recorded it: the dashboard's instance view has its time and size.
    const inst = (await rest(a, ownerA, 'GET', '/api/v1/instance')).body;
    expect(inst.backups.last).toMatchObject({ id: out.backup.id, bytes: m.totalBytes, outcome: 'ok' });
  }, 300_000);

  it('atelier restore into a new data directory, served by a fresh atelier serve: every record reads back through MCP and REST', async () => {
    restoredDir = join(work, 'restored');
    const r = await runCli(['restore', backupDir, '--data-dir', restoredDir, '--master-key-file', join(a.dataDir, 'master.key'), '--json']);
    expect(r.code, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout)).toMatchObject({ workspacesClosed: 1 });
    b = await startService({ dataDir: restoredDir });
    expect(b.token).toBe(''); // tokens exist: none is made
    // Tokens: both old ones work.
    const cb = await connectV2(b, before.tokenB);
    const c1 = await connectV2(b, a.token);
    try {
      // The workspace: its record stays, closed (its files are not in a backup); the repository
      // credential's sealed secret opens: a new workspace clones through the broker.
      expect((await ok(cb, 'workspace_list', {})).workspaces).toEqual([]);
      const w2 = await ok(cb, 'workspace_open', { repositoryUrl: repoUrl, idempotencyKey: 'restored-open-1' }, 120_000);
      expect(w2.workspaceId).toMatch(/^ws_/);
      await ok(c1, 'workspace_set_active', { workspaceId: w2.workspaceId });
      // Notes: the one made before, and the writer's notes as an unbroken prefix.
      const note = await ok(cb, 'memories_read', { scope: 'owner', name: 'backup.note' });
      expect(note).toMatchObject({ content: 'Restores keep this.', generation: before.noteGeneration, tags: ['ops'] });
      const names: string[] = [];
      let cursor: string | undefined;
      do {
        const l = await ok(c1, 'memories_list', { scope: 'owner', limit: 100, ...(cursor ? { cursor } : {}) });
        names.push(...(l.notes as R[]).map((x) => x.name as string));
        cursor = (l.nextCursor as string | null) ?? undefined;
      } while (cursor);
      const during = names.filter((x) => x.startsWith('during.')).map((x) => Number(x.slice(7))).sort((x, y) => x - y);
      expect(during.length).toBeGreaterThanOrEqual(5);
      expect(during).toEqual(during.map((_, i) => i));
      // Knowledge items and their link.
      expect(await ok(cb, 'knowledge_read', { id: before.itemA })).toMatchObject({ title: 'Backup A', content: 'first item', tags: ['ops'] });
      expect(await ok(cb, 'knowledge_read', { id: before.itemB })).toMatchObject({ title: 'Backup B', kind: 'journal', journalType: 'decision-record' });
      const g = await ok(cb, 'knowledge_graph', { rootId: before.itemA });
      expect(JSON.stringify(g)).toContain(before.linkId);
      // The artifact, byte for byte.
      const whole = createHash('sha256');
      for (let off = 0; ; ) {
        const ch = await ok(cb, 'artifacts_read', { artifactId: before.artifactId, offset: off, limit: 1_048_576 });
        const buf = Buffer.from(String(ch.content), 'base64');
        whole.update(buf);
        off += buf.length;
        if (ch.eof) break;
      }
      expect(whole.digest('hex')).toBe(before.artifactSha);
      // The profile and its credential; spend through MCP.
      const pl = await ok(cb, 'model_profile_list', { profileId: 'coder' });
      expect((pl.profiles as R[])[0]).toMatchObject({ profileId: 'coder', status: 'active', credentialId: before.credId });
      const pv = await ok(cb, 'model_provider_list', { provider: 'provider_a' });
      expect((pv.credentials as R[]).map((x) => x.id)).toEqual([before.credId]);
      const sp = await ok(cb, 'model_spend_summary', {});
      expect(JSON.stringify(sp)).toContain(String(before.settledMicros));
    } finally {
      await cb.close();
      await c1.close();
    }
    // The dashboard REST.
    const owner = await dashboardLogin(b);
    expect((await rest(b, owner, 'GET', '/api/v1/tokens')).body.tokens.map((x: R) => x.id).sort()).toEqual(before.tokenIds);
    expect((await rest(b, owner, 'GET', '/api/v1/provider-credentials')).body.credentials.map((x: R) => x.id)).toEqual([before.credId]);
    expect((await rest(b, owner, 'GET', '/api/v1/repository-credentials')).body.credentials.map((x: R) => x.id)).toEqual(before.repoCredIds);
    expect((await rest(b, owner, 'GET', `/api/v1/approvals/${before.approvalId}`)).body).toMatchObject({ id: before.approvalId, state: 'pending' });
    expect((await rest(b, owner, 'GET', '/api/v1/model-spend?period=day')).body.windows[0].settledMicros).toBe(before.settledMicros);
    expect((await rest(b, owner, 'GET', '/api/v1/spend-series?range=month')).body.rows).toEqual(before.spendSeries);
    // Sealed provider key opens: the restored runner pushed its route to its gateway.
    const st = await until(async () => {
      const s = (await rest(b!, owner, 'GET', '/api/v1/agent-model-config-status')).body;
      return s.inSync ? s : undefined;
    }, 20_000);
    expect(st.routes).toEqual([expect.objectContaining({ profileId: 'coder', credentialId: before.credId })]);
    // Every audit entry of the original, and a cursor the original issued still reads on.
    const ids = new Set<string>();
    let cur: string | null = null;
    do {
      const page: { body: { entries: R[]; nextCursor: string | null } } = await rest(b, owner, 'GET', `/api/v1/audit-log?limit=500${cur ? `&cursor=${encodeURIComponent(cur)}` : ''}`);
      for (const e of page.body.entries) ids.add(e.id as string);
      cur = page.body.nextCursor;
    } while (cur);
    for (const id of before.auditIds) expect(ids.has(id), id).toBe(true);
    expect((await rest(b, owner, 'GET', `/api/v1/audit-log?limit=2&cursor=${encodeURIComponent(before.auditCursor)}`)).status).toBe(200);
    const restore = (await rest(b, owner, 'GET', '/api/v1/audit-log?action=restore')).body.entries;
    expect(restore).toHaveLength(1);
    // The provider key never reached the backup in clear.
    for (const f of readdirSync(backupDir, { recursive: true }) as string[]) {
      const p = join(backupDir, f);
      if (statSync(p).isFile()) expect(readFileSync(p).toString('latin1').includes(KEY), f).toBe(false);
    }
  }, 400_000);
});

describe('backup and restore refuse what they must', () => {
  const copyOf = (name: string): string => {
    const d = join(work, name);
    cpSync(join(work, 'b1'), d, { recursive: true });
    return d;
  };
  const restoreInto = (src: string, dir: string, extra: string[] = []) => runCli(['restore', src, '--data-dir', dir, '--master-key-file', join(a.dataDir, 'master.key'), ...extra]);

  it('restore only into an empty data directory; nothing in it is touched', async () => {
    const r = await restoreInto(join(work, 'b1'), a.dataDir);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/data directory .* is not empty .*nothing is ever overwritten/);
    const other = join(work, 'nonempty');
    mkdirSync(other);
    writeFileSync(join(other, 'keep.txt'), 'mine');
    expect((await restoreInto(join(work, 'b1'), other)).code).toBe(2);
    expect(readdirSync(other)).toEqual(['keep.txt']);
  });

  it('restore needs the right master key when the backup holds none', async () => {
    const none = await runCli(['restore', join(work, 'b1'), '--data-dir', join(work, 'nokey')]);
    expect(none.code).toBe(2);
    expect(none.stderr).toMatch(/holds no master key.*--master-key-file/);
    const wrong = join(work, 'wrong.key');
    writeFileSync(wrong, Buffer.alloc(32, 7).toString('base64') + '\n', { mode: 0o600 });
    const w = await runCli(['restore', join(work, 'b1'), '--data-dir', join(work, 'wrongkey'), '--master-key-file', wrong]);
    expect(w.code).toBe(2);
    expect(w.stderr).toMatch(/not the one this backup was taken with/);
    expect(existsSync(join(work, 'nokey')) || existsSync(join(work, 'wrongkey'))).toBe(false);
  });

  it('a tampered file, a manifest path climbing out, and a symlink in place of a file are refused before anything is written', async () => {
    const t = copyOf('tampered');
    const m = JSON.parse(readFileSync(join(t, 'manifest.json'), 'utf8'));
    writeFileSync(join(t, 'config.json'), '{"host":"0.0.0.0"}');
    let r = await restoreInto(t, join(work, 'r-tampered'));
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/config\.json: does not match the manifest/);
    expect(existsSync(join(work, 'r-tampered'))).toBe(false);

    const up = copyOf('climb');
    const m2 = structuredClone(m);
    m2.files.push({ path: '../../etc/evil', size: 1, sha256: 'a'.repeat(64) });
    writeFileSync(join(up, 'manifest.json'), JSON.stringify(m2));
    r = await restoreInto(up, join(work, 'r-climb'));
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/path "\.\.\/\.\.\/etc\/evil" is not one a backup writes/);
    expect(existsSync(join(work, 'r-climb'))).toBe(false);

    const ln = copyOf('link');
    const secret = join(work, 'secret.txt');
    writeFileSync(secret, 'not for the restore');
    rmSync(join(ln, 'config.json'));
    symlinkSync(secret, join(ln, 'config.json'));
    r = await restoreInto(ln, join(work, 'r-link'));
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/config\.json: is a symbolic link/);
    expect(existsSync(join(work, 'r-link'))).toBe(false);

    const unfinished = copyOf('unfinished');
    rmSync(join(unfinished, 'manifest.json'));
    r = await runCli(['backup', 'verify', unfinished]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/no manifest\.json \(not a backup, or one that did not finish\)/);
  });

  it('ATELIER_MASTER_KEY: restore writes no key file; a backup of that directory needs the same variable (never a new key)', async () => {
    const keyB64 = readFileSync(join(a.dataDir, 'master.key'), 'utf8').trim();
    const dir = join(work, 'r-env');
    const r = await runCli(['restore', join(work, 'b1'), '--data-dir', dir], { env: { ATELIER_MASTER_KEY: keyB64 } });
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/with the same ATELIER_MASTER_KEY/);
    expect(existsSync(join(dir, 'master.key'))).toBe(false);
    const without = await runCli(['backup', join(work, 'b-env-1'), '--data-dir', dir]);
    expect(without.code).toBe(2);
    expect(without.stderr).toMatch(/has no master\.key: the service takes its key from ATELIER_MASTER_KEY/);
    expect(existsSync(join(dir, 'master.key'))).toBe(false);
    const withEnv = await runCli(['backup', join(work, 'b-env-2'), '--data-dir', dir, '--json'], { env: { ATELIER_MASTER_KEY: keyB64 } });
    expect(withEnv.code, withEnv.stderr).toBe(0);
    const m1 = JSON.parse(readFileSync(join(work, 'b1', 'manifest.json'), 'utf8'));
    expect(JSON.parse(withEnv.stdout).manifest.masterKey.fingerprint).toBe(m1.masterKey.fingerprint);
  }, 120_000);

  it('a backup goes only into a new or empty directory outside the data directory; --include-master-key puts the key in', async () => {
    let r = await runCli(['backup', join(work, 'b1'), '--data-dir', a.dataDir]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/backup destination .* is not empty/);
    r = await runCli(['backup', join(a.dataDir, 'inside'), '--data-dir', a.dataDir]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/inside the data directory/);
    const withKey = join(work, 'b-key');
    r = await runCli(['backup', withKey, '--data-dir', a.dataDir, '--include-master-key']);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/master key: INCLUDED/);
    expect(statSync(join(withKey, 'master.key')).mode & 0o777).toBe(0o600);
    expect(statSync(join(withKey, 'atelier.db')).mode & 0o777).toBe(0o600);
    // Restored without a key argument, it brings its own.
    const r2 = await runCli(['restore', withKey, '--data-dir', join(work, 'r-key')]);
    expect(r2.code, r2.stderr).toBe(0);
    expect(readFileSync(join(work, 'r-key', 'master.key'), 'utf8')).toBe(readFileSync(join(a.dataDir, 'master.key'), 'utf8'));
  }, 120_000);
});
