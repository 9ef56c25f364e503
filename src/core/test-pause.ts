/**
 * TEST-ONLY pause points (issue #42 items 9 and 12). ATELIER_TEST_PAUSE_AT names one or more
 * points (comma-separated); a process that reaches a named point writes the line
 * `atelier: test pause at <point>` to stderr and waits there, so a test can send a signal (or
 * SIGKILL) at exactly that step of a start, of a sandbox's start or of a short-lived sandbox:
 * a state otherwise reached only by timing (test/e2e/start-failures.test.ts,
 * test/e2e/crash-recovery.test.ts). The points are listed in docs/operations.md ("Start-up
 * failures"). Never set it outside tests: a paused start or sandbox never goes on.
 *
 * A start's pause ends when its `abort` signal fires (a stop request during start-up); the
 * sandbox points wait until the process ends.
 */

const ENV = 'ATELIER_TEST_PAUSE_AT';

function points(): Set<string> {
  return new Set((process.env[ENV] ?? '').split(',').map((s) => s.trim()).filter(Boolean));
}

/** Whether ATELIER_TEST_PAUSE_AT names `point`. */
export function pausesAt(point: string): boolean {
  return points().has(point);
}

/**
 * Waits at `point` when ATELIER_TEST_PAUSE_AT names it (otherwise returns at once). Rejects with
 * the abort's reason when `abort` fires; keeps the event loop alive while it waits.
 */
export async function testPause(point: string, abort?: AbortSignal): Promise<void> {
  if (!pausesAt(point)) return;
  if (abort?.aborted) throw abort.reason;
  process.stderr.write(`atelier: test pause at ${point}\n`);
  await new Promise<void>((_resolve, reject) => {
    const keepAlive = setInterval(() => undefined, 60_000);
    abort?.addEventListener(
      'abort',
      () => {
        clearInterval(keepAlive);
        reject(abort.reason);
      },
      { once: true },
    );
  });
}
