/**
 * Positions between callers and servers. A caller's line and column are 1-based as an editor
 * shows them, and a column counts Unicode code points (an emoji or a CJK character is one column,
 * a tab is one column); LSP positions are 0-based with UTF-16 code units (the encoding every server
 * speaks). JavaScript strings are UTF-16, so an LSP character offset is a string index.
 */
import { DaemonError } from '../protocol.js';

/** Characters of a line returned with a location; longer lines are cut (textTruncated). */
export const LINE_TEXT_CHARS = 400;

export interface LspPosition {
  line: number;
  character: number;
}

export interface LspRange {
  start: LspPosition;
  end: LspPosition;
}

/** A caller's position: 1-based line, 1-based code-point column. */
export interface Position1 {
  line: number;
  column: number;
}

export class Lines {
  private readonly starts: number[] = [0];

  constructor(readonly text: string) {
    for (let i = text.indexOf('\n'); i !== -1; i = text.indexOf('\n', i + 1)) this.starts.push(i + 1);
  }

  get count(): number {
    return this.starts.length;
  }

  /** The 0-based line without its line ending ('' past the end). */
  line(n: number): string {
    if (n < 0 || n >= this.starts.length) return '';
    const s = this.starts[n]!;
    const e = n + 1 < this.starts.length ? this.starts[n + 1]! - 1 : this.text.length;
    const l = this.text.slice(s, e);
    return l.endsWith('\r') ? l.slice(0, -1) : l;
  }

  /** String offset of an LSP position (clamped into the text). */
  offset(p: LspPosition): number {
    const line = Math.max(0, Math.min(p.line, this.starts.length - 1));
    const len = this.line(line).length;
    return this.starts[line]! + Math.max(0, Math.min(p.character, len));
  }

  /** A caller's position to LSP; refuses a line or column past the file's. */
  toLsp(p: Position1): LspPosition {
    if (p.line > this.starts.length) throw new DaemonError('INVALID_ARGUMENT', `line: ${p.line} is past the end of the file (${this.starts.length} lines)`, { field: 'line' });
    const text = this.line(p.line - 1);
    const cps = [...text];
    if (p.column > cps.length + 1) throw new DaemonError('INVALID_ARGUMENT', `column: ${p.column} is past the end of line ${p.line} (${cps.length} characters; columns count Unicode code points from 1)`, { field: 'column' });
    return { line: p.line - 1, character: cps.slice(0, p.column - 1).join('').length };
  }

  /** An LSP position to the caller's. */
  fromLsp(p: LspPosition): Position1 {
    const text = this.line(p.line);
    const units = Math.max(0, Math.min(p.character, text.length));
    return { line: p.line + 1, column: [...text.slice(0, units)].length + 1 };
  }
}

/** The range as callers see it, with the line's text. */
export function shapeRange(lines: Lines | undefined, r: LspRange): { range: { start: Position1; end: Position1 }; text: string; textTruncated?: true } {
  if (!lines) {
    return { range: { start: { line: r.start.line + 1, column: r.start.character + 1 }, end: { line: r.end.line + 1, column: r.end.character + 1 } }, text: '' };
  }
  const text = lines.line(r.start.line);
  const out = { range: { start: lines.fromLsp(r.start), end: lines.fromLsp(r.end) }, text: text.length > LINE_TEXT_CHARS ? text.slice(0, LINE_TEXT_CHARS) : text };
  return text.length > LINE_TEXT_CHARS ? { ...out, textTruncated: true } : out;
}

const WORD = /[\p{L}\p{N}_$]/u;

/** Whole-word occurrences of `name` in the text, as LSP positions of their first character. */
export function occurrences(lines: Lines, name: string, limit = 1000): LspPosition[] {
  const out: LspPosition[] = [];
  for (let n = 0; n < lines.count && out.length < limit; n++) {
    const l = lines.line(n);
    for (let i = l.indexOf(name); i !== -1 && out.length < limit; i = l.indexOf(name, i + 1)) {
      const before = i > 0 ? l[i - 1]! : '';
      const after = l[i + name.length] ?? '';
      if ((before && WORD.test(before)) || (after && WORD.test(after))) continue;
      out.push({ line: n, character: i });
    }
  }
  return out;
}
