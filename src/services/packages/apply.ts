/**
 * Applying a plan (docs/packages.md): the apply's state machine (QUEUED, BUILDING, VERIFYING,
 * LAUNCH_CHECK, then SUCCEEDED or FAILED), the builder sandbox (no workspace, no secrets, egress
 * only to the configured registry), the check of the built tree against the plan, the launch
 * check of each binary, and storing the tree as an immutable release. On releases.ts; packages.ts
 * (PackageService) adds plans and the tools.
 */
import { chown, mkdir, readdir, rename, writeFile } from 'node:fs/promises';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Actor } from '../instance/index.js';
import type { EphemeralBind, ExecResult } from '../../sandbox/executor.js';
import { startEgressProxy, type EgressDecision } from '../../sandbox/egress.js';
import { ServiceError } from '../../core/errors.js';
import { newId } from '../../core/ids.js';
import { nowIso } from '../../core/clock.js';
import { sha256Hex } from '../../core/crypto.js';
import { canonicalJson } from '../../core/canonical-json.js';
import { PIP_PYTHON, normalise } from './pip.js';
import { copyTreeNoFollow, TreeRefusal } from './tree.js';
import { ImageProblem, imageMatches, makeReleaseImage, mountReleaseImage, unmountRelease, type ReleaseImage } from './image.js';
import { removeTreeNoFollow } from '../../sandbox/host-fs.js';

import { type Ecosystem, ApplyFailure, ApplyRow, ApplyState, BUILD_TIMEOUT_MS, BuildSpec, LAUNCH_TIMEOUT_MS, MAX_TREE_BYTES, PlanRow, ReleaseFile, ReleaseRow, chownTree, npmBinaries, npmInventory, pythonBinaries, registryRules, releaseImage, releaseTarget, removeBuildDir, tail } from './records.js';
import { PackageReleases } from './releases.js';

export class PackageApplies extends PackageReleases {
  // ---------- applies ----------

  async apply(planId: string, planDigest: string, principal: string, actor: Actor) {
    this.requireEnabled();
    const plan = this.planRow(planId);
    if (plan.digest !== planDigest)
      throw new ServiceError('INVALID_ARGUMENT', `planDigest: does not match plan ${planId} (its digest is ${plan.digest}); a changed plan is a new plan: call packages_plan again`, { field: 'planDigest' });
    const replay = this.deps.db.prepare('SELECT * FROM package_applies WHERE plan_id = ?').get(planId) as ApplyRow | undefined;
    if (replay) return { ...this.describeApply(replay), replayed: true };
    if (plan.approval === 'unavailable')
      throw new ServiceError('FAILED_PRECONDITION', `planId: this instance cannot approve or build plan ${planId}: ${(JSON.parse(plan.plan_json) as { approvalUnavailable: string }).approvalUnavailable}`, { field: 'planId' });
    const approval = this.deps.approvals.get(plan.approval_id!);
    if (approval.state === 'pending')
      throw new ServiceError('PERMISSION_DENIED', `planId: plan ${planId} awaits the owner's approval (request ${approval.id} on the dashboard's approvals page); apply it once approved`, { field: 'planId', approvalRequestId: approval.id });
    if (approval.state !== 'approved')
      throw new ServiceError('PERMISSION_DENIED', `planId: the owner's approval of plan ${planId} is ${approval.state}; make a new plan to ask again`, { field: 'planId', approvalRequestId: approval.id, approvalState: approval.state });
    this.deps.approvals.markUsed(approval.id, 'package_plan', plan.digest, actor, principal);
    const id = newId('packageApply');
    this.deps.db.prepare("INSERT INTO package_applies (id, plan_id, state, step, created_at) VALUES (?, ?, 'QUEUED', 'queued', ?)").run(id, planId, nowIso());
    this.deps.audit.record({ actor, principal, action: 'packages_apply', target: id, outcome: 'ok', details: { planId, digest: plan.digest } });
    const pending = this.runApply(id, plan).finally(() => {
      this.running.delete(id);
      this.notify();
    });
    this.running.set(id, pending);
    return this.describeApply(this.applyRow(id));
  }

