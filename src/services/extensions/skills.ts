/**
 * Skills from four sources (docs/extensions.md): built-in (this repository's skills/ directory,
 * shipped with Atelier), owner (added on the CLI or the dashboard; owns table owner_skills),
 * workspace (.atelier/skills/ in the workspace) and repository (the Agent Skills layout in the
 * checkout: .agents/skills/, .claude/skills/, .github/skills/ and skills/).
 *
 * Workspace and repository files are read only through the in-sandbox daemon (fs.list and
 * fs.read as the workspace user, confined to the checkout); symlinks inside a skill are never
 * followed. A skill script runs in the workspace sandbox from a private copy of exactly the bytes
 * that were hashed and (for workspace and repository skills) approved by the owner.
 *
 * SkillService is this module's class on skill-sources.ts (SkillSources: the workspace's skill
 * configuration, reading the four sources, the roster resolved in precedence order);
 * skill-records.ts has the types. Here: the skill tools (list, read, run) and the owner skills.
 */
import type { Actor } from '../instance/index.js';
import { ServiceError } from '../../core/errors.js';
import { nowIso } from '../../core/clock.js';
import type { ExecResult } from '../../sandbox/executor.js';
import {
  SHADOW_ORDER,
  SKILL_LIMITS,
  parseSkillMd,
  sha256,
  skillDigest,
  canonical,
  type SkillSource,
} from './format.js';
import { Contents, Skill } from './skill-records.js';
import { SkillSources } from './skill-sources.js';

export { BUILTIN_SKILLS_DIR, REPOSITORY_SKILL_ROOTS, WORKSPACE_SKILL_ROOTS, type ListedSkill, type Skill, type SkillOverride, type SkillSetSel, type WorkspaceSkillConfig } from './skill-records.js';

export class SkillService extends SkillSources {
  // ---------- tools ----------

  async listTool(workspaceId: string, args: { limit: number; cursor?: string; includeShadowed: boolean }, signal?: AbortSignal) {
    const cfg = this.workspaceConfig(workspaceId);
    const notes: string[] = [];
    const listed = this.resolve((await this.all(workspaceId, signal, undefined, notes)).map((x) => x.skill), cfg.skillOverrides).filter((l) => args.includeShadowed || l.active || !l.skill.usable);
    const file = String(args.includeShadowed);
    let start = 0;
    if (args.cursor) {
      const cur = this.deps.cursors.decode<{ o: number; w: string; f?: string }>('skills_list', args.cursor);
      if (cur.w !== workspaceId || cur.f !== file) throw new ServiceError('INVALID_ARGUMENT', 'cursor: issued for another workspace or other filters; list again without a cursor', { field: 'cursor' });
      start = cur.o;
    }
    const page = listed.slice(start, start + args.limit);
    return {
      workspaceId,
      skills: page.map((l) => ({
        name: l.skill.name,
        source: l.skill.source,
        location: l.skill.location,
        description: l.skill.meta.description,
        ...(l.skill.meta.license ? { license: l.skill.meta.license } : {}),
        ...(l.skill.meta.compatibility ? { compatibility: l.skill.meta.compatibility } : {}),
        ...(l.skill.meta.metadata ? { metadata: l.skill.meta.metadata } : {}),
        ...(l.skill.meta.allowedTools ? { allowedTools: l.skill.meta.allowedTools } : {}),
        sha256: l.skill.sha256,
        files: l.skill.files.length,
        scripts: l.skill.scripts,
        scriptsNeedApproval: l.skill.source === 'repository' || l.skill.source === 'workspace',
        valid: l.skill.usable,
        problems: l.skill.problems,
        active: l.active,
        ...(l.shadowedBy ? { shadowed: true, shadowedBy: l.shadowedBy } : { shadowed: false }),
        ...(l.disabled ? { disabled: true } : {}),
      })),
      shadowingOrder: SHADOW_ORDER,
      skillSets: cfg.skillSets.length ? cfg.skillSets : SHADOW_ORDER.map((name) => ({ name })),
      skillOverrides: cfg.skillOverrides,
      total: listed.length,
      partial: notes.length > 0,
      ...(notes.length ? { notes } : {}),
      nextCursor: start + args.limit < listed.length ? this.deps.cursors.encode('skills_list', { o: start + args.limit, w: workspaceId, f: file }) : null,
    };
  }

