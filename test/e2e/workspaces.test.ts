/**
 * Workspaces in real sandboxes, driven only through the MCP clients: real bubblewrap, real git over
 * HTTPS on loopback with a credential from the broker.
 */
import { execFile, execFileSync } from 'node:child_process';
import { promisify } from 'node:util';
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Client } from '@modelcontextprotocol/client';
import { call, connectV1, connectV2, runCli } from './harness.js';
import { ALL_TOOLS } from './spec.js';
import { REPO_FILES, startGitHost, startWorkspaceService } from './workspace-fixture.js';
import type { GitHost } from '../fixtures/githost.js';
import type { Service } from './harness.js';
import { gitEnvFor } from '../fixtures/githost.js';
import { CgroupManager } from '../../src/sandbox/cgroups.js';

let host: GitHost;
let svc: Service;
let c: Client;
let repoUrl: string;
let ws: string;

async function ok(name: string, args: Record<string, unknown>, client: Client = c): Promise<Record<string, unknown>> {
  const r = await call(client, name, args);
  if (!r.ok) throw new Error(`${name} failed: ${r.text}`);
  return r.result;
}

async function sh(command: string, workspaceId = ws, timeoutMs = 60_000): Promise<{ exitCode: number | null; stdout: string; stderr: string; timedOut: boolean; signal: string | null }> {
  return (await ok('exec_run', { workspaceId, command, timeoutMs })) as never;
}

beforeAll(async () => {
  host = await startGitHost();
  repoUrl = (await host.createRepo('approved/demo', REPO_FILES, { commits: 3 })).url;
  await host.createRepo('other/unapproved');
  svc = await startWorkspaceService(host);
  c = await connectV2(svc);
  const opened = await ok('workspace_open', { repositoryUrl: repoUrl, idempotencyKey: 'open-demo-1' });
  ws = opened.workspaceId as string;
}, 120_000);

afterAll(async () => {
  if (process.env.ATELIER_TEST_DEBUG) (await import('node:fs')).writeFileSync('/tmp/ws-svc.log', (svc?.stderr() ?? '') + '\n--- exit ' + svc?.proc.exitCode + ' ' + svc?.proc.signalCode);
  await c?.close();
  await svc?.dispose();
  await host?.close();
});