  protected applyRow(id: string): ApplyRow {
    const r = this.deps.db.prepare('SELECT * FROM package_applies WHERE id = ?').get(id) as ApplyRow | undefined;
    if (!r) throw new ServiceError('NOT_FOUND', `applyId: no package apply ${id}`, { field: 'applyId' });
    return r;
  }

  protected describeApply(applyRow: ApplyRow) {
    return {
      applyId: applyRow.id,
      planId: applyRow.plan_id,
      state: applyRow.state,
      step: applyRow.step,
      errorCode: applyRow.error_code,
      error: applyRow.error_message,
      outputTail: applyRow.output_tail,
      releaseId: applyRow.release_id,
      bindingId: applyRow.binding_id,
      createdAt: applyRow.created_at,
      endedAt: applyRow.ended_at,
    };
  }

  protected setApply(id: string, state: ApplyState, step: string, extra: Partial<Pick<ApplyRow, 'error_code' | 'error_message' | 'output_tail' | 'release_id' | 'binding_id'>> = {}): void {
    const ended = state === 'SUCCEEDED' || state === 'FAILED' ? nowIso() : null;
    this.deps.db
      .prepare('UPDATE package_applies SET state = ?, step = ?, error_code = COALESCE(?, error_code), error_message = COALESCE(?, error_message), output_tail = COALESCE(?, output_tail), release_id = COALESCE(?, release_id), binding_id = COALESCE(?, binding_id), ended_at = COALESCE(?, ended_at) WHERE id = ?')
      .run(state, step, extra.error_code ?? null, extra.error_message ?? null, extra.output_tail ?? null, extra.release_id ?? null, extra.binding_id ?? null, ended, id);
    this.notify();
  }

