/**
 * The daemon's language servers: one slot per server, started on first use, kept warm, stopped
 * after the operator's idle time, restarted after a crash at most MAX_CRASHES times in
 * CRASH_WINDOW_MS (the reasons kept), and kept in sync with the tree:
 *
 *  - a document the daemon opened in a server is re-read before every answer when the file changed
 *    on disk (a `git checkout`, a code generator, `sed -i`: anything a command did), and at once
 *    (after the write's reply) when one of Atelier's file methods wrote, moved or deleted it;
 *  - every change the daemon makes is also sent as workspace/didChangeWatchedFiles; the servers
 *    watch the files they have not open themselves (no dynamic registration is offered).
 *
 * Imports node built-ins and sibling daemon files only.
 */
import { closeSync, fstatSync, readSync } from 'node:fs';
import path from 'node:path';
import type { Confinement } from '../files/index.js';
import { DaemonError, type CodeServerStatus, type CodeSettings } from '../protocol.js';
import { prepareClangdDatabase, type ClangdDatabase } from './clangd.js';
import { LanguageServer, ServerGone, Timeout, fileUri, type OpenDoc } from './client.js';
import { treeRssBytes } from './memory.js';
import { Lines } from './positions.js';
import { allServers, launchOf, serverForPath, setCustomServers, type ServerId, type ServerSpec } from './servers.js';

export const LSP_LIMITS = {
  /** Crashes (and failed starts) within CRASH_WINDOW_MS after which a server is not started again until the window passes. */
  maxCrashes: 3,
  crashWindowMs: 10 * 60_000,
  /** Default idle time before a server is stopped (the runner sends the operator's setting with each call). */
  defaultIdleMs: 10 * 60_000,
  /**
   * Documents kept open per server between calls (the least recently used are closed after a call
   * beyond it; a call itself may open more, e.g. a workspace's diagnostics). Bounded, because a
   * server re-analyses every open document after each change it sees (tsserver's geterr over all
   * of them, pyright's open-files diagnostics, a clangd AST each): with hundreds open, every write
   * costs a server seconds of CPU; too few, and a document closed and opened again is re-checked.
   */
  maxOpenDocs: 64,
  /** A file larger than this is not given to a server. */
  maxFileBytes: 2 * 1024 * 1024,
  /** One request to a server. */
  requestTimeoutMs: 30_000,
} as const;

export type Unavailable = 'not_installed' | 'disabled' | 'crashed' | 'no_server' | 'failed_to_start';

export type ServerStatus = CodeServerStatus;

/** What a server's slot remembers across host processes (host.ts): its crashes, restarts and last exit. */
export interface SlotHistory {
  crashes: number[];
  restarts: number;
  lastExit?: { at: string; reason: string; expected: boolean };
  everStarted: boolean;
  requests: number;
  clangdDb?: ClangdDatabase;
}

/** Every slot's history, and the servers running now. */
export interface ManagerHistory {
  slots: Partial<Record<ServerId, SlotHistory>>;
  running: ServerId[];
}

/** How long changes made through Atelier's file methods are gathered before they are sent (a burst of writes is told once). */
export const CHANGE_GATHER_MS = 50;
/** The longest a gathered change waits (writes that never pause are still told). */
export const CHANGE_GATHER_MAX_MS = 250;

interface Slot {
  spec: ServerSpec;
  server?: LanguageServer;
  starting?: Promise<LanguageServer>;
  crashes: number[];
  restarts: number;
  lastExit?: { at: string; reason: string; expected: boolean };
  idle?: NodeJS.Timeout;
  busy: number;
  requests: number;
  everStarted: boolean;
  clangdDb?: ClangdDatabase;
}

export interface FileText {
  rel: string;
  text: string;
  bytes: Buffer;
  stamp: string;
}

