/**
 * The rewritten-batches log (shared/erasure/rewritten.ts): cursor order, paging, the settle
 * interval, and the race it exists for (a record minted first but visible last). The memory
 * store, with puts a test can hold back; clocks are injected, so nothing waits on real time
 * except the slow-put case (tens of ms).
 */
import { describe, expect, it } from 'vitest';
import {
  MAX_IDS_PER_RECORD,
  type RewrittenItem,
  isRewrittenCursor,
  listRewritten,
  mintRewrittenCursor,
  recordRewritten,
  rewrittenCursorMs,
  rewrittenKey,
  rewrittenPrefix,
} from '../../shared/erasure/rewritten.js';
import { StoreError } from '../../shared/errors.js';
import { MemoryObjectStore } from '../../shared/store/memory/index.js';
import { compareKeys } from '../../shared/store/keys.js';
import type { PutOptions } from '../../shared/store/types.js';

const T0 = 1_782_933_157_000;
const bid = (n: number): string => `${T0 + n}-0000-abcdef`;
const SETTLE = 1000;
/**
 * A fresh time base per test: the minter keeps its last instant per process (a clock stepping
 * back reuses it), so each test mints later than every earlier one.
 */
let lastBase = T0;
const fresh = (): number => (lastBase += 100_000_000);

/** A memory store whose puts to keys matching `hold` wait until released. */
class HeldStore extends MemoryObjectStore {
  readonly held: { key: string; release: () => void }[] = [];
  hold = false;
  override async putBytes(key: string, body: Uint8Array, opts?: PutOptions): Promise<void> {
    if (this.hold) await new Promise<void>((release) => this.held.push({ key, release }));
    return super.putBytes(key, body, opts);
  }
}

/** Reads every settled record after `after`, page by page (at most 100 pages). */
async function drain(
  store: MemoryObjectStore,
  after: string | undefined,
  now: number,
  limit = 1000,
): Promise<{ items: RewrittenItem[]; next: string | null }> {
  const items: RewrittenItem[] = [];
  let cursor = after;
  for (let i = 0; i < 100; i++) {
    const page = await listRewritten(store, 'events', 'app', cursor, limit, { now: () => now, settleMs: SETTLE });
    items.push(...page.items);
    cursor = page.next ?? undefined;
    if (!page.hasMore) return { items, next: page.next };
  }
  throw new Error('more than 100 pages');
}

describe('rewritten cursors', () => {
  it('are fixed width, strictly increasing within a process even when the clock steps back, and sort like keys', () => {
    const T = fresh();
    const minted = [
      mintRewrittenCursor(T + 5),
      mintRewrittenCursor(T + 5),
      mintRewrittenCursor(T + 1),
      mintRewrittenCursor(T + 6),
      mintRewrittenCursor(T),
    ];
    for (const c of minted) expect(isRewrittenCursor(c)).toBe(true);
    for (let i = 1; i < minted.length; i++) expect((minted[i] as string) > (minted[i - 1] as string)).toBe(true);
    // Byte order of the keys (the store's listing order) is the cursors' order.
    const keys = minted.map((c) => rewrittenKey('events', 'app', c));
    expect([...keys].reverse().sort(compareKeys)).toEqual(keys);
    expect(rewrittenCursorMs(minted[0] as string)).toBe(T + 5);
    // Stepped back: the instant is the last one, not the clock's.
    expect(rewrittenCursorMs(minted[2] as string)).toBe(T + 5);
  });

  it('10,001 in one millisecond carry into the next millisecond and stay ordered and unique', () => {
    const T = fresh();
    const at = T + 10_000;
    const minted = Array.from({ length: 10_001 }, () => mintRewrittenCursor(at));
    expect(new Set(minted).size).toBe(minted.length);
    for (let i = 1; i < minted.length; i++) expect((minted[i] as string) > (minted[i - 1] as string)).toBe(true);
    expect(rewrittenCursorMs(minted[minted.length - 1] as string)).toBe(at + 1);
  });

  it('refuses what is not a cursor', () => {
    for (const bad of [
      '',
      '1782933157000',
      '1782933157000-0000-abcdef',
      '1782933157000-0000-0A1B2C3D',
      '../x',
      '1782933157000-0000-0a1b2c3d.json',
    ])
      expect(isRewrittenCursor(bad)).toBe(false);
  });
});

