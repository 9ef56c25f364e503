/**
 * Managed packages (spec "Managed packages"; docs/packages.md). PackageService is this module's
 * class on two others: apply.ts (PackageApplies: building a plan into a release) on releases.ts
 * (PackageReleases: release images, bindings, mounts); records.ts has the rows and pure helpers.
 * Here: plans, the list, rollback, removal, status and the service's start and stop. Owns tables: package_plans,
 * package_resolutions, package_applies, package_releases, package_bindings,
 * package_binding_history, workspace_package_mounts.
 *
 * - A plan is resolved without running package code (npm: Arborist and pacote; uv: pip's resolver on
 *   wheels only), is immutable and identified by its planDigest (SHA-256 of its canonical form): the
 *   same resolution gives the same plan, anything that changes gives a new one.
 * - Every plan needs the owner's approval (a `package_plan` request in the one approvals queue,
 *   bound to the digest), or says `approval: unavailable` when this instance cannot build it.
 * - An apply builds the plan in a builder sandbox (no workspace, no secrets, egress only to the
 *   configured registry through a one-host egress proxy), which installs exactly the pinned
 *   artifacts (npm ci checks each sha512; pip --require-hashes each sha256), scripts off unless
 *   approved. The runner then checks the tree against the plan, launch-checks each binary with no
 *   network, and stores the tree as an immutable content-addressed release.
 * - Bindings (owner scope: every new workspace and the toolbox; workspace scope: overrides in one
 *   workspace) point at releases, with a generation and a rollback history. A workspace mounts what
 *   was bound when its sandbox was first made and keeps it until it is recreated.
 */
import { readdir, rm, rmdir } from 'node:fs/promises';
import { join } from 'node:path';
import { connect, createServer as createNetServer, type AddressInfo, type Socket } from 'node:net';
import type { Actor } from '../instance/index.js';
import { startEgressProxy, type EgressDecision } from '../../sandbox/egress.js';
import { ServiceError } from '../../core/errors.js';
import { newId } from '../../core/ids.js';
import { nowIso } from '../../core/clock.js';
import { sha256Hex } from '../../core/crypto.js';
import { canonicalJson } from '../../core/canonical-json.js';
import { resolveNpm } from './npm.js';
import { normalise, pipAvailable, resolvePip, runtimePython } from './pip.js';
import { riskSignals } from './risk.js';
import { IMAGES_UNAVAILABLE, ImageProblem, imagesAvailable, mountPointsBelow, unmountRelease } from './image.js';
import { removeTreeNoFollow } from '../../sandbox/host-fs.js';

import { type Ecosystem, ACTIVE_APPLY, ApplyRow, BindingRow, BuildSpec, PlanInput, PlanRow, ReleaseRow, Scope, planText, publicPackage, registryRules, removeBuildDir } from './records.js';
import { PackageApplies } from './apply.js';

export { PACKAGES_ROOT, releaseTarget, type ApplyState, type Ecosystem, type PlanInput, type Scope, type WorkspaceView } from './records.js';

export class PackageService extends PackageApplies {
  // ---------- plans ----------

