/**
 * Memory notes (spec "Repository extensions", memories_*): named notes in the owner, repository or
 * workspace scope. A repository note is keyed by the workspace's normalised repository URL, so it
 * follows the repository into every new workspace. Decisions are in docs/knowledge.md.
 */
import { startSweeper, type Sweeper } from '../core/sweeper.js';
import { createHash } from 'node:crypto';
import type { DB } from '../store/db.js';
import { tx } from '../store/db.js';
import type { CursorCodec } from '../core/cursor.js';
import { ServiceError } from '../core/errors.js';
import { newId } from '../core/ids.js';
import type { WorkspaceService } from './workspaces/index.js';
import { parseRepoUrl } from './repos/index.js';

export type MemoryScope = 'owner' | 'repository' | 'workspace';
const SCOPES: MemoryScope[] = ['owner', 'repository', 'workspace'];

export interface RetentionClock {
  /** Milliseconds one retention second lasts (1000 unless a test shortens it). */
  secondMs: number;
}

export interface MemoryServiceDeps {
  db: DB;
  cursors: CursorCodec;
  workspaces: WorkspaceService;
  clock: RetentionClock;
}

interface NoteRow {
  id: string;
  owner_id: string;
  scope: MemoryScope;
  scope_key: string;
  name: string;
  content: string;
  tags_json: string;
  generation: number;
  retention_seconds: number | null;
  expires_at_ms: number | null;
  created_at: string;
  updated_at: string;
}

/** The repository key of a URL: scheme and host lowercased, default port, no trailing slash or ".git". */
export function repositoryKey(url: string): string {
  let href: string;
  try {
    href = parseRepoUrl(url).url;
  } catch {
    href = url.trim();
  }
  href = href.replace(/\/+$/, '');
  return href.endsWith('.git') ? href.slice(0, -4) : href;
}

/**
 * The refusal of a call that needs a workspace and has none (issue #36 item 4): owner-scoped notes
 * and knowledge items need no workspace; every other scope does, and says so naming the field.
 */
export function workspaceNeeded(tool: string, what: string): ServiceError {
  return new ServiceError(
    'FAILED_PRECONDITION',
    `${tool}: workspaceId: not given and there is no active workspace; ${what} needs one (pass workspaceId, or call workspace_open or workspace_set_active first); only the owner scope works without a workspace (scope: owner)`,
    { field: 'workspaceId', rule: 'a workspace is required outside the owner scope' },
  );
}

export function digest(value: unknown): string {
  return createHash('sha256').update(JSON.stringify(value)).digest('base64url').slice(0, 12);
}

/** Tag filter: all = every tag present; any = at least one. */
export function tagsMatch(have: string[], want: string[] | undefined, mode: 'all' | 'any'): boolean {
  if (!want || want.length === 0) return true;
  const set = new Set(have);
  return mode === 'all' ? want.every((t) => set.has(t)) : want.some((t) => set.has(t));
}

export function uniqueTags(tags: string[]): string[] {
  return [...new Set(tags)];
}

export class MemoryService {
  private sweeper: Sweeper | undefined;
  constructor(private readonly deps: MemoryServiceDeps) {}

  /** The scope key of a scope as seen from a workspace (none: only the owner scope has one). */
  private scopeKey(scope: MemoryScope, workspaceId: string | undefined, tool: string): string {
    if (scope === 'owner') return '';
    if (workspaceId === undefined) throw workspaceNeeded(tool, `the ${scope} scope`);
    if (scope === 'workspace') {
      this.deps.workspaces.get(workspaceId);
      return workspaceId;
    }
    return repositoryKey(this.deps.workspaces.get(workspaceId).repositoryUrl);
  }

  /** (scope, key) pairs visible from a workspace: owner, its repository, itself. */
  private visible(workspaceId: string | undefined, scope: MemoryScope | undefined, tool: string): Array<[MemoryScope, string]> {
    if (workspaceId === undefined && scope === undefined) throw workspaceNeeded(tool, 'a call without scope (every scope visible from a workspace)');
    const scopes = scope ? [scope] : SCOPES;
    return scopes.map((s) => [s, this.scopeKey(s, workspaceId, tool)]);
  }

