import { type Service, spawnService, waitHttpOk } from '../../scripts/chaos-kit.js';
import { startFlags } from './dist.js';
import { registerProductOrigin } from './openapi-origins.js';

export type ServiceProcess = Service;

/** A compiled entry point (see test/helpers/dist.ts): run with plain `node`. */
export type DistEntry = `${string}.js`;

/**
 * Runs one of the product's entry points (sources through tsx, or a compiled `.js` with plain node), with `env` added, keeping all of
 * its output (tests scan the logs).
 */
export function startService(
  entry: 'services/main.ts' | 'services/api/main.ts' | 'services/encoder/main.ts' | DistEntry,
  env: Record<string, string>,
): ServiceProcess {
  // The integration tier checks the API's answers against its own document (openapi-hook.ts).
  if (!entry.includes('encoder') && /^\d+$/.test(env.PORT ?? '') && env.PORT !== '0')
    registerProductOrigin(`http://127.0.0.1:${env.PORT}`, env.BASE_PATH ?? '');
  // A compiled entry runs with the node flags its package.json script gives it (npm start's).
  // No drain window unless a test asks for one (api-drain, rollout): start:api's 5 s default would
  // add 5 s to every stop of every test that runs it.
  return spawnService(
    entry,
    { LOG_LEVEL: 'info', SHUTDOWN_DRAIN_MS: '0', ...env },
    { keepChars: Number.POSITIVE_INFINITY, nodeFlags: entry.endsWith('.js') ? startFlags(entry) : [] },
  );
}

/** Polls `url` until it answers 200 (bounded by `ms`), failing at once if `proc` exits. */
export function waitForHttp(url: string, ms = 20_000, proc?: ServiceProcess): Promise<void> {
  return waitHttpOk(url, ms, proc);
}

// The wait helpers live in ./wait.js (no child processes there); tests import waitFor from here too.
export { waitFor } from './wait.js';
