/**
 * A burst encoder (`npm start`'s extra encoder threads): idle while fewer than its backlog
 * threshold of jobs wait, taking jobs once that many wait, idle again once the queue is drained.
 * Real Redis, BullMQ and filesystem store; the files are read back by DuckDB.
 */
import { describe, expect, it } from 'vitest';
import { type Encoder, createEncoder } from '../../services/encoder/worker.js';
import { BatchLedger } from '../../shared/ledger/ledger.js';
import { createLogger } from '../../shared/logger.js';
import { createRegistry } from '../../shared/metrics.js';
import { FilesystemObjectStore } from '../../shared/store/filesystem/index.js';
import { duckQuery } from '../helpers/duckdb.js';
import { batchBody, sampleEvent } from '../helpers/events.js';
import { useApiOnlyStack } from '../helpers/stack.js';
import { holdsFor, waitFor } from '../helpers/wait.js';

const BACKLOG = 5;

describe('burst encoder', () => {
  const setup = useApiOnlyStack();

  const push = async (n: number, tag: string): Promise<string[]> => {
    const ids: string[] = [];
    for (let i = 0; i < n; i++) {
      const r = await fetch(`${setup.stack().url}/push/events/burst/x`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body: batchBody(20, (j) => ({ ...sampleEvent(j), distinct_id: `${tag}-${i}` })),
      });
      expect(r.status).toBe(200);
      ids.push(((await r.json()) as { batchId: string }).batchId);
    }
    return ids;
  };
  const written = async (store: FilesystemObjectStore): Promise<number> =>
    (await store.listKeys('events/burst/')).length;
  const gauge = async (e: Encoder, name: 'workers' | 'concurrency'): Promise<number> =>
    (await e.metrics[name].get()).values[0]?.value ?? -1;

  it('takes jobs only while the backlog reaches its threshold, and goes idle once drained', async () => {
    const stack = setup.stack();
    const conn = setup.conn();
    const store = new FilesystemObjectStore({ root: stack.dataDir });
    const opts = {
      queueName: stack.queueName,
      connection: conn,
      ledger: new BatchLedger(conn, stack.queueName),
      store,
      logger: createLogger({ level: 'silent', name: 'burst' }),
      concurrency: 4,
    };
    const first = await push(BACKLOG - 1, 'a');
    const burst = createEncoder({
      ...opts,
      registry: createRegistry('burst', false),
      burst: { backlog: BACKLOG, pollMs: 50 },
    });
    let steady: Encoder | undefined;
    try {
      // Below the threshold: for ten of its polls (fewer on a busy machine), nothing taken.
      await holdsFor(
        async () => !burst.burst?.taking && (await written(store)) === 0,
        500,
        'the burst encoder idle below its threshold',
      );
      expect(burst.burst).toEqual({ taking: false, starts: 0 });
      expect(await gauge(burst, 'workers')).toBe(0);
      expect(await gauge(burst, 'concurrency')).toBe(0);

      // At the threshold: it starts, writes every batch, then goes idle again. One push reaches
      // it: with two, the encoder could take and drain the first five before the second push
      // lands (a slow push on a busy machine), go idle with one job waiting, and never take it.
      const second = await push(BACKLOG - first.length, 'b');
      await waitFor(
        async () => (await written(store)) === first.length + second.length,
        30_000,
        'the backlog written by the burst encoder',
      );
      await waitFor(async () => !burst.burst?.taking, 10_000, 'the burst encoder idle after the drain');
      expect(burst.burst?.starts).toBe(1);
      expect(await gauge(burst, 'workers')).toBe(0);
      expect(await gauge(burst, 'concurrency')).toBe(0);
      expect((await burst.metrics.batches.get()).values.find((v) => v.labels.outcome === 'written')?.value).toBe(
        first.length + second.length,
      );

      // Below the threshold again: the burst encoder leaves the jobs to a steady encoder.
      const third = await push(2, 'c');
      await holdsFor(
        async () => !burst.burst?.taking && (await written(store)) === first.length + second.length,
        500,
        'the burst encoder idle below its threshold again',
      );
      steady = createEncoder({ ...opts, registry: createRegistry('steady', false) });
      await waitFor(
        async () => (await written(store)) === first.length + second.length + third.length,
        30_000,
        'the rest written by the steady encoder',
      );
      expect(burst.burst).toEqual({ taking: false, starts: 1 });
      expect((await steady.metrics.batches.get()).values.find((v) => v.labels.outcome === 'written')?.value).toBe(
        third.length,
      );
      expect(await gauge(steady, 'workers')).toBe(1);
    } finally {
      await Promise.all([burst.close(5000), steady?.close(5000)]);
    }
    const rows = await duckQuery(
      `SELECT left(distinct_id, 1) AS tag, count(*)::INTEGER AS n FROM read_parquet('${stack.dataDir}/events/burst/*.parquet') GROUP BY 1 ORDER BY 1`,
    );
    expect(rows).toEqual([
      { tag: 'a', n: 20 * (BACKLOG - 1) },
      { tag: 'b', n: 20 },
      { tag: 'c', n: 40 },
    ]);
  });
});
