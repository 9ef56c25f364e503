import { useState } from 'preact/hooks';
import { Action, api, ApiError, Badge, Copy, Empty, ErrorBox, formValues, Section, usePoll, when } from '../lib';

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
