/**
 * Approved privileged commands under `--executor kubernetes` through the real service on the
 * fixture API server (issue #34): the owner approves on the dashboard REST API, the command runs
 * as uid 0 in a Pod with a Kubernetes user namespace (hostUsers: false) on the workspace's claim,
 * can chown workspace files, reaches no network and nothing of the node, and what it made is the
 * workspace user's afterwards (the hand-back); refused, with nothing run and no Pod made, when
 * the API server drops hostUsers; a command planting links to / and to a node directory
 * before the hand-back changes the owner of nothing outside the claim.
 */
import { lstatSync, mkdirSync, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createServer, connect, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Client } from '@modelcontextprotocol/client';
import { call, connectV2, dashboardLogin, httpRequest, startService, unmountUnder, type Service } from './harness.js';
import { REPO_FILES, configFor, startGitHost } from './workspace-fixture.js';
import type { GitHost } from '../fixtures/githost.js';
import type { KubeApiServer } from '../fixtures/kube-apiserver/index.js';
import { startKubeTarget, type KubeTarget } from './kube-fixture.js';
import { objectName } from '../../src/sandbox/kubernetes/names.js';

const isRoot = process.getuid?.() === 0;
type R = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

describe.skipIf(!isRoot)('privileged commands on the kubernetes executor', () => {
  let host: GitHost;
  let api: KubeApiServer;
  let svc: Service;
  let c: Client;
  let ws: string;
  let dash: { cookie: string; csrf: string };
  const dataDir = mkdtempSync(join(tmpdir(), 'atelier-prk-'));
  let events: R[] = [];
  let kube: KubeTarget;

  async function ok(name: string, a: Record<string, unknown>): Promise<R> {
    const r = await call(c, name, a);
    if (!r.ok) throw new Error(`${name} failed: ${r.text}`);
    return r.result as R;
  }
  /** Asks for the privileged run (refused, filing the request), has the owner approve it, runs it with the grant. */
  async function approveAndRun(command: string): Promise<Awaited<ReturnType<typeof call>>> {
    const refused = await call(c, 'exec_run', { workspaceId: ws, command, privileged: true });
    if (refused.ok) throw new Error('a privileged command ran without a grant');
    expect(refused.error.code).toBe('PERMISSION_DENIED');
    const id = refused.error.details.approvalRequestId as string;
    const approved = await httpRequest(svc.url, 'POST', `/api/v1/approvals/${id}/approve`, { cookie: dash.cookie, 'x-csrf-token': dash.csrf });
    expect(approved.status).toBe(200);
    return call(c, 'exec_run', { workspaceId: ws, command, privileged: true, approvalGrantToken: JSON.parse(approved.body).approvalGrantToken }, 180_000);
  }
  const ephemeralPods = () => events.filter((e) => e.object?.kind === 'Pod' && e.object.metadata.labels?.['atelier.dev/role'] === 'ephemeral');
  const claimDir = () => api.runtime.claimDir('atelier', objectName(ws));

  beforeAll(async () => {
    if (!isRoot) return;
    host = await startGitHost();
    const repoUrl = (await host.createRepo('approved/prk', REPO_FILES)).url;
    await configFor(host, dataDir, { sandboxDiskMb: 0 });
    kube = await startKubeTarget({ record: true });
    api = kube.api!;
    events = kube.events;
    svc = await startService({ dataDir, args: kube.args });
    c = await connectV2(svc);
    dash = await dashboardLogin(svc);
    ws = (await ok('workspace_open', { repositoryUrl: repoUrl, idempotencyKey: 'prk-open' })).workspaceId as string;
  }, 240_000);

  afterAll(async () => {
    if (!isRoot) return;
    await c?.close();
    await svc?.stop().catch(() => undefined);
    await api?.close();
    await host?.close();
    unmountUnder(dataDir);
  });

  it('runs as uid 0 in a user namespace, chowns a workspace file, reaches no network and nothing of the node; what it made is editable afterwards', async () => {
    const before = events.length;
    let connections = 0;
    const server = createServer((s) => {
      connections++;
      s.destroy();
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
    const port = (server.address() as AddressInfo).port;
    // A node file the Pod does see (in its claim on the fixture's node) but that is the node root's.
    const nodeFile = join(claimDir(), 'repo', 'node-root.txt');
    writeFileSync(nodeFile, 'node only\n', { mode: 0o600 });
    try {
      const r = await approveAndRun(
        [
          'id -u',
          'awk \'{print $1, $2, $3}\' /proc/self/uid_map',
          'chown 0:0 README.md && stat -c %u:%g README.md',
          'mkdir -p built/deep && echo root-made > built/deep/out.txt && stat -c %u built/deep/out.txt',
          `if (exec 3<>/dev/tcp/127.0.0.1/${port}) 2>/dev/null; then echo net-reached; else echo net-refused; fi`,
          'cat node-root.txt 2>/dev/null || echo node-file-refused',
          `if [ -e ${svc.dataDir} ]; then echo datadir-seen; else echo datadir-hidden; fi`,
        ].join('; '),
      );
      if (!r.ok) throw new Error(r.text);
      const out = r.result as R;
      expect(out.exitCode, JSON.stringify(out)).toBe(0);
      const lines = (out.stdout as string).trim().split('\n');
      expect(lines[0]).toBe('0');
      expect(lines[1]).not.toBe('0 0 4294967295');
      expect(lines[1]).not.toMatch(/^\d+ 0 /);
      expect(lines.slice(2)).toEqual(['0:0', '0', 'net-refused', 'node-file-refused', 'datadir-hidden']);
      expect(connections).toBe(0);
      // The probe can succeed: the test process reaches the listener.
      await new Promise<void>((res, rej) => connect(port, '127.0.0.1', () => res()).on('error', rej));
      for (let i = 0; i < 40 && connections === 0; i++) await new Promise((res) => setTimeout(res, 50));
      expect(connections).toBe(1);
    } finally {
      server.close();
      rmSync(nodeFile, { force: true });
    }
    // The Pod the cluster stored: a user namespace of its own, uid 0, a root user's file capabilities only.
    const added = ephemeralPods().slice(0).filter((e) => events.indexOf(e) >= before && e.type === 'ADDED');
    expect(added).toHaveLength(1);
    const pod = added[0]!.object;
    expect(pod?.spec.hostUsers).toBe(false);
    expect(pod?.spec.securityContext).toMatchObject({ runAsUser: 0, runAsNonRoot: false, fsGroup: 1000 });
    expect(pod?.spec.containers[0].securityContext.capabilities).toEqual({ drop: ['ALL'], add: ['CHOWN', 'DAC_OVERRIDE', 'FOWNER', 'FSETID', 'KILL', 'SETGID', 'SETUID'] });
    // Handed back: an ordinary exec edits and removes what root wrote and took.
    const after = await ok('exec_run', { workspaceId: ws, command: 'echo more >> built/deep/out.txt && echo more >> README.md && stat -c %u:%g README.md built/deep/out.txt && rm -r built && id -u' });
    expect(after.stdout).toBe('1000:1000\n1000:1000\n1000\n');
    expect(api.store.list('pods', 'atelier', 'atelier.dev/role=ephemeral')).toEqual([]);
  }, 300_000);

  it('refused when the API server drops hostUsers: no command ran, no Pod was made (the dry run said it), the error names hostUsers', async () => {
    const before = events.length;
    api.userNamespacesSupport = false;
    let r: Awaited<ReturnType<typeof call>>;
    try {
      r = await approveAndRun('echo ran > ran.txt');
    } finally {
      api.userNamespacesSupport = true;
    }
    expect(r.ok).toBe(false);
    if (r.ok) return;
    expect(r.error.code).toBe('FAILED_PRECONDITION');
    expect(r.error.message).toMatch(/hostUsers/);
    expect(r.error.message).toMatch(/Kubernetes 1\.33/);
    expect(r.error.message).toContain('no Pod was made');
    expect((await ok('exec_run', { workspaceId: ws, command: 'ls ran.txt 2>&1 || true' })).stdout).toContain('No such file');
    // The dry run said it: no Pod was ever stored, so none could start as the node's root.
    // No Pod was made or changed for the command (the workspace's own Pod may still get its status from the kubelet).
    expect(events.slice(before).filter((e) => e.object?.kind === 'Pod' && e.object?.metadata?.labels?.['atelier.dev/role'] !== 'workspace')).toEqual([]);
    expect(api.store.list('pods', 'atelier', 'atelier.dev/role=ephemeral')).toEqual([]);
  }, 300_000);

  it('hostile: links to / and to a node directory planted before the hand-back change the owner of nothing outside the claim', async () => {
    const canary = mkdtempSync('/tmp/atl-prk-canary-');
    mkdirSync(join(canary, 'sub'));
    writeFileSync(join(canary, 'sub', 'f'), 'canary\n');
    const rootBefore = statSync('/');
    try {
      const r = await approveAndRun(`ln -s / to-root; ln -s ${canary} to-canary; ln -s /etc/passwd to-passwd; mkdir -p nest && ln -s / nest/up; echo x > mine.txt`);
      if (!r.ok) throw new Error(r.text);
      expect((r.result as R).exitCode).toBe(0);
      for (const p of [canary, join(canary, 'sub'), join(canary, 'sub', 'f'), '/etc/passwd', '/etc']) expect(statSync(p).uid, p).toBe(0);
      expect(statSync('/').uid).toBe(rootBefore.uid);
      // The links themselves were handed back (on the node: the fixture's workspace uid), and root's file too.
      const repo = join(claimDir(), 'repo');
      for (const l of ['to-root', 'to-canary', 'to-passwd', 'nest/up']) expect(lstatSync(join(repo, l)).isSymbolicLink() && lstatSync(join(repo, l)).uid, l).toBe(64000);
      expect(statSync(join(repo, 'mine.txt')).uid).toBe(64000);
      expect((await ok('exec_run', { workspaceId: ws, command: 'stat -c %u mine.txt to-root/etc/hostname 2>&1 | head -1; rm -r to-root to-canary to-passwd nest mine.txt && echo cleaned' })).stdout).toBe('1000\ncleaned\n');
    } finally {
      rmSync(canary, { recursive: true, force: true });
    }
  }, 300_000);
});
