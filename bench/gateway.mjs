// Benchmark of the model gateway (issue #8): the direct path, this gateway and the Portkey gateway,
// all against the same fake upstream in the same run. Prints added latency p50/p99 at concurrency 1
// (zero-delay upstream), requests per second at concurrency 64 (20 ms upstream delay) and added time
// to first token on a stream of 64 deltas, with ratios. Our gateway meters and enforces budgets
// throughout (a lease with a cost budget, reservation, clamp and settlement on every request).
// Reference targets show the floor of any separate-process hop on this machine (bench/relay.mjs): a
// bare Node TCP relay and, when installed, socat (a C relay), which parse nothing; and the smallest
// node:http proxy (no metering, no budget, no auth), which is the floor of an HTTP gateway on Node.
//   node bench/gateway.mjs [--quick]
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { Agent, request } from 'node:http';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ROOT, SMOKE, measure, pct, fmt } from './lib.mjs';

const quick = process.argv.includes('--quick');
const N1 = SMOKE ? 20 : quick ? 500 : 3000;
const N64 = SMOKE ? 128 : quick ? 2000 : 8000;
const NT = SMOKE ? 10 : quick ? 200 : 600;

async function loadFake() {
  const out = join(ROOT, 'bench/.build-gw');
  execFileSync(join(ROOT, 'node_modules/.bin/tsc'), ['--ignoreConfig', '--outDir', out, '--module', 'nodenext', '--moduleResolution', 'nodenext', '--target', 'es2022', '--types', 'node', '--skipLibCheck', '--rootDir', join(ROOT, 'test/fixtures'), join(ROOT, 'test/fixtures/fake-provider.ts')], { stdio: 'inherit' });
  writeFileSync(join(out, 'package.json'), '{"type":"module"}');
  return import(join(out, 'fake-provider.js'));
}

async function freePort() {
  const s = createServer();
  await new Promise((r) => s.listen(0, '127.0.0.1', r));
  const p = s.address().port;
  await new Promise((r) => s.close(r));
  return p;
}

