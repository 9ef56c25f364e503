/** Spec section "Knowledge store" (9 tools): memory and journal items, links between them, search and graph. */
import { defineTool } from './define.js';
import { CUR, INT, KNID, KNLID, PRJID, int, str, z } from './types.js';

const domain = 'Knowledge store';
const tracking = 'knowledge store' as const;

const KIND = z.enum(['memory', 'journal']);
/** Arrays of kinds; two kinds exist, so at most two entries. */
const KINDS = z.array(KIND).min(1).max(2);
const SCOPE = z.enum(['owner', 'project', 'workspace']);
const JOURNAL_TYPE = z.enum(['engineering-log', 'decision-record', 'session-reflection']);
const RELATION = z.enum(['relates-to', 'references', 'supports', 'contradicts', 'supersedes']);
/** Tag shape is not shown in the spec: we take 1-64 characters, at most 50 tags. */
const TAG = str(1, 64);
const TAGS = z.array(TAG).max(50);
const TITLE = str(1, 120);
const CONTENT = z.string().max(262144);
const OCCURRED_AT = INT.describe('Epoch ms');
const RETENTION = int(60, 31536000);
const TAG_MATCH = z.enum(['all', 'any']).default('all');

export const knowledgeCreate = defineTool({
  name: 'knowledge_create',
  domain,
  badges: ['destructive', 'idempotent'],
  tracking,
  workspace: 'optional',
  workspaceLazy: true,
  description:
    'Create a memory (durable fact) or journal item (journalType =engineering-log). Owner and project items are seen from every workspace; project scope needs projectId (an id you choose). Only creates: change with knowledge_update.',
  input: {
    kind: KIND.default('memory'),
    scope: SCOPE.default('workspace'),
    projectId: PRJID.optional(),
    title: TITLE,
    content: CONTENT,
    journalType: JOURNAL_TYPE.optional(),
    occurredAt: OCCURRED_AT.optional(),
    tags: TAGS.default([]),
    retentionSeconds: RETENTION.optional(),
    expectedGeneration: INT.default(0),
    idempotencyKey: str(1, 256).optional(),
  },
  check: (a) =>
    a.scope === 'project' && !a.projectId ? { field: 'projectId', message: 'required when scope is project' } : undefined,
  idempotency: 'key',
  run: (a, ctx) => ctx.services.knowledge.create(ctx.owner, ctx.workspaceIfAny, a),
});

export const knowledgeRead = defineTool({
  name: 'knowledge_read',
  domain,
  badges: ['readOnly', 'idempotent'],
  tracking,
  workspace: 'optional',
  workspaceLazy: true,
  description:
    'Read a knowledge item: content, metadata, tags and links.',
  input: {
    id: KNID,
  },
  run: (a, ctx) => ctx.services.knowledge.read(ctx.owner, a.id, ctx.workspaceIfAny),
});

export const knowledgeUpdate = defineTool({
  name: 'knowledge_update',
  domain,
  badges: ['destructive', 'idempotent'],
  tracking,
  workspace: 'optional',
  workspaceLazy: true,
  description:
    'Change fields of a knowledge item; omitted ones stay, tags replace.',
  input: {
    id: KNID,
    title: TITLE.optional(),
    content: CONTENT.optional(),
    journalType: JOURNAL_TYPE.optional(),
    occurredAt: OCCURRED_AT.optional(),
    tags: TAGS.optional(),
    retentionSeconds: RETENTION.optional(),
    expectedGeneration: INT,
  },
  run: (a, ctx) => ctx.services.knowledge.update(ctx.owner, a, ctx.workspaceIfAny),
});

export const knowledgeDelete = defineTool({
  name: 'knowledge_delete',
  domain,
  badges: ['destructive', 'idempotent'],
  tracking,
  workspace: 'optional',
  workspaceLazy: true,
  description:
    'Soft-delete a knowledge item and its links.',
  input: {
    id: KNID,
    expectedGeneration: INT,
  },
  run: (a, ctx) => ctx.services.knowledge.delete(ctx.owner, a, ctx.workspaceIfAny),
});

