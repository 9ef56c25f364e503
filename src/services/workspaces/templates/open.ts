/**
 * workspace_open from a template (docs/templates.md): the steps between the workspace row being
 * made and the workspace becoming active, for an open whose environment has a setup script.
 *
 *   1. The newest ready template of the open's key is the candidate: its image is copied to the
 *      workspace's image while the repository's current commit for the ref is read (ls-remote).
 *   2. It matches when its base commit is that commit; otherwise the copy is dropped and a new
 *      template is built (builds.ts: clone, setup script, checks, save) and copied.
 *   3. The workspace's filesystem is mounted and its own sandbox started (its own network profile
 *      and environment entries, never the setup-only ones): for a candidate, as soon as its copy is
 *      there, while the commit is still being read (stopped and dropped when it does not match).
 *   4. On a template that was not built by this open, the maintenance script runs in it.
 * Any failure throws: the caller removes the workspace (nothing half-applied).
 */
import { rm } from 'node:fs/promises';
import type { ExecRequest, ExecResult, SandboxHandle } from '../../../sandbox/executor.js';
import { ServiceError } from '../../../core/errors.js';
import type { ParsedRepoUrl } from '../../repos/index.js';
import { MAINTENANCE_TIMEOUT_MS, searchIncomplete, type BuildDeps, type BuildWorkspaceSteps, type TemplatePlan, type TemplateRow, type TemplateService } from './builds.js';
import type { CopyMethod } from './store.js';

/** What an open from a template needs of workspaces beyond a build's steps (the workspace service implements them). */
export interface TemplateWorkspaceSteps extends BuildWorkspaceSteps {
  /** The workspace's image path (disks/<id>.img): where a template is copied to. */
  imageOf(id: string): string;
  /** The commit a ref names on the repository now (null when it cannot be read without fetching: a short commit id). */
  remoteOid(id: string, repo: ParsedRepoUrl, ref: string | null, signal: AbortSignal): Promise<string | null>;
  /** Starts the workspace's own sandbox (its profile and entries). */
  startWorkspaceSandbox(id: string): Promise<SandboxHandle>;
  /** Records the checked-out branch and commit on the workspace row. */
  noteHead(id: string, branch: string | null, headOid: string | null): void;
}

/** What openFromTemplate is given: the template service, the workspace service as the steps above, the executor (the maintenance script), the approved repository. */
export interface TemplateOpenDeps extends BuildDeps {
  templates: TemplateService;
  workspaces: TemplateWorkspaceSteps;
}

export interface TemplateOpen {
  sandbox: SandboxHandle;
  result: Record<string, unknown>;
}

const SHA_RE = /^[0-9a-f]{7,64}$/;

/** Progress values strictly rising inside [base, base + 1): one per message. */
function within(progress: (p: number, t?: number, m?: string) => void, base: number): (m: string) => void {
  let n = 0;
  return (m) => progress(base + 1 - 1 / (++n + 1), 3, m);
}

async function runScript(deps: TemplateOpenDeps, h: SandboxHandle, script: string, say: (m: string) => void, signal: AbortSignal): Promise<{ r: ExecResult; tail: string }> {
  const lines: string[] = [];
  let buf = '';
  const redact = (s: string) => deps.templates.redactText(s);
  const flush = (l: string) => {
    const text = redact(l).slice(0, 500);
    lines.push(text);
    if (lines.length > 40) lines.shift();
    say(`maintenance: ${text}`);
  };
  const req: ExecRequest = { command: script, timeoutMs: MAINTENANCE_TIMEOUT_MS, maxOutputBytes: 65_536, killGraceMs: 2000 };
  const r = await deps.executor.exec(h, req, (_s, c) => {
    buf += c.toString('utf8');
    let i: number;
    while ((i = buf.indexOf('\n')) >= 0) {
      flush(buf.slice(0, i));
      buf = buf.slice(i + 1);
    }
  }, signal);
  if (buf) flush(buf);
  return { r, tail: lines.join('\n').slice(-2000) };
}

/**
 * The open goes on without a template when the build's search for setup-only values could not
 * complete (a bound hit: issue #42 item 5): the build's tree was not shown clean, so nothing of it
 * is used. The workspace is a plain open (a fresh filesystem, the clone, its own sandbox, no setup
 * script: the setup needs setup-only values a workspace never gets); the result says why.
 */
async function openCold({ workspaces, repo }: TemplateOpenDeps, plan: TemplatePlan, id: string, why: ServiceError, say: (m: string) => void, progress: (p: number, t?: number, m?: string) => void, signal: AbortSignal): Promise<TemplateOpen> {
  const reason = String(why.details.reason ?? why.message);
  const warning = `no template was kept or used: the search of the setup's result for setup-only values did not complete (${reason}); this workspace was opened without the setup script's result (a plain clone), and the next open builds again. Make the setup leave less behind (or no huge sparse file), or run its steps in the workspace`;
  say(`template not kept: ${reason}; opening without a template`);
  await workspaces.ensureDisk(id);
  const starting = workspaces.startWorkspaceSandbox(id);
  let cloned: { head: string | null; branch: string | null };
  try {
    cloned = await workspaces.clone(id, repo, plan.clone, signal);
  } catch (e) {
    await starting.catch(() => undefined); // settled: the caller's clean-up stops it
    throw e;
  }
  progress(1, 3, 'starting the sandbox');
  const sandbox = await starting;
  workspaces.noteHead(id, cloned.branch, cloned.head);
  progress(2, 3, 'reading the checkout');
  return { sandbox, result: { templateId: why.details.templateId ?? null, built: false, kept: false, cold: true, baseOid: cloned.head, reason, warning, maintenance: null } };
}