  async plan(input: PlanInput, principal: string, actor: Actor) {
    this.requireEnabled();
    if (input.ecosystem === 'apt')
      throw new ServiceError('NOT_SUPPORTED', 'ecosystem: apt packages are not supported; use npm or uv (Python wheels)', { field: 'ecosystem' });
    if (input.ecosystem === 'uv' && input.lifecycleScripts !== undefined)
      throw new ServiceError('INVALID_ARGUMENT', 'lifecycleScripts: only meaningful for npm (uv plans are wheels, which have no install scripts)', { field: 'lifecycleScripts' });
    if (input.ecosystem === 'npm' && input.python !== undefined)
      throw new ServiceError('INVALID_ARGUMENT', 'python: only meaningful for ecosystem uv', { field: 'python' });
    if (input.scope === 'owner' && input.workspaceId !== undefined)
      throw new ServiceError('INVALID_ARGUMENT', 'workspaceId: only meaningful with scope workspace (owner scope applies to every new workspace)', { field: 'workspaceId' });
    if (input.scope === 'workspace' && !this.deps.workspaces().exists(input.workspaceId!))
      throw new ServiceError('NOT_FOUND', `workspaceId: no workspace ${input.workspaceId}`, { field: 'workspaceId' });
    if (input.scope === 'workspace') {
      const tk = this.deps.workspaces().toolkits(input.workspaceId!);
      if (tk.toolkits.length && !tk.allowChanges)
        throw new ServiceError(
          'FAILED_PRECONDITION',
          `workspaceId: workspace ${input.workspaceId} was opened with toolkits (${tk.toolkits.join(', ')}) and without allowToolkitWorkspaceChanges, so its packages cannot be changed; open it with allowToolkitWorkspaceChanges true`,
          { field: 'workspaceId', rule: 'allowToolkitWorkspaceChanges' },
        );
    }
    const resolutionId = newId('packageResolution');
    this.deps.db.prepare("INSERT INTO package_resolutions (id, state, created_at) VALUES (?, 'RESOLVING', ?)").run(resolutionId, nowIso());
    let planned: Record<string, unknown> | undefined;
    const work = this.buildPlan(input as PlanInput & { ecosystem: Ecosystem }, principal, actor).then(
      (p) => {
        planned = p;
        this.deps.db.prepare("UPDATE package_resolutions SET state = 'READY', plan_id = ?, ended_at = ? WHERE id = ?").run(p.planId, nowIso(), resolutionId);
      },
      (err: unknown) => {
        const body = err instanceof ServiceError ? err.toBody() : { code: 'INTERNAL', message: 'resolution failed; the service logged the cause', retryable: true, details: {} };
        if (!(err instanceof ServiceError)) this.deps.log.error({ err: err }, 'package resolution failed');
        this.deps.db.prepare("UPDATE package_resolutions SET state = 'FAILED', error_json = ?, ended_at = ? WHERE id = ?").run(JSON.stringify(body), nowIso(), resolutionId);
        throw err;
      },
    ).finally(() => {
      this.resolving.delete(resolutionId);
      this.notify();
    });
    this.resolving.set(resolutionId, work.catch(() => undefined));
    const wait = this.deps.config.packagesResolveWaitMs;
    const timer = new Promise<'late'>((r) => setTimeout(() => r('late'), wait).unref());
    const first = await Promise.race([work.then(() => 'done' as const), timer]);
    if (first === 'done' && planned) return planned;
    return { resolutionId, state: 'RESOLVING', note: `resolution takes longer than ${Math.round(wait / 1000)} s; poll packages_status with resolutionId` };
  }

