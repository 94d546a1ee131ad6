import { parseBatchFileName } from '../../../shared/ids.js';
import { type ListBound, visibleUnder } from '../../../shared/ledger/ledger.js';
import { type StoragePathTemplate, listPrefix } from '../../../shared/paths.js';
import type { ObjectStore } from '../../../shared/store/types.js';
import { withTimeout } from '../../../shared/timeout.js';
import { type Unavailable, unavailable } from '../push/outcome.js';

export interface ListResult {
  items: string[];
  hasMore: boolean;
}

/** Where the list's watermark comes from: the ordering ledger of the prefix (Redis, or in-process). */
export interface ListIndex {
  /**
   * Written ids after `after` from the ledger's index (at most `count`), with the bound; `ids` null
   * when the index does not reach back to `after`. Absent: the list always reads the store.
   */
  listWritten?(prefix: string, after: string, count: number): Promise<{ bound: ListBound; ids: string[] | null }>;
  /** What the list may show now: ids below the oldest still in flight. */
  listBound(prefix: string): Promise<ListBound>;
}

/** Store pages one listing reads at most: a folder full of foreign files cannot make it spin. */
const MAX_PAGES = 50;
const INDEX_TIMEOUT_MS = 2000;

/**
 * The list route's answer: batch files of a prefix in id order, after a cursor, never past the
 * watermark (the oldest id still in flight), so a poller that keeps its last id never misses one.
 */
export class BatchLister {
  // Last bound read per prefix: safe to reuse while Redis is down, since a bound only
  // ever names ids that were final when it was read.
  private readonly lastBounds = new Map<string, ListBound>();

  constructor(private readonly opts: { store: ObjectStore; template: StoragePathTemplate; index: ListIndex }) {}

  /** The page, or unavailable when the watermark cannot be read and none was read before. */
  async list(
    params: Readonly<Record<string, string>>,
    after: string | undefined,
    limit: number,
  ): Promise<ListResult | Unavailable> {
    const { store, index } = this.opts;
    const prefix = listPrefix(this.opts.template, params);
    let bound: ListBound;
    try {
      if (index.listWritten && after !== undefined) {
        // A poller that keeps up asks for ids after a recent cursor: Redis' index of written ids
        // answers that in O(log n), however many files the prefix holds.
        const fromIndex = await withTimeout(
          index.listWritten(prefix, after, limit + 1),
          INDEX_TIMEOUT_MS,
          'list index',
        );
        this.lastBounds.set(prefix, fromIndex.bound);
        if (fromIndex.ids) {
          const visible = fromIndex.ids.filter((id) => visibleUnder(fromIndex.bound, id));
          return { items: visible.slice(0, limit).map((id) => `${id}.parquet`), hasMore: visible.length > limit };
        }
        bound = fromIndex.bound;
      } else {
        bound = await withTimeout(index.listBound(prefix), INDEX_TIMEOUT_MS, 'list bound');
        this.lastBounds.set(prefix, bound);
      }
    } catch {
      const cached = this.lastBounds.get(prefix);
      if (!cached) return unavailable('ordering ledger unavailable (Redis)', false);
      bound = cached;
    }
    const items: string[] = [];
    let startAfter = after === undefined ? undefined : `${prefix}${after}.parquet`;
    // Foreign files (not <id>.parquet) are skipped; pages are bounded so a folder full of them cannot spin.
    for (let page = 0; page < MAX_PAGES; page++) {
      const want = limit + 1 - items.length;
      const keys = await store.listKeys(prefix, { startAfter, limit: want });
      for (const key of keys) {
        const name = key.slice(prefix.length);
        const id = parseBatchFileName(name);
        if (id === null) continue;
        if (!visibleUnder(bound, id)) return { items: items.slice(0, limit), hasMore: items.length > limit };
        items.push(name);
      }
      if (items.length > limit || keys.length < want) break;
      startAfter = keys[keys.length - 1];
    }
    return { items: items.slice(0, limit), hasMore: items.length > limit };
  }
}
