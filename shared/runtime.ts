import { setFlagsFromString } from 'node:v8';
import { ConfigError } from './config.js';

/**
 * Sets V8's old-space growth after a full garbage collection (`HEAP_GROWING_PERCENT`, see
 * shared/config.ts). V8 reads it at every full collection, so setting it at start-up, after the
 * modules loaded, governs everything that follows. Process-wide, worker threads included; 0 leaves
 * V8's own heuristic (and cannot undo an earlier call). Why 300: docs/decisions/0015-heap-growing-percent.md.
 */
export function applyHeapGrowth(percent: number): void {
  if (!Number.isInteger(percent) || percent < 0)
    throw new RangeError(`heap growth must be a whole percent >= 0, got ${percent}`);
  if (percent > 0) setFlagsFromString(`--heap-growing-percent=${percent}`);
}

/** Prints a start-up failure without a stack for config problems, and exits 1. */
export function exitOnStartupError(err: unknown): never {
  if (err instanceof ConfigError) process.stderr.write(`configuration error: ${err.message}\n`);
  else process.stderr.write(`start-up failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
}