  private async buildPlan(input: PlanInput & { ecosystem: Ecosystem }, principal: string, actor: Actor) {
    await this.dirs();
    const cacheDir = join(this.root, 'cache');
    const image = await this.executorImage();
    let core: Record<string, unknown>;
    let build: BuildSpec;
    let approvalUnavailable: string | null = this.deps.sandboxDisabledReason ? `builds need sandboxes, and this instance runs without them (${this.deps.sandboxDisabledReason})` : null;
    if (!approvalUnavailable && !(await imagesAvailable())) approvalUnavailable = IMAGES_UNAVAILABLE;
    if (input.ecosystem === 'npm') {
      const npmResolution = await resolveNpm(input.name, input.version, { registry: this.deps.config.packagesNpmRegistry, ca: this.caPem(), cacheDir });
      const scripts = input.lifecycleScripts === true;
      const withScripts = npmResolution.packages.filter((p) => Object.keys(p.scripts).length > 0);
      const root = npmResolution.packages.find((p) => p.location === `node_modules/${npmResolution.name}`)!;
      core = {
        ecosystem: 'npm',
        name: npmResolution.name,
        version: npmResolution.version,
        source: this.deps.config.packagesNpmRegistry,
        integrity: root.integrity,
        resolved: root.resolved,
        dependencyCount: npmResolution.packages.length - 1,
        unpackedSize: npmResolution.packages.every((p) => p.unpackedSize !== null) ? npmResolution.packages.reduce((n, p) => n + (p.unpackedSize ?? 0), 0) : null,
        packages: npmResolution.packages.map(publicPackage),
        binaries: npmResolution.packages.flatMap((p) => Object.keys(p.bin).map((b) => ({ name: b, package: `${p.name}@${p.version}`, topLevel: p.location === `node_modules/${npmResolution.name}` }))),
        lifecycleScripts: {
          allowed: scripts,
          present: withScripts.map((p) => ({ package: `${p.name}@${p.version}`, scripts: p.scripts })),
          willRun: scripts ? withScripts.map((p) => ({ package: `${p.name}@${p.version}`, scripts: p.scripts })) : [],
        },
        warnings: riskSignals(this.deps.installRoot, 'npm', input.name, npmResolution.packages),
      };
      build = { ecosystem: 'npm', registry: this.deps.config.packagesNpmRegistry, manifest: npmResolution.manifest, lockfile: npmResolution.lockfile, lifecycleScripts: scripts, packages: npmResolution.packages.map((p) => ({ location: p.location, name: p.name, version: p.version })) };
    } else {
      const runtime = await runtimePython();
      if (!runtime || !(await pipAvailable())) approvalUnavailable ??= 'uv plans need Debian python3 with pip on the runner (apt-get install python3-pip)';
      const python = input.python ?? runtime ?? '3';
      if (runtime && input.python && input.python.split('.').slice(0, 2).join('.') !== runtime)
        throw new ServiceError('FAILED_PRECONDITION', `python: workspaces on this instance run Python ${runtime}; a plan for ${input.python} could not be used there`, { field: 'python', available: runtime });
      if (!runtime) throw new ServiceError('FAILED_PRECONDITION', 'ecosystem: uv plans need Debian python3 on the runner and in workspaces; it is missing here', { field: 'ecosystem' });
      const caFile = this.deps.config.packagesCaFile || undefined;
      if (caFile) this.caPem();
      const pipResolution = await this.withIndexProxy(this.deps.config.packagesPythonIndex, (proxy) => resolvePip(input.name, input.version, { index: this.deps.config.packagesPythonIndex, caFile, python: runtime, proxy }));
      const root = pipResolution.wheels.find((w) => normalise(w.name) === normalise(pipResolution.name))!;
      core = {
        ecosystem: 'uv',
        name: pipResolution.name,
        version: pipResolution.version,
        python: python.split('.').slice(0, 2).join('.'),
        source: this.deps.config.packagesPythonIndex,
        integrity: `sha256-${Buffer.from(root.sha256, 'hex').toString('base64')}`,
        resolved: root.url,
        dependencyCount: pipResolution.wheels.length - 1,
        unpackedSize: null,
        packages: pipResolution.wheels.map((w) => ({ name: w.name, version: w.version, source: w.url, sha256: w.sha256 })),
        binaries: null,
        lifecycleScripts: { allowed: false, present: [], willRun: [] },
        warnings: riskSignals(this.deps.installRoot, 'uv', input.name, pipResolution.wheels.map((w) => ({ name: w.name, version: w.version }))),
      };
      build = { ecosystem: 'uv', index: this.deps.config.packagesPythonIndex, python: runtime, wheels: pipResolution.wheels };
    }
    const scope = { scope: input.scope, workspaceId: input.scope === 'workspace' ? input.workspaceId! : null };
    const conflicts = this.conflictsOf(input.ecosystem, core.name as string, scope.scope, scope.workspaceId);
    const affected = this.affectedWorkspaces(input.ecosystem, core.name as string, scope.scope, scope.workspaceId);
    let body: Record<string, unknown> = { ...core, ...scope, conflicts, affectedWorkspaces: affected, executorImage: image, build: sha256Hex(canonicalJson(build)) };
    let digest = sha256Hex(canonicalJson(body));
    // The same resolution is the same plan, unless that plan is spent (its approval denied or
    // expired, or its apply failed): then asking again is a new plan that says which it supersedes.
    for (let i = 0; ; i++) {
      const existing = this.deps.db.prepare('SELECT * FROM package_plans WHERE digest = ?').get(digest) as PlanRow | undefined;
      if (!existing) break;
      if (!this.spent(existing) || i >= 1000) return this.describePlan(existing);
      body = { ...body, supersedes: existing.id };
      digest = sha256Hex(canonicalJson(body));
    }
    const id = newId('packagePlan');
    let approvalId: string | null = null;
    if (!approvalUnavailable) {
      const refusal = this.deps.approvals.requestApproval(
        {
          kind: 'package_plan',
          workspaceId: scope.workspaceId,
          text: planText(body, digest),
          digest,
          details: { planId: id, ecosystem: input.ecosystem, name: core.name, version: core.version, scope: scope.scope, warnings: (core.warnings as unknown[]).length },
        },
        principal,
        actor,
        'a package plan',
      );
      approvalId = refusal.details.approvalRequestId as string;
    }
    this.deps.db
      .prepare(
        'INSERT INTO package_plans (id, digest, ecosystem, name, version, scope, workspace_id, plan_json, build_json, approval, approval_id, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)',
      )
      .run(id, digest, input.ecosystem, core.name, core.version, scope.scope, scope.workspaceId, JSON.stringify({ ...body, approvalUnavailable }), JSON.stringify(build), approvalUnavailable ? 'unavailable' : 'required', approvalId, nowIso());
    this.deps.audit.record({ actor, principal, action: 'packages_plan', target: id, outcome: 'ok', details: { digest, name: core.name, version: core.version } });
    return this.describePlan(this.planRow(id));
  }

