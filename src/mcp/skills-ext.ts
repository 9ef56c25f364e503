/**
 * The workspace's skills through the MCP skills extension (io.modelcontextprotocol/skills,
 * SEP-2640): `skills/list` (the roster of the caller's active workspace, one entry per skill with
 * its SKILL.md front matter and every file's SHA-256 and size), `skills/get` (one skill by the URI
 * of its SKILL.md, listed or not), each file of a skill as a resource read with resources/read, and
 * its directories listed with resources/directory/read (registered in src/mcp/resources.ts).
 *
 * URIs: `skill://owner/<name>/<file>` and `skill://built-in/<name>/<file>` for the skills that are
 * the same in every workspace; `skill://workspace/<workspaceId>/<name>/<file>` and
 * `skill://repository/<workspaceId>/<name>/<file>` for those of a checkout. The last segment
 * before the file is the skill's name, as the extension requires. A skill is found by (source,
 * workspace, name) exactly as skills_read finds it (SkillService.load: the daemon's confinement,
 * symlinks never followed) and only the files of its list are served, so a URI can name nothing
 * outside the skill. The SDK's installed implementation (SkillsExtension) serves one catalog per
 * McpServer; Atelier's catalog is per caller and per workspace and its Server is the low-level one,
 * so the wire format is implemented here and the SDK's own entry builder (skillEntry) reads the
 * front matter and checks the Agent Skills rules, as the hosts that verify an entry do. A skill that
 * breaks those rules is not served through the extension (it is still a prompt, a resource and a
 * skill of the tools); skills/list names it under `_meta["atelier/notServed"]`. Decisions:
 * docs/extensions.md, "Skills over MCP".
 */
import { isUtf8 } from 'node:buffer';
import type { Server, ServerContext } from '@modelcontextprotocol/server';
import { DIRECTORY_MIME_TYPE, SKILLS_GET_METHOD, SKILLS_LIST_METHOD, SkillCatalogError, skillEntry } from '@modelcontextprotocol/server/ext/skills';
import { z } from 'zod';
import type { App } from '../app.js';
import { ServiceError } from '../core/errors.js';
import { SKILL_SOURCES, TOOL_SKILL_NAME, type SkillSource } from '../services/extensions/index.js';
import type { Skill } from '../services/extensions/index.js';
import { META, activeRoster, cacheFields, decodeSegment, encodeSegment, knownMimeType, mayUse, mimeTypeOf, page, requireTool, rpcError, type SurfaceDeps } from './surface.js';

const WORKSPACE_ID = /^ws_[A-Za-z0-9_-]{20,80}$/;
const MAX_URI_LENGTH = 16_384;
const IN_CHECKOUT = new Set<SkillSource>(['workspace', 'repository']);

/** A skill entry as skills/list and skills/get carry it (SEP-2640 `Skill`). */
export interface SkillEntry {
  uri: string;
  frontmatter: Record<string, unknown>;
  resources: Array<{ uri: string; digest: string; size: number }>;
  _meta: Record<string, unknown>;
}

/** The skill's root directory URI (no trailing slash). */
export function skillRoot(source: SkillSource, workspaceId: string | null, name: string): string {
  if (!IN_CHECKOUT.has(source)) return `skill://${source}/${encodeSegment(name)}`;
  if (!workspaceId) throw new Error(`a ${source} skill has no URI without its workspace`);
  return `skill://${source}/${encodeSegment(workspaceId)}/${encodeSegment(name)}`;
}

export function skillFileUri(root: string, path: string): string {
  return `${root}/${path.split('/').map(encodeSegment).join('/')}`;
}

export interface SkillUri {
  source: SkillSource;
  workspaceId: string | null;
  name: string;
  /** The file's path inside the skill ('SKILL.md', 'scripts/run.sh'). */
  file: string;
}

/**
 * Parses a skill file URI from its text (no URL parser resolves `..` away); every rule broken is
 * refused naming it. With `directory`, the URI may name the skill's root (`file` is then '') or a
 * directory inside it.
 */
