/**
 * The knowledge store (spec "Knowledge store"), in three modules: this one (KnowledgeStore: the
 * items, their links and graph, and the upkeep of their full-text rows and vectors), search.ts
 * (KnowledgeService, the store with its searches: lexical, expanded, semantic and their fusion)
 * and ranking.ts (the weights and texts the ranking uses).
 *
 * Size: over 600 lines because creating, updating and deleting an item keeps its full-text rows,
 * its vector and its embedding queue in step in one transaction; the parts that only read them
 * are in search.ts.
 *
 * Memory and journal items in the owner, project or
 * workspace scope, links between them, a graph walk, and hybrid search: SQLite FTS5 (BM25) fused
 * with cosine similarity of local embeddings (src/services/knowledge/embedder.ts) by reciprocal
 * rank fusion. Embedding runs in a worker thread off the request path; items not yet embedded are
 * still found lexically, and every answer says which mode answered. Decisions: docs/knowledge.md.
 */
import { startSweeper, type Sweeper } from '../../core/sweeper.js';
import type Database from 'better-sqlite3';
import type { DB } from '../../store/db.js';
import { tx } from '../../store/db.js';
import type { CursorCodec } from '../../core/cursor.js';
import { ServiceError } from '../../core/errors.js';
import { newId } from '../../core/ids.js';
import { EMBEDDING_MODEL, Embedder, MODEL_LABEL, cosine, fromBlob, rankBySimilarity, toBlob } from './embedder.js';
import { VectorIndex } from './vector-index.js';
import { ftsText } from './code-words.js';
import { EXPANSION_SOURCE, QueryExpander } from './expansion.js';
import { DEFAULT_RANKING, FTS_RECIPE, embedText, sha, type RankingOptions } from './ranking.js';
import type { RetentionClock } from '../memories.js';
import { digest, uniqueTags, workspaceNeeded } from '../memories.js';

export { Embedder, EMBEDDING_MODEL, MODEL_LABEL, rankBySimilarity, cosine, EXPANSION_SOURCE };

export type Kind = 'memory' | 'journal';
export type Scope = 'owner' | 'project' | 'workspace';
export type JournalType = 'engineering-log' | 'decision-record' | 'session-reflection';
export type Relation = 'relates-to' | 'references' | 'supports' | 'contradicts' | 'supersedes';
export type SearchMode = 'hybrid' | 'lexical' | 'semantic';

export interface KnowledgeServiceDeps {
  db: DB;
  cursors: CursorCodec;
  clock: RetentionClock;
  embedder: Embedder;
  /** Throws NOT_FOUND for an unknown workspace (optional: the benchmark has no workspaces). */
  checkWorkspace?: (id: string) => void;
  /** How searches rank (default DEFAULT_RANKING); for the benchmark's variants. */
  ranking?: Partial<RankingOptions>;
}

export interface ItemRow {
  seq: number;
  id: string;
  owner_id: string;
  kind: Kind;
  scope: Scope;
  workspace_id: string | null;
  project_id: string | null;
  title: string;
  content: string;
  journal_type: JournalType | null;
  occurred_at: number | null;
  tags_json: string;
  generation: number;
  retention_seconds: number | null;
  expires_at_ms: number | null;
  created_at: string;
  updated_at: string;
  deleted_at: string | null;
  embed_text_sha: string;
  embedding_sha: string | null;
  embedding_model: string | null;
}

interface LinkRow {
  id: string;
  source_id: string;
  target_id: string;
  relation: Relation;
  generation: number;
  created_at: string;
  deleted_at: string | null;
}

/** What the vector scan needs to filter without touching the database. */
export interface VectorMeta {
  seq: number;
  owner: string;
  kind: Kind;
  scope: Scope;
  workspaceId: string | null;
  projectId: string | null;
  journalType: JournalType | null;
  tags: string[];
  expiresAt: number | null;
}

export interface Filters {
  kinds?: Kind[];
  scope?: Scope;
  projectId?: string;
  journalType?: JournalType;
  tags?: string[];
  tagMatch: 'all' | 'any';
}

export class KnowledgeStore {
  private sweeper: Sweeper | undefined;
  /** One exact index per owner (src/services/knowledge/vector-index.ts), loaded on first use. */
  private vectors: Map<string, VectorIndex<VectorMeta>> | undefined;
  private embedding = false;
  private stopped = false;
  protected readonly queryCache = new Map<string, Float32Array>();
  private readonly statements = new Map<string, Database.Statement<unknown[]>>();
  /** WordNet expansions of the query (src/services/knowledge/expansion.ts), opened lazily. */
  readonly expander = new QueryExpander();
  /** How searches rank (ranking.ts); the benchmark changes it between runs. */
  readonly ranking: RankingOptions;

