import { readFileSync, readdirSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import { Redis as RedisClient } from 'ioredis';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { parse } from 'yaml';
import { ScaledObject, TriggerAuthentication } from '@kubernetes-models/keda/keda.sh/v1alpha1';
import {
  PodMonitor,
  PrometheusRule,
  ServiceMonitor,
} from '@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1';
import { Deployment } from 'kubernetes-models/apps/v1';
import { HorizontalPodAutoscaler } from 'kubernetes-models/autoscaling/v2';
import { Ingress } from 'kubernetes-models/networking.k8s.io/v1';
import { PodDisruptionBudget } from 'kubernetes-models/policy/v1';
import { ConfigMap, type IContainer, type IPodSpec, Secret, Service, ServiceAccount } from 'kubernetes-models/v1';
import { EnvSchema, shutdownDrainMs } from '../../shared/config.js';
import { shardLayouts } from '../../shared/redis/shards.js';
import { SHUTDOWN_GRACE_MS } from '../../services/stack.js';
import {
  CHART_DIR,
  type K8sObject,
  type RenderedScaledObject,
  type ScaledObjectSpec,
  helm,
  kedaBacklog,
  render,
} from '../helpers/helm.js';
import { batchBody, sampleEvent } from '../helpers/events.js';
import { type TestStack, startTestStack } from '../helpers/stack.js';
import { waitFor } from '../helpers/wait.js';

/**
 * Issue 45, acceptance 1 and 2: the chart lints and renders for every values file and feature
 * set; every rendered object validates against its schema (Kubernetes, KEDA, prometheus-operator);
 * pods meet PSS `restricted`; grace periods exceed the product's stop bound; and the keys the
 * rendered ScaledObject names are the keys that hold the backlog of the running product.
 */
const ROOT = resolve(import.meta.dirname, '../..');
const CI_FILES = readdirSync(join(CHART_DIR, 'ci'))
  .filter((f) => f.endsWith('-values.yaml'))
  .sort();

/** A model class per apiVersion/kind the chart may render; any other kind fails the test. */
type Model = new (data: never) => { validate(): void };
const MODELS: Record<string, Model> = {
  'apps/v1/Deployment': Deployment,
  'v1/Service': Service,
  'v1/ServiceAccount': ServiceAccount,
  'v1/ConfigMap': ConfigMap,
  'v1/Secret': Secret,
  'policy/v1/PodDisruptionBudget': PodDisruptionBudget,
  'autoscaling/v2/HorizontalPodAutoscaler': HorizontalPodAutoscaler,
  'networking.k8s.io/v1/Ingress': Ingress,
  'keda.sh/v1alpha1/ScaledObject': ScaledObject,
  'keda.sh/v1alpha1/TriggerAuthentication': TriggerAuthentication,
  'monitoring.coreos.com/v1/PodMonitor': PodMonitor,
  'monitoring.coreos.com/v1/ServiceMonitor': ServiceMonitor,
  'monitoring.coreos.com/v1/PrometheusRule': PrometheusRule,
};

const MONITORING_ON = [
  'monitoring.podMonitor.enabled=true',
  'monitoring.prometheusRule.enabled=true',
  'monitoring.dashboards.enabled=true',
];
const MONITORING_OFF = [
  'monitoring.podMonitor.enabled=false',
  'monitoring.prometheusRule.enabled=false',
  'monitoring.dashboards.enabled=false',
];

function validate(o: K8sObject): void {
  const Model = MODELS[`${o.apiVersion}/${o.kind}`];
  if (!Model)
    throw new Error(`rendered an object of a kind no schema covers: ${o.apiVersion} ${o.kind} ${o.metadata.name}`);
  new Model(o as never).validate();
}

const deployments = (objs: K8sObject[]): (K8sObject & { spec: { template: { spec: IPodSpec } } })[] =>
  objs.filter((o) => o.kind === 'Deployment') as (K8sObject & { spec: { template: { spec: IPodSpec } } })[];
const byKind = (objs: K8sObject[], kind: string): K8sObject[] => objs.filter((o) => o.kind === kind);

/** PSS `restricted` (and a read-only root filesystem) on one pod spec. */
function expectRestricted(pod: IPodSpec, where: string): void {
  expect(pod.securityContext?.runAsNonRoot, where).toBe(true);
  expect(pod.securityContext?.seccompProfile?.type, where).toBe('RuntimeDefault');
  expect(pod.hostNetwork ?? false, where).toBe(false);
  expect(pod.hostPID ?? false, where).toBe(false);
  expect(pod.hostIPC ?? false, where).toBe(false);
  for (const v of pod.volumes ?? []) expect(v.hostPath, `${where} volume ${v.name}`).toBeUndefined();
  const containers: IContainer[] = [...pod.containers, ...(pod.initContainers ?? [])];
  for (const c of containers) {
    const sc = c.securityContext;
    const at = `${where} container ${c.name}`;
    expect(sc?.allowPrivilegeEscalation, at).toBe(false);
    expect(sc?.privileged ?? false, at).toBe(false);
    expect(sc?.capabilities?.drop, at).toEqual(['ALL']);
    expect(sc?.capabilities?.add ?? [], at).toEqual([]);
    expect(sc?.runAsNonRoot ?? pod.securityContext?.runAsNonRoot, at).toBe(true);
    expect(sc?.runAsUser ?? pod.securityContext?.runAsUser, at).toBeGreaterThan(0);
    expect(sc?.seccompProfile?.type ?? pod.securityContext?.seccompProfile?.type, at).toBe('RuntimeDefault');
    expect(sc?.readOnlyRootFilesystem, at).toBe(true);
    expect(
      c.volumeMounts?.some((m) => m.mountPath === '/tmp'),
      `${at}: a writable /tmp`,
    ).toBe(true);
  }
}

/** The env names the product reads (EnvSchema: REDIS_PASSWORD and the Sentinel variables included), plus the AWS SDK's and glibc's mmap threshold (decision 0027). */
const KNOWN_ENV = new Set([
  ...Object.keys(EnvSchema.shape),
  'AWS_ACCESS_KEY_ID',
  'AWS_SECRET_ACCESS_KEY',
  'MALLOC_MMAP_THRESHOLD_',
]);

/** Every value set the chart is rendered with: defaults and each ci/ file, KEDA and monitoring each on and off. */
function valueSets(): { file: string | undefined; sets: string[]; label: string }[] {
  const out: { file: string | undefined; sets: string[]; label: string }[] = [];
  for (const file of [undefined, ...CI_FILES]) {
    for (const keda of [true, false]) {
      for (const mon of [true, false]) {
        const kedaSets = [`encoder.keda.enabled=${keda}`];
        out.push({
          file,
          sets: [...kedaSets, ...(mon ? MONITORING_ON : MONITORING_OFF)],
          label: `${file ?? 'defaults'}, keda ${keda ? 'on' : 'off'}, monitoring ${mon ? 'on' : 'off'}`,
        });
      }
    }
  }
  return out;
}

describe('Helm chart (deploy/helm/events-ingest)', { timeout: 180_000 }, () => {
  it.each(['(defaults)', ...CI_FILES])('helm lint --strict passes with %s', async (file) => {
    const args = [
      'lint',
      '--strict',
      CHART_DIR,
      ...(file.endsWith('.yaml') ? ['-f', join(CHART_DIR, 'ci', file)] : []),
    ];
    const r = await helm(args);
    expect(r.code, `${r.stdout}\n${r.stderr}`).toBe(0);
    expect(r.stdout).toContain('0 chart(s) failed');
  });

  it('every ci/ values file exists for each Redis mode and feature set', () => {
    expect(CI_FILES).toEqual(
      expect.arrayContaining([
        'single-values.yaml',
        'sentinel-values.yaml',
        'cluster-keda-values.yaml',
        'monitoring-values.yaml',
      ]),
    );
  });

  it('sentinel mode: the sentinels and master name as plain values, both passwords only by reference, and KEDA gets both', async () => {
    const objs = await render('sentinel-values.yaml', ['encoder.keda.enabled=true']);
    for (const d of deployments(objs)) {
      const env = new Map((d.spec.template.spec.containers[0]?.env ?? []).map((e) => [e.name, e]));
      expect(env.get('REDIS_SENTINELS')?.value, d.metadata.name).toBe(
        'redis-sentinel-0.redis:26379,redis-sentinel-1.redis:26379,redis-sentinel-2.redis:26379',
      );
      expect(env.get('REDIS_SENTINEL_NAME')?.value, d.metadata.name).toBe('mymaster');
      expect(env.get('REDIS_PASSWORD')?.valueFrom?.secretKeyRef, d.metadata.name).toEqual({
        name: 'events-ingest-redis',
        key: 'redis-password',
      });
      expect(env.get('REDIS_SENTINEL_PASSWORD')?.valueFrom?.secretKeyRef, d.metadata.name).toEqual({
        name: 'events-ingest-redis',
        key: 'sentinel-password',
      });
      expect(env.has('REDIS_URL'), d.metadata.name).toBe(false);
    }
    const [auth] = byKind(objs, 'TriggerAuthentication') as unknown as {
      spec: { secretTargetRef: { parameter: string; name: string; key: string }[] };
    }[];
    expect(auth?.spec.secretTargetRef.map((r) => [r.parameter, r.key])).toEqual([
      ['password', 'redis-password'],
      ['sentinelPassword', 'sentinel-password'],
    ]);
    // The product parses what the chart renders (no ConfigError for the Redis settings).
    const api = deployments(objs).find((d) => d.metadata.labels?.['app.kubernetes.io/component'] === 'api');
    const plain = Object.fromEntries(
      (api?.spec.template.spec.containers[0]?.env ?? []).map((e) => [e.name, e.value ?? 'from-secret']),
    );
    const parsed = EnvSchema.safeParse(plain);
    expect(parsed.success ? [] : parsed.error.issues.filter((i) => String(i.path[0]).startsWith('REDIS'))).toEqual([]);
  });

  it('renders for every values set; every object validates against its schema and every pod meets PSS restricted', async () => {
    for (const { file, sets, label } of valueSets()) {
      const objs = await render(file, sets);
      expect(objs.length, label).toBeGreaterThan(0);
      for (const o of objs) {
        try {
          validate(o);
        } catch (err) {
          throw new Error(`${label}: ${o.kind} ${o.metadata.name}: ${(err as Error).message}`);
        }
      }
      const deps = deployments(objs);
      expect(deps.map((d) => d.metadata.labels?.['app.kubernetes.io/component']).sort(), label).toEqual([
        'api',
        'encoder',
        'rollup',
      ]);
      for (const d of deps) {
        expectRestricted(d.spec.template.spec, `${label}: ${d.metadata.name}`);
        for (const c of d.spec.template.spec.containers) {
          for (const e of c.env ?? [])
            expect(KNOWN_ENV.has(e.name), `${label}: ${c.name} env ${e.name} is not a variable the product reads`).toBe(
              true,
            );
          // Nothing secret from plain values: secret variables only ever come from a secretKeyRef.
          for (const e of c.env ?? [])
            if (/TOKEN|PASSWORD|SECRET|PUBLIC_KEY|HASH_KEY/.test(e.name))
              expect(e.valueFrom?.secretKeyRef, `${label}: ${e.name}`).toBeDefined();
        }
      }
      expect(byKind(objs, 'Secret'), label).toEqual([]);
      const kedaOn = sets.includes('encoder.keda.enabled=true');
      expect(byKind(objs, 'ScaledObject').length, label).toBe(kedaOn ? 1 : 0);
      const monOn = sets.includes('monitoring.podMonitor.enabled=true');
      expect(byKind(objs, 'PodMonitor').length, label).toBe(monOn ? 3 : 0);
      expect(byKind(objs, 'PrometheusRule').length, label).toBe(monOn ? 1 : 0);
    }
  });

  it('each Deployment runs its own entry point with probes on the product health routes', async () => {
    const objs = await render(undefined);
    const cmd = Object.fromEntries(
      deployments(objs).map((d) => [
        d.metadata.labels?.['app.kubernetes.io/component'],
        d.spec.template.spec.containers[0],
      ]),
    );
    const scripts = (
      JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { scripts: Record<string, string> }
    ).scripts;
    for (const [component, script] of [
      ['api', 'start:api'],
      ['encoder', 'start:encoder'],
      ['rollup', 'start:rollup'],
    ] as const) {
      expect(cmd[component]?.command?.join(' ')).toBe(scripts[script]);
    }
    expect(cmd.api?.readinessProbe?.httpGet?.path).toBe('/readyz');
    expect(cmd.api?.livenessProbe?.httpGet?.path).toBe('/healthz');
    expect(cmd.api?.startupProbe?.httpGet?.path).toBe('/healthz');
    for (const c of [cmd.encoder, cmd.rollup]) {
      expect(c?.livenessProbe?.httpGet?.path).toBe('/healthz');
      expect(c?.startupProbe?.httpGet?.port).toBe('metrics');
    }
  });

  it("the API runs glibc's mmap threshold at 1 MiB, the encoders keep the image's 128 KiB, and a value set replaces the API's (decision 0027)", async () => {
    const threshold = (objs: Awaited<ReturnType<typeof render>>, component: string): string | undefined =>
      deployments(objs)
        .find((d) => d.metadata.labels?.['app.kubernetes.io/component'] === component)
        ?.spec.template.spec.containers[0]?.env?.find((e) => e.name === 'MALLOC_MMAP_THRESHOLD_')?.value;
    const dockerfile = readFileSync(join(ROOT, 'Dockerfile'), 'utf8');
    const runtime = dockerfile.slice(dockerfile.indexOf('AS runtime'));
    expect(/MALLOC_MMAP_THRESHOLD_=(\d+)/.exec(runtime)?.[1], "the runtime image's value").toBe('131072');
    const defaults = await render(undefined);
    expect(threshold(defaults, 'api')).toBe('1048576');
    expect(threshold(defaults, 'encoder')).toBeUndefined();
    const set = await render(undefined, ['api.env.MALLOC_MMAP_THRESHOLD_=262144']);
    expect(threshold(set, 'api')).toBe('262144');
    const dropped = await render(undefined, ['api.env.MALLOC_MMAP_THRESHOLD_=null']);
    expect(threshold(dropped, 'api')).toBeUndefined();
  });

  it("each Deployment's grace exceeds the process's own bounded stop (the API's preStop pause and drain window, then SHUTDOWN_GRACE_MS)", async () => {
    for (const sets of [[], ['api.shutdownDrainSeconds=12'], ['api.preStopSleepSeconds=3']]) {
      const objs = await render(undefined, sets);
      for (const d of deployments(objs)) {
        const pod = d.spec.template.spec;
        const container = pod.containers[0];
        const preStop = container?.lifecycle?.preStop?.exec?.command ?? [];
        const pauseS = preStop[0] === 'sleep' ? Number(preStop[1]) : 0;
        const isApi = d.metadata.labels?.['app.kubernetes.io/component'] === 'api';
        const drainEnv = container?.env?.find((e) => e.name === 'SHUTDOWN_DRAIN_MS')?.value;
        // start:api drains for SHUTDOWN_DRAIN_MS (its default when unset); the other processes do not drain.
        const drainS = isApi ? shutdownDrainMs(EnvSchema.parse({ SHUTDOWN_DRAIN_MS: drainEnv }), 'api') / 1000 : 0;
        if (isApi) expect(drainEnv, sets.join()).toBe(sets[0]?.includes('shutdownDrainSeconds') ? '12000' : '5000');
        // The log flush after the stop is bounded to 2 s (shared/lifecycle.ts): the grace keeps more than that over.
        expect(pod.terminationGracePeriodSeconds ?? 30, `${d.metadata.name} ${sets.join()}`).toBeGreaterThan(
          pauseS + drainS + SHUTDOWN_GRACE_MS / 1000 + 2,
        );
      }
    }
  });

  it('PodDisruptionBudgets never block a drain at one replica', async () => {
    const objs = await render(undefined, ['api.replicas=1', 'encoder.replicas=1']);
    const pdbs = byKind(objs, 'PodDisruptionBudget');
    expect(pdbs.map((p) => p.metadata.labels?.['app.kubernetes.io/component']).sort()).toEqual(['api', 'encoder']);
    for (const p of pdbs) {
      expect(p.spec?.minAvailable).toBeUndefined();
      expect(p.spec?.maxUnavailable).toBeGreaterThanOrEqual(1);
    }
  });

  it.each([
    ['a string for replicas', ['api.replicas=two'], '/api/replicas'],
    ['an unknown Redis mode', ['redis.mode=memcached'], '/redis/mode'],
    ['Cluster mode without seed nodes', ['redis.mode=cluster'], '/redis/cluster/nodes'],
    ['zero queue shards', ['queue.shards=0'], '/queue/shards'],
    ['a queue name BullMQ refuses', ['queue.name=a:b'], '/queue/name'],
    ['an unknown KEDA trigger', ['encoder.keda.trigger=cpu'], '/encoder/keda/trigger'],
    [
      "a scale-down window past the HPA's 3600 s",
      ['encoder.keda.scaleDownStabilizationSeconds=3601'],
      '/encoder/keda/scaleDownStabilizationSeconds',
    ],
    ['a unix socket for REDIS_URL', ['redis.url=unix:///tmp/redis.sock'], '/redis/url'],
  ])('a bad value fails helm template via the schema: %s', async (_label, sets, path) => {
    const r = await helm(['template', 'rel', CHART_DIR, ...sets.flatMap((s) => ['--set', s])]);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toContain("values don't meet the specifications of the schema");
    expect(r.stderr).toContain(path);
  });

  it.each([
    ['single', 1, [] as string[]],
    ['single', 3, []],
    ['cluster', 6, ['redis.cluster.nodes={a:6379,b:6379,c:6379}']],
    ['cluster', 1, ['redis.cluster.nodes={a:6379}']],
  ] as const)(
    'the ScaledObject names the wait list and prioritized zset of every shard (%s Redis, %i shard(s)), as shared/redis/shards.ts lays them out',
    async (mode, shards, extra) => {
      const queue = 'orders-x_1';
      const objs = await render(undefined, [
        'encoder.keda.enabled=true',
        `redis.mode=${mode}`,
        `queue.shards=${shards}`,
        `queue.name=${queue}`,
        ...extra,
      ]);
      const so = byKind(objs, 'ScaledObject')[0] as K8sObject & { spec: ScaledObjectSpec };
      const expected = shardLayouts(queue, shards, mode === 'cluster').flatMap((l) => [
        `${l.queuePrefix}:${queue}:wait`,
        `${l.queuePrefix}:${queue}:prioritized`,
      ]);
      expect(so.spec.triggers.map((t) => t.metadata.listName)).toEqual(expected);
      expect(new Set(so.spec.triggers.map((t) => t.type))).toEqual(
        new Set([mode === 'cluster' ? 'redis-cluster' : 'redis']),
      );
      expect(so.spec.advanced.scalingModifiers.formula.split(' + ')).toEqual(so.spec.triggers.map((t) => t.name));
    },
  );

  it('the PrometheusRule is prometheus/alerts.yml and the dashboard ConfigMaps are grafana/dashboards (one source)', async () => {
    const objs = await render(undefined, MONITORING_ON);
    const rule = byKind(objs, 'PrometheusRule')[0];
    const alerts = parse(readFileSync(join(ROOT, 'prometheus/alerts.yml'), 'utf8')) as { groups: unknown };
    expect(rule?.spec?.groups).toEqual(alerts.groups);
    const boards = byKind(objs, 'ConfigMap').filter((c) => c.metadata.labels?.grafana_dashboard === '1');
    const files = readdirSync(join(ROOT, 'grafana/dashboards')).filter((f) => f.endsWith('.json'));
    expect(boards.length).toBe(files.length);
    for (const f of files) {
      const cm = boards.find((b) => b.data?.[f] !== undefined);
      expect(JSON.parse(cm?.data?.[f] ?? 'null')).toEqual(
        JSON.parse(readFileSync(join(ROOT, 'grafana/dashboards', f), 'utf8')),
      );
    }
  });
});

describe.each([1, 3])(
  'acceptance 2: the rendered ScaledObject reads the backlog of the running product (one Redis, %i shard(s))',
  (shards) => {
    let api: TestStack | undefined;
    let redis: Redis | undefined;
    let keys: string[] = [];
    let so: RenderedScaledObject | undefined;

    beforeAll(async () => {
      api = await startTestStack(
        { ROLLUP: 'off', QUEUE_SHARDS: String(shards), API_ENCODE_MAX_BYTES: '0' },
        { api: true, encoder: false },
      );
      redis = new RedisClient(inject('redisUrl'));
      const objs = await render(undefined, [
        'encoder.keda.enabled=true',
        `queue.name=${api.queueName}`,
        `queue.shards=${shards}`,
      ]);
      so = byKind(objs, 'ScaledObject')[0] as RenderedScaledObject;
      keys = so.spec.triggers.map((t) => t.metadata.listName ?? '');
    });
    afterAll(async () => {
      await api?.shutdown();
      redis?.disconnect();
    });

    it(
      'with encoders stopped, the sum equals the jobs waiting; with an encoder running it returns to 0',
      { timeout: 120_000 },
      async () => {
        const s = api as TestStack;
        const r = redis as Redis;
        expect(keys.length).toBe(2 * shards);
        const pushes = 12;
        // One push at a time: each is its own job (group commit only groups adds that overlap).
        for (let i = 0; i < pushes; i++) {
          const res = await fetch(`${s.url}/push/events/app${i}/x`, {
            method: 'POST',
            headers: { 'Content-Type': 'application/json' },
            body: batchBody(3, sampleEvent),
          });
          expect(res.status).toBe(200);
        }
        // The product never prioritises a batch, so BullMQ creates no prioritized zset; one prioritized
        // probe job per shard (BullMQ's own add, on the shard's queue) makes every named key exist.
        const layouts = shardLayouts(s.queueName, shards, false);
        const conn = r.duplicate({ maxRetriesPerRequest: null });
        const probes = layouts.map((l) => new Queue(s.queueName, { connection: conn, prefix: l.queuePrefix }));
        try {
          const probeJobs = await Promise.all(probes.map((q) => q.add('keda-probe', {}, { priority: 1 })));
          const read = (allowMissing: boolean): Promise<number> =>
            kedaBacklog(r, so as RenderedScaledObject, allowMissing);
          expect(await read(false)).toBe(pushes + shards);
          // BullMQ's own count of waiting and prioritized jobs, shard by shard, agrees.
          const counts = await Promise.all(probes.map((q) => q.getJobCounts('wait', 'prioritized')));
          expect(counts.reduce((a, c) => a + (c.wait ?? 0) + (c.prioritized ?? 0), 0)).toBe(pushes + shards);
          for (const j of probeJobs) await j.remove();
          expect(await read(true)).toBe(pushes);

          const encoder = await startTestStack(
            { ROLLUP: 'off', QUEUE_SHARDS: String(shards), QUEUE_NAME: s.queueName, DATA_DIR: s.dataDir },
            { api: false, encoder: true, encoderMetricsServer: false },
          );
          try {
            await waitFor(async () => (await read(true)) === 0, 60_000, 'the backlog the ScaledObject reads to drain');
          } finally {
            await encoder.shutdown();
          }
        } finally {
          for (const q of probes) await q.close();
          conn.disconnect();
        }
      },
    );
  },
);
