import { type Service, spawnService } from '../../scripts/chaos-kit.js';

export type ServiceProcess = Service;

/** A compiled entry point (see test/helpers/dist.ts): run with plain `node`. */
export type DistEntry = `${string}.js`;

/**
 * Runs one of the product's entry points (sources through tsx, or a compiled `.js` with plain node), with `env` added, keeping all of
 * its output (tests scan the logs).
 */
export function startService(entry: 'services/main.ts' | 'services/api/main.ts' | 'services/encoder/main.ts' | DistEntry, env: Record<string, string>): ServiceProcess {
  return spawnService(entry, { LOG_LEVEL: 'info', ...env }, { keepChars: Number.POSITIVE_INFINITY });
}

/** Polls `url` until it answers 200 (bounded by `ms`). */
export async function waitForHttp(url: string, ms = 20_000, proc?: ServiceProcess): Promise<void> {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    if (proc && proc.child.exitCode !== null) throw new Error(`process exited (${proc.child.exitCode}):\n${proc.output()}`);
    try {
      const r = await fetch(url);
      if (r.ok) return;
    } catch {
      /* not up yet */
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`${url} did not answer within ${ms} ms${proc ? `:\n${proc.output()}` : ''}`);
}

/** Polls `fn` until it returns a truthy value (bounded by `ms`). */
export async function waitFor<T>(fn: () => Promise<T | undefined | null | false>, ms = 20_000, what = 'condition'): Promise<T> {
  const deadline = Date.now() + ms;
  let last: unknown;
  while (Date.now() < deadline) {
    try {
      const v = await fn();
      if (v) return v;
    } catch (err) {
      last = err;
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`timed out waiting for ${what}${last ? `: ${String(last)}` : ''}`);
}
