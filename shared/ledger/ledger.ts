import { createHash } from 'node:crypto';
import type { JobKeys } from '../redis/bullmq-keys.js';
import { batchIdMs, randomSuffix } from '../ids.js';
import { ledgerKeys } from '../redis/keyspace.js';
import { type RedisClient, redisCall } from '../redis/connection.js';
import { type ScriptedRedis, withScripts } from '../redis/scripts.js';
import { GroupCommitter } from '../group-commit.js';

export type { JobKeys };

/** Outcome of minting: a new id, or the id an earlier push with the same idempotency claim got. */
export interface MintResult {
  batchId: string;
  /** The claim was seen in its window with the same body: `batchId` is the first push's id, nothing minted. */
  deduplicated: boolean;
  /** The Idempotency-Key was seen in its window with a DIFFERENT body: `batchId` is the first push's id, nothing minted. */
  conflict: boolean;
}

/**
 * What makes a push a retry. `key`: the client's Idempotency-Key within `scope` (the body
 * digest is kept so the same key with another body is told apart). `body`: no key, the body's
 * sha256 within `scope`, for a short window meant for retries only.
 */
export interface IdempotencyClaim {
  family: 'key' | 'body';
  /** Collection, prefix and the key (or body hash): anything that must match for a retry. */
  scope: string;
  /** Sha256 hex of the decoded body (after any Content-Encoding): the same JSON coded another way is the same body. */
  bodyHash: string;
  windowSeconds: number;
}

/**
 * Idempotency entries are sharded so each bucket hash holds about 100 entries at this push
 * rate: Redis keeps a hash of at most 128 short entries as one compact listpack (68 B per keyed
 * entry measured by `npm run bench -- --only redis-memory`, against ~213 B for one string key
 * per entry). Faster rates, or windows past ~14 h (the shard count stops at 65,536), only make
 * the hashes convert to Redis' larger hashtable encoding (~120 B per entry).
 * docs/decisions/0019-idempotency-buckets.md.
 */
const DESIGN_PUSHES_PER_SECOND = 500;
const ENTRIES_PER_HASH = 100;

/**
 * Bucket length (seconds) of an idempotency window: a claim is looked up in the current bucket
 * and the back = ceil(window / length) before it, so it is recognised for at least the window and
 * its hash lives (back + 1) × length at most: 1.25 windows when the window is a multiple of 4 s
 * (see mint_batches-n.lua).
 */
export function idempotencyBucketSeconds(windowSeconds: number): number {
  return Math.max(1, Math.ceil(windowSeconds / 4));
}

/** Shards per bucket for a window: a power of two from 16 to 65,536. */
export function idempotencyShards(windowSeconds: number): number {
  const want = Math.ceil((DESIGN_PUSHES_PER_SECOND * idempotencyBucketSeconds(windowSeconds)) / ENTRIES_PER_HASH);
  let n = 16;
  while (n < want && n < 65_536) n *= 2;
  return n;
}

/** How long a replay's marker keeps the reaper from releasing the id it just put back in flight. */
export const REPLAY_MARK_SECONDS = 60;

/**
 * What the list route may show: ids strictly below `id` (`below`), or up to and including it
 * (`upTo`). A `below` bound may be a bare 13-digit ms, which hides every id of that ms.
 */
export type ListBound = { kind: 'below'; id: string } | { kind: 'upTo'; id: string };

/** True when `id` may be listed under `bound`. */
export function visibleUnder(bound: ListBound, id: string): boolean {
  return bound.kind === 'below' ? id < bound.id : id <= bound.id;
}

/** What one shard's upkeep scan found (see scan_pending-2.lua). */
export interface PendingScan {
  orphans: number;
  dead: number;
  /** Oldest id still in flight in this namespace, '' when none. */
  oldest: string;
  /** Prefixes looked at. */
  prefixes: number;
}

/** Upkeep looks at this many prefixes per namespace (shard) at most per pass. */
export const MAX_SCAN_PREFIXES = 10_000;

/**
 * Mints of one namespace that wait while a mint call runs leave together, at most this many to
 * a call of mint_batches-n.lua: one round trip, one script run, one write on the socket for
 * all of them; releases likewise (release_batches-n.lua). Bounds a call's size and its time on
 * Redis. docs/decisions/0026-ledger-call-groups.md.
 */
export const LEDGER_GROUP_MAX = 32;

/** One push's mint as mint_batches-n.lua takes it: its two keys and six arguments; its answer once sent. */
interface MintRequest {
  keys: [pending: string, idemPrefix: string];
  argv: (string | Buffer)[];
  result?: MintResult;
}

