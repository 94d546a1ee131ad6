/**
 * The encoder's byte budget with many slots: jobs fetched beyond what the budget admits let go of
 * their payload while they wait and read it from Redis again once admitted. Real Redis, BullMQ,
 * filesystem store; the files are read back by DuckDB.
 */
import { describe, expect, it } from 'vitest';
import { createEncoder } from '../../services/encoder/worker.js';
import { BatchLedger } from '../../shared/ledger/ledger.js';
import { createLogger } from '../../shared/logger.js';
import { createRegistry } from '../../shared/metrics.js';
import { FilesystemObjectStore } from '../../shared/store/filesystem.js';
import { duckQuery } from '../helpers/duckdb.js';
import { batchBody, sampleEvent } from '../helpers/events.js';
import { waitFor } from '../helpers/proc.js';
import { useApiOnlyStack } from '../helpers/stack.js';

describe('encoder byte budget with more slots than it admits', () => {
  // The API queues these bodies as JSON (API_ENCODE_MAX_BYTES=0), so the budget counts what the
  // encoder inflates and encodes; a file the API encoded is counted the same way, by its size.
  const setup = useApiOnlyStack({ API_ENCODE_MAX_BYTES: '0' });

  it('waiting jobs read their payload again once admitted; every batch is written whole', async () => {
    const stack = setup.stack();
    const conn = setup.conn();
    // Six batches of different sizes, each ~0.4-0.5 MB of JSON; the budget admits one at a time.
    const sizes = [800, 810, 820, 830, 840, 850];
    const ids: string[] = [];
    let largest = 0;
    for (const [i, n] of sizes.entries()) {
      const body = batchBody(n, (j) => ({ ...sampleEvent(j), distinct_id: `budget-${i}` }));
      largest = Math.max(largest, Buffer.byteLength(body));
      const r = await fetch(`${stack.url}/push/events/budget/x`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body });
      expect(r.status).toBe(200);
      ids.push(((await r.json()) as { batchId: string }).batchId);
    }
    const store = new FilesystemObjectStore({ root: stack.dataDir });
    const registry = createRegistry('budget', false);
    const encoder = createEncoder({
      queueName: stack.queueName,
      connection: conn,
      ledger: new BatchLedger(conn, stack.queueName),
      store,
      registry,
      logger: createLogger({ level: 'silent', name: 'budget' }),
      concurrency: 32,
      maxInflightBytes: largest + 1,
    });
    let inflightMax = 0;
    try {
      await waitFor(
        async () => {
          inflightMax = Math.max(inflightMax, (await encoder.metrics.inflightBytes.get()).values[0]?.value ?? 0);
          return (await store.listKeys('events/budget/')).length === ids.length;
        },
        60_000,
        'every batch written',
      );
    } finally {
      await encoder.close(5000);
    }
    // One batch at a time, so the other five waited, and each of those read its payload again.
    expect(inflightMax).toBeLessThanOrEqual(largest + 1);
    const waits = (await encoder.metrics.budgetWaitSeconds.get()).values.find((v) => v.metricName?.endsWith('_count'))?.value;
    expect(waits).toBe(ids.length);
    const reloads = (await encoder.metrics.payloadReloads.get()).values[0]?.value ?? 0;
    expect(reloads).toBeGreaterThanOrEqual(1);
    expect(reloads).toBeLessThanOrEqual(ids.length - 1);
    expect((await encoder.metrics.batches.get()).values.find((v) => v.labels.outcome === 'written')?.value).toBe(ids.length);
    const rows = await duckQuery(
      `SELECT distinct_id, count(*)::INTEGER AS n FROM read_parquet('${stack.dataDir}/events/budget/*.parquet') GROUP BY 1 ORDER BY 1`,
    );
    expect(rows).toEqual(sizes.map((n, i) => ({ distinct_id: `budget-${i}`, n })));
  });
});