/** The first `size` bytes of an open file (fewer when it shrank meanwhile). */
export function readWhole(fd: number, size: number): Buffer {
  const buf = Buffer.alloc(size);
  let off = 0;
  while (off < buf.length) {
    const n = readSync(fd, buf, off, buf.length - off, off);
    if (n === 0) break;
    off += n;
  }
  return buf.subarray(0, off);
}

/** Reads a workspace file through the confinement (symlinks that leave the checkout refused). */
export function readWorkspaceFile(c: Confinement, rel: string, field = 'path', maxBytes: number = LSP_LIMITS.maxFileBytes): FileText {
  const f = c.openFile(rel, field);
  try {
    const st = fstatSync(f.fd, { bigint: true });
    if (st.size > BigInt(maxBytes)) throw new DaemonError('RESOURCE_EXHAUSTED', `${field}: ${rel} is larger than ${maxBytes} bytes, the most a language server is given`, { field, path: rel, limit: maxBytes });
    const bytes = readWhole(f.fd, Number(st.size));
    return { rel: f.rel, bytes, text: bytes.toString('utf8'), stamp: `${st.ino}:${st.size}:${st.mtimeNs}:${st.ctimeNs}` };
  } finally {
    closeSync(f.fd);
  }
}

function stampOf(c: Confinement, rel: string): string | undefined {
  let f;
  try {
    f = c.openFile(rel);
  } catch {
    return undefined;
  }
  try {
    const st = fstatSync(f.fd, { bigint: true });
    return `${st.ino}:${st.size}:${st.mtimeNs}:${st.ctimeNs}`;
  } finally {
    closeSync(f.fd);
  }
}

export interface Session {
  server: LanguageServer;
  /** Opens (or re-syncs) a workspace file in the server and returns it with its lines. */
  doc(rel: string, field?: string): { doc: OpenDoc; lines: Lines };
}

export class LspManager {
  private readonly slots = new Map<ServerId, Slot>();
  private idleMs: number = LSP_LIMITS.defaultIdleMs;
  private disabled = new Set<string>();
  /** Told when a server stops or ends (host.ts ends its process once none runs). */
  onQuiet: (() => void) | undefined;
  /** Changes of Atelier's file methods not yet sent, since `gatheredSince`. */
  private gathered = new Set<string>();
  private gatheredSince = 0;
  private gatherTimer: NodeJS.Timeout | undefined;
  /** History adopted for servers that have no slot yet (adopt). */
  private readonly past = new Map<ServerId, SlotHistory>();

  constructor(
    readonly c: Confinement,
    private readonly opts: { nodePath: string; home: string },
  ) {
  }

  /** The operator's settings, sent by the runner with each call. */
  configure(s: CodeSettings | undefined): void {
    if (!s) return;
    if (typeof s.idleMs === 'number' && Number.isInteger(s.idleMs) && s.idleMs >= 1000 && s.idleMs <= 86_400_000) this.idleMs = s.idleMs;
    if (Array.isArray(s.disabled)) this.disabled = new Set(s.disabled.filter((x) => typeof x === 'string').slice(0, 20));
    if (s.custom !== undefined) setCustomServers(s.custom);
  }

  /** The slot of a server (made on first use: the operator's servers come with the settings). */
  private slotOf(id: ServerId): Slot {
    let slot = this.slots.get(id);
    if (!slot) {
      const spec = allServers().find((s) => s.id === id);
      if (!spec) throw new DaemonError('INVALID_ARGUMENT', `server: ${id} is not a server here`, { field: 'server' });
      slot = { spec, crashes: [], restarts: 0, busy: 0, requests: 0, everStarted: false, ...this.past.get(id) };
      this.past.delete(id);
      this.slots.set(id, slot);
    }
    return slot;
  }

  /** The server a file would go to, or a refusal saying which and why not. */
  specFor(rel: string, field = 'path'): { spec: ServerSpec; languageId: string } {
    const hit = serverForPath(rel);
    if (!hit) {
      throw unavailable(null, 'no_server', `${field}: no language server serves ${path.posix.basename(rel)} (servers cover ${allServers().flatMap((s) => Object.keys(s.extensions)).join(' ')})`, { field, path: rel });
    }
    return hit;
  }

