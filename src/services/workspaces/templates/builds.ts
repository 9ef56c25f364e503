/**
 * Workspace templates: setup that runs once (issue #33 item 3, docs/templates.md). Owns table:
 * workspace_templates.
 *
 * An environment with a setup script makes workspace_open (with that environment) start from a
 * template: the workspace filesystem after the setup script ran, kept per repository, environment,
 * clone request (ref, fetchDepth, shallowSince), setup script, disk size, the digest of the
 * environment's entries (a template is never used once an entry it was built from changed: issue
 * #42 item 5) and base commit. The first
 * open of a key builds it: a clone into a build filesystem of its own, the setup script in a
 * sandbox of its own (the workspace user, `dependency-access`, the environment's entries including
 * its setup-only ones), output streamed as the open's progress. Then the build sandbox is stopped
 * (every process it left ends), the saved tree is searched for the value of every setup-only entry
 * (search.ts: a hit refuses the template; a search that hits its bounds keeps none, and the open
 * goes on without one), free blocks are discarded, and the image is saved (store.ts). The
 * workspace itself starts from a copy, in its own sandbox without the setup-only entries. Later
 * opens whose base commit matches copy the template and run only the maintenance script (in the
 * workspace's own sandbox). A build that fails leaves no template and no workspace: the open's error
 * and the dashboard say why.
 */
import { createHash } from 'node:crypto';
import type { DB } from '../../../store/db.js';
import type { Logger } from '../../../core/log.js';
import type { AuditLog } from '../../instance/index.js';
import type { EnvironmentService } from '../../environments.js';
import type { Executor, SandboxHandle } from '../../../sandbox/executor.js';
import type { ParsedRepoUrl } from '../../repos/index.js';
import { ServiceError } from '../../../core/errors.js';
import { newId } from '../../../core/ids.js';
import { nowIso } from '../../../core/clock.js';
import { remove, removeCopies, save, startFrom, type CopyMethod } from './store.js';
import { searchValues, type SearchBounds } from './search.js';

export type TemplateState = 'building' | 'ready' | 'failed';

export interface TemplateRow {
  id: string;
  repositoryUrl: string;
  environmentId: string;
  key: string;
  clone: CloneRequest;
  baseOid: string | null;
  branch: string | null;
  state: TemplateState;
  failure: string | null;
  sizeBytes: number | null;
  setupMs: number | null;
  uses: number;
  createdAt: string;
  updatedAt: string;
  lastUsedAt: string | null;
}

export interface CloneRequest {
  ref: string | null;
  fetchDepth: number | null;
  shallowSince: string | null;
}

/** What an open with an environment that has a setup script works from. */
export interface TemplatePlan {
  environmentId: string;
  repositoryUrl: string;
  clone: CloneRequest;
  /** What a template is keyed on: baseKey (repository, environment, clone request, script, disk, uid) and the environment's entries (their digest). */
  key: string;
  baseKey: string;
  setupScript: string;
  maintenanceScript: string | null;
}

/**
 * What a template build needs of workspaces, by name: the steps it takes on the build's own id (a
 * disk of its own, the clone, a setup sandbox). The workspace service implements them
 * (sandboxes.ts, images.ts, lifecycle.ts); nothing is lent as a closure.
 */
export interface BuildWorkspaceSteps {
  /** Where `id`'s filesystem is mounted. */
  rootDir(id: string): string;
  /** Mounts a fresh workspace filesystem for `id` (disks/<id>.img at rootDir(id)). */
  ensureDisk(id: string): Promise<void>;
  /** Clones the repository with the clone request into it; the checked-out commit and branch. */
  clone(id: string, repo: ParsedRepoUrl, clone: CloneRequest, signal: AbortSignal): Promise<{ head: string | null; branch: string | null }>;
  /** Starts a sandbox on it with dependency-access and these variables. */
  startSetupSandbox(id: string, env: Record<string, string>): Promise<SandboxHandle>;
  /** Stops the sandbox (every process ends; none given: none started) and its egress proxy. */
  stopStartedSandbox(id: string, handle: SandboxHandle | undefined): Promise<void>;
  /** Discards free blocks, then unmounts; the image stays (its path returned). */
  detachDisk(id: string): Promise<string>;
  /** Unmounts and deletes everything of `id`. */
  removeFiles(id: string): Promise<void>;
}

