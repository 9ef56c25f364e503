/**
 * Every start failure and every signal ends `atelier serve` (issue #42 item 9), through the real
 * process. A start that fails at each of its phases (a bad setting, no sandboxes, a data directory
 * that cannot be made, a corrupt database, a bad master key, an image pool that cannot be
 * mounted, a port already bound, an address not of this machine) exits 2 within a bound, with a
 * message naming the cause, leaving nothing of its data directory running or mounted; SIGTERM or
 * SIGINT at each start phase (reached deterministically through the test-only pause point
 * ATELIER_TEST_PAUSE_AT=start:<phase>, core/test-pause.ts) ends it with status 0 and nothing left.
 * The hang itself: with a stderr whose reader never reads (a full pipe), a failed start, and a
 * stop after a start, used to keep the process alive for ever in Atomics.wait (pino's exit flush
 * retrying EAGAIN), ignoring SIGTERM; now both exit.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { closeSync, constants, mkdirSync, mkdtempSync, openSync, rmSync, writeFileSync, writeSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { BIN, unmountUnder } from './harness.js';
import { leftoversOf } from './leftovers.js';

const dirs: string[] = [];
const procs: ChildProcess[] = [];
afterAll(async () => {
  // A test that failed may leave a service running: stopped (its gateway child with it), then killed.
  const running = procs.filter((p) => p.exitCode === null && p.signalCode === null);
  await Promise.all(
    running.map(async (p) => {
      const exited = new Promise((r) => p.once('exit', r));
      p.kill('SIGTERM');
      const t = setTimeout(() => p.kill('SIGKILL'), 30_000);
      await exited;
      clearTimeout(t);
    }),
  );
  for (const d of dirs) {
    unmountUnder(d);
    rmSync(d, { recursive: true, force: true });
  }
}, 90_000);

function tempDir(prefix = 'atelier-startfail-'): string {
  const d = mkdtempSync(join(tmpdir(), prefix));
  dirs.push(d);
  return d;
}

/** How long a failed or stopped start may take to end once it has failed or been signalled (undo included, on a loaded machine). */
const END_BOUND_MS = 20_000;
/** How long loading the CLI and reaching a phase may take on a loaded 2-core machine. */
const REACH_MS = 90_000;

interface Run {
  proc: ChildProcess;
  stderr: () => string;
  stdout: () => string;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null; at: number }>;
  /** Resolves when `re` matches the stream's text so far (rejects when the process exits first, or after REACH_MS). */
  waitFor(stream: 'stdout' | 'stderr', re: RegExp): Promise<void>;
}

function serve(args: string[], env: Record<string, string> = {}, stderrFd?: number): Run {
  const proc = spawn(process.execPath, [BIN, 'serve', ...args], {
    env: { ATELIER_KNOWLEDGE_EMBEDDINGS: 'off', ...process.env, ...env },
    stdio: ['ignore', 'pipe', stderrFd ?? 'pipe'],
  });
  procs.push(proc);
  const text = { stdout: '', stderr: '' };
  proc.stdout!.on('data', (d) => (text.stdout += d));
  proc.stderr?.on('data', (d) => (text.stderr += d));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null; at: number }>((r) => proc.once('exit', (code, signal) => r({ code, signal, at: Date.now() })));
  return {
    proc,
    stderr: () => text.stderr,
    stdout: () => text.stdout,
    exited,
    waitFor: (stream, re) =>
      new Promise<void>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`${re} not seen within ${REACH_MS} ms\nstderr:\n${text.stderr}`)), REACH_MS);
        const check = (): void => {
          if (!re.test(text[stream])) return;
          clearTimeout(timer);
          resolve();
        };
        proc[stream]!.on('data', check);
        check();
        void exited.then(() => {
          clearTimeout(timer);
          if (!re.test(text[stream])) reject(new Error(`exited before ${re}\nstderr:\n${text.stderr}`));
        });
      }),
  };
}

