/**
 * Issue 45, acceptance 5 and 6: a rolling replacement of the API under steady pushes loses
 * nothing. Two `start:api` processes and one `start:encoder` from sources on a private
 * redis-server, behind a loopback load balancer that polls /readyz like kube-proxy's endpoint list
 * and never retries (test/helpers/balancer.ts). The test replaces the APIs one at a time (start
 * the new one, wait until the balancer routes to it, SIGTERM an old one, wait for its exit) while
 * clients push with an Idempotency-Key per batch and retry only 503 + Retry-After with the same
 * key. The client sees no connection error and no 5xx but 503 + Retry-After; every acknowledged
 * batch is one file and listed; every SIGTERM'd API exits 0 within SHUTDOWN_DRAIN_MS +
 * SHUTDOWN_GRACE_MS (+ the 2 s log flush), having drained: /readyz 503 `draining`, /healthz 200,
 * answers with `Connection: close`, then a refused connection once it stopped listening.
 */
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SHUTDOWN_DRAIN_MS_DEFAULT } from '../../shared/config.js';
import { SHUTDOWN_GRACE_MS } from '../../shared/stack-context.js';
import { LoopbackBalancer } from '../helpers/balancer.js';
import { batchBody, sampleEvent } from '../helpers/events.js';
import { listAllIds } from '../helpers/list.js';
import { uniqueName } from '../helpers/names.js';
import { type ServiceProcess, startService, waitFor, waitForHttp } from '../helpers/proc.js';
import { type RedisServer, freePort, startRedisServer } from '../helpers/redis-server.js';
import { startSteadyPushes } from '../helpers/steady-pushes.js';

const TOKEN = 'rollout-admin-token-0123456789';
const APPS = ['ro0', 'ro1', 'ro2', 'ro3'];
const CLIENTS = 3;
/**
 * The product's default for start:api, left unset in the processes' env so the default is what
 * runs. `ROLLOUT_DRAIN_MS=0 npx vitest run --project system test/integration/rollout.test.ts` runs
 * the same rollout without a window, and fails on the pushes the balancer still sent to a closed
 * listener (the check that this test can fail).
 */
const DRAIN_MS = process.env.ROLLOUT_DRAIN_MS ? Number(process.env.ROLLOUT_DRAIN_MS) : SHUTDOWN_DRAIN_MS_DEFAULT.api;
/** The whole stop's bound (shared/lifecycle.ts flushes the log for up to 2 s after it). */
const STOP_BOUND_MS = DRAIN_MS + SHUTDOWN_GRACE_MS + 2000;
/** The push client's limits: it stops when told to, or at these. */
const MAX_PUSHES_PER_CLIENT = 5000;
const MAX_PUSH_MS = 180_000;

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

interface Api {
  url: string;
  proc: ServiceProcess;
}

/** One plain HTTP request (not fetch: `Connection` is a hop-by-hop header fetch may hide). */
function rawRequest(
  url: string,
  init: { method?: string; headers?: Record<string, string>; body?: string } = {},
): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request(url, { method: init.method ?? 'GET', headers: init.headers, agent: false }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => (body += d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
    });
    req.setTimeout(10_000, () => req.destroy(new Error('timed out')));
    req.on('error', reject);
    req.end(init.body);
  });
}

