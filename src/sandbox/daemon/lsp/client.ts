/**
 * One running language server: a child process of the daemon (so inside the workspace's sandbox
 * and cgroup, as the workspace user), spoken to over stdio with the field's own libraries
 * (vscode-languageserver-protocol over vscode-jsonrpc's StreamMessageReader/Writer), with the
 * documents the daemon opened in it and the diagnostics it published.
 *
 * Imports node built-ins, the LSP libraries (loaded on first use: a daemon without them still
 * serves everything else) and sibling daemon files only.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import type {
  Diagnostic,
  InitializeParams,
  InitializeResult,
  ProtocolConnection,
  PublishDiagnosticsParams,
  ServerCapabilities,
} from 'vscode-languageserver-protocol/node';
import type { Launch, ServerId } from './servers.js';

export type Lsp = typeof import('vscode-languageserver-protocol/node');

let loaded: Promise<Lsp> | undefined;
/** The LSP libraries, loaded once (they are bound read-only into the sandbox beside the daemon). */
export function loadLsp(): Promise<Lsp> {
  loaded ??= import('vscode-languageserver-protocol/node').catch((err: unknown) => {
    loaded = undefined;
    throw err;
  });
  return loaded;
}

/** The niceness servers run at, through coreutils' nice from the sandbox's /usr. */
export const SERVER_NICE = 10;
const NICE = '/usr/bin/nice';

/**
 * The command line that runs `argv` unshielded from the OOM killer (the daemon is shielded; what it
 * starts must not be: the workspace's memory limit ends it, never the daemon), at `nice` when given:
 * a shell wrapper that resets oom_score_adj and execs it.
 */
export function unshielded(name: string, argv: string[], nice?: number): [string, string[]] {
  const run = nice === undefined ? 'exec "$@"' : `if [ -x ${NICE} ]; then exec ${NICE} -n ${nice} "$@"; fi; exec "$@"`;
  return ['/bin/sh', ['-c', `echo 0 >/proc/self/oom_score_adj 2>/dev/null; ${run}`, name, ...argv]];
}

/** Bytes of a server's stderr kept (the tail), for the reason of a crash. */
const STDERR_TAIL = 4096;
/** How long initialize may take. */
const INIT_TIMEOUT_MS = 60_000;

export interface OpenDoc {
  uri: string;
  rel: string;
  languageId: string;
  version: number;
  text: string;
  /** What the file was when read (ino:size:mtime:ctime), to tell a change made by a command. */
  stamp: string;
  /** When the daemon last sent its text (open or change). */
  sentAt: number;
  lastUsed: number;
}

export interface Published {
  items: Diagnostic[];
  at: number;
  version?: number;
}

export class LanguageServer {
  readonly docs = new Map<string, OpenDoc>();
  readonly diagnostics = new Map<string, Published>();
  capabilities: ServerCapabilities = {};
  private stderr = '';
  private exitReason: string | undefined;
  private stopping = false;
  private readonly waiters = new Set<() => void>();
  private readonly exitListeners: Array<(reason: string, expected: boolean) => void> = [];
  readonly startedAt = Date.now();

  private constructor(
    readonly id: ServerId,
    readonly lsp: Lsp,
    readonly child: ChildProcess,
    readonly conn: ProtocolConnection,
  ) {}

  get pid(): number | undefined {
    return this.child.pid;
  }

  get exited(): string | undefined {
    return this.exitReason;
  }

  get stderrTail(): string {
    return this.stderr;
  }

  /** Told once when the process ends (expected: stopped by the daemon, idle or shutdown). */
  onExit(fn: (reason: string, expected: boolean) => void): void {
    this.exitListeners.push(fn);
  }

