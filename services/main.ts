import { type ChildProcess, fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { AggregatorRegistry, type MetricObjectWithValues, type MetricValue } from 'prom-client';
import { parseEnv } from '../shared/config.js';
import { createLogger } from '../shared/logger.js';
import { type RedisHandle, ensureRedis } from '../shared/private-redis.js';
import { exitOnStartupError, handleShutdown } from '../shared/runtime.js';
import { type RunningStack, startStack } from './stack.js';
import type { EncoderChildData } from './encoder/child.js';
import { encoderProcessEnv } from './encoder/process-env.js';

type ChildMetrics = MetricObjectWithValues<MetricValue<string>>[];
type FromChild = { type: 'ready' } | { type: 'metrics'; metrics: ChildMetrics } | { type: 'closed' };

interface EncoderProcess {
  metrics(): Promise<ChildMetrics | null>;
  close(): Promise<void>;
}

/** Set once `npm start` begins its own stop: an encoder that ends after that is part of it, not a failure. */
let stopping = false;

/**
 * Starts encoder process `index` of `count` (services/encoder/child.ts); `ready` resolves once it
 * takes jobs. Its `close` works from the start on: one asked to close while it starts finishes
 * starting, then closes. It inherits this process's Node flags (under tsx, tsx's loader) except
 * the inspector's.
 */
function startEncoderProcess(env: ReturnType<typeof parseEnv>, index: number, count: number): { encoder: EncoderProcess; ready: Promise<void> } {
  const entry = fileURLToPath(new URL(import.meta.url.endsWith('.ts') ? './encoder/child.ts' : './encoder/child.js', import.meta.url));
  // Its environment fixes glibc's mmap threshold, so a big batch's buffers are given back (services/encoder/process-env.ts).
  const child: ChildProcess = fork(entry, [], { serialization: 'advanced', execArgv: process.execArgv.filter((a) => !a.startsWith('--inspect')), env: encoderProcessEnv(process.env) });
  const waiters: ((m: FromChild) => void)[] = [];
  let exited = false;
  child.on('message', (m: FromChild) => {
    for (const w of waiters.splice(0)) w(m);
  });
  const exit = new Promise<number | string | null>((resolve) => child.once('exit', (code, signal) => ((exited = true), resolve(code ?? signal))));
  const next = (type: FromChild['type'], ms: number): Promise<FromChild | null> =>
    new Promise((resolve) => {
      const t = setTimeout(() => resolve(null), ms);
      const wait = (m: FromChild): void => {
        if (m.type === type) {
          clearTimeout(t);
          resolve(m);
        } else waiters.push(wait);
      };
      waiters.push(wait);
      void exit.then(() => {
        clearTimeout(t);
        resolve(null);
      });
    });
  child.on('error', (err) => {
    process.stderr.write(`encoder process ${index}: ${err.message}\n`);
  });
  const data: EncoderChildData = { env, index, count };
  child.send({ type: 'start', data });
  let closing: Promise<void> | undefined;
  let isReady = false;
  const ready = (async () => {
    if (await next('ready', 30_000)) {
      isReady = true;
      return;
    }
    // Asked to close while it started: it does not say ready, and that is not a failure.
    if (closing) return;
    child.kill('SIGKILL');
    throw new Error(`encoder process ${index} did not start`);
  })();
  // A crashed encoder must not leave an API that accepts batches nobody encodes. One that ends
  // before it is ready is a failed start, which `ready` reports (start-up then fails with exit 1).
  void exit.then((code) => {
    if (isReady && !closing && !stopping) {
      process.stderr.write(`encoder process ${index} exited (${String(code)}); stopping\n`);
      process.kill(process.pid, 'SIGTERM');
    }
  });
  const encoder: EncoderProcess = {
    async metrics() {
      if (exited || !child.connected) return null;
      child.send({ type: 'metrics' });
      const m = await next('metrics', 2000);
      return m && m.type === 'metrics' ? m.metrics : null;
    },
    close() {
      closing ??= (async () => {
        if (exited) return;
        if (child.connected) child.send({ type: 'close' });
        await next('closed', 20_000);
        // Once it says closed it exits; one that does not is stopped.
        await Promise.race([exit, new Promise((r) => setTimeout(r, 2000))]);
        if (!exited) child.kill('SIGKILL');
      })();
      return closing;
    },
  };
  return { encoder, ready };
}

/**
 * The encoder processes' metrics as one set: counters and histograms summed, and gauges summed too
 * (slots, active jobs, bytes held and workers taking jobs are totals of the service; their
 * `ingest_encoder_process_*` CPU and memory too). One that does not answer within 2 s is left out
 * of this scrape.
 */
async function encoderMetrics(encoders: readonly EncoderProcess[]): Promise<string> {
  const parts = (await Promise.all(encoders.map((t) => t.metrics()))).filter((m): m is ChildMetrics => m !== null && m.length > 0);
  if (parts.length === 0) return '';
  return AggregatorRegistry.aggregate(parts).metrics();
}

/**
 * `npm start`: the API, with its encoder as a child process at a lower CPU priority, and a private
 * Redis when none is configured.
 *
 * The stop on SIGTERM/SIGINT is armed before anything starts: a signal while it starts (a private
 * Redis coming up, the API listening while its encoders still start) stops what has started, in
 * the same order as later, instead of ending the process and leaving a Redis or a half-started
 * encoder behind.
 */
async function main(): Promise<void> {
  const parsed = parseEnv();
  const logger = createLogger({ level: parsed.LOG_LEVEL, name: 'ingest' });
  // What has begun starting, for the stop to wait for and close.
  const begun: { redis?: Promise<Pick<RedisHandle, 'stop'> & { url: string | undefined }>; stack?: Promise<RunningStack> } = {};
  const encoders: EncoderProcess[] = [];
  const started = <T>(p: Promise<T> | undefined): Promise<T | undefined> => (p ? p.catch(() => undefined) : Promise.resolve(undefined));
  // Stop taking pushes first, then let the encoders finish, then stop a private Redis.
  handleShutdown(logger, [
    async () => {
      stopping = true;
      await (await started(begun.stack))?.close();
    },
    () => Promise.all(encoders.map((t) => t.close())),
    async () => (await started(begun.redis))?.stop(),
  ]);

  // A Redis Cluster is always the operator's own; one Redis may be started privately.
  begun.redis = parsed.REDIS_CLUSTER_NODES ? Promise.resolve({ url: undefined, stop: async () => undefined }) : ensureRedis({ redisUrl: parsed.REDIS_URL, dataDir: parsed.DATA_DIR, logger });
  const redis = await begun.redis;
  if (stopping) return;
  const env = { ...parsed, REDIS_URL: redis.url };
  // A memory store lives in one thread: keep the encoder beside the API. Otherwise rollups (the
  // planner's store listings, DuckDB's compaction) run in the first encoder process, at its lower
  // priority, not beside the pushes.
  const inProcess = env.STORE === 'memory';
  begun.stack = startStack(env, inProcess ? { api: true, encoder: true, rollup: true } : { api: true, encoder: false, rollup: false, serviceLabel: 'ingest', extraMetrics: () => encoderMetrics(encoders) }, logger);
  let stack: RunningStack;
  try {
    stack = await begun.stack;
  } catch (err) {
    await redis.stop().catch(() => undefined);
    throw err;
  }
  if (stopping || inProcess) return;
  const starts = Array.from({ length: env.ENCODER_PROCESSES }, (_, i) => startEncoderProcess(env, i, env.ENCODER_PROCESSES));
  encoders.push(...starts.map((s) => s.encoder));
  const failed = (await Promise.allSettled(starts.map((s) => s.ready))).find((s) => s.status === 'rejected');
  if (failed && !stopping) {
    stopping = true;
    await Promise.all(encoders.map((t) => t.close()));
    await stack.close();
    await redis.stop();
    throw failed.reason;
  }
}

try {
  await main();
} catch (err) {
  exitOnStartupError(err);
}
