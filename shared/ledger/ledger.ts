import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { Redis } from 'ioredis';
import { batchIdMs, randomSuffix } from '../ids.js';

const here = new URL('.', import.meta.url);
const script = (name: string): string => readFileSync(new URL(name, here), 'utf8');

/** Outcome of minting: a new id, or the id an earlier push with the same idempotency key got. */
export interface MintResult {
  batchId: string;
  deduplicated: boolean;
}

/**
 * What the list route may show: ids strictly below `id` (`below`), or up to and including it
 * (`upTo`). A `below` bound may be a bare 13-digit ms, which hides every id of that ms.
 */
export type ListBound = { kind: 'below'; id: string } | { kind: 'upTo'; id: string };

/** True when `id` may be listed under `bound`. */
export function visibleUnder(bound: ListBound, id: string): boolean {
  return bound.kind === 'below' ? id < bound.id : id <= bound.id;
}

type MintArgs = [string, string, string, string, string, string, string, string, string];
interface LedgerCommands {
  ingestMint(...args: MintArgs): Promise<[string, number]>;
  ingestRelease(k1: string, k2: string, k3: string, k4: string, k5: string, k6: string, a1: string, a2: string, a3: string, a4: string, a5: string): Promise<number>;
  ingestListBound(k1: string, k2: string): Promise<[string, string, string]>;
  ingestListWritten(k1: string, k2: string, k3: string, k4: string, a1: string, a2: string): Promise<string[]>;
}

/**
 * Id minting and the in-flight ledger behind the gap-free `?after=` promise. Every key
 * carries the hash tag `{<namespace>}` so each script's keys live in one Redis Cluster slot.
 */
export class BatchLedger {
  readonly namespace: string;
  private readonly redis: Redis & LedgerCommands;

  constructor(redis: Redis, namespace: string) {
    this.namespace = namespace;
    if (!('ingestMint' in redis)) {
      redis.defineCommand('ingestMint', { numberOfKeys: 4, lua: script('mint_batch-4.lua') });
      redis.defineCommand('ingestRelease', { numberOfKeys: 6, lua: script('release_batch-6.lua') });
      redis.defineCommand('ingestListBound', { numberOfKeys: 2, lua: script('list_bound-2.lua') });
      redis.defineCommand('ingestListWritten', { numberOfKeys: 4, lua: script('list_written-4.lua') });
    }
    this.redis = redis as Redis & LedgerCommands;
  }

  private key(part: string): string {
    return `{${this.namespace}}:${part}`;
  }

  pendingKey(prefix: string): string {
    return this.key(`pending:${prefix}`);
  }

  /** The Redis key remembering an idempotency scope (digest keeps key length bounded). */
  idemKey(scope: string): string {
    return this.key(`idem:${createHash('sha256').update(scope).digest('hex')}`);
  }

  /**
   * Mints the next id for `prefix` and marks it in flight. With `idempotency`, a key seen within
   * `windowSeconds` returns the id it got the first time instead.
   */
  async mint(prefix: string, opts: { idempotencyScope?: string; windowSeconds?: number; clockMs?: number } = {}): Promise<MintResult> {
    const useIdem = opts.idempotencyScope !== undefined && (opts.windowSeconds ?? 0) > 0;
    const [batchId, existed] = await this.redis.ingestMint(
      this.key('clock'),
      this.pendingKey(prefix),
      useIdem ? this.idemKey(opts.idempotencyScope as string) : this.key('idem:-'),
      this.key('prefixes'),
      randomSuffix(),
      String(opts.windowSeconds ?? 0),
      useIdem ? '1' : '0',
      opts.clockMs === undefined ? '' : String(opts.clockMs),
      prefix,
    );
    return { batchId, deduplicated: existed === 1 };
  }

  /** Takes `batchId` out of flight (no file: dead-lettered or never enqueued); with `forgetScope`, also forgets its idempotency key. */
  async release(prefix: string, batchId: string, forgetScope?: string): Promise<boolean> {
    return this.releaseWith(prefix, batchId, { forgetScope });
  }

  /**
   * Takes `batchId` out of flight once its file is durable, and indexes it so list pages after a
   * recent cursor come from Redis instead of a store listing. Ids older than `indexSeconds` leave
   * the index (0 keeps no limit).
   */
  async markWritten(prefix: string, batchId: string, indexSeconds: number): Promise<boolean> {
    const cutoff = indexSeconds > 0 ? String(Date.now() - indexSeconds * 1000).padStart(13, '0') : '';
    return this.releaseWith(prefix, batchId, { written: true, cutoff });
  }

  private async releaseWith(prefix: string, batchId: string, o: { forgetScope?: string; written?: boolean; cutoff?: string }): Promise<boolean> {
    const n = await this.redis.ingestRelease(
      this.pendingKey(prefix),
      this.key('prefixes'),
      o.forgetScope === undefined ? this.key('idem:-') : this.idemKey(o.forgetScope),
      this.key(`written:${prefix}`),
      this.key(`floor:${prefix}`),
      this.key('clock'),
      batchId,
      prefix,
      o.forgetScope === undefined ? '0' : '1',
      o.written ? '1' : '0',
      o.cutoff ?? '',
    );
    return n === 1;
  }

  /**
   * The list bound and, when the index of written ids covers `after`, the next `count` written
   * ids after it (unfiltered by the bound). `ids` is null when the store must be listed instead.
   */
  async listWritten(prefix: string, after: string, count: number): Promise<{ bound: ListBound; ids: string[] | null }> {
    const [kind, id, covered, ...ids] = await this.redis.ingestListWritten(
      this.key('clock'),
      this.pendingKey(prefix),
      this.key(`written:${prefix}`),
      this.key(`floor:${prefix}`),
      after,
      String(count),
    );
    const bound: ListBound = kind === 'upTo' ? { kind: 'upTo', id: id as string } : { kind: 'below', id: id as string };
    return { bound, ids: covered === '1' ? ids : null };
  }

  /** The bound the list route filters by (see list_bound-2.lua). */
  async listBound(prefix: string): Promise<ListBound> {
    const [oldest, last, nowMs] = await this.redis.ingestListBound(this.key('clock'), this.pendingKey(prefix));
    if (oldest) return { kind: 'below', id: oldest };
    if (last) return { kind: 'upTo', id: last };
    return { kind: 'below', id: nowMs };
  }

  /** List prefixes that have ids in flight. */
  async prefixes(): Promise<string[]> {
    return this.redis.smembers(this.key('prefixes'));
  }

  /** The oldest in-flight ids of a prefix (at most `count`). */
  async oldestPending(prefix: string, count: number): Promise<string[]> {
    return this.redis.zrange(this.pendingKey(prefix), '0', String(count - 1));
  }

  /** True while `batchId` is in flight under `prefix`. */
  async isPending(prefix: string, batchId: string): Promise<boolean> {
    return (await this.redis.zscore(this.pendingKey(prefix), batchId)) !== null;
  }

  /** Age in ms of the oldest in-flight id over all prefixes (0 when nothing is in flight). */
  async maxLagMs(nowMs = Date.now()): Promise<number> {
    let max = 0;
    for (const prefix of (await this.prefixes()).slice(0, 10_000)) {
      const [oldest] = await this.oldestPending(prefix, 1);
      if (oldest) max = Math.max(max, nowMs - batchIdMs(oldest));
    }
    return max;
  }
}
