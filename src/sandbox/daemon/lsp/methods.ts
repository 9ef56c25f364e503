/**
 * The daemon's code.* methods (issue #44): definition, references, hover, symbols, diagnostics,
 * rename (the edit set only: the runner writes it with fs.writeBatch) and status, each answered by
 * the file's language server through the manager.
 *
 * Imports node built-ins and sibling daemon files only.
 */
import { createHash } from 'node:crypto';
import type { Confinement } from '../files/index.js';
import { DaemonError } from '../protocol.js';
import type { CodeDiagnostic, CodeLocation, CodePoint, CodeResolved, CodeServerId, CodeSymbol, CodeRenameFile, ReplyOf } from '../protocol.js';
import type { CallContext, Handlers } from '../server.js';
import { LocationShaper } from './locations.js';
import type { Diagnostic } from 'vscode-languageserver-protocol/node';
import { ServerGone, type OpenDoc } from './client.js';
import { LSP_LIMITS, LspManager, readWorkspaceFile, type Session } from './manager.js';
import { Lines, occurrences, type LspPosition, type LspRange } from './positions.js';
import { allServers, type ServerId } from './servers.js';
import { filesByServer } from './walk.js';

export type CodeMethod = 'code.status' | 'code.definition' | 'code.references' | 'code.hover' | 'code.symbols' | 'code.diagnostics' | 'code.rename';

const invalid = (message: string, field: string): DaemonError => new DaemonError('INVALID_ARGUMENT', message, { field });

function obj(v: unknown): Record<string, unknown> {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw new DaemonError('INVALID_ARGUMENT', 'params must be an object');
  return v as Record<string, unknown>;
}

function intOf(v: unknown, field: string, min: number, max: number): number | undefined {
  if (v === undefined) return undefined;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) throw invalid(`${field} must be an integer from ${min} to ${max}`, field);
  return v;
}

function strOf(v: unknown, field: string, max: number): string | undefined {
  if (v === undefined) return undefined;
  if (typeof v !== 'string' || v.length === 0 || v.length > max || v.includes('\0')) throw invalid(`${field} must be a string of 1-${max} characters without NUL`, field);
  return v;
}

const SEVERITIES = ['error', 'warning', 'information', 'hint'] as const;

const SYMBOL_KINDS = ['', 'file', 'module', 'namespace', 'package', 'class', 'method', 'property', 'field', 'constructor', 'enum', 'interface', 'function', 'variable', 'constant', 'string', 'number', 'boolean', 'array', 'object', 'key', 'null', 'enumMember', 'struct', 'event', 'operator', 'typeParameter'];

interface Resolved {
  rel: string;
  lines: Lines;
  pos: LspPosition;
  uri: string;
  shown: CodeResolved;
}

interface LspDocumentSymbol {
  name: string;
  kind: number;
  detail?: string;
  range: LspRange;
  selectionRange: LspRange;
  children?: LspDocumentSymbol[];
}

interface LspSymbolInformation {
  name: string;
  kind: number;
  containerName?: string;
  location: { uri: string; range?: LspRange };
}

type Flat = { name: string; kind: number; detail?: string; container?: string; depth: number; uri: string; range: LspRange };

function flatten(result: unknown, uri: string): Flat[] {
  const out: Flat[] = [];
  if (!Array.isArray(result)) return out;
  // In source order (tsserver gives an outline sorted by name).
  const byPlace = (x: LspDocumentSymbol, y: LspDocumentSymbol): number => (x.range?.start.line ?? 0) - (y.range?.start.line ?? 0) || (x.range?.start.character ?? 0) - (y.range?.start.character ?? 0);
  const walk = (list: LspDocumentSymbol[], depth: number, container?: string): void => {
    for (const s of [...list].sort(byPlace)) {
      if (out.length >= 10_000) return;
      out.push({ name: s.name, kind: s.kind, ...(s.detail ? { detail: s.detail } : {}), ...(container ? { container } : {}), depth, uri, range: s.selectionRange ?? s.range });
      if (Array.isArray(s.children)) walk(s.children, depth + 1, s.name);
    }
  };
  if (result.length > 0 && 'location' in (result[0] as object)) {
    for (const s of result as LspSymbolInformation[]) {
      if (out.length >= 10_000) break;
      if (s.location?.range) out.push({ name: s.name, kind: s.kind, ...(s.containerName ? { container: s.containerName } : {}), depth: 0, uri: s.location.uri, range: s.location.range });
    }
  } else walk(result as LspDocumentSymbol[], 0);
  return out;
}