/** Resolves with how the process ended, or rejects when it has not ended `ms` after `since`. */
async function endsWithin(run: Run, since: number, ms = END_BOUND_MS): Promise<{ code: number | null; signal: NodeJS.Signals | null; ms: number }> {
  let timer: NodeJS.Timeout | undefined;
  const bound = new Promise<never>((_r, reject) => (timer = setTimeout(() => reject(new Error(`still running ${ms} ms later\nstderr:\n${run.stderr()}`)), Math.max(0, since + ms - Date.now()))));
  try {
    const e = await Promise.race([run.exited, bound]);
    return { code: e.code, signal: e.signal, ms: e.at - since };
  } finally {
    clearTimeout(timer);
    if (run.proc.exitCode === null && run.proc.signalCode === null) run.proc.kill('SIGKILL');
  }
}

/** Nothing of `dataDir` is mounted, looped or held by a process (waits briefly for the kernel to reap). */
async function nothingLeft(dataDir: string): Promise<void> {
  let left: string[] = [];
  for (let i = 0; i < 50; i++) {
    left = leftoversOf(dataDir);
    if (left.length === 0) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  expect(left, `left behind under ${dataDir}`).toEqual([]);
}

/** A FIFO opened at both ends whose buffer is full and which nobody ever reads: a stderr reader that has stopped reading. */
function fullPipe(): { fd: number; close(): void } {
  const path = join(tempDir('atelier-fifo-'), 'stderr');
  expect(spawnSync('mkfifo', [path]).status).toBe(0);
  const fd = openSync(path, constants.O_RDWR | constants.O_NONBLOCK);
  const chunk = Buffer.alloc(4096, 'x');
  for (;;) {
    try {
      writeSync(fd, chunk);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'EAGAIN') break;
      throw e;
    }
  }
  return { fd, close: () => closeSync(fd) };
}

async function boundPort(): Promise<{ port: number; server: Server }> {
  const server = createServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { port: (server.address() as { port: number }).port, server };
}

