import { createRequire } from 'node:module';
import { Command, Redis, ReplyError } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { RedisUnavailable, TimeoutError } from '../../shared/errors.js';
import {
  asRedisUnavailable,
  commandNeverRan,
  isRedisUnavailable,
  redisCall,
  waitReady,
} from '../../shared/redis/connection.js';
import { withTimeout } from '../../shared/timeout.js';

// ioredis' own error classes, as it builds them (built/errors; redis-errors is its dependency).
const require = createRequire(import.meta.url);
const { MaxRetriesPerRequestError } = require('ioredis/built/errors/index.js') as {
  MaxRetriesPerRequestError: new (n: number) => Error;
};
const ClusterAllFailedError = (
  require('ioredis/built/errors/ClusterAllFailedError.js') as { default: new (message: string, last: Error) => Error }
).default;
const { AbortError } = require(require.resolve('redis-errors', { paths: [require.resolve('ioredis')] })) as {
  AbortError: new (message: string) => Error;
};

/** A socket error as Node makes it (net.js: message, errno, code, syscall). */
const sockErr = (code: string, syscall = 'connect'): Error =>
  Object.assign(new Error(`${syscall} ${code} 127.0.0.1:6379`), { code, errno: -1, syscall });

/** ioredis' "Connection is closed." from a client that has ended (no socket is opened). */
async function connectionClosed(): Promise<unknown> {
  const r = new Redis({ lazyConnect: true, enableOfflineQueue: false });
  r.disconnect();
  return r.get('k').then(
    () => 'answered',
    (err: unknown) => err,
  );
}

/** ioredis' commandTimeout error, from a real Command whose timer fires. */
async function commandTimedOut(): Promise<unknown> {
  const c = new Command('get', ['k']);
  c.setTimeout(1);
  return c.promise.then(
    () => 'answered',
    (err: unknown) => err,
  );
}

describe('Redis errors are classified once, at the adapter', () => {
  it('wraps every shape ioredis gives for "Redis is unreachable", keeping the driver error as cause and its message', async () => {
    const shapes: [Error | unknown, boolean][] = [
      // Offline queue off and no connection: Redis.js sendCommand.
      [new Error("Stream isn't writeable and enableOfflineQueue options is false"), true],
      [await connectionClosed(), false],
      [sockErr('ECONNREFUSED'), true],
      [sockErr('EHOSTUNREACH'), true],
      [sockErr('ENOTFOUND', 'getaddrinfo'), true],
      [sockErr('ECONNRESET', 'read'), false],
      [sockErr('EPIPE', 'write'), false],
      // Redis.js connectTimeout: a plain Error carrying code ETIMEDOUT.
      [Object.assign(new Error('connect ETIMEDOUT'), { code: 'ETIMEDOUT', syscall: 'connect' }), false],
      [await commandTimedOut(), false],
      [new MaxRetriesPerRequestError(1), false],
      // Pipelines and transactions cut by a closing connection (redis/event_handler.js).
      [new AbortError('Command aborted due to connection close'), false],
      // Redis Cluster: Redis' own replies mid-failover, and ioredis' cluster errors.
      [new ReplyError('CLUSTERDOWN The cluster is down'), true],
      [new ReplyError('TRYAGAIN Multiple keys request during rehashing of slot'), true],
      [new ClusterAllFailedError('Failed to refresh slots cache.', new Error('x')), true],
      [new Error('None of startup nodes is available'), true],
      [new Error("Cluster isn't ready and enableOfflineQueue options is false"), true],
    ];
    for (const [driverErr, neverRan] of shapes) {
      expect(driverErr, String(driverErr)).toBeInstanceOf(Error);
      const wrapped = asRedisUnavailable(driverErr);
      expect(wrapped, (driverErr as Error).message).toBeInstanceOf(RedisUnavailable);
      const u = wrapped as RedisUnavailable;
      expect(u.cause).toBe(driverErr);
      expect(u.message).toBe((driverErr as Error).message);
      expect(u.neverRan, (driverErr as Error).message).toBe(neverRan);
      expect(isRedisUnavailable(driverErr)).toBe(true);
      expect(commandNeverRan(driverErr)).toBe(neverRan);
      // Once wrapped, the type answers: no second reading of the text.
      expect(asRedisUnavailable(u)).toBe(u);
      expect(isRedisUnavailable(u)).toBe(true);
      expect(commandNeverRan(u)).toBe(neverRan);
    }
  });

  it('leaves every other error as it is: script errors, refusals, our own timeouts, non-errors', () => {
    const others: unknown[] = [
      new ReplyError('ERR user_script:12: Script attempted to access nonexistent global variable'),
      new ReplyError("OOM command not allowed when used memory > 'maxmemory'."),
      new ReplyError("READONLY You can't write against a read only replica."),
      new ReplyError('NOSCRIPT No matching script'),
      new TimeoutError('enqueue', 3000),
      // Whatever it names: only the driver's own timeout is read as Redis' state.
      new TimeoutError('Command', 2000),
      new Error('job 123 not found'),
      'ECONNREFUSED',
      undefined,
    ];
    for (const err of others) {
      expect(asRedisUnavailable(err)).toBe(err);
      expect(isRedisUnavailable(err)).toBe(false);
    }
    // A refusal is not an outage, but Redis did not run the command: undoing it is safe.
    expect(commandNeverRan(others[1])).toBe(true);
    expect(commandNeverRan(others[0])).toBe(false);
  });

  it('redisCall rethrows a driver outage as RedisUnavailable and anything else unchanged', async () => {
    const closed = await connectionClosed();
    await expect(redisCall(Promise.reject(closed))).rejects.toSatisfy(
      (e: unknown) => e instanceof RedisUnavailable && e.cause === closed,
    );
    const script = new ReplyError('ERR bad script');
    await expect(redisCall(Promise.reject(script))).rejects.toBe(script);
    await expect(redisCall(Promise.resolve(7))).resolves.toBe(7);
  });

  it('waitReady gives up with a RedisUnavailable (the command never ran), not a bare Error', async () => {
    const r = new Redis({ lazyConnect: true });
    try {
      const err = await waitReady(r, 5).then(
        () => 'ready',
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(RedisUnavailable);
      expect((err as RedisUnavailable).neverRan).toBe(true);
      expect((err as Error).message).toBe('Redis not ready after 5 ms');
    } finally {
      r.disconnect();
    }
  });

  it('withTimeout rejects with a TimeoutError naming what timed out and after how long', async () => {
    const err = await withTimeout(new Promise(() => undefined), 5, 'shard layout check').then(
      () => 'settled',
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(TimeoutError);
    expect(err).toMatchObject({
      what: 'shard layout check',
      afterMs: 5,
      message: 'shard layout check timed out after 5 ms',
    });
    const bare = await withTimeout(new Promise(() => undefined), 1).catch((e: unknown) => e);
    expect(bare).toMatchObject({ what: '', afterMs: 1, message: 'timed out after 1 ms' });
    expect(isRedisUnavailable(err)).toBe(false);
  });
});
