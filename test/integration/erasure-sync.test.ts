/**
 * Erasures reach synced folders (issue 36, "Synced copies"): the product's API and encoder in
 * this process against the test Redis and a filesystem store; `sync` and `query --dir` run in
 * process too. The erasure itself is played by the test: it rewrites batch files in place
 * without one person's rows (re-encoded, same key) and records them with recordRewritten, as the
 * erasure job does after each file. The records are minted with a clock moved back past the
 * settle interval, so they are listable at once (the interval itself: test/unit/erasure-rewritten).
 */
import { spawn } from 'node:child_process';
import { createHash, randomUUID } from 'node:crypto';
import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_RETRY } from '../../cli/http.js';
import type { SyncProgress } from '../../cli/progress.js';
import { runQuery } from '../../cli/query.js';
import { readCursor, runSync } from '../../cli/sync.js';
import { parseEnv } from '../../shared/config.js';
import { REWRITTEN_SETTLE_MS, listRewritten, recordRewritten } from '../../shared/erasure/rewritten.js';
import { batchIdMs } from '../../shared/ids.js';
import { encodeBatch } from '../../shared/parquet/encode.js';
import { sampleEvent } from '../helpers/events.js';
import { type TestStack, startTestStack } from '../helpers/stack.js';
import { waitFor } from '../helpers/wait.js';

const ROOT = resolve(import.meta.dirname, '../..');
const READER = 'erasure-reader-token-0123456789';
const WRITER = 'erasure-writer-token-0123456789';
const VICTIM = `victim-${randomUUID()}`;
/** Event `i`, by `who` (a fresh id when absent). */
const ev = (i: number, who?: string): Record<string, unknown> => ({
  ...sampleEvent(i),
  ...(who === undefined ? {} : { distinct_id: who }),
});
const sha256 = (b: Uint8Array): string => createHash('sha256').update(b).digest('hex');

