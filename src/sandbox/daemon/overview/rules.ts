/** The overview's rules: result types, client profiles, limits, the language table (docs/workspace-context.md). */

import type { Confinement } from '../files/confinement.js';

export type { ClientProfile, ConcreteProfile, OverviewSection, OverviewOptions, LanguageShare, TestCommand, InstructionFile, RepositorySkill, RepositoryOverview } from '../protocol.js';
import type { ClientProfile, ConcreteProfile, OverviewSection } from '../protocol.js';

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

export const CONCRETE_PROFILES = Object.keys(CLIENT_PROFILES) as ConcreteProfile[];
export const ALL_SECTIONS: readonly OverviewSection[] = ['instructions', 'languages', 'test_commands', 'skills'];

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
export const HEADER_EXT = 'h';

/** The state of one overview run. */
export interface Ctx {
  /** The root's confinement: every path is walked by descriptor from it (../files/confinement.ts). */
  c: Confinement;
  /** An open descriptor of the root, for the whole run. */
  rootFd: number;
  deadline: number;
  partial: boolean;
}

export interface ValidOptions {
  root: string;
  clientProfile: ClientProfile;
  include: OverviewSection[];
  contentMode: 'none' | 'excerpt';
  maxBytes: number;
  maxFiles: number;
  deadlineMs: number;
}
