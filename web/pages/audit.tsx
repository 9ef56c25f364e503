import { useState } from 'preact/hooks';
import { api, Badge, Empty, ErrorBox, formValues, Section, usePoll, when } from '../lib';

export function Audit() {
  const [filters, setFilters] = useState<Record<string, string>>({});
  // Cursors of the pages seen so far: [undefined (newest), c1, c2, ...]
  const [cursors, setCursors] = useState<Array<string | undefined>>([undefined]);
  const cursor = cursors[cursors.length - 1];
  const { data, error } = usePoll(
    () => {
      const q = new URLSearchParams({ limit: '50' });
      for (const [k, v] of Object.entries(filters)) if (v) q.set(k, k === 'since' || k === 'until' ? new Date(v).toISOString() : v);
      if (cursor) q.set('cursor', cursor);
      return api('GET', `/audit-log?${q}`);
    },
    null,
    [JSON.stringify(filters), cursor],
  );
  return (
    <div class="stack">
      <Section title="Filter">
        <form
          class="inline"
          onSubmit={(e) => {
            setFilters(formValues(e));
            setCursors([undefined]);
          }}
        >
          <label>
            Actor <input name="actor" placeholder="mcp, dashboard, cli, system" />
          </label>
          <label>
            Action <input name="action" placeholder="token_revoke" />
          </label>
          <label>
            Outcome{' '}
            <select name="outcome">
              <option value="">any</option>
              <option value="ok">ok</option>
              <option value="refused">refused</option>
              <option value="failed">failed</option>
            </select>
          </label>
          <label>
            From <input type="datetime-local" name="since" />
          </label>
          <label>
            Until <input type="datetime-local" name="until" />
          </label>
          <button class="primary">Apply</button>
        </form>
      </Section>
      <Section
        title={`Entries${cursors.length > 1 ? ` (page ${cursors.length})` : ''}`}
        actions={
          <>
            <button type="button" class="plain small" disabled={cursors.length === 1} onClick={() => setCursors(cursors.slice(0, -1))}>
              Newer
            </button>
            <button type="button" class="plain small" disabled={!data?.nextCursor} onClick={() => setCursors([...cursors, data.nextCursor])}>
              Older
            </button>
          </>
        }
      >
        <ErrorBox error={error} />
        {data && data.entries.length === 0 ? <Empty>No entries match.</Empty> : null}
        <div class="table-wrap">
          <table class="audit stacked">
            <thead>
              <tr>
                <th>when</th>
                <th>actor</th>
                <th>action</th>
                <th>target</th>
                <th>outcome</th>
                <th>reason</th>
              </tr>
            </thead>
            <tbody>
              {(data?.entries ?? []).map((e: any) => (
                <tr>
                  <td class="small nowrap">{e.at.slice(0, 19).replace('T', ' ')}</td>
                  <td>{e.actor}</td>
                  <td>
                    <code>{e.action}</code>
                  </td>
                  <td class="small clip">{e.target ?? ''}</td>
                  <td>
                    <Badge kind={e.outcome === 'ok' ? 'ok' : e.outcome === 'refused' ? 'warn' : 'bad'}>{e.outcome}</Badge>
                  </td>
                  <td class="small">{e.reason ?? ''}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      </Section>
    </div>
  );
}
