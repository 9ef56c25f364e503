/**
 * Network git (git_fetch, git_pull, git_push): each runs its network half through
 * WorkspaceService.ephemeralGit (ephemeral.ts), a short-lived sandbox that reaches only the
 * repository host, with the broker's credential; origin is pinned to the approved URL.
 */
import { SpanKind, inSpan, setAttrs } from '../../telemetry/tracing.js';
import { ServiceError } from '../../core/errors.js';
import type { ExecResult } from '../../sandbox/executor.js';
import { parseRepoUrl } from '../repos/index.js';
import { gitFailure } from './ephemeral.js';
import { NET_EXTRA, type GitRunner } from './runner.js';
import { PUSH_FLAG, badRef, parsePushPorcelain, tail } from './parsers.js';
import { doMerge, doRebase } from './merge.js';

export class GitNetwork {
  constructor(private readonly run: GitRunner) {}

  private repoOf(ws: string) {
    const w = this.run.deps.workspaces.get(ws);
    this.run.deps.repos.approve(w.repositoryUrl);
    return { w, repo: parseRepoUrl(w.repositoryUrl) };
  }

  /** Runs a script in the short-lived network sandbox that reaches only the repository host. */
  private async net(ws: string, script: string, env: Record<string, string>, signal?: AbortSignal): Promise<ExecResult> {
    await this.run.deps.workspaces.activeHandle(ws); // refuses expired/closed workspaces clearly; refreshes the lease
    const { repo } = this.repoOf(ws);
    // origin is pinned to the approved URL whatever the workspace wrote into its config; ephemeralGit
    // itself prefixes the repository-driver neutralisation (src/services/git/safety.ts).
    const pin =
      'if ! git config --get remote.origin.url >/dev/null; then git remote add origin "$ATELIER_REPO" || exit 90; ' +
      'elif [ "$(git config --get-all remote.origin.url)" != "$ATELIER_REPO" ]; then git config --replace-all remote.origin.url "$ATELIER_REPO" || exit 90; fi; ' +
      'git config --unset-all remote.origin.pushurl 2>/dev/null; ';
    let host: string | undefined;
    try {
      host = new URL(repo.url).hostname;
    } catch {
      host = undefined;
    }
    // The network half of fetch, pull and push (its own sandbox, reaching only the repository host).
    return inSpan('git network', { kind: SpanKind.CLIENT, attributes: { 'atelier.workspace.id': ws, 'server.address': host } }, async (span) => {
      const r = await this.run.deps.workspaces.ephemeralGit({ id: ws }, NET_EXTRA + pin + script, { repo, env: { LC_ALL: 'C', ...env, ATELIER_REPO: repo.url }, timeoutMs: 600_000, signal });
      setAttrs(span, { 'atelier.exit_code': r.exitCode ?? -1, 'atelier.timed_out': r.timedOut === true });
      return r;
    });
  }

  private static readonly REFS = `git for-each-ref --format='%(objectname) %(refname)' refs/remotes/origin refs/tags`;

