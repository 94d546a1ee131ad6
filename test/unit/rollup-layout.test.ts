import { describe, expect, it } from 'vitest';
import { ConfigError, parseEnv } from '../../shared/config.js';
import { parseStoragePath } from '../../shared/paths.js';
import {
  batchIdOfKey,
  manifestKey,
  msKey,
  periodStart,
  rollupFileFirstId,
  rollupFileKey,
} from '../../shared/rollup/layout.js';
import { discoverPrefixes, prefixOfKey } from '../../shared/rollup/prefixes.js';
import { MemoryObjectStore } from '../../shared/store/memory/index.js';

describe('rollup layout', () => {
  it('periods, id bounds and keys', () => {
    expect(periodStart(1_796_112_345_678, 3_600_000)).toBe(1_796_112_000_000);
    expect(periodStart(1_796_112_000_000, 10_000)).toBe(1_796_112_000_000);
    expect(msKey(5)).toBe('0000000000005');
    // An id of the period's first ms sorts after the bound; one of the ms before sorts before it.
    expect('1796112000000-0000-abcdef' >= msKey(1_796_112_000_000)).toBe(true);
    expect('1796111999999-9999-abcdef' < msKey(1_796_112_000_000)).toBe(true);
    expect(() => msKey(-1)).toThrow(RangeError);
    const key = rollupFileKey(
      'events/app/',
      Date.UTC(2026, 11, 1, 8),
      '1796112000000-0000-abcdef',
      '1796115599999-0001-123456',
    );
    expect(key).toBe(
      'rollups/events/app/date=2026-12-01/hour=08/1796112000000-0000-abcdef_1796115599999-0001-123456.parquet',
    );
    expect(rollupFileFirstId(key)).toBe('1796112000000-0000-abcdef');
    expect(rollupFileFirstId('rollups/events/app/_manifest.json')).toBeNull();
    expect(manifestKey('events/app/')).toBe('rollups/events/app/_manifest.json');
    expect(batchIdOfKey('events/app/', 'events/app/1796112000000-0000-abcdef.parquet')).toBe(
      '1796112000000-0000-abcdef',
    );
    expect(batchIdOfKey('events/app/', 'events/app/.tmp-1234')).toBeNull();
  });

  it('ROLLUP_PERIOD_SECONDS must divide a day; retention knobs are validated', () => {
    expect(parseEnv({ ROLLUP_PERIOD_SECONDS: '10' }).ROLLUP_PERIOD_SECONDS).toBe(10);
    expect(parseEnv({}).ROLLUP_PERIOD_SECONDS).toBe(3600);
    expect(parseEnv({}).RAW_RETENTION_SECONDS).toBe(604_800);
    expect(parseEnv({}).RETENTION_DAYS).toBeUndefined();
    expect(() => parseEnv({ ROLLUP_PERIOD_SECONDS: '7' })).toThrow(ConfigError);
    expect(() => parseEnv({ ROLLUP_PERIOD_SECONDS: '7' })).toThrow(/ROLLUP_PERIOD_SECONDS/);
    expect(() => parseEnv({ ROLLUP: 'maybe' })).toThrow(/ROLLUP/);
    expect(() => parseEnv({ RAW_RETENTION_SECONDS: '-1' })).toThrow(/RAW_RETENTION_SECONDS/);
  });

  it('prefixes are found with one listing call each (skip scan), batch files and rollups alike', async () => {
    const store = new MemoryObjectStore();
    const t = parseStoragePath('events/{app}/{batchId}');
    for (const app of ['a', 'a-b', 'a0', 'zz']) {
      for (let i = 0; i < 50; i++)
        await store.putBytes(
          `events/${app}/17961120000${String(i).padStart(2, '0')}-0000-abcdef.parquet`,
          new Uint8Array(1),
        );
    }
    await store.putBytes('rollups/events/gone/_manifest.json', new Uint8Array(1));
    let calls = 0;
    const listKeys = store.listKeys.bind(store);
    store.listKeys = async (...args) => {
      calls++;
      return listKeys(...args);
    };
    expect(await discoverPrefixes(store, t)).toEqual(['events/a-b/', 'events/a/', 'events/a0/', 'events/zz/']);
    expect(calls).toBe(5);
    expect(await discoverPrefixes(store, t, { match: { app: 'a0' } })).toEqual(['events/a0/']);
    expect(await discoverPrefixes(store, t, { root: 'rollups' })).toEqual(['events/gone/']);
    expect(prefixOfKey(t, 'events/app/x.parquet')).toEqual({ prefix: 'events/app/', params: { app: 'app' } });
    expect(prefixOfKey(t, 'other/app/x.parquet')).toBeNull();
  });
});
