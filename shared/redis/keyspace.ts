/**
 * Every Redis key family the product writes, named once: the builders below are the only code
 * that spells a key (what BullMQ writes for its queues is named by its adapter,
 * shared/redis/bullmq-keys.ts, and re-exported here). A family that is not in {@link KEY_FAMILIES}
 * does not exist: test/integration/keyspace.test.ts runs every feature, SCANs Redis and fails on
 * any key {@link keyFamily} cannot name.
 *
 * Hash tags (Redis Cluster routes a key by the part between its first `{` and the next `}`):
 * - `{<ns>}`: one shard's ledger. `ns` is the shard's namespace: `<QUEUE_NAME>` with one shard on
 *   one Redis, the shard's tag `<QUEUE_NAME>:<i>[:<j>]` otherwise (shared/redis/shards.ts). A shard's
 *   BullMQ queue carries the same tag on a Cluster or with QUEUE_SHARDS > 1, so every ledger
 *   script, and the reaper's scan of the shard's jobs, is single-slot.
 * - `{<QUEUE_NAME>}`: the deployment's own keys (the shard marker, rollup locks, the rollup queue
 *   on a Cluster).
 * - none: rate-limit counters and cap nonces, each used by one single-key command, so on a
 *   Cluster they spread over the masters.
 *
 * Bounds and bytes per entry: docs/reliability.md, "Sizing Redis" (and "Redis keys of the rollup
 * service"); each family below names its row.
 */
import { isBatchId } from '../ids.js';
import { LEGACY_QUEUE_PREFIX, parseQueueKey, queueKey, queueKeyPrefix } from './bullmq-keys.js';

export { LEGACY_QUEUE_PREFIX, queueKey, queueKeyPrefix };

/** The names of the key families, as {@link keyFamily} reports them. */
export type KeyFamilyName =
  | 'clock'
  | 'prefixes'
  | 'pending'
  | 'written'
  | 'floor'
  | 'idem:k'
  | 'idem:b'
  | 'replaying'
  | 'groups'
  | 'shards'
  | 'rollup:lock'
  | 'rollup:dirty'
  | 'queue'
  | 'rollup-queue'
  | 'erase-queue'
  | 'rate-limit'
  | 'app-budget'
  | 'cap-nonce';

/** What one key family is, for docs, the soak's report and the keyspace test. */
export interface KeyFamily {
  /** The key as docs/reliability.md spells it. */
  pattern: string;
  /** Redis type of its keys (`mixed`: BullMQ's own keys of several types). */
  type: 'string' | 'hash' | 'set' | 'zset' | 'mixed';
  /** The hash tag its keys carry ('' for none). */
  tag: '{<ns>}' | '{<QUEUE_NAME>}' | 'bull or {<tag>}' | 'bull or {<QUEUE_NAME>}' | '';
  /** What bounds it (TTL, cap, or a lifetime tied to work in flight). */
  bound: string;
  /** The docs/reliability.md row that sizes it. */
  sizedIn: string;
}

const SIZING = 'docs/reliability.md, "Sizing Redis"';
const ROLLUP_KEYS = 'docs/reliability.md, "Redis keys of the rollup service"';

