import { createHash } from 'node:crypto';
import { asyncBufferFromUrl, parquetMetadataAsync } from 'hyparquet';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decideRange, ifRangeAllows } from '../../services/api/range.js';
import { EVENT_COLUMNS } from '../../shared/parquet/encode.js';
import { batchBody } from '../helpers/events.js';
import { waitFor } from '../helpers/proc.js';
import { ADMIN_TOKEN, type TestStack, startTestStack } from '../helpers/stack.js';

const auth = { Authorization: `Bearer ${ADMIN_TOKEN}` };
const ROWS = 2000;

describe('decideRange (pure)', () => {
  it('single ranges: a-b, a-, -n, clamping, and what is unsatisfiable', () => {
    expect(decideRange(undefined, 100)).toEqual({ kind: 'full' });
    expect(decideRange('bytes=0-9', 100)).toEqual({ kind: 'partial', start: 0, end: 9 });
    expect(decideRange('bytes=90-', 100)).toEqual({ kind: 'partial', start: 90, end: 99 });
    expect(decideRange('bytes=-8', 100)).toEqual({ kind: 'partial', start: 92, end: 99 });
    expect(decideRange('bytes=-500', 100)).toEqual({ kind: 'partial', start: 0, end: 99 });
    expect(decideRange('bytes=50-5000', 100)).toEqual({ kind: 'partial', start: 50, end: 99 });
    expect(decideRange('Bytes = 5-5', 100)).toEqual({ kind: 'partial', start: 5, end: 5 });
    expect(decideRange('bytes=100-', 100)).toEqual({ kind: 'unsatisfiable' });
    expect(decideRange('bytes=100-200', 100)).toEqual({ kind: 'unsatisfiable' });
    expect(decideRange('bytes=-0', 100)).toEqual({ kind: 'unsatisfiable' });
    expect(decideRange('bytes=0-', 0)).toEqual({ kind: 'unsatisfiable' });
  });

  it('ignored (whole body): other units, syntax errors, reversed, several ranges', () => {
    for (const h of [
      'items=0-1',
      'bytes=',
      'bytes=-',
      'bytes=a-b',
      'bytes=5-1',
      'bytes=0x10-20',
      'bytes=1e2-',
      'bytes=0-1,5-6',
      'bytes=--1',
      'bytes=1-2-3',
      'bytes=1234567890123456-',
    ]) {
      expect(decideRange(h, 100), h).toEqual({ kind: 'full' });
    }
  });

  it('If-Range: only our exact strong ETag lets Range apply', () => {
    expect(ifRangeAllows(undefined, '"abc"')).toBe(true);
    expect(ifRangeAllows('"abc"', '"abc"')).toBe(true);
    expect(ifRangeAllows('W/"abc"', '"abc"')).toBe(false);
    expect(ifRangeAllows('"other"', '"abc"')).toBe(false);
    expect(ifRangeAllows('Wed, 21 Oct 2015 07:28:00 GMT', '"abc"')).toBe(false);
  });
});