/** What a build is given: the workspace steps above, the executor that runs the setup script, and the repository the open was approved for. */
export interface BuildDeps {
  workspaces: BuildWorkspaceSteps;
  executor: Pick<Executor, 'exec'>;
  repo: ParsedRepoUrl;
}

type Progress = (message: string) => void;

/** A setup script may run this long (then it is killed and the template fails). */
export const SETUP_TIMEOUT_MS = 30 * 60_000;
/** A maintenance script may run this long (then it is killed and the open fails). */
export const MAINTENANCE_TIMEOUT_MS = 10 * 60_000;
/** Ready templates kept per repository and environment (the newest; older ones are deleted). */
export const KEEP_READY = 3;
/** Failed builds kept per repository and environment, for the dashboard. */
export const KEEP_FAILED = 5;
/** Output kept in a failure reason (the tail). */
const FAILURE_TAIL = 2000;
/** Progress notifications per script at most (one per output line until then). */
const MAX_PROGRESS_LINES = 2000;
/** The setup-only search's time bound (issue #42 item 5); its byte bound is the build's disk size. */
export const SEARCH_MAX_MS = 120_000;

/** A template's key: its base (everything but the entries) with the digest of the environment's entries. */
function keyOf(baseKey: string, entriesDigest: string): string {
  return createHash('sha256').update(`${baseKey}\n${entriesDigest}`).digest('hex');
}

/** A build whose setup-only search could not complete: no template, and the open goes on without one (open.ts). */
export function searchIncomplete(err: unknown): err is ServiceError {
  return err instanceof ServiceError && err.details.searchIncomplete === true;
}

function rowOf(row: Record<string, unknown>): TemplateRow {
  return {
    id: row.id as string,
    repositoryUrl: row.repository_url as string,
    environmentId: row.environment_id as string,
    key: row.template_key as string,
    clone: JSON.parse(row.clone_json as string) as CloneRequest,
    baseOid: (row.base_oid as string | null) ?? null,
    branch: (row.branch as string | null) ?? null,
    state: row.state as TemplateState,
    failure: (row.failure as string | null) ?? null,
    sizeBytes: (row.size_bytes as number | null) ?? null,
    setupMs: (row.setup_ms as number | null) ?? null,
    uses: row.uses as number,
    createdAt: row.created_at as string,
    updatedAt: row.updated_at as string,
    lastUsedAt: (row.last_used_at as string | null) ?? null,
  };
}

/** Splits streamed output into lines, calling `line` for each complete one (and the rest at the end). */
function lineSplitter(line: (l: string) => void): { push(c: Buffer): void; end(): void } {
  let buf = '';
  return {
    push(c) {
      buf += c.toString('utf8');
      let i: number;
      while ((i = buf.indexOf('\n')) >= 0) {
        line(buf.slice(0, i));
        buf = buf.slice(i + 1);
      }
      if (buf.length > 4096) {
        line(buf);
        buf = '';
      }
    },
    end() {
      if (buf) line(buf);
      buf = '';
    },
  };
}

export class TemplateService {
  /** Builds in flight per key: concurrent opens of one key share one build. */
  private readonly building = new Map<string, Promise<TemplateRow>>();
  /** Templates being copied into a workspace (a delete waits for none). */
  private readonly inUse = new Map<string, number>();

  constructor(
    private readonly deps: {
      db: DB;
      log: Logger;
      audit: AuditLog;
      environments: EnvironmentService;
      dataDir: string;
      diskMb: number;
      uid: number;
      /** Whether the executor keeps each workspace in an image file on this host (what a template saves and copies), and which executor runs; absent, images are kept. */
      images?: { onHost: boolean; executor: string };
      /** Overrides of the setup-only search's bounds (default: the disk size in bytes, SEARCH_MAX_MS). */
      searchBounds?: Partial<SearchBounds>;
    },
  ) {}

