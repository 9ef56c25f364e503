import { useState } from 'preact/hooks';
import { Action, api, Badge, Empty, ErrorBox, Section, usd, usePoll, when } from '../lib';

/** Flattens a JSON value into path -> printed value, for the revision diff. */
function flat(v: unknown, path = '', out: Record<string, string> = {}): Record<string, string> {
  if (v !== null && typeof v === 'object' && !Array.isArray(v)) {
    for (const [k, x] of Object.entries(v as Record<string, unknown>)) flat(x, path ? `${path}.${k}` : k, out);
  } else out[path] = JSON.stringify(v);
  return out;
}

function Diff(p: { a: any; b: any }) {
  const fa = flat(p.a);
  const fb = flat(p.b);
  const keys = [...new Set([...Object.keys(fa), ...Object.keys(fb)])].sort().filter((k) => fa[k] !== fb[k]);
  if (keys.length === 0) return <Empty>The two revisions are the same.</Empty>;
  return (
    <div class="table-wrap">
    <table class="diff">
      <thead>
        <tr>
          <th>field</th>
          <th>from</th>
          <th>to</th>
        </tr>
      </thead>
      <tbody>
        {keys.map((k) => (
          <tr>
            <td>
              <code>{k}</code>
            </td>
            <td class="del">{fa[k] ?? '—'}</td>
            <td class="add">{fb[k] ?? '—'}</td>
          </tr>
        ))}
      </tbody>
    </table>
    </div>
  );
}

function History(p: { profile: any; reload: () => Promise<void> }) {
  const pr = p.profile;
  const { data, error } = usePoll(() => api('GET', `/agent-model-profiles/${encodeURIComponent(pr.profileId)}/revisions`), null, [pr.generation]);
  const [from, setFrom] = useState<number>(Math.max(1, (pr.activeRevision ?? pr.latestRevision - 1) || 1));
  const [to, setTo] = useState<number>(pr.latestRevision);
  if (!data) return error ? <ErrorBox error={error} /> : <p class="muted">Loading…</p>;
  const revs = data.revisions as any[];
  const ra = revs.find((r) => r.revision === from);
  const rb = revs.find((r) => r.revision === to);
  return (
    <div class="history">
      {data.refusedEscalations.length ? (
        <div class="notice warn">
          <strong>Escalations refused over MCP for this profile</strong> (the owner decides here):
          <ul>
            {data.refusedEscalations.map((r: any) => (
              <li>
                {when(r.at)} <code>{r.action}</code> by {r.actor}: {String(r.reason ?? '').replace(/^OWNER_APPROVAL_REQUIRED: (.*?nothing was changed: )?/, '')}
              </li>
            ))}
          </ul>
        </div>
      ) : null}
      <div class="table-wrap">
      <table>
        <thead>
          <tr>
            <th>rev</th>
            <th>saved by</th>
            <th>when</th>
            <th>model</th>
            <th>verification</th>
            <th />
          </tr>
        </thead>
        <tbody>
          {revs
            .slice()
            .reverse()
            .map((r) => (
              <tr>
                <td>
                  {r.revision} {r.revision === pr.activeRevision ? <Badge kind="ok">active</Badge> : null}
                </td>
                <td>{r.actor === 'mcp' ? <Badge kind="info">drafted over MCP</Badge> : r.actor}</td>
                <td class="small">{when(r.createdAt)}</td>
                <td>
                  <code>{r.body.model}</code>
                </td>
                <td>{r.body.verification?.status === 'verified' ? <Badge kind="ok">Verified</Badge> : <Badge>Not verified</Badge>}</td>
                <td>
                  <Action
                    label={`Activate ${r.revision}`}
                    kind={r.revision === pr.latestRevision && pr.pendingOwnerApproval ? 'primary' : 'plain'}
                    testid={`activate-${pr.profileId}-${r.revision}`}
                    run={async () => (await api('POST', `/agent-model-profiles/${encodeURIComponent(pr.profileId)}/activate`, { revision: r.revision, expectedGeneration: pr.generation }), p.reload())}
                  />
                </td>
              </tr>
            ))}
        </tbody>
      </table>
      </div>
      {revs.length > 1 ? (
        <div>
          <div class="row">
            <label>
              Diff from{' '}
              <select value={from} onChange={(e) => setFrom(Number((e.target as HTMLSelectElement).value))}>
                {revs.map((r) => (
                  <option value={r.revision}>{r.revision}</option>
                ))}
              </select>
            </label>
            <label>
              to{' '}
              <select value={to} onChange={(e) => setTo(Number((e.target as HTMLSelectElement).value))}>
                {revs.map((r) => (
                  <option value={r.revision}>{r.revision}</option>
                ))}
              </select>
            </label>
          </div>
          {ra && rb ? <Diff a={ra.body} b={rb.body} /> : null}
        </div>
      ) : null}
    </div>
  );
}

