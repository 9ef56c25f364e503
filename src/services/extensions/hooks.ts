/**
 * Repository hooks by manifest digest (docs/extensions.md). The manifest is .atelier/hooks.json
 * in the checkout, read through the in-sandbox daemon. hooks_activate enrols its exact SHA-256
 * for some events of the workspace's repository, for a retention period (owns table
 * hook_activations); from then on the hooks of those events run in the workspace sandbox when
 * git_checkout, git_commit, workspace_finalize and workspace_open reach them. A manifest whose
 * digest differs from the activated one runs nothing. Git's own hooks stay off.
 */
import type { DB } from '../../store/db.js';
import type { AuditLog, Actor } from '../instance/index.js';
import type { CursorCodec } from '../../core/cursor.js';
import type { Logger } from '../../core/log.js';
import { ServiceError } from '../../core/errors.js';
import { COMMAND_TOOL, currentCaller, type CallerGrant } from '../../core/caller.js';
import { isoIn, nowIso } from '../../core/clock.js';
import type { WorkspaceService } from '../workspaces/index.js';
import { HOOK_EVENTS, HOOK_MANIFEST, parseHookManifest, type HookDef, type HookEvent, type Manifest } from './format.js';
import type { FiredEvent, HookFiring, HookRunRecord } from './hook-runner.js';
import type { SkillService } from './skills.js';

export const DEFAULT_HOOK_RETENTION_SECONDS = 86_400;
const HOOK_OUTPUT_BYTES = 65_536;

interface Deps {
  db: DB;
  audit: AuditLog;
  cursors: CursorCodec;
  log: Logger;
  workspaces: WorkspaceService;
  skills: SkillService;
}

interface Activation {
  event: HookEvent;
  manifestSha256: string;
  activatedAt: string;
  expiresAt: string;
  /** 'repository': every workspace of the repository (made by the owner with full access); 'workspace': only the workspace it was made in. */
  scope: 'repository' | 'workspace';
}

/** Who acts: for audit, and the grant that decides what their activation reaches. */
export interface HookActor {
  principal: string;
  actor: Actor;
  grant?: CallerGrant;
}

export class HookService {
  constructor(private readonly deps: Deps) {}

  private repo(workspaceId: string): string {
    return this.deps.workspaces.get(workspaceId).repositoryUrl;
  }

  /** The unexpired activations that reach this workspace: its repository's, and its own. */
  private activations(repositoryUrl: string, workspaceId: string): Activation[] {
    this.deps.db.prepare('DELETE FROM hook_activations WHERE expires_at <= ?').run(nowIso());
    const rows = this.deps.db
      .prepare("SELECT event, manifest_sha256, activated_at, expires_at, workspace_id FROM hook_activations WHERE repository_url = ? AND workspace_id IN ('', ?) ORDER BY workspace_id, event")
      .all(repositoryUrl, workspaceId) as Array<Record<string, string>>;
    return rows.map((r) => ({ event: r.event as HookEvent, manifestSha256: r.manifest_sha256!, activatedAt: r.activated_at!, expiresAt: r.expires_at!, scope: r.workspace_id ? 'workspace' : 'repository' }));
  }

  /** The activation of an event that the current manifest matches (the repository's first), else the first one. */
  private activationFor(acts: Activation[], event: HookEvent, manifestSha256: string | null): Activation | undefined {
    const of = acts.filter((x) => x.event === event);
    return of.find((x) => x.manifestSha256 === manifestSha256) ?? of[0];
  }

  /** Activations of a workspace end with it (repository ones stay until they expire). */
  forgetWorkspace(workspaceId: string): void {
    this.deps.db.prepare('DELETE FROM hook_activations WHERE workspace_id = ?').run(workspaceId);
  }

  /** The current manifest, or null when the checkout has none. */
  async manifest(workspaceId: string, signal?: AbortSignal): Promise<Manifest<HookDef> | null> {
    const b = await this.deps.skills.readWorkspaceFile(workspaceId, HOOK_MANIFEST, signal);
    return b ? parseHookManifest(b.toString('utf8')) : null;
  }