  protected async runApply(id: string, plan: PlanRow): Promise<void> {
    const buildDir = join(this.root, 'build', id);
    try {
      const build = JSON.parse(plan.build_json) as BuildSpec;
      await this.dirs();
      await removeBuildDir(buildDir, this.deps.executor.storage);
      await mkdir(buildDir, { recursive: true, mode: 0o711 });
      // The build's own filesystem (as a workspace's, sandboxDiskMb): the builder's /build shows
      // no host path in its mountinfo, and a build that fills it fails alone (docs/packages.md).
      const disk = join(buildDir, 'fs');
      await mkdir(disk, { mode: 0o711 });
      const storage = this.deps.executor.storage;
      if (this.deps.config.sandboxDiskMb > 0 && storage?.mountScratch) await storage.mountScratch(join(buildDir, 'fs.img'), this.deps.config.sandboxDiskMb, disk);
      const work = join(disk, 'work');
      await mkdir(work, { mode: 0o700 });
      this.setApply(id, 'BUILDING', build.ecosystem === 'npm' ? 'fetching and installing the pinned packages (npm ci)' : 'fetching and installing the pinned wheels (pip --require-hashes)');
      const result = await this.builder(id, buildDir, work, build).catch((e: unknown) => {
        // A driver that brings the tree back as a stream refused it (EphemeralBind.collect): as a tree root refuses.
        if (e instanceof ServiceError && (e.details as { reason?: string } | undefined)?.reason === 'tree_refused') throw new ApplyFailure('TREE_MISMATCH', e.message, null);
        throw e;
      });
      if (result.exitCode !== 0 || result.timedOut || result.cancelled) {
        const text = result.stderr + '\n' + result.stdout;
        const code = /EINTEGRITY|integrity checksum failed|THESE PACKAGES DO NOT MATCH THE HASHES/i.test(text) ? 'INTEGRITY_MISMATCH' : result.timedOut ? 'BUILD_TIMED_OUT' : 'BUILD_FAILED';
        const message =
          code === 'INTEGRITY_MISMATCH'
            ? 'an artifact the registry served does not match the integrity the plan pinned; nothing was installed'
            : result.timedOut
              ? `the build passed ${BUILD_TIMEOUT_MS / 60000} minutes and was stopped; nothing was installed`
              : `the builder exited with ${result.exitCode ?? result.signal}; nothing was installed`;
        throw new ApplyFailure(code, message, tail(text));
      }
      this.setApply(id, 'VERIFYING', 'checking the installed tree against the plan');
      // The builder's processes are gone (its cgroup is removed or runEphemeral failed), but its
      // tree is still its: root takes a copy by descriptor into a directory only root can write,
      // and everything after (checks, launch checks, the release) uses that copy (tree.ts).
      const stage = join(buildDir, 'stage');
      await mkdir(stage, { mode: 0o711 });
      const tree = join(stage, 'tree');
      let files: ReleaseFile[];
      try {
        files = await copyTreeNoFollow(work, build.ecosystem === 'npm' ? 'node_modules' : 'site', tree);
      } catch (e) {
        if (e instanceof TreeRefusal) throw new ApplyFailure('TREE_MISMATCH', e.message, null);
        throw e;
      }
      await this.verifyTree(build, tree);
      const bins = build.ecosystem === 'npm' ? await npmBinaries(tree) : await pythonBinaries(tree);
      // The release is an image of root's copy (packages/image.ts): what the launch checks run
      // and every sandbox mounts is that image, a filesystem of its own (no host path in mountinfo).
      this.setApply(id, 'VERIFYING', 'making the release image');
      const img = join(buildDir, 'release.sqfs');
      let image: ReleaseImage;
      try {
        image = await makeReleaseImage(tree, img);
      } catch (e) {
        if (e instanceof ImageProblem) throw new ApplyFailure('BUILD_FAILED', e.message, null);
        throw e;
      }
      this.setApply(id, 'LAUNCH_CHECK', `starting each binary once with no network (${bins.length})`);
      if (bins.length) {
        const mounted = join(buildDir, 'rel');
        await mountReleaseImage(img, image, mounted);
        try {
          for (const b of bins) await this.launchCheck(build.ecosystem, plan.name, mounted, b);
        } finally {
          await unmountRelease(mounted);
        }
      }
      const digest = sha256Hex(canonicalJson({ ecosystem: build.ecosystem, name: plan.name, files }));
      const release = await this.storeRelease(plan, build, img, image, digest, files, bins);
      const binding = this.bind(plan, release.id);
      this.setApply(id, 'SUCCEEDED', 'release built, verified and bound', { release_id: release.id, binding_id: binding.id });
      this.deps.audit.record({ actor: 'system', action: 'packages_release', target: release.id, outcome: 'ok', details: { applyId: id, digest, bindingId: binding.id } });
    } catch (e) {
      const f = e instanceof ApplyFailure ? e : e instanceof ServiceError ? new ApplyFailure(e.code, e.message, null) : new ApplyFailure('INTERNAL', 'the apply failed unexpectedly; the service logged the cause', null);
      if (!(e instanceof ApplyFailure) && !(e instanceof ServiceError)) this.deps.log.error({ err: e, applyId: id }, 'package apply failed');
      this.setApply(id, 'FAILED', 'failed; nothing was installed', { error_code: f.code, error_message: f.message, output_tail: f.tail });
      this.deps.audit.record({ actor: 'system', action: 'packages_release', target: id, outcome: 'failed', reason: `${f.code}: ${f.message}` });
    } finally {
      await removeBuildDir(buildDir, this.deps.executor.storage).catch((err: unknown) => this.deps.log.warn({ err, applyId: id }, 'package build directory not removed'));
    }
  }

