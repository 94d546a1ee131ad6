/**
 * The rewritten-batches log of an app: which batch files an erasure rewrote, in rewrite order,
 * so `events-ingest sync` can re-download them (issue 36, "Synced copies").
 *
 * One object per record, `erasures/<collection>/<app>/rewritten/<cursor>.json`, written after
 * the batch file itself was rewritten. A cursor is `<13-digit epoch ms>-<4-digit seq>-<8 hex>`:
 * fixed width, so the order of the keys (byte order, the store's listing order) is cursor order.
 *
 * Why a reader never skips a record (the only hazard: a record minted earlier becoming visible
 * after a later one was read, its writer's put being slow): a listing returns only records
 * minted at least {@link REWRITTEN_SETTLE_MS} ago by the reader's clock, and a writer whose put
 * took longer than {@link REWRITTEN_WRITE_BUDGET_MS} (from minting to the put's answer) writes
 * the record again under a fresh cursor. A record the reader may already have moved past is
 * therefore always followed by a copy that it has not. This holds while the clocks of the
 * writers and of the API differ by less than the settle interval minus the write budget (20 s).
 * Duplicate records are harmless: re-downloading a batch is idempotent.
 *
 * No Redis: the log lives with the files it describes, and the list route needs nothing else
 * (docs/decisions/0021-rewritten-log-cursor.md).
 */
import { StoreError } from '../errors.js';
import { isBatchId, randomHex } from '../ids.js';
import type { ObjectStore } from '../store/types.js';

/** A listing shows only records minted at least this long ago (see the module comment). */
export const REWRITTEN_SETTLE_MS = 30_000;
/** A record whose put took longer than this (minting to answer) is written again under a new cursor. */
export const REWRITTEN_WRITE_BUDGET_MS = 10_000;
/** Puts of one record at most (the first and its re-writes) before giving up with a retriable error. */
const MAX_RECORD_ATTEMPTS = 5;
/** Batch ids per record at most; a longer list is split into several records, so a listing page stays bounded. */
export const MAX_IDS_PER_RECORD = 100;
/** Records per listing page at most. */
export const MAX_REWRITTEN_LIMIT = 1000;
/** Record reads in flight at once while listing. */
const READ_CONCURRENCY = 8;

/** A cursor of the rewritten log (what `?after=` takes). */
export const CURSOR_RE = /^\d{13}-\d{4}-[0-9a-f]{8}$/;
const RECORD_SUFFIX = '.json';

/** True when `s` is a cursor of the rewritten log (what `?after=` accepts). */
export function isRewrittenCursor(s: string): boolean {
  return CURSOR_RE.test(s);
}

/** The instant (epoch ms) a cursor was minted at. */
export function rewrittenCursorMs(cursor: string): number {
  return Number(cursor.slice(0, 13));
}

/** The folder of an app's rewritten log: `erasures/<collection>/<app>/rewritten/`. */
export function rewrittenPrefix(collection: string, app: string): string {
  return `erasures/${collection}/${app}/rewritten/`;
}

/** The key of one record. */
export function rewrittenKey(collection: string, app: string, cursor: string): string {
  return `${rewrittenPrefix(collection, app)}${cursor}${RECORD_SUFFIX}`;
}

// Per-process state of the minter: cursors of one process strictly increase even if the clock steps back.
let lastMs = 0;
let lastSeq = 0;

/**
 * A fresh cursor for instant `nowMs`: never lower than the previous one of this process (a clock
 * stepping back reuses the last instant); 10,000 per millisecond, then the next millisecond.
 * The random part keeps two processes minting in the same millisecond apart.
 */
export function mintRewrittenCursor(nowMs: number): string {
  let ms = Math.max(Math.floor(nowMs), lastMs);
  let seq = 0;
  if (ms === lastMs) {
    seq = lastSeq + 1;
    if (seq > 9999) {
      ms += 1;
      seq = 0;
    }
  }
  lastMs = ms;
  lastSeq = seq;
  return `${String(ms).padStart(13, '0')}-${String(seq).padStart(4, '0')}-${randomHex(4)}`;
}

/** What one record holds. */
interface RecordBody {
  version: 1;
  batchIds: string[];
}

export interface RecordOptions {
  /** Wall clock for the cursor (default Date.now); tests move it. */
  now?: () => number;
  /** Default {@link REWRITTEN_WRITE_BUDGET_MS}. */
  writeBudgetMs?: number;
}

/**
 * Records that `batchIds` of `collection`/`app` were rewritten: one object per
 * {@link MAX_IDS_PER_RECORD} ids, each under a fresh cursor. Call it after the batch files are
 * rewritten (a reader that sees the record must find the new file). Resolves once every record
 * is durable and was written within the write budget; throws a retriable StoreError if the
 * store stays too slow, and then the caller records again (a duplicate is harmless).
 */
export async function recordRewritten(
  store: ObjectStore,
  collection: string,
  app: string,
  batchIds: string[],
  opts: RecordOptions = {},
): Promise<void> {
  const bad = batchIds.find((id) => !isBatchId(id));
  if (bad !== undefined) throw new RangeError(`recordRewritten: ${JSON.stringify(bad)} is not a batch id`);
  const now = opts.now ?? Date.now;
  const budget = opts.writeBudgetMs ?? REWRITTEN_WRITE_BUDGET_MS;
  for (let i = 0; i < batchIds.length; i += MAX_IDS_PER_RECORD) {
    const body: RecordBody = { version: 1, batchIds: batchIds.slice(i, i + MAX_IDS_PER_RECORD) };
    const bytes = new TextEncoder().encode(`${JSON.stringify(body)}\n`);
    await putWithinBudget(store, collection, app, bytes, now, budget);
  }
}