  /**
   * pip resolves on the runner, outside any sandbox, and would fetch whatever a wheel's metadata
   * names (a `name @ https://...` dependency): it runs with a proxy that reaches the index host
   * (and, for PyPI, its file host) and nothing else. A loopback TCP port bridges to the egress proxy.
   */
  private async withIndexProxy<T>(index: string, fn: (proxy: string) => Promise<T>): Promise<T> {
    const rules = registryRules(index);
    const sock = join(this.root, 'cache', `resolve-${newId('packageResolution').slice(4)}.sock`);
    const egress = await startEgressProxy({
      socketPath: sock,
      workspaceId: 'package-resolution',
      rules,
      onDecision: (d: EgressDecision) => (d.allowed ? undefined : this.deps.log.warn({ egress: d }, 'package resolution egress refused')),
      socketMode: 0o600,
    });
    const conns = new Set<Socket>();
    const bridge = createNetServer((socket) => {
      const up = connect(sock);
      conns.add(socket).add(up);
      const end = () => (socket.destroy(), up.destroy(), conns.delete(socket), conns.delete(up));
      socket.on('error', end).on('close', end);
      up.on('error', end).on('close', end);
      socket.pipe(up).pipe(socket);
    });
    try {
      await new Promise<void>((res, rej) => bridge.once('error', rej).listen(0, '127.0.0.1', () => res()));
      return await fn(`http://127.0.0.1:${(bridge.address() as AddressInfo).port}`);
    } finally {
      for (const x of conns) x.destroy();
      await new Promise<void>((res) => bridge.close(() => res()));
      await egress.close();
    }
  }

  private describePlan(plan: PlanRow) {
    const body = JSON.parse(plan.plan_json) as Record<string, unknown>;
    const { approvalUnavailable, build: _b, ...rest } = body;
    let approvalState: string | null = null;
    if (plan.approval_id) approvalState = this.deps.approvals.get(plan.approval_id).state;
    return {
      planId: plan.id,
      ...rest,
      planDigest: plan.digest,
      approval: plan.approval,
      ...(plan.approval === 'unavailable' ? { approvalUnavailableReason: approvalUnavailable } : { approvalRequestId: plan.approval_id, approvalState }),
      createdAt: plan.created_at,
    };
  }

