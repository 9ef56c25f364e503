/**
 * Security (issue #12 item 1): nothing running as root on the host may follow a path inside a
 * workspace that the workspace can change. A workspace process races directory <-> symlink swaps
 * (every swapped name points at a root-owned canary directory outside every workspace, holding
 * entries of the same names) while every runner-side operation that touches the workspace's files
 * runs: git_fetch, git_pull, git_push, workspace_finalize with a push, every workspace_recover
 * mode, and finally workspace_close. The canary's owner, mode and content must be untouched.
 *
 * Before the fix, prepareRootDir's path walk (reached from every git network operation) lchown'd
 * canary entries to the sandbox uid within a few calls.
 */
import { chmodSync, chownSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Client } from '@modelcontextprotocol/client';
import { call, connectV2, type Service } from './harness.js';
import { REPO_FILES, startGitHost, startWorkspaceService } from './workspace-fixture.js';
import type { GitHost } from '../fixtures/githost.js';
import { assertNothingLeft } from './leftovers.js';

let host: GitHost;
let c: Client;
let repoUrl: string;
let canary: string;
const services: Service[] = [];

/** Names inside each racing directory, and inside the canary. */
const ENTRIES = ['f', 'g', 'sub'];

function makeCanary(): string {
  const dir = mkdtempSync(join(tmpdir(), 'atelier-canary-'));
  chmodSync(dir, 0o755);
  writeFileSync(join(dir, 'f'), 'canary f\n', { mode: 0o644 });
  writeFileSync(join(dir, 'g'), 'canary g\n', { mode: 0o600 });
  mkdirSync(join(dir, 'sub'), { mode: 0o755 });
  writeFileSync(join(dir, 'sub', 'f'), 'canary sub/f\n', { mode: 0o644 });
  for (const p of [dir, join(dir, 'f'), join(dir, 'g'), join(dir, 'sub'), join(dir, 'sub', 'f')]) chownSync(p, 0, 0);
  return dir;
}

function canaryState(dir: string): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const rel of ['.', 'f', 'g', 'sub', 'sub/f']) {
    const p = join(dir, rel);
    try {
      const st = statSync(p);
      out[rel] = { uid: st.uid, gid: st.gid, mode: (st.mode & 0o7777).toString(8), content: st.isFile() ? readFileSync(p, 'utf8') : null };
    } catch (e) {
      out[rel] = { missing: (e as NodeJS.ErrnoException).code };
    }
  }
  return out;
}

/**
 * Runs inside the workspace as the workspace user: many directories holding the canary's entry
 * names, each atomically exchanged (renameat2 RENAME_EXCHANGE) with a symlink to the canary, so the
 * name never goes missing, as fast as python can, until killed.
 */
const RACER = `
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD, RENAME_EXCHANGE = -100, 2
canary, roots = sys.argv[1], sys.argv[2:]
pairs = []
for root in roots:
    os.makedirs(root, exist_ok=True)
    for i in range(48):
        d, l = f"{root}/d{i}", f"{root}/l{i}"
        os.makedirs(d + "/sub", exist_ok=True)
        for n in ("f", "g", "sub/f"):
            open(d + "/" + n, "w").write("x")
        if not os.path.islink(l):
            os.symlink(canary, l)
        pairs.append((d.encode(), l.encode()))
print("racing", len(pairs), flush=True)
# Each name is always present, and flips between a directory and a symlink to the canary.
while True:
    for d, l in pairs:
        libc.renameat2(AT_FDCWD, d, AT_FDCWD, l, RENAME_EXCHANGE)
`;

async function ok(name: string, args: Record<string, unknown>): Promise<Record<string, unknown>> {
  const r = await call(c, name, args);
  if (!r.ok) throw new Error(`${name} failed: ${r.text}`);
  return r.result;
}

/** Runs a tool; a failure caused by the race itself (git seeing a moving tree) is fine, the canary is what counts. */
async function attempt(name: string, args: Record<string, unknown>): Promise<string> {
  const r = await call(c, name, args);
  return r.ok ? 'ok' : `${name}: ${r.error.code} ${r.error.message.slice(0, 300)}`;
}