  constructor(protected readonly deps: KnowledgeServiceDeps) {
    this.ranking = { expansion: deps.ranking?.expansion ?? DEFAULT_RANKING.expansion, feedback: { ...(deps.ranking?.feedback ?? DEFAULT_RANKING.feedback) } };
    // The stemmed full-text table of the expanded list: contentless (it only matches and ranks;
    // the text is in knowledge_fts), created here and filled by upgradeFts (recipe 3), not by a
    // migration. Same rows and rowids as knowledge_fts.
    deps.db.exec(
      "CREATE VIRTUAL TABLE IF NOT EXISTS knowledge_fts_stem USING fts5(title, content, tags, content = '', contentless_delete = 1, tokenize = 'porter unicode61 remove_diacritics 2')",
    );
  }

  get embedder(): Embedder {
    return this.deps.embedder;
  }

  /** Unit vectors for texts with the local model (for other services, e.g. skill_suggest); null when it is not ready. */
  async embedTexts(texts: string[]): Promise<Float32Array[] | null> {
    if (this.deps.embedder.state !== 'ready') return null;
    try {
      return await this.deps.embedder.embed(texts);
    } catch {
      return null;
    }
  }

  /** A prepared statement, kept for the next call (the search path's statements, a few shapes each). */
  protected stmt(sql: string): Database.Statement<unknown[]> {
    let st = this.statements.get(sql);
    if (!st) {
      st = this.deps.db.prepare<unknown[]>(sql);
      if (this.statements.size < 200) this.statements.set(sql, st);
    }
    return st;
  }

  protected now(): number {
    return Date.now();
  }

  private live(item: ItemRow | undefined): boolean {
    return !!item && item.deleted_at === null && (item.expires_at_ms === null || item.expires_at_ms > this.now());
  }

  private item(owner: string, id: string, field = 'id', tool = 'knowledge'): ItemRow {
    const r = this.deps.db.prepare('SELECT * FROM knowledge_items WHERE id = ? AND owner_id = ?').get(id, owner) as ItemRow | undefined;
    if (!r || !this.live(r)) throw new ServiceError('NOT_FOUND', `${tool}: ${field}: no knowledge item ${id}${r && r.deleted_at ? ' (it was deleted)' : ''}`, { field });
    return r;
  }

  protected describe(item: ItemRow, withContent: boolean) {
    const out: Record<string, unknown> = {
      id: item.id,
      kind: item.kind,
      scope: item.scope,
      projectId: item.project_id,
      workspaceId: item.workspace_id,
      title: item.title,
      journalType: item.journal_type,
      occurredAt: item.occurred_at,
      tags: JSON.parse(item.tags_json),
      generation: item.generation,
      retentionSeconds: item.retention_seconds,
      expiresAt: item.expires_at_ms === null ? null : new Date(item.expires_at_ms).toISOString(),
      createdAt: item.created_at,
      updatedAt: item.updated_at,
      embedded: item.embedding_sha !== null && item.embedding_sha === item.embed_text_sha,
    };
    if (withContent) out.content = item.content;
    return out;
  }

  private ensureProject(owner: string, projectId: string): void {
    this.deps.db.prepare('INSERT OR IGNORE INTO knowledge_projects (id, owner_id, created_at) VALUES (?, ?, ?)').run(projectId, owner, new Date().toISOString());
  }

  private checkJournal(kind: Kind, journalType: JournalType | undefined | null, tool: string): void {
    if (kind === 'memory' && journalType) {
      throw new ServiceError('INVALID_ARGUMENT', `${tool}: journalType: only journal items have a journalType (this item is kind memory)`, { field: 'journalType' });
    }
  }

  private indexFts(result: { seq: number; title: string; content: string; tags_json: string }): void {
    const row = [result.seq, ftsText(result.title), ftsText(result.content), ftsText((JSON.parse(result.tags_json) as string[]).join(' '))];
    for (const table of ['knowledge_fts', 'knowledge_fts_stem']) {
      this.stmt(`DELETE FROM ${table} WHERE rowid = ?`).run(result.seq);
      this.stmt(`INSERT INTO ${table} (rowid, title, content, tags) VALUES (?, ?, ?, ?)`).run(...row);
    }
  }

