import type { Queue } from 'bullmq';
import { ReplyError } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { RedisUnavailable } from '../../shared/errors.js';
import { BatchLedger } from '../../shared/ledger/ledger.js';
import type { RedisClient } from '../../shared/redis/connection.js';
import { BullJobSink } from '../../services/api/push/adapters.js';
import { EnqueueRefused } from '../../services/api/push/ports.js';
import type { BatchJob } from '../../shared/redis/jobs/push.js';
import { recordedShardCount, shardLayouts } from '../../shared/redis/shards.js';
import { ensureShardLayout } from '../../shared/ledger/shard-set.js';

/** A socket error as Node makes it. */
const sockErr = (code: string): Error =>
  Object.assign(new Error(`connect ${code} 127.0.0.1:6379`), { code, errno: -1, syscall: 'connect' });

/**
 * A client whose every command (scripts, plain commands, a MULTI's EXEC) rejects with `err`. It
 * already holds the ledger's scripts, so the ledger defines none.
 */
function failingClient(err: unknown): RedisClient {
  const reject = (): Promise<never> => Promise.reject(err);
  const chain: object = new Proxy({}, { get: (_t, p) => (p === 'exec' ? reject : () => chain) });
  return new Proxy({ ingestMint: reject } as object, {
    get: (_t, p) => (p === 'then' ? undefined : p === 'multi' ? () => chain : reject),
    has: () => true,
  }) as RedisClient;
}

const claim = { family: 'key' as const, scope: 's', bodyHash: 'a'.repeat(64), windowSeconds: 60 };

/** Every BatchLedger method that talks to Redis. */
const calls: [string, (l: BatchLedger) => Promise<unknown>][] = [
  ['mint', (l) => l.mint('p', { idempotency: claim })],
  ['lookup', (l) => l.lookup(claim)],
  ['release', (l) => l.release('p', 'id')],
  ['reap', (l) => l.reap('p', 'id')],
  ['markReplaying', (l) => l.markReplaying('p', 'id')],
  ['markWritten', (l) => l.markWritten('p', 'id', 60)],
  ['listWritten', (l) => l.listWritten('p', '', 10)],
  ['listBound', (l) => l.listBound('p')],
  ['lastMintedMs', (l) => l.lastMintedMs()],
  ['seedClockAfter', (l) => l.seedClockAfter(1)],
  ['prefixes', (l) => l.prefixes()],
  ['oldestPending', (l) => l.oldestPending('p', 1)],
  ['isPending', (l) => l.isPending('p', 'id')],
  ['scanPending', (l) => l.scanPending()],
  ['maxLagMs', (l) => l.maxLagMs()],
  ['noteGroup', (l) => l.noteGroup('g', ['id'])],
  ['groupOf', (l) => l.groupOf('id')],
];

describe('the ledger wraps driver errors at its boundary', () => {
  it.each(calls)(
    '%s: an unreachable Redis leaves as RedisUnavailable (cause and neverRan kept)',
    async (_name, call) => {
      const driver = sockErr('ECONNREFUSED');
      const err = await call(new BatchLedger(failingClient(driver), 'ns')).then(
        () => 'resolved',
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(RedisUnavailable);
      expect((err as RedisUnavailable).cause).toBe(driver);
      expect((err as RedisUnavailable).neverRan).toBe(true);
      expect((err as Error).message).toBe(driver.message);
    },
  );

  it.each(calls)('%s: a connection lost mid-command is RedisUnavailable with neverRan false', async (_name, call) => {
    const err = await call(new BatchLedger(failingClient(sockErr('ECONNRESET')), 'ns')).then(
      () => 'resolved',
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(RedisUnavailable);
    expect((err as RedisUnavailable).neverRan).toBe(false);
  });

  it.each(calls)('%s: any other error (a script error) comes back unchanged', async (_name, call) => {
    const scriptErr = new ReplyError('ERR Error running script');
    const err = await call(new BatchLedger(failingClient(scriptErr), 'ns')).then(
      () => 'resolved',
      (e: unknown) => e,
    );
    expect(err).toBe(scriptErr);
  });
});

describe('the BullMQ job sink wraps driver errors at its boundary', () => {
  const job = { prefix: 'events/a', batchId: 'b1', bodyBytes: 10 } as unknown as BatchJob;
  const sinkFailingWith = (err: unknown): BullJobSink => {
    const queue = { add: () => Promise.reject(err), getJobState: () => Promise.reject(err) } as unknown as Queue;
    return new BullJobSink({ queue, ledger: new BatchLedger(failingClient(err), 'ns') }, { groupMax: 1 });
  };

  it('an add that surely never ran is EnqueueRefused (the mint may be undone)', async () => {
    const err = await sinkFailingWith(sockErr('ECONNREFUSED'))
      .submit(job)
      .done.then(
        () => 'resolved',
        (e: unknown) => e,
      );
    expect(err).toBeInstanceOf(EnqueueRefused);
  });

  it('an add cut mid-flight is RedisUnavailable, not EnqueueRefused (it may have landed)', async () => {
    const driver = sockErr('ECONNRESET');
    const err = await sinkFailingWith(driver)
      .submit(job)
      .done.then(
        () => 'resolved',
        (e: unknown) => e,
      );
    expect(err).toBeInstanceOf(RedisUnavailable);
    expect((err as RedisUnavailable).cause).toBe(driver);
  });

  it('a job-state read against an unreachable Redis is RedisUnavailable; other errors unchanged', async () => {
    await expect(sinkFailingWith(sockErr('ECONNRESET')).hasJob('events/a', 'b1')).rejects.toBeInstanceOf(
      RedisUnavailable,
    );
    const other = new Error('Missing key for job b1');
    await expect(sinkFailingWith(other).hasJob('events/a', 'b1')).rejects.toBe(other);
  });
});

describe('the shard layout check wraps driver errors at its boundary', () => {
  it('an unreachable Redis fails ensureShardLayout and recordedShardCount with RedisUnavailable', async () => {
    const driver = sockErr('ECONNREFUSED');
    await expect(ensureShardLayout(failingClient(driver), 'q', shardLayouts('q', 1, false))).rejects.toSatisfy(
      (e: unknown) => e instanceof RedisUnavailable && e.cause === driver,
    );
    await expect(recordedShardCount(failingClient(driver), 'q')).rejects.toBeInstanceOf(RedisUnavailable);
  });

  it('another error comes back unchanged', async () => {
    const other = new ReplyError('WRONGTYPE Operation against a key holding the wrong kind of value');
    await expect(recordedShardCount(failingClient(other), 'q')).rejects.toBe(other);
  });
});