  /** The builder sandbox: no workspace, no secrets, egress only to the registry host. */
  protected async builder(id: string, buildDir: string, work: string, build: BuildSpec): Promise<ExecResult> {
    const uid = this.deps.config.sandboxUid;
    const registry = new URL(build.ecosystem === 'npm' ? build.registry : build.index);
    const sock = join(buildDir, 'p.sock');
    const proxy = await startEgressProxy({
      socketPath: sock,
      workspaceId: `build-${id}`,
      // The operator configured this registry: the one host a builder reaches (a private address only when the registry is one).
      rules: registryRules(registry.toString()),
      onDecision: (d: EgressDecision) => this.deps.log.info({ egress: d, applyId: id }, 'builder egress'),
      socketMode: 0o600,
    });
    try {
      await chown(sock, uid, uid);
      // Where the driver takes the build's directory and the CA bundle (a Kubernetes Pod: its
      // scratch claim and its own /dev/shm; the tree comes back as a tar the runner parses).
      const layout = this.deps.executor.ephemeralLayout;
      const B = layout?.buildDir ?? '/build';
      const caPath = layout?.caFile ?? '/run/atelier-ca.pem';
      const binds: EphemeralBind[] = [{ source: work, target: B, collect: { name: build.ecosystem === 'npm' ? 'node_modules' : 'site', maxBytes: MAX_TREE_BYTES } }];
      const ca = this.caPem();
      if (ca) {
        const bundle = join(buildDir, 'ca.pem');
        await writeFile(bundle, readFileSync('/etc/ssl/certs/ca-certificates.crt', 'utf8') + '\n' + ca, { mode: 0o644 });
        binds.push({ source: bundle, target: caPath, readOnly: true });
      }
      let command: string;
      const env: Record<string, string> = { NO_PROXY: '', no_proxy: '' };
      if (build.ecosystem === 'npm') {
        await writeFile(join(work, 'package.json'), JSON.stringify(build.manifest, null, 2));
        await writeFile(join(work, 'package-lock.json'), JSON.stringify(build.lockfile, null, 2));
        const npmrc = [`registry=${build.registry}`, 'proxy=http://127.0.0.1:3128', 'https-proxy=http://127.0.0.1:3128', 'audit=false', 'fund=false', 'update-notifier=false', 'fetch-retries=1', 'fetch-retry-mintimeout=1000', 'fetch-retry-maxtimeout=3000', ca ? `cafile=${caPath}` : ''];
        await writeFile(join(work, '.npmrc'), npmrc.filter(Boolean).join('\n') + '\n');
        command = `npm ci --no-audit --no-fund --loglevel=warn --cache /tmp/npm-cache ${build.lifecycleScripts ? '' : '--ignore-scripts'}`;
        env.npm_config_userconfig = `${B}/.npmrc`;
      } else {
        const req = build.wheels.map((w) => `${w.name}==${w.version} --hash=sha256:${w.sha256}`).join('\n') + '\n';
        await writeFile(join(work, 'requirements.txt'), req);
        command =
          `${PIP_PYTHON} -m pip install --disable-pip-version-check --no-input --no-cache-dir --no-deps --only-binary=:all: --require-hashes ` +
          `--index-url "$INDEX" --proxy http://127.0.0.1:3128 ${ca ? `--cert ${caPath}` : ''} --target ${B}/site -r ${B}/requirements.txt`;
        env.INDEX = build.index;
        env.PIP_CONFIG_FILE = '/dev/null';
      }
      await chownTree(work, uid);
      return await this.deps.executor.runEphemeral({
        id: `b-${id.slice(4, 16)}`,
        binds,
        limits: this.deps.workspaces().sandboxLimits,
        network: { proxySocket: sock },
        command,
        cwd: B,
        env,
        timeoutMs: BUILD_TIMEOUT_MS,
        maxOutputBytes: 1_048_576,
      });
    } finally {
      await proxy.close();
    }
  }

  /** The installed tree (root's copy: node_modules or site) holds exactly the planned packages at their planned versions. */
  protected async verifyTree(build: BuildSpec, tree: string): Promise<void> {
    if (build.ecosystem === 'npm') {
      const want = new Map(build.packages.map((p) => [p.location, p]));
      const found = await npmInventory(tree);
      for (const [loc, p] of want) {
        const got = found.get(loc);
        if (!got) throw new ApplyFailure('TREE_MISMATCH', `${p.name}@${p.version} is missing at ${loc} after the install`, null);
        if (got.name !== p.name || got.version !== p.version) throw new ApplyFailure('TREE_MISMATCH', `${loc} holds ${got.name}@${got.version}, the plan pinned ${p.name}@${p.version}`, null);
      }
      for (const [loc, got] of found) if (!want.has(loc)) throw new ApplyFailure('TREE_MISMATCH', `${got.name}@${got.version} at ${loc} is not in the plan`, null);
    } else {
      const entries = await readdir(tree).catch(() => [] as string[]);
      const dists = new Map<string, string>();
      for (const e of entries) {
        const m = /^(.+)-([^-]+)\.dist-info$/.exec(e);
        if (m) dists.set(normalise(m[1]!), m[2]!);
      }
      for (const w of build.wheels) {
        const v = dists.get(normalise(w.name));
        if (v !== w.version) throw new ApplyFailure('TREE_MISMATCH', `${w.name}==${w.version} is ${v ? `installed as ${v}` : 'missing'} after the install`, null);
      }
      if (dists.size !== build.wheels.length) throw new ApplyFailure('TREE_MISMATCH', `the install holds ${dists.size} distributions, the plan pinned ${build.wheels.length}`, null);
    }
  }

