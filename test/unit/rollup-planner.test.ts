/**
 * The rollup planner's and retention's decisions, without Redis: which period of a prefix is due
 * given the shard's clock and its final-id horizon, what a replay note asks for, when retention
 * acts. The integration tests (rollup*.test.ts) prove the same against real Redis and DuckDB.
 */
import type { Queue } from 'bullmq';
import { describe, expect, it } from 'vitest';
import type { BatchLedger, ListBound } from '../../shared/ledger/ledger.js';
import { createLogger } from '../../shared/logger.js';
import { parseStoragePath } from '../../shared/paths.js';
import type { Manifest } from '../../shared/rollup/manifest.js';
import { planPeriod } from '../../services/rollup/plan.js';
import { MemoryObjectStore } from '../../shared/store/memory/index.js';
import type { RollupDeps } from '../../services/rollup/context.js';
import {
  RollupPlanner,
  discoveryDue,
  discoveryIntervalMs,
  periodFinal,
  planIntervalMs,
  rerollStartMs,
} from '../../services/rollup/planner.js';
import { retentionCutoffs, retentionDue, retentionOn } from '../../services/rollup/retention.js';

const HOUR = 3_600_000;
/** 2026-12-01T08:00:00Z, a period boundary for every period length used here. */
const T = Date.UTC(2026, 11, 1, 8);
const id = (ms: number, seq = 0): string => `${ms}-${String(seq).padStart(4, '0')}-abcdef`;

describe('planPeriod: which period of a prefix is due', () => {
  const first = T + 10 * 60_000; // a batch at 08:10 → the 08:00-09:00 period
  const delay = 300_000;

  it('is the period holding the first unrolled batch, not due while the clock is inside it', () => {
    expect(planPeriod(first, { horizonMs: T + 30 * 60_000, nowMs: T + 30 * 60_000 }, HOUR, delay)).toEqual({
      nextStartMs: T,
      due: false,
      lagSeconds: 0,
    });
  });

  it('waits for the delay after the period ends, then is due', () => {
    const end = T + HOUR;
    expect(planPeriod(first, { horizonMs: end + delay - 1, nowMs: end + delay - 1 }, HOUR, delay).due).toBe(false);
    expect(planPeriod(first, { horizonMs: end + delay, nowMs: end + delay }, HOUR, delay)).toEqual({
      nextStartMs: T,
      due: true,
      lagSeconds: delay / 1000,
    });
  });

  it('is not due while a batch id below its end is still in flight, whatever the clock says', () => {
    const end = T + HOUR;
    // The oldest in-flight id was minted at 08:59:59.999: the period may still get a batch.
    const clock = { horizonMs: end - 1, nowMs: end + 10 * delay };
    const plan = planPeriod(first, clock, HOUR, delay);
    expect(plan.due).toBe(false);
    expect(plan.lagSeconds).toBe((10 * delay) / 1000);
    // Once that id is written, the horizon reaches the period's end.
    expect(planPeriod(first, { ...clock, horizonMs: end }, HOUR, delay).due).toBe(true);
  });

  it('with no delay, is due the moment the period is closed and final', () => {
    expect(planPeriod(T + HOUR - 1, { horizonMs: T + HOUR, nowMs: T + HOUR }, HOUR, 0)).toEqual({
      nextStartMs: T,
      due: true,
      lagSeconds: 0,
    });
  });
});

describe('planner timing', () => {
  it('plans every tenth of a period, between 1 s and 30 s; discovers once a period, between 5 s and 5 min', () => {
    expect([planIntervalMs(1), planIntervalMs(60), planIntervalMs(3600)]).toEqual([1000, 6000, 30_000]);
    expect([discoveryIntervalMs(1), discoveryIntervalMs(60), discoveryIntervalMs(3600)]).toEqual([
      5000, 60_000, 300_000,
    ]);
  });

  it('discovers on the first pass, then once the interval has passed since the last scan', () => {
    expect(discoveryDue(T, 0, 60)).toBe(true);
    expect(discoveryDue(T + 59_999, T, 60)).toBe(false);
    expect(discoveryDue(T + 60_000, T, 60)).toBe(true);
  });
});

describe('replay notes and finality', () => {
  it('a period is final once the horizon reaches its end', () => {
    expect(periodFinal(T + HOUR - 1, T, HOUR)).toBe(false);
    expect(periodFinal(T + HOUR, T, HOUR)).toBe(true);
  });

  it('re-rolls the period of a replayed batch only when that period is rolled already', () => {
    const batch = T + 5 * 60_000;
    expect(rerollStartMs(batch, undefined, HOUR)).toBeNull(); // no manifest: nothing rolled
    expect(rerollStartMs(batch, batch, HOUR)).toBeNull(); // at the watermark: the forward roll takes it
    expect(rerollStartMs(batch, T + HOUR, HOUR)).toBe(T);
  });
});