/** Runs the CLI as a user does (bin/events-ingest.mjs, its own process), bounded to 60 s. */
function cli(args: string[], token: string): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn(process.execPath, [join(ROOT, 'bin/events-ingest.mjs'), ...args], {
    cwd: ROOT,
    env: { ...process.env, EVENTS_INGEST_TOKEN: token },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  const kill = setTimeout(() => child.kill('SIGKILL'), 60_000);
  return new Promise((r) =>
    child.once('close', (code) => {
      clearTimeout(kill);
      r({ code, stdout, stderr });
    }),
  );
}

/** A clock far enough back that a record minted with it is settled now. */
const settledClock = (): number => Date.now() - REWRITTEN_SETTLE_MS - 5_000;

describe('erasures and synced folders', () => {
  let stack: TestStack;
  const dirs: string[] = [];
  const tmp = (label: string): string => {
    const d = mkdtempSync(join(os.tmpdir(), `erasure-${label}-`));
    dirs.push(d);
    return d;
  };
  const notes: string[] = [];
  const progress: SyncProgress = {
    listed: () => undefined,
    advanced: () => undefined,
    note: (l) => notes.push(l),
    stop: () => undefined,
  };

  beforeAll(async () => {
    const conf = tmp('conf');
    writeFileSync(
      join(conf, 'config.json'),
      JSON.stringify({
        version: 1,
        collections: [
          { name: 'events', storagePath: 'events/{app}/{batchId}', readRoles: ['admin', 'reader'], listable: true },
          // Two list parameters: no rewritten listing (it names one app), so sync cannot follow erasures there.
          {
            name: 'clicks',
            storagePath: 'clicks/{tenant}/{app}/{batchId}',
            readRoles: ['admin', 'reader'],
            listable: true,
          },
        ],
      }),
    );
    writeFileSync(join(conf, 'tokens.json'), JSON.stringify({ [READER]: ['reader'], [WRITER]: ['writer'] }));
    stack = await startTestStack({ CONFIG_FILE: join(conf, 'config.json'), TOKENS_FILE: join(conf, 'tokens.json') });
  });
  afterAll(async () => {
    await stack?.shutdown();
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  });

  const auth = (token: string): Record<string, string> => ({ Authorization: `Bearer ${token}` });

  /** Pushes one batch of `events` to `path` (`events/shop`), returns its id. */
  async function push(path: string, events: Record<string, unknown>[]): Promise<string> {
    const r = await fetch(`${stack.url}/push/${path}/x`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ data: { events }, baseHash: null }),
    });
    expect(r.status).toBe(200);
    return ((await r.json()) as { batchId: string }).batchId;
  }

  async function listed(path: string): Promise<string[]> {
    const r = await fetch(`${stack.url}/list/${path}?limit=1000`, { headers: auth(READER) });
    return ((await r.json()) as { items: string[] }).items;
  }

  function sync(out: string, app: string, collectionPath = 'events', token = READER): ReturnType<typeof runSync> {
    return runSync({
      url: stack.url,
      app,
      out,
      token,
      collectionPath,
      limit: 1000,
      retry: { ...DEFAULT_RETRY, maxRetries: 1 },
      maxBatches: 0,
      progress,
    });
  }

  /** The local `<id>.parquet` files and their sha256. */
  function folder(dir: string): Map<string, string> {
    const names = readdirSync(dir).filter((n) => /^\d{13}-\d{4}-[0-9a-f]{6}\.parquet$/.test(n));
    return new Map(names.map((n) => [n, sha256(readFileSync(join(dir, n)))]));
  }

  async function rows(sql: string, source: Parameters<typeof runQuery>[1]): Promise<unknown[][]> {
    return (await runQuery(sql, source)).rows;
  }

  it('after batch files are rewritten without a person, the next sync re-downloads them: the folder equals the store, query --dir matches query --store', async () => {
    // Six batches of 5: the person in batches 0 (2 rows) and 2 (1 row), alone in batch 4 (5 rows).
    const bodies: Record<string, unknown>[][] = [];
    const ids: string[] = [];
    for (let b = 0; b < 6; b++) {
      const events = Array.from({ length: 5 }, (_, i) =>
        ev(b * 5 + i, (b === 0 && i < 2) || (b === 2 && i === 3) || b === 4 ? VICTIM : undefined),
      );
      bodies.push(events);
      ids.push(await push('events/shop', events));
    }
    await waitFor(async () => (await listed('events/shop')).length === 6 || null, 30_000, 'six batches listed');

    const out = tmp('sync');
    const first = await sync(out, 'shop');
    expect(first).toMatchObject({ downloaded: 6, rewritten: 0, erasuresFollowed: true });
    const q = `SELECT count(*) FILTER (WHERE distinct_id = '${VICTIM}') AS victim, count(*) AS n FROM events`;
    expect(await rows(q, { kind: 'dir', dir: out })).toEqual([['8', '30']]);

    // The "erasure": batches 0, 2 and 4 re-encoded without the person (4 becomes an empty file), same keys.
    const keyOf = (id: string): string => `events/shop/${id}.parquet`;
    const before = new Map<string, string>();
    for (const b of [0, 2, 4]) {
      const id = ids[b] as string;
      before.set(id, sha256((await stack.store.getBytes(keyOf(id)))?.body ?? new Uint8Array()));
      const kept = (bodies[b] as Record<string, unknown>[]).filter((e) => e.distinct_id !== VICTIM);
      const encoded = encodeBatch(JSON.stringify({ data: { events: kept }, baseHash: null }), batchIdMs(id));
      if (!encoded.ok) throw new Error(encoded.reason);
      expect(encoded.rows).toBe(kept.length);
      await stack.store.putBytes(keyOf(id), encoded.bytes, { contentType: 'application/vnd.apache.parquet' });
      expect(sha256((await stack.store.getBytes(keyOf(id)))?.body ?? new Uint8Array())).not.toBe(before.get(id));
    }
    await recordRewritten(stack.store, 'events', 'shop', [ids[0] as string], { now: settledClock });
    await recordRewritten(stack.store, 'events', 'shop', [ids[2] as string, ids[4] as string], { now: settledClock });
    // One more batch arrives meanwhile: the same run pulls it.
    ids.push(await push('events/shop', [sampleEvent(99)]));
    await waitFor(async () => (await listed('events/shop')).length === 7 || null, 30_000, 'seven batches listed');

    // This run is the CLI's own process, as cron runs it: the summary says what erasures changed.
    const second = await cli(['sync', '--url', stack.url, '--app', 'shop', '--out', out], READER);
    expect(second.code, second.stderr).toBe(0);
    expect(second.stdout).toMatch(
      /^synced 1 batches \(\d+ bytes\), cursor \S+; 3 rewritten by erasures downloaded again\n$/,
    );
    // Every local file is byte for byte the store's.
    const local = folder(out);
    expect([...local.keys()].sort()).toEqual(ids.map((id) => `${id}.parquet`).sort());
    for (const id of ids)
      expect(local.get(`${id}.parquet`), id).toBe(
        sha256((await stack.store.getBytes(keyOf(id)))?.body ?? new Uint8Array()),
      );
    expect(readdirSync(out).filter((n) => n.includes('.part-'))).toEqual([]);
    // The listing's cursor is kept with the batch cursor.
    const page = await listRewritten(stack.store, 'events', 'shop', undefined, 10);
    const cursor = await readCursor(out);
    expect(cursor?.rewrittenAfter).toBe(page.next);
    expect(cursor?.lastId).toBe(ids[6]);

    expect(await rows(q, { kind: 'dir', dir: out })).toEqual([['0', '23']]);
    const env = parseEnv({ DATA_DIR: stack.dataDir, CONFIG_FILE: undefined });
    const everyRow = 'SELECT message_id, distinct_id, event, received_at FROM events ORDER BY message_id';
    const fromDir = await rows(everyRow, { kind: 'dir', dir: out });
    expect(fromDir).toHaveLength(23);
    expect(fromDir).toEqual(await rows(everyRow, { kind: 'store', env, app: 'shop' }));

    // Nothing new: the next run pulls nothing again.
    const third = await sync(out, 'shop');
    expect(third).toMatchObject({ downloaded: 0, unchanged: 0, rewritten: 0, erasuresFollowed: true });
    expect(folder(out)).toEqual(local);

    // A record listed again (a writer that wrote it twice) costs a 304: nothing is downloaded.
    await recordRewritten(stack.store, 'events', 'shop', [ids[0] as string], { now: settledClock });
    expect(await sync(out, 'shop')).toMatchObject({ downloaded: 0, rewritten: 0, erasuresFollowed: true });
    expect(folder(out)).toEqual(local);
    expect((await readCursor(out))?.rewrittenAfter).toBe(
      (await listRewritten(stack.store, 'events', 'shop', page.next ?? undefined, 10)).next,
    );

    // Rewritten, then deleted from the store (raw retention): the folder's copy goes too.
    await stack.store.deleteKeys?.([keyOf(ids[2] as string)]);
    expect(await stack.store.getBytes(keyOf(ids[2] as string))).toBeNull();
    await recordRewritten(stack.store, 'events', 'shop', [ids[2] as string], { now: settledClock });
    notes.length = 0;
    expect(await sync(out, 'shop')).toMatchObject({ downloaded: 0, rewritten: 1, erasuresFollowed: true });
    expect(folder(out).has(`${ids[2]}.parquet`)).toBe(false);
    expect(folder(out).size).toBe(6);
    expect(notes.join('\n')).toContain(`removed ${ids[2]}.parquet`);
  });

  it('a rewritten batch the folder does not hold is skipped, and is pulled in its new form by the main listing', async () => {
    const keptEvent = ev(2);
    const id = await push('events/late', [ev(1, VICTIM), keptEvent]);
    await waitFor(async () => (await listed('events/late')).length === 1 || null, 30_000, 'one batch listed');
    const kept = encodeBatch(JSON.stringify({ data: { events: [keptEvent] }, baseHash: null }), batchIdMs(id));
    if (!kept.ok) throw new Error(kept.reason);
    await stack.store.putBytes(`events/late/${id}.parquet`, kept.bytes);
    await recordRewritten(stack.store, 'events', 'late', [id], { now: settledClock });
    const out = tmp('late');
    expect(await sync(out, 'late')).toMatchObject({ downloaded: 1, rewritten: 0, erasuresFollowed: true });
    expect(folder(out).get(`${id}.parquet`)).toBe(sha256(kept.bytes));
  });

  it('the rewritten route: read roles and admin may read it; others get 401/403 JSON; bad after or limit get 400 JSON', async () => {
    const [a, b, c] = ['1782933157000-0000-aaaaaa', '1782933157001-0000-bbbbbb', '1782933157002-0000-cccccc'];
    await recordRewritten(stack.store, 'events', 'routes', [a], { now: settledClock });
    await recordRewritten(stack.store, 'events', 'routes', [b, c], { now: settledClock });
    // Not settled yet: not listed.
    await recordRewritten(stack.store, 'events', 'routes', [a], {});
    const url = `${stack.url}/list/events/routes/rewritten`;
    const ok = await fetch(`${url}?limit=2`, { headers: auth(READER) });
    expect(ok.status).toBe(200);
    const body = (await ok.json()) as {
      items: { cursor: string; batchIds: string[] }[];
      next: string;
      hasMore: boolean;
    };
    expect(body.items.map((i) => i.batchIds)).toEqual([[a], [b, c]]);
    expect(body.next).toBe(body.items[1]?.cursor);
    expect(body.hasMore).toBe(false);
    const admin = await fetch(`${url}?after=${body.items[0]?.cursor}`, {
      headers: auth('test-admin-token-0123456789'),
    });
    expect(((await admin.json()) as { items: unknown[] }).items).toHaveLength(1);
    for (const [headers, status] of [
      [{}, 401],
      [auth(WRITER), 403],
    ] as const) {
      const r = await fetch(url, { headers });
      expect(r.status).toBe(status);
      expect(((await r.json()) as { error: string }).error).toMatch(/token/);
    }
    for (const q of ['after=1782933157000-0000-abcdef', 'after=../x', 'limit=0', 'limit=1001', 'limit=abc']) {
      const r = await fetch(`${url}?${q}`, { headers: auth(READER) });
      expect(r.status, q).toBe(400);
      expect(r.headers.get('content-type')).toMatch(/json/);
    }
    expect((await fetch(url, { method: 'POST', headers: auth(READER) })).status).toBe(405);
  });

  it('a server without the rewritten listing (here: a storagePath with two list parameters): sync warns once and still syncs', async () => {
    const id = await push('clicks/t1/shop', [sampleEvent(1)]);
    await waitFor(async () => (await listed('clicks/t1/shop')).length === 1 || null, 30_000, 'one batch listed');
    const out = tmp('clicks');
    const r = await cli(
      ['sync', '--url', stack.url, '--app', 'shop', '--collection-path', 'clicks/t1', '--out', out],
      READER,
    );
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(
      /^synced 1 batches \(\d+ bytes\), cursor \S+; erasures not followed \(see the warning\)\n$/,
    );
    expect(r.stderr.split('\n').filter((n) => n.includes('cannot follow erasures'))).toHaveLength(1);
    expect(r.stderr).toContain('answered 404');
    expect([...folder(out).keys()]).toEqual([`${id}.parquet`]);
    expect((await readCursor(out))?.rewrittenAfter).toBeUndefined();
  });
});
