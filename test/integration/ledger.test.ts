import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { inject } from 'vitest';
import { BATCH_ID_RE, batchIdMs } from '../../shared/ids.js';
import { BatchLedger, type IdempotencyClaim, type MintResult, visibleUnder } from '../../shared/ledger/ledger.js';
import { withScripts } from '../../shared/redis/scripts.js';
import { uniqueName } from '../helpers/names.js';

function expectStrictlyIncreasing(ids: readonly string[]): void {
  for (let i = 1; i < ids.length; i++) {
    if (!((ids[i - 1] as string) < (ids[i] as string)))
      throw new Error(`ids not strictly increasing at ${i}: ${ids[i - 1]} then ${ids[i]}`);
  }
}

describe('batch id minting (Lua script on a real Redis)', () => {
  const conns: Redis[] = [];
  const conn = (): Redis => {
    const r = new Redis(inject('redisUrl'));
    conns.push(r);
    return r;
  };
  let redis: Redis;
  beforeAll(() => {
    redis = conn();
  });
  afterAll(() => {
    for (const c of conns) c.disconnect();
  });

  it('mints well-formed, strictly increasing ids on the Redis clock', async () => {
    const ledger = new BatchLedger(redis, uniqueName('mint'));
    const ids: string[] = [];
    for (let i = 0; i < 2000; i++) ids.push((await ledger.mint('events/a/')).batchId);
    for (const id of ids) expect(id).toMatch(BATCH_ID_RE);
    expectStrictlyIncreasing(ids);
    expect(Math.abs(batchIdMs(ids[0] as string) - Date.now())).toBeLessThan(60_000);
  });

  it('never goes back when the clock steps back', async () => {
    const ledger = new BatchLedger(redis, uniqueName('mint'));
    const a = await ledger.mint('p/', { clockMs: 1_800_000_000_000 });
    const b = await ledger.mint('p/', { clockMs: 1_799_999_000_000 });
    const c = await ledger.mint('p/', { clockMs: 1_700_000_000_000 });
    const d = await ledger.mint('p/', { clockMs: 1_800_000_000_005 });
    expectStrictlyIncreasing([a.batchId, b.batchId, c.batchId, d.batchId]);
    expect(batchIdMs(b.batchId)).toBe(1_800_000_000_000);
    expect(b.batchId.slice(14, 18)).toBe('0001');
    expect(batchIdMs(d.batchId)).toBe(1_800_000_000_005);
  });

  it('rolls into the next ms after 10,000 ids in one ms, never repeating or reordering', async () => {
    const ledger = new BatchLedger(redis, uniqueName('mint'));
    const n = 25_000;
    const pipe = redis.pipeline();
    const ns = ledger.namespace;
    // Pipelined through the same script the ledger defines: one round trip for 25k mints.
    for (let i = 0; i < n; i++) {
      // mint_batches-n.lua: 2 + 2 keys, the clock override, then one push's six arguments.
      (pipe as unknown as { ingestMint(...a: (string | number)[]): void }).ingestMint(
        4,
        `{${ns}}:clock`,
        `{${ns}}:prefixes`,
        `{${ns}}:pending:p/`,
        `{${ns}}:idem:-`,
        '1800000000000',
        'abcdef',
        '0',
        '0',
        'p/',
        '',
        '',
      );
    }
    const res = (await pipe.exec()) ?? [];
    const ids = res.map(([err, v]) => {
      if (err) throw err;
      return (v as [string, number])[0];
    });
    expect(ids).toHaveLength(n);
    expectStrictlyIncreasing(ids);
    expect(ids[9999]).toBe('1800000000000-9999-abcdef');
    expect(ids[10000]).toBe('1800000000001-0000-abcdef');
    expect(ids[n - 1]).toBe('1800000000002-4999-abcdef');
  });

  it('stays unique and ordered per caller under concurrent callers on separate connections', async () => {
    const ns = uniqueName('mint');
    const callers = Array.from({ length: 4 }, () => new BatchLedger(conn(), ns));
    const perCaller = await Promise.all(
      callers.map(async (l) => {
        const out: string[] = [];
        for (let i = 0; i < 1000; i++) out.push((await l.mint('p/')).batchId);
        return out;
      }),
    );
    for (const ids of perCaller) expectStrictlyIncreasing(ids);
    const all = perCaller.flat();
    expect(new Set(all).size).toBe(4000);
    // Every minted id is in flight until released.
    expect(await callers[0]!.oldestPending('p/', 5000)).toEqual([...all].sort());
  });

  it('a step back at counter 9999 rolls forward, and a rolled-ahead ms keeps counting when the real clock catches up', async () => {
    const ledger = new BatchLedger(redis, uniqueName('mint'));
    const ns = ledger.namespace;
    const T = 1_800_000_000_000;
    const pipe = redis.pipeline();
    for (let i = 0; i < 10_000; i++) {
      // mint_batches-n.lua: 2 + 2 keys, the clock override, then one push's six arguments.
      (pipe as unknown as { ingestMint(...a: (string | number)[]): void }).ingestMint(
        4,
        `{${ns}}:clock`,
        `{${ns}}:prefixes`,
        `{${ns}}:pending:p/`,
        `{${ns}}:idem:-`,
        String(T),
        'abcdef',
        '0',
        '0',
        'p/',
        '',
        '',
      );
    }
    const filled = ((await pipe.exec()) ?? []).map(([err, v]) => {
      if (err) throw err;
      return (v as [string, number])[0];
    });
    expect(filled[9999]).toBe(`${T}-9999-abcdef`);
    // The clock steps back exactly when the ms is full: the next id must still be larger.
    const back = (await ledger.mint('p/', { clockMs: T - 5000 })).batchId;
    expect(back.slice(0, 18)).toBe(`${T + 1}-0000`);
    // The real clock reaches the ms the counter rolled into: counting continues, no repeat.
    const caught = (await ledger.mint('p/', { clockMs: T + 1 })).batchId;
    expect(caught.slice(0, 18)).toBe(`${T + 1}-0001`);
    const ahead = (await ledger.mint('p/', { clockMs: T + 2 })).batchId;
    expect(ahead.slice(0, 18)).toBe(`${T + 2}-0000`);
    expectStrictlyIncreasing([filled[9999] as string, back, caught, ahead]);
  });

  it('stays unique and ordered under concurrent callers on different prefixes while the clock jitters backwards', async () => {
    const ns = uniqueName('mint');
    const T = 1_800_000_000_000;
    const callers = Array.from({ length: 4 }, () => new BatchLedger(conn(), ns));
    const perCaller = await Promise.all(
      callers.map(async (l, c) => {
        const out: string[] = [];
        for (let i = 0; i < 500; i++) {
          // Each caller's clock runs forward slowly but jumps back by up to 3 ms every few calls,
          // and the callers disagree with each other, as API hosts would without Redis TIME.
          const clockMs = T + Math.floor(i / 50) - ((i * (c + 1)) % 4);
          out.push((await l.mint(`events/app${c}/`, { clockMs })).batchId);
        }
        return out;
      }),
    );
    for (const ids of perCaller) expectStrictlyIncreasing(ids);
    const all = perCaller.flat();
    expect(new Set(all).size).toBe(all.length);
    // One clock for all prefixes: merged, the pending sets hold every id exactly once, and no
    // id is earlier than the first ms any caller asked for.
    const pending = (await Promise.all(callers.map((l, c) => l.oldestPending(`events/app${c}/`, 1000)))).flat();
    expect([...pending].sort()).toEqual([...all].sort());
    for (const id of all) expect(batchIdMs(id)).toBeGreaterThanOrEqual(T - 3);
  });

  it('holds the list back below the oldest in-flight id, and releases it', async () => {
    const ledger = new BatchLedger(redis, uniqueName('mint'));
    const fresh = await ledger.listBound('p/');
    expect(fresh.kind).toBe('below');
    const a = (await ledger.mint('p/')).batchId;
    const b = (await ledger.mint('p/')).batchId;
    const other = (await ledger.mint('q/')).batchId;
    expect(await ledger.listBound('p/')).toEqual({ kind: 'below', id: a });
    expect(await ledger.release('p/', b)).toBe(true);
    expect(visibleUnder(await ledger.listBound('p/'), b)).toBe(false);
    expect(await ledger.release('p/', a)).toBe(true);
    expect(await ledger.release('p/', a)).toBe(false);
    const bound = await ledger.listBound('p/');
    expect(bound).toEqual({ kind: 'upTo', id: other });
    expect(visibleUnder(bound, b)).toBe(true);
    expect(await ledger.prefixes()).toEqual(['q/']);
    expect(await ledger.maxLagMs()).toBeGreaterThanOrEqual(0);
  });

  const H1 = 'a'.repeat(64);
  const H2 = 'b'.repeat(64);
  const keyed = (scope: string, bodyHash: string, windowSeconds = 60): IdempotencyClaim => ({
    family: 'key',
    scope,
    bodyHash,
    windowSeconds,
  });

  it('answers a repeated idempotency key and body with the first id until it is forgotten', async () => {
    const ledger = new BatchLedger(redis, uniqueName('mint'));
    const first = await ledger.mint('p/', { idempotency: keyed('k1', H1) });
    const again = await ledger.mint('p/', { idempotency: keyed('k1', H1) });
    expect(again).toEqual({ batchId: first.batchId, deduplicated: true, conflict: false });
    expect(await ledger.oldestPending('p/', 10)).toEqual([first.batchId]);
    await ledger.release('p/', first.batchId, keyed('k1', H1));
    const third = await ledger.mint('p/', { idempotency: keyed('k1', H1) });
    expect(third.deduplicated).toBe(false);
    expect(third.batchId > first.batchId).toBe(true);
  });

  it('reports the same key with another body as a conflict and mints nothing for it', async () => {
    const ledger = new BatchLedger(redis, uniqueName('mint'));
    const first = await ledger.mint('p/', { idempotency: keyed('k1', H1) });
    const other = await ledger.mint('p/', { idempotency: keyed('k1', H2) });
    expect(other).toEqual({ batchId: first.batchId, deduplicated: false, conflict: true });
    expect(await ledger.oldestPending('p/', 10)).toEqual([first.batchId]);
    // A body claim with the same scope text is another family: never confused with the key.
    const body = await ledger.mint('p/', {
      idempotency: { family: 'body', scope: 'k1', bodyHash: H2, windowSeconds: 60 },
    });
    expect(body.deduplicated || body.conflict).toBe(false);
  });

  it('mints that wait for a running call leave together, each answered as if minted alone, in order', async () => {
    const ledger = new BatchLedger(redis, uniqueName('mint'));
    const alone = new BatchLedger(redis, uniqueName('mint'), { groupMax: 1 });
    // The same 40 mints, issued at once: plain ones on two prefixes, a keyed claim twice (the
    // second a retry), the same key with another body (a conflict), and a body claim.
    const plan = (l: BatchLedger): Promise<MintResult>[] =>
      Array.from({ length: 40 }, (_, i) => {
        if (i === 5 || i === 17) return l.mint('p/', { idempotency: keyed('k-group', H1) });
        if (i === 23) return l.mint('p/', { idempotency: keyed('k-group', H2) });
        if (i === 30)
          return l.mint('q/', { idempotency: { family: 'body', scope: 'b', bodyHash: H2, windowSeconds: 60 } });
        return l.mint(i % 3 === 0 ? 'q/' : 'p/');
      });
    const grouped = await Promise.all(plan(ledger));
    const single = await Promise.all(plan(alone));
    // Grouped: the first mint went alone, the 39 that waited for it in two calls (32 and 7).
    expect(ledger.mintCalls).toEqual({ sends: 3, mints: 40 });
    expect(alone.mintCalls).toEqual({ sends: 40, mints: 40 });
    for (const results of [grouped, single]) {
      const statuses = results.map((r) => (r.conflict ? 'conflict' : r.deduplicated ? 'retry' : 'new'));
      expect(statuses.filter((x) => x !== 'new')).toEqual(['retry', 'conflict']);
      expect(statuses[17]).toBe('retry');
      expect(statuses[23]).toBe('conflict');
      expect(results[17]?.batchId).toBe(results[5]?.batchId);
      expect(results[23]?.batchId).toBe(results[5]?.batchId);
      const minted = results.filter((r) => !r.deduplicated && !r.conflict).map((r) => r.batchId);
      expect(minted).toHaveLength(38);
      expect(new Set(minted).size).toBe(38);
      // Strictly increasing in the order the mints were issued.
      expectStrictlyIncreasing(minted);
    }
    // Every new id is in flight under its own prefix, and the claims are found afterwards.
    const minted = grouped.filter((r) => !r.deduplicated && !r.conflict).map((r) => r.batchId);
    const pending = [...(await ledger.oldestPending('p/', 100)), ...(await ledger.oldestPending('q/', 100))];
    expect(pending.sort()).toEqual([...minted].sort());
    expect(await ledger.lookup(keyed('k-group', H1))).toEqual({
      batchId: grouped[5]?.batchId,
      deduplicated: true,
      conflict: false,
    });
    // The clock moved once per new id: the next mint follows the group's last id.
    const next = await ledger.mint('p/');
    expect(next.batchId > (minted.at(-1) as string)).toBe(true);
  });

  it('a failed mint call fails every mint it carried, and the next call goes on', async () => {
    const real = withScripts(conn());
    let refuse = true;
    // The real connection, whose mint script Redis refuses while `refuse` holds.
    const flaky = new Proxy(real, {
      get: (t, p, r) =>
        p === 'ingestMint' && refuse
          ? () => Promise.reject(Object.assign(new Error('ERR refused'), { name: 'ReplyError' }))
          : Reflect.get(t, p, r),
    });
    const ledger = new BatchLedger(flaky, uniqueName('mint'));
    const failed = await Promise.allSettled(Array.from({ length: 5 }, () => ledger.mint('p/')));
    expect(failed.map((r) => r.status)).toEqual(Array(5).fill('rejected'));
    // The first alone, the four that waited for it together.
    expect(ledger.mintCalls).toEqual({ sends: 2, mints: 5 });
    refuse = false;
    const ok = await Promise.all(Array.from({ length: 5 }, () => ledger.mint('p/')));
    expect(ok.map((r) => r.batchId).every((id) => BATCH_ID_RE.test(id))).toBe(true);
    expect(await ledger.oldestPending('p/', 10)).toEqual(ok.map((r) => r.batchId));
  });

  it('forgets a claim after its window, and its bucket hashes expire within a window plus a bucket', async () => {
    const ledger = new BatchLedger(redis, uniqueName('mint'));
    const claim = keyed('k-short', H1, 2);
    const first = await ledger.mint('p/', { idempotency: claim });
    expect((await ledger.mint('p/', { idempotency: claim })).deduplicated).toBe(true);
    const keys = await redis.keys(`{${ledger.namespace}}:idem:*`);
    expect(keys).toHaveLength(1);
    const ttl = await redis.ttl(keys[0] as string);
    // Bucket length ceil(2/4) = 1 s, looked up 2 buckets back: the hash lives 3 s after its bucket starts.
    expect(ttl).toBeGreaterThanOrEqual(2);
    expect(ttl).toBeLessThanOrEqual(3);
    await new Promise((r) => setTimeout(r, 3300));
    expect(await redis.keys(`{${ledger.namespace}}:idem:*`)).toEqual([]);
    const later = await ledger.mint('p/', { idempotency: claim });
    expect(later.deduplicated).toBe(false);
    expect(later.batchId > first.batchId).toBe(true);
  });

  it('releases that wait for a running call leave together, each as if released alone', async () => {
    const ledger = new BatchLedger(redis, uniqueName('rel'));
    const claim = keyed('k-rel', H1);
    const ids: string[] = [];
    for (let i = 0; i < 20; i++) ids.push((await ledger.mint(i < 10 ? 'p/' : 'q/')).batchId);
    const claimed = (await ledger.mint('q/', { idempotency: claim })).batchId;
    const before = ledger.releaseCalls.sends;
    // All at once, as a group job's members finish: 20 written, one failed push forgetting its
    // claim, and one id released twice.
    const answers = await Promise.all([
      ...ids.map((id, i) => ledger.markWritten(i < 10 ? 'p/' : 'q/', id, 3600)),
      ledger.release('q/', claimed, claim),
      ledger.release('p/', ids[0] as string),
    ]);
    expect(answers).toEqual([...Array(21).fill(true), false]);
    // The first alone, the 21 that waited for it in one call.
    expect(ledger.releaseCalls.sends - before).toBe(2);
    expect(await ledger.oldestPending('p/', 100)).toEqual([]);
    expect(await ledger.oldestPending('q/', 100)).toEqual([]);
    expect(await ledger.prefixes()).toEqual([]);
    // Written ids are in their prefix's index; the failed push's is not, and its claim is forgotten.
    expect(await redis.zrange(ledger.writtenKey('p/'), '0', '-1')).toEqual(ids.slice(0, 10));
    expect(await redis.zrange(ledger.writtenKey('q/'), '0', '-1')).toEqual(ids.slice(10, 20));
    expect(await ledger.lookup(claim)).toBeNull();
  });

  it('a replay mark keeps the reaper from releasing the id it just put back in flight', async () => {
    const ledger = new BatchLedger(redis, uniqueName('mint'));
    const id = (await ledger.mint('p/')).batchId;
    expect(await ledger.reap('p/', id)).toBe(true);
    await ledger.markReplaying('p/', id);
    expect(await ledger.isPending('p/', id)).toBe(true);
    expect(await ledger.prefixes()).toEqual(['p/']);
    expect(await ledger.reap('p/', id)).toBe(false);
    expect(await ledger.isPending('p/', id)).toBe(true);
    const ttl = await redis.ttl(ledger.replayMarkKey(id));
    expect(ttl).toBeGreaterThan(0);
    expect(ttl).toBeLessThanOrEqual(60);
    // The written release does not care about the mark.
    expect(await ledger.markWritten('p/', id, 3600)).toBe(true);
  });
});

