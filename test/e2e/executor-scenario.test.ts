/**
 * The core workspace scenario through the real service, once per executor driver, so the suite
 * proves the Kubernetes driver a drop-in for bubblewrap (issue #34): workspace_open (a clone
 * through the credential broker and the one-host egress proxy from the HTTPS git host fixture),
 * files, grep, exec, dependency-access (the workspace opened with it: an allowed package registry on
 * loopback reached through the runner's per-workspace egress proxy at 127.0.0.1:3128, another host
 * refused by that proxy; under Kubernetes through the socket tunnel into the workspace Pod, whose
 * NetworkPolicy stays deny-all), a shell, a task, git commit / push / fetch through the broker (the token in
 * no Pod's environment or files, nor in any object the cluster stores), a runner restart on the
 * same data directory (the stopping runner stops its sandboxes; the next one starts them again on
 * their files), a runner killed outright (the next one reattaches: on Kubernetes the same Pod,
 * found by name), and close.
 *
 * - bubblewrap: the default executor on this host.
 * - kubernetes: `--executor kubernetes --kubeconfig <the fixture API server's>` (the fixture runs
 *   in this test process: test/fixtures/kube-apiserver/, each Pod a local bubblewrap sandbox).
 * - kubernetes against a real cluster (opt-in): when KUBECONFIG is set, the same scenario runs with
 *   that kubeconfig, ATELIER_TEST_KUBE_NAMESPACE (default atelier) and the workspace image
 *   ATELIER_TEST_KUBE_IMAGE (required); skipped otherwise, with the reason printed. The cluster
 *   must reach nothing of this machine: only the runner's tunnel does (docs/scaling.md).
 * - an agent run (the fake model provider as in the agents tests): under Kubernetes its runtime is
 *   a short-lived Pod of the workspace image (which carries /opt/agent), its control and gateway
 *   sockets carried by the socket tunnel.
 */
import { mkdtempSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Client } from '@modelcontextprotocol/client';
import { call, connectV2, dashboardLogin, httpRequest, runCli, startService, type Service } from './harness.js';
import { REPO_FILES, configFor, startGitHost } from './workspace-fixture.js';
import { startAgentEnv, type AgentEnv } from './agents-fixture.js';
import type { GitHost } from '../fixtures/githost.js';
import type { KubeApiServer } from '../fixtures/kube-apiserver/index.js';
import { startKubeTarget, type KubeTarget } from './kube-fixture.js';

const isRoot = process.getuid?.() === 0;
const realCluster = process.env.KUBECONFIG && process.env.ATELIER_TEST_KUBE_IMAGE ? process.env.KUBECONFIG : undefined;
if (process.env.KUBECONFIG && !process.env.ATELIER_TEST_KUBE_IMAGE) console.warn('executor-scenario: KUBECONFIG is set but ATELIER_TEST_KUBE_IMAGE is not: the real-cluster run is skipped (docs/scaling.md)');
if (!process.env.KUBECONFIG) console.info('executor-scenario: the real-cluster run is skipped (set KUBECONFIG and ATELIER_TEST_KUBE_IMAGE to run it; docs/scaling.md)');

type Driver = 'bubblewrap' | 'kubernetes' | 'kubernetes (real cluster)';
const DRIVERS: Array<{ driver: Driver; skip: string | false }> = [
  { driver: 'bubblewrap', skip: isRoot ? false : 'needs root' },
  { driver: 'kubernetes', skip: isRoot ? false : 'needs root (the fixture runs Pods as bubblewrap sandboxes)' },
  { driver: 'kubernetes (real cluster)', skip: realCluster ? false : 'KUBECONFIG and ATELIER_TEST_KUBE_IMAGE not set' },
];

