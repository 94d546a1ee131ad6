import { Worker } from 'node:worker_threads';
import { AggregatorRegistry, type MetricObjectWithValues, type MetricValue } from 'prom-client';
import { parseEnv } from '../shared/config.js';
import { createLogger } from '../shared/logger.js';
import { ensureRedis } from '../shared/private-redis.js';
import { exitOnStartupError, handleShutdown } from '../shared/runtime.js';
import { startStack } from './stack.js';
import type { EncoderThreadData } from './encoder/thread.js';

type ThreadMetrics = MetricObjectWithValues<MetricValue<string>>[];
type FromThread = { type: 'ready' } | { type: 'metrics'; metrics: ThreadMetrics } | { type: 'closed' };

interface EncoderThread {
  metrics(): Promise<ThreadMetrics | null>;
  close(): Promise<void>;
}

/** Starts encoder thread `index` of `threads` (see services/encoder/thread.ts) and resolves once it takes jobs. */
async function startEncoderThread(env: ReturnType<typeof parseEnv>, index: number, threads: number): Promise<EncoderThread> {
  // From dist/ the thread is plain JavaScript; under tsx (development) it needs tsx's loader again.
  const entry = import.meta.url.endsWith('.ts') ? './encoder/thread-entry.mjs' : './encoder/thread.js';
  const workerData: EncoderThreadData = { env, index, threads };
  const worker = new Worker(new URL(entry, import.meta.url), { workerData });
  const waiters: ((m: FromThread) => void)[] = [];
  let exited = false;
  worker.on('message', (m: FromThread) => {
    for (const w of waiters.splice(0)) w(m);
  });
  const exit = new Promise<number>((resolve) => worker.once('exit', (code) => ((exited = true), resolve(code))));
  const next = (type: FromThread['type'], ms: number): Promise<FromThread | null> =>
    new Promise((resolve) => {
      const t = setTimeout(() => resolve(null), ms);
      const wait = (m: FromThread): void => {
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
  worker.on('error', (err) => {
    process.stderr.write(`encoder thread failed: ${err.stack ?? err.message}\n`);
  });
  if (!(await next('ready', 30_000))) throw new Error('the encoder thread did not start');
  // A crashed encoder must not leave an API that accepts batches nobody encodes.
  void exit.then((code) => {
    if (!closing) {
      process.stderr.write(`encoder thread exited (${code}); stopping\n`);
      process.kill(process.pid, 'SIGTERM');
    }
  });
  let closing: Promise<void> | undefined;
  return {
    async metrics() {
      if (exited) return null;
      worker.postMessage({ type: 'metrics' });
      const m = await next('metrics', 2000);
      return m && m.type === 'metrics' ? m.metrics : null;
    },
    close() {
      closing ??= (async () => {
        if (exited) return;
        worker.postMessage({ type: 'close' });
        await next('closed', 20_000);
        // Once it says closed, the thread's work is done and its logs flushed; what may keep it
        // alive is a reconnect timer to an unreachable Redis, so do not wait long for it to end.
        await Promise.race([exit, new Promise((r) => setTimeout(r, 200))]);
        if (!exited) await worker.terminate();
      })();
      return closing;
    },
  };
}

/**
 * The encoder threads' metrics as one set: counters and histograms summed, and gauges summed too
 * (slots, active jobs, bytes held and workers taking jobs are totals of the process). A thread that
 * does not answer within 2 s is left out of this scrape.
 */
async function threadMetrics(threads: readonly EncoderThread[]): Promise<string> {
  const parts = (await Promise.all(threads.map((t) => t.metrics()))).filter((m): m is ThreadMetrics => m !== null && m.length > 0);
  if (parts.length === 0) return '';
  return AggregatorRegistry.aggregate(parts).metrics();
}

/**
 * `npm start`: API and encoder in one process (the encoder on a worker thread), with a private
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
    const threads: EncoderThread[] = [];
    const stack = await startStack(env, { api: true, encoder: false, rollup: true, serviceLabel: 'ingest', extraMetrics: () => threadMetrics(threads) }, logger);
    const starts = await Promise.allSettled(Array.from({ length: env.ENCODER_THREADS }, (_, i) => startEncoderThread(env, i, env.ENCODER_THREADS)));
    for (const s of starts) if (s.status === 'fulfilled') threads.push(s.value);
    const failed = starts.find((s) => s.status === 'rejected');
    if (failed) {
      await Promise.all(threads.map((t) => t.close()));
      await stack.close();
      await redis.stop();
      throw failed.reason;
    }
    // Stop taking pushes first, then let the encoders finish, then stop a private Redis.
    handleShutdown(logger, [() => stack.close(), () => Promise.all(threads.map((t) => t.close())), () => redis.stop()]);
  }
} catch (err) {
  exitOnStartupError(err);
}
