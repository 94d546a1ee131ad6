import { setFlagsFromString } from 'node:v8';
import { ConfigError } from './config.js';
import { type Logger, flushLogger } from './logger.js';

/**
 * Sets V8's old-space growth after a full garbage collection (`HEAP_GROWING_PERCENT`, see
 * shared/config.ts). V8 reads it at every full collection, so setting it at start-up, after the
 * modules loaded, governs everything that follows. Process-wide, worker threads included; 0 leaves
 * V8's own heuristic (and cannot undo an earlier call).
 */
export function applyHeapGrowth(percent: number): void {
  if (!Number.isInteger(percent) || percent < 0) throw new RangeError(`heap growth must be a whole percent >= 0, got ${percent}`);
  if (percent > 0) setFlagsFromString(`--heap-growing-percent=${percent}`);
}

/** Prints a start-up failure without a stack for config problems, and exits 1. */
export function exitOnStartupError(err: unknown): never {
  if (err instanceof ConfigError) process.stderr.write(`configuration error: ${err.message}\n`);
  else process.stderr.write(`start-up failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
}

/**
 * Runs `cleanups` once on SIGTERM/SIGINT, each in its own try/catch, then exits 0; a second
 * signal or `boundMs` passing forces exit 1.
 */
export function handleShutdown(logger: Logger, cleanups: readonly (() => Promise<unknown>)[], boundMs = 30_000): () => Promise<void> {
  let running: Promise<void> | undefined;
  const shutdown = (): Promise<void> => {
    running ??= (async () => {
      const force = setTimeout(() => {
        logger.error({ boundMs }, 'shutdown took too long; exiting');
        process.exit(1);
      }, boundMs);
      force.unref();
      for (const c of cleanups) {
        try {
          await c();
        } catch (err) {
          logger.warn({ err: (err as Error).message }, 'cleanup step failed');
        }
      }
      clearTimeout(force);
      logger.info('shut down cleanly');
      await flushLogger(logger);
    })();
    return running;
  };
  let firstSignalAt = 0;
  const onSignal = (signal: string): void => {
    // Process managers and wrappers (npm, tsx, pkill -f) often deliver the same SIGTERM twice
    // within moments; only a later signal means "stop now".
    if (running && Date.now() - firstSignalAt < 2000) return;
    if (running) {
      logger.warn({ signal }, 'second signal: exiting now');
      process.exit(1);
    }
    firstSignalAt = Date.now();
    logger.info({ signal }, 'shutting down');
    void shutdown().then(() => process.exit(0));
  };
  process.on('SIGTERM', () => onSignal('SIGTERM'));
  process.on('SIGINT', () => onSignal('SIGINT'));
  return shutdown;
}
