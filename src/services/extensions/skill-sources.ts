/**
 * Where skills come from (docs/extensions.md): the workspace's skill configuration (skillSets,
 * skillOverrides), the four sources read (built-in and owner skills on the host, workspace and
 * repository skills through the in-sandbox daemon, symlinks never followed) and the roster
 * resolved across them in precedence order. The base of the skill service (skills.ts).
 */
import { readdirSync, readFileSync, lstatSync } from 'node:fs';
import { join } from 'node:path';
import { ServiceError } from '../../core/errors.js';
import { nowIso } from '../../core/clock.js';
import type { DaemonMethod, ParamsOf, ReplyOf } from '../../sandbox/daemon/protocol.js';
import {
  SHADOW_ORDER,
  SKILL_LIMITS,
  TOOL_SKILL_NAME,
  parseSkillMd,
  sha256,
  skillDigest,
  type SkillFileInfo,
  type SkillSource,
} from './format.js';
import { BUILTIN_SKILLS_DIR, Contents, DaemonEntry, Deps, ListedSkill, REPOSITORY_SKILL_ROOTS, SCAN_LISTINGS, SCAN_SKILLS, SKIP_DIRS, Skill, SkillOverride, SkillSetSel, WORKSPACE_SKILL_ROOTS, WorkspaceSkillConfig, isNotThere } from './skill-records.js';

export class SkillSources {
  protected builtinCache: Array<{ skill: Skill; contents: Contents }> | null = null;

  constructor(protected readonly deps: Deps) {}

  // ---------- workspace configuration (skillSets, skillOverrides) ----------

  setWorkspaceConfig(workspaceId: string, repositoryUrl: string, cfg: WorkspaceSkillConfig): void {
    this.deps.db
      .prepare('INSERT OR REPLACE INTO extension_workspaces (workspace_id, repository_url, skill_sets_json, skill_overrides_json, created_at) VALUES (?, ?, ?, ?, ?)')
      .run(workspaceId, repositoryUrl, JSON.stringify(cfg.skillSets), JSON.stringify(cfg.skillOverrides), nowIso());
  }

  forgetWorkspace(workspaceId: string): void {
    this.deps.db.prepare('DELETE FROM extension_workspaces WHERE workspace_id = ?').run(workspaceId);
  }

  workspaceConfig(workspaceId: string | undefined): WorkspaceSkillConfig {
    if (!workspaceId) return { skillSets: [], skillOverrides: {} };
    const result = this.deps.db.prepare('SELECT skill_sets_json, skill_overrides_json FROM extension_workspaces WHERE workspace_id = ?').get(workspaceId) as
      | { skill_sets_json: string; skill_overrides_json: string }
      | undefined;
    if (!result) return { skillSets: [], skillOverrides: {} };
    return { skillSets: JSON.parse(result.skill_sets_json), skillOverrides: JSON.parse(result.skill_overrides_json) };
  }

  // ---------- sources ----------

  protected builtins(): Array<{ skill: Skill; contents: Contents }> {
    if (this.builtinCache) return this.builtinCache;
    const dir = this.deps.builtinDir ?? BUILTIN_SKILLS_DIR;
    const out: Array<{ skill: Skill; contents: Contents }> = [];
    let names: string[] = [];
    try {
      names = readdirSync(dir).sort();
    } catch {
      names = [];
    }
    for (const name of names) {
      const base = join(dir, name);
      if (!lstatSync(base).isDirectory()) continue;
      const contents: Contents = new Map();
      const walk = (rel: string) => {
        for (const e of readdirSync(join(base, rel), { withFileTypes: true }).sort((a, b) => (a.name < b.name ? -1 : 1))) {
          const p = rel ? `${rel}/${e.name}` : e.name;
          if (e.isDirectory()) walk(p);
          else if (e.isFile()) contents.set(p, readFileSync(join(base, p)));
        }
      };
      walk('');
      if (!contents.has('SKILL.md')) continue;
      out.push({ skill: this.assemble('built-in', `skills/${name}`, name, contents, []), contents });
    }
    this.builtinCache = out;
    return out;
  }

