import { Action, api, ApiError, Badge, Empty, ErrorBox, Section, usd, usePoll, when } from '../lib';

function Tree(p: { all: any[]; parent: string | null; reload: () => Promise<void> }) {
  const kids = p.all.filter((a) => (a.parentAgentId ?? null) === p.parent);
  if (kids.length === 0) return null;
  return (
    <ul class="tree">
      {kids.map((a) => (
        <li>
          <div class="item-h">
            <strong>{a.id}</strong> <Badge kind={a.status === 'running' ? 'info' : a.status === 'failed' ? 'bad' : a.status === 'succeeded' || a.status === 'completed' ? 'ok' : 'muted'}>{a.status}</Badge>{' '}
            <span class="muted small">
              profile {a.profileId ?? '—'} · spent {usd(a.spend?.totalMicros ?? a.spend?.spentMicros ?? (typeof a.spend === 'number' ? a.spend : 0))}
              {a.budgets?.maxCostMicros ? ` of ${usd(a.budgets.maxCostMicros)}` : ''} · started {when(a.createdAt)}
            </span>{' '}
            {a.status === 'running' || a.status === 'queued' ? <Action label="Cancel" kind="danger" confirm={`Cancel agent ${a.id} and its children?`} run={async () => (await api('POST', `/agents/${a.id}/cancel`), p.reload())} /> : null}
          </div>
          {a.logTail ? <pre class="small">{Array.isArray(a.logTail) ? a.logTail.join('\n') : String(a.logTail)}</pre> : null}
          <Tree all={p.all} parent={a.id} reload={p.reload} />
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
        if (e instanceof ApiError && (e.status === 404 || e.body.code === 'NOT_IMPLEMENTED' || e.body.code === 'NOT_FOUND')) return { unavailable: true };
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
  const ids = new Set(all.map((a) => a.id));
  const roots = all.filter((a) => !a.parentAgentId || !ids.has(a.parentAgentId));
  return (
    <Section title={`Agents (${all.length})`}>
      {all.length === 0 ? <Empty>No agents.</Empty> : null}
      <Tree all={roots.map((r) => ({ ...r, parentAgentId: null })).concat(all.filter((a) => !roots.includes(a)))} parent={null} reload={reload} />
    </Section>
  );
}
