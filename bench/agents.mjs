// bench/agents: coding subagents through the real `atelier serve`, its embedded gateway and the
// scripted fake provider on loopback.
//  1. spawn to first request: agent_spawn sent over MCP until the first model request reaches the
//     provider with a pre-started runtime ready in the pool (goal: p50 under 150 ms), beside an MCP
//     exec_run of `true` (a sandboxed process through the workspace daemon) measured in the same
//     run; also, for information, a spawn right after another (the pool empty, the runtime
//     starting on demand).
//  2. proxied tool call overhead: one files_read proxied by an agent (runtime -> control socket ->
//     tool registry -> back), derived from the gap between model turns with a batch of K calls
//     and with one call, beside the same files_read called directly over MCP (goal: overhead
//     under 2 ms p50).
// `--smoke` runs tiny counts (used by test/e2e/bench-smoke-agents.test.ts).
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { spawn } from 'node:child_process';
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { ROOT, pct } from './lib.mjs';

const smoke = process.argv.includes('--smoke');
const SPAWNS = Number(process.env.BENCH_SPAWNS ?? (smoke ? 3 : 30));
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? (smoke ? 2 : 15));
const K = Number(process.env.BENCH_BATCH ?? (smoke ? 5 : 40));
const DIRECT = Number(process.env.BENCH_DIRECT ?? (smoke ? 20 : 300));

function buildFixtures() {
  const out = join(ROOT, 'bench/.build-agents');
  execFileSync(join(ROOT, 'node_modules/.bin/tsc'), ['--ignoreConfig', '--outDir', out, '--module', 'nodenext', '--moduleResolution', 'nodenext', '--target', 'es2022', '--types', 'node', '--skipLibCheck', '--rootDir', join(ROOT, 'test/fixtures'), join(ROOT, 'test/fixtures/githost.ts'), join(ROOT, 'test/fixtures/fake-agent-provider.ts')], { stdio: 'inherit' });
  writeFileSync(join(out, 'package.json'), '{"type":"module"}');
  return out;
}

const built = buildFixtures();
const { startGitHost } = await import(join(built, 'githost.js'));
const { startFakeAgentProvider } = await import(join(built, 'fake-agent-provider.js'));
const host = await startGitHost();
const fake = await startFakeAgentProvider();
const { url: repoUrl } = await host.createRepo('approved/bench-agents', { 'README.md': '# bench\n'.repeat(20) });
const dataDir = mkdtempSync(join(tmpdir(), 'atelier-bench-agents-'));
writeFileSync(join(dataDir, 'config.json'), JSON.stringify({
  repositories: { allow: [`${host.url}/approved/*`], extraCaCertificates: [host.caCertPath] },
  providers: { provider_a: { baseUrl: fake.url + '/v1' } },
  sandboxDiskMb: 256,
}));
const bin = join(ROOT, 'bin/atelier');
execFileSync(process.execPath, [bin, 'credentials', 'add-token', `${host.url}/`, '--username', 'x-access-token', '--label', 'bench', '--data-dir', dataDir], { input: host.token + '\n' });
const proc = spawn(process.execPath, [bin, 'serve', '--port', '0', '--data-dir', dataDir, '--log-level', process.env.BENCH_LOG_LEVEL ?? 'warn'], { stdio: ['ignore', 'pipe', 'inherit'] });
let out = '';
await new Promise((resolve, reject) => {
  proc.stdout.on('data', (d) => {
    out += d;
    if (/Dashboard:\s+\S+/.test(out)) resolve();
  });
  proc.once('exit', (c) => reject(new Error(`atelier exited ${c}`)));
});
const mcpUrl = /MCP URL:\s+(\S+)/.exec(out)[1];
const token = /Owner token:\s+(atl_\S+)/.exec(out)[1];
const base = mcpUrl.replace(/\/mcp$/, '');
const link = new URL(/Dashboard:\s+(\S+)/.exec(out)[1]);

