/**
 * Repository overview for workspace_context (and agent_spawn's repositoryContext): languages, test
 * commands, agent instruction files chosen by client profile, and repository skills.
 *
 * Runs inside the sandbox as the workspace user with root = /workspace, as part of the daemon, so it
 * imports node built-ins and sibling files only. The repository is untrusted input:
 *
 *  - symlinks are never followed while walking; an instruction file, marker file or skill directory
 *    that is a symlink is used only when its realpath stays under the real root;
 *  - files are opened with O_NOFOLLOW | O_NONBLOCK on their realpath and checked with fstat, so
 *    devices, fifos and sockets are skipped and never block;
 *  - instruction files are hashed by streaming and only the excerpt's bytes are kept in memory;
 *    config files are read up to a fixed cap;
 *  - the walk is iterative (breadth first, opendir) and stops at maxFiles or the deadline, in which
 *    case the result says partial: true.
 *
 * The rules (profiles, language table, test-command table, limits) are documented in
 * docs/workspace-context.md; keep the two in step.
 */
import { createHash } from 'node:crypto';
import { constants as FS, type Dir, type Dirent } from 'node:fs';
import { lstat, open, opendir, readdir, readlink, realpath, stat, type FileHandle } from 'node:fs/promises';
import path from 'node:path';
import { DaemonError } from './protocol.js';

/** A directory's entries, read in batches; an unreadable directory or entry ends the listing quietly, and the handle always closes. */
async function* dirEntries(dir: string, bufferSize: number): AsyncGenerator<Dirent> {
  let handle: Dir;
  try {
    handle = await opendir(dir, { bufferSize });
  } catch {
    return;
  }
  try {
    for (;;) {
      const ent = await handle.read().catch(() => null);
      if (ent === null) return;
      yield ent;
    }
  } finally {
    await handle.close().catch(() => undefined);
  }
}


export type ClientProfile = 'all' | 'profile_a' | 'profile_b' | 'profile_c' | 'profile_d';
export type ConcreteProfile = Exclude<ClientProfile, 'all'>;
export type OverviewSection = 'instructions' | 'languages' | 'test_commands' | 'skills';

export interface OverviewOptions {
  /** Repository directory (the workspace checkout, /workspace in the sandbox). Absolute. */
  root: string;
  clientProfile: ClientProfile;
  include: OverviewSection[];
  contentMode: 'none' | 'excerpt';
  /** 4096..131072: total bytes (UTF-8) of excerpted text across all instruction files. */
  maxBytes: number;
  /** Cap on files walked; default 200000. */
  maxFiles?: number;
  /** Stop walking after this many milliseconds (default 5000) and report partial. */
  deadlineMs?: number;
}

export interface LanguageShare {
  language: string;
  files: number;
  /** Share of the counted source files, 0..1, rounded to 3 decimals. */
  share: number;
}

export interface TestCommand {
  command: string;
  /** Where it was found, e.g. "package.json scripts.test". */
  source: string;
  /** npm, pnpm, yarn, bun, make, just, task, pytest, tox, nox, cargo, go, maven, gradle, ... */
  kind: string;
}

export interface InstructionFile {
  /** Path relative to the root, '/'-separated (the link's path when the file is a symlink). */
  path: string;
  /** Every concrete profile that honours this file (not only the requested one). */
  profiles: ConcreteProfile[];
  bytes: number;
  sha256: string;
  /** contentMode excerpt only: the first bytes of the file, cut on a UTF-8 character boundary. */
  excerpt?: string;
  /** contentMode excerpt only: true when the excerpt is shorter than the file. */
  truncated?: boolean;
}

export interface RepositorySkill {
  name: string;
  /** Directory holding SKILL.md, relative to the root. */
  path: string;
  description?: string;
}

export interface RepositoryOverview {
  languages?: LanguageShare[];
  testCommands?: TestCommand[];
  instructions?: InstructionFile[];
  skills?: RepositorySkill[];
  partial: boolean;
  filesScanned: number;
}

// ---------------------------------------------------------------------------------------------
// Client profiles
// ---------------------------------------------------------------------------------------------

/**
 * Instruction files per client family. Patterns are '/'-separated paths relative to the root:
 * `*` matches within one path segment, `**` matches any number of segments (including none), so
 * `**\/AGENTS.md` is the root AGENTS.md plus every nested one.
 */
export const CLIENT_PROFILES: Record<ConcreteProfile, { label: string; instructionFiles: string[] }> = {
  profile_a: {
    label: 'Claude Code family',
    instructionFiles: ['**/CLAUDE.md', '.claude/CLAUDE.md', 'CLAUDE.local.md', '.claude/rules/**/*.md', '**/AGENTS.md'],
  },
  profile_b: {
    label: 'Codex / AGENTS.md family',
    instructionFiles: ['**/AGENTS.override.md', '**/AGENTS.md'],
  },
  profile_c: {
    label: 'GitHub Copilot family',
    instructionFiles: [
      '.github/copilot-instructions.md',
      '.github/instructions/**/*.instructions.md',
      '**/AGENTS.md',
      'CLAUDE.md',
      'GEMINI.md',
    ],
  },
  profile_d: {
    label: 'Cursor / Gemini / Windsurf / Cline / Aider / Zed family',
    instructionFiles: [
      '.cursorrules',
      '.cursor/rules/**/*.mdc',
      '.cursor/rules/**/*.md',
      '**/GEMINI.md',
      '.windsurfrules',
      '.windsurf/rules/**/*.md',
      '.clinerules',
      '.clinerules/**/*.md',
      '.rules',
      'CONVENTIONS.md',
      'AGENT.md',
      '**/AGENTS.md',
    ],
  },
};

const CONCRETE_PROFILES = Object.keys(CLIENT_PROFILES) as ConcreteProfile[];
const ALL_SECTIONS: readonly OverviewSection[] = ['instructions', 'languages', 'test_commands', 'skills'];

// ---------------------------------------------------------------------------------------------
// Limits
// ---------------------------------------------------------------------------------------------

