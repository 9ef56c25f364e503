/**
 * The image pool's decisions that need no mount (src/sandbox/image-pool.ts): which images count as
 * "outside a pool", and when no pool is made (and why). The pool itself, mounted, is tested through
 * the real service in test/e2e/image-pool.test.ts.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { imagesOutside, openImagePool } from '../../src/sandbox/image-pool.js';

const dirs: string[] = [];
function dataDir(files: string[] = []): string {
  const d = mkdtempSync(join(tmpdir(), 'pool-unit-'));
  dirs.push(d);
  for (const f of files) {
    mkdirSync(join(d, f, '..'), { recursive: true });
    writeFileSync(join(d, f), '');
  }
  return d;
}
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

describe('imagesOutside', () => {
  it('counts workspace, checkpoint and template images, not spares, temporaries or other files', () => {
    const d = dataDir(['disks/ws_a.img', 'disks/.spare-512m-1-1-ab.img', 'disks/ws_b.img.restore', 'checkpoints/ckpt_c.img', 'checkpoints/ckpt_d.img.part-1', 'templates/tpl_e.img', 'templates/.copy-ws_f.img', 'state/x.img']);
    expect(imagesOutside(d).sort()).toEqual(['checkpoints/ckpt_c.img', 'disks/ws_a.img', 'templates/tpl_e.img']);
    expect(imagesOutside(dataDir())).toEqual([]);
  });
});

describe('openImagePool without a pool', () => {
  const base = { sizeMb: 0, create: true, imagesUsed: true } as const;

  it('off: images stay in the data directory, no file is made', () => {
    const d = dataDir();
    const p = openImagePool({ ...base, dataDir: d, setting: 'off' });
    expect(p).toMatchObject({ state: 'off', root: d, reason: 'off (--image-pool off)' });
    expect(existsSync(join(d, 'image-pool.xfs'))).toBe(false);
    expect(p.usage()).toBeUndefined();
    expect(p.release()).toBe(false);
  });

  it('no images (sandboxDiskMb 0, Kubernetes): no pool, whatever the setting', () => {
    const d = dataDir();
    for (const setting of ['auto', 'xfs'] as const) expect(openImagePool({ ...base, dataDir: d, setting, imagesUsed: false }).state).toBe('off');
  });

  it('a one-shot command makes no pool', () => {
    const d = dataDir();
    expect(openImagePool({ ...base, dataDir: d, setting: 'auto', create: false })).toMatchObject({ state: 'off', reason: expect.stringContaining('only atelier serve makes it') });
    expect(existsSync(join(d, 'image-pool.xfs'))).toBe(false);
  });

  it.skipIf(process.getuid?.() !== 0)('an upgraded data directory (images outside a pool): auto keeps them there and says why; xfs refuses naming the setting', () => {
    const d = dataDir(['disks/ws_a.img', 'checkpoints/ckpt_b.img']);
    const p = openImagePool({ ...base, dataDir: d, setting: 'auto' });
    // (auto on a data directory with reflinks of its own also keeps them there, for that reason)
    expect(p.state).toBe('off');
    expect(p.reason).toMatch(/already holds 2 image\(s\) outside a pool|has reflinks of its own|mkfs\.xfs is not installed/);
    if (existsSync('/usr/sbin/mkfs.xfs')) expect(() => openImagePool({ ...base, dataDir: d, setting: 'xfs' })).toThrow(/--image-pool xfs: .*(outside a pool|not installed)/);
    expect(existsSync(join(d, 'image-pool.xfs'))).toBe(false);
  });
});
