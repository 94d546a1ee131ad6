/**
 * The API's Parquet encode thread (shared/parquet/encode-thread-pool.ts): a real worker thread
 * running parquet-wasm gives the bytes the event loop would; once it is gone, encodes fail at once
 * (and the push falls back to the JSON payload: test/integration/api-encode.test.ts).
 */
import { afterAll, describe, expect, it } from 'vitest';
import { prepareBatch } from '../../shared/parquet/encode.js';
import { EncodeThreadHolder, ParquetEncodeThread } from '../../shared/parquet/encode-thread-pool.js';
import { batchBody } from '../helpers/events.js';
import { holdsFor, waitFor } from '../helpers/wait.js';

describe('ParquetEncodeThread', () => {
  const thread = new ParquetEncodeThread();
  afterAll(() => thread.close());

  it('encodes stamped batches, many at once, to the bytes the event loop would', async () => {
    const prepared = [1, 300, 1000, 5].map((n) => {
      const p = prepareBatch(Buffer.from(batchBody(n)));
      if (!p.ok) throw new Error(p.reason);
      return p.batch;
    });
    const at = 1_782_933_157_690;
    const files = await Promise.all(prepared.map((p, i) => thread.encode(p.stamp(at + i))));
    expect(thread.inFlight).toBe(0);
    for (const [i, p] of prepared.entries())
      expect(Buffer.from(files[i] as Uint8Array).equals(Buffer.from(p.toParquet(at + i)))).toBe(true);
  });

  it("rejects a stream that is not Arrow IPC with parquet-wasm's reason, and goes on", async () => {
    await expect(thread.encode(new Uint8Array([1, 2, 3, 4, 5, 6, 7, 8]))).rejects.toThrow(/./);
    const p = prepareBatch(Buffer.from(batchBody(2)));
    if (!p.ok) throw new Error(p.reason);
    expect((await thread.encode(p.batch.stamp(1))).byteLength).toBeGreaterThan(0);
    expect(thread.gone).toBe(false);
  });

  it('once closed, every encode fails at once', async () => {
    const other = new ParquetEncodeThread();
    const p = prepareBatch(Buffer.from(batchBody(3)));
    if (!p.ok) throw new Error(p.reason);
    expect((await other.encode(p.batch.stamp(1))).byteLength).toBeGreaterThan(0);
    await other.close();
    expect(other.gone).toBe(true);
    await expect(other.encode(p.batch.stamp(1))).rejects.toThrow(/closed/);
  });

  it('moves a transferred stream without a copy, and retires once idle with its wasm memory over the bound', async () => {
    const small = new ParquetEncodeThread({ retireAboveWasmBytes: 1, retireIdleMs: 50 });
    const p = prepareBatch(Buffer.from(batchBody(200)));
    if (!p.ok) throw new Error(p.reason);
    const expected = Buffer.from(p.batch.toParquet(7));
    const ipc = p.batch.stamp(7);
    const file = await small.encode(ipc, { transfer: true });
    expect(Buffer.from(file).equals(expected)).toBe(true);
    // Transferred: the caller's view is detached.
    expect(ipc.byteLength).toBe(0);
    expect(small.wasmBytes).toBeGreaterThan(1);
    // parquet-wasm's memory never shrinks: past the bound, an idle thread ends and gives it back.
    await waitFor(async () => small.gone, 10_000, 'the thread to be retired');
    await expect(small.encode(new Uint8Array(8))).rejects.toThrow(/closed/);
    // A thread under its bound stays.
    const big = new ParquetEncodeThread({ retireAboveWasmBytes: 1024 * 1024 * 1024, retireIdleMs: 50 });
    const q = prepareBatch(Buffer.from(batchBody(20)));
    if (!q.ok) throw new Error(q.reason);
    expect((await big.encode(q.batch.stamp(1))).byteLength).toBeGreaterThan(0);
    await holdsFor(() => !big.gone, 300, 'a thread under its bound to stay');
    await big.close();
  });
});

describe('EncodeThreadHolder', () => {
  it('keeps one thread while it lives, starts a new one once it is retired or closed, and encodes on it', async () => {
    const holder = new EncodeThreadHolder({ retireAboveWasmBytes: 1, retireIdleMs: 50 });
    try {
      const first = holder.get();
      expect(holder.get()).toBe(first);
      const p = prepareBatch(Buffer.from(batchBody(50)));
      if (!p.ok) throw new Error(p.reason);
      expect((await first.encode(p.batch.stamp(1))).byteLength).toBeGreaterThan(0);
      // Past its wasm bound and idle: retired, and the next get starts a fresh thread that encodes.
      await waitFor(async () => first.gone, 10_000, 'the held thread to be retired');
      const second = holder.get();
      expect(second).not.toBe(first);
      expect(second.gone).toBe(false);
      expect((await second.encode(p.batch.stamp(2))).byteLength).toBeGreaterThan(0);
      await holder.close();
      expect(second.gone).toBe(true);
      const third = holder.get();
      expect(third).not.toBe(second);
      expect(third.gone).toBe(false);
    } finally {
      await holder.close();
    }
    await holder.close();
  });
});
