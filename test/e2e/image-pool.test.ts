/**
 * The image pool (issue #33; docs/checkpoints.md, "The image pool") through the real `atelier
 * serve`: on this machine's ext4 data directory the service keeps its images in a sparse XFS file
 * with reflinks, so checkpoint, restore, fork (of a checkpoint and of a live workspace) and
 * template starts are reflink clones that add almost nothing to the disk; a fork and its source
 * still share nothing writable (byte-compared both ways); a full pool is a clear error naming it;
 * a runner restart with workspaces open keeps them working on the pool (never formatted again);
 * nothing a workspace controls leads root into the pool; an upgraded data directory (images
 * outside a pool) keeps working without one; and no mount or loop device of the service is left.
 *
 * Needs mkfs.xfs (xfsprogs, installed by scripts/setup.sh); skipped without it.
 */
import { createHash } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Client } from '@modelcontextprotocol/client';
import { call, connectV2, serveExpectingFailure, startService, unmountUnder, type Service } from './harness.js';
import { leftoversOf } from './leftovers.js';
import { REPO_FILES, startGitHost, startWorkspaceService } from './workspace-fixture.js';
import type { GitHost } from '../fixtures/githost.js';

type R = Record<string, unknown>;
const HAVE_XFS = existsSync('/usr/sbin/mkfs.xfs') && process.getuid?.() === 0;
const POOL_MB = 4096;

let host: GitHost;
let repoUrl: string;
let svc: Service;
let c: Client;
let dataDir: string;
let pool: string;
let keys = 0;
const key = () => `pool-test-${++keys}-${Date.now()}`;

async function ok(cl: Client, name: string, args: R): Promise<R> {
  const r = await call(cl, name, args, 300_000);
  if (!r.ok) throw new Error(`${name} failed: ${r.text}`);
  return r.result;
}
async function fail(cl: Client, name: string, args: R): Promise<{ code: string; message: string; details: R }> {
  const r = await call(cl, name, args, 300_000);
  if (r.ok) throw new Error(`${name} unexpectedly succeeded: ${JSON.stringify(r.result).slice(0, 300)}`);
  return r.error;
}
async function sh(cl: Client, ws: string, command: string): Promise<string> {
  const r = await ok(cl, 'exec_run', { workspaceId: ws, command, timeoutMs: 120_000, maxOutputBytes: 1_048_576 });
  if (r.exitCode !== 0) throw new Error(`${command}: ${JSON.stringify(r).slice(0, 800)}`);
  return String(r.stdout);
}
/** The mount at `dir` (/proc/self/mountinfo): its fs type and options, or undefined. */
function mountAt(dir: string): { fstype: string; options: string } | undefined {
  for (const l of readFileSync('/proc/self/mountinfo', 'utf8').split('\n')) {
    const f = l.split(' ');
    if (f[4] !== dir) continue;
    const sep = f.indexOf('-');
    return { fstype: f[sep + 1]!, options: `${f[5]},${f[sep + 3]}` };
  }
  return undefined;
}
const sha = (file: string) => createHash('sha256').update(readFileSync(file)).digest('hex');
async function metrics(s: Service, token = s.token): Promise<string> {
  return (await fetch(`${s.url}/metrics`, { headers: { authorization: `Bearer ${token}` } })).text();
}

beforeAll(async () => {
  if (!HAVE_XFS) return;
  host = await startGitHost();
  repoUrl = (await host.createRepo('approved/pool-a', REPO_FILES)).url;
  dataDir = mkdtempSync(join(tmpdir(), 'atelier-pool-'));
  pool = join(dataDir, 'image-pool');
  svc = await startWorkspaceService(host, { dataDir, config: { knowledgeEmbeddings: 'off', sandboxDiskMb: 512, imagePoolSizeMb: POOL_MB, checkpointQuotaMb: 250, checkpointMaxCount: 20 } });
  c = await connectV2(svc);
}, 180_000);

