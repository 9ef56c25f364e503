/**
 * Issue #42 item 5 through the real service: a template never outlives the values it was built
 * from. A secret rotated, or a value marked setup-only, after a template was built (with the CLI,
 * another process on the same database, as an owner would) makes the next open build again
 * instead of handing out the old files; the outdated template is deleted. The search for
 * setup-only values follows symbolic links within the tree (a link whose text or target holds a
 * value is refused) and never out of it (a link to a host file holding the value is not read), and
 * it is bounded: a sparse file of terabytes in the setup's output does not hang the open, which goes on
 * without a template and says why.
 */
import { createHash } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Client } from '@modelcontextprotocol/client';
import { call, connectV2, runCli, type Service } from './harness.js';
import { configFor, startGitHost, startWorkspaceService } from './workspace-fixture.js';
import type { GitHost } from '../fixtures/githost.js';
import { leftoversOf } from './leftovers.js';

type R = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

let host: GitHost;
let svc: Service;
let c: Client;
let repoUrl: string;
const dataDir = mkdtempSync(join(tmpdir(), 'atelier-tplfresh-'));
// A host file holding a setup-only value, outside every path the sandbox maps (/workspace, /home/user, /tmp).
const hostDir = mkdtempSync('/var/tmp/atelier-tplfresh-host-');
const HOST_SECRET = 'host-only-value-3e8b1d5a9c7f';
writeFileSync(join(hostDir, 'token'), `token=${HOST_SECRET}\n`);

const cli = async (args: string[], input?: string) => {
  const r = await runCli([...args, '--data-dir', dataDir], input === undefined ? {} : { input });
  expect(r.code, r.stderr).toBe(0);
  return r.stdout;
};
async function open(env: string, timeoutMs = 600_000): Promise<{ ok: boolean; result: R; ms: number }> {
  const t0 = Date.now();
  const r = (await c.callTool({ name: 'workspace_open', arguments: { repositoryUrl: repoUrl, environmentId: envIds[env], confirmEnvironmentInjection: true, idempotencyKey: `fresh-${env}-${Math.random().toString(36).slice(2)}` } }, { timeout: timeoutMs, resetTimeoutOnProgress: false })) as R;
  const result = (r.structuredContent ?? JSON.parse(r.content[0].text)) as R;
  return { ok: !r.isError, result: r.isError ? result.error : result, ms: Date.now() - t0 };
}
async function ok(name: string, args: Record<string, unknown>): Promise<R> {
  const r = await call(c, name, args, 300_000);
  if (!r.ok) throw new Error(`${name} failed: ${r.text}`);
  return r.result as R;
}
const cat = async (ws: string, file: string) => (await ok('exec_run', { workspaceId: ws, command: `cat ${file} 2>/dev/null || echo MISSING` })).stdout as string;
/** A file's SHA-256 in the workspace (a secret's value is redacted from every result, its hash is not). */
const hashOf = async (ws: string, file: string) => ((await ok('exec_run', { workspaceId: ws, command: `sha256sum < ${file}` })).stdout as string).split(' ')[0];
const sha = (s: string) => createHash('sha256').update(s).digest('hex');
const envIds: Record<string, string> = {};
const createEnv = async (name: string) => (envIds[name] = (await cli(['env', 'create', name])).split(/\s+/)[0]!);
const close = (ws: string) => ok('workspace_close', { workspaceId: ws });
const templatesDir = () => join(existsSync(join(dataDir, 'image-pool.xfs')) ? join(dataDir, 'image-pool') : dataDir, 'templates');
const templateImages = () => (existsSync(templatesDir()) ? readdirSync(templatesDir()).filter((f) => f.endsWith('.img')) : []);

