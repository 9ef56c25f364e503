/**
 * npm plans, resolved with the npm project's own libraries and no package code run: Arborist builds
 * the ideal tree from registry metadata alone (no tarball is unpacked, no script runs), and pacote
 * reads each package's full packument for what the abbreviated one leaves out (unpacked size,
 * lifecycle scripts, deprecation, publication time). The lockfile Arborist writes pins every
 * package by version, resolved URL and sha512 integrity; the builder installs exactly it.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
// Arborist and pacote (with sigstore, cacache, the fetch stack) are loaded on the first plan, not at
// start-up: they are about a quarter of a second of CPU on every start of the service and every CLI
// command, and most runs never resolve a package.
const npmLibs = async () => ({ Arborist: (await import('@npmcli/arborist')).default, pacote: (await import('pacote')).default });
import npa from 'npm-package-arg';
import { ServiceError } from '../../core/errors.js';

/** Lifecycle scripts npm runs on install. */
export const INSTALL_SCRIPTS = ['preinstall', 'install', 'postinstall', 'prepare'] as const;

export interface PlannedPackage {
  /** node_modules path, e.g. node_modules/a/node_modules/b. */
  location: string;
  name: string;
  version: string;
  resolved: string;
  integrity: string;
  unpackedSize: number | null;
  /** Binaries the package declares: name -> relative file. */
  bin: Record<string, string>;
  /** Install-time lifecycle scripts it carries (name -> command). */
  scripts: Record<string, string>;
  deprecated: string | null;
  /** ISO time this version was published, when the registry says. */
  publishedAt: string | null;
}

export interface NpmResolution {
  name: string;
  version: string;
  packages: PlannedPackage[];
  /** package.json and package-lock.json the builder installs (lockfileVersion 3). */
  manifest: Record<string, unknown>;
  lockfile: Record<string, unknown>;
}

export interface NpmOptions {
  registry: string;
  /** Extra CA certificates (PEM) trusted for the registry. */
  ca?: string;
  cacheDir: string;
  signal?: AbortSignal;
}

/**
 * Registry packages only, at every depth: a git, remote-tarball, file or directory specifier (the
 * request's or any dependency's) is refused by Arborist before anything is fetched, so resolution
 * (which runs on the runner, outside any sandbox) reaches nothing but the configured registry.
 */
function npmOpts(options: NpmOptions): Record<string, unknown> {
  return {
    registry: options.registry, cache: options.cacheDir, ca: options.ca || undefined, ignoreScripts: true, audit: false, fund: false, preferOnline: true,
    allowGit: 'none', allowRemote: 'none', allowFile: 'none', allowDirectory: 'none',
  };
}

const REGISTRY_SPEC_TYPES = new Set(['version', 'range', 'tag']);

/** The request names a registry package by name and (optionally) a version, range or dist-tag; nothing else. */
export function checkNpmRequest(name: string, spec: string | undefined): void {
  let count: ReturnType<typeof npa> | undefined;
  try {
    count = npa(name);
  } catch {
    count = undefined;
  }
  if (!count || count.name !== name || count.type !== 'range' || !count.registry || (count.rawSpec !== '' && count.rawSpec !== '*'))
    throw new ServiceError('INVALID_ARGUMENT', `name: ${JSON.stringify(name.slice(0, 214))} is not an npm package name (a registry name such as left-pad or @scope/pkg; no paths, URLs or versions)`, { field: 'name' });
  if (spec === undefined) return;
  let value: ReturnType<typeof npa> | undefined;
  try {
    value = npa(`${name}@${spec}`);
  } catch {
    value = undefined;
  }
  if (!value || value.name !== name || !REGISTRY_SPEC_TYPES.has(value.type) || !value.registry)
    throw new ServiceError('INVALID_ARGUMENT', `version: ${JSON.stringify(spec.slice(0, 128))} is not a registry version, range or dist-tag (git, URL, file and alias specifiers are refused)`, { field: 'version' });
}

