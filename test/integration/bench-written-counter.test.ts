import { Redis } from 'ioredis';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { writtenIndexCounter } from '../../bench/lib.js';
import { BatchLedger } from '../../shared/ledger/ledger.js';
import { uniqueName } from '../helpers/names.js';

describe("the bench's durable counter reads the ledger's index of written ids", () => {
  const redis = new Redis(inject('redisUrl'));
  afterAll(() => redis.disconnect());

  it('counts the ids written under one prefix, not under a longer one that starts alike', async () => {
    const app = uniqueName('wc');
    const ledger = new BatchLedger(redis, uniqueName('bench-ns'));
    const count = writtenIndexCounter(redis, `events/${app}/`);
    expect(await count()).toBe(0);
    for (let i = 0; i < 3; i++) {
      const { batchId } = await ledger.mint(`events/${app}/`);
      await ledger.markWritten(`events/${app}/`, batchId, 3600);
    }
    const other = await ledger.mint(`events/${app}0/`);
    await ledger.markWritten(`events/${app}0/`, other.batchId, 3600);
    // Minted but not written: not counted.
    await ledger.mint(`events/${app}/`);
    expect(await count()).toBe(3);
  });

  it('sums the shards (QUEUE_SHARDS > 1: one index per namespace)', async () => {
    const app = uniqueName('wc');
    const count = writtenIndexCounter(redis, `events/${app}/`);
    const shards = [new BatchLedger(redis, uniqueName('shard-0')), new BatchLedger(redis, uniqueName('shard-1'))];
    for (let i = 0; i < 5; i++) {
      const ledger = shards[i % 2] as BatchLedger;
      const { batchId } = await ledger.mint(`events/${app}/`);
      await ledger.markWritten(`events/${app}/`, batchId, 3600);
    }
    expect(await count()).toBe(5);
  });
});