  /** Runs fn with the running server for `id` (started if needed), asking again once if the server crashed meanwhile. */
  async with<T>(id: ServerId, fn: (s: Session) => Promise<T>, field = 'path'): Promise<T> {
    const slot = this.slotOf(id);
    slot.busy++;
    slot.requests++;
    if (slot.idle) clearTimeout(slot.idle);
    // A change still being gathered is sent before the answer (so the answer sees it).
    this.flushChanges();
    try {
      for (let attempt = 0; ; attempt++) {
        const server = await this.running(slot, field);
        this.resync(server);
        try {
          return await fn({ server, doc: (rel, f) => this.open(server, rel, f ?? field) });
        } catch (err) {
          if (err instanceof ServerGone && attempt === 0) continue;
          if (err instanceof ServerGone) throw unavailable(slot.spec, 'crashed', `${slot.spec.title} ended while answering (${err.reason}); it is restarted on the next call`, this.details(slot));
          if (err instanceof Timeout) throw new DaemonError('DEADLINE_EXCEEDED', `${slot.spec.title}: ${err.message} (it may still be analysing the project: retry)`, { server: id });
          throw err;
        }
      }
    } finally {
      slot.busy--;
      if (slot.busy === 0 && slot.server && !slot.server.exited) this.trim(slot.server, slot.spec.docsClosedAfterCall ? 0 : LSP_LIMITS.maxOpenDocs);
      this.armIdle(slot);
    }
  }

  private armIdle(slot: Slot): void {
    if (slot.busy > 0 || !slot.server) return;
    if (slot.idle) clearTimeout(slot.idle);
    slot.idle = setTimeout(() => {
      const s = slot.server;
      if (!s || slot.busy > 0) return;
      slot.lastExit = { at: new Date().toISOString(), reason: `stopped after ${Math.round(this.idleMs / 1000)} s idle`, expected: true };
      slot.server = undefined;
      void s.stop().finally(() => this.onQuiet?.());
    }, this.idleMs);
    slot.idle.unref();
  }

  private details(slot: Slot): Record<string, unknown> {
    const now = Date.now();
    return { server: slot.spec.id, crashes: slot.crashes.filter((t) => now - t < LSP_LIMITS.crashWindowMs).length, restarts: slot.restarts, ...(slot.lastExit ? { lastExit: slot.lastExit } : {}) };
  }

  private async running(slot: Slot, field: string): Promise<LanguageServer> {
    if (slot.server && !slot.server.exited) return slot.server;
    if (slot.starting) return slot.starting;
    const spec = slot.spec;
    if (this.disabled.has(spec.id)) throw unavailable(spec, 'disabled', `${spec.title} is disabled by the operator (codeIntelDisabledServers)`, { field, server: spec.id });
    const now = Date.now();
    slot.crashes = slot.crashes.filter((t) => now - t < LSP_LIMITS.crashWindowMs);
    if (slot.crashes.length >= LSP_LIMITS.maxCrashes) {
      const retryAt = new Date(slot.crashes[0]! + LSP_LIMITS.crashWindowMs).toISOString();
      throw unavailable(spec, 'crashed', `${spec.title} crashed ${slot.crashes.length} times in ${LSP_LIMITS.crashWindowMs / 60_000} minutes (last: ${slot.lastExit?.reason ?? 'unknown'}); it is not started again before ${retryAt}`, { field, ...this.details(slot), retryAt });
    }
    const launch = launchOf(spec.id, this.opts.nodePath, this.opts.home);
    if ('missing' in launch) throw unavailable(spec, 'not_installed', `${spec.title} is not installed here (${launch.missing}); it comes from ${spec.source}`, { field, server: spec.id });
    if (spec.id === 'clangd') {
      slot.clangdDb = prepareClangdDatabase(this.c, path.join(this.opts.home, '.cache', 'atelier-lsp', 'clangd'));
      launch.args.push(`--compile-commands-dir=${slot.clangdDb.dir}`);
    }
    if (slot.everStarted) slot.restarts++;
    slot.everStarted = true;
    slot.starting = LanguageServer.start(spec.id, launch, this.c.root).then(
      (server) => {
        slot.starting = undefined;
        slot.server = server;
        server.onExit((reason, expected) => {
          if (slot.server === server) slot.server = undefined;
          if (!expected) slot.crashes.push(Date.now());
          if (!expected || !slot.lastExit || slot.lastExit.at < new Date(server.startedAt).toISOString()) slot.lastExit = { at: new Date().toISOString(), reason, expected };
          setImmediate(() => this.onQuiet?.());
        });
        return server;
      },
      (err: unknown) => {
        slot.starting = undefined;
        slot.crashes.push(Date.now());
        const reason = err instanceof Error ? err.message : String(err);
        slot.lastExit = { at: new Date().toISOString(), reason: `failed to start: ${reason}`, expected: false };
        setImmediate(() => this.onQuiet?.());
        throw unavailable(spec, 'failed_to_start', `${spec.title} failed to start: ${reason}`, { field, ...this.details(slot) });
      },
    );
    return slot.starting;
  }

