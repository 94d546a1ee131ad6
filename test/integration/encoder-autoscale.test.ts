/**
 * Issue 45, item 3 (encoders) and acceptance 3 and 6: the chart's KEDA rule run against real
 * processes. A private redis-server, the API as one process and encoders as separate processes
 * (`services/encoder/main.ts`, the entry point the chart's encoder Deployment runs), each with the
 * environment the rendered Deployments give them. A control loop stands in for KEDA and the HPA:
 * every `pollingInterval` it reads the keys the rendered ScaledObject names, as KEDA's Redis
 * scaler reads them and combined by its formula, applies the rule (test/helpers/keda-scaler.ts)
 * and starts or stops encoder processes to match. A stop is what the kubelet does: SIGTERM, then
 * SIGKILL after the rendered pod's terminationGracePeriodSeconds.
 *
 * Clients push 100-event batches, a burst and then a steady rate (Idempotency-Key, 503 retried
 * with the same key), then stop. The backlog drains to 0, the replicas go above the minimum and back to it,
 * every acknowledged batch is one file (listed, and written by exactly one encoder, once), and
 * every SIGTERM'd encoder exits by itself, with code 0, within its grace.
 */
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SHUTDOWN_GRACE_MS } from '../../shared/stack-context.js';
import { batchBody, sampleEvent } from '../helpers/events.js';
import {
  type RenderedScaledObject,
  deploymentEnv,
  kedaBacklog,
  render,
  scaledObjectOf,
  terminationGraceSeconds,
} from '../helpers/helm.js';
import { KedaHpaModel, type ScaleRule, scaleRuleOf } from '../helpers/keda-scaler.js';
import { listAllIds } from '../helpers/list.js';
import { uniqueName } from '../helpers/names.js';
import { type ServiceProcess, startService, waitForHttp } from '../helpers/proc.js';
import { type RedisServer, freePort, startRedisServer } from '../helpers/redis-server.js';

const TOKEN = 'autoscale-admin-token-0123456789';
const EVENTS_PER_BATCH = 100;
/**
 * Pushes per second, for PUSH_SECONDS; at most MAX_INFLIGHT at once. The first BURST_SECONDS
 * go at BURST_RATE: a backlog one encoder cannot drain between two polls, whatever the machine's
 * speed (at a steady 40/s alone, one encoder kept up on a quiet machine and the rule never asked
 * for a second one).
 */
const RATE = 40;
const BURST_RATE = 200;
const BURST_SECONDS = 4;
const PUSH_SECONDS = 25;
const MAX_INFLIGHT = 8;
const APPS = 4;
/** A push not acknowledged within this (503s and connection errors retried with its key) fails the test. */
const PUSH_GIVE_UP_MS = 60_000;
/** The loop's bound after the pushes end: drain, scale back to the minimum, stops. */
const SETTLE_MS = 120_000;

/**
 * The chart's values for the test: the rule sized for a modest load and seconds instead of
 * minutes (listLength 10 jobs per replica, polls every 2 s, 8 s of HPA scale-down
 * stabilization, 6 s of cooldown before 0). The grace stays the chart's own (40 s): the encoder's
 * own bound (SHUTDOWN_GRACE_MS) cannot be shortened, and must fit within it.
 */
const TEST_VALUES = [
  'encoder.keda.enabled=true',
  'encoder.keda.minReplicas=0',
  'encoder.keda.maxReplicas=3',
  'encoder.keda.listLength=10',
  'encoder.keda.activationListLength=0',
  'encoder.keda.pollingInterval=2',
  'encoder.keda.cooldownPeriod=6',
  'encoder.keda.scaleDownStabilizationSeconds=8',
];

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** One encoder process the loop started. */
interface Encoder {
  n: number;
  svc: ServiceProcess;
  metricsPort: number;
  startedAt: number;
  /** Set when the loop SIGTERM'd it. */
  stopping: boolean;
}

