/**
 * Operator commands: `atelier repos allow|deny|list|remove` (approved repositories, in the config
 * file) and `atelier env ...` (environments, variables and secrets, in the database).
 */
import { ConfigError, defaultDataDir, loadConfig, type Config } from '../core/config.js';
import { createApp } from '../app.js';
import { editRepositorySettings, readRepositorySettings, validateRule } from '../services/repos/index.js';
import { existsSync, readFileSync, statSync } from 'node:fs';
import { X509Certificate } from 'node:crypto';
import { resolve } from 'node:path';
import { GLOBAL } from '../services/environments.js';

export type Flags = Record<string, string | true>;

/**
 * CLI commands other than `serve` act on the service's data directory; they never create one.
 * Run where the service's directory does not exist (another user, a systemd unit with its own
 * ATELIER_DATA_DIR), they say which directory they looked at and how to point at the right one,
 * instead of silently starting a second, empty Atelier.
 */
export function requireServiceDataDir(config: Pick<Config, 'dataDir'>): void {
  // An existing directory is the operator's choice (a new one prepared before the first start too).
  if (existsSync(config.dataDir)) return;
  const isDefault = resolve(config.dataDir) === resolve(defaultDataDir());
  throw new ConfigError(
    `no Atelier data directory at ${config.dataDir}${isDefault ? ' (the default for this user)' : ''}: it does not exist, and this command does not create one.\n` +
      'This command works on the data directory of the service. Point it there with --data-dir DIR or ATELIER_DATA_DIR=DIR ' +
      '(the directory `atelier serve` printed as "Data directory" at start; for a systemd unit, its Environment=ATELIER_DATA_DIR), ' +
      'and run it as the user the service runs as. To start a new instance here, run `atelier serve` first.',
  );
}

/** `atelier repos ca add FILE | list | remove FILE`: extra CA certificates trusted for repository hosts. */
export async function reposCaCommand(sub: string | undefined, positional: string[], common: string[], out: (s: string) => void): Promise<void> {
  const config = loadConfig(common);
  const file = config.configPath;
  if (!existsSync(file) && !common.some((c) => c.startsWith('--config'))) requireServiceDataDir(config);
  if (sub === 'list') {
    const s = existsSync(file) ? readRepositorySettings(file) : { extraCaCertificates: [] as string[] };
    out(`config file: ${file}\n`);
    if (s.extraCaCertificates.length === 0) out('extra CA certificates: (none; the system trust store only)\n');
    for (const ca of s.extraCaCertificates) {
      try {
        const cert = new X509Certificate(readFileSync(ca));
        out(`  ${ca}\n    subject ${cert.subject.replace(/\n/g, ', ')}; valid until ${cert.validTo}\n`);
      } catch (e) {
        out(`  ${ca}\n    (unreadable: ${(e as Error).message})\n`);
      }
    }
    return;
  }
  if (sub !== 'add' && sub !== 'remove') throw new ConfigError('usage: atelier repos ca add FILE | list | remove FILE');
  const path = positional[0];
  if (!path || positional.length > 1) throw new ConfigError(`usage: atelier repos ca ${sub} FILE (one PEM file)`);
  const abs = resolve(path);
  if (sub === 'add') {
    if (!existsSync(abs) || !statSync(abs).isFile()) throw new ConfigError(`${abs}: no such file`);
    if (statSync(abs).size > 1024 * 1024) throw new ConfigError(`${abs}: larger than 1 MiB, not a CA certificate file`);
    const pem = readFileSync(abs, 'utf8');
    const blocks = pem.match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g) ?? [];
    if (blocks.length === 0) throw new ConfigError(`${abs}: no PEM certificate (-----BEGIN CERTIFICATE-----) in the file`);
    const subjects: string[] = [];
    for (const b of blocks) {
      let cert: X509Certificate;
      try {
        cert = new X509Certificate(b);
      } catch (e) {
        throw new ConfigError(`${abs}: a certificate does not parse: ${(e as Error).message}`);
      }
      if (!cert.ca) throw new ConfigError(`${abs}: ${cert.subject.replace(/\n/g, ', ')} is not a CA certificate (basicConstraints CA:FALSE); add the CA that issued it`);
      subjects.push(cert.subject.replace(/\n/g, ', '));
    }
    editRepositorySettings(file, (s) => {
      s.extraCaCertificates = [...s.extraCaCertificates.filter((c) => c !== abs), abs];
    });
    out(`added CA certificate ${abs} (${subjects.join('; ')}) to repositories.extraCaCertificates in ${file}; a running service applies it at once\n`);
    return;
  }
  let found = false;
  editRepositorySettings(file, (s) => {
    found = s.extraCaCertificates.includes(abs) || s.extraCaCertificates.includes(path);
    s.extraCaCertificates = s.extraCaCertificates.filter((c) => c !== abs && c !== path);
  });
  if (!found) throw new ConfigError(`${abs} is not in repositories.extraCaCertificates (see atelier repos ca list)`);
  out(`removed CA certificate ${abs} (in ${file})\n`);
}

