/**
 * The records of managed packages (docs/packages.md): the rows of the tables the package service
 * owns, the states of an apply, the paths and limits, the build specs, and the pure helpers the
 * plan, apply and release modules share.
 */
import { lchown, lstat, readdir, readFile } from 'node:fs/promises';
import { lstatSync } from 'node:fs';
import { join } from 'node:path';
import type { DB } from '../../store/db.js';
import type { Config } from '../../core/config.js';
import type { Logger } from '../../core/log.js';
import type { AuditLog } from '../instance/index.js';
import type { Executor, SandboxLimits, WorkspaceStorage } from '../../sandbox/executor.js';
import type { ApprovalService } from '../approvals.js';
import { quoted } from '../../core/display.js';
import { type PlannedPackage } from './npm.js';
import { type PlannedWheel } from './pip.js';
import { type TreeEntry } from './tree.js';
import { unmountRelease, type ReleaseImage } from './image.js';
import { removeTreeNoFollow } from '../../sandbox/host-fs.js';

export type Ecosystem = 'npm' | 'uv';

export type Scope = 'owner' | 'workspace';
export type ApplyState = 'QUEUED' | 'BUILDING' | 'VERIFYING' | 'LAUNCH_CHECK' | 'SUCCEEDED' | 'FAILED';
export const ACTIVE_APPLY: ApplyState[] = ['QUEUED', 'BUILDING', 'VERIFYING', 'LAUNCH_CHECK'];

/** Where releases appear inside a sandbox, and the one PATH directory of their binaries. */
export const PACKAGES_ROOT = '/opt/packages';
export const OUTPUT_TAIL_BYTES = 4096;
export const BUILD_TIMEOUT_MS = 10 * 60_000;
export const LAUNCH_TIMEOUT_MS = 15_000;
/** Most bytes of a built tree brought back as a stream (a driver without host binds: EphemeralBind.collect). */
export const MAX_TREE_BYTES = 2 * 1024 ** 3;

/** What the service needs of the workspace service (given lazily: it is built after this one). */
export interface WorkspaceView {
  exists(id: string): boolean;
  /** Ids of workspaces that are not closed. */
  retained(): string[];
  sandboxLimits: SandboxLimits;
  /** workspace_open's toolkits and allowToolkitWorkspaceChanges. */
  toolkits(id: string): { toolkits: string[]; allowChanges: boolean };
}

export interface Deps {
  db: DB;
  config: Config;
  log: Logger;
  audit: AuditLog;
  approvals: ApprovalService;
  executor: Executor;
  workspaces: () => WorkspaceView;
  /** Install root (for data/popular-packages.json). */
  installRoot: string;
  /** Why sandboxes cannot run here, if they cannot (then no plan can be built). */
  sandboxDisabledReason?: string;
}

export interface PlanRow {
  id: string;
  digest: string;
  ecosystem: Ecosystem;
  name: string;
  version: string;
  scope: Scope;
  workspace_id: string | null;
  plan_json: string;
  build_json: string;
  approval: 'required' | 'unavailable';
  approval_id: string | null;
  created_at: string;
}
export interface ApplyRow {
  id: string;
  plan_id: string;
  state: ApplyState;
  step: string | null;
  error_code: string | null;
  error_message: string | null;
  output_tail: string | null;
  release_id: string | null;
  binding_id: string | null;
  created_at: string;
  ended_at: string | null;
}
export interface ReleaseRow {
  id: string;
  digest: string;
  ecosystem: Ecosystem;
  name: string;
  version: string;
  manifest_json: string;
  executor_image: string;
  created_at: string;
}
export interface BindingRow {
  id: string;
  scope: Scope;
  workspace_id: string;
  ecosystem: Ecosystem;
  name: string;
  release_id: string;
  generation: number;
  created_at: string;
  updated_at: string;
}

/** What the builder installs, kept beside the plan (covered by its digest). */
export type BuildSpec =
  | { ecosystem: 'npm'; registry: string; manifest: Record<string, unknown>; lockfile: Record<string, unknown>; lifecycleScripts: boolean; packages: Array<{ location: string; name: string; version: string }> }
  | { ecosystem: 'uv'; index: string; python: string; wheels: PlannedWheel[] };

