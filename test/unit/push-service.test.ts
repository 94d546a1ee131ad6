/**
 * Every outcome of the push path (services/api/push/) over in-memory ports: no Redis, no queue,
 * no sockets. The integration tests (idempotency, body-dedup, late-enqueue, reliability, shards,
 * group-commit, …) prove the same paths against real Redis and BullMQ.
 */
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { batchIdMs } from '../../shared/ids.js';
import type { IdempotencyClaim, MintResult } from '../../shared/ledger/ledger.js';
import { MemoryLedger } from '../../shared/ledger/memory.js';
import type { ParquetEncodeThread } from '../../shared/parquet/encode-thread-pool.js';
import { prepareBatch } from '../../shared/parquet/encode.js';
import { parseStoragePath } from '../../shared/paths.js';
import { type BatchJob, unpackBody } from '../../shared/redis/jobs/push.js';
import { MemoryObjectStore } from '../../shared/store/memory/index.js';
import { Registry } from 'prom-client';
import { bestEffortCounter } from '../../shared/best-effort.js';
import { StoreError } from '../../shared/errors.js';
import { withTimeout } from '../../shared/timeout.js';
import { outcomeAnswer } from '../../services/api/error-map.js';
import { pushResultOf } from '../../services/api/plugin.js';
import { InlinePush } from '../../services/api/push/inline.js';
import type { PushOutcome, PushRequest } from '../../services/api/push/outcome.js';
import {
  type BatchFiles,
  type Clock,
  EnqueueRefused,
  type EnqueueTicket,
  type JobSink,
  type Ledger,
} from '../../services/api/push/ports.js';
import { PushService, type PushServiceOptions } from '../../services/api/push/service.js';

const T0 = 1_782_933_157_000;
const TEMPLATE = parseStoragePath('events/{app}/{batchId}');
const ENQUEUE_TIMEOUT_MS = 3000;

/** Time that moves only when the path sleeps; `within` gives up after a few real ms so a hung port ends the wait. */
class FakeClock implements Clock {
  ms = T0;
  /** Called on every sleep, after time moved: a test makes things happen "meanwhile". */
  onSleep: (() => void) | undefined;
  now(): number {
    return this.ms;
  }
  async sleep(ms: number): Promise<void> {
    this.ms += ms;
    this.onSleep?.();
  }
  within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
    return withTimeout(p, Math.min(ms, 20), what);
  }
}

/** The ledger's promises (mint_batches-n.lua, idem_lookup-1.lua, release_batches-n.lua), in memory. */
class FakeLedger implements Ledger {
  readonly pending = new Map<string, Set<string>>();
  readonly claims = new Map<string, { batchId: string; bodyHash: string }>();
  readonly groups = new Map<string, string>();
  private counter = 0;
  /** What the next calls do instead of answering: reject (Redis down) or never settle. */
  mintFails: 'reject' | 'hang' | undefined;
  releaseFails = false;
  pollFails = false;
  constructor(private readonly clock: FakeClock) {}

  private slot(claim: IdempotencyClaim): string {
    return `${claim.family}\n${claim.scope}`;
  }

  async mint(prefix: string, claim?: IdempotencyClaim): Promise<MintResult> {
    if (this.mintFails === 'reject') throw new Error('connect ECONNREFUSED');
    if (this.mintFails === 'hang') return new Promise(() => undefined);
    const seen = claim && claim.windowSeconds > 0 ? this.claims.get(this.slot(claim)) : undefined;
    if (seen)
      return {
        batchId: seen.batchId,
        deduplicated: seen.bodyHash === claim?.bodyHash,
        conflict: seen.bodyHash !== claim?.bodyHash,
      };
    const batchId = `${this.clock.ms}-${String(this.counter++).padStart(4, '0')}-000000`;
    let set = this.pending.get(prefix);
    if (!set) this.pending.set(prefix, (set = new Set()));
    set.add(batchId);
    if (claim && claim.windowSeconds > 0) this.claims.set(this.slot(claim), { batchId, bodyHash: claim.bodyHash });
    return { batchId, deduplicated: false, conflict: false };
  }