  /** One skill with its file contents: by source when given, else the one that answers the name. */
  async load(workspaceId: string, name: string, source: SkillSource | undefined, signal?: AbortSignal): Promise<{ skill: Skill; contents: Contents; active: boolean }> {
    // Every source is looked at (shadowing needs them all); only this name's files are read whole.
    const all = await this.all(workspaceId, signal, { name });
    const listed = this.resolve(all.map((x) => x.skill), this.workspaceConfig(workspaceId).skillOverrides);
    const idx = listed.findIndex((l) => l.skill.name === name && (source ? l.skill.source === source : l.active));
    if (idx < 0) {
      const disabled = listed.find((l) => l.skill.name === name && l.disabled);
      if (disabled) throw new ServiceError('FAILED_PRECONDITION', `name: skill ${name} is disabled in this workspace by skillOverrides`, { field: 'name' });
      const bad = listed.find((l) => l.skill.name === name && !l.skill.usable);
      if (bad) throw new ServiceError('FAILED_PRECONDITION', `name: skill ${name} (${bad.skill.source}, ${bad.skill.location}) is malformed: ${bad.skill.problems.join('; ')}`, { field: 'name', problems: bad.skill.problems });
      throw new ServiceError('NOT_FOUND', `name: no skill ${name}${source ? ` from source ${source}` : ''} in this workspace (see skills_list)`, { field: source ? 'source' : 'name' });
    }
    const entry = all[idx]!;
    let contents = entry.contents;
    if (!contents) {
      if (entry.skill.source === 'workspace' || entry.skill.source === 'repository')
        throw new ServiceError('FAILED_PRECONDITION', `name: skill ${name} could not be read whole: ${entry.skill.problems.join('; ')}`, { field: 'name' });
      contents = (entry.skill.source === 'built-in' ? this.builtins() : this.ownerSkills()).find((x) => x.skill.location === entry.skill.location)!.contents;
    }
    if (!entry.skill.usable) throw new ServiceError('FAILED_PRECONDITION', `name: skill ${name} (${entry.skill.source}) is malformed: ${entry.skill.problems.join('; ')}`, { field: 'name', problems: entry.skill.problems });
    return { skill: entry.skill, contents, active: listed[idx]!.active };
  }

  /** The readable text of a skill: SKILL.md, then every other file, each after a header line. */
  static text(skill: Skill, contents: Contents): Buffer {
    const order = [...contents.keys()].sort((a, b) => (a === 'SKILL.md' ? -1 : b === 'SKILL.md' ? 1 : a < b ? -1 : 1));
    const parts: Buffer[] = [];
    for (const path of order) {
      const buf = contents.get(path)!;
      const f = skill.files.find((x) => x.path === path)!;
      const binary = buf.includes(0) || !Buffer.from(buf.toString('utf8'), 'utf8').equals(buf);
      parts.push(Buffer.from(`=== ${path} (${f.size} bytes, sha256 ${f.sha256}) ===\n`), binary ? Buffer.from(`[binary file not shown: ${f.size} bytes]\n`) : buf);
      if (!binary && buf.length && buf[buf.length - 1] !== 10) parts.push(Buffer.from('\n'));
    }
    return Buffer.concat(parts);
  }

