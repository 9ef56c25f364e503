/**
 * Formats of repository extensions, parsed as untrusted input: SKILL.md front matter (the open
 * Agent Skills format), the hook manifest (.atelier/hooks.json) and the deployment manifest
 * (.atelier/deployments.json), and the digests that pin them. docs/extensions.md is the
 * reference; keep the two in step.
 */
import { createHash } from 'node:crypto';
import { parse as parseYaml } from 'yaml';

export const SKILL_SOURCES = ['built-in', 'owner', 'workspace', 'repository'] as const;
export type SkillSource = (typeof SKILL_SOURCES)[number];
/** Default shadowing order: the first source wins a name. Trusted sources shadow untrusted ones. */
export const SHADOW_ORDER: readonly SkillSource[] = ['owner', 'built-in', 'workspace', 'repository'];

export const HOOK_EVENTS = ['on_workspace_open', 'post_checkout', 'pre_commit', 'post_commit', 'manual'] as const;
export type HookEvent = (typeof HOOK_EVENTS)[number];

export const HOOK_MANIFEST = '.atelier/hooks.json';
export const DEPLOY_MANIFEST = '.atelier/deployments.json';

/** Limits of what is read from a skill (each file, the whole skill, files per skill). */
export const SKILL_LIMITS = { fileBytes: 1_048_576, skillBytes: 4 * 1_048_576, files: 200, depth: 4, frontMatterBytes: 65_536 };
/** What the tools accept as a skill name (spec): 1-120 of A-Za-z0-9._:- */
export const TOOL_SKILL_NAME = /^[A-Za-z0-9._:-]{1,120}$/;
/** The Agent Skills format's own rule for `name`. */
export const SPEC_SKILL_NAME = /^(?=.{1,64}$)[a-z0-9]+(?:-[a-z0-9]+)*$/;

export function sha256(data: string | Buffer): string {
  return createHash('sha256').update(data).digest('hex');
}

/** Canonical JSON (sorted keys) for digests of structured definitions. */
export function canonical(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonical).join(',')}]`;
  if (value && typeof value === 'object')
    return `{${Object.keys(value)
      .filter((k) => (value as Record<string, unknown>)[k] !== undefined)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${canonical((value as Record<string, unknown>)[k])}`)
      .join(',')}}`;
  return JSON.stringify(value);
}

export interface SkillFileInfo {
  /** Relative to the skill directory, '/'-separated. */
  path: string;
  size: number;
  sha256: string;
}

/** A skill's digest: SHA-256 of its file list in sha256sum form ("<sha256>  <path>\n", sorted by path). */
export function skillDigest(files: SkillFileInfo[]): string {
  return sha256(
    [...files]
      .sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0))
      .map((f) => `${f.sha256}  ${f.path}\n`)
      .join(''),
  );
}

export interface SkillMeta {
  name: string | null;
  description: string | null;
  license?: string;
  compatibility?: string;
  metadata?: Record<string, string>;
  allowedTools?: string[];
  /** Body after the front matter (not kept in listings). */
  body: string;
  /** SKILL.md as read, whole: what the skills extension's hosts parse and verify (src/mcp/skills-ext.ts). */
  markdown: string;
  problems: string[];
  /** False when the skill cannot be used (no usable name or description, unparseable front matter). */
  usable: boolean;
}

/**
 * Parses and validates SKILL.md. Lenient where the Agent Skills client guide is (a name that
 * breaks the format's naming rule, or differs from its directory, is a problem but still usable
 * when the tools can address it); strict where a skill would be useless or ambiguous (no front
 * matter, YAML that does not parse, no description, no addressable name).
 */