  async listTool(workspaceId: string, args: { event?: HookEvent; includeInactive: boolean; limit: number; cursor?: string }, signal?: AbortSignal) {
    const manifest = await this.manifest(workspaceId, signal);
    const acts = this.activations(this.repo(workspaceId), workspaceId);
    const rows = (manifest?.items ?? [])
      .filter((h) => !args.event || h.event === args.event)
      .map((hook) => {
        const act = this.activationFor(acts, hook.event, manifest?.sha256 ?? null);
        const reason = !act
          ? `not activated for ${hook.event}: review the manifest and call hooks_activate with its manifestSha256`
          : act.manifestSha256 !== manifest!.sha256
            ? `the manifest changed since activation (activated ${act.manifestSha256}, now ${manifest!.sha256}): nothing of it runs until it is activated again`
            : null;
        return { name: hook.name, event: hook.event, command: hook.command, timeoutMs: hook.timeoutMs, sha256: hook.sha256, active: reason === null, ...(reason ? { inactiveReason: reason } : { activatedAt: act!.activatedAt, expiresAt: act!.expiresAt, activationScope: act!.scope }) };
      })
      .filter((h) => args.includeInactive || h.active);
    const file = `${args.event ?? ''}|${args.includeInactive}`;
    let start = 0;
    if (args.cursor) {
      const cur = this.deps.cursors.decode<{ o: number; w: string; f?: string }>('hooks_list', args.cursor);
      if (cur.w !== workspaceId || cur.f !== file) throw new ServiceError('INVALID_ARGUMENT', 'cursor: issued for another workspace or other filters; list again without a cursor', { field: 'cursor' });
      start = cur.o;
    }
    return {
      workspaceId,
      manifest: manifest ? { path: HOOK_MANIFEST, sha256: manifest.sha256, valid: manifest.problems.length === 0, problems: manifest.problems } : { path: HOOK_MANIFEST, present: false },
      activations: acts.map((x) => ({ ...x, current: manifest ? x.manifestSha256 === manifest.sha256 : false })),
      hooks: rows.slice(start, start + args.limit),
      total: rows.length,
      nextCursor: start + args.limit < rows.length ? this.deps.cursors.encode('hooks_list', { o: start + args.limit, w: workspaceId, f: file }) : null,
    };
  }