async function waitFor(url, ms = 20000) {
  const end = Date.now() + ms;
  for (;;) {
    try {
      await fetch(url);
      return;
    } catch {
      if (Date.now() > end) throw new Error(`${url} did not answer`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}

const agent = new Agent({ keepAlive: true, maxSockets: 256 });

/** One POST; resolves with { ttft, total } in ms (ttft = first body bytes containing a delta). */
function post(target, body) {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    let ttft = 0;
    const req = request(target.url, { method: 'POST', agent, headers: { ...target.headers, 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } }, (res) => {
      let first = '';
      res.on('data', (d) => {
        if (first.length < 500) first += d;
        if (!ttft && d.includes('"content":"w')) ttft = performance.now() - t0;
      });
      res.on('end', () => {
        resolve({ ttft, total: performance.now() - t0, error: res.statusCode !== 200 ? `HTTP ${res.statusCode} ${first.slice(0, 200)}` : null });
      });
    });
    req.on('error', reject);
    req.end(body);
  });
}

async function run(target, body, total, concurrency, warmup = SMOKE ? 2 : 100) {
  let errors = 0;
  let lastError = null;
  const ttft = [];
  const m = await measure(
    async () => {
      const r = await post(target, body);
      if (r.error) {
        errors++;
        lastError = r.error;
      }
      ttft.push(r.ttft);
    },
    { total, concurrency, warmup },
  );
  ttft.sort((a, b) => a - b);
  if (errors) console.log(`  ${target.name}: ${errors} of ${total} requests failed (last: ${lastError})`);
  return { ...m, ttft50: pct(ttft, 50), ttft99: pct(ttft, 99), errors };
}

const { startFakeProvider } = await loadFake();
const fake = await startFakeProvider({ record: false });
const dir = mkdtempSync(join(tmpdir(), 'atelier-bench-gw-'));
const procs = [];
try {
  // This gateway.
  const secret = 'bench-admin-secret-' + Math.random().toString(36).slice(2);
  writeFileSync(join(dir, 'secret'), secret, { mode: 0o600 });
  const gw = spawn(process.execPath, [join(ROOT, 'bin/atelier'), 'gateway', '--port', '0', '--admin-secret-file', join(dir, 'secret'), '--log-level', 'silent'], { stdio: ['ignore', 'pipe', 'inherit'] });
  procs.push(gw);
  const gwUrl = await new Promise((resolve) => {
    let out = '';
    gw.stdout.on('data', (d) => {
      out += d;
      const m = /listening at (\S+)/.exec(out);
      if (m) resolve(m[1]);
    });
  });
  const admin = (method, path, body) => fetch(gwUrl + path, { method, headers: { authorization: `Bearer ${secret}`, 'content-type': 'application/json' }, body: JSON.stringify(body) }).then((r) => r.json());
  await admin('PUT', '/admin/snapshot', {
    generation: 1,
    providers: { provider_a: { baseUrl: fake.url + '/v1' } },
    routes: [{ profileId: 'bench', revision: 1, provider: 'provider_a', apiMode: 'chat-completions', model: 'bench-model', credential: { id: 'cred_bench', key: 'KEY' }, pricing: { inputMicrosPerMillionTokens: 2000000, outputMicrosPerMillionTokens: 8000000, cachedReadMicrosPerMillionTokens: 500000, cachedWriteMicrosPerMillionTokens: null } }],
    policies: { dailyCapMicros: 1e12, monthlyCapMicros: 1e12, perAgentCapMicros: null },
  });
  const lease = await admin('POST', '/admin/leases', { agentId: 'agent_bench', profileId: 'bench', revision: 1, budgets: { maxInputTokens: 1e12, maxOutputTokens: 1e12, maxCostMicros: 1e12 }, expiresAt: new Date(Date.now() + 3600e3).toISOString() });

  // Portkey, on loopback, pointed at the same fake with a custom host.
  const pkPort = await freePort();
  const pk = spawn(process.execPath, [join(ROOT, 'node_modules/@portkey-ai/gateway/build/start-server.js'), `--port=${pkPort}`, '--headless'], { stdio: ['ignore', 'ignore', process.env.BENCH_DEBUG ? 'inherit' : 'ignore'], env: { ...process.env, NODE_ENV: 'production' } });
  procs.push(pk);
  await waitFor(`http://127.0.0.1:${pkPort}/`);

  // The floor: relays that only copy bytes.
  const relayUrl = (proc) =>
    new Promise((resolve, reject) => {
      let out = '';
      proc.stdout.on('data', (d) => {
        out += d;
        const m = /listening at (\S+)/.exec(out);
        if (m) resolve(m[1]);
      });
      proc.once('exit', (c) => reject(new Error(`relay exited ${c}`)));
    });
  const relay = spawn(process.execPath, [join(ROOT, 'bench/relay.mjs'), 'tcp', fake.host], { stdio: ['ignore', 'pipe', 'inherit'] });
  const httpRelay = spawn(process.execPath, [join(ROOT, 'bench/relay.mjs'), 'http', fake.host], { stdio: ['ignore', 'pipe', 'inherit'] });
  procs.push(relay, httpRelay);
  const relayBase = await relayUrl(relay);
  const httpRelayBase = await relayUrl(httpRelay);
  let socatBase = null;
  try {
    execFileSync('socat', ['-V'], { stdio: 'ignore' });
    const sp = await freePort();
    const so = spawn('socat', [`TCP-LISTEN:${sp},bind=127.0.0.1,fork,reuseaddr,nodelay`, `TCP:${fake.host},nodelay`], { stdio: 'ignore' });
    procs.push(so);
    socatBase = `http://127.0.0.1:${sp}`;
    await waitFor(socatBase + '/');
  } catch {
    socatBase = null; // not installed: the Node relay alone shows the floor
  }

  const targets = [
    { name: 'direct', url: fake.url + '/v1/chat/completions', headers: { authorization: 'Bearer KEY' } },
    { name: 'atelier', url: gwUrl + '/v1/chat/completions', headers: { authorization: `Bearer ${lease.token}` } },
    { name: 'portkey', url: `http://127.0.0.1:${pkPort}/v1/chat/completions`, headers: { authorization: 'Bearer KEY', 'x-portkey-provider': 'openai', 'x-portkey-custom-host': fake.url + '/v1' } },
    { name: 'tcp-relay', url: relayBase + '/v1/chat/completions', headers: { authorization: 'Bearer KEY' }, floor: true },
    { name: 'node-http', url: httpRelayBase + '/v1/chat/completions', headers: { authorization: 'Bearer KEY' }, floor: true },
    ...(socatBase ? [{ name: 'socat', url: socatBase + '/v1/chat/completions', headers: { authorization: 'Bearer KEY' }, floor: true }] : []),
  ];
  const msg = (extra) => JSON.stringify({ model: 'bench-model', messages: [{ role: 'user', content: `Say hello. ${extra}` }], max_completion_tokens: 256, ...(extra.includes('deltas') ? { stream: true } : {}) });
  // Fail fast, but give Portkey a moment: it answers 500 while it is still initialising.
  for (const t of targets) {
    for (let i = 0; ; i++) {
      try {
        const r = await post(t, msg(''));
        if (r.error) throw new Error(`${t.name}: ${r.error}`);
        break;
      } catch (e) {
        if (i > 40) throw e;
        await new Promise((r) => setTimeout(r, 250));
      }
    }
  }

  const res = {};
  fake.delayMs = 0;
  // Concurrency 1 in rotating blocks, so a noisy second on the machine falls on every path alike.
  const lat1 = Object.fromEntries(targets.map((t) => [t.name, []]));
  for (const t of targets) await run(t, msg(''), 100, 1, 0);
  for (let done = 0; done < N1; done += 250) for (const t of targets) lat1[t.name].push(...(await run(t, msg(''), Math.min(250, N1 - done), 1, 0)).all);
  for (const t of targets) {
    const l = lat1[t.name].sort((a, b) => a - b);
    res[t.name] = { c1: { p50: pct(l, 50), p99: pct(l, 99) } };
  }
  fake.delayMs = 20;
  for (const t of targets) res[t.name].c64 = t.floor ? null : await run(t, msg(''), N64, 64, 64);
  fake.delayMs = 0;
  for (const t of targets) res[t.name].stream = t.floor ? null : await run(t, msg('#deltas=64'), NT, 1, 30);

  const d = res.direct;
  console.log(`\nModel gateway benchmark (${quick ? 'quick' : 'full'}; fake upstream on loopback; our gateway meters and enforces a budget on every request)\n`);
  console.log('path      c1 p50       c1 p99       added p50    added p99    c64 rps (20 ms upstream)   ttft p50     added ttft p50  added ttft p99');
  for (const t of targets) {
    const r = res[t.name];
    if (t.floor) {
      console.log(`${t.name.padEnd(10)} ${fmt(r.c1.p50).padEnd(12)} ${fmt(r.c1.p99).padEnd(12)} ${fmt(r.c1.p50 - d.c1.p50).padEnd(12)} ${fmt(r.c1.p99 - d.c1.p99).padEnd(12)} (reference: ${t.name === 'node-http' ? 'a bare node:http proxy' : 'copies bytes only'})`);
      continue;
    }
    console.log(
      `${t.name.padEnd(10)} ${fmt(r.c1.p50).padEnd(12)} ${fmt(r.c1.p99).padEnd(12)} ${fmt(r.c1.p50 - d.c1.p50).padEnd(12)} ${fmt(r.c1.p99 - d.c1.p99).padEnd(12)} ${r.c64.rps.toFixed(0).padEnd(26)} ${r.stream.errors < NT ? `${fmt(r.stream.ttft50).padEnd(12)} ${fmt(r.stream.ttft50 - d.stream.ttft50).padEnd(15)} ${fmt(r.stream.ttft99 - d.stream.ttft99)}` : 'n/a (every streamed request failed)'}`,
    );
  }
  const a = res.atelier;
  const p = res.portkey;
  const addA = a.c1.p99 - d.c1.p99;
  const addP = p.c1.p99 - d.c1.p99;
  console.log(`\nadded p99: atelier ${fmt(addA)} vs portkey ${fmt(addP)} -> ratio ${(addA / addP).toFixed(3)} (goal < 1 ms and < 0.25)`);
  const floors = targets.filter((t) => t.floor).map((t) => `${t.name} ${fmt(res[t.name].c1.p99 - d.c1.p99)}`);
  const nodeFloor = res['node-http'].c1.p99 - d.c1.p99;
  console.log(`floors (added p99 of relays that do no gateway work): ${floors.join(', ')}`);
  console.log(`atelier's added p99 is ${(addA / nodeFloor).toFixed(2)}x that of the bare node:http proxy (${fmt(addA - nodeFloor)} above it)`);
  console.log(`throughput at c64: atelier ${a.c64.rps.toFixed(0)} rps vs portkey ${p.c64.rps.toFixed(0)} rps -> ${(a.c64.rps / p.c64.rps).toFixed(2)}x (goal >= 3x); direct ${d.c64.rps.toFixed(0)} rps`);
  const pkStream = p.stream.errors < NT ? fmt(p.stream.ttft50 - d.stream.ttft50) : 'n/a (Portkey answered every streamed request with an error)';
  console.log(`added ttft p50: atelier ${fmt(a.stream.ttft50 - d.stream.ttft50)} vs portkey ${pkStream}`);
  const info = await fetch(`${gwUrl}/admin/leases/${lease.leaseId}`, { headers: { authorization: `Bearer ${secret}` } }).then((r) => r.json());
  console.log(`metered on the bench lease: ${info.used.inputTokens} input and ${info.used.outputTokens} output tokens, ${info.used.costMicros} micro-USD; reserved now ${info.reserved.costMicros}`);
} finally {
  for (const p of procs) p.kill('SIGTERM');
  await fake.close();
  agent.destroy();
  rmSync(dir, { recursive: true, force: true });
  rmSync(join(ROOT, 'bench/.build-gw'), { recursive: true, force: true });
}
