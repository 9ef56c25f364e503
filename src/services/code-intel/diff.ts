/**
 * A unified diff of two texts (the format `diff -u` and `git diff` print, 3 lines of context), for
 * code_rename's preview. Lines are compared with Myers' O(ND) algorithm; past MAX_EDIT_DISTANCE
 * differing lines the whole file is shown as one hunk (a rename changes few lines).
 */

const CONTEXT = 3;
const MAX_EDIT_DISTANCE = 4000;

type Op = { kind: ' ' | '-' | '+'; line: string };

function splitLines(text: string): string[] {
  if (text === '') return [];
  const lines = text.split('\n');
  if (lines[lines.length - 1] === '') lines.pop();
  return lines;
}

/** The edit script from a to b (equal, deleted and added lines, in order). */
function script(a: string[], b: string[]): Op[] {
  const n = a.length;
  const m = b.length;
  const max = n + m;
  const v = new Map<number, number>([[1, 0]]);
  const trace: Array<Map<number, number>> = [];
  let found = false;
  for (let d = 0; d <= Math.min(max, MAX_EDIT_DISTANCE) && !found; d++) {
    trace.push(new Map(v));
    for (let k = -d; k <= d; k += 2) {
      let x = k === -d || (k !== d && (v.get(k - 1) ?? 0) < (v.get(k + 1) ?? 0)) ? v.get(k + 1) ?? 0 : (v.get(k - 1) ?? 0) + 1;
      let y = x - k;
      while (x < n && y < m && a[x] === b[y]) {
        x++;
        y++;
      }
      v.set(k, x);
      if (x >= n && y >= m) {
        found = true;
        break;
      }
    }
  }
  if (!found) return [...a.map((line) => ({ kind: '-' as const, line })), ...b.map((line) => ({ kind: '+' as const, line }))];
  // Walk the trace back from (n, m).
  const ops: Op[] = [];
  let x = n;
  let y = m;
  for (let d = trace.length - 1; d >= 0; d--) {
    const vd = trace[d]!;
    const k = x - y;
    const prevK = k === -d || (k !== d && (vd.get(k - 1) ?? 0) < (vd.get(k + 1) ?? 0)) ? k + 1 : k - 1;
    const prevX = vd.get(prevK) ?? 0;
    const prevY = prevX - prevK;
    while (x > prevX && y > prevY) {
      ops.push({ kind: ' ', line: a[--x]! });
      y--;
    }
    if (d > 0) {
      if (x === prevX) ops.push({ kind: '+', line: b[--y]! });
      else ops.push({ kind: '-', line: a[--x]! });
    }
  }
  return ops.reverse();
}

export function unifiedDiff(path: string, before: string, after: string): string {
  const a = splitLines(before);
  const b = splitLines(after);
  const ops = script(a, b);
  const out: string[] = [`--- a/${path}`, `+++ b/${path}`];
  let i = 0;
  // Positions (1-based) in a and b of each op.
  const pos: Array<{ ai: number; bi: number }> = [];
  let ai = 1;
  let bi = 1;
  for (const op of ops) {
    pos.push({ ai, bi });
    if (op.kind !== '+') ai++;
    if (op.kind !== '-') bi++;
  }
  while (i < ops.length) {
    if (ops[i]!.kind === ' ') {
      i++;
      continue;
    }
    const start = Math.max(0, i - CONTEXT);
    let end = i;
    // Extend while the next change is within 2*CONTEXT equal lines.
    for (;;) {
      while (end < ops.length && ops[end]!.kind !== ' ') end++;
      let gap = end;
      while (gap < ops.length && ops[gap]!.kind === ' ' && gap - end < 2 * CONTEXT) gap++;
      if (gap < ops.length && ops[gap]!.kind !== ' ') end = gap;
      else {
        end = Math.min(ops.length, end + CONTEXT);
        break;
      }
    }
    const hunk = ops.slice(start, end);
    const aCount = hunk.filter((o) => o.kind !== '+').length;
    const bCount = hunk.filter((o) => o.kind !== '-').length;
    const aStart = aCount === 0 ? pos[start]!.ai - 1 : pos[start]!.ai;
    const bStart = bCount === 0 ? pos[start]!.bi - 1 : pos[start]!.bi;
    out.push(`@@ -${aStart},${aCount} +${bStart},${bCount} @@`);
    for (const o of hunk) out.push(o.kind + o.line);
    i = end;
  }
  return out.join('\n') + '\n';
}
