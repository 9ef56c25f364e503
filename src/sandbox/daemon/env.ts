import { readFileSync } from 'node:fs';
import { DaemonError, type EnvSetParams } from './protocol.js';

/** Reads a JSON object of strings: the environment commands start from. */
export function readEnvFile(file: string): Record<string, string> {
  const parsed: unknown = JSON.parse(readFileSync(file, 'utf8'));
  if (typeof parsed !== 'object' || parsed === null) throw new Error('env file must hold a JSON object');
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(parsed)) if (typeof v === 'string') env[k] = v;
  return env;
}

/** Most variables `env.set` takes. */
export const MAX_ENV_VARS = 1024;
/** Most bytes (names and values, UTF-8) `env.set` takes. */
export const MAX_ENV_BYTES = 1024 * 1024;

/**
 * `env.set`: the environment commands start from, given after the daemon started (a Pod started
 * before its workspace was known: a warm-pool Pod the runner claimed, docs/scaling.md). It
 * replaces the whole base environment (what --env-file gave) for every later exec and terminal;
 * running ones keep theirs. Only a flat object of strings is taken: names without `=` or NUL, at
 * most MAX_ENV_VARS of them and MAX_ENV_BYTES in all; anything else is refused whole and the
 * environment stays as it was.
 */
export function envMethods(baseEnv: Record<string, string>): { 'env.set': (params: unknown) => { set: number } } {
  return {
    'env.set': (params: unknown) => {
      const env = checkEnv(params);
      for (const k of Object.keys(baseEnv)) delete baseEnv[k];
      // Defined, not assigned: a variable named __proto__ is a variable.
      for (const [k, v] of Object.entries(env)) Object.defineProperty(baseEnv, k, { value: v, enumerable: true, writable: true, configurable: true });
      return { set: Object.keys(env).length };
    },
  };
}

/** The variables as [name, value] pairs in an object made by Object.fromEntries (own data properties, __proto__ included). */
function checkEnv(params: unknown): Record<string, string> {
  const invalid = (message: string, details: Record<string, unknown> = {}): DaemonError => new DaemonError('INVALID_ARGUMENT', `env.set: ${message}`, { field: 'env', ...details });
  const p = params as Partial<EnvSetParams> | null | undefined;
  if (typeof p !== 'object' || p === null || Array.isArray(p)) throw invalid('params must be an object');
  const env = p.env as unknown;
  if (typeof env !== 'object' || env === null || Array.isArray(env) || Object.getPrototypeOf(env) !== Object.prototype) throw invalid('env must be a plain object of strings');
  const out: Array<[string, string]> = [];
  let n = 0;
  let bytes = 0;
  for (const [k, v] of Object.entries(env)) {
    if (++n > MAX_ENV_VARS) throw invalid(`at most ${MAX_ENV_VARS} variables`, { limit: MAX_ENV_VARS });
    if (!/^[^=\0]+$/.test(k)) throw invalid('a name must be non-empty, without = or NUL', { name: k.slice(0, 100) });
    if (typeof v !== 'string') throw invalid('every value must be a string', { name: k.slice(0, 100) });
    if (v.includes('\0')) throw invalid('a value must not contain NUL', { name: k.slice(0, 100) });
    bytes += Buffer.byteLength(k) + Buffer.byteLength(v);
    if (bytes > MAX_ENV_BYTES) throw invalid(`at most ${MAX_ENV_BYTES} bytes of names and values`, { limit: MAX_ENV_BYTES });
    out.push([k, v]);
  }
  return Object.fromEntries(out);
}
