/**
 * The language-server host (issue #44): a child process of the daemon that runs the code.* methods
 * and the language servers under it, so inside the workspace's sandbox and cgroup, as the
 * workspace user. The daemon (remote.ts) starts it on the first code.* call and it ends once no
 * server runs (after the servers' idle stop): whatever the LSP libraries, the open documents and
 * the servers' messages took of memory goes with it, and the daemon keeps its idle size.
 *
 *   node host.js --workspace /workspace --home /home/user
 *
 * It speaks to the daemon over the IPC channel node gives a child (JSON messages, HostRequest and
 * HostReply below); the daemon keeps each server's history (crashes, restarts, last exit) that the
 * host sends with every reply and gives it to the next host.
 *
 * Imports node built-ins and sibling daemon files only.
 */
import { parseArgs } from 'node:util';
import { Confinement } from '../files/index.js';
import { DaemonError } from '../protocol.js';
import type { CallContext } from '../server.js';
import type { ManagerHistory } from './manager.js';
import { codeMethods, type CodeMethod } from './methods.js';

/** daemon → host */
export type HostRequest =
  | { t: 'call'; id: number; method: CodeMethod; params: unknown }
  | { t: 'cancel'; id: number }
  | { t: 'changed'; rels: string[] }
  | { t: 'adopt'; history: ManagerHistory; lostReason?: string }
  | { t: 'end' };

/** host → daemon */
export type HostReply =
  | { t: 'result'; id: number; result: unknown; history: ManagerHistory }
  | { t: 'error'; id: number; error: { code: string; message: string; details?: Record<string, unknown> }; history: ManagerHistory }
  | { t: 'quiet'; history: ManagerHistory };

function main(): void {
  const { values } = parseArgs({ options: { workspace: { type: 'string' }, home: { type: 'string' } }, strict: true });
  if (!values.workspace || !values.home || typeof process.send !== 'function') {
    process.stderr.write('atelier lsp host: started without --workspace, --home or an IPC channel\n');
    process.exit(2);
  }
  const { code, methods: handlers } = codeMethods(new Confinement(values.workspace), { nodePath: process.execPath, home: values.home });
  const inflight = new Map<number, AbortController>();
  const send = (m: HostReply): void => {
    try {
      process.send!(m);
    } catch {
      // the daemon is gone: disconnect below ends this process
    }
  };
  const quiet = (): void => {
    if (inflight.size === 0 && code.manager.quiet()) send({ t: 'quiet', history: code.manager.history() });
  };
  code.manager.onQuiet = quiet;
  const call = async (m: Extract<HostRequest, { t: 'call' }>): Promise<void> => {
    const ac = new AbortController();
    inflight.set(m.id, ac);
    const ctx: CallContext = { signal: ac.signal, emit: () => true, drained: () => Promise.resolve() };
    try {
      const handler = Object.hasOwn(handlers, m.method) ? handlers[m.method] : undefined;
      if (!handler) throw new DaemonError('NOT_IMPLEMENTED', `unknown method ${String(m.method).slice(0, 100)}`);
      const result = await handler(m.params, ctx);
      inflight.delete(m.id);
      send({ t: 'result', id: m.id, result, history: code.manager.history() });
    } catch (err) {
      inflight.delete(m.id);
      const error =
        err instanceof DaemonError
          ? err.toBody()
          : ac.signal.aborted
            ? { code: 'CANCELLED', message: 'cancelled', details: {} }
            : { code: 'INTERNAL', message: `language-server host: ${err instanceof Error ? err.message : String(err)}`.slice(0, 2000), details: {} };
      send({ t: 'error', id: m.id, error, history: code.manager.history() });
    }
    quiet();
  };
  process.on('message', (raw: unknown) => {
    const m = raw as HostRequest;
    if (!m || typeof m !== 'object') return;
    if (m.t === 'call' && typeof m.id === 'number') void call(m);
    else if (m.t === 'cancel') inflight.get(m.id)?.abort(new DaemonError('CANCELLED', 'cancelled'));
    else if (m.t === 'changed' && Array.isArray(m.rels)) code.manager.changed(m.rels.filter((r) => typeof r === 'string'));
    else if (m.t === 'adopt' && m.history) code.manager.adopt(m.history, m.lostReason);
    else if (m.t === 'end') void code.manager.stopAll().finally(() => process.exit(0));
  });
  // The daemon ended (or closed the channel): stop the servers and go.
  process.on('disconnect', () => void code.manager.stopAll().finally(() => process.exit(0)));
}

try {
  main();
} catch (err) {
  process.stderr.write(`atelier lsp host failed: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
}
