/**
 * A crash mid-start leaves nothing behind (issue #42 item 12), through the real service: the
 * runner is killed with SIGKILL at each step of a workspace_open and of a short-lived sandbox,
 * restarted on the same data directory, and then no filesystem is mounted under <dataDir>/run
 * that no live sandbox owns (every mount there is the socket tmpfs `run/<hash>/m` of a sandbox
 * whose state file names a running keeper), and the interrupted call, retried, succeeds.
 *
 * The steps: the open's sandbox with its socket tmpfs mounted and nothing running yet
 * (ATELIER_TEST_PAUSE_AT=sandbox:runfs, test-only: core/test-pause.ts), its daemon answering
 * before the state file is written (sandbox:ready), the clone's short-lived sandbox with its
 * tmpfs and relays up (ephemeral:runfs), and, with no hook at all, a second workspace_open whose
 * clone is running (its git connection held by a TCP relay in front of the git host: the issue's
 * reproduction) and a git_fetch of an open workspace held the same way; and a package build's
 * short-lived sandbox set up (ephemeral:runfs on a service that has opened no workspace, so the
 * build's is the first short-lived sandbox), after which the build is applied again and succeeds.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Client } from '@modelcontextprotocol/client';
import { call, connectV2, dashboardLogin, httpRequest, runCli, startService, unmountUnder, type Service } from './harness.js';
import { startRegistry } from '../fixtures/verdaccio.js';
import { REPO_FILES, configFor, startGitHost } from './workspace-fixture.js';
import type { GitHost } from '../fixtures/githost.js';

type R = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

let host: GitHost;
let relay: HoldingRelay;

/**
 * A TCP relay in front of the git host: passes bytes both ways, or, while holding, accepts
 * connections and forwards nothing (a clone or fetch then runs in its sandbox, waiting on the network).
 */
interface HoldingRelay {
  url: string;
  hold(): void;
  pass(): void;
  /** Resolves once a connection is being held. */
  held(): Promise<void>;
  close(): Promise<void>;
}

