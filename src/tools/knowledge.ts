/** Spec section "Knowledge store" (9 tools): memory and journal items, links between them, search and graph. */
import { defineTool } from './define.js';
import { CUR, INT, KNID, KNLID, PRJID, int, str, z } from './types.js';

const domain = 'Knowledge store';
const tracking = 'knowledge store' as const;

const KIND = z.enum(['memory', 'journal']);
/** Arrays of kinds; two kinds exist, so at most two entries. */
const KINDS = z.array(KIND).min(1).max(2);
const SCOPE = z.enum(['owner', 'project', 'workspace']);
const JOURNAL_TYPE = z
  .enum(['engineering-log', 'decision-record', 'session-reflection'])
  .describe('Kind of journal entry (for kind journal)');
const RELATION = z.enum(['relates-to', 'references', 'supports', 'contradicts', 'supersedes']);
/** Tag shape is not shown in the spec: we take 1-64 characters, at most 50 tags. */
const TAG = str(1, 64);
const TAGS = z.array(TAG).max(50);
const TITLE = str(1, 120).describe('Title (1-120 characters)');
const CONTENT = z.string().max(262144).describe('Item text (at most 262144 characters)');
const OCCURRED_AT = INT.describe('When the journaled event happened (integer timestamp, 0-9007199254740991)');
const RETENTION = int(60, 31536000).describe('Seconds to keep the item (60-31536000)');
const TAG_MATCH = z.enum(['all', 'any']).default('all').describe('all: items with every tag; any: items with at least one');

export const knowledgeCreate = defineTool({
  name: 'knowledge_create',
  domain,
  badges: ['destructive', 'idempotent'],
  tracking,
  workspace: 'optional',
  workspaceLazy: true,
  description:
    'Create a knowledge item: a memory (a durable fact) or a journal entry (engineering-log, decision-record or session-reflection) in the owner, project or workspace scope, with title, content up to 262144 characters and tags. ' +
    'Project scope needs projectId. Link items with knowledge_link; for simple named notes tied to a repository use memories_write instead.',
  input: {
    kind: KIND.default('memory'),
    scope: SCOPE.default('workspace'),
    projectId: PRJID.optional().describe('Project the item belongs to; required when scope is project'),
    title: TITLE,
    content: CONTENT,
    journalType: JOURNAL_TYPE.optional(),
    occurredAt: OCCURRED_AT.optional(),
    tags: TAGS.default([]).describe('Tags (at most 50, each 1-64 characters)'),
    retentionSeconds: RETENTION.optional(),
    expectedGeneration: INT.default(0).describe('Compare-and-swap generation: 0 creates'),
    idempotencyKey: str(1, 256).optional().describe('Free-form key (1-256 characters) to make a retried create safe'),
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
  description: 'Read one knowledge item by id: content, metadata (kind, scope, generation), tags and its links to other items.',
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
    'Change fields of a knowledge item; omitted fields stay as they are. ' +
    'expectedGeneration must be the item\'s current generation (from knowledge_read), so you never overwrite a change you have not seen.',
  input: {
    id: KNID,
    title: TITLE.optional(),
    content: CONTENT.optional(),
    journalType: JOURNAL_TYPE.optional(),
    occurredAt: OCCURRED_AT.optional(),
    tags: TAGS.optional().describe('New tag list (at most 50, each 1-64 characters)'),
    retentionSeconds: RETENTION.optional(),
    expectedGeneration: INT.describe('Current generation of the item'),
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
  description: 'Soft-delete a knowledge item. expectedGeneration must be its current generation (from knowledge_read).',
  input: {
    id: KNID,
    expectedGeneration: INT.describe('Current generation of the item'),
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
    'List knowledge items a page at a time (up to 100), filtered by kind, scope, project, journal type and tags. Use knowledge_search to find items by text, ranked by relevance.',
  input: {
    kind: KIND.optional(),
    scope: SCOPE.optional(),
    projectId: PRJID.optional(),
    journalType: JOURNAL_TYPE.optional(),
    tags: TAGS.optional().describe('Tag filter (at most 50, each 1-64 characters)'),
    tagMatch: TAG_MATCH,
    limit: int(1, 100).default(50).describe('Page size (1-100)'),
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
    'Hybrid lexical and semantic search over knowledge items; each hit carries a relevance score of 0-100. Filter by kinds, scope, project, journal type and tags; up to 50 hits per page.',
  input: {
    query: str(1, 512).describe('What to look for (1-512 characters)'),
    kinds: KINDS.optional().describe('Only these kinds (default: both)'),
    scope: SCOPE.optional(),
    projectId: PRJID.optional(),
    journalType: JOURNAL_TYPE.optional(),
    tags: TAGS.optional().describe('Tag filter (at most 50, each 1-64 characters)'),
    tagMatch: TAG_MATCH,
    limit: int(1, 50).default(20).describe('Page size (1-50)'),
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
    'Link two knowledge items with a relation (relates-to, references, supports, contradicts, supersedes; default relates-to). Remove a link with knowledge_unlink; walk links with knowledge_graph.',
  input: {
    sourceId: KNID.describe('Item the link starts from'),
    targetId: KNID.describe('Item the link points to'),
    relation: RELATION.default('relates-to'),
    expectedGeneration: INT.default(0).describe('Compare-and-swap generation of the link: 0 creates'),
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
  description: 'Remove a link between knowledge items, named by linkId or by sourceId and targetId (plus relation to pick one of several links between the same pair).',
  input: {
    linkId: KNLID.optional(),
    sourceId: KNID.optional(),
    targetId: KNID.optional(),
    relation: RELATION.optional(),
    expectedGeneration: INT.optional().describe('Current generation of the link'),
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
    'Return knowledge items and the links between them, walking out from rootId when given, up to depth 3 and at most 200 nodes, optionally limited to some kinds or one project.',
  input: {
    rootId: KNID.optional().describe('Item to start from'),
    depth: int(1, 3).default(1).describe('Link hops to follow (1-3)'),
    maxNodes: int(1, 200).default(50).describe('Most items to return (1-200)'),
    kinds: KINDS.optional().describe('Only these kinds (default: both)'),
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
