/**
 * The whole product in one process, as the library and the tests run it (`startStack`): the
 * components each service's folder makes (services/<service>/components.ts), composed here like
 * an entry point does. Re-exports what its callers build stacks from.
 */
import type { Registry } from 'prom-client';
import type { Env } from '../shared/config.js';
import type { Logger } from '../shared/logger.js';
import type { RunningServer } from '../shared/http.js';
import { type Component, Lifecycle } from '../shared/lifecycle.js';
import type { ObjectStore } from '../shared/store/types.js';
import { SHUTDOWN_GRACE_MS, StackContext, redisConnections } from '../shared/stack-context.js';
import type { ApiApp } from './api/app.js';
import { apiServer, apiUpkeep } from './api/components.js';
import type { BurstOptions, Encoder } from './encoder/worker.js';
import { encoderHealthServer, encoderWorkers, logEncoderStarted } from './encoder/components.js';
import type { RollupService } from './rollup/service.js';
import { rollupService } from './rollup/components.js';

export { SHUTDOWN_GRACE_MS, StackContext, redisConnections };
export { type ApiComponent, apiServer, apiUpkeep } from './api/components.js';
export { type EncoderComponent, encoderHealthServer, encoderWorkers, logEncoderStarted } from './encoder/components.js';
export { type RollupComponent, rollupService } from './rollup/components.js';

/**
 * Which parts a stack runs (`startStack`: the library's and the tests' way to run the product in
 * one process). The entry points list their components themselves.
 */
export interface StackParts {
  api: boolean;
  encoder: boolean;
  /** Serve the encoder's own /metrics on METRICS_PORT when there is no API (default true). */
  encoderMetricsServer?: boolean;
  /** Node process metrics in this stack's registry (default true); see StackContext. */
  defaultMetrics?: boolean | { prefix: string };
  /** `service` label of every metric (default: api, encoder or ingest). */
  serviceLabel?: string;
  /** More metrics text appended to the API's /metrics (the encoder processes', in `npm start`). */
  extraMetrics?: () => Promise<string>;
  /** Make the encoder a burst encoder (see EncoderOptions.burst). */
  encoderBurst?: BurstOptions;
  /** Run the rollup planner and worker too (unless ROLLUP=off). */
  rollup?: boolean;
}

export interface RunningStack {
  logger: Logger;
  store: ObjectStore;
  /** Where Redis is, as logs name it: host:port, `unix:<socket>`, `sentinel <master name>` or `cluster <seed nodes>` (never a password). */
  redisName: string;
  registry: Registry;
  api?: { server: RunningServer; app: ApiApp };
  encoder?: Encoder;
  rollup?: RollupService;
  metricsServer?: RunningServer;
  /** Graceful stop: stop accepting, finish in-flight requests and jobs, close connections (SHUTDOWN_GRACE_MS at most). Idempotent. */
  close(): Promise<void>;
}

/**
 * Starts the parts of the product `parts` names, in this process, from a parsed environment: the
 * components an entry point would list for them, started by one Lifecycle. Config is read and
 * validated before anything listens, so a bad config never leaves a half-started process.
 */
export async function startStack(env: Env, parts: StackParts, logger?: Logger): Promise<RunningStack> {
  const name = parts.api && parts.encoder ? 'ingest' : parts.api ? 'api' : 'encoder';
  const ctx = new StackContext(env, {
    name,
    ...(parts.serviceLabel ? { serviceLabel: parts.serviceLabel } : {}),
    ...(parts.defaultMetrics !== undefined ? { defaultMetrics: parts.defaultMetrics } : {}),
    ...(logger ? { logger } : {}),
  });
  // Stopped in the reverse order: the API first (no new pushes), then the encoder, then what they use.
  const rollup = parts.rollup ? rollupService(ctx) : undefined;
  const encoder = parts.encoder
    ? encoderWorkers(ctx, parts.encoderBurst ? { burst: parts.encoderBurst } : {})
    : undefined;
  const health =
    encoder && !parts.api && (parts.encoderMetricsServer ?? true) ? encoderHealthServer(ctx, encoder) : undefined;
  const api = parts.api
    ? apiServer(ctx, {
        ...(parts.extraMetrics ? { extraMetrics: parts.extraMetrics } : {}),
        encoderInProcess: parts.encoder,
      })
    : undefined;
  const components = [redisConnections(ctx), health, rollup, encoder, api, api && apiUpkeep(api)].filter(
    (c): c is Component => c !== undefined,
  );
  const lifecycle = new Lifecycle(components, { logger: ctx.logger });
  await lifecycle.start();
  if (health) logEncoderStarted(ctx, health);
  return {
    logger: ctx.logger,
    store: ctx.store,
    redisName: ctx.redisName,
    registry: ctx.registry,
    ...(api?.api ? { api: api.api } : {}),
    ...(encoder?.encoder ? { encoder: encoder.encoder } : {}),
    ...(rollup?.service ? { rollup: rollup.service } : {}),
    ...(health?.server ? { metricsServer: health.server } : {}),
    close: async () => {
      await lifecycle.stop(SHUTDOWN_GRACE_MS);
    },
  };
}