  private conflictsOf(ecosystem: Ecosystem, name: string, scope: Scope, ws: string | null): Array<Record<string, unknown>> {
    const rows = this.deps.db
      .prepare('SELECT b.*, r.version AS rv FROM package_bindings b JOIN package_releases r ON r.id = b.release_id WHERE b.ecosystem = ? AND b.name = ? AND b.scope = ? AND b.workspace_id = ?')
      .all(ecosystem, name, scope, ws ?? '') as Array<BindingRow & { rv: string }>;
    return rows.map((b) => ({ bindingId: b.id, scope: b.scope, workspaceId: b.workspace_id || null, boundVersion: b.rv, generation: b.generation, effect: 'replaces the bound release (rollback keeps the old one)' }));
  }

  /** Workspaces a binding would reach: none now (bindings reach new workspaces), but those that would need recreation to see it. */
  private affectedWorkspaces(ecosystem: Ecosystem, name: string, scope: Scope, ws: string | null): string[] {
    if (scope === 'workspace') return [ws!];
    const overridden = new Set(this.deps.db.prepare("SELECT workspace_id FROM package_bindings WHERE scope = 'workspace' AND ecosystem = ? AND name = ?").pluck().all(ecosystem, name) as string[]);
    return this.deps.workspaces().retained().filter((id) => !overridden.has(id));
  }

  async list(scope: Scope | undefined, workspaceId: string | undefined, includeHistory: boolean) {
    this.requireEnabled();
    const where: string[] = [];
    const params: unknown[] = [];
    if (scope) (where.push('scope = ?'), params.push(scope));
    if (workspaceId) (where.push("(scope = 'owner' OR workspace_id = ?)"), params.push(workspaceId));
    const rows = this.deps.db.prepare(`SELECT * FROM package_bindings ${where.length ? 'WHERE ' + where.join(' AND ') : ''} ORDER BY scope, workspace_id, ecosystem, name`).all(...params) as BindingRow[];
    const bindings = [];
    for (const binding of rows) {
      const rel = this.deps.db.prepare('SELECT * FROM package_releases WHERE id = ?').get(binding.release_id) as ReleaseRow;
      const entry: Record<string, unknown> = { bindingId: binding.id, scope: binding.scope, workspaceId: binding.workspace_id || null, ecosystem: binding.ecosystem, name: binding.name, generation: binding.generation, release: await this.describeRelease(rel), updatedAt: binding.updated_at };
      if (includeHistory) {
        const hist = this.deps.db.prepare('SELECT r.*, h.bound_at FROM package_binding_history h JOIN package_releases r ON r.id = h.release_id WHERE h.binding_id = ? ORDER BY h.bound_at DESC').all(binding.id) as Array<ReleaseRow & { bound_at: string }>;
        entry.history = await Promise.all(hist.map(async (h) => ({ ...(await this.describeRelease(h)), boundAt: h.bound_at, current: h.id === binding.release_id })));
      }
      bindings.push(entry);
    }
    return { bindings };
  }

  rollback(bindingId: string, releaseId: string, expectedGeneration: number, principal: string, actor: Actor) {
    this.requireEnabled();
    const db = this.deps.db;
    return db.transaction(() => {
      const b = this.bindingRow(bindingId);
      if (b.generation !== expectedGeneration)
        throw new ServiceError('STALE_GENERATION', `expectedGeneration: binding ${bindingId} is at generation ${b.generation}, not ${expectedGeneration}; read it again with packages_list`, { field: 'expectedGeneration', currentGeneration: b.generation });
      const inHistory = db.prepare('SELECT 1 FROM package_binding_history WHERE binding_id = ? AND release_id = ?').get(bindingId, releaseId);
      if (!inHistory) throw new ServiceError('NOT_FOUND', `releaseId: ${releaseId} is not in the history of binding ${bindingId} (packages_list with includeHistory lists it)`, { field: 'releaseId' });
      const rel = db.prepare('SELECT * FROM package_releases WHERE id = ?').get(releaseId) as ReleaseRow;
      const problem = this.releaseProblem(rel);
      if (problem !== null)
        throw new ServiceError('FAILED_PRECONDITION', `releaseId: release ${releaseId} (${rel.name}@${rel.version}) cannot be mounted: ${problem}; plan the package again (a new plan, approved, builds the release again)`, { field: 'releaseId', problem });
      db.prepare('UPDATE package_bindings SET release_id = ?, generation = generation + 1, updated_at = ? WHERE id = ?').run(releaseId, nowIso(), bindingId);
      db.prepare('UPDATE package_binding_history SET bound_at = ? WHERE binding_id = ? AND release_id = ?').run(nowIso(), bindingId, releaseId);
      this.deps.audit.record({ actor, principal, action: 'packages_rollback', target: bindingId, outcome: 'ok', details: { releaseId } });
      const now = this.bindingRow(bindingId);
      return { bindingId, releaseId, generation: now.generation, note: 'new workspaces mount this release; existing ones keep theirs until recreated' };
    })();
  }