  create(
    owner: string,
    workspaceId: string | undefined,
    args: {
      kind: Kind;
      scope: Scope;
      projectId?: string;
      title: string;
      content: string;
      journalType?: JournalType;
      occurredAt?: number;
      tags: string[];
      retentionSeconds?: number;
      expectedGeneration: number;
    },
  ) {
    if (args.expectedGeneration !== 0) {
      throw new ServiceError('CONFLICT', `knowledge_create: expectedGeneration: a new item has generation 0, not ${args.expectedGeneration}; to change an existing item use knowledge_update`, {
        field: 'expectedGeneration',
        currentGeneration: 0,
      });
    }
    this.checkJournal(args.kind, args.journalType, 'knowledge_create');
    if (args.scope === 'project' && !args.projectId) throw new ServiceError('INVALID_ARGUMENT', 'knowledge_create: projectId: required when scope is project', { field: 'projectId' });
    if (args.scope !== 'owner' && workspaceId === undefined) throw workspaceNeeded('knowledge_create', `an item in the ${args.scope} scope`);
    if (args.scope === 'workspace') this.deps.checkWorkspace?.(workspaceId!);
    const now = this.now();
    const iso = new Date(now).toISOString();
    const id = newId('knowledge');
    const tags = uniqueTags(args.tags);
    const journalType = args.kind === 'journal' ? (args.journalType ?? 'engineering-log') : null;
    const row = tx(this.deps.db, () => {
      if (args.projectId) this.ensureProject(owner, args.projectId);
      const info = this.deps.db
        .prepare(
          `INSERT INTO knowledge_items (id, owner_id, kind, scope, workspace_id, project_id, title, content, journal_type, occurred_at, tags_json, generation,
             retention_seconds, expires_at_ms, created_at, updated_at, embed_text_sha) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?, ?, ?, ?)`,
        )
        .run(
          id,
          owner,
          args.kind,
          args.scope,
          args.scope === 'workspace' ? workspaceId : null,
          args.projectId ?? null,
          args.title,
          args.content,
          journalType,
          args.occurredAt ?? now,
          JSON.stringify(tags),
          args.retentionSeconds ?? null,
          args.retentionSeconds === undefined ? null : now + args.retentionSeconds * this.deps.clock.secondMs,
          iso,
          iso,
          sha(embedText(args.title, args.content)),
        );
      const r = this.deps.db.prepare('SELECT * FROM knowledge_items WHERE seq = ?').get(info.lastInsertRowid) as ItemRow;
      this.indexFts(r);
      return r;
    });
    this.kick();
    return { ...this.describe(row, false), created: true };
  }

  read(owner: string, id: string, workspaceId: string | undefined) {
    this.sweep();
    const item = this.item(owner, id, 'id', 'knowledge_read');
    this.needsWorkspace(item, workspaceId, 'knowledge_read');
    const links = (this.deps.db.prepare('SELECT * FROM knowledge_links WHERE deleted_at IS NULL AND (source_id = ? OR target_id = ?) ORDER BY created_at, id').all(id, id) as LinkRow[]).filter(
      (l) => this.isLive(owner, l.source_id === id ? l.target_id : l.source_id),
    );
    return { ...this.describe(item, true), links: links.map((l) => this.link(l, id)) };
  }

  /** Without a workspace only owner-scope items may be read or changed by id (issue #36 item 4). */
  private needsWorkspace(item: ItemRow, workspaceId: string | undefined, tool: string): void {
    if (workspaceId === undefined && item.scope !== 'owner') throw workspaceNeeded(tool, `item ${item.id} is in the ${item.scope} scope and`);
  }

  private isLive(owner: string, id: string): boolean {
    const r = this.deps.db.prepare('SELECT * FROM knowledge_items WHERE id = ? AND owner_id = ?').get(id, owner) as ItemRow | undefined;
    return this.live(r);
  }

  private link(link: LinkRow, from?: string) {
    return {
      linkId: link.id,
      sourceId: link.source_id,
      targetId: link.target_id,
      relation: link.relation,
      generation: link.generation,
      ...(from ? { direction: link.source_id === from ? 'outgoing' : 'incoming' } : {}),
      createdAt: link.created_at,
    };
  }

  update(
    owner: string,
    args: { id: string; title?: string; content?: string; journalType?: JournalType; occurredAt?: number; tags?: string[]; retentionSeconds?: number; expectedGeneration: number },
    workspaceId: string | undefined,
  ) {
    const row = tx(this.deps.db, () => {
      const item = this.item(owner, args.id, 'id', 'knowledge_update');
      this.needsWorkspace(item, workspaceId, 'knowledge_update');
      if (item.generation !== args.expectedGeneration) {
        throw new ServiceError('CONFLICT', `knowledge_update: expectedGeneration: item ${item.id} is at generation ${item.generation}, not ${args.expectedGeneration}; nothing was changed (read it again)`, {
          field: 'expectedGeneration',
          currentGeneration: item.generation,
        });
      }
      this.checkJournal(item.kind, args.journalType, 'knowledge_update');
      const title = args.title ?? item.title;
      const content = args.content ?? item.content;
      const tags = args.tags ? uniqueTags(args.tags) : JSON.parse(item.tags_json);
      const now = this.now();
      this.deps.db
        .prepare(
          `UPDATE knowledge_items SET title = ?, content = ?, journal_type = ?, occurred_at = ?, tags_json = ?, retention_seconds = ?, expires_at_ms = ?,
             generation = generation + 1, updated_at = ?, embed_text_sha = ? WHERE seq = ?`,
        )
        .run(
          title,
          content,
          args.journalType ?? item.journal_type,
          args.occurredAt ?? item.occurred_at,
          JSON.stringify(tags),
          args.retentionSeconds ?? item.retention_seconds,
          args.retentionSeconds !== undefined ? now + args.retentionSeconds * this.deps.clock.secondMs : item.expires_at_ms,
          new Date(now).toISOString(),
          sha(embedText(title, content)),
          item.seq,
        );
      const n = this.deps.db.prepare('SELECT * FROM knowledge_items WHERE seq = ?').get(item.seq) as ItemRow;
      this.indexFts(n);
      return n;
    });
    // A vector of the old text no longer describes the item (it is re-embedded); a vector of the
    // same text stays, with the filters (tags, retention) brought up to date.
    const idx = this.vectors?.get(owner);
    if (idx) {
      if (row.embedding_sha === row.embed_text_sha && row.embedding_model === MODEL_LABEL) idx.setMeta(row.id, this.meta(row));
      else idx.remove(row.id);
    }
    this.kick();
    return this.describe(row, false);
  }