export async function reposCommand(sub: string | undefined, positional: string[], common: string[], out: (s: string) => void): Promise<void> {
  if (sub === 'ca') return reposCaCommand(positional[0], positional.slice(1), common, out);
  const config = loadConfig(common);
  const file = config.configPath;
  if (!existsSync(file) && !common.some((c) => c.startsWith('--config'))) requireServiceDataDir(config);
  if (sub === 'list') {
    const s = existsSync(file) ? readRepositorySettings(file) : { allow: [], deny: [], extraCaCertificates: [] };
    out(`config file: ${file}\n`);
    out(`allow:\n${s.allow.map((r) => `  ${r}\n`).join('') || '  (none: no repository can be opened)\n'}`);
    out(`deny:\n${s.deny.map((r) => `  ${r}\n`).join('') || '  (none)\n'}`);
    if (s.extraCaCertificates.length) out(`extra CA certificates:\n${s.extraCaCertificates.map((c) => `  ${c}\n`).join('')}`);
    out('repository credentials: `atelier credentials list`\n');
    return;
  }
  if (sub !== 'allow' && sub !== 'deny' && sub !== 'remove') throw new ConfigError('usage: atelier repos allow|deny|remove URL-or-PREFIX/* ... | atelier repos list | atelier repos ca add|list|remove FILE');
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
  requireServiceDataDir(config);
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
        const id = envs.resolve(positional[0] ?? '', 'environment');
        envs.delete(positional[0] ?? '');
        await app.templates.forgetEnvironment(id);
        app.audit.record({ actor: 'cli', action: 'environment_delete', target: positional[0] ?? null, outcome: 'ok' });
        out('deleted\n');
        return;
      }
      case 'show': {
        for (const e of envs.entries(positional[0] ?? GLOBAL)) out(`${e.kind === 'secret' ? 'secret  ' : 'variable'}  ${e.name}${e.setupOnly ? '  (setup-only)' : ''}  ${e.description}\n`);
        return;
      }
      case 'set': {
        // atelier env set ENV NAME [--secret] [--description D]   (value from stdin)
        // atelier env set ENV NAME=VALUE                            (variables only)
        const [scope, spec] = positional;
        if (!scope || !spec) throw new ConfigError('usage: atelier env set ENV|global NAME [--secret] [--description TEXT]  (value read from stdin), or NAME=VALUE for a variable');
        const secret = flags['--secret'] === true;
        const setupOnly = flags['--setup-only'] === true;
        let name = spec;
        let value: string;
        if (spec.includes('=')) {
          if (secret) throw new ConfigError('secrets are read from stdin, never from the command line: atelier env set ENV NAME --secret');
          name = spec.slice(0, spec.indexOf('='));
          value = spec.slice(spec.indexOf('=') + 1);
        } else {
          value = await readValue(`Value of ${name}: `);
        }
        const e = envs.set(scope, name, value, { secret, description, setupOnly });
        app.audit.record({ actor: 'cli', action: secret ? 'secret_set' : 'variable_set', target: `${e.scope}/${e.name}`, outcome: 'ok' });
        out(`set ${e.setupOnly ? 'setup-only ' : ''}${e.kind} ${e.name} in ${scope}\n`);
        return;
      }
      case 'script': {
        // atelier env script ENV                                     shows both scripts
        // atelier env script ENV setup|maintenance [--file F]        sets one (from the file, else stdin)
        // atelier env script ENV setup|maintenance --clear           removes one
        const [scope, which] = positional;
        if (!scope) throw new ConfigError('usage: atelier env script ENV [setup|maintenance [--file FILE | --clear]]');
        if (!which) {
          const s = envs.scripts(scope);
          out(`# setup script\n${s.setupScript ?? '(none)'}\n# maintenance script\n${s.maintenanceScript ?? '(none)'}\n`);
          return;
        }
        if (which !== 'setup' && which !== 'maintenance') throw new ConfigError(`env script: the second argument is setup or maintenance, not ${which}`);
        const field = which === 'setup' ? 'setupScript' : 'maintenanceScript';
        let text: string | null = null;
        if (flags['--clear'] !== true) {
          const file = flags['--file'];
          text = typeof file === 'string' ? readFileSync(file, 'utf8') : await readValue(`${which} script (end with Ctrl-D): `);
        }
        envs.setScripts(scope, { [field]: text });
        app.audit.record({ actor: 'cli', action: `environment_${which}_script_${text === null ? 'clear' : 'set'}`, target: scope, outcome: 'ok' });
        out(text === null ? `${which} script removed from ${scope}\n` : `${which} script set on ${scope} (${text.length} characters)\n`);
        return;
      }
      case 'templates': {
        const [action, id] = positional;
        if (action === 'delete') {
          await app.templates.delete(id ?? '');
          app.audit.record({ actor: 'cli', action: 'template_delete', target: id ?? null, outcome: 'ok' });
          out('deleted\n');
          return;
        }
        if (action) throw new ConfigError('usage: atelier env templates [delete TEMPLATE_ID]');
        for (const t of app.templates.list())
          out(`${t.templateId}  ${t.state}  ${t.environmentName ?? t.environmentId}  ${t.repositoryUrl}  ${(t.baseOid as string | null)?.slice(0, 12) ?? '-'}  ${t.sizeBytes === null ? '-' : `${Math.round((t.sizeBytes as number) / 1048576)} MiB`}${t.failure ? `  ${String(t.failure).split('\n')[0]}` : ''}\n`);
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
        throw new ConfigError('usage: atelier env create NAME [--description D] | list | show ENV | delete ENV | set ENV NAME [--secret] [--setup-only] [--description D] | unset ENV NAME | script ENV [setup|maintenance [--file F | --clear]] | templates [delete ID]');
    }
  } finally {
    app.close();
  }
}
