import { randomBytes } from 'node:crypto';

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

export function newId(kind: IdKind, chars = 24): string {
  return ID_PREFIXES[kind] + randomToken(chars);
}
