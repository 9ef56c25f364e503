/** Time in one place so tests and the reaper agree. */
export const nowMs = (): number => Date.now();
export const nowIso = (): string => new Date().toISOString();
export const isoIn = (ms: number): string => new Date(Date.now() + ms).toISOString();

/**
 * Waits for `work` at most `ms`: true when it settled in time (fulfilled or rejected), false when
 * the time ran out first. The timer never keeps the process alive and is cleared either way.
 */
export async function settlesWithin(work: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<false>((resolve) => {
    timer = setTimeout(() => resolve(false), ms);
    timer.unref();
  });
  try {
    return await Promise.race([work.then(() => true, () => true), timeout]);
  } finally {
    clearTimeout(timer);
  }
}