describe.each(DRIVERS)('core workspace scenario: $driver', ({ driver, skip }) => {
  let host: GitHost;
  let registry: Server;
  let elsewhere: Server;
  let api: KubeApiServer | undefined;
  let svc: Service;
  let c: Client;
  let repoUrl: string;
  let ws: string;
  let args: string[] = [];
  let stored: string[] = [];
  let kube: KubeTarget | undefined;
  let ownerToken = '';
  const dataDir = mkdtempSync(join(tmpdir(), 'atelier-xs-'));

  async function ok(name: string, a: Record<string, unknown>): Promise<Record<string, unknown>> {
    const r = await call(c, name, a);
    if (!r.ok) throw new Error(`${name} failed: ${r.text}`);
    return r.result;
  }
  const sh = async (command: string) => (await ok('exec_run', { workspaceId: ws, command })) as { stdout: string; stderr: string; exitCode: number };
  const portOf = (s: Server) => (s.address() as AddressInfo).port;
  // Through the proxy the workspace's variables name (NO_PROXY cleared: the fixtures are on loopback); CONNECT, as the proxy takes.
  const fetchVia = (s: Server) => `NO_PROXY= no_proxy= curl -sS -p -m 20 -o - -w ' connect=%{http_connect}' http://127.0.0.1:${portOf(s)}/pkg 2>&1; echo " rc=$?"`;

  beforeAll(async () => {
    if (skip) return;
    host = await startGitHost();
    repoUrl = (await host.createRepo('approved/scenario', REPO_FILES)).url;
    const listen = (body: string) => new Promise<Server>((resolve) => { const s = createServer((_q, r) => r.end(body)); s.listen(0, '127.0.0.1', () => resolve(s)); });
    registry = await listen('a-package');
    elsewhere = await listen('must-not-be-reached');
    // The allow list of dependency-access: one "registry" on loopback.
    const egress = { allow: [{ host: '127.0.0.1', ports: [portOf(registry)], allowPrivate: true }] };
    if (driver === 'bubblewrap') {
      await configFor(host, dataDir, { egress });
    } else {
      // The claim is the disk: no loop images on the runner.
      await configFor(host, dataDir, { sandboxDiskMb: 0, egress });
      // Every object the cluster is given (Pods of the workspace and of each git operation included).
      kube = await startKubeTarget({ kubeconfig: driver === 'kubernetes' ? undefined : realCluster, record: true });
      api = kube.api;
      stored = kube.stored;
      args = kube.args;
    }
    svc = await startService({ dataDir, args });
    ownerToken = svc.token;
    c = await connectV2(svc);
  }, 180_000);

  afterAll(async () => {
    if (skip) return;
    if (ws && c) await call(c, 'workspace_close', { workspaceId: ws }).catch(() => undefined);
    await c?.close();
    await svc?.dispose();
    await api?.close();
    await host?.close();
    registry?.close();
    elsewhere?.close();
  });

  it.skipIf(skip)('opens a workspace: the clone goes through the credential broker and the one-host proxy', async () => {
    const r = await ok('workspace_open', { repositoryUrl: repoUrl, idempotencyKey: `xs-open-${driver}`, fetchDepth: 0, networkProfile: 'dependency-access' });
    ws = r.workspaceId as string;
    expect(r.state ?? 'active').toBe('active');
    // workspace_status says which kind of sandbox it is (a real cluster may have agent-sandbox).
    const st = await ok('workspace_status', { workspaceId: ws });
    if (driver === 'bubblewrap') expect(st.sandboxKind).toBe('bubblewrap');
    else expect(st.sandboxKind).toMatch(/^kubernetes-(pod|sandbox)$/);
    if (api) expect(st).toMatchObject({ sandboxKind: 'kubernetes-pod', sandboxObject: { kind: 'Pod', namespace: 'atelier' } });
    if (driver === 'bubblewrap') expect(st.sandboxObject).toBeUndefined();
    if (api) {
      // The workspace is a Pod; the clone's short-lived Pod is gone.
      expect(api.store.list('pods', 'atelier', `atelier.dev/workspace=${ws}`).length).toBe(1);
      expect(api.store.list('pods', 'atelier', 'atelier.dev/role=ephemeral')).toEqual([]);
      // The runner watched its Pods start (issue #34: watches, not polling).
      expect(api.requests.get('GET pods watch') ?? 0).toBeGreaterThan(0);
    }
  }, 180_000);

  it.skipIf(skip)('files, grep, exec', async () => {
    expect(JSON.stringify(await ok('files_read', { workspaceId: ws, path: 'README.md' }))).toContain('# demo');
    await ok('files_write', { workspaceId: ws, path: 'notes/todo.txt', content: 'find the needle\n' });
    expect(JSON.stringify(await ok('grep_search', { workspaceId: ws, pattern: 'needle' }))).toContain('notes/todo.txt');
    const r = await sh('id -u; cat notes/todo.txt; git log --oneline | wc -l');
    expect(r).toMatchObject({ exitCode: 0, stdout: '1000\nfind the needle\n1\n' });
  }, 60_000);

  it.skipIf(skip || driver === 'bubblewrap')('checkpoints and forks: refused by name under Kubernetes (the claim holds the files; no image on the runner to copy)', async () => {
    for (const [tool, args] of [['checkpoint_create', { workspaceId: ws, idempotencyKey: 'xs-ckpt-kube' }], ['workspace_fork', { workspaceId: ws, idempotencyKey: 'xs-fork-kube' }]] as const) {
      const r = await call(c, tool, args);
      expect(r.ok, tool).toBe(false);
      if (!r.ok) expect([r.error.code, r.error.details?.field, r.error.details?.executor], r.text).toEqual(['NOT_SUPPORTED', 'workspaceId', 'kubernetes']);
    }
  }, 60_000);

  it.skipIf(skip || driver === 'bubblewrap')('an environment with a setup script: refused by name under Kubernetes (its template would be a saved image on the runner)', async () => {
    const cli = await runCli(['env', 'create', 'xs-setup', '--data-dir', dataDir]);
    expect(cli.code, cli.stderr).toBe(0);
    const env = cli.stdout.split(/\s+/)[0]!;
    const s = await dashboardLogin(svc);
    const put = await httpRequest(svc.url, 'PUT', `/api/v1/environments/${env}/scripts`, { cookie: s.cookie, 'x-csrf-token': s.csrf, 'content-type': 'application/json' }, JSON.stringify({ setupScript: 'echo set up' }));
    expect(put.status, put.body).toBe(200);
    const r = await call(c, 'workspace_open', { repositoryUrl: repoUrl, environmentId: env, confirmEnvironmentInjection: true, idempotencyKey: 'xs-open-env-kube' });
    expect(r.ok).toBe(false);
    if (!r.ok) expect([r.error.code, r.error.details?.field, r.error.details?.executor], r.text).toEqual(['NOT_SUPPORTED', 'environmentId', 'kubernetes']);
  }, 60_000);

  it.skipIf(skip)('dependency-access: an allowed registry through the egress proxy at 127.0.0.1:3128; another host refused', async () => {
    expect((await sh('echo "$HTTPS_PROXY"')).stdout).toBe('http://127.0.0.1:3128\n');
    expect((await sh(fetchVia(registry))).stdout).toBe('a-package connect=200 rc=0\n');
    const refused = (await sh(fetchVia(elsewhere))).stdout;
    expect(refused).toContain('connect=403');
    expect(refused).not.toContain('must-not-be-reached');
    if (api) {
      // The Pod network is not how: its policy stays deny-all.
      const pols = api.store.list('networkpolicies', 'atelier', `atelier.dev/workspace=${ws}`) as Array<{ spec: { egress?: unknown[] }; metadata: { annotations?: Record<string, string> } }>;
      expect(pols.map((p) => [p.spec.egress, p.metadata.annotations?.['atelier.dev/network']])).toEqual([[[], 'proxy']]);
    }
  }, 60_000);

  it.skipIf(skip)('a shell and a task', async () => {
    const s = await ok('shell_open', { workspaceId: ws, idempotencyKey: `xs-shell-${driver}` });
    let out = '';
    let cursor: unknown;
    const first = await ok('shell_io', { workspaceId: ws, shellId: s.shellId, input: 'echo shell-$((6*7))\n', waitMs: 2000 });
    out += String(first.output ?? '');
    cursor = first.nextCursor;
    for (let i = 0; i < 20 && !out.includes('shell-42'); i++) {
      const more = await ok('shell_io', { workspaceId: ws, shellId: s.shellId, cursor, waitMs: 1000 });
      out += String(more.output ?? '');
      cursor = more.nextCursor;
    }
    expect(out).toContain('shell-42');
    await ok('shell_close', { workspaceId: ws, shellId: s.shellId });
    const t = await ok('tasks_run', { workspaceId: ws, command: 'echo task-ran > task.txt; echo done', idempotencyKey: `xs-task-${driver}` });
    let st: Record<string, unknown> = t;
    for (let i = 0; i < 120 && ['pending', 'running'].includes(st.state as string); i++) {
      await new Promise((r) => setTimeout(r, 250));
      st = await ok('tasks_status', { workspaceId: ws, taskId: t.taskId });
    }
    expect(st).toMatchObject({ state: 'succeeded', output: 'done\n' });
  }, 90_000);

  it.skipIf(skip)('git commit, push and fetch through the broker; the credential never enters the workspace', async () => {
    await ok('git_identity_set', { workspaceId: ws, name: 'Ada Agent', email: 'ada@example.invalid' });
    await ok('git_add', { workspaceId: ws, paths: ['notes/todo.txt'] });
    await ok('git_commit', { workspaceId: ws, message: `scenario on ${driver}` });
    const pushed = await ok('git_push', { workspaceId: ws, idempotencyKey: `xs-push-${driver}` });
    expect(JSON.stringify(pushed)).not.toContain(host.token);
    const fetched = await ok('git_fetch', { workspaceId: ws });
    expect(fetched).toBeDefined();
    // The pushed commit is the remote's now.
    expect((await sh('git rev-parse HEAD origin/main | uniq | wc -l')).stdout).toBe('1\n');
    // Searched without the token itself on any command line or in any environment.
    const half = host.token.length >> 1;
    const r = await sh(`A='${host.token.slice(0, half)}'; B='${host.token.slice(half)}'; grep -rlsF "$A$B" /proc/[0-9]*/environ /workspace /home/user /tmp /run 2>/dev/null | wc -l`);
    expect(r.stdout).toBe('0\n');
    if (api) {
      // Nor in any object the cluster stores: the git operations' Pods (seen) carry no credential.
      expect(stored.some((e) => e.includes('"atelier.dev/role":"ephemeral"'))).toBe(true);
      expect(stored.join('\n')).not.toContain(host.token);
    }
  }, 120_000);

  it.skipIf(skip)('a runner restart (stopped, started on the same data directory) brings the workspace back on its files and keeps working', async () => {
    await sh('echo before-restart > state.txt');
    const podUid = () => api?.store.list('pods', 'atelier', `atelier.dev/workspace=${ws}`).map((p) => p.metadata.uid);
    const before = podUid();
    const token = ownerToken;
    await c.close();
    expect(await svc.stop('SIGTERM')).toBe(0);
    const again = await startService({ dataDir, args });
    const dispose = svc.dispose.bind(svc);
    svc = again;
    void dispose;
    c = await connectV2({ ...again, token });
    expect((await ok('workspace_status', { workspaceId: ws })).state).toBe('active');
    expect((await sh('cat state.txt task.txt')).stdout).toBe('before-restart\ntask-ran\n');
    // A stopping runner stops its sandboxes (files kept): the Pod was made again on the same claim.
    if (api) expect(podUid()).not.toEqual(before);
    // A git network operation after the restart: a new broker and tunnel.
    await ok('git_fetch', { workspaceId: ws });
    // dependency-access again: the new runner's proxy (under Kubernetes, a new tunnel into the new Pod).
    expect((await sh(fetchVia(registry))).stdout).toBe('a-package connect=200 rc=0\n');
  }, 180_000);

  it.skipIf(skip)('a runner killed outright: the next one reattaches to the running sandbox (on Kubernetes the same Pod, found by name)', async () => {
    await sh('echo before-crash > crash.txt');
    const podUid = () => api?.store.list('pods', 'atelier', `atelier.dev/workspace=${ws}`).map((p) => p.metadata.uid);
    const before = podUid();
    const token = ownerToken;
    await c.close();
    await svc.stop('SIGKILL');
    svc = await startService({ dataDir, args });
    c = await connectV2({ ...svc, token });
    expect((await sh('cat crash.txt')).stdout).toBe('before-crash\n');
    if (api) expect(podUid()).toEqual(before);
    // The reattached Pod reaches the new runner's proxy: recover opened its tunnel again.
    expect((await sh(fetchVia(registry))).stdout).toBe('a-package connect=200 rc=0\n');
  }, 180_000);

  it.skipIf(skip)('close', async () => {
    const id = ws;
    await ok('workspace_close', { workspaceId: id });
    ws = '';
    // The workspace's Pod, claim and policy are gone; no short-lived Pod is left.
    if (api) for (const r of ['pods', 'persistentvolumeclaims', 'networkpolicies']) expect(api.store.list(r, 'atelier', `atelier.dev/workspace=${id}`)).toEqual([]);
    if (api) expect(api.store.list('pods', 'atelier', 'atelier.dev/role=ephemeral')).toEqual([]);
  }, 60_000);

});

