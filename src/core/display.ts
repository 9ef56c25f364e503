/**
 * Untrusted text as the owner reads it before approving (docs/dashboard.md, "What the owner sees").
 *
 * A character that displays as something else, or as nothing, makes the text on the screen differ
 * from the bytes a grant binds: a right-to-left override (U+202E) reorders what follows it, a
 * zero-width space hides inside a word, a carriage return or a C1 control redraws a terminal line,
 * a line separator (U+2028) breaks a line a reader thinks is one. Every such character is replaced
 * by a visible escape `\u{XXXX}` (upper-case hex, at least four digits) and reported, so the owner
 * sees it and is warned. Escaped:
 *   - controls (Cc): C0 except, in multi-line text, \n and \t; DEL; C1 (U+0080-U+009F)
 *   - format characters (Cf): bidirectional controls U+202A-U+202E and U+2066-U+2069, the marks
 *     U+200E, U+200F and U+061C, zero-width characters U+200B-U+200D, U+2060 and U+FEFF, the soft
 *     hyphen, tag characters (U+E0000-U+E007F) and the rest of Cf
 *   - every other default-ignorable code point (variation selectors, Hangul fillers, U+034F, ...)
 *   - line and paragraph separators (Zl, Zp) and spaces other than U+0020 (Zs: U+00A0, U+3000, ...)
 *   - private-use characters (Co) and lone surrogates (Cs)
 * Everything else (letters of every script, emoji, punctuation, the backslash) is shown as it is.
 *
 * Pure and dependency-free: the dashboard's front end imports this same module (web/pages/approvals.tsx)
 * to highlight the escapes it renders, so the page and the REST payload cannot disagree.
 */

export type HiddenKind = 'bidi' | 'zero_width' | 'control' | 'line_separator' | 'space' | 'private_use' | 'surrogate' | 'invisible';

export interface Segment {
  /** The text to show: either plain text or one escape such as \u{202E}. */
  text: string;
  /** Set on an escape: what it stands for. */
  hidden?: { codePoint: string; kind: HiddenKind };
}

export interface HiddenCount {
  /** U+XXXX */
  codePoint: string;
  kind: HiddenKind;
  count: number;
}

export interface Displayed {
  /** The text with every hidden character escaped. */
  text: string;
  /** Each hidden character found, with how often, in order of first appearance. */
  hidden: HiddenCount[];
}

export interface DisplayOptions {
  /** Keep \n and \t as they are (a command, a plan, a script). Off: they are escaped too (a path, a name). Default true. */
  multiline?: boolean;
}

/** The characters escaped in any text (\n and \t are decided by `multiline`). */
const HIDDEN = /[\u0000-\u0008\u000B-\u001F\u007F-\u009F\p{Cf}\p{Zl}\p{Zp}\p{Co}\p{Cs}\p{Default_Ignorable_Code_Point}]|(?! )\p{Zs}/gu;
const HIDDEN_SINGLE_LINE = /[\u0000-\u001F\u007F-\u009F\p{Cf}\p{Zl}\p{Zp}\p{Co}\p{Cs}\p{Default_Ignorable_Code_Point}]|(?! )\p{Zs}/gu;

function kindOf(cp: number): HiddenKind {
  if ((cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069) || cp === 0x200e || cp === 0x200f || cp === 0x061c) return 'bidi';
  if ((cp >= 0x200b && cp <= 0x200d) || cp === 0x2060 || cp === 0xfeff) return 'zero_width';
  if (cp <= 0x1f || (cp >= 0x7f && cp <= 0x9f)) return 'control';
  if (cp === 0x2028 || cp === 0x2029) return 'line_separator';
  if (cp >= 0xd800 && cp <= 0xdfff) return 'surrogate';
  if ((cp >= 0xe000 && cp <= 0xf8ff) || cp >= 0xf0000) return 'private_use';
  if (/\p{Zs}/u.test(String.fromCodePoint(cp))) return 'space';
  return 'invisible';
}

const hex = (cp: number) => cp.toString(16).toUpperCase().padStart(4, '0');

/** The escape shown for one code point: \u{202E}. */
export const escapeOf = (cp: number): string => `\\u{${hex(cp)}}`;

/** The text as segments: plain runs and one segment per escaped character (for a page that highlights them). */
export function displaySegments(input: string, opts: DisplayOptions = {}): Segment[] {
  const re = opts.multiline === false ? HIDDEN_SINGLE_LINE : HIDDEN;
  const out: Segment[] = [];
  let last = 0;
  for (const m of input.matchAll(re)) {
    const at = m.index!;
    if (at > last) out.push({ text: input.slice(last, at) });
    const cp = m[0].codePointAt(0)!;
    out.push({ text: escapeOf(cp), hidden: { codePoint: `U+${hex(cp)}`, kind: kindOf(cp) } });
    last = at + m[0].length;
  }
  if (last < input.length) out.push({ text: input.slice(last) });
  return out;
}

/** The text with every hidden character escaped, and what was found. */
export function displayText(input: string, opts: DisplayOptions = {}): Displayed {
  const counts = new Map<string, HiddenCount>();
  let text = '';
  for (const s of displaySegments(input, opts)) {
    text += s.text;
    if (!s.hidden) continue;
    const c = counts.get(s.hidden.codePoint);
    if (c) c.count++;
    else counts.set(s.hidden.codePoint, { ...s.hidden, count: 1 });
  }
  return { text, hidden: [...counts.values()] };
}

/**
 * A value that came from outside (a package's name, version, script) as one quoted line: JSON
 * string escaping, so a newline or a quote inside it cannot end the value and forge a line of the
 * text around it. Characters JSON leaves alone (bidi controls, U+2028) are escaped by displayText
 * wherever the text is shown.
 */
export const quoted = (value: unknown): string => JSON.stringify(String(value ?? ''));
