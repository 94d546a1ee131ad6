/**
 * The keyspace (shared/redis/keyspace.ts): every builder spells the key strings deployed data already
 * uses (pinned here as literals), keeps each family in its hash tag's Cluster slot, and
 * `keyFamily` names every key a builder makes, and nothing else.
 */
import calculateSlot from 'cluster-key-slot';
import { describe, expect, it } from 'vitest';
import {
  KEY_FAMILIES,
  type KeyFamilyName,
  appBudgetKey,
  capNonceKey,
  capNonceKeyPrefix,
  keyFamily,
  ledgerKeys,
  queueKey,
  rateLimitKey,
  rateLimitKeyPrefix,
  rollupDirtyKey,
  rollupLockKey,
  rollupQueueName,
  eraseQueueName,
  rollupQueuePrefix,
  shardMarkerKey,
} from '../../shared/redis/keyspace.js';
import { shardLayouts } from '../../shared/redis/shards.js';

const ID = '1782933157690-0000-735223';
const HEX24 = 'a1b2c3d4e5f60718293a4b5c';
const DIGEST22 = 'AbCdEfGhIjKlMnOpQrStUv';

/** One key of every family, built by the keyspace, for namespace `ns` of queue `q` (BullMQ prefix `qp`). */
function samples(q: string, ns: string, qp: string): [KeyFamilyName, string][] {
  return [
    ['clock', ledgerKeys.clock(ns)],
    ['prefixes', ledgerKeys.prefixes(ns)],
    ['pending', ledgerKeys.pending(ns, 'events/app/')],
    ['written', ledgerKeys.written(ns, 'events/app/')],
    ['floor', ledgerKeys.floor(ns, 'events/app/')],
    ['idem:k', `${ledgerKeys.idemBucketPrefix(ns, 'key', 8191)}493812`],
    ['idem:b', `${ledgerKeys.idemBucketPrefix(ns, 'body', 0)}7`],
    ['replaying', ledgerKeys.replaying(ns, ID)],
    ['groups', ledgerKeys.groups(ns)],
    ['shards', shardMarkerKey(q)],
    ['rollup:lock', rollupLockKey(q, 'events/app/')],
    ['rollup:dirty', rollupDirtyKey(ns)],
    ['queue', queueKey(qp, q, ID)],
    ['queue', queueKey(qp, q, `${ID}:lock`)],
    ['queue', queueKey(qp, q, 'events')],
    ['queue', queueKey(qp, q, `g-${ID}`)],
    ['rollup-queue', queueKey(rollupQueuePrefix(q, false), rollupQueueName(q), 'completed')],
    ['rollup-queue', queueKey(rollupQueuePrefix(q, true), rollupQueueName(q), 'roll|events/app/|1782932400000')],
    ['erase-queue', queueKey(rollupQueuePrefix(q, false), eraseQueueName(q), 'completed')],
    ['erase-queue', queueKey(rollupQueuePrefix(q, true), eraseQueueName(q), 'er-1782932400000-0123456789abcdef')],
    ['rate-limit', rateLimitKey(rateLimitKeyPrefix(q), 'events', 'push', 's', HEX24)],
    ['rate-limit', rateLimitKey(rateLimitKeyPrefix(q), 'my.coll~1', 'list', 'p', HEX24)],
    ['app-budget', appBudgetKey(rateLimitKeyPrefix(q), 'events', HEX24)],
    ['cap-nonce', capNonceKey(capNonceKeyPrefix(q), DIGEST22)],
  ];
}

