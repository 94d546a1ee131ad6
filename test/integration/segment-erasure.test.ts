/**
 * Issue 46: what a Segment SDK sends reaches the Iceberg table, and erasure by `userId` and
 * `anonymousId` works on it. The published `@segment/analytics-node` sends every call type for two
 * identified users and one anonymous visitor to the product's stack (API + encoder + rollup
 * service with ICEBERG=on, 1 s commits, 2 s rollup periods) with a write keys file. The app's batch
 * files (DuckDB) and its Iceberg table (icebird, an independent reader) hold every call as one row
 * with the documented mapping; then `POST /admin/erase/…` erases one user by `distinct_ids`
 * (= userId) and the visitor by `anonymous_ids` (= anonymousId): their rows are gone from the batch
 * files and the table, and the other user's rows are still there, unchanged.
 */
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Analytics } from '@segment/analytics-node';
import { icebergRead } from 'icebird';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type IcebergTable, storeRootUri } from '../../shared/iceberg/table.js';
import { duckQuery, sqlString } from '../helpers/duckdb.js';
import { erasureFinished, requestErasure } from '../helpers/erasure.js';
import { FAST_ICEBERG_ENV, canonical, readOnlyTable, serveStoreToIcebird } from '../helpers/icebird-store.js';
import { uniqueName } from '../helpers/names.js';
import { ADMIN_TOKEN, type TestStack, startTestStack } from '../helpers/stack.js';
import { waitFor } from '../helpers/wait.js';

const KEY = 'seg-erasure-write-key-0123456789';
const ERASED_USER = 'seg-user-ä"1';
const KEPT_USER = 'seg-user-2';
const ERASED_ANON = 'seg-visitor-3';
/** Calls per person and round: every type an identified user sends; the visitor only tracks, pages and screens. */
const ROUNDS = 3;
const TS = '2024-06-01T10:00:00.000Z';
const admin = { Authorization: `Bearer ${ADMIN_TOKEN}`, 'Content-Type': 'application/json' };

/** One SDK call and the row it must be. */
interface Call {
  messageId: string;
  type: 'track' | 'identify' | 'page' | 'screen' | 'group' | 'alias';
  userId?: string;
  anonymousId?: string;
  /** `event` (track) or `name` (page, screen). */
  event?: string;
  /** `properties` or `traits`. */
  props?: Record<string, unknown>;
  groupId?: string;
  previousId?: string;
}

function callsOf(person: string, identified: boolean): Call[] {
  const who = identified ? { userId: person } : { anonymousId: person };
  const out: Call[] = [];
  for (let r = 0; r < ROUNDS; r++) {
    const id = (k: string): string => `${person}-${r}-${k}`;
    out.push({ messageId: id('t'), type: 'track', ...who, event: 'Order Completed', props: { r, total: 12.5 } });
    out.push({ messageId: id('p'), type: 'page', ...who, event: 'Pricing', props: { path: `/p/${r}` } });
    out.push({ messageId: id('s'), type: 'screen', ...who, event: 'Settings', props: { tab: r } });
    if (!identified) continue;
    out.push({ messageId: id('i'), type: 'identify', ...who, props: { plan: 'pro', r } });
    out.push({ messageId: id('g'), type: 'group', ...who, groupId: `g-${r}`, props: { name: 'Acme' } });
    out.push({ messageId: id('a'), type: 'alias', ...who, previousId: `prev-${person}-${r}` });
  }
  return out;
}

function send(client: Analytics, c: Call): void {
  const common = { messageId: c.messageId, timestamp: new Date(TS) };
  const who = c.userId !== undefined ? { userId: c.userId } : { anonymousId: c.anonymousId as string };
  if (c.type === 'track') client.track({ ...common, ...who, event: c.event as string, properties: c.props });
  else if (c.type === 'page') client.page({ ...common, ...who, name: c.event, properties: c.props });
  else if (c.type === 'screen') client.screen({ ...common, ...who, name: c.event, properties: c.props });
  else if (c.type === 'identify') client.identify({ ...common, ...who, traits: c.props });
  else if (c.type === 'group') client.group({ ...common, ...who, groupId: c.groupId as string, traits: c.props });
  else client.alias({ ...common, userId: c.userId as string, previousId: c.previousId as string });
}

/** The row a call must be: the documented mapping, values as sent. */
function expectMapped(row: Record<string, unknown>, c: Call): void {
  expect(row.event_type).toBe(c.type);
  expect(row.event ?? '').toBe(c.event ?? '');
  expect(row.distinct_id ?? '').toBe(c.userId ?? '');
  expect(row.anonymous_id ?? '').toBe(c.anonymousId ?? '');
  expect(row.ts).toBe(TS);
  expect(row.message_id).toBe(c.messageId);
  // An alias has no properties: the column is empty, as for a push without them.
  if (c.props === undefined) expect(row.properties ?? '').toBe('');
  else expect(canonical(row.properties)).toBe(canonical(c.props));
  const context = JSON.parse(String(row.context)) as { library?: { name?: string } };
  expect(context.library?.name).toBe('@segment/analytics-node');
  const extra = JSON.parse(String(row.extra)) as Record<string, unknown>;
  expect(typeof extra.sentAt).toBe('string');
  expect(extra.writeKey).toBeUndefined();
  if (c.groupId !== undefined) expect(extra.groupId).toBe(c.groupId);
  if (c.previousId !== undefined) expect(extra.previousId).toBe(c.previousId);
}

