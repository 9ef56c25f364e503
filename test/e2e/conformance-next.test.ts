/**
 * The newest MCP conformance suite (@modelcontextprotocol/conformance 0.2.0-alpha.12, issue #32 item
 * 5) against the real `atelier serve`: the server scenarios of the 2025-11-25 and 2026-07-28
 * requirement sets (each at its own wire: stateful initialize, stateless per-request `_meta`), the
 * skills extension's scenarios, and the authorization-server scenarios with the owner's consent
 * given as in a browser.
 *
 * The suite needs Node 22; it and a Node 22 binary from npm live in test/conformance-next/ with their
 * own package.json and lockfile (installed by scripts/setup.sh), because a package that ships a
 * `node` binary links node_modules/.bin/node, which in the root project would run vitest, and so the
 * service and better-sqlite3's build, on Node 22 (docs/clients.md, "The MCP conformance suites").
 *
 * Credentials: in server mode the suite sends none. It takes `?access_token=` in its URL, but its
 * SEP-2243 header scenario sends raw requests to the URL's path only, dropping the query (and so the
 * token); so the suite talks to a loopback forwarder that adds `Authorization: Bearer <read-only
 * token>` and passes everything else through unchanged (Host and Origin included, for the DNS
 * rebinding scenario).
 *
 * Verdicts: every failing check (FAILURE or WARNING, as the suite counts them) must be listed in
 * conformance-expected-failures.yaml (the suite's fixtures) or conformance-pending.yaml (features of
 * issue #32 built in other branches), and every listed entry must still fail (a passing one is stale).
 * Scenarios the suite runs without scoring (extensions, pending) are judged the same way here.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createServer, request as httpRequestRaw, type Server } from 'node:http';
import { createServer as createNetServer, type AddressInfo } from 'node:net';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ROOT, call, connectV2, dashboardLogin, httpRequest, runCli, startService, type Service } from './harness.js';

const VERSION = '0.2.0-alpha.12';
const NEXT = join(ROOT, 'test/conformance-next');
const NODE22 = join(NEXT, `node_modules/node-linux-${process.arch}/bin/node`);
const SUITE = join(NEXT, 'node_modules/@modelcontextprotocol/conformance/dist/index.js');
const EXPECTED_FILE = join(ROOT, 'test/e2e/conformance-expected-failures.yaml');
const PENDING_FILE = join(ROOT, 'test/e2e/conformance-pending.yaml');
const SKILLS_SCENARIOS = ['sep-2640-skills-directory', 'sep-2640-skills-enumeration', 'sep-2640-skills-manifest'];
/** A whole run of one requirement set takes a few seconds; this only bounds a hung suite. */
const RUN_LIMIT_MS = 120_000;

type Status = 'SUCCESS' | 'FAILURE' | 'WARNING' | 'SKIPPED' | 'INFO';
interface Check {
  id: string;
  status: Status;
  errorMessage?: string;
}
interface ScenarioResult {
  scenario: string;
  checks: Check[];
}
interface Entry {
  scenario: string;
  check?: string;
  text: string;
  reason: string;
  file: string;
}

let svc: Service;
let work: string;
let forwarder: Server;
let suiteUrl: string;
let baselineFile: string;
const counts: string[] = [];
/** Suite processes still running (a failed test ends them in afterAll). */
const running = new Set<ChildProcess>();