  async lookup(_prefix: string, claim: IdempotencyClaim): Promise<MintResult | null> {
    if (this.mintFails === 'reject') throw new Error('connect ECONNREFUSED');
    const seen = this.claims.get(this.slot(claim));
    return seen
      ? {
          batchId: seen.batchId,
          deduplicated: seen.bodyHash === claim.bodyHash,
          conflict: seen.bodyHash !== claim.bodyHash,
        }
      : null;
  }

  async release(prefix: string, batchId: string, forget?: IdempotencyClaim): Promise<boolean> {
    if (this.releaseFails) throw new Error('connect ECONNREFUSED');
    if (forget) this.claims.delete(this.slot(forget));
    return this.reap(prefix, batchId);
  }

  /** What the reaper does to an orphan: out of flight, its claim left to expire. */
  reap(prefix: string, batchId: string): boolean {
    this.groups.delete(batchId);
    return this.pending.get(prefix)?.delete(batchId) ?? false;
  }

  async isPending(prefix: string, batchId: string): Promise<boolean> {
    if (this.pollFails) throw new Error('Connection is closed.');
    return this.pending.get(prefix)?.has(batchId) ?? false;
  }

  async groupOf(_prefix: string, batchId: string): Promise<string | null> {
    return this.groups.get(batchId) ?? null;
  }

  inFlight(prefix: string): string[] {
    return [...(this.pending.get(prefix) ?? [])];
  }
}

/**
 * A queue in memory. `mode` says what the next adds do: `ok`, `refused` (the add never ran),
 * `lost` (sent, no answer, never lands), `late` (sent, no answer, but it lands), `waiting` (held
 * in a group that never forms, so it can be withdrawn).
 */
class FakeSink implements JobSink {
  readonly jobs = new Map<string, BatchJob>();
  mode: 'ok' | 'refused' | 'lost' | 'late' | 'waiting' = 'ok';
  replicas: 'ok' | 'timeout' = 'ok';
  submit(job: BatchJob): EnqueueTicket {
    const group = (): readonly BatchJob[] => [job];
    switch (this.mode) {
      case 'ok':
        this.jobs.set(job.batchId, job);
        return { done: Promise.resolve(), group, withdraw: () => false };
      case 'refused':
        return {
          done: Promise.reject(new EnqueueRefused(new Error('OOM command not allowed'))),
          group,
          withdraw: () => false,
        };
      case 'late':
        this.jobs.set(job.batchId, job);
        return { done: new Promise(() => undefined), group, withdraw: () => false };
      case 'lost':
        return { done: new Promise(() => undefined), group, withdraw: () => false };
      case 'waiting':
        return { done: new Promise(() => undefined), group: () => undefined, withdraw: () => true };
    }
  }
  async hasJob(_prefix: string, jobId: string): Promise<boolean> {
    return this.jobs.has(jobId);
  }
  async awaitReplicas(): Promise<void> {
    if (this.replicas === 'timeout') throw new Error('shard 0: 0 of 1 replicas acknowledged within 1000 ms');
  }
}

class FakeFiles implements BatchFiles {
  readonly keys = new Set<string>();
  down = false;
  async exists(key: string): Promise<boolean> {
    if (this.down) throw new StoreError('store unreachable', { retriable: true });
    return this.keys.has(key);
  }
}

function setup(over: Partial<PushServiceOptions> = {}) {
  const clock = new FakeClock();
  const ledger = new FakeLedger(clock);
  const jobs = new FakeSink();
  const files = new FakeFiles();
  const seen = { unknown: 0, enqueuedBytes: [] as number[], encodeFailed: [] as string[], mints: 0 };
  const service = new PushService({
    collection: 'events',
    template: TEMPLATE,
    ledger,
    jobs,
    files,
    clock,
    keyWindowSeconds: 3600,
    bodyWindowSeconds: 300,
    enqueueTimeoutMs: ENQUEUE_TIMEOUT_MS,
    observe: {
      enqueueUnknown: () => seen.unknown++,
      enqueuedBytes: (n) => seen.enqueuedBytes.push(n),
      encodeFailed: (err) => seen.encodeFailed.push(err.message),
      mintSeconds: () => seen.mints++,
    },
    ...over,
  });
  return { clock, ledger, jobs, files, service, seen };
}