function asBin(bin: unknown, name: string): Record<string, string> {
  if (typeof bin === 'string') return { [name.replace(/^@[^/]+\//, '')]: bin };
  if (bin && typeof bin === 'object') return Object.fromEntries(Object.entries(bin as Record<string, unknown>).filter(([, v]) => typeof v === 'string')) as Record<string, string>;
  return {};
}

/** Resolves `name@spec` into a pinned tree. Registry errors become clear service errors. */
export async function resolveNpm(name: string, spec: string | undefined, options: NpmOptions): Promise<NpmResolution> {
  checkNpmRequest(name, spec);
  const dir = await mkdtemp(join(tmpdir(), 'atelier-npm-plan-'));
  try {
    const manifest = { name: 'atelier-managed-package', version: '0.0.0', private: true };
    await writeFile(join(dir, 'package.json'), JSON.stringify(manifest));
    const { Arborist, pacote } = await npmLibs();
    const arb = new Arborist({ path: dir, ...npmOpts(options) });
    let tree: Awaited<ReturnType<typeof arb.buildIdealTree>>;
    try {
      tree = await arb.buildIdealTree({ add: [spec ? `${name}@${spec}` : name], saveType: 'prod' });
    } catch (e) {
      throw registryError(e, name, spec);
    }
    const rootDep = [...tree.children.values()].find((n) => n.name === name);
    if (!rootDep) throw new ServiceError('NOT_FOUND', `name: ${name} did not resolve to a package`, { field: 'name' });
    const nodes = [...tree.inventory.values()].filter((n) => !n.isRoot);
    const packuments = new Map<string, Record<string, unknown>>();
    const names = [...new Set(nodes.map((n) => n.packageName))];
    // Full packuments, a few at a time: what the abbreviated metadata leaves out.
    for (let i = 0; i < names.length; i += 8) {
      if (options.signal?.aborted) throw new ServiceError('DEADLINE_EXCEEDED', 'resolution cancelled');
      const batch = names.slice(i, i + 8);
      const got = await Promise.all(batch.map((n) => pacote.packument(n, { ...npmOpts(options), fullMetadata: true }).catch((e: unknown) => { throw registryError(e, n, undefined); })));
      batch.forEach((n, k) => packuments.set(n, got[k] as unknown as Record<string, unknown>));
    }
    const packages: PlannedPackage[] = nodes.map((arbNode) => {
      const doc = packuments.get(arbNode.packageName) ?? {};
      const value = ((doc.versions as Record<string, Record<string, unknown>> | undefined) ?? {})[arbNode.version] ?? {};
      const scripts = (value.scripts as Record<string, string> | undefined) ?? {};
      const time = (doc.time as Record<string, string> | undefined) ?? {};
      const dist = (value.dist as Record<string, unknown> | undefined) ?? {};
      if (!arbNode.resolved || !arbNode.integrity || !/^sha512-/.test(arbNode.integrity))
        throw new ServiceError('FAILED_PRECONDITION', `${arbNode.packageName}@${arbNode.version}: the registry gives no sha512 integrity; such a package cannot be planned`, { package: arbNode.packageName });
      return {
        location: arbNode.location,
        name: arbNode.packageName,
        version: arbNode.version,
        resolved: arbNode.resolved,
        integrity: arbNode.integrity,
        unpackedSize: typeof dist.unpackedSize === 'number' ? dist.unpackedSize : null,
        bin: asBin(value.bin ?? arbNode.package.bin, arbNode.packageName),
        scripts: Object.fromEntries(INSTALL_SCRIPTS.filter((s) => typeof scripts[s] === 'string').map((s) => [s, scripts[s]!])),
        deprecated: typeof value.deprecated === 'string' ? value.deprecated : null,
        publishedAt: typeof time[arbNode.version] === 'string' ? time[arbNode.version]! : null,
      };
    });
    packages.sort((a, b) => (a.location < b.location ? -1 : a.location > b.location ? 1 : 0));
    const lockfile = tree.meta!.commit() as Record<string, unknown>;
    const finalManifest = { ...manifest, dependencies: { [name]: rootDep.version } };
    // The lockfile's root entry must agree with the package.json the builder gets.
    const lockPackages = lockfile.packages as Record<string, Record<string, unknown>>;
    lockPackages['']!.dependencies = { [name]: rootDep.version };
    return { name, version: rootDep.version, packages, manifest: finalManifest, lockfile };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

function registryError(caught: unknown, name: string, spec: string | undefined): ServiceError {
  if (caught instanceof ServiceError) return caught;
  const err = caught as { code?: string; statusCode?: number; message?: string; package?: string; requiredBy?: string };
  const what = spec ? `${name}@${spec}` : name;
  if (/^EALLOW(GIT|REMOTE|FILE|DIRECTORY)$/.test(err.code ?? ''))
    return new ServiceError(
      'FAILED_PRECONDITION',
      `name: ${what} depends on ${String(err.package ?? 'a package').slice(0, 300)}${err.requiredBy ? ` (required by ${err.requiredBy})` : ''}, which is not a registry package (${err.code!.slice(6).toLowerCase()}); plans take registry packages only, and nothing was fetched from it`,
      { field: 'name', rule: 'registry packages only', dependency: String(err.package ?? '').slice(0, 300) },
    );
  if (err.code === 'E404' || err.statusCode === 404) return new ServiceError('NOT_FOUND', `name: no package ${name} in the configured npm registry`, { field: 'name' });
  if (err.code === 'ETARGET') return new ServiceError('NOT_FOUND', `version: no version of ${name} matches ${JSON.stringify(spec)}`, { field: 'version' });
  if (err.code === 'EINVALIDTAGNAME' || err.code === 'EINVALIDPACKAGENAME' || err.code === 'EUNSUPPORTEDPROTOCOL')
    return new ServiceError('INVALID_ARGUMENT', `${err.code === 'EINVALIDPACKAGENAME' ? 'name' : 'version'}: ${what} is not a valid npm registry specifier`, { field: err.code === 'EINVALIDPACKAGENAME' ? 'name' : 'version' });
  return new ServiceError('UNAVAILABLE', `the npm registry could not be read for ${what}: ${err.code ?? 'error'}`, { registryError: err.code ?? null });
}
