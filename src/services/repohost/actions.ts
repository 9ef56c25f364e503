/**
 * The parameters and permissions of every repohost action (issue #17): one table, read by the
 * tool's `check` hook (a missing or extra parameter is refused before any request is sent), the
 * tool description, docs/repohost.md and workspace_capabilities.repohostActions (which actions a
 * credential's permissions allow). The spec leaves "which parameters each action needs" open;
 * this table is the decision.
 */

export type Perm = 'contents' | 'issues' | 'pull_requests' | 'statuses' | 'checks' | 'actions';
export type Level = 'read' | 'write';
export type Needs = Partial<Record<Perm, Level>>;

export interface ActionSpec {
  group: 'read' | 'write';
  /** What it does, one line. */
  summary: string;
  /** Parameters that must be present. */
  required: string[];
  /** Parameters that may be present; anything else (other than workspaceId and action) is refused. */
  optional: string[];
  /** Groups of which exactly one must be present. */
  exactlyOne?: string[][];
  /** Groups of which at least one must be present. */
  atLeastOne?: string[][];
  /** Allowed values of a parameter narrower than the tool schema (e.g. state open|closed). */
  values?: Record<string, readonly string[]>;
  /** Parameters that must be a full 40/64-hex commit id. */
  fullSha?: string[];
  /** GitHub App permissions the action needs (the installation token is minted with exactly these). */
  needs: Needs;
  /** The spec's capability name. */
  capability: string;
}

const W = (s: Omit<ActionSpec, 'group'>): ActionSpec => ({ group: 'write', ...s, optional: [...s.optional, 'idempotencyKey'] });
const R = (s: Omit<ActionSpec, 'group'>): ActionSpec => ({ group: 'read', ...s });
const PR_READ: Needs = { pull_requests: 'read' };
const PR_WRITE: Needs = { pull_requests: 'write' };
const ISSUE_WRITE: Needs = { issues: 'write' };

export const STATE_FILTER = ['open', 'closed', 'all'] as const;