export const OVERVIEW_LIMITS = {
  minMaxBytes: 4096,
  maxMaxBytes: 131072,
  defaultMaxFiles: 200_000,
  defaultDeadlineMs: 5000,
  /** Instruction files reported at most; more makes the result partial. */
  maxInstructionFiles: 500,
  /** Skills reported at most; more makes the result partial. */
  maxSkills: 500,
  /** Bytes read from a config or marker file (package.json, Makefile, pyproject.toml, ...). */
  configReadBytes: 512 * 1024,
  /** Bytes read from a SKILL.md to find its front matter. */
  skillReadBytes: 64 * 1024,
  /** Bytes read from the root .gitignore, and the most rules used from it. */
  gitignoreReadBytes: 256 * 1024,
  gitignoreMaxRules: 2000,
  /** Depth and entry caps of the small walks under fixed directories (.cursor/rules, skills/...). */
  subtreeMaxDepth: 8,
  subtreeMaxEntries: 20_000,
  /**
   * Directories whose st_size is at most this are read with one readdir; larger ones are streamed
   * with opendir (on ext4 1 MiB of directory is some tens of thousands of entries).
   */
  readWholeDirBytes: 1024 * 1024,
  /** Description length kept from SKILL.md front matter. */
  skillDescriptionChars: 1024,
} as const;

/** Directories never walked, at any depth. */
export const IGNORED_DIRS: ReadonlySet<string> = new Set([
  '.git', '.hg', '.svn', 'node_modules', 'bower_components', 'vendor', 'dist', 'build', 'target', 'out',
  '.venv', 'venv', '__pycache__', '.tox', '.nox', '.mypy_cache', '.pytest_cache', '.ruff_cache',
  '.gradle', '.next', '.nuxt', '.svelte-kit', '.turbo', '.cache', '.parcel-cache', 'coverage',
  '.terraform', '.direnv', '.yarn', '.pnpm-store', 'Pods', 'DerivedData',
]);

// ---------------------------------------------------------------------------------------------
// Languages
// ---------------------------------------------------------------------------------------------

/** Extension (lower case, without the dot) to language. Docs, config and data formats are absent. */
export const LANGUAGE_BY_EXTENSION: Readonly<Record<string, string>> = {
  ts: 'TypeScript', tsx: 'TypeScript', mts: 'TypeScript', cts: 'TypeScript',
  js: 'JavaScript', jsx: 'JavaScript', mjs: 'JavaScript', cjs: 'JavaScript',
  py: 'Python', pyi: 'Python', pyw: 'Python', pyx: 'Cython',
  ipynb: 'Jupyter Notebook',
  go: 'Go',
  rs: 'Rust',
  java: 'Java',
  kt: 'Kotlin', kts: 'Kotlin',
  scala: 'Scala', sc: 'Scala',
  groovy: 'Groovy',
  clj: 'Clojure', cljs: 'Clojure', cljc: 'Clojure',
  c: 'C',
  // .h is decided after the walk (C or C++, see HEADER_EXT).
  cc: 'C++', cpp: 'C++', cxx: 'C++', 'c++': 'C++', hpp: 'C++', hh: 'C++', hxx: 'C++', 'h++': 'C++', ipp: 'C++', tpp: 'C++',
  cu: 'CUDA', cuh: 'CUDA',
  m: 'Objective-C', mm: 'Objective-C++',
  cs: 'C#', csx: 'C#',
  fs: 'F#', fsx: 'F#', fsi: 'F#',
  vb: 'Visual Basic',
  rb: 'Ruby', rake: 'Ruby', gemspec: 'Ruby',
  php: 'PHP',
  swift: 'Swift',
  dart: 'Dart',
  lua: 'Lua',
  pl: 'Perl', pm: 'Perl',
  r: 'R',
  jl: 'Julia',
  ex: 'Elixir', exs: 'Elixir',
  erl: 'Erlang', hrl: 'Erlang',
  gleam: 'Gleam',
  hs: 'Haskell', lhs: 'Haskell',
  ml: 'OCaml', mli: 'OCaml',
  elm: 'Elm',
  zig: 'Zig',
  nim: 'Nim',
  cr: 'Crystal',
  sol: 'Solidity',
  f90: 'Fortran', f95: 'Fortran', f03: 'Fortran', f08: 'Fortran',
  asm: 'Assembly',
  sql: 'SQL',
  tf: 'HCL', hcl: 'HCL',
  sh: 'Shell', bash: 'Shell', zsh: 'Shell', ksh: 'Shell', fish: 'Shell',
  ps1: 'PowerShell', psm1: 'PowerShell',
  bat: 'Batchfile', cmd: 'Batchfile',
  html: 'HTML', htm: 'HTML',
  css: 'CSS', scss: 'SCSS', sass: 'Sass', less: 'Less',
  vue: 'Vue', svelte: 'Svelte', astro: 'Astro',
};
/** C header: counted as C++ when the repository has more C++ than C source files, else as C. */
const HEADER_EXT = 'h';

// ---------------------------------------------------------------------------------------------
// Entry point
// ---------------------------------------------------------------------------------------------

interface Ctx {
  /** Real (symlink-free) root. */
  root: string;
  /** root + separator, for containment checks. */
  rootPrefix: string;
  deadline: number;
  partial: boolean;
}

export async function analyseRepository(opts: OverviewOptions): Promise<RepositoryOverview> {
  const started = Date.now();
  const options = validate(opts);
  const include = new Set(options.include);

  let realRoot: string;
  try {
    realRoot = await realpath(options.root);
  } catch {
    throw new DaemonError('NOT_FOUND', `repository root ${options.root} does not exist`);
  }
  const rootStat = await stat(realRoot);
  if (!rootStat.isDirectory()) throw new DaemonError('FAILED_PRECONDITION', `repository root ${options.root} is not a directory`);

  const ctx: Ctx = {
    root: realRoot,
    rootPrefix: realRoot.endsWith(path.sep) ? realRoot : realRoot + path.sep,
    deadline: started + options.deadlineMs,
    partial: false,
  };

  const wantInstructions = include.has('instructions');
  const selected = options.clientProfile === 'all' ? CONCRETE_PROFILES : [options.clientProfile];
  const plan = wantInstructions ? planPatterns(selected) : null;
  const candidates = new Set<string>();

  let filesScanned = 0;
  let languages: LanguageShare[] | undefined;
  if (include.has('languages') || (plan && (plan.nestedNames.size > 0 || plan.general.length > 0))) {
    const rules = parseGitignore((await readText(ctx, '.gitignore', OVERVIEW_LIMITS.gitignoreReadBytes)) ?? '');
    const walk = await mainWalk(ctx, {
      maxFiles: options.maxFiles,
      ignore: rules,
      countLanguages: include.has('languages'),
      onCandidate: plan ? (rel, name) => {
        if (plan.nestedNames.has(name) || plan.general.some((re) => re.test(rel))) candidates.add(rel);
      } : undefined,
    });
    filesScanned = walk.filesScanned;
    if (include.has('languages')) languages = summariseLanguages(walk.counts, walk.headers);
  }

  const result: RepositoryOverview = { partial: false, filesScanned };
  if (languages) result.languages = languages;
  if (include.has('test_commands')) result.testCommands = await detectTestCommands(ctx);
  if (plan) result.instructions = await collectInstructions(ctx, plan, candidates, selected, options);
  if (include.has('skills')) result.skills = await discoverSkills(ctx);
  result.partial = ctx.partial;
  return result;
}

