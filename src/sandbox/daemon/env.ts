import { readFileSync } from 'node:fs';

/** Reads a JSON object of strings: the environment commands start from. */
export function readEnvFile(file: string): Record<string, string> {
  const parsed: unknown = JSON.parse(readFileSync(file, 'utf8'));
  if (typeof parsed !== 'object' || parsed === null) throw new Error('env file must hold a JSON object');
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(parsed)) if (typeof v === 'string') env[k] = v;
  return env;
}