/** How one SIGTERM went. */
interface StopRecord {
  n: number;
  /** SIGTERM to exit. */
  ms: number;
  code: number | null;
  signal: NodeJS.Signals | null;
  /** SIGKILL'd after the grace. */
  killed: boolean;
  /** Its own ingest_encoder_active_jobs just before the SIGTERM (-1: not read). */
  activeAtStop: number;
  /** It had logged `encoder started` (taking jobs) before the SIGTERM. */
  wasRunning: boolean;
}

/** This encoder's own gauge of jobs it is processing (-1 when its /metrics does not answer within 1 s). */
async function activeJobs(port: number): Promise<number> {
  try {
    const r = await fetch(`http://127.0.0.1:${port}/metrics`, { signal: AbortSignal.timeout(1000) });
    const m = /^ingest_encoder_active_jobs(?:\{[^}]*\})? (\d+)/m.exec(await r.text());
    return m ? Number(m[1]) : -1;
  } catch {
    return -1;
  }
}

/** The kubelet's stop: SIGTERM, SIGKILL after `graceMs`; resolves with the time to exit. */
async function stopEncoder(e: Encoder, graceMs: number): Promise<StopRecord> {
  const wasRunning = e.svc.output().includes('"encoder started"');
  const activeAtStop = await activeJobs(e.metricsPort);
  const child = e.svc.child;
  const t0 = performance.now();
  const exit = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((r) => {
    if (child.exitCode !== null || child.signalCode !== null) r({ code: child.exitCode, signal: child.signalCode });
    else child.once('exit', (code, signal) => r({ code, signal }));
  });
  let killed = false;
  child.kill('SIGTERM');
  const timer = setTimeout(() => {
    killed = true;
    child.kill('SIGKILL');
  }, graceMs);
  const { code, signal } = await exit;
  clearTimeout(timer);
  return { n: e.n, ms: performance.now() - t0, code, signal, killed, activeAtStop, wasRunning };
}

const quantile = (xs: readonly number[], q: number): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(q * s.length))] ?? Number.NaN;
};

