/**
 * uv plans (Python): wheels only, resolved by pip's resolver without installing or running
 * anything. `pip install --dry-run --report` with `--only-binary :all:` reads wheel metadata only
 * (wheels carry static metadata; an sdist would have to run its build backend, which is why sdists
 * are refused). uv itself is not available from this machine's registries, so Debian's pip is the
 * resolver (docs/packages.md).
 */
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { request } from 'node:https';
import { rootCertificates } from 'node:tls';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ServiceError } from '../../core/errors.js';

export const PIP_PYTHON = '/usr/bin/python3';

export interface PlannedWheel {
  name: string;
  version: string;
  url: string;
  sha256: string;
  requested: boolean;
}

export interface PipResolution {
  name: string;
  version: string;
  python: string;
  wheels: PlannedWheel[];
}

export interface PipOptions {
  index: string;
  caFile?: string;
  /** The python version resolution targets (3.X or 3.X.Y). */
  python: string;
  /** http://127.0.0.1:PORT of a proxy that reaches only the index (every request of pip goes through it). */
  proxy?: string;
  signal?: AbortSignal;
}

/** The version of the Python workspaces and builders run (Debian's python3), e.g. "3.11". */
export async function runtimePython(): Promise<string | null> {
  return new Promise((resolve) => {
    execFile(PIP_PYTHON, ['-c', 'import sys;print("%d.%d" % sys.version_info[:2])'], { timeout: 10_000 }, (err, out) => resolve(err ? null : out.trim()));
  });
}

/** Whether pip is usable as the resolver here. */
export async function pipAvailable(): Promise<boolean> {
  return new Promise((resolve) => execFile(PIP_PYTHON, ['-m', 'pip', '--version'], { timeout: 20_000 }, (err) => resolve(!err)));
}

export async function resolvePip(name: string, version: string | undefined, options: PipOptions): Promise<PipResolution> {
  if (!/^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$/.test(name)) throw new ServiceError('INVALID_ARGUMENT', 'name: not a valid Python distribution name', { field: 'name' });
  if (version !== undefined && !/^[A-Za-z0-9.*+!_-]{1,64}$/.test(version))
    throw new ServiceError('INVALID_ARGUMENT', 'version: give an exact version or a PEP 440 version such as 2.31 or 2.*', { field: 'version' });
  const dir = await mkdtemp(join(tmpdir(), 'atelier-pip-plan-'));
  try {
    const report = join(dir, 'report.json');
    const req = join(dir, 'req.txt');
    await writeFile(req, version ? `${name}==${version}\n` : `${name}\n`);
    const args = ['-m', 'pip', 'install', '--dry-run', '--ignore-installed', '--disable-pip-version-check', '--no-input', '--quiet', '--report', report, '--only-binary=:all:', '--no-cache-dir',
      '--index-url', options.index, '--python-version', options.python, '--target', join(dir, 'target'), '-r', req];
    if (options.caFile) args.push('--cert', options.caFile);
    if (options.proxy) args.push('--proxy', options.proxy);
    const { code, stderr } = await new Promise<{ code: number; stderr: string }>((resolve) => {
      const child = execFile(PIP_PYTHON, args, { timeout: 120_000, maxBuffer: 4 << 20, env: { PATH: '/usr/bin:/bin', HOME: dir, PIP_CONFIG_FILE: '/dev/null', LANG: 'C.UTF-8' } }, (err, _out, errText) =>
        resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stderr: String(errText) }),
      );
      options.signal?.addEventListener('abort', () => child.kill('SIGKILL'), { once: true });
    });
    if (code !== 0) {
      if (/No matching distribution|Could not find a version/i.test(stderr)) {
        const sdistOnly = await hasOnlySdists(name, options).catch(() => false);
        if (sdistOnly)
          throw new ServiceError('FAILED_PRECONDITION', `name: ${name} has no wheel for Python ${options.python}, only source distributions; uv plans take wheels only (an sdist would run its build code)`, { field: 'name', rule: 'wheels only' });
        throw new ServiceError('NOT_FOUND', `${version ? 'version' : 'name'}: no wheel of ${name}${version ? '==' + version : ''} for Python ${options.python} in the configured index`, { field: version ? 'version' : 'name' });
      }
      const outside = /Could not install requirement (\S+?)@? (\S+) from \S+.* because of HTTP error 403/.exec(stderr);
      if (outside)
        throw new ServiceError('FAILED_PRECONDITION', `name: ${name} depends on ${outside[1]} from ${outside[2]!.slice(0, 300)}, outside the configured index; plans take wheels from the index only, and nothing was fetched from there`, {
          field: 'name',
          rule: 'index packages only',
          dependency: outside[1],
        });
      throw new ServiceError('UNAVAILABLE', `the Python index could not be read for ${name}: ${stderr.split('\n').filter(Boolean).slice(-1)[0]?.slice(0, 300) ?? 'pip failed'}`);
    }
    const parsed = JSON.parse(await readFile(report, 'utf8')) as { install?: Array<Record<string, unknown>> };
    const wheels: PlannedWheel[] = (parsed.install ?? []).map((record) => {
      const info = record.download_info as { url: string; archive_info?: { hashes?: Record<string, string>; hash?: string } };
      const meta = record.metadata as { name: string; version: string };
      const sha256 = info.archive_info?.hashes?.sha256 ?? /^sha256=([0-9a-f]{64})$/.exec(info.archive_info?.hash ?? '')?.[1];
      if (!info.url.endsWith('.whl')) throw new ServiceError('FAILED_PRECONDITION', `${meta.name}: only a source distribution is available; uv plans take wheels only`, { field: 'name' });
      if (!sha256) throw new ServiceError('FAILED_PRECONDITION', `${meta.name}: the index gives no sha256 for ${info.url.split('/').pop()}; such a wheel cannot be planned`, { field: 'name' });
      return { name: meta.name, version: meta.version, url: info.url, sha256, requested: record.requested === true };
    });
    wheels.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    const root = wheels.find((w) => w.requested) ?? wheels.find((w) => normalise(w.name) === normalise(name));
    if (!root) throw new ServiceError('NOT_FOUND', `name: ${name} did not resolve`, { field: 'name' });
    return { name: root.name, version: root.version, python: options.python, wheels };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

export const normalise = (n: string): string => n.toLowerCase().replace(/[-_.]+/g, '-');

/** Asks the simple index whether the project exists with only sdists (to word the refusal). */
async function hasOnlySdists(name: string, options: PipOptions): Promise<boolean> {
  const url = new URL(normalise(name) + '/', options.index);
  const body = await new Promise<string>((resolve, reject) => {
    const req = request(url, { ca: options.caFile ? [readFileSync(options.caFile, 'utf8'), ...rootCertificates] : undefined, timeout: 15_000 }, (res) => {
      if (res.statusCode !== 200) return reject(new Error(String(res.statusCode)));
      let b = '';
      res.setEncoding('utf8');
      res.on('data', (d) => (b += d.length + b.length < 2 << 20 ? d : ''));
      res.on('end', () => resolve(b));
    });
    req.on('error', reject);
    req.end();
  });
  const files = [...body.matchAll(/href="([^"#]+)/g)].map((m) => m[1]!.split('/').pop()!);
  return files.length > 0 && !files.some((f) => f.endsWith('.whl'));
}