const sha = (b: Buffer): string => createHash('sha256').update(b).digest('hex');

function request(events: object[], opts: { key?: string; app?: string; messageIds?: boolean } = {}): PushRequest {
  const body = Buffer.from(JSON.stringify({ data: { events }, baseHash: null }));
  return {
    params: { app: opts.app ?? 'app1' },
    body,
    events: events.length,
    everyEventHasMessageId: opts.messageIds ?? false,
    idempotencyKey: opts.key,
    hash: sha(body),
    decodedHash: sha(body),
  };
}

const PREFIX = 'events/app1/';
const EVENTS = [{ event: 'open', message_id: 'm1' }];

describe('PushService.accept: every outcome of the push path', () => {
  it('runs the four numbered steps in order', () => {
    expect(setup().service.stepNames).toEqual(['claim-id', 'build-payload', 'enqueue', 'durability-wait']);
  });

  it('stepSeconds: each step it ran, in order, with its time; a step that ends the push is told too, the steps after it are not', async () => {
    const steps: [string, number][] = [];
    const stepSeconds = (step: string, s: number): void => void steps.push([step, s]);
    const { service } = setup({ observe: { stepSeconds } });
    expect((await service.accept(request([{ event: 'a' }]))).kind).toBe('accepted');
    expect(steps.map(([name]) => name)).toEqual(['claim-id', 'build-payload', 'enqueue', 'durability-wait']);
    for (const [, s] of steps) expect(s >= 0 && s < 5).toBe(true);
    // The claim that finds the mint down ends the path: only it is told.
    steps.length = 0;
    const down = setup({ observe: { stepSeconds } });
    down.ledger.mintFails = 'reject';
    expect((await down.service.accept(request([{ event: 'a' }]))).kind).toBe('unavailable');
    expect(steps.map(([name]) => name)).toEqual(['claim-id']);
    // An empty batch runs no step.
    steps.length = 0;
    expect((await service.accept(request([]))).kind).toBe('empty');
    expect(steps).toEqual([]);
  });

  it('accepted: a new id, its job in the queue (key, payload, received_at = the id instant), the id in flight', async () => {
    const { service, jobs, ledger, seen } = setup();
    const req = request([{ event: 'a' }, { event: 'b' }]);
    const out = await service.accept(req);
    expect(out).toEqual({
      kind: 'accepted',
      batchId: expect.stringMatching(/^\d{13}-\d{4}-/),
      hash: req.hash,
      events: 2,
    });
    if (out.kind !== 'accepted') return;
    const job = jobs.jobs.get(out.batchId);
    expect(job).toMatchObject({
      v: 1,
      collection: 'events',
      key: `${PREFIX}${out.batchId}.parquet`,
      prefix: PREFIX,
      params: { app: 'app1' },
      batchId: out.batchId,
      events: 2,
    });
    expect(job?.receivedAt).toBe(batchIdMs(out.batchId));
    expect((await unpackBody(job as BatchJob)).equals(req.body)).toBe(true);
    expect(ledger.inFlight(PREFIX)).toEqual([out.batchId]);
    expect(seen.enqueuedBytes).toEqual([(job as BatchJob).body.length + 2048]);
  });

  it('empty: no id, nothing minted or queued', async () => {
    const { service, jobs, seen } = setup();
    const req = request([]);
    expect(await service.accept(req)).toEqual({ kind: 'empty', hash: req.hash });
    expect(jobs.jobs.size).toBe(0);
    expect(seen.mints).toBe(0);
  });

  it('duplicate by Idempotency-Key: the first id, one job', async () => {
    const { service, jobs } = setup();
    const first = await service.accept(request([{ event: 'a' }], { key: 'k-1' }));
    const again = await service.accept(request([{ event: 'a' }], { key: 'k-1' }));
    expect(first.kind).toBe('accepted');
    expect(again).toEqual({ ...first, kind: 'duplicate' });
    expect(jobs.jobs.size).toBe(1);
  });

  it('duplicate by body: only when every event has a message_id, and only with the window on', async () => {
    const withIds = setup();
    const a = await withIds.service.accept(request(EVENTS, { messageIds: true }));
    const b = await withIds.service.accept(request(EVENTS, { messageIds: true }));
    expect(b).toEqual({ ...a, kind: 'duplicate' });
    expect(withIds.jobs.jobs.size).toBe(1);

    // Two devices sending the same heartbeat without message_ids: two batches.
    const withoutIds = setup();
    const c = await withoutIds.service.accept(request([{ event: 'beat' }]));
    const d = await withoutIds.service.accept(request([{ event: 'beat' }]));
    expect([c.kind, d.kind]).toEqual(['accepted', 'accepted']);
    expect(withoutIds.jobs.jobs.size).toBe(2);

    const windowOff = setup({ bodyWindowSeconds: 0 });
    await windowOff.service.accept(request(EVENTS, { messageIds: true }));
    expect((await windowOff.service.accept(request(EVENTS, { messageIds: true }))).kind).toBe('accepted');
  });

  it('a key is not a body: a keyed and a keyless push of the same body are two batches', async () => {
    const { service } = setup();
    const keyed = await service.accept(request(EVENTS, { key: 'k', messageIds: true }));
    const keyless = await service.accept(request(EVENTS, { messageIds: true }));
    expect(keyed.kind).toBe('accepted');
    expect(keyless.kind).toBe('accepted');
  });

  it('conflict: the same key with another body names the key, the window and the first batch; nothing queued', async () => {
    const { service, jobs } = setup();
    const first = await service.accept(request([{ event: 'a' }], { key: 'k-2' }));
    const other = await service.accept(request([{ event: 'b' }], { key: 'k-2' }));
    if (first.kind !== 'accepted') throw new Error(first.kind);
    expect(other).toEqual({
      kind: 'conflict',
      batchId: first.batchId,
      reason: `Idempotency-Key "k-2" was already used within the last 3600 s for a different body (batch ${first.batchId}); this body was not stored. Send a new key for a new batch`,
    });
    expect(jobs.jobs.size).toBe(1);
  });

  it('unavailable before enqueue: the mint fails or hangs; maybeQueued false, nothing queued', async () => {
    for (const mode of ['reject', 'hang'] as const) {
      const { service, ledger, jobs } = setup();
      ledger.mintFails = mode;
      expect(await service.accept(request([{ event: 'a' }]))).toEqual({
        kind: 'unavailable',
        maybeQueued: false,
        reason: 'queue unavailable (Redis)',
        retryAfter: 1,
      });
      expect(jobs.jobs.size).toBe(0);
    }
  });

  it('unavailable when the queue refused the add: the id leaves flight and the key is forgotten, so the retry is accepted', async () => {
    const { service, ledger, jobs } = setup();
    jobs.mode = 'refused';
    const req = request([{ event: 'a' }], { key: 'k-3' });
    expect(await service.accept(req)).toEqual({
      kind: 'unavailable',
      maybeQueued: false,
      reason: 'queue unavailable (Redis)',
      retryAfter: 1,
    });
    expect(ledger.inFlight(PREFIX)).toEqual([]);
    expect(ledger.claims.size).toBe(0);
    jobs.mode = 'ok';
    const retry = await service.accept(req);
    expect(retry.kind).toBe('accepted');
    expect(jobs.jobs.size).toBe(1);
  });

  it('unavailable when the add was withdrawn from a group that never formed: not queued, released', async () => {
    const { service, ledger, jobs } = setup();
    jobs.mode = 'waiting';
    expect(await service.accept(request([{ event: 'a' }]))).toMatchObject({ kind: 'unavailable', maybeQueued: false });
    expect(ledger.inFlight(PREFIX)).toEqual([]);
  });

  it('unavailable after an unknown enqueue outcome: maybeQueued, counted, the id stays in flight and the key claimed; the retry gets that batch once it lands', async () => {
    const { service, ledger, jobs, seen } = setup();
    jobs.mode = 'lost';
    const req = request([{ event: 'a' }], { key: 'k-4' });
    const out = await service.accept(req);
    expect(out).toEqual({
      kind: 'unavailable',
      maybeQueued: true,
      reason:
        'queue did not answer in time (Redis), so this batch may still be queued: send the same body (and Idempotency-Key) again to get its id',
      retryAfter: 1,
    });
    expect(seen.unknown).toBe(1);
    const [id] = ledger.inFlight(PREFIX);
    expect(id).toBeDefined();
    expect(ledger.claims.size).toBe(1);
    // The stalled add runs after all (late-enqueue.test.ts does this with a real stalled Redis).
    jobs.jobs.set(id as string, { batchId: id } as BatchJob);
    jobs.mode = 'ok';
    expect(await service.accept(req)).toEqual({ kind: 'duplicate', batchId: id, hash: req.hash, events: 1 });
    expect(jobs.jobs.size).toBe(1);
  });

  it('an add that timed out but landed is accepted (the job is found)', async () => {
    const { service, jobs, seen } = setup();
    jobs.mode = 'late';
    const out = await service.accept(request([{ event: 'a' }]));
    expect(out.kind).toBe('accepted');
    expect(seen.unknown).toBe(0);
    // Not counted as written bytes: the add did not answer.
    expect(seen.enqueuedBytes).toEqual([]);
  });

  it('durability wait timing out: maybeQueued (the job is queued); the retry once replicated gets the same id', async () => {
    const { service, jobs } = setup();
    jobs.replicas = 'timeout';
    const req = request([{ event: 'a' }], { key: 'k-5' });
    expect(await service.accept(req)).toEqual({
      kind: 'unavailable',
      maybeQueued: true,
      reason: 'batch not yet replicated (REDIS_WAIT_REPLICAS)',
      retryAfter: 1,
    });
    expect(jobs.jobs.size).toBe(1);
    const [queuedId] = [...jobs.jobs.keys()];
    // A retry while replicas still lag is not answered either.
    expect(await service.accept(req)).toMatchObject({ kind: 'unavailable', maybeQueued: true });
    jobs.replicas = 'ok';
    expect(await service.accept(req)).toMatchObject({ kind: 'duplicate', batchId: queuedId });
    expect(jobs.jobs.size).toBe(1);
  });

  it('lost first push recovered: its id was reaped before it was queued, so the retry mints anew and is accepted', async () => {
    const { service, ledger, jobs } = setup();
    const req = request([{ event: 'a' }], { key: 'k-6' });
    // The first push minted (and claimed the key), then its API died; the reaper released the id.
    const first = await ledger.mint(PREFIX, {
      family: 'key',
      scope: `events\n${PREFIX}\nk-6`,
      bodyHash: req.decodedHash,
      windowSeconds: 3600,
    });
    ledger.reap(PREFIX, first.batchId);
    const out = await service.accept(req);
    expect(out.kind).toBe('accepted');
    if (out.kind !== 'accepted') return;
    expect(out.batchId).not.toBe(first.batchId);
    expect([...jobs.jobs.keys()]).toEqual([out.batchId]);
    // The key now names the new batch.
    expect(await service.accept(req)).toMatchObject({ kind: 'duplicate', batchId: out.batchId });
  });

  it('a lost first push whose claim cannot be given back is minted again only once, then unavailable; each failed release is counted', async () => {
    const registry = new Registry();
    const counter = bestEffortCounter(registry);
    const { service, ledger, jobs, seen } = setup({ bestEffort: { counter } });
    const req = request([{ event: 'a' }], { key: 'k-7' });
    const first = await ledger.mint(PREFIX, {
      family: 'key',
      scope: `events\n${PREFIX}\nk-7`,
      bodyHash: req.decodedHash,
      windowSeconds: 3600,
    });
    ledger.reap(PREFIX, first.batchId);
    ledger.releaseFails = true;
    const mintsBefore = seen.mints;
    expect(await service.accept(req)).toEqual({
      kind: 'unavailable',
      maybeQueued: false,
      reason: 'an earlier push with this idempotency key was lost before it was queued',
      retryAfter: 1,
    });
    expect(seen.mints - mintsBefore).toBe(2);
    expect(jobs.jobs.size).toBe(0);
    expect((await counter.get()).values.find((v) => v.labels.what === 'push_release')?.value).toBe(2);
  });

  it('a retry of a push whose file is already written (id out of flight, job removed) is a duplicate', async () => {
    const { service, ledger, jobs, files } = setup();
    const req = request(EVENTS, { messageIds: true });
    const first = await service.accept(req);
    if (first.kind !== 'accepted') throw new Error(first.kind);
    // The encoder wrote the file, released the id and removed the job.
    files.keys.add(`${PREFIX}${first.batchId}.parquet`);
    ledger.reap(PREFIX, first.batchId);
    jobs.jobs.clear();
    jobs.replicas = 'timeout'; // answered from the store: no replica wait
    expect(await service.accept(req)).toEqual({ ...first, kind: 'duplicate' });
    expect(jobs.jobs.size).toBe(0);
    // The store unreachable then: unavailable (the batch may exist).
    files.down = true;
    expect(await service.accept(req)).toEqual({
      kind: 'unavailable',
      maybeQueued: true,
      reason: 'store unavailable',
      retryAfter: 1,
    });
  });

  it('a retry while the first push is between mint and enqueue waits for its job, then is a duplicate', async () => {
    const { service, ledger, jobs, clock } = setup();
    const req = request([{ event: 'a' }], { key: 'k-8' });
    const first = await ledger.mint(PREFIX, {
      family: 'key',
      scope: `events\n${PREFIX}\nk-8`,
      bodyHash: req.decodedHash,
      windowSeconds: 3600,
    });
    let sleeps = 0;
    clock.onSleep = () => {
      // The first push enqueues after a few polls.
      if (++sleeps === 3) jobs.jobs.set(first.batchId, { batchId: first.batchId } as BatchJob);
    };
    expect(await service.accept(req)).toEqual({ kind: 'duplicate', batchId: first.batchId, hash: req.hash, events: 1 });
    expect(sleeps).toBe(3);
    expect(jobs.jobs.size).toBe(1);
  });

  it('a retry finds the first push in a group job through the ledger', async () => {
    const { service, ledger, jobs } = setup();
    const req = request([{ event: 'a' }], { key: 'k-9' });
    const first = await ledger.mint(PREFIX, {
      family: 'key',
      scope: `events\n${PREFIX}\nk-9`,
      bodyHash: req.decodedHash,
      windowSeconds: 3600,
    });
    ledger.groups.set(first.batchId, `g-${first.batchId}`);
    jobs.jobs.set(`g-${first.batchId}`, { batchId: first.batchId } as BatchJob);
    expect(await service.accept(req)).toMatchObject({ kind: 'duplicate', batchId: first.batchId });
  });

  it('a retry while the first push is still in flight past the wait: unavailable, maybeQueued; within the bounded polls', async () => {
    const { service, ledger, clock } = setup();
    const req = request([{ event: 'a' }], { key: 'k-10' });
    await ledger.mint(PREFIX, {
      family: 'key',
      scope: `events\n${PREFIX}\nk-10`,
      bodyHash: req.decodedHash,
      windowSeconds: 3600,
    });
    let sleeps = 0;
    clock.onSleep = () => sleeps++;
    expect(await service.accept(req)).toEqual({
      kind: 'unavailable',
      maybeQueued: true,
      reason: 'an earlier push with this idempotency key is still being accepted',
      retryAfter: 1,
    });
    // Polls every 50 ms until enqueueTimeoutMs has passed.
    expect(sleeps).toBe(ENQUEUE_TIMEOUT_MS / 50);
  });

  it('a first push abandoned between mint and enqueue (its API died) is taken over: this body goes under its id', async () => {
    const { service, ledger, jobs, clock } = setup();
    const req = request([{ event: 'a' }], { key: 'k-11' });
    const first = await ledger.mint(PREFIX, {
      family: 'key',
      scope: `events\n${PREFIX}\nk-11`,
      bodyHash: req.decodedHash,
      windowSeconds: 3600,
    });
    // Long after the first push must have enqueued or given up: 2 × enqueueTimeoutMs + 1 s.
    clock.ms += 2 * ENQUEUE_TIMEOUT_MS + 1001;
    expect(await service.accept(req)).toEqual({ kind: 'duplicate', batchId: first.batchId, hash: req.hash, events: 1 });
    expect(jobs.jobs.get(first.batchId)?.receivedAt).toBe(batchIdMs(first.batchId));
  });

  it('Redis failing while a retry polls for the first push: unavailable, maybeQueued', async () => {
    const { service, ledger } = setup();
    const req = request([{ event: 'a' }], { key: 'k-12' });
    await ledger.mint(PREFIX, {
      family: 'key',
      scope: `events\n${PREFIX}\nk-12`,
      bodyHash: req.decodedHash,
      windowSeconds: 3600,
    });
    ledger.pollFails = true;
    expect(await service.accept(req)).toEqual({
      kind: 'unavailable',
      maybeQueued: true,
      reason: 'queue unavailable (Redis)',
      retryAfter: 1,
    });
  });

  it('build payload: a prepared body goes as its Parquet file; a failed encode falls back to the JSON and is observed', async () => {
    const body = Buffer.from(JSON.stringify({ data: { events: [{ event: 'x', message_id: 'm' }] } }));
    const prep = (): PushRequest => {
      const p = prepareBatch(body);
      if (!p.ok) throw new Error(p.reason);
      return { ...request([{}]), body, prepared: p.batch, hash: sha(body), decodedHash: sha(body) };
    };
    const plain = setup();
    const a = await plain.service.accept(prep());
    if (a.kind !== 'accepted') throw new Error(a.kind);
    expect(plain.jobs.jobs.get(a.batchId)).toMatchObject({ encoding: 'parquet', jsonBytes: body.length });

    const broken = {
      encode: () => Promise.reject(new Error('encode thread closed')),
    } as unknown as ParquetEncodeThread;
    const failing = setup({ encodeThread: () => broken });
    const b = await failing.service.accept(prep());
    if (b.kind !== 'accepted') throw new Error(b.kind);
    const job = failing.jobs.jobs.get(b.batchId) as BatchJob;
    expect(job.encoding).not.toBe('parquet');
    expect((await unpackBody(job)).equals(body)).toBe(true);
    expect(failing.seen.encodeFailed).toEqual(['encode thread closed']);
  });

  it('keyClaimed: false before the first push and with the window off, true after, unavailable when Redis fails', async () => {
    const { service, ledger } = setup();
    const req = request([{ event: 'a' }], { key: 'k-13' });
    expect(await service.keyClaimed(req.params, 'k-13', req.decodedHash)).toBe(false);
    await service.accept(req);
    expect(await service.keyClaimed(req.params, 'k-13', req.decodedHash)).toBe(true);
    // Another body under the key is claimed too (the push then gets its conflict).
    expect(await service.keyClaimed(req.params, 'k-13', 'other')).toBe(true);
    ledger.mintFails = 'reject';
    expect(await service.keyClaimed(req.params, 'k-13', req.decodedHash)).toMatchObject({
      kind: 'unavailable',
      reason: 'queue unavailable (Redis)',
    });
    expect(await setup({ keyWindowSeconds: 0 }).service.keyClaimed(req.params, 'k-13', req.decodedHash)).toBe(false);
  });
});

