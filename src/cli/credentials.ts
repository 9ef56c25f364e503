/**
 * `atelier credentials ...`: the owner's repository credentials for the credential broker
 * (docs/credentials.md). Secrets come from stdin or a file, never from the command line, and are
 * never printed.
 */
import { readFileSync } from 'node:fs';
import { ConfigError } from '../core/config.js';
import type { App } from '../app.js';
import type { RepoCredentialMeta } from '../services/repos/index.js';

export const CREDENTIALS_USAGE = `usage:
  atelier credentials list [--json]
  atelier credentials add-token PREFIX [--username NAME] [--label TEXT]          token read from stdin
  atelier credentials add-github-app PREFIX --app-id ID --private-key-file FILE [--installation-id N] [--api-url URL] [--label TEXT]
  atelier credentials rotate ID [--private-key-file FILE]                         a token's new value from stdin
  atelier credentials remove ID
  atelier credentials test ID REPOSITORY_URL
PREFIX is https://HOST/ (every repository on the host) or https://HOST/OWNER/ (those under a path); the longest prefix wins.`;

export const CREDENTIALS_FLAGS = ['--json', '--username', '--label', '--app-id', '--private-key-file', '--installation-id', '--api-url'];

type Flags = Record<string, string | true>;

function line(c: RepoCredentialMeta): string {
  const who = c.kind === 'token' ? `token for user ${c.username}` : `GitHub App ${c.appId}${c.installationId ? ` installation ${c.installationId}` : ''} via ${c.apiUrl}`;
  return `${c.id}  ${c.prefix}  ${who}  ${c.fingerprint}  v${c.secretVersion}  last used ${c.lastUsedAt ?? 'never'}${c.lastError ? `  last error: ${c.lastError}` : ''}${c.label ? `  (${c.label})` : ''}\n`;
}

function str(flags: Flags, k: string): string | undefined {
  const v = flags[k];
  if (v === true) throw new ConfigError(`${k} needs a value`);
  return v;
}

function readKeyFile(flags: Flags): string {
  const f = str(flags, '--private-key-file');
  if (!f) throw new ConfigError('--private-key-file FILE is required: the GitHub App private key (PEM) downloaded from the app settings');
  try {
    return readFileSync(f, 'utf8');
  } catch (e) {
    throw new ConfigError(`--private-key-file: cannot read ${f}: ${(e as Error).message}`);
  }
}

export async function credentialsCommand(
  sub: string | undefined,
  positional: string[],
  flags: Flags,
  withApp: <T>(fn: (app: App) => Promise<T> | T) => Promise<T>,
  readSecret: (prompt: string) => Promise<string>,
  out: (s: string) => void,
): Promise<void> {
  const json = flags['--json'] === true;
  const show = (c: RepoCredentialMeta, verb: string) => (json ? out(JSON.stringify(c) + '\n') : out(`${verb}: ${line(c)}`));
  switch (sub) {
    case 'list':
      return withApp((app) => {
        const list = app.repoCredentials.list();
        if (json) return out(JSON.stringify(list) + '\n');
        if (list.length === 0) return out('no repository credentials (pushes and private clones will be refused by the hosts)\n');
        for (const c of list) out(line(c));
      });
    case 'add-token': {
      const [prefix] = positional;
      if (!prefix) throw new ConfigError(CREDENTIALS_USAGE);
      const token = await readSecret(`Token for ${prefix}: `);
      return withApp((app) => show(app.repoCredentials.addToken({ prefix, token, username: str(flags, '--username'), label: str(flags, '--label') }, 'cli'), 'added'));
    }
    case 'add-github-app': {
      const [prefix] = positional;
      if (!prefix) throw new ConfigError(CREDENTIALS_USAGE);
      const privateKey = readKeyFile(flags);
      return withApp((app) =>
        show(
          app.repoCredentials.addGitHubApp(
            { prefix, appId: str(flags, '--app-id'), privateKey, installationId: str(flags, '--installation-id'), apiUrl: str(flags, '--api-url'), label: str(flags, '--label') },
            'cli',
          ),
          'added',
        ),
      );
    }
    case 'rotate': {
      const [id] = positional;
      if (!id) throw new ConfigError(CREDENTIALS_USAGE);
      return withApp(async (app) => {
        const secret = app.repoCredentials.get(id).kind === 'github_app' ? readKeyFile(flags) : await readSecret(`New token for ${id}: `);
        show(app.repoCredentials.rotate(id, secret, 'cli'), 'rotated');
      });
    }
    case 'remove': {
      const [id] = positional;
      if (!id) throw new ConfigError(CREDENTIALS_USAGE);
      return withApp((app) => {
        const r = app.repoCredentials.remove(id, 'cli');
        out(json ? JSON.stringify(r) + '\n' : `removed ${r.id} (${r.prefix})\n`);
      });
    }
    case 'test': {
      const [id, url] = positional;
      if (!id || !url) throw new ConfigError(CREDENTIALS_USAGE);
      const r = await withApp((app) => app.repoCredentials.test(id, url));
      out(json ? JSON.stringify(r) + '\n' : `${r.ok ? 'ok' : 'FAILED'}: ${r.detail}${r.minted ? ` (installation token minted, expires ${r.expiresAt})` : ''}\n`);
      if (!r.ok) process.exitCode = 1;
      return;
    }
    default:
      throw new ConfigError(CREDENTIALS_USAGE);
  }
}
