import { useState } from 'preact/hooks';
import { Action, api, Badge, Empty, ErrorBox, formValues, Section, usePoll } from '../lib';

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
            <Badge kind={e.kind === 'secret' ? 'warn' : 'muted'}>{e.kind}</Badge> <code>{e.name}</code> <span class="grow muted small">{e.description}</span>
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
            await api('PUT', `/environments/${encodeURIComponent(p.env)}/entries/${encodeURIComponent(v.name!)}`, { value: v.value, secret: v.secret === 'on', description: v.description || undefined });
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
        <button class="primary">Set</button>
        <ErrorBox error={err} />
      </form>
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
      <Entries env="global" title="Global (every workspace)" />
      {(data.environments as any[]).map((e) => (
        <Entries env={e.id} title={e.name} description={e.description} key={e.id} onDelete={async () => (await api('DELETE', `/environments/${encodeURIComponent(e.id)}`), reload())} />
      ))}
    </div>
  );
}