  /** The plan of an open with this environment, or null when it has no setup script (a plain open). */
  plan(environmentId: string, repositoryUrl: string, clone: CloneRequest): TemplatePlan | null {
    const s = this.deps.environments.scripts(environmentId);
    if (!s.setupScript) return null;
    const images = this.deps.images;
    if (images && !images.onHost)
      throw new ServiceError('NOT_SUPPORTED', `environmentId: environment ${environmentId} has a setup script, whose result is kept as a template: a saved workspace image on the runner's host, which this executor (${images.executor}) does not keep (a workspace's files are on its claim in the cluster); open without the environment or remove its setup script (docs/scaling.md)`, { field: 'environmentId', executor: images.executor });
    if (this.deps.diskMb <= 0)
      throw new ServiceError('FAILED_PRECONDITION', `environmentId: environment ${environmentId} has a setup script, and templates need a filesystem per workspace (sandboxDiskMb is 0); set sandboxDiskMb or remove the setup script`, { field: 'environmentId', setting: 'sandboxDiskMb' });
    const baseKey = this.baseKey(repositoryUrl, s.environmentId, clone, s.setupScript);
    const digest = this.deps.environments.entriesDigest(s.environmentId);
    // Templates of this environment built from other entries (a rotated secret, a value marked
    // setup-only since) or another script are never used again: deleted now, not at retention.
    void this.sweep(s.environmentId, s.setupScript, digest).catch((e) => this.deps.log.warn({ err: e, environment: s.environmentId }, 'deleting the outdated templates of an environment failed'));
    return { environmentId: s.environmentId, repositoryUrl, clone, key: keyOf(baseKey, digest), baseKey, setupScript: s.setupScript, maintenanceScript: s.maintenanceScript };
  }

  private baseKey(repositoryUrl: string, environmentId: string, clone: CloneRequest, setupScript: string): string {
    return createHash('sha256')
      .update(JSON.stringify({ r: repositoryUrl, e: environmentId, c: clone, s: createHash('sha256').update(setupScript).digest('hex'), d: this.deps.diskMb, u: this.deps.uid }))
      .digest('hex');
  }

  /**
   * Deletes the ready templates of an environment whose key is not what an open would ask for
   * now (its entries or setup script changed since they were built): no open can use them, and
   * one holds what a rotated secret was. One being copied is left for the next sweep.
   */
  private async sweep(environmentId: string, setupScript: string, digest: string): Promise<void> {
    const rows = (this.deps.db.prepare("SELECT * FROM workspace_templates WHERE environment_id = ? AND state = 'ready'").all(environmentId) as Array<Record<string, unknown>>).map(rowOf);
    for (const t of rows) {
      if (t.key === keyOf(this.baseKey(t.repositoryUrl, environmentId, t.clone, setupScript), digest)) continue;
      if ((this.inUse.get(t.id) ?? 0) > 0) continue;
      // One a concurrent prune or sweep deleted first, or being copied now: left to the next sweep.
      const gone = await this.delete(t.id).then(() => true, (e) => (this.deps.log.debug({ err: e, template: t.id }, 'an outdated template was not deleted now'), false));
      if (gone) this.deps.log.info({ template: t.id, environment: environmentId }, 'deleted a template built from entries or a setup script that changed since');
    }
  }

  /** The newest ready template of a key (the candidate a warm open copies). */
  latestReady(key: string): TemplateRow | null {
    const r = this.deps.db.prepare("SELECT * FROM workspace_templates WHERE template_key = ? AND state = 'ready' ORDER BY updated_at DESC, id DESC LIMIT 1").get(key) as Record<string, unknown> | undefined;
    return r ? rowOf(r) : null;
  }

  get(id: string): TemplateRow {
    const r = this.deps.db.prepare('SELECT * FROM workspace_templates WHERE id = ?').get(id) as Record<string, unknown> | undefined;
    if (!r) throw new ServiceError('NOT_FOUND', `templateId: no template ${id}`, { field: 'templateId' });
    return rowOf(r);
  }