function price(p: any, k: string) {
  const v = p?.[k];
  return v === null || v === undefined ? '?' : usd(v);
}

function ProfileCard(p: { pr: any; reload: () => Promise<void> }) {
  const pr = p.pr;
  const [open, setOpen] = useState(pr.pendingOwnerApproval);
  const review = pr.repricingReview?.status;
  return (
    <li class="item" data-profile={pr.profileId}>
      <div class="item-h">
        <strong>{pr.displayName || pr.profileId}</strong> <Badge kind={pr.status === 'active' ? 'ok' : 'muted'}>{pr.status}</Badge>{' '}
        {pr.pendingOwnerApproval ? <Badge kind="warn">revision {pr.latestRevision} awaits activation</Badge> : null} {pr.verified === 'Verified' ? <Badge kind="ok">Verified</Badge> : <Badge>Not verified</Badge>}{' '}
        {review === 'differs' ? <Badge kind="warn">prices differ from catalog</Badge> : review === 'current' ? <Badge kind="ok">prices match catalog</Badge> : <Badge>catalog price unknown</Badge>}
      </div>
      <div class="muted small">
        {pr.profileId} · {pr.provider ?? 'credential deleted'} · <code>{pr.model}</code> · {pr.apiMode} · credential {pr.credentialId} ({pr.credentialStatus}) · active revision {pr.activeRevision ?? 'none'} of {pr.latestRevision}
      </div>
      <div class="small">
        Pinned prices per million tokens: input {price(pr.pinnedPrices, 'inputMicrosPerMillionTokens')}, output {price(pr.pinnedPrices, 'outputMicrosPerMillionTokens')}, cached read{' '}
        {price(pr.pinnedPrices, 'cachedReadMicrosPerMillionTokens')} <span class="muted">({pr.pinnedPrices?.source})</span> · last check {pr.lastCheck ? when(pr.lastCheck.checkedAt) : 'never'}
      </div>
      <div class="row">
        <button type="button" class="plain" onClick={() => setOpen(!open)}>
          {open ? 'Hide history' : 'History and diff'}
        </button>
        {pr.status === 'active' ? <Action label="Disable" run={async () => (await api('POST', `/agent-model-profiles/${encodeURIComponent(pr.profileId)}/disable`), p.reload())} /> : null}
        <Action label="Delete" kind="danger" confirm={`Delete profile ${pr.profileId} and all its revisions?`} run={async () => (await api('DELETE', `/agent-model-profiles/${encodeURIComponent(pr.profileId)}`), p.reload())} />
      </div>
      {open ? <History profile={pr} reload={p.reload} /> : null}
    </li>
  );
}

export function Profiles() {
  const { data, error, reload } = usePoll(() => api('GET', '/agent-model-profiles'), 30_000);
  if (!data) return error ? <ErrorBox error={error} /> : <p class="muted">Loading…</p>;
  const list = (data.profiles as any[]).slice().sort((a, b) => Number(b.pendingOwnerApproval) - Number(a.pendingOwnerApproval));
  return (
    <Section title={`Profiles (${list.length})`}>
      <p class="muted small">MCP clients draft profiles; a draft routes nothing until you activate a revision here. Drafts awaiting activation come first.</p>
      {list.length === 0 ? <Empty>No profiles yet. An MCP client creates them with model_profile_create.</Empty> : null}
      <ul class="items">
        {list.map((pr) => (
          <ProfileCard pr={pr} reload={reload} key={pr.profileId} />
        ))}
      </ul>
    </Section>
  );
}
