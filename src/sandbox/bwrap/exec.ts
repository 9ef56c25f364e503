/**
 * The exec path: one command in the sandbox's daemon, born in its own freezer exec cgroup (from a
 * spare exec starter when one is ready, else held by the daemon until the runner placed it), and
 * whatever it leaves behind killed with its cgroup when it ends.
 */
import { ServiceError } from '../../core/errors.js';
import { isExecId, type SandboxCgroup } from '../cgroups.js';
import type { DaemonClient } from '../client.js';
import type { ExecParams, ExecResult, ExecStarted } from '../daemon/protocol.js';
import { execParams } from '../exec-params.js';
import type { ExecRequest, SandboxHandle } from '../executor.js';
import type { Spare, Spares } from './spares.js';

type OnOutput = (stream: 'stdout' | 'stderr', chunk: Buffer) => void;

/**
 * Runs one command in the sandbox's daemon. With cgroups every exec runs in its own freezer
 * sub-cgroup (so a foreground command's leftovers die with it, setsid'd or not). The fast path
 * takes a spare exec starter the daemon started earlier and this runner already moved into a new
 * exec cgroup: the command is born there, with no process start or cgroup write on the way.
 * Without a ready spare, the daemon holds a new process, the runner places it and releases it.
 * Used spares are replaced in the background.
 */
export async function runExec(
  client: (h: SandboxHandle) => DaemonClient,
  spares: Spares,
  cg: SandboxCgroup | undefined,
  h: SandboxHandle,
  req: ExecRequest,
  onOutput?: OnOutput,
  signal?: AbortSignal,
): Promise<ExecResult> {
  const spare = cg ? (spares.ready(h.id) ?? (await spares.next(h, cg))) : undefined;
  try {
    return await execOnce(client(h), cg, spare, req, onOutput, signal);
  } catch (err) {
    // The spare ended before it was used (killed from inside): start the exec the other way.
    if (spare && err instanceof ServiceError && err.details.daemonCode === 'NOT_FOUND' && err.details.spare === spare.id) {
      return execOnce(client(h), cg, undefined, req, onOutput, signal);
    }
    throw err;
  } finally {
    if (cg) spares.fill(h, cg);
  }
}

async function execOnce(
  client: DaemonClient,
  cg: SandboxCgroup | undefined,
  spare: Spare | undefined,
  req: ExecRequest,
  onOutput: OnOutput | undefined,
  signal: AbortSignal | undefined,
): Promise<ExecResult> {
  const params: ExecParams = {
    ...execParams(req, onOutput !== undefined),
    // The exec cgroup ends (and counts) what the command leaves behind, setsid'd ones included.
    ...(cg ? { endLeftovers: undefined } : {}),
    hold: cg !== undefined && spare === undefined,
    spare: spare?.id,
  };
  let execGroup: string | undefined = spare?.dir;
  let placement: Promise<void> | undefined;
  let placementError: unknown;
  const onEvent = (event: string, data: unknown): void => {
    if ((event === 'stdout' || event === 'stderr') && typeof data === 'string') {
      onOutput?.(event, Buffer.from(data, 'base64'));
    } else if (event === 'started' && cg && !spare && placement === undefined) {
      // The daemon's word, checked before root acts on it (a cgroup named after execId): a
      // malformed announcement leaves the held exec unplaced, and the daemon ends it unreleased.
      const started = data as Partial<ExecStarted> | null;
      if (typeof started !== 'object' || started === null || !isExecId(started.execId) || !Number.isSafeInteger(started.pid) || started.pid! <= 0) {
        placementError = new ServiceError('INTERNAL', 'the sandbox daemon announced a started exec without a valid execId and pid');
        return;
      }
      const { execId, pid } = started as ExecStarted;
      placement = (async () => {
        try {
          execGroup = await cg.attachExec(execId, pid);
          await client.request('release', { execId });
        } catch (err) {
          placementError = err;
          await client.request('kill', { execId }).catch(() => undefined);
        }
      })();
    }
  };
  // The daemon enforces timeoutMs; this only guards against a daemon that stopped answering.
  const safetyMs = (req.timeoutMs ?? 60_000) + (req.killGraceMs ?? 0) + 30_000;
  let result: ExecResult | undefined;
  try {
    result = await client.request('exec', params, { onEvent, signal, timeoutMs: safetyMs });
  } finally {
    await placement;
    if (cg && execGroup) {
      // A foreground command takes its whole session with it when it ends (exit, timeout, cancel,
      // failure): whatever it left behind, setsid'd or re-parented, is in its exec cgroup and goes.
      // Only callers that asked for background processes (async operations, tasks) keep them
      // after a normal exit. An unused spare (the exec was refused) is ended the same way.
      const killLeftovers = !result || result.timedOut || result.cancelled || placementError !== undefined || req.keepBackground !== true;
      // Empty (nothing left behind, the common case): nothing to kill, and nothing can enter it
      // again, so it is removed off the reply's path. Otherwise kill what is left when asked to,
      // then remove; background processes a caller asked to keep keep it (swept later).
      if (cg.execIsEmpty(execGroup)) cg.releaseExecLater(execGroup);
      else if (killLeftovers) {
        const ended = await cg.killExec(execGroup);
        if (!cg.releaseExec(execGroup)) cg.releaseExecLater(execGroup);
        // Said in the result (exec_run's backgroundEnded): what the command left running was ended.
        // (Set on the reply itself: a spread would decode its raw stdout field, core/raw-text.ts.)
        if (result && ended > 0) result.backgroundEnded = (result.backgroundEnded ?? 0) + ended;
      }
    }
  }
  if (placementError) throw placementError;
  return result;
}