/** One release as release_batches-n.lua takes it: its four keys and eight arguments; whether the id was in flight once sent. */
interface ReleaseRequest {
  keys: [pending: string, idemPrefix: string, written: string, floor: string];
  argv: (string | Buffer)[];
  wasPending?: boolean;
}

/** Where one claim lives: its shard's key prefix, the field and the bucket length. */
interface ClaimSlot {
  keyPrefix: string;
  field: Buffer;
  windowSeconds: number;
}

/**
 * Id minting, the in-flight ledger behind the gap-free `?after=` promise
 * (docs/decisions/0002-list-watermark-and-reaper.md), the written-id index
 * and the idempotency entries. Every key carries the hash tag `{<namespace>}` so each script's
 * keys live in one Redis Cluster slot; the names come from shared/redis/keyspace.ts (`ledgerKeys`).
 * Key families and their bounds (sizes in docs/reliability.md, "Sizing Redis"):
 *
 * - `clock`: one hash per namespace.
 * - `prefixes`: a set of the prefixes with ids in flight; a prefix leaves with its last id.
 * - `pending:<prefix>`: in-flight ids; Redis drops the key with its last member; every id
 *   leaves when written, dead-lettered, or reaped (`ORPHAN_GRACE_SECONDS`).
 * - `written:<prefix>`, `floor:<prefix>`: the list index; trimmed to `LIST_INDEX_SECONDS` and
 *   expiring that long after the prefix's last write (docs/decisions/0003-written-index-for-list.md).
 * - `idem:k:<shard>:<bucket>`, `idem:b:<shard>:<bucket>`: idempotency entries (keyed / body);
 *   a bucket hash expires one window plus one bucket (window / 4) after it starts.
 * - `replaying:<id>`: a replay's marker, `REPLAY_MARK_SECONDS`.
 * - `groups`: one hash per namespace, member id → the id of the group job it rides in; an entry
 *   leaves with its member's id from flight, so it holds at most the ids in flight.
 *
 * A driver error that says Redis is unreachable leaves every method as a `RedisUnavailable`
 * (shared/errors.ts; classified by `redisCall`, shared/redis/connection.ts); any other error unchanged.
 */
export class BatchLedger {
  readonly namespace: string;
  private readonly redis: ScriptedRedis;
  private readonly shard: { index: number; count: number };
  private readonly mints: GroupCommitter<MintRequest>;
  private readonly releases: GroupCommitter<ReleaseRequest>;

  /**
   * `shard`: this namespace is shard `index` of `count` (QUEUE_SHARDS): its ids' random suffix is
   * ≡ index (mod count), so ids minted on different shards' clocks never collide and an id names
   * its shard. `groupMax`: mints per call at most, and releases per call
   * ({@link LEDGER_GROUP_MAX}; 1: each alone).
   */
  constructor(
    redis: RedisClient,
    namespace: string,
    opts: { shard?: { index: number; count: number }; groupMax?: number } = {},
  ) {
    this.namespace = namespace;
    this.shard = opts.shard ?? { index: 0, count: 1 };
    this.redis = withScripts(redis);
    const group = { maxItems: opts.groupMax ?? LEDGER_GROUP_MAX, maxBytes: Number.MAX_SAFE_INTEGER, sizeOf: () => 0 };
    this.mints = new GroupCommitter<MintRequest>({ ...group, send: (requests) => this.sendMints(requests, '') });
    this.releases = new GroupCommitter<ReleaseRequest>({ ...group, send: (requests) => this.sendReleases(requests) });
  }

  /** Mint calls sent to Redis and the mints they carried (this process, this namespace). */
  get mintCalls(): { sends: number; mints: number } {
    return { sends: this.mints.sends, mints: this.mints.items };
  }

  /** Release calls sent to Redis and the releases they carried (this process, this namespace). */
  get releaseCalls(): { sends: number; releases: number } {
    return { sends: this.releases.sends, releases: this.releases.items };
  }

  private clockKey(): string {
    return ledgerKeys.clock(this.namespace);
  }

  pendingKey(prefix: string): string {
    return ledgerKeys.pending(this.namespace, prefix);
  }

  prefixesKey(): string {
    return ledgerKeys.prefixes(this.namespace);
  }

  writtenKey(prefix: string): string {
    return ledgerKeys.written(this.namespace, prefix);
  }

  floorKey(prefix: string): string {
    return ledgerKeys.floor(this.namespace, prefix);
  }