/** The entries of one section of a baseline file, each with the reason written after `#` on its line. */
function loadEntries(file: string, section: 'server' | 'authorization'): Entry[] {
  const text = readFileSync(file, 'utf8');
  const list = (parseYaml(text) as Record<string, unknown> | null)?.[section] ?? [];
  if (!Array.isArray(list)) throw new Error(`${file}: "${section}" must be a list of "scenario" or "scenario:check-id"`);
  const reasons = new Map<string, string>();
  for (const m of text.matchAll(/^\s*-\s+(\S+)\s+#\s*(\S.*)$/gm)) reasons.set(m[1]!, m[2]!);
  return list.map((e) => {
    if (typeof e !== 'string') throw new Error(`${file}: "${section}" entry ${JSON.stringify(e)} is not "scenario" or "scenario:check-id" (no space after the colon)`);
    const [scenario, check] = e.includes(':') ? [e.slice(0, e.indexOf(':')), e.slice(e.indexOf(':') + 1)] : [e, undefined];
    return { scenario: scenario!, check, text: e, reason: reasons.get(e) ?? '', file };
  });
}

const severity = (s: Status) => (s === 'FAILURE' ? 3 : s === 'WARNING' ? 2 : s === 'SUCCESS' ? 1 : 0);
const failed = (c: Check) => c.status === 'FAILURE' || c.status === 'WARNING';

/** One verdict per check id (the most severe occurrence), as the suite's baseline does. */
function collapse(checks: Check[]): Check[] {
  const best = new Map<string, Check>();
  for (const c of checks) {
    if (c.status === 'INFO') continue;
    const cur = best.get(c.id);
    if (!cur || severity(c.status) >= severity(cur.status)) best.set(c.id, c);
  }
  return [...best.values()];
}

/** The suite's baseline rules, applied to every scenario run (scored or not). */
function judge(results: ScenarioResult[], entries: Entry[]) {
  const expected: Entry[] = [];
  const unexpected: string[] = [];
  const stale: Entry[] = [];
  for (const r of results) {
    const whole = entries.find((e) => e.scenario === r.scenario && !e.check);
    const checks = collapse(r.checks);
    if (whole) {
      if (checks.some(failed)) expected.push(whole);
      else stale.push(whole);
      continue;
    }
    const perCheck = entries.filter((e) => e.scenario === r.scenario && e.check);
    for (const c of checks.filter(failed)) {
      const e = perCheck.find((x) => x.check === c.id);
      if (e) expected.push(e);
      else unexpected.push(`${r.scenario}:${c.id} (${c.status}: ${(c.errorMessage ?? '').slice(0, 300)})`);
    }
    for (const e of perCheck) if (checks.find((c) => c.id === e.check)?.status === 'SUCCESS') stale.push(e);
  }
  return { expected, unexpected, stale };
}

/** checks.json of every scenario the suite saved under `dir` (`<prefix>-<scenario>-<timestamp>/`). */
function readResults(dir: string, prefix: string): ScenarioResult[] {
  if (!existsSync(dir)) return [];
  return readdirSync(dir)
    .filter((d) => d.startsWith(`${prefix}-`))
    .map((d) => ({
      scenario: d.slice(prefix.length + 1).replace(/-\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d-\d{3}Z$/, ''),
      checks: JSON.parse(readFileSync(join(dir, d, 'checks.json'), 'utf8')) as Check[],
    }));
}

interface SuiteRun {
  out: () => string;
  /** Resolves with the first match of `re` in the suite's output. */
  waitFor(re: RegExp): Promise<RegExpExecArray>;
  done: Promise<{ code: number | null; out: string }>;
}

function startSuite(args: string[]): SuiteRun {
  const env = { ...process.env };
  delete env.NODE_OPTIONS;
  const p = spawn(NODE22, [SUITE, ...args], { cwd: work, env, stdio: ['ignore', 'pipe', 'pipe'] });
  running.add(p);
  let out = '';
  const waiters: Array<() => void> = [];
  const onData = (d: Buffer) => {
    out += d;
    for (const w of [...waiters]) w();
  };
  p.stdout.on('data', onData);
  p.stderr.on('data', onData);
  const limit = setTimeout(() => p.kill('SIGKILL'), RUN_LIMIT_MS);
  const done = new Promise<{ code: number | null; out: string }>((resolve) =>
    p.on('close', (code) => {
      running.delete(p);
      clearTimeout(limit);
      for (const w of [...waiters]) w();
      resolve({ code, out });
    }),
  );
  return {
    out: () => out,
    done,
    waitFor: (re) =>
      new Promise((resolve, reject) => {
        const check = () => {
          const m = re.exec(out);
          if (m) {
            waiters.splice(waiters.indexOf(check), 1);
            resolve(m);
          } else if (p.exitCode !== null || p.signalCode !== null) {
            waiters.splice(waiters.indexOf(check), 1);
            reject(new Error(`the suite ended without printing ${re}:\n${out}`));
          }
        };
        waiters.push(check);
        check();
      }),
  };
}

async function runSuite(args: string[]): Promise<{ code: number | null; out: string }> {
  return startSuite(args).done;
}

/** Passes the suite's requests to the service unchanged, with the read-only token as a bearer header. */
function startForwarder(target: URL, token: string): Promise<Server> {
  const server = createServer((req, res) => {
    const up = httpRequestRaw(
      { host: target.hostname, port: target.port, method: req.method, path: req.url, headers: { ...req.headers, authorization: `Bearer ${token}` } },
      (ur) => {
        res.writeHead(ur.statusCode!, ur.statusMessage, ur.rawHeaders);
        ur.pipe(res);
      },
    );
    up.on('error', () => (res.headersSent ? res.destroy() : res.writeHead(502).end()));
    res.on('close', () => up.destroy());
    req.on('error', () => up.destroy());
    req.pipe(up);
  });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(server)));
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createNetServer();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as AddressInfo;
      s.close(() => resolve(port));
    });
  });
}

