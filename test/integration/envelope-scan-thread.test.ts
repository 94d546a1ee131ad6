/**
 * The API's envelope scan thread (shared/envelope-scan-thread.ts): a real worker thread gives the
 * check the event loop would, moves the body there and back without changing a byte, and once it
 * is gone, scans fail at once (admission then checks a body it still holds on the loop). Its
 * prepare (for bodies the API encodes itself) gives the same result and Parquet file as
 * `prepareBatch` on the loop.
 */
import { createHash } from 'node:crypto';
import { afterAll, describe, expect, it } from 'vitest';
import { checkEnvelope } from '../../shared/envelope.js';
import { prepareBatch } from '../../shared/parquet/encode.js';
import { EnvelopeScanThread, envelopeScanThread } from '../../shared/envelope-scan-thread.js';
import { adversarialBody, plainBody } from '../helpers/adversarial-bodies.js';
import { waitFor } from '../helpers/proc.js';

const sha = (b: Uint8Array): string => createHash('sha256').update(b).digest('hex');

/** A body in a Buffer that fills its own ArrayBuffer, as body.ts reads them. */
const owned = (text: string): Buffer => {
  const b = Buffer.allocUnsafeSlow(Buffer.byteLength(text));
  b.write(text);
  return b;
};

describe('EnvelopeScanThread', () => {
  const thread = new EnvelopeScanThread();
  afterAll(() => thread.close());

  it("checks bodies as the loop's checkEnvelope does, many at once, and gives each body back intact", async () => {
    const bodies = [
      plainBody(1_000_000),
      adversarialBody('escaped keys (32 per event)', 2_000_000),
      '{"data":{"events":[{"a":1},{"a":1,"a":2}]},"baseHash":null}',
      '{"data":{"events":[{"message_id":"m1"}]},"baseHash":null}',
      '{"data":',
      `${plainBody(300_000).slice(0, -1)}\u00e9\u00ff`,
    ].map(owned);
    const expected = bodies.map((b) => ({ check: checkEnvelope(b), hash: sha(b), length: b.length }));
    const scanned = await Promise.all(bodies.map((b) => thread.scan(b)));
    for (const [i, s] of scanned.entries()) {
      const e = expected[i]!;
      expect(s.check).toEqual(e.check);
      expect(s.body.length).toBe(e.length);
      expect(sha(s.body)).toBe(e.hash);
      // Moved, not copied: the Buffer passed in is left empty.
      expect(bodies[i]!.length).toBe(0);
    }
    expect(scanned.map((s) => s.check.ok)).toEqual([true, true, false, true, false, false]);
  });

  it("prepares bodies as the loop's prepareBatch does: same check, same errors, same Parquet bytes once stamped", async () => {
    const bodies = [
      plainBody(600_000),
      adversarialBody('escaped keys (32 per event)', 400_000),
      '{"data":{"events":[{"a":1},{"a":1,"a":2}]},"baseHash":null}',
      '{"data":',
      '',
    ].map(owned);
    const at = Date.UTC(2026, 11, 6, 12, 0, 0, 123);
    const expected = bodies.map((b) => {
      const r = prepareBatch(b);
      return {
        result: r.ok ? { rows: r.batch.rows, everyEventHasMessageId: r.everyEventHasMessageId } : r,
        file: r.ok ? sha(r.batch.toParquet(at)) : undefined,
        hash: sha(b),
      };
    });
    const prepared = await Promise.all(bodies.map((b) => thread.prepare(b, 100_000)));
    for (const [i, p] of prepared.entries()) {
      const e = expected[i]!;
      if (!('prepared' in p)) throw new Error(`body ${i} was only checked`);
      const r = p.prepared;
      expect(r.ok ? { rows: r.batch.rows, everyEventHasMessageId: r.everyEventHasMessageId } : r).toEqual(e.result);
      expect(r.ok ? sha(r.batch.toParquet(at)) : undefined).toBe(e.file);
      expect(sha(p.body)).toBe(e.hash);
    }
    expect(prepared.map((p) => 'prepared' in p && p.prepared.ok)).toEqual([true, true, false, false, false]);
    // A check after prepares still answers in order.
    expect((await thread.scan(owned(plainBody(300_000)))).check.ok).toBe(true);
  });

  it('only checks a body of more events than the cap: its count, or an error found after the cap, as the check gives them', async () => {
    const many = `{"data":{"events":[${Array.from({ length: 5000 }, () => '{}').join(',')}]},"baseHash":null}`;
    const badAfter = `{"data":{"events":[${Array.from({ length: 5000 }, () => '{}').join(',')},{"a":}]},"baseHash":null}`;
    const atCap = await thread.prepare(owned(many), 5000);
    expect('prepared' in atCap && atCap.prepared.ok && atCap.prepared.batch.rows).toBe(5000);
    const over = await thread.prepare(owned(many), 4999);
    expect('check' in over && over.check).toEqual({ ok: true, events: 5000, everyEventHasMessageId: false });
    expect(over.body.toString()).toBe(many);
    const bad = await thread.prepare(owned(badAfter), 100);
    expect('check' in bad && bad.check).toEqual(checkEnvelope(Buffer.from(badAfter)));
    expect('check' in bad && bad.check.ok).toBe(false);
  });

  it('is not warm for prepares until warmPrepare has loaded their module there; warming twice sends one warm-up', async () => {
    const fresh = new EnvelopeScanThread();
    try {
      expect(fresh.prepareWarm).toBe(false);
      fresh.warmPrepare();
      fresh.warmPrepare();
      await waitFor(async () => fresh.prepareWarm, 10_000, 'the scan thread warm for prepares');
      const p = await fresh.prepare(owned(plainBody(300_000)), 100_000);
      expect('prepared' in p && p.prepared.ok).toBe(true);
    } finally {
      await fresh.close();
    }
  });

  it('copies a body that does not fill its ArrayBuffer, and leaves it as it was', async () => {
    const pooled = Buffer.from('{"data":{"events":[{"e":1},{"e":2}]},"baseHash":null}');
    expect(pooled.byteLength).toBeLessThan(pooled.buffer.byteLength);
    const s = await thread.scan(pooled);
    expect(s.check).toEqual({ ok: true, events: 2, everyEventHasMessageId: false });
    expect(pooled.toString()).toBe(s.body.toString());
  });

  it('once closed, every scan fails at once and the body stays here; the shared holder starts a new thread', async () => {
    const other = new EnvelopeScanThread();
    const body = owned(plainBody(400_000));
    await other.close();
    await other.close();
    expect(other.gone).toBe(true);
    await expect(other.scan(body)).rejects.toThrow(/closed/);
    expect(body.length).toBeGreaterThan(0);
    const first = envelopeScanThread();
    expect(first.gone).toBe(false);
    await first.close();
    const second = envelopeScanThread();
    expect(second).not.toBe(first);
    expect((await second.scan(owned(plainBody(300_000)))).check.ok).toBe(true);
    await second.close();
  });
});