export const ACTIONS = {
  // ----- read group -----
  pr_list: R({ summary: 'pull requests, newest first', required: [], optional: ['state', 'base', 'head', 'limit'], values: { state: STATE_FILTER }, needs: PR_READ, capability: 'pullRequestList' }),
  pr_view: R({ summary: 'one pull request: head/base SHAs, mergeability, node id, conversation comments (first `limit`, =30)', required: ['prNumber'], optional: ['limit'], needs: PR_READ, capability: 'pullRequestView' }),
  pr_review_threads: R({ summary: 'review threads with PRRT_ ids, resolved state and their comments (comment ids for pr_review_reply)', required: ['prNumber'], optional: ['limit'], needs: PR_READ, capability: 'pullRequestReviewList' }),
  pr_reviews: R({ summary: 'every review plus the latest state per reviewer', required: ['prNumber'], optional: ['limit'], needs: PR_READ, capability: 'pullRequestReviewList' }),
  issue_list: R({ summary: 'issues (pull requests excluded), newest first', required: [], optional: ['state', 'since', 'limit'], values: { state: STATE_FILTER }, needs: { issues: 'read' }, capability: 'issueList' }),
  issue_view: R({ summary: 'one issue with its comments (first `limit`, =30) and their ids', required: ['issueNumber'], optional: ['limit'], needs: { issues: 'read' }, capability: 'issueView' }),
  commit_list: R({ summary: 'commits from sha (a SHA or branch; =default branch), filtered by path, since, until', required: [], optional: ['sha', 'path', 'since', 'until', 'limit'], needs: { contents: 'read' }, capability: 'commitList' }),
  compare: R({ summary: 'commits and changed files between base and head (base...head)', required: ['base', 'head'], optional: ['limit'], needs: { contents: 'read' }, capability: 'compare' }),
  release_list: R({ summary: 'releases, newest first', required: [], optional: ['limit'], needs: { contents: 'read' }, capability: 'releaseList' }),
  tag_list: R({ summary: 'tags with their commit SHAs', required: [], optional: ['limit'], needs: { contents: 'read' }, capability: 'tagList' }),
  ref_get: R({ summary: 'the OID of a branch or tag (main, heads/main, tags/v1, refs/...), or exists:false', required: ['ref'], optional: [], needs: { contents: 'read' }, capability: 'refGet' }),
  commit_status_get: R({ summary: 'combined status and every context for a sha or ref', required: [], optional: ['limit'], exactlyOne: [['sha', 'ref']], needs: { statuses: 'read' }, capability: 'commitStatusRead' }),
  check_runs_list: R({ summary: 'check runs for a sha or ref, optionally one checkName', required: [], optional: ['checkName', 'limit'], exactlyOne: [['sha', 'ref']], needs: { checks: 'read' }, capability: 'checkRunList' }),
  workflow_runs_list: R({
    summary: 'workflow runs (all, or of one workflow) filtered by headSha, branch, event, status',
    required: [],
    optional: ['workflow', 'headSha', 'branch', 'event', 'status', 'limit'],
    needs: { actions: 'read' },
    capability: 'workflowRunRead',
  }),
  workflow_run_view: R({ summary: 'one workflow run with its jobs, steps and conclusions', required: ['runId'], optional: ['limit'], needs: { actions: 'read' }, capability: 'workflowRunRead' }),

  // ----- write group -----
  pr_create: W({ summary: 'opens a pull request from head (a pushed branch) into base', required: ['title', 'head', 'base'], optional: ['body', 'draft'], needs: PR_WRITE, capability: 'pullRequestCreate' }),
  pr_update: W({ summary: 'edits title, body, base, or closes/reopens (state open|closed)', required: ['prNumber'], optional: [], atLeastOne: [['title', 'body', 'base', 'state']], values: { state: ['open', 'closed'] }, needs: PR_WRITE, capability: 'pullRequestCreate' }),
  pr_comment: W({ summary: 'a conversation comment on a pull request', required: ['prNumber', 'body'], optional: [], needs: PR_WRITE, capability: 'issueComment' }),
  issue_create: W({ summary: 'opens an issue', required: ['title'], optional: ['body', 'labels', 'assignees'], needs: ISSUE_WRITE, capability: 'issueCreate' }),
  issue_comment: W({ summary: 'a comment on an issue', required: ['issueNumber', 'body'], optional: [], needs: ISSUE_WRITE, capability: 'issueComment' }),
  issue_comment_update: W({ summary: 'replaces the body of an issue or pull-request conversation comment', required: ['commentId', 'body'], optional: [], needs: ISSUE_WRITE, capability: 'issueComment' }),
  label_create: W({ summary: 'creates a repository label', required: ['name', 'color'], optional: ['description'], needs: ISSUE_WRITE, capability: 'issueCreate' }),
  issue_labels_add: W({ summary: 'adds labels to an issue or pull request; unknown labels are refused unless createMissingLabels', required: ['issueNumber', 'labels'], optional: ['createMissingLabels'], needs: ISSUE_WRITE, capability: 'issueCreate' }),
  issue_labels_remove: W({ summary: 'removes labels from an issue or pull request (absent ones are reported, not an error)', required: ['issueNumber', 'labels'], optional: [], needs: ISSUE_WRITE, capability: 'issueCreate' }),
  issue_update: W({
    summary: 'edits title, body, state (open|closed) with stateReason, labels (replace), assignees (replace)',
    required: ['issueNumber'],
    optional: [],
    atLeastOne: [['title', 'body', 'state', 'stateReason', 'labels', 'assignees']],
    values: { state: ['open', 'closed'] },
    needs: ISSUE_WRITE,
    capability: 'issueCreate',
  }),
  issue_publish: W({
    summary: 'publishes a document as an issue: updates the open issue Atelier published under this exact title, or creates it (createMissing, =true)',
    required: ['title', 'body'],
    optional: ['labels', 'assignees', 'createMissing', 'createMissingLabels'],
    needs: ISSUE_WRITE,
    capability: 'issueCreate',
  }),
  pr_review: W({ summary: 'submits a review (event COMMENT|APPROVE|REQUEST_CHANGES; body required except for APPROVE)', required: ['prNumber', 'event'], optional: ['body', 'commitId'], values: { event: ['COMMENT', 'APPROVE', 'REQUEST_CHANGES'] }, needs: PR_WRITE, capability: 'pullRequestReview' }),
  pr_review_comment: W({
    summary: 'a review comment on a diff line (line, side =RIGHT; startLine/startSide for a range; commitId =head)',
    required: ['prNumber', 'body', 'path', 'line'],
    optional: ['side', 'startLine', 'startSide', 'commitId'],
    needs: PR_WRITE,
    capability: 'pullRequestReview',
  }),
  pr_review_reply: W({ summary: 'replies in a review thread: threadId (PRRT_), or prNumber and commentId of a comment in it', required: ['body'], optional: ['prNumber'], exactlyOne: [['threadId', 'commentId']], needs: PR_WRITE, capability: 'pullRequestReview' }),
  pr_review_thread_resolve: W({ summary: 'resolves a review thread', required: ['threadId'], optional: [], needs: PR_WRITE, capability: 'pullRequestReview' }),
  pr_review_thread_unresolve: W({ summary: 'unresolves a review thread', required: ['threadId'], optional: [], needs: PR_WRITE, capability: 'pullRequestReview' }),
  pr_reviewers_request: W({ summary: 'requests reviews from users and/or teams', required: ['prNumber'], optional: [], atLeastOne: [['reviewers', 'teamReviewers']], needs: PR_WRITE, capability: 'pullRequestReview' }),
  pr_reviewers_remove: W({ summary: 'removes requested reviewers', required: ['prNumber'], optional: [], atLeastOne: [['reviewers', 'teamReviewers']], needs: PR_WRITE, capability: 'pullRequestReview' }),
  pr_ready: W({ summary: 'marks a draft pull request ready for review', required: ['prNumber'], optional: [], needs: PR_WRITE, capability: 'pullRequestCreate' }),
  pr_convert_to_draft: W({ summary: 'converts a pull request to a draft', required: ['prNumber'], optional: [], needs: PR_WRITE, capability: 'pullRequestCreate' }),
  pr_merge: W({
    summary: 'merges now (method =merge; matchHeadCommit refuses if the head moved) and reports the stored result',
    required: ['prNumber'],
    optional: ['method', 'commitTitle', 'commitBody', 'matchHeadCommit'],
    needs: { contents: 'write', pull_requests: 'write' },
    capability: 'pullRequestMerge',
  }),
  pr_auto_merge_enable: W({
    summary: 'enables auto-merge (method =merge) and reports the stored request',
    required: ['prNumber'],
    optional: ['method', 'commitTitle', 'commitBody', 'matchHeadCommit'],
    needs: { contents: 'write', pull_requests: 'write' },
    capability: 'pullRequestMerge',
  }),
  pr_auto_merge_disable: W({ summary: 'disables auto-merge', required: ['prNumber'], optional: [], needs: { contents: 'write', pull_requests: 'write' }, capability: 'pullRequestMerge' }),
  commit_status_create: W({
    summary: 'sets a commit status (status pending|success|failure) for context on a full commit sha',
    required: ['sha', 'status', 'context'],
    optional: ['description', 'targetUrl'],
    values: { status: ['pending', 'success', 'failure'] },
    fullSha: ['sha'],
    needs: { statuses: 'write' },
    capability: 'commitStatusCreate',
  }),
  workflow_dispatch: W({ summary: 'starts a workflow_dispatch run of workflow on ref with inputs', required: ['workflow', 'ref'], optional: ['inputs'], needs: { actions: 'write' }, capability: 'workflowDispatch' }),
  workflow_run_rerun_failed: W({ summary: 're-runs the failed jobs of a workflow run', required: ['runId'], optional: [], needs: { actions: 'write' }, capability: 'workflowRunRerun' }),
} satisfies Record<string, ActionSpec>;