describe('rolling replacement of the API behind a load balancer, under steady pushes', () => {
  let redis: RedisServer | undefined;
  let lb: LoopbackBalancer | undefined;
  let dataDir = '';
  const procs: ServiceProcess[] = [];
  const queueName = uniqueName('rollout');
  let common: Record<string, string> = {};

  async function startApi(): Promise<Api> {
    const port = await freePort();
    const proc = startService('services/api/main.ts', { ...common, PORT: String(port) });
    procs.push(proc);
    const url = `http://127.0.0.1:${port}`;
    await waitForHttp(`${url}/readyz`, 90_000, proc);
    return { url, proc };
  }

  beforeAll(async () => {
    redis = await startRedisServer();
    dataDir = mkdtempSync(join(tmpdir(), 'ingest-rollout-'));
    common = {
      HOST: '127.0.0.1',
      REDIS_URL: redis.url,
      QUEUE_NAME: queueName,
      DATA_DIR: dataDir,
      ADMIN_TOKEN: TOKEN,
      ROLLUP: 'off',
      LOG_LEVEL: 'info',
      SHUTDOWN_DRAIN_MS: String(DRAIN_MS),
    };
    procs.push(
      startService('services/encoder/main.ts', {
        ...common,
        METRICS_PORT: String(await freePort()),
        ENCODER_CONCURRENCY: '8',
      }),
    );
    lb = await LoopbackBalancer.start({ pollMs: 500 });
  }, 60_000);

  afterAll(async () => {
    await lb?.close();
    await Promise.all(procs.map((p) => p.stop('SIGTERM', 45_000)));
    await redis?.stop();
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  }, 120_000);

  it('no connection error, no 5xx but 503 + Retry-After, every acknowledged batch written once and listed; every old API exits 0 within its bound', async () => {
    const balancer = lb as LoopbackBalancer;
    const old = await Promise.all([startApi(), startApi()]);
    for (const a of old) balancer.add(a.url);
    await waitFor(async () => balancer.ready().length === 2, 10_000, 'both APIs in the endpoint list');

    // ---- the push clients ----
    const keyToBatch = new Map<string, string>();
    const connectionErrors: string[] = [];
    const badAnswers: string[] = [];
    let retried503 = 0;
    // One logical push: retried only on 503 + Retry-After, with the same key, a bounded number of times.
    const pushes = startSteadyPushes({
      url: balancer.url,
      apps: APPS,
      clients: CLIENTS,
      maxPushesPerClient: MAX_PUSHES_PER_CLIENT,
      until: Date.now() + MAX_PUSH_MS,
      attemptsPerBatch: 20,
      batchMs: MAX_PUSH_MS,
      requestTimeoutMs: 30_000,
      pauseMs: 20,
      onAck: ({ key }, batchId) => {
        const before = keyToBatch.get(key);
        if (before !== undefined && before !== batchId) badAnswers.push(`${key}: two batch ids`);
        keyToBatch.set(key, batchId);
      },
      onFailure: ({ key, answer, error }) => {
        if (!answer) {
          connectionErrors.push(`${key}: ${error?.cause?.code ?? error?.cause?.message ?? error?.message}`);
          return 'give-up';
        }
        const retryAfter = answer.headers.get('retry-after');
        if (answer.status === 503 && retryAfter) {
          retried503++;
          return { retryInMs: Math.min(1000, Number(retryAfter) * 1000) };
        }
        badAnswers.push(`${key}: ${answer.status} ${answer.text.slice(0, 200)}`);
        return 'give-up';
      },
    });
    const { acked, statuses } = pushes;
    await waitFor(async () => acked.size >= 30, 60_000, 'pushes acknowledged before the rollout');

    /** During the window: not ready (a stable reason), alive, still serving, answers close their connection. */
    const checkWindow = async (victim: Api, n: number): Promise<void> => {
      const ready = await waitFor(
        async () => {
          const r = await rawRequest(`${victim.url}/readyz`);
          return r.status === 503 ? r : null;
        },
        DRAIN_MS,
        'readyz 503 after SIGTERM',
      );
      expect(ready.headers['retry-after']).toMatch(/^\d+$/);
      expect(JSON.parse(ready.body)).toMatchObject({ ok: false, draining: true, checks: { process: 'draining' } });
      expect((await rawRequest(`${victim.url}/healthz`)).status).toBe(200);
      const direct = await rawRequest(`${victim.url}/push/events/${APPS[0]}/x`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json', 'Idempotency-Key': `direct-${n}` },
        body: batchBody(2, sampleEvent),
      });
      expect(direct.status, direct.body).toBe(200);
      expect(direct.headers.connection).toBe('close');
      const directId = (JSON.parse(direct.body) as { batchId: string }).batchId;
      acked.set(directId, { app: APPS[0] as string, key: `direct-${n}`, events: 2 });
      keyToBatch.set(`direct-${n}`, directId);
    };

    // ---- the rollout: one at a time ----
    const stopTimes: number[] = [];
    const current = [...old];
    for (let n = 0; n < old.length; n++) {
      const fresh = await startApi();
      balancer.add(fresh.url);
      await waitFor(async () => balancer.ready().includes(fresh.url), 15_000, 'the new API in the endpoint list');
      const victim = current.shift() as Api;
      current.push(fresh);
      const ackedBefore = acked.size;
      const t0 = performance.now();
      victim.proc.child.kill('SIGTERM');
      if (DRAIN_MS > 0) await checkWindow(victim, n);
      const code = await victim.proc.exited();
      const ms = Math.round(performance.now() - t0);
      stopTimes.push(ms);
      expect(code, victim.proc.output().slice(-3000)).toBe(0);
      expect(ms).toBeGreaterThanOrEqual(DRAIN_MS - 100);
      expect(ms).toBeLessThan(STOP_BOUND_MS);
      expect(victim.proc.output()).toContain('draining: /readyz answers 503');
      expect(victim.proc.output()).toContain('shut down cleanly');
      // Stopped listening: a push now meets a refused connection (the balancer had moved on long before).
      const refused = await rawRequest(`${victim.url}/push/events/${APPS[0]}/x`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body: batchBody(1, sampleEvent),
      }).then(
        () => 'answered',
        (err: NodeJS.ErrnoException) => err.code ?? err.message,
      );
      expect(refused).toBe('ECONNREFUSED');
      balancer.remove(victim.url);
      // Pushes go on through the new instances.
      await waitFor(async () => acked.size > ackedBefore + 10, 30_000, 'pushes acknowledged after the replacement');
    }
    await sleep(1000);
    await pushes.stop();

    // ---- what the client saw ----
    expect(connectionErrors, connectionErrors.slice(0, 10).join('\n')).toEqual([]);
    expect(badAnswers, badAnswers.slice(0, 10).join('\n')).toEqual([]);
    expect([...statuses.keys()].filter((s) => s !== 200 && s !== 503)).toEqual([]);
    expect(balancer.stats.noBackend).toBe(0);
    expect(balancer.stats.upstreamErrors).toEqual({});

    // ---- every acknowledged batch written once and listed (through the balancer, by the new APIs) ----
    const byApp = new Map<string, string[]>(APPS.map((a) => [a, []]));
    for (const [id, v] of acked) byApp.get(v.app)?.push(id);
    const files = (app: string): string[] => {
      try {
        return readdirSync(join(dataDir, 'events', app))
          .filter((f) => f.endsWith('.parquet'))
          .map((f) => f.replace(/\.parquet$/, ''));
      } catch {
        return [];
      }
    };
    await waitFor(
      async () => APPS.every((a) => files(a).length >= (byApp.get(a)?.length ?? 0)),
      90_000,
      'every acknowledged batch written',
    );
    const missing: string[] = [];
    const unlisted: string[] = [];
    for (const app of APPS) {
      const want = [...(byApp.get(app) ?? [])].sort();
      // Exactly the acknowledged batches: none missing, none twice (a retried key is one batch id).
      expect(files(app).sort()).toEqual(want);
      const listed = await listAllIds(balancer.url, app, TOKEN);
      for (const id of want) if (!listed.includes(id)) unlisted.push(id);
      for (let i = 1; i < listed.length; i++) expect(listed[i - 1]! < listed[i]!).toBe(true);
      missing.push(...want.filter((id) => !files(app).includes(id)));
    }
    expect(missing).toEqual([]);
    expect(unlisted).toEqual([]);
    expect(new Set(keyToBatch.values()).size).toBe(keyToBatch.size);

    // ---- the stop time of an idle API (no pushes any more) ----
    const idle = current.shift() as Api;
    balancer.remove(idle.url);
    const t0 = performance.now();
    expect(await idle.proc.stop('SIGTERM', STOP_BOUND_MS + 5000)).toBe(0);
    const idleMs = Math.round(performance.now() - t0);
    expect(idleMs).toBeLessThan(STOP_BOUND_MS);

    console.log(
      `rollout: ${pushes.requests()} pushes, ${acked.size} acknowledged, ${retried503} 503 + Retry-After retried, ` +
        `${connectionErrors.length} connection errors, statuses ${JSON.stringify(Object.fromEntries(statuses))}; ` +
        `balancer routed ${balancer.stats.routed}, no backend ${balancer.stats.noBackend}, ` +
        `upstream errors ${JSON.stringify(balancer.stats.upstreamErrors)}, answers with Connection: close ${JSON.stringify(Object.values(balancer.stats.closedByBackend))}; ` +
        `SIGTERM to exit under pushes ${stopTimes.join(', ')} ms, idle ${idleMs} ms ` +
        `(SHUTDOWN_DRAIN_MS ${DRAIN_MS}, bound ${STOP_BOUND_MS} ms)`,
    );
  }, 300_000);
});
