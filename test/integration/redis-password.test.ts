/**
 * REDIS_PASSWORD with REDIS_URL: the product's connections authenticate with it, a password in
 * the URL wins over it, and what logs and /readyz name never holds it. (Sentinel mode with
 * REDIS_PASSWORD and REDIS_SENTINEL_PASSWORD: test/integration/sentinel-failover.test.ts.)
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseEnv } from '../../shared/config.js';
import { redisSlice } from '../../shared/config-slices.js';
import {
  type RedisClient,
  closeRedis,
  createRedisClient,
  describeTarget,
  redisAddress,
  redisTarget,
  waitReady,
} from '../../shared/redis/connection.js';
import { type RedisServerProcess, spawnRedisServer } from '../../shared/redis/private-server.js';
import { freePort } from '../helpers/redis-server.js';

const PASSWORD = 'redis-pass-0c4e1b';

describe('REDIS_PASSWORD with REDIS_URL', () => {
  let server: RedisServerProcess | undefined;
  let dir = '';
  const opened: RedisClient[] = [];

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'ingest-redis-pass-'));
    const port = await freePort();
    server = await spawnRedisServer({
      port,
      dir,
      args: ['--save', '', '--appendonly', 'no', '--requirepass', PASSWORD],
      password: PASSWORD,
    });
  });

  afterAll(async () => {
    for (const c of opened) await closeRedis(c, 1000);
    await server?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  const connect = (env: Record<string, string>, role: 'producer' | 'worker'): RedisClient => {
    const c = createRedisClient(redisTarget(redisSlice(parseEnv(env))), role);
    opened.push(c);
    return c;
  };

  it('every role authenticates with REDIS_PASSWORD; without it Redis refuses the commands', async () => {
    const url = (server as RedisServerProcess).url;
    for (const role of ['producer', 'worker'] as const) {
      const c = connect({ REDIS_URL: url, REDIS_PASSWORD: PASSWORD }, role);
      await waitReady(c, 10_000);
      expect(await c.set(`k-${role}`, '1')).toBe('OK');
      expect(redisAddress(c)).not.toContain(PASSWORD);
    }
    const without = connect({ REDIS_URL: url }, 'producer');
    await expect(
      (async () => {
        await new Promise((r) => setTimeout(r, 200));
        return without.ping();
      })(),
    ).rejects.toThrow(/NOAUTH|Stream isn't writeable|Connection is closed/);
  });

  it('a password in REDIS_URL wins over REDIS_PASSWORD', async () => {
    const port = (server as RedisServerProcess).port;
    const env = { REDIS_URL: `redis://:${PASSWORD}@127.0.0.1:${port}`, REDIS_PASSWORD: 'not-the-password' };
    expect(describeTarget(redisTarget(redisSlice(parseEnv(env))))).toBe(`127.0.0.1:${port}`);
    const c = connect(env, 'worker');
    await waitReady(c, 10_000);
    expect(await c.ping()).toBe('PONG');
  });
});
