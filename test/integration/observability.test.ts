import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { parse, stringify } from 'yaml';
import { duckQuery } from '../helpers/duckdb.js';
import { batchBody, sampleEvent } from '../helpers/events.js';
import { uniqueName } from '../helpers/names.js';
import { type ServiceProcess, startService, waitFor, waitForHttp } from '../helpers/proc.js';
import { freePort } from '../helpers/redis-server.js';
import { spawnService } from '../../scripts/chaos-kit.js';

/**
 * The product (API and encoder as separate processes, as deployed, and an `npm start` beside
 * them) scraped by a real Prometheus every second. Every query of every Grafana dashboard and
 * every alert rule is evaluated by that Prometheus against what the services really export.
 */
const ROOT = resolve(import.meta.dirname, '../..');
const DASHBOARD_DIR = join(ROOT, 'grafana/dashboards');
const ALERTS = join(ROOT, 'prometheus/alerts.yml');
const TOKEN = 'obs-admin-token-0123456789';
const SENTINEL = 'SENTINEL-0b5e7-never-log-me';
const MAX_BODY = 1_000_000;

interface PromVector {
  metric: Record<string, string>;
  value: [number, string];
}
interface PromAnswer {
  status: string;
  error?: string;
  data?: { resultType: string; result: PromVector[] };
}

interface Panel {
  type?: string;
  title?: string;
  targets?: { expr?: string }[];
  panels?: Panel[];
}
interface Dashboard {
  title: string;
  panels: Panel[];
  templating?: { list: { name: string; definition?: string; query?: string | { query?: string } }[] };
}

/** Every (dashboard, panel, expr) in grafana/dashboards, rows' nested panels included. */
function dashboardExprs(): { where: string; expr: string }[] {
  const out: { where: string; expr: string }[] = [];
  for (const file of readdirSync(DASHBOARD_DIR).filter((f) => f.endsWith('.json'))) {
    const dash = JSON.parse(readFileSync(join(DASHBOARD_DIR, file), 'utf8')) as Dashboard;
    const walk = (panels: Panel[]): void => {
      for (const p of panels) {
        for (const t of p.targets ?? []) if (t.expr) out.push({ where: `${file} / ${p.title ?? '?'}`, expr: t.expr });
        walk(p.panels ?? []);
      }
    };
    walk(dash.panels);
  }
  return out;
}

/** Grafana's variables replaced the way "All" (regex `.*`) and a 1-minute range would. */
function substitute(expr: string): string {
  return expr
    .replace(/\$__rate_interval|\$__interval|\$__range|\$\{__rate_interval\}|\$\{__interval\}|\$\{__range\}/g, '1m')
    .replace(/\$\{(\w+)(?::\w+)?\}|\[\[(\w+)\]\]|\$(\w+)/g, '.*');
}

/** The same query with every metric name misspelled (both sides of an `or` too). */
function misspell(expr: string): string {
  const out = expr.replace(/\b((?:ingest|process|nodejs)_[a-z0-9_]+)/g, '$1_tpyo');
  if (out === expr) throw new Error(`no metric name found in ${expr}`);
  return out;
}