describe('keyspace', () => {
  it('spells every key as deployed data has it (a refactor must not move a key)', () => {
    const ns = 'events-ingest';
    expect([
      ledgerKeys.clock(ns),
      ledgerKeys.prefixes(ns),
      ledgerKeys.pending(ns, 'events/a/'),
      ledgerKeys.pendingPrefix(ns),
      ledgerKeys.written(ns, 'events/a/'),
      ledgerKeys.floor(ns, 'events/a/'),
      ledgerKeys.replaying(ns, ID),
      ledgerKeys.replayingPrefix(ns),
      ledgerKeys.groups(ns),
      ledgerKeys.idemBucketPrefix(ns, 'key', 12),
      ledgerKeys.idemBucketPrefix(ns, 'body', 3),
      ledgerKeys.idemFamilyPrefix(ns, 'key'),
      ledgerKeys.idemUnused(ns),
      ledgerKeys.clock('events-ingest:2:17'),
      shardMarkerKey(ns),
      rollupLockKey(ns, 'events/a/'),
      rollupDirtyKey('events-ingest:1'),
      rollupQueueName(ns),
      rateLimitKeyPrefix(ns),
      rateLimitKeyPrefix(),
      rateLimitKey('ingest-rl:events-ingest', 'events', 'push', 'i', HEX24),
      appBudgetKey('ingest-rl:events-ingest', 'events', HEX24),
      capNonceKeyPrefix(ns),
      capNonceKeyPrefix(),
      capNonceKey('ingest-cap:events-ingest:n', DIGEST22),
    ]).toEqual([
      '{events-ingest}:clock',
      '{events-ingest}:prefixes',
      '{events-ingest}:pending:events/a/',
      '{events-ingest}:pending:',
      '{events-ingest}:written:events/a/',
      '{events-ingest}:floor:events/a/',
      `{events-ingest}:replaying:${ID}`,
      '{events-ingest}:replaying:',
      '{events-ingest}:groups',
      '{events-ingest}:idem:k:12:',
      '{events-ingest}:idem:b:3:',
      '{events-ingest}:idem:k:',
      '{events-ingest}:idem:-',
      '{events-ingest:2:17}:clock',
      '{events-ingest}:shards',
      '{events-ingest}:rollup:lock:events/a/',
      '{events-ingest:1}:rollup:dirty',
      'events-ingest-rollup',
      'ingest-rl:events-ingest',
      'ingest-rl',
      `ingest-rl:events-ingest:events:push:i:${HEX24}`,
      `ingest-rl:events-ingest:events:app:${HEX24}`,
      'ingest-cap:events-ingest:n',
      'ingest-cap:n',
      `ingest-cap:events-ingest:n:${DIGEST22}`,
    ]);
  });

  it("keeps every family of a shard in its tag's Cluster slot (so each script stays single-slot)", () => {
    for (const l of shardLayouts('events-ingest', 4, true)) {
      const slot = calculateSlot(l.tag);
      for (const [family, key] of samples('events-ingest', l.namespace, l.queuePrefix)) {
        if (KEY_FAMILIES[family].tag === '{<ns>}' || family === 'queue')
          expect([family, calculateSlot(key)]).toEqual([family, slot]);
      }
    }
    // The deployment's own keys share the `{<QUEUE_NAME>}` slot, with the rollup queue on a Cluster.
    const q = calculateSlot('q');
    expect(
      [
        shardMarkerKey('q'),
        rollupLockKey('q', 'events/a/'),
        queueKey(rollupQueuePrefix('q', true), rollupQueueName('q'), 'wait'),
      ].map((k) => calculateSlot(k)),
    ).toEqual([q, q, q]);
  });

  it("names the family of every key it builds, in every layout, and with the deployment's queue name only that deployment's", () => {
    const layouts = [
      ...shardLayouts('events-ingest', 1, false),
      ...shardLayouts('events-ingest', 3, false),
      ...shardLayouts('events-ingest', 2, true),
    ];
    const seen = new Set<KeyFamilyName>();
    for (const l of layouts) {
      for (const [family, key] of samples(l.queueName, l.namespace, l.queuePrefix)) {
        expect([key, keyFamily(key)]).toEqual([key, family]);
        expect([key, keyFamily(key, { queueName: 'events-ingest' })]).toEqual([key, family]);
        expect([key, keyFamily(key, { queueName: 'other' })]).toEqual([key, undefined]);
        seen.add(family);
      }
    }
    expect([...seen].sort()).toEqual(Object.keys(KEY_FAMILIES).sort());
    // The library's router defaults (no queue name in the prefix) are named too, outside a deployment.
    expect(keyFamily(rateLimitKey(rateLimitKeyPrefix(), 'events', 'pull', 's', HEX24))).toBe('rate-limit');
    expect(keyFamily(appBudgetKey(rateLimitKeyPrefix(), 'events', HEX24))).toBe('app-budget');
    expect(keyFamily(capNonceKey(capNonceKeyPrefix(), DIGEST22))).toBe('cap-nonce');
    expect(keyFamily(capNonceKey(capNonceKeyPrefix(), DIGEST22), { queueName: 'events-ingest' })).toBeUndefined();
  });

  it('names nothing else', () => {
    for (const key of [
      'foo',
      'bull',
      'bull:q',
      'bull:q:',
      '{events-ingest}',
      '{events-ingest}:',
      '{events-ingest}:clocks',
      '{events-ingest}:pending:',
      `{events-ingest}:replaying:not-an-id`,
      '{events-ingest}:idem:k:1',
      '{events-ingest}:idem:-',
      '{events-ingest}:idem:x:1:2',
      '{events-ingest:1}:shards',
      '{events-ingest:1}:rollup:lock:events/a/',
      '{events-ingest:1}:other-queue:wait',
      '{events-ingest:1}:events-ingest-rollup:wait',
      '{bad:tag:x}:clock',
      'ingest-rl:events-ingest:events:push:s:short',
      'ingest-rl:events-ingest:events:push:x:a1b2c3d4e5f60718293a4b5c',
      'ingest-rl:events-ingest:warm',
      'ingest-cap:events-ingest:n:short',
      'ingest-cap:events-ingest:x:AbCdEfGhIjKlMnOpQrStUv',
    ]) {
      expect([key, keyFamily(key)]).toEqual([key, undefined]);
    }
    // With the deployment's name, another deployment's BullMQ queue is not ours.
    expect(keyFamily('bull:other:wait', { queueName: 'events-ingest' })).toBeUndefined();
    expect(keyFamily('bull:events-ingest-rollup:wait', { queueName: 'events-ingest' })).toBe('rollup-queue');
  });

  it('documents every family: pattern, bound and the docs/reliability.md row that sizes it', () => {
    for (const [name, f] of Object.entries(KEY_FAMILIES)) {
      expect([name, f.pattern.length > 0, f.bound.length > 0, f.sizedIn.startsWith('docs/reliability.md')]).toEqual([
        name,
        true,
        true,
        true,
      ]);
    }
  });
});