export const knowledgeList = defineTool({
  name: 'knowledge_list',
  domain,
  badges: ['readOnly', 'idempotent'],
  tracking,
  workspace: 'optional',
  workspaceLazy: true,
  description:
    'List knowledge items, newest first. Text search: knowledge_search.',
  input: {
    kind: KIND.optional(),
    scope: SCOPE.optional(),
    projectId: PRJID.optional(),
    journalType: JOURNAL_TYPE.optional(),
    tags: TAGS.optional(),
    tagMatch: TAG_MATCH,
    limit: int(1, 100).default(50),
    cursor: CUR.optional(),
  },
  run: (a, ctx) => ctx.services.knowledge.list(ctx.owner, ctx.workspaceIfAny, a),
});

export const knowledgeSearch = defineTool({
  name: 'knowledge_search',
  domain,
  badges: ['readOnly', 'idempotent'],
  tracking,
  workspace: 'optional',
  workspaceLazy: true,
  description:
    'Hybrid lexical and semantic search over knowledge items; hits carry a relevance score 0-100.',
  input: {
    query: str(1, 512),
    kinds: KINDS.optional(),
    scope: SCOPE.optional(),
    projectId: PRJID.optional(),
    journalType: JOURNAL_TYPE.optional(),
    tags: TAGS.optional(),
    tagMatch: TAG_MATCH,
    limit: int(1, 50).default(20),
    cursor: CUR.optional(),
  },
  run: (a, ctx) => ctx.services.knowledge.search(ctx.owner, ctx.workspaceIfAny, a),
});

export const knowledgeLink = defineTool({
  name: 'knowledge_link',
  domain,
  badges: ['destructive', 'idempotent'],
  tracking,
  workspace: 'optional',
  workspaceLazy: true,
  description:
    'Link two items, source to target; expectedGeneration 0 creates (an existing link: CONFLICT with its linkId).',
  input: {
    sourceId: KNID,
    targetId: KNID,
    relation: RELATION.default('relates-to'),
    expectedGeneration: INT.default(0),
  },
  run: (a, ctx) => ctx.services.knowledge.linkItems(ctx.owner, a, ctx.workspaceIfAny),
});

export const knowledgeUnlink = defineTool({
  name: 'knowledge_unlink',
  domain,
  badges: ['destructive', 'idempotent'],
  tracking,
  workspace: 'optional',
  workspaceLazy: true,
  description:
    'Remove a link: linkId, or sourceId and targetId (plus relation if several join them, else FAILED_PRECONDITION).',
  input: {
    linkId: KNLID.optional(),
    sourceId: KNID.optional(),
    targetId: KNID.optional(),
    relation: RELATION.optional(),
    expectedGeneration: INT.optional(),
  },
  check: (args) => {
    if (args.linkId === undefined && (args.sourceId === undefined || args.targetId === undefined))
      return { field: 'linkId', message: 'give linkId, or both sourceId and targetId' };
    return undefined;
  },
  run: (a, ctx) => ctx.services.knowledge.unlink(ctx.owner, a, ctx.workspaceIfAny),
});

export const knowledgeGraph = defineTool({
  name: 'knowledge_graph',
  domain,
  badges: ['readOnly', 'idempotent'],
  tracking,
  workspace: 'optional',
  workspaceLazy: true,
  description:
    'Items and their links, walked both ways from rootId (else the latest items) for depth hops, up to maxNodes.',
  input: {
    rootId: KNID.optional(),
    depth: int(1, 3).default(1),
    maxNodes: int(1, 200).default(50),
    kinds: KINDS.optional(),
    projectId: PRJID.optional(),
  },
  run: (a, ctx) => ctx.services.knowledge.graph(ctx.owner, ctx.workspaceIfAny, a),
});

export const tools = [
  knowledgeCreate,
  knowledgeRead,
  knowledgeUpdate,
  knowledgeDelete,
  knowledgeList,
  knowledgeSearch,
  knowledgeLink,
  knowledgeUnlink,
  knowledgeGraph,
];
