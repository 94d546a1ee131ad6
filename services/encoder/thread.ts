import { parentPort, workerData } from 'node:worker_threads';
import type { Env } from '../../shared/config.js';
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

const stack = await startStack(env, { api: false, encoder: true, encoderMetricsServer: false, defaultMetrics: false, serviceLabel: 'ingest' });
stack.logger.info({ queue: env.QUEUE_NAME, concurrency: env.ENCODER_CONCURRENCY, store: stack.store.describe() }, 'encoder thread started');
port.on('message', (msg: Inbound) => {
  if (msg.type === 'metrics') {
    void stack.registry.metrics().then(
      (text) => port.postMessage({ type: 'metrics', text }),
      () => port.postMessage({ type: 'metrics', text: '' }),
    );
  } else if (msg.type === 'close') {
    void stack.close().finally(() => {
      port.postMessage({ type: 'closed' });
      port.close();
    });
  }
});
port.postMessage({ type: 'ready' });