  private now(): number {
    return Date.now();
  }

  private expiresAt(retentionSeconds: number | undefined): number | null {
    return retentionSeconds === undefined ? null : this.now() + retentionSeconds * this.deps.clock.secondMs;
  }

  private describe(note: NoteRow, withContent: boolean) {
    const out: Record<string, unknown> = {
      memoryId: note.id,
      scope: note.scope,
      name: note.name,
      ...(note.scope === 'repository' ? { repository: note.scope_key } : {}),
      ...(note.scope === 'workspace' ? { workspaceId: note.scope_key } : {}),
      tags: JSON.parse(note.tags_json),
      generation: note.generation,
      size: note.content.length,
      retentionSeconds: note.retention_seconds,
      expiresAt: note.expires_at_ms === null ? null : new Date(note.expires_at_ms).toISOString(),
      createdAt: note.created_at,
      updatedAt: note.updated_at,
    };
    if (withContent) out.content = note.content;
    return out;
  }

  /** Live rows of the visible scopes (expired ones are never returned, and are removed here). */
  private rows(owner: string, pairs: Array<[MemoryScope, string]>): NoteRow[] {
    this.sweep();
    const where = pairs.map(() => '(scope = ? AND scope_key = ?)').join(' OR ');
    return this.deps.db
      .prepare(`SELECT * FROM memory_notes WHERE owner_id = ? AND (${where}) AND (expires_at_ms IS NULL OR expires_at_ms > ?) ORDER BY name, scope, id`)
      .all(owner, ...pairs.flat(), this.now()) as NoteRow[];
  }

  private find(owner: string, workspaceId: string | undefined, args: { memoryId?: string; name?: string; scope?: MemoryScope }, tool: string): NoteRow {
    const now = this.now();
    let note: NoteRow | undefined;
    if (args.memoryId) {
      note = this.deps.db.prepare('SELECT * FROM memory_notes WHERE id = ? AND owner_id = ?').get(args.memoryId, owner) as NoteRow | undefined;
      // A note of another workspace or repository is not visible from this one.
      if (note && note.scope !== 'owner' && note.scope_key !== this.scopeKey(note.scope, workspaceId, tool)) note = undefined;
    } else {
      // By name: the given scope, else the narrowest visible scope holding that name.
      for (const [s, k] of this.visible(workspaceId, args.scope, tool).reverse()) {
        note = this.deps.db.prepare('SELECT * FROM memory_notes WHERE owner_id = ? AND scope = ? AND scope_key = ? AND name = ?').get(owner, s, k, args.name) as NoteRow | undefined;
        if (note && (note.expires_at_ms === null || note.expires_at_ms > now)) break;
      }
    }
    if (!note || (note.expires_at_ms !== null && note.expires_at_ms <= now)) {
      const what = args.memoryId ? `memoryId: no memory note ${args.memoryId}` : `name: no memory note named ${args.name}${args.scope ? ` in the ${args.scope} scope` : ' in any scope visible from this workspace'}`;
      throw new ServiceError('NOT_FOUND', `${tool}: ${what}`, { field: args.memoryId ? 'memoryId' : 'name' });
    }
    return note;
  }

  list(owner: string, workspaceId: string | undefined, args: { scope?: MemoryScope; tags?: string[]; limit: number; cursor?: string }) {
    const filter = digest([args.scope ?? null, args.tags ?? null]);
    let after: string | undefined;
    if (args.cursor) {
      const c = this.deps.cursors.decode<{ f?: string; a?: string }>('memories_list', args.cursor);
      if (c.f !== filter) throw new ServiceError('INVALID_ARGUMENT', 'cursor: issued for other filters; repeat the same scope and tags, or start without a cursor', { field: 'cursor' });
      after = c.a;
    }
    const all = this.rows(owner, this.visible(workspaceId, args.scope, 'memories_list')).filter((r) => tagsMatch(JSON.parse(r.tags_json), args.tags, 'all'));
    const keyOf = (r: NoteRow) => `${r.name}\u0000${r.scope}\u0000${r.id}`;
    const rest = after === undefined ? all : all.filter((r) => keyOf(r) > after!);
    const page = rest.slice(0, args.limit);
    const more = rest.length > page.length;
    return {
      notes: page.map((r) => this.describe(r, false)),
      count: page.length,
      nextCursor: more ? this.deps.cursors.encode('memories_list', { f: filter, a: keyOf(page[page.length - 1]!) }) : null,
    };
  }