export async function openFromTemplate(
  deps: TemplateOpenDeps,
  id: string,
  plan: TemplatePlan,
  progress: (p: number, t?: number, m?: string) => void,
  signal: AbortSignal,
): Promise<TemplateOpen> {
  const { templates: tpls, workspaces, repo } = deps;
  const img = workspaces.imageOf(id);
  const sayBuild = within(progress, 0);
  let chosen: TemplateRow | null = null;
  let copy: { method: CopyMethod; ms: number } | undefined;
  let built = false;
  let sandbox: SandboxHandle | undefined;
  const candidate = tpls.latestReady(plan.key);
  if (candidate) {
    sayBuild(`checking template ${candidate.id} (base ${candidate.baseOid?.slice(0, 12)}) against ${plan.repositoryUrl}`);
    // The copy and the remote read run side by side, and once the copy is there (a reflink clone:
    // milliseconds) the workspace's own sandbox starts on it while the remote read still runs (its
    // daemon's start is most of an open's fixed cost); all three are settled before anything else.
    // When the repository moved, the sandbox is stopped and the copy dropped.
    const copying = tpls.startFrom(candidate, img);
    const starting = copying.then(async () => {
      await workspaces.ensureDisk(id);
      return workspaces.startWorkspaceSandbox(id);
    });
    const [oid, copied, started] = await Promise.allSettled([workspaces.remoteOid(id, repo, plan.clone.ref, signal), copying, starting]);
    const ref = plan.clone.ref;
    const matches = oid.status === 'fulfilled' && copied.status === 'fulfilled' && (oid.value !== null ? oid.value === candidate.baseOid : ref !== null && SHA_RE.test(ref) && candidate.baseOid?.startsWith(ref) === true);
    if (matches && started.status === 'fulfilled') {
      chosen = candidate;
      copy = (copied as PromiseFulfilledResult<{ method: CopyMethod; ms: number }>).value;
      sandbox = started.value;
    } else {
      if (started.status === 'fulfilled') await workspaces.stopStartedSandbox(id, started.value);
      if (oid.status === 'rejected') throw oid.reason;
      if (copied.status === 'rejected') throw copied.reason;
      if (started.status === 'rejected' && matches) throw started.reason;
      await workspaces.detachDisk(id).catch(() => undefined); // unmounted (when it was mounted); then the copy goes
      await rm(img, { force: true });
      sayBuild(`the repository moved to ${oid.value?.slice(0, 12) ?? plan.clone.ref}: a new template is built for it`);
    }
  }
  if (!chosen) {
    try {
      chosen = await tpls.build(plan, deps, sayBuild, signal);
    } catch (e) {
      if (!searchIncomplete(e)) throw e;
      return openCold(deps, plan, id, e, sayBuild, progress, signal);
    }
    built = true;
    copy = await tpls.startFrom(chosen, img);
  }
  tpls.noteUse(chosen.id);
  progress(1, 3, 'starting the sandbox');
  if (!sandbox) {
    await workspaces.ensureDisk(id);
    sandbox = await workspaces.startWorkspaceSandbox(id);
  }
  workspaces.noteHead(id, chosen.branch, chosen.baseOid);
  progress(2, 3, built ? 'the setup script ran in the template build; no maintenance script at a first open' : 'running the maintenance script');
  let maintenance: Record<string, unknown> | null = null;
  if (!built && plan.maintenanceScript) {
    const t0 = Date.now();
    const { r, tail } = await runScript(deps, sandbox, plan.maintenanceScript, within(progress, 2), signal);
    if (r.cancelled) throw new ServiceError('CANCELLED', 'the open was cancelled while the maintenance script ran; the workspace was removed', { templateId: chosen.id, step: 'maintenance script' });
    if (r.timedOut || r.exitCode !== 0) {
      const why = r.timedOut ? `timed out after ${MAINTENANCE_TIMEOUT_MS / 1000} s` : `exited with ${r.exitCode}`;
      throw new ServiceError('FAILED_PRECONDITION', `the maintenance script of environment ${plan.environmentId} ${why}; the workspace was removed (template ${chosen.id} is kept). Last output:\n${tail}`, {
        templateId: chosen.id,
        step: 'maintenance script',
        exitCode: r.exitCode,
        timedOut: r.timedOut === true,
      });
    }
    maintenance = { exitCode: r.exitCode, ms: Date.now() - t0 };
  }
  return {
    sandbox,
    result: {
      templateId: chosen.id,
      built,
      baseOid: chosen.baseOid,
      sizeBytes: chosen.sizeBytes,
      startedBy: copy?.method,
      copyMs: copy?.ms,
      ...(built ? { setupMs: chosen.setupMs } : {}),
      maintenance,
    },
  };
}