describe('encoder autoscaling with real processes: the rendered KEDA rule, SIGTERM within the grace', () => {
  let redis: RedisServer | undefined;
  let client: Redis | undefined;
  let api: ServiceProcess | undefined;
  let apiUrl = '';
  let dataDir = '';
  let so: RenderedScaledObject | undefined;
  let encoderEnv: Record<string, string> = {};
  let graceMs = 0;
  const queueName = uniqueName('as');
  const encoders: Encoder[] = [];
  const allEncoders: Encoder[] = [];

  beforeAll(async () => {
    redis = await startRedisServer();
    dataDir = mkdtempSync(join(tmpdir(), 'ingest-autoscale-'));
    const objs = await render(undefined, [
      ...TEST_VALUES,
      `redis.url=${redis.url}`,
      `queue.name=${queueName}`,
      'store.type=fs',
      'store.fs.existingClaim=test',
      `store.fs.dataDir=${dataDir}`,
    ]);
    so = scaledObjectOf(objs);
    graceMs = terminationGraceSeconds(objs, 'encoder') * 1000;
    const port = await freePort();
    const apiEnv = deploymentEnv(objs, 'api');
    encoderEnv = deploymentEnv(objs, 'encoder');
    // Everything the Deployments set, except where the pod listens (one machine here).
    api = startService('services/api/main.ts', {
      ...apiEnv,
      HOST: '127.0.0.1',
      PORT: String(port),
      ADMIN_TOKEN: TOKEN,
      LOG_LEVEL: 'warn',
    });
    apiUrl = `http://127.0.0.1:${port}`;
    await waitForHttp(`${apiUrl}/readyz`, 60_000, api);
    // KEDA's client: the address the rendered trigger names.
    const address = so.spec.triggers[0]?.metadata.address ?? '';
    client = new Redis(`redis://${address}`);
  }, 120_000);

  afterAll(async () => {
    await Promise.all(allEncoders.map((e) => e.svc.stop('SIGKILL', 1000)));
    await api?.stop('SIGTERM', 10_000);
    client?.disconnect();
    await redis?.stop();
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  });

  it('scales up on the backlog and back to the minimum; every batch is written once; every SIGTERM ends within the grace', async () => {
    const r = client as Redis;
    const scaled = so as RenderedScaledObject;
    const rule: ScaleRule = scaleRuleOf(scaled);
    // The chart's redis trigger points at the test's Redis; the environment is the chart's.
    expect(scaled.spec.triggers.map((t) => t.metadata.address)).toEqual([
      `127.0.0.1:${String(redis?.port)}`,
      `127.0.0.1:${String(redis?.port)}`,
    ]);
    expect(encoderEnv.QUEUE_NAME).toBe(queueName);
    expect(encoderEnv.DATA_DIR).toBe(dataDir);
    // The encoder's own bounded stop, plus its 2 s log flush, fits within the pod's grace.
    expect(graceMs).toBeGreaterThan(SHUTDOWN_GRACE_MS + 2000);
    console.info(
      `autoscale rule (rendered): min ${rule.minReplicas}, max ${rule.maxReplicas}, listLength ${rule.target}, activation > ${rule.activationTarget}, poll ${rule.pollingMs} ms, cooldown ${rule.cooldownMs} ms, HPA scale-down window ${rule.stabilizationMs} ms; encoder grace ${graceMs} ms`,
    );

    const model = new KedaHpaModel(rule);
    const stops: Promise<StopRecord>[] = [];
    const unexpectedExits: string[] = [];
    /** Encoders that could not listen on their metrics port (see the control loop). */
    const portCollisions: number[] = [];
    let started = 0;
    const startEncoder = async (): Promise<void> => {
      const metricsPort = await freePort();
      const e: Encoder = {
        n: started++,
        svc: startService('services/encoder/main.ts', {
          ...encoderEnv,
          HOST: '127.0.0.1',
          METRICS_PORT: String(metricsPort),
        }),
        metricsPort,
        startedAt: Date.now(),
        stopping: false,
      };
      encoders.push(e);
      allEncoders.push(e);
    };

    // Pushes: a burst, then a steady rate, bounded in flight, each retried with its key until acknowledged.
    const acked = new Map<string, string>();
    const statuses = new Map<number, number>();
    const failures: string[] = [];
    let pushing = true;
    const pushOne = async (i: number): Promise<void> => {
      const app = `as${i % APPS}`;
      const key = `as-${i}`;
      const body = batchBody(EVENTS_PER_BATCH, sampleEvent);
      const giveUp = Date.now() + PUSH_GIVE_UP_MS;
      for (let attempt = 0; attempt < 600 && Date.now() < giveUp; attempt++) {
        const res = await fetch(`${apiUrl}/push/events/${app}/x`, {
          method: 'POST',
          headers: { 'Content-Type': 'application/json', 'Idempotency-Key': key },
          body,
          signal: AbortSignal.timeout(15_000),
        }).catch(() => null);
        const status = res?.status ?? 0;
        statuses.set(status, (statuses.get(status) ?? 0) + 1);
        if (res?.status === 200) {
          const { batchId } = (await res.json()) as { batchId: string };
          acked.set(batchId, app);
          return;
        }
        await res?.body?.cancel();
        if (res && res.status !== 503) {
          failures.push(`${key}: ${res.status}`);
          return;
        }
        await sleep(250);
      }
      failures.push(`${key}: not acknowledged within ${PUSH_GIVE_UP_MS} ms`);
    };
    const burst = BURST_RATE * BURST_SECONDS;
    const total = burst + RATE * (PUSH_SECONDS - BURST_SECONDS);
    const pushStart = Date.now();
    const pushes = (async () => {
      const inflight = new Set<Promise<void>>();
      for (let i = 0; i < total; i++) {
        const due =
          pushStart + (i < burst ? (i * 1000) / BURST_RATE : BURST_SECONDS * 1000 + ((i - burst) * 1000) / RATE);
        if (due > Date.now()) await sleep(due - Date.now());
        while (inflight.size >= MAX_INFLIGHT) await Promise.race(inflight);
        const p = pushOne(i).finally(() => inflight.delete(p));
        inflight.add(p);
      }
      await Promise.all(inflight);
      pushing = false;
    })();

    // The control loop: KEDA's poll and the HPA's decision, then the Deployment's pods follow.
    const timeline: string[] = [];
    let maxReplicas = 0;
    let pushEndAt = 0;
    let drainedAt = 0;
    let wentAboveMin = false;
    let backAtMinAt = 0;
    const deadline = Date.now() + PUSH_SECONDS * 1000 + PUSH_GIVE_UP_MS + SETTLE_MS;
    for (let tick = 0; tick < 10_000 && Date.now() < deadline; tick++) {
      const t = Date.now();
      for (const [i, e] of [...encoders.entries()].reverse())
        if (!e.stopping && (e.svc.child.exitCode !== null || e.svc.child.signalCode !== null)) {
          const output = e.svc.output();
          // Another test file's process can take the metrics port between freePort() and the
          // encoder's listen (test/helpers/rollup-deploy.ts has the same case): a harness
          // collision, not the product; the kubelet would restart the pod, and the next decision
          // here starts a replacement on another port.
          if (e.svc.child.exitCode === 1 && output.includes('EADDRINUSE') && !output.includes('"encoder started"'))
            portCollisions.push(e.n);
          else
            unexpectedExits.push(
              `encoder ${e.n}: ${String(e.svc.child.exitCode ?? e.svc.child.signalCode)}; its last output:\n${output.slice(-3000)}`,
            );
          encoders.splice(i, 1);
        }
      const live = encoders.filter(
        (e) => !e.stopping && e.svc.child.exitCode === null && e.svc.child.signalCode === null,
      );
      const metric = await kedaBacklog(r, scaled, true);
      const { desired, reason } = model.decide(t, metric, live.length);
      for (let k = live.length; k < desired; k++) await startEncoder();
      // The newest pods go first.
      for (const e of live.slice(desired).reverse()) {
        e.stopping = true;
        stops.push(stopEncoder(e, graceMs));
      }
      const replicas = Math.max(desired, 0);
      maxReplicas = Math.max(maxReplicas, replicas);
      if (replicas > rule.minReplicas) wentAboveMin = true;
      timeline.push(
        `${((t - pushStart) / 1000).toFixed(1)}s ${metric}→${replicas}${reason === 'hpa' ? '' : ` (${reason})`}`,
      );
      if (!pushing && !pushEndAt) pushEndAt = t;
      if (pushEndAt && !drainedAt && metric === 0) drainedAt = t;
      if (pushEndAt && drainedAt && wentAboveMin && replicas === rule.minReplicas) {
        backAtMinAt = t;
        break;
      }
      const next = t + rule.pollingMs;
      if (next > Date.now()) await sleep(next - Date.now());
    }
    await pushes;
    const stopRecords = await Promise.all(stops);
    console.info(`autoscale timeline (s since first push, backlog→replicas): ${timeline.join(', ')}`);

    // Every acknowledged batch: listed, one file, written once by one encoder.
    const byApp = new Map<string, string[]>();
    for (const [id, app] of acked) byApp.set(app, [...(byApp.get(app) ?? []), id]);
    const settleBy = Date.now() + 60_000;
    const listed = new Map<string, string[]>();
    for (const [app, ids] of byApp) {
      let got: string[] = [];
      for (let n = 0; n < 200 && Date.now() < settleBy; n++) {
        got = await listAllIds(apiUrl, app, TOKEN);
        if (ids.every((id) => got.includes(id))) break;
        await sleep(500);
      }
      listed.set(app, got);
    }
    const writes = new Map<string, number>();
    for (const e of allEncoders)
      for (const line of e.svc.output().split('\n')) {
        if (!line.includes('"batch written"')) continue;
        const id = (JSON.parse(line) as { batchId?: string }).batchId;
        if (id) writes.set(id, (writes.get(id) ?? 0) + 1);
      }
    const missingFiles = [...acked].filter(([id, app]) => !existsSync(join(dataDir, 'events', app, `${id}.parquet`)));
    const notListed = [...acked].filter(([id, app]) => !(listed.get(app) ?? []).includes(id));
    const notOnce = [...acked.keys()].filter((id) => writes.get(id) !== 1);
    const unacked = [...writes.keys()].filter((id) => !acked.has(id));

    // Spawn to `encoder started` (pino's `time`): how long a new replica takes to take jobs here.
    const readyMs = allEncoders.flatMap((e) => {
      const line = e.svc
        .output()
        .split('\n')
        .find((l) => l.includes('"encoder started"'));
      return line ? [(JSON.parse(line) as { time: number }).time - e.startedAt] : [];
    });
    const stopMs = stopRecords.map((s) => s.ms);
    const summary = `autoscale: max replicas ${maxReplicas} (min ${rule.minReplicas}, max ${rule.maxReplicas}); ${started} encoders started, ${stopRecords.length} SIGTERM'd: stop ms min/median/max ${Math.round(Math.min(...stopMs))}/${Math.round(quantile(stopMs, 0.5))}/${Math.round(Math.max(...stopMs))} (grace ${graceMs}), SIGKILLs ${stopRecords.filter((s) => s.killed).length}, stopped before taking jobs ${stopRecords.filter((s) => !s.wasRunning).length}, active jobs at SIGTERM ${stopRecords.map((s) => s.activeAtStop).join('/')}; spawn to taking jobs ms min/max ${Math.min(...readyMs)}/${Math.max(...readyMs)}; port collisions ${portCollisions.length}; pushes ${total}, acked ${acked.size}, statuses ${JSON.stringify(Object.fromEntries(statuses))}; backlog 0 ${drainedAt && pushEndAt ? drainedAt - pushEndAt : -1} ms after the last push, back to ${rule.minReplicas} replicas ${backAtMinAt && pushEndAt ? backAtMinAt - pushEndAt : -1} ms after`;
    console.info(summary);

    expect(failures).toEqual([]);
    expect(acked.size).toBe(total);
    expect(unexpectedExits).toEqual([]);
    expect(portCollisions.length, 'port collisions, each restarted').toBeLessThanOrEqual(2);
    expect(drainedAt, 'the backlog drained to 0 after the pushes').toBeGreaterThan(0);
    expect(await kedaBacklog(r, scaled, true)).toBe(0);
    expect(maxReplicas).toBeGreaterThan(Math.max(rule.minReplicas, 1));
    expect(backAtMinAt, `back to ${rule.minReplicas} replicas after the drain`).toBeGreaterThan(0);
    expect(encoders.filter((e) => !e.stopping)).toHaveLength(rule.minReplicas);
    expect(missingFiles).toEqual([]);
    expect(notListed).toEqual([]);
    expect(notOnce).toEqual([]);
    expect(unacked).toEqual([]);
    // Every stop: by itself (no SIGKILL), cleanly (exit 0), within the grace.
    expect(stopRecords.length).toBeGreaterThan(0);
    // One still loading its modules when told to stop has no handler yet and ends on the signal
    // itself, as it would in a pod: it held no job.
    expect(stopRecords.some((s) => s.wasRunning)).toBe(true);
    for (const s of stopRecords) {
      expect(s.killed, `encoder ${s.n} needed SIGKILL`).toBe(false);
      if (s.wasRunning) expect(s.code, `encoder ${s.n} exit`).toBe(0);
      else expect([0, 'SIGTERM']).toContain(s.code ?? s.signal);
      expect(s.ms).toBeLessThan(graceMs);
    }
  }, 420_000);
});
