/**
 * A periodic background sweep (retention of notes, knowledge items and artifacts): runs `round`
 * now and then every `intervalMs`, never keeps the process alive, and lets a failed round be retried
 * by the next one.
 */
export interface Sweeper {
  stop(): void;
}

export function startSweeper(round: () => void, intervalMs: number): Sweeper {
  round();
  const timer = setInterval(() => {
    try {
      round();
    } catch {
      // the next round retries
    }
  }, intervalMs);
  timer.unref();
  return { stop: () => clearInterval(timer) };
}
