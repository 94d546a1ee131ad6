import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { decodeJob, encode, restoreBody } from '../../services/encoder/pipeline.js';
import { encodeBatch } from '../../shared/parquet/encode.js';
import { type BatchJob, outputChunk, packBody, packParquet, unpackBody } from '../../shared/redis/jobs/push.js';

/** A JSON-ish body of about `bytes` bytes that deflate can squeeze (repeated keys, random ids). */
function bodyOf(bytes: number): Buffer {
  const parts: string[] = [];
  let size = 0;
  while (size < bytes) {
    const e = `{"event":"page_view","message_id":"${randomBytes(8).toString('hex')}","properties":{"path":"/a/b"}},`;
    parts.push(e);
    size += e.length;
  }
  return Buffer.from(`{"data":{"events":[${parts.join('').slice(0, -1)}]},"baseHash":null}`);
}

const job = (packed: Pick<BatchJob, 'encoding' | 'body' | 'bodyBytes' | 'jsonBytes'>): BatchJob => ({
  v: 1,
  collection: 'events',
  key: 'events/a/1.parquet',
  prefix: 'events/a/',
  params: { app: 'a' },
  batchId: '1',
  receivedAt: 1,
  events: 1,
  ...packed,
});

describe('job payload packing', () => {
  // Below 1 KiB as text; up to 128 KiB deflated inline; above that on the libuv pool.
  it.each([100, 5_000, 60_000, 128 * 1024, 128 * 1024 + 1, 1_000_000])(
    'a %i-byte body comes back byte for byte',
    async (n) => {
      const body = bodyOf(n);
      const packed = await packBody(body);
      expect(packed.encoding).toBe(body.length < 1024 ? 'identity' : 'deflate-raw');
      expect(packed.bodyBytes).toBe(body.length);
      if (packed.encoding === 'deflate-raw')
        expect(Buffer.from(packed.body, 'base64').length).toBeLessThan(body.length / 2);
      expect((await unpackBody(packed)).equals(body)).toBe(true);
      // What the encoder does with it: the job passes the contract and the body is restored.
      const decoded = decodeJob(job(packed));
      expect(decoded.ok).toBe(true);
      const restored = await restoreBody(job(packed));
      expect(restored.ok && restored.value.equals(body)).toBe(true);
    },
  );

  it.each([5_000, 1_000_000])('a corrupt or understated %i-byte payload is a bad batch, not a crash', async (n) => {
    const packed = await packBody(bodyOf(n));
    const corrupt = await restoreBody(job({ ...packed, body: Buffer.from('not deflate at all').toString('base64') }));
    expect(corrupt.ok).toBe(false);
    // A payload that inflates past its advertised size is refused (the size bounds memory).
    const understated = await restoreBody(job({ ...packed, bodyBytes: 100 }));
    expect(understated).toMatchObject({ ok: false, reason: expect.stringMatching(/cannot be unpacked/) });
    // One that inflates short of it is refused too, naming both sizes (the second claim is past
    // the output buffer's cap, tested below).
    for (const bodyBytes of [packed.bodyBytes + 1, 200 * 1024 * 1024]) {
      const overstated = await restoreBody(job({ ...packed, bodyBytes }));
      expect(overstated).toMatchObject({
        ok: false,
        reason: `job body cannot be unpacked: the payload holds ${packed.bodyBytes} bytes, the job says ${bodyBytes}`,
      });
    }
  });

  it('a text payload whose size is not the one recorded is refused', async () => {
    const packed = await packBody(Buffer.from('{"data":{"events":[]},"baseHash":null}'));
    expect(packed.encoding).toBe('identity');
    expect(await restoreBody(job({ ...packed, bodyBytes: packed.bodyBytes - 1 }))).toMatchObject({
      ok: false,
      reason: expect.stringMatching(/holds \d+ bytes, the job says/),
    });
    expect(await restoreBody(job(packed))).toMatchObject({ ok: true });
  });

  it('a Parquet file the API encoded comes back as it is, and the encoder writes it without encoding', async () => {
    const body = bodyOf(200_000);
    const encoded = encodeBatch(body, 1);
    if (!encoded.ok) throw new Error(encoded.reason);
    const packed = packParquet(encoded.bytes, body.length);
    expect(packed).toMatchObject({ encoding: 'parquet', bodyBytes: encoded.bytes.byteLength, jsonBytes: body.length });
    const decoded = decodeJob({ ...job(packed), events: 7 });
    if (!decoded.ok) throw new Error(decoded.reason);
    expect(decoded.value.jsonBytes).toBe(body.length);
    const restored = await restoreBody(decoded.value);
    if (!restored.ok) throw new Error(restored.reason);
    expect(restored.value.equals(Buffer.from(encoded.bytes))).toBe(true);
    // Rows as the API counted them; the bytes are the file.
    expect(encode(decoded.value, restored.value)).toEqual({ ok: true, value: { bytes: restored.value, rows: 7 } });
  });

  it('a Parquet payload of the wrong size, or that is not a Parquet file, is a bad batch', async () => {
    const encoded = encodeBatch(bodyOf(5_000), 1);
    if (!encoded.ok) throw new Error(encoded.reason);
    const packed = packParquet(encoded.bytes, 5_000);
    expect(await restoreBody(job({ ...packed, bodyBytes: packed.bodyBytes + 1 }))).toMatchObject({
      ok: false,
      reason: expect.stringMatching(/holds \d+ bytes, the job says/),
    });
    const cut = Buffer.from(encoded.bytes).subarray(0, encoded.bytes.byteLength - 1);
    expect(await restoreBody(job({ ...packed, body: cut.toString('base64'), bodyBytes: cut.length }))).toMatchObject({
      ok: false,
      reason: expect.stringMatching(/not a Parquet file/),
    });
    const json = Buffer.from('{"data":{"events":[]},"baseHash":null}');
    expect(
      await restoreBody(job({ encoding: 'parquet', body: json.toString('base64'), bodyBytes: json.length })),
    ).toMatchObject({ ok: false, reason: expect.stringMatching(/not a Parquet file/) });
  });

  it("sizes zlib's output buffer to the output, within zlib's default and 16 MiB", () => {
    expect(outputChunk(0)).toBe(16 * 1024);
    expect(outputChunk(60_000)).toBe(60_000);
    expect(outputChunk(8_000_064)).toBe(8_000_064);
    // A size claimed by a damaged job is not allocated whole.
    expect(outputChunk(200 * 1024 * 1024 + 64)).toBe(16 * 1024 * 1024);
  });
});