  protected ownerSkills(): Array<{ skill: Skill; contents: Contents }> {
    const rows = this.deps.db.prepare('SELECT name, files_json FROM owner_skills ORDER BY name').all() as Array<{ name: string; files_json: string }>;
    return rows.map((r) => {
      const contents: Contents = new Map(Object.entries(JSON.parse(r.files_json) as Record<string, string>).map(([p, b]) => [p, Buffer.from(b, 'base64')]));
      return { skill: this.assemble('owner', `owner:${r.name}`, r.name, contents, []), contents };
    });
  }

  /** Builds a Skill from file contents (built-in, owner, or what was read for a run). */
  protected assemble(source: SkillSource, location: string, dirName: string, contents: Contents, problems: string[]): Skill {
    const files: SkillFileInfo[] = [...contents.entries()].map(([path, b]) => ({ path, size: b.length, sha256: sha256(b) }));
    const md = contents.get('SKILL.md');
    return this.skillOf(source, location, dirName, md ? md.toString('utf8') : '', files, problems);
  }

  protected skillOf(source: SkillSource, location: string, dirName: string, mdText: string, files: SkillFileInfo[], problems: string[]): Skill {
    const meta = parseSkillMd(mdText, dirName);
    const name = meta.name ?? (TOOL_SKILL_NAME.test(dirName) ? dirName : dirName.replace(/[^A-Za-z0-9._:-]/g, '_').slice(0, 120) || 'unnamed');
    const scripts = files.filter((f) => /^scripts\/[A-Za-z0-9._-]{1,120}$/.test(f.path)).map((f) => f.path.slice('scripts/'.length));
    const allProblems = [...problems, ...meta.problems];
    return { name, source, location, meta, files, sha256: skillDigest(files), scripts, problems: allProblems, usable: meta.usable && !problems.some((p) => p.startsWith('!')) };
  }

  protected async daemon<M extends DaemonMethod>(workspaceId: string, method: M, params: ParamsOf<M>, signal?: AbortSignal): Promise<ReplyOf<M>> {
    const h = await this.deps.workspaces.activeHandle(workspaceId);
    return this.deps.executor.request(h, method, params, { signal, timeoutMs: 60_000 });
  }

  protected async list(workspaceId: string, path: string, signal?: AbortSignal): Promise<DaemonEntry[] | null> {
    try {
      const r = await this.daemon(workspaceId, 'fs.list', { path, limit: 500 }, signal);
      return r.entries;
    } catch (e) {
      if (isNotThere(e)) return null;
      throw e;
    }
  }

  /** Reads one workspace file whole (at most SKILL_LIMITS.fileBytes) through the daemon. */
  async readWorkspaceFile(workspaceId: string, path: string, signal?: AbortSignal): Promise<Buffer | null> {
    let result: { content: string; encoding: string; size: number; eof: boolean };
    try {
      result = await this.daemon(workspaceId, 'fs.read', { path, offset: 0, limit: SKILL_LIMITS.fileBytes }, signal);
    } catch (e) {
      if (isNotThere(e)) return null;
      throw e;
    }
    if (!result.eof) throw new ServiceError('FAILED_PRECONDITION', `${path} is larger than ${SKILL_LIMITS.fileBytes} bytes`, { path });
    return Buffer.from(result.content, result.encoding === 'base64' ? 'base64' : 'utf8');
  }

