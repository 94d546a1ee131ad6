/**
 * Content-Encoding on push: gzip, deflate and br bodies are decoded as they stream and stored
 * exactly like the plain body; the hash is of the bytes as sent; a decompression bomb is refused
 * with 413 as soon as its decoded size passes maxBodyBytes, fast and with flat memory.
 */
import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { brotliCompressSync, createGzip, deflateRawSync, deflateSync, gzipSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { duckQuery, sqlString } from '../helpers/duckdb.js';
import { batchBody, sampleEvent } from '../helpers/events.js';
import { uniqueName } from '../helpers/names.js';
import { type ServiceProcess, startService, waitFor, waitForHttp } from '../helpers/proc.js';
import { freePort } from '../helpers/redis-server.js';
import { type TestStack, startTestStack } from '../helpers/stack.js';

const sha256 = (b: Buffer): string => createHash('sha256').update(b).digest('hex');

/** Raw HTTP POST (no Content-Length when `chunked`), so the test controls every header and byte. */
function post(
  url: string,
  body: Buffer,
  headers: Record<string, string>,
  chunked = false,
): Promise<{ status: number; body: string; headers: http.IncomingHttpHeaders }> {
  return new Promise((resolve, reject) => {
    const req = http.request(url, {
      method: 'POST',
      agent: false,
      headers: chunked ? headers : { ...headers, 'Content-Length': String(body.length) },
    });
    req.setTimeout(30_000, () => req.destroy(new Error('request timed out')));
    req.on('response', (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () =>
        resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString(), headers: res.headers }),
      );
      res.on('error', reject);
    });
    req.on('error', reject);
    if (chunked) {
      // Several writes, so the body really arrives in pieces.
      for (let i = 0; i < body.length; i += 4096) req.write(body.subarray(i, i + 4096));
      req.end();
    } else req.end(body);
  });
}