describe('a start that fails ends the process', () => {
  it('at each phase: exit 2 soon after the failure, a message naming the cause, nothing left running or mounted', async () => {
    const { port, server } = await boundPort();
    try {
      const notADir = tempDir();
      writeFileSync(join(notADir, 'file'), 'x');
      const corrupt = tempDir();
      writeFileSync(join(corrupt, 'atelier.db'), Buffer.alloc(8192, 0x5a)); // no SQLite header: "file is not a database"
      const badKey = tempDir();
      writeFileSync(join(badKey, 'master.key'), 'not a key\n', { mode: 0o600 });
      const openKey = tempDir();
      writeFileSync(join(openKey, 'master.key'), Buffer.alloc(32, 1).toString('base64') + '\n', { mode: 0o644 });
      const badPool = tempDir();
      writeFileSync(join(badPool, 'image-pool.xfs'), Buffer.alloc(1 << 20)); // an existing pool file that is no filesystem
      const cases: Array<{ phase: string; dataDir: string; args: string[]; says: string[] }> = [
        { phase: 'config', dataDir: tempDir(), args: ['--port', 'abc'], says: ['--port / ATELIER_PORT'] },
        { phase: 'sandbox-check', dataDir: tempDir(), args: ['--sandbox-bwrap-path', '/nonexistent/bwrap'], says: ['workspaces need real sandboxes'] },
        { phase: 'data-dir', dataDir: join(notADir, 'file', 'data'), args: [], says: ['--data-dir / ATELIER_DATA_DIR', 'cannot be prepared'] },
        { phase: 'database', dataDir: corrupt, args: [], says: [`the database ${join(corrupt, 'atelier.db')} cannot be opened`, 'not a database'] },
        { phase: 'master-key', dataDir: badKey, args: [], says: ['must hold 32 bytes'] },
        { phase: 'master-key', dataDir: openKey, args: [], says: ['must not be readable by group or others'] },
        { phase: 'image-pool', dataDir: badPool, args: ['--image-pool', 'auto'], says: ['could not be mounted'] },
        { phase: 'listen', dataDir: tempDir(), args: ['--port', String(port)], says: [`port ${port} on 127.0.0.1 is already in use`] },
        { phase: 'listen', dataDir: tempDir(), args: ['--host', '192.0.2.1', '--public-origin', 'https://atelier.example'], says: ['192.0.2.1 is not an address of this machine'] },
      ];
      // Two at a time: each loads the whole CLI.
      for (let i = 0; i < cases.length; i += 2) {
        await Promise.all(
          cases.slice(i, i + 2).map(async (c) => {
            const run = serve(['--data-dir', c.dataDir, ...c.args]);
            await run.waitFor('stderr', /^atelier: /m).catch(() => undefined);
            const failedAt = Date.now();
            const end = await endsWithin(run, failedAt);
            expect(end.code, `${c.phase}: ${run.stderr()}`).toBe(2);
            for (const s of c.says) expect(run.stderr(), c.phase).toContain(s);
            expect(run.stderr(), c.phase).not.toMatch(/\n\s+at /); // a message, not a stack trace
            await nothingLeft(c.dataDir);
          }),
        );
      }
    } finally {
      server.close();
    }
  }, 600_000);

  it('with a stderr nobody reads (a full pipe), a failed start still exits, and so does a stop after a start', async () => {
    const { port, server } = await boundPort();
    const pipe = fullPipe();
    try {
      const failing = serve(['--port', String(port), '--data-dir', tempDir()], {}, pipe.fd);
      const end = await endsWithin(failing, Date.now(), REACH_MS);
      expect(end.code).toBe(2);

      const dataDir = tempDir();
      const running = serve(['--port', '0', '--data-dir', dataDir, '--log-level', 'info'], {}, pipe.fd);
      await running.waitFor('stdout', /Dashboard:\s+\S+/);
      running.proc.kill('SIGTERM');
      const stopped = await endsWithin(running, Date.now(), 60_000);
      expect(stopped.code).toBe(0);
      await nothingLeft(dataDir);
    } finally {
      pipe.close();
      server.close();
    }
  }, 300_000);
});

const PHASES = ['config', 'sandbox-check', 'data-dir', 'database', 'master-key', 'image-pool', 'services', 'tracing', 'recovery', 'listen', 'gateway', 'agents', 'ready'];

describe('a stop request during start-up ends it', () => {
  it('SIGTERM at each start phase (and SIGINT at some): status 0 within a bound, nothing of the start left running or mounted', async () => {
    const cases: Array<{ phase: string; signal: NodeJS.Signals }> = [...PHASES.map((phase) => ({ phase, signal: 'SIGTERM' as const })), { phase: 'recovery', signal: 'SIGINT' }, { phase: 'agents', signal: 'SIGINT' }];
    for (let i = 0; i < cases.length; i += 3) {
      await Promise.all(
        cases.slice(i, i + 3).map(async ({ phase, signal }) => {
          const dataDir = tempDir();
          mkdirSync(dataDir, { recursive: true });
          const run = serve(['--port', '0', '--data-dir', dataDir, '--otlp-traces-endpoint', 'http://127.0.0.1:9/v1/traces'], { ATELIER_TEST_PAUSE_AT: `start:${phase}` });
          await run.waitFor('stderr', new RegExp(`atelier: test pause at start:${phase}\\n`));
          const sent = Date.now();
          run.proc.kill(signal);
          const end = await endsWithin(run, sent);
          expect(end.code, `${phase} ${signal}: ${run.stderr()}`).toBe(0);
          expect(run.stderr()).toContain(`atelier: start-up stopped by ${signal} (during the ${phase} phase)`);
          expect(run.stdout(), 'never announced').not.toContain('is running');
          await nothingLeft(dataDir);
        }),
      );
    }
  }, 900_000);
});
