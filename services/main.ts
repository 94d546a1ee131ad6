import { type ChildProcess, fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { AggregatorRegistry, type MetricObjectWithValues, type MetricValue } from 'prom-client';
import { parseEnv } from '../shared/config.js';
import { createLogger } from '../shared/logger.js';
import { ensureRedis } from '../shared/private-redis.js';
import { exitOnStartupError, handleShutdown } from '../shared/runtime.js';
import { startStack } from './stack.js';
import type { EncoderChildData } from './encoder/child.js';

type ChildMetrics = MetricObjectWithValues<MetricValue<string>>[];
type FromChild = { type: 'ready' } | { type: 'metrics'; metrics: ChildMetrics } | { type: 'closed' };

interface EncoderProcess {
  metrics(): Promise<ChildMetrics | null>;
  close(): Promise<void>;
}

/** Set once `npm start` begins its own stop: an encoder that ends after that is part of it, not a failure. */
let stopping = false;

/**
 * Starts encoder process `index` of `count` (services/encoder/child.ts) and resolves once it takes
 * jobs. It inherits this process's Node flags (under tsx, tsx's loader) except the inspector's.
 */
async function startEncoderProcess(env: ReturnType<typeof parseEnv>, index: number, count: number): Promise<EncoderProcess> {
  const entry = fileURLToPath(new URL(import.meta.url.endsWith('.ts') ? './encoder/child.ts' : './encoder/child.js', import.meta.url));
  const child: ChildProcess = fork(entry, [], { serialization: 'advanced', execArgv: process.execArgv.filter((a) => !a.startsWith('--inspect')) });
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
  if (!(await next('ready', 30_000))) {
    child.kill('SIGKILL');
    throw new Error(`encoder process ${index} did not start`);
  }
  let closing: Promise<void> | undefined;
  // A crashed encoder must not leave an API that accepts batches nobody encodes.
  void exit.then((code) => {
    if (!closing && !stopping) {
      process.stderr.write(`encoder process ${index} exited (${String(code)}); stopping\n`);
      process.kill(process.pid, 'SIGTERM');
    }
  });
  return {
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
 */
try {
  const parsed = parseEnv();
  const logger = createLogger({ level: parsed.LOG_LEVEL, name: 'ingest' });
  // A Redis Cluster is always the operator's own; one Redis may be started privately.
  const redis = parsed.REDIS_CLUSTER_NODES ? { url: undefined, stop: async () => undefined } : await ensureRedis({ redisUrl: parsed.REDIS_URL, dataDir: parsed.DATA_DIR, logger });
  const env = { ...parsed, REDIS_URL: redis.url };
  if (env.STORE === 'memory') {
    // A memory store lives in one thread: keep the encoder beside the API.
    const stack = await startStack(env, { api: true, encoder: true, rollup: true }, logger);
    handleShutdown(logger, [() => stack.close(), () => redis.stop()]);
  } else {
    const encoders: EncoderProcess[] = [];
    // Rollups (the planner's store listings, DuckDB's compaction) run in the first encoder
    // process, at its lower priority, not beside the pushes.
    const stack = await startStack(env, { api: true, encoder: false, rollup: false, serviceLabel: 'ingest', extraMetrics: () => encoderMetrics(encoders) }, logger);
    const starts = await Promise.allSettled(Array.from({ length: env.ENCODER_PROCESSES }, (_, i) => startEncoderProcess(env, i, env.ENCODER_PROCESSES)));
    for (const s of starts) if (s.status === 'fulfilled') encoders.push(s.value);
    const failed = starts.find((s) => s.status === 'rejected');
    if (failed) {
      stopping = true;
      await Promise.all(encoders.map((t) => t.close()));
      await stack.close();
      await redis.stop();
      throw failed.reason;
    }
    // Stop taking pushes first, then let the encoders finish, then stop a private Redis.
    handleShutdown(logger, [
      () => {
        stopping = true;
        return stack.close();
      },
      () => Promise.all(encoders.map((t) => t.close())),
      () => redis.stop(),
    ]);
  }
} catch (err) {
  exitOnStartupError(err);
}
