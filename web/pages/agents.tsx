import { useState } from 'preact/hooks';
import { Action, api, ApiError, Badge, Empty, ErrorBox, Section, usd, usePoll, when } from '../lib';

/** Agents that can still change (docs/agents.md): the owner may cancel them. */
const LIVE = new Set(['SPAWNING', 'RUNNING', 'CANCELLING']);
const OK = new Set(['SUCCEEDED']);
const BAD = new Set(['FAILED', 'LIMIT_EXCEEDED', 'TIMED_OUT', 'INTERRUPTED']);

function kindOf(status: string): 'info' | 'ok' | 'bad' | 'muted' {
  return LIVE.has(status) ? 'info' : OK.has(status) ? 'ok' : BAD.has(status) ? 'bad' : 'muted';
}

/** "used of budget" for one budget of GET /api/v1/agents (docs/rest.md, "Agents"). */
function Budget(p: { label: string; b?: { budget: number; used?: number; elapsedSeconds?: number }; money?: boolean }) {
  if (!p.b) return null;
  const used = p.b.used ?? p.b.elapsedSeconds ?? 0;
  const fmt = (n: number) => (p.money ? usd(n) : n.toLocaleString('en'));
  const pct = p.b.budget > 0 ? Math.min(100, Math.round((used / p.b.budget) * 100)) : 0;
  return (
    <span class="small" title={`${pct}% used`}>
      {p.label} {fmt(used)} / {fmt(p.b.budget)}
    </span>
  );
}

/** The log's tail, fetched only while open (a page fires few requests per refresh). */
function LogTail(p: { id: string; live: boolean }) {
  const { data, error } = usePoll(() => api('GET', `/agents/${p.id}/log?limitBytes=4096`), p.live ? 5_000 : null, [p.id]);
  if (error) return <ErrorBox error={error} />;
  if (!data) return <p class="muted small">Loading the log…</p>;
  return <pre class="small" data-testid={`log-${p.id}`}>{String(data.tail || '(empty)')}</pre>;
}

function Tree(p: { all: any[]; parent: string | null; reload: () => Promise<void> }) {
  const [open, setOpen] = useState<string | null>(null);
  const kids = p.all.filter((a) => (a.parentAgentId ?? null) === p.parent);
  if (kids.length === 0) return null;
  return (
    <ul class="tree">
      {kids.map((a) => (
        <li data-agent={a.agentId}>
          <div class="item-h">
            <strong>{a.agentId}</strong> <Badge kind={kindOf(a.status)}>{a.status}</Badge>{' '}
            <span class="muted small">
              profile {a.profileId} rev {a.revision} · {a.model} · spent {usd(a.spend?.totalMicros ?? 0)} · started {when(a.createdAt)}
              {a.endedAt ? ` · ended ${when(a.endedAt)}` : ''}
            </span>{' '}
            <button type="button" class="link" onClick={() => setOpen(open === a.agentId ? null : a.agentId)}>
              {open === a.agentId ? 'Hide log' : 'Log tail'}
            </button>{' '}
            {LIVE.has(a.status) && a.status !== 'CANCELLING' ? (
              <Action label="Cancel" kind="danger" confirm={`Cancel agent ${a.agentId} and its children?`} run={async () => (await api('POST', `/agents/${a.agentId}/cancel`, { reason: 'cancelled by the owner on the dashboard' }), p.reload())} />
            ) : null}
          </div>
          <div class="budgets muted">
            <Budget label="cost" b={a.budgets?.maxCostMicros} money /> · <Budget label="input tokens" b={a.budgets?.maxInputTokens} /> ·{' '}
            <Budget label="output tokens" b={a.budgets?.maxOutputTokens} /> · <Budget label="log bytes" b={a.budgets?.maxOutputBytes} /> ·{' '}
            <Budget label="seconds" b={a.budgets?.ttlSeconds} />
          </div>
          {a.endReason ? <p class="small muted">{a.endReason}</p> : null}
          {a.summary ? <p class="small">{a.summary}</p> : null}
          {open === a.agentId ? <LogTail id={a.agentId} live={LIVE.has(a.status)} /> : null}
          <Tree all={p.all} parent={a.agentId} reload={p.reload} />
        </li>
      ))}
    </ul>
  );
}

export function Agents() {
  const { data, error, reload } = usePoll(
    async () => {
      try {
        return await api('GET', '/agents');
      } catch (e) {
        if (e instanceof ApiError && (e.status === 404 || e.body.code === 'NOT_IMPLEMENTED')) return { unavailable: true };
        throw e;
      }
    },
    5_000,
  );
  if (!data) return error ? <ErrorBox error={error} /> : <p class="muted">Loading…</p>;
  if (data.unavailable)
    return (
      <Section title="Agents">
        <Empty>Agents are not available in this build.</Empty>
      </Section>
    );
  const all = (data.agents as any[]) ?? [];
  const ids = new Set(all.map((a) => a.agentId));
  // Agents whose parent is not listed (cut by the limit) show as roots.
  const shown = all.map((a) => (a.parentAgentId && !ids.has(a.parentAgentId) ? { ...a, parentAgentId: null } : a));
  const live = all.filter((a) => LIVE.has(a.status)).length;
  return (
    <Section title={`Agents (${all.length}, ${live} running)`}>
      {all.length === 0 ? <Empty>No agents.</Empty> : null}
      <Tree all={shown} parent={null} reload={reload} />
    </Section>
  );
}
