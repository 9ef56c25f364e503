/**
 * The run's first and last step. Every temporary directory of the run (services' data directories,
 * git hosts, workspaces) goes under one run directory (TMPDIR is set before any test file starts),
 * so the last check can tell this run's leftovers from another run's: it fails the run when a
 * mount, a loop device or a process (a sandbox, a service, a git host) that refers to the run
 * directory is still there, and removes the directory otherwise.
 */
import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { leaksUnder } from './e2e/cleanup.js';

export default function setup(): () => Promise<void> {
  const runDir = mkdtempSync(join(tmpdir(), 'atelier-run-'));
  chmodSync(runDir, 0o755);
  process.env.TMPDIR = runDir;
  process.env.ATELIER_TEST_RUN_DIR = runDir;
  return async () => {
    // Services stop asynchronously: give what is ending a moment to end.
    let leaks = leaksUnder(runDir);
    for (let i = 0; i < 20 && leaks.length > 0; i++) {
      await new Promise((r) => setTimeout(r, 250));
      leaks = leaksUnder(runDir);
    }
    if (leaks.length > 0) {
      // Vitest reports a teardown error but keeps exit code 0: set it, so the run fails.
      process.exitCode = 1;
      throw new Error(`the run left ${leaks.length} thing(s) behind under ${runDir} (a test did not close what it opened):\n  ${leaks.join('\n  ')}`);
    }
    rmSync(runDir, { recursive: true, force: true });
  };
}