describe('retention decisions', () => {
  const period = (startMs: number, rolledAt: number, rawDeletedThrough = '') => ({
    startMs,
    endMs: startMs + HOUR,
    files: [],
    rolledAt,
    rawDeletedThrough,
  });
  const manifest = (periods: ReturnType<typeof period>[], watermarkMs: number): Manifest => ({
    v: 1,
    prefix: 'events/app/',
    periodSeconds: 3600,
    watermarkMs,
    periods,
    updatedAt: 0,
  });

  it('cuts raw files after RAW_RETENTION_SECONDS (grace at most a minute) and periods after RETENTION_DAYS, each only when on', () => {
    expect(retentionOn({ RAW_RETENTION_SECONDS: 0, RETENTION_DAYS: undefined })).toBe(false);
    expect(retentionOn({ RAW_RETENTION_SECONDS: 0, RETENTION_DAYS: 7 })).toBe(true);
    expect(retentionCutoffs({ RAW_RETENTION_SECONDS: 0, RETENTION_DAYS: undefined }, T)).toEqual({ graceMs: 0 });
    expect(retentionCutoffs({ RAW_RETENTION_SECONDS: 30, RETENTION_DAYS: 2 }, T)).toEqual({
      raw: T - 30_000,
      graceMs: 30_000,
      periods: T - 2 * 86_400_000,
    });
    expect(retentionCutoffs({ RAW_RETENTION_SECONDS: 604_800, RETENTION_DAYS: undefined }, T)).toEqual({
      raw: T - 604_800_000,
      graceMs: 60_000,
    });
  });

  it('is due for a rolled period past the raw cutoff once its rollup is past the grace, and not after its files are gone', () => {
    const now = T + 3 * HOUR;
    const cut = retentionCutoffs({ RAW_RETENTION_SECONDS: 60, RETENTION_DAYS: undefined }, now);
    expect(retentionDue(manifest([period(T, now - 1000)], T + HOUR), cut, now)).toBe(false); // rolled a second ago
    expect(retentionDue(manifest([period(T, now - 60_000)], T + HOUR), cut, now)).toBe(true);
    expect(retentionDue(manifest([period(T, now - 60_000, id(T))], T + HOUR), cut, now)).toBe(false);
    // A period not below the watermark is never touched.
    expect(retentionDue(manifest([period(T, now - 60_000)], T), cut, now)).toBe(false);
  });

  it('is due for a period older than RETENTION_DAYS', () => {
    const now = T + 2 * 86_400_000;
    const m = manifest([period(T, T + HOUR, id(T))], T + HOUR);
    expect(retentionDue(m, retentionCutoffs({ RAW_RETENTION_SECONDS: 0, RETENTION_DAYS: 2 }, now), now)).toBe(false); // ends after the cutoff
    expect(retentionDue(m, retentionCutoffs({ RAW_RETENTION_SECONDS: 0, RETENTION_DAYS: 1 }, now), now)).toBe(true);
  });
});

describe('RollupPlanner.planOne over in-memory ports', () => {
  const prefix = 'events/app/';
  const batchMs = T + 10 * 60_000;

  function setup(bound: () => { bound: ListBound; nowMs: number }) {
    const store = new MemoryObjectStore();
    const added: { name: string; data: unknown; jobId: string | undefined }[] = [];
    const queue = {
      add: async (name: string, data: unknown, opts?: { jobId?: string }) =>
        void added.push({ name, data, jobId: opts?.jobId }),
    } as unknown as Queue;
    const ledger = {
      namespace: 'q',
      listBoundAt: async () => bound(),
      prefixes: async () => [prefix],
    } as unknown as BatchLedger;
    const deps = {
      env: {
        QUEUE_NAME: 'q',
        QUEUE_SHARDS: 1,
        ROLLUP_PERIOD_SECONDS: 3600,
        ROLLUP_DELAY_SECONDS: 300,
        RAW_RETENTION_SECONDS: 0,
        RETENTION_DAYS: undefined,
      },
      store,
      ledgers: [ledger],
      logger: createLogger({ level: 'silent', name: 'test' }),
    } as unknown as RollupDeps;
    const planner = new RollupPlanner(deps, {
      templates: [{ name: 'events', template: parseStoragePath('events/{app}/{batchId}') }],
      queue,
      retain: async () => undefined,
    });
    return { store, added, planner };
  }

  it('queues nothing for a prefix with no batch file, and one roll job (id = kind|prefix|period) once its period is due', async () => {
    let nowMs = T + HOUR + 299_999;
    const { store, added, planner } = setup(() => ({ bound: { kind: 'upTo', id: id(nowMs) }, nowMs }));
    expect(await planner.planOne(prefix)).toBe(0);
    await store.putBytes(`${prefix}${id(batchMs)}.parquet`, Buffer.from('x'));
    expect(await planner.planOne(prefix)).toBe(299.999);
    expect(added).toEqual([]);
    nowMs += 1;
    expect(await planner.planOne(prefix)).toBe(300);
    expect(added).toEqual([
      {
        name: 'roll-period',
        data: { v: 1, collection: 'events', prefix, startMs: T, kind: 'roll' },
        jobId: `roll|${prefix}|${T}`,
      },
    ]);
  });

  it('queues nothing while an id of the period is in flight, and nothing for a prefix of no collection', async () => {
    const nowMs = T + 2 * HOUR;
    const { store, added, planner } = setup(() => ({ bound: { kind: 'below', id: id(T + HOUR - 1) }, nowMs }));
    await store.putBytes(`${prefix}${id(batchMs)}.parquet`, Buffer.from('x'));
    expect(await planner.planOne(prefix)).toBe(3600);
    expect(await planner.planOne('other/app/')).toBe(0);
    expect(added).toEqual([]);
  });
});