  /**
   * What the owner approves for a skill script (docs/extensions.md, "What the approval shows"):
   * every file staged beside the script, since the script can run or read any of them from
   * $SKILL_DIR, each with its path, size and SHA-256, then the content of each: the script first,
   * then the others by path. Text content lines are prefixed with "| " so no file can forge a header
   * or another file's lines; a binary file is named, not shown. Values from the skill (names, paths,
   * arguments) are JSON-quoted so none can break a line.
   */
  static approvalText(
    s: { workspaceId: string; skill: Skill; script: string; args: string[]; scriptSha: string; digest: string },
    contents: Contents,
  ): string {
    const scriptPath = `scripts/${s.script}`;
    const paths = [...contents.keys()].sort((a, b) => (a === scriptPath ? -1 : b === scriptPath ? 1 : a < b ? -1 : a > b ? 1 : 0));
    const q = (v: string) => JSON.stringify(v);
    const isBinary = (buf: Buffer) => buf.includes(0) || !Buffer.from(buf.toString('utf8'), 'utf8').equals(buf);
    const lines = [
      `Run script ${q(s.script)} of the ${s.skill.source} skill ${q(s.skill.name)} (${q(s.skill.location)}) in workspace ${s.workspaceId}`,
      `args: ${JSON.stringify(s.args)}`,
      `script SHA-256: ${s.scriptSha}`,
      `skill SHA-256: ${s.digest} (binds every file below)`,
      `The script runs from a private copy of ALL ${paths.length} files of the skill ($SKILL_DIR): it can run or read any of them, so every one is shown.`,
      `files (SHA-256, bytes, path):`,
    ];
    for (const p of paths) {
      const buf = contents.get(p)!;
      lines.push(`  ${sha256(buf)}  ${String(buf.length).padStart(8)}  ${q(p)}${p === scriptPath ? '  (the script)' : isBinary(buf) ? '  (binary)' : ''}`);
    }
    for (const p of paths) {
      const buf = contents.get(p)!;
      const role = p === scriptPath ? 'the script' : 'staged beside it';
      if (isBinary(buf)) {
        lines.push(`=== ${q(p)} (${role}; binary, ${buf.length} bytes, SHA-256 ${sha256(buf)}; content not shown) ===`);
        continue;
      }
      lines.push(`=== ${q(p)} (${role}; ${buf.length} bytes, SHA-256 ${sha256(buf)}) ===`);
      const body = buf.toString('utf8');
      const content = body.endsWith('\n') ? body.slice(0, -1) : body;
      if (buf.length) for (const line of content.split('\n')) lines.push(`| ${line}`);
      if (buf.length && !body.endsWith('\n')) lines.push('(no newline at the end of the file)');
    }
    return lines.join('\n');
  }

  async readTool(
    workspaceId: string,
    args: { name: string; source?: SkillSource; expectedSha256?: string; offset: number; limit: number },
    signal?: AbortSignal,
  ) {
    const { skill, contents, active } = await this.load(workspaceId, args.name, args.source, signal);
    if (args.expectedSha256 && args.expectedSha256.toLowerCase() !== skill.sha256)
      throw new ServiceError('CONFLICT', `expectedSha256: skill ${skill.name} (${skill.source}) changed: its SHA-256 is now ${skill.sha256}`, { field: 'expectedSha256', currentSha256: skill.sha256 });
    const text = SkillService.text(skill, contents);
    if (args.offset > text.length) throw new ServiceError('INVALID_ARGUMENT', `offset: ${args.offset} is beyond the end of the skill text (${text.length} bytes)`, { field: 'offset', size: text.length });
    let end = Math.min(text.length, args.offset + args.limit);
    // Do not cut a UTF-8 character.
    while (end < text.length && end > args.offset && (text[end]! & 0xc0) === 0x80) end--;
    return {
      workspaceId,
      name: skill.name,
      source: skill.source,
      location: skill.location,
      active,
      description: skill.meta.description,
      sha256: skill.sha256,
      files: skill.files,
      scripts: skill.scripts,
      scriptsNeedApproval: skill.source === 'repository' || skill.source === 'workspace',
      problems: skill.problems,
      size: text.length,
      offset: args.offset,
      length: end - args.offset,
      content: text.subarray(args.offset, end).toString('utf8'),
      eof: end >= text.length,
      nextOffset: end >= text.length ? null : end,
    };
  }