describe('index of written ids (list pages after a recent cursor)', () => {
  let redis: Redis;
  beforeAll(() => {
    redis = new Redis(inject('redisUrl'));
  });
  afterAll(() => {
    redis.disconnect();
  });

  it('answers from the index only for cursors at or above its floor, and only ids whose file is written', async () => {
    const ledger = new BatchLedger(redis, uniqueName('idx'));
    const old = (await ledger.mint('p/')).batchId;
    // Before any file is written there is no index: the store must be listed.
    expect((await ledger.listWritten('p/', old, 10)).ids).toBeNull();
    const a = (await ledger.mint('p/')).batchId;
    const b = (await ledger.mint('p/')).batchId;
    const c = (await ledger.mint('p/')).batchId;
    // b is written first; the floor becomes the last id minted by then (c).
    await ledger.markWritten('p/', b, 3600);
    expect((await ledger.listWritten('p/', a, 10)).ids).toBeNull();
    const atFloor = await ledger.listWritten('p/', c, 10);
    expect(atFloor.ids).toEqual([]);
    expect(atFloor.bound).toEqual({ kind: 'below', id: old });
    const d = (await ledger.mint('p/')).batchId;
    const e = (await ledger.mint('p/')).batchId;
    await ledger.markWritten('p/', e, 3600);
    await ledger.release('p/', d); // dead-lettered: no file, never indexed
    await ledger.markWritten('p/', c, 3600);
    expect((await ledger.listWritten('p/', c, 10)).ids).toEqual([e]);
    expect((await ledger.listWritten('p/', c, 0)).ids).toEqual([]);
  });

  it('trims ids older than the retention and raises the floor with it', async () => {
    const ledger = new BatchLedger(redis, uniqueName('idx'));
    const ids: string[] = [];
    for (const ms of [1_000_000_000_000, 1_000_000_000_100, 1_800_000_000_000])
      ids.push((await ledger.mint('p/', { clockMs: ms })).batchId);
    await ledger.markWritten('p/', ids[0]!, 0);
    await ledger.markWritten('p/', ids[1]!, 0);
    // A retention of one hour drops the 2001 ids (cutoff far above them) when the next is written.
    await ledger.markWritten('p/', ids[2]!, 3600);
    expect(await redis.zrange(`{${ledger.namespace}}:written:p/`, '0', '-1')).toEqual([ids[2]]);
    expect((await ledger.listWritten('p/', ids[0]!, 10)).ids).toBeNull();
  });

  it('lets the index keys of a prefix expire once it is idle past the index window', async () => {
    const ledger = new BatchLedger(redis, uniqueName('idx'));
    const a = (await ledger.mint('p/')).batchId;
    await ledger.markWritten('p/', a, 2);
    const ttl = await redis.ttl(ledger.writtenKey('p/'));
    expect(ttl).toBeGreaterThan(0);
    expect(ttl).toBeLessThanOrEqual(2);
    expect(await redis.ttl(ledger.floorKey('p/'))).toBeGreaterThan(0);
    await new Promise((r) => setTimeout(r, 2300));
    expect(await redis.exists(ledger.writtenKey('p/'), ledger.floorKey('p/'), ledger.pendingKey('p/'))).toBe(0);
    // A later write starts a fresh index whose floor is the last id minted: still correct.
    const b = (await ledger.mint('p/')).batchId;
    const c = (await ledger.mint('p/')).batchId;
    await ledger.markWritten('p/', c, 2);
    await ledger.markWritten('p/', b, 2);
    expect((await ledger.listWritten('p/', a, 10)).ids).toBeNull();
    expect((await ledger.listWritten('p/', c, 10)).ids).toEqual([]);
  });
});
