/**
 * Extension deployments under `--executor kubernetes` through the real service on the fixture API
 * server (issue #34): an enrolled target runs as a short-lived Pod on the workspace's claim with
 * its checkout only (read-only when secrets are injected; the workspace's home and tmp are not
 * the Pod's), reaching only the target's hosts through the runner's egress proxy over the socket
 * tunnel; its Pod, whatever the cluster stores, carries no secret value.
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Client } from '@modelcontextprotocol/client';
import { call, connectV2, dashboardLogin, httpRequest, runCli, startService, unmountUnder, type Service } from './harness.js';
import { REPO_FILES, configFor, startGitHost } from './workspace-fixture.js';
import type { GitHost } from '../fixtures/githost.js';
import type { KubeApiServer } from '../fixtures/kube-apiserver/index.js';
import { startKubeTarget, type KubeTarget } from './kube-fixture.js';

const isRoot = process.getuid?.() === 0;
const SECRET = 'kube-deploy-secret-4d3c2b1a';
type R = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

describe.skipIf(!isRoot)('deployments on the kubernetes executor', () => {
  let host: GitHost;
  let api: KubeApiServer;
  let svc: Service;
  let c: Client;
  let repoUrl: string;
  let ws: string;
  let dash: { cookie: string; csrf: string };
  const deployRequests: Array<{ path: string; auth: string | undefined }> = [];
  const dataDir = mkdtempSync(join(tmpdir(), 'atelier-dpk-'));
  let stored: string[] = [];
  let kube: KubeTarget;

  async function ok(name: string, a: Record<string, unknown>): Promise<R> {
    const r = await call(c, name, a);
    if (!r.ok) throw new Error(`${name} failed: ${r.text}`);
    return r.result as R;
  }
  const rest = async (method: string, path: string, body?: unknown) =>
    (await httpRequest(svc.url, method, `/api/v1${path}`, { cookie: dash.cookie, 'x-csrf-token': dash.csrf, 'content-type': 'application/json' }, body === undefined ? undefined : JSON.stringify(body))).status;

  beforeAll(async () => {
    if (!isRoot) return;
    host = await startGitHost();
    host.mountApi('deploy', (req, res) => {
      deployRequests.push({ path: req.url ?? '', auth: req.headers.authorization });
      res.writeHead(200, { 'content-type': 'text/plain' }).end('deployed\n');
    });
    const command = [
      `curl -sk --max-time 5 -H "Authorization: Bearer $DEPLOY_TOKEN" -o /dev/null -w "APPROVED=%{http_code}\\n" https://127.0.0.1:${host.port}/deploy/release`,
      'curl -sk --max-time 5 https://example.com/ >/dev/null 2>&1 && echo WORLD=reached || echo WORLD=blocked',
      '(echo "$DEPLOY_TOKEN" > /workspace/leak.txt) 2>/dev/null && echo WROTE=yes || echo WROTE=no',
      'ls -A /home/user | wc -l | sed s/^/HOME=/',
      'cat /workspace/README.md | head -1',
    ].join('; ');
    const files = {
      ...REPO_FILES,
      '.atelier/deployments.json': JSON.stringify({ targets: [{ name: 'staging', command, timeoutMs: 60000, egress: [{ host: '127.0.0.1', ports: [host.port] }], secrets: ['DEPLOY_TOKEN'] }] }, null, 2),
    };
    repoUrl = (await host.createRepo('approved/dpk', files)).url;
    await configFor(host, dataDir, { sandboxDiskMb: 0 });
    kube = await startKubeTarget({ record: true });
    api = kube.api!;
    stored = kube.stored;
    svc = await startService({ dataDir, args: kube.args });
    c = await connectV2(svc);
    dash = await dashboardLogin(svc);
    ws = (await ok('workspace_open', { repositoryUrl: repoUrl, idempotencyKey: 'dpk-open' })).workspaceId as string;
  }, 240_000);

  afterAll(async () => {
    if (!isRoot) return;
    await c?.close();
    await svc?.stop().catch(() => undefined);
    await api?.close();
    await host?.close();
    unmountUnder(dataDir);
  });

  it('an enrolled target with a secret: its Pod takes the checkout read-only and nothing else of the workspace; only its host is reached; no secret in any stored object', async () => {
    await ok('exec_run', { workspaceId: ws, command: 'echo in-home > ~/mine.txt' });
    const staging = (await ok('deployments_list', { workspaceId: ws })).targets.find((t: R) => t.name === 'staging');
    expect(await rest('POST', '/environments', { name: 'deploy-env' })).toBe(201);
    expect(await rest('PUT', '/environments/deploy-env/entries/DEPLOY_TOKEN', { value: SECRET, secret: true })).toBe(200);
    const allowed = await runCli(['deployments', 'allow', repoUrl, 'staging', String(staging.sha256), '--environment', 'deploy-env', '--allow-private-hosts', '--data-dir', dataDir]);
    expect(allowed.code, allowed.stderr).toBe(0);
    const r = await ok('deployments_run', { workspaceId: ws, name: 'staging', timeoutMs: 120_000 });
    expect(r, JSON.stringify(r)).toMatchObject({ status: 'succeeded', exitCode: 0, secretsInjected: ['DEPLOY_TOKEN'] });
    expect(r.stdout).toBe('APPROVED=200\nWORLD=blocked\nWROTE=no\nHOME=0\n# demo\n');
    expect(deployRequests).toEqual([{ path: '/deploy/release', auth: `Bearer ${SECRET}` }]);
    expect((await ok('exec_run', { workspaceId: ws, command: 'ls leak.txt 2>&1; cat ~/mine.txt' })).stdout).toMatch(/No such file[\s\S]*in-home\n$/);
    const pod = stored.map((e) => JSON.parse(e) as R).filter((e) => e.type === 'ADDED' && e.object?.kind === 'Pod' && String(e.object.metadata.name) !== '').map((e) => e.object).find((p) => JSON.stringify(p).includes('"ATELIER_DEPLOYMENT') || p.spec.containers[0].volumeMounts.some((m: R) => m.mountPath === '/workspace' && m.readOnly));
    expect(pod?.spec.containers[0].volumeMounts.filter((m: R) => ['/workspace', '/home/user', '/tmp'].includes(m.mountPath))).toEqual([
      { name: 'data', mountPath: '/workspace', subPath: 'repo', readOnly: true },
      { name: 'empty-home', mountPath: '/home/user' },
      { name: 'empty-tmp', mountPath: '/tmp' },
    ]);
    expect(stored.join('\n')).not.toContain(SECRET);
    expect(api.store.list('pods', 'atelier', 'atelier.dev/role=ephemeral')).toEqual([]);
  }, 240_000);
});