  delete(owner: string, args: { id: string; expectedGeneration: number }, workspaceId: string | undefined) {
    return tx(this.deps.db, () => {
      const r = this.deps.db.prepare('SELECT * FROM knowledge_items WHERE id = ? AND owner_id = ?').get(args.id, owner) as ItemRow | undefined;
      if (r) this.needsWorkspace(r, workspaceId, 'knowledge_delete');
      if (r && r.deleted_at !== null && r.generation === args.expectedGeneration && r.deleted_at) {
        return { id: r.id, deleted: true, alreadyDeleted: true, generation: r.generation, deletedAt: r.deleted_at };
      }
      const live = this.item(owner, args.id, 'id', 'knowledge_delete');
      if (live.generation !== args.expectedGeneration) {
        throw new ServiceError('CONFLICT', `knowledge_delete: expectedGeneration: item ${live.id} is at generation ${live.generation}, not ${args.expectedGeneration}; nothing was deleted`, {
          field: 'expectedGeneration',
          currentGeneration: live.generation,
        });
      }
      const links = this.softDelete(live, 'deleted');
      return { id: live.id, deleted: true, generation: live.generation, linksRemoved: links, deletedAt: new Date().toISOString() };
    });
  }

  /** Marks an item deleted (row kept for the audit), removes it from the index and its links with it. */
  private softDelete(item: ItemRow, reason: string): number {
    const iso = new Date().toISOString();
    this.deps.db.prepare('UPDATE knowledge_items SET deleted_at = ?, deleted_reason = ?, embedding = NULL WHERE seq = ?').run(iso, reason, item.seq);
    this.deps.db.prepare('DELETE FROM knowledge_fts WHERE rowid = ?').run(item.seq);
    this.deps.db.prepare('DELETE FROM knowledge_fts_stem WHERE rowid = ?').run(item.seq);
    this.vectors?.get(item.owner_id)?.remove(item.id);
    return this.deps.db.prepare('UPDATE knowledge_links SET deleted_at = ? WHERE deleted_at IS NULL AND (source_id = ? OR target_id = ?)').run(iso, item.id, item.id).changes;
  }

  /** list and search without a workspace: only with scope owner (issue #36 item 4). */
  protected scopeWithout(workspaceId: string | undefined, scope: Scope | undefined, tool: string): void {
    if (workspaceId !== undefined || scope === 'owner') return;
    throw workspaceNeeded(tool, scope ? `the ${scope} scope` : 'a call without scope (owner, project and workspace items)');
  }

  /** SQL conditions (on alias i) for the items visible from a workspace under the filters. */
  protected where(owner: string, workspaceId: string | undefined, filters: Filters): { sql: string; params: unknown[] } {
    const list: string[] = ['i.owner_id = ?', 'i.deleted_at IS NULL', '(i.expires_at_ms IS NULL OR i.expires_at_ms > ?)'];
    const sqlParams: unknown[] = [owner, this.now()];
    // Visible: owner and project scope everywhere, workspace scope only in its workspace.
    list.push("(i.scope != 'workspace' OR i.workspace_id = ?)");
    sqlParams.push(workspaceId ?? '');
    if (filters.scope) (list.push('i.scope = ?'), sqlParams.push(filters.scope));
    if (filters.kinds && filters.kinds.length > 0) (list.push(`i.kind IN (${filters.kinds.map(() => '?').join(',')})`), sqlParams.push(...filters.kinds));
    if (filters.projectId) (list.push('i.project_id = ?'), sqlParams.push(filters.projectId));
    if (filters.journalType) (list.push('i.journal_type = ?'), sqlParams.push(filters.journalType));
    if (filters.tags && filters.tags.length > 0) {
      const one = 'EXISTS (SELECT 1 FROM json_each(i.tags_json) WHERE value = ?)';
      list.push('(' + filters.tags.map(() => one).join(filters.tagMatch === 'all' ? ' AND ' : ' OR ') + ')');
      sqlParams.push(...filters.tags);
    }
    return { sql: list.join(' AND '), params: sqlParams };
  }

