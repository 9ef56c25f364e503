/**
 * How a short-lived sandbox's run is collected: its output streamed into bounded head-and-tail
 * captures (and to the caller), its timeout and cancel, and its end, answered even when a pipe
 * outlives the kill.
 */
import type { ChildProcess } from 'node:child_process';
import { ServiceError } from '../../core/errors.js';
import { HeadTailCapture } from '../daemon/output.js';
import type { ExecResult } from '../daemon/protocol.js';
import type { EphemeralSpec } from '../executor.js';

/** After a short-lived sandbox was killed (timeout, cancel), how long its end may take to be seen. */
const KILLED_CLOSE_GRACE_MS = 10_000;

/** Streams an ephemeral sandbox's output into bounded captures and waits for it to end (exported for its tests). */
export function collect(
  child: ChildProcess,
  spec: EphemeralSpec,
  started: number,
  kill: () => Promise<void>,
  closeGraceMs = KILLED_CLOSE_GRACE_MS,
): Promise<ExecResult> {
  const maxOutput = spec.maxOutputBytes ?? 262_144;
  const out = { stdout: new HeadTailCapture(maxOutput), stderr: new HeadTailCapture(maxOutput) };
  let timedOut = false;
  let cancelled = false;
  return new Promise<ExecResult>((resolve, reject) => {
    let settled = false;
    let lastResort: NodeJS.Timeout | undefined;
    /** The first end only (close, the last resort, or a failed start): its timers and listener go. */
    const settle = (): boolean => {
      if (settled) return false;
      settled = true;
      clearTimeout(timer);
      clearTimeout(lastResort);
      spec.signal?.removeEventListener('abort', onAbort);
      return true;
    };
    const finish = (code: number | null, sig: NodeJS.Signals | null): void => {
      if (!settle()) return;
      resolve({
        exitCode: code,
        signal: sig,
        timedOut,
        cancelled,
        stdout: out.stdout.text(),
        stderr: out.stderr.text(),
        stdoutBytes: out.stdout.totalBytes,
        stderrBytes: out.stderr.totalBytes,
        stdoutTruncated: out.stdout.truncated,
        stderrTruncated: out.stderr.truncated,
        durationMs: Date.now() - started,
      });
    };
    const stop = (): void => {
      kill().catch(() => undefined);
      // Killed, it must end: should its 'close' still not come (a pipe held open by something
      // outside the sandbox's cgroup, say), the call answers anyway, with what was captured,
      // instead of holding the workspace's lock for good.
      lastResort ??= setTimeout(() => finish(child.exitCode, child.signalCode ?? 'SIGKILL'), closeGraceMs);
    };
    const timer = setTimeout(() => {
      timedOut = true;
      stop();
    }, spec.timeoutMs ?? 60_000);
    const onAbort = (): void => {
      cancelled = true;
      stop();
    };
    spec.signal?.addEventListener('abort', onAbort);
    if (spec.signal?.aborted) onAbort();
    // The sandbox's bytes reach the caller's onOutput in this stream callback, where a throw would
    // end the runner: a consumer that throws gets no more output; the run and its captures go on.
    let onOutput = spec.onOutput;
    for (const name of ['stdout', 'stderr'] as const) {
      child[name]!.on('data', (chunk: Buffer) => {
        out[name].push(chunk);
        try {
          onOutput?.(name, chunk);
        } catch {
          onOutput = undefined;
        }
      });
    }
    child.stdin!.on('error', () => undefined);
    if (spec.stdin !== undefined) child.stdin!.write(spec.stdin);
    child.stdin!.end();
    child.on('error', (err) => {
      if (settle()) reject(new ServiceError('INTERNAL', `cannot start the sandbox: ${err.message}`));
    });
    child.on('close', (code, sig) => finish(code, sig));
  });
}