afterAll(async () => {
  if (!HAVE_XFS) return;
  await c?.close();
  await svc?.stop();
  // Every workspace was closed: the stopped service left nothing (no mount, no loop device, no process under its data directory).
  const left = leftoversOf(dataDir);
  unmountUnder(dataDir);
  rmSync(dataDir, { recursive: true, force: true });
  await host?.close();
  expect(left).toEqual([]);
});

describe.skipIf(!HAVE_XFS)('the image pool on an ext4 data directory', () => {
  let ws: string;

  it('is a sparse XFS file mounted nosuid,nodev,noexec at a root-only directory, holding every image; /metrics shows it', async () => {
    const m = mountAt(pool);
    expect(m?.fstype).toBe('xfs');
    for (const o of ['nosuid', 'nodev', 'noexec']) expect(m!.options.split(',')).toContain(o);
    expect(m!.options).toContain('discard');
    expect(statSync(pool).mode & 0o777).toBe(0o700);
    const file = join(dataDir, 'image-pool.xfs');
    expect(statSync(file).mode & 0o777).toBe(0o600);
    expect(statSync(file).size).toBe(POOL_MB * 1_048_576);
    expect(statSync(file).blocks * 512).toBeLessThan(POOL_MB * 1_048_576 * 0.1); // sparse: metadata only
    const r = await call(c, 'workspace_open', { repositoryUrl: repoUrl, idempotencyKey: key() });
    if (!r.ok) throw new Error(r.text);
    ws = r.result.workspaceId as string;
    expect(existsSync(join(pool, 'disks', `${ws}.img`))).toBe(true);
    expect(existsSync(join(dataDir, 'disks', `${ws}.img`))).toBe(false);
    const text = await metrics(svc);
    expect(text).toMatch(/atelier_image_pool_info\{state="xfs",reason="made now"\} 1/);
    expect(text).toMatch(new RegExp(`atelier_image_pool_size_bytes ${POOL_MB * 1_048_576 - 1}|atelier_image_pool_size_bytes [1-9]`));
  }, 300_000);

  it('checkpoint, restore and forks are reflink clones adding under 10 % of the source; a fork and its source share nothing writable (byte-compared both ways)', async () => {
    await sh(c, ws, 'head -c 100000000 /dev/urandom > big.bin && sha256sum big.bin > big.sum');
    const src = statSync(join(pool, 'disks', `${ws}.img`)).blocks * 512;
    const cp = await ok(c, 'checkpoint_create', { workspaceId: ws, idempotencyKey: key() });
    expect(cp.copyMode).toBe('reflink');
    expect(cp.diskBytes as number).toBeGreaterThan(100_000_000); // it references the data ...
    expect(cp.addedBytes as number).toBeLessThan(src / 10); // ... and added nearly nothing
    const fc = await ok(c, 'workspace_fork', { checkpointId: cp.checkpointId, idempotencyKey: key() });
    const fl = await ok(c, 'workspace_fork', { workspaceId: ws, idempotencyKey: key() });
    for (const f of [fc, fl]) {
      expect(f.copyMode).toBe('reflink');
      expect(f.addedBytes as number).toBeLessThan(src / 10);
    }
    const a = fl.workspaceId as string;
    // Same bytes at first; then each side rewrites its copy and the other is unchanged, byte for byte.
    const orig = await sh(c, ws, 'sha256sum big.bin');
    expect(await sh(c, a, 'sha256sum big.bin')).toBe(orig);
    await sh(c, a, 'dd if=/dev/urandom of=big.bin bs=1M count=10 seek=20 conv=notrunc status=none && echo fork > only-fork');
    expect(await sh(c, ws, 'sha256sum big.bin; test -e only-fork && echo shared || echo separate')).toBe(`${orig}separate\n`);
    const forkSum = await sh(c, a, 'sha256sum big.bin');
    expect(forkSum).not.toBe(orig);
    await sh(c, ws, 'dd if=/dev/urandom of=big.bin bs=1M count=10 seek=50 conv=notrunc status=none && echo source > only-source');
    expect(await sh(c, a, 'sha256sum big.bin; test -e only-source && echo shared || echo separate')).toBe(`${forkSum}separate\n`);
    expect(await sh(c, fc.workspaceId as string, 'sha256sum big.bin')).toBe(orig); // the checkpoint's fork: the data as checkpointed

    const r = await ok(c, 'checkpoint_restore', { workspaceId: ws, checkpointId: cp.checkpointId, idempotencyKey: key() });
    expect(r.copyMode).toBe('reflink');
    expect(await sh(c, ws, 'sha256sum big.bin; test -e only-source && echo kept || echo gone')).toBe(`${orig}gone\n`);
    const text = await metrics(svc);
    for (const op of ['checkpoint', 'restore', 'fork_checkpoint', 'fork_live']) expect(text).toMatch(new RegExp(`atelier_checkpoint_copies_total\\{op="${op}",mode="reflink"\\} [1-9]`));
    for (const f of [fc, fl]) await ok(c, 'workspace_close', { workspaceId: f.workspaceId });
    await ok(c, 'checkpoint_delete', { checkpointId: cp.checkpointId });
  }, 600_000);

  it('the checkpoint disk quota at its edge counts what a clone references (a reflink clone can come to hold all of it)', async () => {
    // 100 MB of data: a checkpoint (about 101 MB referenced) fits in 250 MiB twice, not three times.
    const one = await ok(c, 'checkpoint_create', { workspaceId: ws, idempotencyKey: key() });
    const two = await ok(c, 'checkpoint_create', { workspaceId: ws, idempotencyKey: key() });
    expect([one.copyMode, two.copyMode]).toEqual(['reflink', 'reflink']);
    const used = (two.quota as R).usedBytes as number;
    expect(used).toBe((one.diskBytes as number) + (two.diskBytes as number));
    const over = await fail(c, 'checkpoint_create', { workspaceId: ws, idempotencyKey: key() });
    expect(over).toMatchObject({ code: 'RESOURCE_EXHAUSTED', details: { rule: 'checkpoint disk quota', usedBytes: used, quotaBytes: 250 * 1_048_576 } });
    expect(used + (over.details.needBytes as number)).toBeGreaterThan(250 * 1_048_576);
    await ok(c, 'checkpoint_delete', { checkpointId: two.checkpointId });
    const again = await ok(c, 'checkpoint_create', { workspaceId: ws, idempotencyKey: key() });
    for (const x of [one, again]) await ok(c, 'checkpoint_delete', { checkpointId: x.checkpointId });
  }, 600_000);

  it('a full pool: a fork is refused with RESOURCE_EXHAUSTED naming the pool, nothing half-made is kept; it works again once there is room', async () => {
    // A checkpoint of a workspace that is then closed: the copy a full pool refuses touches no live
    // workspace filesystem. (A live workspace whose image needs new blocks in a full pool gets I/O
    // errors, as on a full host disk: docs/checkpoints.md.)
    const d = (await ok(c, 'workspace_open', { repositoryUrl: repoUrl, idempotencyKey: key() })).workspaceId as string;
    await sh(c, d, 'head -c 20000000 /dev/urandom > data.bin && sha256sum data.bin > data.sum');
    const cp = await ok(c, 'checkpoint_create', { workspaceId: d, idempotencyKey: key() });
    await ok(c, 'workspace_close', { workspaceId: d });
    // Workspace images but the spare sandbox's: after each open the service starts the next open's
    // sandbox in the background (its id in run/spare-workspace.json, written before its image is
    // taken), and its image may land at any moment here; it is not the fork's.
    const images = (): string[] => {
      let spare = '';
      try {
        spare = (JSON.parse(readFileSync(join(dataDir, 'run', 'spare-workspace.json'), 'utf8')) as { id: string }).id;
      } catch {
        // no spare sandbox
      }
      return execFileSync('find', [join(pool, 'disks'), '-name', 'ws_*'], { encoding: 'utf8' }).split('\n').filter((l) => l && !(spare && l.includes(spare))).sort();
    };
    const before = images();
    const filler = join(pool, 'filler');
    try {
      const avail = Number(execFileSync('df', ['-B1', '--output=avail', pool], { encoding: 'utf8' }).trim().split('\n').pop());
      execFileSync('fallocate', ['-l', String(Math.max(0, avail - 4 * 1_048_576)), filler]);
      try {
        execFileSync('dd', ['if=/dev/zero', `of=${filler}.2`, 'bs=4k', 'status=none'], { stdio: 'pipe' });
      } catch {
        // ENOSPC: full
      }
      for (let i = 0; i < 64; i++) {
        try {
          execFileSync('touch', [`${filler}.t${i}`], { stdio: 'pipe' });
        } catch {
          break;
        }
      }
      const e = await fail(c, 'workspace_fork', { checkpointId: cp.checkpointId, idempotencyKey: key() });
      expect(e).toMatchObject({ code: 'RESOURCE_EXHAUSTED', retryable: false, details: { rule: 'image store full', pool: join(dataDir, 'image-pool.xfs') } });
      expect(e.message).toContain('image pool');
      expect(e.message).toContain('--image-pool-size-mb');
      expect(images()).toEqual(before); // no half-made image
      expect(await metrics(svc)).toMatch(/atelier_checkpoint_refused_total\{limit="image_store"\} [1-9]/);
    } finally {
      execFileSync('sh', ['-c', `rm -f '${filler}'*`]);
    }
    const f = await ok(c, 'workspace_fork', { checkpointId: cp.checkpointId, idempotencyKey: key() });
    expect(f.copyMode).toBe('reflink');
    expect((await sh(c, f.workspaceId as string, 'sha256sum -c data.sum')).trim()).toBe('data.bin: OK');
    await ok(c, 'workspace_close', { workspaceId: f.workspaceId });
    await ok(c, 'checkpoint_delete', { checkpointId: cp.checkpointId });
  }, 600_000);

  it('nothing a workspace controls leads root into the pool: symlinks and .. names in it, labels, ids; it sees no pool path; another image is untouched', async () => {
    // A second workspace with a secret, and a checkpoint of it: the canary images.
    const b = (await ok(c, 'workspace_open', { repositoryUrl: repoUrl, idempotencyKey: key() })).workspaceId as string;
    await sh(c, b, 'echo pool-secret-5f1c > secret.txt');
    const bcp = await ok(c, 'checkpoint_create', { workspaceId: b, idempotencyKey: key() });
    const bImage = join(pool, 'checkpoints', `${bcp.checkpointId}.img`);
    const before = sha(bImage);
    // The hostile workspace: symlinks and names that would lead a path-following root anywhere.
    await sh(c, ws, [
      `ln -s ${pool} pool-link`, `ln -s ${join(pool, 'checkpoints', `${bcp.checkpointId}.img`)} ckpt-link`, `ln -s ${pool}/disks disks`,
      'mkdir -p ./..img && ln -s ../../../../image-pool dotdot && ln -s /proc/1/root proc-root', `ln -s ${pool} ~/image-pool; ln -s ${pool} /tmp/image-pool`,
    ].join(' && '));
    // From inside: the pool's paths do not exist; no image and no other workspace's secret is readable.
    const probe = await sh(c, ws, `for p in ${pool} ${pool}/disks ${bImage} pool-link/disks ckpt-link dotdot/disks proc-root${pool}; do test -e "$p" && echo "reach $p"; done; cat ckpt-link 2>/dev/null | head -c 100 | wc -c; s=pool-secret-; grep -rsl "\${s}5f1c" /workspace /home /tmp 2>/dev/null | head -3; true`);
    expect(probe.trim()).toBe('0');
    // A checkpoint, a fork and a restore of it: the image is copied as a whole file, none of its links is followed.
    const label = `../../../${bcp.checkpointId}.img`;
    const cp = await ok(c, 'checkpoint_create', { workspaceId: ws, idempotencyKey: key(), label });
    expect(cp.label).toBe(label);
    const fork = await ok(c, 'workspace_fork', { checkpointId: cp.checkpointId, idempotencyKey: key() });
    expect((await sh(c, fork.workspaceId as string, 'readlink pool-link dotdot')).trim()).toBe(`${pool}\n../../../../image-pool`);
    await ok(c, 'checkpoint_restore', { workspaceId: ws, checkpointId: cp.checkpointId, idempotencyKey: key() });
    // Ids are the service's: a checkpoint id with a path in it is refused naming the field.
    const bad = await fail(c, 'checkpoint_restore', { workspaceId: ws, checkpointId: `../checkpoints/${bcp.checkpointId}`, idempotencyKey: key() });
    expect(bad.details.field).toBe('checkpointId');
    expect(sha(bImage)).toBe(before);
    expect((await sh(c, b, 'cat secret.txt')).trim()).toBe('pool-secret-5f1c');
    // Only the service's own files are in the pool.
    const names = execFileSync('find', [pool, '-mindepth', '1', '-printf', '%P\\n'], { encoding: 'utf8' }).trim().split('\n').sort();
    for (const n of names) expect(n).toMatch(/^(disks|checkpoints|templates)(\/(ws|ckpt|tpl)_[A-Za-z0-9_-]+\.img|\/\.spare-[0-9a-z-]+\.img)?$/);
    await ok(c, 'workspace_close', { workspaceId: fork.workspaceId });
    await ok(c, 'workspace_close', { workspaceId: b });
    for (const x of (await ok(c, 'checkpoint_list', {})).checkpoints as R[]) await ok(c, 'checkpoint_delete', { checkpointId: x.checkpointId });
  }, 600_000);

  it('a runner restart with a workspace open keeps it working on the pool, which stays mounted and is never formatted again', async () => {
    const marker = join(pool, '.restart-marker');
    execFileSync('touch', [marker]);
    const fsUuid = execFileSync('xfs_admin', ['-u', join(dataDir, 'image-pool.xfs')], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
    await c.close();
    await svc.stop();
    // The workspace's filesystem is in the pool and stays mounted across the restart: so does the pool.
    expect(mountAt(pool)?.fstype).toBe('xfs');
    expect(mountAt(join(dataDir, 'workspaces', ws))?.fstype).toBe('ext4');
    const token = svc.token; // a restarted service prints no new owner token
    const again = await startService({ dataDir, args: [] });
    try {
      const c2 = await connectV2(again, token);
      expect(existsSync(marker)).toBe(true);
      expect(execFileSync('xfs_admin', ['-u', join(dataDir, 'image-pool.xfs')], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim()).toBe(fsUuid);
      expect(await metrics(again, token)).toMatch(/atelier_image_pool_info\{state="xfs",reason="an existing pool"\} 1/);
      expect((await sh(c2, ws, 'sha256sum -c big.sum')).trim()).toBe('big.bin: OK');
      const cp = await ok(c2, 'checkpoint_create', { workspaceId: ws, idempotencyKey: key() });
      expect(cp.copyMode).toBe('reflink');
      await ok(c2, 'checkpoint_delete', { checkpointId: cp.checkpointId });
      // With no workspace left, a stop unmounts the pool (nothing in it is in use); the next start mounts the same pool again.
      await ok(c2, 'workspace_close', { workspaceId: ws });
      await c2.close();
      await again.stop();
      expect(mountAt(pool)).toBeUndefined();
      expect(leftoversOf(dataDir)).toEqual([]);
    } finally {
      await again.stop();
    }
    rmSync(marker, { force: true }); // (unmounted: removes nothing; the pool's copy is checked below)
    svc = await startService({ dataDir });
    c = await connectV2(svc, token);
    expect(mountAt(pool)?.fstype).toBe('xfs');
    expect(existsSync(marker)).toBe(true);
    expect(existsSync(join(pool, 'disks', `${ws}.img`))).toBe(false);
  }, 600_000);
});

describe.skipIf(!HAVE_XFS)('settings, plain services and upgrades', () => {
  it('a service with no workspace leaves no mount and no loop device when it stops; --image-pool off makes no pool', async () => {
    const s = await startService({ args: ['--knowledge-embeddings', 'off'] });
    try {
      expect(mountAt(join(s.dataDir, 'image-pool'))?.fstype).toBe('xfs'); // auto: made at start (the spare disk image is in it)
      await s.stop();
      expect(leftoversOf(s.dataDir)).toEqual([]);
    } finally {
      await s.dispose();
    }
    const off = await startService({ args: ['--knowledge-embeddings', 'off', '--image-pool', 'off'] });
    try {
      expect(existsSync(join(off.dataDir, 'image-pool.xfs'))).toBe(false);
      expect(await metrics(off)).toMatch(/atelier_image_pool_info\{state="off",reason="off \(--image-pool off\)"\} 1/);
    } finally {
      await off.dispose();
    }
    const bad = await serveExpectingFailure(['--port', '0', '--data-dir', mkdtempSync(join(tmpdir(), 'atelier-pool-bad-')), '--image-pool', 'zfs']);
    expect(bad.code).not.toBe(0);
    expect(bad.stderr).toContain('--image-pool');
    expect(bad.stderr).toContain('auto, xfs or off');
  }, 300_000);

  it('a data directory with images outside a pool (an upgrade) keeps working without one, says why, and --image-pool xfs refuses to start', async () => {
    const h = await startGitHost();
    const url = (await h.createRepo('approved/pool-up', REPO_FILES)).url;
    const old = await startWorkspaceService(h, { args: ['--image-pool', 'off'], config: { knowledgeEmbeddings: 'off', sandboxDiskMb: 256 } });
    const dir = old.dataDir;
    try {
      let cl = await connectV2(old);
      const w = (await ok(cl, 'workspace_open', { repositoryUrl: url, idempotencyKey: key() })).workspaceId as string;
      await sh(cl, w, 'echo before-upgrade > kept.txt');
      expect(existsSync(join(dir, 'disks', `${w}.img`))).toBe(true);
      await cl.close();
      await old.stop();
      const xfs = await serveExpectingFailure(['--port', '0', '--data-dir', dir, '--image-pool', 'xfs']);
      expect(xfs.code).not.toBe(0);
      expect(xfs.stderr).toContain('--image-pool xfs');
      expect(xfs.stderr).toContain('outside a pool');
      const up = await startService({ dataDir: dir, args: ['--knowledge-embeddings', 'off'] });
      try {
        cl = await connectV2(up, old.token);
        expect(existsSync(join(dir, 'image-pool.xfs'))).toBe(false);
        expect(await metrics(up, old.token)).toMatch(/atelier_image_pool_info\{state="off",reason="the data directory already holds 1 image\(s\) outside a pool/);
        expect(up.stderr()).toContain('no image pool');
        expect((await sh(cl, w, 'cat kept.txt')).trim()).toBe('before-upgrade');
        expect((await ok(cl, 'checkpoint_create', { workspaceId: w, idempotencyKey: key() })).copyMode).toBe('copy');
        await cl.close();
      } finally {
        await up.stop();
      }
    } finally {
      await old.dispose();
      await h.close();
    }
    expect(leftoversOf(dir)).toEqual([]);
  }, 600_000);
});