  async remove(bindingId: string, expectedGeneration: number, principal: string, actor: Actor) {
    this.requireEnabled();
    const db = this.deps.db;
    const removed = db.transaction(() => {
      const binding = this.bindingRow(bindingId);
      const busy = db
        .prepare(`SELECT a.id FROM package_applies a JOIN package_plans p ON p.id = a.plan_id WHERE a.state IN (${ACTIVE_APPLY.map(() => '?').join(',')}) AND p.ecosystem = ? AND p.name = ? AND p.scope = ? AND COALESCE(p.workspace_id, '') = ?`)
        .pluck()
        .get(...ACTIVE_APPLY, binding.ecosystem, binding.name, binding.scope, binding.workspace_id) as string | undefined;
      if (busy) throw new ServiceError('CONFLICT', `bindingId: apply ${busy} for ${binding.name} is running; remove the binding once it has ended`, { field: 'bindingId', applyId: busy });
      if (binding.generation !== expectedGeneration)
        throw new ServiceError('STALE_GENERATION', `expectedGeneration: binding ${bindingId} is at generation ${binding.generation}, not ${expectedGeneration}`, { field: 'expectedGeneration', currentGeneration: binding.generation });
      db.prepare('DELETE FROM package_binding_history WHERE binding_id = ?').run(bindingId);
      db.prepare('DELETE FROM package_bindings WHERE id = ?').run(bindingId);
      return binding;
    })();
    const collected = await this.collect();
    this.deps.audit.record({ actor, principal, action: 'packages_remove', target: bindingId, outcome: 'ok', details: { collected } });
    return { bindingId, removed: true, name: removed.name, collectedReleases: collected, note: 'new workspaces stop seeing it at once; existing ones keep it until recreated' };
  }

  /** Deletes releases no binding, history entry or retained workspace refers to. */
  async collect(): Promise<string[]> {
    const db = this.deps.db;
    const retained = new Set(this.deps.workspaces().retained());
    for (const ws of db.prepare('SELECT DISTINCT workspace_id FROM workspace_package_mounts').pluck().all() as string[]) if (!retained.has(ws)) db.prepare('DELETE FROM workspace_package_mounts WHERE workspace_id = ?').run(ws);
    const garbage = db
      .prepare(
        `SELECT * FROM package_releases r WHERE NOT EXISTS (SELECT 1 FROM package_bindings b WHERE b.release_id = r.id)
           AND NOT EXISTS (SELECT 1 FROM package_binding_history h WHERE h.release_id = r.id)
           AND NOT EXISTS (SELECT 1 FROM workspace_package_mounts m WHERE m.release_id = r.id)`,
      )
      .all() as ReleaseRow[];
    for (const r of garbage) {
      // Unmounted here first (sandboxes that still bind it keep their own mount until they end; the
      // loop device goes with the last one), then the image (and a directory from before images).
      this.mounted.delete(r.digest);
      this.damaged.delete(r.digest);
      await unmountRelease(this.mountPoint(r.digest));
      await rm(this.imagePath(r.digest), { force: true });
      await removeTreeNoFollow(this.legacyPath(r.digest));
      db.prepare('DELETE FROM package_releases WHERE id = ?').run(r.id);
    }
    return garbage.map((r) => r.id);
  }

