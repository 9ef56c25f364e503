/**
 * Process methods: `exec` runs a command to completion, `release` lets a held exec start, `kill`
 * signals a running exec by its id.
 *
 * Every exec runs in its own session and process group (spawn with detached). A small /bin/sh
 * wrapper first resets oom_score_adj (the daemon runs protected from the OOM killer and children
 * would inherit that), optionally waits for the release line on stdin, then execs the command, so
 * the pid the runner sees is the command's pid.
 *
 * Spares: with an exec starter (--exec-starter, a small native program), the daemon starts spare
 * processes ahead of time on the runner's `spare` call, a round of them with one process start
 * (the starter's batch mode: it forks the spares and stays as their reaper, reporting each exit);
 * the runner moves each into its own exec cgroup while it waits. An exec naming a spare hands it
 * cwd, argv and environment on its descriptor 3 and the starter execs the command: no process
 * start and no cgroup placement on the exec's path. Without a spare, the held /bin/sh wrapper
 * above is used.
 *
 * Timeout and cancel signal the process group and every attached descendant (proc.ts). Processes
 * that detached completely (setsid + parent exit) are killed by the runner, which holds each exec
 * in its own freezer cgroup; the daemon cannot do that itself because it has no privilege.
 */
import { spawn, type ChildProcess, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { EventEmitter } from 'node:events';
import type { Socket } from 'node:net';
import { constants as osConstants } from 'node:os';
import type { Readable, Writable } from 'node:stream';
import { existsSync } from 'node:fs';
import { realpath, stat } from 'node:fs/promises';
import path from 'node:path';
import { HeadTailCapture } from './output.js';
import { endGroup, groupGone, signalTree } from './proc.js';
import { DaemonError, ReplyWithBody, type ExecParams, type ExecResult, type ExecStarted, type SpareStarted } from './protocol.js';
import type { CallContext, Handlers, Reply } from './server.js';

const DEFAULT_TIMEOUT_MS = 60_000;
const MAX_TIMEOUT_MS = 86_400_000;
const DEFAULT_MAX_OUTPUT_BYTES = 262_144;
const MAX_OUTPUT_BYTES = 64 * 1024 * 1024;
const MAX_KILL_GRACE_MS = 60_000;
/** Kept stdout at least this long goes to the runner as a raw body frame instead of inside the reply's JSON. */
export const RAW_OUTPUT_BYTES = 64 * 1024;
const HOLD_TIMEOUT_MS = 10_000;
/** After the command exits, how long to wait for background processes to close inherited pipes. */
const EXIT_DRAIN_MS = 250;
/** After SIGKILL, how long to wait for the exit before replying anyway (e.g. a frozen process). */
const KILL_WAIT_MS = 5_000;

const SIGNALS: readonly NodeJS.Signals[] = ['SIGTERM', 'SIGKILL', 'SIGINT', 'SIGHUP', 'SIGQUIT', 'SIGUSR1', 'SIGUSR2'];

/**
 * The /bin/sh wrapper every command starts under. Without stdin data the command reads /dev/null
 * rather than the daemon's socketpair (bash would treat a socket on stdin as a remote shell).
 */
function wrapper(hold: boolean, stdin: boolean): string {
  return [
    'echo 0 >/proc/self/oom_score_adj 2>/dev/null',
    ...(hold ? ['IFS= read -r _ || exit 125'] : []),
    stdin ? 'exec "$@"' : 'exec "$@" </dev/null',
  ].join('; ');
}

interface RunningExec {
  release(): void;
  signal(sig: NodeJS.Signals): void;
}

export interface ExecOptions {
  /** Directory every cwd must stay inside (/workspace in the sandbox). */
  workspaceRoot: string;
  /** Environment every exec starts from. */
  baseEnv: Record<string, string>;
  /** The native exec starter inside the sandbox; enables `spare` (see above). */
  execStarter?: string;
}

/** The process an exec runs in, as runExec uses it: a held wrapper (a ChildProcess) or a Spare. */
interface Proc {
  readonly pid?: number;
  readonly stdin: Writable;
  readonly stdout: Readable;
  readonly stderr: Readable;
  on(event: 'exit', listener: (code: number | null, signal: NodeJS.Signals | null) => void): unknown;
  on(event: 'close', listener: () => void): unknown;
}

/** What an exec runs in: a new held wrapper, or a spare starter and the request that starts it. */
interface Launched {
  child: Proc;
  /** Spare: written to its request descriptor to start the command. */
  control?: Writable;
  request?: Buffer;
}

const SIGNAL_NAMES = new Map<number, NodeJS.Signals>(Object.entries(osConstants.signals).map(([name, n]) => [n, name as NodeJS.Signals]));

/**
 * A spare exec starter from a batch (native.ts, "batch N"): one process start in the daemon makes
 * N starters, each with its own stdin, stdout, stderr and request descriptors, and their reaper,
 * which reports each exit on its status pipe. Behaves towards runExec like a ChildProcess: 'exit'
 * with (code, signal), then 'close' once stdout and stderr closed too.
 */
class Spare extends EventEmitter {
  exited = false;
  /** The reaper ended before this one's exit was reported: its end is known only by its output closing. */
  private orphaned = false;
  private outputsOpen = 2;

  constructor(
    readonly pid: number,
    readonly stdin: Socket,
    readonly stdout: Socket,
    readonly stderr: Socket,
    readonly control: Socket,
  ) {
    super();
    const closed = (): void => {
      if (--this.outputsOpen > 0) return;
      if (this.orphaned) this.exit(null, null);
      else if (this.exited) this.emit('close');
    };
    stdout.once('close', closed);
    stderr.once('close', closed);
    for (const s of [stdin, stdout, stderr, control]) s.on('error', () => undefined);
  }

  exit(code: number | null, signal: NodeJS.Signals | null): void {
    if (this.exited) return;
    this.exited = true;
    this.emit('exit', code, signal);
    if (this.outputsOpen === 0) this.emit('close');
  }

  /** The reaper is gone: the exit status will never come (reported as null, null). */
  orphan(): void {
    if (this.exited) return;
    this.orphaned = true;
    if (this.outputsOpen === 0) this.exit(null, null);
  }

  kill(sig: NodeJS.Signals): void {
    if (this.exited) return;
    try {
      process.kill(this.pid, sig);
    } catch {
      // already gone
    }
  }

  /** Lets go of its descriptors (an unused spare that ended or was discarded). */
  discard(): void {
    for (const s of [this.stdin, this.stdout, this.stderr, this.control]) s.destroy();
  }
}

/** At most this many starters per batch (SpareParams.count). */
const MAX_BATCH = 16;

/** Starts `n` spares with one process start (their reaper); resolves once each has its pid. */
async function startBatch(starter: string, cwd: string, n: number): Promise<Spare[]> {
  const stdio: Array<'pipe' | 'ignore'> = ['ignore', 'pipe', 'ignore'];
  for (let i = 0; i < 4 * n; i++) stdio.push('pipe');
  const reaper = await spawnChild(starter, ['batch', String(n)], cwd, {}, { stdio, argv0: 'atelier-exec' });
  return new Promise<Spare[]>((resolve, reject) => {
    const pipes = reaper.stdio as unknown as Socket[];
    const members = new Map<number, Spare>();
    const started: Spare[] = [];
    let pending = '';
    let announced = false;
    const status = reaper.stdout!;
    status.setEncoding('utf8');
    status.on('data', (chunk: string) => {
      pending += chunk;
      let nl: number;
      while ((nl = pending.indexOf('\n')) >= 0) {
        const [kind, a, b, c] = pending.slice(0, nl).split(' ');
        pending = pending.slice(nl + 1);
        if (kind === 'S') {
          const i = Number(a);
          const pid = Number(b);
          if (!Number.isInteger(i) || i < 0 || i >= n || !Number.isInteger(pid) || pid <= 0) continue;
          const base = 3 + 4 * i;
          const spare = new Spare(pid, pipes[base]!, pipes[base + 1]!, pipes[base + 2]!, pipes[base + 3]!);
          members.set(pid, spare);
          started.push(spare);
        } else if (kind === 'R') {
          announced = true;
          // Descriptors of starters that could not be forked are never used.
          const used = new Set(started.flatMap((sp) => [sp.stdin, sp.stdout, sp.stderr, sp.control]));
          for (let k = 3; k < pipes.length; k++) if (!used.has(pipes[k]!)) pipes[k]!.destroy();
          if (started.length === 0) reject(new DaemonError('RESOURCE_EXHAUSTED', 'cannot start a process: the sandbox process limit is reached'));
          else resolve(started);
        } else if (kind === 'X') {
          const spare = members.get(Number(a));
          if (!spare) continue;
          members.delete(Number(a));
          const code = Number(b);
          const sig = Number(c);
          spare.exit(code >= 0 ? code : null, sig >= 0 ? (SIGNAL_NAMES.get(sig) ?? null) : null);
        }
      }
    });
    status.on('close', () => {
      // The reaper ended (all its starters reaped, or killed): whatever it did not report is orphaned.
      for (const spare of members.values()) spare.orphan();
      members.clear();
      if (!announced) {
        for (const sp of started) sp.discard();
        for (let k = 3; k < pipes.length; k++) pipes[k]!.destroy();
        reject(new DaemonError('RESOURCE_EXHAUSTED', 'the exec starters ended before they were ready: the workspace is out of processes or memory'));
      }
    });
    reaper.unref();
  });
}

export function execMethods(opts: ExecOptions): Handlers<'exec' | 'release' | 'kill' | 'spare'> {
  const running = new Map<string, RunningExec>();
  const spares = new Map<string, Spare>();
  const shell = existsSync('/bin/bash') ? '/bin/bash' : '/bin/sh';
  // A command line on a spare starts Debian's bash-static where it is installed: the same bash (same
  // version, options and builtins), statically linked, so no dynamic loading at each start (about
  // 0.55 ms of the 1.4 ms a `bash -c true` costs in the sandbox). It is executed through a link named
  // `bash` beside the starter (so the kernel names the process bash: comm, ps, pgrep) with argv[0]
  // /bin/bash (so $0 and $BASH read as before); docs/sandbox.md, "Third pass".
  const staticBash = opts.execStarter ? path.join(path.dirname(opts.execStarter), 'bash') : '';
  const fastShell = shell === '/bin/bash' && staticBash && existsSync(staticBash) ? staticBash : '';
  let seq = 0;

  const lookup = (params: unknown): RunningExec => {
    const execId = (params as { execId?: unknown } | undefined)?.execId;
    const exec = typeof execId === 'string' ? running.get(execId) : undefined;
    if (exec) return exec;
    const spare = typeof execId === 'string' ? spares.get(execId) : undefined;
    if (spare) return { release: () => undefined, signal: (sig) => spare.kill(sig) };
    throw new DaemonError('NOT_FOUND', 'no running exec with that id', { execId });
  };

  return {
    exec: async (params: unknown, ctx: CallContext): Promise<Reply<ExecResult>> => {
      const p = parseExecParams(params);
      const cwd = await resolveCwd(opts.workspaceRoot, p.cwd ?? '.');
      const argv = p.argv ?? [shell, '-c', p.command!];
      const env = { ...opts.baseEnv, ...p.env };
      const execId = `x${++seq}`;
      let launched: Launched;
      if (p.spare !== undefined) {
        const spare = spares.get(p.spare);
        if (!spare || spare.exited) throw new DaemonError('NOT_FOUND', 'that spare is gone', { spare: p.spare });
        spares.delete(p.spare);
        spare.removeAllListeners('exit');
        launched = { child: spare, control: spare.control, request: starterRequest(cwd, p.argv ? '' : fastShell, argv, env, p.stdin !== undefined) };
      } else {
        launched = { child: (await spawnChild('/bin/sh', ['-c', wrapper(p.hold === true, p.stdin !== undefined), 'atelier-exec', ...argv], cwd, env)) as ChildProcessWithoutNullStreams };
      }
      return runExec(execId, launched, p, ctx, running);
    },
    spare: async (params: unknown): Promise<SpareStarted> => {
      if (!opts.execStarter) throw new DaemonError('NOT_IMPLEMENTED', 'this daemon has no exec starter');
      if ((params as { fresh?: unknown } | undefined)?.fresh === true) {
        for (const spare of spares.values()) {
          spare.kill('SIGKILL');
          spare.discard();
        }
        spares.clear();
      }
      const raw = (params as { count?: unknown } | undefined)?.count;
      if (raw !== undefined && (typeof raw !== 'number' || !Number.isInteger(raw) || raw < 1 || raw > MAX_BATCH)) throw invalid(`count must be an integer from 1 to ${MAX_BATCH}`);
      // Requests already read (an exec, above all) go first: starting a process blocks this loop.
      await new Promise<void>((resolve) => setImmediate(resolve));
      const batch = await startBatch(opts.execStarter, opts.workspaceRoot, (raw as number | undefined) ?? 1);
      const out = batch.map((spare) => {
        const spareId = `s${++seq}`;
        spares.set(spareId, spare);
        spare.once('exit', () => {
          // Ended unused (killed, or discarded): forget it and let go of its pipes.
          if (spares.get(spareId) !== spare) return;
          spares.delete(spareId);
          spare.discard();
        });
        return { spareId, pid: spare.pid };
      });
      const [first, ...more] = out;
      return more.length > 0 ? { ...first!, more } : first!;
    },
    release: (params: unknown) => {
      lookup(params).release();
      return { released: true };
    },
    kill: (params: unknown) => {
      const sig = (params as { signal?: unknown } | undefined)?.signal ?? 'SIGKILL';
      if (!SIGNALS.includes(sig as NodeJS.Signals)) {
        throw new DaemonError('INVALID_ARGUMENT', 'unsupported signal', { signal: sig, allowed: SIGNALS });
      }
      lookup(params).signal(sig as NodeJS.Signals);
      return { signalled: true };
    },
  };
}

/**
 * The request a spare starter reads on descriptor 3: stdin flag, cwd, the file to execute (empty:
 * argv[0], looked up in PATH), argc, argv, envc, env; each NUL-terminated.
 */
function starterRequest(cwd: string, file: string, argv: string[], env: Record<string, string>, stdin: boolean): Buffer {
  const envList = Object.entries(env).map(([k, v]) => `${k}=${v}`);
  const fields = [stdin ? '1' : '0', cwd, file, String(argv.length), ...argv, String(envList.length), ...envList];
  return Buffer.from(fields.map((f) => `${f}\0`).join(''), 'utf8');
}

async function runExec(
  execId: string,
  launched: Launched,
  p: ExecParams,
  ctx: CallContext,
  running: Map<string, RunningExec>,
): Promise<Reply<ExecResult>> {
  const timeoutMs = p.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  const maxOutput = p.maxOutputBytes ?? DEFAULT_MAX_OUTPUT_BYTES;
  const killGraceMs = p.killGraceMs ?? 0;
  const started = Date.now();

  const child = launched.child;
  const pid = child.pid!;
  const stdout = new HeadTailCapture(maxOutput);
  const stderr = new HeadTailCapture(maxOutput);
  let timedOut = false;
  let cancelled = false;
  let terminating = false;
  let released = !p.hold || launched.request !== undefined;
  const tree = new Set<number>(); // descendants seen while terminating, for the SIGKILL after the grace
  const timers: NodeJS.Timeout[] = [];
  const later = (ms: number, fn: () => void): void => {
    timers.push(setTimeout(fn, ms));
  };

  child.stdin.on('error', () => undefined); // EPIPE when the command does not read its input
  const feedStdin = (): void => {
    if (launched.control && launched.request) {
      const control = launched.control;
      control.on('error', () => undefined);
      control.end(launched.request);
    } else if (p.hold) child.stdin.write('\n');
    if (p.stdin) child.stdin.write(Buffer.from(p.stdin, 'base64'));
    child.stdin.end();
  };

  return new Promise<Reply<ExecResult>>((resolve, reject) => {
    let exit: { code: number | null; signal: NodeJS.Signals | null } | undefined;
    let settled = false;
    const settle = (error?: DaemonError): void => {
      if (settled) return;
      settled = true;
      timers.forEach(clearTimeout);
      running.delete(execId);
      ctx.signal.removeEventListener('abort', onAbort);
      child.stdout.destroy();
      child.stderr.destroy();
      if (child instanceof Spare) child.discard();
      if (error) return reject(error);
      // What the command left running in its group (`cmd &`, `nohup`) ends with it unless the
      // caller keeps background work; the result says how many.
      const backgroundEnded = p.endLeftovers === true && released ? endGroup(pid) : 0;
      // Large output goes to the runner as a raw body frame (protocol.ts): never escaped into the
      // reply's JSON here nor parsed there; the runner decodes it once, as UTF-8, to the same text.
      const rawStdout = stdout.keptBytes >= RAW_OUTPUT_BYTES;
      const result: ExecResult = {
        exitCode: exit?.code ?? null,
        signal: exit?.signal ?? null,
        timedOut,
        cancelled,
        stdout: rawStdout ? '' : stdout.text(),
        stderr: stderr.text(),
        stdoutBytes: stdout.totalBytes,
        stderrBytes: stderr.totalBytes,
        stdoutTruncated: stdout.truncated,
        stderrTruncated: stderr.truncated,
        durationMs: Date.now() - started,
        ...(backgroundEnded > 0 ? { backgroundEnded } : {}),
      };
      const reply = rawStdout ? new ReplyWithBody(result, 'stdout', stdout.bytes(), 'utf-8') : result;
      // The reply waits until what was ended is really gone (a second exec must not see it).
      if (backgroundEnded > 0) void groupGone(pid, 2_000).then(() => resolve(reply), () => resolve(reply));
      else resolve(reply);
    };

    const terminate = (): void => {
      if (terminating) return;
      terminating = true;
      if (killGraceMs > 0) {
        signalTree(pid, 'SIGTERM', tree);
        later(killGraceMs, () => signalTree(pid, 'SIGKILL', tree));
      } else {
        signalTree(pid, 'SIGKILL', tree);
      }
      later(killGraceMs + KILL_WAIT_MS, () => settle());
    };
    const onAbort = (): void => {
      cancelled = true;
      terminate();
    };
    const startClock = (): void => {
      later(timeoutMs, () => {
        timedOut = true;
        terminate();
      });
    };

    const pump = (stream: NodeJS.ReadableStream & { pause(): void; resume(): void }, capture: HeadTailCapture, name: string): void => {
      stream.on('data', (chunk: Buffer) => {
        capture.push(chunk);
        if (p.stream && !ctx.emit(name, chunk.toString('base64'))) {
          stream.pause();
          void ctx.drained().then(() => stream.resume());
        }
      });
    };
    pump(child.stdout, stdout, 'stdout');
    pump(child.stderr, stderr, 'stderr');

    child.on('exit', (code, signal) => {
      exit = { code, signal };
      if (!released) {
        if (cancelled) return settle(new DaemonError('CANCELLED', 'exec ended before it was released'));
        // The holding wrapper died before the command ran: almost always the workspace's process
        // or memory limit (a fork bomb holding every pid). Say so; the caller may retry.
        return settle(
          new DaemonError('RESOURCE_EXHAUSTED', `the command could not start (${signal ?? `exit ${code}`}): the workspace is out of processes or memory; stop what runs there, or retry`, {
            exitCode: code,
            signal,
          }),
        );
      }
      later(EXIT_DRAIN_MS, () => settle());
    });
    child.on('close', () => settle());

    ctx.signal.addEventListener('abort', onAbort);
    if (ctx.signal.aborted) onAbort();

    running.set(execId, {
      release: () => {
        if (released) return;
        released = true;
        feedStdin();
        startClock();
      },
      signal: (sig) => signalTree(pid, sig, new Set()),
    });
    if (p.hold && !launched.request) {
      later(HOLD_TIMEOUT_MS, () => {
        if (released) return;
        signalTree(pid, 'SIGKILL', tree);
        settle(new DaemonError('FAILED_PRECONDITION', 'held exec was not released in time', { execId }));
      });
    } else {
      feedStdin();
      startClock();
    }
    // Only a held exec needs the runner to know its pid (to place it); a spare was placed already.
    if (!launched.request) {
      const info: ExecStarted = { execId, pid };
      ctx.emit('started', info);
    }
  });
}

function spawnChild(file: string, args: string[], cwd: string, env: Record<string, string>, opts: { stdio?: Array<'pipe' | 'ignore'>; argv0?: string } = {}): Promise<ChildProcess> {
  return new Promise((resolve, reject) => {
    const child = spawn(file, args, { cwd, env, detached: true, stdio: opts.stdio ?? 'pipe', ...(opts.argv0 ? { argv0: opts.argv0 } : {}) });
    if (child.pid !== undefined) return resolve(child);
    child.once('error', (err: NodeJS.ErrnoException) => {
      if (err.code === 'EAGAIN') {
        reject(new DaemonError('RESOURCE_EXHAUSTED', 'cannot start a process: the sandbox process limit is reached'));
      } else {
        reject(new DaemonError('INTERNAL', `cannot start a process: ${err.message}`));
      }
    });
  });
}

/** Real paths of workspace roots: a root is a mount point (/workspace in the sandbox), it cannot be moved or replaced. */
const realRoots = new Map<string, string>();

/** Resolves cwd under root, following symlinks, and refuses anything that ends up outside root. */
export async function resolveCwd(root: string, cwd: string): Promise<string> {
  let realRoot = realRoots.get(root);
  if (realRoot === undefined) {
    realRoot = await realpath(root);
    if ((await stat(path.dirname(realRoot))).dev !== (await stat(realRoot)).dev) realRoots.set(root, realRoot);
  }
  const wanted = path.resolve(realRoot, cwd);
  // The root itself (the default cwd): no lookups needed.
  if (wanted === realRoot && realRoots.has(root)) return realRoot;
  if (!isInside(realRoot, wanted)) {
    throw new DaemonError('INVALID_ARGUMENT', 'cwd is outside the workspace', { cwd });
  }
  let real: string;
  try {
    real = await realpath(wanted);
  } catch {
    throw new DaemonError('NOT_FOUND', 'cwd does not exist', { cwd });
  }
  if (!isInside(realRoot, real)) {
    throw new DaemonError('INVALID_ARGUMENT', 'cwd resolves outside the workspace', { cwd });
  }
  if (!(await stat(real)).isDirectory()) {
    throw new DaemonError('INVALID_ARGUMENT', 'cwd is not a directory', { cwd });
  }
  return real;
}

function isInside(root: string, p: string): boolean {
  const rel = path.relative(root, p);
  return rel === '' || (!rel.startsWith('..') && !path.isAbsolute(rel));
}

function parseExecParams(params: unknown): ExecParams {
  if (typeof params !== 'object' || params === null) throw invalid('params must be an object');
  const p = params as Record<string, unknown>;
  const hasArgv = p.argv !== undefined;
  const hasCommand = p.command !== undefined;
  if (hasArgv === hasCommand) throw invalid('exactly one of argv and command is required');
  if (hasArgv) {
    const argv = p.argv;
    if (!Array.isArray(argv) || argv.length === 0 || !argv.every((a) => typeof a === 'string' && !a.includes('\0'))) {
      throw invalid('argv must be a non-empty array of strings without NUL');
    }
  }
  if (hasCommand && (typeof p.command !== 'string' || p.command === '' || p.command.includes('\0'))) {
    throw invalid('command must be a non-empty string without NUL');
  }
  if (p.cwd !== undefined && (typeof p.cwd !== 'string' || p.cwd.includes('\0'))) throw invalid('cwd must be a string');
  if (p.env !== undefined) {
    if (typeof p.env !== 'object' || p.env === null) throw invalid('env must be an object');
    for (const [k, v] of Object.entries(p.env)) {
      if (!/^[^=\0]+$/.test(k) || typeof v !== 'string' || v.includes('\0')) {
        throw invalid('env names must not contain = or NUL and values must be strings without NUL', { name: k });
      }
    }
  }
  if (p.stdin !== undefined && typeof p.stdin !== 'string') throw invalid('stdin must be a base64 string');
  checkInt(p.timeoutMs, 'timeoutMs', 1, MAX_TIMEOUT_MS);
  checkInt(p.maxOutputBytes, 'maxOutputBytes', 2, MAX_OUTPUT_BYTES);
  checkInt(p.killGraceMs, 'killGraceMs', 0, MAX_KILL_GRACE_MS);
  if (p.stream !== undefined && typeof p.stream !== 'boolean') throw invalid('stream must be a boolean');
  if (p.hold !== undefined && typeof p.hold !== 'boolean') throw invalid('hold must be a boolean');
  if (p.endLeftovers !== undefined && typeof p.endLeftovers !== 'boolean') throw invalid('endLeftovers must be a boolean');
  if (p.spare !== undefined && (typeof p.spare !== 'string' || p.hold === true)) throw invalid('spare must be a spare id, and not with hold');
  return p as ExecParams;
}

function checkInt(v: unknown, name: string, min: number, max: number): void {
  if (v === undefined) return;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) {
    throw invalid(`${name} must be an integer from ${min} to ${max}`);
  }
}

function invalid(message: string, details: Record<string, unknown> = {}): DaemonError {
  return new DaemonError('INVALID_ARGUMENT', message, details);
}
