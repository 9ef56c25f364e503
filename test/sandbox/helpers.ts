/** Shared set-up for the sandbox tests: the compiled daemon and short temporary directories. */
import { spawn, type ChildProcess } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { DaemonClient } from '../../src/sandbox/client.js';

/** The tests run the compiled daemon: build first (npx tsc -p .). */
export const DAEMON_DIR = fileURLToPath(new URL('../../dist/sandbox/daemon', import.meta.url));

export function assertDaemonBuilt(): void {
  if (!existsSync(path.join(DAEMON_DIR, 'main.js'))) {
    throw new Error(`compiled daemon missing at ${DAEMON_DIR}: run "npx tsc -p ." before these tests`);
  }
}

/** A temporary directory under /tmp the sandbox uid can traverse (mkdtemp makes 0700). */
export function traversableTempDir(prefix: string): string {
  const dir = mkdtempSync(path.join('/tmp', prefix));
  chmodSync(dir, 0o711);
  return dir;
}

export const isRoot = process.getuid?.() === 0;

/** A process that exited but was not reaped yet (a zombie) counts as gone. */
export function isAlive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z';
  } catch {
    return false;
  }
}

/**
 * Starts the compiled daemon on <base>/d.sock for `workspace` (its environment from <base>/env.json)
 * and waits until it answers a ping.
 */
export async function startTestDaemon(
  base: string,
  workspace: string,
  opts: { extraArgs?: string[]; stdout?: 'ignore' | 'inherit' } = {},
): Promise<{ daemon: ChildProcess; client: DaemonClient; socketPath: string }> {
  const socketPath = path.join(base, 'd.sock');
  const daemon = spawn(
    process.execPath,
    [path.join(DAEMON_DIR, 'main.js'), '--socket', socketPath, '--workspace', workspace, '--env-file', path.join(base, 'env.json'), ...(opts.extraArgs ?? [])],
    { stdio: ['ignore', opts.stdout ?? 'inherit', 'inherit'] },
  );
  const client = new DaemonClient(socketPath);
  for (let i = 0; ; i++) {
    try {
      await client.ping(500);
      return { daemon, client, socketPath };
    } catch (err) {
      if (i > 200) throw err;
      await sleep(25);
    }
  }
}

/** Polls `fn` every 100 ms until it gives a value (not undefined); fails naming `what` after `ms`. */
export async function until<T>(fn: () => T | undefined | Promise<T | undefined>, what: string, ms = 60_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v !== undefined) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(100);
  }
}

/** Whether `pid` has ended within `ms` (polled: a killed process takes a moment to die, longer on a loaded machine). */
export async function endsWithin(pid: number, ms = 10_000): Promise<boolean> {
  const end = Date.now() + ms;
  while (isAlive(pid)) {
    if (Date.now() > end) return false;
    await sleep(20);
  }
  return true;
}

/** The real kubectl against a kubeconfig (its HOME beside it, so no user cache is read), to completion. */
export function kubectl(kubeconfig: string, args: string[], input?: string): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn('kubectl', ['--kubeconfig', kubeconfig, ...args], { stdio: ['pipe', 'pipe', 'pipe'], env: { ...process.env, HOME: path.dirname(kubeconfig) } });
    let stdout = '';
    let stderr = '';
    child.stdout!.on('data', (d) => (stdout += d));
    child.stderr!.on('data', (d) => (stderr += d));
    child.on('close', (code) => resolve({ code: code ?? -1, stdout, stderr }));
    child.stdin!.end(input ?? '');
  });
}