export type ActionName = keyof typeof ACTIONS;
export const ACTION_NAMES = Object.keys(ACTIONS) as ActionName[];

/** Parameters every call may carry whatever the action. */
const ALWAYS = new Set(['action', 'workspaceId']);

/**
 * The parameter rule of one call: the first problem as { field, message }, or undefined. Run
 * before anything is sent (the tools' `check` hook).
 */
export function checkActionArgs(args: Record<string, unknown>): { field: string; message: string } | undefined {
  const action = args.action as ActionName;
  const spec: ActionSpec | undefined = ACTIONS[action];
  if (!spec) return { field: 'action', message: 'is not a repohost action' };
  const present = (f: string) => args[f] !== undefined;
  for (const f of spec.required) if (!present(f)) return { field: f, message: `is required for ${action}` };
  const allowed = new Set([...spec.required, ...spec.optional, ...(spec.exactlyOne ?? []).flat(), ...(spec.atLeastOne ?? []).flat()]);
  for (const f of Object.keys(args))
    if (present(f) && !ALWAYS.has(f) && !allowed.has(f))
      return { field: f, message: `is not a parameter of ${action}${f === 'idempotencyKey' ? ' (read actions are never replayed)' : ''}; ${action} takes ${describeParams(spec)}` };
  for (const g of spec.exactlyOne ?? []) {
    const n = g.filter(present);
    if (n.length !== 1) return { field: n[1] ?? g[0]!, message: `${action} takes exactly one of ${g.join(', ')}` };
  }
  for (const g of spec.atLeastOne ?? []) if (!g.some(present)) return { field: g[0]!, message: `${action} needs at least one of ${g.join(', ')}` };
  for (const [f, vals] of Object.entries(spec.values ?? {})) if (present(f) && !vals.includes(String(args[f]))) return { field: f, message: `must be one of ${vals.join(', ')} for ${action}` };
  for (const f of spec.fullSha ?? []) if (present(f) && !/^([0-9a-f]{40}|[0-9a-f]{64})$/.test(String(args[f]))) return { field: f, message: `must be a full commit SHA (40 or 64 lowercase hex characters) for ${action}` };
  for (const f of ['since', 'until'])
    if (present(f) && !(/^\d{4}-\d{2}-\d{2}(T\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}:\d{2})?)?$/.test(String(args[f])) && !Number.isNaN(Date.parse(String(args[f])))))
      return { field: f, message: 'must be an ISO 8601 date or time, e.g. 2026-01-31 or 2026-01-31T12:00:00Z' };
  // Rules that tie two parameters together.
  if (action === 'pr_review_reply' && present('commentId') && !present('prNumber')) return { field: 'prNumber', message: 'is required with commentId for pr_review_reply' };
  if (action === 'pr_review_reply' && present('threadId') && present('prNumber')) return { field: 'prNumber', message: 'is not a parameter of pr_review_reply with threadId (the thread names its pull request)' };
  if (action === 'pr_review' && args.event !== 'APPROVE' && !present('body')) return { field: 'body', message: `is required for pr_review with event ${String(args.event)}` };
  if ((action === 'pr_review_comment') && present('startSide') && !present('startLine')) return { field: 'startLine', message: 'is required with startSide' };
  if (action === 'pr_review_comment' && present('startLine') && Number(args.startLine) >= Number(args.line)) return { field: 'startLine', message: 'must be less than line' };
  if (action === 'issue_update' && args.stateReason === 'reopened' && args.state === 'closed') return { field: 'stateReason', message: 'reopened goes with state open' };
  if (action === 'issue_update' && (args.stateReason === 'completed' || args.stateReason === 'not_planned') && args.state === 'open') return { field: 'stateReason', message: `${String(args.stateReason)} goes with state closed` };
  for (const f of ['labels', 'assignees', 'reviewers', 'teamReviewers']) if (present(f) && (args[f] as unknown[]).length === 0 && action !== 'issue_update') return { field: f, message: `must not be empty for ${action}` };
  if (action === 'workflow_dispatch' && args.inputs && Object.keys(args.inputs as object).length > 25) return { field: 'inputs', message: 'has more than 25 inputs (GitHub accepts at most 25)' };
  return undefined;
}