  private uriOf(rel: string): string {
    return fileUri(rel === '.' ? this.c.root : `${this.c.root}/${rel}`);
  }

  /** Opens a file in the server, or sends its new text when it changed on disk. */
  private open(server: LanguageServer, rel: string, field: string): { doc: OpenDoc; lines: Lines } {
    const f = readWorkspaceFile(this.c, rel, field);
    const { languageId } = this.specFor(f.rel, field);
    const uri = this.uriOf(f.rel);
    const now = Date.now();
    let doc = server.docs.get(uri);
    if (doc) {
      if (doc.stamp !== f.stamp || doc.text !== f.text) this.sendChange(server, doc, f.text, f.stamp);
      doc.lastUsed = now;
    } else {
      doc = { uri, rel: f.rel, languageId, version: 1, text: f.text, stamp: f.stamp, sentAt: now, lastUsed: now };
      server.docs.set(uri, doc);
      server.notify('textDocument/didOpen', { textDocument: { uri, languageId, version: 1, text: f.text } });
    }
    return { doc, lines: new Lines(doc.text) };
  }

  private sendChange(server: LanguageServer, doc: OpenDoc, text: string, stamp: string): void {
    doc.version++;
    doc.text = text;
    doc.stamp = stamp;
    doc.sentAt = Date.now();
    server.notify('textDocument/didChange', { textDocument: { uri: doc.uri, version: doc.version }, contentChanges: [{ text }] });
  }

  private close(server: LanguageServer, doc: OpenDoc): void {
    server.docs.delete(doc.uri);
    server.diagnostics.delete(doc.uri);
    server.notify('textDocument/didClose', { textDocument: { uri: doc.uri } });
  }

  /** Closes the least recently used documents beyond `keep`. */
  private trim(server: LanguageServer, keep: number): void {
    if (server.docs.size <= keep) return;
    const byAge = [...server.docs.values()].sort((a, b) => a.lastUsed - b.lastUsed);
    for (const d of byAge.slice(0, server.docs.size - keep)) this.close(server, d);
  }

  /** Re-reads every open document whose file changed on disk (a command's change); closes those that are gone. */
  private resync(server: LanguageServer, only?: Set<string>): void {
    const events: Array<{ uri: string; type: number }> = [];
    for (const doc of [...server.docs.values()]) {
      if (only && !only.has(doc.rel)) continue;
      const stamp = stampOf(this.c, doc.rel);
      if (stamp === undefined) {
        this.close(server, doc);
        events.push({ uri: doc.uri, type: 3 });
      } else if (stamp !== doc.stamp) {
        try {
          const f = readWorkspaceFile(this.c, doc.rel);
          this.sendChange(server, doc, f.text, f.stamp);
          events.push({ uri: doc.uri, type: 2 });
        } catch {
          this.close(server, doc);
        }
      }
    }
    if (events.length > 0 && !only) server.notify('workspace/didChangeWatchedFiles', { changes: events });
  }

