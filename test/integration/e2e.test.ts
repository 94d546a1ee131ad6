import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { BATCH_ID_RE, batchIdMs } from '../../shared/ids.js';
import { SIDECAR_MIN_BYTES } from '../../shared/store/filesystem/index.js';
import { createLogger } from '../../shared/logger.js';
import { ensureRedis } from '../../shared/redis/private-server.js';
import { ioredisAddress } from '../../shared/redis/url.js';
import { duckQuery } from '../helpers/duckdb.js';
import { batchBody, sampleEvent } from '../helpers/events.js';
import { uniqueName } from '../helpers/names.js';
import { threadCpuSeconds } from '../../bench/lib.js';
import { childNodePids, commandLine, distEntry, processEnvOf, startFlags } from '../helpers/dist.js';
import { type ServiceProcess, startService, waitFor, waitForHttp } from '../helpers/proc.js';
import { freePort } from '../helpers/redis-server.js';
import { rgwEnv, rgwStoreFor, startRgw } from '../helpers/rgw.js';
import { startS3Server } from '../helpers/s3.js';

const TOKEN = 'e2e-admin-token-0123456789';
const SENTINEL = 'SENTINEL-c0ffee-never-log-me';
const sha256 = (b: Uint8Array | string): string => createHash('sha256').update(b).digest('hex');

async function push(
  url: string,
  app: string,
  body: string,
): Promise<{ status: number; json: { hash?: string; batchId?: string; error?: string } }> {
  const r = await fetch(`${url}/push/events/${app}/whatever`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body,
  });
  return { status: r.status, json: (await r.json()) as { hash?: string; batchId?: string } };
}

async function list(url: string, app: string, query = ''): Promise<{ items: string[]; hasMore: boolean }> {
  const r = await fetch(`${url}/list/events/${app}${query}`, { headers: { Authorization: `Bearer ${TOKEN}` } });
  expect(r.status).toBe(200);
  return (await r.json()) as { items: string[]; hasMore: boolean };
}

/** Pushes batches of 100, 1 and 1,000 events to one app; once all three are listed (in push order), their ids. */
async function pushThreeAndList(url: string, app: string): Promise<string[]> {
  const ids: string[] = [];
  for (const n of [100, 1, 1000]) {
    const r = await push(url, app, batchBody(n));
    expect(r.status).toBe(200);
    ids.push(r.json.batchId as string);
  }
  const listed = await waitFor(
    async () => {
      const l = await list(url, app);
      return l.items.length === 3 ? l.items : null;
    },
    30_000,
    'three batches listed',
  );
  expect(listed).toEqual(ids.map((id) => `${id}.parquet`));
  return ids;
}

/**
 * The encoder's /metrics text once it matches `re` (bounded), else its last text. The encoder
 * counts a batch written only after releasing its id into the list index, and in another process
 * than the API that lists it: the list can show a batch a moment before the count does.
 */
async function encoderMetricsWhen(metricsPort: number, re: RegExp): Promise<string> {
  let text = '';
  await waitFor(
    async () => {
      text = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
      return re.test(text);
    },
    10_000,
    `encoder metrics matching ${re}`,
  ).catch(() => undefined);
  return text;
}

function listFiles(dir: string): string[] {
  if (!existsSync(dir)) return [];
  return readdirSync(dir, { recursive: true, encoding: 'utf8' }).filter((f) => statSync(join(dir, f)).isFile());
}

const oddEvent = {
  event_type: 'track',
  event: 'odd',
  distinct_id: SENTINEL,
  properties: { note: SENTINEL, n: 3.5, list: [1, 'two'] },
  context: { who: SENTINEL },
  ts: 1782933157,
  dt: true,
  unknown_field: { deep: [SENTINEL] },
  another: 7,
};