interface ValidOptions {
  root: string;
  clientProfile: ClientProfile;
  include: OverviewSection[];
  contentMode: 'none' | 'excerpt';
  maxBytes: number;
  maxFiles: number;
  deadlineMs: number;
}

function validate(opts: OverviewOptions): ValidOptions {
  const bad = (message: string): never => {
    throw new DaemonError('INVALID_ARGUMENT', message);
  };
  if (!opts || typeof opts !== 'object') bad('options must be an object');
  if (typeof opts.root !== 'string' || !path.isAbsolute(opts.root)) bad('root must be an absolute path');
  if (opts.clientProfile !== 'all' && !CONCRETE_PROFILES.includes(opts.clientProfile as ConcreteProfile)) {
    bad(`clientProfile must be one of all, ${CONCRETE_PROFILES.join(', ')}`);
  }
  if (!Array.isArray(opts.include) || opts.include.some((s) => !ALL_SECTIONS.includes(s))) {
    bad(`include must be an array of ${ALL_SECTIONS.join(', ')}`);
  }
  if (opts.contentMode !== 'none' && opts.contentMode !== 'excerpt') bad('contentMode must be none or excerpt');
  const intIn = (v: unknown, min: number, max: number): boolean => Number.isInteger(v) && (v as number) >= min && (v as number) <= max;
  if (!intIn(opts.maxBytes, OVERVIEW_LIMITS.minMaxBytes, OVERVIEW_LIMITS.maxMaxBytes)) {
    bad(`maxBytes must be an integer from ${OVERVIEW_LIMITS.minMaxBytes} to ${OVERVIEW_LIMITS.maxMaxBytes}`);
  }
  if (opts.maxFiles !== undefined && !intIn(opts.maxFiles, 1, 100_000_000)) bad('maxFiles must be a positive integer');
  if (opts.deadlineMs !== undefined && !intIn(opts.deadlineMs, 0, 600_000)) bad('deadlineMs must be an integer from 0 to 600000');
  return {
    root: opts.root,
    clientProfile: opts.clientProfile,
    include: [...new Set(opts.include)],
    contentMode: opts.contentMode,
    maxBytes: opts.maxBytes,
    maxFiles: opts.maxFiles ?? OVERVIEW_LIMITS.defaultMaxFiles,
    deadlineMs: opts.deadlineMs ?? OVERVIEW_LIMITS.defaultDeadlineMs,
  };
}

// ---------------------------------------------------------------------------------------------
// Glob patterns and .gitignore
// ---------------------------------------------------------------------------------------------

const GLOB_CHARS = /[*?[]/;

/** Compiles a '/'-separated glob (`*`, `?`, `[...]`, `**`) to an anchored RegExp over a relative path. */
export function globToRegExp(glob: string): RegExp {
  let re = '^';
  let i = 0;
  while (i < glob.length) {
    const c = glob[i]!;
    if (c === '*') {
      if (glob[i + 1] === '*') {
        const atSegmentStart = i === 0 || glob[i - 1] === '/';
        const next = glob[i + 2];
        if (atSegmentStart && next === '/') {
          re += '(?:[^/]*/)*';
          i += 3;
          continue;
        }
        if (atSegmentStart && next === undefined) {
          re += '.*';
          i += 2;
          continue;
        }
        re += '[^/]*';
        i += 2;
        continue;
      }
      re += '[^/]*';
      i += 1;
      continue;
    }
    if (c === '?') {
      re += '[^/]';
      i += 1;
      continue;
    }
    if (c === '[') {
      const close = glob.indexOf(']', i + 2);
      if (close > 0 && !glob.slice(i + 1, close).includes('/')) {
        let body = glob.slice(i + 1, close);
        let negate = false;
        if (body.startsWith('!') || body.startsWith('^')) {
          negate = true;
          body = body.slice(1);
        }
        body = body.replace(/[\\\]^]/g, (m) => '\\' + m);
        re += `[${negate ? '^' : ''}${body}]`;
        i = close + 1;
        continue;
      }
    }
    if (c === '\\' && i + 1 < glob.length) {
      re += escapeRegExp(glob[i + 1]!);
      i += 2;
      continue;
    }
    re += escapeRegExp(c);
    i += 1;
  }
  return new RegExp(re + '$');
}

function escapeRegExp(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&');
}

interface IgnoreRule {
  re: RegExp;
  negate: boolean;
  dirOnly: boolean;
}

/**
 * The root .gitignore's patterns, best effort: comments, blank lines, `!` negation, a trailing `/`
 * (directories only), a leading or inner `/` (anchored to the root), `*`, `?`, `[...]` and `**`.
 * The last matching rule wins; an ignored directory is never entered, so nothing under it can be
 * re-included (as in git). Nested .gitignore files and global excludes are not read.
 */
export function parseGitignore(text: string): IgnoreRule[] {
  const rules: IgnoreRule[] = [];
  for (const raw of text.split('\n')) {
    if (rules.length >= OVERVIEW_LIMITS.gitignoreMaxRules) break;
    let line = raw.replace(/\r$/, '');
    if (line.length > 4096) continue;
    if (!line.endsWith('\\ ')) line = line.replace(/\s+$/, '');
    if (line === '' || line.startsWith('#')) continue;
    let negate = false;
    if (line.startsWith('!')) {
      negate = true;
      line = line.slice(1);
    } else if (line.startsWith('\\!') || line.startsWith('\\#')) {
      line = line.slice(1);
    }
    let dirOnly = false;
    if (line.endsWith('/')) {
      dirOnly = true;
      line = line.replace(/\/+$/, '');
    }
    if (line === '') continue;
    const anchored = line.includes('/');
    if (line.startsWith('/')) line = line.replace(/^\/+/, '');
    if (line === '') continue;
    try {
      rules.push({ re: globToRegExp(anchored ? line : `**/${line}`), negate, dirOnly });
    } catch {
      // A pattern that does not compile is ignored.
    }
  }
  return rules;
}

