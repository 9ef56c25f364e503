import { useEffect, useState } from 'preact/hooks';
import { api, Badge, Empty, ErrorBox, Section, size, usd, usePoll, when } from '../lib';
import { Shown } from './approvals';

const LAST_VISIT = 'atelier.overview.lastVisit';

interface Win {
  period: string;
  key: string;
  settledMicros: number;
  reservedMicros: number;
  unreconciledMicros: number;
  totalMicros: number;
  policy: { capMicros: number | null; remainingMicros: number | null };
}

export function Meter(p: { win: Win; label: string }) {
  const w = p.win;
  const cap = w.policy.capMicros;
  const pct = cap ? Math.min(100, (w.totalMicros / cap) * 100) : 0;
  return (
    <div class="meter">
      <div class="meter-h">
        <strong>{p.label}</strong>
        <span>
          {usd(w.totalMicros)} <span class="muted">{cap === null ? '· no cap set' : `of ${usd(cap)} cap`}</span>
        </span>
      </div>
      {cap !== null ? (
        <div class={`bar ${pct >= 90 ? 'bad' : pct >= 70 ? 'warn' : ''}`}>
          <span style={{ width: `${pct}%` }} />
        </div>
      ) : null}
      <div class="muted small">
        settled {usd(w.settledMicros)} · reserved {usd(w.reservedMicros)} · unreconciled {usd(w.unreconciledMicros)}
      </div>
    </div>
  );
}

export function Overview() {
  // "Since the last visit": the previous visit's time, fixed for the life of this page (refreshes
  // keep showing the same refusals); this visit's time is stored for the next one.
  const [since] = useState(() => localStorage.getItem(LAST_VISIT) ?? new Date(0).toISOString());
  useEffect(() => localStorage.setItem(LAST_VISIT, new Date().toISOString()), []);
  const { data, error } = usePoll(
    async () => {
      const [o, status, agents, instance] = await Promise.all([
        api('GET', `/overview?since=${encodeURIComponent(since)}`),
        api('GET', '/agent-model-config-status').catch((e) => ({ error: e })),
        api('GET', '/agents').catch(() => null),
        api('GET', '/instance').catch((e) => ({ error: e })),
      ]);
      return { o, status, agents, instance };
    },
    10_000,
  );
  if (!data) return error ? <ErrorBox error={error} /> : <p class="muted">Loading…</p>;
  const { o, status, agents, instance } = data;
  const att = o.attention;
  const waiting = att.approvals.length + att.profileDrafts.length + att.refusals.length;
  const running = agents && typeof agents.live === 'number' ? agents.live : agents && Array.isArray(agents.agents) ? agents.agents.filter((a: any) => ['SPAWNING', 'RUNNING', 'CANCELLING'].includes(a.status)).length : null;
  const day = o.spend.windows.find((w: Win) => w.period === 'day');
  const month = o.spend.windows.find((w: Win) => w.period === 'month');
  return (
    <div class="grid">
      <Instance instance={instance} />
      <Section title={waiting ? `Waiting for you (${waiting})` : 'Nothing waits for you'} id="attention">
        {waiting === 0 ? <Empty>No pending approvals, no profile drafts awaiting activation, no refusals since your last visit.</Empty> : null}
        <ul class="list">
          {att.approvals.map((a: any) => (
            <li>
              <Badge kind="warn">approval</Badge> <a href="#/approvals">{a.kind.replace('_', ' ')}</a> in {a.workspaceId || 'no workspace'}: <code class="clip"><Shown text={a.subject} /></code>{(a.flags ?? []).includes('hidden_characters') ? <> <Badge kind="bad">hidden characters</Badge></> : null} <span class="muted small">{when(a.createdAt)}</span>
            </li>
          ))}
          {att.profileDrafts.map((p: any) => (
            <li>
              <Badge kind="info">profile</Badge> <a href="#/profiles">{p.profileId}</a> revision {p.latestRevision} awaits activation ({p.model})
            </li>
          ))}
          {att.refusals.map((r: any) => (
            <li>
              <Badge kind="bad">refused</Badge> {r.action} {r.target ?? ''}: owner approval required <span class="muted small">{when(r.at)}</span>
            </li>
          ))}
        </ul>
      </Section>
      <Section title="Spend" actions={<a href="#/spend">Details</a>}>
        {day ? <Meter win={day} label={`Today (${day.key})`} /> : null}
        {month ? <Meter win={month} label={`This month (${month.key})`} /> : null}
        <p class="muted small">{o.spend.note}</p>
      </Section>
      <Section title="Gateway">
        {'error' in status ? (
          <ErrorBox error={status.error} />
        ) : (
          <dl class="kv">
            <dt>Gateway</dt>
            <dd>{status.gateway.answered ? <Badge kind="ok">answering</Badge> : <Badge kind="bad">not answering</Badge>} {status.gateway.error ?? ''}</dd>
            <dt>Routes</dt>
            <dd>{status.routes.length} active route(s) {status.inSync ? <Badge kind="ok">in sync</Badge> : <Badge kind="warn">not in sync</Badge>}</dd>
            <dt>Last push</dt>
            <dd>
              {when(status.push.lastAttemptAt)} {status.push.lastError ? <Badge kind="bad">{status.push.lastError}</Badge> : status.push.lastSuccessAt ? <Badge kind="ok">ok</Badge> : null}
            </dd>
          </dl>
        )}
      </Section>
      <Section title="Running">
        <dl class="kv">
          <dt>Agents</dt>
          <dd>{running === null ? <span class="muted">not available in this build</span> : <a href="#/agents">{running} running</a>}</dd>
          <dt>Workspaces</dt>
          <dd>
            <a href="#/workspaces">{o.workspaces.active} active</a> <span class="muted">of {o.workspaces.total} open</span>
          </dd>
          <dt>Profiles</dt>
          <dd>
            <a href="#/profiles">{o.profiles.active} active</a> <span class="muted">of {o.profiles.total}</span>
          </dd>
          <dt>Provider keys</dt>
          <dd>
            <a href="#/keys">{o.providerCredentials}</a>
          </dd>
        </dl>
      </Section>
      {o.login ? <PasswordLogin login={o.login} /> : null}
    </div>
  );
}