  async fetch(ws: string, args: { refspec?: string; depth?: number; unshallow?: boolean; shallowSince?: string }, signal?: AbortSignal) {
    if (args.refspec) {
      const e = badRef('refspec', args.refspec);
      if (e) throw e;
    }
    return this.run.locked(ws, async () => {
      const isShallow = (await this.run.git(ws, ['rev-parse', '--is-shallow-repository'])).stdout.trim() === 'true';
      if (args.unshallow && !isShallow) throw new ServiceError('FAILED_PRECONDITION', 'unshallow: the repository already has its complete history', { field: 'unshallow' });
      const opts = [args.depth !== undefined ? '--depth="$DEPTH"' : '', args.unshallow ? '--unshallow' : '', args.shallowSince ? '--shallow-since="$SINCE"' : ''].join(' ');
      const script =
        `${GitNetwork.REFS}; echo @@FETCH; git fetch -q --no-write-fetch-head --prune origin ${opts} ${args.refspec ? '"$REFSPEC"' : ''} || exit $?; echo @@AFTER; ${GitNetwork.REFS}; ` +
        `echo "@@SHALLOW $(git rev-parse --is-shallow-repository)"`;
      const result = await this.net(ws, script, { DEPTH: String(args.depth ?? ''), SINCE: args.shallowSince ?? '', REFSPEC: args.refspec ?? '' }, signal);
      if (result.exitCode !== 0) throw gitFailure('fetch', result);
      const [beforeText, rest] = result.stdout.split('@@FETCH');
      const afterText = (rest ?? '').split('@@AFTER')[1] ?? '';
      const toMap = (t: string) => new Map(t.split('\n').filter((l) => /^[0-9a-f]{40,64} /.test(l)).map((l) => [l.slice(l.indexOf(' ') + 1), l.slice(0, l.indexOf(' '))] as const));
      const before = toMap(beforeText ?? '');
      const after = toMap(afterText.split('@@SHALLOW')[0] ?? '');
      const updated: Array<Record<string, unknown>> = [];
      for (const [ref, oid] of after) if (before.get(ref) !== oid) updated.push({ ref, oldOid: before.get(ref) ?? null, newOid: oid });
      for (const [ref, oid] of before) if (!after.has(ref)) updated.push({ ref, oldOid: oid, newOid: null, pruned: true });
      const shallow = /@@SHALLOW true/.test(result.stdout);
      return { workspaceId: ws, remote: 'origin', refspec: args.refspec ?? null, updatedRefs: updated, shallow, wasShallow: isShallow };
    });
  }

  async pull(ws: string, args: { branch?: string; strategy: 'ff-only' | 'merge' | 'rebase' }, signal?: AbortSignal) {
    if (args.branch) {
      const e = badRef('branch', args.branch);
      if (e) throw e;
    }
    return this.run.locked(ws, async () => {
      const head = await this.run.head(ws);
      if (!head.branch) throw new ServiceError('FAILED_PRECONDITION', 'HEAD is detached: check out a branch before pulling', { step: 'pull' });
      const progress = await this.run.inProgress(ws);
      if (progress) throw new ServiceError('FAILED_PRECONDITION', `a ${progress} is in progress: finish or abort it first`, { inProgress: progress });
      let branch = args.branch;
      if (!branch) {
        const up = await this.run.git(ws, ['rev-parse', '--abbrev-ref', '--symbolic-full-name', '@{upstream}']);
        branch = up.exitCode === 0 && up.stdout.trim().startsWith('origin/') ? up.stdout.trim().slice(7) : head.branch;
      }
      const check = await this.run.git(ws, ['check-ref-format', '--branch', branch]);
      if (check.exitCode !== 0) throw new ServiceError('INVALID_ARGUMENT', `branch: ${branch} is not a valid branch name`, { field: 'branch' });
      const f = await this.net(ws, 'git fetch -q --no-write-fetch-head origin "+refs/heads/$B:refs/remotes/origin/$B"', { B: branch }, signal);
      if (f.exitCode !== 0) throw gitFailure('pull fetch', f);
      const upstream = `refs/remotes/origin/${branch}`;
      const counts = await this.run.git(ws, ['rev-list', '--left-right', '--count', `HEAD...${upstream}`]);
      const [ahead, behind] = counts.stdout.trim().split(/\s+/).map(Number);
      if (args.strategy === 'ff-only') {
        const result = await this.run.git(ws, ['merge', '--ff-only', '-q', upstream]);
        if (result.exitCode !== 0) {
          if (/Not possible to fast-forward|fatal: Not possible|diverg/i.test(result.stderr))
            throw new ServiceError('FAILED_PRECONDITION', `cannot fast-forward ${head.branch} to origin/${branch}: the branches diverged (${ahead} local, ${behind} remote commits); pull with strategy merge or rebase`, {
              step: 'pull',
              diverged: true,
              ahead,
              behind,
            });
          throw this.run.fail('pull', result);
        }
        const now = await this.run.head(ws);
        return { workspaceId: ws, remote: 'origin', branch, strategy: args.strategy, outcome: now.oid === head.oid ? 'up-to-date' : 'fast-forward', previousHeadOid: head.oid, headOid: now.oid, ahead, behind };
      }
      const res = args.strategy === 'merge' ? await doMerge(this.run, ws, upstream, 'allow', undefined, head.oid) : await doRebase(this.run, ws, 'start', upstream, head.oid);
      return { workspaceId: ws, remote: 'origin', branch, strategy: args.strategy, ...res };
    });
  }

