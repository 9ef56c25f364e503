/** Shared helpers of the dashboard: the API client (session cookie + CSRF), polling, formatting. */
import { useEffect, useRef, useState, useCallback } from 'preact/hooks';
import type { ComponentChildren } from 'preact';

export interface ApiErrorBody {
  code: string;
  message: string;
  details?: Record<string, unknown>;
}

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly body: ApiErrorBody,
  ) {
    super(body.message);
  }
}

let csrf = '';
export let sessionExpiresAt = '';

export async function loadSession(): Promise<boolean> {
  const r = await fetch('/api/v1/session', { credentials: 'same-origin' });
  if (!r.ok) return false;
  const j = await r.json();
  csrf = j.csrfToken;
  sessionExpiresAt = j.expiresAt;
  return true;
}

export async function api<T = any>(method: string, path: string, body?: unknown): Promise<T> {
  const headers: Record<string, string> = {};
  if (body !== undefined) headers['content-type'] = 'application/json';
  if (method !== 'GET') headers['x-csrf-token'] = csrf;
  const r = await fetch('/api/v1' + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), credentials: 'same-origin' });
  const j = await r.json().catch(() => ({}));
  if (r.status === 401) {
    // The session expired or was ended: back to the login page.
    location.assign('/');
  }
  if (!r.ok) throw new ApiError(r.status, j.error ?? { code: 'INTERNAL', message: `HTTP ${r.status}` });
  return j as T;
}

export const logout = async () => {
  await fetch('/logout', { method: 'POST', headers: { 'x-csrf-token': csrf }, credentials: 'same-origin' });
  location.assign('/');
};

/** Loads data and refreshes it every `everyMs` while the tab is visible (never faster, never overlapping). */
export function usePoll<T>(load: () => Promise<T>, everyMs: number | null, deps: unknown[] = []): { data: T | null; error: ApiError | Error | null; reload: () => Promise<void> } {
  const [data, setData] = useState<T | null>(null);
  const [error, setError] = useState<ApiError | Error | null>(null);
  const busy = useRef(false);
  const loadRef = useRef(load);
  loadRef.current = load;
  const reload = useCallback(async () => {
    if (busy.current) return;
    busy.current = true;
    try {
      setData(await loadRef.current());
      setError(null);
    } catch (e) {
      setError(e as Error);
    } finally {
      busy.current = false;
    }
  }, []);
  useEffect(() => {
    setData(null);
    void reload();
    if (!everyMs) return;
    const t = setInterval(() => {
      if (document.visibilityState === 'visible') void reload();
    }, everyMs);
    return () => clearInterval(t);
  }, deps);
  return { data, error, reload };
}

export function usd(micros: number | null | undefined): string {
  if (micros === null || micros === undefined) return 'no cap';
  const v = micros / 1e6;
  if (v !== 0 && Math.abs(v) < 0.01) return `$${v.toFixed(4)}`;
  return `$${v.toLocaleString('en-US', { minimumFractionDigits: 2, maximumFractionDigits: 2 })}`;
}

export function when(iso: string | null | undefined): string {
  if (!iso) return '—';
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return iso;
  const diff = (Date.now() - d.getTime()) / 1000;
  const abs = Math.abs(diff);
  const rel = abs < 60 ? `${Math.round(abs)}s` : abs < 3600 ? `${Math.round(abs / 60)}m` : abs < 86400 ? `${Math.round(abs / 3600)}h` : `${Math.round(abs / 86400)}d`;
  return `${d.toISOString().slice(0, 16).replace('T', ' ')} UTC (${diff >= 0 ? rel + ' ago' : 'in ' + rel})`;
}

export function Badge(p: { kind?: 'ok' | 'warn' | 'bad' | 'info' | 'muted'; children: ComponentChildren }) {
  return <span class={`badge ${p.kind ?? 'muted'}`}>{p.children}</span>;
}

export function ErrorBox(p: { error: unknown }) {
  if (!p.error) return null;
  const e = p.error as ApiError;
  return (
    <p class="error" role="alert">
      {e.body?.code ? <strong>{e.body.code}: </strong> : null}
      {e.message}
    </p>
  );
}

export function Section(p: { title: string; actions?: ComponentChildren; children: ComponentChildren; id?: string }) {
  return (
    <section class="card" id={p.id}>
      <header class="card-h">
        <h2>{p.title}</h2>
        {p.actions ? <div class="row">{p.actions}</div> : null}
      </header>
      {p.children}
    </section>
  );
}

/** A button that runs an async action, shows it is busy, and reports the error next to it. */
export function Action(p: { label: string; run: () => Promise<unknown>; kind?: 'primary' | 'danger' | 'plain'; confirm?: string; testid?: string }) {
  const [busy, setBusy] = useState(false);
  const [err, setErr] = useState<unknown>(null);
  return (
    <span class="action">
      <button
        type="button"
        class={p.kind ?? 'plain'}
        disabled={busy}
        data-testid={p.testid}
        onClick={async () => {
          if (p.confirm && !confirm(p.confirm)) return;
          setBusy(true);
          setErr(null);
          try {
            await p.run();
          } catch (e) {
            setErr(e);
          } finally {
            setBusy(false);
          }
        }}
      >
        {busy ? '…' : p.label}
      </button>
      {err ? <ErrorBox error={err} /> : null}
    </span>
  );
}

/** Form helper: collects named inputs of a form as strings. */
export function formValues(e: Event): Record<string, string> {
  e.preventDefault();
  const f = e.currentTarget as HTMLFormElement;
  const out: Record<string, string> = {};
  new FormData(f).forEach((v, k) => (out[k] = String(v)));
  return out;
}

export function Empty(p: { children: ComponentChildren }) {
  return <p class="empty">{p.children}</p>;
}

export function Copy(p: { text: string; label?: string }) {
  const [done, setDone] = useState(false);
  return (
    <div class="copy">
      <pre>{p.text}</pre>
      <button
        type="button"
        class="plain small"
        onClick={async () => {
          await navigator.clipboard?.writeText(p.text).catch(() => undefined);
          setDone(true);
          setTimeout(() => setDone(false), 1500);
        }}
      >
        {done ? 'Copied' : (p.label ?? 'Copy')}
      </button>
    </div>
  );
}

/** Bytes as KiB, MiB, GiB (binary units); null: not measured. */
export const size = (n: number | null | undefined): string => {
  if (n === null || n === undefined) return 'not measured';
  if (n < 1024) return `${n} B`;
  const u = ['KiB', 'MiB', 'GiB', 'TiB'];
  let v = n / 1024;
  let i = 0;
  while (v >= 1024 && i < u.length - 1) {
    v /= 1024;
    i++;
  }
  return `${v.toFixed(v < 10 ? 1 : 0)} ${u[i]}`;
};