/** The counts of one run: the suite's own total line, the checks by status, and the baseline's verdict. */
function summary(out: string, results: ScenarioResult[], v: ReturnType<typeof judge>): string {
  const all = results.flatMap((r) => r.checks);
  const n = (s: Status) => all.filter((c) => c.status === s).length;
  const total = /^Total: .*$/m.exec(out)?.[0];
  return (
    `${results.length} scenarios${total ? ` (suite: "${total}")` : ''}; checks ${n('SUCCESS')} passed, ${n('FAILURE')} failed, ${n('WARNING')} warnings, ${n('SKIPPED')} skipped; ` +
    `listed failures: ${v.expected.filter((e) => e.file === EXPECTED_FILE).length} expected, ${v.expected.filter((e) => e.file === PENDING_FILE).length} pending (areas A-C), ${v.unexpected.length} unexpected`
  );
}

/** No failure outside the lists, no listed entry that passes; the message names each. */
function expectListed(v: ReturnType<typeof judge>): void {
  expect(v.unexpected.map((u) => `unexpected failure: ${u}`).join('\n'), `fix it, or list a fixture's in ${EXPECTED_FILE} with its reason`).toBe('');
  expect(v.stale.map((e) => `stale entry (it passes now, remove it): ${e.text} in ${e.file}`).join('\n')).toBe('');
}

const serverEntries = () => [...loadEntries(EXPECTED_FILE, 'server'), ...loadEntries(PENDING_FILE, 'server')];

beforeAll(async () => {
  if (!existsSync(NODE22) || !existsSync(SUITE)) {
    throw new Error(`the conformance suite ${VERSION} or its Node 22 is not installed under ${NEXT}: run scripts/setup.sh (it runs npm ci --prefix test/conformance-next)`);
  }
  work = mkdtempSync(join(tmpdir(), 'atelier-conformance-'));
  // The suite gets both lists as one baseline: it judges the scenarios a requirement set scores.
  baselineFile = join(work, 'baseline.yaml');
  writeFileSync(baselineFile, `server:\n${serverEntries().map((e) => `  - ${JSON.stringify(e.text)}\n`).join('')}`);
  svc = await startService({ args: ['--unsafe-dev-no-sandbox'] });
  const t = await runCli(['token', 'create', '--name', 'conformance-next', '--read-only', '--json', '--data-dir', svc.dataDir]);
  expect(t.code, t.stderr).toBe(0);
  forwarder = await startForwarder(new URL(svc.mcpUrl), JSON.parse(t.stdout).token);
  suiteUrl = `http://127.0.0.1:${(forwarder.address() as AddressInfo).port}/mcp`;
}, 180_000);