  async runTool(
    workspaceId: string,
    args: { name: string; source?: SkillSource; script: string; args: string[]; timeoutMs: number; expectedSha256?: string; expectedContentSha256?: string; approvalGrantToken?: string },
    who: { principal: string; actor: Actor },
    signal?: AbortSignal,
  ) {
    const argBytes = args.args.reduce((n, x) => n + Buffer.byteLength(x) + 1, 0);
    if (argBytes > 131072) throw new ServiceError('INVALID_ARGUMENT', `args: ${argBytes} bytes in all; at most 131072`, { field: 'args' });
    if (args.args.some((x) => x.includes('\0'))) throw new ServiceError('INVALID_ARGUMENT', 'args: NUL characters cannot be passed to a program', { field: 'args' });
    const { skill, contents } = await this.load(workspaceId, args.name, args.source, signal);
    // Recomputed from the bytes that will run: nothing reported by the workspace is trusted.
    const files = [...contents.entries()].map(([path, b]) => ({ path, size: b.length, sha256: sha256(b) }));
    const digest = skillDigest(files);
    if (args.expectedSha256 && args.expectedSha256.toLowerCase() !== digest)
      throw new ServiceError('CONFLICT', `expectedSha256: skill ${skill.name} (${skill.source}) changed: its SHA-256 is now ${digest}; nothing ran`, { field: 'expectedSha256', currentSha256: digest });
    const scriptPath = `scripts/${args.script}`;
    const body = contents.get(scriptPath);
    if (!body)
      throw new ServiceError('NOT_FOUND', `script: skill ${skill.name} has no script ${args.script} (its scripts: ${skill.scripts.join(', ') || 'none'})`, { field: 'script', scripts: skill.scripts });
    const scriptSha = sha256(body);
    if (args.expectedContentSha256 && args.expectedContentSha256.toLowerCase() !== scriptSha)
      throw new ServiceError('CONFLICT', `expectedContentSha256: script ${args.script} changed: its SHA-256 is now ${scriptSha}; nothing ran`, { field: 'expectedContentSha256', currentContentSha256: scriptSha });
    let approvalId: string | null = null;
    const needsApproval = skill.source === 'repository' || skill.source === 'workspace';
    if (needsApproval) {
      const subject = { source: skill.source, skill: skill.name, location: skill.location, script: args.script, scriptSha256: scriptSha, skillSha256: digest, args: args.args };
      const text = SkillService.approvalText({ workspaceId, skill, script: args.script, args: args.args, scriptSha, digest }, contents);
      approvalId = this.deps.approvals.consume(
        { kind: 'skill_script', workspaceId, text, digest: sha256(canonical(subject)), details: subject },
        args.approvalGrantToken,
        who.principal,
        who.actor,
        `running script ${args.script} of the ${skill.source} skill ${skill.name}`,
      );
    } else if (args.approvalGrantToken) {
      throw new ServiceError('INVALID_ARGUMENT', `approvalGrantToken: ${skill.source} skills run without approval; leave it out`, { field: 'approvalGrantToken' });
    }
    const r = await this.stageAndRun(workspaceId, contents, args.script, args.args, args.timeoutMs, { SKILL_NAME: skill.name, SKILL_SOURCE: skill.source }, signal);
    this.deps.audit.record({ actor: who.actor, principal: who.principal, action: 'skill_script_run', target: workspaceId, outcome: 'ok', details: { skill: skill.name, source: skill.source, script: args.script, scriptSha256: scriptSha, exitCode: r.exitCode, approvalId } });
    return { workspaceId, skill: { name: skill.name, source: skill.source, location: skill.location, sha256: digest }, script: args.script, scriptSha256: scriptSha, approvalId, ...r };
  }

  /**
   * Copies the exact bytes into a private directory of the sandbox's /tmp (sent on stdin, never
   * read back from the checkout) and runs the script from there, with the checkout as working
   * directory. The copy is removed afterwards.
   */
  private async stageAndRun(workspaceId: string, contents: Contents, script: string, args: string[], timeoutMs: number, env: Record<string, string>, signal?: AbortSignal): Promise<ExecResult> {
    const lines: string[] = [];
    for (const [p, b] of contents) {
      if (p.startsWith('/') || p.split('/').some((s) => s === '..' || s === '' || s === '.')) continue;
      lines.push(`${Buffer.from(p).toString('base64')} ${b.toString('base64')}`);
    }
    const wrapper = [
      'set -e; umask 077',
      'd=$(mktemp -d /tmp/atelier-skill.XXXXXXXX)',
      'trap \'rm -rf "$d"\' EXIT',
      'while IFS=" " read -r pb b; do p=$(printf %s "$pb" | base64 -d); mkdir -p "$d/$(dirname -- "$p")"; printf %s "$b" | base64 -d > "$d/$p"; done',
      'chmod -R u+rwX "$d"; chmod 700 "$d/scripts/$ATELIER_SKILL_SCRIPT"',
      'export SKILL_DIR="$d"',
      'set +e',
      '"$d/scripts/$ATELIER_SKILL_SCRIPT" "$@" < /dev/null',
      'exit $?',
    ].join('\n');
    return this.deps.workspaces.exec(
      workspaceId,
      { argv: ['bash', '-c', wrapper, 'skills_run', ...args], stdin: lines.join('\n') + '\n', env: { ...env, ATELIER_SKILL_SCRIPT: script }, cwd: '.', timeoutMs, maxOutputBytes: 262144 },
      undefined,
      signal,
    );
  }

  // ---------- owner skills (CLI and dashboard) ----------

