import { api, Badge, Empty, ErrorBox, Section, size, usePoll, when } from '../lib';

const stateKind = (s: string) => (s === 'running' ? 'ok' : s === 'starting' ? 'info' : s === 'crashed' ? 'bad' : 'muted');

/** Issue #44 item 6: the language servers of each active workspace with their memory (a status read: nothing is started). */
export function LanguageServers() {
  const { data, error } = usePoll(() => api('GET', '/code-servers'), 10_000);
  if (!data) return error ? <ErrorBox error={error} /> : <p class="muted">Loading language servers…</p>;
  const list = data.workspaces as any[];
  return (
    <Section title="Language servers" id="language-servers">
      {list.length === 0 ? <Empty>No active workspaces.</Empty> : null}
      {list.map((w) => (
        <div data-testid="code-servers-workspace" data-workspace={w.workspaceId}>
          <h3>
            <code>{w.workspaceId}</code> <span class="muted small">{w.repositoryUrl}</span>
            {w.sandbox === 'running' ? <span class="small"> · {size(w.memoryBytes)} in language servers</span> : null}
          </h3>
          {w.error ? (
            <div class="notice bad" role="alert">
              {w.error.code}: {w.error.message}
            </div>
          ) : w.sandbox === 'stopped' ? (
            <p class="muted small">The sandbox is not running; no language server runs.</p>
          ) : w.servers.length === 0 ? (
            <p class="muted small">No language server is installed.</p>
          ) : (
            <div class="table-wrap">
              <table class="stacked">
                <thead>
                  <tr>
                    <th>server</th>
                    <th>state</th>
                    <th>pid</th>
                    <th>memory</th>
                    <th>open documents</th>
                    <th>restarts</th>
                    <th>last exit</th>
                  </tr>
                </thead>
                <tbody>
                  {(w.servers as any[]).map((s) => (
                    <tr data-testid="code-server" data-server={s.server} data-state={s.state}>
                      <td>
                        <code>{s.server}</code> <span class="muted small">{s.title}</span>
                      </td>
                      <td>
                        <Badge kind={stateKind(s.state)}>{s.state}</Badge>
                      </td>
                      <td>{s.pid ?? '—'}</td>
                      <td data-testid="code-server-memory">{s.state === 'running' ? size(s.memoryBytes) : '—'}</td>
                      <td>{s.openDocuments ?? '—'}</td>
                      <td>{s.restarts}</td>
                      <td class="small">{s.lastExit ? `${s.lastExit.reason} (${when(s.lastExit.at)})` : '—'}</td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </div>
          )}
        </div>
      ))}
    </Section>
  );
}
