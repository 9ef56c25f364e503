/**
 * The daemon's side of the language-server host (host.ts): the code.* methods, each sent to the
 * host process, which is started on the first call that needs a server and ended once none runs.
 * So the daemon never loads the LSP libraries or holds a server's messages, and a workspace whose
 * servers stopped for idleness is back at its idle size.
 *
 * The daemon keeps what the host reports of each server (crashes, restarts, last exit) and gives
 * it to the next host, so the crash bound and the reasons hold across hosts. code.status while no
 * host runs is answered here from that history (no process is started to say "stopped"). A host
 * that ends unasked (killed from inside the workspace, out of memory) fails the calls it had with
 * UNAVAILABLE, and its running servers count as crashed with that reason.
 *
 * Imports node built-ins and sibling daemon files only.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { Confinement } from '../files/index.js';
import { DaemonError, type DaemonErrorCode } from '../protocol.js';
import type { CallContext, Handlers } from '../server.js';
import { unshielded } from './client.js';
import type { HostReply, HostRequest } from './host.js';
import type { ManagerHistory } from './manager.js';
import { CODE_METHODS, CodeMethods, type CodeMethod } from './methods.js';

const HOST_JS = fileURLToPath(new URL('./host.js', import.meta.url));
/** The host's own heap (the servers are processes of their own). */
const HOST_NODE_FLAGS = ['--max-old-space-size=256', '--v8-pool-size=2'];
/** Bytes of the host's stderr kept, for the reason it ended. */
const STDERR_TAIL = 2048;

interface Pending {
  resolve(v: unknown): void;
  reject(e: unknown): void;
}

interface Host {
  child: ChildProcess;
  pending: Map<number, Pending>;
  stderr: string;
  /** The daemon asked it to end (idle): its exit is no crash. */
  ending: boolean;
}

export class CodeHostLink {
  private host: Host | undefined;
  private nextId = 1;
  private history: ManagerHistory = { slots: {}, running: [] };
  /** Answers code.status while no host runs (its manager never starts a server). */
  private readonly shadow: CodeMethods;

  constructor(
    private readonly c: Confinement,
    private readonly opts: { nodePath: string; home: string },
  ) {
    this.shadow = new CodeMethods(c, opts);
  }

  private spawnHost(): Host {
    // Unshielded from the OOM killer: the workspace's memory limit ends the host and its servers, never the daemon.
    const [sh, argv] = unshielded('lsp-host', [this.opts.nodePath, ...HOST_NODE_FLAGS, HOST_JS, '--workspace', this.c.root, '--home', this.opts.home]);
    const child = spawn(sh, argv, {
      stdio: ['ignore', 'ignore', 'pipe', 'ipc'],
      serialization: 'json',
      env: { PATH: '/usr/bin:/bin', HOME: this.opts.home, LANG: 'C.UTF-8' },
    });
    const host: Host = { child, pending: new Map(), stderr: '', ending: false };
    child.stderr?.setEncoding('utf8');
    child.stderr?.on('data', (d: string) => {
      host.stderr = (host.stderr + d).slice(-STDERR_TAIL);
    });
    child.on('message', (m: HostReply) => this.onMessage(host, m));
    child.on('error', () => undefined);
    child.on('exit', (code, signal) => this.onExit(host, signal ? `killed by ${signal}` : `exited with status ${code}`));
    // The history goes first: the host counts restarts and crashes on from it.
    this.post(host, { t: 'adopt', history: this.history });
    return host;
  }

  private post(host: Host, m: HostRequest): void {
    if (!host.child.connected) return;
    try {
      host.child.send(m);
    } catch {
      // the host is gone: its exit fails what it had
    }
  }

  private onMessage(host: Host, m: HostReply): void {
    if (!m || typeof m !== 'object') return;
    if ('history' in m && m.history && typeof m.history === 'object') this.history = m.history;
    if (m.t === 'result' || m.t === 'error') {
      const p = host.pending.get(m.id);
      if (!p) return;
      host.pending.delete(m.id);
      if (m.t === 'result') p.resolve(m.result);
      else p.reject(new DaemonError((m.error?.code ?? 'INTERNAL') as DaemonErrorCode, String(m.error?.message ?? 'language-server host error'), m.error?.details && typeof m.error.details === 'object' ? m.error.details : {}));
    } else if (m.t === 'quiet' && host === this.host && host.pending.size === 0) {
      // No server runs and nothing is asked: the host ends, and with it what it held.
      host.ending = true;
      this.host = undefined;
      this.post(host, { t: 'end' });
    }
  }

  private onExit(host: Host, how: string): void {
    if (this.host === host) this.host = undefined;
    const unasked = !host.ending;
    const reason = `the language-server host ${how}${host.stderr.trim() ? `: ${host.stderr.trim().split('\n').slice(-3).join(' | ').slice(0, 500)}` : ''}`;
    if (unasked) {
      // Its running servers went with it: they count as crashed (the next host restarts them within the bound).
      this.shadow.manager.adopt(this.history, reason);
      this.history = { slots: this.shadow.manager.history().slots, running: [] };
    }
    for (const p of host.pending.values()) p.reject(new DaemonError('UNAVAILABLE', `${reason}; ask again (the servers start again)`, { reason: 'host_ended' }));
    host.pending.clear();
  }

  /** code.status from the history the hosts left (no host runs, or it ended under the call). */
  private statusFromHistory(params: unknown): unknown {
    this.shadow.manager.adopt(this.history);
    return this.shadow.status(params);
  }

  /** Sends one code.* call to the host (started if none runs); a status read never starts one nor fails for one that ended. */
  call(method: CodeMethod, params: unknown, ctx: CallContext): Promise<unknown> {
    if (method !== 'code.status') return this.send(method, params, ctx);
    if (!this.host) return Promise.resolve(this.statusFromHistory(params));
    return this.send(method, params, ctx).catch((err: unknown) => {
      if (!(err instanceof DaemonError) || err.details.reason !== 'host_ended') throw err;
      return this.statusFromHistory(params);
    });
  }

  private send(method: CodeMethod, params: unknown, ctx: CallContext): Promise<unknown> {
    ctx.signal.throwIfAborted();
    const host = (this.host ??= this.spawnHost());
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      const onAbort = (): void => this.post(host, { t: 'cancel', id });
      ctx.signal.addEventListener('abort', onAbort, { once: true });
      host.pending.set(id, {
        resolve: (v) => {
          ctx.signal.removeEventListener('abort', onAbort);
          resolve(v);
        },
        reject: (e) => {
          ctx.signal.removeEventListener('abort', onAbort);
          reject(e);
        },
      });
      this.post(host, { t: 'call', id, method, params });
    });
  }

  /** Atelier's file methods changed these paths: the host (when one runs) tells its servers. */
  changed(rels: string[]): void {
    if (this.host && !this.host.ending) this.post(this.host, { t: 'changed', rels: rels.slice(0, 2000) });
  }
}

/** The code.* methods of the daemon, answered through the host process. */
export function codeHost(c: Confinement, opts: { nodePath: string; home: string }): { methods: Handlers<CodeMethod>; notify: (rels: string[]) => void } {
  const link = new CodeHostLink(c, opts);
  const methods = Object.fromEntries(CODE_METHODS.map((m) => [m, (params: unknown, ctx: CallContext) => link.call(m, params, ctx)])) as unknown as Handlers<CodeMethod>;
  return { methods, notify: (rels) => link.changed(rels) };
}
