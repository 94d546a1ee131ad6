/**
 * `sync` against a server whose raw retention moves while the client runs: the edge cases the
 * end-to-end test (rollup-acceptance-faults, "4: …") cannot time reliably. The server here is a
 * small HTTP stand-in that answers list/pull as the list route's contract says (docs/analysts.md,
 * "Retention"); the real route is covered by that end-to-end test.
 */
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { CliError, EXIT } from '../../cli/errors.js';
import { DEFAULT_RETRY } from '../../cli/http.js';
import type { SyncProgress } from '../../cli/progress.js';
import { runSync } from '../../cli/sync.js';
import { RAW_DELETED_HEADER } from '../../shared/rollup/retention.js';

const id = (n: number): string => `${String(1782933157000 + n).padStart(13, '0')}-0000-abcdef`;
const BYTES = Buffer.from('PAR1 not really parquet PAR1');
const SHA = createHash('sha256').update(BYTES).digest('hex');

/** Batches 1..10; `mark()` is the retention mark at the time of each call (a function, so a test can move it). */
async function server(mark: () => number): Promise<{ url: string; lists: string[]; close: () => Promise<void> }> {
  const lists: string[] = [];
  const srv = http.createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://x');
    // Sync's erasure listing, empty here (before mark(): it does not count as a list call).
    if (url.pathname === '/list/events/app/rewritten') {
      res
        .writeHead(200, { 'Content-Type': 'application/json' })
        .end(JSON.stringify({ items: [], next: null, hasMore: false }));
      return;
    }
    const m = mark();
    const headers: Record<string, string> = m > 0 ? { [RAW_DELETED_HEADER]: id(m) } : {};
    if (url.pathname === '/list/events/app') {
      const after = url.searchParams.get('after');
      lists.push(after ?? '');
      if (after !== null && m > 0 && after < id(m)) {
        res
          .writeHead(410, { 'Content-Type': 'application/json', ...headers })
          .end(JSON.stringify({ error: `cursor ${after} is older than the raw retention` }));
        return;
      }
      const limit = Number(url.searchParams.get('limit') ?? 100);
      const items = Array.from({ length: 10 }, (_, i) => id(i + 1)).filter(
        (x) => x > (after ?? '') && (m === 0 || x > id(m)),
      );
      res
        .writeHead(200, { 'Content-Type': 'application/json', ...headers })
        .end(
          JSON.stringify({ items: items.slice(0, limit).map((x) => `${x}.parquet`), hasMore: items.length > limit }),
        );
      return;
    }
    if (url.pathname.startsWith('/pull/events/app/')) {
      res.writeHead(200, { 'Content-Type': 'application/vnd.apache.parquet', ETag: `"${SHA}"` }).end(BYTES);
      return;
    }
    res.writeHead(404, { 'Content-Type': 'application/json' }).end('{"error":"not found"}');
  });
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(srv.address() as AddressInfo).port}`,
    lists,
    close: () => new Promise<void>((r) => srv.close(() => r())),
  };
}

const notes: string[] = [];
const progress: SyncProgress = {
  listed: () => undefined,
  advanced: () => undefined,
  note: (l) => notes.push(l),
  stop: () => undefined,
};
const dirs: string[] = [];
const closers: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of closers.splice(0)) await c();
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
  notes.length = 0;
});

async function sync(
  url: string,
  out: string,
  maxBatches = 0,
  limit = 1000,
): Promise<Awaited<ReturnType<typeof runSync>>> {
  return runSync({
    url,
    app: 'app',
    out,
    collectionPath: 'events',
    limit,
    retry: { ...DEFAULT_RETRY, maxRetries: 0 },
    maxBatches,
    progress,
  });
}

async function failure(p: Promise<unknown>): Promise<CliError> {
  const err = await p.then(
    () => null,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(CliError);
  return err as CliError;
}

describe('sync and the retention mark', () => {
  it('a first sync starts after the mark and says so; with no mark it starts from the first batch', async () => {
    let mark = 0;
    const s = await server(() => mark);
    closers.push(s.close);
    const plain = mkdtempSync(join(tmpdir(), 'sync-ret-'));
    dirs.push(plain);
    expect((await sync(s.url, plain)).downloaded).toBe(10);
    expect(notes).toEqual([]);

    mark = 4;
    const out = mkdtempSync(join(tmpdir(), 'sync-ret-'));
    dirs.push(out);
    const r = await sync(s.url, out);
    expect(r.startedAfterRetention).toBe(id(4));
    expect(r.downloaded).toBe(6);
    expect(
      readdirSync(out)
        .filter((n) => n.endsWith('.parquet'))
        .sort(),
    ).toEqual([5, 6, 7, 8, 9, 10].map((n) => `${id(n)}.parquet`));
    expect(notes.join('\n')).toContain(`deleted batch files up to ${id(4)}`);
    expect(s.lists).toEqual(['', '', id(4)]);
  });

  it('a first sync overtaken by retention before it kept a batch starts after the new mark', async () => {
    // The mark moves from 2 to 6 between the first list and the second.
    let calls = 0;
    const s = await server(() => (++calls <= 1 ? 2 : 6));
    closers.push(s.close);
    const out = mkdtempSync(join(tmpdir(), 'sync-ret-'));
    dirs.push(out);
    const r = await sync(s.url, out);
    expect(r.startedAfterRetention).toBe(id(6));
    expect(r.downloaded).toBe(4);
    expect(s.lists).toEqual(['', id(2), id(6)]);
  });

  it('a folder whose cursor falls below the mark: exit 4, nothing downloaded, cursor kept; a first sync that already kept a batch too', async () => {
    let mark = 0;
    const s = await server(() => mark);
    closers.push(s.close);
    const out = mkdtempSync(join(tmpdir(), 'sync-ret-'));
    dirs.push(out);
    expect((await sync(s.url, out, 3)).cursor).toBe(id(3));
    mark = 5;
    const err = await failure(sync(s.url, out));
    expect(err.exitCode).toBe(EXIT.retention);
    expect(err.message).toContain(`cursor ${id(3)} in ${out} is older than the server's raw retention`);
    expect(err.message).toContain(`up to ${id(5)}`);
    expect(err.message).toContain('events-ingest query --store');
    expect((JSON.parse(readFileSync(join(out, '.cursor'), 'utf8')) as { lastId: string }).lastId).toBe(id(3));
    expect(readdirSync(out).filter((n) => n.endsWith('.parquet'))).toHaveLength(3);

    // A first sync (pages of 2) that kept batches 1 and 2 when the mark jumps to 5: its folder has a cursor now, so exit 4.
    let calls = 0;
    const moving = await server(() => (++calls <= 3 ? 0 : 5));
    closers.push(moving.close);
    const fresh = mkdtempSync(join(tmpdir(), 'sync-ret-'));
    dirs.push(fresh);
    const err2 = await failure(sync(moving.url, fresh, 0, 2));
    expect(err2.exitCode).toBe(EXIT.retention);
    expect(moving.lists).toEqual(['', id(2)]);
    expect((JSON.parse(readFileSync(join(fresh, '.cursor'), 'utf8')) as { lastId: string }).lastId).toBe(id(2));
  });
});