function isIgnored(rules: IgnoreRule[], rel: string, isDir: boolean): boolean {
  let ignored = false;
  for (const r of rules) {
    if (r.dirOnly && !isDir) continue;
    if (r.negate ? ignored : !ignored) {
      if (r.re.test(rel)) ignored = !r.negate;
    }
  }
  return ignored;
}

// ---------------------------------------------------------------------------------------------
// Safe file access
// ---------------------------------------------------------------------------------------------

const OPEN_FLAGS = FS.O_RDONLY | (FS.O_NOFOLLOW ?? 0) | (FS.O_NONBLOCK ?? 0);

function inside(ctx: Ctx, real: string): boolean {
  return real === ctx.root || real.startsWith(ctx.rootPrefix);
}

function absolute(ctx: Ctx, rel: string): string {
  return rel === '' ? ctx.root : path.join(ctx.root, ...rel.split('/'));
}

/** realpath of rel when it exists and stays under the root, else null. */
async function resolveInside(ctx: Ctx, rel: string): Promise<string | null> {
  try {
    const real = await realpath(absolute(ctx, rel));
    return inside(ctx, real) ? real : null;
  } catch {
    return null;
  }
}

/** Opens rel read-only when it resolves under the root to a regular file; null otherwise. */
async function openInside(ctx: Ctx, rel: string): Promise<{ handle: FileHandle; size: number } | null> {
  const real = await resolveInside(ctx, rel);
  if (!real) return null;
  let handle: FileHandle;
  try {
    handle = await open(real, OPEN_FLAGS);
  } catch {
    return null;
  }
  try {
    const st = await handle.stat();
    if (!st.isFile() || !(await openedInside(ctx, handle))) {
      await handle.close();
      return null;
    }
    return { handle, size: st.size };
  } catch {
    await handle.close().catch(() => undefined);
    return null;
  }
}

/**
 * Where the descriptor really points, from /proc/self/fd: closes the race in which a directory on
 * the path is swapped for a symlink between realpath and open. True when /proc is not available.
 */
async function openedInside(ctx: Ctx, handle: FileHandle): Promise<boolean> {
  let target: string;
  try {
    target = await readlink(`/proc/self/fd/${handle.fd}`);
  } catch {
    return true;
  }
  return inside(ctx, target);
}

/** Reads up to cap bytes from the start of a file. */
async function readHead(handle: FileHandle, cap: number): Promise<Buffer> {
  const buf = Buffer.alloc(cap);
  let filled = 0;
  while (filled < cap) {
    const { bytesRead } = await handle.read(buf, filled, cap - filled, filled);
    if (bytesRead === 0) break;
    filled += bytesRead;
  }
  return buf.subarray(0, filled);
}

/** First cap bytes of a regular file under the root as text, or null. */
async function readText(ctx: Ctx, rel: string, cap = OVERVIEW_LIMITS.configReadBytes): Promise<string | null> {
  const f = await openInside(ctx, rel);
  if (!f) return null;
  try {
    return (await readHead(f.handle, Math.min(cap, Math.max(f.size, 0) || cap))).toString('utf8');
  } catch {
    return null;
  } finally {
    await f.handle.close().catch(() => undefined);
  }
}

async function isFileInside(ctx: Ctx, rel: string): Promise<boolean> {
  const real = await resolveInside(ctx, rel);
  if (!real) return false;
  try {
    return (await stat(real)).isFile();
  } catch {
    return false;
  }
}

async function isDirInside(ctx: Ctx, rel: string): Promise<boolean> {
  const real = await resolveInside(ctx, rel);
  if (!real) return false;
  try {
    return (await stat(real)).isDirectory();
  } catch {
    return false;
  }
}

/** Length of the longest prefix of buf that does not end inside a UTF-8 sequence. */
function utf8Boundary(buf: Buffer, length: number): number {
  if (length <= 0) return 0;
  let i = length - 1;
  const stop = Math.max(0, length - 4);
  while (i > stop && (buf[i]! & 0xc0) === 0x80) i--;
  const lead = buf[i]!;
  const need = lead < 0x80 ? 1 : (lead & 0xe0) === 0xc0 ? 2 : (lead & 0xf0) === 0xe0 ? 3 : (lead & 0xf8) === 0xf0 ? 4 : 1;
  return i + need > length ? i : length;
}

/** The longest prefix of s whose UTF-8 encoding fits in max bytes, cut between characters. */
function truncateUtf8(s: string, max: number): string {
  const buf = Buffer.from(s, 'utf8');
  if (buf.length <= max) return s;
  return buf.subarray(0, utf8Boundary(buf, max)).toString('utf8');
}

const decoder = new TextDecoder('utf-8', { fatal: false });

// ---------------------------------------------------------------------------------------------
// Walking
// ---------------------------------------------------------------------------------------------

interface WalkResult {
  filesScanned: number;
  counts: Map<string, number>;
  headers: number;
}

/**
 * Breadth-first walk of the root: counts files and languages, reports instruction candidates.
 *
 * A directory is read with one readdir when its st_size says it is of ordinary size (several times
 * faster than reading entry by entry), and streamed with opendir otherwise, so a huge directory
 * never has to fit in memory at once. Symlinks are never followed; special files are skipped.
 */
