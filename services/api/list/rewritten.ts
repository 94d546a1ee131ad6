/**
 * `GET /list/<storagePath prefix>/rewritten?after=<cursor>&limit=`: batch ids an erasure
 * rewrote since a cursor, in rewrite order (shared/erasure/rewritten.ts), for `sync`.
 *
 * Who may read it: the collection's read roles, and `admin`. Issue 36 says admin; the read
 * roles are added because the listing tells a reader nothing pull does not (a rewritten batch
 * keeps its key and answers a new ETag to anyone who may pull it), and because a folder synced
 * with a read-only token must drop erased rows too (docs/operations.md, "Erasing a person").
 */
import type { Request, RequestHandler, Response } from 'express';
import { listRewritten } from '../../../shared/erasure/rewritten.js';
import { ApiError } from '../error-map.js';
import { queryInteger } from '../params.js';
import { RewrittenCursor, RewrittenLimit, fits } from '../contract/schemas.js';
import { checkParamValue } from '../../../shared/paths.js';
import type { ObjectStore } from '../../../shared/store/types.js';

/** The route's path under `/list/<prefix route>`. */
export const REWRITTEN_ROUTE = 'rewritten';

/** The roles that may read the rewritten listing of a collection: its read roles and admin. */
export function rewrittenRoles(readRoles: readonly string[]): string[] {
  return readRoles.includes('admin') ? [...readRoles] : [...readRoles, 'admin'];
}

/** `?after=`: absent or empty for the start, else a cursor this listing returned (400 otherwise). */
export function parseRewrittenAfter(raw: unknown): string | undefined {
  if (raw === undefined || raw === '') return undefined;
  if (typeof raw !== 'string' || !fits(RewrittenCursor, raw)) {
    throw new ApiError('bad_param', 'after must be a cursor this listing returned, like 1782933157690-0000-0a1b2c3d');
  }
  return raw;
}

/** The handler for one collection whose storagePath has one list parameter (`appParam`, the app). */
export function rewrittenHandler(store: ObjectStore, collection: string, appParam: string): RequestHandler {
  return async function rewritten(req: Request, res: Response): Promise<void> {
    const app = String((req.params as Record<string, string | undefined>)[appParam] ?? '');
    const problem = checkParamValue(app);
    if (problem) throw new ApiError('bad_param', `path parameter "${appParam}" ${problem}`);
    const limit = queryInteger(RewrittenLimit, 'limit', req.query.limit);
    const after = parseRewrittenAfter(req.query.after);
    res.status(200).json(await listRewritten(store, collection, app, after, limit));
  };
}