let status = 0;
try {
  const first = await fetch(base + link.pathname + link.search, { redirect: 'manual' });
  const cookie = String(first.headers.get('set-cookie')).split(';')[0];
  const csrf = (await (await fetch(base + '/api/v1/session', { headers: { cookie } })).json()).csrfToken;
  const rest = async (method, path, body) => {
    const r = await fetch(base + path, { method, headers: { cookie, 'x-csrf-token': csrf, 'content-type': 'application/json' }, body: JSON.stringify(body) });
    const j = await r.json();
    if (r.status >= 300) throw new Error(`${method} ${path}: ${r.status} ${JSON.stringify(j)}`);
    return j;
  };
  const cred = await rest('POST', '/api/v1/provider-credentials', { provider: 'provider_a', key: 'sk-bench-agents-key-0123456789' });
  const pricing = { inputMicrosPerMillionTokens: 1000, outputMicrosPerMillionTokens: 1000, cachedReadMicrosPerMillionTokens: null, cachedWriteMicrosPerMillionTokens: null };
  const prof = await rest('POST', '/api/v1/agent-model-profiles', { profileId: 'bench', displayName: 'bench', credentialId: cred.credential.id, model: 'm', apiMode: 'chat-completions', pricing, limits: { maxInputTokens: 2000000, maxOutputTokens: 2000000, maxCostMicros: 1000000000 }, maxProxyOperations: ['files_read'], idempotencyKey: 'bench-profile-1' });
  await rest('POST', '/api/v1/agent-model-profiles/bench/activate', { expectedGeneration: prof.profile.generation });

  const client = new Client({ name: 'bench-agents', version: '1' });
  await client.connect(new StreamableHTTPClientTransport(new URL(mcpUrl), { requestInit: { headers: { authorization: `Bearer ${token}` } } }));
  const callTool = async (name, args) => {
    const r = await client.callTool({ name, arguments: args });
    if (r.isError) throw new Error(`${name}: ${r.content[0].text}`);
    return r.structuredContent;
  };
  const ws = (await callTool('workspace_open', { repositoryUrl: repoUrl, idempotencyKey: `bench-agents-${Date.now()}` })).workspaceId;
  const waitEnd = async (agentId) => {
    for (;;) {
      const s = await callTool('agent_status', { workspaceId: ws, agentId });
      if (s.terminal) return s;
      await new Promise((r) => setTimeout(r, 50));
    }
  };
  let n = 0;
  const spawnAgent = (script, extra = {}) => callTool('agent_spawn', { workspaceId: ws, idempotencyKey: `bench-${Date.now()}-${n++}`, profileId: 'bench', prompt: `#agent=${script}`, proxyOperations: ['files_read'], repositoryContext: 'none', ...extra });

  // 1. Spawn to first provider request, against an MCP exec_run of `true`.
  const poolReady = async () => {
    for (let i = 0; i < 600; i++) {
      const p = (await rest('GET', '/api/v1/agents?limit=1')).pool;
      if (p.ready >= 1) return;
      await new Promise((r) => setTimeout(r, 100));
    }
    throw new Error('the agent runtime pool did not get a ready runtime within 60 s');
  };
  const timeSpawn = async (name) => {
    fake.scripts.set(name, () => ({ text: 'ok' }));
    const t0 = performance.now();
    const a = await spawnAgent(name);
    const t1 = await fake.firstRequest(name);
    return { ms: t1 - t0, agentId: a.agentId };
  };
  const spawnLat = [];
  const coldLat = [];
  for (let i = 0; i < SPAWNS + 1; i++) {
    await poolReady();
    const warm = await timeSpawn(`first${i}`);
    // Right after it, the pool is empty: this runtime starts on demand (or is the refill, still starting).
    const cold = await timeSpawn(`cold${i}`);
    if (i > 0) {
      // the first round warms the page cache
      spawnLat.push(warm.ms);
      coldLat.push(cold.ms);
    }
    await waitEnd(warm.agentId);
    await waitEnd(cold.agentId);
  }
  const execLat = [];
  for (let i = 0; i < SPAWNS + 5; i++) {
    const t0 = performance.now();
    await callTool('exec_run', { workspaceId: ws, command: 'true' });
    if (i >= 5) execLat.push(performance.now() - t0);
  }
  spawnLat.sort((a, b) => a - b);
  coldLat.sort((a, b) => a - b);
  execLat.sort((a, b) => a - b);

  // 2. Proxied files_read against a direct MCP files_read.
  const gapFor = async (calls) => {
    const name = `batch${calls}-${n++}`;
    // The model "thinks" until the pool has its runtime back, so refilling it does not share the CPUs with the calls measured.
    fake.scripts.set(name, async (c) => (c.step === 0 ? (await poolReady(), { calls: Array.from({ length: calls }, () => ({ name: 'files_read', args: { path: 'README.md' } })) }) : { text: 'done' }));
    const a = await spawnAgent(name);
    await waitEnd(a.agentId);
    const reqs = fake.requests.filter((q) => q.script === name);
    return reqs[1].at - reqs[0].at;
  };
  const perCall = [];
  for (let r = 0; r < ROUNDS; r++) {
    const one = await gapFor(1);
    const many = await gapFor(K);
    perCall.push((many - one) / (K - 1));
  }
  perCall.sort((a, b) => a - b);
  const direct = [];
  for (let i = 0; i < DIRECT + 10; i++) {
    const t0 = performance.now();
    await callTool('files_read', { workspaceId: ws, path: 'README.md' });
    if (i >= 10) direct.push(performance.now() - t0);
  }
  direct.sort((a, b) => a - b);
  await client.close();

  const f = (x) => `${x.toFixed(2)} ms`;
  const met = (ok) => (ok ? 'goal MET' : 'goal NOT met');
  const spawnP50 = pct(spawnLat, 50);
  const overhead = pct(perCall, 50) - pct(direct, 50);
  console.log(`bench/agents (node ${process.versions.node}${smoke ? ', smoke' : ''})`);
  console.log(`spawn to first provider request, pool ready (${spawnLat.length} spawns): p50 ${f(spawnP50)}  p99 ${f(pct(spawnLat, 99))}   goal p50 < 150 ms: ${met(spawnP50 < 150)}`);
  console.log(`  baseline: MCP exec_run true (${execLat.length} calls):       p50 ${f(pct(execLat, 50))}  p99 ${f(pct(execLat, 99))}   ratio ${(spawnP50 / pct(execLat, 50)).toFixed(2)}x`);
  console.log(`  for information, pool empty (runtime starting on demand, ${coldLat.length} spawns): p50 ${f(pct(coldLat, 50))}  p99 ${f(pct(coldLat, 99))}   ratio ${(pct(coldLat, 50) / pct(execLat, 50)).toFixed(2)}x`);
  console.log(`proxied files_read per call (${perCall.length} rounds of ${K} vs 1): p50 ${f(pct(perCall, 50))}`);
  console.log(`  baseline: direct MCP files_read (${direct.length} calls):   p50 ${f(pct(direct, 50))}  p99 ${f(pct(direct, 99))}`);
  console.log(`  overhead of a proxied call over a direct MCP call:          p50 ${f(overhead)}   goal < 2 ms: ${met(overhead < 2)}`);
  console.log('RESULT ' + JSON.stringify({ spawnP50, spawnGoalMet: spawnP50 < 150, coldSpawnP50: pct(coldLat, 50), execP50: pct(execLat, 50), proxiedP50: pct(perCall, 50), directP50: pct(direct, 50), overheadP50: overhead, overheadGoalMet: overhead < 2 }));
} catch (e) {
  console.error(e);
  status = 1;
} finally {
  proc.kill('SIGTERM');
  await new Promise((r) => proc.once('exit', r));
  try {
    execFileSync('sh', ['-c', `for m in $(awk '{print $2}' /proc/mounts | grep '^${dataDir}/'); do umount -l "$m"; done`]);
  } catch {
    // nothing mounted
  }
  rmSync(dataDir, { recursive: true, force: true });
  await fake.close();
  await host.close();
}
process.exit(status);