  /** Starts one binary of the release, mounted (its image) at `mounted`, with --version and no network. */
  protected async launchCheck(ecosystem: Ecosystem, name: string, mounted: string, bin: { name: string; rel: string }): Promise<void> {
    const target = releaseTarget(ecosystem, name);
    const env: Record<string, string> = ecosystem === 'uv' ? { PYTHONPATH: target } : {};
    const result = await this.deps.executor.runEphemeral({
      binds: [{ source: mounted, target, readOnly: true }],
      limits: this.deps.workspaces().sandboxLimits,
      network: 'none',
      argv: [`${target}/${bin.rel}`, '--version'],
      cwd: '/tmp',
      env,
      timeoutMs: LAUNCH_TIMEOUT_MS,
      maxOutputBytes: 16_384,
    });
    if (result.timedOut) throw new ApplyFailure('LAUNCH_CHECK_FAILED', `binary ${bin.name} did not exit within ${LAUNCH_TIMEOUT_MS / 1000} s of starting (run with --version, no network)`, tail(result.stderr + result.stdout));
    if (result.signal || result.exitCode === 126 || result.exitCode === 127 || result.exitCode === null)
      throw new ApplyFailure('LAUNCH_CHECK_FAILED', `binary ${bin.name} could not start (${result.signal ? `signal ${result.signal}` : `exit ${result.exitCode}`})`, tail(result.stderr + result.stdout));
    // A binary that does not know --version may exit non-zero; one whose own code cannot load is broken.
    if (result.exitCode !== 0 && /MODULE_NOT_FOUND|Cannot find module|ModuleNotFoundError|ImportError/.test(result.stderr))
      throw new ApplyFailure('LAUNCH_CHECK_FAILED', `binary ${bin.name} started but could not load its own modules`, tail(result.stderr));
  }

  /**
   * Stores the image as the release of `digest`. An identical tree is the same release: one whose
   * image is in place stays as it is; one whose image is missing or was found damaged (or is still
   * a directory from before images) gets this image.
   */
  protected async storeRelease(plan: PlanRow, build: BuildSpec, img: string, image: ReleaseImage, digest: string, files: ReleaseFile[], bins: Array<{ name: string; rel: string }>): Promise<ReleaseRow> {
    const have = this.deps.db.prepare('SELECT * FROM package_releases WHERE digest = ?').get(digest) as ReleaseRow | undefined;
    const recorded = have ? releaseImage(have) : undefined;
    if (have && recorded && !this.hasLegacyEntry(digest) && (await imageMatches(this.imagePath(digest), recorded))) return have;
    await this.dirs();
    // Immutable: root made the image from its own copy (readable by root only; sandboxes see it
    // mounted read-only); both directories are root's, so nothing redirects the rename.
    await rename(img, this.imagePath(digest));
    await removeTreeNoFollow(this.legacyPath(digest));
    this.damaged.delete(digest);
    if (have) {
      this.setReleaseImage(have, image);
      return have;
    }
    const versions =
      build.ecosystem === 'npm' ? build.packages.map((p) => ({ name: p.name, version: p.version, location: p.location })) : build.wheels.map((w) => ({ name: w.name, version: w.version, sha256: w.sha256 }));
    const size = files.reduce((n, f) => n + (f.size ?? 0), 0);
    const manifest = { versions, binaries: bins.map((b) => b.name), size, files: files.length, filesDigest: digest, planId: plan.id, planDigest: plan.digest, image };
    const id = newId('packageRelease');
    this.deps.db
      .prepare('INSERT INTO package_releases (id, digest, ecosystem, name, version, manifest_json, executor_image, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)')
      .run(id, digest, plan.ecosystem, plan.name, plan.version, JSON.stringify(manifest), await this.executorImage(), nowIso());
    return this.deps.db.prepare('SELECT * FROM package_releases WHERE id = ?').get(id) as ReleaseRow;
  }
}

/** What the methods above answer, by name (the shapes are the code's own, inferred by the compiler). */
export type PackageAppliesApplyResult = Awaited<ReturnType<PackageApplies['apply']>>;
