import { readFileSync } from 'node:fs';

/** The install root (the directory holding package.json, data/ and dist/ or src/). */
export const ROOT_DIR: string = new URL('../../', import.meta.url).pathname;

/** The package version, read once from package.json next to dist/ or src/. */
export const VERSION: string = (() => {
  try {
    return JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')).version as string;
  } catch {
    return '0.0.0';
  }
})();
