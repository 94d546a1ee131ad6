import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, inject } from 'vitest';
import { parseEnv } from '../../shared/config.js';
import { BatchLedger } from '../../shared/ledger/ledger.js';
import { type Logger, createLogger } from '../../shared/logger.js';
import { type RunningStack, type StackParts, startStack } from '../../services/stack.js';
import { uniqueName } from './names.js';
import { registerProductOrigin } from './openapi-origins.js';

export const ADMIN_TOKEN = 'test-admin-token-0123456789';

export interface TestStack extends RunningStack {
  url: string;
  dataDir: string;
  queueName: string;
  /** Closes the stack, then removes the data folder. */
  shutdown(): Promise<void>;
}

/** The product's own stack, in this process, on a free port, against the test Redis and a fresh data folder. */
/** `logger`: the product's logger (default: a silent one), for a test that reads its log lines. */
export async function startTestStack(
  env: Record<string, string> = {},
  parts: StackParts = { api: true, encoder: true },
  logger?: Logger,
): Promise<TestStack> {
  const dataDir = mkdtempSync(join(tmpdir(), 'ingest-data-'));
  const queueName = env.QUEUE_NAME ?? uniqueName('q');
  const parsed = parseEnv({
    PORT: '0',
    HOST: '127.0.0.1',
    METRICS_PORT: '0',
    REDIS_URL: inject('redisUrl'),
    DATA_DIR: dataDir,
    ADMIN_TOKEN,
    QUEUE_NAME: queueName,
    LOG_LEVEL: 'silent',
    // The rollup tests check rollups and retention on their own; the Iceberg tests turn it on.
    ICEBERG: 'off',
    ...env,
  });
  const stack = await startStack(parsed, parts, logger ?? createLogger({ level: parsed.LOG_LEVEL, name: 'test' }));
  // The integration tier checks this server's answers against its own document (openapi-hook.ts).
  if (stack.api) registerProductOrigin(stack.api.server.url, parsed.BASE_PATH);
  return Object.assign(stack, {
    url: stack.api?.server.url ?? '',
    dataDir,
    queueName,
    async shutdown() {
      await stack.close();
      rmSync(dataDir, { recursive: true, force: true });
    },
  });
}

/**
 * For a test file whose encoders are its own: the API alone (no encoder, no rollup) on a fresh
 * queue, and a BullMQ-ready connection to the test Redis, both opened before the file's tests and
 * closed after them. Read them through the getters once the tests run.
 */
export function useApiOnlyStack(env: Record<string, string> = {}): { stack(): TestStack; conn(): Redis } {
  let stack: TestStack | undefined;
  let conn: Redis | undefined;
  beforeAll(async () => {
    stack = await startTestStack({ ROLLUP: 'off', ...env }, { api: true, encoder: false });
    conn = new Redis(inject('redisUrl'), { maxRetriesPerRequest: null });
  });
  afterAll(async () => {
    conn?.disconnect();
    await stack?.shutdown();
  });
  const need = <T>(v: T | undefined): T => {
    if (v === undefined) throw new Error('useApiOnlyStack: read only inside the tests, after beforeAll');
    return v;
  };
  return { stack: () => need(stack), conn: () => need(conn) };
}

/** A test's own view of a stack's queue and ordering ledger: a separate client on the test Redis. */
export interface StackProbe {
  redis: Redis;
  queue: Queue;
  ledger: BatchLedger;
  /** Removes the queue's keys, then closes the client. */
  close(): Promise<void>;
}

export function stackProbe(queueName: string): StackProbe {
  const redis = new Redis(inject('redisUrl'), { maxRetriesPerRequest: null });
  const queue = new Queue(queueName, { connection: redis });
  return {
    redis,
    queue,
    ledger: new BatchLedger(redis, queueName),
    async close() {
      await queue.obliterate({ force: true }).catch(() => undefined);
      await queue.close().catch(() => undefined);
      redis.disconnect();
    },
  };
}