  async status(args: { applyId?: string; resolutionId?: string; waitMs: number }) {
    this.requireEnabled();
    if (args.applyId) {
      const first = this.applyRow(args.applyId);
      await this.waitChange(args.waitMs, () => {
        const now = this.applyRow(args.applyId!);
        return now.state !== first.state || now.step !== first.step || now.state === 'SUCCEEDED' || now.state === 'FAILED';
      });
      return this.describeApply(this.applyRow(args.applyId));
    }
    if (args.resolutionId) {
      const row = () => {
        const r = this.deps.db.prepare('SELECT * FROM package_resolutions WHERE id = ?').get(args.resolutionId) as { id: string; state: string; plan_id: string | null; error_json: string | null } | undefined;
        if (!r) throw new ServiceError('NOT_FOUND', `resolutionId: no package resolution ${args.resolutionId}`, { field: 'resolutionId' });
        return r;
      };
      await this.waitChange(args.waitMs, () => row().state !== 'RESOLVING');
      const r = row();
      if (r.state === 'READY') return { resolutionId: r.id, state: 'READY', plan: this.describePlan(this.planRow(r.plan_id!)) };
      if (r.state === 'FAILED') return { resolutionId: r.id, state: 'FAILED', error: JSON.parse(r.error_json!) };
      return { resolutionId: r.id, state: 'RESOLVING' };
    }
    return this.summary();
  }

  private async summary() {
    const db = this.deps.db;
    const inflight = (db.prepare(`SELECT * FROM package_applies WHERE state IN (${ACTIVE_APPLY.map(() => '?').join(',')}) ORDER BY created_at`).all(...ACTIVE_APPLY) as ApplyRow[]).map((r) => this.describeApply(r));
    const awaiting = (db.prepare("SELECT * FROM package_plans WHERE approval = 'required' AND NOT EXISTS (SELECT 1 FROM package_applies a WHERE a.plan_id = package_plans.id) ORDER BY created_at DESC LIMIT 100").all() as PlanRow[])
      .filter((p) => this.deps.approvals.get(p.approval_id!).state === 'pending')
      .map((p) => ({ planId: p.id, name: p.name, version: p.version, ecosystem: p.ecosystem, scope: p.scope, workspaceId: p.workspace_id, planDigest: p.digest, approvalRequestId: p.approval_id }));
    const missing = (db.prepare('SELECT * FROM package_releases r WHERE EXISTS (SELECT 1 FROM package_bindings b WHERE b.release_id = r.id)').all() as ReleaseRow[])
      .map((r) => ({ r, problem: this.releaseProblem(r) }))
      .filter((x) => x.problem !== null)
      .map(({ r, problem }) => ({ releaseId: r.id, ecosystem: r.ecosystem, name: r.name, version: r.version, problem }));
    const needing: Array<Record<string, unknown>> = [];
    for (const ws of this.deps.workspaces().retained()) {
      const mounted = this.recordedMounts(ws);
      if (!mounted) continue;
      const want = this.effectiveBindings(ws);
      const key = (m: Array<{ ecosystem: string; name: string; release_id: string }>) => m.map((x) => `${x.ecosystem}/${x.name}@${x.release_id}`).sort().join(',');
      if (key(mounted) !== key(want)) needing.push({ workspaceId: ws, mounted: mounted.map((m) => `${m.ecosystem}/${m.name}@${m.release_id}`), bound: want.map((m) => `${m.ecosystem}/${m.name}@${m.release_id}`) });
    }
    return { inflightApplies: inflight, plansAwaitingApproval: awaiting, missingReleases: missing, workspacesNeedingRecreation: needing };
  }

  /** A workspace is gone: forget what it mounted (releases only it held become collectable). */
  async forgetWorkspace(id: string): Promise<void> {
    this.deps.db.prepare('DELETE FROM workspace_package_mounts WHERE workspace_id = ?').run(id);
    this.deps.db.prepare("DELETE FROM package_binding_history WHERE binding_id IN (SELECT id FROM package_bindings WHERE scope = 'workspace' AND workspace_id = ?)").run(id);
    this.deps.db.prepare("DELETE FROM package_bindings WHERE scope = 'workspace' AND workspace_id = ?").run(id);
    if (this.deps.config.packagesEnabled) await this.collect();
  }

