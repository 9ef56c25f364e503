/**
 * Finds which files under a data directory hold any of some secrets, byte for byte (binary files,
 * the database, its WAL, logs, images in the pool's mount), with grep: the directory can hold
 * gigabytes of sparse workspace images, which reading into this process cost seconds and a
 * gigabyte and more of memory. `skipDirs` are directory names not entered (mounted workspace
 * disks, whose contents a test scans from inside the workspace); the pool's backing file is never
 * read directly (its images are read through its mount, image-pool/). No `-a`: a binary file is
 * still searched (-l lists it), and grep then skips a sparse file's holes instead of reading
 * gigabytes of zeros as one line.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export function filesHolding(dir: string, secrets: string[], skipDirs: string[] = ['workspaces', 'run']): string[] {
  const needles = secrets.filter((s) => s.length > 0);
  if (needles.length === 0) throw new Error('filesHolding: no secret to look for');
  const tmp = mkdtempSync(join(tmpdir(), 'atelier-scan-'));
  try {
    const patterns = join(tmp, 'patterns');
    writeFileSync(patterns, needles.join('\n') + '\n');
    const args = ['-rlF', '-f', patterns, '--exclude=image-pool.xfs', ...skipDirs.map((d) => `--exclude-dir=${d}`), dir];
    try {
      return execFileSync('grep', args, { encoding: 'utf8', maxBuffer: 16 << 20 }).trim().split('\n').filter(Boolean);
    } catch (e) {
      const err = e as { status?: number; stderr?: Buffer | string };
      if (err.status === 1) return []; // grep: nothing found
      throw new Error(`grep over ${dir} failed (status ${err.status}): ${String(err.stderr ?? '')}`);
    }
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
}
