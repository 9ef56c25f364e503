/**
 * Repository hooks by manifest digest (docs/extensions.md). The manifest is .atelier/hooks.json
 * in the checkout, read through the in-sandbox daemon. hooks_activate enrols its exact SHA-256
 * for some events of the workspace's repository, for a retention period (owns table
 * hook_activations); from then on the hooks of those events run in the workspace sandbox when
 * git_checkout, git_commit, workspace_finalize and workspace_open reach them. A manifest whose
 * digest differs from the activated one runs nothing. Git's own hooks stay off.
 */
import type { DB } from '../../store/db.js';
import type { AuditLog, Actor } from '../audit.js';
import type { CursorCodec } from '../../core/cursor.js';
import type { Logger } from '../../core/log.js';
import { ServiceError } from '../../core/errors.js';
import { isoIn, nowIso } from '../../core/clock.js';
import type { WorkspaceService } from '../workspaces.js';
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
}

export class HookService {
  constructor(private readonly deps: Deps) {}

  private repo(workspaceId: string): string {
    return this.deps.workspaces.get(workspaceId).repositoryUrl;
  }

  private activations(repositoryUrl: string): Activation[] {
    this.deps.db.prepare('DELETE FROM hook_activations WHERE expires_at <= ?').run(nowIso());
    const rows = this.deps.db.prepare('SELECT event, manifest_sha256, activated_at, expires_at FROM hook_activations WHERE repository_url = ?').all(repositoryUrl) as Array<Record<string, string>>;
    return rows.map((r) => ({ event: r.event as HookEvent, manifestSha256: r.manifest_sha256!, activatedAt: r.activated_at!, expiresAt: r.expires_at! }));
  }

  /** The current manifest, or null when the checkout has none. */
  async manifest(workspaceId: string, signal?: AbortSignal): Promise<Manifest<HookDef> | null> {
    const b = await this.deps.skills.readWorkspaceFile(workspaceId, HOOK_MANIFEST, signal);
    return b ? parseHookManifest(b.toString('utf8')) : null;
  }

  async listTool(workspaceId: string, a: { event?: HookEvent; includeInactive: boolean; limit: number; cursor?: string }, signal?: AbortSignal): Promise<Record<string, unknown>> {
    const m = await this.manifest(workspaceId, signal);
    const acts = this.activations(this.repo(workspaceId));
    const rows = (m?.items ?? [])
      .filter((h) => !a.event || h.event === a.event)
      .map((h) => {
        const act = acts.find((x) => x.event === h.event);
        const reason = !act
          ? `not activated for ${h.event}: review the manifest and call hooks_activate with its manifestSha256`
          : act.manifestSha256 !== m!.sha256
            ? `the manifest changed since activation (activated ${act.manifestSha256}, now ${m!.sha256}): nothing of it runs until it is activated again`
            : null;
        return { name: h.name, event: h.event, command: h.command, timeoutMs: h.timeoutMs, sha256: h.sha256, active: reason === null, ...(reason ? { inactiveReason: reason } : { activatedAt: act!.activatedAt, expiresAt: act!.expiresAt }) };
      })
      .filter((h) => a.includeInactive || h.active);
    const f = `${a.event ?? ''}|${a.includeInactive}`;
    let start = 0;
    if (a.cursor) {
      const cur = this.deps.cursors.decode<{ o: number; w: string; f?: string }>('hooks_list', a.cursor);
      if (cur.w !== workspaceId || cur.f !== f) throw new ServiceError('INVALID_ARGUMENT', 'cursor: issued for another workspace or other filters; list again without a cursor', { field: 'cursor' });
      start = cur.o;
    }
    return {
      workspaceId,
      manifest: m ? { path: HOOK_MANIFEST, sha256: m.sha256, valid: m.problems.length === 0, problems: m.problems } : { path: HOOK_MANIFEST, present: false },
      activations: acts.map((x) => ({ ...x, current: m ? x.manifestSha256 === m.sha256 : false })),
      hooks: rows.slice(start, start + a.limit),
      total: rows.length,
      nextCursor: start + a.limit < rows.length ? this.deps.cursors.encode('hooks_list', { o: start + a.limit, w: workspaceId, f }) : null,
    };
  }

