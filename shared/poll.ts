/**
 * The one "wait until ready" loop (services, redis-server, test conditions): calls `probe` every
 * `intervalMs` until it returns a truthy value, which is returned. A probe that throws counts as
 * "not yet". Bounded twice: by `ms` and by a try count, so a probe that never settles cannot spin.
 * `giveUp` is asked before each try; a message ends the wait at once (the process being waited
 * for has exited, say) instead of waiting out the deadline.
 */
export async function pollUntil<T>(
  probe: () => Promise<T | null | undefined | false>,
  opts: { ms: number; what: string; intervalMs?: number; giveUp?: () => string | undefined },
): Promise<T> {
  const intervalMs = opts.intervalMs ?? 100;
  const deadline = Date.now() + opts.ms;
  const maxTries = Math.ceil(opts.ms / intervalMs) + 1;
  let last: unknown;
  for (let i = 0; i < maxTries && Date.now() <= deadline; i++) {
    const stop = opts.giveUp?.();
    if (stop !== undefined) throw new Error(`${opts.what}: ${stop}`);
    try {
      const v = await probe();
      if (v) return v;
    } catch (err) {
      last = err;
    }
    await new Promise((r) => setTimeout(r, intervalMs));
  }
  throw new Error(
    `timed out after ${opts.ms} ms waiting for ${opts.what}${last === undefined ? '' : `: ${String(last)}`}`,
  );
}
