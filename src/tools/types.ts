/**
 * The spec's shared parameter types ("Shared parameter types used in the tool tables" and
 * "Identifier shapes"), as zod schemas that publish the exact JSON Schema constraints.
 */
import { z } from 'zod';

/**
 * `\w` is A-Z a-z 0-9 _ exactly in ECMA-262, the dialect of JSON Schema patterns and of the
 * validator; written so, an identifier's pattern is four tokens shorter on each of ~200 fields.
 */
const ID_CHARS = '\\w-';

/**
 * An identifier: fixed prefix, then min..max characters of A-Z a-z 0-9 _ -. Published with its
 * pattern and no description (the pattern says all of it, and the field's name what it names;
 * issue #45: the same sentence on every workspaceId cost about 2,000 tokens of the list).
 */
export function idOf(prefix: string, min: number, max: number, _what: string): z.ZodString {
  return z
    .string()
    .min(prefix.length + min)
    .max(prefix.length + max)
    .regex(new RegExp(`^${prefix}[${ID_CHARS}]{${min},${max}}$`));
}

export const WSID = idOf('ws_', 20, 80, 'Workspace');
export const ENVID = idOf('env_', 20, 80, 'Environment');
export const SHID = idOf('sh_', 20, 80, 'Shell');
export const OPID = idOf('op_', 20, 80, 'Operation');
export const SESSID = idOf('sess_', 20, 80, 'Coding session');
export const TASKID = idOf('task_', 20, 80, 'Task');
export const PKPID = idOf('pkp_', 20, 80, 'Package plan');
export const PKAID = idOf('pka_', 20, 80, 'Package apply');
export const PKQID = idOf('pkq_', 20, 80, 'Package resolution');
export const PKBID = idOf('pkb_', 20, 80, 'Package binding');
export const PKRID = idOf('pkr_', 20, 80, 'Package release');
export const MEMID = idOf('mem_', 10, 80, 'Memory note');
export const KNID = idOf('kn_', 10, 80, 'Knowledge item');
export const KNLID = idOf('knl_', 10, 80, 'Knowledge link');
export const PRJID = idOf('prj_', 20, 80, 'Project');
export const ARTID = idOf('art_', 20, 80, 'Artifact');
export const AGENTID = idOf('agent_', 20, 80, 'Agent');
export const CKPTID = idOf('ckpt_', 20, 80, 'Checkpoint');
export const CREDID = idOf('cred_', 20, 80, 'Provider credential');
export const VREFID = idOf('vref_', 20, 80, 'Connection-check reference');
export const THREADID = idOf('PRRT_', 4, 200, 'Review thread');

/** Model profile identifier: A-Z a-z 0-9 . _ - ; length 1-80. */
export const PROFILEID = z
  .string()
  .min(1)
  .max(80)
  .regex(/^[\w.-]{1,80}$/);

/**
 * Idempotency key: A-Z a-z 0-9 . _ : - ; length 8-128. What it does (and what a cursor is) is said
 * once, in the server's instructions (src/mcp/http.ts INSTRUCTIONS), not on each of 20 tools.
 */
export const IDEM = z
  .string()
  .min(8)
  .max(128)
  .regex(/^[\w.:-]{8,128}$/)
  ;

/** Opaque pagination cursor, at most 256 characters. */
export const CUR = z.string().min(1).max(256);

/** SHA-256 hex digest: exactly 64 hexadecimal characters. */
export const SHA = z
  .string()
  .length(64)
  .regex(/^[0-9a-fA-F]{64}$/);

/**
 * Git object id. The spec leaves the pattern open; we accept a full object id only
 * (40 hex characters for SHA-1 repositories, 64 for SHA-256 ones), because every use is a
 * compare-and-swap that must name one object exactly. See docs/decisions.md.
 */
export const OID = z
  .string()
  .min(40)
  .max(64)
  .regex(/^([0-9a-f]{40}|[0-9a-f]{64})$/);

export const MAX_INT = 9007199254740991;

/** Integer 0..9007199254740991 unless another range is given. */
export function int(min = 0, max = MAX_INT): z.ZodNumber {
  return z.number().int().min(min).max(max);
}
export const INT = int();

/** A string of min..max characters. */
export function str(min: number, max: number): z.ZodString {
  return z.string().min(min).max(max);
}

/** A workspace-relative path (1-1024 characters). */
export const PATH = str(1, 1024);

/** Names of 1-80 (or n) characters of A-Za-z0-9._- */
export function name(min: number, max: number, extra = ''): z.ZodString {
  const cls = `\\w.${extra}-`;
  return z
    .string()
    .min(min)
    .max(max)
    .regex(new RegExp(`^[${cls}]{${min},${max}}$`));
}

/** A boolean that may only be sent as true ("only the value true"). */
export const TRUE_ONLY = z.literal(true);

/** ISO date (YYYY-MM-DD) or ISO datetime with offset. */
export const ISO_DATE_OR_DATETIME = z.union([z.iso.date(), z.iso.datetime({ offset: true })]);

export const EMAIL = z.email().max(320);

export const URI = z.url();

export { z };