describe('pull with HEAD and Range against the running product', () => {
  let s: TestStack;
  let url: string;
  let file: Buffer;
  let size: number;
  let etag: string;

  const get = (headers: Record<string, string> = {}, method = 'GET'): Promise<Response> =>
    fetch(url, { method, headers: { ...auth, ...headers } });
  const bytesOf = async (r: Response): Promise<Buffer> => Buffer.from(await r.arrayBuffer());

  beforeAll(async () => {
    s = await startTestStack();
    const pushed = await fetch(`${s.url}/push/events/ranged/x`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: batchBody(ROWS),
    });
    expect(pushed.status).toBe(200);
    const { batchId } = (await pushed.json()) as { batchId: string };
    await waitFor(
      async () => {
        const r = await fetch(`${s.url}/list/events/ranged`, { headers: auth });
        return ((await r.json()) as { items: string[] }).items.length === 1;
      },
      30_000,
      'batch listed',
    );
    url = `${s.url}/pull/events/ranged/${batchId}.parquet`;
    const full = await get();
    expect(full.status).toBe(200);
    expect(full.headers.get('accept-ranges')).toBe('bytes');
    file = await bytesOf(full);
    size = file.byteLength;
    etag = full.headers.get('etag') as string;
    expect(etag).toBe(`"${createHash('sha256').update(file).digest('hex')}"`);
  });
  afterAll(async () => {
    await s?.shutdown();
  });

  it('HEAD: the GET headers (length, ETag, Accept-Ranges, type) and no body; still needs the token', async () => {
    const r = await get({}, 'HEAD');
    expect(r.status).toBe(200);
    expect(r.headers.get('content-length')).toBe(String(size));
    expect(r.headers.get('etag')).toBe(etag);
    expect(r.headers.get('accept-ranges')).toBe('bytes');
    expect(r.headers.get('content-type')).toBe('application/vnd.apache.parquet');
    expect((await bytesOf(r)).byteLength).toBe(0);
    expect((await fetch(url, { method: 'HEAD' })).status).toBe(401);
    const ranged = await get({ Range: 'bytes=-8' }, 'HEAD');
    expect(ranged.status).toBe(206);
    expect(ranged.headers.get('content-length')).toBe('8');
  });

  it('footer-only read: bytes=-8 gives the footer length and PAR1, then the footer by an explicit range', async () => {
    const tail = await get({ Range: 'bytes=-8' });
    expect(tail.status).toBe(206);
    expect(tail.headers.get('content-range')).toBe(`bytes ${size - 8}-${size - 1}/${size}`);
    expect(tail.headers.get('content-length')).toBe('8');
    expect(tail.headers.get('etag')).toBe(etag);
    const last8 = await bytesOf(tail);
    expect(last8.subarray(4).toString('latin1')).toBe('PAR1');
    const footerLength = last8.readUInt32LE(0);
    expect(footerLength).toBeGreaterThan(0);
    expect(footerLength).toBeLessThan(size - 12);

    const start = size - 8 - footerLength;
    const footer = await get({ Range: `bytes=${start}-${size - 9}` });
    expect(footer.status).toBe(206);
    expect(footer.headers.get('content-range')).toBe(`bytes ${start}-${size - 9}/${size}`);
    expect((await bytesOf(footer)).equals(file.subarray(start, size - 8))).toBe(true);

    const head = await get({ Range: 'bytes=0-3' });
    expect((await bytesOf(head)).toString('latin1')).toBe('PAR1');
  });

  it('open-ended and suffix ranges, ends clamped to the file', async () => {
    const open = await get({ Range: `bytes=${size - 100}-` });
    expect(open.status).toBe(206);
    expect(open.headers.get('content-range')).toBe(`bytes ${size - 100}-${size - 1}/${size}`);
    expect((await bytesOf(open)).equals(file.subarray(size - 100))).toBe(true);

    const suffix = await get({ Range: 'bytes=-1000' });
    expect(suffix.status).toBe(206);
    expect((await bytesOf(suffix)).equals(file.subarray(size - 1000))).toBe(true);

    const longer = await get({ Range: `bytes=-${size + 50}` });
    expect(longer.status).toBe(206);
    expect(longer.headers.get('content-range')).toBe(`bytes 0-${size - 1}/${size}`);
    expect((await bytesOf(longer)).equals(file)).toBe(true);

    const clamped = await get({ Range: `bytes=10-${size + 1000}` });
    expect(clamped.headers.get('content-range')).toBe(`bytes 10-${size - 1}/${size}`);
    expect((await bytesOf(clamped)).equals(file.subarray(10))).toBe(true);
  });

  it('unsatisfiable ranges: 416 with Content-Range bytes */size and not cached', async () => {
    for (const range of [`bytes=${size}-`, `bytes=${size + 5}-${size + 10}`, 'bytes=-0']) {
      const r = await get({ Range: range });
      expect(r.status, range).toBe(416);
      expect(r.headers.get('content-range')).toBe(`bytes */${size}`);
      // Errors are never cached (security headers: no-store), unlike the file's year-long max-age.
      expect(r.headers.get('cache-control')).toBe('no-store');
      expect(((await r.json()) as { error: string }).error).toMatch(/range not satisfiable/);
    }
  });

  it('several ranges or a malformed one: the whole file with 200; If-None-Match still 304; If-Range decides', async () => {
    for (const range of ['bytes=0-1,4-5', 'bytes=abc', 'items=0-1', 'bytes=9-3']) {
      const r = await get({ Range: range });
      expect(r.status, range).toBe(200);
      expect((await bytesOf(r)).equals(file)).toBe(true);
    }
    const notModified = await get({ Range: 'bytes=-8', 'If-None-Match': etag });
    expect(notModified.status).toBe(304);
    expect(notModified.headers.get('accept-ranges')).toBe('bytes');
    const same = await get({ Range: 'bytes=-8', 'If-Range': etag });
    expect(same.status).toBe(206);
    const changed = await get({ Range: 'bytes=-8', 'If-Range': '"0000"' });
    expect(changed.status).toBe(200);
    expect((await bytesOf(changed)).byteLength).toBe(size);
  });

  it('hyparquet reads the metadata through ranged fetches, downloading a fraction of the file', async () => {
    const seen: { method: string; range: string | null; status: number; bodyBytes: number }[] = [];
    const countingFetch: typeof fetch = async (input, init) => {
      const r = await fetch(input, init);
      const method = init?.method ?? 'GET';
      const range = new Headers(init?.headers).get('range');
      const len = Number(r.headers.get('content-length') ?? 0);
      // HEAD carries the whole file's length but no body.
      seen.push({ method, range, status: r.status, bodyBytes: method === 'HEAD' ? 0 : len });
      return r;
    };
    const buffer = await asyncBufferFromUrl({ url, requestInit: { headers: auth }, fetch: countingFetch });
    expect(buffer.byteLength).toBe(size);
    // hyparquet's first read is the last 512 KB by default; a small initial read makes it fetch footer then metadata as range readers do on big files.
    const meta = await parquetMetadataAsync(buffer, { initialFetchSize: 1024 });
    expect(meta.num_rows).toBe(BigInt(ROWS));
    expect(meta.schema.slice(1).map((c) => c.name)).toEqual([...EVENT_COLUMNS, 'received_at', 'extra']);
    const fetched = seen.reduce((a, r) => a + r.bodyBytes, 0);
    expect(seen[0]?.method).toBe('HEAD');
    expect(seen.slice(1).every((r) => r.status === 206 && r.range !== null)).toBe(true);
    expect(seen.length).toBeGreaterThanOrEqual(2);
    expect(fetched).toBeGreaterThan(8);
    expect(fetched).toBeLessThan(size / 2);
    console.log(`hyparquet metadata: ${seen.length} requests, ${fetched} of ${size} bytes`);
  });
});