  /** Every template, newest first, with its environment's name (dashboard). */
  list(): Array<Record<string, unknown>> {
    const rows = this.deps.db
      .prepare('SELECT t.*, e.name AS environment_name FROM workspace_templates t LEFT JOIN environments e ON e.id = t.environment_id ORDER BY t.created_at DESC, t.id DESC')
      .all() as Array<Record<string, unknown>>;
    return rows.map((r) => {
      const t = rowOf(r);
      return {
        templateId: t.id,
        state: t.state,
        repositoryUrl: t.repositoryUrl,
        environmentId: t.environmentId,
        environmentName: (r.environment_name as string | null) ?? null,
        ref: t.clone.ref,
        fetchDepth: t.clone.fetchDepth,
        shallowSince: t.clone.shallowSince,
        baseOid: t.baseOid,
        branch: t.branch,
        sizeBytes: t.sizeBytes,
        setupMs: t.setupMs,
        failure: t.failure,
        uses: t.uses,
        createdAt: t.createdAt,
        updatedAt: t.updatedAt,
        lastUsedAt: t.lastUsedAt,
      };
    });
  }

  /** Deletes a template (its image and its row); refused while an open copies it. */
  async delete(id: string): Promise<void> {
    const t = this.get(id);
    if (t.state === 'building') throw new ServiceError('FAILED_PRECONDITION', `templateId: template ${id} is being built; delete it when the build has ended`, { field: 'templateId', state: t.state });
    if ((this.inUse.get(id) ?? 0) > 0) throw new ServiceError('FAILED_PRECONDITION', `templateId: template ${id} is being copied into a workspace; try again in a moment`, { field: 'templateId' }, true);
    this.deps.db.prepare('DELETE FROM workspace_templates WHERE id = ?').run(id);
    await remove(this.deps.dataDir, id);
  }

  /** Copies a ready template into a workspace image. */
  async startFrom(t: TemplateRow, toImage: string): Promise<{ method: CopyMethod; ms: number }> {
    this.inUse.set(t.id, (this.inUse.get(t.id) ?? 0) + 1);
    try {
      return await startFrom(this.deps.dataDir, t.id, toImage);
    } finally {
      const n = (this.inUse.get(t.id) ?? 1) - 1;
      if (n <= 0) this.inUse.delete(t.id);
      else this.inUse.set(t.id, n);
    }
  }

  noteUse(id: string): void {
    this.deps.db.prepare('UPDATE workspace_templates SET uses = uses + 1, last_used_at = ? WHERE id = ?').run(nowIso(), id);
  }

  /** Builds the template of a plan (or joins the build of the same key already running). */
  build(plan: TemplatePlan, deps: BuildDeps, progress: Progress, signal: AbortSignal): Promise<TemplateRow> {
    const running = this.building.get(plan.key);
    if (running) {
      progress('waiting for the setup another open of this repository and environment is running');
      return running;
    }
    const p = this.doBuild(plan, deps, progress, signal).finally(() => this.building.delete(plan.key));
    this.building.set(plan.key, p);
    return p;
  }