  /**
   * Enrols the manifest's exact digest for some events. Only the owner with full access (not
   * narrowed, not read-only, not an agent) enrols it for every workspace of the repository; any
   * other caller (the registry already refused one that could not run exec_run) enrols it for this
   * workspace only, where it could run the same commands itself, and the activation ends with the
   * workspace: it never fires later in another workspace (one opened with an environment's secrets,
   * say) that the caller could not reach.
   */
  async activate(workspaceId: string, args: { manifestSha256: string; events: HookEvent[]; retentionSeconds?: number }, who: HookActor, signal?: AbortSignal) {
    const events = [...new Set(args.events)];
    if (events.length !== args.events.length) throw new ServiceError('INVALID_ARGUMENT', 'events: each event at most once', { field: 'events' });
    const manifest = await this.manifest(workspaceId, signal);
    if (!manifest) throw new ServiceError('NOT_FOUND', `manifestSha256: the checkout has no hook manifest at ${HOOK_MANIFEST}`, { field: 'manifestSha256' });
    const want = args.manifestSha256.toLowerCase();
    if (manifest.sha256 !== want)
      throw new ServiceError('CONFLICT', `manifestSha256: ${HOOK_MANIFEST} has SHA-256 ${manifest.sha256}, not ${want}: review it again (hooks_list); nothing was activated`, { field: 'manifestSha256', currentSha256: manifest.sha256 });
    if (manifest.problems.length) throw new ServiceError('FAILED_PRECONDITION', `${HOOK_MANIFEST} is malformed: ${manifest.problems.join('; ')}`, { field: 'manifestSha256', problems: manifest.problems });
    const retention = args.retentionSeconds ?? DEFAULT_HOOK_RETENTION_SECONDS;
    const expiresAt = isoIn(retention * 1000);
    const repo = this.repo(workspaceId);
    const now = nowIso();
    const grant = who.grant ?? currentCaller();
    const scope: Activation['scope'] = grant?.unnarrowed ? 'repository' : 'workspace';
    const put = this.deps.db.prepare(
      'INSERT INTO hook_activations (repository_url, event, workspace_id, manifest_sha256, activated_at, expires_at, activated_by, actor) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(repository_url, event, workspace_id) DO UPDATE SET manifest_sha256 = excluded.manifest_sha256, activated_at = excluded.activated_at, expires_at = excluded.expires_at, activated_by = excluded.activated_by, actor = excluded.actor',
    );
    this.deps.db.transaction(() => {
      for (const e of events) put.run(repo, e, scope === 'repository' ? '' : workspaceId, want, now, expiresAt, who.principal, who.actor);
    })();
    this.deps.audit.record({ actor: who.actor, principal: who.principal, action: 'hooks_activate', target: workspaceId, outcome: 'ok', details: { repositoryUrl: repo, manifestSha256: want, events, expiresAt, scope } });
    return {
      workspaceId,
      repositoryUrl: repo,
      manifestSha256: want,
      events,
      activatedAt: now,
      expiresAt,
      retentionSeconds: retention,
      hooks: manifest.items.filter((h) => events.includes(h.event)).map((h) => ({ name: h.name, event: h.event, sha256: h.sha256 })),
      activationScope: scope,
      scope:
        scope === 'repository'
          ? 'every workspace of this repository whose manifest has this exact digest, until expiresAt'
          : `this workspace only (${workspaceId}), while its manifest has this exact digest, until expiresAt or until the workspace closes: a narrowed token or grant, or an agent, activates hooks only where it could run the commands itself (the owner with full access activates them for the repository)`,
    };
  }

  /**
   * Removes activations of some events: this workspace's own, and (for the owner with full access
   * only) the repository's. A narrowed caller cannot remove the owner's repository activations (a
   * pre_commit gate, say); they are listed as kept.
   */
  deactivate(workspaceId: string, events: HookEvent[] | undefined, who: HookActor) {
    const repo = this.repo(workspaceId);
    const list = events ? [...new Set(events)] : [...HOOK_EVENTS];
    const owner = (who.grant ?? currentCaller())?.unnarrowed === true;
    const before = this.activations(repo, workspaceId);
    const del = this.deps.db.prepare('DELETE FROM hook_activations WHERE repository_url = ? AND event = ? AND workspace_id = ?');
    this.deps.db.transaction(() => {
      for (const e of list) {
        del.run(repo, e, workspaceId);
        if (owner) del.run(repo, e, '');
      }
    })();
    const after = this.activations(repo, workspaceId);
    const removed = [...new Set(before.filter((x) => list.includes(x.event) && !after.some((y) => y.event === x.event && y.scope === x.scope)).map((x) => x.event))];
    const kept = after.filter((x) => list.includes(x.event)).map((x) => ({ event: x.event, scope: x.scope }));
    this.deps.audit.record({ actor: who.actor, principal: who.principal, action: 'hooks_deactivate', target: workspaceId, outcome: 'ok', details: { repositoryUrl: repo, events: list, removed, kept } });
    return {
      workspaceId,
      repositoryUrl: repo,
      deactivated: removed,
      remaining: [...new Set(after.map((x) => x.event))],
      ...(kept.length ? { kept, keptReason: "the repository's activations were made by the owner with full access; only such a caller removes them" } : {}),
    };
  }

