import { useEffect, useState } from 'preact/hooks';
import { Action, api, Badge, Copy, Empty, ErrorBox, Section, usePoll, when } from '../lib';
// The one function that decides what the owner sees (the REST payload's `display` comes from it too).
import { displaySegments } from '../../src/core/display';

const KIND: Record<string, string> = { privileged_command: 'Privileged command', package_plan: 'Package plan', skill_script: 'Skill script' };

function Grant(p: { id: string; grant: any; onDone: () => void; inCall?: boolean }) {
  return (
    <div class="notice ok" data-testid="grant" data-approval-grant={p.id}>
      <strong>Request {p.id} approved. Grant issued, shown once.</strong>{' '}
      {p.inCall ? (
        <>If the client that opened this page still waits, its call goes on now and spends the grant itself: nothing to copy. Otherwise give it to the client (it calls again with <code>approvalGrantToken</code>);</>
      ) : (
        <>Give it to the client that asked (it calls again with <code>approvalGrantToken</code>);</>
      )}{' '}
      single use, bound to the exact content, valid until {when(p.grant.expiresAt)}.
      <Copy text={p.grant.approvalGrantToken} />
      <button type="button" class="plain small" onClick={p.onDone}>
        Done
      </button>
    </div>
  );
}

/**
 * Untrusted text as the owner must read it: every hidden character (bidi controls, zero-width and
 * other format characters, controls, odd spaces) as a visible \u{XXXX} escape, highlighted.
 * Rendered as text nodes by Preact, never as HTML.
 */
export function Shown(p: { text: string; multiline?: boolean }) {
  return (
    <>
      {displaySegments(p.text, { multiline: p.multiline ?? true }).map((s, i) =>
        s.hidden ? (
          <mark class="hidden-char" title={`${s.hidden.codePoint} (${s.hidden.kind.replace('_', ' ')}): hidden in the raw text`} key={i}>
            {s.text}
          </mark>
        ) : (
          s.text
        ),
      )}
    </>
  );
}

function HiddenWarning(p: { a: any }) {
  const list = (p.a.hiddenCharacters ?? []) as Array<{ field: string; codePoint: string; kind: string; count: number }>;
  if (!(p.a.flags ?? []).includes('hidden_characters')) return null;
  return (
    <div class="notice bad" role="alert" data-testid="hidden-warning">
      <strong>Hidden characters.</strong> This request holds characters that display differently from what they are (or not at all); each is shown as a highlighted{' '}
      <code>\u{'{…}'}</code> escape. What runs is the raw text, not what it would look like unescaped:{' '}
      {list.map((h) => `${h.codePoint} (${h.kind.replace('_', ' ')}) ×${h.count} in ${h.field}`).join('; ')}.
    </div>
  );
}

function Request(p: { a: any; reload: () => Promise<void>; onGrant: (g: any) => void }) {
  const a = p.a;
  const hidden = (a.flags ?? []).includes('hidden_characters');
  return (
    <li class={`item ${a.state === 'pending' ? 'attention' : ''}`} data-approval={a.id}>
      <div class="item-h">
        <strong>{KIND[a.kind] ?? a.kind}</strong> <Badge kind={a.state === 'pending' ? 'warn' : a.state === 'approved' ? 'ok' : a.state === 'denied' ? 'bad' : 'muted'}>{a.state}</Badge>{' '}
        {hidden ? <Badge kind="bad">hidden characters</Badge> : null}{' '}
        <span class="muted small">
          {a.workspaceId ? `workspace ${a.workspaceId}` : 'no workspace'} · asked by {a.requestedBy === null ? 'unknown' : <Shown text={a.requestedBy} multiline={false} />} · {when(a.createdAt)}
        </span>
      </div>
      <HiddenWarning a={a} />
      {a.kind === 'privileged_command' && typeof a.cwd === 'string' ? (
        <div class="row small" data-testid="cwd">
          Runs in <code>{a.cwd === '.' ? '/workspace' : <>/workspace/<Shown text={a.cwd} multiline={false} /></>}</code> (working directory <code><Shown text={a.cwd} multiline={false} /></code>, bound by the grant)
        </div>
      ) : null}
      <pre class="subject" data-testid="subject"><Shown text={a.subject} /></pre>
      <div class="muted small digest">
        SHA-256 <code>{a.subjectSha256}</code>
        {a.kind === 'privileged_command' ? ' (of the command and its working directory)' : ''}
      </div>
      {a.kind !== 'privileged_command' && Object.keys(a.details ?? {}).length ? (
        <pre class="small" data-testid="details">
          <Shown text={JSON.stringify(a.details, null, 2)} />
        </pre>
      ) : null}
      {a.state === 'pending' ? (
        <div class="row">
          <Action label="Approve" kind="primary" testid="approve" run={async () => (p.onGrant(await api('POST', `/approvals/${a.id}/approve`)), p.reload())} />
          <Action label="Deny" kind="danger" testid="deny" run={async () => (await api('POST', `/approvals/${a.id}/deny`), p.reload())} />
        </div>
      ) : (
        <div class="muted small">
          {a.decidedAt ? `decided ${when(a.decidedAt)}` : ''} {a.grantExpiresAt && a.state === 'approved' ? `· grant valid until ${when(a.grantExpiresAt)}, not used yet` : ''} {a.usedAt ? `· grant used ${when(a.usedAt)}` : ''}
        </div>
      )}
    </li>
  );
}

