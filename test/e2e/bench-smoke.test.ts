/**
 * Benchmarks that cannot rot (issue #21 item 1): every script under bench/ runs here in its smoke
 * mode (tiny counts, a few seconds) against the real service, and must exit 0 and print the lines
 * that carry its figures. A benchmark added without a line here fails the first test.
 */
import { execFile } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ROOT } from './harness.js';

/** Each benchmark and what its output must say (a figure beside its baseline). */
const BENCHES: Record<string, RegExp[]> = {
  'bench/mcp-overhead': [/bare node:http echo\s+p50 [\d.]+ ms/, /atelier MCP \(HTTP\)\s+p50 [\d.]+ ms .*ratio p50 [\d.]+x/],
  'bench/exec': [
    /bare bwrap \/bin\/true\s+p50 [\d.]+ ms/,
    /MCP exec_run true\s+p50 [\d.]+ ms .*ratio p50 [\d.]+x/,
    /c1 exec_run true p50 < 5 ms:\s+[\d.]+ ms \(official v2 client [\d.]+ ms; .*\)\s+(met|NOT met)/,
    /service CPU per call on the wire \(no goal\): exec_run true \d+ us \(user \d+, system \d+\) over \d+ calls; ping \d+ us/,
  ],
  'bench/workspace': [
    /open to first result: median [\d.]+ ms .*plain git clone --depth 1: median [\d.]+ ms; ratio [\d.]+x/,
    /trivial command: .*ratio [\d.]+x/,
    /checkpoint of a workspace holding \d+ MB \(source image [\d.]+ MB on disk\): [\d.]+ ms \(frozen \d+ ms\), disk added [\d.]+ MB \([\d.]+ %\), copyMode (copy|reflink)/,
    /fork from that checkpoint: [\d.]+ ms, disk added [\d.]+ MB .*fork of the live workspace: [\d.]+ ms \(frozen \d+ ms\), disk added [\d.]+ MB/,
    /plain-copy baseline \(--image-pool off, same run, source image [\d.]+ MB\): checkpoint [\d.]+ ms \(frozen \d+ ms\), disk added [\d.]+ MB \([\d.]+ %\), copyMode copy; fork from it [\d.]+ ms, [\d.]+ MB; fork of the live workspace [\d.]+ ms/,
    /goal \(issue #33\): checkpoint and fork .*: (met|NOT met|not applicable: .*)/,
    /setup that runs once: warm template open to first result median [\d.]+ ms; cold open \+ npm install median [\d.]+ ms; bare open median [\d.]+ ms/,
    /goal \(issue #33 item 3\): warm template open within 1\.5x of a bare open: [\d.]+x; (met|NOT met)/,
  ],
  'bench/files': [/grep_search, rare pattern .*ratio [\d.]+x/, /symbols_search: cold index build [\d.]+ ms/, /files_read 1 MiB utf-8: median [\d.]+ ms .*ratio [\d.]+x/, /goal: files_read 1 MiB utf-8 .*within 2x the daemon alone: [\d.]+x .*: (met|NOT met)/, /files_read 1 MiB base64: service CPU per read on the wire \(no goal\): \d+ us \(user \d+, system \d+\) over \d+ calls/, /files_read handoff \(the runner reads the daemon's open descriptor\): taken [1-9]\d*, refused 0/, /1 MiB results on the wire \(no goal\): files_read [\d.]+ ms .*exec_run [\d.]+ ms .*git_diff [\d.]+ ms/],
  // In smoke mode a handful of requests: an added p99 (a difference of two p99s) can come out below zero, for either gateway.
  'bench/gateway': [/added p99: atelier -?[\d.]+ ms vs portkey -?[\d.]+ ms/, /throughput at c64: atelier \d+ rps/, /metered on the bench lease: \d+ input/],
  'bench/telemetry': [/tracing off, helpers of one call: \d+ ns vs the bare calls \d+ ns: added \d+ ns per call/, /service CPU per workspace_list call: tracing off \d+ us .*; on \d+ us .*ratio on\/off [\d.]+x/, /spans received from the traced service: [1-9]\d*/],
  // Issue #35 item 1: mixed load from several clients; no error, no daemon death.
  'bench/soak': [
    /soak: \d+ clients, \d+ s, \d+ calls, \d+ calls\/s/,
    /errors: 0; daemon restarts \(workspace_status sandboxRestarts\): 0;/,
    /daemon RSS: mean [\d.]+ MiB after warm-up, [\d.]+ MiB at the end \(ratio [\d.]+x\)/,
    /runner RSS: [\d.]+ MiB after warm-up, [\d.]+ MiB at the end \(ratio [\d.]+x\); descriptors \d+ -> \d+/,
    /goal: 0 errors and no daemon death over \d+ s: met/,
  ],
  // Issue #34 item 5: the Kubernetes path's overhead over bubblewrap, against the fixture API server.
  'bench/kubernetes': [
    /open median: kubernetes Pod [\d.]+ ms, agent-sandbox Sandbox [\d.]+ ms, bubblewrap [\d.]+ ms; ratio [\d.]+x \(Sandbox [\d.]+x\)/,
    /open claimed from a warm pool \(--kube-warm-pool\): median [\d.]+ ms, ratio [\d.]+x bubblewrap, [\d.]+x a Sandbox of its own \([1-9]\d* of \d+ warm\)/,
    /exec: median [\d.]+ ms vs [\d.]+ ms, ratio [\d.]+x; p90 [\d.]+ ms vs [\d.]+ ms, ratio [\d.]+x/,
    /API requests per workspace lifecycle: Pod path [1-9][\d.]* .*Sandbox path [1-9][\d.]*; watches open after close: 0/,
    /runner holds per remote workspace \(\d+ held\): -?\d+ KB heap, -?\d+ KB buffers, -?\d+ KB RSS, [\d.]+ handles; exec streams per workspace [\d.]+/,
  ],
  // Issue #44: the code_* tools on a generated TS + Python project, beside the bare servers and the text tools.
  'bench/code-intel': [
    /smoke typescript: definition accuracy 100\.0 % of 3 labelled positions/,
    /smoke python: definition accuracy 100\.0 % of 2 labelled positions/,
    /smoke typescript: references over 1 labelled names: code_references precision 100\.0 % recall 100\.0 %; symbols_references precision [\d.]+ % recall [\d.]+ %/,
    /smoke (typescript|python): warm code_definition through MCP p50 [\d.]+ ms p99 [\d.]+ ms \(n \d+\); bare server p50 [\d.]+ ms .*ratio p50 [\d.]+x/,
    /smoke python: warm code_hover through MCP p50 [\d.]+ ms .*bare server p50 [\d.]+ ms/,
    /smoke typescript: code_references p50 [\d.]+ ms/,
    /smoke (typescript|python): first answer after a cold start \(server start \+ indexing\) [\d.]+ ms; bare server [\d.]+ ms/,
    /smoke typescript: diagnostics visible through code_diagnostics after a files_write introducing a type error: [\d.]+ ms/,
    /smoke python: diagnostics visible through code_diagnostics after a files_write introducing a type error: [\d.]+ ms/,
    /smoke: files_write p50 with a server running [\d.]+ ms vs without [\d.]+ ms \(its twin workspace, \d+ writes each, in turn\): ratio [\d.]+x/,
    /smoke: memory per server .*typescript [\d.]+ MiB, python [\d.]+ MiB; bare: typescript [\d.]+ MiB, python [\d.]+ MiB/,
    /smoke: workspace size .* after the servers' idle stop \(\d+ s, stopped true\) [\d.]+ MiB/,
  ],
  // Issue #45: the tools/list tokens of the full surface, each preset and the dynamic start, beside b0b0429's.
  'bench/surface': [
    /full surface \(unnarrowed token\): \d+ tools, \d+ tokens \(cl100k \d+\), \d+ bytes; baseline b0b0429: 122 tools, \d+ tokens, ratio [\d.]+x; goal <= 24000: (met|NOT met)/,
    /largest tool: \w+ \d+ tokens; baseline repohost_action \d+ tokens; goal <= 2000: (met|NOT met)/,
    /preset code: \d+ tools, \d+ tokens .*ratio [\d.]+x; goal <= 8000: (met|NOT met)/,
    /dynamic mode starting list: \d+ tools, \d+ tokens, goal <= 6000: (met|NOT met); the rest \(\d+ tools\) one discovery call away/,
    /descriptions: \d+ tokens \(baseline \d+\); structure, names and annotations: \d+ tokens \(baseline \d+\)/,
  ],
  // Run with their own assertions on the figures in test/e2e/bench-smoke-agents.test.ts and
  // test/unit/bench-smoke-knowledge.test.ts.
  'bench/agents': [],
  'bench/knowledge': [],
};
/** Helpers of the benchmarks, not benchmarks. */
const NOT_BENCHES = new Set(['lib', 'relay']);

/** Benchmarks that start more than one service (bench/workspace: its plain-copy baseline runs on a second one; bench/kubernetes: two fixture API servers and a child runner), ms. */
const LONGER: Record<string, number> = { 'bench/workspace': 400_000, 'bench/kubernetes': 400_000 };

function runBench(name: string, extra: string[] = []): Promise<{ code: number; out: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, [join(ROOT, `${name}.mjs`), '--smoke', ...extra], { cwd: ROOT, timeout: LONGER[name] ?? 170_000, maxBuffer: 8 << 20 }, (err, stdout, stderr) => {
      const code = err ? ((err as { code?: number }).code ?? 1) : 0;
      resolve({ code: typeof code === 'number' ? code : 1, out: stdout + stderr });
    });
  });
}

describe('benchmarks in smoke mode', () => {
  it('every script under bench/ is run here', () => {
    const scripts = readdirSync(join(ROOT, 'bench'))
      .filter((f) => f.endsWith('.mjs'))
      .map((f) => f.slice(0, -4))
      .filter((n) => !NOT_BENCHES.has(n))
      .map((n) => `bench/${n}`);
    expect(scripts.sort()).toEqual(Object.keys(BENCHES).sort());
  });

  // bench/code-intel's check of the labelled sets against the bare servers alone (no service).
  it('bench/code-intel --labels-only prints accuracy and references per set', { timeout: 100_000 }, async () => {
    const { code, out } = await runBench('bench/code-intel', ['--labels-only']);
    expect(code, out).toBe(0);
    expect(out).toMatch(/smoke typescript: bare typescript definition accuracy 100\.0 % of 3 positions over 2 names \(goal >= 95 %: met\), 0 misses/);
    expect(out).toMatch(/smoke python: bare python references over 1 labelled names: precision 100\.0 % recall 100\.0 %/);
  });

  for (const [name, lines] of Object.entries(BENCHES).filter(([, l]) => l.length > 0)) {
    it(`${name} runs and prints its figures`, { timeout: (LONGER[name] ?? 170_000) + 10_000 }, async () => {
      const { code, out } = await runBench(name);
      expect(code, out).toBe(0);
      for (const re of lines) expect(out, `${name} output`).toMatch(re);
    });
  }
});