  static async start(id: ServerId, launch: Launch, rootPath: string): Promise<LanguageServer> {
    const lsp = await loadLsp();
    // Unshielded from the OOM killer, and at nice 10: the re-checks a change sets off (tsserver's
    // geterr over every open document) yield the CPU to the workspace's commands and the service.
    const [sh, argv] = unshielded('lsp', [launch.command, ...launch.args], SERVER_NICE);
    const child = spawn(sh, argv, {
      cwd: rootPath,
      env: launch.env,
      stdio: ['pipe', 'pipe', 'pipe'],
      detached: true,
    });
    const conn = lsp.createProtocolConnection(new lsp.StreamMessageReader(child.stdout!), new lsp.StreamMessageWriter(child.stdin!), {
      error: () => undefined,
      warn: () => undefined,
      info: () => undefined,
      log: () => undefined,
    });
    const server = new LanguageServer(id, lsp, child, conn);
    server.wire(launch, rootPath);
    conn.listen();
    const uri = fileUri(rootPath);
    const params: InitializeParams = {
      processId: process.pid,
      clientInfo: { name: 'atelier' },
      rootUri: uri,
      rootPath,
      workspaceFolders: [{ uri, name: 'workspace' }],
      initializationOptions: launch.initializationOptions ?? null,
      capabilities: {
        general: { positionEncodings: ['utf-16'] },
        workspace: {
          configuration: true,
          workspaceFolders: true,
          symbol: { dynamicRegistration: false },
          // No dynamic registration: each server watches the tree itself (changes made by commands
          // reach the files it has not open), and the daemon also sends every change it makes.
          didChangeWatchedFiles: { dynamicRegistration: false },
          applyEdit: false,
          workspaceEdit: { documentChanges: true },
        },
        textDocument: {
          synchronization: { dynamicRegistration: false, didSave: false, willSave: false },
          definition: { linkSupport: true },
          references: {},
          hover: { contentFormat: ['markdown', 'plaintext'] },
          documentSymbol: { hierarchicalDocumentSymbolSupport: true },
          rename: { prepareSupport: true },
          publishDiagnostics: { relatedInformation: false, versionSupport: true },
        },
        window: { workDoneProgress: false },
      },
    };
    try {
      const init = await withTimeout(conn.sendRequest(lsp.InitializeRequest.type, params) as Promise<InitializeResult>, INIT_TIMEOUT_MS, () => server.exitReason, 'initialize');
      server.capabilities = init.capabilities ?? {};
      await conn.sendNotification(lsp.InitializedNotification.type, {});
      await conn.sendNotification(lsp.DidChangeConfigurationNotification.type, { settings: launch.settings });
    } catch (err) {
      server.kill();
      throw err;
    }
    return server;
  }

  private wire(launch: Launch, rootPath: string): void {
    const { lsp, conn, child } = this;
    child.stderr!.on('data', (b: Buffer) => {
      this.stderr = (this.stderr + b.toString('utf8')).slice(-STDERR_TAIL);
    });
    child.stdin!.on('error', () => undefined);
    child.stdout!.on('error', () => undefined);
    child.on('error', (err) => this.ended(`cannot start: ${err.message}`));
    child.on('exit', (code, signal) => this.ended(signal ? `killed by ${signal}` : `exited with status ${code}`));
    conn.onError(() => undefined);
    // The process's exit (with its signal or status) usually follows at once: wait for it a moment.
    conn.onClose(() => setTimeout(() => this.lost('its connection closed'), 1000).unref());
    conn.onNotification(lsp.PublishDiagnosticsNotification.type, (p: PublishDiagnosticsParams) => {
      this.diagnostics.set(p.uri, { items: Array.isArray(p.diagnostics) ? p.diagnostics.slice(0, 2000) : [], at: Date.now(), version: p.version });
      for (const w of [...this.waiters]) w();
    });
    // What the server may ask: its settings, progress tokens, registrations (all answered, none acted on).
    conn.onRequest(lsp.ConfigurationRequest.type, (p) => (p.items ?? []).map((i) => (i.section ? sectionOf(launch.settings, i.section) : launch.settings)));
    conn.onRequest(lsp.WorkDoneProgressCreateRequest.type, () => undefined);
    conn.onRequest(lsp.RegistrationRequest.type, () => undefined);
    conn.onRequest(lsp.UnregistrationRequest.type, () => undefined);
    conn.onRequest(lsp.WorkspaceFoldersRequest.type, () => [{ uri: fileUri(rootPath), name: 'workspace' }]);
    conn.onRequest(lsp.ApplyWorkspaceEditRequest.type, () => ({ applied: false, failureReason: 'the daemon applies no edit a server asks for' }));
    conn.onRequest(lsp.ShowMessageRequest.type, () => null);
  }

  /** A server whose connection closed and that has not ended is of no use: it ends now, killed. */
  private lost(reason: string): void {
    if (this.exitReason !== undefined) return;
    this.ended(reason);
    this.kill();
  }

  private ended(reason: string): void {
    if (this.exitReason !== undefined) return;
    this.exitReason = reason;
    for (const w of [...this.waiters]) w();
    try {
      this.conn.dispose();
    } catch {
      // already gone
    }
    const tail = this.stderr.trim().split('\n').slice(-3).join(' | ');
    const full = tail ? `${reason} (stderr: ${tail.slice(-400)})` : reason;
    for (const l of this.exitListeners) l(full, this.stopping);
  }