describe('recordRewritten and listRewritten', () => {
  it('list records in rewrite order, after a cursor, page by page, with next and hasMore', async () => {
    const T = fresh();
    const store = new MemoryObjectStore();
    for (let i = 0; i < 7; i++) await recordRewritten(store, 'events', 'app', [bid(i)], { now: () => T + i });
    await recordRewritten(store, 'events', 'other', [bid(99)], { now: () => T });
    const now = T + 10 * SETTLE;
    const first = await listRewritten(store, 'events', 'app', undefined, 3, { now: () => now, settleMs: SETTLE });
    expect(first.items.map((i) => i.batchIds)).toEqual([[bid(0)], [bid(1)], [bid(2)]]);
    expect(first.hasMore).toBe(true);
    expect(first.next).toBe(first.items[2]?.cursor);
    const rest = await drain(store, first.next ?? undefined, now, 3);
    expect(rest.items.map((i) => i.batchIds[0])).toEqual([bid(3), bid(4), bid(5), bid(6)]);
    // Past the end: nothing, and next stays where it was asked from.
    const end = await listRewritten(store, 'events', 'app', rest.next ?? undefined, 3, {
      now: () => now,
      settleMs: SETTLE,
    });
    expect(end).toEqual({ items: [], next: rest.next, hasMore: false });
    expect(await listRewritten(store, 'events', 'none', undefined, 3, { now: () => now })).toEqual({
      items: [],
      next: null,
      hasMore: false,
    });
  });

  it('a long list of ids is split into records of at most MAX_IDS_PER_RECORD; none is lost', async () => {
    const T = fresh();
    const store = new MemoryObjectStore();
    const ids = Array.from({ length: 2 * MAX_IDS_PER_RECORD + 5 }, (_, i) => bid(i));
    await recordRewritten(store, 'events', 'app', ids, { now: () => T });
    const { items } = await drain(store, undefined, T + SETTLE);
    expect(items.map((i) => i.batchIds.length)).toEqual([MAX_IDS_PER_RECORD, MAX_IDS_PER_RECORD, 5]);
    expect(items.flatMap((i) => i.batchIds)).toEqual(ids);
    await recordRewritten(store, 'events', 'app', [], { now: () => T });
    expect(await store.listKeys(rewrittenPrefix('events', 'app'))).toHaveLength(3);
  });

  it('a record younger than the settle interval is not listed yet; next does not move past it', async () => {
    const T = fresh();
    const store = new MemoryObjectStore();
    await recordRewritten(store, 'events', 'app', [bid(1)], { now: () => T });
    await recordRewritten(store, 'events', 'app', [bid(2)], { now: () => T + 500 });
    const early = await listRewritten(store, 'events', 'app', undefined, 10, {
      now: () => T + SETTLE + 100,
      settleMs: SETTLE,
    });
    expect(early.items.map((i) => i.batchIds[0])).toEqual([bid(1)]);
    expect(early.hasMore).toBe(false);
    const later = await listRewritten(store, 'events', 'app', early.next ?? undefined, 10, {
      now: () => T + SETTLE + 500,
      settleMs: SETTLE,
    });
    expect(later.items.map((i) => i.batchIds[0])).toEqual([bid(2)]);
  });

  it('a record minted first but visible last is not skipped by a reader polling meanwhile (and would be without the settle interval)', async () => {
    const T = fresh();
    for (const settleMs of [SETTLE, 0]) {
      const store = new HeldStore();
      let clock = T;
      // Writer A mints at T and its put hangs; writer B mints 10 ms later and lands at once.
      store.hold = true;
      const a = recordRewritten(store, 'events', 'app', [bid(1)], { now: () => clock, writeBudgetMs: 60_000 });
      await Promise.resolve();
      store.hold = false;
      clock += 10;
      await recordRewritten(store, 'events', 'app', [bid(2)], { now: () => clock });
      // A reader polls while A is still in flight (within A's write budget), and keeps its cursor.
      const seen: string[] = [];
      const poll = async (at: number, after: string | undefined): Promise<string | undefined> => {
        const page = await listRewritten(store, 'events', 'app', after, 10, { now: () => at, settleMs });
        seen.push(...page.items.flatMap((i) => i.batchIds));
        return page.next ?? undefined;
      };
      let after = await poll(T + 20, undefined);
      for (const h of store.held.splice(0)) h.release();
      await a;
      after = await poll(T + 5 * SETTLE, after);
      if (settleMs > 0) expect(seen).toEqual([bid(1), bid(2)]);
      // The control: without settling, B was read first and A (a lower cursor) is skipped for good.
      else expect(seen).toEqual([bid(2)]);
    }
  });

  it('a put slower than the write budget is written again under a later cursor', async () => {
    const T = fresh();
    const store = new HeldStore();
    store.hold = true;
    const done = recordRewritten(store, 'events', 'app', [bid(1)], { now: () => T, writeBudgetMs: 20 });
    await new Promise((r) => setTimeout(r, 60));
    store.hold = false;
    for (const h of store.held.splice(0)) h.release();
    await done;
    const keys = await store.listKeys(rewrittenPrefix('events', 'app'));
    expect(keys).toHaveLength(2);
    const { items } = await drain(store, undefined, T + SETTLE);
    expect(items.map((i) => i.batchIds)).toEqual([[bid(1)], [bid(1)]]);
    expect((items[1]?.cursor ?? '') > (items[0]?.cursor ?? '')).toBe(true);
  });

  it('refuses bad arguments, skips foreign files, and fails on a corrupt record (never skips it)', async () => {
    const T = fresh();
    const store = new MemoryObjectStore();
    await expect(recordRewritten(store, 'events', 'app', ['../etc'])).rejects.toBeInstanceOf(RangeError);
    await expect(listRewritten(store, 'events', 'app', 'nope', 10)).rejects.toBeInstanceOf(RangeError);
    await expect(listRewritten(store, 'events', 'app', undefined, 0)).rejects.toBeInstanceOf(RangeError);
    await expect(listRewritten(store, 'events', 'app', undefined, 1001)).rejects.toBeInstanceOf(RangeError);
    await store.putBytes(`${rewrittenPrefix('events', 'app')}README.txt`, new TextEncoder().encode('hi'));
    await recordRewritten(store, 'events', 'app', [bid(1)], { now: () => T });
    expect((await drain(store, undefined, T + SETTLE)).items.map((i) => i.batchIds)).toEqual([[bid(1)]]);
    const cursor = mintRewrittenCursor(T + 1);
    await store.putBytes(
      rewrittenKey('events', 'app', cursor),
      new TextEncoder().encode('{"version":1,"batchIds":["../x"]}'),
    );
    const err = await listRewritten(store, 'events', 'app', undefined, 10, {
      now: () => T + SETTLE * 2,
      settleMs: SETTLE,
    }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(StoreError);
    expect((err as StoreError).retriable).toBe(false);
    expect((err as Error).message).toContain(cursor);
  });
});
