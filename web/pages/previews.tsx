/**
 * Preview URLs (issue #33, docs/workspaces.md "Preview URLs"): every open preview with its
 * workspace, port and expiry; the owner opens it, consents to a public link (only here: no tool
 * can make one) and revokes it.
 */
import { useState } from 'preact/hooks';
import { Action, api, ApiError, Badge, Copy, Empty, ErrorBox, Section, usePoll, when } from '../lib';

function Preview(p: { v: any; reload: () => Promise<void> }) {
  const v = p.v;
  const open = v.state === 'open';
  return (
    <li data-preview={v.previewId}>
      <div class="item-h">
        <strong>{v.label ?? v.previewId}</strong> <Badge kind={open ? 'ok' : 'muted'}>{v.state}</Badge>{' '}
        <Badge kind={v.access === 'public' ? 'warn' : 'info'}>{v.access === 'public' ? 'public link' : 'owner only'}</Badge>{' '}
        <span class="muted small">
          {v.previewId} · workspace {v.workspaceId} · port {v.port} · {open ? 'expires' : 'expired'} {when(v.expiresAt)}
          {v.revokedAt ? ` · revoked ${when(v.revokedAt)}` : ''}
        </span>
      </div>
      {open ? (
        <div class="row">
          <a href={v.path} target="_blank" rel="noopener noreferrer" data-testid={`open-${v.previewId}`}>
            Open
          </a>{' '}
          {v.publicLink.state !== 'granted' ? (
            <Action
              label={v.publicLink.state === 'requested' ? 'Allow the public link asked for' : 'Make a public link'}
              testid={`public-${v.previewId}`}
              confirm={`Anyone with the public link can reach port ${v.port} of workspace ${v.workspaceId} until ${v.expiresAt}. Allow?`}
              run={async () => (await api('POST', `/previews/${v.previewId}/public`, { expectedGeneration: v.generation }), p.reload())}
            />
          ) : null}{' '}
          <Action label="Revoke" kind="danger" testid={`revoke-${v.previewId}`} confirm={`Revoke preview ${v.previewId}? Its links stop working at once.`} run={async () => (await api('POST', `/previews/${v.previewId}/revoke`), p.reload())} />
        </div>
      ) : null}
      {v.publicLink.state === 'requested' && open ? <p class="small">An agent asked for a public link; none exists until you allow it.</p> : null}
      {v.publicLink.url && open ? (
        <div data-testid={`public-url-${v.previewId}`}>
          <p class="small">Public link (anyone with it, until {when(v.expiresAt)}):</p>
          <Copy text={v.publicLink.url} />
        </div>
      ) : null}
    </li>
  );
}

export function Previews() {
  const [closed, setClosed] = useState(false);
  const { data, error, reload } = usePoll(
    async () => {
      try {
        return await api('GET', `/previews${closed ? '?includeClosed=true' : ''}`);
      } catch (e) {
        if (e instanceof ApiError && e.status === 404) return { unavailable: true };
        throw e;
      }
    },
    5_000,
    [closed],
  );
  if (!data) return error ? <ErrorBox error={error} /> : <p class="muted">Loading…</p>;
  if (data.unavailable)
    return (
      <Section title="Previews">
        <Empty>Previews are not available in this build.</Empty>
      </Section>
    );
  const all = (data.previews as any[]) ?? [];
  return (
    <Section
      title={`Previews (${all.filter((v) => v.state === 'open').length} open)`}
      actions={
        <label class="small">
          <input type="checkbox" checked={closed} onChange={(e) => setClosed((e.currentTarget as HTMLInputElement).checked)} /> show revoked and expired
        </label>
      }
    >
      {all.length === 0 ? <Empty>No previews. An agent opens one with preview_open.</Empty> : null}
      <ul class="tree">
        {all.map((v) => (
          <Preview v={v} reload={reload} />
        ))}
      </ul>
    </Section>
  );
}