  /**
   * Finds the skills of one source in the checkout. With `withContents`, reads every file of the
   * skills named `only` whole (for skills_read and skills_run); otherwise hashes files through the
   * daemon (fs.read of one byte returns the file's SHA-256) and reads only SKILL.md.
   */
  protected async scan(
    workspaceId: string,
    source: 'workspace' | 'repository',
    signal?: AbortSignal,
    only?: { name: string },
    notes: string[] = [],
  ): Promise<Array<{ skill: Skill; contents?: Contents }>> {
    const roots = source === 'repository' ? REPOSITORY_SKILL_ROOTS : WORKSPACE_SKILL_ROOTS;
    const out: Array<{ skill: Skill; contents?: Contents }> = [];
    let calls = 0;
    const budget = () => ++calls <= SCAN_LISTINGS;
    scanning: for (const root of roots) {
      const queue: Array<{ path: string; depth: number }> = [{ path: root, depth: 0 }];
      while (queue.length) {
        const { path, depth } = queue.shift()!;
        if (!budget()) {
          notes.push(`the ${source} skill directories hold more than ${SCAN_LISTINGS} directories; the rest was not read`);
          break scanning;
        }
        const entries = await this.list(workspaceId, path, signal);
        if (!entries) continue;
        if (depth > 0 && entries.some((e) => e.name === 'SKILL.md' && e.type === 'file')) {
          if (out.length >= SCAN_SKILLS) {
            notes.push(`more than ${SCAN_SKILLS} ${source} skills; the rest was not read`);
            break scanning;
          }
          const dirName = path.slice(path.lastIndexOf('/') + 1);
          out.push(await this.readSkillDir(workspaceId, source, path, dirName, entries, signal, budget, only));
          continue;
        }
        if (depth >= 3) continue;
        for (const e of entries) if (!SKIP_DIRS.has(e.name) && (e.type === 'directory' || (e.type === 'symlink' && depth === 0))) queue.push({ path: e.path, depth: depth + 1 });
      }
    }
    return out;
  }

  protected async readSkillDir(
    workspaceId: string,
    source: 'workspace' | 'repository',
    dir: string,
    dirName: string,
    top: DaemonEntry[],
    signal: AbortSignal | undefined,
    budget: () => boolean,
    only?: { name: string },
  ): Promise<{ skill: Skill; contents?: Contents }> {
    const problems: string[] = [];
    const found: Array<{ rel: string; path: string; size: number }> = [];
    const walk = async (entries: DaemonEntry[], rel: string, depth: number) => {
      for (const daemonEntry of entries) {
        const result = rel ? `${rel}/${daemonEntry.name}` : daemonEntry.name;
        if (daemonEntry.type === 'file') {
          if (found.length >= SKILL_LIMITS.files) {
            problems.push(`! more than ${SKILL_LIMITS.files} files`);
            return;
          }
          found.push({ rel: result, path: daemonEntry.path, size: daemonEntry.size });
        } else if (daemonEntry.type === 'directory') {
          if (depth >= SKILL_LIMITS.depth) {
            problems.push(`directory ${result} is deeper than ${SKILL_LIMITS.depth} levels (ignored)`);
            continue;
          }
          if (!budget()) {
            problems.push(`! too many directories to read`);
            return;
          }
          const sub = await this.list(workspaceId, daemonEntry.path, signal);
          if (sub) await walk(sub, result, depth + 1);
        } else if (daemonEntry.type === 'symlink') {
          problems.push(`${result} is a symlink (ignored: skill files are never followed through links)`);
        } else problems.push(`${result} is a ${daemonEntry.type} (ignored)`);
      }
    };
    await walk(top, '', 1);
    const total = found.reduce((n, f) => n + f.size, 0);
    if (total > SKILL_LIMITS.skillBytes) problems.push(`! the skill's files hold ${total} bytes; at most ${SKILL_LIMITS.skillBytes} are read`);
    if (found.some((f) => f.size > SKILL_LIMITS.fileBytes)) problems.push(`! a file is larger than ${SKILL_LIMITS.fileBytes} bytes`);
    const md = problems.some((p) => p.startsWith('!')) ? null : await this.readWorkspaceFile(workspaceId, `${dir}/SKILL.md`, signal);
    const mdText = md ? md.toString('utf8') : '';
    const peek = parseSkillMd(mdText, dirName);
    const wantContents = only !== undefined && (peek.name ?? dirName) === only.name && !problems.some((p) => p.startsWith('!'));
    const files: SkillFileInfo[] = [];
    const contents: Contents | undefined = wantContents ? new Map() : undefined;
    for (const fields of found) {
      if (problems.some((p) => p.startsWith('!'))) break;
      if (contents) {
        const buf = fields.rel === 'SKILL.md' && md ? md : await this.readWorkspaceFile(workspaceId, fields.path, signal);
        if (!buf) {
          problems.push(`! ${fields.rel} vanished while it was read`);
          break;
        }
        contents.set(fields.rel, buf);
        files.push({ path: fields.rel, size: buf.length, sha256: sha256(buf) });
      } else if (fields.rel === 'SKILL.md' && md) {
        files.push({ path: fields.rel, size: md.length, sha256: sha256(md) });
      } else {
        try {
          const r = await this.daemon(workspaceId, 'fs.read', { path: fields.path, offset: 0, limit: 1 }, signal);
          files.push({ path: fields.rel, size: r.size, sha256: r.sha256 });
        } catch (e) {
          if (!isNotThere(e)) throw e;
          problems.push(`${fields.rel} could not be read (${(e as Error).message.slice(0, 200)})`);
        }
      }
    }
    const skill = this.skillOf(source, dir, dirName, mdText, files, problems.map((p) => p));
    for (const p of skill.problems) if (p.startsWith('! ')) skill.usable = false;
    skill.problems = skill.problems.map((p) => (p.startsWith('! ') ? p.slice(2) : p));
    return { skill, contents };
  }

