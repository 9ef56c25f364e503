import { useState } from 'preact/hooks';
import { Action, api, Badge, Empty, ErrorBox, formValues, Section, usePoll, when } from '../lib';

function useSubmit(run: (v: Record<string, string>) => Promise<unknown>) {
  const [err, setErr] = useState<unknown>(null);
  const [out, setOut] = useState<any>(null);
  const onSubmit = async (e: Event) => {
    const f = e.currentTarget as HTMLFormElement;
    const v = formValues(e);
    try {
      setOut(await run(v));
      setErr(null);
      f.reset();
    } catch (x) {
      setErr(x);
    }
  };
  return { err, out, onSubmit };
}

function Credential(p: { c: any; reload: () => Promise<void> }) {
  const c = p.c;
  const [mode, setMode] = useState<'' | 'rotate' | 'test'>('');
  const rotate = useSubmit(async (v) => (await api('POST', `/repository-credentials/${c.id}/rotate`, c.kind === 'token' ? { token: v.secret } : { privateKey: v.secret }), setMode(''), p.reload()));
  const test = useSubmit((v) => api('POST', `/repository-credentials/${c.id}/test`, { repositoryUrl: v.repositoryUrl }));
  return (
    <li class="item">
      <div class="item-h">
        <strong>{c.prefix}</strong> <Badge kind="info">{c.kind === 'token' ? 'token' : 'GitHub App'}</Badge> {c.lastError ? <Badge kind="bad">{c.lastError}</Badge> : null}{' '}
        <span class="muted small">
          {c.label} {c.username ? `· user ${c.username}` : ''} {c.appId ? `· app ${c.appId}` : ''} · version {c.secretVersion} · fingerprint {c.fingerprint} · last used {when(c.lastUsedAt)}
        </span>
      </div>
      <div class="row">
        <button type="button" class="plain" onClick={() => setMode(mode === 'rotate' ? '' : 'rotate')}>Rotate</button>
        <button type="button" class="plain" onClick={() => setMode(mode === 'test' ? '' : 'test')}>Test</button>
        <Action label="Remove" kind="danger" confirm={`Remove the credential for ${c.prefix}?`} run={async () => (await api('DELETE', `/repository-credentials/${c.id}`), p.reload())} />
      </div>
      {mode === 'rotate' ? (
        <form class="inline" autocomplete="off" onSubmit={rotate.onSubmit}>
          {c.kind === 'token' ? (
            <label>
              New token <input type="password" name="secret" required autocomplete="off" />
            </label>
          ) : (
            <label class="wide">
              New private key (PEM) <textarea name="secret" rows={4} required />
            </label>
          )}
          <button class="primary">Rotate</button>
          <ErrorBox error={rotate.err} />
        </form>
      ) : null}
      {mode === 'test' ? (
        <form class="inline" onSubmit={test.onSubmit}>
          <label class="wide">
            Repository URL <input name="repositoryUrl" required defaultValue={c.prefix} />
          </label>
          <button class="primary">Test</button>
          <ErrorBox error={test.err} />
          {test.out ? (
            <p>
              {test.out.ok ? <Badge kind="ok">ok</Badge> : <Badge kind="bad">failed</Badge>} HTTP {test.out.httpStatus ?? '—'} {test.out.detail}
            </p>
          ) : null}
        </form>
      ) : null}
    </li>
  );
}

