/**
 * skill_suggest (docs/extensions.md): at most one skill of the workspace roster for a prompt.
 *
 * Locally: BM25 over each skill's name (weighted) and description, with light stemming and a
 * stop-word list, on this machine; a skill is named only when enough of the prompt matches it.
 * With an operator-configured endpoint and integration key, the prompt is first redacted
 * (every environment secret value, the key itself, and token-shaped strings) and sent with the
 * roster's names and descriptions; the answer is accepted only when it names a roster skill,
 * otherwise the local ranking answers.
 */
import { readFileSync } from 'node:fs';
import type { Skill } from './skills.js';

const STOP = new Set(
  'a an and are as at be but by can could do does for from how i if in into is it its me my of on or our please should so some that the their them then there these this to use using want we what when where which while who why will with would you your need needs help make get'.split(
    ' ',
  ),
);

export function stem(word: string): string {
  if (word.length > 5 && word.endsWith('ing')) return word.slice(0, -3);
  if (word.length > 4 && word.endsWith('ies')) return word.slice(0, -3) + 'y';
  if (word.length > 4 && word.endsWith('ed')) return word.slice(0, -2);
  if (word.length > 4 && word.endsWith('es') && /(?:s|x|ch|sh)es$/.test(word)) return word.slice(0, -2);
  if (word.length > 3 && word.endsWith('s') && !word.endsWith('ss')) return word.slice(0, -1);
  return word;
}

export function tokens(text: string): string[] {
  return (text.toLowerCase().match(/[a-z0-9]+/g) ?? []).filter((w) => !STOP.has(w) && w.length > 1).map(stem);
}

export interface Ranked {
  name: string;
  score: number;
  matched: string[];
}

/** BM25 (k1 1.2, b 0.75) with the name counted three times. */
export function rank(prompt: string, skills: Array<Pick<Skill, 'name'> & { description: string }>): Ranked[] {
  const list = [...new Set(tokens(prompt))];
  const docs = skills.map((s) => {
    const nameToks = tokens(s.name.replace(/[-_.:]/g, ' '));
    return { name: s.name, toks: [...nameToks, ...nameToks, ...nameToks, ...tokens(s.description)] };
  });
  const N = docs.length || 1;
  const avg = docs.reduce((n, d) => n + d.toks.length, 0) / N || 1;
  const df = new Map<string, number>();
  for (const d of docs) for (const t of new Set(d.toks)) df.set(t, (df.get(t) ?? 0) + 1);
  return docs
    .map((doc) => {
      let score = 0;
      const matched: string[] = [];
      for (const item of list) {
        const tf = doc.toks.filter((x) => x === item).length;
        if (!tf) continue;
        matched.push(item);
        const idf = Math.log(1 + (N - (df.get(item) ?? 0) + 0.5) / ((df.get(item) ?? 0) + 0.5));
        score += (idf * tf * 2.2) / (tf + 1.2 * (0.25 + (0.75 * doc.toks.length) / avg));
      }
      return { name: doc.name, score, matched };
    })
    .sort((a, b) => b.score - a.score || (a.name < b.name ? -1 : 1));
}

/** The local answer: the best skill when it matches well enough and clearly enough. */
export function localSuggestion(prompt: string, skills: Array<Pick<Skill, 'name'> & { description: string }>): { name: string | null; ranked: Ranked[] } {
  const ranked = rank(prompt, skills);
  const best = ranked[0];
  if (!best || best.score < 1.0 || best.matched.length === 0) return { name: null, ranked };
  const second = ranked[1];
  if (second && second.score > 0 && best.score - second.score < 0.05) return { name: null, ranked };
  return { name: best.name, ranked };
}

/** An embedding function (the knowledge store's model, when the App wires one): one vector per text. */
export type Embedder = (texts: string[]) => Promise<ArrayLike<number>[]>;

function cosine(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let dot = 0;
  let na = 0;
  let nb = 0;
  for (let i = 0; i < Math.min(a.length, b.length); i++) {
    dot += a[i]! * b[i]!;
    na += a[i]! * a[i]!;
    nb += b[i]! * b[i]!;
  }
  return na && nb ? dot / Math.sqrt(na * nb) : 0;
}

/** How much of a prompt is embedded for the semantic ranking (the lexical ranking reads it whole). */
export const SEMANTIC_PROMPT_CHARS = 2000;

/**
 * Lexical and semantic ranks fused by reciprocal rank (k = 60). A skill is named when the lexical
 * answer stands (localSuggestion) or its embedding is close enough to the prompt's (cosine at
 * least minCosine) and it leads the fused ranking.
 */
