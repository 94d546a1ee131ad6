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
});