describe('InlinePush (no queue)', () => {
  const inline = (store = new MemoryObjectStore()) => ({
    store,
    push: new InlinePush({ template: TEMPLATE, store, ledger: new MemoryLedger() }),
  });
  const withText = (r: PushRequest): PushRequest => ({ ...r, text: r.body.toString('utf8') });

  it('accepted: the file is written under the new id; empty stores nothing', async () => {
    const { store, push } = inline();
    const out = await push.accept(withText(request([{ event: 'a' }])));
    if (out.kind !== 'accepted') throw new Error(out.kind);
    expect(await store.listKeys('events/app1/')).toEqual([`events/app1/${out.batchId}.parquet`]);
    expect((await push.accept(withText(request([])))).kind).toBe('empty');
  });

  it('unavailable when the store fails; rejected for bad data', async () => {
    const store = new MemoryObjectStore();
    store.putBytes = () => Promise.reject(new StoreError('down', { retriable: true }));
    const { push } = inline(store);
    expect(await push.accept(withText(request([{ event: 'a' }])))).toEqual({
      kind: 'unavailable',
      maybeQueued: false,
      reason: 'store unavailable',
      retryAfter: 1,
    });
    const bad = { ...request([{ event: 'a' }]), text: '{"data":{"events":[1]}}' };
    expect(await inline().push.accept(bad)).toEqual({
      kind: 'rejected',
      reason: 'data.events[0] must be a JSON object, got a number',
    });
  });
});