  protected passes(workspaceId: string | undefined, filters: Filters, vectorMeta: VectorMeta, now: number): boolean {
    if (vectorMeta.expiresAt !== null && vectorMeta.expiresAt <= now) return false;
    if (vectorMeta.scope === 'workspace' && vectorMeta.workspaceId !== (workspaceId ?? '')) return false;
    if (filters.scope && vectorMeta.scope !== filters.scope) return false;
    if (filters.kinds && filters.kinds.length > 0 && !filters.kinds.includes(vectorMeta.kind)) return false;
    if (filters.projectId && vectorMeta.projectId !== filters.projectId) return false;
    if (filters.journalType && vectorMeta.journalType !== filters.journalType) return false;
    if (filters.tags && filters.tags.length > 0) {
      const s = new Set(vectorMeta.tags);
      if (filters.tagMatch === 'all' ? !filters.tags.every((t) => s.has(t)) : !filters.tags.some((t) => s.has(t))) return false;
    }
    return true;
  }

  list(owner: string, workspaceId: string | undefined, args: Filters & { kind?: Kind; limit: number; cursor?: string }) {
    this.scopeWithout(workspaceId, args.scope, 'knowledge_list');
    this.sweep();
    const filters: Filters = { ...args, kinds: args.kind ? [args.kind] : undefined };
    const filter = digest([filters.kinds ?? null, filters.scope ?? null, filters.projectId ?? null, filters.journalType ?? null, filters.tags ?? null, filters.tagMatch]);
    let before = Number.MAX_SAFE_INTEGER;
    if (args.cursor) {
      const c = this.deps.cursors.decode<{ f?: string; b?: number }>('knowledge_list', args.cursor);
      if (c.f !== filter) throw new ServiceError('INVALID_ARGUMENT', 'cursor: issued for other filters; repeat the same filters, or start without a cursor', { field: 'cursor' });
      before = c.b ?? before;
    }
    const w = this.where(owner, workspaceId, filters);
    const rows = this.deps.db.prepare(`SELECT i.* FROM knowledge_items i WHERE ${w.sql} AND i.seq < ? ORDER BY i.seq DESC LIMIT ?`).all(...w.params, before, args.limit + 1) as ItemRow[];
    const page = rows.slice(0, args.limit);
    return {
      items: page.map((r) => this.describe(r, false)),
      count: page.length,
      nextCursor: rows.length > args.limit ? this.deps.cursors.encode('knowledge_list', { f: filter, b: page[page.length - 1]!.seq }) : null,
    };
  }

  linkItems(owner: string, args: { sourceId: string; targetId: string; relation: Relation; expectedGeneration: number }, workspaceId: string | undefined) {
    return tx(this.deps.db, () => {
      this.needsWorkspace(this.item(owner, args.sourceId, 'sourceId', 'knowledge_link'), workspaceId, 'knowledge_link');
      this.needsWorkspace(this.item(owner, args.targetId, 'targetId', 'knowledge_link'), workspaceId, 'knowledge_link');
      if (args.sourceId === args.targetId) throw new ServiceError('INVALID_ARGUMENT', 'knowledge_link: targetId: an item cannot be linked to itself', { field: 'targetId' });
      const cur = this.deps.db.prepare('SELECT * FROM knowledge_links WHERE source_id = ? AND target_id = ? AND relation = ? AND deleted_at IS NULL').get(args.sourceId, args.targetId, args.relation) as LinkRow | undefined;
      const have = cur?.generation ?? 0;
      if (have !== args.expectedGeneration) {
        throw new ServiceError(
          'CONFLICT',
          cur
            ? `knowledge_link: expectedGeneration: a ${args.relation} link from ${args.sourceId} to ${args.targetId} already exists at generation ${have} (${cur.id}); pass expectedGeneration ${have} to confirm it`
            : `knowledge_link: expectedGeneration: no such link exists; pass expectedGeneration 0 to create it`,
          { field: 'expectedGeneration', currentGeneration: have, ...(cur ? { linkId: cur.id } : {}) },
        );
      }
      if (cur) return { ...this.link(cur), created: false };
      const id = newId('knowledgeLink');
      this.deps.db
        .prepare('INSERT INTO knowledge_links (id, owner_id, source_id, target_id, relation, generation, created_at) VALUES (?, ?, ?, ?, ?, 1, ?)')
        .run(id, owner, args.sourceId, args.targetId, args.relation, new Date().toISOString());
      return { ...this.link(this.deps.db.prepare('SELECT * FROM knowledge_links WHERE id = ?').get(id) as LinkRow), created: true };
    });
  }