  private async runOne(workspaceId: string, hook: HookDef, event: string, timeoutMs: number, signal?: AbortSignal): Promise<HookRunRecord> {
    const result = await this.deps.workspaces.exec(
      workspaceId,
      { command: hook.command, cwd: '.', timeoutMs, maxOutputBytes: HOOK_OUTPUT_BYTES, env: { ATELIER_HOOK_NAME: hook.name, ATELIER_HOOK_EVENT: event } },
      undefined,
      signal,
    );
    return { name: hook.name, event, exitCode: result.exitCode, signal: result.signal, timedOut: result.timedOut, durationMs: result.durationMs, stdout: result.stdout, stderr: result.stderr, stdoutTruncated: result.stdoutTruncated, stderrTruncated: result.stderrTruncated };
  }

  async runTool(
    workspaceId: string,
    args: { name: string; event?: HookEvent; expectedSha256?: string; expectedManifestSha256?: string; timeoutMs: number },
    who: HookActor,
    signal?: AbortSignal,
  ) {
    const manifest = await this.manifest(workspaceId, signal);
    if (!manifest) throw new ServiceError('NOT_FOUND', `name: the checkout has no hook manifest at ${HOOK_MANIFEST}`, { field: 'name' });
    if (args.expectedManifestSha256 && args.expectedManifestSha256.toLowerCase() !== manifest.sha256)
      throw new ServiceError('CONFLICT', `expectedManifestSha256: ${HOOK_MANIFEST} changed: its SHA-256 is now ${manifest.sha256}; nothing ran`, { field: 'expectedManifestSha256', currentSha256: manifest.sha256 });
    if (manifest.problems.length) throw new ServiceError('FAILED_PRECONDITION', `${HOOK_MANIFEST} is malformed: ${manifest.problems.join('; ')}`, { problems: manifest.problems });
    const hook = manifest.items.find((x) => x.name === args.name);
    if (!hook) throw new ServiceError('NOT_FOUND', `name: the manifest has no hook ${args.name} (hooks: ${manifest.items.map((x) => x.name).join(', ') || 'none'})`, { field: 'name' });
    if (args.event && args.event !== hook.event) throw new ServiceError('INVALID_ARGUMENT', `event: hook ${hook.name} is a ${hook.event} hook, not ${args.event}`, { field: 'event', hookEvent: hook.event });
    if (args.expectedSha256 && args.expectedSha256.toLowerCase() !== hook.sha256)
      throw new ServiceError('CONFLICT', `expectedSha256: hook ${hook.name} changed: its SHA-256 is now ${hook.sha256}; nothing ran`, { field: 'expectedSha256', currentSha256: hook.sha256 });
    const act = this.activationFor(this.activations(this.repo(workspaceId), workspaceId), hook.event, manifest.sha256);
    if (!act || act.manifestSha256 !== manifest.sha256)
      throw new ServiceError(
        'FAILED_PRECONDITION',
        act
          ? `name: hook ${hook.name} is inactive: the manifest changed since it was activated (activated ${act.manifestSha256}, now ${manifest.sha256}); review it and call hooks_activate again`
          : `name: hook ${hook.name} is not activated: review ${HOOK_MANIFEST} and call hooks_activate with manifestSha256 ${manifest.sha256} and events [${hook.event}]`,
        { field: 'name', manifestSha256: manifest.sha256, activatedSha256: act?.manifestSha256 ?? null },
      );
    const rec = await this.runOne(workspaceId, hook, hook.event, Math.min(args.timeoutMs, hook.timeoutMs), signal);
    this.deps.audit.record({ actor: who.actor, principal: who.principal, action: 'hooks_run', target: workspaceId, outcome: 'ok', details: { hook: hook.name, event: hook.event, exitCode: rec.exitCode } });
    return { workspaceId, manifestSha256: manifest.sha256, sha256: hook.sha256, ...rec, timeoutMs: Math.min(args.timeoutMs, hook.timeoutMs) };
  }

