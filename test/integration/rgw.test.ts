/**
 * The S3 path on a real S3 implementation, Ceph's RADOS Gateway (test/helpers/rgw.ts), with the
 * API and the encoder as separate processes: `pull` with HEAD, Range and 304 served from RGW, and
 * a store outage that is the gateway killed with SIGKILL under load and started again. One
 * cluster for the file; the conformance suite and the end-to-end test run on RGW in their own
 * files.
 */
import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import {
  DeleteObjectsCommand,
  GetObjectCommand,
  PutObjectCommand,
  S3Client,
  type S3ClientConfig,
} from '@aws-sdk/client-s3';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { sleep } from '../../scripts/chaos-kit.js';
import { type S3ObjectStore, S3_COMPATIBLE_CLIENT_SETTINGS } from '../../shared/store/s3/index.js';
import { duckQuery, sqlString } from '../helpers/duckdb.js';
import { batchBody } from '../helpers/events.js';
import { uniqueName } from '../helpers/names.js';
import { type ServiceProcess, startService, waitFor, waitForHttp } from '../helpers/proc.js';
import { freePort } from '../helpers/redis-server.js';
import { type RgwServer, rgwEnv, rgwStoreFor, startRgw } from '../helpers/rgw.js';

const TOKEN = 'rgw-admin-token-0123456789';
const auth = { Authorization: `Bearer ${TOKEN}` };
const sha256 = (b: Uint8Array): string => createHash('sha256').update(b).digest('hex');
const mb = (bytes: number): string => (bytes / 1024 / 1024).toFixed(0);

describe('startRgw without the Ceph packages', () => {
  it('fails loudly, naming the missing binary and how to install it (no silent skip)', async () => {
    const saved = process.env.PATH;
    process.env.PATH = '/nonexistent';
    try {
      await expect(startRgw()).rejects.toThrow(
        /need ceph-mon on the PATH: apt-get install .*radosgw ceph-mon ceph-osd/,
      );
    } finally {
      process.env.PATH = saved;
    }
  });
});

