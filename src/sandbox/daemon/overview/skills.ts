/** Repository skills: directories holding a SKILL.md under the skill roots. */
import { closeSync } from 'node:fs';
import { OVERVIEW_LIMITS, IGNORED_DIRS, type RepositorySkill, type Ctx } from './rules.js';
import { dirEntries, openDirInside, readText, isFileInside, isDirInside } from './access.js';

// ---------------------------------------------------------------------------------------------
// Skills
// ---------------------------------------------------------------------------------------------

export const SKILL_ROOTS = ['.claude/skills', '.agents/skills', 'skills'] as const;
export const SKILL_NAME = /^[A-Za-z0-9._:-]{1,120}$/;
export const SKILL_MAX_DEPTH = 4;

/**
 * Directories holding a SKILL.md under the skill roots, up to four levels deep. A skill directory
 * is not searched for further skills. Symlinked directories are followed only when they resolve
 * under the root (skills are often linked from one root into another); each real directory once.
 */
export async function discoverSkills(ctx: Ctx): Promise<RepositorySkill[]> {
  const skills: RepositorySkill[] = [];
  const seenReal = new Set<string>();
  for (const base of SKILL_ROOTS) {
    if (!(await isDirInside(ctx, base))) continue;
    const queue: Array<{ rel: string; depth: number }> = [{ rel: base, depth: 0 }];
    let entries = 0;
    for (let head = 0; head < queue.length; head++) {
      if (Date.now() >= ctx.deadline) {
        ctx.partial = true;
        return sortSkills(skills);
      }
      const { rel, depth } = queue[head]!;
      // Opened by descriptor from the root (symlinks followed only inside); its real path dedupes.
      const dir = openDirInside(ctx, rel);
      if (!dir) continue;
      try {
        if (seenReal.has(dir.real)) continue;
        seenReal.add(dir.real);
        if (depth > 0 && (await isFileInside(ctx, `${rel}/SKILL.md`))) {
          if (skills.length >= OVERVIEW_LIMITS.maxSkills) {
            ctx.partial = true;
            return sortSkills(skills);
          }
          const skill = await readSkill(ctx, rel);
          if (skill) skills.push(skill);
          continue;
        }
        if (depth >= SKILL_MAX_DEPTH) continue;
        for await (const ent of dirEntries(dir.fd, 64)) {
          if (++entries > OVERVIEW_LIMITS.subtreeMaxEntries) {
            ctx.partial = true;
            break;
          }
          if (IGNORED_DIRS.has(ent.name)) continue;
          const childRel = `${rel}/${ent.name}`;
          if (ent.isDirectory()) queue.push({ rel: childRel, depth: depth + 1 });
          else if (ent.isSymbolicLink() && (await isDirInside(ctx, childRel))) queue.push({ rel: childRel, depth: depth + 1 });
        }
      } finally {
        closeSync(dir.fd);
      }
    }
  }
  return sortSkills(skills);
}

export function sortSkills(skills: RepositorySkill[]): RepositorySkill[] {
  const rootIndex = (p: string) => SKILL_ROOTS.findIndex((r) => p.startsWith(`${r}/`));
  return skills.sort((a, b) => rootIndex(a.path) - rootIndex(b.path) || (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
}

export async function readSkill(ctx: Ctx, dirRel: string): Promise<RepositorySkill | null> {
  const text = await readText(ctx, `${dirRel}/SKILL.md`, OVERVIEW_LIMITS.skillReadBytes);
  if (text === null) return null;
  const fm = parseFrontMatter(text);
  const dirName = dirRel.slice(dirRel.lastIndexOf('/') + 1);
  const name = fm.name && SKILL_NAME.test(fm.name) ? fm.name : SKILL_NAME.test(dirName) ? dirName : null;
  if (!name) return null;
  const skill: RepositorySkill = { name, path: dirRel };
  if (fm.description) skill.description = fm.description.slice(0, OVERVIEW_LIMITS.skillDescriptionChars);
  return skill;
}

/**
 * Top-level scalar keys of a YAML front matter block (between `---` lines at the start of the
 * file). Handles plain, quoted, continued and block (`|`, `>`) scalars; nested mappings and lists
 * are skipped. Not a YAML parser: enough for name and description.
 */
export function parseFrontMatter(text: string): Record<string, string> {
  const out: Record<string, string> = {};
  const lines = text.replace(/^\uFEFF/, '').split(/\r?\n/);
  if (lines[0]?.trim() !== '---') return out;
  let end = -1;
  for (let i = 1; i < lines.length; i++) {
    if (/^(?:---|\.\.\.)\s*$/.test(lines[i]!)) {
      end = i;
      break;
    }
  }
  if (end < 0) return out;
  const body = lines.slice(1, end);
  for (let i = 0; i < body.length; i++) {
    const m = /^([A-Za-z_][A-Za-z0-9_-]*)\s*:(?:\s+(.*))?$/.exec(body[i]!);
    if (!m) continue;
    const key = m[1]!;
    let value = (m[2] ?? '').replace(/\s+#.*$/, '').trim();
    // Lines belonging to this key: indented or blank.
    const cont: string[] = [];
    while (i + 1 < body.length && (/^\s+\S/.test(body[i + 1]!) || body[i + 1]!.trim() === '')) cont.push(body[++i]!);
    while (cont.length && cont[cont.length - 1]!.trim() === '') cont.pop();
    const block = /^([|>])([+-]?)\d*$/.exec(value);
    if (block) {
      const indent = Math.min(...cont.filter((l) => l.trim()).map((l) => l.length - l.trimStart().length));
      const raw = cont.map((l) => l.slice(Number.isFinite(indent) ? indent : 0));
      value = block[1] === '|' ? raw.join('\n') : raw.reduce((acc, l) => (l.trim() === '' ? acc + '\n' : acc === '' || acc.endsWith('\n') ? acc + l : `${acc} ${l}`), '');
      value = value.trim();
    } else if (value.startsWith('"')) {
      const joined = [value, ...cont.map((l) => l.trim())].join(' ');
      const q = /^"((?:[^"\\]|\\.)*)"/.exec(joined);
      value = q ? q[1]!.replace(/\\(["\\/nt])/g, (_, c: string) => (c === 'n' ? '\n' : c === 't' ? '\t' : c)) : joined.slice(1);
    } else if (value.startsWith("'")) {
      const joined = [value, ...cont.map((l) => l.trim())].join(' ');
      const q = /^'((?:[^']|'')*)'/.exec(joined);
      value = q ? q[1]!.replace(/''/g, "'") : joined.slice(1);
    } else if (value === '') {
      continue; // a nested mapping or list
    } else if (cont.length) {
      value = [value, ...cont.map((l) => l.trim()).filter(Boolean)].join(' ');
    }
    if (!(key in out)) out[key] = value;
  }
  return out;
}