/** Every key family the product writes. */
export const KEY_FAMILIES: Readonly<Record<KeyFamilyName, KeyFamily>> = {
  /** A shard's id clock (fields ms, n, last): one per namespace, kept forever (one key). */
  clock: {
    pattern: '{<ns>}:clock',
    type: 'hash',
    tag: '{<ns>}',
    bound: 'constant: one per namespace',
    sizedIn: `${SIZING}, \`{ns}:clock\``,
  },
  /** The list prefixes with ids in flight; a prefix leaves with its last id. */
  prefixes: {
    pattern: '{<ns>}:prefixes',
    type: 'set',
    tag: '{<ns>}',
    bound: 'the backlog',
    sizedIn: `${SIZING}, \`{ns}:prefixes\``,
  },
  /**
   * A prefix's in-flight ids (the `?after=` watermark); every id leaves when written,
   * dead-lettered or reaped (ORPHAN_GRACE_SECONDS), and the key goes with its last id.
   */
  pending: {
    pattern: '{<ns>}:pending:<prefix>',
    type: 'zset',
    tag: '{<ns>}',
    bound: 'the backlog',
    sizedIn: `${SIZING}, \`{ns}:pending:<prefix>\``,
  },
  /** A prefix's index of written ids: trimmed to LIST_INDEX_SECONDS, expiring that long after the prefix's last write. */
  written: {
    pattern: '{<ns>}:written:<prefix>',
    type: 'zset',
    tag: '{<ns>}',
    bound: 'LIST_INDEX_SECONDS (TTL + trim)',
    sizedIn: `${SIZING}, \`{ns}:written:<prefix>\``,
  },
  /** The lowest id a prefix's written index still covers; expires with `written:<prefix>`. */
  floor: {
    pattern: '{<ns>}:floor:<prefix>',
    type: 'string',
    tag: '{<ns>}',
    bound: 'LIST_INDEX_SECONDS (TTL)',
    sizedIn: `${SIZING}, \`{ns}:floor:<prefix>\``,
  },
  /**
   * Idempotency-Key entries: hashes of 16-byte claim digest → batch id + body digest, sharded
   * (`<shard>`) and bucketed (`<bucket>` = window / 4); each hash expires a window plus a bucket
   * after it starts (IDEMPOTENCY_WINDOW_SECONDS).
   */
  'idem:k': {
    pattern: '{<ns>}:idem:k:<shard>:<bucket>',
    type: 'hash',
    tag: '{<ns>}',
    bound: '1.25 × IDEMPOTENCY_WINDOW_SECONDS (TTL)',
    sizedIn: `${SIZING}, \`{ns}:idem:k:<shard>:<bucket>\``,
  },
  /** Body-dedup entries (no key, every event with a message_id): as `idem:k`, within BODY_DEDUP_WINDOW_SECONDS. */
  'idem:b': {
    pattern: '{<ns>}:idem:b:<shard>:<bucket>',
    type: 'hash',
    tag: '{<ns>}',
    bound: '1.25 × BODY_DEDUP_WINDOW_SECONDS (TTL)',
    sizedIn: `${SIZING}, \`{ns}:idem:b:<shard>:<bucket>\``,
  },
  /** A replayed dead letter's marker, keeping the reaper off the id it put back in flight: REPLAY_MARK_SECONDS (60 s). */
  replaying: {
    pattern: '{<ns>}:replaying:<batch id>',
    type: 'string',
    tag: '{<ns>}',
    bound: '60 s (TTL)',
    sizedIn: `${SIZING}, \`{ns}:replaying:<id>\``,
  },
  /** Member batch id → the group job it rides in (QUEUE_GROUP_MAX); an entry leaves with its id from flight. */
  groups: {
    pattern: '{<ns>}:groups',
    type: 'hash',
    tag: '{<ns>}',
    bound: 'the backlog',
    sizedIn: `${SIZING}, \`{ns}:groups\``,
  },
  /** The QUEUE_SHARDS the keys are laid out for (shared/ledger/shard-set.ts, ensureShardLayout): one small string per deployment, no TTL. */
  shards: {
    pattern: '{<QUEUE_NAME>}:shards',
    type: 'string',
    tag: '{<QUEUE_NAME>}',
    bound: 'constant: one per deployment',
    sizedIn: `${SIZING}, \`{<QUEUE_NAME>}:shards\``,
  },
  /** The rollup job, retention pass or Iceberg commit pass (services/rollup/iceberg-committer.ts) working on a prefix: 10 s TTL, renewed by the live holder. */
  'rollup:lock': {
    pattern: '{<QUEUE_NAME>}:rollup:lock:<prefix>',
    type: 'string',
    tag: '{<QUEUE_NAME>}',
    bound: '10 s (TTL); one per prefix being rolled now',
    sizedIn: `${ROLLUP_KEYS}, \`{<QUEUE_NAME>}:rollup:lock:<prefix>\``,
  },
  /** Batches replayed into a rolled period, waiting for their re-roll: one per shard, capped at 10,000 members. */
  'rollup:dirty': {
    pattern: '{<ns>}:rollup:dirty',
    type: 'zset',
    tag: '{<ns>}',
    bound: 'cap: 10,000 members per shard',
    sizedIn: `${ROLLUP_KEYS}, \`{<ns>}:rollup:dirty\``,
  },
  /**
   * BullMQ's keys of a shard's batch queue (jobs, their locks, wait/active/failed sets, the
   * events stream, meta, …), named by BullMQ (shared/redis/bullmq-keys.ts). Prefix `bull` with one
   * shard on one Redis, the shard's tag otherwise.
   */
  queue: {
    pattern: 'bull:<QUEUE_NAME>:… or {<tag>}:<QUEUE_NAME>:…',
    type: 'mixed',
    tag: 'bull or {<tag>}',
    bound: 'the backlog (QUEUE_HIGH_WATER); dead letters 14 days / 10,000 jobs; events stream ~10,000 entries',
    sizedIn: `${SIZING}, "BullMQ job hash + queue entry", "BullMQ failed job", \`bull:<queue>:events\`, "other \`bull:<queue>:*\` keys"`,
  },
  /** BullMQ's keys of the rollup queue `<QUEUE_NAME>-rollup`: completed jobs kept 1,000 / one day, failed ones for replay. */
  'rollup-queue': {
    pattern: 'bull:<QUEUE_NAME>-rollup:… or {<QUEUE_NAME>}:<QUEUE_NAME>-rollup:…',
    type: 'mixed',
    tag: 'bull or {<QUEUE_NAME>}',
    bound: 'completed: 1,000 jobs / 1 day; failed: one per (prefix, period)',
    sizedIn: ROLLUP_KEYS,
  },
  /** BullMQ's keys of the erasure queue `<QUEUE_NAME>-erase` (services/rollup/erasure/): an erasure's state and counts, completed jobs kept 1,000 / 30 days (ids scrubbed on completion), failed ones for replay. */
  'erase-queue': {
    pattern: 'bull:<QUEUE_NAME>-erase:… or {<QUEUE_NAME>}:<QUEUE_NAME>-erase:…',
    type: 'mixed',
    tag: 'bull or {<QUEUE_NAME>}',
    bound: 'completed: 1,000 jobs / 30 days; failed: one per erasure request',
    sizedIn: ROLLUP_KEYS,
  },
  /** A rate-limit request bucket (per rule and caller or address): expires with its window. */
  'rate-limit': {
    pattern: 'ingest-rl:<QUEUE_NAME>:<collection>:<action>:<s|i|p>:<digest>',
    type: 'string',
    tag: '',
    bound: 'one rule window (PEXPIRE)',
    sizedIn: `${SIZING}, \`ingest-rl:<QUEUE_NAME>:<collection>:…\` and "Rate-limit counters"`,
  },
  /** An app's events-per-window push budget (`rateLimit.appEvents`): expires with its window. */
  'app-budget': {
    pattern: 'ingest-rl:<QUEUE_NAME>:<collection>:app:<digest>',
    type: 'string',
    tag: '',
    bound: 'one rule window (PEXPIRE)',
    sizedIn: `${SIZING}, \`ingest-rl:<QUEUE_NAME>:<collection>:…\` and "Rate-limit counters"`,
  },
  /** A cap-signed request's nonce (CAP_AUTH=on), `SET NX PX` for twice the skew window (10 min). */
  'cap-nonce': {
    pattern: 'ingest-cap:<QUEUE_NAME>:n:<digest>',
    type: 'string',
    tag: '',
    bound: '10 min (TTL)',
    sizedIn: `${SIZING}, \`ingest-cap:<QUEUE_NAME>:n:<22-char digest>\``,
  },
};

