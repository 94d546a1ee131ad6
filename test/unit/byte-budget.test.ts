import { describe, expect, it, vi } from 'vitest';
import { parseContentEncoding } from '../../services/api/body.js';
import {
  API_ENCODED_ROW_BYTES,
  ByteBudget,
  DrainCollector,
  ENCODER_ROW_BYTES,
  batchCost,
} from '../../shared/byte-budget.js';
import {
  DEFAULT_SYNC_CONFIG,
  ENCODER_MAX_INFLIGHT_BYTES_DEFAULT,
  ENCODER_PROCESSES_DEFAULT,
  MAX_EVENTS_PER_BATCH_DEFAULT,
  parseSyncConfig,
} from '../../shared/config.js';
import {
  RETAINED_BUILDER_BYTES,
  builderBytes,
  encodeBatch,
  parseBatchColumns,
  prepareBatch,
} from '../../shared/parquet/encode.js';
import { jobCost } from '../../services/encoder/worker.js';

describe('ByteBudget', () => {
  it('tryTake grants while the total fits, refuses past it, and give makes room again', () => {
    const seen: number[] = [];
    const b = new ByteBudget(100, (used) => seen.push(used));
    expect(b.tryTake(60)).toBe(true);
    expect(b.tryTake(41)).toBe(false);
    expect(b.tryTake(40)).toBe(true);
    expect(b.inUse).toBe(100);
    b.give(60);
    expect(b.tryTake(50)).toBe(true);
    expect(seen).toEqual([60, 100, 40, 90]);
  });

  it('a request bigger than the whole budget is granted alone, never beside another', async () => {
    const b = new ByteBudget(100);
    expect(b.tryTake(10)).toBe(true);
    expect(b.tryTake(500)).toBe(false);
    let granted = false;
    const big = b.take(500).then(() => (granted = true));
    await Promise.resolve();
    expect(granted).toBe(false);
    b.give(10);
    await big;
    expect(b.inUse).toBe(500);
    expect(b.tryTake(1)).toBe(false);
    b.give(500);
    expect(b.inUse).toBe(0);
  });

  it('a body growing past the limit alone keeps growing; beside another it is refused', () => {
    const b = new ByteBudget(100);
    expect(b.tryTake(80)).toBe(true);
    expect(b.tryTake(50, 80)).toBe(true);
    expect(b.inUse).toBe(130);
    b.give(130);
    expect(b.tryTake(80)).toBe(true);
    expect(b.tryTake(10)).toBe(true);
    expect(b.tryTake(50, 80)).toBe(false);
  });

  it('take waits first come first served: a large waiter at the head is not overtaken by small ones', async () => {
    const b = new ByteBudget(100);
    await b.take(80);
    const order: string[] = [];
    const large = b.take(60).then(() => order.push('large'));
    const small = b.take(10).then(() => order.push('small'));
    // Room for the small one, but the large one asked first.
    expect(b.tryTake(10)).toBe(false);
    await new Promise((r) => setTimeout(r, 10));
    expect(order).toEqual([]);
    b.give(80);
    await Promise.all([large, small]);
    expect(order).toEqual(['large', 'small']);
    expect(b.inUse).toBe(70);
  });
});

describe('what a batch costs (rows × per-row cost + bytes)', () => {
  it('rows count whatever their JSON length: 2.66 M empty events cost far more than their 8 MB', () => {
    expect(batchCost(2_660_000, 7_980_020, ENCODER_ROW_BYTES)).toBe(2_660_000 * 200 + 7_980_020);
    expect(batchCost(0, 100, ENCODER_ROW_BYTES)).toBe(100);
    // An encoder's job: a JSON batch costs its rows too; a file the API encoded only its bytes.
    expect(jobCost({ encoding: 'deflate-raw', events: 100_000, bodyBytes: 300_000 })).toBe(
      100_000 * ENCODER_ROW_BYTES + 300_000,
    );
    expect(jobCost({ encoding: 'identity', events: 1, bodyBytes: 500 })).toBe(ENCODER_ROW_BYTES + 500);
    expect(jobCost({ encoding: 'parquet', events: 100_000, bodyBytes: 40_000 })).toBe(40_000);
    expect(API_ENCODED_ROW_BYTES).toBeGreaterThan(ENCODER_ROW_BYTES);
  });

  it('the default maxEventsPerBatch is sized so one batch at the cap and at maxBodyBytes fits an encoder budget', () => {
    const collection = parseSyncConfig(DEFAULT_SYNC_CONFIG).collections[0];
    expect(collection?.maxEventsPerBatch).toBe(MAX_EVENTS_PER_BATCH_DEFAULT);
    expect(MAX_EVENTS_PER_BATCH_DEFAULT).toBe(100_000);
    const worst = batchCost(MAX_EVENTS_PER_BATCH_DEFAULT, collection?.maxBodyBytes ?? 0, ENCODER_ROW_BYTES);
    expect(worst).toBeLessThanOrEqual(ENCODER_MAX_INFLIGHT_BYTES_DEFAULT / ENCODER_PROCESSES_DEFAULT);
    expect(() =>
      parseSyncConfig({
        ...DEFAULT_SYNC_CONFIG,
        collections: [{ name: 'e', storagePath: 'e/{app}/{batchId}', maxEventsPerBatch: 0 }],
      }),
    ).toThrow(/maxEventsPerBatch/);
  });
});

