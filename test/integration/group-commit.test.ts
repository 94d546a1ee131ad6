/**
 * The API's group commit (QUEUE_GROUP_MAX) on a real redis-server, BullMQ, the product's stack and
 * DuckDB: pushes that arrive while an add runs ride in one group job, and each batch is still its
 * own id and its own file; the reaper, a retried push, a failing member and the dead-letter replay
 * all find a member through its group.
 */
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { type Job, Queue, UnrecoverableError, Worker } from 'bullmq';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BatchLedger } from '../../shared/ledger/ledger.js';
import { reapOnce } from '../../shared/ledger/reaper.js';
import {
  BATCH_JOB_OPTIONS,
  type BatchGroupJob,
  type BatchJob,
  JOB_NAME,
  groupJobId,
  packBody,
} from '../../shared/redis/jobs/push.js';
import { batchIdMs } from '../../shared/ids.js';
import { duckQuery, sqlString } from '../helpers/duckdb.js';
import { batchBody } from '../helpers/events.js';
import { waitFor } from '../helpers/proc.js';
import { ADMIN_TOKEN, type StackProbe, type TestStack, stackProbe, startTestStack } from '../helpers/stack.js';

const PUSHES = 40;

describe('group commit of enqueues (QUEUE_GROUP_MAX)', () => {
  let stack: TestStack;
  let redis: Redis;
  let queue: Queue;
  let ledger: BatchLedger;
  let probe: StackProbe;

  beforeAll(async () => {
    stack = await startTestStack({ IDEMPOTENCY_WINDOW_SECONDS: '600', QUEUE_GROUP_MAX: '8' });
    probe = stackProbe(stack.queueName);
    ({ redis, queue, ledger } = probe);
  });
  afterAll(async () => {
    await probe?.close();
    await stack?.shutdown();
  });

  const workers = (): Worker[] => [...(stack.encoder?.workers ?? [])];
  const pause = async (): Promise<void> => {
    await Promise.all(workers().map((w) => w.pause()));
  };
  const resume = async (): Promise<void> => {
    await Promise.all(workers().map((w) => w.resume()));
  };
  const files = (app: string): string[] => {
    const dir = join(stack.dataDir, 'events', app);
    return existsSync(dir)
      ? readdirSync(dir)
          .filter((f) => f.endsWith('.parquet'))
          .sort()
      : [];
  };
  async function push(
    app: string,
    body: string,
    key: string,
  ): Promise<{ status: number; batchId?: string; error?: string }> {
    const r = await fetch(`${stack.url}/push/events/${app}/x`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': key },
      body,
    });
    const j = (await r.json()) as { batchId?: string; error?: string };
    return { status: r.status, ...j };
  }
  const adminAuth = { Authorization: `Bearer ${ADMIN_TOKEN}` };

  /**
   * Holds this stack's queue adds (this test file's process only) until `ready()` holds, plus a
   * moment for the pushes that minted to submit, or 30 s; returns a function that ends the hold.
   */
  function holdAddsUntil(ready: () => Promise<boolean>): () => void {
    const add = Queue.prototype.add;
    let open: () => void = () => undefined;
    const gate = new Promise<void>((resolve) => {
      open = resolve;
    });
    // Not ready in time: the hold ends anyway and the assertions on the queue say what happened.
    void waitFor(ready, 30_000, 'every push minted')
      .then(
        () => new Promise((r) => setTimeout(r, 200)),
        () => undefined,
      )
      .finally(open);
    Queue.prototype.add = async function held(this: Queue, ...args: Parameters<Queue['add']>) {
      if (this.name === stack.queueName) await gate;
      return add.apply(this, args);
    } as Queue['add'];
    return () => {
      open();
      Queue.prototype.add = add;
    };
  }

  it(
    'pushes that arrive together ride in group jobs; each batch is still its own id and file, listed in order',
    { timeout: 120_000 },
    async () => {
      await pause();
      const app = 'grp';
      const bodies = Array.from({ length: PUSHES }, (_, i) => batchBody(1 + (i % 3)));
      // "Together" made certain: the API's first add is held until every push has minted its id, so
      // the others are submitted while it runs. Left to timing, 40 concurrent pushes made 37 jobs (2
      // groups) on a quiet machine and no group at all in one CI run on Node 24.
      const release = holdAddsUntil(
        async () => (await ledger.oldestPending(`events/${app}/`, PUSHES + 1)).length >= PUSHES,
      );
      const answers = await Promise.all(bodies.map((b, i) => push(app, b, `grp-${i}`))).finally(release);
      expect(answers.map((a) => a.status)).toEqual(bodies.map(() => 200));
      const ids = answers.map((a) => a.batchId as string);
      expect(new Set(ids).size).toBe(PUSHES);

      // In the queue: fewer jobs than batches, at least one group, every batch in exactly one job.
      const jobs = (await queue.getJobs(['waiting', 'prioritized', 'delayed'], 0, -1)).filter((j): j is Job =>
        Boolean(j),
      );
      const groups = jobs.filter((j) => (j.data as { v: number }).v === 2);
      expect(groups.length).toBeGreaterThan(0);
      expect(jobs.length).toBeLessThan(PUSHES);
      const carried = jobs.flatMap((j) =>
        (j.data as { v: number }).v === 2
          ? (j.data as BatchGroupJob).batches.map((b) => b.batchId)
          : [(j.data as BatchJob).batchId],
      );
      expect([...carried].sort()).toEqual([...ids].sort());
      for (const g of groups) {
        const members = (g.data as BatchGroupJob).batches.map((b) => b.batchId);
        expect(members.length).toBeLessThanOrEqual(8);
        // The job's id is g-<its first member>, never a batch id; every member points at it in the ledger.
        expect(g.id).toBe(groupJobId(members[0] as string));
        for (const m of members) expect(await ledger.groupOf(m)).toBe(g.id);
      }
      const grouped = await stack.api!.app.metrics.enqueueGroupBatches.get();
      expect(grouped.values.find((v) => v.metricName?.endsWith('_count'))?.value).toBe(groups.length);

      // The reaper (grace 0) sees every member's job: nothing is released while they wait.
      expect(await reapOnce(ledger, queue, 0)).toEqual({ orphans: 0, dead: 0 });
      for (const id of ids) expect(await ledger.isPending(`events/${app}/`, id)).toBe(true);

      // A retried push of a member: the same id, nothing new queued.
      const member = groups[0] ? (groups[0].data as BatchGroupJob).batches[1]?.batchId : undefined;
      expect(member).toBeDefined();
      const at = ids.indexOf(member as string);
      const retry = await push(app, bodies[at] as string, `grp-${at}`);
      expect(retry).toMatchObject({ status: 200, batchId: member });
      expect(await queue.getJobCountByTypes('waiting', 'prioritized', 'delayed')).toBe(jobs.length);

      await resume();
      await waitFor(async () => files(app).length === PUSHES, 60_000, 'every batch written');
      expect(files(app)).toEqual([...ids].sort().map((id) => `${id}.parquet`));
      // Each file holds its own push's events, stamped with its own id's instant.
      const rows = await duckQuery(
        `SELECT parse_filename(filename, true) AS id, count(*)::INTEGER AS n, epoch_ms(min(received_at))::BIGINT AS at FROM read_parquet(${sqlString(join(stack.dataDir, 'events', app, '*.parquet'))}, filename = true) GROUP BY 1 ORDER BY 1`,
      );
      expect(rows).toEqual(
        [...ids].sort().map((id) => ({ id, n: 1 + (ids.indexOf(id) % 3), at: String(batchIdMs(id)) })),
      );
      // Released: no id in flight, no member left in the ledger's group hash.
      await waitFor(async () => (await redis.hlen(ledger.groupsKey())) === 0, 10_000, 'group entries released');
      expect(await ledger.oldestPending(`events/${app}/`, 10)).toEqual([]);
      const listed = await fetch(`${stack.url}/list/events/${app}?limit=1000`, { headers: adminAuth });
      expect(((await listed.json()) as { items: string[] }).items).toEqual(
        [...ids].sort().map((id) => `${id}.parquet`),
      );
    },
  );

  /** Adds a group job of `bodies` (each minted in the ledger, members noted) as the API does; returns the members' ids in the job's order. */
  async function addGroup(
    app: string,
    bodies: (string | null)[],
    opts: { attempts?: number; newestFirst?: boolean } = {},
  ): Promise<string[]> {
    const prefix = `events/${app}/`;
    const batches: BatchJob[] = [];
    for (const body of bodies) {
      const { batchId } = await ledger.mint(prefix);
      const packed = await packBody(Buffer.from(body ?? batchBody(2)));
      // null: a damaged payload (it does not come to the size its job records).
      batches.push({
        v: 1,
        collection: 'events',
        key: `${prefix}${batchId}.parquet`,
        prefix,
        params: { app },
        batchId,
        receivedAt: batchIdMs(batchId),
        events: 2,
        ...packed,
        bodyBytes: body === null ? packed.bodyBytes + 1 : packed.bodyBytes,
      });
    }
    // The API puts the first-queued batch first; that need not be the oldest id of the group.
    if (opts.newestFirst) batches.unshift(batches.pop() as BatchJob);
    const id = groupJobId((batches[0] as BatchJob).batchId);
    await ledger.noteGroup(
      id,
      batches.map((b) => b.batchId),
    );
    const group: BatchGroupJob = { v: 2, batches };
    await queue.add(JOB_NAME, group, {
      ...BATCH_JOB_OPTIONS,
      ...(opts.attempts ? { attempts: opts.attempts } : {}),
      jobId: id,
    });
    return batches.map((b) => b.batchId);
  }

  it(
    'the reaper leaves waiting members alone, whatever their order in the job, and releases them once their job is gone',
    { timeout: 60_000 },
    async () => {
      await pause();
      const app = 'grp-reap';
      const prefix = `events/${app}/`;
      const ids = await addGroup(app, [batchBody(1), batchBody(1), batchBody(1)], { newestFirst: true });
      const jobId = groupJobId(ids[0] as string);
      // The scan walks a prefix's ids oldest first: here the job's first member is its newest.
      expect((await ledger.oldestPending(prefix, 1))[0]).toBe(ids[1]);
      expect(await reapOnce(ledger, queue, 0)).toEqual({ orphans: 0, dead: 0 });
      expect(await ledger.oldestPending(prefix, 10)).toEqual([...ids].sort());
      // The group job gone without its members written (removed by hand): they are orphans now.
      await (await queue.getJob(jobId))?.remove();
      expect(await reapOnce(ledger, queue, 0)).toEqual({ orphans: 3, dead: 0 });
      expect(await ledger.oldestPending(prefix, 10)).toEqual([]);
      expect(await redis.hlen(ledger.groupsKey())).toBe(0);
      await resume();
    },
  );

  it(
    'a member that fails leaves its group as a job of its own and is dead-lettered alone; its siblings are written',
    { timeout: 60_000 },
    async () => {
      const app = 'grp-bad';
      // The failing member first: the group job's id is not its id, so it can be queued under its own.
      const [bad, a, c] = (await addGroup(app, [null, batchBody(2), batchBody(2)])) as [string, string, string];
      await waitFor(
        async () => files(app).length === 2 && (await queue.getJobState(bad)) === 'failed',
        30_000,
        'siblings written, the damaged member dead-lettered',
      );
      expect(files(app)).toEqual([`${a}.parquet`, `${c}.parquet`]);
      expect(await queue.getJobState(groupJobId(bad))).toBe('unknown');
      const failed = (await (await fetch(`${stack.url}/admin/failed`, { headers: adminAuth })).json()) as {
        items: { batchId: string; key: string | null; failedReason: string }[];
      };
      const item = failed.items.find((i) => i.batchId === bad);
      expect(item).toMatchObject({ key: `events/${app}/${bad}.parquet` });
      expect(item?.failedReason).toMatch(/payload holds .* bytes, the job says/);
      // The dead member no longer holds the list back (released by the encoder or the reaper).
      await reapOnce(ledger, queue, 0);
      expect(await ledger.oldestPending(`events/${app}/`, 10)).toEqual([]);
      expect(await ledger.groupOf(bad)).toBeNull();
    },
  );

  it(
    'a dead-lettered group is released by the reaper, listed with its members, and replayed whole',
    { timeout: 60_000 },
    async () => {
      await pause();
      const app = 'grp-dead';
      const ids = await addGroup(app, [batchBody(2), batchBody(2), batchBody(2)], { attempts: 1 });
      // Another consumer fails the whole job for good (what an encoder of the old version does with a group).
      const failing = new Worker(
        stack.queueName,
        async () => {
          throw new UnrecoverableError('test: group fails for good');
        },
        { connection: redis.duplicate({ maxRetriesPerRequest: null }) },
      );
      try {
        await waitFor(
          async () => (await queue.getJobState(groupJobId(ids[0] as string))) === 'failed',
          20_000,
          'group dead-lettered',
        );
      } finally {
        await failing.close();
      }
      // Grace 0: every member is released as dead through its group.
      expect(await reapOnce(ledger, queue, 0)).toEqual({ orphans: 0, dead: 3 });
      expect(await redis.hexists(ledger.groupsKey(), ids[1] as string)).toBe(0);

      const failed = (await (await fetch(`${stack.url}/admin/failed`, { headers: adminAuth })).json()) as {
        items: { batchId: string; members?: string[]; events: number | null }[];
      };
      const gid = groupJobId(ids[0] as string);
      expect(failed.items.find((i) => i.batchId === gid)).toMatchObject({ members: ids, events: 6 });
      const reissue = await fetch(`${stack.url}/admin/replay/${gid}?reissue=1`, { method: 'POST', headers: adminAuth });
      expect(((await reissue.json()) as { outcome: string }).outcome).toBe('bad-job');
      const replay = await fetch(`${stack.url}/admin/replay/${gid}`, { method: 'POST', headers: adminAuth });
      expect(replay.status).toBe(200);
      expect(((await replay.json()) as { outcome: string }).outcome).toBe('replayed');
      // Back in flight, members findable again, so the reaper leaves them alone while they wait.
      for (const id of ids) expect(await ledger.isPending(`events/${app}/`, id)).toBe(true);
      for (const id of ids) expect(await ledger.groupOf(id)).toBe(gid);
      await resume();
      await waitFor(async () => files(app).length === 3, 30_000, 'replayed group written');
      expect(files(app)).toEqual([...ids].sort().map((id) => `${id}.parquet`));
    },
  );
});