  read(owner: string, workspaceId: string | undefined, args: { memoryId?: string; name?: string; scope?: MemoryScope }) {
    this.sweep();
    return this.describe(this.find(owner, workspaceId, args, 'memories_read'), true);
  }

  write(
    owner: string,
    workspaceId: string | undefined,
    args: { scope: MemoryScope; name: string; content: string; tags: string[]; retentionSeconds?: number; expectedGeneration: number },
  ) {
    const key = this.scopeKey(args.scope, workspaceId, 'memories_write');
    const tags = uniqueTags(args.tags);
    return tx(this.deps.db, () => {
      const now = this.now();
      const iso = new Date(now).toISOString();
      this.deps.db.prepare('DELETE FROM memory_notes WHERE owner_id = ? AND scope = ? AND scope_key = ? AND name = ? AND expires_at_ms IS NOT NULL AND expires_at_ms <= ?').run(owner, args.scope, key, args.name, now);
      const cur = this.deps.db.prepare('SELECT * FROM memory_notes WHERE owner_id = ? AND scope = ? AND scope_key = ? AND name = ?').get(owner, args.scope, key, args.name) as NoteRow | undefined;
      const have = cur?.generation ?? 0;
      if (have !== args.expectedGeneration) {
        const msg = cur
          ? `expectedGeneration: the note ${args.name} (${args.scope} scope) is at generation ${have}, not ${args.expectedGeneration}; read it again and retry with expectedGeneration ${have}`
          : `expectedGeneration: no note ${args.name} exists in the ${args.scope} scope; pass expectedGeneration 0 to create it`;
        throw new ServiceError('CONFLICT', `memories_write: ${msg}`, { field: 'expectedGeneration', currentGeneration: have, ...(cur ? { memoryId: cur.id } : {}) });
      }
      const expires = args.retentionSeconds !== undefined ? this.expiresAt(args.retentionSeconds) : null;
      if (!cur) {
        const id = newId('memory');
        this.deps.db
          .prepare('INSERT INTO memory_notes (id, owner_id, scope, scope_key, name, content, tags_json, generation, retention_seconds, expires_at_ms, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, 1, ?, ?, ?, ?)')
          .run(id, owner, args.scope, key, args.name, args.content, JSON.stringify(tags), args.retentionSeconds ?? null, expires, iso, iso);
      } else {
        this.deps.db
          .prepare('UPDATE memory_notes SET content = ?, tags_json = ?, generation = generation + 1, retention_seconds = ?, expires_at_ms = ?, updated_at = ? WHERE id = ?')
          .run(args.content, JSON.stringify(tags), args.retentionSeconds ?? null, expires, iso, cur.id);
      }
      const row = this.deps.db.prepare('SELECT * FROM memory_notes WHERE owner_id = ? AND scope = ? AND scope_key = ? AND name = ?').get(owner, args.scope, key, args.name) as NoteRow;
      return { ...this.describe(row, false), created: !cur };
    });
  }

