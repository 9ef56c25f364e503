// Workspace checkpoints and forks (issue #33 item 5, docs/checkpoints.md): per workspace, its
// checkpoints (size, disk, how copied, expiry, delete) and its forks (and where it was forked from).
import { Action, api, Badge, Empty, ErrorBox, Section, usePoll, when } from '../lib';

const mb = (b: number) => `${(b / 1048576).toFixed(1)} MB`;

export function CheckpointsAndForks() {
  const { data, error, reload } = usePoll(() => api('GET', '/checkpoints'), 10_000);
  if (!data) return error ? <ErrorBox error={error} /> : <p class="muted">Loading…</p>;
  const all = data.checkpoints as any[];
  const byId = new Map(all.map((c) => [c.checkpointId, c]));
  const groups = (data.workspaces as any[]).filter((w) => w.checkpoints.length > 0 || w.forks.length > 0 || w.forkedFrom);
  return (
    <Section title={`Checkpoints and forks (${all.length} checkpoints, ${mb(data.quota.diskBytes)} of ${mb(data.limits.quotaBytes)}, at most ${data.limits.maxCount})`} id="checkpoints">
      {groups.length === 0 ? <Empty>No checkpoints or forks yet: checkpoint_create and workspace_fork make them.</Empty> : null}
      {groups.map((w) => (
        <div class="card" data-testid={`ckpt-ws-${w.workspaceId}`}>
          <h3>
            <code>{w.workspaceId}</code> {w.open ? <Badge kind="ok">open</Badge> : <Badge kind="muted">closed</Badge>}
          </h3>
          {w.forkedFrom ? (
            <p class="small" data-testid="forked-from">
              forked from {w.forkedFrom.checkpointId ? <>checkpoint <code>{w.forkedFrom.checkpointId}</code> of </> : null}
              <code>{w.forkedFrom.workspaceId}</code>
            </p>
          ) : null}
          {w.checkpoints.length ? (
            <div class="table-wrap">
              <table class="stacked">
                <thead>
                  <tr>
                    <th>checkpoint</th>
                    <th>label</th>
                    <th>taken</th>
                    <th>disk</th>
                    <th>copy</th>
                    <th>frozen</th>
                    <th>expires</th>
                    <th />
                  </tr>
                </thead>
                <tbody>
                  {w.checkpoints.map((id: string) => {
                    const c = byId.get(id);
                    if (!c) return null;
                    return (
                      <tr data-testid={`ckpt-${id}`}>
                        <td>
                          <code>{id}</code>
                        </td>
                        <td>{c.label || '—'}</td>
                        <td class="small">{when(c.createdAt)}</td>
                        <td class="small">
                          {mb(c.diskBytes)} of {mb(c.sizeBytes)}
                        </td>
                        <td>
                          <Badge kind={c.copyMode === 'reflink' ? 'ok' : 'info'}>{c.copyMode}</Badge>
                        </td>
                        <td class="small">{c.processesFrozen ? `${c.frozenMs} ms` : 'no process ran'}</td>
                        <td class="small">{when(c.expiresAt)}</td>
                        <td>
                          <Action label="Delete" kind="danger" testid={`delete-${id}`} confirm={`Delete checkpoint ${id}? Forks made from it stay.`} run={async () => (await api('DELETE', `/checkpoints/${id}`), reload())} />
                        </td>
                      </tr>
                    );
                  })}
                </tbody>
              </table>
            </div>
          ) : (
            <p class="small muted">No checkpoints.</p>
          )}
          {w.forks.length ? (
            <ul class="small" data-testid="forks">
              {w.forks.map((f: any) => (
                <li>
                  fork <code>{f.workspaceId}</code> <Badge kind={f.state === 'active' ? 'ok' : 'muted'}>{f.state}</Badge> {f.checkpointId ? <>from checkpoint <code>{f.checkpointId}</code></> : 'of the live workspace'}, {when(f.createdAt)}
                </li>
              ))}
            </ul>
          ) : null}
        </div>
      ))}
    </Section>
  );
}
