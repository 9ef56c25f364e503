import { useEffect, useRef, useState } from 'preact/hooks';
import uPlot from 'uplot';
import { api, ErrorBox, formValues, Section, usd, usePoll } from '../lib';
import { Meter } from './overview';

const COLORS = ['#3b6fd8', '#e08a1e', '#2e9d6a', '#b8489b', '#7a5cd6', '#c94c4c', '#3aa0b5', '#8a8f2a'];

interface Row {
  bucket: string;
  profileId: string | null;
  agentId: string | null;
  settledMicros: number;
  reservedMicros: number;
  unreconciledMicros: number;
}

function bucketTime(b: string): number {
  return Date.parse(b.length === 7 ? `${b}-01T00:00:00Z` : `${b}T00:00:00Z`) / 1000;
}

/** Stacked bars of total spend (settled + reserved + unreconciled) per bucket, one colour per group. */
function Chart(p: { buckets: string[]; rows: Row[]; by: 'profileId' | 'agentId'; title: string }) {
  const el = useRef<HTMLDivElement>(null);
  useEffect(() => {
    if (!el.current) return;
    const groups = [...new Set(p.rows.map((r) => r[p.by] ?? '(none)'))].sort();
    const per = groups.map((g) =>
      p.buckets.map((b) => p.rows.filter((r) => r.bucket === b && (r[p.by] ?? '(none)') === g).reduce((s, r) => s + r.settledMicros + r.reservedMicros + r.unreconciledMicros, 0) / 1e6),
    );
    // Cumulative sums; drawn largest first so each group shows as its own band.
    const cum = per.map((_, i) => p.buckets.map((__, j) => (per[i]![j]! === 0 ? null : per.slice(0, i + 1).reduce((s, a) => s + a[j]!, 0))));
    const order = groups.map((_, i) => i).reverse();
    const width = Math.max(280, el.current.clientWidth);
    const bars = uPlot.paths.bars!({ size: [0.7, 40], align: 0 });
    const opts: uPlot.Options = {
      width,
      height: 220,
      legend: { show: true, live: false },
      scales: { x: { time: true }, y: { range: (_u, _min, max) => [0, max > 0 ? max * 1.15 : 0.01] } },
      axes: [
        { stroke: 'currentColor', grid: { stroke: '#8881', width: 1 }, ticks: { show: false } },
        {
          stroke: 'currentColor',
          grid: { stroke: '#8882', width: 1 },
          ticks: { show: false },
          size: 64,
          values: (_u, v) => {
            const step = v.length > 1 ? Math.abs(v[1]! - v[0]!) : 1;
            const dec = Math.min(6, Math.max(0, -Math.floor(Math.log10(step || 1))));
            return v.map((x) => (x === 0 ? '$0' : `$${x.toFixed(dec)}`));
          },
        },
      ],
      series: [
        { value: (_u, v) => (v === null ? '' : new Date(v * 1000).toISOString().slice(0, p.buckets[0]!.length)) },
        ...order.map((i) => ({
          label: groups[i]!,
          stroke: COLORS[i % COLORS.length],
          fill: COLORS[i % COLORS.length] + 'cc',
          paths: bars,
          points: { show: false },
          value: (_u: uPlot, _v: number | null, _s: number, idx: number | null) => (idx === null ? '' : `$${per[i]![idx]!.toFixed(4)}`),
        })),
      ],
    };
    const data = [p.buckets.map(bucketTime), ...order.map((i) => cum[i]!)] as uPlot.AlignedData;
    if (groups.length === 0) {
      opts.series = [opts.series[0]!, { label: 'no spend', stroke: '#999', paths: bars, points: { show: false } }];
      (data as unknown[]).push(p.buckets.map(() => null));
    }
    const u = new uPlot(opts, data, el.current);
    const onResize = () => u.setSize({ width: Math.max(280, el.current!.clientWidth), height: 220 });
    addEventListener('resize', onResize);
    return () => {
      removeEventListener('resize', onResize);
      u.destroy();
    };
  }, [JSON.stringify(p.rows), p.by, p.buckets.join()]);
  return (
    <figure class="chart">
      <figcaption>{p.title}</figcaption>
      <div ref={el} />
    </figure>
  );
}

