/** Time in one place so tests and the reaper agree. */
export const nowMs = (): number => Date.now();
export const nowIso = (): string => new Date().toISOString();
export const isoIn = (ms: number): string => new Date(Date.now() + ms).toISOString();