/** The hash tag `{<tag>}`: every key that starts with it lives in the tag's Cluster slot. */
export function hashTag(tag: string): string {
  return `{${tag}}`;
}

/**
 * The BullMQ key prefix of a queue whose keys must share the hash tag `tag` (a shard of the batch
 * queue, or the rollup queue on a Cluster): `{<tag>}`, so its keys are `{<tag>}:<queue>:…` and
 * BullMQ's multi-key scripts stay in one Cluster slot.
 */
export function taggedQueuePrefix(tag: string): string {
  return hashTag(tag);
}

/**
 * The rollup queue's BullMQ key prefix. On one Redis: BullMQ's default `bull` (keys
 * `bull:<QUEUE_NAME>-rollup:…`, as before Cluster support, whatever QUEUE_SHARDS is). On a
 * Cluster: the hash tag `{<QUEUE_NAME>}` (keys `{<QUEUE_NAME>}:<QUEUE_NAME>-rollup:…`), the tag
 * of the rollup service's other keys (below), so BullMQ's multi-key scripts stay in
 * one slot.
 */
export function rollupQueuePrefix(queueName: string, cluster: boolean): string {
  return cluster ? taggedQueuePrefix(queueName) : LEGACY_QUEUE_PREFIX;
}

/** The idempotency families: a client's Idempotency-Key, or a keyless body's digest. */
export type IdemFamily = 'key' | 'body';

