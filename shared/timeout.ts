import { TimeoutError } from './errors.js';

/**
 * Settles like `p`, or rejects with a `TimeoutError` after `ms`, so a call to an unreachable
 * dependency cannot hang a request. The timer is always cleared, so a fast `p` leaves nothing scheduled.
 */
export async function withTimeout<T>(p: Promise<T>, ms: number, what?: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      p,
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new TimeoutError(what, ms)), ms);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}