export function Repositories() {
  const { data, error, reload } = usePoll(async () => {
    const [rules, creds] = await Promise.all([api('GET', '/repository-rules'), api('GET', '/repository-credentials')]);
    return { rules, creds: creds.credentials as any[] };
  }, null);
  const addRule = useSubmit(async (v) => (await api('POST', '/repository-rules', { list: v.list, rule: v.rule }), reload()));
  const addCa = useSubmit(async (v) => (await api('POST', '/ca-certificates', { pem: v.pem }), reload()));
  const [kind, setKind] = useState<'token' | 'github_app'>('token');
  const addCred = useSubmit(async (v) => {
    const body =
      kind === 'token'
        ? { kind, prefix: v.prefix, token: v.token, username: v.username || undefined, label: v.label || undefined }
        : { kind, prefix: v.prefix, appId: v.appId, privateKey: v.privateKey, installationId: v.installationId || undefined, apiUrl: v.apiUrl || undefined, label: v.label || undefined };
    await api('POST', '/repository-credentials', body);
    await reload();
  });
  if (!data) return error ? <ErrorBox error={error} /> : <p class="muted">Loading…</p>;
  const r = data.rules;
  const RuleList = (p: { list: string[]; name: string }) =>
    p.list.length === 0 ? (
      <Empty>{p.name === 'allow' ? 'No allow rule: no repository can be opened.' : 'No deny rule.'}</Empty>
    ) : (
      <ul class="list">
        {p.list.map((x) => (
          <li class="row">
            <Badge kind={p.name === 'allow' ? 'ok' : 'bad'}>{p.name}</Badge> <code class="grow">{x}</code>
            <Action label="Remove" run={async () => (await api('DELETE', '/repository-rules', { rule: x }), reload())} />
          </li>
        ))}
      </ul>
    );
  return (
    <div class="stack">
      <Section title="Approved repositories">
        <p class="muted small">
          A rule ending in <code>/*</code> is a prefix; any other rule is one repository. Deny wins over allow. Saved in {r.configFile}; applied at once.
        </p>
        <RuleList list={r.allow} name="allow" />
        <RuleList list={r.deny} name="deny" />
        <form class="inline" onSubmit={addRule.onSubmit}>
          <label>
            <select name="list">
              <option value="allow">allow</option>
              <option value="deny">deny</option>
            </select>
          </label>
          <label class="wide">
            Rule <input name="rule" required placeholder="https://github.com/acme/*" />
          </label>
          <button class="primary">Add rule</button>
          <ErrorBox error={addRule.err} />
        </form>
      </Section>
      <Section title={`Repository credentials (${data.creds.length})`}>
        <p class="muted small">Tokens and GitHub App keys go in and are never shown back.</p>
        {data.creds.length === 0 ? <Empty>No repository credentials.</Empty> : null}
        <ul class="items">
          {data.creds.map((c) => (
            <Credential c={c} reload={reload} key={c.id} />
          ))}
        </ul>
        <form class="inline" autocomplete="off" onSubmit={addCred.onSubmit}>
          <label>
            Kind{' '}
            <select name="kind" value={kind} onChange={(e) => setKind((e.target as HTMLSelectElement).value as 'token')}>
              <option value="token">token</option>
              <option value="github_app">GitHub App</option>
            </select>
          </label>
          <label class="wide">
            URL prefix <input name="prefix" required placeholder="https://github.com/acme/" />
          </label>
          <label>
            Label <input name="label" />
          </label>
          {kind === 'token' ? (
            <>
              <label>
                Username <input name="username" placeholder="x-access-token" />
              </label>
              <label>
                Token <input type="password" name="token" required autocomplete="off" />
              </label>
            </>
          ) : (
            <>
              <label>
                App id <input name="appId" required />
              </label>
              <label>
                Installation id <input name="installationId" />
              </label>
              <label>
                API URL <input name="apiUrl" placeholder="https://api.github.com" />
              </label>
              <label class="wide">
                Private key (PEM) <textarea name="privateKey" rows={4} required />
              </label>
            </>
          )}
          <button class="primary">Add credential</button>
          <ErrorBox error={addCred.err} />
        </form>
      </Section>
      <Section title="Extra CA certificates">
        <p class="muted small">Trusted, besides the system store, for repository hosts (for example an internal git server).</p>
        {r.extraCaCertificates.length === 0 ? <Empty>None.</Empty> : null}
        <ul class="list">
          {r.extraCaCertificates.map((c: any) => (
            <li class="row">
              <span class="grow">
                <code>{c.path}</code> <span class="muted small">{c.error ? c.error : `${c.subject?.replace(/\n/g, ', ')} · valid to ${c.validTo}`}</span>
              </span>
              <Action label="Remove" run={async () => (await api('DELETE', '/ca-certificates', { path: c.path }), reload())} />
            </li>
          ))}
        </ul>
        <form class="inline" onSubmit={addCa.onSubmit}>
          <label class="wide">
            CA certificate (PEM) <textarea name="pem" rows={4} required placeholder="-----BEGIN CERTIFICATE-----" />
          </label>
          <button class="primary">Add certificate</button>
          <ErrorBox error={addCa.err} />
        </form>
      </Section>
    </div>
  );
}