  unlink(owner: string, args: { linkId?: string; sourceId?: string; targetId?: string; relation?: Relation; expectedGeneration?: number }, workspaceId: string | undefined) {
    return tx(this.deps.db, () => {
      let link: LinkRow | undefined;
      if (args.linkId) {
        link = this.deps.db.prepare('SELECT * FROM knowledge_links WHERE id = ? AND owner_id = ?').get(args.linkId, owner) as LinkRow | undefined;
        if (!link) throw new ServiceError('NOT_FOUND', `knowledge_unlink: linkId: no link ${args.linkId}`, { field: 'linkId' });
        if (link.deleted_at) return { ...this.link(link), removed: true, alreadyRemoved: true };
        for (const k of ['sourceId', 'targetId', 'relation'] as const) {
          const want = args[k];
          const have = k === 'sourceId' ? link.source_id : k === 'targetId' ? link.target_id : link.relation;
          if (want !== undefined && want !== have) throw new ServiceError('INVALID_ARGUMENT', `knowledge_unlink: ${k}: link ${args.linkId} has ${k} ${have}, not ${want}`, { field: k });
        }
      } else {
        const found = this.deps.db
          .prepare(`SELECT * FROM knowledge_links WHERE owner_id = ? AND source_id = ? AND target_id = ? AND deleted_at IS NULL${args.relation ? ' AND relation = ?' : ''}`)
          .all(owner, args.sourceId, args.targetId, ...(args.relation ? [args.relation] : [])) as LinkRow[];
        if (found.length === 0) throw new ServiceError('NOT_FOUND', `knowledge_unlink: sourceId: no ${args.relation ? args.relation + ' ' : ''}link from ${args.sourceId} to ${args.targetId}`, { field: 'sourceId' });
        if (found.length > 1) {
          throw new ServiceError('FAILED_PRECONDITION', `knowledge_unlink: relation: ${found.length} links join these items (${found.map((f) => f.relation).join(', ')}); give relation or linkId`, {
            field: 'relation',
            linkIds: found.map((f) => f.id),
          });
        }
        link = found[0]!;
      }
      for (const end of [link.source_id, link.target_id]) {
        const r = this.deps.db.prepare('SELECT * FROM knowledge_items WHERE id = ? AND owner_id = ?').get(end, owner) as ItemRow | undefined;
        if (r) this.needsWorkspace(r, workspaceId, 'knowledge_unlink');
      }
      if (args.expectedGeneration !== undefined && args.expectedGeneration !== link.generation) {
        throw new ServiceError('CONFLICT', `knowledge_unlink: expectedGeneration: link ${link.id} is at generation ${link.generation}, not ${args.expectedGeneration}; nothing was removed`, {
          field: 'expectedGeneration',
          currentGeneration: link.generation,
        });
      }
      this.deps.db.prepare('UPDATE knowledge_links SET deleted_at = ? WHERE id = ?').run(new Date().toISOString(), link.id);
      return { ...this.link(link), removed: true };
    });
  }

  graph(owner: string, workspaceId: string | undefined, args: { rootId?: string; depth: number; maxNodes: number; kinds?: Kind[]; projectId?: string }) {
    this.sweep();
    // knowledge_graph has no scope parameter: without a workspace it walks the owner scope only
    // (the root included), and says so in `scopes`.
    const f: Filters = { kinds: args.kinds, projectId: args.projectId, tagMatch: 'all', ...(workspaceId === undefined ? { scope: 'owner' as const } : {}) };
    const workspace = this.where(owner, workspaceId, f);
    const matches = this.deps.db.prepare(`SELECT i.* FROM knowledge_items i WHERE ${workspace.sql} AND i.id = ?`);
    const nodes = new Map<string, { row: ItemRow; depth: number }>();
    let truncated = false;
    if (args.rootId) {
      const root = this.item(owner, args.rootId, 'rootId', 'knowledge_graph');
      if (workspaceId === undefined && root.scope !== 'owner') throw workspaceNeeded('knowledge_graph', `rootId ${root.id} is in the ${root.scope} scope and`);
      nodes.set(root.id, { row: root, depth: 0 });
      let frontier = [root.id];
      const linksOf = this.deps.db.prepare('SELECT * FROM knowledge_links WHERE deleted_at IS NULL AND (source_id = ? OR target_id = ?) ORDER BY created_at, id');
      for (let hop = 1; hop <= args.depth && frontier.length > 0 && !truncated; hop++) {
        const next: string[] = [];
        for (const id of frontier) {
          for (const l of linksOf.all(id, id) as LinkRow[]) {
            const other = l.source_id === id ? l.target_id : l.source_id;
            if (nodes.has(other)) continue;
            // Filtered-out items are neither returned nor walked through.
            const item = matches.get(...workspace.params, other) as ItemRow | undefined;
            if (!item) continue;
            if (nodes.size >= args.maxNodes) {
              truncated = true;
              break;
            }
            nodes.set(other, { row: item, depth: hop });
            next.push(other);
          }
          if (truncated) break;
        }
        frontier = next;
      }
    } else {
      const rows = this.deps.db.prepare(`SELECT i.* FROM knowledge_items i WHERE ${workspace.sql} ORDER BY i.seq DESC LIMIT ?`).all(...workspace.params, args.maxNodes + 1) as ItemRow[];
      truncated = rows.length > args.maxNodes;
      for (const r of rows.slice(0, args.maxNodes)) nodes.set(r.id, { row: r, depth: 0 });
    }
    // Every edge between two returned nodes, and only those: both ends are always present.
    const ids = [...nodes.keys()];
    const edges: Record<string, unknown>[] = [];
    if (ids.length > 0) {
      const inList = ids.map(() => '?').join(',');
      const ls = this.deps.db
        .prepare(`SELECT * FROM knowledge_links WHERE deleted_at IS NULL AND source_id IN (${inList}) AND target_id IN (${inList}) ORDER BY created_at, id`)
        .all(...ids, ...ids) as LinkRow[];
      for (const l of ls) edges.push(this.link(l));
    }
    return {
      rootId: args.rootId ?? null,
      depth: args.depth,
      nodes: [...nodes.values()].map((n) => ({ ...this.describe(n.row, false), hops: n.depth })),
      edges,
      nodeCount: nodes.size,
      edgeCount: edges.length,
      truncated,
      ...(workspaceId === undefined ? { scopes: ['owner'], scopeNote: 'no workspace: only owner-scope items were walked' } : {}),
    };
  }