describe('opening', () => {
  it('clones through the broker and returns the workspace with hardExpiresAt', async () => {
    const r = await ok('workspace_status', { workspaceId: ws });
    expect(r).toMatchObject({ state: 'active', branch: 'main', networkProfile: 'network-none' });
    expect(Date.parse(r.hardExpiresAt as string)).toBeGreaterThan(Date.now());
    expect(host.requests.some((q) => q.path.includes('/approved/demo.git') && q.authorized)).toBe(true);
    const log = await sh('git log --oneline | wc -l');
    expect(log.stdout.trim()).toBe('1'); // omitted fetchDepth = a single commit
  });

  it('replays the same idempotency key and refuses it with different input', async () => {
    const again = await ok('workspace_open', { repositoryUrl: repoUrl, idempotencyKey: 'open-demo-1' });
    expect(again.workspaceId).toBe(ws);
    expect(again.replayed).toBe(true);
    const conflict = await call(c, 'workspace_open', { repositoryUrl: repoUrl, idempotencyKey: 'open-demo-1', fetchDepth: 0 });
    expect(!conflict.ok && conflict.error.code).toBe('CONFLICT');
  });

  it('an idempotency key never replays another workspace’s result when workspaceId is left to the active one', async () => {
    const other = (await ok('workspace_open', { repositoryUrl: repoUrl, idempotencyKey: 'open-other-ws1' })).workspaceId as string;
    await ok('workspace_set_active', { workspaceId: other });
    const first = await ok('tasks_run', { command: 'true', idempotencyKey: 'task-key-across' });
    await ok('workspace_set_active', { workspaceId: ws });
    const second = await call(c, 'tasks_run', { command: 'true', idempotencyKey: 'task-key-across' });
    // The same key and arguments, but another workspace: not the first workspace's task.
    expect(second.ok && second.result.taskId).not.toBe(first.taskId);
    expect(!second.ok && second.error.code).toBe('CONFLICT');
    await ok('workspace_close', { workspaceId: other });
  });

  it('honours fetchDepth 0 (full history), a depth, and ref', async () => {
    const full = await ok('workspace_open', { repositoryUrl: repoUrl, idempotencyKey: 'open-full-1', fetchDepth: 0 });
    expect((await sh('git log --oneline | wc -l', full.workspaceId as string)).stdout.trim()).toBe('3');
    const two = await ok('workspace_open', { repositoryUrl: repoUrl, idempotencyKey: 'open-two-1', fetchDepth: 2, ref: 'main' });
    expect((await sh('git log --oneline | wc -l', two.workspaceId as string)).stdout.trim()).toBe('2');
    const since = await ok('workspace_open', { repositoryUrl: repoUrl, idempotencyKey: 'open-since-1', shallowSince: '2000-01-01' });
    expect((await sh('git log --oneline | wc -l', since.workspaceId as string)).stdout.trim()).toBe('3');
    for (const id of [full.workspaceId, two.workspaceId, since.workspaceId]) await ok('workspace_close', { workspaceId: id });
    await ok('workspace_set_active', { workspaceId: ws });
  }, 90_000);

  it('refuses unapproved, denied, non-HTTPS and credential-bearing URLs before fetching anything', async () => {
    const before = host.requests.length;
    const cases: Array<[string, string]> = [
      [`${host.url}/other/unapproved.git`, 'PERMISSION_DENIED'],
      [`${host.url}/approved/denied.git`, 'PERMISSION_DENIED'],
      [`http://127.0.0.1:${host.port}/approved/demo.git`, 'INVALID_ARGUMENT'],
      [`https://x-access-token:${host.token}@127.0.0.1:${host.port}/approved/demo.git`, 'INVALID_ARGUMENT'],
      ['ssh://git@127.0.0.1/approved/demo.git', 'INVALID_ARGUMENT'],
    ];
    for (const [url, code] of cases) {
      const r = await call(c, 'workspace_open', { repositoryUrl: url, idempotencyKey: `bad-${Math.random().toString(36).slice(2, 10)}` });
      expect(r.ok, url).toBe(false);
      if (!r.ok) {
        expect(r.error.code, url).toBe(code);
        expect(r.error.details.field).toBe('repositoryUrl');
        expect(r.text).not.toContain(host.token);
      }
    }
    expect(host.requests.length).toBe(before);
  });

  it('a redirect to another host is refused: git does not follow it and nothing is fetched there', async () => {
    // An approved URL whose server redirects to an unapproved host (localhost is another name, and unapproved).
    host.redirect('approved/moved', `https://localhost:${host.port}/other`);
    const before = host.requests.filter((q) => q.path.startsWith('/other/')).length;
    const r = await call(c, 'workspace_open', { repositoryUrl: `${host.url}/approved/moved/unapproved.git`, idempotencyKey: 'open-redirect-1' });
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.text).not.toContain(host.token);
    expect(host.requests.filter((q) => q.path.startsWith('/other/')).length).toBe(before);
    host.redirect('approved/moved', null);
  });

  it('the operator approves repositories with the CLI, applied without a restart', async () => {
    const list = await runCli(['repos', 'list', '--data-dir', svc.dataDir]);
    expect(list.stdout).toContain(`${host.url}/approved/*`);
    await runCli(['repos', 'allow', `${host.url}/other/unapproved.git`, '--data-dir', svc.dataDir]);
    const r = await ok('workspace_open', { repositoryUrl: `${host.url}/other/unapproved.git`, idempotencyKey: 'open-other-1' });
    await ok('workspace_close', { workspaceId: r.workspaceId });
    await runCli(['repos', 'remove', `${host.url}/other/unapproved.git`, '--data-dir', svc.dataDir]);
    await ok('workspace_set_active', { workspaceId: ws });
  }, 60_000);
});

