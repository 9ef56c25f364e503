/**
 * Deployment targets (docs/extensions.md). Targets are defined in the repository
 * (.atelier/deployments.json: name, command, timeoutMs, egress hosts, secret names) and run only
 * when the OWNER has enrolled that exact target definition (its SHA-256) for that repository on
 * the CLI or the dashboard (owns table deployment_enrolments). The enrolment is the owner's
 * consent to what the definition names: the hosts it may reach (private addresses only when the
 * enrolment allows them) and the secrets it gets, from the environment the enrolment names.
 *
 * A run is a short-lived sandbox on the workspace's checkout (never the host), with a clean
 * environment holding only the target's secrets, and an egress proxy that allows only the
 * target's hosts and ports (src/sandbox/egress.ts); every egress decision is returned. Output is
 * redacted of every known secret value.
 */
import { chown, mkdtemp, rm } from 'node:fs/promises';
import { join } from 'node:path';
import type { DB } from '../../store/db.js';
import type { AuditLog, Actor } from '../audit.js';
import type { Config } from '../../core/config.js';
import type { Logger } from '../../core/log.js';
import { ServiceError } from '../../core/errors.js';
import { nowIso } from '../../core/clock.js';
import type { Executor, SandboxNetwork } from '../../sandbox/executor.js';
import { startEgressProxy, type EgressDecision } from '../../sandbox/egress.js';
import type { WorkspaceService } from '../workspaces.js';
import type { EnvironmentService } from '../environments.js';
import { DEPLOY_MANIFEST, parseDeployManifest, type DeployTarget, type Manifest } from './format.js';
import type { SkillService } from './skills.js';

interface Deps {
  db: DB;
  audit: AuditLog;
  config: Config;
  log: Logger;
  executor: Executor;
  workspaces: WorkspaceService;
  environments: EnvironmentService;
  skills: SkillService;
}

export interface Enrolment {
  repositoryUrl: string;
  target: string;
  targetSha256: string;
  environmentId: string | null;
  allowPrivateHosts: boolean;
  createdAt: string;
}

const SHA_RE = /^[0-9a-f]{64}$/;

export class DeploymentService {
  constructor(private readonly deps: Deps) {}

  // ---------- owner enrolments (CLI and dashboard) ----------

  enrolments(repositoryUrl?: string): Enrolment[] {
    const rows = (
      repositoryUrl
        ? this.deps.db.prepare('SELECT * FROM deployment_enrolments WHERE repository_url = ? ORDER BY target').all(repositoryUrl)
        : this.deps.db.prepare('SELECT * FROM deployment_enrolments ORDER BY repository_url, target').all()
    ) as Array<Record<string, unknown>>;
    return rows.map((r) => ({
      repositoryUrl: r.repository_url as string,
      target: r.target as string,
      targetSha256: r.target_sha256 as string,
      environmentId: (r.environment_id as string | null) ?? null,
      allowPrivateHosts: r.allow_private === 1,
      createdAt: r.created_at as string,
    }));
  }

  enrol(a: { repositoryUrl: string; target: string; targetSha256: string; environmentId?: string; allowPrivateHosts?: boolean }, actor: Actor): Enrolment {
    let url: URL;
    try {
      url = new URL(a.repositoryUrl);
    } catch {
      throw new ServiceError('INVALID_ARGUMENT', 'repositoryUrl: an https URL of a repository, exactly as workspaces open it', { field: 'repositoryUrl' });
    }
    if (url.protocol !== 'https:' || url.username || url.password) throw new ServiceError('INVALID_ARGUMENT', 'repositoryUrl: an https URL without credentials', { field: 'repositoryUrl' });
    if (!/^[A-Za-z0-9._-]{1,120}$/.test(a.target)) throw new ServiceError('INVALID_ARGUMENT', 'target: 1-120 characters of A-Z a-z 0-9 . _ -', { field: 'target' });
    const sha = a.targetSha256.toLowerCase();
    if (!SHA_RE.test(sha)) throw new ServiceError('INVALID_ARGUMENT', 'targetSha256: 64 hexadecimal characters (from deployments_list)', { field: 'targetSha256' });
    const env = a.environmentId ? this.deps.environments.resolve(a.environmentId, 'environmentId') : null;
    this.deps.db
      .prepare(
        `INSERT INTO deployment_enrolments (repository_url, target, target_sha256, environment_id, allow_private, created_at, created_by) VALUES (?, ?, ?, ?, ?, ?, ?)
         ON CONFLICT(repository_url, target) DO UPDATE SET target_sha256 = excluded.target_sha256, environment_id = excluded.environment_id, allow_private = excluded.allow_private, created_at = excluded.created_at, created_by = excluded.created_by`,
      )
      .run(a.repositoryUrl, a.target, sha, env, a.allowPrivateHosts ? 1 : 0, nowIso(), actor);
    this.deps.audit.record({ actor, action: 'deployment_enrol', target: `${a.repositoryUrl}#${a.target}`, outcome: 'ok', details: { targetSha256: sha, environmentId: env, allowPrivateHosts: !!a.allowPrivateHosts } });
    return this.enrolments(a.repositoryUrl).find((e) => e.target === a.target)!;
  }