async function startRelay(target: URL): Promise<HoldingRelay> {
  let holding = false;
  let heldOne: (() => void) | undefined;
  const sockets = new Set<Socket>();
  const server: Server = createServer((down) => {
    sockets.add(down);
    down.on('close', () => sockets.delete(down));
    down.on('error', () => undefined);
    if (holding) {
      heldOne?.();
      return; // accepted, never answered
    }
    const up = connect(Number(target.port), target.hostname);
    sockets.add(up);
    up.on('close', () => sockets.delete(up));
    up.on('error', () => down.destroy());
    down.on('error', () => up.destroy());
    down.pipe(up);
    up.pipe(down);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as { port: number }).port;
  return {
    url: `https://127.0.0.1:${port}`,
    hold: () => void (holding = true),
    pass: () => void (holding = false),
    held: () => new Promise<void>((r) => (heldOne = r)),
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}

beforeAll(async () => {
  host = await startGitHost();
  await host.createRepo('approved/crash', REPO_FILES);
  relay = await startRelay(new URL(host.url));
}, 120_000);

const dataDirs: string[] = [];
const services: Service[] = [];
/** startService, remembered so that a failed test's services are stopped at the end. */
async function start(dataDir: string, env?: Record<string, string>): Promise<Service> {
  const svc = await startService({ dataDir, env });
  services.push(svc);
  return svc;
}
afterAll(async () => {
  for (const svc of services) await svc.stop().catch(() => undefined);
  await relay?.close();
  await host?.close();
  for (const d of dataDirs) {
    unmountUnder(d);
    rmSync(d, { recursive: true, force: true });
  }
}, 120_000);

const repoUrl = (): string => `${relay.url}/approved/crash.git`;

/** A data directory configured for the git host as reached through the relay (approved, its CA trusted, its token given to the broker). */
async function dataDirForRelay(): Promise<string> {
  const dataDir = mkdtempSync(join(tmpdir(), 'atelier-crash-'));
  dataDirs.push(dataDir);
  await configFor(host, dataDir);
  const config = JSON.parse(readFileSync(join(dataDir, 'config.json'), 'utf8')) as R;
  config.repositories.allow.push(`${relay.url}/approved/*`);
  writeFileSync(join(dataDir, 'config.json'), JSON.stringify(config));
  const added = await runCli(['credentials', 'add-token', `${relay.url}/`, '--username', 'x-access-token', '--label', 'relay', '--data-dir', dataDir], { input: host.token + '\n' });
  expect(added.code, added.stderr).toBe(0);
  return dataDir;
}

/** Mount points under <dataDir>/run, from this (the host's) mount namespace. */
function runMounts(dataDir: string): string[] {
  const run = join(dataDir, 'run') + '/';
  return readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .map((l) => l.split(' ')[4]?.replace(/\\(\d{3})/g, (_m, o: string) => String.fromCharCode(parseInt(o, 8))))
    .filter((m): m is string => !!m && m.startsWith(run));
}

/** Whether the mount point `run/<hash>/m` belongs to a live sandbox: its state file names a running keeper. */
function ownedByLiveSandbox(point: string): boolean {
  if (!point.endsWith('/m')) return false;
  const state = join(dirname(point), 'state.json');
  if (!existsSync(state)) return false;
  try {
    const { pid } = JSON.parse(readFileSync(state, 'utf8')) as { pid: number };
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').includes('atelier-keeper');
  } catch {
    return false;
  }
}

/**
 * Of the mounts the crash left (`atCrash`), none is still mounted unless a live sandbox owns it.
 * (Mounts the restarted runner made itself, a spare sandbox it is starting, are its own: after
 * its stop none may stay, checked at the end of each test.)
 */
async function expectNoOrphanMounts(dataDir: string, atCrash: string[]): Promise<void> {
  const orphans = () => {
    const now = new Set(runMounts(dataDir));
    return atCrash.filter((m) => now.has(m) && !ownedByLiveSandbox(m));
  };
  // The language servers' image is mounted at one path while any daemon sandbox starts
  // (src/sandbox/bwrap/lsp-image.ts): one the restarted runner is starting now holds it again,
  // briefly. The crash's own mount was swept at start; wait for the restarted runner's to go.
  const image = (m: string) => /\/run\/lsp-[0-9a-f]{16}$/.test(m);
  for (const end = Date.now() + 30_000; orphans().some(image) && Date.now() < end; ) await new Promise((r) => setTimeout(r, 50));
  expect(orphans(), 'mounts the crash left under run/ that no live sandbox owns').toEqual([]);
}

/** Stops the service (status 0): its sandboxes stop with it, so no socket filesystem stays under run/. */
async function stopLeavingNoMount(svc: Service, c: Client): Promise<void> {
  await c.close();
  expect(await svc.stop()).toBe(0);
  expect(runMounts(svc.dataDir), 'after a stop, no socket filesystem stays').toEqual([]);
}

async function ok(c: Client, name: string, args: Record<string, unknown>): Promise<R> {
  const r = await call(c, name, args, 300_000);
  if (!r.ok) throw new Error(`${name}: ${r.text}`);
  return r.result as R;
}

/** Waits for `re` in the service's stderr (the test-only pause line). */
async function stderrShows(svc: Service, re: RegExp): Promise<void> {
  const deadline = Date.now() + 120_000;
  while (!re.test(svc.stderr())) {
    if (Date.now() > deadline) throw new Error(`${re} not seen in the service's log:\n${svc.stderr().slice(-3000)}`);
    if (svc.proc.exitCode !== null) throw new Error(`the service exited:\n${svc.stderr().slice(-3000)}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Kills the runner with SIGKILL (its sandboxes' keepers survive it, as after a real crash); returns the mounts under run/ at that moment. */
async function crash(svc: Service): Promise<string[]> {
  const exited = new Promise((r) => svc.proc.once('exit', r));
  svc.proc.kill('SIGKILL');
  await exited;
  return runMounts(svc.dataDir);
}

describe('killed at each step of an open, restarted: no mount is left that no live sandbox owns, and the retried open succeeds', () => {
  for (const step of ['sandbox:runfs', 'sandbox:ready', 'ephemeral:runfs']) {
    it(`SIGKILL at ${step}`, async () => {
      relay.pass();
      const dataDir = await dataDirForRelay();
      const first = await start(dataDir, { ATELIER_TEST_PAUSE_AT: step });
      const c1 = await connectV2(first);
      const open = call(c1, 'workspace_open', { repositoryUrl: repoUrl(), idempotencyKey: `crash-${step}` }).catch(() => undefined);
      await stderrShows(first, new RegExp(`atelier: test pause at ${step}\\n`));
      expect(runMounts(dataDir).some((m) => m.endsWith('/m')), 'the step has its socket filesystem mounted').toBe(true);
      const atCrash = await crash(first);
      await open;

      const second = await start(dataDir);
      try {
        await expectNoOrphanMounts(dataDir, atCrash);
        const c2 = await connectV2(second, first.token);
        const ws = await ok(c2, 'workspace_open', { repositoryUrl: repoUrl(), idempotencyKey: `crash-${step}-retry` });
        expect((await ok(c2, 'exec_run', { workspaceId: ws.workspaceId, command: 'cat README.md' })).stdout).toBe('# demo\n');
        await expectNoOrphanMounts(dataDir, atCrash);
        await stopLeavingNoMount(second, c2);
      } finally {
        await second.dispose();
      }
    }, 600_000);
  }

  it('SIGKILL while a second workspace_open is cloning, then while a git_fetch runs (no hook: the git connection is held)', async () => {
    relay.pass();
    const dataDir = await dataDirForRelay();
    const first = await start(dataDir);
    const c1 = await connectV2(first);
    const ws1 = (await ok(c1, 'workspace_open', { repositoryUrl: repoUrl(), idempotencyKey: 'crash-first-open' })).workspaceId as string;
    relay.hold();
    const heldClone = relay.held();
    const second = call(c1, 'workspace_open', { repositoryUrl: repoUrl(), idempotencyKey: 'crash-second-open' }).catch(() => undefined);
    await heldClone;
    expect(runMounts(dataDir).filter((m) => !ownedByLiveSandbox(m)).length, "the clone's sandbox has its socket filesystem mounted").toBeGreaterThan(0);
    const atFirstCrash = await crash(first);
    await second;
    relay.pass();

    const restarted = await start(dataDir);
    let third: Service | undefined;
    try {
      await expectNoOrphanMounts(dataDir, atFirstCrash);
      const c2 = await connectV2(restarted, first.token);
      const ws2 = (await ok(c2, 'workspace_open', { repositoryUrl: repoUrl(), idempotencyKey: 'crash-second-open-retry' })).workspaceId as string;
      expect((await ok(c2, 'exec_run', { workspaceId: ws2, command: 'cat README.md' })).stdout).toBe('# demo\n');

      // A short-lived sandbox of an open workspace: git_fetch, its connection held.
      relay.hold();
      const heldFetch = relay.held();
      const fetch = call(c2, 'git_fetch', { workspaceId: ws1 }).catch(() => undefined);
      await heldFetch;
      const atSecondCrash = await crash(restarted);
      await fetch;
      relay.pass();

      third = await start(dataDir);
      await expectNoOrphanMounts(dataDir, atSecondCrash);
      const c3 = await connectV2(third, first.token);
      await ok(c3, 'git_fetch', { workspaceId: ws1 });
      expect((await ok(c3, 'exec_run', { workspaceId: ws1, command: 'cat README.md' })).stdout).toBe('# demo\n');
      await expectNoOrphanMounts(dataDir, atSecondCrash);
      await stopLeavingNoMount(third, c3);
    } finally {
      await (third ?? restarted).dispose();
    }
  }, 900_000);
});

describe('killed during a package build, restarted: nothing the build mounted stays, and building again succeeds', () => {
  it('SIGKILL at the build sandbox (ephemeral:runfs)', async () => {
    const reg = await startRegistry();
    try {
      await reg.publish({ name: 'crash-demo', version: '1.0.0', bin: { 'crash-demo': 'bin/cli.js' }, files: { 'bin/cli.js': "#!/usr/bin/env node\nconsole.log('crash-demo 1.0.0');\n" } });
      const dataDir = mkdtempSync(join(tmpdir(), 'atelier-crash-pk-'));
      dataDirs.push(dataDir);
      writeFileSync(join(dataDir, 'config.json'), JSON.stringify({ packagesEnabled: true, packagesNpmRegistry: reg.url, packagesCaFile: reg.caCertPath, sandboxMemoryMb: 256, sandboxPidsMax: 128, sandboxDiskMb: 256 }));
      const approve = async (svc: Service, approvalId: string): Promise<void> => {
        const { cookie, csrf } = await dashboardLogin(svc);
        expect((await httpRequest(svc.url, 'POST', `/api/v1/approvals/${approvalId}/approve`, { cookie, 'x-csrf-token': csrf })).status).toBe(200);
      };
      const first = await start(dataDir, { ATELIER_TEST_PAUSE_AT: 'ephemeral:runfs' });
      const c1 = await connectV2(first);
      const plan = await ok(c1, 'packages_plan', { ecosystem: 'npm', name: 'crash-demo' });
      await approve(first, plan.approvalRequestId);
      await ok(c1, 'packages_apply', { planId: plan.planId, planDigest: plan.planDigest });
      await stderrShows(first, /atelier: test pause at ephemeral:runfs\n/);
      expect(runMounts(dataDir).some((m) => m.endsWith('/m')), "the build's sandbox has its socket filesystem mounted").toBe(true);
      const atCrash = await crash(first);

      const second = await start(dataDir);
      try {
        await expectNoOrphanMounts(dataDir, atCrash);
        const c2 = await connectV2(second, first.token);
        const again = await ok(c2, 'packages_plan', { ecosystem: 'npm', name: 'crash-demo' });
        if (again.approvalState !== 'approved') await approve(second, again.approvalRequestId);
        const applied = await ok(c2, 'packages_apply', { planId: again.planId, planDigest: again.planDigest });
        let state: R = {};
        for (let i = 0; i < 60 && state.state !== 'SUCCEEDED' && state.state !== 'FAILED'; i++) state = await ok(c2, 'packages_status', { applyId: applied.applyId, waitMs: 10_000 });
        expect(state.state, JSON.stringify(state)).toBe('SUCCEEDED');
        expect((await ok(c2, 'bash', { target: 'toolbox', command: 'crash-demo' })).stdout).toContain('crash-demo 1.0.0');
        await expectNoOrphanMounts(dataDir, atCrash);
        await stopLeavingNoMount(second, c2);
      } finally {
        await second.dispose();
      }
    } finally {
      await reg.close();
    }
  }, 600_000);
});