export class CodeMethods {
  readonly manager: LspManager;

  constructor(
    private readonly c: Confinement,
    opts: { nodePath: string; home: string },
  ) {
    this.manager = new LspManager(c, opts);
  }

  /** path + line + column, or path + symbol (+ line). */
  private async resolve(s: Session, p: Record<string, unknown>, serverId: ServerId): Promise<Resolved> {
    const path = p.path as string;
    const line = intOf(p.line, 'line', 1, 10_000_000);
    const column = intOf(p.column, 'column', 1, 10_000_000);
    const symbol = strOf(p.symbol, 'symbol', 256);
    const { doc, lines } = s.doc(path);
    if (column !== undefined) {
      if (line === undefined) throw invalid('line: give line with column (both 1-based), or symbol', 'line');
      if (symbol !== undefined) throw invalid('symbol: give either line and column, or symbol (with an optional line), not both', 'symbol');
      const pos = lines.toLsp({ line, column });
      return { rel: doc.rel, lines, pos, uri: doc.uri, shown: { server: serverId, restarts: this.manager.restartsOf(serverId), path: doc.rel, position: lines.fromLsp(pos) } };
    }
    if (symbol === undefined) throw invalid('symbol: give line and column (1-based), or symbol (a name in the file, with an optional line)', 'symbol');
    if (/\s/.test(symbol)) throw invalid('symbol: a name without spaces', 'symbol');
    // The file's outline first (a declaration of that name), then any whole-word occurrence.
    let candidates: LspPosition[] = [];
    if (s.server.capabilities.documentSymbolProvider) {
      const outline = flatten(await s.server.request('textDocument/documentSymbol', { textDocument: { uri: doc.uri } }, LSP_LIMITS.requestTimeoutMs), doc.uri);
      candidates = outline.filter((f) => f.name === symbol || f.name.replace(/\(.*$/, '') === symbol).map((f) => f.range.start);
      // The outline's range may start before the name (a keyword): move onto the name itself.
      candidates = candidates.map((c) => {
        const l = lines.line(c.line);
        const at = l.indexOf(symbol, c.character);
        return at >= 0 ? { line: c.line, character: at } : c;
      });
    }
    const words = occurrences(lines, symbol);
    const all = candidates.length > 0 ? candidates : words;
    let pos: LspPosition | undefined;
    if (line !== undefined) pos = all.find((c) => c.line === line - 1) ?? words.find((c) => c.line === line - 1);
    else pos = all[0];
    if (!pos) {
      const where = line !== undefined ? ` on line ${line}` : '';
      throw new DaemonError('NOT_FOUND', `symbol: ${symbol} does not appear in ${doc.rel}${where} as a whole word`, { field: 'symbol', path: doc.rel, ...(words.length > 0 ? { lines: [...new Set(words.map((w) => w.line + 1))].slice(0, 20) } : {}) });
    }
    const shown: CodeResolved = { server: serverId, restarts: this.manager.restartsOf(serverId), path: doc.rel, position: lines.fromLsp(pos), symbol, candidates: all.length };
    return { rel: doc.rel, lines, pos, uri: doc.uri, shown };
  }

  private serverOf(p: Record<string, unknown>): ServerId {
    const path = p.path;
    if (typeof path !== 'string' || path.length === 0) throw invalid('path must be a non-empty string (a workspace-relative file)', 'path');
    this.c.segments(path);
    const { spec } = this.manager.specFor(path);
    if (p.restricted === true && !spec.runsNoRepositoryCode) {
      throw new DaemonError('PERMISSION_DENIED', `path: ${spec.title} answers ${path}, and it may run the repository's toolchain: only a caller that could run exec_run may use it (docs/access.md)`, { field: 'path', server: spec.id, rule: 'runs commands: needs exec_run', fallback: ['symbols_search', 'symbols_references'] });
    }
    return spec.id;
  }

  private atPosition<T>(params: unknown, fn: (s: Session, r: Resolved, p: Record<string, unknown>, shaper: LocationShaper) => Promise<T>): Promise<T> {
    const p = obj(params);
    this.manager.configure(p.settings as never);
    const id = this.serverOf(p);
    return this.manager.with(id, async (s) => {
      const r = await this.resolve(s, p, id);
      const shaper = new LocationShaper(this.c);
      shaper.seed(r.rel, r.lines);
      return fn(s, r, p, shaper);
    });
  }

  async definition(params: unknown, ctx: CallContext): Promise<ReplyOf<'code.definition'>> {
    const kind = obj(params).kind ?? 'definition';
    const method = { definition: 'textDocument/definition', declaration: 'textDocument/declaration', typeDefinition: 'textDocument/typeDefinition', implementation: 'textDocument/implementation' }[kind as string];
    if (!method) throw invalid('kind must be one of definition, declaration, typeDefinition, implementation', 'kind');
    return this.atPosition(params, async (s, r, _p, shaper) => {
      const result = await s.server.request<unknown>(method, { textDocument: { uri: r.uri }, position: r.pos }, LSP_LIMITS.requestTimeoutMs, ctx.signal);
      return { ...r.shown, locations: locationsOf(result).slice(0, 200).map((l) => shaper.shape(l.uri, l.range)) };
    });
  }

  async references(params: unknown, ctx: CallContext): Promise<ReplyOf<'code.references'>> {
    const p0 = obj(params);
    const offset = intOf(p0.offset, 'offset', 0, 1_000_000) ?? 0;
    const limit = intOf(p0.limit, 'limit', 1, 1000) ?? 100;
    const includeDeclaration = p0.includeDeclaration === undefined ? true : p0.includeDeclaration === true;
    return this.atPosition(params, async (s, r, _p, shaper) => {
      const result = await s.server.request<unknown>('textDocument/references', { textDocument: { uri: r.uri }, position: r.pos, context: { includeDeclaration } }, LSP_LIMITS.requestTimeoutMs, ctx.signal);
      const all = locationsOf(result);
      // A stable order across pages: workspace files first by path, then line and column.
      const keyed = all.map((l) => ({ l, rel: shaper.relOf(l.uri) }));
      keyed.sort((a, b) => (a.rel === undefined ? 1 : 0) - (b.rel === undefined ? 1 : 0) || cmp(a.rel ?? a.l.uri, b.rel ?? b.l.uri) || a.l.range.start.line - b.l.range.start.line || a.l.range.start.character - b.l.range.start.character);
      const page = keyed.slice(offset, offset + limit).map((k) => shaper.shape(k.l.uri, k.l.range));
      return { ...r.shown, locations: page, total: all.length };
    });
  }

  async hover(params: unknown, ctx: CallContext): Promise<ReplyOf<'code.hover'>> {
    return this.atPosition(params, async (s, r) => {
      const result = await s.server.request<{ contents?: unknown; range?: LspRange } | null>('textDocument/hover', { textDocument: { uri: r.uri }, position: r.pos }, LSP_LIMITS.requestTimeoutMs, ctx.signal);
      let contents = hoverText(result?.contents);
      const cut = contents.length > 16_000;
      if (cut) contents = contents.slice(0, 16_000);
      return {
        ...r.shown,
        contents,
        ...(cut ? { contentsTruncated: true as const } : {}),
        ...(result?.range ? { range: { start: r.lines.fromLsp(result.range.start), end: r.lines.fromLsp(result.range.end) } } : {}),
      };
    });
  }

  /** The servers a workspace-wide call goes to: the one asked for, else the running ones, else those whose files the checkout has. */
  private workspaceServers(server: unknown, restricted: boolean): { ids: ServerId[]; files: Map<ServerId, string[]> } {
    const files = filesByServer(this.c.root, 100);
    if (server !== undefined) {
      const spec = allServers().find((s) => s.id === server);
      if (typeof server !== 'string' || !spec) throw invalid(`server must be one of ${allServers().map((s) => s.id).join(', ')}`, 'server');
      if (restricted && !spec.runsNoRepositoryCode) throw new DaemonError('PERMISSION_DENIED', `server: ${spec.title} may run the repository's toolchain: only a caller that could run exec_run may use it (docs/access.md)`, { field: 'server', server: spec.id, rule: 'runs commands: needs exec_run' });
      return { ids: [server as ServerId], files };
    }
    const running = this.manager.runningIds();
    const ids = (running.length > 0 ? running : [...files.keys()]).filter((id) => !restricted || allServers().find((s) => s.id === id)!.runsNoRepositoryCode);
    if (ids.length === 0) throw new DaemonError('FAILED_PRECONDITION', `no file of this checkout is served by a language server (servers cover ${allServers().flatMap((s) => Object.keys(s.extensions)).join(' ')}); symbols_search and symbols_references still answer`, { reason: 'no_server', server: null, fallback: ['symbols_search', 'symbols_references'] });
    return { ids, files };
  }

  async symbols(params: unknown, ctx: CallContext): Promise<ReplyOf<'code.symbols'>> {
    const p = obj(params);
    this.manager.configure(p.settings as never);
    const maxResults = intOf(p.maxResults, 'maxResults', 1, 1000) ?? 200;
    const query = p.query === undefined ? undefined : typeof p.query === 'string' && p.query.length <= 256 && !p.query.includes('\0') ? p.query : (() => { throw invalid('query must be a string of at most 256 characters', 'query'); })();
    if (typeof p.path === 'string') {
      if (query !== undefined) throw invalid('query: give path (a file\'s outline) or query (workspace symbols), not both', 'query');
      const id = this.serverOf(p);
      return this.manager.with(id, async (s) => {
        const { doc, lines } = s.doc(p.path as string);
        const shaper = new LocationShaper(this.c);
        shaper.seed(doc.rel, lines);
        const flat = flatten(await s.server.request('textDocument/documentSymbol', { textDocument: { uri: doc.uri } }, LSP_LIMITS.requestTimeoutMs, ctx.signal), doc.uri);
        return { servers: [id], symbols: flat.slice(0, maxResults).map((f) => symbolOf(f, shaper)), total: flat.length, truncated: flat.length > maxResults };
      });
    }
    if (p.path !== undefined) throw invalid('path must be a non-empty string', 'path');
    if (query === undefined) throw invalid('query: give path (a file\'s outline) or query (workspace symbols)', 'query');
    const { ids, files } = this.workspaceServers(p.server, p.restricted === true);
    const out: CodeSymbol[] = [];
    let total = 0;
    for (const id of ids) {
      await this.manager.with(id, async (s) => {
        // A server loads a project from an open file (tsserver answers workspace symbols only then).
        const first = files.get(id)?.[0];
        if (s.server.docs.size === 0 && first) {
          try {
            s.doc(first);
          } catch {
            // the server answers from what it has
          }
        }
        const shaper = new LocationShaper(this.c);
        const result = await s.server.request<unknown>('workspace/symbol', { query }, LSP_LIMITS.requestTimeoutMs, ctx.signal);
        const flat = flatten(result, '');
        total += flat.length;
        for (const f of flat) if (out.length < maxResults) out.push(symbolOf(f, shaper));
      });
    }
    return { servers: ids, symbols: out, total, truncated: total > out.length };
  }

  async diagnostics(params: unknown, ctx: CallContext): Promise<ReplyOf<'code.diagnostics'>> {
    const p = obj(params);
    this.manager.configure(p.settings as never);
    const waitMs = intOf(p.waitMs, 'waitMs', 0, 10_000) ?? 2000;
    const maxResults = intOf(p.maxResults, 'maxResults', 1, 2000) ?? 500;
    const minSeverity = p.minSeverity ?? 'hint';
    const floor = SEVERITIES.indexOf(minSeverity as never);
    if (floor < 0) throw invalid(`minSeverity must be one of ${SEVERITIES.join(', ')}`, 'minSeverity');
    const deadline = Date.now() + waitMs;
    const out: CodeDiagnostic[] = [];
    const pending: string[] = [];
    let files = 0;
    let total = 0;
    let ids: ServerId[];
    let targets: Map<ServerId, string[]>;
    if (typeof p.path === 'string') {
      const id = this.serverOf(p);
      ids = [id];
      targets = new Map([[id, [p.path]]]);
    } else {
      if (p.path !== undefined) throw invalid('path must be a non-empty string', 'path');
      const w = this.workspaceServers(undefined, p.restricted === true);
      ids = w.ids;
      targets = w.files;
    }
    for (const id of ids) {
      await this.manager.with(id, async (s) => {
        // One file of the workspace that cannot be given to the server (too large, gone meanwhile) is left out, not the call's failure.
        const single = typeof p.path === 'string';
        const opened: OpenDoc[] = [];
        for (const rel of targets.get(id) ?? []) {
          try {
            opened.push(s.doc(rel).doc);
          } catch (err) {
            if (single) throw err;
          }
        }
        pending.push(...(await this.settle(s, opened, deadline, ctx.signal)));
        const shaper = new LocationShaper(this.c);
        const only = typeof p.path === 'string' ? new Set(opened.map((d) => d.uri)) : undefined;
        for (const [uri, pub] of s.server.diagnostics) {
          if (only && !only.has(uri)) continue;
          const rel = shaper.relOf(uri);
          if (rel === undefined) continue;
          files++;
          for (const d of pub.items) {
            const sev = SEVERITIES[(d.severity ?? 1) - 1] ?? 'error';
            if (SEVERITIES.indexOf(sev) > floor) continue;
            total++;
            if (out.length >= maxResults) continue;
            out.push({ severity: sev, message: String(d.message).slice(0, 4000), ...(d.code !== undefined ? { code: String(d.code) } : {}), ...(d.source ? { source: String(d.source) } : {}), ...shaper.shape(uri, d.range) });
          }
        }
      });
    }
    out.sort((a, b) => cmp(a.path ?? '', b.path ?? '') || a.range.start.line - b.range.start.line || a.range.start.column - b.range.start.column);
    return { servers: ids, diagnostics: out, total, truncated: total > out.length, files, pending, complete: pending.length === 0 };
  }

  /**
   * Brings each document's diagnostics up to date with the text the daemon sent last, and returns
   * the paths still pending at the deadline. tsserver is asked directly (typescript-language-server
   * publishes in stages and never republishes an unchanged empty list, so waiting on pushes cannot
   * tell "no errors" from "not yet"); a server with pull diagnostics is pulled; any other is waited
   * on for a publish newer than the text (with the version when it sends one).
   */
  private async settle(s: Session, docs: OpenDoc[], deadline: number, signal: AbortSignal): Promise<string[]> {
    const server = s.server;
    const left = (): number => Math.max(1, deadline - Date.now());
    if (server.id === 'typescript' || server.capabilities.diagnosticProvider) {
      const pending: string[] = [];
      for (const d of docs) {
        if (signal.aborted) break;
        try {
          const items = server.id === 'typescript' ? await tsDiagnostics(s, d, Math.max(2000, left())) : await pullDiagnostics(s, d, Math.max(2000, left()));
          server.diagnostics.set(d.uri, { items, at: Date.now(), version: d.version });
        } catch (err) {
          if (err instanceof ServerGone) throw err;
          pending.push(d.rel);
        }
      }
      return pending;
    }
    const stale = (): OpenDoc[] =>
      docs.filter((d) => {
        const pub = server.diagnostics.get(d.uri);
        return !pub || pub.at < d.sentAt || (pub.version !== undefined && pub.version < d.version);
      });
    while (stale().length > 0 && Date.now() < deadline && !signal.aborted) await server.nextPublish(deadline - Date.now());
    return stale().map((d) => d.rel);
  }

  async rename(params: unknown, ctx: CallContext): Promise<ReplyOf<'code.rename'>> {
    const p0 = obj(params);
    const newName = p0.newName;
    if (typeof newName !== 'string' || newName.length === 0 || newName.length > 256 || /[\s\0]/.test(newName)) throw invalid('newName must be a name of 1-256 characters without spaces', 'newName');
    return this.atPosition(params, async (s, r) => {
      const edit = await s.server.request<WorkspaceEdit | null>('textDocument/rename', { textDocument: { uri: r.uri }, position: r.pos, newName }, LSP_LIMITS.requestTimeoutMs, ctx.signal);
      if (!edit) throw new DaemonError('FAILED_PRECONDITION', `${r.shown.path}:${r.shown.position.line}:${r.shown.position.column}: the language server cannot rename what is there (no symbol it knows)`, { field: r.shown.symbol ? 'symbol' : 'column' });
      const byUri = new Map<string, TextEdit[]>();
      for (const [uri, edits] of Object.entries(edit.changes ?? {})) byUri.set(uri, [...(byUri.get(uri) ?? []), ...edits]);
      for (const dc of edit.documentChanges ?? []) {
        if (!('textDocument' in dc)) throw new DaemonError('FAILED_PRECONDITION', `the rename would also ${dc.kind ?? 'change'} a file; only edits inside files are applied`, { field: 'newName' });
        byUri.set(dc.textDocument.uri, [...(byUri.get(dc.textDocument.uri) ?? []), ...dc.edits]);
      }
      if (byUri.size > 500) throw new DaemonError('RESOURCE_EXHAUSTED', `the rename touches ${byUri.size} files, more than 500`, { field: 'newName' });
      const shaper = new LocationShaper(this.c);
      const files: CodeRenameFile[] = [];
      let bytes = 0;
      for (const [uri, edits] of byUri) {
        const rel = shaper.relOf(uri);
        if (rel === undefined) throw new DaemonError('FAILED_PRECONDITION', `the rename would change a file outside the workspace (${shaper.shape(uri, edits[0]?.range ?? { start: { line: 0, character: 0 }, end: { line: 0, character: 0 } }).external?.path ?? 'unknown'}); nothing is changed`, { field: 'newName' });
        const f = readWorkspaceFile(this.c, rel, 'path', LSP_LIMITS.maxFileBytes);
        if (!Buffer.from(f.text, 'utf8').equals(f.bytes)) throw new DaemonError('FAILED_PRECONDITION', `${rel} is not valid UTF-8; a rename would change bytes it does not mean to`, { path: rel });
        const open = s.server.docs.get(uri);
        if (open && open.text !== f.text) throw new DaemonError('CONFLICT', `${rel} changed while the rename was computed; ask again`, { path: rel });
        const after = applyEdits(f.text, edits, rel);
        if (after === f.text) continue;
        bytes += f.bytes.length * 2;
        if (bytes > 16 * 1024 * 1024) throw new DaemonError('RESOURCE_EXHAUSTED', 'the rename changes more than 8 MiB of files', { field: 'newName' });
        files.push({ path: rel, sha256: createHash('sha256').update(f.bytes).digest('hex'), edits: edits.length, before: f.text, after });
      }
      files.sort((a, b) => cmp(a.path, b.path));
      return { ...r.shown, files };
    });
  }

  status(params: unknown): ReplyOf<'code.status'> {
    const p = params === undefined ? {} : obj(params);
    this.manager.configure(p.settings as never);
    return { servers: this.manager.status() };
  }
}

interface TextEdit {
  range: LspRange;
  newText: string;
}
interface WorkspaceEdit {
  changes?: Record<string, TextEdit[]>;
  documentChanges?: Array<{ textDocument: { uri: string }; edits: TextEdit[] } | { kind: string }>;
}

/** Applies LSP text edits (UTF-16 ranges, which are string indexes) from the last to the first; overlapping edits are refused. */
export function applyEdits(text: string, edits: TextEdit[], rel: string): string {
  const lines = new Lines(text);
  const spans = edits.map((e) => ({ s: lines.offset(e.range.start), e: lines.offset(e.range.end), t: String(e.newText) })).sort((a, b) => b.s - a.s || b.e - a.e);
  let out = text;
  let floor = Infinity;
  for (const sp of spans) {
    if (sp.e > floor || sp.s > sp.e) throw new DaemonError('INTERNAL', `the language server gave overlapping edits for ${rel}; nothing is changed`, { path: rel });
    out = out.slice(0, sp.s) + sp.t + out.slice(sp.e);
    floor = sp.s;
  }
  return out;
}

interface TsDiagnostic {
  start: { line: number; offset: number };
  end: { line: number; offset: number };
  text: string;
  code?: number;
  category?: string;
}

/** tsserver's syntactic and semantic diagnostics of one open file, asked synchronously (through typescript-language-server's typescript.tsserverRequest command). */
async function tsDiagnostics(s: Session, d: OpenDoc, timeoutMs: number): Promise<Diagnostic[]> {
  const out: Diagnostic[] = [];
  for (const command of ['syntacticDiagnosticsSync', 'semanticDiagnosticsSync']) {
    const r = await s.server.request<unknown>('workspace/executeCommand', { command: 'typescript.tsserverRequest', arguments: [command, { file: d.uri, includeLinePosition: false }] }, timeoutMs);
    const body = (r && typeof r === 'object' && 'body' in r ? (r as { body: unknown }).body : r) as TsDiagnostic[] | undefined;
    if (!Array.isArray(body)) throw new Error(`tsserver gave no ${command} answer`);
    for (const t of body.slice(0, 2000)) {
      if (!t?.start || !t.end) continue;
      const severity = t.category === 'warning' ? 2 : t.category === 'suggestion' ? 4 : t.category === 'message' ? 3 : 1;
      out.push({ range: { start: { line: t.start.line - 1, character: t.start.offset - 1 }, end: { line: t.end.line - 1, character: t.end.offset - 1 } }, message: String(t.text), severity: severity as Diagnostic['severity'], ...(t.code !== undefined ? { code: t.code } : {}), source: 'typescript' });
    }
  }
  return out;
}

/** LSP 3.17 pull diagnostics of one document. */
async function pullDiagnostics(s: Session, d: OpenDoc, timeoutMs: number): Promise<Diagnostic[]> {
  const r = await s.server.request<{ kind?: string; items?: Diagnostic[] }>('textDocument/diagnostic', { textDocument: { uri: d.uri } }, timeoutMs);
  if (r?.kind === 'unchanged') return s.server.diagnostics.get(d.uri)?.items ?? [];
  return Array.isArray(r?.items) ? r.items.slice(0, 2000) : [];
}

function locationsOf(result: unknown): Array<{ uri: string; range: LspRange }> {
  const list = result === null || result === undefined ? [] : Array.isArray(result) ? result : [result];
  const out: Array<{ uri: string; range: LspRange }> = [];
  for (const l of list as Array<Record<string, unknown>>) {
    if (typeof l?.targetUri === 'string') out.push({ uri: l.targetUri, range: (l.targetSelectionRange ?? l.targetRange) as LspRange });
    else if (typeof l?.uri === 'string' && l.range) out.push({ uri: l.uri, range: l.range as LspRange });
  }
  return out;
}

function hoverText(contents: unknown): string {
  if (contents === undefined || contents === null) return '';
  if (typeof contents === 'string') return contents;
  if (Array.isArray(contents)) return contents.map(hoverText).filter(Boolean).join('\n\n');
  const c = contents as { value?: unknown; language?: unknown; kind?: unknown };
  if (typeof c.value === 'string') return typeof c.language === 'string' ? '```' + c.language + '\n' + c.value + '\n```' : c.value;
  return '';
}

function symbolOf(f: Flat, shaper: LocationShaper): CodeSymbol {
  return { name: f.name, kind: SYMBOL_KINDS[f.kind] || 'unknown', ...(f.detail ? { detail: f.detail.slice(0, 300) } : {}), ...(f.container ? { container: f.container } : {}), depth: f.depth, ...shaper.shape(f.uri, f.range) } as CodeSymbol;
}

function cmp(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/** Every code.* method (the daemon's side, remote.ts, forwards each of them to the host). */
export const CODE_METHODS = Object.keys({
  'code.status': 0,
  'code.definition': 0,
  'code.references': 0,
  'code.hover': 0,
  'code.symbols': 0,
  'code.diagnostics': 0,
  'code.rename': 0,
} satisfies Record<CodeMethod, 0>) as CodeMethod[];

export function codeMethods(c: Confinement, opts: { nodePath: string; home: string }): { methods: Handlers<CodeMethod>; notify: (rels: string[]) => void; code: CodeMethods } {
  const code = new CodeMethods(c, opts);
  const methods: Handlers<CodeMethod> = {
    'code.status': (params) => code.status(params),
    'code.definition': (params, ctx) => code.definition(params, ctx),
    'code.references': (params, ctx) => code.references(params, ctx),
    'code.hover': (params, ctx) => code.hover(params, ctx),
    'code.symbols': (params, ctx) => code.symbols(params, ctx),
    'code.diagnostics': (params, ctx) => code.diagnostics(params, ctx),
    'code.rename': (params, ctx) => code.rename(params, ctx),
  };
  return { methods, notify: (rels) => code.manager.changed(rels), code };
}

export type { CodeLocation, CodePoint, CodeServerId };