  revoke(repositoryUrl: string, target: string, actor: Actor): Record<string, unknown> {
    const r = this.deps.db.prepare('DELETE FROM deployment_enrolments WHERE repository_url = ? AND target = ?').run(repositoryUrl, target);
    if (r.changes === 0) throw new ServiceError('NOT_FOUND', `no enrolment of target ${target} for ${repositoryUrl}`, { field: 'target' });
    this.deps.audit.record({ actor, action: 'deployment_revoke', target: `${repositoryUrl}#${target}`, outcome: 'ok' });
    return { repositoryUrl, target, revoked: true };
  }

  // ---------- tools ----------

  private async manifest(workspaceId: string, signal?: AbortSignal): Promise<Manifest<DeployTarget> | null> {
    const b = await this.deps.skills.readWorkspaceFile(workspaceId, DEPLOY_MANIFEST, signal);
    return b ? parseDeployManifest(b.toString('utf8')) : null;
  }

  private howToEnrol(repo: string, t: DeployTarget): string {
    return `the owner enrols it with: atelier deployments allow ${repo} ${t.name} ${t.sha256}${t.secrets.length ? ' --environment ENV' : ''} (or POST /api/v1/deployment-enrolments)`;
  }

  async listTool(workspaceId: string, signal?: AbortSignal): Promise<Record<string, unknown>> {
    const repo = this.deps.workspaces.get(workspaceId).repositoryUrl;
    const m = await this.manifest(workspaceId, signal);
    const enr = this.enrolments(repo);
    return {
      workspaceId,
      manifest: m ? { path: DEPLOY_MANIFEST, sha256: m.sha256, valid: m.problems.length === 0, problems: m.problems } : { path: DEPLOY_MANIFEST, present: false },
      targets: (m?.items ?? []).map((t) => {
        const e = enr.find((x) => x.target === t.name);
        const state = !e ? 'not_enrolled' : e.targetSha256 !== t.sha256 ? 'changed_since_enrolment' : 'enrolled';
        return {
          name: t.name,
          ...(t.description ? { description: t.description } : {}),
          command: t.command,
          timeoutMs: t.timeoutMs,
          egress: t.egress,
          secrets: t.secrets,
          sha256: t.sha256,
          enrolment: state,
          runnable: state === 'enrolled',
          ...(state === 'enrolled' ? { environmentId: e!.environmentId, allowPrivateHosts: e!.allowPrivateHosts } : { howToEnrol: this.howToEnrol(repo, t) }),
        };
      }),
    };
  }

