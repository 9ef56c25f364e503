import { useState } from 'preact/hooks';
import { Action, api, ApiError, Badge, Copy, Empty, ErrorBox, formValues, Section, usePoll, when } from '../lib';

/** Client, its tool cap (a number first when it has one), the X-MCP-Toolsets value that fits (docs/clients.md, "Tool caps"; counts of today's presets). */
const CLIENT_PRESETS: Array<[string, string, string]> = [
  ['Claude Code', 'none; defers MCP tools past 10% of the context', 'code (or all)'],
  ['Codex', '128 per request (OpenAI API), unless the model has tool search', 'code'],
  ['VS Code (Copilot)', '128 per request, every server and built-in tool together', 'code'],
  ['Cursor', '40 tools sent to the agent', 'lean'],
  ['Windsurf', '100 tools in total', 'code'],
  ['Gemini CLI', '512 (Gemini API); adds 17 of its own', 'code (or all)'],
  ['opencode', "128 with OpenAI and Copilot models (their API's); adds 13 of its own", 'code'],
  ['mcp-remote (stdio clients)', 'none of its own: the client behind it decides', "that client's"],
];

export function McpAccess() {
  const { data, error, reload } = usePoll(async () => {
    const [tokens, setup, oauth] = await Promise.all([
      api('GET', '/tokens'),
      api('GET', '/mcp-setup'),
      api('GET', '/oauth/clients').catch((e) => {
        if (e instanceof ApiError && (e.status === 404 || e.body.code === 'NOT_IMPLEMENTED')) return null;
        throw e;
      }),
    ]);
    return { tokens: tokens.tokens as any[], setup, oauth };
  }, null);
  const [created, setCreated] = useState<any>(null);
  const [err, setErr] = useState<unknown>(null);
  if (!data) return error ? <ErrorBox error={error} /> : <p class="muted">Loading…</p>;
  const active = data.tokens.filter((t) => !t.revokedAt);
  const revoked = data.tokens.filter((t) => t.revokedAt);
  return (
    <div class="stack">
      <Section title="Connect a client">
        <p class="small">
          MCP endpoint: <code>{data.setup.mcpUrl}</code>. {data.setup.note}
        </p>
        <h3>Claude Code</h3>
        <Copy text={data.setup.claude} />
        <h3>Codex (~/.codex/config.toml)</h3>
        <Copy text={data.setup.codexToml} />
        <h3>Which tools for which client</h3>
        <p class="small">
          Clients cap how many tools reach the model. Narrow a connection with the header <code>X-MCP-Toolsets: code</code> (Claude Code:{' '}
          <code>--header "X-MCP-Toolsets: code"</code>; Codex: <code>http_headers</code>) or a token made with <code>atelier token create --toolsets code</code>.
          Caps and sources: docs/clients.md.
        </p>
        <table data-testid="client-presets">
          <thead>
            <tr>
              <th>Client</th>
              <th>Its cap</th>
              <th>Pick</th>
            </tr>
          </thead>
          <tbody>
            {CLIENT_PRESETS.map(([client, cap, pick]) => (
              <tr key={client}>
                <td>{client}</td>
                <td class="small">{cap}</td>
                <td>
                  <code>{pick}</code>
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </Section>
      <Section title={`Owner tokens (${active.length} active)`}>
        <form
          class="inline"
          data-testid="create-token"
          onSubmit={async (e) => {
            const f = e.currentTarget as HTMLFormElement;
            const v = formValues(e);
            try {
              setCreated(await api('POST', '/tokens', { name: v.name }));
              f.reset();
              setErr(null);
              await reload();
            } catch (x) {
              setErr(x);
            }
          }}
        >
          <label>
            Name <input name="name" required placeholder="laptop claude" maxLength={80} />
          </label>
          <button class="primary">Create token</button>
          <ErrorBox error={err} />
        </form>
        {created ? (
          <div class="notice ok" data-testid="new-token">
            <strong>Token {created.info.name} created; it is shown this once.</strong> Store it now (for example as ATELIER_TOKEN).
            <Copy text={created.token} />
            <button type="button" class="plain small" onClick={() => setCreated(null)}>
              I stored it
            </button>
          </div>
        ) : null}
        {active.length === 0 ? <Empty>No active token: no MCP client can connect.</Empty> : null}
        <div class="table-wrap">
          <table>
            <thead>
              <tr>
                <th>name</th>
                <th>prefix</th>
                <th>created</th>
                <th>last used</th>
                <th />
              </tr>
            </thead>
            <tbody>
              {active.map((t) => (
                <tr data-token={t.id}>
                  <td>{t.name}</td>
                  <td>
                    <code>{t.prefix}…</code>
                  </td>
                  <td class="small">{when(t.createdAt)}</td>
                  <td class="small">{when(t.lastUsedAt)}</td>
                  <td>
                    <Action label="Revoke" kind="danger" testid={`revoke-${t.id}`} confirm={`Revoke ${t.name}? Clients using it are refused at once.`} run={async () => (await api('DELETE', `/tokens/${t.id}`), reload())} />
                  </td>
                </tr>
              ))}
              {revoked.map((t) => (
                <tr class="muted">
                  <td>{t.name}</td>
                  <td>
                    <code>{t.prefix}…</code>
                  </td>
                  <td class="small">{when(t.createdAt)}</td>
                  <td class="small">{when(t.lastUsedAt)}</td>
                  <td>
                    <Badge>revoked {when(t.revokedAt)}</Badge>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      </Section>
      {data.oauth ? (
        <Section title="Connected OAuth clients">
          {(data.oauth.clients ?? []).length === 0 ? <Empty>No OAuth client is connected.</Empty> : null}
          <ul class="list">
            {(data.oauth.clients ?? []).map((c: any) => (
              <li class="row" data-oauth-client={c.id}>
                <bdi><strong>{c.name ?? c.clientName ?? c.id}</strong></bdi> <span class="muted small">(name chosen by the client)</span>{' '}
                {c.metadataUrl ? (
                  <span class="small" data-testid="oauth-client-url">
                    from <strong>{c.host}</strong> (verified): <code>{c.metadataUrl}</code>
                  </span>
                ) : null}{' '}
                <span class="grow muted small">{c.id} · {when(c.createdAt)}</span>
                <Action label="Disconnect" kind="danger" testid={`disconnect-${c.id}`} confirm={`Disconnect ${c.name ?? c.id}?`} run={async () => (await api('DELETE', `/oauth/clients/${encodeURIComponent(c.id)}`), reload())} />
              </li>
            ))}
          </ul>
        </Section>
      ) : null}
    </div>
  );
}