  /** Sends a request; fails when the server ends first, after timeoutMs, or when signal aborts. */
  async request<R>(method: string, params: unknown, timeoutMs: number, signal?: AbortSignal): Promise<R> {
    if (this.exitReason) throw new ServerGone(this.exitReason);
    const cts = new this.lsp.CancellationTokenSource();
    const onAbort = (): void => cts.cancel();
    signal?.addEventListener('abort', onAbort, { once: true });
    try {
      return await withTimeout(this.conn.sendRequest(method, params, cts.token) as Promise<R>, timeoutMs, () => this.exitReason, method);
    } catch (err) {
      cts.cancel();
      // A write to a server that just died (EPIPE, a closed connection) comes before its exit event.
      if (!(err instanceof Timeout) && !signal?.aborted) await this.exitWithin(2000);
      // Its connection closed under the request (the server's stdout ended) and its exit is slow to come.
      if (err instanceof this.lsp.ConnectionError) this.lost(`its connection closed (${err.message})`);
      if (this.exitReason) throw new ServerGone(this.exitReason);
      throw err;
    } finally {
      signal?.removeEventListener('abort', onAbort);
      cts.dispose();
    }
  }

  /** Resolves when the process has ended, or after ms. */
  private exitWithin(ms: number): Promise<void> {
    if (this.exitReason || this.child.exitCode !== null || this.child.signalCode !== null) return Promise.resolve();
    return new Promise((resolve) => {
      const t = setTimeout(resolve, ms);
      this.child.once('exit', () => {
        clearTimeout(t);
        setImmediate(resolve);
      });
    });
  }

  /**
   * Sends a notification; never throws. vscode-jsonrpc throws at once ("Connection is closed.") on
   * a connection whose server just died and whose exit is not seen yet: the request that follows
   * (or the exit) tells the caller, as ServerGone.
   */
  notify(method: string, params: unknown): void {
    if (this.exitReason) return;
    try {
      this.conn.sendNotification(method, params).catch(() => undefined);
    } catch {
      // closed or disposed: the server is ending
    }
  }

  /** Resolves at the next published diagnostics (or the server's end), or after ms. */
  nextPublish(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const done = (): void => {
        clearTimeout(t);
        this.waiters.delete(done);
        resolve();
      };
      const t = setTimeout(done, Math.max(0, ms));
      this.waiters.add(done);
    });
  }

  /** shutdown and exit, then SIGKILL to its process group after a grace. */
  async stop(graceMs = 2000): Promise<void> {
    if (this.exitReason) return;
    this.stopping = true;
    const gone = new Promise<void>((resolve) => this.onExit(() => resolve()));
    try {
      await withTimeout(this.conn.sendRequest(this.lsp.ShutdownRequest.type) as Promise<unknown>, graceMs, () => this.exitReason, 'shutdown');
      await this.conn.sendNotification(this.lsp.ExitNotification.type);
    } catch {
      // it is killed below
    }
    const t = setTimeout(() => this.kill(), graceMs);
    await gone;
    clearTimeout(t);
    this.kill();
  }

  /** Kills the server's whole process group (tsserver and pyright start children of their own). */
  kill(): void {
    this.stopping = this.stopping || this.exitReason === undefined;
    const pid = this.child.pid;
    if (pid === undefined) return;
    try {
      process.kill(-pid, 'SIGKILL');
    } catch {
      try {
        this.child.kill('SIGKILL');
      } catch {
        // already gone
      }
    }
  }
}

/** The server ended while a request waited (the manager restarts it and asks again once). */
export class ServerGone extends Error {
  constructor(readonly reason: string) {
    super(`the language server ended: ${reason}`);
  }
}

export class Timeout extends Error {}

function withTimeout<T>(p: Promise<T>, ms: number, gone: () => string | undefined, what: string): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const t = setTimeout(() => reject(new Timeout(`${what}: the language server did not answer within ${ms} ms`)), ms);
    const poll = setInterval(() => {
      const g = gone();
      if (g) {
        clearTimeout(t);
        clearInterval(poll);
        reject(new ServerGone(g));
      }
    }, 100);
    p.then(
      (v) => {
        clearTimeout(t);
        clearInterval(poll);
        resolve(v);
      },
      (e: unknown) => {
        clearTimeout(t);
        clearInterval(poll);
        reject(e);
      },
    );
  });
}

function sectionOf(settings: Record<string, unknown>, section: string): unknown {
  if (Object.hasOwn(settings, section)) return settings[section];
  let cur: unknown = settings;
  for (const part of section.split('.')) {
    if (typeof cur !== 'object' || cur === null || !Object.hasOwn(cur, part)) return null;
    cur = (cur as Record<string, unknown>)[part];
  }
  return cur ?? null;
}

/** file:// URI of an absolute path (percent-encoded as the servers write them). */
export function fileUri(abs: string): string {
  return 'file://' + abs.split('/').map((s) => encodeURIComponent(s)).join('/');
}