describe('Content-Encoding on push (in-process stack, real Redis, filesystem store)', () => {
  let s: TestStack;
  let plain: Buffer;
  let variants: { name: string; headers: Record<string, string>; bytes: Buffer; chunked?: boolean }[];

  beforeAll(async () => {
    // Compressed before the stack starts: seconds of synchronous zlib on a loaded machine would
    // otherwise starve the in-process stack's Redis start-up commands of their timeouts.
    // Non-ASCII text, escapes and a multi-byte character split across output slices of the decoder.
    plain = Buffer.from(
      batchBody(400, (i) => ({ ...sampleEvent(i), properties: { note: `café ☕ 𝄞 "q" \\ ${'é'.repeat(i % 50)}`, i } })),
    );
    variants = [
      { name: 'plain', headers: {}, bytes: plain },
      { name: 'gzip', headers: { 'Content-Encoding': 'gzip' }, bytes: gzipSync(plain) },
      { name: 'deflate', headers: { 'Content-Encoding': 'deflate' }, bytes: deflateSync(plain) },
      { name: 'br', headers: { 'Content-Encoding': 'br' }, bytes: brotliCompressSync(plain) },
      { name: 'x-gzip', headers: { 'Content-Encoding': 'X-GZIP' }, bytes: gzipSync(plain, { level: 1 }) },
      {
        name: 'identity',
        headers: { 'Content-Encoding': 'identity' },
        bytes: Buffer.concat([plain, Buffer.from(' ')]),
      },
      {
        name: 'gzip chunked',
        headers: { 'Content-Encoding': 'gzip' },
        bytes: gzipSync(plain, { level: 9 }),
        chunked: true,
      },
      { name: 'plain chunked', headers: {}, bytes: Buffer.concat([plain, Buffer.from('\n')]), chunked: true },
    ];
    s = await startTestStack();
  });
  afterAll(async () => {
    await s.shutdown();
  });

  /** Every column but received_at (each batch has its own), in message order. */
  async function rowsOf(batchId: string, app: string): Promise<Record<string, unknown>[]> {
    const file = join(s.dataDir, 'events', app, `${batchId}.parquet`);
    await waitFor(async () => existsSync(file), 30_000, `file of ${batchId}`);
    return duckQuery(`SELECT * EXCLUDE (received_at) FROM read_parquet(${sqlString(file)}) ORDER BY message_id`);
  }

  it('gzip, deflate, br (and x-gzip, identity, chunked uploads) are stored exactly like the plain body; hash = sha256 of the bytes sent', async () => {
    const app = 'enc';
    const results: { name: string; batchId: string }[] = [];
    for (const v of variants) {
      // Most variants decode to the same body, which body dedup would take for a retry of the
      // first: a key of its own makes each its own batch.
      const headers = {
        'Content-Type': 'application/json',
        'Idempotency-Key': `enc-${v.name.replace(/ /g, '-')}`,
        ...v.headers,
      };
      // A 503 + Retry-After (Redis slow on a loaded machine) is retried as a client would; bounded.
      let r = await post(`${s.url}/push/events/${app}/x`, v.bytes, headers, v.chunked);
      for (let attempt = 0; attempt < 3 && r.status === 503 && r.headers['retry-after']; attempt++) {
        await new Promise((resolve) => setTimeout(resolve, 1000));
        r = await post(`${s.url}/push/events/${app}/x`, v.bytes, headers, v.chunked);
      }
      expect(r.status, `${v.name}: ${r.body}`).toBe(200);
      const answer = JSON.parse(r.body) as { hash: string; batchId: string };
      expect(answer.hash, v.name).toBe(sha256(v.bytes));
      results.push({ name: v.name, batchId: answer.batchId });
    }
    expect(new Set(results.map((r) => r.batchId)).size).toBe(variants.length);
    const expected = await rowsOf(results[0]!.batchId, app);
    expect(expected).toHaveLength(400);
    for (const r of results.slice(1)) expect(await rowsOf(r.batchId, app), r.name).toEqual(expected);
  });

  it('refuses unknown and stacked codings with 415, corrupt streams with 400, each naming the encoding', async () => {
    const plain = Buffer.from(batchBody(20));
    // Raw requests: supertest serialises a Buffer sent with a JSON Content-Type, which would make every corrupt case pass vacuously.
    const push = async (headers: Record<string, string>, bytes: Buffer) => {
      const r = await post(`${s.url}/push/events/enc-bad/x`, bytes, { 'Content-Type': 'application/json', ...headers });
      return { status: r.status, body: JSON.parse(r.body) as { error: string } };
    };
    const before = await s.registry.getSingleMetricAsString('ingest_push_rejections_total');

    const bogus = await push({ 'Content-Encoding': 'x-bogus' }, plain);
    expect(bogus.status).toBe(415);
    expect(bogus.body.error).toMatch(/Content-Encoding "x-bogus" is not supported/);
    const stacked = await push({ 'Content-Encoding': 'gzip, br' }, brotliCompressSync(gzipSync(plain)));
    expect(stacked.status).toBe(415);
    expect(stacked.body.error).toMatch(/"gzip, br" stacks 2 codings/);

    const gz = gzipSync(plain);
    const corrupt = Buffer.from(gz);
    corrupt.fill(0x55, 20, 60);
    for (const [coding, bytes] of [
      ['gzip', corrupt],
      ['gzip', gz.subarray(0, gz.length - 30)],
      ['deflate', deflateRawSync(plain)],
      ['br', Buffer.from('not brotli at all, just text')],
    ] as const) {
      const r = await push({ 'Content-Encoding': coding }, bytes);
      expect(r.status, `${coding}: ${JSON.stringify(r.body)}`).toBe(400);
      expect(r.body.error).toContain(`not valid ${coding} data`);
    }

    // Decoded size past maxBodyBytes (8 MB): 413, though the gzip itself is small.
    const big = gzipSync(Buffer.from(batchBody(16_000)));
    expect(big.length).toBeLessThan(8_000_000);
    const tooBig = await push({ 'Content-Encoding': 'gzip' }, big);
    expect(tooBig.status, JSON.stringify(tooBig.body)).toBe(413);
    expect(tooBig.body.error).toMatch(
      /decoded from Content-Encoding gzip is over this collection's limit of 8000000 bytes/,
    );

    const after = await s.registry.getSingleMetricAsString('ingest_push_rejections_total');
    const count = (text: string, reason: string): number =>
      Number(new RegExp(`reason="${reason}"[^}]*\\} (\\d+)`).exec(text)?.[1] ?? 0);
    expect(count(after, 'content_encoding') - count(before, 'content_encoding')).toBe(2);
    expect(count(after, 'bad_encoding') - count(before, 'bad_encoding')).toBe(4);
    expect(count(after, 'too_large') - count(before, 'too_large')).toBe(1);
    // Nothing of any refused push was stored.
    expect(existsSync(join(s.dataDir, 'events', 'enc-bad'))).toBe(false);
  });

  it('exactly one stream per Content-Encoding: a second stream or trailing bytes -> 400, nothing stored; one stream (in many chunks) -> 200', async () => {
    // 400 events: several KB compressed, so the chunked uploads below arrive in many pieces.
    const one = Buffer.from(batchBody(400));
    const two = Buffer.from(batchBody(3));
    const half = Math.floor(one.length / 2);
    const garbage = Buffer.from('trailing garbage after the stream');
    const compress = { deflate: deflateSync, br: brotliCompressSync, gzip: gzipSync } as const;
    const refusedCases: [keyof typeof compress, string, Buffer][] = [];
    for (const coding of ['deflate', 'br'] as const) {
      const z = compress[coding];
      refusedCases.push(
        [coding, 'two streams', Buffer.concat([z(one), z(two)])],
        [coding, 'stream + garbage', Buffer.concat([z(one), garbage])],
        [coding, 'stream + zero padding', Buffer.concat([z(one), Buffer.alloc(16)])],
        [coding, 'a JSON split over two streams', Buffer.concat([z(one.subarray(0, half)), z(one.subarray(half))])],
      );
    }
    // Node's gunzip reads on into a second gzip member and skips zero padding: both are refused too.
    refusedCases.push(
      [
        'gzip',
        'a JSON split over two members',
        Buffer.concat([gzipSync(one.subarray(0, half)), gzipSync(one.subarray(half))]),
      ],
      ['gzip', 'stream + zero padding', Buffer.concat([gzipSync(one), Buffer.alloc(16)])],
      ['gzip', 'stream + zero, then garbage', Buffer.concat([gzipSync(one), Buffer.from([0]), garbage])],
    );
    const app = 'enc-trailing';
    const badEncoding = async (): Promise<number> =>
      Number(
        /reason="bad_encoding"[^}]*\} (\d+)/.exec(
          await s.registry.getSingleMetricAsString('ingest_push_rejections_total'),
        )?.[1] ?? 0,
      );
    const before = await badEncoding();
    for (const [coding, what, bytes] of refusedCases) {
      for (const chunked of [false, true]) {
        const r = await post(
          `${s.url}/push/events/${app}/x`,
          bytes,
          { 'Content-Type': 'application/json', 'Content-Encoding': coding },
          chunked,
        );
        expect(r.status, `${coding} ${what} (chunked ${chunked}): ${r.body}`).toBe(400);
        expect(JSON.parse(r.body).error).toMatch(new RegExp(`data after the end of its ${coding} stream`));
      }
    }
    // A truncated stream is still refused as invalid data.
    for (const coding of ['deflate', 'br'] as const) {
      const whole = compress[coding](one);
      const r = await post(
        `${s.url}/push/events/${app}/x`,
        whole.subarray(0, whole.length - 8),
        { 'Content-Type': 'application/json', 'Content-Encoding': coding },
        true,
      );
      expect(r.status, `${coding} truncated: ${r.body}`).toBe(400);
      expect(JSON.parse(r.body).error).toContain(`not valid ${coding} data`);
    }
    // Each counted as a body that does not decode.
    expect((await badEncoding()) - before).toBe(2 * refusedCases.length + 2);
    expect(existsSync(join(s.dataDir, 'events', app))).toBe(false);

    // One stream, sent whole or in 4 KB pieces: 200, every event stored, hash of the bytes as sent.
    // Each push its own body (fresh ids), so none is taken for a retry of another.
    for (const coding of ['deflate', 'br', 'gzip'] as const) {
      for (const chunked of [false, true]) {
        const body = Buffer.from(batchBody(400));
        const batchId = await accepted(compress[coding](body), { 'Content-Encoding': coding }, chunked);
        const rows = await rowsOf(batchId, 'enc-one');
        expect(rows, `${coding} chunked ${chunked}`).toHaveLength(400);
        expect(rows.map((r) => r.message_id)).toEqual(
          (JSON.parse(body.toString()) as { data: { events: { message_id: string }[] } }).data.events
            .map((e) => e.message_id)
            .sort(),
        );
      }
    }
  });

  /** Pushes to app enc-one (retrying a 503 + Retry-After, bounded); expects 200 with the hash of `bytes`; the batch id. */
  async function accepted(bytes: Buffer, headers: Record<string, string>, chunked: boolean): Promise<string> {
    let r = await post(
      `${s.url}/push/events/enc-one/x`,
      bytes,
      { 'Content-Type': 'application/json', ...headers },
      chunked,
    );
    for (let attempt = 0; attempt < 3 && r.status === 503 && r.headers['retry-after']; attempt++) {
      await new Promise((resolve) => setTimeout(resolve, 1000));
      r = await post(
        `${s.url}/push/events/enc-one/x`,
        bytes,
        { 'Content-Type': 'application/json', ...headers },
        chunked,
      );
    }
    expect(r.status, r.body).toBe(200);
    const answer = JSON.parse(r.body) as { hash: string; batchId: string };
    expect(answer.hash).toBe(sha256(bytes));
    return answer.batchId;
  }
});