/** The request a deep link names (#/approvals/<id>: the page an MCP client opens for its user), if any. */
function linkedId(): string | null {
  const m = /^#\/?approvals\/([A-Za-z0-9_-]{1,100})$/.exec(location.hash);
  return m ? m[1]! : null;
}

/** The request a deep link names, shown first whatever its state: what a client that waits for it opened. */
function Linked(p: { id: string; onGrant: (g: any) => void; reloadList: () => Promise<void> }) {
  const { data, error, reload } = usePoll(() => api('GET', `/approvals/${p.id}`), 5_000, [p.id]);
  return (
    <Section title={`Request ${p.id}`} id="linked-approval">
      <p class="muted small">An MCP client opened this request for you: the call that asked for it waits for your decision and goes on once you approve (its grant is spent by that call), or stops if you deny.</p>
      {error ? <ErrorBox error={error} /> : null}
      {data ? (
        <ul class="items" data-testid="linked-approval">
          <Request a={data} reload={async () => (await reload(), await p.reloadList())} onGrant={p.onGrant} />
        </ul>
      ) : null}
    </Section>
  );
}

export function Approvals() {
  const [linked, setLinked] = useState<string | null>(linkedId());
  useEffect(() => {
    const on = () => setLinked(linkedId());
    addEventListener('hashchange', on);
    return () => removeEventListener('hashchange', on);
  }, []);
  const [showAll, setShowAll] = useState(false);
  // Grants live here, not in the request's row: an approved request leaves the pending list at once.
  const [grants, setGrants] = useState<Array<{ id: string; grant: any }>>([]);
  const { data, error, reload } = usePoll(() => api('GET', showAll ? '/approvals' : '/approvals?state=pending'), 5_000, [showAll]);
  const list = ((data?.approvals as any[]) ?? []).filter((a) => a.id !== linked);
  return (
    <>
    {linked ? <Linked id={linked} reloadList={reload} onGrant={(g) => setGrants((gs) => [...gs, { id: linked, grant: g }])} /> : null}
    <Section
      title={linked ? (showAll ? 'Other requests' : `Other pending (${list.length})`) : showAll ? 'All requests' : `Pending (${list.length})`}
      actions={
        <button type="button" class="plain small" onClick={() => setShowAll(!showAll)}>
          {showAll ? 'Pending only' : 'Show decided too'}
        </button>
      }
    >
      <p class="muted small">One queue for every kind of request. Each shows the full text the grant will be bound to: read it all before approving.</p>
      {grants.map((g) => (
        <Grant id={g.id} grant={g.grant} key={g.id} inCall={g.id === linked} onDone={() => setGrants((gs) => gs.filter((x) => x.id !== g.id))} />
      ))}
      {error ? <ErrorBox error={error} /> : null}
      {data && list.length === 0 ? <Empty>Nothing is waiting for your approval.</Empty> : null}
      <ul class="items">
        {list.map((a) => (
          <Request a={a} reload={reload} key={a.id} onGrant={(g) => setGrants((gs) => [...gs, { id: a.id, grant: g }])} />
        ))}
      </ul>
    </Section>
    </>
  );
}
