import { Action, api, Badge, Empty, ErrorBox, Section, usePoll, when } from '../lib';
import { CheckpointsAndForks } from './checkpoints';
import { LanguageServers } from './code-servers';

export function Workspaces() {
  const { data, error, reload } = usePoll(() => api('GET', '/workspaces?limit=100'), 10_000);
  if (!data) return error ? <ErrorBox error={error} /> : <p class="muted">Loading…</p>;
  const list = data.workspaces as any[];
  return (
    <>
    <Section title={`Open workspaces (${list.length})`}>
      {list.length === 0 ? <Empty>No open workspaces.</Empty> : null}
      <div class="table-wrap">
        <table class="stacked">
          <thead>
            <tr>
              <th>workspace</th>
              <th>state</th>
              <th>repository</th>
              <th>branch</th>
              <th>lease ends</th>
              <th>hard expiry</th>
              <th />
            </tr>
          </thead>
          <tbody>
            {list.map((w) => (
              <tr>
                <td>
                  <code>{w.workspaceId}</code>
                </td>
                <td>
                  <Badge kind={w.state === 'active' ? 'ok' : w.state === 'expired_recoverable' ? 'warn' : 'muted'}>{w.state}</Badge>
                </td>
                <td class="small">{w.repositoryUrl}</td>
                <td>
                  <code>{w.branch ?? w.ref ?? '—'}</code>
                </td>
                <td class="small">{when(w.leaseExpiresAt)}</td>
                <td class="small">{when(w.hardExpiresAt)}</td>
                <td>
                  <Action label="Close" kind="danger" confirm={`Close ${w.workspaceId}? Its files are removed.`} run={async () => (await api('POST', `/workspaces/${w.workspaceId}/close`), reload())} />
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
    </Section>
    <LanguageServers />
    <CheckpointsAndForks />
    </>
  );
}