  // ---------- embeddings ----------

  /**
   * The vector indexes, loaded from the database on first use: vectors of another model are
   * discarded there (their items become pending and are embedded again).
   */
  protected loadVectors(): Map<string, VectorIndex<VectorMeta>> {
    if (this.vectors) return this.vectors;
    this.deps.db
      .prepare('UPDATE knowledge_items SET embedding = NULL, embedding_sha = NULL, embedding_model = NULL WHERE embedding_model IS NOT NULL AND embedding_model != ?')
      .run(MODEL_LABEL);
    const match = new Map<string, VectorIndex<VectorMeta>>();
    const rows = this.deps.db
      .prepare(
        `SELECT seq, id, owner_id, kind, scope, workspace_id, project_id, journal_type, tags_json, expires_at_ms, embedding FROM knowledge_items
           WHERE deleted_at IS NULL AND embedding IS NOT NULL AND embedding_sha = embed_text_sha AND embedding_model = ? ORDER BY seq`,
      )
      .iterate(MODEL_LABEL) as IterableIterator<ItemRow & { embedding: Buffer }>;
    for (const r of rows) {
      if (r.embedding.byteLength !== EMBEDDING_MODEL.dimensions * 4) continue; // not a vector of this model
      this.indexOf(match, r.owner_id).upsert(r.id, fromBlob(r.embedding), this.meta(r));
    }
    this.vectors = match;
    return match;
  }

  private indexOf(match: Map<string, VectorIndex<VectorMeta>>, owner: string): VectorIndex<VectorMeta> {
    let idx = match.get(owner);
    if (!idx) match.set(owner, (idx = new VectorIndex<VectorMeta>(EMBEDDING_MODEL.dimensions)));
    return idx;
  }

  private meta(item: Pick<ItemRow, 'seq' | 'owner_id' | 'kind' | 'scope' | 'workspace_id' | 'project_id' | 'journal_type' | 'tags_json' | 'expires_at_ms'>): VectorMeta {
    return {
      seq: item.seq,
      owner: item.owner_id,
      kind: item.kind,
      scope: item.scope,
      workspaceId: item.workspace_id,
      projectId: item.project_id,
      journalType: item.journal_type,
      tags: JSON.parse(item.tags_json),
      expiresAt: item.expires_at_ms,
    };
  }

  /** Live items of the owner without a current vector (a partial index holds exactly those). */
  pendingCount(owner: string): number {
    this.loadVectors();
    return this.stmt('SELECT count(*) FROM knowledge_items INDEXED BY knowledge_items_unembedded WHERE owner_id = ? AND deleted_at IS NULL AND embedding_sha IS NOT embed_text_sha')
      .pluck()
      .get(owner) as number;
  }

  /** Stores a vector computed for an item's text (ignored if the item changed meanwhile). */
  storeEmbedding(id: string, textSha: string, vec: Float32Array): boolean {
    if (vec.length !== EMBEDDING_MODEL.dimensions) throw new RangeError(`knowledge: a vector of ${vec.length} dimensions, the model gives ${EMBEDDING_MODEL.dimensions}`);
    const ok = this.deps.db
      .prepare('UPDATE knowledge_items SET embedding = ?, embedding_sha = ?, embedding_model = ? WHERE id = ? AND embed_text_sha = ? AND deleted_at IS NULL')
      .run(toBlob(vec), textSha, MODEL_LABEL, id, textSha).changes;
    if (ok && this.vectors) {
      const r = this.deps.db.prepare('SELECT * FROM knowledge_items WHERE id = ?').get(id) as ItemRow;
      this.indexOf(this.vectors, r.owner_id).upsert(id, vec, this.meta(r));
    }
    return ok > 0;
  }