  async activate(workspaceId: string, a: { manifestSha256: string; events: HookEvent[]; retentionSeconds?: number }, who: { principal: string; actor: Actor }, signal?: AbortSignal): Promise<Record<string, unknown>> {
    const events = [...new Set(a.events)];
    if (events.length !== a.events.length) throw new ServiceError('INVALID_ARGUMENT', 'events: each event at most once', { field: 'events' });
    const m = await this.manifest(workspaceId, signal);
    if (!m) throw new ServiceError('NOT_FOUND', `manifestSha256: the checkout has no hook manifest at ${HOOK_MANIFEST}`, { field: 'manifestSha256' });
    const want = a.manifestSha256.toLowerCase();
    if (m.sha256 !== want)
      throw new ServiceError('CONFLICT', `manifestSha256: ${HOOK_MANIFEST} has SHA-256 ${m.sha256}, not ${want}: review it again (hooks_list); nothing was activated`, { field: 'manifestSha256', currentSha256: m.sha256 });
    if (m.problems.length) throw new ServiceError('FAILED_PRECONDITION', `${HOOK_MANIFEST} is malformed: ${m.problems.join('; ')}`, { field: 'manifestSha256', problems: m.problems });
    const retention = a.retentionSeconds ?? DEFAULT_HOOK_RETENTION_SECONDS;
    const expiresAt = isoIn(retention * 1000);
    const repo = this.repo(workspaceId);
    const now = nowIso();
    const put = this.deps.db.prepare(
      'INSERT INTO hook_activations (repository_url, event, manifest_sha256, activated_at, expires_at, activated_by) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(repository_url, event) DO UPDATE SET manifest_sha256 = excluded.manifest_sha256, activated_at = excluded.activated_at, expires_at = excluded.expires_at, activated_by = excluded.activated_by',
    );
    this.deps.db.transaction(() => {
      for (const e of events) put.run(repo, e, want, now, expiresAt, who.principal);
    })();
    this.deps.audit.record({ actor: who.actor, principal: who.principal, action: 'hooks_activate', target: workspaceId, outcome: 'ok', details: { repositoryUrl: repo, manifestSha256: want, events, expiresAt } });
    return {
      workspaceId,
      repositoryUrl: repo,
      manifestSha256: want,
      events,
      activatedAt: now,
      expiresAt,
      retentionSeconds: retention,
      hooks: m.items.filter((h) => events.includes(h.event)).map((h) => ({ name: h.name, event: h.event, sha256: h.sha256 })),
      scope: 'every workspace of this repository whose manifest has this exact digest, until expiresAt',
    };
  }

  deactivate(workspaceId: string, events: HookEvent[] | undefined, who: { principal: string; actor: Actor }): Record<string, unknown> {
    const repo = this.repo(workspaceId);
    const list = events ? [...new Set(events)] : [...HOOK_EVENTS];
    const before = this.activations(repo).map((x) => x.event);
    const del = this.deps.db.prepare('DELETE FROM hook_activations WHERE repository_url = ? AND event = ?');
    this.deps.db.transaction(() => {
      for (const e of list) del.run(repo, e);
    })();
    const removed = list.filter((e) => before.includes(e));
    this.deps.audit.record({ actor: who.actor, principal: who.principal, action: 'hooks_deactivate', target: workspaceId, outcome: 'ok', details: { repositoryUrl: repo, events: list, removed } });
    return { workspaceId, repositoryUrl: repo, deactivated: removed, remaining: this.activations(repo).map((x) => x.event) };
  }

  private async runOne(workspaceId: string, h: HookDef, event: string, timeoutMs: number, signal?: AbortSignal): Promise<HookRunRecord> {
    const r = await this.deps.workspaces.exec(
      workspaceId,
      { command: h.command, cwd: '.', timeoutMs, maxOutputBytes: HOOK_OUTPUT_BYTES, env: { ATELIER_HOOK_NAME: h.name, ATELIER_HOOK_EVENT: event } },
      undefined,
      signal,
    );
    return { name: h.name, event, exitCode: r.exitCode, signal: r.signal, timedOut: r.timedOut, durationMs: r.durationMs, stdout: r.stdout, stderr: r.stderr, stdoutTruncated: r.stdoutTruncated, stderrTruncated: r.stderrTruncated };
  }