  private async doBuild(plan: TemplatePlan, { workspaces, executor, repo }: BuildDeps, progress: Progress, signal: AbortSignal): Promise<TemplateRow> {
    const id = newId('template');
    const now = nowIso();
    // The entries the setup gets, read once with their digest: the template is keyed on exactly
    // what it was built from (entries changed since the plan: keyed on the new ones).
    const inputs = this.deps.environments.setupInputs(plan.environmentId);
    const key = keyOf(plan.baseKey, inputs.digest);
    this.deps.db
      .prepare(
        `INSERT INTO workspace_templates (id, repository_url, environment_id, template_key, clone_json, state, created_at, updated_at)
         VALUES (?, ?, ?, ?, ?, 'building', ?, ?)`,
      )
      .run(id, plan.repositoryUrl, plan.environmentId, key, JSON.stringify(plan.clone), now, now);
    const redact = (s: string) => this.deps.environments.redact(s);
    let h: SandboxHandle | undefined;
    let step = 'clone';
    const t0 = Date.now();
    try {
      progress(`setup: cloning ${plan.repositoryUrl} for a new template ${id}`);
      await workspaces.ensureDisk(id);
      const { head, branch } = await workspaces.clone(id, repo, plan.clone, signal);
      this.deps.db.prepare('UPDATE workspace_templates SET base_oid = ?, branch = ?, updated_at = ? WHERE id = ?').run(head, branch, nowIso(), id);
      step = 'setup script';
      progress('setup: starting the setup sandbox (dependency-access)');
      h = await workspaces.startSetupSandbox(id, inputs.env);
      const tail: string[] = [];
      let lines = 0;
      const split = lineSplitter((l) => {
        const text = redact(l).slice(0, 500);
        tail.push(text);
        if (tail.length > 40) tail.shift();
        if (++lines <= MAX_PROGRESS_LINES) progress(`setup: ${text}`);
      });
      const r = await executor.exec(h, { command: plan.setupScript, timeoutMs: SETUP_TIMEOUT_MS, maxOutputBytes: 65_536, killGraceMs: 2000 }, (_s, c) => split.push(c), signal);
      split.end();
      if (r.cancelled) throw new ServiceError('CANCELLED', 'the open was cancelled while the setup script ran; no template was kept', { templateId: id, step });
      if (r.timedOut || r.exitCode !== 0) {
        const out = tail.join('\n').slice(-FAILURE_TAIL);
        const why = r.timedOut ? `timed out after ${SETUP_TIMEOUT_MS / 1000} s` : `exited with ${r.exitCode}`;
        throw new ServiceError('FAILED_PRECONDITION', `the setup script of environment ${plan.environmentId} ${why}; no template was kept and no workspace was opened. Last output:\n${out}`, { templateId: id, step, exitCode: r.exitCode, timedOut: r.timedOut === true });
      }
      step = 'stop';
      await workspaces.stopStartedSandbox(id, h);
      h = undefined;
      step = 'secret check';
      progress('setup: checking the result for setup-only values');
      // The values the setup got as setup-only, and those marked setup-only (or rotated) while it ran.
      const values = [...inputs.setupOnly, ...this.deps.environments.setupOnlyValues(plan.environmentId)];
      const found = await searchValues(workspaces.rootDir(id), values, { maxBytes: this.deps.diskMb * 1048576, maxMs: SEARCH_MAX_MS, ...this.deps.searchBounds });
      if (found.kind === 'hit')
        throw new ServiceError(
          'FAILED_PRECONDITION',
          `the setup script left the value of setup-only ${found.name} in ${found.path}${found.via ? ` (in ${found.via})` : ''}; a template never keeps a setup-only value, so none was kept and no workspace was opened. Read it from the environment variable during setup without writing it (npm, pip and git read \${NAME} from their config at run time)`,
          { templateId: id, step, name: found.name, path: found.path, ...(found.via ? { via: found.via } : {}) },
        );
      if (found.kind === 'incomplete') {
        this.deps.log.warn({ template: id, environment: plan.environmentId, reason: found.reason, path: found.path, bytes: found.bytes, ms: found.ms }, 'template not kept: the search for setup-only values did not complete; the open goes on without a template');
        throw new ServiceError(
          'FAILED_PRECONDITION',
          `the search of the setup's result for setup-only values did not complete (${found.reason}), so the tree was not shown free of them and no template was kept`,
          { templateId: id, step, searchIncomplete: true, reason: found.reason, ...(found.path ? { path: found.path } : {}) },
        );
      }
      step = 'save';
      const img = await workspaces.detachDisk(id);
      const { sizeBytes } = await save(this.deps.dataDir, id, img);
      const setupMs = Date.now() - t0;
      this.deps.db.prepare("UPDATE workspace_templates SET state = 'ready', size_bytes = ?, setup_ms = ?, updated_at = ? WHERE id = ?").run(sizeBytes, setupMs, nowIso(), id);
      await workspaces.removeFiles(id); // the mount point (the image was moved)
      this.deps.audit.record({ actor: 'system', action: 'template_build', target: id, outcome: 'ok', details: { environmentId: plan.environmentId, repositoryUrl: plan.repositoryUrl, baseOid: head, sizeBytes, setupMs } });
      progress(`setup: template ${id} ready (${Math.round(sizeBytes / 1048576)} MiB, ${setupMs} ms)`);
      await this.prune(plan);
      return this.get(id);
    } catch (err) {
      // The sandbox, or the egress proxy started for one that did not start.
      if (step !== 'save') await workspaces.stopStartedSandbox(id, h).catch((e) => this.deps.log.warn({ err: e, template: id }, 'stopping a failed setup sandbox failed'));
      await workspaces.removeFiles(id).catch((e) => this.deps.log.error({ err: e, template: id }, 'removing a failed template build failed'));
      await remove(this.deps.dataDir, id).catch(() => undefined);
      const e = err instanceof ServiceError ? err : new ServiceError('FAILED_PRECONDITION', `building the template failed at its ${step}: ${(err as Error).message}; no template was kept and no workspace was opened`, { templateId: id, step });
      if (!e.details.templateId) Object.assign(e.details, { templateId: id, step });
      const reason = redact(`${step}: ${e.message}`);
      this.deps.db.prepare("UPDATE workspace_templates SET state = 'failed', failure = ?, updated_at = ? WHERE id = ?").run(reason, nowIso(), id);
      this.deps.audit.record({ actor: 'system', action: 'template_build', target: id, outcome: 'failed', reason: reason.slice(0, 500) });
      await this.prune(plan).catch(() => undefined);
      throw e;
    }
  }

