/**
 * Approved repositories: which HTTPS repositories may be opened, and extra CA certificates for
 * repository hosts. Both live under "repositories" in the config file, which the CLI
 * (`atelier repos allow|deny|list`) edits; the file is re-read when it changes, so a running
 * service applies a change without a restart. Credentials do not live here: they are sealed in the
 * database (services/repos/credentials.ts, `atelier credentials ...`).
 *
 *   "repositories": {
 *     "allow": ["https://github.com/acme/widgets.git", "https://git.internal.example/team/*"],
 *     "deny":  ["https://git.internal.example/team/secret.git"],
 *     "extraCaCertificates": ["/etc/atelier/internal-ca.pem"]
 *   }
 *
 * A rule ending in "/*" (or "/") is a prefix at a path boundary; any other rule is one exact
 * repository (with or without ".git"). Deny wins over allow. Nothing is fetched before the URL
 * passed all checks.
 */
import { existsSync, readFileSync, statSync, writeFileSync, renameSync } from 'node:fs';
import { ServiceError } from '../../core/errors.js';
import { ConfigError } from '../../core/config.js';

export interface RepositorySettings {
  allow: string[];
  deny: string[];
  extraCaCertificates: string[];
}

export interface ParsedRepoUrl {
  /** Normalised https URL without credentials, query or fragment. */
  url: string;
  host: string; // lowercase hostname
  port: number;
  /** host or host:port when the port is not 443; what git's credential protocol calls "host". */
  authority: string;
  path: string;
}

const EMPTY: RepositorySettings = { allow: [], deny: [], extraCaCertificates: [] };

/** Validates a repository URL's shape (not yet whether it is approved). */
export function parseRepoUrl(raw: string, field = 'repositoryUrl'): ParsedRepoUrl {
  const bad = (why: string) => new ServiceError('INVALID_ARGUMENT', `${field}: ${why}`, { field, rule: why });
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw bad('must be an absolute https:// URL');
  }
  if (url.protocol !== 'https:') throw bad(`must use https:// (got ${url.protocol.replace(':', '')}://)`);
  if (url.username || url.password) throw bad('must not carry credentials; the credential broker supplies them');
  if (url.search || url.hash) throw bad('must not have a query or fragment');
  if (!url.hostname) throw bad('must name a host');
  const path = url.pathname.replace(/\/+$/, '');
  if (path === '' || path === '/') throw bad('must name a repository path');
  if (/[\s\\]/.test(raw)) throw bad('must not contain spaces or backslashes');
  const port = url.port ? Number(url.port) : 443;
  const host = url.hostname.toLowerCase();
  const authority = port === 443 ? host : `${host}:${port}`;
  return { url: `https://${authority}${path}`, host, port, authority, path };
}

function stripGit(path: string): string {
  return path.endsWith('.git') ? path.slice(0, -4) : path;
}

/** Does one rule match a parsed URL? */
export function ruleMatches(rule: string, repo: ParsedRepoUrl): boolean {
  const isPrefix = rule.endsWith('/*') || rule.endsWith('/');
  const base = rule.endsWith('/*') ? rule.slice(0, -1) : rule;
  let parsed: ParsedRepoUrl;
  try {
    parsed = parseRepoUrl(isPrefix ? base + 'x' : base, 'rule');
  } catch {
    return false;
  }
  if (parsed.authority !== repo.authority) return false;
  if (isPrefix) {
    const prefix = parsed.path.slice(0, -1); // drop the placeholder "x", keeps the trailing slash
    return repo.path.startsWith(prefix) && repo.path.length > prefix.length;
  }
  return stripGit(parsed.path) === stripGit(repo.path);
}

export class RepositoryPolicy {
  private cache: { mtimeMs: number; size: number; settings: RepositorySettings } | null = null;

  constructor(private readonly configFile: string) {}

  /** The current settings (re-read when the file changed). */
  settings(): RepositorySettings {
    if (!existsSync(this.configFile)) return EMPTY;
    const st = statSync(this.configFile);
    if (this.cache && this.cache.mtimeMs === st.mtimeMs && this.cache.size === st.size) return this.cache.settings;
    const settings = readRepositorySettings(this.configFile);
    this.cache = { mtimeMs: st.mtimeMs, size: st.size, settings };
    return settings;
  }

  /** Parses and approves a URL, or throws PERMISSION_DENIED / INVALID_ARGUMENT naming the field. */
  approve(raw: string, field = 'repositoryUrl'): ParsedRepoUrl {
    const repo = parseRepoUrl(raw, field);
    const s = this.settings();
    const denied = s.deny.find((r) => ruleMatches(r, repo));
    if (denied) throw new ServiceError('PERMISSION_DENIED', `${field}: ${repo.url} is denied by the operator's rule ${denied}`, { field, rule: 'approved repositories', url: repo.url });
    if (!s.allow.some((r) => ruleMatches(r, repo)))
      throw new ServiceError(
        'PERMISSION_DENIED',
        `${field}: ${repo.url} is not an approved repository; the operator approves repositories with \`atelier repos allow URL\``,
        { field, rule: 'approved repositories', url: repo.url },
      );
    return repo;
  }

