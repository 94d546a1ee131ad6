import { readlinkSync } from 'node:fs';
import { setPriority } from 'node:os';
import { parentPort, workerData } from 'node:worker_threads';
import type { Env } from '../../shared/config.js';
import { flushLogger } from '../../shared/logger.js';
import { startStack } from '../stack.js';

/**
 * The encoder as a worker thread of `npm start`: one process, but encoding (CPU-bound: JSON →
 * Arrow → Parquet) runs on the second core instead of blocking the event loop that answers pushes.
 *
 * With ENCODER_THREADS above 1, thread 0 always takes jobs and the others are burst encoders
 * (they take jobs only while the queue has a backlog: EncoderOptions.burst); the threads split
 * ENCODER_MAX_INFLIGHT_BYTES evenly.
 *
 * Messages from the main thread: `{ type: 'metrics' }` → `{ type: 'metrics', metrics }` (prom-client's
 * JSON form, which the main thread sums over the threads); `{ type: 'close' }` → finishes or returns
 * active jobs, then `{ type: 'closed' }`.
 */
type Inbound = { type: 'metrics' } | { type: 'close' };

/** What the main thread hands each encoder thread. */
export interface EncoderThreadData {
  env: Env;
  /** 0 for the thread that always takes jobs. */
  index: number;
  threads: number;
}

/** How often a burst thread counts the jobs waiting in the queue. */
const BURST_POLL_MS = 250;

const port = parentPort;
if (!port) throw new Error('services/encoder/thread.ts must run as a worker thread');
const data = workerData as EncoderThreadData;
const env: Env = { ...data.env, ENCODER_MAX_INFLIGHT_BYTES: Math.max(1, Math.floor(data.env.ENCODER_MAX_INFLIGHT_BYTES / data.threads)) };

/**
 * Lowers this thread's CPU priority (Linux: `setpriority` on the thread id names one thread).
 * Pushes then get the CPU first and answer fast; the queue absorbs the difference and the
 * encoder drains it with whatever CPU is left. A no-op where /proc/thread-self is missing.
 */
function niceThisThread(nice: number): number | null {
  if (nice <= 0) return null;
  try {
    const tid = Number(readlinkSync('/proc/thread-self').split('/').pop());
    if (!Number.isInteger(tid) || tid <= 0) return null;
    setPriority(tid, nice);
    return tid;
  } catch {
    return null;
  }
}

const tid = niceThisThread(env.ENCODER_THREAD_NICE);
// The first thread's slots fetch up to ENCODER_CONCURRENCY jobs; a burst thread joins when as many again wait.
const burst = data.index > 0 ? { backlog: env.ENCODER_CONCURRENCY, pollMs: BURST_POLL_MS } : undefined;
const stack = await startStack(env, { api: false, encoder: true, encoderMetricsServer: false, defaultMetrics: false, serviceLabel: 'ingest', ...(burst ? { encoderBurst: burst } : {}) });
stack.logger.info({ thread: data.index, burst: burst !== undefined, queue: env.QUEUE_NAME, concurrency: env.ENCODER_CONCURRENCY, maxInflightBytes: env.ENCODER_MAX_INFLIGHT_BYTES, store: stack.store.describe(), nice: tid === null ? 0 : env.ENCODER_THREAD_NICE }, 'encoder thread started');
port.on('message', (msg: Inbound) => {
  if (msg.type === 'metrics') {
    void stack.registry.getMetricsAsJSON().then(
      (metrics) => port.postMessage({ type: 'metrics', metrics }),
      () => port.postMessage({ type: 'metrics', metrics: [] }),
    );
  } else if (msg.type === 'close') {
    void stack.close().finally(async () => {
      await flushLogger(stack.logger);
      port.postMessage({ type: 'closed' });
      port.close();
    });
  }
});
port.postMessage({ type: 'ready' });
