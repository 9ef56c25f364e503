/**
 * The repohost parameter table (src/services/repohost/actions.ts) against what is published: the
 * tools' action lists and descriptions, docs/repohost.md's table per action, and the permission
 * arithmetic behind workspace_capabilities.repohostActions. No service needed.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ACTIONS, ACTION_NAMES, allowedActions, checkActionArgs, missingPermission } from '../../src/services/repohost/actions.js';
import { READ_ACTIONS, WRITE_ACTIONS, repohostAction, repohostRead } from '../../src/tools/repohost.js';
import { ROOT } from './harness.js';

describe('the repohost parameter table', () => {
  it('has exactly the spec\'s 15 read and 26 write actions, in the tools\' order', () => {
    expect(ACTION_NAMES).toEqual([...READ_ACTIONS, ...WRITE_ACTIONS]);
    expect(READ_ACTIONS).toHaveLength(15);
    expect(WRITE_ACTIONS).toHaveLength(26);
    for (const a of READ_ACTIONS) expect(ACTIONS[a].group).toBe('read');
    for (const a of WRITE_ACTIONS) expect(ACTIONS[a].group).toBe('write');
  });

  it('names only parameters the tool publishes (the read tool for the read group)', () => {
    for (const a of ACTION_NAMES) {
      const s = ACTIONS[a];
      const input = (s.group === 'read' ? repohostRead : repohostAction).input as Record<string, unknown>;
      for (const f of [...s.required, ...s.optional, ...(s.exactlyOne ?? []).flat(), ...(s.atLeastOne ?? []).flat()]) expect(Object.keys(input), `${a}.${f}`).toContain(f);
    }
  });

  it('is what the tool descriptions publish: each action on a line of its group\'s tool, with exactly its parameters', () => {
    // A line is "action: params" or, for actions that take the same parameters, "a, b: params";
    // limit (every read action but ref_get) and idempotencyKey (every write) are said once in the prose.
    const lineOf = (description: string, a: string) => description.split('\n').slice(1).find((l) => l.slice(0, l.indexOf(': ')).split(', ').includes(a));
    const connectives = new Set(['exactly', 'at', 'least', 'one', 'of', 'no', 'other', 'parameters']);
    for (const a of ACTION_NAMES) {
      const s = ACTIONS[a];
      const [own, other] = s.group === 'read' ? [repohostRead, repohostAction] : [repohostAction, repohostRead];
      const line = lineOf(own.description, a);
      expect(line, a).toBeDefined();
      expect(lineOf(other.description, a), a).toBeUndefined();
      const params = line!.slice(line!.indexOf(': ') + 2);
      const named = params.split(/[\s;/]+/).filter((w) => w && !connectives.has(w));
      const all = [...s.required, ...s.optional, ...(s.exactlyOne ?? []).flat(), ...(s.atLeastOne ?? []).flat()].filter((f) => f !== 'limit' && f !== 'idempotencyKey');
      expect(named.map((w) => w.replace(/\*$/, '')).sort(), a).toEqual([...all].sort());
      for (const f of s.required) expect(named, `${a}.${f}`).toContain(`${f}*`);
      for (const g of s.exactlyOne ?? []) expect(params, a).toContain(`exactly one of ${g.join('/')}`);
      for (const g of s.atLeastOne ?? []) expect(params, a).toContain(`at least one of ${g.join('/')}`);
      // What the prose says of limit and idempotencyKey holds.
      expect(s.optional.includes('limit'), a).toBe(s.group === 'read' && a !== 'ref_get');
      expect(s.optional.includes('idempotencyKey'), a).toBe(s.group === 'write');
    }
    expect(repohostRead.description).toContain('All but ref_get take limit (=30)');
    expect(repohostAction.description).toContain('Writes take idempotencyKey');
  });

  it('is what docs/repohost.md publishes: a table per action with every parameter and its rule', () => {
    const doc = readFileSync(join(ROOT, 'docs/repohost.md'), 'utf8');
    for (const a of ACTION_NAMES) {
      const at = doc.indexOf(`\n### ${a}\n`);
      expect(at, a).toBeGreaterThan(0);
      const section = doc.slice(at + 1).split('\n### ')[0]!;
      const s = ACTIONS[a];
      for (const f of s.required) expect(section, `${a}.${f}`).toContain(`| ${f} | required |`);
      for (const f of s.optional) expect(section, `${a}.${f}`).toContain(`| ${f} | optional |`);
      for (const g of s.exactlyOne ?? []) for (const f of g) expect(section).toContain(`| ${f} | exactly one of`);
      for (const g of s.atLeastOne ?? []) for (const f of g) expect(section).toContain(`| ${f} | at least one of`);
      for (const [p, l] of Object.entries(s.needs)) expect(section).toContain(`${p}: ${l}`);
      const rows = section.split('\n').filter((l) => /^\| [a-zA-Z]+ \| (required|optional|exactly|at least)/.test(l)).length;
      expect(rows, a).toBe(s.required.length + s.optional.length + (s.exactlyOne ?? []).flat().length + (s.atLeastOne ?? []).flat().length);
    }
  });

  it('accepts a complete call and refuses each kind of mistake naming the parameter', () => {
    expect(checkActionArgs({ action: 'pr_create', title: 't', head: 'h', base: 'main', draft: true, idempotencyKey: 'k-12345678' })).toBeUndefined();
    expect(checkActionArgs({ action: 'pr_create', title: 't', base: 'main' })).toEqual({ field: 'head', message: 'is required for pr_create' });
    expect(checkActionArgs({ action: 'pr_view', prNumber: 1, body: 'x' })?.field).toBe('body');
    expect(checkActionArgs({ action: 'commit_status_get', sha: 'a', ref: 'b' })?.field).toBe('ref');
    expect(checkActionArgs({ action: 'pr_update', prNumber: 1 })?.message).toBe('pr_update needs at least one of title, body, base, state');
    expect(checkActionArgs({ action: 'pr_update', prNumber: 1, state: 'all' })?.field).toBe('state');
    expect(checkActionArgs({ action: 'pr_review_reply', body: 'x', commentId: 4 })?.field).toBe('prNumber');
    expect(checkActionArgs({ action: 'pr_review_reply', body: 'x', threadId: 'PRRT_abcd', prNumber: 3 })?.field).toBe('prNumber');
    expect(checkActionArgs({ action: 'pr_review_comment', prNumber: 1, body: 'b', path: 'p', line: 3, startLine: 3 })?.field).toBe('startLine');
    expect(checkActionArgs({ action: 'pr_review_comment', prNumber: 1, body: 'b', path: 'p', line: 3, startSide: 'LEFT' })?.field).toBe('startLine');
    expect(checkActionArgs({ action: 'issue_labels_add', issueNumber: 1, labels: [] })?.field).toBe('labels');
    expect(checkActionArgs({ action: 'issue_update', issueNumber: 1, labels: [] })).toBeUndefined(); // clears the labels
    expect(checkActionArgs({ action: 'workflow_dispatch', workflow: 'ci.yml', ref: 'main', inputs: Object.fromEntries(Array.from({ length: 26 }, (_, i) => [`i${i}`, 'v'])) })?.field).toBe('inputs');
    expect(checkActionArgs({ action: 'issue_list', since: '2026-02-30T25:00:00Z' })?.field).toBe('since');
  });

  it('derives the allowed actions from permissions, and names what is missing', () => {
    expect(allowedActions({})).toEqual([]);
    expect(allowedActions({ contents: 'write', issues: 'write', pull_requests: 'write', statuses: 'write', checks: 'read', actions: 'write' })).toEqual(ACTION_NAMES);
    expect(allowedActions({ pull_requests: 'write' })).toEqual(ACTION_NAMES.filter((a) => Object.keys(ACTIONS[a].needs).every((p) => p === 'pull_requests')));
    expect(allowedActions({ pull_requests: 'read', contents: 'read' }, 'read')).toEqual(['pr_list', 'pr_view', 'pr_review_threads', 'pr_reviews', 'commit_list', 'compare', 'release_list', 'tag_list', 'ref_get']);
    expect(missingPermission('pr_merge', { pull_requests: 'write', contents: 'read' })).toBe('contents: write');
    expect(missingPermission('pr_merge', {})).toBe('contents: write, pull_requests: write');
    expect(missingPermission('pr_list', { pull_requests: 'write' })).toBeNull();
  });
});
