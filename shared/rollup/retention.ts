/**
 * The retention mark of a list prefix: the largest batch id whose file raw retention
 * (RAW_RETENTION_SECONDS) or period retention (RETENTION_DAYS) deleted, in one small object
 * (`rollups/<prefix>_retention.json`) so the list route can read it on every call.
 *
 * Why a sync client is never skipped silently:
 * - retention raises the mark (an atomic put) before it deletes any batch file at or below it,
 *   and the mark never moves back;
 * - the list route reads the mark after it has listed the store, so a listing that missed a
 *   deleted file is always followed by a read that sees a mark at or above that file's id;
 * - a cursor below the mark is answered 410 (the mark itself names a deleted batch above the
 *   cursor: never a false alarm, except in the moment between the mark and the deletes it
 *   announces, or after a retention pass that died there: the next pass deletes them).
 * A list without a cursor is answered as before, with the mark in a response header: the
 * client learns that older batches are only in the rollups.
 */
import { z } from 'zod';
import { BATCH_ID_RE } from '../ids.js';
import type { ObjectStore } from '../store/types.js';
import { retentionKey } from './layout.js';

/** Response header of `list` naming the retention mark (absent when retention deleted nothing). */
export const RAW_DELETED_HEADER = 'Raw-Deleted-Through';

const RetentionMarkSchema = z.object({
  v: z.literal(1),
  prefix: z.string(),
  /** Every batch file retention deleted has an id at or below this. */
  deletedThrough: z.string().regex(BATCH_ID_RE),
  updatedAt: z.number().int(),
});
export type RetentionMark = z.infer<typeof RetentionMarkSchema>;

/** Attempts at reading a mark that does not parse (s3rver can show an object mid-PUT; see readManifest). */
const READ_ATTEMPTS = 5;

/** The prefix's retention mark, or null when retention never deleted a batch file of it. */
export async function readRetentionMark(store: ObjectStore, prefix: string): Promise<RetentionMark | null> {
  const key = retentionKey(prefix);
  for (let attempt = 1; ; attempt++) {
    const got = await store.getBytes(key);
    if (!got) return null;
    let parsed: RetentionMark | undefined;
    try {
      parsed = RetentionMarkSchema.parse(JSON.parse(Buffer.from(got.body).toString('utf8')));
    } catch (err) {
      if (attempt >= READ_ATTEMPTS) throw new Error(`retention mark ${key} is invalid: ${(err as Error).message}`);
    }
    if (parsed) return parsed;
    await new Promise((r) => setTimeout(r, 100));
  }
}

/**
 * Raises the prefix's mark to `id` (no-op when it is already at or above it). Call it, under the
 * prefix lock, before deleting batch files with ids up to `id`.
 */
export async function raiseRetentionMark(
  store: ObjectStore,
  prefix: string,
  id: string,
  now: number = Date.now(),
): Promise<void> {
  const current = await readRetentionMark(store, prefix);
  if (current && current.deletedThrough >= id) return;
  const mark: RetentionMark = { v: 1, prefix, deletedThrough: id, updatedAt: now };
  await store.putBytes(retentionKey(prefix), Buffer.from(`${JSON.stringify(mark)}\n`), {
    contentType: 'application/json',
  });
}

/**
 * A list cursor below the retention mark: the batches after it were deleted once rolled up, so a
 * listing from it would skip them. The HTTP layer answers it 410 with {@link RAW_DELETED_HEADER}.
 */
export class CursorExpired extends Error {
  override readonly name = 'CursorExpired';
  constructor(
    readonly cursor: string,
    /** The mark: every batch file at or below it was deleted. */
    readonly deletedThrough: string,
  ) {
    super(
      `cursor ${cursor} is older than the raw retention: batch files up to ${deletedThrough} were deleted after they were rolled up, so this list would skip them. ` +
        `Their rows are in the rollups (events-ingest query --store; docs/analysts.md, "Rollups"); list from after=${deletedThrough} to go on with newer batches`,
    );
  }
}

/**
 * The list route's check, run after the listing: a cursor below the mark throws
 * {@link CursorExpired} (its next batches were deleted); otherwise returns the mark (for the
 * response header) or null.
 */
export async function checkListCursor(
  store: ObjectStore,
  prefix: string,
  after: string | undefined,
): Promise<string | null> {
  const mark = await readRetentionMark(store, prefix);
  if (!mark) return null;
  if (after !== undefined && after < mark.deletedThrough) {
    throw new CursorExpired(after, mark.deletedThrough);
  }
  return mark.deletedThrough;
}