async function mainWalk(
  ctx: Ctx,
  o: {
    maxFiles: number;
    ignore: IgnoreRule[];
    countLanguages: boolean;
    onCandidate?: (rel: string, name: string) => void;
  },
): Promise<WalkResult> {
  const counts = new Map<string, number>();
  let headers = 0;
  let filesScanned = 0;
  let dirsQueued = 1;
  const queue: string[] = [''];
  let head = 0;
  let tick = 0;
  let stop = false;
  const hasRules = o.ignore.length > 0;

  /** Handles one entry of dirRel; false stops the walk. */
  const visit = (ent: Dirent, dirRel: string): boolean => {
    if ((++tick & 255) === 0 && Date.now() >= ctx.deadline) {
      ctx.partial = true;
      return false;
    }
    const name = ent.name;
    const rel = dirRel === '' ? name : `${dirRel}/${name}`;
    if (ent.isDirectory()) {
      if (IGNORED_DIRS.has(name)) return true;
      if (hasRules && isIgnored(o.ignore, rel, true)) return true;
      if (dirsQueued >= o.maxFiles) {
        ctx.partial = true;
        return false;
      }
      dirsQueued++;
      queue.push(rel);
    } else if (ent.isFile()) {
      if (hasRules && isIgnored(o.ignore, rel, false)) return true;
      if (filesScanned >= o.maxFiles) {
        ctx.partial = true;
        return false;
      }
      filesScanned++;
      if (o.countLanguages) {
        const dot = name.lastIndexOf('.');
        if (dot > 0 && dot < name.length - 1) {
          const ext = name.slice(dot + 1).toLowerCase();
          if (ext === HEADER_EXT) headers++;
          else {
            const lang = LANGUAGE_BY_EXTENSION[ext];
            if (lang) counts.set(lang, (counts.get(lang) ?? 0) + 1);
          }
        }
      }
      o.onCandidate?.(rel, name);
    } else if (ent.isSymbolicLink()) {
      // Never walked or counted; an instruction file may be a link, checked when it is read.
      if (hasRules && isIgnored(o.ignore, rel, false)) return true;
      o.onCandidate?.(rel, name);
    }
    // Devices, fifos and sockets are skipped.
    return true;
  };

  while (head < queue.length && !stop) {
    if (Date.now() >= ctx.deadline) {
      ctx.partial = true;
      break;
    }
    const dirRel = queue[head]!;
    queue[head++] = ''; // let the string go
    const abs = absolute(ctx, dirRel);
    let size: number;
    try {
      const st = await lstat(abs);
      if (!st.isDirectory()) continue; // replaced meanwhile
      size = st.size;
    } catch {
      continue; // vanished
    }
    if (size <= OVERVIEW_LIMITS.readWholeDirBytes) {
      let ents: Dirent[];
      try {
        ents = await readdir(abs, { withFileTypes: true });
      } catch {
        continue; // unreadable or vanished
      }
      for (const ent of ents) {
        if (!visit(ent, dirRel)) {
          stop = true;
          break;
        }
      }
      continue;
    }
    for await (const ent of dirEntries(abs, 256)) {
      if (!visit(ent, dirRel)) {
        stop = true;
        break;
      }
    }
  }
  return { filesScanned, counts, headers };
}

function summariseLanguages(counts: Map<string, number>, headers: number): LanguageShare[] {
  if (headers > 0) {
    const c = counts.get('C') ?? 0;
    const cpp = counts.get('C++') ?? 0;
    const lang = cpp > c ? 'C++' : 'C';
    counts.set(lang, (counts.get(lang) ?? 0) + headers);
  }
  let total = 0;
  for (const n of counts.values()) total += n;
  return [...counts.entries()]
    .map(([language, files]) => ({ language, files, share: Math.round((files / total) * 1000) / 1000 }))
    .sort((a, b) => b.files - a.files || (a.language < b.language ? -1 : a.language > b.language ? 1 : 0));
}

interface SubtreeEntry {
  rel: string;
  kind: 'file' | 'link' | 'dir';
}

/**
 * Small bounded walk under a fixed directory (e.g. .cursor/rules). The directory itself may be a
 * symlink that resolves under the root; nothing below it is followed. Reports logical paths.
 */