  ownerList(): Array<Record<string, unknown>> {
    const list = [...this.ownerSkills(), ...this.builtins()];
    return list.map(({ skill }) => ({ name: skill.name, source: skill.source, location: skill.location, description: skill.meta.description, sha256: skill.sha256, files: skill.files, scripts: skill.scripts, valid: skill.usable, problems: skill.problems }));
  }

  /** Adds or replaces an owner skill. SKILL.md must be valid enough to use; its name is the skill's name. */
  ownerPut(files: Record<string, Buffer>, actor: Actor, expectName?: string) {
    const paths = Object.keys(files);
    if (!files['SKILL.md']) throw new ServiceError('INVALID_ARGUMENT', 'files: a skill needs a SKILL.md', { field: 'files' });
    if (paths.length > SKILL_LIMITS.files) throw new ServiceError('INVALID_ARGUMENT', `files: at most ${SKILL_LIMITS.files} files`, { field: 'files' });
    let total = 0;
    for (const path of paths) {
      if (!/^[A-Za-z0-9._-]+(\/[A-Za-z0-9._-]+){0,4}$/.test(path) || path.split('/').some((s) => s === '.' || s === '..'))
        throw new ServiceError('INVALID_ARGUMENT', `files: path ${JSON.stringify(path.slice(0, 200))} must be relative, at most 5 segments of A-Z a-z 0-9 . _ -`, { field: 'files' });
      if (files[path]!.length > SKILL_LIMITS.fileBytes) throw new ServiceError('INVALID_ARGUMENT', `files: ${path} is larger than ${SKILL_LIMITS.fileBytes} bytes`, { field: 'files' });
      total += files[path]!.length;
    }
    if (total > SKILL_LIMITS.skillBytes) throw new ServiceError('INVALID_ARGUMENT', `files: the skill holds more than ${SKILL_LIMITS.skillBytes} bytes`, { field: 'files' });
    const meta = parseSkillMd(files['SKILL.md']!.toString('utf8'), expectName ?? '');
    if (!meta.usable) throw new ServiceError('INVALID_ARGUMENT', `SKILL.md: ${meta.problems.filter((p) => !p.includes('does not match its directory')).join('; ')}`, { field: 'SKILL.md', problems: meta.problems });
    if (expectName && meta.name !== expectName) throw new ServiceError('INVALID_ARGUMENT', `name: SKILL.md names the skill ${meta.name}, not ${expectName}`, { field: 'name' });
    const name = meta.name!;
    const stored = JSON.stringify(Object.fromEntries(paths.sort().map((p) => [p, files[p]!.toString('base64')])));
    const now = nowIso();
    const existed = this.deps.db.prepare('SELECT 1 FROM owner_skills WHERE name = ?').get(name) !== undefined;
    this.deps.db
      .prepare('INSERT INTO owner_skills (name, files_json, created_at, updated_at) VALUES (?, ?, ?, ?) ON CONFLICT(name) DO UPDATE SET files_json = excluded.files_json, updated_at = excluded.updated_at')
      .run(name, stored, now, now);
    const skill = this.ownerSkills().find((s) => s.skill.name === name)!.skill;
    this.deps.audit.record({ actor, action: existed ? 'owner_skill_replace' : 'owner_skill_add', target: name, outcome: 'ok', details: { sha256: skill.sha256 } });
    return { name, source: 'owner', sha256: skill.sha256, files: skill.files, scripts: skill.scripts, problems: skill.problems, replaced: existed };
  }

  ownerRemove(name: string, actor: Actor) {
    const r = this.deps.db.prepare('DELETE FROM owner_skills WHERE name = ?').run(name);
    if (r.changes === 0) throw new ServiceError('NOT_FOUND', `name: no owner skill ${name}`, { field: 'name' });
    this.deps.audit.record({ actor, action: 'owner_skill_remove', target: name, outcome: 'ok' });
    return { name, removed: true };
  }
}

/** What the methods above answer, by name (the shapes are the code's own, inferred by the compiler). */
export type SkillListToolResult = Awaited<ReturnType<SkillService['listTool']>>;
export type SkillReadToolResult = Awaited<ReturnType<SkillService['readTool']>>;
export type SkillRunToolResult = Awaited<ReturnType<SkillService['runTool']>>;
export type SkillOwnerPutResult = Awaited<ReturnType<SkillService['ownerPut']>>;
export type SkillOwnerRemoveResult = Awaited<ReturnType<SkillService['ownerRemove']>>;
