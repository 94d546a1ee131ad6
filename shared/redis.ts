import { Redis, type RedisOptions } from 'ioredis';

export const DEFAULT_REDIS_URL = 'redis://127.0.0.1:6379';

/**
 * Redis connections by use:
 * - `producer`: API pushes. No offline queue and short timeouts, so a push fails fast with
 *   503 while Redis is down instead of hanging.
 * - `worker`: BullMQ workers (blocking commands; BullMQ requires maxRetriesPerRequest null).
 * Both reconnect on their own with a capped backoff.
 */
export function createRedis(url: string, role: 'producer' | 'worker', extra: RedisOptions = {}): Redis {
  const base: RedisOptions = {
    lazyConnect: false,
    connectTimeout: 2000,
    retryStrategy: (times) => Math.min(100 * 2 ** Math.min(times, 5), 2000),
  };
  const byRole: RedisOptions =
    role === 'producer'
      ? { enableOfflineQueue: false, maxRetriesPerRequest: 1, commandTimeout: 2000, autoResendUnfulfilledCommands: false }
      : { enableOfflineQueue: true, maxRetriesPerRequest: null };
  const client = new Redis(url, { ...base, ...byRole, ...extra });
  // Errors surface through the commands that fail; without a listener ioredis would print each retry.
  client.on('error', () => undefined);
  return client;
}

/** Resolves when `client` is ready, rejects after `ms`. */
export async function waitReady(client: Redis, ms: number): Promise<void> {
  if (client.status === 'ready') return;
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => {
      cleanup();
      reject(new Error(`Redis not ready after ${ms} ms`));
    }, ms);
    const onReady = (): void => {
      cleanup();
      resolve();
    };
    const cleanup = (): void => {
      clearTimeout(timer);
      client.off('ready', onReady);
    };
    client.on('ready', onReady);
  });
}