export function describeParams(spec: ActionSpec): string {
  const parts: string[] = [];
  if (spec.required.length) parts.push(spec.required.map((f) => `${f}*`).join(', '));
  for (const g of spec.exactlyOne ?? []) parts.push(`one of (${g.join('|')})*`);
  for (const g of spec.atLeastOne ?? []) parts.push(`at least one of (${g.join('|')})`);
  if (spec.optional.length) parts.push(spec.optional.join(', '));
  return parts.length ? parts.join('; ') : 'no parameters';
}

/** Which actions a set of granted permissions allows. */
export function allowedActions(granted: Needs, only?: 'read'): ActionName[] {
  const rank = (l: Level | undefined) => (l === 'write' ? 2 : l === 'read' ? 1 : 0);
  return ACTION_NAMES.filter((a) => (!only || ACTIONS[a].group === only) && Object.entries(ACTIONS[a].needs).every(([p, l]) => rank(granted[p as Perm]) >= rank(l as Level)));
}

/** The permission a grant lacks for an action, e.g. "pull_requests: write", or null. */
export function missingPermission(action: ActionName, granted: Needs): string | null {
  const rank = (l: Level | undefined) => (l === 'write' ? 2 : l === 'read' ? 1 : 0);
  const miss = Object.entries(ACTIONS[action].needs).filter(([p, l]) => rank(granted[p as Perm]) < rank(l as Level));
  return miss.length ? miss.map(([p, l]) => `${p}: ${l}`).join(', ') : null;
}
