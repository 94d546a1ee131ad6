/**
 * `events-ingest sync`: copies a collection's batches from a server into a local folder,
 * incrementally and safely from cron.
 *
 * Why it never skips a batch: the server's list is gap-free (an id appears only after every
 * older id is written or dead-lettered), the cursor only moves past a batch once its file is
 * durably in the folder, and the next run asks for `?after=<cursor>`.
 * Why it never downloads one twice: a file already in the folder (a run killed between the
 * rename and the cursor write) is offered to the server as `If-None-Match: "<its sha256>"`
 * and answered 304; the folder lock keeps two runs from working at once.
 * Why it does not keep erased rows: each run first reads the server's rewritten listing (batch
 * files an erasure rewrote in place, after a cursor kept in `.cursor`) and pulls those batches
 * of the folder again; see docs/operations.md, "Erasing a person".
 */
import { createHash } from 'node:crypto';
import { promises as fs } from 'node:fs';
import path from 'node:path';
import { isRewrittenCursor } from '../shared/erasure/rewritten.js';
import { isBatchId, parseBatchFileName } from '../shared/ids.js';
import { checkParamValue } from '../shared/paths.js';
import { RAW_DELETED_HEADER } from '../shared/rollup/retention.js';
import { CliError, EXIT } from './errors.js';
import { fileSha256, fsyncDir, partPath, removeStaleParts, writeFileAtomic } from './files.js';
import { type RetryPolicy, RetriableError, failFor, parseBaseUrl, withRetries } from './http.js';
import { acquireLock } from './lock.js';
import type { SyncProgress } from './progress.js';

export const CURSOR_NAME = '.cursor';
const PARQUET_MIME = 'application/vnd.apache.parquet';

export interface SyncOptions {
  /** Server base URL, with its BASE_PATH if any (`http://host:8787/ingest`). */
  url: string;
  app: string;
  out: string;
  token?: string;
  /** The list route's path before the app (`events` for storagePath `events/{app}/{batchId}`). */
  collectionPath: string;
  /** Page size of list calls (1-1000). */
  limit: number;
  retry: RetryPolicy;
  /** Stop after this many batches (0 = until caught up). */
  maxBatches: number;
  progress: SyncProgress;
  /** Aborts the run (SIGINT/SIGTERM); the current temp file is removed and the lock released. */
  signal?: AbortSignal;
}

export interface SyncResult {
  /** Batches written to the folder by this run. */
  downloaded: number;
  /** Batches already in the folder (304 Not Modified). */
  unchanged: number;
  /** Batches in the folder that an erasure rewrote, downloaded again (or removed: gone from the store). */
  rewritten: number;
  /**
   * Whether the rewritten listing was followed: false when the server refused it (401/403) or
   * has none (404), and then erased rows may stay in the folder (warned once on stderr).
   */
  erasuresFollowed: boolean;
  bytes: number;
  cursor: string | null;
  /**
   * A sync that started without a cursor from a server whose retention had deleted batch files:
   * the largest deleted id. The run started after it; those rows are only in the rollups.
   */
  startedAfterRetention?: string;
}

/** What `.cursor` holds. `app` and `collectionPath` stop two sources from being mixed in one folder. */
export interface CursorFile {
  version: 1;
  lastId: string | null;
  app: string;
  collectionPath: string;
  updatedAt: string;
  /** The last record of the server's rewritten listing applied to this folder (erasures); absent: none yet. */
  rewrittenAfter?: string;
}

