/**
 * clangd's compilation database, as the daemon gives it: clangd never reads the repository's
 * compile_commands.json, compile_flags.txt or .clangd itself (it is started with
 * --enable-config=false and --compile-commands-dir pointing at a directory of the daemon's own).
 * The daemon reads the repository's database, drops every flag that loads code into the compiler
 * (-fplugin=, -fpass-plugin=, every -Xclang pair, -load, -plugin, -add-plugin, -plugin-arg-*) and
 * every entry for a file or directory outside the checkout, and writes the rest there. clangd runs
 * with no --query-driver, so it never executes the compiler an entry names.
 *
 * Imports node built-ins and sibling daemon files only.
 */
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import type { Confinement } from '../files/index.js';
import { DaemonError } from '../protocol.js';
import { readWorkspaceFile } from './manager.js';

/** A database larger than this is not read (the daemon's heap is small): clangd uses fallback flags. */
const MAX_DB_BYTES = 16 * 1024 * 1024;
const DB_PLACES = ['compile_commands.json', 'build/compile_commands.json', 'out/compile_commands.json', 'compile_flags.txt'];

export interface ClangdDatabase {
  dir: string;
  /** Where the repository's database was found ('' when none: fallback flags). */
  source: string;
  entries: number;
  removedFlags: number;
  note?: string;
}

/** Flags that make clang load or run code: dropped wherever they appear. */
export function dropsFlag(arg: string): boolean {
  return /^-f(pass-)?plugin(=|$)/.test(arg) || /^-plugin-arg-/.test(arg) || arg === '-load' || arg === '-plugin' || arg === '-add-plugin' || /^--?load-pass-plugin/.test(arg) || /^-fplugin-arg-/.test(arg);
}

export function sanitizeArgs(args: string[]): { args: string[]; removed: number } {
  const out: string[] = [];
  let removed = 0;
  for (let i = 0; i < args.length; i++) {
    const a = args[i]!;
    // -Xclang passes its next argument to the compiler's front end untouched (-Xclang -load -Xclang x.so): every pair goes.
    if (a === '-Xclang' || a === '-mllvm') {
      i++;
      removed += 2;
      continue;
    }
    if (a.startsWith('-Xclang=')) {
      removed++;
      continue;
    }
    if (dropsFlag(a)) {
      removed++;
      // A separate argument of -load / -plugin / -add-plugin.
      if ((a === '-load' || a === '-plugin' || a === '-add-plugin') && i + 1 < args.length) {
        i++;
        removed++;
      }
      continue;
    }
    out.push(a);
  }
  return { args: out, removed };
}

/** A shell-like split of a "command" string (single and double quotes, backslashes). */
export function splitCommand(cmd: string): string[] {
  const out: string[] = [];
  let cur = '';
  let quote: string | null = null;
  let has = false;
  for (let i = 0; i < cmd.length; i++) {
    const ch = cmd[i]!;
    if (quote) {
      if (ch === quote) quote = null;
      else if (ch === '\\' && quote === '"' && i + 1 < cmd.length) cur += cmd[++i];
      else cur += ch;
    } else if (ch === '"' || ch === "'") {
      quote = ch;
      has = true;
    } else if (ch === '\\' && i + 1 < cmd.length) {
      cur += cmd[++i];
      has = true;
    } else if (/\s/.test(ch)) {
      if (has || cur) out.push(cur);
      cur = '';
      has = false;
    } else {
      cur += ch;
      has = true;
    }
  }
  if (has || cur) out.push(cur);
  return out;
}

function readSmall(c: Confinement, rel: string): string | undefined {
  try {
    return readWorkspaceFile(c, rel, 'path', MAX_DB_BYTES).text;
  } catch (err) {
    return err instanceof DaemonError && err.code === 'RESOURCE_EXHAUSTED' ? '\0too-large' : undefined;
  }
}

/** Writes the daemon's database for clangd into `dir` (made if missing) from the repository's. */
export function prepareClangdDatabase(c: Confinement, dir: string): ClangdDatabase {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const root = c.root;
  const inside = (p: string): boolean => p === root || p.startsWith(root + '/');
  for (const place of DB_PLACES) {
    const text = readSmall(c, place);
    if (text === undefined) continue;
    if (text === '\0too-large') return write(dir, [], place, 0, `${place} is larger than ${MAX_DB_BYTES} bytes: fallback flags`);
    if (place.endsWith('compile_flags.txt')) {
      const base = path.posix.dirname(path.posix.join(root, place));
      const lines = text.split(/\r?\n/).filter((l) => l.trim() !== '');
      const { args, removed } = sanitizeArgs(lines);
      // The file moves to the daemon's directory: relative include paths are made absolute.
      const abs = args.map((a) => a.replace(/^(-I|-isystem|-iquote)(?!\/)(.+)$/, (_m, f: string, p: string) => `${f}${path.posix.resolve(base, p)}`));
      rmSync(path.join(dir, 'compile_commands.json'), { force: true });
      writeFileSync(path.join(dir, 'compile_flags.txt'), abs.join('\n') + '\n');
      return { dir, source: place, entries: 1, removedFlags: removed };
    }
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      return write(dir, [], place, 0, `${place} is not valid JSON: fallback flags`);
    }
    if (!Array.isArray(parsed)) return write(dir, [], place, 0, `${place} is not a JSON array: fallback flags`);
    const entries: Array<{ directory: string; file: string; arguments: string[] }> = [];
    let removed = 0;
    for (const e of parsed.slice(0, 100_000) as unknown[]) {
      if (typeof e !== 'object' || e === null) continue;
      const r = e as Record<string, unknown>;
      const directory = typeof r.directory === 'string' ? path.posix.resolve(root, r.directory) : root;
      if (typeof r.file !== 'string') continue;
      const file = path.posix.resolve(directory, r.file);
      if (!inside(directory) || !inside(file)) {
        removed++;
        continue;
      }
      const argv = Array.isArray(r.arguments) ? r.arguments.filter((a): a is string => typeof a === 'string') : typeof r.command === 'string' ? splitCommand(r.command) : [];
      if (argv.length === 0) continue;
      const s = sanitizeArgs(argv);
      removed += s.removed;
      entries.push({ directory, file, arguments: s.args });
    }
    return write(dir, entries, place, removed);
  }
  return write(dir, [], '', 0);
}

function write(dir: string, entries: unknown[], source: string, removed: number, note?: string): ClangdDatabase {
  writeFileSync(path.join(dir, 'compile_commands.json'), JSON.stringify(entries));
  rmSync(path.join(dir, 'compile_flags.txt'), { force: true });
  return { dir, source, entries: entries.length, removedFlags: removed, ...(note ? { note } : {}) };
}