  /**
   * HookRunner.fire: runs the activated hooks of one event; never throws. The hooks run on behalf
   * of the caller whose call reached this point (core/caller.ts): one that could not run exec_run
   * runs none. Its commit is refused while pre_commit hooks are active (the owner's gate stays a
   * gate); the other events are skipped, said in the result.
   */
  async fire(workspaceId: string, event: FiredEvent, signal?: AbortSignal): Promise<HookFiring | undefined> {
    try {
      const acts = this.activations(this.repo(workspaceId), workspaceId);
      if (!acts.some((x) => x.event === event)) return undefined;
      const caller = currentCaller();
      if (caller && !caller.mayRunCommands) {
        const why = `hooks run commands, and the caller of this ${event} may not run commands (${caller.problem(COMMAND_TOOL)}); a caller never sets in motion a command it could not run with ${COMMAND_TOOL}`;
        this.deps.audit.record({ actor: 'system', action: 'hooks_fire', target: workspaceId, outcome: 'refused', reason: why, details: { event } });
        if (event === 'pre_commit') {
          const rec: HookRunRecord = { name: '(hooks)', event, exitCode: null, signal: null, timedOut: false, durationMs: 0, stdout: '', stderr: why, stdoutTruncated: false, stderrTruncated: false };
          return { event, ran: [], failed: rec, message: `pre_commit hooks are active for this repository and did not run: ${why}` };
        }
        return { event, ran: [], failed: null, skipped: why };
      }
      const manifest = await this.manifest(workspaceId, signal);
      const act = this.activationFor(acts, event, manifest?.sha256 ?? null)!;
      if (!manifest || manifest.sha256 !== act.manifestSha256 || manifest.problems.length) {
        const skipped = !manifest ? `no manifest at ${HOOK_MANIFEST}` : manifest.problems.length ? `the manifest is malformed` : `the manifest changed since activation (activated ${act.manifestSha256}, now ${manifest.sha256}); nothing of it ran`;
        this.deps.audit.record({ actor: 'system', action: 'hooks_fire', target: workspaceId, outcome: 'refused', reason: skipped, details: { event } });
        return { event, ran: [], failed: null, skipped };
      }
      const ran: HookRunRecord[] = [];
      let failed: HookRunRecord | null = null;
      for (const h of manifest.items.filter((x) => x.event === event)) {
        const rec = await this.runOne(workspaceId, h, event, h.timeoutMs, signal);
        ran.push(rec);
        if (rec.exitCode !== 0) {
          failed = rec;
          if (event === 'pre_commit') break;
        }
      }
      this.deps.audit.record({ actor: 'system', action: 'hooks_fire', target: workspaceId, outcome: failed ? 'failed' : 'ok', details: { event, hooks: ran.map((r) => ({ name: r.name, exitCode: r.exitCode })) } });
      return { event, ran, failed, ...(failed ? { message: failureMessage(failed) } : {}) };
    } catch (e) {
      this.deps.log.warn({ err: (e as Error).message, workspace: workspaceId, event }, 'repository hooks could not run');
      // A pre_commit that cannot be checked must not let the commit through.
      const rec: HookRunRecord = { name: '(hooks)', event, exitCode: null, signal: null, timedOut: false, durationMs: 0, stdout: '', stderr: `hooks could not run: ${(e as Error).message}`, stdoutTruncated: false, stderrTruncated: false };
      return event === 'pre_commit' ? { event, ran: [], failed: rec, message: rec.stderr } : { event, ran: [], failed: null, skipped: rec.stderr };
    }
  }
}

/** "pre_commit hook lint failed (exit 1): <last lines of its output>" */
function failureMessage(run: HookRunRecord): string {
  const how = run.timedOut ? 'timed out' : run.exitCode !== null ? `exit ${run.exitCode}` : `signal ${run.signal}`;
  const out = `${run.stderr}\n${run.stdout}`.trim().split('\n').slice(-10).join('\n');
  return `${run.event} hook ${run.name} failed (${how})${out ? `: ${out}` : ''}`;
}

/** What the methods above answer, by name (the shapes are the code's own, inferred by the compiler). */
export type HookListToolResult = Awaited<ReturnType<HookService['listTool']>>;
export type HookActivateResult = Awaited<ReturnType<HookService['activate']>>;
export type HookDeactivateResult = Awaited<ReturnType<HookService['deactivate']>>;
export type HookRunToolResult = Awaited<ReturnType<HookService['runTool']>>;