  /**
   * At start, before any sandbox: release mounts an earlier runner left (one killed -9 does) are
   * unmounted (each is mounted again, verified, when a sandbox needs it); applies that were running
   * cannot be resumed safely: they fail and leave nothing; release directories from before images
   * are converted in the background (or when first needed, whichever comes first).
   */
  async startup(): Promise<void> {
    const mounts = join(this.root, 'mounts');
    for (const mountPoint of await mountPointsBelow(mounts)) await unmountRelease(mountPoint).catch((err: unknown) => this.deps.log.warn({ err, mountPoint }, 'leftover release mount not removed'));
    for (const name of await readdir(mounts).catch(() => [] as string[])) await rmdir(join(mounts, name)).catch(() => undefined);
    this.deps.db
      .prepare(`UPDATE package_applies SET state = 'FAILED', step = 'interrupted', error_code = 'INTERRUPTED', error_message = 'the service restarted during the build; nothing was installed: apply the plan again with a new plan', ended_at = ? WHERE state IN (${ACTIVE_APPLY.map(() => '?').join(',')})`)
      .run(nowIso(), ...ACTIVE_APPLY);
    this.deps.db.prepare("UPDATE package_resolutions SET state = 'FAILED', error_json = ?, ended_at = ? WHERE state = 'RESOLVING'").run(JSON.stringify({ code: 'UNAVAILABLE', message: 'the service restarted during the resolution; plan again', retryable: true, details: {} }), nowIso());
    // What those builds left (their filesystems and launch-check mounts still mounted) goes too.
    const builds = join(this.root, 'build');
    await readdir(builds)
      .then(async (ids) => {
        for (const b of ids) if (!this.running.has(b)) await removeBuildDir(join(builds, b), this.deps.executor.storage);
      })
      .catch((err: unknown) => {
        if ((err as NodeJS.ErrnoException).code !== 'ENOENT') this.deps.log.warn({ err }, 'leftover package build directories not removed');
      });
    if (this.deps.config.packagesEnabled) void this.convertAll();
  }

  /** Converts every release directory from before images, one at a time (a failure is logged and reported as the release's problem). */
  private async convertAll(): Promise<void> {
    const releases = this.deps.db.prepare('SELECT * FROM package_releases ORDER BY created_at').all() as ReleaseRow[];
    for (const release of releases) {
      if (!this.hasLegacyEntry(release.digest)) continue;
      await this.convert(release).catch((e: unknown) => {
        const problem = e instanceof ImageProblem ? e.message : 'it could not be converted (the service logged the cause)';
        this.damaged.set(release.digest, problem);
        this.deps.log.warn({ release: release.id, name: release.name, problem, err: e instanceof ImageProblem ? undefined : e }, 'release directory from before images not converted');
      });
    }
  }

  /** At shutdown, once no sandbox runs: this runner's release mounts go (their loop devices with them). */
  async shutdown(): Promise<void> {
    await Promise.all([...this.mounted.values(), ...this.converting.values()].map((p) => p.catch(() => undefined)));
    this.mounted.clear();
    for (const mountPoint of await mountPointsBelow(join(this.root, 'mounts'))) await unmountRelease(mountPoint).catch((err: unknown) => this.deps.log.warn({ err, mountPoint }, 'release mount not removed at shutdown'));
  }

  /** Waits for work in flight (tests and shutdown). */
  async idle(): Promise<void> {
    await Promise.all([...this.running.values(), ...this.resolving.values()].map((p) => p.catch(() => undefined)));
  }
}

/** What the methods above answer, by name (the shapes are the code's own, inferred by the compiler). */
export type PackagePlanResult = Awaited<ReturnType<PackageService['plan']>>;
export type PackageListResult = Awaited<ReturnType<PackageService['list']>>;
export type PackageRollbackResult = Awaited<ReturnType<PackageService['rollback']>>;
export type PackageRemoveResult = Awaited<ReturnType<PackageService['remove']>>;
export type PackageStatusResult = Awaited<ReturnType<PackageService['status']>>;