/** The ledger's keys of namespace `ns` (one shard); see {@link KEY_FAMILIES} for each. */
export const ledgerKeys = {
  clock: (ns: string): string => `${hashTag(ns)}:clock`,
  prefixes: (ns: string): string => `${hashTag(ns)}:prefixes`,
  pending: (ns: string, prefix: string): string => `${ledgerKeys.pendingPrefix(ns)}${prefix}`,
  /** `{<ns>}:pending:`: what scan_pending-2.lua appends a prefix to. */
  pendingPrefix: (ns: string): string => `${hashTag(ns)}:pending:`,
  written: (ns: string, prefix: string): string => `${hashTag(ns)}:written:${prefix}`,
  floor: (ns: string, prefix: string): string => `${hashTag(ns)}:floor:${prefix}`,
  replaying: (ns: string, batchId: string): string => `${ledgerKeys.replayingPrefix(ns)}${batchId}`,
  /** `{<ns>}:replaying:`: what scan_pending-2.lua appends an id to. */
  replayingPrefix: (ns: string): string => `${hashTag(ns)}:replaying:`,
  groups: (ns: string): string => `${hashTag(ns)}:groups`,
  /** `{<ns>}:idem:<k|b>:`: every bucket hash of one idempotency family (for SCAN MATCH). */
  idemFamilyPrefix: (ns: string, family: IdemFamily): string => `${hashTag(ns)}:idem:${family === 'key' ? 'k' : 'b'}:`,
  /** `{<ns>}:idem:<k|b>:<shard>:`: the scripts append the bucket number (mint_batches-n.lua). */
  idemBucketPrefix: (ns: string, family: IdemFamily, shard: number): string =>
    `${ledgerKeys.idemFamilyPrefix(ns, family)}${shard}:`,
  /**
   * `{<ns>}:idem:-`: passed in the idempotency slot of a script call without a claim, so the call
   * names a key of the shard's slot; never written.
   */
  idemUnused: (ns: string): string => `${hashTag(ns)}:idem:-`,
} as const;

/** Where the shard count the keys are laid out for is recorded (see shared/ledger/shard-set.ts, ensureShardLayout). */
export function shardMarkerKey(queueName: string): string {
  return `${hashTag(queueName)}:shards`;
}

/** The rollup lock of a list prefix, under the deployment's tag (`ns` is QUEUE_NAME). */
export function rollupLockKey(ns: string, prefix: string): string {
  return `${hashTag(ns)}:rollup:lock:${prefix}`;
}

/** The replay notes of one shard (`ns` is the shard's ledger namespace), beside its ledger. */
export function rollupDirtyKey(ns: string): string {
  return `${hashTag(ns)}:rollup:dirty`;
}

/** The rollup queue of a deployment: `<QUEUE_NAME>-rollup` (a BullMQ queue name; its keys are BullMQ's). */
export function rollupQueueName(queueName: string): string {
  return `${queueName}-rollup`;
}

/** The erasure queue of a deployment: `<QUEUE_NAME>-erase` (BullMQ's keys, beside the rollup queue's). */
export function eraseQueueName(queueName: string): string {
  return `${queueName}-erase`;
}

/**
 * Prefix of every rate-limit counter: `ingest-rl:<QUEUE_NAME>` for the service; `ingest-rl` for
 * the library's router when its caller names no queue (router option `rateLimitKeyPrefix`).
 */
export function rateLimitKeyPrefix(queueName?: string): string {
  return queueName === undefined ? 'ingest-rl' : `ingest-rl:${queueName}`;
}

/** A request bucket: `<keyPrefix>:<collection>:<action>:<kind>:<digest of the bucket>` (kind `s`, `i` or `p`). */
export function rateLimitKey(
  keyPrefix: string,
  collection: string,
  action: string,
  kind: string,
  digest: string,
): string {
  return `${keyPrefix}:${collection}:${action}:${kind}:${digest}`;
}

/** An app's events budget: `<keyPrefix>:<collection>:app:<digest of the list prefix>`. */
export function appBudgetKey(keyPrefix: string, collection: string, digest: string): string {
  return `${keyPrefix}:${collection}:app:${digest}`;
}

/**
 * Prefix of every cap nonce: `ingest-cap:<QUEUE_NAME>:n` for the service; `ingest-cap:n` for the
 * library's router when its caller names no prefix (router option `capAuth.nonceKeyPrefix`).
 */
export function capNonceKeyPrefix(queueName?: string): string {
  return queueName === undefined ? 'ingest-cap:n' : `ingest-cap:${queueName}:n`;
}