  /** Keeps the newest KEEP_READY ready and KEEP_FAILED failed templates per repository and environment. */
  private async prune(plan: TemplatePlan): Promise<void> {
    for (const [state, keep] of [['ready', KEEP_READY], ['failed', KEEP_FAILED]] as const) {
      const old = this.deps.db
        .prepare('SELECT id FROM workspace_templates WHERE repository_url = ? AND environment_id = ? AND state = ? ORDER BY updated_at DESC, id DESC LIMIT -1 OFFSET ?')
        .pluck()
        .all(plan.repositoryUrl, plan.environmentId, state, keep) as string[];
      for (const id of old) await this.delete(id).catch((e) => this.deps.log.warn({ err: e, template: id }, 'pruning an old template failed'));
    }
  }

  /** Deletes every template of an environment (the environment is being deleted). */
  async forgetEnvironment(environmentId: string): Promise<void> {
    const ids = this.deps.db.prepare("SELECT id FROM workspace_templates WHERE environment_id = ? AND state != 'building'").pluck().all(environmentId) as string[];
    for (const id of ids) await this.delete(id).catch((e) => this.deps.log.warn({ err: e, template: id }, 'deleting a template of a deleted environment failed'));
  }

  /**
   * After a restart: builds that were running are failed, their sandbox (which outlives a runner)
   * stopped and their files removed; copies into workspaces a stop interrupted are removed.
   */
  async recover(workspaces: { discardBuild(id: string): Promise<void> }): Promise<void> {
    await removeCopies(this.deps.dataDir).catch((e) => this.deps.log.warn({ err: e }, 'removing interrupted template copies failed'));
    const ids = this.deps.db.prepare("SELECT id FROM workspace_templates WHERE state = 'building'").pluck().all() as string[];
    for (const id of ids) {
      await workspaces.discardBuild(id).catch((e) => this.deps.log.error({ err: e, template: id }, 'removing an interrupted template build failed'));
      await remove(this.deps.dataDir, id).catch(() => undefined);
      this.deps.db.prepare("UPDATE workspace_templates SET state = 'failed', failure = ?, updated_at = ? WHERE id = ?").run('interrupted: the service stopped while the template was being built', nowIso(), id);
    }
  }

  /** Secret values replaced by [redacted:NAME] (progress and failure text). */
  redactText(text: string): string {
    return this.deps.environments.redact(text);
  }
}
