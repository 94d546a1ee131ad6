/**
 * The Iceberg committer's pure rules: which period a data file belongs to, when the rollup side
 * is done with a file (so snapshot expiry may delete it), and the config rule that periods line
 * up with the table's hour partitions.
 */
import { describe, expect, it } from 'vitest';
import { ConfigError, parseEnv } from '../../shared/config.js';
import { tableAppName } from '../../shared/iceberg/table.js';
import type { Manifest } from '../../shared/rollup/manifest.js';
import {
  METADATA_VERSIONS_KEPT,
  droppedMetadataKeys,
  periodOfKey,
  releasedByRollup,
} from '../../services/rollup/iceberg-committer.js';

const P = 'events/a/';
const T = Date.UTC(2026, 11, 1, 8);
const id = (ms: number, n = 0): string => `${ms}-${String(n).padStart(4, '0')}-abcdef`;
const rollupKey = (startMs: number, first: string, last: string): string =>
  `rollups/events/a/date=2026-12-01/hour=08/${startMs}/${first}_${last}.parquet`;

const manifest: Manifest = {
  v: 1,
  prefix: P,
  periodSeconds: 600,
  watermarkMs: T + 1_800_000,
  periods: [
    // Raw retention passed this period's batch files up to id(T + 5000).
    {
      startMs: T,
      endMs: T + 600_000,
      files: [
        {
          key: rollupKey(T, id(T + 1000), id(T + 5000)),
          rows: 9,
          bytes: 100,
          batches: 2,
          firstId: id(T + 1000),
          lastId: id(T + 5000),
        },
      ],
      rolledAt: T + 700_000,
      rawDeletedThrough: id(T + 5000),
    },
    // Not yet.
    {
      startMs: T + 600_000,
      endMs: T + 1_200_000,
      files: [
        {
          key: rollupKey(T + 600_000, id(T + 600_000), id(T + 600_000)),
          rows: 3,
          bytes: 50,
          batches: 1,
          firstId: id(T + 600_000),
          lastId: id(T + 600_000),
        },
      ],
      rolledAt: T + 1_300_000,
      rawDeletedThrough: '',
    },
  ],
  updatedAt: T + 1_800_000,
};

describe('Iceberg committer rules', () => {
  it('puts batch files by their id and rollup files by their first id into periods; anything else into none', () => {
    expect(periodOfKey(P, `${P}${id(T + 599_999)}.parquet`, 600_000)).toBe(T);
    expect(periodOfKey(P, `${P}${id(T + 600_000)}.parquet`, 600_000)).toBe(T + 600_000);
    expect(periodOfKey(P, rollupKey(T + 600_000, id(T + 600_001), id(T + 1_000_000)), 600_000)).toBe(T + 600_000);
    expect(periodOfKey(P, `${P}notes.txt`, 600_000)).toBeNull();
    expect(periodOfKey(P, `events/b/${id(T)}.parquet`, 600_000)).toBeNull();
  });

  it('lets expiry delete a file only once the rollup side is done with it', () => {
    // Batch files: up to raw retention's mark in their period; of a rolled period no longer listed (dropped by RETENTION_DAYS); never of an unrolled one.
    expect(releasedByRollup(P, manifest, `${P}${id(T + 5000)}.parquet`, 600_000)).toBe(true);
    expect(releasedByRollup(P, manifest, `${P}${id(T + 5000, 1)}.parquet`, 600_000)).toBe(false);
    expect(releasedByRollup(P, manifest, `${P}${id(T + 600_000)}.parquet`, 600_000)).toBe(false);
    expect(releasedByRollup(P, manifest, `${P}${id(T + 1_200_000)}.parquet`, 600_000)).toBe(true);
    expect(releasedByRollup(P, manifest, `${P}${id(T + 1_800_000)}.parquet`, 600_000)).toBe(false);
    expect(releasedByRollup(P, manifest, `${P}${id(T - 600_000)}.parquet`, 600_000)).toBe(true);
    // Rollup files: once the manifest no longer lists them (a re-roll replaced them, or retention dropped the period).
    expect(releasedByRollup(P, manifest, rollupKey(T, id(T + 1000), id(T + 5000)), 600_000)).toBe(false);
    expect(releasedByRollup(P, manifest, rollupKey(T, id(T + 1000), id(T + 4000)), 600_000)).toBe(true);
    // No manifest (nothing rolled): nothing is released.
    expect(releasedByRollup(P, null, `${P}${id(T)}.parquet`, 600_000)).toBe(false);
  });

  it('drops only metadata versions the metadata log of the current version no longer names', () => {
    const m = 'iceberg/events/a/metadata/';
    const keys = [
      ...Array.from({ length: 150 }, (_, i) => `${m}v${i + 1}.metadata.json`),
      `${m}version-hint.text`,
      `${m}snap-1-x.avro`,
    ];
    expect(METADATA_VERSIONS_KEPT).toBe(100);
    // Version 150's log names 50..149: 1..49 go; the hint and Avro files are never touched.
    expect(droppedMetadataKeys(keys, 150)).toEqual(Array.from({ length: 49 }, (_, i) => `${m}v${i + 1}.metadata.json`));
    expect(droppedMetadataKeys(keys, 101)).toEqual([]);
  });

  it('names a table after its list prefix params', () => {
    expect(tableAppName({ app: 'shop' })).toBe('shop');
    expect(tableAppName({ tenant: 't1', app: 'shop' })).toBe('t1.shop');
    expect(tableAppName({})).toBe('_');
  });

  it('needs ROLLUP_PERIOD_SECONDS to divide an hour while ICEBERG=on; ICEBERG defaults on with 60 s commits', () => {
    const env = parseEnv({});
    expect(env.ICEBERG).toBe('on');
    expect(env.ICEBERG_COMMIT_SECONDS).toBe(60);
    expect(env.ICEBERG_SNAPSHOT_RETENTION_SECONDS).toBe(3600);
    // The acceptance harness's mid-commit delay (test-only) is off unless set.
    expect(env.ICEBERG_TEST_COMMIT_DELAY_MS).toBe(0);
    // On by default: a two-hour rollup period (which an hour-partitioned table cannot take) is refused
    // by default and starts with ICEBERG=off.
    expect(() => parseEnv({ ROLLUP_PERIOD_SECONDS: '7200' })).toThrow(
      /ROLLUP_PERIOD_SECONDS.*divide 3600.*ICEBERG=off/,
    );
    expect(parseEnv({ ROLLUP_PERIOD_SECONDS: '7200', ICEBERG: 'off' }).ROLLUP_PERIOD_SECONDS).toBe(7200);
    expect(() => parseEnv({ ROLLUP_PERIOD_SECONDS: '7200', ICEBERG: 'on' })).toThrow(ConfigError);
    expect(() => parseEnv({ ROLLUP_PERIOD_SECONDS: '7200', ICEBERG: 'on' })).toThrow(
      /ROLLUP_PERIOD_SECONDS.*divide 3600.*ICEBERG=off/,
    );
    expect(parseEnv({ ROLLUP_PERIOD_SECONDS: '7200', ICEBERG: 'on', ROLLUP: 'off' }).ROLLUP_PERIOD_SECONDS).toBe(7200);
    expect(parseEnv({ ROLLUP_PERIOD_SECONDS: '900', ICEBERG: 'on' }).ROLLUP_PERIOD_SECONDS).toBe(900);
    expect(() => parseEnv({ ICEBERG_COMMIT_SECONDS: '0' })).toThrow(/ICEBERG_COMMIT_SECONDS/);
  });
});
