import { randomBytes, randomInt } from 'node:crypto';

/**
 * Identifiers: a fixed prefix plus URL-safe random characters (A-Z a-z 0-9 _ -).
 * 24 random characters carry 144 bits, inside every range the spec gives (10-80, 20-80).
 */
export const ID_PREFIXES = {
  workspace: 'ws_',
  environment: 'env_',
  shell: 'sh_',
  operation: 'op_',
  session: 'sess_',
  task: 'task_',
  packagePlan: 'pkp_',
  packageApply: 'pka_',
  packageResolution: 'pkq_',
  packageBinding: 'pkb_',
  packageRelease: 'pkr_',
  memory: 'mem_',
  knowledge: 'kn_',
  knowledgeLink: 'knl_',
  project: 'prj_',
  artifact: 'art_',
  agent: 'agent_',
  credential: 'cred_',
  verification: 'vref_',
  token: 'tok_',
  audit: 'aud_',
  approval: 'apr_',
  repoCredential: 'rcred_',
  backup: 'bkp_',
  checkpoint: 'ckpt_',
  preview: 'prv_',
  template: 'tpl_',
} as const;

export type IdKind = keyof typeof ID_PREFIXES;

export function randomToken(chars: number): string {
  // base64url of enough bytes, cut to length: every character is from A-Za-z0-9_-.
  return randomBytes(Math.ceil((chars * 3) / 4) + 1)
    .toString('base64url')
    .slice(0, chars);
}

const ALNUM = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';

/**
 * A new identifier: the kind's prefix and `chars` characters of A-Za-z0-9_- (the spec's shape),
 * the last one alphanumeric, so that every id is also a Kubernetes label value (which must end
 * alphanumeric): the Kubernetes driver labels a workspace's objects with its id
 * (src/sandbox/kubernetes/names.ts). One in 32 ids ended in - or _ before, and their objects had
 * no workspace label.
 */
export function newId(kind: IdKind, chars = 24): string {
  const body = randomToken(chars);
  if (chars < 1 || /[A-Za-z0-9]$/.test(body)) return ID_PREFIXES[kind] + body;
  return ID_PREFIXES[kind] + body.slice(0, -1) + ALNUM[randomInt(ALNUM.length)];
}
