/**
 * The knowledge store (spec "Knowledge store"): memory and journal items in the owner, project or
 * workspace scope, links between them, a graph walk, and hybrid search: SQLite FTS5 (BM25) fused
 * with cosine similarity of local embeddings (src/services/knowledge/embedder.ts) by reciprocal
 * rank fusion. Embedding runs in a worker thread off the request path; items not yet embedded are
 * still found lexically, and every answer says which mode answered. Decisions: docs/knowledge.md.
 */
import { startSweeper, type Sweeper } from '../core/sweeper.js';
import { createHash } from 'node:crypto';
import type Database from 'better-sqlite3';
import type { DB } from '../store/db.js';
import { tx } from '../store/db.js';
import type { CursorCodec } from '../core/cursor.js';
import { ServiceError } from '../core/errors.js';
import { newId } from '../core/ids.js';
import { EMBEDDING_MODEL, Embedder, MODEL_LABEL, cosine, fromBlob, rankBySimilarity, toBlob } from './knowledge/embedder.js';
import { VectorIndex } from './knowledge/vector-index.js';
import type { RetentionClock } from './memories.js';
import { digest, snippet, uniqueTags } from './memories.js';

export { Embedder, EMBEDDING_MODEL, rankBySimilarity, cosine };

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
}

interface ItemRow {
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
interface VectorMeta {
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

/**
 * Reciprocal rank fusion: score = sum of weight / (RRF_K + rank). Tuned on the labelled queries of
 * bench/knowledge.mjs (docs/knowledge.md): a smaller constant than the customary 60 lets a first
 * place count, and the semantic list weighs more because paraphrased questions seldom share the
 * words of the note they look for, while any shared word makes a lexical hit.
 */
export const RRF_K = 10;
export const LEXICAL_WEIGHT = 1;
export const SEMANTIC_WEIGHT = 1.5;
/** Best BM25 matches ranked before the visibility filters apply (then CANDIDATES of them are kept). */
const LEXICAL_POOL = 2000;
/** Candidates each ranking contributes to the fusion. */
const CANDIDATES = 200;
/** A semantic candidate below this cosine similarity is not a match (measured in bench/knowledge.mjs). */
export const MIN_SIMILARITY = 0.2;
/** Characters of an item fed to the model (title, then the start of the content). */
const EMBED_CHARS = 2000;

function embedText(title: string, content: string): string {
  return `${title}\n${content}`.slice(0, EMBED_CHARS);
}
/** The hash an item's vector is stored under (storeEmbedding's textSha). */
export function embeddingTextSha(title: string, content: string): string {
  return sha(embedText(title, content));
}
function sha(s: string): string {
  return createHash('sha256').update(s).digest('hex');
}

/** FTS5 query from literal text: every word quoted (no operators), any word may match; BM25 ranks. */
export function ftsQuery(text: string): string | null {
  const words = text.toLowerCase().match(/[\p{L}\p{N}_]+/gu);
  if (!words || words.length === 0) return null;
  // Function words carry no topic; dropped unless the query has nothing else.
  const content = words.filter((w) => !STOPWORDS.has(w));
  return [...new Set(content.length > 0 ? content : words)].slice(0, 64).map((w) => `"${w}"`).join(' OR ');
}

/** English function words left out of the lexical query (they would tie semantic hits in the fusion). */
const STOPWORDS = new Set(
  ('a an and are as at be been but by can could did do does doing for from had has have how i if in into is it its me my no not of on or our ' +
    'should so than that the their them then there these they this those to too us was we were what when where which who whom why will with would you your')
    .split(' '),
);

export class KnowledgeService {
  private sweeper: Sweeper | undefined;
  /** One exact index per owner (src/services/knowledge/vector-index.ts), loaded on first use. */
  private vectors: Map<string, VectorIndex<VectorMeta>> | undefined;
  private embedding = false;
  private stopped = false;
  private readonly queryCache = new Map<string, Float32Array>();
  private readonly statements = new Map<string, Database.Statement<unknown[]>>();