function Totals(p: { rows: Row[]; by: 'profileId' | 'agentId' }) {
  const groups = [...new Set(p.rows.map((r) => r[p.by] ?? '(none)'))].sort();
  const sum = (g: string | null, k: 'settledMicros' | 'reservedMicros' | 'unreconciledMicros') => p.rows.filter((r) => g === null || (r[p.by] ?? '(none)') === g).reduce((s, r) => s + r[k], 0);
  return (
    <div class="table-wrap">
      <table>
        <thead>
          <tr>
            <th>{p.by === 'profileId' ? 'profile' : 'agent'}</th>
            <th class="num">settled</th>
            <th class="num">reserved (in flight)</th>
            <th class="num">unreconciled</th>
          </tr>
        </thead>
        <tbody>
          {groups.map((g) => (
            <tr>
              <td>
                <code>{g}</code>
              </td>
              <td class="num">{usd(sum(g, 'settledMicros'))}</td>
              <td class="num">{usd(sum(g, 'reservedMicros'))}</td>
              <td class="num">{usd(sum(g, 'unreconciledMicros'))}</td>
            </tr>
          ))}
          <tr class="total">
            <td>all</td>
            <td class="num">{usd(sum(null, 'settledMicros'))}</td>
            <td class="num">{usd(sum(null, 'reservedMicros'))}</td>
            <td class="num">{usd(sum(null, 'unreconciledMicros'))}</td>
          </tr>
        </tbody>
      </table>
    </div>
  );
}

const toMicros = (s: string) => (s.trim() === '' ? null : Math.round(Number(s) * 1e6));
const fromMicros = (m: number | null) => (m === null ? '' : String(m / 1e6));

function Policies(p: { policies: any; reload: () => Promise<void> }) {
  const [err, setErr] = useState<unknown>(null);
  const [saved, setSaved] = useState<any>(null);
  return (
    <form
      class="inline"
      data-testid="policies"
      onSubmit={async (e) => {
        const v = formValues(e);
        const body: Record<string, number | null> = {};
        for (const k of ['dailyCapMicros', 'monthlyCapMicros', 'perAgentCapMicros']) {
          const m = toMicros(v[k] ?? '');
          if (m !== null && (!Number.isFinite(m) || m < 0)) return setErr(new Error(`${k}: must be an amount in USD, or empty for no cap`));
          body[k] = m;
        }
        try {
          const r = await api('PUT', '/spend-policies', body);
          setSaved(r.gatewayPush);
          setErr(null);
          await p.reload();
        } catch (x) {
          setErr(x);
        }
      }}
    >
      <label>
        Daily cap (USD) <input name="dailyCapMicros" inputMode="decimal" defaultValue={fromMicros(p.policies.dailyCapMicros)} placeholder="no cap" />
      </label>
      <label>
        Monthly cap (USD) <input name="monthlyCapMicros" inputMode="decimal" defaultValue={fromMicros(p.policies.monthlyCapMicros)} placeholder="no cap" />
      </label>
      <label>
        Per-agent cap (USD) <input name="perAgentCapMicros" inputMode="decimal" defaultValue={fromMicros(p.policies.perAgentCapMicros)} placeholder="no cap" />
      </label>
      <button class="primary">Save policies</button>
      {saved ? <span class="small">{saved.ok ? 'Saved and pushed to the gateway.' : `Saved; the gateway push failed: ${saved.error}`}</span> : null}
      <ErrorBox error={err} />
    </form>
  );
}

export function Spend() {
  const [by, setBy] = useState<'profileId' | 'agentId'>('profileId');
  const { data, error, reload } = usePoll(async () => {
    const [summary, month, year] = await Promise.all([api('GET', '/model-spend'), api('GET', '/spend-series?range=month'), api('GET', '/spend-series?range=year')]);
    return { summary, month, year };
  }, 15_000);
  if (!data) return error ? <ErrorBox error={error} /> : <p class="muted">Loading…</p>;
  const day = data.summary.windows.find((w: any) => w.period === 'day');
  const month = data.summary.windows.find((w: any) => w.period === 'month');
  return (
    <div class="stack">
      <p class="notice info small">{data.summary.note} Settled is what finished requests cost; reserved is held for requests still in flight; unreconciled is what could not be settled (counted at its reserved worst case).</p>
      <div class="grid">
        <Section title="Today">{day ? <Meter win={day} label={`${day.key} (UTC)`} /> : null}</Section>
        <Section title="This month">{month ? <Meter win={month} label={month.key} /> : null}</Section>
      </div>
      <Section title="Policies">
        <Policies policies={data.summary.policies} reload={reload} />
      </Section>
      <Section
        title="Over time"
        actions={
          <div class="seg" role="group" aria-label="Split by">
            <button type="button" class={by === 'profileId' ? 'on' : ''} onClick={() => setBy('profileId')}>
              by profile
            </button>
            <button type="button" class={by === 'agentId' ? 'on' : ''} onClick={() => setBy('agentId')}>
              by agent
            </button>
          </div>
        }
      >
        <Chart buckets={data.month.buckets} rows={data.month.rows} by={by} title={`Per UTC day, ${data.month.key}`} />
        <Totals rows={data.month.rows} by={by} />
        <Chart buckets={data.year.buckets} rows={data.year.rows} by={by} title={`Per month, ${data.year.key}`} />
        <Totals rows={data.year.rows} by={by} />
      </Section>
    </div>
  );
}