  replayMarkKey(batchId: string): string {
    return ledgerKeys.replaying(this.namespace, batchId);
  }

  groupsKey(): string {
    return ledgerKeys.groups(this.namespace);
  }

  /**
   * Records that `members` ride in the queue job `jobId` (a group job, shared/redis/jobs/push.ts). Sent with
   * that job's add (again if it failed while the add landed); each entry leaves with its member's
   * release (file written, dead-lettered, failed push, or reaped), so the hash holds at most the
   * ids in flight.
   */
  async noteGroup(jobId: string, members: readonly string[]): Promise<void> {
    if (members.length === 0) return;
    await redisCall(this.redis.hset(this.groupsKey(), ...members.flatMap((m) => [m, jobId])));
  }

  /** The id of the group job `batchId` rides in, or null when it is no group's member (its job, if any, has its own id). */
  async groupOf(batchId: string): Promise<string | null> {
    return redisCall(this.redis.hget(this.groupsKey(), batchId));
  }

  /** Where a claim's entry lives. The field is 16 bytes of sha256(scope); its first 4 bytes pick the shard. */
  private slot(claim: IdempotencyClaim): ClaimSlot {
    const digest = createHash('sha256').update(`${claim.family}\n${claim.scope}`).digest();
    const shard = digest.readUInt32BE(0) % idempotencyShards(claim.windowSeconds);
    return {
      keyPrefix: ledgerKeys.idemBucketPrefix(this.namespace, claim.family, shard),
      field: digest.subarray(0, 16),
      windowSeconds: claim.windowSeconds,
    };
  }

  /**
   * Mints the next id for `prefix` and marks it in flight. With a claim seen within its window,
   * returns the id the claim got the first time instead (`conflict` when a keyed claim's body
   * differs). A claim with `windowSeconds` 0 is ignored.
   */
  async mint(prefix: string, opts: { idempotency?: IdempotencyClaim; clockMs?: number } = {}): Promise<MintResult> {
    const claim = opts.idempotency && opts.idempotency.windowSeconds > 0 ? opts.idempotency : undefined;
    const slot = claim ? this.slot(claim) : undefined;
    const request: MintRequest = {
      keys: [this.pendingKey(prefix), slot ? slot.keyPrefix : ledgerKeys.idemUnused(this.namespace)],
      argv: [
        shardSuffix(this.shard.index, this.shard.count),
        String(slot?.windowSeconds ?? 0),
        slot ? '1' : '0',
        prefix,
        slot ? slot.field : '',
        claim ? digestOfBody(claim) : '',
      ],
    };
    // A test's clock override goes alone: a call has one clock.
    if (opts.clockMs !== undefined) await this.sendMints([request], String(opts.clockMs));
    else await this.mints.submit(request).done;
    return request.result as MintResult;
  }

  /** One call of mint_batches-n.lua for `requests`, in order; each gets its answer. */
  private async sendMints(requests: readonly MintRequest[], clockOverride: string): Promise<void> {
    const keys: string[] = [this.clockKey(), this.prefixesKey()];
    const argv: (string | Buffer)[] = [clockOverride];
    for (const r of requests) {
      keys.push(...r.keys);
      argv.push(...r.argv);
    }
    const answers = await redisCall(this.redis.ingestMint(keys.length, ...keys, ...argv));
    if (answers.length !== 2 * requests.length)
      throw new Error(`mint_batches answered ${answers.length} values for ${requests.length} mints`);
    requests.forEach((r, i) => {
      const status = Number(answers[2 * i + 1]);
      r.result = { batchId: String(answers[2 * i]), deduplicated: status === 1, conflict: status === 2 };
    });
  }

  /**
   * What mint would find for `claim` right now, without minting or claiming anything: the id
   * the claim already names and whether the body is the same (`conflict`: a keyed claim's body
   * differs), or null when it names nothing (or its window is 0). Read-only, one slot.
   */
  async lookup(claim: IdempotencyClaim, opts: { clockMs?: number } = {}): Promise<MintResult | null> {
    if (claim.windowSeconds <= 0) return null;
    const slot = this.slot(claim);
    const [batchId, status] = await redisCall(
      this.redis.ingestIdemLookup(
        slot.keyPrefix,
        String(slot.windowSeconds),
        opts.clockMs === undefined ? '' : String(opts.clockMs),
        slot.field,
        digestOfBody(claim),
      ),
    );
    return status === 0 ? null : { batchId, deduplicated: status === 1, conflict: status === 2 };
  }

