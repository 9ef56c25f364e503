// bench/mcp-overhead: round trip of a trivial read-only MCP tool call through the real service,
// beside a bare node:http JSON echo, in the same run, at concurrency 1 and 32.
// Both sides are driven the same way (HTTP POST of a JSON-RPC body over keep-alive), so the
// ratio is what the MCP stack (auth, SDK dispatch, validation, registry, envelope) adds.
// The official v2 client's round trip is printed too, for what a real client sees.
import { createServer } from 'node:http';
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { count, fmt, measure, startAtelier } from './lib.mjs';

const TOOL = process.env.BENCH_TOOL ?? 'workspace_list';
const N = Number(process.env.BENCH_N ?? count(2000, 20));

const echo = createServer((req, res) => {
  let b = '';
  req.on('data', (d) => (b += d));
  req.on('end', () => {
    const msg = JSON.parse(b);
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ jsonrpc: '2.0', id: msg.id, result: { content: [{ type: 'text', text: '{}' }], structuredContent: {} } }));
  });
});
await new Promise((r) => echo.listen(0, '127.0.0.1', r));
const echoUrl = `http://127.0.0.1:${echo.address().port}/`;
const svc = await startAtelier();

let id = 0;
const body = () => JSON.stringify({ jsonrpc: '2.0', id: ++id, method: 'tools/call', params: { name: TOOL, arguments: {} } });
const mcpHeaders = { authorization: `Bearer ${svc.token}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-06-18' };
const mcpCall = async () => {
  const r = await fetch(svc.mcpUrl, { method: 'POST', headers: mcpHeaders, body: body() });
  const t = await r.text();
  if (!t.includes('"result"')) throw new Error(`unexpected answer: ${t.slice(0, 200)}`);
};
const echoCall = async () => {
  const r = await fetch(echoUrl, { method: 'POST', headers: { 'content-type': 'application/json' }, body: body() });
  await r.text();
};

const client = new Client({ name: 'bench', version: '1' });
await client.connect(new StreamableHTTPClientTransport(new URL(svc.mcpUrl), { requestInit: { headers: { authorization: `Bearer ${svc.token}` } } }));
const sdkCall = async () => {
  await client.callTool({ name: TOOL, arguments: {} });
};

console.log(`bench/mcp-overhead: tool ${TOOL}, ${N} calls per case, node ${process.versions.node}`);
for (const concurrency of [1, 32]) {
  const base = await measure(echoCall, { total: N, concurrency });
  const mcp = await measure(mcpCall, { total: N, concurrency });
  const sdk = await measure(sdkCall, { total: N, concurrency });
  console.log(`concurrency ${concurrency}:`);
  console.log(`  bare node:http echo   p50 ${fmt(base.p50)}  p99 ${fmt(base.p99)}  ${base.rps.toFixed(0)} req/s`);
  console.log(`  atelier MCP (HTTP)    p50 ${fmt(mcp.p50)}  p99 ${fmt(mcp.p99)}  ${mcp.rps.toFixed(0)} req/s  ratio p50 ${(mcp.p50 / base.p50).toFixed(2)}x  p99 ${(mcp.p99 / base.p99).toFixed(2)}x`);
  console.log(`  atelier MCP (v2 SDK)  p50 ${fmt(sdk.p50)}  p99 ${fmt(sdk.p99)}  ${sdk.rps.toFixed(0)} req/s  ratio p50 ${(sdk.p50 / base.p50).toFixed(2)}x  p99 ${(sdk.p99 / base.p99).toFixed(2)}x`);
}
await client.close();
await svc.stop();
echo.close();