  constructor(private readonly deps: KnowledgeServiceDeps) {}

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
  private stmt(sql: string): Database.Statement<unknown[]> {
    let st = this.statements.get(sql);
    if (!st) {
      st = this.deps.db.prepare<unknown[]>(sql);
      if (this.statements.size < 200) this.statements.set(sql, st);
    }
    return st;
  }

  private now(): number {
    return Date.now();
  }

  private live(r: ItemRow | undefined): boolean {
    return !!r && r.deleted_at === null && (r.expires_at_ms === null || r.expires_at_ms > this.now());
  }

  private item(owner: string, id: string, field = 'id', tool = 'knowledge'): ItemRow {
    const r = this.deps.db.prepare('SELECT * FROM knowledge_items WHERE id = ? AND owner_id = ?').get(id, owner) as ItemRow | undefined;
    if (!r || !this.live(r)) throw new ServiceError('NOT_FOUND', `${tool}: ${field}: no knowledge item ${id}${r && r.deleted_at ? ' (it was deleted)' : ''}`, { field });
    return r;
  }

  private describe(r: ItemRow, withContent: boolean): Record<string, unknown> {
    const out: Record<string, unknown> = {
      id: r.id,
      kind: r.kind,
      scope: r.scope,
      projectId: r.project_id,
      workspaceId: r.workspace_id,
      title: r.title,
      journalType: r.journal_type,
      occurredAt: r.occurred_at,
      tags: JSON.parse(r.tags_json),
      generation: r.generation,
      retentionSeconds: r.retention_seconds,
      expiresAt: r.expires_at_ms === null ? null : new Date(r.expires_at_ms).toISOString(),
      createdAt: r.created_at,
      updatedAt: r.updated_at,
      embedded: r.embedding_sha !== null && r.embedding_sha === r.embed_text_sha,
    };
    if (withContent) out.content = r.content;
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

  private indexFts(r: { seq: number; title: string; content: string; tags_json: string }): void {
    this.deps.db.prepare('DELETE FROM knowledge_fts WHERE rowid = ?').run(r.seq);
    this.deps.db.prepare('INSERT INTO knowledge_fts (rowid, title, content, tags) VALUES (?, ?, ?, ?)').run(r.seq, r.title, r.content, (JSON.parse(r.tags_json) as string[]).join(' '));
  }

  create(
    owner: string,
    workspaceId: string,
    a: {
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
  ): Record<string, unknown> {
    if (a.expectedGeneration !== 0) {
      throw new ServiceError('CONFLICT', `knowledge_create: expectedGeneration: a new item has generation 0, not ${a.expectedGeneration}; to change an existing item use knowledge_update`, {
        field: 'expectedGeneration',
        currentGeneration: 0,
      });
    }
    this.checkJournal(a.kind, a.journalType, 'knowledge_create');
    if (a.scope === 'project' && !a.projectId) throw new ServiceError('INVALID_ARGUMENT', 'knowledge_create: projectId: required when scope is project', { field: 'projectId' });
    if (a.scope === 'workspace') this.deps.checkWorkspace?.(workspaceId);
    const now = this.now();
    const iso = new Date(now).toISOString();
    const id = newId('knowledge');
    const tags = uniqueTags(a.tags);
    const journalType = a.kind === 'journal' ? (a.journalType ?? 'engineering-log') : null;
    const row = tx(this.deps.db, () => {
      if (a.projectId) this.ensureProject(owner, a.projectId);
      const info = this.deps.db
        .prepare(
          `INSERT INTO knowledge_items (id, owner_id, kind, scope, workspace_id, project_id, title, content, journal_type, occurred_at, tags_json, generation,
             retention_seconds, expires_at_ms, created_at, updated_at, embed_text_sha) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?, ?, ?, ?)`,
        )
        .run(
          id,
          owner,
          a.kind,
          a.scope,
          a.scope === 'workspace' ? workspaceId : null,
          a.projectId ?? null,
          a.title,
          a.content,
          journalType,
          a.occurredAt ?? now,
          JSON.stringify(tags),
          a.retentionSeconds ?? null,
          a.retentionSeconds === undefined ? null : now + a.retentionSeconds * this.deps.clock.secondMs,
          iso,
          iso,
          sha(embedText(a.title, a.content)),
        );
      const r = this.deps.db.prepare('SELECT * FROM knowledge_items WHERE seq = ?').get(info.lastInsertRowid) as ItemRow;
      this.indexFts(r);
      return r;
    });
    this.kick();
    return { ...this.describe(row, false), created: true };
  }

  read(owner: string, id: string): Record<string, unknown> {
    this.sweep();
    const r = this.item(owner, id, 'id', 'knowledge_read');
    const links = (this.deps.db.prepare('SELECT * FROM knowledge_links WHERE deleted_at IS NULL AND (source_id = ? OR target_id = ?) ORDER BY created_at, id').all(id, id) as LinkRow[]).filter(
      (l) => this.isLive(owner, l.source_id === id ? l.target_id : l.source_id),
    );
    return { ...this.describe(r, true), links: links.map((l) => this.link(l, id)) };
  }

  private isLive(owner: string, id: string): boolean {
    const r = this.deps.db.prepare('SELECT * FROM knowledge_items WHERE id = ? AND owner_id = ?').get(id, owner) as ItemRow | undefined;
    return this.live(r);
  }

  private link(l: LinkRow, from?: string): Record<string, unknown> {
    return {
      linkId: l.id,
      sourceId: l.source_id,
      targetId: l.target_id,
      relation: l.relation,
      generation: l.generation,
      ...(from ? { direction: l.source_id === from ? 'outgoing' : 'incoming' } : {}),
      createdAt: l.created_at,
    };
  }

  update(
    owner: string,
    a: { id: string; title?: string; content?: string; journalType?: JournalType; occurredAt?: number; tags?: string[]; retentionSeconds?: number; expectedGeneration: number },
  ): Record<string, unknown> {
    const row = tx(this.deps.db, () => {
      const r = this.item(owner, a.id, 'id', 'knowledge_update');
      if (r.generation !== a.expectedGeneration) {
        throw new ServiceError('CONFLICT', `knowledge_update: expectedGeneration: item ${r.id} is at generation ${r.generation}, not ${a.expectedGeneration}; nothing was changed (read it again)`, {
          field: 'expectedGeneration',
          currentGeneration: r.generation,
        });
      }
      this.checkJournal(r.kind, a.journalType, 'knowledge_update');
      const title = a.title ?? r.title;
      const content = a.content ?? r.content;
      const tags = a.tags ? uniqueTags(a.tags) : JSON.parse(r.tags_json);
      const now = this.now();
      this.deps.db
        .prepare(
          `UPDATE knowledge_items SET title = ?, content = ?, journal_type = ?, occurred_at = ?, tags_json = ?, retention_seconds = ?, expires_at_ms = ?,
             generation = generation + 1, updated_at = ?, embed_text_sha = ? WHERE seq = ?`,
        )
        .run(
          title,
          content,
          a.journalType ?? r.journal_type,
          a.occurredAt ?? r.occurred_at,
          JSON.stringify(tags),
          a.retentionSeconds ?? r.retention_seconds,
          a.retentionSeconds !== undefined ? now + a.retentionSeconds * this.deps.clock.secondMs : r.expires_at_ms,
          new Date(now).toISOString(),
          sha(embedText(title, content)),
          r.seq,
        );
      const n = this.deps.db.prepare('SELECT * FROM knowledge_items WHERE seq = ?').get(r.seq) as ItemRow;
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

  delete(owner: string, a: { id: string; expectedGeneration: number }, reason = 'deleted'): Record<string, unknown> {
    return tx(this.deps.db, () => {
      const r = this.deps.db.prepare('SELECT * FROM knowledge_items WHERE id = ? AND owner_id = ?').get(a.id, owner) as ItemRow | undefined;
      if (r && r.deleted_at !== null && r.generation === a.expectedGeneration && r.deleted_at) {
        return { id: r.id, deleted: true, alreadyDeleted: true, generation: r.generation, deletedAt: r.deleted_at };
      }
      const live = this.item(owner, a.id, 'id', 'knowledge_delete');
      if (live.generation !== a.expectedGeneration) {
        throw new ServiceError('CONFLICT', `knowledge_delete: expectedGeneration: item ${live.id} is at generation ${live.generation}, not ${a.expectedGeneration}; nothing was deleted`, {
          field: 'expectedGeneration',
          currentGeneration: live.generation,
        });
      }
      const links = this.softDelete(live, reason);
      return { id: live.id, deleted: true, generation: live.generation, linksRemoved: links, deletedAt: new Date().toISOString() };
    });
  }

  /** Marks an item deleted (row kept for the audit), removes it from the index and its links with it. */
  private softDelete(r: ItemRow, reason: string): number {
    const iso = new Date().toISOString();
    this.deps.db.prepare('UPDATE knowledge_items SET deleted_at = ?, deleted_reason = ?, embedding = NULL WHERE seq = ?').run(iso, reason, r.seq);
    this.deps.db.prepare('DELETE FROM knowledge_fts WHERE rowid = ?').run(r.seq);
    this.vectors?.get(r.owner_id)?.remove(r.id);
    return this.deps.db.prepare('UPDATE knowledge_links SET deleted_at = ? WHERE deleted_at IS NULL AND (source_id = ? OR target_id = ?)').run(iso, r.id, r.id).changes;
  }

  /** SQL conditions (on alias i) for the items visible from a workspace under the filters. */
  private where(owner: string, workspaceId: string | undefined, f: Filters): { sql: string; params: unknown[] } {
    const c: string[] = ['i.owner_id = ?', 'i.deleted_at IS NULL', '(i.expires_at_ms IS NULL OR i.expires_at_ms > ?)'];
    const p: unknown[] = [owner, this.now()];
    // Visible: owner and project scope everywhere, workspace scope only in its workspace.
    c.push("(i.scope != 'workspace' OR i.workspace_id = ?)");
    p.push(workspaceId ?? '');
    if (f.scope) (c.push('i.scope = ?'), p.push(f.scope));
    if (f.kinds && f.kinds.length > 0) (c.push(`i.kind IN (${f.kinds.map(() => '?').join(',')})`), p.push(...f.kinds));
    if (f.projectId) (c.push('i.project_id = ?'), p.push(f.projectId));
    if (f.journalType) (c.push('i.journal_type = ?'), p.push(f.journalType));
    if (f.tags && f.tags.length > 0) {
      const one = 'EXISTS (SELECT 1 FROM json_each(i.tags_json) WHERE value = ?)';
      c.push('(' + f.tags.map(() => one).join(f.tagMatch === 'all' ? ' AND ' : ' OR ') + ')');
      p.push(...f.tags);
    }
    return { sql: c.join(' AND '), params: p };
  }

  private passes(workspaceId: string | undefined, f: Filters, v: VectorMeta, now: number): boolean {
    if (v.expiresAt !== null && v.expiresAt <= now) return false;
    if (v.scope === 'workspace' && v.workspaceId !== (workspaceId ?? '')) return false;
    if (f.scope && v.scope !== f.scope) return false;
    if (f.kinds && f.kinds.length > 0 && !f.kinds.includes(v.kind)) return false;
    if (f.projectId && v.projectId !== f.projectId) return false;
    if (f.journalType && v.journalType !== f.journalType) return false;
    if (f.tags && f.tags.length > 0) {
      const s = new Set(v.tags);
      if (f.tagMatch === 'all' ? !f.tags.every((t) => s.has(t)) : !f.tags.some((t) => s.has(t))) return false;
    }
    return true;
  }

  list(owner: string, workspaceId: string | undefined, a: Filters & { kind?: Kind; limit: number; cursor?: string }): Record<string, unknown> {
    this.sweep();
    const f: Filters = { ...a, kinds: a.kind ? [a.kind] : undefined };
    const filter = digest([f.kinds ?? null, f.scope ?? null, f.projectId ?? null, f.journalType ?? null, f.tags ?? null, f.tagMatch]);
    let before = Number.MAX_SAFE_INTEGER;
    if (a.cursor) {
      const c = this.deps.cursors.decode<{ f?: string; b?: number }>('knowledge_list', a.cursor);
      if (c.f !== filter) throw new ServiceError('INVALID_ARGUMENT', 'cursor: issued for other filters; repeat the same filters, or start without a cursor', { field: 'cursor' });
      before = c.b ?? before;
    }
    const w = this.where(owner, workspaceId, f);
    const rows = this.deps.db.prepare(`SELECT i.* FROM knowledge_items i WHERE ${w.sql} AND i.seq < ? ORDER BY i.seq DESC LIMIT ?`).all(...w.params, before, a.limit + 1) as ItemRow[];
    const page = rows.slice(0, a.limit);
    return {
      items: page.map((r) => this.describe(r, false)),
      count: page.length,
      nextCursor: rows.length > a.limit ? this.deps.cursors.encode('knowledge_list', { f: filter, b: page[page.length - 1]!.seq }) : null,
    };
  }

  /** Lexical ranking: FTS5 BM25 (title weighted over tags over content), best first. */
  lexical(owner: string, workspaceId: string | undefined, query: string, f: Filters, n = CANDIDATES): string[] {
    const q = ftsQuery(query);
    if (!q) return [];
    const w = this.where(owner, workspaceId, f);
    // BM25 over the index alone first (the best LEXICAL_POOL matches), then the filters on the
    // items: joining every match to its row before ranking cost ~20x at 20,000 items.
    // CROSS JOIN keeps that order of work (the planner would otherwise walk every item of the
    // owner), and the covering index answers the filters without reading whole rows.
    return this.stmt(
      `SELECT i.id FROM (SELECT rowid AS r, bm25(knowledge_fts, 4.0, 1.0, 2.0) AS s FROM knowledge_fts WHERE knowledge_fts MATCH ? ORDER BY s LIMIT ?) m
         CROSS JOIN knowledge_items AS i INDEXED BY knowledge_items_filters ON i.seq = m.r WHERE ${w.sql} ORDER BY m.s, i.seq DESC LIMIT ?`,
    )
      .pluck()
      .all(q, LEXICAL_POOL, ...w.params, n) as string[];
  }

  /** Semantic ranking over the vectors in memory (exact scan), best first. */
  semantic(owner: string, workspaceId: string | undefined, qv: Float32Array, f: Filters, n = CANDIDATES): Array<{ id: string; similarity: number }> {
    const idx = this.loadVectors().get(owner);
    if (!idx) return [];
    const now = this.now();
    return idx.search(qv, n, MIN_SIMILARITY, (m) => this.passes(workspaceId, f, m, now)).map((h) => ({ id: h.id, similarity: h.score }));
  }

  private async queryVector(query: string): Promise<Float32Array> {
    const hit = this.queryCache.get(query);
    if (hit) return hit;
    const [v] = await this.deps.embedder.embed([query], 5_000);
    this.queryCache.set(query, v!);
    if (this.queryCache.size > 256) this.queryCache.delete(this.queryCache.keys().next().value!);
    return v!;
  }

  async search(
    owner: string,
    workspaceId: string | undefined,
    a: Filters & { query: string; limit: number; cursor?: string },
    force?: SearchMode,
  ): Promise<Record<string, unknown>> {
    this.sweep();
    const filter = digest([a.query, a.kinds ?? null, a.scope ?? null, a.projectId ?? null, a.journalType ?? null, a.tags ?? null, a.tagMatch]);
    let offset = 0;
    if (a.cursor) {
      const c = this.deps.cursors.decode<{ f?: string; o?: number }>('knowledge_search', a.cursor);
      if (c.f !== filter) throw new ServiceError('INVALID_ARGUMENT', 'cursor: issued for another query or filters; repeat the same query and filters, or start without a cursor', { field: 'cursor' });
      offset = c.o ?? 0;
    }
    const lex = force === 'semantic' ? [] : this.lexical(owner, workspaceId, a.query, a);
    let sem: Array<{ id: string; similarity: number }> = [];
    let mode: SearchMode = 'lexical';
    let reason: string | undefined;
    if (force !== 'lexical') {
      if (this.deps.embedder.state === 'ready') {
        try {
          sem = this.semantic(owner, workspaceId, await this.queryVector(a.query), a);
          mode = force === 'semantic' ? 'semantic' : 'hybrid';
        } catch (e) {
          reason = `semantic ranking failed for this query: ${(e as Error).message}`;
        }
      } else reason = this.deps.embedder.reason;
    } else reason = 'lexical ranking requested';
    // Reciprocal rank fusion; relevance is the fused score over the best possible one, 0-100.
    const fused = new Map<string, { score: number; lexRank?: number; semRank?: number; similarity?: number }>();
    lex.forEach((id, i) => fused.set(id, { score: LEXICAL_WEIGHT / (RRF_K + i + 1), lexRank: i + 1 }));
    sem.forEach((s, i) => {
      const e = fused.get(s.id) ?? { score: 0 };
      e.score += SEMANTIC_WEIGHT / (RRF_K + i + 1);
      e.semRank = i + 1;
      e.similarity = s.similarity;
      fused.set(s.id, e);
    });
    const best = ((mode === 'semantic' ? 0 : LEXICAL_WEIGHT) + (mode === 'lexical' ? 0 : SEMANTIC_WEIGHT)) / (RRF_K + 1);
    const ranked = [...fused.entries()].sort((x, y) => y[1].score - x[1].score || (x[0] < y[0] ? -1 : 1));
    const page = ranked.slice(offset, offset + a.limit);
    const rows = new Map<string, ItemRow>();
    if (page.length > 0) {
      const got = this.stmt(`SELECT * FROM knowledge_items WHERE id IN (${page.map(() => '?').join(',')})`).all(...(page.map((p) => p[0]) as unknown[])) as ItemRow[];
      for (const r of got) rows.set(r.id, r);
    }
    const needle = (a.query.toLowerCase().match(/[\p{L}\p{N}_]+/gu) ?? [a.query.toLowerCase()]).sort((x, y) => y.length - x.length)[0]!;
    const pending = this.pendingCount(owner);
    const next = offset + page.length;
    return {
      query: a.query,
      mode,
      ...(reason && mode !== 'hybrid' ? { modeReason: reason } : {}),
      model: { ...EMBEDDING_MODEL, label: MODEL_LABEL, state: this.deps.embedder.state },
      notYetEmbedded: pending,
      results: page
        .filter(([id]) => rows.has(id))
        .map(([id, s], i) => {
          const r = rows.get(id)!;
          return {
            ...this.describe(r, false),
            rank: offset + i + 1,
            relevance: Math.max(1, Math.min(100, Math.round((100 * s.score) / best))),
            matchedBy: [...(s.lexRank ? ['lexical'] : []), ...(s.semRank ? ['semantic'] : [])],
            ...(s.lexRank ? { lexicalRank: s.lexRank } : {}),
            ...(s.semRank ? { semanticRank: s.semRank, similarity: Math.round(s.similarity! * 1000) / 1000 } : {}),
            snippet: snippet(r.content, needle),
          };
        }),
      count: page.length,
      total: ranked.length,
      nextCursor: next < ranked.length ? this.deps.cursors.encode('knowledge_search', { f: filter, o: next }) : null,
    };
  }

  linkItems(owner: string, a: { sourceId: string; targetId: string; relation: Relation; expectedGeneration: number }): Record<string, unknown> {
    return tx(this.deps.db, () => {
      this.item(owner, a.sourceId, 'sourceId', 'knowledge_link');
      this.item(owner, a.targetId, 'targetId', 'knowledge_link');
      if (a.sourceId === a.targetId) throw new ServiceError('INVALID_ARGUMENT', 'knowledge_link: targetId: an item cannot be linked to itself', { field: 'targetId' });
      const cur = this.deps.db.prepare('SELECT * FROM knowledge_links WHERE source_id = ? AND target_id = ? AND relation = ? AND deleted_at IS NULL').get(a.sourceId, a.targetId, a.relation) as LinkRow | undefined;
      const have = cur?.generation ?? 0;
      if (have !== a.expectedGeneration) {
        throw new ServiceError(
          'CONFLICT',
          cur
            ? `knowledge_link: expectedGeneration: a ${a.relation} link from ${a.sourceId} to ${a.targetId} already exists at generation ${have} (${cur.id}); pass expectedGeneration ${have} to confirm it`
            : `knowledge_link: expectedGeneration: no such link exists; pass expectedGeneration 0 to create it`,
          { field: 'expectedGeneration', currentGeneration: have, ...(cur ? { linkId: cur.id } : {}) },
        );
      }
      if (cur) return { ...this.link(cur), created: false };
      const id = newId('knowledgeLink');
      this.deps.db
        .prepare('INSERT INTO knowledge_links (id, owner_id, source_id, target_id, relation, generation, created_at) VALUES (?, ?, ?, ?, ?, 1, ?)')
        .run(id, owner, a.sourceId, a.targetId, a.relation, new Date().toISOString());
      return { ...this.link(this.deps.db.prepare('SELECT * FROM knowledge_links WHERE id = ?').get(id) as LinkRow), created: true };
    });
  }

  unlink(owner: string, a: { linkId?: string; sourceId?: string; targetId?: string; relation?: Relation; expectedGeneration?: number }): Record<string, unknown> {
    return tx(this.deps.db, () => {
      let l: LinkRow | undefined;
      if (a.linkId) {
        l = this.deps.db.prepare('SELECT * FROM knowledge_links WHERE id = ? AND owner_id = ?').get(a.linkId, owner) as LinkRow | undefined;
        if (!l) throw new ServiceError('NOT_FOUND', `knowledge_unlink: linkId: no link ${a.linkId}`, { field: 'linkId' });
        if (l.deleted_at) return { ...this.link(l), removed: true, alreadyRemoved: true };
        for (const k of ['sourceId', 'targetId', 'relation'] as const) {
          const want = a[k];
          const have = k === 'sourceId' ? l.source_id : k === 'targetId' ? l.target_id : l.relation;
          if (want !== undefined && want !== have) throw new ServiceError('INVALID_ARGUMENT', `knowledge_unlink: ${k}: link ${a.linkId} has ${k} ${have}, not ${want}`, { field: k });
        }
      } else {
        const found = this.deps.db
          .prepare(`SELECT * FROM knowledge_links WHERE owner_id = ? AND source_id = ? AND target_id = ? AND deleted_at IS NULL${a.relation ? ' AND relation = ?' : ''}`)
          .all(owner, a.sourceId, a.targetId, ...(a.relation ? [a.relation] : [])) as LinkRow[];
        if (found.length === 0) throw new ServiceError('NOT_FOUND', `knowledge_unlink: sourceId: no ${a.relation ? a.relation + ' ' : ''}link from ${a.sourceId} to ${a.targetId}`, { field: 'sourceId' });
        if (found.length > 1) {
          throw new ServiceError('FAILED_PRECONDITION', `knowledge_unlink: relation: ${found.length} links join these items (${found.map((f) => f.relation).join(', ')}); give relation or linkId`, {
            field: 'relation',
            linkIds: found.map((f) => f.id),
          });
        }
        l = found[0]!;
      }
      if (a.expectedGeneration !== undefined && a.expectedGeneration !== l.generation) {
        throw new ServiceError('CONFLICT', `knowledge_unlink: expectedGeneration: link ${l.id} is at generation ${l.generation}, not ${a.expectedGeneration}; nothing was removed`, {
          field: 'expectedGeneration',
          currentGeneration: l.generation,
        });
      }
      this.deps.db.prepare('UPDATE knowledge_links SET deleted_at = ? WHERE id = ?').run(new Date().toISOString(), l.id);
      return { ...this.link(l), removed: true };
    });
  }

  graph(owner: string, workspaceId: string | undefined, a: { rootId?: string; depth: number; maxNodes: number; kinds?: Kind[]; projectId?: string }): Record<string, unknown> {
    this.sweep();
    const f: Filters = { kinds: a.kinds, projectId: a.projectId, tagMatch: 'all' };
    const w = this.where(owner, workspaceId, f);
    const matches = this.deps.db.prepare(`SELECT i.* FROM knowledge_items i WHERE ${w.sql} AND i.id = ?`);
    const nodes = new Map<string, { row: ItemRow; depth: number }>();
    let truncated = false;
    if (a.rootId) {
      const root = this.item(owner, a.rootId, 'rootId', 'knowledge_graph');
      nodes.set(root.id, { row: root, depth: 0 });
      let frontier = [root.id];
      const linksOf = this.deps.db.prepare('SELECT * FROM knowledge_links WHERE deleted_at IS NULL AND (source_id = ? OR target_id = ?) ORDER BY created_at, id');
      for (let hop = 1; hop <= a.depth && frontier.length > 0 && !truncated; hop++) {
        const next: string[] = [];
        for (const id of frontier) {
          for (const l of linksOf.all(id, id) as LinkRow[]) {
            const other = l.source_id === id ? l.target_id : l.source_id;
            if (nodes.has(other)) continue;
            // Filtered-out items are neither returned nor walked through.
            const r = matches.get(...w.params, other) as ItemRow | undefined;
            if (!r) continue;
            if (nodes.size >= a.maxNodes) {
              truncated = true;
              break;
            }
            nodes.set(other, { row: r, depth: hop });
            next.push(other);
          }
          if (truncated) break;
        }
        frontier = next;
      }
    } else {
      const rows = this.deps.db.prepare(`SELECT i.* FROM knowledge_items i WHERE ${w.sql} ORDER BY i.seq DESC LIMIT ?`).all(...w.params, a.maxNodes + 1) as ItemRow[];
      truncated = rows.length > a.maxNodes;
      for (const r of rows.slice(0, a.maxNodes)) nodes.set(r.id, { row: r, depth: 0 });
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
      rootId: a.rootId ?? null,
      depth: a.depth,
      nodes: [...nodes.values()].map((n) => ({ ...this.describe(n.row, false), hops: n.depth })),
      edges,
      nodeCount: nodes.size,
      edgeCount: edges.length,
      truncated,
    };
  }

  // ---------- embeddings ----------

  /**
   * The vector indexes, loaded from the database on first use: vectors of another model are
   * discarded there (their items become pending and are embedded again).
   */
  private loadVectors(): Map<string, VectorIndex<VectorMeta>> {
    if (this.vectors) return this.vectors;
    this.deps.db
      .prepare('UPDATE knowledge_items SET embedding = NULL, embedding_sha = NULL, embedding_model = NULL WHERE embedding_model IS NOT NULL AND embedding_model != ?')
      .run(MODEL_LABEL);
    const m = new Map<string, VectorIndex<VectorMeta>>();
    const rows = this.deps.db
      .prepare(
        `SELECT seq, id, owner_id, kind, scope, workspace_id, project_id, journal_type, tags_json, expires_at_ms, embedding FROM knowledge_items
           WHERE deleted_at IS NULL AND embedding IS NOT NULL AND embedding_sha = embed_text_sha AND embedding_model = ? ORDER BY seq`,
      )
      .iterate(MODEL_LABEL) as IterableIterator<ItemRow & { embedding: Buffer }>;
    for (const r of rows) {
      if (r.embedding.byteLength !== EMBEDDING_MODEL.dimensions * 4) continue; // not a vector of this model
      this.indexOf(m, r.owner_id).upsert(r.id, fromBlob(r.embedding), this.meta(r));
    }
    this.vectors = m;
    return m;
  }

  private indexOf(m: Map<string, VectorIndex<VectorMeta>>, owner: string): VectorIndex<VectorMeta> {
    let idx = m.get(owner);
    if (!idx) m.set(owner, (idx = new VectorIndex<VectorMeta>(EMBEDDING_MODEL.dimensions)));
    return idx;
  }

  private meta(r: Pick<ItemRow, 'seq' | 'owner_id' | 'kind' | 'scope' | 'workspace_id' | 'project_id' | 'journal_type' | 'tags_json' | 'expires_at_ms'>): VectorMeta {
    return {
      seq: r.seq,
      owner: r.owner_id,
      kind: r.kind,
      scope: r.scope,
      workspaceId: r.workspace_id,
      projectId: r.project_id,
      journalType: r.journal_type,
      tags: JSON.parse(r.tags_json),
      expiresAt: r.expires_at_ms,
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
      rows.forEach((r, i) => {
        if (!this.storeEmbedding(r.id, r.embed_text_sha, vecs[i]!)) {
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

  start(intervalMs: number): void {
    this.deps.embedder.start();
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
    await this.deps.embedder.stop();
  }
}
