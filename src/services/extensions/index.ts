/**
 * Repository extensions (spec section "Repository extensions", issue #19): skills, hooks and
 * deployment targets, safe by construction: nothing a repository carries runs unless it is pinned
 * by digest and, for scripts, approved by the owner. Owns tables owner_skills,
 * extension_workspaces, hook_activations, deployment_enrolments. Decisions: docs/extensions.md.
 */
import type { DB } from '../../store/db.js';
import type { AuditLog, Actor } from '../instance/index.js';
import type { Config } from '../../core/config.js';
import type { CursorCodec } from '../../core/cursor.js';
import type { Logger } from '../../core/log.js';
import type { Executor } from '../../sandbox/executor.js';
import type { WorkspaceService } from '../workspaces/index.js';
import type { ApprovalService } from '../approvals.js';
import type { EnvironmentService } from '../environments.js';
import { SkillService, type SkillOverride, type SkillSetSel } from './skills.js';
import { HookService } from './hooks.js';
import { DeploymentService } from './deployments.js';
import type { FiredEvent, HookFiring, HookRunner } from './hook-runner.js';
/** How long skill_suggest waits for the semantic ranking before it answers lexically. */
const SEMANTIC_TIMEOUT_MS = 3_000;
import { askEndpoint, hybridSuggestion, localSuggestion, redactPrompt, type Embedder } from './suggest.js';

export interface ExtensionDeps {
  db: DB;
  audit: AuditLog;
  config: Config;
  log: Logger;
  cursors: CursorCodec;
  executor: Executor;
  workspaces: WorkspaceService;
  approvals: ApprovalService;
  environments: EnvironmentService;
  builtinDir?: string;
  /** The knowledge store's embedding function, for semantic ranking in skill_suggest; without it the ranking is lexical. */
  embedder?: Embedder;
}

export class ExtensionService implements HookRunner {
  readonly skills: SkillService;
  readonly hooks: HookService;
  readonly deployments: DeploymentService;

  constructor(private readonly deps: ExtensionDeps) {
    this.skills = new SkillService(deps);
    this.hooks = new HookService({ ...deps, skills: this.skills });
    this.deployments = new DeploymentService({ ...deps, skills: this.skills });
  }

  fire(workspaceId: string, event: FiredEvent, signal?: AbortSignal): Promise<HookFiring | undefined> {
    return this.hooks.fire(workspaceId, event, signal);
  }

  async opened(workspaceId: string, args: { repositoryUrl: string; skillSets: unknown[]; skillOverrides: Record<string, unknown> }, signal?: AbortSignal): Promise<HookFiring | undefined> {
    this.skills.setWorkspaceConfig(workspaceId, args.repositoryUrl, { skillSets: args.skillSets as SkillSetSel[], skillOverrides: args.skillOverrides as Record<string, SkillOverride> });
    return this.hooks.fire(workspaceId, 'on_workspace_open', signal);
  }

  forgetWorkspace(workspaceId: string): void {
    this.skills.forgetWorkspace(workspaceId);
    this.hooks.forgetWorkspace(workspaceId);
  }

  /** skill_suggest: at most one roster skill; the endpoint's answer only when it names a roster skill. */
  async suggest(workspaceId: string | undefined, prompt: string, who: { principal: string; actor: Actor }, signal?: AbortSignal) {
    const roster = (await this.skills.roster(workspaceId, signal)).map((s) => ({ name: s.name, description: s.meta.description ?? '', source: s.source }));
    let local: { name: string | null; ranked: ReturnType<typeof localSuggestion>['ranked'] } = localSuggestion(prompt, roster);
    let ranking = 'lexical';
    if (this.deps.embedder) {
      try {
        // The semantic half is a bonus: a model busy elsewhere (the knowledge store re-embedding) never holds the call up.
        let timer: NodeJS.Timeout | undefined;
        const late = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`the embedding model did not answer within ${SEMANTIC_TIMEOUT_MS} ms`)), SEMANTIC_TIMEOUT_MS)));
        try {
          local = await Promise.race([hybridSuggestion(prompt, roster, this.deps.embedder), late]);
        } finally {
          clearTimeout(timer);
        }
        ranking = 'lexical+semantic';
      } catch (e) {
        this.deps.log.warn({ err: (e as Error).message }, 'skill_suggest: the embedding function failed; lexical ranking only');
      }
    }
    const top = local.ranked.slice(0, 3).filter((r) => r.score > 0).map((r) => ({ name: r.name, score: Math.round(r.score * 1000) / 1000, matched: r.matched }));
    const base = { workspaceId: workspaceId ?? null, rosterSize: roster.length };
    const cfg = this.deps.config;
    if (cfg.skillSuggestUrl && cfg.skillSuggestKeyFile && roster.length > 0) {
      let key = '';
      try {
        key = (await import('node:fs')).readFileSync(cfg.skillSuggestKeyFile, 'utf8').trim();
      } catch {
        key = '';
      }
      const red = redactPrompt(prompt, (s) => this.deps.environments.redact(s), [key]);
      const endpoint = await askEndpoint({ url: cfg.skillSuggestUrl, keyFile: cfg.skillSuggestKeyFile }, red.text, roster.map((s) => ({ name: s.name, description: s.description })));
      const inRoster = endpoint.answer !== null && roster.some((s) => s.name === endpoint.answer);
      this.deps.audit.record({ actor: who.actor, principal: who.principal, action: 'skill_suggest_endpoint', target: workspaceId ?? null, outcome: endpoint.error ? 'failed' : inRoster || endpoint.answer === null ? 'ok' : 'refused', reason: endpoint.error ?? (endpoint.answer !== null && !inRoster ? 'answer outside the roster' : undefined), details: { redactions: red.redactions } });
      if (!endpoint.error && (inRoster || endpoint.answer === null)) {
        const s = roster.find((x) => x.name === endpoint.answer);
        return { ...base, skill: endpoint.answer, source: s?.source ?? null, mode: 'endpoint', redactions: red.redactions };
      }
      const state = roster.find((x) => x.name === local.name);
      return {
        ...base,
        skill: local.name,
        source: state?.source ?? null,
        mode: ranking,
        endpoint: endpoint.error ? { used: false, error: endpoint.error } : { used: false, rejected: 'the endpoint named a skill outside the workspace roster' },
        redactions: red.redactions,
        candidates: top,
      };
    }
    const s = roster.find((x) => x.name === local.name);
    return { ...base, skill: local.name, source: s?.source ?? null, mode: ranking, candidates: top };
  }
}

export type { HookRunner } from './hook-runner.js';
export * from './format.js';
export * from './hook-runner.js';
export * from './skills.js';

/** What the methods above answer, by name (the shapes are the code's own, inferred by the compiler). */
export type ExtensionSuggestResult = Awaited<ReturnType<ExtensionService['suggest']>>;
