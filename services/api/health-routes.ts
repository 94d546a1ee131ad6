import express, { type Request, type Response, type Router } from 'express';
import type { Registry } from 'prom-client';
import { type RedisClient, redisAddress } from '../../shared/redis/connection.js';
import { withTimeout } from '../../shared/timeout.js';
import type { ObjectStore } from '../../shared/store/types.js';
import { methodNotAllowed } from './edge/methods.js';

export interface HealthRoutesOptions {
  /** BASE_PATH: `/health` is served under it too. */
  basePath?: string | undefined;
  redis: RedisClient;
  store: ObjectStore;
  registry: Registry;
  /** Extra registries to serve on /metrics (the embedded encoder's). */
  extraMetrics?: (() => Promise<string>) | undefined;
  /** Age of the oldest in-flight batch over every shard (Upkeep.maxLagMs). */
  maxLagMs(): Promise<number>;
  /** Why pushes are shed now, or null (LoadShedder.shedReason). */
  shedReason(): string | null;
  /** True once the process drains on SIGTERM (./drain.ts): not ready, whatever Redis and the store say. Default never. */
  draining?: (() => boolean) | undefined;
}

/**
 * /healthz, /health (also under BASE_PATH), /readyz and /metrics; any other method on them is 405.
 * Mounted on the app without a path, so their route labels stay `/healthz`, `/readyz`, ….
 */
export function createHealthRouter(opts: HealthRoutesOptions): Router {
  const router = express.Router();
  // The Starfish reference's name for it, also under BASE_PATH where a client's baseUrl points.
  const healthPaths = opts.basePath ? ['/health', `${opts.basePath}/health`] : '/health';
  router.get('/healthz', alive);
  router.get(healthPaths, alive);
  router.get('/readyz', readyz(opts));
  router.get('/metrics', metrics(opts));
  router.all(['/healthz', '/readyz', '/metrics'], methodNotAllowed(['GET', 'HEAD']));
  router.all(healthPaths, methodNotAllowed(['GET', 'HEAD']));
  return router;
}

function alive(_req: Request, res: Response): void {
  res.json({ ok: true });
}

/**
 * Names what is down (Redis by host:port, the store by its description) and nothing else:
 * driver error texts can carry internals and change between versions. A draining process
 * (SIGTERM) answers 503 with `draining: true` and `checks.process: "draining"` while it still
 * serves, so load balancers take it out before it stops listening; /healthz stays 200.
 */
function readyz(opts: HealthRoutesOptions): (req: Request, res: Response) => Promise<void> {
  const { redis, store } = opts;
  const redisName = `redis ${redisAddress(redis)}`;
  const storeName = `store ${store.describe()}`;
  const draining = opts.draining ?? ((): boolean => false);
  return async function readyz(_req, res) {
    const checks: Record<string, string> = {};
    const [redisOk, storeOk] = await Promise.all([
      withTimeout(redis.ping(), 1000).then(
        () => true,
        () => false,
      ),
      withTimeout(store.healthcheck(), 2000).then(
        () => true,
        () => false,
      ),
    ]);
    checks.redis = redisOk ? 'ok' : `${redisName} unreachable`;
    checks.store = storeOk ? 'ok' : `${storeName} unreachable`;
    // null = unknown (Redis did not answer); 0 would claim nothing is held back.
    let watermarkLagSeconds: number | null = null;
    if (redisOk)
      watermarkLagSeconds = await withTimeout(opts.maxLagMs(), 1000).then(
        (ms) => ms / 1000,
        () => null,
      );
    // Read after the checks' awaits: a drain that began meanwhile is answered now.
    const drain = draining();
    if (drain) checks.process = 'draining';
    const ok = redisOk && storeOk && !drain;
    if (!ok) res.set('Retry-After', '5');
    res.status(ok ? 200 : 503).json({ ok, checks, watermarkLagSeconds, shedding: opts.shedReason(), draining: drain });
  };
}

function metrics(opts: HealthRoutesOptions): (req: Request, res: Response) => Promise<void> {
  const { registry, extraMetrics } = opts;
  return async function metrics(_req, res) {
    const own = await registry.metrics();
    const extra = extraMetrics ? await extraMetrics() : '';
    res.setHeader('Content-Type', registry.contentType);
    res.send(extra ? `${own}\n${extra}` : own);
  };
}