  /** Takes `batchId` out of flight (no file: never enqueued, or dead-lettered); with `forget`, also forgets that claim if it still names this id. */
  async release(prefix: string, batchId: string, forget?: IdempotencyClaim): Promise<boolean> {
    return this.releaseWith(prefix, batchId, { forget: forget && forget.windowSeconds > 0 ? forget : undefined });
  }

  /**
   * The reaper's release: like `release`, but a no-op while a replay has just put the id back in
   * flight (see release_unless_replaying-3.lua).
   */
  async reap(prefix: string, batchId: string): Promise<boolean> {
    return (
      (await redisCall(
        this.redis.ingestReap(
          this.pendingKey(prefix),
          this.prefixesKey(),
          this.replayMarkKey(batchId),
          batchId,
          prefix,
        ),
      )) === 1
    );
  }

  /**
   * Puts a dead-lettered `batchId` back in flight before its job is retried, so the list route
   * waits for it again, and marks it as being replayed so the reaper cannot release it on a
   * stale reading of its job's state. The marker expires after REPLAY_MARK_SECONDS.
   */
  async markReplaying(prefix: string, batchId: string): Promise<void> {
    await redisCall(
      this.redis
        .multi()
        .set(this.replayMarkKey(batchId), '1', 'EX', REPLAY_MARK_SECONDS)
        .zadd(this.pendingKey(prefix), 0, batchId)
        .sadd(this.prefixesKey(), prefix)
        .exec(),
    );
  }

  /**
   * Takes `batchId` out of flight once its file is durable, and indexes it so list pages after a
   * recent cursor come from Redis instead of a store listing. Ids older than `indexSeconds` leave
   * the index, and the prefix's index keys expire `indexSeconds` after its last write (0 keeps
   * no limit on either).
   */
  async markWritten(prefix: string, batchId: string, indexSeconds: number): Promise<boolean> {
    const cutoff = indexSeconds > 0 ? String(Date.now() - indexSeconds * 1000).padStart(13, '0') : '';
    return this.releaseWith(prefix, batchId, { written: true, cutoff, ttl: indexSeconds });
  }

  private async releaseWith(
    prefix: string,
    batchId: string,
    o: { forget?: IdempotencyClaim; written?: boolean; cutoff?: string; ttl?: number },
  ): Promise<boolean> {
    const slot = o.forget ? this.slot(o.forget) : undefined;
    const request: ReleaseRequest = {
      keys: [
        this.pendingKey(prefix),
        slot ? slot.keyPrefix : ledgerKeys.idemUnused(this.namespace),
        this.writtenKey(prefix),
        this.floorKey(prefix),
      ],
      argv: [
        batchId,
        prefix,
        slot ? '1' : '0',
        o.written ? '1' : '0',
        o.cutoff ?? '',
        String(o.ttl ?? 0),
        String(slot?.windowSeconds ?? 0),
        slot ? slot.field : '',
      ],
    };
    await this.releases.submit(request).done;
    return request.wasPending === true;
  }

  /** One call of release_batches-n.lua for `requests`, in order; each learns whether its id was in flight. */
  private async sendReleases(requests: readonly ReleaseRequest[]): Promise<void> {
    const keys: string[] = [this.prefixesKey(), this.clockKey(), this.groupsKey()];
    const argv: (string | Buffer)[] = [];
    for (const r of requests) {
      keys.push(...r.keys);
      argv.push(...r.argv);
    }
    const answers = await redisCall(this.redis.ingestRelease(keys.length, ...keys, ...argv));
    if (answers.length !== requests.length)
      throw new Error(`release_batches answered ${answers.length} values for ${requests.length} releases`);
    requests.forEach((r, i) => {
      r.wasPending = Number(answers[i]) === 1;
    });
  }

  /**
   * The list bound and, when the index of written ids covers `after`, the next `count` written
   * ids after it (unfiltered by the bound). `ids` is null when the store must be listed instead.
   */
  async listWritten(prefix: string, after: string, count: number): Promise<{ bound: ListBound; ids: string[] | null }> {
    const [kind, id, covered, ...ids] = await redisCall(
      this.redis.ingestListWritten(
        this.clockKey(),
        this.pendingKey(prefix),
        this.writtenKey(prefix),
        this.floorKey(prefix),
        after,
        String(count),
      ),
    );
    const bound: ListBound = kind === 'upTo' ? { kind: 'upTo', id: id as string } : { kind: 'below', id: id as string };
    return { bound, ids: covered === '1' ? ids : null };
  }

  /** The bound the list route filters by (see list_bound-2.lua). */
  async listBound(prefix: string): Promise<ListBound> {
    return (await this.listBoundAt(prefix)).bound;
  }

