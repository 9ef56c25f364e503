/** Agent instruction files chosen by client profile. */
import { createHash } from 'node:crypto';
import { closeSync } from 'node:fs';
import { CLIENT_PROFILES, CONCRETE_PROFILES, OVERVIEW_LIMITS, type ConcreteProfile, type InstructionFile, type Ctx, type ValidOptions } from './rules.js';
import { GLOB_CHARS, compileGlob, type GlobMatcher } from '../glob.js';
import { lstatInside, openInside, readAt, utf8Boundary, truncateUtf8, decoder } from './access.js';
import { walkSubtree } from './walk.js';

// ---------------------------------------------------------------------------------------------
// Instruction files
// ---------------------------------------------------------------------------------------------

export interface PatternPlan {
  /** Exact paths to probe (including the root copy of every nested name). */
  fixed: Set<string>;
  /** Basenames honoured at any depth ("**\/NAME"), found by the main walk. */
  nestedNames: Set<string>;
  /** Patterns with a fixed directory prefix, found by walking under the prefix. */
  prefixed: Array<{ prefix: string; re: GlobMatcher }>;
  /** Any other pattern, tested against every walked path. */
  general: GlobMatcher[];
  /** Compiled patterns of every concrete profile, to fill in `profiles`. */
  byProfile: Array<{ profile: ConcreteProfile; patterns: Array<{ re: GlobMatcher; repoWide: boolean }> }>;
}

export function planPatterns(selected: readonly ConcreteProfile[]): PatternPlan {
  const plan: PatternPlan = { fixed: new Set(), nestedNames: new Set(), prefixed: [], general: [], byProfile: [] };
  const seen = new Set<string>();
  for (const profile of CONCRETE_PROFILES) {
    const patterns = CLIENT_PROFILES[profile].instructionFiles.map((p) => ({
      re: compileGlob(p),
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
      } else if (firstGlob > 0) plan.prefixed.push({ prefix: segs.slice(0, firstGlob).join('/'), re: compileGlob(p) });
      else plan.general.push(compileGlob(p));
    }
  }
  return plan;
}

export async function collectInstructions(
  ctx: Ctx,
  plan: PatternPlan,
  candidates: Set<string>,
  selected: readonly ConcreteProfile[],
  options: ValidOptions,
): Promise<InstructionFile[]> {
  for (const rel of plan.fixed) {
    const st = lstatInside(ctx, rel);
    if (st && (st.isFile() || st.isSymbolicLink())) candidates.add(rel);
  }
  const byPrefix = new Map<string, GlobMatcher[]>();
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
    const f = openInside(ctx, e.rel);
    if (!f) continue; // a link out of the root, a special file, or gone
    try {
      const want = options.contentMode === 'excerpt' ? budget : 0;
      const { sha256, bytes, head } = await digest(f.fd, want);
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
      closeSync(f.fd);
    }
  }
  return out;
}

/** Streams the whole file through SHA-256, keeping only the first `keep` bytes. */
export async function digest(fd: number, keep: number): Promise<{ sha256: string; bytes: number; head: Buffer }> {
  const hash = createHash('sha256');
  const chunk = Buffer.allocUnsafe(64 * 1024);
  const head = Buffer.alloc(keep);
  let headLen = 0;
  let bytes = 0;
  for (;;) {
    const bytesRead = await readAt(fd, chunk, bytes);
    if (bytesRead === 0) break;
    const data = chunk.subarray(0, bytesRead);
    hash.update(data);
    if (headLen < keep) headLen += data.copy(head, headLen, 0, Math.min(bytesRead, keep - headLen));
    bytes += bytesRead;
  }
  return { sha256: hash.digest('hex'), bytes, head: head.subarray(0, headLen) };
}
