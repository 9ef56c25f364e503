// bench/surface (issue #45, "Goals"): what an agent pays to see the tools. Starts `atelier serve`,
// lists the tools with the official v2 client (2026-07-28) as an unnarrowed owner token, as each
// preset (X-MCP-Toolsets) and in the dynamic mode's starting list, and counts the tokens of the
// tools/list result with a real tokenizer (gpt-tokenizer: o200k_base, the goal's unit; cl100k_base
// printed beside it). Beside each figure, the same count of the baseline in the same run: the
// tools/list of b0b0429 (the last commit before issue #45's work), kept in
// bench/data/surface-baseline.json because building an old tree here would take a minute.
// Every figure is printed with its goal and met / NOT met; the bench never fails on a goal.
//
//   node bench/surface.mjs            the figures, and the 15 largest tools
//   node bench/surface.mjs --smoke    the same figures (the suite: test/e2e/bench-smoke.test.ts)
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { encode as o200k } from 'gpt-tokenizer/encoding/o200k_base';
import { encode as cl100k } from 'gpt-tokenizer/encoding/cl100k_base';
import { ROOT, SMOKE, startAtelier } from './lib.mjs';

const { PRESETS, TOOLSETS } = await import(join(ROOT, 'dist/core/toolsets.js'));
const { CATALOG } = await import(join(ROOT, 'dist/tools/index.js'));
const GOALS = { full: 24_000, largest: 2_000, code: 8_000, dynamic: 6_000 };

const tokens = (tools, enc = o200k) => enc(JSON.stringify({ tools })).length;
const verdict = (n, goal) => `goal <= ${goal}: ${n <= goal ? 'met' : 'NOT met'}`;
const ratio = (a, b) => `${(a / b).toFixed(2)}x`;

const baseline = JSON.parse(readFileSync(join(ROOT, 'bench/data/surface-baseline.json'), 'utf8'));
const domainOf = new Map(CATALOG.map((d) => [d.name, d.domain]));
const toolsetOf = (name) => Object.keys(TOOLSETS).find((t) => TOOLSETS[t] === domainOf.get(name));
const inToolsets = (tools, sets) => tools.filter((t) => sets.includes(toolsetOf(t.name)));

const svc = await startAtelier();
const list = async (headers = {}) => {
  const client = new Client({ name: 'bench-surface', version: '1' });
  await client.connect(new StreamableHTTPClientTransport(new URL(svc.mcpUrl), { requestInit: { headers: { authorization: `Bearer ${svc.token}`, ...headers } } }));
  try {
    const tools = [];
    let cursor;
    do {
      const page = await client.listTools(cursor ? { cursor } : {});
      tools.push(...page.tools);
      cursor = page.nextCursor;
    } while (cursor);
    return tools;
  } finally {
    await client.close();
  }
};

try {
  const full = await list();
  const base = baseline.tools;
  const line = (label, now, then, goal) =>
    console.log(`${label}: ${now.length} tools, ${tokens(now)} tokens (cl100k ${tokens(now, cl100k)}), ${JSON.stringify({ tools: now }).length} bytes; baseline ${baseline.revision}: ${then.length} tools, ${tokens(then)} tokens, ratio ${ratio(tokens(now), tokens(then))}${goal ? `; ${verdict(tokens(now), goal)}` : ''}`);
  line('full surface (unnarrowed token)', full, base, GOALS.full);

  const sized = (tools) => tools.map((t) => ({ name: t.name, n: o200k(JSON.stringify(t)).length })).sort((a, b) => b.n - a.n);
  const now = sized(full);
  const then = sized(base);
  console.log(`largest tool: ${now[0].name} ${now[0].n} tokens; baseline ${then[0].name} ${then[0].n} tokens; ${verdict(now[0].n, GOALS.largest)}`);

  for (const [name, sets] of Object.entries(PRESETS)) {
    if (name === 'all') continue;
    const got = await list({ 'x-mcp-toolsets': name });
    line(`preset ${name}`, got, inToolsets(base, sets), name === 'code' ? GOALS.code : undefined);
  }

  // The dynamic mode's starting list (issue #45 item 2), where this build has it.
  const dynamic = await list({ 'x-mcp-dynamic-toolsets': 'true' }).catch((e) => (console.log(`dynamic mode: not available (${e.message})`), null));
  if (dynamic && dynamic.length < full.length) {
    console.log(`dynamic mode starting list: ${dynamic.length} tools, ${tokens(dynamic)} tokens, ${verdict(tokens(dynamic), GOALS.dynamic)}; the rest (${full.length - dynamic.length} tools) one discovery call away`);
  } else if (dynamic) console.log(`dynamic mode: not available (the header listed all ${dynamic.length} tools)`);

  // Where the tokens go: descriptions (the tool's and its parameters') against the schema's structure.
  const strip = (n) => (Array.isArray(n) ? n.map(strip) : n && typeof n === 'object' ? Object.fromEntries(Object.entries(n).filter(([k, v]) => !(k === 'description' && typeof v === 'string')).map(([k, v]) => [k, k === 'properties' ? Object.fromEntries(Object.entries(v).map(([p, s]) => [p, strip(s)])) : strip(v)])) : n);
  const bare = (tools) => tokens(tools.map((t) => ({ ...t, description: '', inputSchema: strip(t.inputSchema) })));
  console.log(`descriptions: ${tokens(full) - bare(full)} tokens (baseline ${tokens(base) - bare(base)}); structure, names and annotations: ${bare(full)} tokens (baseline ${bare(base)})`);
  if (!SMOKE) for (const t of now.slice(0, 15)) console.log(`  ${String(t.n).padStart(5)} ${t.name} (baseline ${then.find((b) => b.name === t.name)?.n ?? '-'})`);
} finally {
  await svc.stop();
}