/** One nonce: `<keyPrefix>:<22-char digest of signer and nonce>`. */
export function capNonceKey(keyPrefix: string, digest: string): string {
  return `${keyPrefix}:${digest}`;
}

// --- Naming a key --------------------------------------------------------------------------

const NAME = '[A-Za-z0-9_-]{1,64}';
const COLLECTION = '[A-Za-z0-9._~-]{1,128}';
/** `{<QUEUE_NAME>}`, `{<QUEUE_NAME>:<i>}` or `{<QUEUE_NAME>:<i>:<j>}` (shared/redis/shards.ts, shardTag), then the rest. */
const TAGGED_RE = new RegExp(`^\\{(${NAME})((?::\\d+){0,2})\\}:([\\s\\S]+)$`);
const RATE_RE = new RegExp(`^ingest-rl:(?:(${NAME}):)?${COLLECTION}:(?:(?:push|pull|list):[sip]|(app)):[0-9a-f]{24}$`);
const NONCE_RE = new RegExp(`^ingest-cap:(?:(${NAME}):)?n:[A-Za-z0-9_-]{22}$`);
const IDEM_RE = /^idem:([kb]):\d+:\d+$/;

/** The ledger part of a tagged key (what follows `{<ns>}:`), or undefined. */
function ledgerFamily(rest: string, deploymentTag: boolean): KeyFamilyName | undefined {
  switch (rest) {
    case 'clock':
    case 'prefixes':
    case 'groups':
      return rest;
    case 'rollup:dirty':
      return 'rollup:dirty';
    case 'shards':
      return deploymentTag ? 'shards' : undefined;
  }
  const idem = IDEM_RE.exec(rest);
  if (idem) return idem[1] === 'k' ? 'idem:k' : 'idem:b';
  const colon = rest.indexOf(':');
  if (colon <= 0 || colon === rest.length - 1) return undefined;
  const head = rest.slice(0, colon);
  const tail = rest.slice(colon + 1);
  if (head === 'pending' || head === 'written' || head === 'floor') return head;
  if (head === 'replaying') return isBatchId(tail) ? 'replaying' : undefined;
  if (deploymentTag && rest.startsWith('rollup:lock:') && rest.length > 'rollup:lock:'.length) return 'rollup:lock';
  return undefined;
}

/**
 * The family `key` belongs to, or undefined when no family names it. With `queueName`, only the
 * keys of that deployment are named (the keyspace test's strict form).
 *
 * Read from the key alone, so two readings exist where a QUEUE_NAME is also a ledger word
 * (`pending`, `written`, …): `{pending}:pending:wait` is taken for the ledger's, not BullMQ's.
 * And a queue named `x-rollup` cannot be told from the rollup queue of `x` without `queueName`.
 */
export function keyFamily(key: string, opts: { queueName?: string } = {}): KeyFamilyName | undefined {
  const ours = (q: string | undefined): boolean => opts.queueName === undefined || q === opts.queueName;
  if (key.startsWith('ingest-rl:')) {
    const m = RATE_RE.exec(key);
    return m && ours(m[1]) ? (m[2] ? 'app-budget' : 'rate-limit') : undefined;
  }
  if (key.startsWith('ingest-cap:')) {
    const m = NONCE_RE.exec(key);
    return m && ours(m[1]) ? 'cap-nonce' : undefined;
  }
  const tagged = TAGGED_RE.exec(key);
  if (tagged) {
    const [, queue = '', shard = '', rest = ''] = tagged;
    if (!ours(queue)) return undefined;
    const family = ledgerFamily(rest, shard === '');
    if (family) return family;
    if (rest.startsWith(`${queue}:`)) return 'queue';
    if (shard === '' && rest.startsWith(`${rollupQueueName(queue)}:`)) return 'rollup-queue';
    if (shard === '' && rest.startsWith(`${eraseQueueName(queue)}:`)) return 'erase-queue';
    return undefined;
  }
  const bull = parseQueueKey(key, LEGACY_QUEUE_PREFIX);
  if (!bull || bull.rest === '') return undefined;
  if (opts.queueName !== undefined)
    return bull.queue === opts.queueName
      ? 'queue'
      : bull.queue === rollupQueueName(opts.queueName)
        ? 'rollup-queue'
        : bull.queue === eraseQueueName(opts.queueName)
          ? 'erase-queue'
          : undefined;
  return bull.queue.endsWith('-rollup') ? 'rollup-queue' : bull.queue.endsWith('-erase') ? 'erase-queue' : 'queue';
}