const icebird = serveStoreToIcebird();

describe('Segment rows in the Iceberg table, erased by userId and anonymousId (issue 46)', () => {
  let stack: TestStack;
  let dir: string;
  let table: IcebergTable;
  const app = uniqueName('segerase').replace(/[^A-Za-z0-9._~-]/g, '');

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'segment-erasure-'));
    const keys = join(dir, 'keys.json');
    writeFileSync(keys, JSON.stringify({ [KEY]: { app } }));
    stack = await startTestStack(
      {
        SEGMENT_WRITE_KEYS_FILE: keys,
        ...FAST_ICEBERG_ENV,
      },
      { api: true, encoder: true, rollup: true },
    );
    const rootUri = storeRootUri(stack.store);
    icebird.route(rootUri, stack.store);
    table = readOnlyTable(stack.store, app, rootUri);
  });
  afterAll(async () => {
    await stack?.shutdown();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  const batchFiles = (): string[] =>
    readdirSync(join(stack.dataDir, 'events', app)).filter((f) => f.endsWith('.parquet'));
  const fileRows = (): Promise<Record<string, unknown>[]> =>
    duckQuery(
      `SELECT event_type, event, distinct_id, anonymous_id, ts, message_id, properties, context, extra FROM read_parquet(${sqlString(join(stack.dataDir, 'events', app, '*.parquet'))}) ORDER BY message_id`,
    );
  const tableRows = async (): Promise<Record<string, unknown>[]> =>
    (await table.load()) === undefined ? [] : icebergRead({ tableUrl: table.location });
  const byId = (rows: Record<string, unknown>[]): Map<string, Record<string, unknown>> =>
    new Map(rows.map((r) => [String(r.message_id), r]));
  /** A row's values, for "unchanged" (the JSON columns compared as JSON, the rest as read). */
  const values = (r: Record<string, unknown>): string =>
    ['event_type', 'event', 'distinct_id', 'anonymous_id', 'ts', 'message_id', 'properties', 'context', 'extra']
      .map((k) => canonical(r[k] ?? null))
      .join('\u0000');

  it(
    'every call is one mapped row in the batch files and the table; erasing a userId and an anonymousId removes exactly their rows',
    { timeout: 180_000 },
    async () => {
      const erasedUser = callsOf(ERASED_USER, true);
      const kept = callsOf(KEPT_USER, true);
      const erasedAnon = callsOf(ERASED_ANON, false);
      const all = [...erasedUser, ...kept, ...erasedAnon];
      // flushAt 7: several /v1/batch requests, each a batch file with both users' events in some.
      const client = new Analytics({ writeKey: KEY, host: stack.url, flushAt: 7, flushInterval: 60_000 });
      for (let i = 0; i < all.length; i++) send(client, all[(i * 7) % all.length] as Call);
      await client.closeAndFlush({ timeout: 30_000 });
      expect(new Set(all.map((c) => c.messageId)).size).toBe(all.length);

      // The batch files: one row per call, mapped.
      const files = await waitFor(
        async () => {
          const rows = batchFiles().length > 0 ? await fileRows() : [];
          return rows.length >= all.length ? rows : undefined;
        },
        60_000,
        'every call in the batch files',
      );
      expect(batchFiles().length).toBeGreaterThan(1);
      expect(files).toHaveLength(all.length);
      const inFiles = byId(files);
      for (const c of all) expectMapped(inFiles.get(c.messageId) ?? {}, c);

      // The Iceberg table, read by icebird: the same rows.
      const before = await waitFor(
        async () => {
          const rows = await tableRows();
          return rows.length >= all.length ? rows : undefined;
        },
        90_000,
        'every call in the Iceberg table',
      );
      expect(before).toHaveLength(all.length);
      const inTable = byId(before);
      for (const c of all) expectMapped(inTable.get(c.messageId) ?? {}, c);

      // Erase one user by userId and the visitor by anonymousId.
      const id = await requestErasure(stack.url, app, admin, {
        distinct_ids: [ERASED_USER],
        anonymous_ids: [ERASED_ANON],
      });
      const done = await erasureFinished(stack.url, id, admin, 120_000);
      expect(done.state, String(done.error)).toBe('completed');

      // Exactly the kept user's rows remain, unchanged, in the batch files and in the table.
      const keptIds = kept.map((c) => c.messageId).sort();
      const filesAfter = await fileRows();
      expect(filesAfter.map((x) => String(x.message_id)).sort()).toEqual(keptIds);
      for (const x of filesAfter) expect(values(x)).toBe(values(inFiles.get(String(x.message_id)) ?? {}));
      const tableAfter = await tableRows();
      expect(tableAfter.map((x) => String(x.message_id)).sort()).toEqual(keptIds);
      for (const x of tableAfter) expect(values(x)).toBe(values(inTable.get(String(x.message_id)) ?? {}));
      for (const x of [...filesAfter, ...tableAfter]) {
        expect(x.distinct_id).not.toBe(ERASED_USER);
        expect(x.anonymous_id ?? '').not.toBe(ERASED_ANON);
      }
    },
  );
});
