/** Universal Ctags workers in its seccomp sandbox, fed file contents (ctags never opens a workspace file). */
import { spawn, spawnSync, type ChildProcessByStdio } from 'node:child_process';
import type { Readable, Writable } from 'node:stream';
import { globSource } from '../glob.js';
import { SEARCH_LIMITS, CTAGS, childEnv } from './common.js';


// ---------------------------------------------------------------------------------------------
// ctags
// ---------------------------------------------------------------------------------------------

/** Data and doc formats whose "tags" are keys or headings, not definitions: not indexed. */
export const EXCLUDED_LANGUAGES = [
  'JSON', 'Markdown', 'ReStructuredText', 'Asciidoc', 'Txt2tags', 'Man', 'Pod', 'Passwd', 'Iniconf',
  'JavaProperties', 'Yaml', 'XML', 'SVG', 'PlistXML', 'RelaxNG', 'DBusIntrospect', 'Glade', 'Maven2',
  'XSLT', 'BibTeX', 'Tex', 'TeXBeamer', 'Diff', 'YumRepo', 'SystemdUnit', 'RpmMacros', 'QemuHX',
];

export const CTAGS_ARGS = [
  '--options=NONE',
  '--_interactive=sandbox',
  `--languages=all,${EXCLUDED_LANGUAGES.map((l) => `-${l}`).join(',')}`,
  '--fields=-P+nlKsSZ',
  '--extras=-p',
];

/** Which file names ctags has a parser for (from --list-maps), as one regular expression over base names. */
let nameFilter: RegExp | null | undefined;
export function ctagsNameFilter(): RegExp | null {
  if (nameFilter !== undefined) return nameFilter;
  nameFilter = null;
  if (!CTAGS) return null;
  const r = spawnSync(CTAGS, ['--options=NONE', '--list-maps'], { encoding: 'utf8', env: childEnv(), timeout: 10_000 });
  if (r.status !== 0) return null;
  const excluded = new Set(EXCLUDED_LANGUAGES);
  const alternatives: string[] = [];
  for (const line of r.stdout.split('\n')) {
    const parts = line.trim().split(/\s+/);
    if (parts.length < 2 || excluded.has(parts[0]!)) continue;
    for (const pat of parts.slice(1)) alternatives.push(globSource(pat));
  }
  nameFilter = alternatives.length ? new RegExp(`^(?:${alternatives.join('|')})$`) : null;
  return nameFilter;
}

export interface Tag {
  name: string;
  kind: string;
  line: number;
  language: string;
  scope?: string;
  scopeKind?: string;
  signature?: string;
}

interface CtagsJob {
  rel: string;
  data: Buffer;
  tags: Tag[];
  resolve(tags: Tag[] | null): void;
  timer?: NodeJS.Timeout;
}

/** One long-lived `ctags --_interactive=sandbox`, fed file contents through stdin. */
class CtagsWorker {
  private child: ChildProcessByStdio<Writable, Readable, null> | undefined;
  private readonly inflight: CtagsJob[] = [];
  private pending: Buffer[] = [];
  dead = false;

  constructor() {
    const child = spawn(CTAGS!, CTAGS_ARGS, { cwd: '/', env: childEnv(), stdio: ['pipe', 'pipe', 'ignore'] });
    this.child = child;
    child.stdin.on('error', () => undefined);
    child.stdout.on('data', (chunk: Buffer) => this.onData(chunk));
    child.on('error', () => this.fail());
    child.on('close', () => this.fail());
  }

  get load(): number {
    return this.inflight.length;
  }

  submit(rel: string, data: Buffer): Promise<Tag[] | null> {
    return new Promise((resolve) => {
      if (this.dead || !this.child) return resolve(null);
      const job: CtagsJob = { rel, data, tags: [], resolve };
      this.inflight.push(job);
      this.arm();
      this.child.stdin.write(JSON.stringify({ command: 'generate-tags', filename: rel, size: data.length }) + '\n');
      this.child.stdin.write(data);
    });
  }

  /** Watchdog on the oldest request: a parser stuck on one file kills this worker. */
  private arm(): void {
    const head = this.inflight[0];
    if (head && !head.timer) head.timer = setTimeout(() => this.kill(), SEARCH_LIMITS.ctagsFileTimeoutMs);
  }

  private onData(chunk: Buffer): void {
    let start = 0;
    for (let nl = chunk.indexOf(10); nl !== -1; nl = chunk.indexOf(10, start)) {
      const part = chunk.subarray(start, nl);
      let line: Buffer = part;
      if (this.pending.length > 0) {
        this.pending.push(part);
        line = Buffer.concat(this.pending);
        this.pending = [];
      }
      this.onLine(line.toString('utf8'));
      start = nl + 1;
    }
    if (start < chunk.length) this.pending.push(chunk.subarray(start));
  }

  private onLine(line: string): void {
    let rec: Record<string, unknown>;
    try {
      rec = JSON.parse(line) as Record<string, unknown>;
    } catch {
      return;
    }
    const job = this.inflight[0];
    if (rec._type === 'tag') {
      if (!job || job.tags.length >= SEARCH_LIMITS.tagsPerFile) return;
      const t: Tag = { name: String(rec.name), kind: String(rec.kind ?? ''), line: Number(rec.line ?? 0), language: String(rec.language ?? '') };
      if (typeof rec.scope === 'string') t.scope = rec.scope;
      if (typeof rec.scopeKind === 'string') t.scopeKind = rec.scopeKind;
      if (typeof rec.signature === 'string') t.signature = rec.signature;
      job.tags.push(t);
    } else if (rec._type === 'completed') {
      if (!job) return;
      this.inflight.shift();
      clearTimeout(job.timer);
      job.resolve(job.tags);
      this.arm();
    } else if (rec._type === 'error' && rec.fatal === true) {
      this.kill();
    }
  }

  kill(): void {
    this.child?.kill('SIGKILL');
    this.fail();
  }

  private fail(): void {
    this.dead = true;
    this.child = undefined;
    for (const job of this.inflight.splice(0)) {
      clearTimeout(job.timer);
      job.resolve(null);
    }
  }

  close(): void {
    this.child?.stdin.end();
    this.dead = true;
  }
}

/** A few ctags workers; each file goes to the least loaded one; a dead worker is replaced. */
export class CtagsPool {
  private workers: CtagsWorker[] = [];

  constructor(private readonly size: number) {}

  run(rel: string, data: Buffer): Promise<Tag[] | null> {
    this.workers = this.workers.filter((w) => !w.dead);
    let w: CtagsWorker | undefined;
    if (this.workers.length < this.size) {
      w = new CtagsWorker();
      this.workers.push(w);
    } else {
      w = this.workers.reduce((a, b) => (b.load < a.load ? b : a));
    }
    return w.submit(rel, data);
  }

  /** Ends idle workers but one (a later query reuses it). */
  trim(): void {
    this.workers = this.workers.filter((w) => !w.dead);
    for (const w of this.workers.slice(1)) if (w.load === 0) w.close();
    this.workers = this.workers.filter((w) => !w.dead);
  }
}
