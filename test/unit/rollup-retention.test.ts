import { describe, expect, it } from 'vitest';
import { errorAnswer } from '../../services/api/error-map.js';
import { retentionKey } from '../../shared/rollup/layout.js';
import {
  CursorExpired,
  RAW_DELETED_HEADER,
  checkListCursor,
  raiseRetentionMark,
  readRetentionMark,
} from '../../shared/rollup/retention.js';
import { MemoryObjectStore } from '../../shared/store/memory/index.js';

const P = 'events/app/';
const A = '1782933157690-0000-aaaaaa';
const B = '1782933157700-0003-bbbbbb';
const C = '1782933157800-0000-cccccc';

describe('retention mark', () => {
  it('is absent until retention raises it, and never moves back', async () => {
    const store = new MemoryObjectStore();
    expect(await readRetentionMark(store, P)).toBeNull();
    await raiseRetentionMark(store, P, B, 1);
    await raiseRetentionMark(store, P, A, 2);
    expect(await readRetentionMark(store, P)).toEqual({ v: 1, prefix: P, deletedThrough: B, updatedAt: 1 });
    await raiseRetentionMark(store, P, C, 3);
    expect((await readRetentionMark(store, P))?.deletedThrough).toBe(C);
    expect(retentionKey(P)).toBe('rollups/events/app/_retention.json');
  });

  it('list: no mark → nothing; a cursor below the mark → 410 naming the mark and the rollups; at or above it → the mark for the header', async () => {
    const store = new MemoryObjectStore();
    expect(await checkListCursor(store, P, undefined)).toBeNull();
    expect(await checkListCursor(store, P, A)).toBeNull();
    await raiseRetentionMark(store, P, B);
    expect(await checkListCursor(store, P, undefined)).toBe(B);
    expect(await checkListCursor(store, P, B)).toBe(B);
    expect(await checkListCursor(store, P, C)).toBe(B);
    const err = await checkListCursor(store, P, A).then(
      () => null,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(CursorExpired);
    expect((err as CursorExpired).deletedThrough).toBe(B);
    // The HTTP layer's map turns the typed error into today's answer.
    const a = errorAnswer(err);
    expect(a.status).toBe(410);
    expect(a.body.code).toBe('cursor_expired');
    expect(a.body.error).toContain(`cursor ${A} is older than the raw retention`);
    expect(a.body.error).toContain(`list from after=${B}`);
    expect(a.body.error).toContain('query --store');
    expect(a.headers).toEqual({ [RAW_DELETED_HEADER]: B });
  });

  it('a mark that is not a retention mark is an error, never "nothing deleted"', async () => {
    const store = new MemoryObjectStore();
    await store.putBytes(retentionKey(P), Buffer.from('{"v":1,"deletedThrough":"x"}'));
    await expect(readRetentionMark(store, P)).rejects.toThrow(/retention mark .* is invalid/);
  });
});
