import { BatchLedger } from '../../shared/ledger/ledger.js';
import { type HealthServer, healthServer } from '../../shared/health-server.js';
import type { Component } from '../../shared/lifecycle.js';
import { encoderSlice, processSlice, redisSlice } from '../../shared/config-slices.js';
import { compressionOfCollections } from '../../shared/config.js';
import type { StackContext } from '../../shared/stack-context.js';
import { type BurstOptions, type Encoder, createEncoder } from './worker.js';

export interface EncoderComponent extends Component {
  /** Set once started. */
  readonly encoder: Encoder | undefined;
}

/** The encoder's workers (one per queue shard): take jobs until stopped, then finish or return the active ones (15 s). */
export function encoderWorkers(ctx: StackContext, o: { burst?: BurstOptions } = {}): EncoderComponent {
  ctx.use('worker');
  ctx.use('ledger');
  let encoder: Encoder | undefined;
  return {
    name: 'encoder',
    get encoder() {
      return encoder;
    },
    async start() {
      const env = encoderSlice(ctx.env);
      const ledgerConn = ctx.connection('ledger');
      const { REDIS_WAIT_REPLICAS, REDIS_WAIT_TIMEOUT_MS } = redisSlice(ctx.env);
      encoder = createEncoder({
        queueName: env.QUEUE_NAME,
        connection: ctx.connection('worker'),
        ledger: new BatchLedger(ledgerConn, env.QUEUE_NAME),
        shards: ctx.layouts.map((l) => ({
          queueName: l.queueName,
          prefix: l.queuePrefix,
          ledger: new BatchLedger(ledgerConn, l.namespace, { shard: { index: l.index, count: l.count } }),
        })),
        store: ctx.store,
        registry: ctx.registry,
        logger: ctx.logger,
        concurrency: env.ENCODER_CONCURRENCY,
        lockDurationMs: env.ENCODER_LOCK_SECONDS * 1000,
        listIndexSeconds: env.LIST_INDEX_SECONDS,
        maxInflightBytes: env.ENCODER_MAX_INFLIGHT_BYTES,
        compressionOf: compressionOfCollections(ctx.config.collections),
        ...(o.burst ? { burst: o.burst } : {}),
        // Decision 0025: a job is written only once it is on REDIS_WAIT_REPLICAS replicas.
        ...(REDIS_WAIT_REPLICAS > 0
          ? {
              replicaWait: {
                replicas: REDIS_WAIT_REPLICAS,
                timeoutMs: REDIS_WAIT_TIMEOUT_MS,
                connection: ledgerConn,
              },
            }
          : {}),
      });
    },
    async stop(graceMs) {
      await encoder?.close(Math.min(ctx.stopBound(15_000, 250), graceMs));
    },
  };
}

/** Logs what `start:encoder` runs, once its components started. */
export function logEncoderStarted(ctx: StackContext, health: HealthServer): void {
  const { env } = ctx;
  ctx.logger.info(
    {
      metrics: `${health.server?.url ?? ''}/metrics`,
      queue: env.QUEUE_NAME,
      shards: ctx.layouts.length,
      concurrency: env.ENCODER_CONCURRENCY,
      store: ctx.store.describe(),
      heapGrowingPercent: env.HEAP_GROWING_PERCENT,
    },
    'encoder started',
  );
}

/** The encoder's /metrics and /healthz (`ok` while its first worker takes jobs) on METRICS_PORT. */
export function encoderHealthServer(ctx: StackContext, encoder: EncoderComponent): HealthServer {
  const { METRICS_PORT, HOST } = processSlice(ctx.env);
  return healthServer({
    registry: ctx.registry,
    port: METRICS_PORT,
    host: HOST,
    healthy: () => encoder.encoder?.worker.isRunning() ?? false,
  });
}
