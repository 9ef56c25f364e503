/**
 * Bringing a workspace's lease back (docs/workspaces.md): workspace_renew, and workspace_recover:
 * resume an expired workspace, or read its work back as a status, a patch or an exported branch.
 * On images.ts; lifecycle.ts builds on it.
 */
import { ServiceError } from '../../core/errors.js';
import type { ExecResult } from '../../sandbox/executor.js';
import { parseRepoUrl } from '../repos/index.js';
import { gitConfigEnv, NEUTRALISE_REPO_DRIVERS } from '../git/index.js';
import { gitFailure } from '../git/index.js';
import { WorkspaceRow } from './records.js';
import { WorkspaceImages } from './images.js';

export class WorkspaceRecovery extends WorkspaceImages {
  async renew(id: string, extensionSeconds: number | undefined) {
    return this.locked(id, async () => {
      const workspace = this.get(id);
      if (workspace.state === 'closed') throw new ServiceError('NOT_FOUND', `workspace ${id} was closed`, { workspaceId: id });
      if (workspace.state === 'opening') throw new ServiceError('FAILED_PRECONDITION', `workspace ${id} is still opening`, { workspaceId: id });
      const ext = extensionSeconds ?? this.deps.config.idleLeaseSeconds;
      const now = Date.now();
      const requested = new Date(now + ext * 1000).toISOString();
      const capped = Date.parse(requested) > Date.parse(workspace.hardExpiresAt);
      const leaseExpiresAt = capped ? workspace.hardExpiresAt : requested;
      const reactivated = workspace.state === 'expired_recoverable';
      let restarted = false;
      if (reactivated) {
        this.update(id, { state: 'active', state_reason: null });
        await this.startSandbox(this.get(id));
      } else if ((await this.sandboxState(id)) !== 'running') {
        // Active, but its sandbox died (or none runs): resume means working again.
        await this.restartSandbox(id, 'resumed with its sandbox not running');
        restarted = true;
      }
      this.update(id, { lease_expires_at: leaseExpiresAt, last_activity_at: new Date(now).toISOString() });
      this.lastTouch.set(id, now);
      const result: Record<string, unknown> = { workspaceId: id, state: 'active', leaseExpiresAt, hardExpiresAt: workspace.hardExpiresAt, leaseCapped: capped, reactivated, sandboxRestarted: restarted, leaseWarnings: [] as string[] };
      if (capped) {
        result.requestedExpiresAt = requested;
        (result.leaseWarnings as string[]).push(`the lease was capped at hardExpiresAt (${workspace.hardExpiresAt}): a workspace never outlives its maximum lifetime; push or export your work before then`);
      }
      return result;
    });
  }

  // ---------- recovery ----------

  protected async gitIn(workspace: WorkspaceRow, command: string, env: Record<string, string> = {}): Promise<ExecResult> {
    if (workspace.state === 'active') return this.exec(workspace.id, { command: NEUTRALISE_REPO_DRIVERS + command, env: { ...gitConfigEnv(), ...env }, timeoutMs: 120_000, maxOutputBytes: 1_048_576 });
    return this.ephemeralGit(workspace, command, { env, timeoutMs: 120_000 });
  }

  /** The base unpushed work is measured against: the upstream branch, else the cloned commit. */
  protected baseExpr(workspace: WorkspaceRow): string {
    return `$(git rev-parse -q --verify '@{upstream}' 2>/dev/null || echo ${workspace.cloneOid ?? 'HEAD'})`;
  }

