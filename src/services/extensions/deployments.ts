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
import type { AuditLog, Actor } from '../instance/index.js';
import type { Config } from '../../core/config.js';
import type { Logger } from '../../core/log.js';
import { ServiceError } from '../../core/errors.js';
import { nowIso } from '../../core/clock.js';
import type { Executor, SandboxNetwork } from '../../sandbox/executor.js';
import { startEgressProxy, type EgressDecision } from '../../sandbox/egress.js';
import type { WorkspaceService } from '../workspaces/index.js';
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

  enrol(args: { repositoryUrl: string; target: string; targetSha256: string; environmentId?: string; allowPrivateHosts?: boolean }, actor: Actor): Enrolment {
    let url: URL;
    try {
      url = new URL(args.repositoryUrl);
    } catch {
      throw new ServiceError('INVALID_ARGUMENT', 'repositoryUrl: an https URL of a repository, exactly as workspaces open it', { field: 'repositoryUrl' });
    }
    if (url.protocol !== 'https:' || url.username || url.password) throw new ServiceError('INVALID_ARGUMENT', 'repositoryUrl: an https URL without credentials', { field: 'repositoryUrl' });
    if (!/^[A-Za-z0-9._-]{1,120}$/.test(args.target)) throw new ServiceError('INVALID_ARGUMENT', 'target: 1-120 characters of A-Z a-z 0-9 . _ -', { field: 'target' });
    const sha = args.targetSha256.toLowerCase();
    if (!SHA_RE.test(sha)) throw new ServiceError('INVALID_ARGUMENT', 'targetSha256: 64 hexadecimal characters (from deployments_list)', { field: 'targetSha256' });
    const env = args.environmentId ? this.deps.environments.resolve(args.environmentId, 'environmentId') : null;
    this.deps.db
      .prepare(
        `INSERT INTO deployment_enrolments (repository_url, target, target_sha256, environment_id, allow_private, created_at, created_by) VALUES (?, ?, ?, ?, ?, ?, ?)
         ON CONFLICT(repository_url, target) DO UPDATE SET target_sha256 = excluded.target_sha256, environment_id = excluded.environment_id, allow_private = excluded.allow_private, created_at = excluded.created_at, created_by = excluded.created_by`,
      )
      .run(args.repositoryUrl, args.target, sha, env, args.allowPrivateHosts ? 1 : 0, nowIso(), actor);
    this.deps.audit.record({ actor, action: 'deployment_enrol', target: `${args.repositoryUrl}#${args.target}`, outcome: 'ok', details: { targetSha256: sha, environmentId: env, allowPrivateHosts: !!args.allowPrivateHosts } });
    return this.enrolments(args.repositoryUrl).find((e) => e.target === args.target)!;
  }

  revoke(repositoryUrl: string, target: string, actor: Actor) {
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

  private howToEnrol(repo: string, target: DeployTarget): string {
    return `the owner enrols it with: atelier deployments allow ${repo} ${target.name} ${target.sha256}${target.secrets.length ? ' --environment ENV' : ''} (or POST /api/v1/deployment-enrolments)`;
  }

  async listTool(workspaceId: string, signal?: AbortSignal) {
    const repo = this.deps.workspaces.get(workspaceId).repositoryUrl;
    const manifest = await this.manifest(workspaceId, signal);
    const enr = this.enrolments(repo);
    return {
      workspaceId,
      manifest: manifest ? { path: DEPLOY_MANIFEST, sha256: manifest.sha256, valid: manifest.problems.length === 0, problems: manifest.problems } : { path: DEPLOY_MANIFEST, present: false },
      targets: (manifest?.items ?? []).map((target) => {
        const enrolment = enr.find((x) => x.target === target.name);
        const state = !enrolment ? 'not_enrolled' : enrolment.targetSha256 !== target.sha256 ? 'changed_since_enrolment' : 'enrolled';
        return {
          name: target.name,
          ...(target.description ? { description: target.description } : {}),
          command: target.command,
          timeoutMs: target.timeoutMs,
          egress: target.egress,
          secrets: target.secrets,
          sha256: target.sha256,
          enrolment: state,
          runnable: state === 'enrolled',
          ...(state === 'enrolled' ? { environmentId: enrolment!.environmentId, allowPrivateHosts: enrolment!.allowPrivateHosts } : { howToEnrol: this.howToEnrol(repo, target) }),
        };
      }),
    };
  }

  async runTool(workspaceId: string, args: { name: string; timeoutMs: number }, who: { principal: string; actor: Actor }, signal?: AbortSignal) {
    const workspace = this.deps.workspaces.get(workspaceId);
    const manifest = await this.manifest(workspaceId, signal);
    if (!manifest) throw new ServiceError('NOT_FOUND', `name: the checkout has no deployment manifest at ${DEPLOY_MANIFEST}`, { field: 'name' });
    if (manifest.problems.length) throw new ServiceError('FAILED_PRECONDITION', `${DEPLOY_MANIFEST} is malformed: ${manifest.problems.join('; ')}`, { problems: manifest.problems });
    const target = manifest.items.find((x) => x.name === args.name);
    if (!target) throw new ServiceError('NOT_FOUND', `name: no deployment target ${args.name} (targets: ${manifest.items.map((x) => x.name).join(', ') || 'none'})`, { field: 'name' });
    const enrolment = this.enrolments(workspace.repositoryUrl).find((x) => x.target === target.name);
    if (!enrolment || enrolment.targetSha256 !== target.sha256) {
      this.deps.audit.record({ actor: who.actor, principal: who.principal, action: 'deployments_run', target: workspaceId, outcome: 'refused', reason: enrolment ? 'target changed since enrolment' : 'not enrolled', details: { target: target.name, sha256: target.sha256 } });
      throw new ServiceError(
        'PERMISSION_DENIED',
        enrolment
          ? `name: deployment target ${target.name} changed since the owner enrolled it (enrolled ${enrolment.targetSha256}, now ${target.sha256}); nothing ran: ${this.howToEnrol(workspace.repositoryUrl, target)}`
          : `name: deployment target ${target.name} is not enrolled by the owner; nothing ran: ${this.howToEnrol(workspace.repositoryUrl, target)}`,
        { field: 'name', targetSha256: target.sha256, enrolledSha256: enrolment?.targetSha256 ?? null },
      );
    }
    const secrets: Record<string, string> = {};
    if (target.secrets.length) {
      if (!enrolment.environmentId) throw new ServiceError('FAILED_PRECONDITION', `name: target ${target.name} needs secrets (${target.secrets.join(', ')}) but its enrolment names no environment; the owner enrols it again with --environment ENV`, { field: 'name' });
      const all = this.deps.environments.injection(enrolment.environmentId);
      const missing = target.secrets.filter((s) => all[s] === undefined);
      if (missing.length) throw new ServiceError('FAILED_PRECONDITION', `name: environment ${enrolment.environmentId} has no ${missing.join(', ')} (needed by target ${target.name})`, { field: 'name', missing });
      for (const s of target.secrets) secrets[s] = all[s]!;
    }
    await this.deps.workspaces.activeHandle(workspaceId); // active workspace, mounted disk, lease refreshed
    const timeoutMs = Math.min(args.timeoutMs, target.timeoutMs);
    const decisions: EgressDecision[] = [];
    let proxy: { close(): Promise<void> } | undefined;
    let tmp: string | undefined;
    let network: SandboxNetwork = 'none';
    try {
      if (target.egress.length) {
        tmp = await mkdtemp(join(this.deps.config.dataDir, 'run', 'd-'));
        await chown(tmp, this.deps.config.sandboxUid, this.deps.config.sandboxUid);
        const socketPath = join(tmp, 'p.sock');
        proxy = await startEgressProxy({
          socketPath,
          workspaceId,
          rules: target.egress.map((h) => ({ host: h.host, ports: h.ports, allowPrivate: enrolment.allowPrivateHosts })),
          onDecision: (dd) => {
            decisions.push(dd);
            this.deps.log.info({ egress: dd, deployment: target.name }, dd.allowed ? 'deployment egress allowed' : 'deployment egress refused');
          },
          socketMode: 0o600,
        });
        await chown(socketPath, this.deps.config.sandboxUid, this.deps.config.sandboxUid);
        network = { proxySocket: socketPath };
      }
      const result = await this.deps.executor.runEphemeral({
        id: `d-${workspaceId.slice(3, 15)}-${Math.random().toString(36).slice(2, 8)}`,
        // With secrets injected the checkout is read-only: a run cannot leave a secret in the workspace's files.
        binds: [{ source: join(this.deps.workspaces.rootDir(workspaceId), 'repo'), target: '/workspace', readOnly: Object.keys(secrets).length > 0 }],
        limits: this.deps.workspaces.sandboxLimits,
        network,
        command: target.command,
        cwd: '/workspace',
        // Every connection goes through the target's proxy: no exceptions (the sandbox default exempts loopback).
        env: { ...secrets, ATELIER_DEPLOYMENT: target.name, ...(target.egress.length ? { NO_PROXY: '', no_proxy: '' } : {}) },
        timeoutMs,
        maxOutputBytes: 262144,
        signal,
      });
      const status = result.timedOut ? 'timed_out' : result.cancelled ? 'cancelled' : result.exitCode === 0 ? 'succeeded' : 'failed';
      this.deps.audit.record({ actor: who.actor, principal: who.principal, action: 'deployments_run', target: workspaceId, outcome: status === 'succeeded' ? 'ok' : 'failed', details: { target: target.name, sha256: target.sha256, exitCode: result.exitCode } });
      // The injected values by name first (known here for sure), then every secret the service knows.
      // Also their common encodings (base64 with and without padding, hex): the enrolment pins the
      // target, not every script it runs, so a changed script printing an encoded secret is cut too.
      const forms = (val: string): string[] => {
        const b = Buffer.from(val, 'utf8');
        return [val, b.toString('base64'), b.toString('base64').replace(/=+$/, ''), b.toString('base64url'), b.toString('hex')].filter((f, i, all) => f.length >= 4 && all.indexOf(f) === i);
      };
      const cut = (v: string) => Object.entries(secrets).reduce((acc, [k, val]) => forms(val).reduce((a2, f) => a2.split(f).join(`[redacted:${k}]`), acc), v);
      result.stdout = cut(result.stdout);
      result.stderr = cut(result.stderr);
      return this.deps.environments.redact({
        workspaceId,
        name: target.name,
        sha256: target.sha256,
        status,
        timeoutMs,
        ...result,
        egress: { allowedHosts: target.egress, decisions: decisions.map((x) => ({ host: x.host, port: x.port, allowed: x.allowed, reason: x.reason })) },
        secretsInjected: target.secrets,
      });
    } finally {
      await proxy?.close().catch(() => undefined);
      if (tmp) await rm(tmp, { recursive: true, force: true }).catch(() => undefined);
    }
  }
}

/** What the methods above answer, by name (the shapes are the code's own, inferred by the compiler). */
export type DeploymentRevokeResult = Awaited<ReturnType<DeploymentService['revoke']>>;
export type DeploymentListToolResult = Awaited<ReturnType<DeploymentService['listTool']>>;
export type DeploymentRunToolResult = Awaited<ReturnType<DeploymentService['runTool']>>;
