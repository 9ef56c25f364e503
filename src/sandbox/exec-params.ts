/**
 * The daemon's exec parameters for an ExecRequest, as every driver sends them (the daemon's
 * protocol is the same whichever driver reaches it); a driver adds what only it knows (the
 * bubblewrap driver's spare sandboxes and cgroup hold).
 */
import type { ExecParams } from './daemon/protocol.js';
import type { ExecRequest } from './executor.js';

export function execParams(req: ExecRequest, stream: boolean): ExecParams {
  return {
    argv: req.argv,
    command: req.command,
    cwd: req.cwd,
    env: req.env,
    stdin: req.stdin === undefined ? undefined : Buffer.from(req.stdin).toString('base64'),
    timeoutMs: req.timeoutMs,
    maxOutputBytes: req.maxOutputBytes,
    killGraceMs: req.killGraceMs,
    stream,
    endLeftovers: req.keepBackground === true ? undefined : true,
  };
}