/** Password login throttling (GET /api/v1/overview `login`): lockouts and delays the owner should see. */
function PasswordLogin(p: { login: any }) {
  const l = p.login;
  const overall = l.overall;
  const locked = overall.lockedUntil || l.lockedAddresses > 0;
  return (
    <Section title="Password login" id="password-login">
      {overall.lockedUntil ? (
        <p role="alert">
          <Badge kind="bad">locked for everyone</Badge> until {when(overall.lockedUntil)}: too many failed password logins from all addresses.
        </p>
      ) : overall.delayedUntil ? (
        <p>
          <Badge kind="warn">slowed down</Badge> for everyone until {when(overall.delayedUntil)} ({overall.failures} failed logins)
        </p>
      ) : (
        <p class="muted small">
          {overall.failures ? `${overall.failures} failed password login(s) recently` : 'No failed password logins recently'}; lockout after {l.limits.perAddress} from one address or {l.limits.overall} from all.
        </p>
      )}
      {l.addresses.length ? (
        <ul class="list">
          {l.addresses.map((a: any) => (
            <li>
              <code>{a.address}</code>{' '}
              {a.lockedUntil ? <Badge kind="bad">locked until {when(a.lockedUntil)}</Badge> : a.delayedUntil ? <Badge kind="warn">slowed down until {when(a.delayedUntil)}</Badge> : null}{' '}
              <span class="muted small">{a.failures} failure(s) since the last lockout</span>
            </li>
          ))}
        </ul>
      ) : null}
      {locked ? (
        <p class="muted small">
          The one-time login link still works: <code>atelier owner login-link</code> on the machine. Sessions already open are not affected.
        </p>
      ) : null}
    </Section>
  );
}


const uptime = (s: number): string => {
  const d = Math.floor(s / 86400);
  const h = Math.floor((s % 86400) / 3600);
  const m = Math.floor((s % 3600) / 60);
  return d ? `${d}d ${h}h` : h ? `${h}h ${m}m` : `${m}m ${s % 60}s`;
};

/** The instance's health at a glance (GET /api/v1/instance; issue #35 item 6, docs/dashboard.md). */
function Instance(p: { instance: any }) {
  const i = p.instance;
  if (!i || 'error' in i) return <Section title="Instance" id="instance">{i ? <ErrorBox error={i.error} /> : null}</Section>;
  const b = i.backups;
  const d = i.disk;
  return (
    <Section title="Instance" id="instance">
      {i.warnings.length ? (
        <ul class="list" role="alert" data-testid="instance-warnings">
          {i.warnings.map((w: string) => (
            <li>
              <Badge kind="warn">warning</Badge> {w}
            </li>
          ))}
        </ul>
      ) : null}
      <dl class="kv">
        <dt>Version</dt>
        <dd data-testid="instance-version">
          {i.version} · schema {i.schema}
        </dd>
        <dt>Uptime</dt>
        <dd data-testid="instance-uptime">
          {uptime(i.uptimeSeconds)} <span class="muted small">since {when(i.startedAt)}</span>
        </dd>
        <dt>Last backup</dt>
        <dd data-testid="instance-backup">
          {b.last ? (
            <>
              {when(b.last.finishedAt)} · {size(b.last.bytes)} <span class="muted small">({b.last.kind}, {b.last.dest})</span>
            </>
          ) : (
            <Badge kind="warn">never</Badge>
          )}
          {b.lastFailure ? (
            <>
              {' '}
              <Badge kind="bad">last attempt failed {when(b.lastFailure.finishedAt)}</Badge>
            </>
          ) : null}
          <div class="muted small">{b.schedule ? `scheduled every ${b.schedule.intervalMinutes} min into ${b.schedule.dir}, keeping ${b.schedule.keep}` : 'no schedule (--backup-dir); atelier backup DEST takes one'}</div>
        </dd>
        <dt>Calls, last hour</dt>
        <dd data-testid="instance-calls">
          {i.calls.calls} calls · {i.calls.errors ? <Badge kind={i.calls.errors / Math.max(1, i.calls.calls) > 0.05 ? 'bad' : 'warn'}>{i.calls.errors} errors</Badge> : '0 errors'}
        </dd>
        <dt>Slowest tools</dt>
        <dd data-testid="instance-slowest">
          {i.calls.slowest.length ? (
            <ul class="list">
              {i.calls.slowest.map((t: any) => (
                <li>
                  <code>{t.tool}</code> mean {t.meanMs} ms, max {t.maxMs} ms <span class="muted small">({t.calls} calls{t.errors ? `, ${t.errors} errors` : ''})</span>
                </li>
              ))}
            </ul>
          ) : (
            <span class="muted">no calls in the last hour</span>
          )}
        </dd>
        <dt>Disk</dt>
        <dd data-testid="instance-disk">
          workspaces {size(d.workspaces.bytes)} ({d.workspaces.count}) · artifacts {size(d.artifacts.bytes)} of {size(d.artifacts.quotaBytes)} · releases {size(d.releases.bytes)} ({d.releases.count})
          {d.filesystem ? <div class="muted small">filesystem: {size(d.filesystem.freeBytes)} free of {size(d.filesystem.totalBytes)}</div> : null}
        </dd>
      </dl>
    </Section>
  );
}