  async runTool(
    workspaceId: string,
    a: { name: string; event?: HookEvent; expectedSha256?: string; expectedManifestSha256?: string; timeoutMs: number },
    who: { principal: string; actor: Actor },
    signal?: AbortSignal,
  ): Promise<Record<string, unknown>> {
    const m = await this.manifest(workspaceId, signal);
    if (!m) throw new ServiceError('NOT_FOUND', `name: the checkout has no hook manifest at ${HOOK_MANIFEST}`, { field: 'name' });
    if (a.expectedManifestSha256 && a.expectedManifestSha256.toLowerCase() !== m.sha256)
      throw new ServiceError('CONFLICT', `expectedManifestSha256: ${HOOK_MANIFEST} changed: its SHA-256 is now ${m.sha256}; nothing ran`, { field: 'expectedManifestSha256', currentSha256: m.sha256 });
    if (m.problems.length) throw new ServiceError('FAILED_PRECONDITION', `${HOOK_MANIFEST} is malformed: ${m.problems.join('; ')}`, { problems: m.problems });
    const h = m.items.find((x) => x.name === a.name);
    if (!h) throw new ServiceError('NOT_FOUND', `name: the manifest has no hook ${a.name} (hooks: ${m.items.map((x) => x.name).join(', ') || 'none'})`, { field: 'name' });
    if (a.event && a.event !== h.event) throw new ServiceError('INVALID_ARGUMENT', `event: hook ${h.name} is a ${h.event} hook, not ${a.event}`, { field: 'event', hookEvent: h.event });
    if (a.expectedSha256 && a.expectedSha256.toLowerCase() !== h.sha256)
      throw new ServiceError('CONFLICT', `expectedSha256: hook ${h.name} changed: its SHA-256 is now ${h.sha256}; nothing ran`, { field: 'expectedSha256', currentSha256: h.sha256 });
    const act = this.activations(this.repo(workspaceId)).find((x) => x.event === h.event);
    if (!act || act.manifestSha256 !== m.sha256)
      throw new ServiceError(
        'FAILED_PRECONDITION',
        act
          ? `name: hook ${h.name} is inactive: the manifest changed since it was activated (activated ${act.manifestSha256}, now ${m.sha256}); review it and call hooks_activate again`
          : `name: hook ${h.name} is not activated: review ${HOOK_MANIFEST} and call hooks_activate with manifestSha256 ${m.sha256} and events [${h.event}]`,
        { field: 'name', manifestSha256: m.sha256, activatedSha256: act?.manifestSha256 ?? null },
      );
    const rec = await this.runOne(workspaceId, h, h.event, Math.min(a.timeoutMs, h.timeoutMs), signal);
    this.deps.audit.record({ actor: who.actor, principal: who.principal, action: 'hooks_run', target: workspaceId, outcome: 'ok', details: { hook: h.name, event: h.event, exitCode: rec.exitCode } });
    return { workspaceId, manifestSha256: m.sha256, sha256: h.sha256, ...rec, timeoutMs: Math.min(a.timeoutMs, h.timeoutMs) };
  }

  /** HookRunner.fire: runs the activated hooks of one event; never throws. */
  async fire(workspaceId: string, event: FiredEvent, signal?: AbortSignal): Promise<HookFiring | undefined> {
    try {
      const act = this.activations(this.repo(workspaceId)).find((x) => x.event === event);
      if (!act) return undefined;
      const m = await this.manifest(workspaceId, signal);
      if (!m || m.sha256 !== act.manifestSha256 || m.problems.length) {
        const skipped = !m ? `no manifest at ${HOOK_MANIFEST}` : m.problems.length ? `the manifest is malformed` : `the manifest changed since activation (activated ${act.manifestSha256}, now ${m.sha256}); nothing of it ran`;
        this.deps.audit.record({ actor: 'system', action: 'hooks_fire', target: workspaceId, outcome: 'refused', reason: skipped, details: { event } });
        return { event, ran: [], failed: null, skipped };
      }
      const ran: HookRunRecord[] = [];
      let failed: HookRunRecord | null = null;
      for (const h of m.items.filter((x) => x.event === event)) {
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
function failureMessage(r: HookRunRecord): string {
  const how = r.timedOut ? 'timed out' : r.exitCode !== null ? `exit ${r.exitCode}` : `signal ${r.signal}`;
  const out = `${r.stderr}\n${r.stdout}`.trim().split('\n').slice(-10).join('\n');
  return `${r.event} hook ${r.name} failed (${how})${out ? `: ${out}` : ''}`;
}