export function parseSkillMd(text: string, dirName: string): SkillMeta {
  const problems: string[] = [];
  const out: SkillMeta = { name: null, description: null, body: '', markdown: text, problems, usable: false };
  const src = text.replace(/^\uFEFF/, '');
  const match = /^---[ \t]*\r?\n([\s\S]*?)\r?\n(?:---|\.\.\.)[ \t]*(?:\r?\n|$)/.exec(src);
  if (!match) {
    problems.push('SKILL.md has no YAML front matter (a block between --- lines at the top)');
    return out;
  }
  out.body = src.slice(match[0].length);
  const raw = match[1]!;
  if (Buffer.byteLength(raw) > SKILL_LIMITS.frontMatterBytes) {
    problems.push(`front matter is larger than ${SKILL_LIMITS.frontMatterBytes} bytes`);
    return out;
  }
  let fm: unknown;
  try {
    fm = parseYaml(raw, { maxAliasCount: 10, uniqueKeys: true, prettyErrors: false });
  } catch (err) {
    // The client guide's fallback: unquoted values containing ": " are quoted and parsed again.
    try {
      const fixed = raw.replace(/^([A-Za-z][A-Za-z0-9_-]*):[ \t]+(?!["'|>[{])(.*:\s.*)$/gm, (_s, k: string, v: string) => `${k}: ${JSON.stringify(v.trim())}`);
      fm = parseYaml(fixed, { maxAliasCount: 10, uniqueKeys: true, prettyErrors: false });
      problems.push('front matter is not valid YAML (an unquoted value contains ": "); read leniently');
    } catch {
      problems.push(`front matter is not valid YAML: ${String((err as Error).message).split('\n')[0]!.slice(0, 200)}`);
      return out;
    }
  }
  if (!fm || typeof fm !== 'object' || Array.isArray(fm)) {
    problems.push('front matter must be a YAML mapping');
    return out;
  }
  const record = fm as Record<string, unknown>;
  const known = new Set(['name', 'description', 'license', 'compatibility', 'metadata', 'allowed-tools']);
  for (const k of Object.keys(record)) if (!known.has(k)) problems.push(`unknown front matter field "${k.slice(0, 64)}" (ignored)`);
  // name
  if (typeof record.name === 'string' && record.name.length > 0) {
    const n = record.name;
    if (!SPEC_SKILL_NAME.test(n)) problems.push('name: must be 1-64 lowercase letters, digits and single hyphens, not starting or ending with a hyphen (Agent Skills format)');
    if (n !== dirName) problems.push(`name: "${n.slice(0, 64)}" does not match its directory "${dirName.slice(0, 64)}"`);
    if (TOOL_SKILL_NAME.test(n)) out.name = n;
    else problems.push('name: cannot be addressed by the skill tools (1-120 characters of A-Z a-z 0-9 . _ : -)');
  } else {
    problems.push(record.name === undefined ? 'name: missing (required)' : 'name: must be a non-empty string');
  }
  // description
  if (typeof record.description === 'string' && record.description.trim().length > 0) {
    out.description = record.description.trim();
    if (out.description.length > 1024) {
      problems.push('description: longer than 1024 characters (cut)');
      out.description = out.description.slice(0, 1024);
    }
  } else {
    problems.push(record.description === undefined ? 'description: missing (required)' : 'description: must be a non-empty string');
  }
  if (record.license !== undefined) {
    if (typeof record.license === 'string' && record.license.length > 0) out.license = record.license.slice(0, 500);
    else problems.push('license: must be a non-empty string');
  }
  if (record.compatibility !== undefined) {
    if (typeof record.compatibility === 'string' && record.compatibility.length >= 1 && record.compatibility.length <= 500) out.compatibility = record.compatibility;
    else problems.push('compatibility: must be a string of 1-500 characters');
  }
  if (record.metadata !== undefined) {
    if (record.metadata && typeof record.metadata === 'object' && !Array.isArray(record.metadata) && Object.values(record.metadata).every((v) => typeof v === 'string')) {
      out.metadata = Object.fromEntries(Object.entries(record.metadata as Record<string, string>).slice(0, 100).map(([k, v]) => [k.slice(0, 200), v.slice(0, 2000)]));
    } else problems.push('metadata: must be a mapping from string keys to string values');
  }
  const at = record['allowed-tools'];
  if (at !== undefined) {
    if (typeof at === 'string') out.allowedTools = at.split(/\s+/).filter(Boolean).slice(0, 200);
    else if (Array.isArray(at) && at.every((x) => typeof x === 'string')) out.allowedTools = (at as string[]).slice(0, 200);
    else problems.push('allowed-tools: must be a space-delimited string or a list of strings');
  }
  out.usable = out.name !== null && out.description !== null;
  return out;
}

// ---------------------------------------------------------------------------------------------
// Hook manifest

export interface HookDef {
  name: string;
  event: HookEvent;
  command: string;
  timeoutMs: number;
  /** SHA-256 of the canonical definition {name, event, command, timeoutMs}. */
  sha256: string;
}

export interface Manifest<T> {
  sha256: string;
  items: T[];
  problems: string[];
}

const HOOK_NAME = /^[A-Za-z0-9._-]{1,120}$/;

function parseJsonManifest(text: string, key: string, what: string): { list: unknown[] | null; problems: string[] } {
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch (e) {
    return { list: null, problems: [`${what} is not valid JSON: ${(e as Error).message.slice(0, 200)}`] };
  }
  if (!doc || typeof doc !== 'object' || Array.isArray(doc)) return { list: null, problems: [`${what} must be a JSON object with a "${key}" array`] };
  const record = doc as Record<string, unknown>;
  const problems: string[] = [];
  for (const k of Object.keys(record)) if (k !== key && k !== 'version' && k !== '$comment') problems.push(`unknown top-level field "${k.slice(0, 64)}"`);
  if (record.version !== undefined && record.version !== 1) problems.push('version: only 1 is known');
  if (!Array.isArray(record[key])) return { list: null, problems: [...problems, `${key}: must be an array`] };
  if ((record[key] as unknown[]).length > 100) return { list: null, problems: [...problems, `${key}: at most 100 entries`] };
  return { list: record[key] as unknown[], problems };
}

/** Parses .atelier/hooks.json. Any problem makes the whole manifest unusable (nothing of it runs). */
export function parseHookManifest(text: string): Manifest<HookDef> {
  const digest = sha256(text);
  const { list, problems } = parseJsonManifest(text, 'hooks', HOOK_MANIFEST);
  const items: HookDef[] = [];
  const names = new Set<string>();
  (list ?? []).forEach((host, i) => {
    const at = `hooks[${i}]`;
    if (!host || typeof host !== 'object' || Array.isArray(host)) return void problems.push(`${at}: must be an object`);
    const record = host as Record<string, unknown>;
    for (const k of Object.keys(record)) if (!['name', 'event', 'command', 'timeoutMs', 'description'].includes(k)) problems.push(`${at}: unknown field "${k.slice(0, 64)}"`);
    if (typeof record.name !== 'string' || !HOOK_NAME.test(record.name)) return void problems.push(`${at}.name: 1-120 characters of A-Z a-z 0-9 . _ -`);
    if (names.has(record.name)) return void problems.push(`${at}.name: "${record.name}" is used twice`);
    names.add(record.name);
    if (typeof record.event !== 'string' || !(HOOK_EVENTS as readonly string[]).includes(record.event)) return void problems.push(`${at}.event: one of ${HOOK_EVENTS.join(', ')}`);
    if (typeof record.command !== 'string' || record.command.length < 1 || record.command.length > 32768) return void problems.push(`${at}.command: a string of 1-32768 characters`);
    const t = record.timeoutMs ?? 60000;
    if (typeof t !== 'number' || !Number.isInteger(t) || t < 100 || t > 300000) return void problems.push(`${at}.timeoutMs: an integer from 100 to 300000`);
    const def = { name: record.name, event: record.event as HookEvent, command: record.command, timeoutMs: t };
    items.push({ ...def, sha256: sha256(canonical(def)) });
  });
  return { sha256: digest, items: problems.length ? [] : items, problems };
}

// ---------------------------------------------------------------------------------------------
// Deployment manifest

export interface EgressHost {
  host: string;
  ports: number[];
}

export interface DeployTarget {
  name: string;
  description?: string;
  command: string;
  timeoutMs: number;
  egress: EgressHost[];
  secrets: string[];
  /** SHA-256 of the canonical definition: what the owner enrols. */
  sha256: string;
}

const HOSTNAME = /^(?=.{1,253}$)(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)*[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?$|^\d{1,3}(?:\.\d{1,3}){3}$/;
const SECRET_NAME = /^[A-Za-z_][A-Za-z0-9_]{0,127}$/;

export function parseDeployManifest(text: string): Manifest<DeployTarget> {
  const digest = sha256(text);
  const { list, problems } = parseJsonManifest(text, 'targets', DEPLOY_MANIFEST);
  const items: DeployTarget[] = [];
  const names = new Set<string>();
  (list ?? []).forEach((item, i) => {
    const at = `targets[${i}]`;
    if (!item || typeof item !== 'object' || Array.isArray(item)) return void problems.push(`${at}: must be an object`);
    const record = item as Record<string, unknown>;
    for (const k of Object.keys(record)) if (!['name', 'description', 'command', 'timeoutMs', 'egress', 'secrets'].includes(k)) problems.push(`${at}: unknown field "${k.slice(0, 64)}"`);
    if (typeof record.name !== 'string' || !HOOK_NAME.test(record.name)) return void problems.push(`${at}.name: 1-120 characters of A-Z a-z 0-9 . _ -`);
    if (names.has(record.name)) return void problems.push(`${at}.name: "${record.name}" is used twice`);
    names.add(record.name);
    if (typeof record.command !== 'string' || record.command.length < 1 || record.command.length > 32768) return void problems.push(`${at}.command: a string of 1-32768 characters`);
    const tm = record.timeoutMs ?? 60000;
    if (typeof tm !== 'number' || !Number.isInteger(tm) || tm < 100 || tm > 300000) return void problems.push(`${at}.timeoutMs: an integer from 100 to 300000`);
    const egress: EgressHost[] = [];
    if (record.egress !== undefined) {
      if (!Array.isArray(record.egress) || record.egress.length > 20) return void problems.push(`${at}.egress: an array of at most 20 {host, ports} objects`);
      for (const [j, e] of record.egress.entries()) {
        const eo = (e ?? {}) as Record<string, unknown>;
        if (typeof eo.host !== 'string' || !HOSTNAME.test(eo.host) || eo.host.startsWith('*')) return void problems.push(`${at}.egress[${j}].host: an exact host name or IPv4 address (no wildcards)`);
        const ports = eo.ports ?? [443];
        if (!Array.isArray(ports) || ports.length < 1 || ports.length > 10 || !ports.every((p) => Number.isInteger(p) && p >= 1 && p <= 65535))
          return void problems.push(`${at}.egress[${j}].ports: 1-10 port numbers (default [443])`);
        egress.push({ host: eo.host.toLowerCase(), ports: [...new Set(ports as number[])].sort((a, b) => a - b) });
      }
    }
    const secrets = record.secrets ?? [];
    if (!Array.isArray(secrets) || secrets.length > 50 || !secrets.every((s) => typeof s === 'string' && SECRET_NAME.test(s)))
      return void problems.push(`${at}.secrets: at most 50 environment variable names`);
    if (record.description !== undefined && (typeof record.description !== 'string' || record.description.length > 1000)) return void problems.push(`${at}.description: a string of at most 1000 characters`);
    const def = { name: record.name, command: record.command, timeoutMs: tm, egress, secrets: [...new Set(secrets as string[])].sort() };
    items.push({ ...def, ...(record.description ? { description: record.description as string } : {}), sha256: sha256(canonical(def)) });
  });
  return { sha256: digest, items: problems.length ? [] : items, problems };
}