  search(
    owner: string,
    workspaceId: string | undefined,
    args: { query: string; scope?: MemoryScope; tags?: string[]; tagMatch: 'all' | 'any'; limit: number; cursor?: string },
  ) {
    const filter = digest([args.query, args.scope ?? null, args.tags ?? null, args.tagMatch]);
    let offset = 0;
    if (args.cursor) {
      const c = this.deps.cursors.decode<{ f?: string; o?: number }>('memories_search', args.cursor);
      if (c.f !== filter) throw new ServiceError('INVALID_ARGUMENT', 'cursor: issued for another query or filters; repeat the same query, scope and tags, or start without a cursor', { field: 'cursor' });
      offset = c.o ?? 0;
    }
    const needle = args.query.toLowerCase();
    const hits: Array<{ r: NoteRow; score: number; count: number; where: string[] }> = [];
    for (const note of this.rows(owner, this.visible(workspaceId, args.scope, 'memories_search'))) {
      const tags: string[] = JSON.parse(note.tags_json);
      if (!tagsMatch(tags, args.tags, args.tagMatch)) continue;
      const inName = note.name.toLowerCase().includes(needle);
      const inTags = tags.some((t) => t.toLowerCase().includes(needle));
      const count = occurrences(note.content.toLowerCase(), needle);
      if (!inName && !inTags && count === 0) continue;
      const where = [...(inName ? ['name'] : []), ...(inTags ? ['tags'] : []), ...(count > 0 ? ['content'] : [])];
      // Ranking: a name hit first, then a tag hit, then how densely the content holds the text.
      const score = (inName ? 1000 : 0) + (inTags ? 100 : 0) + Math.min(99, count) + (count > 0 ? Math.min(0.99, (count * needle.length) / Math.max(1, note.content.length)) : 0);
      hits.push({ r: note, score, count, where });
    }
    hits.sort((x, y) => y.score - x.score || (x.r.updated_at < y.r.updated_at ? 1 : x.r.updated_at > y.r.updated_at ? -1 : 0) || (x.r.id < y.r.id ? -1 : 1));
    const page = hits.slice(offset, offset + args.limit);
    const next = offset + page.length;
    return {
      query: args.query,
      results: page.map((h, i) => ({
        ...this.describe(h.r, false),
        rank: offset + i + 1,
        matchedIn: h.where,
        occurrences: h.count,
        snippet: snippet(h.r.content, needle),
      })),
      count: page.length,
      total: hits.length,
      nextCursor: next < hits.length ? this.deps.cursors.encode('memories_search', { f: filter, o: next }) : null,
    };
  }

  delete(owner: string, workspaceId: string | undefined, args: { memoryId?: string; name?: string; scope?: MemoryScope; expectedGeneration: number }) {
    return tx(this.deps.db, () => {
      const note = this.find(owner, workspaceId, args, 'memories_delete');
      if (note.generation !== args.expectedGeneration) {
        throw new ServiceError(
          'CONFLICT',
          `memories_delete: expectedGeneration: the note ${note.name} is at generation ${note.generation}, not ${args.expectedGeneration}; nothing was deleted (read it again and retry with expectedGeneration ${note.generation})`,
          { field: 'expectedGeneration', currentGeneration: note.generation, memoryId: note.id },
        );
      }
      this.deps.db.prepare('DELETE FROM memory_notes WHERE id = ?').run(note.id);
      return { memoryId: note.id, scope: note.scope, name: note.name, deleted: true, generation: note.generation };
    });
  }

  /** Removes expired notes; returns how many. */
  sweep(): number {
    return this.deps.db.prepare('DELETE FROM memory_notes WHERE expires_at_ms IS NOT NULL AND expires_at_ms <= ?').run(this.now()).changes;
  }

  start(intervalMs: number): void {
    this.sweeper = startSweeper(() => this.sweep(), intervalMs);
  }

  stop(): void {
    this.sweeper?.stop();
  }
}

function occurrences(hay: string, needle: string): number {
  let n = 0;
  for (let i = hay.indexOf(needle); i !== -1; i = hay.indexOf(needle, i + needle.length)) n++;
  return n;
}

/** Up to 160 characters around the first hit in the content. */
export function snippet(content: string, needleLower: string): string {
  const at = content.toLowerCase().indexOf(needleLower);
  if (at < 0) return content.slice(0, 160);
  const start = Math.max(0, at - 60);
  return (start > 0 ? '…' : '') + content.slice(start, start + 160) + (start + 160 < content.length ? '…' : '');
}

/** What the methods above answer, by name (the shapes are the code's own, inferred by the compiler). */
export type MemoryListResult = Awaited<ReturnType<MemoryService['list']>>;
export type MemoryReadResult = Awaited<ReturnType<MemoryService['read']>>;
export type MemoryWriteResult = Awaited<ReturnType<MemoryService['write']>>;
export type MemorySearchResult = Awaited<ReturnType<MemoryService['search']>>;
export type MemoryDeleteResult = Awaited<ReturnType<MemoryService['delete']>>;