  /** Every skill the workspace can see, by source order, with the workspace's skill sets applied. */
  async all(workspaceId: string | undefined, signal?: AbortSignal, only?: { name: string; source?: SkillSource }, notes: string[] = []): Promise<Array<{ skill: Skill; contents?: Contents }>> {
    if (workspaceId) await this.deps.workspaces.activeHandle(workspaceId); // an unknown, closed or expired workspace says so
    const cfg = this.workspaceConfig(workspaceId);
    const sets = cfg.skillSets.length ? cfg.skillSets : SHADOW_ORDER.map((name) => ({ name }) as SkillSetSel);
    const want = (s: SkillSource) => (!only?.source || only.source === s) && sets.some((x) => x.name === s);
    const out: Array<{ skill: Skill; contents?: Contents }> = [];
    for (const source of SHADOW_ORDER) {
      if (!want(source)) continue;
      let found: Array<{ skill: Skill; contents?: Contents }>;
      if (source === 'built-in') found = this.builtins();
      else if (source === 'owner') found = this.ownerSkills();
      else if (!workspaceId) found = [];
      else found = await this.scan(workspaceId, source, signal, only, notes);
      const sel = sets.find((x) => x.name === source)!;
      out.push(...found.filter((f) => (!sel.include || sel.include.includes(f.skill.name)) && !(sel.exclude ?? []).includes(f.skill.name)));
    }
    return out;
  }

  /** Shadowing and overrides: which skill answers each name (the roster) and why the others do not. */
  resolve(skills: Skill[], overrides: Record<string, SkillOverride>): ListedSkill[] {
    const byName = new Map<string, Skill[]>();
    for (const s of skills) if (s.usable) byName.set(s.name, [...(byName.get(s.name) ?? []), s]);
    const winner = new Map<string, Skill>();
    for (const [n, list] of byName) {
      const o = overrides[n];
      if (o?.disabled) continue;
      const pick = (o?.source && list.find((s) => s.source === o.source)) || list[0]!;
      winner.set(n, pick);
    }
    return skills.map((skill) => {
      if (!skill.usable) return { skill: skill, active: false };
      if (overrides[skill.name]?.disabled) return { skill: skill, active: false, disabled: true };
      const w = winner.get(skill.name)!;
      if (w === skill) return { skill: skill, active: true };
      return { skill: skill, active: false, shadowedBy: { source: w.source, location: w.location } };
    });
  }

  async roster(workspaceId: string | undefined, signal?: AbortSignal): Promise<Skill[]> {
    const all = await this.all(workspaceId, signal);
    return this.resolve(all.map((x) => x.skill), this.workspaceConfig(workspaceId).skillOverrides)
      .filter((l) => l.active)
      .map((l) => l.skill);
  }
}