  /**
   * Atelier's own file methods changed these (real, root-relative) paths: every running server is
   * told, after the write's reply. Changes are gathered for CHANGE_GATHER_MS after the last one (at
   * most CHANGE_GATHER_MAX_MS), so a burst of writes reaches a server as one notification instead of
   * one re-analysis per write; a code.* call sends what is gathered before it asks.
   */
  changed(rels: string[]): void {
    if (this.runningIds().length === 0) return;
    const now = Date.now();
    if (this.gathered.size === 0) this.gatheredSince = now;
    for (const rel of rels.slice(0, 2000)) if (this.gathered.size < 2000) this.gathered.add(rel);
    if (this.gatherTimer) clearTimeout(this.gatherTimer);
    const wait = Math.max(0, Math.min(CHANGE_GATHER_MS, this.gatheredSince + CHANGE_GATHER_MAX_MS - now));
    this.gatherTimer = setTimeout(() => this.flushChanges(), wait);
    this.gatherTimer.unref();
  }

  /** Sends the gathered changes: open documents re-read, and workspace/didChangeWatchedFiles to every running server. */
  flushChanges(): void {
    if (this.gatherTimer) clearTimeout(this.gatherTimer);
    this.gatherTimer = undefined;
    if (this.gathered.size === 0) return;
    const set = this.gathered;
    this.gathered = new Set();
    // Whether each path is there now, read once for every server.
    const files = [...set].map((rel) => ({ rel, uri: this.uriOf(rel), gone: stampOf(this.c, rel) === undefined }));
    for (const slot of this.slots.values()) {
      const server = slot.server;
      if (!server || server.exited) continue;
      try {
        this.resync(server, set);
        const changes = files.map((f) => ({ uri: f.uri, type: f.gone ? 3 : server.docs.has(f.uri) ? 2 : 1 }));
        server.notify('workspace/didChangeWatchedFiles', { changes });
      } catch {
        // a server's trouble is never a write's
      }
    }
  }

  /** Every slot's history (host.ts hands it to the daemon, which gives it to the next host). */
  history(): ManagerHistory {
    const slots: ManagerHistory['slots'] = Object.create(null) as ManagerHistory['slots'];
    for (const [id, s] of this.slots) {
      if (!s.everStarted && s.crashes.length === 0 && s.requests === 0) continue;
      slots[id] = { crashes: [...s.crashes], restarts: s.restarts, ...(s.lastExit ? { lastExit: { ...s.lastExit } } : {}), everStarted: s.everStarted, requests: s.requests, ...(s.clangdDb ? { clangdDb: { ...s.clangdDb } } : {}) };
    }
    for (const [id, p] of this.past) if (!slots[id]) slots[id] = p;
    return { slots, running: this.runningIds() };
  }

  /**
   * Takes up the history an earlier host left (its servers' crashes, restarts, last exits). Servers
   * it had running when it ended unasked (`lostReason`) count as crashed, with that reason.
   */
  adopt(h: ManagerHistory, lostReason?: string): void {
    const now = Date.now();
    for (const [id, past] of Object.entries(h.slots ?? {}) as Array<[ServerId, SlotHistory]>) {
      if (!past || typeof past !== 'object') continue;
      // A built-in server, or an operator's one (named by the settings later).
      if (!allServers().some((x) => x.id === id) && !/^custom:[A-Za-z0-9][\w.-]{0,63}$/.test(id)) continue;
      const taken: SlotHistory = {
        crashes: Array.isArray(past.crashes) ? past.crashes.filter((t) => typeof t === 'number').slice(-LSP_LIMITS.maxCrashes * 4) : [],
        restarts: typeof past.restarts === 'number' ? past.restarts : 0,
        everStarted: past.everStarted === true,
        requests: typeof past.requests === 'number' ? past.requests : 0,
        ...(past.lastExit ? { lastExit: past.lastExit } : {}),
        ...(past.clangdDb ? { clangdDb: past.clangdDb } : {}),
      };
      if (lostReason && Array.isArray(h.running) && h.running.includes(id)) {
        taken.crashes.push(now);
        taken.lastExit = { at: new Date(now).toISOString(), reason: lostReason, expected: false };
      }
      // An operator's server is known only once a call's settings name it: its slot takes this up when made.
      const slot = this.slots.get(id);
      if (slot) Object.assign(slot, taken);
      else this.past.set(id, taken);
    }
  }