  /** Parses a push refspec into source and the full destination ref. */
  private async pushTarget(ws: string, args: { refspec?: string; delete: boolean }): Promise<{ src: string; dst: string }> {
    let spec = args.refspec;
    if (spec) {
      const e = badRef('refspec', spec);
      if (e) throw e;
      if (spec.startsWith('+')) throw new ServiceError('INVALID_ARGUMENT', 'refspec: "+" (force) refspecs are refused; use forceWithLease with expectedRemoteOid or expectedAbsent', { field: 'refspec' });
    }
    if (!spec) {
      const h = await this.run.head(ws);
      if (!h.branch) throw new ServiceError('INVALID_ARGUMENT', 'refspec: HEAD is detached; give a refspec such as "HEAD:refs/heads/name"', { field: 'refspec' });
      spec = args.delete ? h.branch : `HEAD:refs/heads/${h.branch}`;
    }
    const colon = spec.indexOf(':');
    let src = colon >= 0 ? spec.slice(0, colon) : spec;
    let dst = colon >= 0 ? spec.slice(colon + 1) : spec;
    if (args.delete) {
      dst = colon >= 0 ? dst : spec;
      src = '';
    }
    if (!dst) throw new ServiceError('INVALID_ARGUMENT', 'refspec: no destination ref', { field: 'refspec' });
    if (!dst.startsWith('refs/')) dst = `refs/heads/${dst}`;
    const check = await this.run.git(ws, ['check-ref-format', dst]);
    if (check.exitCode !== 0) throw new ServiceError('INVALID_ARGUMENT', `refspec: ${dst} is not a valid ref name`, { field: 'refspec' });
    return { src, dst };
  }

  async push(
    ws: string,
    args: { refspec?: string; forceWithLease: boolean; expectedRemoteOid?: string; expectedAbsent: boolean; delete: boolean },
    signal?: AbortSignal,
  ) {
    return this.run.locked(ws, () => this.pushLocked(ws, args, signal));
  }

