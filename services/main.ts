import { Worker } from 'node:worker_threads';
import { parseEnv } from '../shared/config.js';
import { createLogger } from '../shared/logger.js';
import { ensureRedis } from '../shared/private-redis.js';
import { exitOnStartupError, handleShutdown } from '../shared/runtime.js';
import { startStack } from './stack.js';

type FromThread = { type: 'ready' } | { type: 'metrics'; text: string } | { type: 'closed' };

/** Starts the encoder in a worker thread and resolves once it takes jobs. */
async function startEncoderThread(env: ReturnType<typeof parseEnv>): Promise<{ metrics(): Promise<string>; close(): Promise<void> }> {
  // From dist/ the thread is plain JavaScript; under tsx (development) it needs tsx's loader again.
  const entry = import.meta.url.endsWith('.ts') ? './encoder/thread-entry.mjs' : './encoder/thread.js';
  const worker = new Worker(new URL(entry, import.meta.url), { workerData: env });
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
      if (exited) return '';
      worker.postMessage({ type: 'metrics' });
      const m = await next('metrics', 2000);
      return m && m.type === 'metrics' ? m.text : '';
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
    let thread: Awaited<ReturnType<typeof startEncoderThread>> | undefined;
    const stack = await startStack(env, { api: true, encoder: false, rollup: true, serviceLabel: 'ingest', extraMetrics: async () => (thread ? thread.metrics() : '') }, logger);
    try {
      thread = await startEncoderThread(env);
    } catch (err) {
      await stack.close();
      await redis.stop();
      throw err;
    }
    const started = thread;
    // Stop taking pushes first, then let the encoder finish, then stop a private Redis.
    handleShutdown(logger, [() => stack.close(), () => started.close(), () => redis.stop()]);
  }
} catch (err) {
  exitOnStartupError(err);
}