describe('end to end over real ports, as a user runs it', () => {
  const procs: ServiceProcess[] = [];
  const dirs: string[] = [];
  const entry: Record<string, `${string}.js`> = {};
  // The compiled build (shared with other test files, rebuilt only when a source changed) takes
  // tens of seconds on a loaded machine: outside the tests' own timeouts.
  beforeAll(async () => {
    for (const e of ['services/main.js', 'services/api/main.js', 'services/encoder/main.js'] as const)
      entry[e] = await distEntry(e);
  }, 300_000);
  afterAll(async () => {
    for (const p of procs) await p.stop('SIGKILL');
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  });

  // The services run as production runs them: compiled JavaScript (npm run build) on plain node.
  it('`npm start` (node dist/services/main.js): push, list, pull, DuckDB reads both README queries; logs hold no event contents; SIGTERM exits 0', async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'ingest-e2e-'));
    dirs.push(dataDir);
    const port = await freePort();
    const url = `http://127.0.0.1:${port}`;
    const proc = startService(entry['services/main.js']!, {
      PORT: String(port),
      HOST: '127.0.0.1',
      DATA_DIR: dataDir,
      REDIS_URL: inject('redisUrl'),
      QUEUE_NAME: uniqueName('e2e'),
      ADMIN_TOKEN: TOKEN,
    });
    procs.push(proc);
    await waitForHttp(`${url}/readyz`, 30_000, proc);
    expect(commandLine(proc.pid).join(' ')).not.toMatch(/tsx/);

    const bodies = [
      batchBody(100, (i) => ({ ...sampleEvent(i), distinct_id: `${SENTINEL}-${i}` })),
      JSON.stringify({ data: { events: [oddEvent] }, baseHash: null }),
      batchBody(1000),
    ];
    const ids: string[] = [];
    for (const body of bodies) {
      const r = await push(url, 'shop', body);
      expect(r.status).toBe(200);
      expect(r.json.hash).toBe(sha256(body));
      expect(r.json.batchId).toMatch(BATCH_ID_RE);
      ids.push(r.json.batchId as string);
    }
    expect([...ids].sort()).toEqual(ids);
    const listed = await waitFor(
      async () => {
        const l = await list(url, 'shop');
        return l.items.length === 3 ? l : null;
      },
      30_000,
      'three batches listed',
    );
    expect(listed).toEqual({ items: ids.map((id) => `${id}.parquet`), hasMore: false });
    // The default slot count reaches the encoder process (ENCODER_CONCURRENCY_DEFAULT).
    // /metrics leaves the encoder's part out when it takes over 2 s to answer (a loaded machine).
    const slots = await waitFor(
      async () =>
        /^ingest_encoder_concurrency\{service="ingest"\} (\d+)$/m.exec(
          await (await fetch(`${url}/metrics`)).text(),
        )?.[1],
      20_000,
      "the encoder process's metrics",
    );
    expect(slots).toBe('32');
    // The 1,000-event body (over 128 KiB) was encoded by the API on its encode thread, from the
    // compiled build (dist/shared/parquet/encode-thread.js), not sent as JSON after a failure.
    const metricsText = await (await fetch(`${url}/metrics`)).text();
    expect(/^ingest_push_encode_duration_seconds_count\{service="ingest"\} (\d+)$/m.exec(metricsText)?.[1]).toBe('1');
    expect(/^ingest_push_encode_failures_total\{service="ingest"\} (\d+)$/m.exec(metricsText)?.[1]).toBe('0');
    expect((await fetch(`${url}/list/events/shop`)).status).toBe(401);
    expect((await fetch(`${url}/pull/events/shop/${ids[0]}`)).status).toBe(401);

    for (const id of ids) {
      const r = await fetch(`${url}/pull/events/shop/${id}.parquet`, { headers: { Authorization: `Bearer ${TOKEN}` } });
      expect(r.status).toBe(200);
      expect(r.headers.get('content-type')).toBe('application/vnd.apache.parquet');
      const bytes = new Uint8Array(await r.arrayBuffer());
      expect(r.headers.get('etag')).toBe(`"${sha256(bytes)}"`);
      const again = await fetch(`${url}/pull/events/shop/${id}`, {
        headers: { Authorization: `Bearer ${TOKEN}`, 'If-None-Match': r.headers.get('etag') as string },
      });
      expect(again.status).toBe(304);
    }

    // Exactly one .parquet per batch under the store root; beside them only the metadata sidecars
    // of files over 256 KiB (a small Parquet batch file has none: its head hashes it).
    const eventFiles = listFiles(join(dataDir, 'events'));
    const large = ids.filter(
      (id) => statSync(join(dataDir, 'events', 'shop', `${id}.parquet`)).size > SIDECAR_MIN_BYTES,
    );
    expect(large.length).toBeLessThan(ids.length);
    expect(eventFiles.filter((f) => !f.includes('/.meta-')).sort()).toEqual(
      ids.map((id) => join('shop', `${id}.parquet`)),
    );
    expect(eventFiles.filter((f) => f.includes('/.meta-')).sort()).toEqual(
      large.map((id) => join('shop', `.meta-${id}.parquet.json`)),
    );
    const root = dataDir;
    const q1 = await duckQuery(
      `SELECT event_type, COUNT(*) AS n FROM read_parquet('${root}/events/shop/**/*.parquet') GROUP BY event_type ORDER BY n DESC;`,
    );
    expect(q1.reduce((a, r) => a + Number(r.n), 0)).toBe(1101);
    const q2 = await duckQuery(`SELECT time_bucket(INTERVAL '1 hour', received_at::TIMESTAMPTZ) AS hour, COUNT(*) AS n
FROM read_parquet('${root}/events/shop/**/*.parquet') WHERE received_at >= now() - INTERVAL '7 days' GROUP BY 1 ORDER BY 1;`);
    expect(q2.reduce((a, r) => a + Number(r.n), 0)).toBe(1101);

    const schema = await duckQuery(`DESCRIBE SELECT * FROM read_parquet('${root}/events/shop/*.parquet')`);
    expect(schema.map((c) => [c.column_name, c.column_type])).toEqual([
      ['event_type', 'VARCHAR'],
      ['event', 'VARCHAR'],
      ['distinct_id', 'VARCHAR'],
      ['anonymous_id', 'VARCHAR'],
      ['ts', 'VARCHAR'],
      ['message_id', 'VARCHAR'],
      ['properties', 'VARCHAR'],
      ['context', 'VARCHAR'],
      ['dt', 'VARCHAR'],
      ['received_at', 'TIMESTAMP WITH TIME ZONE'],
      ['extra', 'VARCHAR'],
    ]);
    const codecs = await duckQuery(
      `SELECT DISTINCT compression FROM parquet_metadata('${root}/events/shop/*.parquet')`,
    );
    expect(codecs.map((c) => c.compression)).toEqual(['SNAPPY']);
    const perFile = await duckQuery(
      `SELECT filename, min(epoch_ms(received_at))::BIGINT AS lo, max(epoch_ms(received_at))::BIGINT AS hi FROM read_parquet('${root}/events/shop/*.parquet', filename = true) GROUP BY 1`,
    );
    for (const f of perFile) {
      const id = String(f.filename).split('/').pop()!.replace('.parquet', '');
      expect([Number(f.lo), Number(f.hi)]).toEqual([batchIdMs(id), batchIdMs(id)]);
    }
    const [odd] = await duckQuery(
      `SELECT ts, dt, properties, context, extra FROM read_parquet('${root}/events/shop/${ids[1]}.parquet')`,
    );
    expect(odd).toEqual({
      ts: '1782933157',
      dt: 'true',
      properties: JSON.stringify(oddEvent.properties),
      context: JSON.stringify(oddEvent.context),
      extra: JSON.stringify({ unknown_field: oddEvent.unknown_field, another: 7 }),
    });

    expect(await proc.stop('SIGTERM')).toBe(0);
    const logs = proc.output();
    expect(logs).toMatch(/batch written/);
    expect(logs).not.toContain(SENTINEL);
  });

  it("`npm start` runs its encoder (and its rollups) as a child process at ENCODER_NICE (every thread of it, none of the API's); its CPU is in /metrics; it stops with the API, even one killed with SIGKILL, and the API stops without it", async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'ingest-e2e-child-'));
    dirs.push(dataDir);
    const threadNices = (pid: number): number[] => [...threadCpuSeconds(pid).values()].map((t) => t.nice);
    const gone = (pid: number): boolean =>
      !existsSync(`/proc/${pid}`) || /^State:\s+Z/m.test(readFileSync(`/proc/${pid}/status`, 'utf8'));
    const start = async (
      env: Record<string, string>,
    ): Promise<{ proc: ServiceProcess; url: string; encoder: number }> => {
      const port = await freePort();
      const proc = startService(entry['services/main.js']!, {
        PORT: String(port),
        HOST: '127.0.0.1',
        DATA_DIR: dataDir,
        REDIS_URL: inject('redisUrl'),
        QUEUE_NAME: uniqueName('e2e-child'),
        ADMIN_TOKEN: TOKEN,
        ...env,
      });
      procs.push(proc);
      const url = `http://127.0.0.1:${port}`;
      await waitForHttp(`${url}/readyz`, 30_000, proc);
      await waitFor(async () => proc.output().includes('encoder process started'), 30_000, 'the encoder process');
      const kids = childNodePids(proc.pid);
      expect(kids).toHaveLength(1);
      return { proc, url, encoder: kids[0] as number };
    };

    // Default niceness 10 on every thread of the encoder (its file calls and GC too); the API's stay at 0.
    const a = await start({});
    expect(commandLine(a.encoder).join(' ')).toMatch(/dist\/services\/encoder-child\.js$/);
    // npm start's node flag (package.json) keeps V8's young generation at its full size through
    // idle spells, in the API's process and (inherited) in the encoder's.
    expect(startFlags(entry['services/main.js']!)).toEqual(['--min-semi-space-size=16']);
    expect(commandLine(a.proc.pid)).toContain('--min-semi-space-size=16');
    expect(commandLine(a.encoder)).toContain('--min-semi-space-size=16');
    // glibc's mmap threshold: fixed at 128 KiB in the encoder process (services/encoder/process-env.ts),
    // the API's process left as it was started (glibc's default when nothing sets it).
    expect(processEnvOf(a.encoder).MALLOC_MMAP_THRESHOLD_).toBe(process.env.MALLOC_MMAP_THRESHOLD_ ?? '131072');
    expect(processEnvOf(a.proc.pid).MALLOC_MMAP_THRESHOLD_).toBe(process.env.MALLOC_MMAP_THRESHOLD_);
    const encoderNices = threadNices(a.encoder);
    expect(encoderNices.length).toBeGreaterThan(3);
    expect(new Set(encoderNices)).toEqual(new Set([10]));
    expect(new Set(threadNices(a.proc.pid))).toEqual(new Set([0]));
    // The rollup service (store listings, DuckDB) runs in the encoder process, not the API's.
    await waitFor(async () => a.proc.output().includes('rollup service started'), 20_000, 'the rollup service');
    const rollupLine =
      a.proc
        .output()
        .split('\n')
        .find((l) => l.includes('"msg":"rollup service started"')) ?? '';
    expect((JSON.parse(rollupLine) as { pid: number }).pid).toBe(a.encoder);
    const r = await push(a.url, 'child', batchBody(50));
    expect(r.status).toBe(200);
    const file = join(dataDir, 'events', 'child', `${r.json.batchId as string}.parquet`);
    await waitFor(async () => existsSync(file), 20_000, 'the batch file');
    const metrics = await (await fetch(`${a.url}/metrics`)).text();
    expect(
      Number(/^ingest_encoder_process_cpu_seconds_total\{service="ingest"\} ([\d.e+-]+)$/m.exec(metrics)?.[1]),
    ).toBeGreaterThan(0);
    expect(metrics).toMatch(/^process_cpu_seconds_total\{service="ingest"\} /m);

    // The API's process killed outright: the encoder sees its IPC channel close and stops too.
    a.proc.child.kill('SIGKILL');
    await waitFor(async () => gone(a.encoder), 20_000, 'the encoder process to end after its parent was killed');

    // The earlier names of the two settings still work; the encoder ending on its own stops the API.
    const b = await start({ ENCODER_THREAD_NICE: '3' });
    expect(new Set(threadNices(b.encoder))).toEqual(new Set([3]));
    process.kill(b.encoder, 'SIGTERM');
    expect(await b.proc.exited()).toBe(0);
    expect(b.proc.output()).toMatch(/encoder process 0 exited \(0\); stopping/);
  });

  it('`npm start` stopped while its encoder process still starts (the API already answers): exits 0 through its own stop, and the encoder process ends too', async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'ingest-e2e-early-'));
    dirs.push(dataDir);
    const port = await freePort();
    const url = `http://127.0.0.1:${port}`;
    const proc = startService(entry['services/main.js']!, {
      PORT: String(port),
      HOST: '127.0.0.1',
      DATA_DIR: dataDir,
      REDIS_URL: inject('redisUrl'),
      QUEUE_NAME: uniqueName('e2e-early'),
      ADMIN_TOKEN: TOKEN,
    });
    procs.push(proc);
    await waitForHttp(`${url}/readyz`, 30_000, proc);
    const [encoder] = await waitFor(
      async () => (childNodePids(proc.pid).length === 1 ? childNodePids(proc.pid) : null),
      10_000,
      'the encoder process forked',
    );
    // The window this test is about: the API answers, its encoder is not ready yet (it starts
    // its stack and the rollup service first, about a second here).
    expect(proc.output()).not.toContain('encoder process started');
    expect(await proc.stop('SIGTERM')).toBe(0);
    expect(proc.output()).toContain('shut down cleanly');
    expect(proc.output()).not.toMatch(/encoder process 0 exited|did not start/);
    await waitFor(
      async () =>
        !existsSync(`/proc/${encoder as number}`) ||
        /^State:\s+Z/m.test(readFileSync(`/proc/${encoder as number}/status`, 'utf8')),
      20_000,
      'the encoder process to end',
    );
  });

  it('`npm start` whose encoder process dies before it is ready fails its start: exit 1 naming the encoder, not a clean stop', async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'ingest-e2e-nostart-'));
    dirs.push(dataDir);
    const port = await freePort();
    const proc = startService(entry['services/main.js']!, {
      PORT: String(port),
      HOST: '127.0.0.1',
      DATA_DIR: dataDir,
      REDIS_URL: inject('redisUrl'),
      QUEUE_NAME: uniqueName('e2e-nostart'),
      ADMIN_TOKEN: TOKEN,
    });
    procs.push(proc);
    const [encoder] = await waitFor(
      async () => (childNodePids(proc.pid).length === 1 ? childNodePids(proc.pid) : null),
      30_000,
      'the encoder process forked',
    );
    expect(proc.output()).not.toContain('encoder process started');
    process.kill(encoder as number, 'SIGKILL');
    expect(await proc.exited()).toBe(1);
    expect(proc.output()).toContain('encoder process 0 did not start');
    expect(proc.output()).not.toContain('shut down cleanly');
  });

  it('`npm start` with ENCODER_PROCESSES=2: the second encoder takes jobs only while a backlog waits; /metrics sums both; every batch listed in order', async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'ingest-e2e-threads-'));
    dirs.push(dataDir);
    const port = await freePort();
    const url = `http://127.0.0.1:${port}`;
    // Two slots per encoder, one batch per job: a burst of pushes leaves more than two jobs waiting.
    const proc = startService(entry['services/main.js']!, {
      PORT: String(port),
      HOST: '127.0.0.1',
      DATA_DIR: dataDir,
      REDIS_URL: inject('redisUrl'),
      QUEUE_NAME: uniqueName('e2e-threads'),
      ADMIN_TOKEN: TOKEN,
      ENCODER_PROCESSES: '2',
      ENCODER_CONCURRENCY: '2',
      QUEUE_GROUP_MAX: '1',
    });
    procs.push(proc);
    await waitForHttp(`${url}/readyz`, 30_000, proc);
    const gauge = async (name: string): Promise<number | undefined> => {
      const m = new RegExp(`^${name}\\{service="ingest"\\} (\\d+)$`, 'm').exec(
        await (await fetch(`${url}/metrics`)).text(),
      );
      return m ? Number(m[1]) : undefined;
    };
    // Both encoders answer: each holds half of ENCODER_MAX_INFLIGHT_BYTES, and the halves add up.
    expect(
      await waitFor(
        async () => ((await gauge('ingest_encoder_inflight_bytes_limit')) === 32 * 1024 * 1024 ? true : undefined),
        20_000,
        'both encoders in /metrics',
      ),
    ).toBe(true);
    expect(childNodePids(proc.pid)).toHaveLength(2);
    expect(await gauge('ingest_encoder_workers')).toBe(1);
    expect(await gauge('ingest_encoder_concurrency')).toBe(2);

    const n = 120;
    const answers = await Promise.all(
      Array.from({ length: n }, (_, i) =>
        push(
          url,
          'burst',
          batchBody(200, (j) => ({ ...sampleEvent(j), distinct_id: `t-${i}` })),
        ),
      ),
    );
    expect(answers.map((a) => a.status)).toEqual(answers.map(() => 200));
    const ids = answers.map((a) => a.json.batchId as string).sort();
    await waitFor(
      async () => ((await list(url, 'burst', '?limit=1000')).items.length === n ? true : undefined),
      60_000,
      'every batch listed',
    );
    expect((await list(url, 'burst', '?limit=1000')).items).toEqual(ids.map((id) => `${id}.parquet`));
    await waitFor(
      async () => ((await gauge('ingest_encoder_workers')) === 1 ? true : undefined),
      20_000,
      'the second encoder idle again',
    );
    const written = /^ingest_encoder_batches_total\{outcome="written",service="ingest"\} (\d+)$/m.exec(
      await (await fetch(`${url}/metrics`)).text(),
    );
    expect(Number(written?.[1])).toBe(n);
    const rows = await duckQuery(
      `SELECT count(*)::INTEGER AS n, count(DISTINCT distinct_id)::INTEGER AS d FROM read_parquet('${dataDir}/events/burst/*.parquet')`,
    );
    expect(rows).toEqual([{ n: n * 200, d: n }]);

    expect(await proc.stop('SIGTERM')).toBe(0);
    const logs = proc.output();
    expect(logs).toMatch(/"encoder":1,"burst":true/);
    expect(logs).toMatch(/burst encoder taking jobs/);
    expect(logs).toMatch(/burst encoder idle \(queue drained\)/);
  });

  it('STORE=s3 with the API and the encoder as separate processes (dist/services/api/main.js, dist/services/encoder/main.js)', async () => {
    const s3 = await startS3Server();
    const [apiPort, metricsPort] = [await freePort(), await freePort()];
    const url = `http://127.0.0.1:${apiPort}`;
    const common = {
      HOST: '127.0.0.1',
      STORE: 's3',
      S3_BUCKET: s3.bucket,
      S3_ENDPOINT: s3.endpoint,
      S3_FORCE_PATH_STYLE: 'true',
      S3_REGION: 'us-east-1',
      AWS_ACCESS_KEY_ID: 'S3RVER',
      AWS_SECRET_ACCESS_KEY: 'S3RVER',
      REDIS_URL: inject('redisUrl'),
      QUEUE_NAME: uniqueName('s3'),
      ADMIN_TOKEN: TOKEN,
    };
    const api = startService(entry['services/api/main.js']!, { ...common, PORT: String(apiPort) });
    const encoder = startService(entry['services/encoder/main.js']!, { ...common, METRICS_PORT: String(metricsPort) });
    procs.push(api, encoder);
    try {
      await waitForHttp(`${url}/readyz`, 30_000, api);
      await waitForHttp(`http://127.0.0.1:${metricsPort}/metrics`, 30_000, encoder);
      for (const p of [api, encoder]) expect(commandLine(p.pid).join(' ')).not.toMatch(/tsx/);
      const ids = await pushThreeAndList(url, 'mobile');
      const dir = mkdtempSync(join(tmpdir(), 'ingest-pulled-'));
      dirs.push(dir);
      for (const id of ids) {
        const r = await fetch(`${url}/pull/events/mobile/${id}`, { headers: { Authorization: `Bearer ${TOKEN}` } });
        expect(r.status).toBe(200);
        writeFileSync(join(dir, `${id}.parquet`), new Uint8Array(await r.arrayBuffer()));
      }
      const [row] = await duckQuery(`SELECT count(*)::INTEGER AS n FROM read_parquet('${dir}/*.parquet')`);
      expect(row?.n).toBe(1101);
      const metrics = await encoderMetricsWhen(
        metricsPort,
        /ingest_encoder_batches_total\{outcome="written",service="encoder"\} 3/,
      );
      expect(metrics).toMatch(/ingest_encoder_batches_total\{outcome="written",service="encoder"\} 3/);
      // The default slot count of an encoder process (ENCODER_CONCURRENCY_DEFAULT).
      expect(metrics).toMatch(/^ingest_encoder_concurrency\{service="encoder"\} 32$/m);
      expect(await api.stop('SIGTERM')).toBe(0);
      expect(await encoder.stop('SIGTERM')).toBe(0);
    } finally {
      await s3.close();
    }
  });

  it(
    'STORE=s3 on Ceph RGW (a real S3 implementation) with the API and the encoder as separate processes',
    { timeout: 180_000 },
    async () => {
      const rgw = await startRgw();
      const [apiPort, metricsPort] = [await freePort(), await freePort()];
      const url = `http://127.0.0.1:${apiPort}`;
      const common = {
        HOST: '127.0.0.1',
        ...rgwEnv(rgw),
        REDIS_URL: inject('redisUrl'),
        QUEUE_NAME: uniqueName('rgw'),
        ADMIN_TOKEN: TOKEN,
      };
      const api = startService('services/api/main.ts', { ...common, PORT: String(apiPort) });
      const encoder = startService('services/encoder/main.ts', { ...common, METRICS_PORT: String(metricsPort) });
      procs.push(api, encoder);
      const direct = rgwStoreFor(rgw);
      try {
        await waitForHttp(`${url}/readyz`, 60_000, api);
        await waitForHttp(`http://127.0.0.1:${metricsPort}/metrics`, 60_000, encoder);
        const ids = await pushThreeAndList(url, 'rgw');
        expect(await list(url, 'rgw', `?after=${ids[0]}`)).toEqual({
          items: ids.slice(1).map((id) => `${id}.parquet`),
          hasMore: false,
        });
        // Exactly one object per batch in the bucket, nothing else.
        expect(await direct.listKeys('')).toEqual(ids.map((id) => `events/rgw/${id}.parquet`));
        const dir = mkdtempSync(join(tmpdir(), 'ingest-pulled-'));
        dirs.push(dir);
        for (const id of ids) {
          const r = await fetch(`${url}/pull/events/rgw/${id}`, { headers: { Authorization: `Bearer ${TOKEN}` } });
          expect(r.status).toBe(200);
          const bytes = new Uint8Array(await r.arrayBuffer());
          expect(r.headers.get('etag')).toBe(`"${sha256(bytes)}"`);
          expect(
            Buffer.from(bytes).equals(Buffer.from((await direct.getBytes(`events/rgw/${id}.parquet`))?.body ?? [])),
          ).toBe(true);
          writeFileSync(join(dir, `${id}.parquet`), bytes);
        }
        const [row] = await duckQuery(`SELECT count(*)::INTEGER AS n FROM read_parquet('${dir}/*.parquet')`);
        expect(row?.n).toBe(1101);
        const metrics = await encoderMetricsWhen(
          metricsPort,
          /ingest_encoder_batches_total\{outcome="written",service="encoder"\} 3/,
        );
        expect(metrics).toMatch(/ingest_encoder_batches_total\{outcome="written",service="encoder"\} 3/);
        expect(await api.stop('SIGTERM')).toBe(0);
        expect(await encoder.stop('SIGTERM')).toBe(0);
      } finally {
        direct.destroy();
        await rgw.close();
      }
    },
  );

  it('the embedded default starts a private redis-server with AOF under DATA_DIR/redis when none answers; REDIS_URL=unix:///… with a password reaches it over its socket and logs neither', async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'ingest-embedded-'));
    dirs.push(dataDir);
    const tcpPort = await freePort();
    const handle = await ensureRedis({ dataDir, logger: createLogger({ level: 'silent', name: 't' }), port: tcpPort });
    const { Redis } = await import('ioredis');
    const clients: InstanceType<typeof Redis>[] = [];
    try {
      expect(handle.owned).toBe(true);
      expect(existsSync(join(dataDir, 'redis'))).toBe(true);
      // This process talks to it over an owner-only unix socket in its folder; TCP stays open.
      const socket = join(dataDir, 'redis', 'redis.sock');
      expect(handle.url).toBe(`unix://${socket}`);
      expect(statSync(socket).isSocket()).toBe(true);
      expect(statSync(socket).mode & 0o777).toBe(0o700);
      const r = new Redis(ioredisAddress(handle.url));
      const tcp = new Redis(`redis://127.0.0.1:${tcpPort}`);
      clients.push(r, tcp);
      expect(await r.config('GET', 'appendonly')).toEqual(['appendonly', 'yes']);
      expect(await r.config('GET', 'maxmemory-policy')).toEqual(['maxmemory-policy', 'noeviction']);
      expect(await r.config('GET', 'auto-aof-rewrite-min-size')).toEqual([
        'auto-aof-rewrite-min-size',
        String(256 * 1024 * 1024),
      ]);
      expect(await tcp.ping()).toBe('PONG');

      // The compiled `npm start` given that socket and a password takes a push to a file.
      const password = 'pw-SENTINEL-redis-0451';
      await r.config('SET', 'requirepass', password);
      const port = await freePort();
      const url = `http://127.0.0.1:${port}`;
      const proc = startService(entry['services/main.js']!, {
        PORT: String(port),
        HOST: '127.0.0.1',
        DATA_DIR: dataDir,
        REDIS_URL: `${handle.url}?password=${password}`,
        QUEUE_NAME: uniqueName('unix'),
        ADMIN_TOKEN: TOKEN,
      });
      procs.push(proc);
      await waitForHttp(`${url}/readyz`, 30_000, proc);
      const pushed = await push(url, 'sock', batchBody(10));
      expect(pushed.status).toBe(200);
      const file = join(dataDir, 'events', 'sock', `${pushed.json.batchId}.parquet`);
      await waitFor(async () => existsSync(file) || null, 30_000, 'the batch file');
      const [row] = await duckQuery(`SELECT COUNT(*) AS n FROM read_parquet('${file}')`);
      expect(Number(row!.n)).toBe(10);
      // Its connections are socket clients (CLIENT LIST gives a socket client's laddr as the path).
      const clientList = String(await tcp.client('LIST'));
      expect(clientList.split('\n').filter((l) => l.includes(`laddr=${socket}`)).length).toBeGreaterThanOrEqual(3);
      expect(await proc.stop('SIGTERM')).toBe(0);
      // Logs name the socket, never the password.
      expect(proc.output()).toContain(`"redis":"unix:${socket}"`);
      expect(proc.output()).not.toContain(password);
    } finally {
      for (const c of clients) c.disconnect();
      await handle.stop();
    }
  });

  it('a bad config stops the process with a message naming the field', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'ingest-badcfg-'));
    dirs.push(dir);
    const cfg = join(dir, 'config.json');
    writeFileSync(
      cfg,
      JSON.stringify({
        version: 1,
        collections: [
          {
            name: 'events',
            storagePath: 'events/{app}/{batchId}',
            readRoles: ['admin'],
            writeRoles: ['public'],
            encryption: 'none',
            allowedMimeTypes: ['application/vnd.apache.parquet'],
            maxBodyBytes: 1000,
          },
        ],
      }),
    );
    const p = startService('services/api/main.ts', {
      CONFIG_FILE: cfg,
      PORT: String(await freePort()),
      REDIS_URL: inject('redisUrl'),
    });
    procs.push(p);
    expect(await p.exited()).toBe(1);
    expect(p.output()).toMatch(/collections\.0\.allowedMimeTypes/);
    const p2 = startService('services/api/main.ts', { PORT: 'eighty', REDIS_URL: inject('redisUrl') });
    procs.push(p2);
    expect(await p2.exited()).toBe(1);
    expect(p2.output()).toMatch(/PORT/);
  });
});
