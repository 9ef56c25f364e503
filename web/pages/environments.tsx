import { useState } from 'preact/hooks';
import { Action, api, Badge, Empty, ErrorBox, formValues, Section, usePoll, when } from '../lib';

const mib = (b: number | null) => (b === null ? '–' : `${(b / 1048576).toFixed(1)} MiB`);

/** Workspace templates (docs/templates.md): what each environment's setup script left, per repository and base commit. */
function Templates() {
  const { data, error, reload } = usePoll(() => api('GET', '/templates'), 5000);
  return (
    <Section title="Workspace templates">
      <p class="muted small">The result of an environment's setup script, kept per repository, environment and base commit; later opens start from it and run only the maintenance script.</p>
      <ErrorBox error={error} />
      {data && data.templates.length === 0 ? <Empty>No templates yet: they are made at the first open of a repository with an environment that has a setup script.</Empty> : null}
      <ul class="list">
        {(data?.templates ?? []).map((t: any) => (
          <li class="row" data-template={t.templateId} data-template-state={t.state}>
            <Badge kind={t.state === 'ready' ? 'ok' : t.state === 'failed' ? 'bad' : 'info'}>{t.state}</Badge> <code class="small">{t.templateId}</code>
            <span class="grow small">
              {t.environmentName ?? t.environmentId} · {t.repositoryUrl}
              {t.ref ? ` @ ${t.ref}` : ''} · base <code>{t.baseOid ? t.baseOid.slice(0, 12) : '–'}</code> · {mib(t.sizeBytes)}
              {t.setupMs !== null ? ` · setup ${(t.setupMs / 1000).toFixed(1)} s` : ''} · used {t.uses}× · {when(t.lastUsedAt ?? t.createdAt)}
              {t.failure ? <pre class="small">{t.failure}</pre> : null}
            </span>
            {t.state !== 'building' ? <Action label="Delete" confirm={`Delete template ${t.templateId}?`} run={async () => (await api('DELETE', `/templates/${encodeURIComponent(t.templateId)}`), reload())} /> : null}
          </li>
        ))}
      </ul>
    </Section>
  );
}

/** An environment's setup and maintenance scripts (docs/templates.md). */
function Scripts(p: { env: string }) {
  const { data, error, reload } = usePoll(() => api('GET', `/environments/${encodeURIComponent(p.env)}/scripts`), null, [p.env]);
  const [err, setErr] = useState<unknown>(null);
  if (!data) return <ErrorBox error={error} />;
  return (
    <form
      class="stack"
      data-scripts={p.env}
      onSubmit={async (ev) => {
        const v = formValues(ev);
        try {
          await api('PUT', `/environments/${encodeURIComponent(p.env)}/scripts`, { setupScript: v.setupScript?.trim() ? v.setupScript : null, maintenanceScript: v.maintenanceScript?.trim() ? v.maintenanceScript : null });
          setErr(null);
          await reload();
        } catch (x) {
          setErr(x);
        }
      }}
    >
      <label>
        Setup script (runs once per repository and base commit, with dependency-access and the setup-only entries)
        <textarea name="setupScript" rows={4} defaultValue={data.setupScript ?? ''} placeholder="npm ci" />
      </label>
      <label>
        Maintenance script (runs at later opens, in the workspace)
        <textarea name="maintenanceScript" rows={2} defaultValue={data.maintenanceScript ?? ''} placeholder="git status --short" />
      </label>
      <button class="primary">Save scripts</button>
      <ErrorBox error={err} />
    </form>
  );
}

function Entries(p: { env: string; title: string; description?: string; onDelete?: () => Promise<unknown> }) {
  const { data, error, reload } = usePoll(() => api('GET', `/environments/${encodeURIComponent(p.env)}/entries`), null, [p.env]);
  const [err, setErr] = useState<unknown>(null);
  return (
    <Section title={p.title} actions={p.onDelete ? <Action label="Delete environment" kind="danger" confirm={`Delete ${p.title} and all its values?`} run={p.onDelete} /> : undefined}>
      {p.description ? <p class="muted small">{p.description}</p> : null}
      <ErrorBox error={error} />
      {data && data.entries.length === 0 ? <Empty>No variables or secrets.</Empty> : null}
      <ul class="list">
        {(data?.entries ?? []).map((e: any) => (
          <li class="row">
            <Badge kind={e.kind === 'secret' ? 'warn' : 'muted'}>{e.kind}</Badge> {e.setupOnly ? <Badge kind="info">setup-only</Badge> : null} <code>{e.name}</code> <span class="grow muted small">{e.description}</span>
            {e.kind === 'variable' && e.value !== undefined ? <code class="small">{e.value}</code> : null}
            <Action label="Delete" confirm={`Delete ${e.name}?`} run={async () => (await api('DELETE', `/environments/${encodeURIComponent(p.env)}/entries/${encodeURIComponent(e.name)}`), reload())} />
          </li>
        ))}
      </ul>
      <form
        class="inline"
        autocomplete="off"
        onSubmit={async (ev) => {
          const f = ev.currentTarget as HTMLFormElement;
          const v = formValues(ev);
          try {
            await api('PUT', `/environments/${encodeURIComponent(p.env)}/entries/${encodeURIComponent(v.name!)}`, { value: v.value, secret: v.secret === 'on', description: v.description || undefined, ...(p.env !== 'global' ? { setupOnly: v.setupOnly === 'on' } : {}) });
            f.reset();
            setErr(null);
            await reload();
          } catch (x) {
            setErr(x);
          }
        }}
      >
        <label>
          Name <input name="name" required placeholder="API_TOKEN" />
        </label>
        <label>
          Value <input type="password" name="value" required autocomplete="off" />
        </label>
        <label>
          Description <input name="description" />
        </label>
        <label class="check">
          <input type="checkbox" name="secret" defaultChecked /> secret (never shown back)
        </label>
        {p.env !== 'global' ? (
          <label class="check">
            <input type="checkbox" name="setupOnly" /> setup-only (the setup script alone sees it)
          </label>
        ) : null}
        <button class="primary">Set</button>
        <ErrorBox error={err} />
      </form>
      {p.env !== 'global' ? <Scripts env={p.env} /> : null}
    </Section>
  );
}

export function Environments() {
  const { data, error, reload } = usePoll(() => api('GET', '/environments'), null);
  const [err, setErr] = useState<unknown>(null);
  if (!data) return error ? <ErrorBox error={error} /> : <p class="muted">Loading…</p>;
  return (
    <div class="stack">
      <Section title="New environment">
        <form
          class="inline"
          onSubmit={async (ev) => {
            const f = ev.currentTarget as HTMLFormElement;
            const v = formValues(ev);
            try {
              await api('POST', '/environments', { name: v.name, description: v.description || '' });
              f.reset();
              setErr(null);
              await reload();
            } catch (x) {
              setErr(x);
            }
          }}
        >
          <label>
            Name <input name="name" required placeholder="staging" />
          </label>
          <label class="wide">
            Description <input name="description" />
          </label>
          <button class="primary">Create</button>
          <ErrorBox error={err} />
        </form>
      </Section>
      <Templates />
      <Entries env="global" title="Global (every workspace)" />
      {(data.environments as any[]).map((e) => (
        <Entries env={e.id} title={e.name} description={e.description} key={e.id} onDelete={async () => (await api('DELETE', `/environments/${encodeURIComponent(e.id)}`), reload())} />
      ))}
    </div>
  );
}
