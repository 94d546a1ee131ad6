import { pollUntil } from '../../shared/poll.js';

/**
 * Waiting in tests: for a condition, never a fixed sleep before an assertion (a sleep long enough
 * on a busy machine is a waste on an idle one, and still too short on a busier one). No child
 * processes or sockets here: unit tests may use it.
 */

/** Polls `fn` until it returns a truthy value, which is returned (bounded by `ms`). */
export function waitFor<T>(
  fn: () => Promise<T | undefined | null | false>,
  ms = 20_000,
  what = 'condition',
): Promise<T> {
  return pollUntil(fn, { ms, what });
}

/**
 * The other side: that something does NOT happen. Checks `fn` every `intervalMs` for `ms` and
 * fails at the first false, naming `what`. A slow machine can only make it check less often, never
 * fail a correct product; use it where a test must give the product time to misbehave.
 */
export async function holdsFor(
  fn: () => Promise<boolean> | boolean,
  ms: number,
  what: string,
  intervalMs = 50,
): Promise<void> {
  const started = Date.now();
  const maxChecks = Math.ceil(ms / intervalMs) + 1;
  for (let i = 0; i < maxChecks; i++) {
    if (!(await fn())) throw new Error(`${what}: stopped holding after ${Date.now() - started} ms (of ${ms})`);
    if (Date.now() - started >= ms) return;
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}

/**
 * A request retried the way an SDK retries a 503: after its `Retry-After` (which must be there),
 * at most `attempts` times in all. Returns the first answer that is not 503 (or the last 503).
 * For tests where a 503 is a correct answer on a busy machine (a replica's acknowledgement that
 * came after `REDIS_WAIT_TIMEOUT_MS`) and the retry must then succeed without a second batch.
 */
export async function retryWhile503(send: () => Promise<Response>, attempts = 10): Promise<Response> {
  let res = await send();
  for (let i = 1; res.status === 503 && i < attempts; i++) {
    const after = Number(res.headers.get('retry-after'));
    if (!(after > 0)) throw new Error(`a 503 without a Retry-After (${res.headers.get('retry-after')})`);
    await res.body?.cancel();
    await new Promise((r) => setTimeout(r, after * 1000));
    res = await send();
  }
  return res;
}