describe('isolation', () => {
  it('runs as a non-root user with a clean environment', async () => {
    const r = await sh('id -u; id -g; echo "HOME=$HOME"; env | sort');
    const [uid, gid] = r.stdout.split('\n');
    expect(uid).not.toBe('0');
    expect(gid).not.toBe('0');
    expect(r.stdout).toContain('HOME=/home/user');
    expect(r.stdout).not.toMatch(/ATELIER_|VITEST|npm_lifecycle/);
  });

  it('no token in the environment, the files or the git config', async () => {
    const r = await sh(`env; git config --list --show-origin; grep -rF "${host.token}" /workspace /home/user /tmp 2>/dev/null && echo FOUND || echo clean`);
    expect(r.stdout).not.toContain(host.token);
    expect(r.stdout.trim().endsWith('clean')).toBe(true);
    // and on the host side, nowhere under the workspace's files
    const hits = (() => {
      try {
        return execFileSync('grep', ['-rlF', host.token, join(svc.dataDir, 'workspaces')], { encoding: 'utf8' });
      } catch {
        return '';
      }
    })();
    expect(hits).toBe('');
  });

  it('cannot see the host: not /root, not the data directory, not the database or master key', async () => {
    const r = await sh(`ls /root 2>&1; ls ${svc.dataDir} 2>&1; cat ${join(svc.dataDir, 'master.key')} 2>&1; cat /etc/shadow 2>&1; ls /run 2>&1; echo end`);
    expect(r.stdout).not.toMatch(/atelier\.db|master\.key\n/);
    expect(r.stdout).toMatch(/No such file or directory|Permission denied/);
    const key = execFileSync('cat', [join(svc.dataDir, 'master.key')], { encoding: 'utf8' }).trim();
    expect(r.stdout).not.toContain(key);
  });

  it('network-none: no route out, not even to a service on the host loopback', async () => {
    const probe: Server = createServer((s) => s.end('host-secret')).listen(0, '127.0.0.1');
    await new Promise((r) => probe.once('listening', r));
    const port = (probe.address() as { port: number }).port;
    try {
      const r = await sh(
        `node -e "const n=require('net');for (const [h,p] of [['1.1.1.1',443],['127.0.0.1',${port}],['10.0.0.1',80]]) { const s=n.connect(p,h); s.on('data',d=>console.log('DATA',h,String(d))); s.on('connect',()=>console.log('CONNECTED',h)); s.on('error',e=>console.log('ERR',h,e.code)); setTimeout(()=>s.destroy(),1500);}"`,
      );
      expect(r.stdout).not.toContain('CONNECTED');
      expect(r.stdout).not.toContain('host-secret');
      expect((r.stdout.match(/ERR/g) ?? []).length).toBe(3);
    } finally {
      probe.close();
    }
  });

  it('a fork bomb, a memory hog and a disk filler end inside their workspace while others keep answering', async () => {
    const other = await ok('workspace_open', { repositoryUrl: repoUrl, idempotencyKey: 'open-neighbour-1' });
    const neighbour = other.workspaceId as string;
    await ok('workspace_set_active', { workspaceId: ws });
    const neighbourAnswers = async () => {
      const t0 = Date.now();
      const n = await sh('echo alive', neighbour);
      expect(n.stdout.trim()).toBe('alive');
      expect(Date.now() - t0).toBeLessThan(10_000);
      expect((await c.listTools()).tools.length).toBe(ALL_TOOLS);
    };
    // Fork bomb: held by pids.max, killed whole at the timeout.
    const bomb = sh('bomb() { bomb | bomb & }; bomb; sleep 60', ws, 6_000);
    await new Promise((r) => setTimeout(r, 1500));
    await neighbourAnswers();
    const b = await bomb;
    expect(b.timedOut).toBe(true);
    // Memory hog: killed by the workspace's memory limit, i.e. by the kernel's OOM killer in the
    // workspace's memory cgroup (SIGKILL, 137), not by a runtime's own abort: tail buffers all of
    // /dev/zero (no newline ever comes) and never gives up by itself.
    const oomKills = () => Number(/oom_kill (\d+)/.exec(readFileSync(join(CgroupManager.discover().group(ws).dirs.memory, 'memory.oom_control'), 'utf8'))?.[1] ?? NaN);
    const killsBefore = oomKills();
    const hog = sh(`tail /dev/zero; echo "hog exit $?"`, ws, 60_000);
    await neighbourAnswers();
    const h = await hog;
    expect(h.stdout).toMatch(/hog exit 137/);
    expect(oomKills()).toBeGreaterThan(killsBefore);
    // Disk filler: the workspace's own filesystem fills, nothing else.
    const filler = sh('dd if=/dev/zero of=/workspace/fill bs=1M count=2000 2>&1; rm -f /workspace/fill', ws, 60_000);
    await neighbourAnswers();
    const f = await filler;
    expect(f.stdout).toMatch(/No space left on device/);
    // What filled is the workspace's own filesystem, at most its 256 MiB: read from inside (the
    // host's free space is shared with the other test files running beside this one).
    const fs = (await sh('df -k --output=size,target /workspace | tail -1', ws)).stdout.trim().split(/\s+/);
    expect(fs[1]).toBe('/workspace');
    expect(Number(fs[0])).toBeLessThan(300 * 1024);
    expect((await sh('echo still-here', ws)).stdout.trim()).toBe('still-here');
    await ok('workspace_close', { workspaceId: neighbour });
    await ok('workspace_set_active', { workspaceId: ws });
  }, 180_000);
});