  async pushLocked(
    ws: string,
    args: { refspec?: string; forceWithLease: boolean; expectedRemoteOid?: string; expectedAbsent: boolean; delete: boolean },
    signal?: AbortSignal,
  ) {
    const { src, dst } = await this.pushTarget(ws, args);
    let srcOid: string | null = null;
    if (!args.delete) {
      const r = await this.run.git(ws, ['rev-parse', '-q', '--verify', `${src}^{commit}`]);
      if (r.exitCode !== 0) throw new ServiceError('NOT_FOUND', `refspec: ${src} is not a commit here`, { field: 'refspec' });
      srcOid = r.stdout.trim();
    }
    const lease = args.expectedAbsent ? `--force-with-lease=${dst}:` : args.expectedRemoteOid ? `--force-with-lease=${dst}:${args.expectedRemoteOid}` : args.forceWithLease ? `--force-with-lease=${dst}` : '';
    // srcOid (not the name) is pushed: what was checked is what is sent.
    const script =
      `git push --porcelain ${lease ? '"$LEASE"' : ''} origin "$SPEC"; rc=$?; ` +
      `if [ $rc -ne 0 ]; then echo "@@REMOTE"; git ls-remote origin "$DST" || true; fi; exit $rc`;
    const spec = args.delete ? `:${dst}` : `${srcOid}:${dst}`;
    const result = await this.net(ws, script, { LEASE: lease, SPEC: spec, DST: dst }, signal);
    const refs = parsePushPorcelain(result.stdout.split('@@REMOTE')[0]!);
    const mine = refs.find((x) => x.to === dst);
    if (result.exitCode === 0 && mine?.flag === '=' && (args.expectedAbsent || (args.expectedRemoteOid && args.expectedRemoteOid !== srcOid))) {
      // Nothing to update, so git did not check the lease: the remote already holds srcOid.
      const msg = args.expectedAbsent
        ? `expectedAbsent: ${dst} already exists on origin at ${srcOid}; nothing was pushed`
        : `lease lost: ${dst} on origin is at ${srcOid}, not ${args.expectedRemoteOid}; nothing was pushed`;
      throw new ServiceError('CONFLICT', msg, { step: 'push', ref: dst, remoteOid: srcOid, expectedRemoteOid: args.expectedRemoteOid ?? null, expectedAbsent: args.expectedAbsent });
    }
    if (result.exitCode !== 0) {
      const remoteLine = (result.stdout.split('@@REMOTE')[1] ?? '').split('\n').find((l) => l.endsWith(`\t${dst}`));
      const remoteOid = remoteLine ? remoteLine.split('\t')[0]! : null;
      const summary = mine?.summary ?? '';
      if (/stale info/.test(summary) || /stale info/.test(result.stderr)) {
        const msg = args.expectedAbsent
          ? `expectedAbsent: ${dst} already exists on origin at ${remoteOid}; nothing was pushed`
          : `lease lost: ${dst} on origin is at ${remoteOid ?? '(absent)'}, not ${args.expectedRemoteOid ?? 'the remote-tracking value'}; nothing was pushed`;
        throw new ServiceError('CONFLICT', msg, { step: 'push', ref: dst, remoteOid, expectedRemoteOid: args.expectedRemoteOid ?? null, expectedAbsent: args.expectedAbsent });
      }
      if (/non-fast-forward|fetch first|rejected/.test(summary) && !/pre-receive|hook declined/.test(summary + result.stderr))
        throw new ServiceError('FAILED_PRECONDITION', `push rejected (${summary || 'non-fast-forward'}): origin's ${dst} is at ${remoteOid}; fetch and integrate, or use forceWithLease with expectedRemoteOid`, {
          step: 'push',
          ref: dst,
          remoteOid,
        });
      if (mine?.flag === '!' || /remote rejected|hook declined|pre-receive/.test(result.stderr + summary)) {
        const remoteMsg = result.stderr.split('\n').filter((l) => l.startsWith('remote:')).map((l) => l.slice(7).trim()).filter(Boolean).join('\n');
        throw new ServiceError('FAILED_PRECONDITION', `push rejected by the server: ${remoteMsg || summary || tail(result.stderr, 3)}`, { step: 'push', ref: dst, remoteOid, remoteMessage: remoteMsg || null });
      }
      throw gitFailure('push', result);
    }
    return {
      workspaceId: ws,
      remote: 'origin',
      ref: dst,
      oid: srcOid,
      outcome: mine ? (PUSH_FLAG[mine.flag] ?? mine.summary) : 'up-to-date',
      deleted: args.delete,
      lease: args.expectedAbsent ? 'expectedAbsent' : args.expectedRemoteOid ? 'expectedRemoteOid' : args.forceWithLease ? 'remote-tracking' : null,
    };
  }
}

/** What the methods above answer, by name (the shapes are the code's own, inferred by the compiler). */
export type GitNetworkFetchResult = Awaited<ReturnType<GitNetwork['fetch']>>;
export type GitNetworkPullResult = Awaited<ReturnType<GitNetwork['pull']>>;
export type GitNetworkPushResult = Awaited<ReturnType<GitNetwork['push']>>;
export type GitNetworkPushLockedResult = Awaited<ReturnType<GitNetwork['pushLocked']>>;