  /** Whether nothing runs, starts or is being answered (host.ts may end). */
  quiet(): boolean {
    for (const s of this.slots.values()) if (s.busy > 0 || s.starting || (s.server && !s.server.exited)) return false;
    return true;
  }

  /** How often a server was started again (after a crash or an idle stop). */
  restartsOf(id: ServerId): number {
    return this.slots.get(id)?.restarts ?? 0;
  }

  /** The servers that are running now. */
  runningIds(): ServerId[] {
    return [...this.slots.values()].filter((s) => s.server && !s.server.exited).map((s) => s.spec.id);
  }

  status(): ServerStatus[] {
    const now = Date.now();
    for (const spec of allServers()) this.slotOf(spec.id);
    return [...this.slots.values()].map((slot) => {
      const launch = launchOf(slot.spec.id, this.opts.nodePath, this.opts.home);
      const s = slot.server && !slot.server.exited ? slot.server : undefined;
      const crashesInWindow = slot.crashes.filter((t) => now - t < LSP_LIMITS.crashWindowMs).length;
      const state: ServerStatus['state'] = this.disabled.has(slot.spec.id)
        ? 'disabled'
        : 'missing' in launch
          ? 'not_installed'
          : s
            ? 'running'
            : slot.starting
              ? 'starting'
              : crashesInWindow >= LSP_LIMITS.maxCrashes
                ? 'crashed'
                : 'stopped';
      const memoryBytes = s ? treeRssBytes(s.pid) : undefined;
      return {
        server: slot.spec.id,
        title: slot.spec.title,
        state,
        ...(s ? { pid: s.pid, startedAt: new Date(s.startedAt).toISOString(), openDocuments: s.docs.size } : {}),
        ...(memoryBytes !== undefined ? { memoryBytes } : {}),
        restarts: slot.restarts,
        crashesInWindow,
        ...(slot.lastExit ? { lastExit: slot.lastExit } : {}),
        ...('missing' in launch ? { missing: launch.missing } : {}),
        runsNoRepositoryCode: slot.spec.runsNoRepositoryCode,
        requests: slot.requests,
        ...(slot.clangdDb ? { compileDatabase: { source: slot.clangdDb.source, entries: slot.clangdDb.entries, removedFlags: slot.clangdDb.removedFlags, ...(slot.clangdDb.note ? { note: slot.clangdDb.note } : {}) } } : {}),
      };
    });
  }

  /** Stops every server (the daemon is going away, or a test). */
  async stopAll(): Promise<void> {
    if (this.gatherTimer) clearTimeout(this.gatherTimer);
    await Promise.all(
      [...this.slots.values()].map(async (slot) => {
        const s = slot.server;
        slot.server = undefined;
        if (slot.idle) clearTimeout(slot.idle);
        if (s) await s.stop(500);
      }),
    );
  }
}

/** The refusal when no server can answer: which server would, why it is not there, and what still answers. */
export function unavailable(spec: ServerSpec | null, reason: Unavailable, message: string, details: Record<string, unknown> = {}): DaemonError {
  return new DaemonError('FAILED_PRECONDITION', `${message}. symbols_search and symbols_references (ctags and whole-word search) still answer for this file`, {
    ...details,
    server: spec?.id ?? null,
    reason,
    fallback: ['symbols_search', 'symbols_references'],
  });
}
