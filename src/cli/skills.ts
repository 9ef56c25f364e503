/**
 * `atelier skills ...` (owner skills) and `atelier deployments ...` (the owner's deployment
 * enrolments), docs/extensions.md. Skill files are read from a directory on this machine, by
 * the owner; nothing here reads a workspace.
 */
import { lstatSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ConfigError } from '../core/config.js';
import type { App } from '../app.js';

export const SKILLS_USAGE = `usage:
  atelier skills list [--json]                  owner and built-in skills
  atelier skills add DIR [--json]               add or replace an owner skill from a directory holding SKILL.md
  atelier skills remove NAME
  atelier deployments list [--json]             the owner's deployment enrolments
  atelier deployments allow REPOSITORY_URL TARGET SHA256 [--environment ENV] [--allow-private-hosts]
                                                let TARGET (exactly this definition, from deployments_list) run, with
                                                the secrets it names from ENV and egress to the hosts it names
  atelier deployments revoke REPOSITORY_URL TARGET`;

export const SKILLS_FLAGS = ['--json', '--environment', '--allow-private-hosts'];

type Flags = Record<string, string | true>;

/** Reads a skill directory (regular files only, no symlinks, at most 5 levels). */
export function readSkillDir(dir: string): Record<string, Buffer> {
  const files: Record<string, Buffer> = {};
  const walk = (rel: string, depth: number) => {
    for (const name of readdirSync(join(dir, rel)).sort()) {
      const r = rel ? `${rel}/${name}` : name;
      const st = lstatSync(join(dir, r));
      if (st.isSymbolicLink()) throw new ConfigError(`${join(dir, r)} is a symlink: owner skills hold regular files only`);
      if (st.isDirectory()) {
        if (depth >= 4) throw new ConfigError(`${join(dir, r)}: skill directories are at most 5 levels deep`);
        walk(r, depth + 1);
      } else if (st.isFile()) files[r] = readFileSync(join(dir, r));
    }
  };
  walk('', 0);
  return files;
}

export async function skillsCommand(
  cmd: 'skills' | 'deployments',
  sub: string | undefined,
  positional: string[],
  flags: Flags,
  withApp: <T>(fn: (app: App) => Promise<T> | T) => Promise<T>,
  out: (s: string) => void,
): Promise<void> {
  const json = flags['--json'] === true;
  const print = (v: unknown, text: string) => out(json ? JSON.stringify(v) + '\n' : text);
  if (cmd === 'skills') {
    switch (sub) {
      case 'list':
        return withApp((app) => {
          const list = app.extensions.skills.ownerList();
          print(list, list.map((s) => `${String(s.name).padEnd(32)} ${String(s.source).padEnd(9)} ${s.sha256}${s.valid ? '' : '  MALFORMED'}  ${s.description ?? ''}\n`).join('') || 'no skills\n');
        });
      case 'add': {
        const dir = positional[0];
        if (!dir) throw new ConfigError('usage: atelier skills add DIR');
        const files = readSkillDir(dir);
        return withApp((app) => {
          const r = app.extensions.skills.ownerPut(files, 'cli');
          print(r, `${r.replaced ? 'replaced' : 'added'} owner skill ${r.name} (sha256 ${r.sha256}, ${(r.files as unknown[]).length} files)\n`);
        });
      }
      case 'remove': {
        const name = positional[0];
        if (!name) throw new ConfigError('usage: atelier skills remove NAME');
        return withApp((app) => void print(app.extensions.skills.ownerRemove(name, 'cli'), `removed owner skill ${name}\n`));
      }
      default:
        throw new ConfigError(SKILLS_USAGE);
    }
  }
  switch (sub) {
    case 'list':
      return withApp((app) => {
        const list = app.extensions.deployments.enrolments();
        print(list, list.map((e) => `${e.repositoryUrl}  ${e.target}  ${e.targetSha256}  env ${e.environmentId ?? '-'}${e.allowPrivateHosts ? '  private hosts allowed' : ''}\n`).join('') || 'no deployment enrolments\n');
      });
    case 'allow': {
      const [repo, target, sha] = positional;
      if (!repo || !target || !sha) throw new ConfigError('usage: atelier deployments allow REPOSITORY_URL TARGET SHA256 [--environment ENV] [--allow-private-hosts]');
      const env = flags['--environment'];
      if (env === true) throw new ConfigError('--environment needs a value');
      return withApp((app) => {
        const e = app.extensions.deployments.enrol({ repositoryUrl: repo, target, targetSha256: sha, environmentId: env, allowPrivateHosts: flags['--allow-private-hosts'] === true }, 'cli');
        print(e, `enrolled ${e.target} of ${e.repositoryUrl} (${e.targetSha256})\n`);
      });
    }
    case 'revoke': {
      const [repo, target] = positional;
      if (!repo || !target) throw new ConfigError('usage: atelier deployments revoke REPOSITORY_URL TARGET');
      return withApp((app) => void print(app.extensions.deployments.revoke(repo, target, 'cli'), `revoked ${target} of ${repo}\n`));
    }
    default:
      throw new ConfigError(SKILLS_USAGE);
  }
}
