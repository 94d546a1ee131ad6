/**
 * The encoder's byte budget with many slots: jobs fetched beyond what the budget admits let go of
 * their payload while they wait and read it from Redis again once admitted. Real Redis, BullMQ,
 * filesystem store; the files are read back by DuckDB.
 */
import { describe, expect, it } from 'vitest';
import { createEncoder, jobCost } from '../../services/encoder/worker.js';
import { ENCODER_ROW_BYTES } from '../../shared/byte-budget.js';
import type { ObjectStore } from '../../shared/store/types.js';
import { BatchLedger } from '../../shared/ledger/ledger.js';
import { createLogger } from '../../shared/logger.js';
import { createRegistry } from '../../shared/metrics.js';
import { FilesystemObjectStore } from '../../shared/store/filesystem/index.js';
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
    // The budget counts what a batch costs (rows and bytes), so the largest one's cost admits one at a time.
    let largest = 0;
    for (const [i, n] of sizes.entries()) {
      const body = batchBody(n, (j) => ({ ...sampleEvent(j), distinct_id: `budget-${i}` }));
      largest = Math.max(largest, jobCost({ encoding: 'identity', events: n, bodyBytes: Buffer.byteLength(body) }));
      const r = await fetch(`${stack.url}/push/events/budget/x`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body,
      });
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
    const waits = (await encoder.metrics.budgetWaitSeconds.get()).values.find((v) =>
      v.metricName?.endsWith('_count'),
    )?.value;
    expect(waits).toBe(ids.length);
    const reloads = (await encoder.metrics.payloadReloads.get()).values[0]?.value ?? 0;
    expect(reloads).toBeGreaterThanOrEqual(1);
    expect(reloads).toBeLessThanOrEqual(ids.length - 1);
    expect((await encoder.metrics.batches.get()).values.find((v) => v.labels.outcome === 'written')?.value).toBe(
      ids.length,
    );
    const rows = await duckQuery(
      `SELECT distinct_id, count(*)::INTEGER AS n FROM read_parquet('${stack.dataDir}/events/budget/*.parquet') GROUP BY 1 ORDER BY 1`,
    );
    expect(rows).toEqual(sizes.map((n, i) => ({ distinct_id: `budget-${i}`, n })));
  });
});

describe('encoder byte budget counts rows', () => {
  const setup = useApiOnlyStack({ API_ENCODE_MAX_BYTES: '0' });

  it('a batch of many tiny events costs its rows, not its 60 KB: a budget that fits two by bytes admits one', async () => {
    const stack = setup.stack();
    const conn = setup.conn();
    const events = 20_001;
    const bodies = ['a', 'b'].map(
      (tag) => `{"data":{"events":[{"event":"${tag}"}${',{}'.repeat(events - 1)}]},"baseHash":null}`,
    );
    const ids: string[] = [];
    for (const body of bodies) {
      const r = await fetch(`${stack.url}/push/events/rows/x`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body,
      });
      expect(r.status, await r.clone().text()).toBe(200);
      ids.push(((await r.json()) as { batchId: string }).batchId);
    }
    const cost = events * ENCODER_ROW_BYTES + Buffer.byteLength(bodies[0] as string);
    expect(jobCost({ encoding: 'identity', events, bodyBytes: Buffer.byteLength(bodies[0] as string) })).toBe(cost);
    // Room for both bodies' bytes many times over, but for one batch's rows only.
    const limit = cost + 1000;
    expect(2 * Buffer.byteLength(bodies[0] as string)).toBeLessThan(limit);
    expect(2 * cost).toBeGreaterThan(limit);

    // The filesystem store, with its writes held until the test lets them go: the first admitted
    // job sits in its write, holding its cost, while the other waits for the budget.
    const fs = new FilesystemObjectStore({ root: stack.dataDir });
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    let writes = 0;
    const store: ObjectStore = Object.assign(Object.create(fs) as ObjectStore, {
      async putBytes(...args: Parameters<ObjectStore['putBytes']>) {
        writes++;
        await gate;
        return fs.putBytes(...args);
      },
    });
    const registry = createRegistry('rows', false);
    const encoder = createEncoder({
      queueName: stack.queueName,
      connection: conn,
      ledger: new BatchLedger(conn, stack.queueName),
      store,
      registry,
      logger: createLogger({ level: 'silent', name: 'rows' }),
      concurrency: 8,
      maxInflightBytes: limit,
    });
    const gauge = async (): Promise<number> => (await encoder.metrics.inflightBytes.get()).values[0]?.value ?? 0;
    try {
      await waitFor(async () => writes >= 1, 30_000, 'the first batch to reach its write');
      // Read back from the registry: the job in its write holds its rows' cost, and only its own.
      expect(await registry.getSingleMetricAsString('ingest_encoder_inflight_bytes')).toMatch(
        new RegExp(`^ingest_encoder_inflight_bytes(\\{[^}]*\\})? ${cost}$`, 'm'),
      );
      expect(await gauge()).toBe(cost);
      expect(writes).toBe(1);
      release();
      await waitFor(
        async () => (await fs.listKeys('events/rows/')).length === ids.length,
        60_000,
        'both batches written',
      );
      await waitFor(async () => (await gauge()) === 0, 10_000, 'the budget to be given back');
    } finally {
      release();
      await encoder.close(5000);
    }
    const [row] = await duckQuery(
      `SELECT count(*)::INTEGER AS n FROM read_parquet('${stack.dataDir}/events/rows/*.parquet')`,
    );
    expect(row).toEqual({ n: 2 * events });
  });
});