describe('the product on Ceph RGW (API and encoder as separate processes)', () => {
  let rgw: RgwServer;
  let direct: S3ObjectStore;
  let api: ServiceProcess;
  let encoder: ServiceProcess;
  let url = '';
  let queueName = '';
  const dirs: string[] = [];

  beforeAll(async () => {
    rgw = await startRgw();
    const m = rgw.memory();
    // What the note on RGW quotes: start-up time and memory on the machine running the tests.
    console.log(
      `RGW started in ${rgw.startupMs.toFixed(0)} ms; RSS mon ${mb(m.mon)} MB, osd ${mb(m.osd)} MB, radosgw ${mb(m.rgw)} MB, total ${mb(m.total)} MB`,
    );
    direct = rgwStoreFor(rgw);
    const [apiPort, metricsPort] = [await freePort(), await freePort()];
    url = `http://127.0.0.1:${apiPort}`;
    queueName = uniqueName('rgw');
    // Short locks so a job whose write hung on the dead gateway is picked up again quickly.
    const common = {
      HOST: '127.0.0.1',
      ...rgwEnv(rgw),
      REDIS_URL: inject('redisUrl'),
      QUEUE_NAME: queueName,
      ADMIN_TOKEN: TOKEN,
      LOG_LEVEL: 'warn',
      ENCODER_LOCK_SECONDS: '5',
    };
    api = startService('services/api/main.ts', { ...common, PORT: String(apiPort) });
    encoder = startService('services/encoder/main.ts', { ...common, METRICS_PORT: String(metricsPort) });
    // Generous: on a loaded 2-core machine two tsx processes can take most of a minute to start.
    await waitForHttp(`${url}/readyz`, 90_000, api);
    await waitForHttp(`http://127.0.0.1:${metricsPort}/healthz`, 90_000, encoder);
  }, 240_000);

  afterAll(async () => {
    await api?.stop('SIGKILL');
    await encoder?.stop('SIGKILL');
    direct?.destroy();
    await rgw?.close();
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  });

  const listAll = async (app: string): Promise<string[]> => {
    const out: string[] = [];
    let after = '';
    for (let page = 0; page < 100; page++) {
      const r = await fetch(`${url}/list/events/${app}?limit=1000${after ? `&after=${after}` : ''}`, { headers: auth });
      expect(r.status).toBe(200);
      const j = (await r.json()) as { items: string[]; hasMore: boolean };
      out.push(...j.items);
      if (!j.hasMore || j.items.length === 0) break;
      after = j.items[j.items.length - 1] as string;
    }
    return out;
  };

  it('RGW 16 and the S3 features the store relies on (what docs/configuration.md, "S3 and S3-compatible servers", says)', async () => {
    const client = (settings: Partial<S3ClientConfig>): S3Client =>
      new S3Client({
        region: rgw.region,
        endpoint: rgw.endpoint,
        forcePathStyle: true,
        credentials: { accessKeyId: rgw.accessKeyId, secretAccessKey: rgw.secretAccessKey },
        maxAttempts: 1,
        ...settings,
      });
    const sdkDefaults = client({});
    const ours = client(S3_COMPATIBLE_CLIENT_SETTINGS);
    const Bucket = rgw.bucket;
    const hello = Buffer.from('hello');
    const md5Of = (b: Buffer): string => createHash('md5').update(b).digest('base64');
    try {
      const streamed = (c: S3Client, Key: string): Promise<unknown> =>
        c.send(new PutObjectCommand({ Bucket, Key, Body: Readable.from([hello]), ContentLength: hello.byteLength }));
      // The SDK's default: a streamed body goes out aws-chunked with a checksum trailer, which RGW refuses.
      await expect(streamed(sdkDefaults, 'facts/a')).rejects.toMatchObject({
        name: 'MissingContentLength',
        $metadata: { httpStatusCode: 411 },
      });
      await streamed(ours, 'facts/a');
      // Conditional create: an existing key is not overwritten.
      await expect(
        ours.send(new PutObjectCommand({ Bucket, Key: 'facts/a', Body: Buffer.from('other'), IfNoneMatch: '*' })),
      ).rejects.toMatchObject({ $metadata: { httpStatusCode: 412 } });
      // Content-MD5 is checked; x-amz-checksum-sha256 is not (a wrong one is stored without complaint).
      await expect(
        ours.send(
          new PutObjectCommand({ Bucket, Key: 'facts/b', Body: hello, ContentMD5: md5Of(Buffer.from('other')) }),
        ),
      ).rejects.toMatchObject({ name: 'BadDigest', $metadata: { httpStatusCode: 400 } });
      await ours.send(new PutObjectCommand({ Bucket, Key: 'facts/b', Body: hello, ContentMD5: md5Of(hello) }));
      await ours.send(
        new PutObjectCommand({
          Bucket,
          Key: 'facts/c',
          Body: hello,
          ChecksumSHA256: Buffer.alloc(32).toString('base64'),
        }),
      );
      const a = await ours.send(new GetObjectCommand({ Bucket, Key: 'facts/a' }));
      expect(await a.Body?.transformToString()).toBe('hello');
      const ranged = await ours.send(new GetObjectCommand({ Bucket, Key: 'facts/c', Range: 'bytes=1-3' }));
      expect([ranged.$metadata.httpStatusCode, await ranged.Body?.transformToString()]).toEqual([206, 'ell']);
      const deleted = await ours.send(
        new DeleteObjectsCommand({ Bucket, Delete: { Objects: ['a', 'b', 'c'].map((k) => ({ Key: `facts/${k}` })) } }),
      );
      expect([deleted.Deleted?.length, deleted.Errors ?? []]).toEqual([3, []]);
      expect(await direct.listKeys('facts/')).toEqual([]);
    } finally {
      sdkDefaults.destroy();
      ours.destroy();
    }
  });

  it('pull: HEAD, Range (206/416) and If-None-Match (304) on a file stored in RGW', async () => {
    const pushed = await fetch(`${url}/push/events/ranged/x`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: batchBody(2000),
    });
    expect(pushed.status).toBe(200);
    const { batchId } = (await pushed.json()) as { batchId: string };
    await waitFor(async () => (await listAll('ranged')).length === 1, 30_000, 'batch listed');
    const stored = await direct.getBytes(`events/ranged/${batchId}.parquet`);
    expect(stored).not.toBeNull();
    const file = Buffer.from(stored?.body ?? []);
    const size = file.byteLength;
    const pull = `${url}/pull/events/ranged/${batchId}.parquet`;
    const get = (headers: Record<string, string> = {}, method = 'GET'): Promise<Response> =>
      fetch(pull, { method, headers: { ...auth, ...headers } });

    const full = await get();
    expect(full.status).toBe(200);
    expect(Buffer.from(await full.arrayBuffer()).equals(file)).toBe(true);
    const etag = full.headers.get('etag') as string;
    expect(etag).toBe(`"${sha256(file)}"`);
    expect(full.headers.get('accept-ranges')).toBe('bytes');

    const head = await get({}, 'HEAD');
    expect(head.status).toBe(200);
    expect(head.headers.get('content-length')).toBe(String(size));
    expect(head.headers.get('etag')).toBe(etag);
    expect(head.headers.get('content-type')).toBe('application/vnd.apache.parquet');
    expect((await head.arrayBuffer()).byteLength).toBe(0);

    const tail = await get({ Range: 'bytes=-8' });
    expect(tail.status).toBe(206);
    expect(tail.headers.get('content-range')).toBe(`bytes ${size - 8}-${size - 1}/${size}`);
    const last8 = Buffer.from(await tail.arrayBuffer());
    expect(last8.equals(file.subarray(size - 8))).toBe(true);
    expect(last8.subarray(4).toString('latin1')).toBe('PAR1');
    const footerLength = last8.readUInt32LE(0);
    const start = size - 8 - footerLength;
    const footer = await get({ Range: `bytes=${start}-${size - 9}` });
    expect(footer.status).toBe(206);
    expect(Buffer.from(await footer.arrayBuffer()).equals(file.subarray(start, size - 8))).toBe(true);
    const open = await get({ Range: `bytes=${size - 100}-` });
    expect(open.status).toBe(206);
    expect(Buffer.from(await open.arrayBuffer()).equals(file.subarray(size - 100))).toBe(true);

    const unsatisfiable = await get({ Range: `bytes=${size}-` });
    expect(unsatisfiable.status).toBe(416);
    expect(unsatisfiable.headers.get('content-range')).toBe(`bytes */${size}`);
    await unsatisfiable.arrayBuffer();

    const notModified = await get({ 'If-None-Match': etag });
    expect(notModified.status).toBe(304);
    expect((await notModified.arrayBuffer()).byteLength).toBe(0);
    const rangedNotModified = await get({ Range: 'bytes=-8', 'If-None-Match': etag });
    expect(rangedNotModified.status).toBe(304);
    const changed = await get({ 'If-None-Match': '"0000"' });
    expect(changed.status).toBe(200);
    expect(Buffer.from(await changed.arrayBuffer()).equals(file)).toBe(true);
  });

  it(
    'store outage: kill -9 radosgw under load, start it again; nothing acknowledged is lost, nothing is written twice',
    { timeout: 180_000 },
    async () => {
      const app = 'outage';
      const run = uniqueName('push');
      /** Logical push id -> the batch ids its (retried) requests were answered with. */
      const acked = new Map<string, Set<string>>();
      const sizes = new Map<string, number>();
      let stop = false;
      let retries = 0;

      /** Pushes one logical batch, retrying with the same Idempotency-Key (at most 60 s). */
      const pushLogical = async (id: string, n: number): Promise<void> => {
        sizes.set(id, n);
        const events = Array.from({ length: n }, (_, i) => ({
          event_type: 'track',
          event: 'outage',
          message_id: `${id}:${i}`,
          properties: { i },
        }));
        const body = JSON.stringify({ data: { events }, baseHash: null });
        const deadline = Date.now() + 60_000;
        for (let attempt = 0; attempt < 200 && Date.now() < deadline; attempt++) {
          try {
            const r = await fetch(`${url}/push/events/${app}/x`, {
              method: 'POST',
              headers: { 'Content-Type': 'application/json', 'Idempotency-Key': `${run}-${id}` },
              body,
              signal: AbortSignal.timeout(10_000),
            });
            if (r.status === 200) {
              const { batchId } = (await r.json()) as { batchId: string };
              acked.set(id, (acked.get(id) ?? new Set()).add(batchId));
              return;
            }
            await r.arrayBuffer();
          } catch {
            /* no answer: retry */
          }
          retries++;
          await sleep(200);
        }
      };
      const client = async (c: number): Promise<void> => {
        for (let seq = 0; !stop && seq < 2000; seq++) {
          await pushLogical(`c${c}-${seq}`, 1 + ((seq * 37 + c * 11) % 120));
          await sleep(20);
        }
      };

      const clients = [0, 1, 2].map(client);
      // Objects written before the kill.
      const before = (
        await waitFor(
          async () => {
            const keys = await direct.listKeys(`events/${app}/`);
            return keys.length > 0 ? keys : null;
          },
          30_000,
          'objects written before the kill',
        )
      ).length;

      const oldPid = rgw.pids().rgw;
      await rgw.killGateway();
      await expect(fetch(rgw.endpoint, { signal: AbortSignal.timeout(2000) })).rejects.toThrow();
      const downFor = 6000;
      await sleep(downFor);
      const conn = new Redis(inject('redisUrl'), { maxRetriesPerRequest: null });
      const q = new Queue(queueName, { connection: conn });
      try {
        // The writes are failing and waiting for their retry, not lost and not dead.
        const counts = await q.getJobCounts('waiting', 'active', 'delayed', 'failed');
        expect(counts.waiting + counts.active + counts.delayed).toBeGreaterThan(0);
        expect(counts.failed).toBe(0);
        const ackedWhileDown = acked.size;

        const restarted = performance.now();
        await rgw.restartGateway();
        expect(rgw.pids().rgw).not.toBe(oldPid);
        console.log(
          `radosgw restarted in ${(performance.now() - restarted).toFixed(0)} ms after ${downFor} ms down; ${ackedWhileDown} pushes acknowledged so far`,
        );
        await sleep(1500);
        stop = true;
        await Promise.all(clients);

        const ackedIds = [...acked.values()].flatMap((s) => [...s]);
        const keys = await waitFor(
          async () => {
            const k = await direct.listKeys(`events/${app}/`);
            return k.length >= ackedIds.length && (await q.getJobCounts('waiting', 'active', 'delayed')).delayed === 0
              ? k
              : null;
          },
          90_000,
          'every acknowledged batch written after the gateway came back',
        );

        // One batch id per logical push (the retries were recognised), one object per batch id.
        expect([...acked.values()].every((s) => s.size === 1)).toBe(true);
        expect(keys.sort()).toEqual(ackedIds.map((id) => `events/${app}/${id}.parquet`).sort());
        // The encoder puts an object before it releases the id into the list index: the list can lag the bucket by a moment.
        let listed: string[] = [];
        await waitFor(
          async () => (listed = await listAll(app)).length >= ackedIds.length,
          30_000,
          'every acknowledged batch listed',
        ).catch(() => undefined);
        expect(listed).toEqual(ackedIds.sort().map((id) => `${id}.parquet`));
        expect(await q.getFailedCount()).toBe(0);
        // The outage did hit writes: the encoder saw them fail and scheduled retries.
        expect(encoder.output()).toMatch(/batch will be retried/);

        // Every acknowledged push's events, each exactly once, read back from the objects in RGW.
        const dir = mkdtempSync(join(tmpdir(), 'ingest-rgw-outage-'));
        dirs.push(dir);
        for (const key of keys)
          writeFileSync(
            join(dir, key.split('/').pop() as string),
            (await direct.getBytes(key))?.body ?? new Uint8Array(),
          );
        const rows = await duckQuery(
          `SELECT split_part(message_id, ':', 1) AS push, count(*)::INTEGER AS n, count(DISTINCT message_id)::INTEGER AS d, count(DISTINCT filename)::INTEGER AS files FROM read_parquet(${sqlString(join(dir, '*.parquet'))}, filename = true) GROUP BY 1`,
        );
        const got = new Map(rows.map((r) => [String(r.push), r]));
        const lost = [...acked.keys()].filter((id) => !got.has(id));
        const wrong = [...acked.keys()].filter(
          (id) =>
            got.has(id) &&
            (got.get(id)?.n !== sizes.get(id) || got.get(id)?.d !== sizes.get(id) || got.get(id)?.files !== 1),
        );
        expect({ lost, wrong, extra: rows.length - acked.size }).toEqual({ lost: [], wrong: [], extra: 0 });
        const m = rgw.memory();
        console.log(
          `RGW RSS after the outage case: total ${mb(m.total)} MB (mon ${mb(m.mon)}, osd ${mb(m.osd)}, radosgw ${mb(m.rgw)})`,
        );
        console.log(
          `outage: ${acked.size} pushes acknowledged (${before} objects written before the kill), ${keys.length} objects, ${retries} client retries, 0 lost, 0 duplicated`,
        );
      } finally {
        stop = true;
        await Promise.all(clients);
        await q.close();
        conn.disconnect();
      }
    },
  );
});