  /** Starts the background embedding loop if it is not running. */
  kick(): void {
    if (this.embedding || this.stopped || this.deps.embedder.state !== 'ready') return;
    this.embedding = true;
    void this.embedPending().finally(() => {
      this.embedding = false;
    });
  }

  /** Embeds every item whose vector is missing or stale, a batch at a time; resolves when none is left. */
  async embedPending(batch = 4): Promise<number> {
    let done = 0;
    for (;;) {
      if (this.stopped || this.deps.embedder.state !== 'ready') return done;
      this.loadVectors(); // discards vectors of another model first
      const rows = this.deps.db
        .prepare('SELECT id, title, content, embed_text_sha FROM knowledge_items INDEXED BY knowledge_items_unembedded WHERE deleted_at IS NULL AND embedding_sha IS NOT embed_text_sha ORDER BY seq LIMIT ?')
        .all(batch) as Array<{ id: string; title: string; content: string; embed_text_sha: string }>;
      if (rows.length === 0) return done;
      let vecs: Float32Array[];
      try {
        vecs = await this.deps.embedder.embed(rows.map((r) => embedText(r.title, r.content)));
      } catch {
        return done;
      }
      rows.forEach((row, i) => {
        if (!this.storeEmbedding(row.id, row.embed_text_sha, vecs[i]!)) {
          // Changed or deleted meanwhile: the next round picks up the new text.
        }
      });
      done += rows.length;
    }
  }

  /** Soft-deletes expired items (reason "retention"); returns how many. */
  sweep(): number {
    const rows = this.stmt('SELECT * FROM knowledge_items INDEXED BY knowledge_items_expiry WHERE deleted_at IS NULL AND expires_at_ms IS NOT NULL AND expires_at_ms <= ?').all(
      this.now(),
    ) as ItemRow[];
    if (rows.length === 0) return 0;
    tx(this.deps.db, () => {
      for (const r of rows) this.softDelete(r, 'retention');
    });
    return rows.length;
  }

  /**
   * Re-indexes the full-text rows written under an older recipe (once, recorded in knowledge_meta):
   * every live item's row is rewritten in one transaction (about a second per 20,000 items).
   */
  upgradeFts(): number {
    const have = this.deps.db.prepare("SELECT value FROM knowledge_meta WHERE key = 'fts_recipe'").pluck().get() as string | undefined;
    if (have === FTS_RECIPE) return 0;
    return tx(this.deps.db, () => {
      const rows = this.deps.db.prepare('SELECT seq, title, content, tags_json FROM knowledge_items WHERE deleted_at IS NULL').all() as Array<{ seq: number; title: string; content: string; tags_json: string }>;
      for (const r of rows) this.indexFts(r);
      this.deps.db.prepare("INSERT INTO knowledge_meta (key, value) VALUES ('fts_recipe', ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value").run(FTS_RECIPE);
      return rows.length;
    });
  }

  start(intervalMs: number): void {
    this.upgradeFts();
    this.deps.embedder.start();
    // WordNet's index files are read off the request path (about 0.1 s, 6 MiB); not at all when
    // embeddings are off, since the expanded list runs in hybrid answers only.
    setTimeout(() => {
      if (!this.stopped && this.deps.embedder.state !== 'disabled') void this.expander.warm();
    }, 0).unref();
    // Load the vector indexes now rather than on the first search (about a second per 20,000 items).
    setTimeout(() => {
      if (!this.stopped) this.loadVectors();
    }, 0).unref();
    void this.deps.embedder.whenSettled(120_000).then(() => this.kick());
    this.sweeper = startSweeper(() => {
      this.sweep();
      this.kick();
    }, intervalMs);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.sweeper?.stop();
    this.expander.close();
    await this.deps.embedder.stop();
  }
}

/** What the methods above answer, by name (the shapes are the code's own, inferred by the compiler). */
export type KnowledgeCreateResult = Awaited<ReturnType<KnowledgeStore['create']>>;
export type KnowledgeReadResult = Awaited<ReturnType<KnowledgeStore['read']>>;
export type KnowledgeUpdateResult = Awaited<ReturnType<KnowledgeStore['update']>>;
export type KnowledgeDeleteResult = Awaited<ReturnType<KnowledgeStore['delete']>>;
export type KnowledgeListResult = Awaited<ReturnType<KnowledgeStore['list']>>;
export type KnowledgeLinkItemsResult = Awaited<ReturnType<KnowledgeStore['linkItems']>>;
export type KnowledgeUnlinkResult = Awaited<ReturnType<KnowledgeStore['unlink']>>;
export type KnowledgeGraphResult = Awaited<ReturnType<KnowledgeStore['graph']>>;