describe('DrainCollector', () => {
  it('collects once after a burst that held at least minPeak drains and stays drained; never for small use', () => {
    vi.useFakeTimers();
    try {
      let runs = 0;
      const c = new DrainCollector({ minPeak: 100, delayMs: 1000, minIntervalMs: 5000, collect: () => (runs++, true) });
      c.note(50);
      c.note(0);
      vi.advanceTimersByTime(2000);
      expect(runs).toBe(0);
      c.note(150);
      c.note(0);
      vi.advanceTimersByTime(500);
      // Busy again before the delay: no collection while work is held.
      c.note(10);
      vi.advanceTimersByTime(2000);
      expect(runs).toBe(0);
      c.note(0);
      vi.advanceTimersByTime(1000);
      expect(runs).toBe(1);
      // The next burst's collection waits for minIntervalMs since the last one.
      c.note(200);
      c.note(0);
      vi.advanceTimersByTime(1000);
      expect(runs).toBe(1);
      vi.advanceTimersByTime(4000);
      expect(runs).toBe(2);
      expect(c.runs).toBe(2);
      c.stop();
    } finally {
      vi.useRealTimers();
    }
  });
});

describe('column builders after a large batch', () => {
  const body = (n: number): Buffer =>
    Buffer.from(`{"data":{"events":[${'{"event":"e"},'.repeat(n - 1)}{}]},"baseHash":null}`);

  it('give their growth back once a batch grew them past RETAINED_BUILDER_BYTES, whichever way it was scanned', () => {
    const small = body(1000);
    expect(encodeBatch(small, 1).ok).toBe(true);
    const ordinary = builderBytes();
    expect(ordinary).toBeLessThanOrEqual(RETAINED_BUILDER_BYTES);
    // 200,000 events: 8 MB of offsets alone in the ten builders.
    const large = body(200_000);
    expect(encodeBatch(large, 1).ok).toBe(true);
    expect(builderBytes()).toBeLessThanOrEqual(ordinary);
    const prepared = prepareBatch(large);
    expect(prepared.ok && prepared.batch.rows).toBe(200_000);
    expect(builderBytes()).toBeLessThanOrEqual(ordinary);
    const parsed = parseBatchColumns(large);
    expect(parsed.ok && parsed.columns.rows).toBe(200_000);
    expect(builderBytes()).toBeLessThanOrEqual(ordinary);
  });
});

describe('Content-Encoding header', () => {
  it.each([
    [undefined, 'identity'],
    ['', 'identity'],
    ['identity', 'identity'],
    ['gzip', 'gzip'],
    ['GZip', 'gzip'],
    ['x-gzip', 'gzip'],
    ['deflate', 'deflate'],
    [' br ', 'br'],
    ['identity, br', 'br'],
  ])('%j decodes as %s', (header, coding) => {
    expect(parseContentEncoding(header)).toEqual({ ok: true, coding });
  });

  it.each([
    ['x-bogus', /"x-bogus" is not supported; use gzip, deflate, br or identity/],
    ['gzip, x-bogus', /"x-bogus" is not supported/],
    ['compress', /"compress" is not supported/],
    ['gzip, br', /"gzip, br" stacks 2 codings; send at most one/],
    ['gzip, gzip', /stacks 2 codings/],
    [`x-${'a'.repeat(200)}\u0007`, /"x-a{62}…" is not supported/],
  ])('%j is refused', (header, message) => {
    const r = parseContentEncoding(header);
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.error).toMatch(message);
  });
});