async function startRacer(ws: string): Promise<string> {
  await ok('exec_run', { workspaceId: ws, command: `cat > /tmp/racer.py <<'RACER_EOF'\n${RACER}\nRACER_EOF` });
  const op = await ok('exec_run', {
    workspaceId: ws,
    command: `exec python3 /tmp/racer.py ${canary} /workspace/.git/race /tmp/race /home/user/race`,
    async: true,
    timeoutMs: 300_000,
  });
  // Wait until the racer has built its directories.
  for (let i = 0; i < 100; i++) {
    const r = await ok('exec_run', { workspaceId: ws, command: 'ls /tmp/race 2>/dev/null | wc -l' });
    if (Number(String(r.stdout).trim()) >= 40) break;
    await new Promise((res) => setTimeout(res, 100));
  }
  return (op.operationId ?? op.id) as string;
}

beforeAll(async () => {
  host = await startGitHost();
  repoUrl = (await host.createRepo('approved/race', REPO_FILES, { commits: 2 })).url;
  canary = makeCanary();
}, 120_000);

afterAll(async () => {
  await c?.close();
  for (const s of services) {
    await s.dispose();
    await assertNothingLeft(s.dataDir);
  }
  await host?.close();
  if (canary) rmSync(canary, { recursive: true, force: true });
});

// Both layouts: the workspace on its own loop-mounted filesystem (default), and on the data
// directory's filesystem (sandboxDiskMb 0), where removal at close walks the host tree.
describe.each([
  ['own filesystem', 256],
  ['no separate filesystem', 0],
])('symlink swaps race every runner-side operation (%s)', (_label, diskMb) => {
  let ws: string;
  const before = () => canaryState(canary);
  let expected: Record<string, unknown>;

  beforeAll(async () => {
    // The racer spins as fast as it may: half a core is still thousands of swaps per runner-side
    // call, and leaves the other tests of the run their share of a 2-core machine.
    const svc = await startWorkspaceService(host, { config: { sandboxDiskMb: diskMb, sandboxCpuPercent: 50 } });
    services.push(svc);
    await c?.close();
    c = await connectV2(svc);
    ws = (await ok('workspace_open', { repositoryUrl: repoUrl, fetchDepth: 0, idempotencyKey: `race-open-${diskMb}` })).workspaceId as string;
    await ok('git_identity_set', { workspaceId: ws, name: 'Racer', email: 'racer@example.invalid' });
    expected = before();
    await startRacer(ws);
  }, 180_000);

  it('git network tools and every recover mode leave the root-owned canary untouched', async () => {
    const outcomes: string[] = [];
    for (let round = 0; round < 2; round++) {
      outcomes.push(await attempt('git_fetch', { workspaceId: ws }));
      expect(canaryState(canary), `after git_fetch round ${round}`).toEqual(expected);
      outcomes.push(await attempt('git_pull', { workspaceId: ws }));
      expect(canaryState(canary), `after git_pull round ${round}`).toEqual(expected);
      await ok('files_write', { workspaceId: ws, path: `race-${diskMb}-${round}.txt`, content: `round ${round}\n` });
      outcomes.push(await attempt('workspace_finalize', { workspaceId: ws, commitMessage: `race ${round}`, push: true, paths: [`race-${diskMb}-${round}.txt`], all: false }));
      expect(canaryState(canary), `after workspace_finalize round ${round}`).toEqual(expected);
      outcomes.push(await attempt('git_push', { workspaceId: ws }));
      expect(canaryState(canary), `after git_push round ${round}`).toEqual(expected);
      for (const mode of ['status', 'patch', 'export', 'resume'] as const) {
        outcomes.push(await attempt('workspace_recover', { workspaceId: ws, mode, ...(mode === 'export' ? { targetBranch: `race-export-${diskMb}-${round}` } : {}) }));
        expect(canaryState(canary), `after workspace_recover ${mode} round ${round}`).toEqual(expected);
      }
    }
    // The operations themselves still work while the workspace misbehaves.
    expect(outcomes.filter((o) => o === 'ok').length, outcomes.join('\n')).toBeGreaterThan(outcomes.length / 2);
  }, 600_000);

  it('closing the workspace while it races leaves the canary untouched', async () => {
    await ok('workspace_close', { workspaceId: ws });
    expect(canaryState(canary)).toEqual(expected);
  }, 120_000);
});
