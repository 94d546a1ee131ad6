/**
 * Settles like `p`, or rejects after `ms` so a call to an unreachable dependency cannot hang a
 * request. The timer is always cleared, so a fast `p` leaves nothing scheduled.
 */
export async function withTimeout<T>(p: Promise<T>, ms: number, what?: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      p,
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`${what ? `${what} ` : ''}timed out after ${ms} ms`)), ms);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}