afterAll(async () => {
  for (const p of running) p.kill('SIGKILL');
  await Promise.all([...running].map((p) => new Promise((r) => p.once('close', r))));
  if (counts.length) console.log(`MCP conformance suite ${VERSION} against atelier serve:\n  ${counts.join('\n  ')}`);
  forwarder?.closeAllConnections();
  await new Promise((r) => (forwarder ? forwarder.close(r) : r(undefined)));
  await svc?.dispose();
  if (work) rmSync(work, { recursive: true, force: true });
});

describe(`MCP conformance suite ${VERSION}`, () => {
  it(`is ${VERSION} on Node 22; every listed failure says why`, async () => {
    expect(JSON.parse(readFileSync(join(SUITE, '../../package.json'), 'utf8')).version).toBe(VERSION);
    const node = await new Promise<string>((resolve) => {
      const p = spawn(NODE22, ['--version']);
      let o = '';
      p.stdout.on('data', (d) => (o += d));
      p.on('close', () => resolve(o.trim()));
    });
    expect(node).toMatch(/^v22\./);
    const all = [...serverEntries(), ...loadEntries(EXPECTED_FILE, 'authorization'), ...loadEntries(PENDING_FILE, 'authorization')];
    expect(all.filter((e) => e.reason.length < 10).map((e) => `${e.file}: ${e.text}`)).toEqual([]);
    const texts = all.map((e) => e.text);
    expect(texts.filter((t, i) => texts.indexOf(t) !== i)).toEqual([]);
    // A scenario is listed whole or check by check, never both (the suite refuses such a file).
    const whole = new Set(all.filter((e) => !e.check).map((e) => e.scenario));
    expect(all.filter((e) => e.check && whole.has(e.scenario)).map((e) => e.text)).toEqual([]);
  }, 60_000);

  for (const revision of ['2025-11-25', '2026-07-28']) {
    it(`server scenarios of the ${revision} requirement set: only the listed failures`, async () => {
      const out = join(work, `server-${revision}`);
      const r = await runSuite(['server', '--url', suiteUrl, '--requirements', revision, '--expected-failures', baselineFile, '-o', out]);
      const results = readResults(out, 'server');
      const announced = /Running requirements \S+ \((\d+) scenarios\)/.exec(r.out);
      expect(announced, r.out).not.toBeNull();
      expect(results.length, r.out).toBe(Number(announced![1]));
      const v = judge(results, serverEntries());
      expectListed(v);
      // The suite's own verdict on the scenarios it scores, with the same baseline.
      expect(r.out).toMatch(/Baseline check passed/);
      expect(r.code, r.out).toBe(0);
      counts.push(`server ${revision}: ${summary(r.out, results, v)}`);
    }, 180_000);
  }

  it('the skills extension scenarios (SEP-2640): only the listed failures', async () => {
    // One scenario per run (the suite runs no extension set), so the three run side by side.
    const runs = await Promise.all(SKILLS_SCENARIOS.map((s) => runSuite(['server', '--url', suiteUrl, '--scenario', s, '--expected-failures', baselineFile, '-o', join(work, `skills-${s}`)])));
    for (const r of runs) expect(r.code, r.out).toBe(0);
    const results = SKILLS_SCENARIOS.flatMap((s) => readResults(join(work, `skills-${s}`), 'server'));
    expect(results.map((r) => r.scenario).sort()).toEqual([...SKILLS_SCENARIOS].sort());
    const v = judge(results, serverEntries());
    expectListed(v);
    counts.push(`skills extension: ${summary('', results, v)}`);
  }, 180_000);

  it('authorization-server scenarios: metadata, and the code grant with PKCE approved by the owner on the consent page', async () => {
    const session = await dashboardLogin(svc);
    const port = await freePort();
    const reg = await httpRequest(svc.url, 'POST', '/oauth/register', { 'content-type': 'application/json' }, JSON.stringify({ client_name: 'MCP conformance suite', redirect_uris: [`http://127.0.0.1:${port}/callback`], token_endpoint_auth_method: 'none' }));
    expect(reg.status, reg.body).toBe(201);
    const clientId = JSON.parse(reg.body).client_id as string;
    const out = join(work, 'authorization');
    const run = startSuite(['authorization', '--url', svc.url, '--client-id', clientId, '--resource', svc.mcpUrl, '--port', String(port), '-o', out]);
    // The suite prints the authorization URL for a person to open; this test is that person's browser.
    const authUrl = new URL((await run.waitFor(/^(http:\/\/\S+\/oauth\/authorize\?\S+)$/m))[1]!);
    expect(authUrl.searchParams.get('code_challenge_method')).toBe('S256');
    const a = await httpRequest(svc.url, 'GET', authUrl.pathname + authUrl.search);
    expect(a.status, a.body).toBe(303);
    const consentPath = String(a.headers.location);
    const page = await httpRequest(svc.url, 'GET', consentPath, { cookie: session.cookie });
    expect(page.status).toBe(200);
    expect(page.body).toContain('<strong>MCP conformance suite</strong>');
    const request = /name="request" value="([^"]+)"/.exec(page.body)![1]!;
    const csrf = /name="csrf" value="([^"]+)"/.exec(page.body)![1]!;
    // What the page ticked (the toolsets asked for), plus read-only.
    const ticked = Object.fromEntries([...page.body.matchAll(/name="(ts_[a-z-]+)" value="on" checked/g)].map((m) => [m[1]!, 'on']));
    expect(Object.keys(ticked).length).toBeGreaterThan(0);
    const post = await httpRequest(svc.url, 'POST', '/oauth/consent', { cookie: session.cookie, 'content-type': 'application/x-www-form-urlencoded' }, new URLSearchParams({ request, csrf, decision: 'approve', ...ticked, readonly: 'on' }).toString());
    expect(post.status, post.body).toBe(303);
    const callback = new URL(String(post.headers.location));
    expect(`${callback.origin}${callback.pathname}`).toBe(`http://127.0.0.1:${port}/callback`);
    // The browser follows the redirect to the suite's callback server; the suite then redeems the code.
    // The suite prints the URL before its callback server listens (the fresh-clone run once met
    // ECONNREFUSED there): the browser's request is retried on a refused connection, bounded.
    const cb = await (async () => {
      const end = Date.now() + 30_000;
      for (;;) {
        try {
          return await httpRequest(callback.origin, 'GET', callback.pathname + callback.search);
        } catch (err) {
          if ((err as NodeJS.ErrnoException).code !== 'ECONNREFUSED' || Date.now() > end) throw err;
          await new Promise((r) => setTimeout(r, 50));
        }
      }
    })();
    expect(cb.status).toBe(200);
    const r = await run.done;
    const results = readResults(out, 'authorization-server');
    expect(results.map((x) => x.scenario).sort()).toEqual(['authorization-code-grant', 'authorization-server-metadata-endpoint']);
    const grant = results.find((x) => x.scenario === 'authorization-code-grant')!;
    expect(grant.checks.map((c) => c.status), r.out).toEqual(['SUCCESS']);
    const v = judge(results, [...loadEntries(EXPECTED_FILE, 'authorization'), ...loadEntries(PENDING_FILE, 'authorization')]);
    expectListed(v);
    expect(r.code, r.out).toBe(0);
    counts.push(`authorization server: ${summary('', results, v)}`);
  }, 180_000);

  it('the suite changed nothing: its token was read-only and no workspace exists', async () => {
    const c = await connectV2(svc);
    const r = await call(c, 'workspace_list', {});
    expect(r.ok).toBe(true);
    if (r.ok) expect(r.result.workspaces).toEqual([]);
    await c.close();
  }, 60_000);
});