describe('outcomes to HTTP: the error map (services/api/error-map.ts)', () => {
  it.each<[PushOutcome, object]>([
    [
      { kind: 'accepted', batchId: 'b1', hash: 'h', events: 1 },
      { hash: 'h', batchId: 'b1', events: 1, deduplicated: false },
    ],
    [
      { kind: 'duplicate', batchId: 'b1', hash: 'h', events: 1 },
      { hash: 'h', batchId: 'b1', events: 1, deduplicated: true },
    ],
    [
      { kind: 'empty', hash: 'h' },
      { hash: 'h', batchId: null, events: 0, deduplicated: false },
    ],
  ])('success %o has no error answer', (outcome, result) => {
    expect(outcomeAnswer(outcome)).toBeNull();
    expect(pushResultOf(outcome)).toEqual(result);
  });

  it.each<[PushOutcome, number, Record<string, string>, object]>([
    [{ kind: 'conflict', batchId: 'b1', reason: 'used' }, 422, {}, { error: 'used', code: 'idempotency_conflict' }],
    [{ kind: 'rejected', reason: 'bad' }, 400, {}, { error: 'bad', code: 'bad_envelope' }],
    [
      { kind: 'unavailable', maybeQueued: true, reason: 'queue unavailable (Redis)', retryAfter: 1 },
      503,
      { 'Retry-After': '1' },
      { error: 'queue unavailable (Redis); retry later', code: 'unavailable' },
    ],
    [
      { kind: 'unavailable', maybeQueued: false, reason: 'x', retryAfter: 7 },
      503,
      { 'Retry-After': '7' },
      { error: 'x; retry later', code: 'unavailable' },
    ],
  ])('%o → %i', (outcome, status, headers, body) => {
    expect(outcomeAnswer(outcome)).toEqual({ status, headers, body });
    expect(pushResultOf(outcome)).toBeNull();
  });

  it('nothing under services/api/push/ knows HTTP or Express', () => {
    const dir = fileURLToPath(new URL('../../services/api/push/', import.meta.url));
    const files = readdirSync(dir, { recursive: true, encoding: 'utf8' }).filter((f) => f.endsWith('.ts'));
    expect(files.length).toBeGreaterThanOrEqual(18);
    for (const f of files) {
      const src = readFileSync(join(dir, f), 'utf8');
      expect(src, f).not.toMatch(
        /from 'express'|HttpError|ApiError|error-map|\/body\.js'|\/http\.js'|\b(?:200|400|404|408|410|413|415|416|422|429|500|503)\b/,
      );
    }
  });
});