export interface PlanInput {
  ecosystem: 'npm' | 'uv' | 'apt';
  name: string;
  version?: string;
  scope: Scope;
  workspaceId?: string;
  python?: string;
  lifecycleScripts?: boolean;
}

export type ReleaseFile = TreeEntry;

export class ApplyFailure extends Error {
  constructor(
    readonly code: string,
    message: string,
    readonly tail: string | null,
  ) {
    super(message);
  }
}

export function publicPackage(pkg: PlannedPackage): Record<string, unknown> {
  return { name: pkg.name, version: pkg.version, location: pkg.location, source: pkg.resolved, integrity: pkg.integrity, unpackedSize: pkg.unpackedSize, binaries: Object.keys(pkg.bin), installScripts: Object.keys(pkg.scripts), deprecated: pkg.deprecated, publishedAt: pkg.publishedAt };
}

/**
 * The plan as the owner reads it on the approval. Every value that comes from a package or its
 * registry (names, versions, integrities, sources, binaries, lifecycle script values, warnings) is
 * quoted with JSON string escaping, so none can end its line and forge another: a script value
 * holding "\nplanDigest: ..." shows as one quoted line with \n in it. (Characters JSON leaves as
 * they are, such as bidirectional controls, are escaped and flagged where the approval is shown.)
 */
export function planText(body: Record<string, unknown>, digest: string): string {
  const lines = [
    `${body.ecosystem} package ${quoted(`${body.name}@${body.version}`)} for scope ${body.scope}${body.workspaceId ? ` (workspace ${body.workspaceId})` : ''}`,
    `source: ${quoted(body.source)}`,
    `integrity: ${quoted(body.integrity)}`,
    `dependencies: ${body.dependencyCount}`,
  ];
  for (const p of body.packages as Array<Record<string, unknown>>)
    lines.push(`  ${quoted(`${p.name}@${p.version}`)} ${p.integrity ? `integrity ${quoted(p.integrity)}` : p.sha256 ? `sha256 ${quoted(p.sha256)}` : 'no integrity'}`);
  const bins = (body.binaries as Array<{ name: string; package: string; topLevel: boolean }> | null) ?? [];
  for (const b of bins) lines.push(`binary ${quoted(b.name)} of ${quoted(b.package)}${b.topLevel ? ' (the requested package)' : ''}`);
  const ls = body.lifecycleScripts as { allowed: boolean; willRun: Array<{ package: string; scripts: Record<string, string> }> };
  lines.push(`lifecycle scripts: ${ls.allowed ? 'ALLOWED' : 'off'}`);
  for (const w of ls.willRun) for (const [k, v] of Object.entries(w.scripts)) lines.push(`  ${quoted(w.package)} ${quoted(k)}: ${quoted(v)}`);
  for (const w of body.warnings as Array<{ kind: string; package: string; message: string }>) lines.push(`warning ${w.kind} ${quoted(w.package)}: ${quoted(w.message)}`);
  lines.push(`planDigest: ${digest}`);
  return lines.join('\n');
}

export function tail(text: string): string {
  const b = Buffer.from(text, 'utf8');
  return b.length <= OUTPUT_TAIL_BYTES ? text : '…' + b.subarray(b.length - OUTPUT_TAIL_BYTES).toString('utf8');
}

/** A toolkit name: `name` or `ecosystem:name`. */
export function toolkitMatches(item: string, other: { ecosystem: Ecosystem; name: string }): boolean {
  const m = /^(npm|uv):(.+)$/.exec(item);
  return m ? m[1] === other.ecosystem && m[2] === other.name : item === other.name;
}

export const safeDir = (name: string): string => name.replace(/^@/, '').replace(/[^A-Za-z0-9._-]/g, '+');

/**
 * Where a release appears in a sandbox. An npm release is a node_modules tree, so it is mounted as
 * one (/opt/packages/npm/<name>/node_modules): Node resolves a package's dependencies beside it.
 */
export const releaseTarget = (ecosystem: Ecosystem, name: string): string =>
  ecosystem === 'npm' ? `${PACKAGES_ROOT}/npm/${safeDir(name)}/node_modules` : `${PACKAGES_ROOT}/uv/${safeDir(name)}`;