async function walkSubtree(ctx: Ctx, baseRel: string, visit: (e: SubtreeEntry) => void): Promise<void> {
  if (!(await isDirInside(ctx, baseRel))) return;
  const baseReal = (await resolveInside(ctx, baseRel))!;
  const queue: Array<{ rel: string; real: string; depth: number }> = [{ rel: baseRel, real: baseReal, depth: 0 }];
  let entries = 0;
  for (let head = 0; head < queue.length; head++) {
    if (Date.now() >= ctx.deadline) {
      ctx.partial = true;
      return;
    }
    const { rel, real, depth } = queue[head]!;
    for await (const ent of dirEntries(real, 64)) {
      if (++entries > OVERVIEW_LIMITS.subtreeMaxEntries) {
        ctx.partial = true;
        return;
      }
      const childRel = `${rel}/${ent.name}`;
      if (ent.isDirectory()) {
        if (IGNORED_DIRS.has(ent.name)) continue;
        if (depth + 1 > OVERVIEW_LIMITS.subtreeMaxDepth) {
          ctx.partial = true;
          continue;
        }
        visit({ rel: childRel, kind: 'dir' });
        queue.push({ rel: childRel, real: path.join(real, ent.name), depth: depth + 1 });
      } else if (ent.isFile()) visit({ rel: childRel, kind: 'file' });
      else if (ent.isSymbolicLink()) visit({ rel: childRel, kind: 'link' });
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Instruction files
// ---------------------------------------------------------------------------------------------

interface PatternPlan {
  /** Exact paths to probe (including the root copy of every nested name). */
  fixed: Set<string>;
  /** Basenames honoured at any depth ("**\/NAME"), found by the main walk. */
  nestedNames: Set<string>;
  /** Patterns with a fixed directory prefix, found by walking under the prefix. */
  prefixed: Array<{ prefix: string; re: RegExp }>;
  /** Any other pattern, tested against every walked path. */
  general: RegExp[];
  /** Compiled patterns of every concrete profile, to fill in `profiles`. */
  byProfile: Array<{ profile: ConcreteProfile; patterns: Array<{ re: RegExp; repoWide: boolean }> }>;
}

function planPatterns(selected: readonly ConcreteProfile[]): PatternPlan {
  const plan: PatternPlan = { fixed: new Set(), nestedNames: new Set(), prefixed: [], general: [], byProfile: [] };
  const seen = new Set<string>();
  for (const profile of CONCRETE_PROFILES) {
    const patterns = CLIENT_PROFILES[profile].instructionFiles.map((p) => ({
      re: globToRegExp(p),
      // "**/NAME" patterns are directory-scoped once nested; everything else applies repository-wide.
      repoWide: !p.startsWith('**/'),
    }));
    plan.byProfile.push({ profile, patterns });
    if (!selected.includes(profile)) continue;
    for (const p of CLIENT_PROFILES[profile].instructionFiles) {
      if (seen.has(p)) continue;
      seen.add(p);
      const segs = p.split('/');
      const firstGlob = segs.findIndex((s) => GLOB_CHARS.test(s));
      if (firstGlob < 0) plan.fixed.add(p);
      else if (firstGlob === 0 && segs[0] === '**' && segs.length === 2 && !GLOB_CHARS.test(segs[1]!)) {
        plan.nestedNames.add(segs[1]!);
        plan.fixed.add(segs[1]!);
      } else if (firstGlob > 0) plan.prefixed.push({ prefix: segs.slice(0, firstGlob).join('/'), re: globToRegExp(p) });
      else plan.general.push(globToRegExp(p));
    }
  }
  return plan;
}

async function collectInstructions(
  ctx: Ctx,
  plan: PatternPlan,
  candidates: Set<string>,
  selected: readonly ConcreteProfile[],
  options: ValidOptions,
): Promise<InstructionFile[]> {
  for (const rel of plan.fixed) {
    try {
      const st = await lstat(absolute(ctx, rel));
      if (st.isFile() || st.isSymbolicLink()) candidates.add(rel);
    } catch {
      // absent
    }
  }
  const byPrefix = new Map<string, RegExp[]>();
  for (const { prefix, re } of plan.prefixed) byPrefix.set(prefix, [...(byPrefix.get(prefix) ?? []), re]);
  for (const [prefix, res] of byPrefix) {
    await walkSubtree(ctx, prefix, (e) => {
      if (e.kind !== 'dir' && res.some((re) => re.test(e.rel))) candidates.add(e.rel);
    });
  }

  const entries: Array<{ rel: string; profiles: ConcreteProfile[]; repoWide: boolean }> = [];
  for (const rel of candidates) {
    const profiles: ConcreteProfile[] = [];
    let repoWide = !rel.includes('/');
    for (const { profile, patterns } of plan.byProfile) {
      let matched = false;
      for (const p of patterns) {
        if (p.re.test(rel)) {
          matched = true;
          if (p.repoWide) repoWide = true;
        }
      }
      if (matched) profiles.push(profile);
    }
    if (profiles.some((p) => selected.includes(p))) entries.push({ rel, profiles, repoWide });
  }
  // Root (repository-wide) files first, then directory-scoped nested files; each group by path.
  entries.sort((a, b) => Number(b.repoWide) - Number(a.repoWide) || (a.rel < b.rel ? -1 : a.rel > b.rel ? 1 : 0));

  const out: InstructionFile[] = [];
  let budget = options.contentMode === 'excerpt' ? options.maxBytes : 0;
  for (const e of entries) {
    if (out.length >= OVERVIEW_LIMITS.maxInstructionFiles) {
      ctx.partial = true;
      break;
    }
    const f = await openInside(ctx, e.rel);
    if (!f) continue; // a link out of the root, a special file, or gone
    try {
      const want = options.contentMode === 'excerpt' ? budget : 0;
      const { sha256, bytes, head } = await digest(f.handle, want);
      const item: InstructionFile = { path: e.rel, profiles: e.profiles, bytes, sha256 };
      if (options.contentMode === 'excerpt') {
        // Cut on a character boundary when the file goes on past the budget; then make sure the
        // decoded text (invalid bytes become U+FFFD, three bytes each) still fits the budget.
        const cut = bytes > head.length ? utf8Boundary(head, head.length) : head.length;
        const decoded = decoder.decode(head.subarray(0, cut));
        const excerpt = truncateUtf8(decoded, budget);
        budget -= Buffer.byteLength(excerpt, 'utf8');
        item.excerpt = excerpt;
        item.truncated = cut < bytes || excerpt.length < decoded.length;
      }
      out.push(item);
    } catch {
      // Unreadable midway: leave it out.
    } finally {
      await f.handle.close().catch(() => undefined);
    }
  }
  return out;
}

/** Streams the whole file through SHA-256, keeping only the first `keep` bytes. */
async function digest(handle: FileHandle, keep: number): Promise<{ sha256: string; bytes: number; head: Buffer }> {
  const hash = createHash('sha256');
  const chunk = Buffer.allocUnsafe(64 * 1024);
  const head = Buffer.alloc(keep);
  let headLen = 0;
  let bytes = 0;
  for (;;) {
    const { bytesRead } = await handle.read(chunk, 0, chunk.length, bytes);
    if (bytesRead === 0) break;
    const data = chunk.subarray(0, bytesRead);
    hash.update(data);
    if (headLen < keep) headLen += data.copy(head, headLen, 0, Math.min(bytesRead, keep - headLen));
    bytes += bytesRead;
  }
  return { sha256: hash.digest('hex'), bytes, head: head.subarray(0, headLen) };
}

// ---------------------------------------------------------------------------------------------
// Test commands
// ---------------------------------------------------------------------------------------------

const NPM_PLACEHOLDER = /no test specified/i;
const PACKAGE_MANAGERS = ['npm', 'pnpm', 'yarn', 'bun'] as const;
type PackageManager = (typeof PACKAGE_MANAGERS)[number];
const LOCKFILES: Array<[string, PackageManager]> = [
  ['pnpm-lock.yaml', 'pnpm'],
  ['yarn.lock', 'yarn'],
  ['bun.lock', 'bun'],
  ['bun.lockb', 'bun'],
  ['package-lock.json', 'npm'],
  ['npm-shrinkwrap.json', 'npm'],
];
const MAKE_TARGET_LIMIT = 10;

function scriptCommand(pm: PackageManager, script: string): string {
  if (script === 'test' && pm !== 'bun') return `${pm} test`; // `bun test` is bun's own runner, not the script
  return `${pm} run ${script}`;
}

function parseJson(text: string | null): unknown {
  if (text === null) return undefined;
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/** JSON with comments and trailing commas (deno.jsonc), best effort. */
function parseJsonc(text: string | null): unknown {
  if (text === null) return undefined;
  let out = '';
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i]!;
    if (inString) {
      out += c;
      if (c === '\\') out += text[++i] ?? '';
      else if (c === '"') inString = false;
    } else if (c === '"') {
      inString = true;
      out += c;
    } else if (c === '/' && text[i + 1] === '/') {
      while (i < text.length && text[i] !== '\n') i++;
      out += '\n';
    } else if (c === '/' && text[i + 1] === '*') {
      const end = text.indexOf('*/', i + 2);
      i = end < 0 ? text.length : end + 1;
    } else out += c;
  }
  return parseJson(out.replace(/,(\s*[}\]])/g, '$1'));
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** Target names defined in a Makefile, in order of appearance. */
export function makeTargets(text: string): string[] {
  const targets: string[] = [];
  for (const line of text.split(/\r?\n/)) {
    if (line === '' || /^[\s#]/.test(line)) continue;
    const m = /^([A-Za-z0-9_.\-/ ]+?)\s*(::?)(.*)$/.exec(line);
    if (!m) continue;
    if (m[3]!.startsWith('=') || (m[2] === ':' && m[3]!.startsWith(':='))) continue; // := ::= assignments
    for (const t of m[1]!.split(/\s+/)) if (t && !t.startsWith('.') && !targets.includes(t)) targets.push(t);
  }
  return targets;
}

/** Recipe names in a justfile. */
export function justRecipes(text: string): string[] {
  const recipes: string[] = [];
  for (const line of text.split(/\r?\n/)) {
    if (/^(set|alias|export|import|mod)\s/.test(line)) continue;
    const m = /^@?([A-Za-z_][A-Za-z0-9_-]*)(?:\s+[^:=]*)?:(?!=)/.exec(line);
    if (m && !recipes.includes(m[1]!)) recipes.push(m[1]!);
  }
  return recipes;
}

/** Task names under the top-level `tasks:` mapping of a Taskfile. */
export function taskfileTasks(text: string): string[] {
  const tasks: string[] = [];
  const lines = text.split(/\r?\n/);
  const start = lines.findIndex((l) => /^tasks:\s*(?:#.*)?$/.test(l));
  if (start < 0) return tasks;
  let indent = -1;
  for (const line of lines.slice(start + 1)) {
    if (line.trim() === '' || /^\s*#/.test(line)) continue;
    const lead = line.length - line.trimStart().length;
    if (lead === 0) break; // next top-level key
    if (indent < 0) indent = lead;
    if (lead !== indent) continue;
    const m = /^\s*(['"]?)([A-Za-z0-9_:.-]+)\1\s*:/.exec(line);
    if (m && !tasks.includes(m[2]!)) tasks.push(m[2]!);
  }
  return tasks;
}

function isTestTarget(name: string): boolean {
  return name === 'test' || name === 'tests' || name === 'check' || /^test[-_:]/.test(name);
}

async function detectTestCommands(ctx: Ctx): Promise<TestCommand[]> {
  const out: TestCommand[] = [];
  const add = (command: string, source: string, kind: string) => {
    if (!out.some((c) => c.command === command)) out.push({ command, source, kind });
  };
  const fileCache = new Map<string, boolean>();
  const has = async (rel: string) => {
    let v = fileCache.get(rel);
    if (v === undefined) fileCache.set(rel, (v = await isFileInside(ctx, rel)));
    return v;
  };
  const firstOf = async (...rels: string[]) => {
    for (const r of rels) if (await has(r)) return r;
    return null;
  };

  // package.json scripts
  const pkg = parseJson(await readText(ctx, 'package.json'));
  if (isRecord(pkg) && isRecord(pkg.scripts)) {
    let pm: PackageManager | null = null;
    if (typeof pkg.packageManager === 'string') {
      const name = pkg.packageManager.split('@')[0] as PackageManager;
      if (PACKAGE_MANAGERS.includes(name)) pm = name;
    }
    if (!pm) for (const [lock, manager] of LOCKFILES) if (await has(lock)) { pm = manager; break; }
    pm ??= 'npm';
    for (const [script, body] of Object.entries(pkg.scripts)) {
      if (typeof body !== 'string' || (script !== 'test' && !script.startsWith('test:'))) continue;
      if (script === 'test' && NPM_PLACEHOLDER.test(body)) continue;
      add(scriptCommand(pm, script), `package.json scripts.${script}`, pm);
    }
  }

  // deno
  const denoFile = await firstOf('deno.json', 'deno.jsonc');
  if (denoFile) {
    const deno = parseJsonc(await readText(ctx, denoFile));
    if (isRecord(deno) && isRecord(deno.tasks) && deno.tasks.test !== undefined) add('deno task test', `${denoFile} tasks.test`, 'deno');
    else add('deno test', denoFile, 'deno');
  }

  // Makefile
  const makefile = await firstOf('GNUmakefile', 'makefile', 'Makefile');
  if (makefile) {
    const text = await readText(ctx, makefile);
    const targets = text ? makeTargets(text).filter(isTestTarget).slice(0, MAKE_TARGET_LIMIT) : [];
    for (const t of targets) add(`make ${t}`, `${makefile} target ${t}`, 'make');
  }

  // justfile
  const justfile = await firstOf('justfile', 'Justfile', '.justfile');
  if (justfile) {
    const text = await readText(ctx, justfile);
    for (const r of (text ? justRecipes(text) : []).filter(isTestTarget).slice(0, MAKE_TARGET_LIMIT)) {
      add(`just ${r}`, `${justfile} recipe ${r}`, 'just');
    }
  }

  // Taskfile (go-task)
  const taskfile = await firstOf('Taskfile.yml', 'Taskfile.yaml', 'taskfile.yml', 'taskfile.yaml');
  if (taskfile) {
    for (const t of taskfileTasks((await readText(ctx, taskfile)) ?? '').filter(isTestTarget).slice(0, MAKE_TARGET_LIMIT)) {
      add(`task ${t}`, `${taskfile} tasks.${t}`, 'task');
    }
  }

  // Python
  const pyRunner = (await has('uv.lock')) ? 'uv run ' : (await has('poetry.lock')) ? 'poetry run ' : (await has('pdm.lock')) ? 'pdm run ' : (await has('Pipfile.lock')) ? 'pipenv run ' : '';
  const pyproject = (await readText(ctx, 'pyproject.toml')) ?? '';
  const toxIni = (await readText(ctx, 'tox.ini')) ?? '';
  let pytestSource: string | null = null;
  if (await has('pytest.ini')) pytestSource = 'pytest.ini';
  else if (/^\[tool\.pytest(?:\.ini_options)?\]/m.test(pyproject)) pytestSource = `pyproject.toml [${/^\[(tool\.pytest(?:\.ini_options)?)\]/m.exec(pyproject)![1]}]`;
  else if (/^\[pytest\]/m.test(toxIni)) pytestSource = 'tox.ini [pytest]';
  else if (/^\[tool:pytest\]/m.test((await readText(ctx, 'setup.cfg')) ?? '')) pytestSource = 'setup.cfg [tool:pytest]';
  else {
    const conftest = await firstOf('conftest.py', 'tests/conftest.py', 'test/conftest.py');
    if (conftest) pytestSource = conftest;
  }
  if (pytestSource) add(`${pyRunner}pytest`, pytestSource, 'pytest');
  if (/^\[(?:tox|testenv)[\]:]/m.test(toxIni)) add('tox', 'tox.ini', 'tox');
  else if (/^\[tool\.tox\]/m.test(pyproject)) add('tox', 'pyproject.toml [tool.tox]', 'tox');
  else if (await has('tox.toml')) add('tox', 'tox.toml', 'tox');
  if (await has('noxfile.py')) add('nox', 'noxfile.py', 'nox');

  // Rust, Go
  const cargo = await readText(ctx, 'Cargo.toml');
  if (cargo !== null) add(/^\[workspace\]/m.test(cargo) ? 'cargo test --workspace' : 'cargo test', 'Cargo.toml', 'cargo');
  if (await has('go.mod')) add('go test ./...', 'go.mod', 'go');

  // JVM
  if (await has('pom.xml')) add((await has('mvnw')) ? './mvnw test' : 'mvn test', 'pom.xml', 'maven');
  const gradle = await firstOf('build.gradle.kts', 'build.gradle', 'settings.gradle.kts', 'settings.gradle');
  if (gradle) add((await has('gradlew')) ? './gradlew test' : 'gradle test', gradle, 'gradle');

  // Ruby
  const gemfile = await has('Gemfile');
  const bundle = gemfile ? 'bundle exec ' : '';
  const gemText = gemfile ? ((await readText(ctx, 'Gemfile')) ?? '') : '';
  const specDir = await isDirInside(ctx, 'spec');
  if ((await has('.rspec')) || (gemfile && specDir) || /['"]rspec(?:-rails)?['"]/.test(gemText)) {
    add(`${bundle}rspec`, (await has('.rspec')) ? '.rspec' : specDir ? 'spec/' : 'Gemfile rspec', 'rspec');
  }
  const rakefile = await firstOf('Rakefile', 'rakefile', 'Rakefile.rb');
  if (rakefile) {
    const text = (await readText(ctx, rakefile)) ?? '';
    if (/Rails\.application/.test(text) && (await has('bin/rails'))) add('bin/rails test', `${rakefile} (Rails)`, 'rails');
    else if (/TestTask|task\s*\(?\s*:test\b|task\s*\(?\s*['"]test['"]/.test(text) || (await isDirInside(ctx, 'test'))) {
      add(`${bundle}rake test`, rakefile, 'rake');
    }
  }

  // PHP
  const composer = parseJson(await readText(ctx, 'composer.json'));
  if (isRecord(composer) && isRecord(composer.scripts) && composer.scripts.test !== undefined) add('composer test', 'composer.json scripts.test', 'composer');
  const phpunit = await firstOf('phpunit.xml', 'phpunit.xml.dist', 'phpunit.dist.xml');
  if (phpunit) add('vendor/bin/phpunit', phpunit, 'phpunit');

  // Elixir, Swift, .NET, CMake
  if (await has('mix.exs')) add('mix test', 'mix.exs', 'mix');
  if (await has('Package.swift')) add('swift test', 'Package.swift', 'swift');
  const dotnet = await rootFileMatching(ctx, /\.(?:sln|slnx|csproj|fsproj|vbproj)$/);
  if (dotnet) add('dotnet test', dotnet, 'dotnet');
  const cmake = await readText(ctx, 'CMakeLists.txt');
  if (cmake !== null && /\b(?:enable_testing|add_test)\s*\(/i.test(cmake)) add('ctest --test-dir build', 'CMakeLists.txt', 'ctest');

  return out;
}

/** First regular file (sorted by name) directly in the root whose name matches. */
async function rootFileMatching(ctx: Ctx, re: RegExp): Promise<string | null> {
  const names: string[] = [];
  let n = 0;
  for await (const ent of dirEntries(ctx.root, 128)) {
    if (++n > OVERVIEW_LIMITS.subtreeMaxEntries) break;
    if (ent.isFile() && re.test(ent.name)) names.push(ent.name);
  }
  names.sort();
  return names[0] ?? null;
}

// ---------------------------------------------------------------------------------------------
// Skills
// ---------------------------------------------------------------------------------------------

export const SKILL_ROOTS = ['.claude/skills', '.agents/skills', 'skills'] as const;
const SKILL_NAME = /^[A-Za-z0-9._:-]{1,120}$/;
const SKILL_MAX_DEPTH = 4;

/**
 * Directories holding a SKILL.md under the skill roots, up to four levels deep. A skill directory
 * is not searched for further skills. Symlinked directories are followed only when they resolve
 * under the root (skills are often linked from one root into another); each real directory once.
 */
async function discoverSkills(ctx: Ctx): Promise<RepositorySkill[]> {
  const skills: RepositorySkill[] = [];
  const seenReal = new Set<string>();
  for (const base of SKILL_ROOTS) {
    const baseReal = await resolveInside(ctx, base);
    if (!baseReal || !(await isDirInside(ctx, base))) continue;
    const queue: Array<{ rel: string; real: string; depth: number }> = [{ rel: base, real: baseReal, depth: 0 }];
    let entries = 0;
    for (let head = 0; head < queue.length; head++) {
      if (Date.now() >= ctx.deadline) {
        ctx.partial = true;
        return sortSkills(skills);
      }
      const { rel, real, depth } = queue[head]!;
      if (seenReal.has(real)) continue;
      seenReal.add(real);
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
      for await (const ent of dirEntries(real, 64)) {
        if (++entries > OVERVIEW_LIMITS.subtreeMaxEntries) {
          ctx.partial = true;
          break;
        }
        if (IGNORED_DIRS.has(ent.name)) continue;
        const childRel = `${rel}/${ent.name}`;
        if (ent.isDirectory()) queue.push({ rel: childRel, real: path.join(real, ent.name), depth: depth + 1 });
        else if (ent.isSymbolicLink()) {
          const target = await resolveInside(ctx, childRel);
          if (target && (await isDirInside(ctx, childRel))) queue.push({ rel: childRel, real: target, depth: depth + 1 });
        }
      }
    }
  }
  return sortSkills(skills);
}

function sortSkills(skills: RepositorySkill[]): RepositorySkill[] {
  const rootIndex = (p: string) => SKILL_ROOTS.findIndex((r) => p.startsWith(`${r}/`));
  return skills.sort((a, b) => rootIndex(a.path) - rootIndex(b.path) || (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
}

async function readSkill(ctx: Ctx, dirRel: string): Promise<RepositorySkill | null> {
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