/** VmRSS of a process, in bytes. */
function rssOf(pid: number): number {
  return Number(/^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? 0) * 1024;
}

/** 1 GiB of zeros through gzip, fed 1 MiB at a time: the bomb exists only in its compressed form (~1 MB). */
async function gzipBomb(): Promise<Buffer> {
  const gz = createGzip();
  const out: Buffer[] = [];
  gz.on('data', (c: Buffer) => out.push(c));
  const ended = new Promise((r) => gz.once('end', r));
  const zeros = Buffer.alloc(1024 * 1024);
  for (let i = 0; i < 1024; i++) if (!gz.write(zeros)) await new Promise((r) => gz.once('drain', r));
  gz.end();
  await ended;
  return Buffer.concat(out);
}

describe('decompression bomb against a spawned API process', () => {
  let proc: ServiceProcess;
  let url: string;
  let dataDir: string;
  let bomb: Buffer;

  beforeAll(async () => {
    dataDir = mkdtempSync(join(tmpdir(), 'ingest-bomb-'));
    const port = await freePort();
    url = `http://127.0.0.1:${port}`;
    proc = startService('services/api/main.ts', {
      PORT: String(port),
      HOST: '127.0.0.1',
      REDIS_URL: inject('redisUrl'),
      DATA_DIR: dataDir,
      QUEUE_NAME: uniqueName('bomb'),
      LOG_LEVEL: 'warn',
    });
    [bomb] = await Promise.all([gzipBomb(), waitForHttp(`${url}/readyz`, 30_000, proc)]);
  });
  afterAll(async () => {
    await proc?.stop('SIGTERM', 20_000);
    rmSync(dataDir, { recursive: true, force: true });
  });

  it('1 GiB of zeros gzip-ed answers 413 in under a second, the API growing by less than 50 MB', async () => {
    expect(bomb.length).toBeLessThan(2_000_000);
    // Warm the push path (JIT, zlib, Redis connection) so the growth measured is the bomb's.
    const warm = await post(`${url}/push/events/bomb/x`, gzipSync(Buffer.from(batchBody(10))), {
      'Content-Type': 'application/json',
      'Content-Encoding': 'gzip',
    });
    expect(warm.status, warm.body).toBe(200);
    const before = rssOf(proc.pid);
    let peak = before;
    const sampler = setInterval(() => (peak = Math.max(peak, rssOf(proc.pid))), 5);
    const t0 = performance.now();
    let r: Awaited<ReturnType<typeof post>>;
    try {
      r = await post(`${url}/push/events/bomb/x`, bomb, {
        'Content-Type': 'application/json',
        'Content-Encoding': 'gzip',
      });
    } finally {
      clearInterval(sampler);
    }
    const ms = performance.now() - t0;
    peak = Math.max(peak, rssOf(proc.pid));
    console.log(
      `bomb: ${bomb.length} bytes of gzip (1 GiB decoded) -> ${r.status} in ${ms.toFixed(0)} ms; API RSS ${(before / 2 ** 20).toFixed(1)} MiB -> peak ${(peak / 2 ** 20).toFixed(1)} MiB (+${((peak - before) / 2 ** 20).toFixed(1)} MiB)`,
    );
    expect(r.status, r.body).toBe(413);
    expect(JSON.parse(r.body).error).toMatch(/Content-Encoding gzip is over this collection's limit/);
    expect(ms).toBeLessThan(1000);
    expect(peak - before).toBeLessThan(50 * 1024 * 1024);
  });
});
