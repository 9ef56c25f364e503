// bench/telemetry: what tracing costs (issue #35 item 4: "off with no cost when not").
//
// 1. Off, in process: the tracing helpers one tool call goes through (the call's span, seven
//    registry steps, extractContext) with tracing off, against the bare function they wrap: the
//    added nanoseconds per call. Goal: under 1 µs per call (a trivial tool call costs hundreds of µs
//    of service CPU), i.e. nothing measurable.
// 2. Through the real service: the service CPU per trivial tool call (workspace_list) of a service
//    without an OTLP endpoint (off: no SDK loaded) and of one sending to a loopback OTLP sink (on),
//    interleaved; the on/off ratio is printed (no goal: on is a choice).
import { createServer } from 'node:http';
import { join } from 'node:path';
import { ROOT, SMOKE, count, cpuPerCall, cpuText, fmt, measure, startAtelier } from './lib.mjs';

const tracing = await import(join(ROOT, 'dist/telemetry/tracing.js'));
if (tracing.tracingEnabled()) throw new Error('tracing must be off in the bench process');

// ---------- 1. the helpers, off ----------
const N = count(1_000_000, 20_000);
let sink = 0;
const work = () => {
  sink++;
  return sink;
};
const bare = async () => work();
const traced = async () =>
  tracing.inSpan('tools/call x', { parent: tracing.extractContext([undefined]), attributes: { 'gen_ai.tool.name': 'x' } }, async (span) => {
    tracing.stepSpan('registry.access', work);
    tracing.stepSpan('registry.parse', work);
    tracing.stepSpan('registry.resolve', work);
    await tracing.inSpan('registry.run', {}, work);
    tracing.stepSpan('registry.redact', work);
    tracing.stepSpan('registry.audit', work);
    tracing.setAttrs(span, { 'atelier.outcome': 'ok' });
    tracing.failSpan(span, null, 'ok');
    return work();
  });
// The bare side does the same number of function calls and awaits, without the helpers.
const plain = async () => {
  work();
  work();
  work();
  await bare();
  work();
  work();
  return work();
};
async function perCallNs(fn) {
  for (let i = 0; i < Math.min(N, 50_000); i++) await fn();
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < N; i++) await fn();
  return Number(process.hrtime.bigint() - t0) / N;
}
// Interleaved rounds; the least of each side (the machine is shared).
const rounds = SMOKE ? 1 : 3;
let offNs = Infinity;
let plainNs = Infinity;
for (let r = 0; r < rounds; r++) {
  plainNs = Math.min(plainNs, await perCallNs(plain));
  offNs = Math.min(offNs, await perCallNs(traced));
}
const added = Math.max(0, offNs - plainNs);
console.log(`bench/telemetry: node ${process.versions.node}${SMOKE ? ' (smoke counts: not a measurement)' : ''}`);
console.log(`tracing off, helpers of one call: ${offNs.toFixed(0)} ns vs the bare calls ${plainNs.toFixed(0)} ns: added ${added.toFixed(0)} ns per call (${N} calls)`);
console.log(`goal: tracing off adds under 1 us per call: ${(added / 1000).toFixed(3)} us  ${added < 1000 ? 'met' : 'NOT met'}`);

// ---------- 2. the real service, off and on ----------
let spans = 0;
const collector = createServer((req, res) => {
  let b = '';
  req.on('data', (d) => (b += d));
  req.on('end', () => {
    try {
      for (const rs of JSON.parse(b).resourceSpans ?? []) for (const ss of rs.scopeSpans ?? []) spans += (ss.spans ?? []).length;
    } catch {
      /* counted as nothing */
    }
    res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
  });
});
await new Promise((r) => collector.listen(0, '127.0.0.1', r));
const off = await startAtelier();
const on = await startAtelier(['--otlp-traces-endpoint', `http://127.0.0.1:${collector.address().port}/v1/traces`]);
const caller = (svc) => {
  let id = 0;
  const headers = { authorization: `Bearer ${svc.token}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-06-18' };
  return async () => {
    const r = await fetch(svc.mcpUrl, { method: 'POST', headers, body: JSON.stringify({ jsonrpc: '2.0', id: ++id, method: 'tools/call', params: { name: 'workspace_list', arguments: {} } }) });
    const t = await r.text();
    if (!t.includes('"result"')) throw new Error(`unexpected answer: ${t.slice(0, 200)}`);
  };
};
const callOff = caller(off);
const callOn = caller(on);
const CALLS = count(2000, 30);
const cpu = { off: [], on: [] };
const lat = { off: [], on: [] };
for (let r = 0; r < (SMOKE ? 1 : 4); r++) {
  cpu.off.push(await cpuPerCall(off.pid, CALLS, callOff));
  cpu.on.push(await cpuPerCall(on.pid, CALLS, callOn));
  lat.off.push((await measure(callOff, { total: CALLS, concurrency: 1 })).p50);
  lat.on.push((await measure(callOn, { total: CALLS, concurrency: 1 })).p50);
}
const best = (xs) => xs.reduce((a, b) => (b.total < a.total ? b : a));
const minOf = (xs) => Math.min(...xs);
const cOff = best(cpu.off);
const cOn = best(cpu.on);
console.log(`service CPU per workspace_list call: tracing off ${cpuText(cOff)}; on ${cpuText(cOn)}; ratio on/off ${(cOn.total / Math.max(1, cOff.total)).toFixed(2)}x (no goal)`);
console.log(`c1 latency p50: tracing off ${fmt(minOf(lat.off))}, on ${fmt(minOf(lat.on))}; ratio ${(minOf(lat.on) / minOf(lat.off)).toFixed(2)}x (no goal)`);
// The on service's spans reach the sink (batched: give it its flush at stop).
await on.stop();
await off.stop();
console.log(`spans received from the traced service: ${spans}`);
collector.close();
if (spans === 0) {
  console.error('the traced service sent no spans');
  process.exit(1);
}