async function putWithinBudget(
  store: ObjectStore,
  collection: string,
  app: string,
  bytes: Uint8Array,
  now: () => number,
  budget: number,
): Promise<void> {
  for (let attempt = 1; attempt <= MAX_RECORD_ATTEMPTS; attempt++) {
    const started = performance.now();
    const cursor = mintRewrittenCursor(now());
    await store.putBytes(rewrittenKey(collection, app, cursor), bytes, { contentType: 'application/json' });
    // Measured from the mint: a put slower than the budget may land after a reader moved past its cursor.
    if (performance.now() - started <= budget) return;
  }
  throw new StoreError(
    `rewritten log of ${collection}/${app}: ${MAX_RECORD_ATTEMPTS} puts each took longer than ${budget} ms`,
    { retriable: true },
  );
}

export interface RewrittenItem {
  cursor: string;
  batchIds: string[];
}

export interface RewrittenPage {
  items: RewrittenItem[];
  /** Where the next listing starts (`?after=`): the last item's cursor, else the `after` given (null: none). */
  next: string | null;
  /** More settled records may follow this page. */
  hasMore: boolean;
}

export interface ListRewrittenOptions {
  /** Reader's clock (default Date.now). */
  now?: () => number;
  /** Default {@link REWRITTEN_SETTLE_MS}. */
  settleMs?: number;
}

/**
 * Records of `collection`/`app` after cursor `after` (all when undefined), oldest first, at most
 * `limit` (1 to {@link MAX_REWRITTEN_LIMIT}), only those older than the settle interval. A
 * record that is not JSON of batch ids is a non-retriable StoreError naming its key: the log
 * is the product's own, and silently skipping a record would leave erased rows in a folder.
 */
export async function listRewritten(
  store: ObjectStore,
  collection: string,
  app: string,
  after: string | undefined,
  limit: number,
  opts: ListRewrittenOptions = {},
): Promise<RewrittenPage> {
  if (after !== undefined && !isRewrittenCursor(after))
    throw new RangeError(`listRewritten: ${JSON.stringify(after)} is not a cursor`);
  if (!Number.isInteger(limit) || limit < 1 || limit > MAX_REWRITTEN_LIMIT)
    throw new RangeError(`listRewritten: limit must be an integer from 1 to ${MAX_REWRITTEN_LIMIT}`);
  const settledThrough = (opts.now ?? Date.now)() - (opts.settleMs ?? REWRITTEN_SETTLE_MS);
  const prefix = rewrittenPrefix(collection, app);
  // One more than asked: tells whether another page follows.
  const keys = await store.listKeys(prefix, {
    startAfter: after === undefined ? undefined : `${prefix}${after}${RECORD_SUFFIX}`,
    limit: limit + 1,
  });
  const cursors: string[] = [];
  let cut = false;
  for (const key of keys) {
    const name = key.slice(prefix.length);
    const cursor = name.endsWith(RECORD_SUFFIX) ? name.slice(0, -RECORD_SUFFIX.length) : '';
    // Not a record (a foreign file): its name sorts among records but names no cursor.
    if (!isRewrittenCursor(cursor)) continue;
    if (rewrittenCursorMs(cursor) > settledThrough) {
      cut = true;
      break;
    }
    cursors.push(cursor);
  }
  const page = cursors.slice(0, limit);
  const items = await readRecords(store, collection, app, page);
  return {
    items,
    next: page.length > 0 ? (page[page.length - 1] as string) : (after ?? null),
    hasMore: !cut && keys.length > limit,
  };
}

async function readRecords(
  store: ObjectStore,
  collection: string,
  app: string,
  cursors: string[],
): Promise<RewrittenItem[]> {
  const out: RewrittenItem[] = new Array<RewrittenItem>(cursors.length);
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < cursors.length) {
      const i = next++;
      const cursor = cursors[i] as string;
      out[i] = { cursor, batchIds: await readRecord(store, rewrittenKey(collection, app, cursor)) };
    }
  };
  await Promise.all(Array.from({ length: Math.min(READ_CONCURRENCY, cursors.length) }, worker));
  return out;
}

async function readRecord(store: ObjectStore, key: string): Promise<string[]> {
  const obj = await store.getBytes(key);
  // Listed a moment ago: records are never deleted by the product, so a vanished one is a store fault.
  if (!obj) throw new StoreError(`rewritten record ${key} was listed but cannot be read`, { retriable: true });
  let body: Partial<RecordBody>;
  try {
    body = JSON.parse(new TextDecoder().decode(obj.body)) as Partial<RecordBody>;
  } catch {
    throw new StoreError(`rewritten record ${key} is not JSON`, { retriable: false });
  }
  if (
    body.version !== 1 ||
    !Array.isArray(body.batchIds) ||
    !body.batchIds.every((id) => typeof id === 'string' && isBatchId(id))
  ) {
    throw new StoreError(`rewritten record ${key} is not {"version":1,"batchIds":[<batch id>…]}`, { retriable: false });
  }
  return body.batchIds;
}
