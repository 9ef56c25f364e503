/**
 * No host path inside a sandbox (issue #31 item 7; docs/sandbox.md "Host paths"), through the real
 * service: the mountinfo a workspace's commands read, and that of a git network sandbox (a clone
 * held by the git host while the test reads /proc/<pid>/mountinfo of its git process), name
 * nothing under the data directory or the run's temporary directory. The socket directories
 * (/run/atelier, /run/egress, /run/atelier-cred) come from each sandbox's own tmpfs. The package
 * builder is covered in packages.test.ts, the agent runtime in agents-pool.test.ts.
 */
import { readFileSync, readdirSync, readlinkSync } from 'node:fs';
import type { ServerResponse } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Client } from '@modelcontextprotocol/client';
import { call, connectV2, type Service } from './harness.js';
import { REPO_FILES, startGitHost, startWorkspaceService } from './workspace-fixture.js';
import type { GitHost } from '../fixtures/githost.js';

let host: GitHost;
let svc: Service;
let c: Client;
let repoUrl: string;

type R = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

async function ok(name: string, args: Record<string, unknown>): Promise<R> {
  const r = await call(c, name, args);
  if (!r.ok) throw new Error(`${name}: ${r.text}`);
  return r.result as R;
}

/** Host directories no mountinfo line of a sandbox may name. */
function hostDirs(): string[] {
  return [svc.dataDir, process.env.ATELIER_TEST_RUN_DIR].filter((d): d is string => !!d);
}

function expectNoHostPath(mountinfo: string): void {
  expect(mountinfo).toContain(' /proc '); // it is a mountinfo
  for (const dir of hostDirs()) {
    const naming = mountinfo.split('\n').filter((l) => l.includes(dir));
    expect(naming, `mountinfo lines naming ${dir}`).toEqual([]);
  }
}

/** [root, mount point, filesystem type] of the line mounted at `at`. */
function mountAt(mountinfo: string, at: string): [string, string, string] | undefined {
  const l = mountinfo.split('\n').find((x) => x.split(' ')[4] === at);
  return l ? [l.split(' ')[3]!, l.split(' ')[4]!, l.split(' - ')[1]!.split(' ')[0]!] : undefined;
}

beforeAll(async () => {
  host = await startGitHost();
  repoUrl = (await host.createRepo('approved/mounts', REPO_FILES)).url;
  svc = await startWorkspaceService(host);
  c = await connectV2(svc);
}, 120_000);

afterAll(async () => {
  await c?.close();
  await svc?.dispose();
  await host?.close();
});

describe('mountinfo inside sandboxes', () => {
  it('a workspace (network-none and dependency-access): no line names the data directory; the socket directories are a tmpfs of its own', async () => {
    for (const networkProfile of ['network-none', 'dependency-access']) {
      const ws = (await ok('workspace_open', { repositoryUrl: repoUrl, networkProfile, idempotencyKey: `mountinfo-${networkProfile}` })).workspaceId as string;
      const r = await ok('exec_run', { workspaceId: ws, command: 'cat /proc/self/mountinfo' });
      expect(r.exitCode, r.stderr).toBe(0);
      expectNoHostPath(r.stdout);
      expect(mountAt(r.stdout, '/run/atelier')).toEqual(['/s', '/run/atelier', 'tmpfs']);
      expect(mountAt(r.stdout, '/run/egress')).toEqual(['/egress', '/run/egress', 'tmpfs']);
      // The tmpfs is no new surface: nothing can be added to, replaced in or executed from it.
      const hostile = await ok('exec_run', {
        workspaceId: ws,
        command:
          'for d in /run/atelier /run/egress; do touch $d/x 2>/dev/null && echo "$d writable"; ln -s / $d/l 2>/dev/null && echo "$d linkable"; done; ' +
          'mv /run/egress/proxy.sock /tmp/ 2>/dev/null && echo moved; rm -f /run/atelier/d.sock 2>/dev/null; test -S /run/atelier/d.sock || echo removed; ' +
          'grep -E " /run/(atelier|egress) " /proc/self/mountinfo | grep -c noexec',
      });
      expect(hostile.stdout).toBe('2\n');
      if (networkProfile === 'dependency-access') {
        // The proxy still answers through the relay (a refused host is the proxy's answer, not a broken socket).
        const p = await ok('exec_run', { workspaceId: ws, command: 'curl -s -o /dev/null -w "%{http_connect}" -x http://127.0.0.1:3128 https://denied.invalid/ ; echo " rc=$?"' });
        expect(p.stdout).toBe('403 rc=56\n');
      }
      await ok('workspace_close', { workspaceId: ws });
    }
  });

  it('a git network sandbox (a clone, held by the git host while its mountinfo is read): no line names the data directory', async () => {
    const held: ServerResponse[] = [];
    let arrived!: () => void;
    const first = new Promise<void>((r) => (arrived = r));
    let release = false;
    host.mountApi('approved/held.git', (_req, res) => {
      if (release) return void res.writeHead(404).end();
      held.push(res);
      arrived();
    });
    const open = call(c, 'workspace_open', { repositoryUrl: `${host.url}/approved/held.git`, idempotencyKey: 'mountinfo-held' });
    try {
      const early = await Promise.race([first.then(() => null), open]);
      expect(early, 'the clone reached the git host').toBeNull();
      const pids = sandboxProcessesNaming('approved/held.git');
      expect(pids.length, 'git processes of the clone').toBeGreaterThan(0);
      for (const pid of pids) {
        const mountinfo = readFileSync(`/proc/${pid}/mountinfo`, 'utf8');
        expectNoHostPath(mountinfo);
        expect(mountAt(mountinfo, '/run/egress')).toEqual(['/egress', '/run/egress', 'tmpfs']);
        expect(mountAt(mountinfo, '/run/atelier-cred')).toEqual(['/x1', '/run/atelier-cred', 'tmpfs']);
      }
    } finally {
      release = true;
      for (const res of held) res.writeHead(404).end();
      await open;
    }
  });
});

/** Processes in another mount namespace than this one whose command line names `text` (the sandbox's git processes). */
function sandboxProcessesNaming(text: string): number[] {
  const mine = readlinkSync('/proc/self/ns/mnt');
  const out: number[] = [];
  for (const p of readdirSync('/proc')) {
    if (!/^\d+$/.test(p)) continue;
    try {
      if (!readFileSync(`/proc/${p}/cmdline`, 'utf8').includes(text)) continue;
      if (readlinkSync(`/proc/${p}/ns/mnt`) === mine) continue;
      out.push(Number(p));
    } catch {
      /* gone */
    }
  }
  return out;
}
