/**
 * The view copy's bookkeeping (shared/rollup/view-copy.ts) on a memory store: what it fetches
 * again, what it removes, and that one folder never mixes two stores. The copy never parses the
 * objects, so they are plain bytes here; DuckDB over a real copy is in
 * test/integration/query-s3-copy.test.ts.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { manifestKey, rollupFileKey } from '../../shared/rollup/layout.js';
import { type Manifest, writeManifest } from '../../shared/rollup/manifest.js';
import { refreshViewCopy } from '../../shared/rollup/view-copy.js';
import { MemoryObjectStore } from '../../shared/store/memory/index.js';

const STORAGE_PATH = 'events/{app}/{batchId}';
const P = 10_000;
const T0 = 1_796_112_000_000;
const id = (ms: number, n = 0): string => `${ms}-${String(n).padStart(4, '0')}-abcdef`;

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});
function scratch(): string {
  const d = mkdtempSync(join(tmpdir(), 'view-copy-unit-'));
  dirs.push(d);
  return d;
}

/** One rolled period [T0, T0+P) for `app`, with one file of `body`, rolled at `rolledAt`. */
async function roll(store: MemoryObjectStore, app: string, body: string, rolledAt: number): Promise<string> {
  const prefix = `events/${app}/`;
  const key = rollupFileKey(prefix, T0, id(T0), id(T0 + 1));
  await store.putBytes(key, Buffer.from(body));
  const m: Manifest = {
    v: 1,
    prefix,
    periodSeconds: P / 1000,
    watermarkMs: T0 + P,
    periods: [
      {
        startMs: T0,
        endMs: T0 + P,
        files: [{ key, rows: 2, bytes: body.length, batches: 2, firstId: id(T0), lastId: id(T0 + 1) }],
        rolledAt,
        rawDeletedThrough: '',
      },
    ],
    updatedAt: rolledAt,
  };
  await writeManifest(store, m);
  return key;
}

describe('view copy', () => {
  it('fetches the view in order, reuses it, refetches a re-rolled period, drops what the view no longer reads', async () => {
    const store = new MemoryObjectStore();
    const dir = scratch();
    // Two batches below the watermark (rolled), two after it.
    for (const ms of [T0, T0 + 1, T0 + P, T0 + P + 5])
      await store.putBytes(`events/alpha/${id(ms)}.parquet`, Buffer.from(`batch ${ms}`));
    const rollupKey = await roll(store, 'alpha', 'rolled-v1', 1);
    const copy = () => refreshViewCopy({ store, collection: STORAGE_PATH, params: { app: '*' }, dir });

    const first = await copy();
    expect(first).toMatchObject({ needed: 3, fetched: 3, cached: 0, removed: 0, prefixes: 1 });
    const local = (key: string): string => join(first.root, ...key.split('/'));
    expect(readFileSync(local(rollupKey), 'utf8')).toBe('rolled-v1');
    expect(existsSync(local(manifestKey('events/alpha/')))).toBe(true);
    // Below the watermark: read from the rollup, so not copied.
    expect(existsSync(local(`events/alpha/${id(T0)}.parquet`))).toBe(false);
    expect(readFileSync(local(`events/alpha/${id(T0 + P + 5)}.parquet`), 'utf8')).toBe(`batch ${T0 + P + 5}`);

    expect(await copy()).toMatchObject({ needed: 3, fetched: 0, cached: 3, removed: 0 });

    // A file the user (or a crash) truncated is fetched again; a fetch a killed run left behind is removed.
    writeFileSync(local(`events/alpha/${id(T0 + P)}.parquet`), '');
    writeFileSync(`${local(`events/alpha/${id(T0 + P)}.parquet`)}.part-0badf00d`, 'half');
    expect(await copy()).toMatchObject({ fetched: 1, cached: 2, removed: 1 });

    // The period re-rolled under the same key (a replayed batch): fetched again, same size or not.
    await roll(store, 'alpha', 'rolled-v2', 2);
    expect(await copy()).toMatchObject({ fetched: 1, cached: 2 });
    expect(readFileSync(local(rollupKey), 'utf8')).toBe('rolled-v2');

    // A new app: copied; the view's apps are found in the store, not in the copy.
    await store.putBytes(`events/beta/${id(T0 + 3 * P)}.parquet`, Buffer.from('beta'));
    expect(await copy()).toMatchObject({ needed: 4, fetched: 1, prefixes: 2 });
    // --app alpha leaves beta's copy alone.
    expect(await refreshViewCopy({ store, collection: STORAGE_PATH, params: { app: 'alpha' }, dir })).toMatchObject({
      needed: 3,
      fetched: 0,
      removed: 0,
    });
    expect(existsSync(local(`events/beta/${id(T0 + 3 * P)}.parquet`))).toBe(true);
    // beta gone from the store: gone from the copy, so the view over the copy never reads it.
    await store.deleteKeys([`events/beta/${id(T0 + 3 * P)}.parquet`]);
    expect(await copy()).toMatchObject({ needed: 3, fetched: 0, removed: 1, prefixes: 1 });
    expect(existsSync(local(`events/beta/${id(T0 + 3 * P)}.parquet`))).toBe(false);
  });

  it('refuses a folder copied from another store', async () => {
    const dir = scratch();
    const a = new MemoryObjectStore();
    await a.putBytes(`events/alpha/${id(T0)}.parquet`, Buffer.from('x'));
    await refreshViewCopy({ store: a, collection: STORAGE_PATH, params: { app: '*' }, dir });
    class OtherStore extends MemoryObjectStore {
      override describe(): string {
        return 's3://other-bucket';
      }
    }
    await expect(
      refreshViewCopy({ store: new OtherStore(), collection: STORAGE_PATH, params: { app: '*' }, dir }),
    ).rejects.toThrow(/holds a copy of .*not of s3:\/\/other-bucket/);
  });
});