  async recover(id: string, mode: 'resume' | 'status' | 'patch' | 'export', targetBranch: string | undefined, principal: string) {
    const workspace = this.get(id);
    if (workspace.state === 'closed') throw new ServiceError('NOT_FOUND', `workspace ${id} was closed and its files removed; nothing to recover`, { workspaceId: id });
    if (workspace.state === 'opening') throw new ServiceError('FAILED_PRECONDITION', `workspace ${id} is still opening`, { workspaceId: id });
    if (mode === 'resume') {
      const r = await this.renew(id, undefined);
      this.deps.principals.setActiveWorkspace(principal, id);
      return { mode, ...r };
    }
    return this.locked(id, async () => {
      const base = this.baseExpr(workspace);
      if (mode === 'status') {
        const r = await this.gitIn(workspace, `set -e; b=${base}; echo "HEAD $(git rev-parse HEAD)"; echo "BASE $b"; git log --format='C %H %s' "$b..HEAD"; git status --porcelain=v1 -uall | sed 's/^/S /'`);
        if (r.exitCode !== 0) throw gitFailure('status', r);
        const lines = r.stdout.split('\n');
        return {
          mode,
          workspaceId: id,
          state: workspace.state,
          headOid: lines.find((l) => l.startsWith('HEAD '))?.slice(5) ?? null,
          baseOid: lines.find((l) => l.startsWith('BASE '))?.slice(5) ?? null,
          unpushedCommits: lines.filter((l) => l.startsWith('C ')).map((l) => ({ oid: l.slice(2, 42), subject: l.slice(43) })),
          uncommittedChanges: lines.filter((l) => l.startsWith('S ')).map((l) => ({ status: l.slice(2, 4).trim(), path: l.slice(5) })),
          hardExpiresAt: workspace.hardExpiresAt,
          leaseExpiresAt: workspace.leaseExpiresAt,
        };
      }
      // Uncommitted work (tracked and untracked) as a commit object made with a temporary index:
      // the workspace's own index and branches are untouched.
      const snapshot = `export GIT_INDEX_FILE="$(mktemp)"; cp .git/index "$GIT_INDEX_FILE" 2>/dev/null || true; git add -A; tree=$(git write-tree); rm -f "$GIT_INDEX_FILE"; unset GIT_INDEX_FILE; if [ "$tree" = "$(git rev-parse 'HEAD^{tree}')" ]; then snap=$(git rev-parse HEAD); else snap=$(git -c user.name='Atelier recovery' -c user.email='recovery@atelier.invalid' commit-tree "$tree" -p HEAD -m 'Uncommitted work saved by workspace_recover'); fi`;
      if (mode === 'patch') {
        const r = await this.gitIn(workspace, `set -e; b=${base}; ${snapshot}; git format-patch --stdout --no-signature "$b..$snap"`);
        if (r.exitCode !== 0) throw gitFailure('patch', r);
        return { mode, workspaceId: id, patch: r.stdout, bytes: Buffer.byteLength(r.stdout), truncated: r.stdoutTruncated === true, empty: r.stdout.trim() === '' };
      }
      // export: push the snapshot to targetBranch through the broker.
      if (!targetBranch) throw new ServiceError('INVALID_ARGUMENT', 'targetBranch: required when mode is export', { field: 'targetBranch' });
      const check = await this.ephemeralGit(workspace, 'git check-ref-format --branch "$B"', { env: { B: targetBranch } });
      if (check.exitCode !== 0) throw new ServiceError('INVALID_ARGUMENT', `targetBranch: ${targetBranch} is not a valid branch name`, { field: 'targetBranch' });
      const repo = parseRepoUrl(workspace.repositoryUrl);
      this.deps.repos.approve(workspace.repositoryUrl);
      const r = await this.ephemeralGit(workspace, `set -e; ${snapshot}; git push -q origin "$snap:refs/heads/$B"; echo "$snap"`, { repo, env: { B: targetBranch } });
      if (r.exitCode !== 0) throw gitFailure('export push', r);
      const pushedOid = r.stdout.trim().split('\n').pop() ?? null;
      this.deps.audit.record({ actor: 'mcp', principal, action: 'workspace_recover_export', target: id, outcome: 'ok', details: { targetBranch, pushedOid } });
      return { mode, workspaceId: id, targetBranch, pushedOid, remote: workspace.repositoryUrl };
    });
  }
}

/** What the methods above answer, by name (the shapes are the code's own, inferred by the compiler). */
export type WorkspaceRecoveryRenewResult = Awaited<ReturnType<WorkspaceRecovery['renew']>>;
export type WorkspaceRecoveryRecoverResult = Awaited<ReturnType<WorkspaceRecovery['recover']>>;
