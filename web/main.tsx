/** The owner's dashboard: a small Preact app, hash-routed, talking only to /api/v1 of this origin. */
import { render } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import { loadSession, logout, sessionExpiresAt, when } from './lib';
import { Overview } from './pages/overview';
import { ProviderKeys } from './pages/keys';
import { Profiles } from './pages/profiles';
import { Approvals } from './pages/approvals';
import { Spend } from './pages/spend';
import { Agents } from './pages/agents';
import { Workspaces } from './pages/workspaces';
import { Repositories } from './pages/repositories';
import { Environments } from './pages/environments';
import { McpAccess } from './pages/mcp';
import { Audit } from './pages/audit';
import { Previews } from './pages/previews';

export const PAGES = [
  { id: 'overview', title: 'Overview', view: Overview },
  { id: 'approvals', title: 'Approvals', view: Approvals },
  { id: 'keys', title: 'Provider keys', view: ProviderKeys },
  { id: 'profiles', title: 'Model profiles', view: Profiles },
  { id: 'spend', title: 'Spend', view: Spend },
  { id: 'agents', title: 'Agents', view: Agents },
  { id: 'workspaces', title: 'Workspaces', view: Workspaces },
  { id: 'previews', title: 'Previews', view: Previews },
  { id: 'repositories', title: 'Repositories', view: Repositories },
  { id: 'environments', title: 'Environments', view: Environments },
  { id: 'mcp', title: 'MCP access', view: McpAccess },
  { id: 'audit', title: 'Audit log', view: Audit },
] as const;

function currentPage(): string {
  // A page may take one more path segment: #/approvals/<id> is one approval request (its deep link).
  const h = location.hash.replace(/^#\/?/, '').split('?')[0]!.split('/')[0]!;
  return PAGES.some((p) => p.id === h) ? h : 'overview';
}

function App() {
  const [page, setPage] = useState(currentPage());
  const [menu, setMenu] = useState(false);
  useEffect(() => {
    const on = () => {
      setPage(currentPage());
      setMenu(false);
      window.scrollTo(0, 0);
    };
    addEventListener('hashchange', on);
    // The session ends at its expiry: go back to the login page then.
    const ms = Date.parse(sessionExpiresAt) - Date.now();
    const t = setTimeout(() => location.assign('/'), Math.max(1000, Math.min(ms, 2 ** 31 - 1)));
    return () => {
      removeEventListener('hashchange', on);
      clearTimeout(t);
    };
  }, []);
  const P = PAGES.find((p) => p.id === page)!;
  useEffect(() => {
    document.title = `${P.title} · Atelier`;
  }, [P]);
  return (
    <div class="layout">
      <header class="topbar">
        <button type="button" class="menu-btn plain" aria-label="Menu" aria-expanded={menu} onClick={() => setMenu(!menu)}>
          ☰
        </button>
        <a class="brand" href="#/overview">
          Atelier
        </a>
        <span class="grow" />
        <span class="muted small session" title={`Session ends ${when(sessionExpiresAt)}`}>
          session ends {new Date(sessionExpiresAt).toISOString().slice(11, 16)} UTC
        </span>
        <button type="button" class="plain small" onClick={logout}>
          Log out
        </button>
      </header>
      <nav class={`side ${menu ? 'open' : ''}`} aria-label="Pages">
        {PAGES.map((p) => (
          <a href={`#/${p.id}`} class={p.id === page ? 'current' : ''} aria-current={p.id === page ? 'page' : undefined}>
            {p.title}
          </a>
        ))}
      </nav>
      <main class="content" data-page={page}>
        <h1>{P.title}</h1>
        <P.view />
      </main>
    </div>
  );
}

void (async () => {
  const root = document.getElementById('app')!;
  if (!(await loadSession())) return location.assign('/');
  render(<App />, root);
})();