/** Reads `<dir>/.cursor`; null when there is none yet. A malformed cursor is an error (never silently restarted). */
export async function readCursor(dir: string): Promise<CursorFile | null> {
  const file = path.join(dir, CURSOR_NAME);
  let text: string;
  try {
    text = await fs.readFile(file, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw err;
  }
  let v: Partial<CursorFile>;
  try {
    v = JSON.parse(text) as Partial<CursorFile>;
  } catch {
    throw new CliError(
      `${file} is not JSON; move it away to sync from the start (files already here are kept and not downloaded again)`,
    );
  }
  if (
    v.version !== 1 ||
    (v.lastId !== null && (typeof v.lastId !== 'string' || !isBatchId(v.lastId))) ||
    typeof v.app !== 'string' ||
    typeof v.collectionPath !== 'string'
  ) {
    throw new CliError(`${file} is not a sync cursor (expected {"version":1,"lastId":"<batch id>",...})`);
  }
  if (
    v.rewrittenAfter !== undefined &&
    (typeof v.rewrittenAfter !== 'string' || !isRewrittenCursor(v.rewrittenAfter))
  ) {
    throw new CliError(
      `${file} has a rewrittenAfter that is not a cursor of the rewritten listing; remove that field to apply every erasure again`,
    );
  }
  const out: CursorFile = {
    version: 1,
    lastId: v.lastId ?? null,
    app: v.app,
    collectionPath: v.collectionPath,
    updatedAt: String(v.updatedAt ?? ''),
  };
  if (v.rewrittenAfter !== undefined) out.rewrittenAfter = v.rewrittenAfter;
  return out;
}

function checkOptions(opts: SyncOptions): URL {
  const base = parseBaseUrl(opts.url);
  const bad = checkParamValue(opts.app);
  if (bad) throw new CliError(`--app ${bad}`, EXIT.usage);
  for (const seg of opts.collectionPath.split('/')) {
    const problem = checkParamValue(seg);
    if (problem) throw new CliError(`--collection-path segment ${JSON.stringify(seg)} ${problem}`, EXIT.usage);
  }
  if (!Number.isInteger(opts.limit) || opts.limit < 1 || opts.limit > 1000)
    throw new CliError('--limit must be an integer from 1 to 1000', EXIT.usage);
  return base;
}

/**
 * Runs one sync of `opts.app` into `opts.out`: takes the folder lock, removes temp files of
 * killed runs, then lists `?after=<cursor>` page by page and pulls every batch into
 * `<out>/<id>.parquet`, moving the cursor after each durable write. Throws CliError on failure
 * (exit 3 when another run holds the lock).
 */
export async function runSync(opts: SyncOptions): Promise<SyncResult> {
  const base = checkOptions(opts);
  const dir = path.resolve(opts.out);
  await fs.mkdir(dir, { recursive: true });
  const lock = await acquireLock(dir);
  try {
    const removed = await removeStaleParts(dir);
    if (removed > 0) opts.progress.note(`removed ${removed} partial download(s) of an interrupted run`);
    const saved = await readCursor(dir);
    if (saved && (saved.app !== opts.app || saved.collectionPath !== opts.collectionPath)) {
      throw new CliError(
        `${dir} holds a sync of ${saved.collectionPath}/${saved.app}; use another --out for ${opts.collectionPath}/${opts.app}`,
      );
    }
    const state: FolderState = { lastId: saved?.lastId ?? null, rewrittenAfter: saved?.rewrittenAfter };
    const followed = await followRewrites(opts, base, dir, state);
    const result = await syncLoop(opts, base, dir, state);
    return { ...result, rewritten: followed.rewritten, erasuresFollowed: followed.followed };
  } finally {
    opts.progress.stop();
    await lock.release();
  }
}

/** The two cursors of a folder, as `.cursor` keeps them. */
interface FolderState {
  lastId: string | null;
  rewrittenAfter: string | undefined;
}

/** Writes `.cursor` atomically with both cursors of `state`. */
async function saveCursor(opts: SyncOptions, dir: string, state: FolderState): Promise<void> {
  const cursor: CursorFile = {
    version: 1,
    lastId: state.lastId,
    app: opts.app,
    collectionPath: opts.collectionPath,
    updatedAt: new Date().toISOString(),
  };
  if (state.rewrittenAfter !== undefined) cursor.rewrittenAfter = state.rewrittenAfter;
  await writeFileAtomic(path.join(dir, CURSOR_NAME), `${JSON.stringify(cursor)}\n`);
}

/** What every request of a run shares: the server root, the app's path, auth, and the retry note. */
function requestParts(
  opts: SyncOptions,
  base: URL,
): {
  root: string;
  appPath: string;
  headers: Record<string, string>;
  onRetry: (message: string, delayMs: number, retry: number) => void;
} {
  return {
    root: base.href.replace(/\/+$/, ''),
    appPath: `${opts.collectionPath}/${encodeURIComponent(opts.app)}`,
    headers: opts.token ? { Authorization: `Bearer ${opts.token}` } : {},
    onRetry: (message, delayMs, retry) =>
      opts.progress.note(`${message}; retry ${retry}/${opts.retry.maxRetries} in ${(delayMs / 1000).toFixed(1)} s`),
  };
}

/** Pages of the rewritten listing one run reads at most (1,000 records each): a server that never says "no more" cannot hold it. */
const MAX_REWRITTEN_PAGES = 10_000;

/**
 * What a status of the rewritten listing means for sync: `refused` (401/403: this token may not
 * read it; 404: the server has no such route) is warned about once and the run goes on without
 * following erasures; `ok` is a page; anything else fails as any request does.
 */
export function rewrittenAnswer(status: number): 'ok' | 'refused' | 'error' {
  if (status === 200) return 'ok';
  return status === 401 || status === 403 || status === 404 ? 'refused' : 'error';
}

/**
 * Applies the server's rewritten listing (erasures, docs/operations.md "Erasing a person") to the
 * folder before new batches are pulled: every listed batch that is in the folder is pulled again
 * (temp file + rename; a copy already current is answered 304), or removed when the store no
 * longer has it; the listing's cursor is saved after each record. Batches not in the folder are
 * skipped: the main loop pulls them, as they are now.
 */
async function followRewrites(
  opts: SyncOptions,
  base: URL,
  dir: string,
  state: FolderState,
): Promise<{ rewritten: number; followed: boolean }> {
  const { root, appPath, headers, onRetry } = requestParts(opts, base);
  let rewritten = 0;
  for (let pageNo = 0; pageNo < MAX_REWRITTEN_PAGES; pageNo++) {
    const query = new URLSearchParams({ limit: '1000' });
    if (state.rewrittenAfter !== undefined) query.set('after', state.rewrittenAfter);
    const page = await withRetries(
      'rewritten list',
      opts.retry,
      async (signal) => {
        const res = await fetch(`${root}/list/${appPath}/rewritten?${query}`, { headers, signal });
        const answer = rewrittenAnswer(res.status);
        if (answer === 'refused') {
          await res.body?.cancel();
          return { refused: res.status };
        }
        if (answer === 'error') return failFor(`rewritten list ${opts.collectionPath}/${opts.app}`, res);
        return parseRewrittenPage(await res.json(), state.rewrittenAfter);
      },
      { signal: opts.signal, onRetry },
    );
    if ('refused' in page) {
      opts.progress.note(
        `warning: the server answered ${page.refused} to the rewritten listing (/list/${appPath}/rewritten): this run cannot follow erasures, ` +
          'so batches an erasure rewrote are not downloaded again and this folder may keep erased rows. ' +
          'Use a token with a read role of the collection or admin, on a server that has the route (docs/operations.md, "Erasing a person")',
      );
      return { rewritten, followed: false };
    }
    for (const item of page.items) {
      for (const id of new Set(item.batchIds)) {
        const name = `${id}.parquet`;
        if (!(await exists(path.join(dir, name)))) continue;
        const got = await withRetries(
          `pull ${name}`,
          opts.retry,
          (signal) => pullOne(`${root}/pull/${appPath}/${name}`, headers, dir, name, signal, 'report'),
          {
            signal: opts.signal,
            onRetry,
          },
        );
        if (got === 'gone') {
          // Rewritten, then deleted by retention: the copy here still holds what was erased; its other rows are in the rollups.
          await fs.rm(path.join(dir, name), { force: true });
          await fsyncDir(dir);
          opts.progress.note(
            `removed ${name}: an erasure rewrote it and the store no longer has it (its other rows are in the rollups: query --store)`,
          );
          rewritten++;
        } else if (got !== 'unchanged') rewritten++;
      }
      state.rewrittenAfter = item.cursor;
      await saveCursor(opts, dir, state);
    }
    if (page.items.length > 0)
      opts.progress.note(`erasures: ${rewritten} rewritten batch(es) of this folder downloaded again so far`);
    if (!page.hasMore) return { rewritten, followed: true };
    if (page.items.length === 0)
      throw new CliError('server said hasMore with an empty rewritten page; refusing to spin');
  }
  throw new CliError(`rewritten listing still had more after ${MAX_REWRITTEN_PAGES} pages; run sync again`);
}

async function exists(file: string): Promise<boolean> {
  try {
    await fs.stat(file);
    return true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return false;
    throw err;
  }
}

/** A page of the rewritten listing, checked: cursors strictly increasing past `after`, batch ids only. */
export function parseRewrittenPage(
  body: unknown,
  after: string | undefined,
): { items: { cursor: string; batchIds: string[] }[]; hasMore: boolean } {
  const v = body as { items?: unknown; hasMore?: unknown };
  if (typeof v !== 'object' || v === null || !Array.isArray(v.items) || typeof v.hasMore !== 'boolean') {
    throw new CliError('rewritten list answered something that is not {items, next, hasMore}');
  }
  const items: { cursor: string; batchIds: string[] }[] = [];
  let prev = after ?? '';
  for (const raw of v.items as unknown[]) {
    const item = raw as { cursor?: unknown; batchIds?: unknown };
    if (
      typeof item !== 'object' ||
      item === null ||
      typeof item.cursor !== 'string' ||
      !isRewrittenCursor(item.cursor)
    ) {
      throw new CliError('rewritten list returned an item without a valid cursor');
    }
    // Cursors must keep increasing: a server that broke this could otherwise loop forever.
    if (item.cursor <= prev)
      throw new CliError(`rewritten list returned cursor ${item.cursor} after ${prev}; refusing to go backwards`);
    if (
      !Array.isArray(item.batchIds) ||
      !item.batchIds.every((id): id is string => typeof id === 'string' && isBatchId(id))
    ) {
      // The ids become local file names: only batch ids, never a path.
      throw new CliError(`rewritten list item ${item.cursor} holds something that is not a batch id`);
    }
    prev = item.cursor;
    items.push({ cursor: item.cursor, batchIds: item.batchIds });
  }
  return { items, hasMore: v.hasMore };
}

async function syncLoop(
  opts: SyncOptions,
  base: URL,
  dir: string,
  state: FolderState,
): Promise<Omit<SyncResult, 'rewritten' | 'erasuresFollowed'>> {
  const start = state.lastId;
  const { root, appPath, headers, onRetry } = requestParts(opts, base);
  const result: Omit<SyncResult, 'rewritten' | 'erasuresFollowed'> = {
    downloaded: 0,
    unchanged: 0,
    bytes: 0,
    cursor: start,
  };
  let known = 0;
  // Where the next list starts: the cursor, or (first sync of a folder) after what retention deleted.
  let listAfter = start;

  for (;;) {
    const query = new URLSearchParams({ limit: String(opts.limit) });
    if (listAfter) query.set('after', listAfter);
    const listUrl = `${root}/list/${appPath}?${query}`;
    const page = await withRetries(
      'list',
      opts.retry,
      async (signal) => {
        const res = await fetch(listUrl, { headers, signal });
        if (res.status === 410) {
          // A first sync that has kept nothing yet was only starting after an older mark: start after the new one.
          const mark = res.headers.get(RAW_DELETED_HEADER);
          if (
            start === null &&
            result.cursor === null &&
            mark !== null &&
            isBatchId(mark) &&
            (listAfter === null || mark > listAfter)
          ) {
            await res.body?.cancel();
            return { items: [], hasMore: true, deletedThrough: mark, restart: true };
          }
          return retentionGone(dir, listAfter, res);
        }
        if (res.status !== 200) return failFor(`list ${opts.collectionPath}/${opts.app}`, res);
        return {
          ...parseListPage(await res.json()),
          deletedThrough: res.headers.get(RAW_DELETED_HEADER),
          restart: false,
        };
      },
      { signal: opts.signal, onRetry },
    );
    if ((listAfter === null || page.restart) && page.deletedThrough !== null && isBatchId(page.deletedThrough)) {
      // A folder's first sync: batches up to the mark exist only in the rollups now. Say so, once,
      // and start after them (a straggler below the mark, a replayed batch, goes to the rollups too).
      listAfter = page.deletedThrough;
      result.startedAfterRetention = page.deletedThrough;
      opts.progress.note(
        `the server deleted batch files up to ${page.deletedThrough} (raw retention) after rolling them up; starting after them. ` +
          'Older rows are in the rollups: events-ingest query --store (docs/analysts.md, "Rollups")',
      );
      continue;
    }
    known += page.items.length;
    opts.progress.listed(known);

    for (const name of page.items) {
      const id = name.slice(0, -'.parquet'.length);
      // Ids must keep strictly increasing: a server that broke this could otherwise loop forever.
      if (listAfter !== null && id <= listAfter)
        throw new CliError(`server listed ${name} after cursor ${listAfter}; refusing to go backwards`);
      const got = await withRetries(
        `pull ${name}`,
        opts.retry,
        (signal) => pullOne(`${root}/pull/${appPath}/${name}`, headers, dir, name, signal, 'throw'),
        {
          signal: opts.signal,
          onRetry,
        },
      );
      if (got === 'unchanged') result.unchanged++;
      else if (got !== 'gone') {
        result.downloaded++;
        result.bytes += got;
      }
      result.cursor = id;
      listAfter = id;
      state.lastId = id;
      await saveCursor(opts, dir, state);
      opts.progress.advanced(result.downloaded + result.unchanged, result.bytes);
      if (opts.maxBatches > 0 && result.downloaded + result.unchanged >= opts.maxBatches) return result;
    }
    if (!page.hasMore) return result;
    if (page.items.length === 0) throw new CliError('server said hasMore with an empty page; refusing to spin');
  }
}

/** 410 from list: the cursor is older than the server's raw retention. Never retried, never skipped past. */
async function retentionGone(dir: string, cursor: string | null, res: Response): Promise<never> {
  let detail = '';
  try {
    const parsed = (await res.json()) as { error?: unknown };
    if (typeof parsed.error === 'string') detail = ` (server: ${parsed.error})`;
  } catch {
    // Not JSON: the status says enough.
  }
  const through = res.headers.get(RAW_DELETED_HEADER) ?? 'a newer batch';
  throw new CliError(
    `cursor ${cursor ?? '(none)'} in ${dir} is older than the server's raw retention: batch files after it, up to ${through}, were deleted once rolled up, ` +
      `so sync cannot copy them and did nothing. Their rows are in the rollups: query them with "events-ingest query --store" (docs/analysts.md, "Rollups"). ` +
      `To sync newer batches, move ${path.join(dir, CURSOR_NAME)} aside: a sync without a cursor starts after the deleted batches${detail}`,
    EXIT.retention,
  );
}

function parseListPage(body: unknown): { items: string[]; hasMore: boolean } {
  const v = body as { items?: unknown; hasMore?: unknown };
  if (typeof v !== 'object' || v === null || !Array.isArray(v.items) || typeof v.hasMore !== 'boolean') {
    throw new CliError('list answered something that is not {items, hasMore}; is --url an events-ingest server?');
  }
  const items: string[] = [];
  let prev = '';
  for (const item of v.items) {
    // The name becomes a local file name: only `<batch id>.parquet` is accepted, never a path.
    if (typeof item !== 'string' || parseBatchFileName(item) === null) {
      throw new CliError(`list returned ${JSON.stringify(item)}, not a <batch id>.parquet name`);
    }
    if (item <= prev) throw new CliError('list items are not in ascending order');
    prev = item;
    items.push(item);
  }
  return { items, hasMore: v.hasMore };
}

/**
 * Pulls one batch into `<dir>/<name>`: streamed to a temp file while hashing, checked against
 * the ETag, fsynced, renamed. Returns the bytes written, or 'unchanged' on 304. A batch the
 * store does not have is an error, or 'gone' with `missing` 'report'.
 */
async function pullOne(
  url: string,
  headers: Record<string, string>,
  dir: string,
  name: string,
  signal: AbortSignal,
  missing: 'throw' | 'report',
): Promise<number | 'unchanged' | 'gone'> {
  const final = path.join(dir, name);
  const localSha = await fileSha256(final);
  const res = await fetch(url, {
    headers: localSha ? { ...headers, 'If-None-Match': `"${localSha}"` } : headers,
    signal,
  });
  if (res.status === 304) {
    await res.body?.cancel();
    return 'unchanged';
  }
  if (res.status !== 200) return failFor(`pull ${name}`, res);
  const type = res.headers.get('content-type') ?? '';
  if (!type.startsWith(PARQUET_MIME) || !res.body) {
    await res.body?.cancel();
    if (missing === 'report') return 'gone';
    // The sync protocol's empty answer: listed but gone from the store. Retrying will not bring it back.
    throw new CliError(
      `pull ${name} returned no Parquet file (Content-Type ${type || 'none'}); the batch was listed but is missing from the store ` +
        '(deleted by hand, or by the raw retention since it was listed: run sync again, which then says which)',
    );
  }
  const etag = (res.headers.get('etag') ?? '').replace(/^"|"$/g, '');
  const tmp = partPath(dir, name);
  const hash = createHash('sha256');
  let bytes = 0;
  const handle = await fs.open(tmp, 'w');
  try {
    const reader = res.body.getReader();
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      hash.update(value);
      bytes += value.byteLength;
      await handle.write(value);
    }
    await handle.sync();
  } catch (err) {
    // The write's error is the one to report; the temporary file is removed either way.
    await handle.close().catch(() => undefined);
    await fs.rm(tmp, { force: true });
    throw err;
  }
  await handle.close();
  const sha = hash.digest('hex');
  if (etag && sha !== etag) {
    await fs.rm(tmp, { force: true });
    throw new RetriableError(
      `pull ${name}: received bytes hash to ${sha.slice(0, 12)}…, not the ETag ${etag.slice(0, 12)}…`,
    );
  }
  await fs.rename(tmp, final);
  await fsyncDir(dir);
  return bytes;
}