describe.each(DRIVERS)('an agent run: $driver', ({ driver, skip }) => {
  let api: KubeApiServer | undefined;
  let kube: KubeTarget | undefined;
  let e: AgentEnv;

  beforeAll(async () => {
    if (skip) return;
    let args: string[] = [];
    if (driver !== 'bubblewrap') {
      kube = await startKubeTarget({ kubeconfig: driver === 'kubernetes' ? undefined : realCluster });
      api = kube.api;
      args = ['--sandbox-disk-mb', '0', ...kube.args];
    }
    e = await startAgentEnv({ args });
    await e.makeProfile('coder-chat', 'chat-completions');
  }, 240_000);

  afterAll(async () => {
    if (skip) return;
    await e?.dispose();
    await api?.close();
  });

  it.skipIf(skip)('an agent reads a file and runs a command in the workspace through its proxied tools, then ends SUCCEEDED', async () => {
    e.fake.scripts.set('xs-agent', (c) => {
      if (!c.hasTools) return { text: 'summary' };
      if (c.step === 0) return { calls: [{ name: 'files_read', args: { path: 'README.md' } }] };
      if (c.step === 1) return { calls: [{ name: 'exec_run', args: { command: 'echo from-agent > agent.txt; echo wrote' } }] };
      return { text: `done: ${c.toolResults.at(-1)?.includes('wrote') ? 'wrote' : 'unknown'}` };
    });
    const r = await e.tool('agent_spawn', { workspaceId: e.ws, idempotencyKey: `xs-agent-${driver}`, profileId: 'coder-chat', prompt: '#agent=xs-agent write a file', proxyOperations: ['files_read', 'exec_run'] });
    expect(r.ok, JSON.stringify(r)).toBe(true);
    const end = await e.waitEnd((r as { result: { agentId: string } }).result.agentId, 120_000);
    expect(end.status, JSON.stringify(end)).toBe('SUCCEEDED');
    expect(end.summary).toBe('done: wrote');
    expect((await e.ok('files_read', { workspaceId: e.ws, path: 'agent.txt' })).content).toBe('from-agent\n');
    if (api) {
      // Pods made: the workspace's, the clone's and at least one agent runtime's (pre-started slots may add more).
      expect(api.requests.get('POST pods') ?? 0).toBeGreaterThanOrEqual(3);
    }
  }, 180_000);
});
