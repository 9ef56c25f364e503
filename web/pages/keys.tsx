import { useState } from 'preact/hooks';
import { Action, api, Badge, Empty, ErrorBox, formValues, Section, usePoll, when } from '../lib';

function Probes(p: { check: any }) {
  if (!p.check) return <div class="muted small">no connection check since the key was added or rotated</div>;
  return (
    <div>
      {p.check.ok ? <Badge kind="ok">check passed</Badge> : <Badge kind="bad">check failed</Badge>} <span class="muted small">{when(p.check.checkedAt)} · {p.check.model}</span>
      <ul class="probes">
        {(p.check.probes ?? []).map((raw: any) => {
          // A fresh check answers probe objects; the stored last check keeps "name:status".
          const x = typeof raw === 'string' ? { name: raw.split(':')[0], status: raw.split(':')[1] } : raw;
          return (
          <li>
            <Badge kind={x.status === 'pass' ? 'ok' : x.status === 'fail' ? 'bad' : 'muted'}>{x.status}</Badge> {x.name} {x.httpStatus ? `HTTP ${x.httpStatus}` : ''} {x.ms !== undefined ? `${x.ms} ms` : ''} <span class="muted small">{x.detail ?? ''}</span>
          </li>
          );
        })}
      </ul>
    </div>
  );
}

function KeyRow(p: { c: any; reload: () => Promise<void> }) {
  const c = p.c;
  const [mode, setMode] = useState<'' | 'rotate' | 'check'>('');
  const [err, setErr] = useState<unknown>(null);
  const [result, setResult] = useState<any>(null);
  return (
    <li class="item" data-credential={c.id}>
      <div class="item-h">
        <strong>{c.label || c.id}</strong> <Badge kind={c.status === 'active' ? 'ok' : 'muted'}>{c.status}</Badge> <span class="muted small">{c.provider} · {c.id} · key version {c.keyVersion} · {c.authHeader}</span>
      </div>
      <Probes check={result ?? c.lastCheck} />
      <div class="row">
        <button type="button" class="plain" onClick={() => setMode(mode === 'rotate' ? '' : 'rotate')}>Rotate</button>
        <button type="button" class="plain" onClick={() => setMode(mode === 'check' ? '' : 'check')}>Check connection</button>
        {c.status === 'active' ? (
          <Action label="Disable" run={async () => (await api('POST', `/provider-credentials/${c.id}/disable`), p.reload())} />
        ) : (
          <Action label="Enable" run={async () => (await api('POST', `/provider-credentials/${c.id}/enable`), p.reload())} />
        )}
        <Action label="Delete" kind="danger" confirm={`Delete the key ${c.label || c.id}? Profiles on it stop routing.`} run={async () => (await api('DELETE', `/provider-credentials/${c.id}`), p.reload())} />
      </div>
      {mode === 'rotate' ? (
        <form
          class="inline"
          autocomplete="off"
          onSubmit={async (e) => {
            const v = formValues(e);
            (e.currentTarget as HTMLFormElement).reset();
            try {
              await api('POST', `/provider-credentials/${c.id}/rotate`, { key: v.key });
              setMode('');
              setErr(null);
              await p.reload();
            } catch (x) {
              setErr(x);
            }
          }}
        >
          <label>
            New key <input type="password" name="key" required autocomplete="off" />
          </label>
          <button class="primary">Rotate</button>
        </form>
      ) : null}
      {mode === 'check' ? (
        <form
          class="inline"
          onSubmit={async (e) => {
            const v = formValues(e);
            try {
              setResult(await api('POST', '/model-connection/verify', { credentialId: c.id, model: v.model, apiMode: v.apiMode }));
              setErr(null);
            } catch (x) {
              setErr(x);
            }
          }}
        >
          <label>
            Model <input name="model" required placeholder="provider model id" />
          </label>
          <label>
            API mode{' '}
            <select name="apiMode">
              <option value="chat-completions">chat-completions</option>
              <option value="responses">responses</option>
            </select>
          </label>
          <button class="primary">Run check</button>
        </form>
      ) : null}
      <ErrorBox error={err} />
    </li>
  );
}

export function ProviderKeys() {
  const { data, error, reload } = usePoll(async () => {
    const [creds, providers] = await Promise.all([api('GET', '/provider-credentials'), api('GET', '/model-providers')]);
    return { creds: creds.credentials as any[], providers: providers.providers as any[] };
  }, null);
  const [err, setErr] = useState<unknown>(null);
  if (!data) return error ? <ErrorBox error={error} /> : <p class="muted">Loading…</p>;
  return (
    <div class="stack">
      <Section title="Add a provider key">
        <p class="muted small">The key is typed once, sealed at rest, and never shown again on any page or in any answer.</p>
        <form
          class="inline"
          autocomplete="off"
          data-testid="add-key"
          onSubmit={async (e) => {
            const v = formValues(e);
            const form = e.currentTarget as HTMLFormElement;
            try {
              await api('POST', '/provider-credentials', { provider: v.provider, key: v.key, authHeader: v.authHeader || undefined, label: v.label || undefined });
              form.reset();
              setErr(null);
              await reload();
            } catch (x) {
              setErr(x);
            }
          }}
        >
          <label>
            Provider{' '}
            <select name="provider">
              {data.providers.map((p) => (
                <option value={p.provider}>{p.provider}</option>
              ))}
            </select>
          </label>
          <label>
            Label <input name="label" placeholder="e.g. main" />
          </label>
          <label>
            Key <input type="password" name="key" required autocomplete="off" />
          </label>
          <label>
            Auth header{' '}
            <select name="authHeader">
              <option value="">default</option>
              <option value="bearer">bearer</option>
              <option value="x-api-key">x-api-key</option>
            </select>
          </label>
          <button class="primary">Add key</button>
        </form>
        <ErrorBox error={err} />
      </Section>
      <Section title={`Keys (${data.creds.length})`}>
        {data.creds.length === 0 ? <Empty>No provider keys yet.</Empty> : null}
        <ul class="items">
          {data.creds.map((c) => (
            <KeyRow c={c} reload={reload} key={c.id} />
          ))}
        </ul>
      </Section>
    </div>
  );
}