describe('observability: a real Prometheus scrapes the API and the encoder', () => {
  const procs: ServiceProcess[] = [];
  const dirs: string[] = [];
  let prom: ChildProcess | undefined;
  let promOut = '';
  let promUrl = '';
  let apiUrl = '';
  let metricsUrl = '';
  let dataDir = '';
  let api: ServiceProcess;
  let encoder: ServiceProcess;
  /** Where `npm start` (the API with its encoder child process) is scraped, as job "ingest". */
  let ingestTarget = '';

  async function query(q: string): Promise<PromAnswer> {
    const r = await fetch(`${promUrl}/api/v1/query?${new URLSearchParams({ query: q })}`);
    return (await r.json()) as PromAnswer;
  }
  async function scalar(q: string): Promise<number | undefined> {
    const a = await query(q);
    const v = a.data?.result[0]?.value[1];
    return v === undefined ? undefined : Number(v);
  }
  async function push(
    body: string,
    headers: Record<string, string> = {},
  ): Promise<{ status: number; json: { batchId?: string | null; error?: string } }> {
    const r = await fetch(`${apiUrl}/push/events/obs/any`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', ...headers },
      body,
    });
    return { status: r.status, json: (await r.json()) as { batchId?: string | null } };
  }

  beforeAll(async () => {
    const dir = mkdtempSync(join(tmpdir(), 'ingest-obs-'));
    dirs.push(dir);
    const cfg = join(dir, 'config.json');
    // A small body limit so a 413 needs no multi-megabyte upload.
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
            allowedMimeTypes: ['application/json'],
            maxBodyBytes: MAX_BODY,
            listable: true,
          },
        ],
      }),
    );
    const [apiPort, metricsPort, promPort, rollupPort, ingestPort] = [
      await freePort(),
      await freePort(),
      await freePort(),
      await freePort(),
      await freePort(),
    ];
    ingestTarget = `127.0.0.1:${ingestPort}`;
    apiUrl = `http://127.0.0.1:${apiPort}`;
    metricsUrl = `http://127.0.0.1:${metricsPort}`;
    promUrl = `http://127.0.0.1:${promPort}`;
    dataDir = join(dir, 'data');
    const common = {
      HOST: '127.0.0.1',
      DATA_DIR: dataDir,
      CONFIG_FILE: cfg,
      REDIS_URL: inject('redisUrl'),
      QUEUE_NAME: uniqueName('obs'),
      ADMIN_TOKEN: TOKEN,
      LOG_LEVEL: 'debug',
    };
    api = startService('services/api/main.ts', { ...common, PORT: String(apiPort) });
    encoder = startService('services/encoder/main.ts', { ...common, METRICS_PORT: String(metricsPort) });
    procs.push(api, encoder);

    // Same job names as prometheus/prometheus.yml, so the alert rules' `up{job=...}` selectors apply.
    const promCfg = join(dir, 'prometheus.yml');
    writeFileSync(
      promCfg,
      stringify({
        global: { scrape_interval: '1s', evaluation_interval: '1s' },
        rule_files: [ALERTS],
        scrape_configs: [
          { job_name: 'api', static_configs: [{ targets: [`127.0.0.1:${apiPort}`] }] },
          { job_name: 'encoder', static_configs: [{ targets: [`127.0.0.1:${metricsPort}`] }] },
          { job_name: 'rollup', static_configs: [{ targets: [`127.0.0.1:${rollupPort}`] }] },
          { job_name: 'ingest', static_configs: [{ targets: [ingestTarget] }] },
        ],
      }),
    );
    prom = spawn(
      'prometheus',
      [
        `--config.file=${promCfg}`,
        `--storage.tsdb.path=${join(dir, 'tsdb')}`,
        `--web.listen-address=127.0.0.1:${promPort}`,
        '--log.level=warn',
      ],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    prom.stdout?.on('data', (d: Buffer) => (promOut += d.toString()));
    prom.stderr?.on('data', (d: Buffer) => (promOut += d.toString()));
    prom.once(
      'error',
      (err) => (promOut += `\nspawn failed: ${err.message} (install Debian's "prometheus" package; .ci/run does)`),
    );

    await waitForHttp(`${apiUrl}/readyz`, 30_000, api);
    await waitForHttp(`${metricsUrl}/healthz`, 30_000, encoder);
    // The rollup service's panels and alert need its metrics (scraped as job "rollup", as in
    // prometheus/prometheus.yml); started once the others answer, so start-ups do not pile up.
    const rollup = spawnService('services/rollup/main.ts', {
      ...common,
      LOG_LEVEL: 'info',
      METRICS_PORT: String(rollupPort),
      ICEBERG: 'on',
    });
    procs.push(rollup);
    await waitForHttp(`http://127.0.0.1:${rollupPort}/healthz`, 60_000, rollup);
    // `npm start` on its own queue and folder: the dashboard's panels for its encoder processes.
    const ingest = startService('services/main.ts', {
      ...common,
      QUEUE_NAME: uniqueName('obs-ingest'),
      DATA_DIR: join(dir, 'ingest-data'),
      PORT: String(ingestPort),
      LOG_LEVEL: 'warn',
      ROLLUP: 'off',
    });
    procs.push(ingest);
    await waitForHttp(`http://${ingestTarget}/readyz`, 60_000, ingest);
    await waitFor(async () => (await fetch(`${promUrl}/-/ready`)).ok, 30_000, `prometheus ready\n${promOut}`);
    await waitFor(
      async () => (await scalar('sum(up{job=~"api|encoder|rollup|ingest"})')) === 4,
      30_000,
      'every target up in prometheus',
    );
    // Four processes start here; on a loaded machine that takes longer than the default hook timeout.
  }, 150_000);

  afterAll(async () => {
    for (const p of procs) await p.stop('SIGKILL');
    if (prom && prom.exitCode === null && prom.signalCode === null) {
      const exited = new Promise((r) => prom?.once('exit', r));
      prom.kill('SIGTERM');
      const t = setTimeout(() => prom?.kill('SIGKILL'), 5000);
      await exited;
      clearTimeout(t);
    }
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  });

  it('every dashboard query returns series once traffic flowed; a misspelled metric returns none', async () => {
    // Traffic that touches every outcome the dashboard draws.
    const accepted: string[] = [];
    for (const n of [1, 10, 50, 200, 500, 1000]) {
      const r = await push(batchBody(n));
      expect(r.status).toBe(200);
      accepted.push(r.json.batchId as string);
    }
    const keyed = batchBody(5);
    const first = await push(keyed, { 'Idempotency-Key': 'obs-key-1' });
    const again = await push(keyed, { 'Idempotency-Key': 'obs-key-1' });
    expect(first.status).toBe(200);
    expect(again).toEqual(first);
    accepted.push(first.json.batchId as string);
    expect((await push(keyed, { 'Content-Type': 'text/plain' })).status).toBe(415);
    expect((await push('{"data":{"events":[{"a":')).status).toBe(400);
    expect((await push(JSON.stringify({ data: { events: 'nope' }, baseHash: null }))).status).toBe(400);
    expect((await push(batchBody(2500))).status).toBe(413);
    expect((await push(JSON.stringify({ data: { events: [] }, baseHash: null }))).status).toBe(200);
    expect((await fetch(`${apiUrl}/list/events/obs`, { headers: { Authorization: `Bearer ${TOKEN}` } })).status).toBe(
      200,
    );

    // Each target is scraped on its own tick: wait for each expected value rather than read once.
    // The traffic goes to the separate API and encoder (jobs "api" and "encoder").
    const expected: [string, number][] = [
      ['sum(ingest_encoder_batches_total{job="encoder", outcome="written"})', accepted.length],
      ['sum(ingest_pushes_total{job="api", outcome="accepted"})', accepted.length],
      ['sum(ingest_pushes_total{job="api", outcome="deduplicated"})', 1],
      ['sum(ingest_pushes_total{job="api", outcome="empty"})', 1],
      ['sum(ingest_pushes_total{job="api", outcome="rejected"})', 4],
      ['sum(ingest_push_rejections_total{job="api", reason=~"content_type|bad_json|bad_envelope|too_large"})', 4],
      ['sum(ingest_encoder_workers{job="encoder"})', 1],
      // Refreshed at scrape time: the API sees the encoder's BullMQ worker without waiting for its upkeep.
      ['max(ingest_queue_workers{job="api"})', 1],
      // npm start's encoder process answers its parent's scrape.
      ['sum(ingest_encoder_workers{job="ingest"})', 1],
    ];
    for (const [q, want] of expected)
      await waitFor(async () => (await scalar(q)) === want, 30_000, `${q} == ${want} in prometheus`);
    // A few more scrapes so every rate() window holds samples from after the traffic.
    const seen = (await scalar('max(timestamp(up{job="encoder"}))')) as number;
    await waitFor(
      async () => ((await scalar('max(timestamp(up{job="encoder"}))')) ?? 0) >= seen + 2,
      15_000,
      'two more scrapes',
    );

    const exprs = dashboardExprs();
    expect(exprs.length).toBeGreaterThanOrEqual(20);
    const empty: string[] = [];
    for (const { where, expr } of exprs) {
      const a = await query(substitute(expr));
      if (a.status !== 'success') empty.push(`${where}: ${a.error ?? a.status}: ${expr}`);
      else if ((a.data?.result.length ?? 0) === 0) empty.push(`${where}: no series: ${expr}`);
    }
    expect(empty).toEqual([]);
    // The queries for `npm start`'s encoder processes (their own metric names, or the right side
    // of an `or`) find its target, not only the separate encoder.
    const ingestOnes = exprs.filter(({ expr }) => /ingest_encoder_(process|nodejs)_/.test(expr));
    expect(ingestOnes.length).toBeGreaterThanOrEqual(5);
    for (const { where, expr } of ingestOnes) {
      const instances = ((await query(substitute(expr))).data?.result ?? []).map((r) => r.metric.instance);
      expect({ where, instances }).toEqual({ where, instances: expect.arrayContaining([ingestTarget]) });
    }

    // Template variables' queries name real metrics too.
    for (const file of readdirSync(DASHBOARD_DIR).filter((f) => f.endsWith('.json'))) {
      const dash = JSON.parse(readFileSync(join(DASHBOARD_DIR, file), 'utf8')) as Dashboard;
      for (const v of dash.templating?.list ?? []) {
        const def = v.definition ?? (typeof v.query === 'string' ? v.query : v.query?.query) ?? '';
        const m = /label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)/.exec(def);
        if (m)
          expect({ variable: v.name, series: (await query(`group(${m[1]})`)).data?.result.length }).toEqual({
            variable: v.name,
            series: 1,
          });
      }
    }

    // The check has teeth: the same queries with one metric name misspelled come back empty.
    const leaked: string[] = [];
    for (const { where, expr } of exprs) {
      const a = await query(substitute(misspell(expr)));
      expect(a.status).toBe('success');
      if ((a.data?.result.length ?? 0) > 0) leaked.push(`${where}: ${misspell(expr)}`);
    }
    expect(leaked).toEqual([]);
    expect((await query('sum by (outcome) (rate(ingest_pushs_total[1m]))')).data?.result).toEqual([]);
  });

  it('every alert rule is loaded and evaluates cleanly, and names metrics that exist', async () => {
    const file = parse(readFileSync(ALERTS, 'utf8')) as {
      groups: { name: string; rules: { alert: string; expr: string }[] }[];
    };
    const wanted = file.groups.flatMap((g) => g.rules);
    expect(wanted.length).toBeGreaterThanOrEqual(4);
    const rules = await waitFor(
      async () => {
        const r = (await (await fetch(`${promUrl}/api/v1/rules?type=alert`)).json()) as {
          data: { groups: { rules: { name: string; health: string; lastError?: string }[] }[] };
        };
        const all = r.data.groups.flatMap((g) => g.rules);
        return all.length === wanted.length && all.every((x) => x.health !== 'unknown') ? all : null;
      },
      15_000,
      'alert rules evaluated',
    );
    expect(
      rules
        .map((r) => ({ name: r.name, health: r.health, error: r.lastError ?? '' }))
        .sort((a, b) => a.name.localeCompare(b.name)),
    ).toEqual(
      wanted.map((w) => ({ name: w.alert, health: 'ok', error: '' })).sort((a, b) => a.name.localeCompare(b.name)),
    );

    const missing: string[] = [];
    for (const rule of wanted) {
      expect((await query(rule.expr)).status).toBe('success');
      // A threshold hides a typo (an empty result reads as "not firing"), so each name is looked up alone.
      for (const m of rule.expr.matchAll(/\b(ingest_[a-z0-9_]+|up)\b(\{[^}]*\})?/g)) {
        const selector = m[1] === 'up' ? `up${m[2] ?? ''}` : (m[1] as string);
        if (((await query(`group(${selector})`)).data?.result.length ?? 0) === 0)
          missing.push(`${rule.alert}: ${selector}`);
      }
    }
    expect(missing).toEqual([]);
  });

  it('the compose Prometheus config and the rules pass promtool', () => {
    const dir = mkdtempSync(join(tmpdir(), 'ingest-promtool-'));
    dirs.push(dir);
    // The compose file mounts the rules at /etc/prometheus/alerts.yml; point at the repo's copy instead.
    const cfg = parse(readFileSync(join(ROOT, 'prometheus/prometheus.yml'), 'utf8')) as { rule_files: string[] };
    cfg.rule_files = [ALERTS];
    writeFileSync(join(dir, 'prometheus.yml'), stringify(cfg));
    expect(execFileSync('promtool', ['check', 'config', join(dir, 'prometheus.yml')], { encoding: 'utf8' })).toMatch(
      /SUCCESS/,
    );
    expect(execFileSync('promtool', ['check', 'rules', ALERTS], { encoding: 'utf8' })).toMatch(/SUCCESS/);
  });

  it('logs of the API and encoder processes at debug level never hold event contents', async () => {
    const secretEvent = {
      ...sampleEvent(0),
      distinct_id: SENTINEL,
      properties: { note: SENTINEL, nested: { deeper: [SENTINEL] } },
      context: { device: SENTINEL },
    };
    const ok = await push(
      JSON.stringify({ data: { events: [secretEvent, { ...secretEvent, event: 'second' }] }, baseHash: null }),
    );
    expect(ok.status).toBe(200);
    // Rejected pushes carrying the sentinel must not leak it either.
    expect((await push(JSON.stringify({ data: { events: [secretEvent, SENTINEL] }, baseHash: null }))).status).toBe(
      400,
    );
    expect((await push(`{"data":{"events":[{"distinct_id":"${SENTINEL}"`)).status).toBe(400);
    const id = ok.json.batchId as string;
    await waitFor(
      async () =>
        encoder
          .output()
          .split('\n')
          .some((l) => l.includes(id) && l.includes('batch written')),
      30_000,
      'sentinel batch written',
    );
    // The sentinel did reach the file: only the logs must not have it.
    const rows = await duckQuery(
      `SELECT distinct_id, context FROM read_parquet('${join(dataDir, 'events', 'obs', `${id}.parquet`)}')`,
    );
    expect(rows.map((r) => r.distinct_id)).toEqual([SENTINEL, SENTINEL]);

    expect(await api.stop('SIGTERM')).toBe(0);
    expect(await encoder.stop('SIGTERM')).toBe(0);
    const [apiLog, encLog] = [api.output(), encoder.output()];
    expect(apiLog).toMatch(/"msg":"request"/);
    const line = encLog.split('\n').find((l) => l.includes(`"batchId":"${id}"`) && l.includes('batch written'));
    expect(Object.keys(JSON.parse(line as string) as object)).toEqual(
      expect.arrayContaining(['batchId', 'key', 'events', 'bytes', 'ms']),
    );
    expect(apiLog).not.toContain(SENTINEL);
    expect(encLog).not.toContain(SENTINEL);
  });
});
