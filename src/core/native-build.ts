/**
 * Native artifacts (src/sandbox/native.ts, src/mcp/wire-native.ts) are built into a directory named
 * after their sources' hash, atomically: into a temporary sibling first, renamed into place once
 * every file is there, so a reader never sees half a build and a failed build leaves nothing.
 */
import { mkdir, rename, rm } from 'node:fs/promises';

/** Runs `fill` on a fresh temporary directory and puts it in place as `dir`; on failure removes it and rethrows. */
export async function buildDirAtomically(dir: string, fill: (tmp: string) => Promise<void>): Promise<void> {
  const tmp = `${dir}.tmp-${process.pid}-${Date.now()}`;
  await mkdir(tmp, { recursive: true, mode: 0o755 });
  try {
    await fill(tmp);
    await rm(dir, { recursive: true, force: true });
    await rename(tmp, dir);
  } catch (err) {
    await rm(tmp, { recursive: true, force: true });
    throw err;
  }
}