  /** PEM text of the operator's extra CA certificates ('' when none). */
  extraCaPem(): string {
    return this.settings()
      .extraCaCertificates.map((extraCaCertificate) => {
        try {
          return readFileSync(extraCaCertificate, 'utf8').trim() + '\n';
        } catch (e) {
          // Removed or unreadable since start-up: the operator must fix the file list, not an INTERNAL.
          throw new ConfigError(`config file ${this.configFile}: "repositories.extraCaCertificates" names ${extraCaCertificate}, which cannot be read (${(e as NodeJS.ErrnoException).code ?? 'error'}); restore it or remove it from the list`, 'repositories.extraCaCertificates');
        }
      })
      .join('');
  }
}

function asStringList(value: unknown, name: string, file: string): string[] {
  if (value === undefined) return [];
  if (!Array.isArray(value) || value.some((x) => typeof x !== 'string')) throw new ConfigError(`config file ${file}: "repositories.${name}" must be a list of strings`);
  return value as string[];
}

export function readRepositorySettings(file: string): RepositorySettings {
  let raw: Record<string, unknown>;
  try {
    raw = JSON.parse(readFileSync(file, 'utf8'));
  } catch (e) {
    throw new ConfigError(`config file ${file} is not valid JSON: ${(e as Error).message}`);
  }
  const row = (raw.repositories ?? {}) as Record<string, unknown>;
  if (typeof row !== 'object' || row === null || Array.isArray(row)) throw new ConfigError(`config file ${file}: "repositories" must be an object`);
  const allow = asStringList(row.allow, 'allow', file);
  const deny = asStringList(row.deny, 'deny', file);
  for (const rule of [...allow, ...deny]) validateRule(rule, file);
  const extraCaCertificates = asStringList(row.extraCaCertificates, 'extraCaCertificates', file);
  for (const ca of extraCaCertificates) {
    if (!existsSync(ca)) throw new ConfigError(`config file ${file}: "repositories.extraCaCertificates" names ${ca}, which does not exist`);
  }
  if (row.credentials !== undefined)
    throw new ConfigError(
      `config file ${file}: "repositories.credentials" is no longer read: repository credentials are sealed in the database. ` +
        'Add each with `atelier credentials add-token PREFIX --username NAME < token-file` (or add-github-app), then remove the section; see docs/credentials.md',
    );
  return { allow, deny, extraCaCertificates };
}

export function validateRule(rule: string, where = 'rule'): void {
  const isPrefix = rule.endsWith('/*') || rule.endsWith('/');
  try {
    parseRepoUrl(isPrefix ? rule.replace(/\*$/, '') + 'x' : rule, 'rule');
  } catch (e) {
    throw new ConfigError(`${where}: repository rule ${JSON.stringify(rule)} is not valid: ${(e as Error).message.replace(/^rule: /, '')}`);
  }
}

/** Edits the "repositories" section of the config file atomically (CLI). */
export function editRepositorySettings(file: string, edit: (s: RepositorySettings) => void): RepositorySettings {
  const raw: Record<string, unknown> = existsSync(file) ? JSON.parse(readFileSync(file, 'utf8')) : {};
  const current = existsSync(file) ? readRepositorySettings(file) : { ...EMPTY, allow: [], deny: [], extraCaCertificates: [] };
  edit(current);
  raw.repositories = {
    ...((raw.repositories as object) ?? {}),
    allow: current.allow,
    deny: current.deny,
    ...(current.extraCaCertificates.length || (raw.repositories as Record<string, unknown> | undefined)?.extraCaCertificates ? { extraCaCertificates: current.extraCaCertificates } : {}),
  };
  const tmp = `${file}.tmp-${process.pid}`;
  writeFileSync(tmp, JSON.stringify(raw, null, 2) + '\n', { mode: 0o600 });
  renameSync(tmp, file);
  return current;
}

/** Edits the "repositories.extraCaCertificates" list of the config file atomically (dashboard). */
export function editExtraCaCertificates(file: string, edit: (paths: string[]) => string[]): string[] {
  const raw: Record<string, unknown> = existsSync(file) ? JSON.parse(readFileSync(file, 'utf8')) : {};
  const current = existsSync(file) ? readRepositorySettings(file).extraCaCertificates : [];
  const next = edit([...current]);
  raw.repositories = { ...((raw.repositories as object) ?? {}), extraCaCertificates: next };
  const tmp = `${file}.tmp-${process.pid}`;
  writeFileSync(tmp, JSON.stringify(raw, null, 2) + '\n', { mode: 0o600 });
  renameSync(tmp, file);
  return next;
}
