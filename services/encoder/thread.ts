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
 * Messages from the main thread: `{ type: 'metrics' }` → `{ type: 'metrics', text }`;
 * `{ type: 'close' }` → finishes or returns active jobs, then `{ type: 'closed' }`.
 */
type Inbound = { type: 'metrics' } | { type: 'close' };

const port = parentPort;
if (!port) throw new Error('services/encoder/thread.ts must run as a worker thread');
const env = workerData as Env;

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
const stack = await startStack(env, { api: false, encoder: true, encoderMetricsServer: false, defaultMetrics: false, serviceLabel: 'ingest' });
stack.logger.info({ queue: env.QUEUE_NAME, concurrency: env.ENCODER_CONCURRENCY, store: stack.store.describe(), nice: tid === null ? 0 : env.ENCODER_THREAD_NICE }, 'encoder thread started');
port.on('message', (msg: Inbound) => {
  if (msg.type === 'metrics') {
    void stack.registry.metrics().then(
      (text) => port.postMessage({ type: 'metrics', text }),
      () => port.postMessage({ type: 'metrics', text: '' }),
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
