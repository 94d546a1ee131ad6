/**
 * APP_PATTERN: pushes whose app name does not match get 400 before anything reaches Redis; names
 * that match are stored as usual. A bad pattern stops the process at start.
 */
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { ConfigError, parseEnv } from '../../shared/config.js';
import { BATCH_ID_RE } from '../../shared/ids.js';
import { batchBody } from '../helpers/events.js';
import { type TestStack, startTestStack } from '../helpers/stack.js';

describe('APP_PATTERN', () => {
  let stack: TestStack;
  let redis: Redis;
  beforeAll(async () => {
    stack = await startTestStack({ APP_PATTERN: '[a-z][a-z0-9-]{2,31}' }, { api: true, encoder: false });
    redis = new Redis(inject('redisUrl'));
  });
  afterAll(async () => {
    redis.disconnect();
    await stack.shutdown();
  });

  const push = async (app: string) => {
    const r = await fetch(`${stack.url}/push/events/${app}/x`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: batchBody(2),
    });
    return { status: r.status, body: (await r.json()) as { batchId?: string; error?: string } };
  };
  // This stack's keys only (they all carry its queue name): other test files share the Redis server,
  // and a short name like `zq` can occur in their random names.
  const keysNaming = async (app: string) =>
    (await redis.keys(`*${stack.queueName}*`)).filter((k) => k.includes(app)).length;

  it('refuses names outside the pattern with 400 naming the parameter, and leaves no key behind', async () => {
    for (const app of ['REFUSED-UPPER', 'zq', `x${'y'.repeat(40)}`, '9lives-refused']) {
      const r = await push(app);
      expect(r.status, app).toBe(400);
      expect(r.body.error).toBe('path parameter "app" does not match APP_PATTERN (^(?:[a-z][a-z0-9-]{2,31})$)');
      expect(await keysNaming(app)).toBe(0);
    }
  });

  it('accepts names that match: the push is minted and queued as usual', async () => {
    const r = await push('good-app-1');
    expect(r.status).toBe(200);
    expect(r.body.batchId).toMatch(BATCH_ID_RE);
    expect(await keysNaming('good-app-1')).toBeGreaterThan(0);
  });

  it('an invalid pattern is a start-up error naming the variable', () => {
    expect(() => parseEnv({ APP_PATTERN: '[a-z' })).toThrow(ConfigError);
    expect(() => parseEnv({ APP_PATTERN: '[a-z' })).toThrow(/APP_PATTERN.*not a valid regular expression/);
    expect(parseEnv({ APP_PATTERN: 'app-[0-9]+' }).APP_PATTERN?.test('app-12')).toBe(true);
    expect(parseEnv({ APP_PATTERN: 'app-[0-9]+' }).APP_PATTERN?.test('xapp-12')).toBe(false);
  });
});