/** The hosts a registry's clients reach: its own host and port, and for PyPI its file host (where the index links wheels). */
export function registryRules(url: string): Array<{ host: string; ports: number[]; allowPrivate: boolean }> {
  const u = new URL(url);
  const host = u.hostname.replace(/^\[|\]$/g, '');
  const rules = [{ host, ports: [Number(u.port || 443)], allowPrivate: isPrivateHost(u.hostname) }];
  if (host === 'pypi.org') rules.push({ host: 'files.pythonhosted.org', ports: [443], allowPrivate: false });
  return rules;
}

export function isPrivateHost(hostname: string): boolean {
  const host = hostname.replace(/^\[|\]$/g, '');
  return host === 'localhost' || /^127\./.test(host) || host === '::1' || /^10\./.test(host) || /^192\.168\./.test(host) || /^172\.(1[6-9]|2\d|3[01])\./.test(host);
}

/** chown -h every entry (no symlink is followed). Only used on trees no sandbox process is alive in. */
export async function chownTree(dir: string, uid: number): Promise<void> {
  await lchown(dir, uid, uid);
  for (const e of await readdir(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) await chownTree(p, uid);
    else await lchown(p, uid, uid);
  }
}

/**
 * A build directory gone: its filesystem and the launch checks' mount of the release image
 * unmounted first (a runner that died mid-build leaves them mounted), then removed by a descriptor
 * walk that never follows a link.
 */
export async function removeBuildDir(buildDir: string, storage: WorkspaceStorage | undefined): Promise<void> {
  await unmountRelease(join(buildDir, 'rel'));
  await storage?.unmountScratch?.(join(buildDir, 'fs'));
  await removeTreeNoFollow(buildDir);
}

export function lstatOrNull(path: string): ReturnType<typeof lstatSync> | null {
  try {
    return lstatSync(path);
  } catch {
    return null;
  }
}

/** The image a release recorded (manifest_json.image; none for a release from before images). */
export function releaseImage(release: ReleaseRow): ReleaseImage | undefined {
  return (JSON.parse(release.manifest_json) as { image?: ReleaseImage }).image;
}

/** node_modules locations -> name and version from each package.json (symlinks not followed). */
export async function npmInventory(nm: string, prefix = 'node_modules'): Promise<Map<string, { name: string; version: string }>> {
  const out = new Map<string, { name: string; version: string }>();
  let entries: string[] = [];
  try {
    entries = await readdir(nm);
  } catch {
    return out;
  }
  for (const e of entries) {
    if (e === '.bin' || e === '.package-lock.json' || e.startsWith('.')) continue;
    const names = e.startsWith('@') ? (await readdir(join(nm, e))).map((s) => `${e}/${s}`) : [e];
    for (const name of names) {
      const dir = join(nm, name);
      const st = await lstat(dir);
      if (!st.isDirectory()) throw new ApplyFailure('TREE_MISMATCH', `${prefix}/${name} is not a directory`, null);
      const pj = join(dir, 'package.json');
      const pst = await lstat(pj).catch(() => null);
      if (!pst?.isFile()) throw new ApplyFailure('TREE_MISMATCH', `${prefix}/${name} has no package.json`, null);
      const m = JSON.parse(await readFile(pj, 'utf8')) as { name: string; version: string };
      out.set(`${prefix}/${name}`, { name: m.name, version: m.version });
      for (const [k, v] of await npmInventory(join(dir, 'node_modules'), `${prefix}/${name}/node_modules`)) out.set(k, v);
    }
  }
  return out;
}

/** Binaries npm linked for the top level (node_modules/.bin), as paths relative to the tree. */
export async function npmBinaries(nm: string): Promise<Array<{ name: string; rel: string }>> {
  const bin = join(nm, '.bin');
  const names = await readdir(bin).catch(() => [] as string[]);
  return names.filter((n) => !n.startsWith('.')).sort().map((n) => ({ name: n, rel: `.bin/${n}` }));
}

/** Console scripts pip wrote (site/bin). Their shebang names the builder's python, /usr/bin/python3. */
export async function pythonBinaries(site: string): Promise<Array<{ name: string; rel: string }>> {
  const names = await readdir(join(site, 'bin')).catch(() => [] as string[]);
  return names.sort().map((n) => ({ name: n, rel: `bin/${n}` }));
}