  /**
   * The list bound and the TIME of the Redis that owns this namespace's clock, read in one script
   * (so on a Cluster the time is that of the master this shard mints on, not of any node).
   */
  async listBoundAt(prefix: string): Promise<{ bound: ListBound; nowMs: number }> {
    const [oldest, last, nowMs] = await redisCall(this.redis.ingestListBound(this.clockKey(), this.pendingKey(prefix)));
    const bound: ListBound = oldest
      ? { kind: 'below', id: oldest }
      : last
        ? { kind: 'upTo', id: last }
        : { kind: 'below', id: nowMs };
    return { bound, nowMs: Number(nowMs) };
  }

  /** The ms of the last id minted in this namespace (0: none yet). */
  async lastMintedMs(): Promise<number> {
    return Number((await redisCall(this.redis.hget(this.clockKey(), 'ms'))) ?? 0);
  }

  /**
   * Moves this namespace's clock to `ms` when it is behind: the next id is minted after `ms`
   * (used when the shard layout changes, so a prefix's ids keep increasing on its new shard).
   */
  async seedClockAfter(ms: number): Promise<void> {
    await redisCall(this.redis.ingestSeedClock(this.clockKey(), String(ms)));
  }

  /** List prefixes that have ids in flight. */
  async prefixes(): Promise<string[]> {
    return redisCall(this.redis.smembers(this.prefixesKey()));
  }

  /** The oldest in-flight ids of a prefix (at most `count`). */
  async oldestPending(prefix: string, count: number): Promise<string[]> {
    return redisCall(this.redis.zrange(this.pendingKey(prefix), '0', String(count - 1)));
  }

  /** True while `batchId` is in flight under `prefix`. */
  async isPending(prefix: string, batchId: string): Promise<boolean> {
    return (await redisCall(this.redis.zscore(this.pendingKey(prefix), batchId))) !== null;
  }

  /** Age in ms of the oldest in-flight id over all prefixes (0 when nothing is in flight). One round trip. */
  async maxLagMs(nowMs = Date.now()): Promise<number> {
    const { oldest } = await this.scanPending();
    return oldest ? Math.max(0, nowMs - batchIdMs(oldest)) : 0;
  }

  /**
   * One round trip over every prefix (at most MAX_SCAN_PREFIXES): the oldest in-flight id and,
   * with `reap`, the release of ids minted more than `graceMs` ago whose job is gone (orphans)
   * or failed for good (dead), unless a replay marked them. `perPrefix` bounds the ids released
   * per prefix per pass.
   */
  async scanPending(reap?: {
    jobs: JobKeys;
    graceMs: number;
    nowMs?: number;
    perPrefix?: number;
  }): Promise<PendingScan> {
    const cutoff = reap ? String(Math.max(0, (reap.nowMs ?? Date.now()) - reap.graceMs)).padStart(13, '0') : '';
    const [orphans, dead, oldest, prefixes] = await redisCall(
      this.redis.ingestScanPending(
        this.prefixesKey(),
        reap ? reap.jobs.failed : this.prefixesKey(),
        ledgerKeys.pendingPrefix(this.namespace),
        ledgerKeys.replayingPrefix(this.namespace),
        reap ? reap.jobs.jobKeyPrefix : '',
        reap ? '1' : '0',
        cutoff,
        String(MAX_SCAN_PREFIXES),
        String(reap?.perPrefix ?? 50),
        this.groupsKey(),
      ),
    );
    return { orphans, dead, oldest, prefixes };
  }
}

/** What a keyed claim's entry keeps of its body: 16 bytes of the digest ('' for a body claim, whose scope holds it). */
function digestOfBody(claim: IdempotencyClaim): Buffer | '' {
  return claim.family === 'key' ? Buffer.from(claim.bodyHash.slice(0, 32), 'hex') : '';
}

/**
 * Six hex chars of randomness whose value is ≡ `index` (mod `count`): the shard an id was minted
 * on, kept in the id's existing format. With one shard: plain randomness.
 */
export function shardSuffix(index: number, count: number): string {
  if (count <= 1) return randomSuffix();
  const r = parseInt(randomSuffix(), 16);
  let v = r - (r % count) + index;
  if (v > 0xffffff) v -= count;
  return v.toString(16).padStart(6, '0');
}

/** The shard (of `count`) a batch id was minted on (see shardSuffix). */
export function shardOfBatchId(batchId: string, count: number): number {
  return count <= 1 ? 0 : parseInt(batchId.slice(-6), 16) % count;
}
