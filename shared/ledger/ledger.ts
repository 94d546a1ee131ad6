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
  ingestRelease(k1: string, k2: string, k3: string, a1: string, a2: string, a3: string): Promise<number>;
  ingestListBound(k1: string, k2: string): Promise<[string, string, string]>;
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
      redis.defineCommand('ingestRelease', { numberOfKeys: 3, lua: script('release_batch-3.lua') });
      redis.defineCommand('ingestListBound', { numberOfKeys: 2, lua: script('list_bound-2.lua') });
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

  /** Takes `batchId` out of flight; with `forgetScope`, also forgets its idempotency key. */
  async release(prefix: string, batchId: string, forgetScope?: string): Promise<boolean> {
    const n = await this.redis.ingestRelease(
      this.pendingKey(prefix),
      this.key('prefixes'),
      forgetScope === undefined ? this.key('idem:-') : this.idemKey(forgetScope),
      batchId,
      prefix,
      forgetScope === undefined ? '0' : '1',
    );
    return n === 1;
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