describe('dependency-access', () => {
  it('reaches the npm registry through the egress proxy and nothing else', async () => {
    const r = await ok('workspace_open', { repositoryUrl: repoUrl, idempotencyKey: 'open-deps-1', networkProfile: 'dependency-access' });
    const id = r.workspaceId as string;
    try {
      const npm = await sh('npm install --no-audit --no-fund --no-update-notifier is-number@7.0.0 >/dev/null 2>&1; node -p "require(\'is-number\')(42)"', id, 120_000);
      expect(npm.stdout.trim()).toBe('true');
      const others = await sh(
        `for u in https://example.com https://1.1.1.1 https://10.0.0.1 https://127.0.0.1:${host.port}/ http://registry.npmjs.org/; do curl -s -m 10 -o /dev/null -w "%{http_code} $u\\n" "$u" || echo "fail $u"; done`,
        id,
        120_000,
      );
      const codes = others.stdout.trim().split('\n').filter((l) => /^\d{3} /.test(l));
      expect(codes).toHaveLength(5);
      // Nothing answered but the proxy itself: 000 (tunnel refused) or its own 403 for plain HTTP.
      for (const l of codes) expect(l).toMatch(/^(000|403) /);
    } finally {
      await ok('workspace_close', { workspaceId: id });
      await ok('workspace_set_active', { workspaceId: ws });
    }
  }, 240_000);
});