  async runTool(workspaceId: string, a: { name: string; timeoutMs: number }, who: { principal: string; actor: Actor }, signal?: AbortSignal): Promise<Record<string, unknown>> {
    const w = this.deps.workspaces.get(workspaceId);
    const m = await this.manifest(workspaceId, signal);
    if (!m) throw new ServiceError('NOT_FOUND', `name: the checkout has no deployment manifest at ${DEPLOY_MANIFEST}`, { field: 'name' });
    if (m.problems.length) throw new ServiceError('FAILED_PRECONDITION', `${DEPLOY_MANIFEST} is malformed: ${m.problems.join('; ')}`, { problems: m.problems });
    const t = m.items.find((x) => x.name === a.name);
    if (!t) throw new ServiceError('NOT_FOUND', `name: no deployment target ${a.name} (targets: ${m.items.map((x) => x.name).join(', ') || 'none'})`, { field: 'name' });
    const e = this.enrolments(w.repositoryUrl).find((x) => x.target === t.name);
    if (!e || e.targetSha256 !== t.sha256) {
      this.deps.audit.record({ actor: who.actor, principal: who.principal, action: 'deployments_run', target: workspaceId, outcome: 'refused', reason: e ? 'target changed since enrolment' : 'not enrolled', details: { target: t.name, sha256: t.sha256 } });
      throw new ServiceError(
        'PERMISSION_DENIED',
        e
          ? `name: deployment target ${t.name} changed since the owner enrolled it (enrolled ${e.targetSha256}, now ${t.sha256}); nothing ran: ${this.howToEnrol(w.repositoryUrl, t)}`
          : `name: deployment target ${t.name} is not enrolled by the owner; nothing ran: ${this.howToEnrol(w.repositoryUrl, t)}`,
        { field: 'name', targetSha256: t.sha256, enrolledSha256: e?.targetSha256 ?? null },
      );
    }
    const secrets: Record<string, string> = {};
    if (t.secrets.length) {
      if (!e.environmentId) throw new ServiceError('FAILED_PRECONDITION', `name: target ${t.name} needs secrets (${t.secrets.join(', ')}) but its enrolment names no environment; the owner enrols it again with --environment ENV`, { field: 'name' });
      const all = this.deps.environments.injection(e.environmentId);
      const missing = t.secrets.filter((s) => all[s] === undefined);
      if (missing.length) throw new ServiceError('FAILED_PRECONDITION', `name: environment ${e.environmentId} has no ${missing.join(', ')} (needed by target ${t.name})`, { field: 'name', missing });
      for (const s of t.secrets) secrets[s] = all[s]!;
    }
    await this.deps.workspaces.activeHandle(workspaceId); // active workspace, mounted disk, lease refreshed
    const timeoutMs = Math.min(a.timeoutMs, t.timeoutMs);
    const decisions: EgressDecision[] = [];
    let proxy: { close(): Promise<void> } | undefined;
    let tmp: string | undefined;
    let network: SandboxNetwork = 'none';
    try {
      if (t.egress.length) {
        tmp = await mkdtemp(join(this.deps.config.dataDir, 'run', 'd-'));
        await chown(tmp, this.deps.config.sandboxUid, this.deps.config.sandboxUid);
        const socketPath = join(tmp, 'p.sock');
        proxy = await startEgressProxy({
          socketPath,
          workspaceId,
          rules: t.egress.map((h) => ({ host: h.host, ports: h.ports, allowPrivate: e.allowPrivateHosts })),
          onDecision: (dd) => {
            decisions.push(dd);
            this.deps.log.info({ egress: dd, deployment: t.name }, dd.allowed ? 'deployment egress allowed' : 'deployment egress refused');
          },
          socketMode: 0o600,
        });
        await chown(socketPath, this.deps.config.sandboxUid, this.deps.config.sandboxUid);
        network = { proxySocket: socketPath };
      }
      const r = await this.deps.executor.runEphemeral({
        id: `d-${workspaceId.slice(3, 15)}-${Math.random().toString(36).slice(2, 8)}`,
        // With secrets injected the checkout is read-only: a run cannot leave a secret in the workspace's files.
        binds: [{ source: join(this.deps.workspaces.rootDir(workspaceId), 'repo'), target: '/workspace', readOnly: Object.keys(secrets).length > 0 }],
        limits: this.deps.workspaces.sandboxLimits,
        network,
        command: t.command,
        cwd: '/workspace',
        // Every connection goes through the target's proxy: no exceptions (the sandbox default exempts loopback).
        env: { ...secrets, ATELIER_DEPLOYMENT: t.name, ...(t.egress.length ? { NO_PROXY: '', no_proxy: '' } : {}) },
        timeoutMs,
        maxOutputBytes: 262144,
        signal,
      });
      const status = r.timedOut ? 'timed_out' : r.cancelled ? 'cancelled' : r.exitCode === 0 ? 'succeeded' : 'failed';
      this.deps.audit.record({ actor: who.actor, principal: who.principal, action: 'deployments_run', target: workspaceId, outcome: status === 'succeeded' ? 'ok' : 'failed', details: { target: t.name, sha256: t.sha256, exitCode: r.exitCode } });
      // The injected values by name first (known here for sure), then every secret the service knows.
      // Also their common encodings (base64 with and without padding, hex): the enrolment pins the
      // target, not every script it runs, so a changed script printing an encoded secret is cut too.
      const forms = (val: string): string[] => {
        const b = Buffer.from(val, 'utf8');
        return [val, b.toString('base64'), b.toString('base64').replace(/=+$/, ''), b.toString('base64url'), b.toString('hex')].filter((f, i, all) => f.length >= 4 && all.indexOf(f) === i);
      };
      const cut = (v: string) => Object.entries(secrets).reduce((acc, [k, val]) => forms(val).reduce((a2, f) => a2.split(f).join(`[redacted:${k}]`), acc), v);
      r.stdout = cut(r.stdout);
      r.stderr = cut(r.stderr);
      return this.deps.environments.redact({
        workspaceId,
        name: t.name,
        sha256: t.sha256,
        status,
        timeoutMs,
        ...r,
        egress: { allowedHosts: t.egress, decisions: decisions.map((x) => ({ host: x.host, port: x.port, allowed: x.allowed, reason: x.reason })) },
        secretsInjected: t.secrets,
      });
    } finally {
      await proxy?.close().catch(() => undefined);
      if (tmp) await rm(tmp, { recursive: true, force: true }).catch(() => undefined);
    }
  }
}
