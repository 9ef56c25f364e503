/**
 * `/metrics` on prom-client (issue #35 item 5). Every name here is stable and listed in
 * docs/operations.md "Metrics"; a rename is a breaking change.
 *
 * One registry per process (the tool-call counters are fed by the registry pipeline, which has no
 * handle on the server); the gauges read the application when scraped (collect callbacks), so they
 * cost nothing between scrapes. registerGauge() is the hook other parts use to add a gauge read at
 * scrape time (the backups' atelier_backup_age_seconds).
 */
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';

export const registry = new Registry();
collectDefaultMetrics({ register: registry });

/** Seconds: 1 ms to 10 min (a git network operation may take minutes). */
const CALL_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600];

const toolCalls = new Counter({ name: 'atelier_tool_calls_total', help: 'MCP tool calls by tool and outcome (ok, or the error code)', labelNames: ['tool', 'outcome'] as const, registers: [registry] });
const toolDuration = new Histogram({ name: 'atelier_tool_call_duration_seconds', help: 'MCP tool call latency by tool and outcome, seconds', labelNames: ['tool', 'outcome'] as const, buckets: CALL_BUCKETS, registers: [registry] });

/** Counts one tool call (every call the registry pipeline answers: MCP clients, tasks and agents alike). */
export function recordToolCall(tool: string, outcome: string, seconds: number): void {
  toolCalls.inc({ tool, outcome });
  toolDuration.observe({ tool, outcome }, seconds);
}

export interface GaugeHook {
  name: string;
  help: string;
  labelNames?: string[];
  /** Read at each scrape: a number, labelled values, or null (the gauge is then absent from that scrape). */
  collect: () => number | null | Array<{ labels: Record<string, string>; value: number }> | Promise<number | null | Array<{ labels: Record<string, string>; value: number }>>;
}

/**
 * Registers a gauge read at scrape time, e.g. registerGauge({ name: 'atelier_backup_age_seconds',
 * help: 'Seconds since the last good backup', collect: () => backups.ageSeconds() }). A second
 * registration of one name replaces the first.
 */
export function registerGauge(hook: GaugeHook): void {
  if (!/^atelier_[a-z0-9_]+$/.test(hook.name)) throw new Error(`registerGauge: ${hook.name} must match atelier_[a-z0-9_]+`);
  registry.removeSingleMetric(hook.name);
  let absent = false;
  const gauge = new Gauge({
    name: hook.name,
    help: hook.help,
    labelNames: hook.labelNames ?? [],
    registers: [registry],
    async collect() {
      this.reset();
      const v = await hook.collect();
      absent = v === null;
      if (v === null) return;
      if (typeof v === 'number') this.set(v);
      else for (const { labels, value } of v) this.set(labels, value);
    },
  });
  // null: no sample at all (an unlabelled prom-client gauge would otherwise read 0, which a "no backup yet" must not).
  const get = gauge.get.bind(gauge);
  gauge.get = async () => {
    const m = await get();
    return absent ? { ...m, values: [] } : m;
  };
}

/** A counter whose values another module keeps (read at scrape time; TYPE counter). */
export function registerCounterView(name: string, help: string, labelNames: string[], read: () => Array<{ labels: Record<string, string>; value: number }>): void {
  registry.removeSingleMetric(name);
  new Counter({
    name,
    help,
    labelNames,
    registers: [registry],
    collect() {
      this.reset();
      for (const { labels, value } of read()) this.inc(labels, value);
    },
  });
}

/** The text of /metrics and its content type. */
export async function renderMetrics(): Promise<{ contentType: string; text: string }> {
  return { contentType: registry.contentType, text: await registry.metrics() };
}