describe('leases, recovery and closing', () => {
  it('caps a renewal at hardExpiresAt and says so', async () => {
    const r = await ok('workspace_lease_renew', { workspaceId: ws, extensionSeconds: 86400 });
    expect(r.leaseCapped).toBe(true);
    expect(r.leaseExpiresAt).toBe(r.hardExpiresAt);
    expect(Date.parse(r.requestedExpiresAt as string)).toBeGreaterThan(Date.parse(r.hardExpiresAt as string));
    expect((r.leaseWarnings as string[]).length).toBe(1);
    const small = await ok('workspace_lease_renew', { workspaceId: ws, extensionSeconds: 60 });
    expect(small.leaseCapped).toBe(false);
    expect(small.requestedExpiresAt).toBeUndefined();
  });

  it('recover status and patch show unpushed work; export pushes it through the broker', async () => {
    await sh('echo "feature" > feature.txt && git add feature.txt && git -c user.name=T -c user.email=t@example.invalid commit -qm "add feature" && echo "wip" >> README.md && echo new > untracked.txt');
    const st = await ok('workspace_recover', { workspaceId: ws, mode: 'status' });
    expect((st.unpushedCommits as Array<{ subject: string }>).map((x) => x.subject)).toEqual(['add feature']);
    expect((st.uncommittedChanges as Array<{ path: string }>).map((x) => x.path).sort()).toEqual(['README.md', 'untracked.txt']);
    const patch = await ok('workspace_recover', { workspaceId: ws, mode: 'patch' });
    expect(patch.patch).toContain('Subject: [PATCH 1/2] add feature');
    expect(patch.patch).toContain('+wip');
    expect(patch.patch).toContain('+new');
    const exp = await ok('workspace_recover', { workspaceId: ws, mode: 'export', targetBranch: 'rescue/work' });
    expect(exp.pushedOid).toMatch(/^[0-9a-f]{40}$/);
    // Async: the git host fixture serves from this very process.
    const { stdout: remote } = await promisify(execFile)('git', ['ls-remote', repoUrl, 'refs/heads/rescue/work'], { env: { ...process.env, ...gitEnvFor(host) }, encoding: 'utf8', timeout: 30_000 });
    expect(remote.split('\t')[0]).toBe(exp.pushedOid);
    // The workspace itself is unchanged by the export.
    expect((await sh('git status --porcelain | sort')).stdout).toBe(' M README.md\n?? untracked.txt\n');
  }, 90_000);

  it('lists workspaces with cursor pages', async () => {
    const a = await ok('workspace_open', { repositoryUrl: repoUrl, idempotencyKey: 'open-page-1' });
    const p1 = await ok('workspace_list', { limit: 1 });
    expect((p1.workspaces as unknown[]).length).toBe(1);
    expect(p1.nextCursor).toBeTypeOf('string');
    const p2 = await ok('workspace_list', { limit: 1, cursor: p1.nextCursor });
    expect((p2.workspaces as Array<{ workspaceId: string }>)[0]!.workspaceId).not.toBe((p1.workspaces as Array<{ workspaceId: string }>)[0]!.workspaceId);
    const bad = await call(c, 'workspace_list', { cursor: 'forged.cursor' });
    expect(!bad.ok && bad.error.details.field).toBe('cursor');
    await ok('workspace_close', { workspaceId: a.workspaceId });
    await ok('workspace_set_active', { workspaceId: ws });
  }, 60_000);

  it('an omitted workspaceId means the active workspace; the v1 client works the same', async () => {
    const v1 = await connectV1(svc);
    try {
      const r = await call(v1, 'workspace_status', {});
      // the active workspace is per caller (token): the v1 client uses the same token
      expect(r.ok && r.result.workspaceId).toBe(ws);
    } finally {
      await v1.close();
    }
  });

  it('close stops everything and removes every file, idempotently', async () => {
    const r = await ok('workspace_open', { repositoryUrl: repoUrl, idempotencyKey: 'open-close-1' });
    const id = r.workspaceId as string;
    await sh('echo data > keep.txt', id);
    const root = join(svc.dataDir, 'workspaces', id);
    expect(existsSync(root)).toBe(true);
    const closed = await ok('workspace_close', { workspaceId: id });
    expect(closed).toMatchObject({ state: 'closed', alreadyClosed: false });
    expect(existsSync(root)).toBe(false);
    // Its image is gone from wherever images are (the image pool's disks/ when there is one, else the data directory's).
    for (const d of [join(svc.dataDir, 'disks'), join(svc.dataDir, 'image-pool', 'disks')]) if (existsSync(d)) expect(readdirSync(d).filter((f) => f.startsWith(id))).toEqual([]);
    expect((await ok('workspace_close', { workspaceId: id })).alreadyClosed).toBe(true);
    const gone = await call(c, 'exec_run', { workspaceId: id, command: 'true' });
    expect(!gone.ok && gone.error.code).toBe('NOT_FOUND');
    await ok('workspace_set_active', { workspaceId: ws });
  }, 60_000);
});