export async function hybridSuggestion(
  prompt: string,
  skills: Array<Pick<Skill, 'name'> & { description: string }>,
  embed: Embedder,
  minCosine = 0.5,
): Promise<{ name: string | null; ranked: Ranked[]; semantic: Array<{ name: string; cosine: number }> }> {
  const local = localSuggestion(prompt, skills);
  if (skills.length === 0) return { ...local, semantic: [] };
  // The model reads a short window anyway, and a prompt of tens of kilobytes took it over a minute
  // on the request path (the e2e test's 64 KiB prompt): only the prompt's start is embedded.
  const vecs = await embed([prompt.slice(0, SEMANTIC_PROMPT_CHARS), ...skills.map((s) => `${s.name.replace(/[-_.:]/g, ' ')}: ${s.description}`)]);
  const sem = skills.map((s, i) => ({ name: s.name, cosine: cosine(vecs[0]!, vecs[i + 1]!) })).sort((a, b) => b.cosine - a.cosine);
  const fused = new Map<string, number>();
  local.ranked.forEach((r, i) => fused.set(r.name, (fused.get(r.name) ?? 0) + (r.score > 0 ? 1 / (60 + i) : 0)));
  sem.forEach((r, i) => fused.set(r.name, (fused.get(r.name) ?? 0) + 1 / (60 + i)));
  const top = [...fused.entries()].sort((a, b) => b[1] - a[1])[0]![0];
  const topCos = sem.find((x) => x.name === top)!.cosine;
  const name = local.name ?? (topCos >= minCosine ? top : null);
  return { name, ranked: local.ranked, semantic: sem.slice(0, 3) };
}

const TOKEN_PATTERNS: RegExp[] = [
  /-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----/g,
  /\b(?:atl|agt|ghp|gho|ghu|ghs|ghr|github_pat|glpat|xox[abprs])_[A-Za-z0-9_-]{10,}\b/g,
  /\bsk-[A-Za-z0-9_-]{16,}\b/g,
  /\bAKIA[0-9A-Z]{16}\b/g,
  /\b(?:bearer|token|password|passwd|secret|api[_-]?key)\s*[:=]\s*\S+/gi,
  /\bBearer\s+[A-Za-z0-9._~+/=-]{12,}/g,
  /https?:\/\/[^\s/:@]+:[^\s/@]+@/g,
];

/** Redacts secrets from a prompt before it leaves the machine; returns the text and how many were cut. */
export function redactPrompt(prompt: string, known: (s: string) => string, extra: string[]): { text: string; redactions: number } {
  let count = 0;
  let text = known(prompt);
  count += (text.match(/\[redacted:[^\]]*\]/g) ?? []).length;
  for (const v of extra) if (v && v.length >= 4 && text.includes(v)) (count++, (text = text.split(v).join('[redacted]')));
  for (const re of TOKEN_PATTERNS)
    text = text.replace(re, () => {
      count++;
      return '[redacted]';
    });
  return { text, redactions: count };
}

export interface EndpointConfig {
  url: string;
  keyFile: string;
}

/** Asks the configured endpoint; returns its raw answer (or an error text), never throws. */
export async function askEndpoint(cfg: EndpointConfig, prompt: string, roster: Array<{ name: string; description: string }>, timeoutMs = 5000): Promise<{ answer: string | null; error?: string }> {
  let key: string;
  try {
    key = readFileSync(cfg.keyFile, 'utf8').trim();
  } catch (e) {
    return { answer: null, error: `integration key file unreadable: ${(e as NodeJS.ErrnoException).code ?? 'error'}` };
  }
  try {
    const res = await fetch(cfg.url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
      body: JSON.stringify({ prompt, skills: roster }),
      redirect: 'error',
      signal: AbortSignal.timeout(timeoutMs),
    });
    if (!res.ok) return { answer: null, error: `endpoint answered HTTP ${res.status}` };
    // Read at most 64 KiB: a larger answer is refused without being held whole.
    const chunks: Uint8Array[] = [];
    let size = 0;
    for await (const chunk of res.body ?? []) {
      size += (chunk as Uint8Array).byteLength;
      if (size > 65536) {
        await res.body?.cancel().catch(() => undefined);
        return { answer: null, error: 'endpoint answer larger than 64 KiB' };
      }
      chunks.push(chunk as Uint8Array);
    }
    const body = Buffer.concat(chunks).toString('utf8');
    const j = JSON.parse(body) as { skill?: unknown };
    if (j.skill === null || j.skill === undefined) return { answer: null };
    if (typeof j.skill !== 'string') return { answer: null, error: 'endpoint answer has no string "skill"' };
    return { answer: j.skill.slice(0, 200) };
  } catch (e) {
    return { answer: null, error: `endpoint unreachable or invalid: ${(e as Error).name}` };
  }
}
