/**
 * Operator commands: `atelier repos allow|deny|list|remove` (approved repositories, in the config
 * file) and `atelier env ...` (environments, variables and secrets, in the database).
 */
import { ConfigError, loadConfig } from '../core/config.js';
import { createApp } from '../app.js';
import { editRepositorySettings, readRepositorySettings, validateRule } from '../services/repos.js';
import { existsSync } from 'node:fs';
import { GLOBAL } from '../services/environments.js';

export type Flags = Record<string, string | true>;

export async function reposCommand(sub: string | undefined, positional: string[], common: string[], out: (s: string) => void): Promise<void> {
  const config = loadConfig(common);
  const file = config.configPath;
  if (sub === 'list') {
    const s = existsSync(file) ? readRepositorySettings(file) : { allow: [], deny: [], extraCaCertificates: [] };
    out(`config file: ${file}\n`);
    out(`allow:\n${s.allow.map((r) => `  ${r}\n`).join('') || '  (none: no repository can be opened)\n'}`);
    out(`deny:\n${s.deny.map((r) => `  ${r}\n`).join('') || '  (none)\n'}`);
    if (s.extraCaCertificates.length) out(`extra CA certificates:\n${s.extraCaCertificates.map((c) => `  ${c}\n`).join('')}`);
    out('repository credentials: `atelier credentials list`\n');
    return;
  }
  if (sub !== 'allow' && sub !== 'deny' && sub !== 'remove') throw new ConfigError('usage: atelier repos allow|deny|remove URL-or-PREFIX/* ... | atelier repos list');
  if (positional.length === 0) throw new ConfigError(`usage: atelier repos ${sub} URL-or-PREFIX/*`);
  for (const r of positional) validateRule(r, 'argument');
  editRepositorySettings(file, (s) => {
    for (const r of positional) {
      s.allow = s.allow.filter((x) => x !== r);
      s.deny = s.deny.filter((x) => x !== r);
      if (sub === 'allow') s.allow.push(r);
      if (sub === 'deny') s.deny.push(r);
    }
  });
  out(`${sub === 'remove' ? 'removed' : sub === 'allow' ? 'allowed' : 'denied'}: ${positional.join(', ')} (in ${file}; a running service applies it at once)\n`);
}

export async function envCommand(
  sub: string | undefined,
  positional: string[],
  flags: Flags,
  common: string[],
  readValue: (prompt: string) => Promise<string>,
  out: (s: string) => void,
): Promise<void> {
  const config = loadConfig(common);
  const app = createApp({ ...config, logLevel: 'warn' });
  try {
    const envs = app.environments;
    const description = typeof flags['--description'] === 'string' ? flags['--description'] : undefined;
    switch (sub) {
      case 'create': {
        const e = envs.create(positional[0] ?? '', description ?? '');
        app.audit.record({ actor: 'cli', action: 'environment_create', target: e.id, outcome: 'ok' });
        out(`${e.id}  ${e.name}\n`);
        return;
      }
      case 'list': {
        for (const e of envs.list()) out(`${e.id}  ${e.name}  ${e.description}\n`);
        out(`(global scope: use "global" as the environment name)\n`);
        return;
      }
      case 'delete': {
        envs.delete(positional[0] ?? '');
        app.audit.record({ actor: 'cli', action: 'environment_delete', target: positional[0] ?? null, outcome: 'ok' });
        out('deleted\n');
        return;
      }
      case 'show': {
        for (const e of envs.entries(positional[0] ?? GLOBAL)) out(`${e.kind === 'secret' ? 'secret  ' : 'variable'}  ${e.name}  ${e.description}\n`);
        return;
      }
      case 'set': {
        // atelier env set ENV NAME [--secret] [--description D]   (value from stdin)
        // atelier env set ENV NAME=VALUE                            (variables only)
        const [scope, spec] = positional;
        if (!scope || !spec) throw new ConfigError('usage: atelier env set ENV|global NAME [--secret] [--description TEXT]  (value read from stdin), or NAME=VALUE for a variable');
        const secret = flags['--secret'] === true;
        let name = spec;
        let value: string;
        if (spec.includes('=')) {
          if (secret) throw new ConfigError('secrets are read from stdin, never from the command line: atelier env set ENV NAME --secret');
          name = spec.slice(0, spec.indexOf('='));
          value = spec.slice(spec.indexOf('=') + 1);
        } else {
          value = await readValue(`Value of ${name}: `);
        }
        const e = envs.set(scope, name, value, { secret, description });
        app.audit.record({ actor: 'cli', action: secret ? 'secret_set' : 'variable_set', target: `${e.scope}/${e.name}`, outcome: 'ok' });
        out(`set ${e.kind} ${e.name} in ${scope}\n`);
        return;
      }
      case 'unset': {
        const [scope, name] = positional;
        envs.unset(scope ?? '', name ?? '');
        app.audit.record({ actor: 'cli', action: 'env_unset', target: `${scope}/${name}`, outcome: 'ok' });
        out('unset\n');
        return;
      }
      default:
        throw new ConfigError('usage: atelier env create NAME [--description D] | list | show ENV | delete ENV | set ENV NAME [--secret] [--description D] | unset ENV NAME');
    }
  } finally {
    app.close();
  }
}