beforeAll(async () => {
  host = await startGitHost();
  repoUrl = (await host.createRepo('approved/tpl-fresh', { 'README.md': '# fresh\n' })).url;
  const config = { sandboxDiskMb: 256 };
  await configFor(host, dataDir, config);
  await createEnv('fresh');
  await cli(['env', 'set', 'fresh', 'ROTATED', '--secret'], 'rotate-value-one-7f3a9c2e\n');
  await cli(['env', 'set', 'fresh', 'LATER=later-value-5b2e8d1c']);
  await cli(['env', 'script', 'fresh', 'setup'], 'printf %s "$ROTATED" > .rotated && printf %s "$LATER" > .later && date +%s%N > .setup-ran');
  svc = await startWorkspaceService(host, { dataDir, config });
  c = await connectV2(svc);
}, 240_000);

afterAll(async () => {
  await c?.close();
  await svc?.dispose();
  const left = leftoversOf(dataDir);
  if (left.length) console.error(execFileSync('losetup', ['-a'], { encoding: 'utf8' }));
  expect(left).toEqual([]);
  await host?.close();
  rmSync(hostDir, { recursive: true, force: true });
});

describe('a template never outlives the values it was built from', () => {
  let first: string;
  it('a second open with the same entries starts from the template (the reuse the key must keep)', async () => {
    const a = await open('fresh');
    expect(a.ok, JSON.stringify(a.result)).toBe(true);
    expect(a.result.template).toMatchObject({ built: true });
    first = a.result.template.templateId;
    expect(await hashOf(a.result.workspaceId, '.rotated')).toBe(sha('rotate-value-one-7f3a9c2e'));
    await close(a.result.workspaceId);
    const b = await open('fresh');
    expect(b.result.template).toMatchObject({ built: false, templateId: first });
    await close(b.result.workspaceId);
  });

  it('a rotated secret: the next open builds again with the new value, and the old template is deleted', async () => {
    await cli(['env', 'set', 'fresh', 'ROTATED', '--secret'], 'rotate-value-two-1d4c8b6a\n');
    const r = await open('fresh');
    expect(r.ok, JSON.stringify(r.result)).toBe(true);
    expect(r.result.template.built).toBe(true);
    expect(r.result.template.templateId).not.toBe(first);
    expect(await hashOf(r.result.workspaceId, '.rotated')).toBe(sha('rotate-value-two-1d4c8b6a'));
    await close(r.result.workspaceId);
    // The outdated one (built with the old secret in its files) is gone, row and image.
    const until = Date.now() + 30_000;
    while (Date.now() < until && templateImages().includes(`${first}.img`)) await new Promise((res) => setTimeout(res, 100));
    expect(templateImages()).not.toContain(`${first}.img`);
    expect(await cli(['env', 'templates'])).not.toContain(first);
  });

  it('a value marked setup-only after the build: the next open does not use the template holding it (it builds, and the search refuses it)', async () => {
    await cli(['env', 'set', 'fresh', 'LATER=later-value-5b2e8d1c', '--setup-only']);
    const r = await open('fresh');
    expect(r.ok).toBe(false);
    expect(r.result).toMatchObject({ code: 'FAILED_PRECONDITION', details: { step: 'secret check', name: 'LATER', path: 'repo/.later' } });
    // Unmarked again: a template is built and used as before.
    await cli(['env', 'set', 'fresh', 'LATER=later-value-5b2e8d1c']);
    const again = await open('fresh');
    expect(again.ok, JSON.stringify(again.result)).toBe(true);
    expect(await cat(again.result.workspaceId, '.later')).toBe('later-value-5b2e8d1c');
    await close(again.result.workspaceId);
  });

  it('a symbolic link whose text, or whose target in the tree, holds a setup-only value is refused', async () => {
    await createEnv('linktext');
    await cli(['env', 'set', 'linktext', 'LINK_SECRET', '--secret', '--setup-only'], 'link-secret-value-8a2f6c\n');
    await cli(['env', 'script', 'linktext', 'setup'], 'ln -s "/opt/$LINK_SECRET" .cfg-link');
    const t = await open('linktext');
    expect(t.ok).toBe(false);
    expect(t.result).toMatchObject({ code: 'FAILED_PRECONDITION', details: { step: 'secret check', name: 'LINK_SECRET', path: 'repo/.cfg-link', via: 'the text of the symbolic link' } });

    await createEnv('linktarget');
    await cli(['env', 'set', 'linktarget', 'LINK_SECRET', '--secret', '--setup-only'], 'link-secret-value-8a2f6c\n');
    await cli(['env', 'script', 'linktarget', 'setup'], 'mkdir -p /home/user/.cfg && printf "t=%s" "$LINK_SECRET" > /home/user/.cfg/tok && ln -s /home/user/.cfg/tok .tok-link');
    const l = await open('linktarget');
    expect(l.ok).toBe(false);
    expect(l.result).toMatchObject({ code: 'FAILED_PRECONDITION', details: { step: 'secret check', name: 'LINK_SECRET' } });
    expect(['repo/.tok-link', 'home/.cfg/tok']).toContain(l.result.details.path);
  });

  it('links out of the tree are not followed: a host file holding the value is not read, and the template is kept', async () => {
    await createEnv('linkout');
    await cli(['env', 'set', 'linkout', 'HOST_SECRET', '--secret', '--setup-only'], HOST_SECRET + '\n');
    const hostFile = join(hostDir, 'token');
    await cli(['env', 'script', 'linkout', 'setup'], `ln -s ${hostFile} .abs-out && ln -s ../../../../../../../..${hostFile} .climb-out && ln -s /proc/1/root${hostFile} .proc-out && ln -s /etc/shadow .shadow`);
    const r = await open('linkout');
    expect(r.ok, JSON.stringify(r.result)).toBe(true);
    expect(r.result.template).toMatchObject({ built: true });
    await close(r.result.workspaceId);
  });

  it('a sparse file of terabytes in the setup\'s output does not hang the open: no template is kept, the open goes on without one and says why', async () => {
    await createEnv('sparse');
    await cli(['env', 'set', 'sparse', 'SPARSE_SECRET', '--secret', '--setup-only'], 'sparse-secret-value-4d9e1f\n');
    // As large as the workspace filesystem allows: 15 TiB with 4 KiB blocks; this 256 MiB disk has 1 KiB blocks (at most 4 TiB a file).
    await cli(['env', 'script', 'sparse', 'setup'], '{ truncate -s 15T /tmp/huge 2>/dev/null || truncate -s 4095G /tmp/huge; } && date +%s%N > .setup-ran');
    const r = await open('sparse', 170_000);
    expect(r.ok, JSON.stringify(r.result)).toBe(true);
    expect(r.ms).toBeLessThan(150_000);
    expect(r.result.template).toMatchObject({ built: false, kept: false, cold: true });
    expect(r.result.template.reason).toMatch(/^tmp\/huge is \d+ bytes long \(\d+ allocated\), more than is left of what the search reads/);
    expect(Number(/is (\d+) bytes/.exec(r.result.template.reason)![1])).toBeGreaterThan(2 ** 40);
    expect(r.result.template.warning).toMatch(/no template was kept or used/);
    // A plain open: the checkout, none of the setup's result.
    expect(await cat(r.result.workspaceId, 'README.md')).toBe('# fresh\n');
    expect(await cat(r.result.workspaceId, '.setup-ran')).toBe('MISSING\n');
    expect(await cat(r.result.workspaceId, '/tmp/huge')).toBe('MISSING\n');
    // The failed build is listed with the reason, and the log says it.
    const listed = (await cli(['env', 'templates'])).split('\n').find((line) => line.startsWith(r.result.template.templateId)) ?? '';
    expect(listed).toMatch(/failed/);
    expect(svc.stderr()).toContain('the search for setup-only values did not complete');
    await close(r.result.workspaceId);
  }, 180_000);
});
