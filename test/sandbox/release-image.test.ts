/**
 * Release images (src/services/packages/image.ts; issue #31 item 7): made from root's copy of a
 * tree, verified against what the release recorded every time they are mounted, never followed
 * through a link; the loop device goes with the mount. Needs root (loop devices, mount). The
 * service-level tests are in test/e2e/packages.test.ts.
 */
import { execFileSync } from 'node:child_process';
import { chmodSync, chownSync, lstatSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, readlinkSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ImageProblem, imageMatches, makeReleaseImage, mountPointsBelow, mountReleaseImage, unmountRelease, type ReleaseImage } from '../../src/services/packages/image.js';
import { isRoot } from './helpers.js';

let base: string;
let tree: string;

/** Loop devices whose backing file is under dir (the kernel's own list, not losetup's). */
function loopsUnder(dir: string): string[] {
  const out: string[] = [];
  for (const n of readdirSync('/sys/block').filter((x) => x.startsWith('loop'))) {
    try {
      if (readFileSync(`/sys/block/${n}/loop/backing_file`, 'utf8').startsWith(dir + '/')) out.push(n);
    } catch {
      /* not attached */
    }
  }
  return out;
}

beforeEach(() => {
  base = mkdtempSync('/tmp/atl-img-');
  chmodSync(base, 0o700);
  tree = join(base, 'tree');
  mkdirSync(join(tree, 'pkg', 'bin'), { recursive: true });
  writeFileSync(join(tree, 'pkg', 'package.json'), '{"name":"pkg"}');
  writeFileSync(join(tree, 'pkg', 'bin', 'cli.js'), '#!/bin/sh\necho hi\n', { mode: 0o555 });
  chmodSync(join(tree, 'pkg', 'package.json'), 0o444);
  symlinkSync('../pkg/bin/cli.js', join(tree, 'cli'));
  for (const d of [join(tree, 'pkg', 'bin'), join(tree, 'pkg'), tree]) chmodSync(d, 0o555);
});

afterEach(async () => {
  for (const mp of await mountPointsBelow(base)) await unmountRelease(mp);
  rmSync(base, { recursive: true, force: true });
});

describe.skipIf(!isRoot)('release images', () => {
  it('an image of the tree mounts read-only as a filesystem whose root is the tree (modes kept, root-owned, links kept); its loop device goes with the mount', async () => {
    const img = join(base, 'r.sqfs');
    const image = await makeReleaseImage(tree, img);
    expect(image).toEqual({ format: 'squashfs', sha256: expect.stringMatching(/^[0-9a-f]{64}$/), bytes: lstatSync(img).size });
    expect([lstatSync(img).uid, lstatSync(img).mode & 0o777]).toEqual([0, 0o400]);
    const mp = join(base, 'm');
    await mountReleaseImage(img, image, mp);
    const line = readFileSync('/proc/self/mountinfo', 'utf8').split('\n').find((l) => l.split(' ')[4] === mp)!;
    expect(line.split(' ')[3]).toBe('/');
    expect(line.split(' - ')[1]!.split(' ')[0]).toBe('squashfs');
    expect(line.split(' ')[5]).toMatch(/^ro,nosuid,nodev/);
    expect([lstatSync(mp).mode & 0o777, lstatSync(join(mp, 'pkg', 'bin', 'cli.js')).mode & 0o777, lstatSync(join(mp, 'pkg', 'package.json')).mode & 0o777]).toEqual([0o555, 0o555, 0o444]);
    expect(lstatSync(join(mp, 'pkg', 'package.json')).uid).toBe(0);
    expect(readlinkSync(join(mp, 'cli'))).toBe('../pkg/bin/cli.js');
    expect(() => writeFileSync(join(mp, 'x'), 'x')).toThrow(/EROFS/);
    expect(loopsUnder(base)).toHaveLength(1);
    expect(await mountPointsBelow(base)).toEqual([mp]);
    await unmountRelease(mp);
    expect(await mountPointsBelow(base)).toEqual([]);
    expect(loopsUnder(base)).toEqual([]);
  });

  it('a corrupted, truncated, missing, linked, re-owned or group-writable image is refused naming why; nothing is mounted, no loop device is left', async () => {
    const img = join(base, 'r.sqfs');
    const image = await makeReleaseImage(tree, img);
    const good = readFileSync(img);
    const mp = join(base, 'm');
    const refusal = async (expected: ReleaseImage = image): Promise<ImageProblem> => {
      const e = await mountReleaseImage(img, expected, mp).then(
        () => null,
        (err: unknown) => err,
      );
      expect(e).toBeInstanceOf(ImageProblem);
      expect(await mountPointsBelow(base)).toEqual([]);
      expect(loopsUnder(base)).toEqual([]);
      expect(await imageMatches(img, expected)).toBe(false);
      return e as ImageProblem;
    };
    const put = (bytes: Buffer, mode = 0o400) => {
      rmSync(img, { force: true });
      writeFileSync(img, bytes, { mode });
      chmodSync(img, mode);
    };
    const flipped = Buffer.from(good);
    const middle = flipped.length >> 1;
    flipped[middle] = flipped[middle]! ^ 0x01;
    put(flipped);
    expect((await refusal()).message).toMatch(/does not match the SHA-256/);
    put(good.subarray(0, good.length - 1));
    expect((await refusal()).message).toMatch(/has \d+ bytes, the release recorded/);
    put(good, 0o420);
    expect((await refusal()).reason).toBe('replaced');
    put(good);
    chownSync(img, 1000, 1000);
    expect((await refusal()).message).toMatch(/no longer root's alone/);
    rmSync(img);
    expect((await refusal()).message).toBe('its image is missing on disk');
    // A link to a good copy is still refused: never followed.
    const copy = join(base, 'copy.sqfs');
    writeFileSync(copy, good, { mode: 0o400 });
    symlinkSync(copy, img);
    expect((await refusal()).message).toMatch(/symbolic link \(never followed\)/);
    rmSync(img);
    mkdirSync(img);
    expect((await refusal()).message).toMatch(/not a regular file/);
    rmSync(img, { recursive: true });
    // Right bytes, but the record says otherwise.
    put(good);
    expect((await refusal({ ...image, sha256: '0'.repeat(64) })).reason).toBe('corrupt');
    expect(await imageMatches(img, image)).toBe(true);
  });

  it('mountPointsBelow and unmountRelease: a mount left behind is found and removed, even one still in use on the host (lazily)', async () => {
    const img = join(base, 'r.sqfs');
    const image = await makeReleaseImage(tree, img);
    const mp = join(base, 'mounts', 'a b');
    mkdirSync(join(base, 'mounts'));
    await mountReleaseImage(img, image, mp);
    expect(await mountPointsBelow(join(base, 'mounts'))).toEqual([mp]);
    const held = execFileSync('sh', ['-c', `cd "${mp}" && (sleep 30 >/dev/null 2>&1 & echo $!)`], { encoding: 'utf8' }).trim();
    try {
      await unmountRelease(mp);
      expect(await mountPointsBelow(base)).toEqual([]);
    } finally {
      process.kill(Number(held), 'SIGKILL');
    }
    // The detached mount, and its loop device, go with the last process that held it.
    for (let i = 0; i < 100 && loopsUnder(base).length > 0; i++) await new Promise((r) => setTimeout(r, 50));
    expect(loopsUnder(base), 'loop devices left once nothing holds the detached mount').toEqual([]);
  });
});