export function parseSkillUri(uri: string, directory = false): SkillUri {
  const bad = (why: string, rule: string) => new ServiceError('INVALID_ARGUMENT', `uri: ${why}`, { field: 'uri', rule });
  if (uri.length > MAX_URI_LENGTH) throw bad(`longer than ${MAX_URI_LENGTH} characters`, `at most ${MAX_URI_LENGTH} characters`);
  if (!uri.startsWith('skill://')) throw bad('a skill file is skill://<source>/…/<name>/<file>', 'skill URI');
  if (/[?#]/.test(uri)) throw bad('a skill file URI has no query or fragment', 'no query or fragment');
  const segs = uri.slice('skill://'.length).split('/');
  const source = segs[0] as SkillSource;
  if (!SKILL_SOURCES.includes(source)) throw bad(`the first segment names the source: ${SKILL_SOURCES.join(', ')}`, 'skill source');
  let at = 1;
  let workspaceId: string | null = null;
  if (IN_CHECKOUT.has(source)) {
    workspaceId = decodeSegment(segs[at++] ?? '', 'uri');
    if (!WORKSPACE_ID.test(workspaceId)) throw bad(`a ${source} skill is skill://${source}/<workspaceId>/<name>/<file>`, 'workspace identifier');
  }
  const name = decodeSegment(segs[at++] ?? '', 'uri');
  if (!TOOL_SKILL_NAME.test(name)) throw bad('the skill name must be 1-120 characters of A-Z a-z 0-9 . _ : -', 'skill name');
  const rest = segs.slice(at);
  if (rest.length === 0 && !directory) throw bad('names a skill directory, not a file (list it with resources/directory/read; its SKILL.md is …/SKILL.md)', 'file of a skill');
  return { source, workspaceId, name, file: rest.map((s) => decodeSegment(s, 'uri')).join('/') };
}

/**
 * One skill with every file's bytes, found as the skill tools find it: a workspace or repository
 * skill by SkillService.load (through the daemon, confined to the checkout), an owner or built-in
 * skill from its store.
 */
export async function loadSkill(app: App, source: SkillSource, workspaceId: string | null, name: string, signal: AbortSignal): Promise<{ skill: Skill; contents: Map<string, Buffer> }> {
  if (IN_CHECKOUT.has(source)) return app.extensions.skills.load(workspaceId!, name, source, signal);
  const found = (await app.extensions.skills.all(undefined, signal)).find((x) => x.skill.source === source && x.skill.name === name);
  if (!found) throw new ServiceError('NOT_FOUND', `uri: no ${source} skill ${name} (skills/list names the skills)`, { field: 'uri' });
  if (!found.skill.usable) throw new ServiceError('FAILED_PRECONDITION', `uri: the ${source} skill ${name} is malformed: ${found.skill.problems.join('; ')}`, { field: 'uri', problems: found.skill.problems });
  return { skill: found.skill, contents: found.contents! };
}

/** Where a skill lives and what pins it, as skills_list shows it. */
function skillMeta(skill: Skill): Record<string, unknown> {
  return { [`${META}skill`]: { source: skill.source, location: skill.location, sha256: skill.sha256, scripts: skill.scripts, scriptsNeedApproval: IN_CHECKOUT.has(skill.source) } };
}

/**
 * A skill's entry, or why it cannot be one: the front matter as the SDK reads it (the hosts'
 * reading), the Agent Skills rules the SDK checks (name, description, compatibility, metadata),
 * and SKILL.md's digest as read equal to the digest of its text (it is UTF-8 and did not change).
 */
export async function entryOf(skill: Skill, workspaceId: string | null): Promise<{ entry: SkillEntry } | { problem: string }> {
  const root = skillRoot(skill.source, workspaceId, skill.name);
  const path = IN_CHECKOUT.has(skill.source) ? `${skill.source}/${workspaceId}/${skill.name}` : `${skill.source}/${skill.name}`;
  let checked: Awaited<ReturnType<typeof skillEntry>>;
  try {
    checked = await skillEntry(path, { 'SKILL.md': skill.meta.markdown });
  } catch (e) {
    if (e instanceof SkillCatalogError) return { problem: e.problems.map((p) => p.message).join('; ') };
    if (e instanceof TypeError) return { problem: e.message };
    throw e;
  }
  const md = skill.files.find((f) => f.path === 'SKILL.md');
  const mdDigest = (checked.resources as Array<{ digest: string }>)[0]?.digest;
  if (!md || mdDigest !== `sha256:${md.sha256}`) return { problem: 'SKILL.md is not valid UTF-8 (or changed while it was read)' };
  const resources = skill.files
    .map((f) => ({ uri: skillFileUri(root, f.path), digest: `sha256:${f.sha256}`, size: f.size }))
    .sort((a, b) => (a.uri < b.uri ? -1 : a.uri > b.uri ? 1 : 0));
  return { entry: { uri: `${root}/SKILL.md`, frontmatter: checked.frontmatter as Record<string, unknown>, resources, _meta: skillMeta(skill) } };
}

/**
 * resources/list: the SKILL.md of every roster skill, with its name and description. No `_meta`:
 * the skill-level facts (source, location, digest, scripts) describe the skill, not this one file,
 * and ride on its skills/list and skills/get entry (and its prompt) under `atelier/skill`.
 */
export function skillResources(skills: Skill[], workspaceId: string | null): Array<Record<string, unknown>> {
  return skills.map((s) => ({
    uri: `${skillRoot(s.source, workspaceId, s.name)}/SKILL.md`,
    name: s.name,
    title: `${s.name} (${s.source} skill)`,
    description: s.meta.description ?? '',
    mimeType: 'text/markdown',
    size: s.files.find((f) => f.path === 'SKILL.md')?.size ?? 0,
  }));
}

/** resources/read of one file of a skill: only a file of the skill's own list is served. */
export async function readSkillResource(deps: SurfaceDeps, uri: string, signal: AbortSignal): Promise<{ contents: Array<Record<string, unknown>> }> {
  const u = parseSkillUri(uri);
  const { skill, contents } = await loadSkill(deps.app, u.source, u.workspaceId, u.name, signal);
  const bytes = contents.get(u.file);
  if (!bytes) {
    if ([...contents.keys()].some((p) => p.startsWith(`${u.file}/`)))
      throw new ServiceError('INVALID_ARGUMENT', `uri: ${JSON.stringify(u.file.slice(0, 200))} is a directory of the skill, not a file; list it with resources/directory/read`, { field: 'uri', rule: 'file of a skill' });
    const files = [...contents.keys()].sort();
    throw new ServiceError('NOT_FOUND', `uri: the ${skill.source} skill ${skill.name} has no file ${JSON.stringify(u.file.slice(0, 200))} (its files: ${files.slice(0, 20).join(', ')}${files.length > 20 ? ', …' : ''})`, { field: 'uri' });
  }
  const text = isUtf8(bytes) && !bytes.includes(0);
  return { contents: [{ uri, mimeType: u.file === 'SKILL.md' ? 'text/markdown' : mimeTypeOf(u.file, text), ...(text ? { text: bytes.toString('utf8') } : { blob: bytes.toString('base64') }) }] };
}

/**
 * resources/directory/read of a skill's root or of a directory inside it: its direct children, from
 * the skill's own file list (files with their size, directories as inode/directory), in one page.
 */
export async function readSkillDirectory(deps: SurfaceDeps, uri: string, cursor: string | undefined, signal: AbortSignal): Promise<{ resources: Array<Record<string, unknown>> }> {
  const u = parseSkillUri(uri, true);
  if (cursor !== undefined) throw new ServiceError('INVALID_ARGUMENT', "cursor: a skill directory's listing has a single page; list it again without a cursor", { field: 'cursor', rule: 'cursor' });
  const { skill } = await loadSkill(deps.app, u.source, u.workspaceId, u.name, signal);
  const root = skillRoot(skill.source, u.workspaceId, skill.name);
  if (skill.files.some((f) => f.path === u.file))
    throw new ServiceError('INVALID_ARGUMENT', `uri: ${JSON.stringify(u.file.slice(0, 200))} is a file of the skill, not a directory resource; read it with resources/read`, { field: 'uri', rule: 'directory of a skill' });
  const prefix = u.file === '' ? '' : `${u.file}/`;
  const children = new Map<string, Record<string, unknown>>();
  for (const f of skill.files) {
    if (!f.path.startsWith(prefix)) continue;
    const rest = f.path.slice(prefix.length);
    const slash = rest.indexOf('/');
    if (slash < 0) {
      const mimeType = f.path === 'SKILL.md' ? 'text/markdown' : knownMimeType(rest);
      children.set(rest, { uri: skillFileUri(root, f.path), name: rest, ...(mimeType ? { mimeType } : {}), size: f.size });
    } else {
      const dir = rest.slice(0, slash);
      children.set(`${dir}/`, { uri: skillFileUri(root, prefix + dir), name: dir, mimeType: DIRECTORY_MIME_TYPE });
    }
  }
  if (children.size === 0) throw new ServiceError('NOT_FOUND', `uri: the ${skill.source} skill ${skill.name} has no directory ${JSON.stringify(u.file.slice(0, 200))}`, { field: 'uri' });
  const resources = [...children.values()].sort((a, b) => ((a.uri as string) < (b.uri as string) ? -1 : (a.uri as string) > (b.uri as string) ? 1 : 0));
  return { resources };
}

const ListParams = z.looseObject({ cursor: z.string().optional() }).optional();
const GetParams = z.looseObject({ uri: z.string() });

/** skills/list and skills/get on a per-request Server (the capability is declared by registerResourceSurfaces). */
export function registerSkills(server: Server, deps: SurfaceDeps): void {
  server.setRequestHandler(SKILLS_LIST_METHOD, { params: ListParams }, async (params, ctx: ServerContext) => {
    const caller = deps.caller(ctx);
    try {
      if (!mayUse(deps, caller, 'skills_list')) return { skills: [], ...cacheFields(server, 0) };
      const roster = await activeRoster(deps.app, caller.principal, ctx.mcpReq.signal);
      const entries: SkillEntry[] = [];
      const notServed: Array<{ name: string; source: string; problem: string }> = [];
      for (const s of roster.skills) {
        const r = await entryOf(s, roster.workspaceId);
        if ('entry' in r) entries.push(r.entry);
        else notServed.push({ name: s.name, source: s.source, problem: r.problem });
      }
      entries.sort((a, b) => (a.uri < b.uri ? -1 : a.uri > b.uri ? 1 : 0));
      const p = page(deps.app, 'skills_ext_list', entries, roster.workspaceId, params?.cursor);
      return {
        skills: p.items,
        ...(p.nextCursor ? { nextCursor: p.nextCursor } : {}),
        ...cacheFields(server, 0),
        ...(notServed.length ? { _meta: { [`${META}notServed`]: notServed } } : {}),
      };
    } catch (e) {
      throw rpcError(deps.app, e);
    }
  });
  server.setRequestHandler(SKILLS_GET_METHOD, { params: GetParams }, async (params, ctx: ServerContext) => {
    const caller = deps.caller(ctx);
    try {
      requireTool(deps, caller, 'skills_list', SKILLS_GET_METHOD, params.uri.slice(0, 300));
      const u = parseSkillUri(params.uri);
      if (u.file !== 'SKILL.md') throw new ServiceError('INVALID_ARGUMENT', "uri: skills/get takes the URI of a skill's SKILL.md", { field: 'uri', rule: '…/<name>/SKILL.md' });
      const { skill } = await loadSkill(deps.app, u.source, u.workspaceId, u.name, ctx.mcpReq.signal);
      const r = await entryOf(skill, u.workspaceId);
      if ('problem' in r)
        throw new ServiceError('FAILED_PRECONDITION', `uri: the ${skill.source} skill ${skill.name} breaks the Agent Skills format (${r.problem}), so the skills extension does not serve it; read it with skills_read or resources/read`, { field: 'uri', rule: 'Agent Skills format' });
      return { skill: r.entry, ...cacheFields(server, 0) };
    } catch (e) {
      throw rpcError(deps.app, e, params.uri.slice(0, 2000));
    }
  });
}
