/**
 * Reads the spec's tool lines ("- **name** [badges]. ...") so tests compare the published
 * surface with the spec text itself, not with a copy of it.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ROOT } from './harness.js';
import { CATALOG } from '../../src/tools/index.js';
import { TOOLSETS } from '../../src/core/toolsets.js';

/** The discovery tools (issue #45 item 2), which only a connection in the dynamic mode is listed (docs/access.md "Dynamic toolsets"). */
export const DISCOVERY_TOOLS = CATALOG.filter((t) => t.domain === TOOLSETS.discovery).map((t) => t.name);

/**
 * The tools an unnarrowed caller lists: the spec's 107 and those beyond it, each in a toolset of
 * its own (docs/STATUS.md), but for the discovery tools of the dynamic mode.
 */
export const ALL_TOOLS = CATALOG.length - DISCOVERY_TOOLS.length;

export interface SpecTool {
  name: string;
  badges: string[];
  line: string;
  /** field -> constraint text inside its parentheses, e.g. limit -> "1-500, =100" */
  params: Map<string, string>;
  required: Set<string>;
}

export const SPEC_PATH = join(ROOT, '..', 'shared', 'spec', 'service-spec.md');

export function readSpecTools(): SpecTool[] {
  const text = readFileSync(SPEC_PATH, 'utf8');
  const out: SpecTool[] = [];
  for (const line of text.split('\n')) {
    const m = /^- \*\*([a-z_]+)\*\*(?: \[([^\]]*)\])?\.(.*)$/.exec(line);
    if (!m) continue;
    const badges = (m[2] ?? '').split(',').map((s) => s.trim()).filter(Boolean);
    const params = new Map<string, string>();
    const required = new Set<string>();
    for (const p of m[3]!.matchAll(/(?:^|[;.:]\s*|Params: )([a-zA-Z]+)(\*?)(?: \(([^()]*)\))?(?=;|\.|$)/g)) {
      if (p[3] !== undefined) params.set(p[1]!, p[3]);
      if (p[2] === '*') required.add(p[1]!);
    }
    out.push({ name: m[1]!, badges, line, params, required });
  }
  return out;
}

export interface RangeExpectation {
  min?: number;
  max?: number;
  def?: string;
}

/** Interprets "1-500, =100", "max 262144", "INT, =0", "=false" … */
export function parseConstraint(text: string): RangeExpectation {
  const e: RangeExpectation = {};
  const range = /(?:^|[\s(,])(\d+)-(\d+)(?!\s*digits)(?:$|[\s,;)])/.exec(text);
  if (range) (e.min = Number(range[1])), (e.max = Number(range[2]));
  const max = /max (?:length )?(\d+)/.exec(text);
  if (max && e.max === undefined) e.max = Number(max[1]);
  // "=x" with nothing between = and the value ("0 = full history" is prose, not a default).
  const def = /(?:^|[\s,(])=(\[[^\]]*\]|[^\s,;)][^,;)]*)/.exec(text);
  if (def) e.def = def[1]!.trim();
  return e;
}
