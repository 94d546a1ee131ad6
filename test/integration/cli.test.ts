import { type ChildProcess, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { isPartName } from '../../cli/files.js';
import { type CursorFile, readCursor } from '../../cli/sync.js';
import { duckQuery, sqlString } from '../helpers/duckdb.js';
import { batchBody } from '../helpers/events.js';
import { uniqueName } from '../helpers/names.js';
import { type ServiceProcess, startService, waitFor, waitForHttp } from '../helpers/proc.js';
import { freePort } from '../helpers/redis-server.js';

const ROOT = resolve(import.meta.dirname, '../..');
const BIN = join(ROOT, 'bin/events-ingest.mjs');
const TSX = join(ROOT, 'node_modules/.bin/tsx');
const TOKEN = 'cli-admin-token-0123456789';
const sha256 = (b: Uint8Array): string => createHash('sha256').update(b).digest('hex');
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

interface CliRun {
  child: ChildProcess;
  done: Promise<{ code: number | null; signal: NodeJS.Signals | null; stdout: string; stderr: string }>;
}

/**
 * Runs the CLI as a user would. `bin` runs `node bin/events-ingest.mjs` (one process, so its pid is
 * the one in the lock file and SIGKILL really kills the run); `tsx` runs `tsx cli/main.ts` like `npm run cli`.
 */
function cli(args: string[], env: Record<string, string> = {}, via: 'bin' | 'tsx' = 'bin'): CliRun {
  const [cmd, argv] = via === 'bin' ? [process.execPath, [BIN, ...args]] : [TSX, ['cli/main.ts', ...args]];
  const child = spawn(cmd, argv, {
    cwd: ROOT,
    env: { ...process.env, EVENTS_INGEST_TOKEN: TOKEN, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout?.on('data', (d: Buffer) => (stdout += d.toString()));
  child.stderr?.on('data', (d: Buffer) => (stderr += d.toString()));
  const kill = setTimeout(() => child.kill('SIGKILL'), 90_000);
  const done = new Promise<{ code: number | null; signal: NodeJS.Signals | null; stdout: string; stderr: string }>(
    (r) =>
      child.once('exit', (code, signal) => {
        clearTimeout(kill);
        // 'exit' can come before the pipes drain; 'close' means all output is in.
        child.once('close', () => r({ code, signal, stdout, stderr }));
        if (child.stdout?.readableEnded && child.stderr?.readableEnded) r({ code, signal, stdout, stderr });
      }),
  );
  return { child, done };
}

/**
 * A small reverse proxy in front of the product that can misbehave on purpose: answer 503 +
 * Retry-After to list calls, or stall pull bodies half-way (so a run can be killed mid-download).
 * It also counts, per batch, how many pull bodies were delivered completely.
 */
class Proxy {
  failLists = 0;
  failStatus = 503;
  stallPullsMs = 0;
  listCalls: number[] = [];
  completedPulls = new Map<string, number>();
  notModified = 0;
  private server!: http.Server;
  url = '';

  constructor(private readonly upstream: string) {}

  async start(): Promise<void> {
    this.server = http.createServer((req, res) => {
      this.handle(req, res).catch(() => res.destroy());
    });
    await new Promise<void>((r) => this.server.listen(0, '127.0.0.1', r));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  async close(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((r) => this.server.close(() => r()));
  }

  private async handle(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const path = req.url ?? '/';
    // The batch list only: sync's erasure listing (`/list/…/rewritten`) goes through untouched.
    if (path.startsWith('/list/') && !path.includes('/rewritten')) {
      this.listCalls.push(Date.now());
      if (this.failLists > 0) {
        this.failLists--;
        res
          .writeHead(this.failStatus, { 'Content-Type': 'application/json', 'Retry-After': '1' })
          .end(JSON.stringify({ error: 'overloaded; retry later' }));
        return;
      }
    }
    const headers: Record<string, string> = {};
    for (const h of ['authorization', 'if-none-match', 'range']) {
      const v = req.headers[h];
      if (typeof v === 'string') headers[h] = v;
    }
    const up = await fetch(`${this.upstream}${path}`, { method: req.method, headers });
    const body = Buffer.from(await up.arrayBuffer());
    const out: Record<string, string> = {};
    for (const h of ['content-type', 'etag', 'retry-after', 'accept-ranges']) {
      const v = up.headers.get(h);
      if (v !== null) out[h] = v;
    }
    out['content-length'] = String(body.byteLength);
    res.writeHead(up.status, out);
    const pull =
      path.startsWith('/pull/') && up.status === 200 ? (path.split('/').pop() ?? '').replace('.parquet', '') : null;
    if (path.startsWith('/pull/') && up.status === 304) this.notModified++;
    if (pull && this.stallPullsMs > 0) {
      res.write(body.subarray(0, body.byteLength >> 1));
      await sleep(this.stallPullsMs);
      if (res.destroyed) return;
      res.end(body.subarray(body.byteLength >> 1));
    } else res.end(body);
    if (pull) res.once('finish', () => this.completedPulls.set(pull, (this.completedPulls.get(pull) ?? 0) + 1));
  }
}

async function pushBatch(url: string, app: string, events: number): Promise<string> {
  const r = await fetch(`${url}/push/events/${app}/x`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: batchBody(events),
  });
  expect(r.status).toBe(200);
  return ((await r.json()) as { batchId: string }).batchId;
}

/** The server's whole list for `app`, page by page (bounded). */
async function listAll(url: string, app: string): Promise<string[]> {
  const all: string[] = [];
  for (let page = 0; page < 100; page++) {
    const after = all.length ? `&after=${all[all.length - 1]}` : '';
    const r = await fetch(`${url}/list/events/${app}?limit=1000${after}`, {
      headers: { Authorization: `Bearer ${TOKEN}` },
    });
    const body = (await r.json()) as { items: string[]; hasMore: boolean };
    all.push(...body.items);
    if (!body.hasMore) return all;
  }
  throw new Error('list did not end');
}

function filesIn(dir: string): string[] {
  return existsSync(dir) ? readdirSync(dir).sort() : [];
}

describe('events-ingest CLI against the running product', () => {
  let service: ServiceProcess;
  let url: string;
  let dataDir: string;
  let proxy: Proxy;
  const dirs: string[] = [];
  const tmp = (label: string): string => {
    const d = mkdtempSync(join(os.tmpdir(), `cli-${label}-`));
    dirs.push(d);
    return d;
  };

  beforeAll(async () => {
    dataDir = tmp('data');
    const port = await freePort();
    url = `http://127.0.0.1:${port}`;
    service = startService('services/main.ts', {
      PORT: String(port),
      HOST: '127.0.0.1',
      DATA_DIR: dataDir,
      REDIS_URL: inject('redisUrl'),
      QUEUE_NAME: uniqueName('cli'),
      ADMIN_TOKEN: TOKEN,
      LOG_LEVEL: 'warn',
    });
    await waitForHttp(`${url}/readyz`, 30_000, service);
    proxy = new Proxy(url);
    await proxy.start();
  });
  afterAll(async () => {
    await proxy?.close();
    await service?.stop('SIGTERM');
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  });

  it(
    'sync from "cron" while batches arrive, one run killed mid-download: exactly the listed batches, byte-identical, none twice',
    { timeout: 180_000 },
    async () => {
      const out = tmp('sync');
      const pushed: string[] = [];
      for (let i = 0; i < 25; i++) pushed.push(await pushBatch(url, 'shop', 20 + i));
      await waitFor(async () => (await listAll(url, 'shop')).length === 25 || null, 30_000, '25 batches listed');

      // Run 1: pulls stall half-way, so once one file is in place the next one is mid-download; kill it there.
      proxy.stallPullsMs = 600;
      const killed = cli(['sync', '--url', proxy.url, '--app', 'shop', '--out', out, '--limit', '7']);
      const atKill = await waitFor(
        async () => {
          const names = filesIn(out);
          return names.some((n) => n.endsWith('.parquet') && !n.startsWith('.')) &&
            names.some((n) => isPartName(n) && n.includes('.parquet.part-'))
            ? names
            : null;
        },
        60_000,
        'a finished file and a partial download',
      );
      killed.child.kill('SIGKILL');
      expect((await killed.done).signal).toBe('SIGKILL');
      expect(atKill).toContain('.sync.lock');
      const partial = atKill.filter((n) => isPartName(n) && n.includes('.parquet.part-'));
      expect(partial.length).toBe(1);
      proxy.stallPullsMs = 0;

      // Later runs, each with batches pushed while it goes (the first via tsx, as `npm run cli` does).
      const args = ['sync', '--url', proxy.url, '--app', 'shop', '--out', out, '--limit', '7'];
      const outputs: string[] = [];
      for (let round = 0; round < 3; round++) {
        const run = cli(args, {}, round === 0 ? 'tsx' : 'bin');
        for (let i = 0; i < 5; i++) {
          pushed.push(await pushBatch(url, 'shop', 10 + i));
          await sleep(100);
        }
        const r = await run.done;
        expect(r.code, r.stderr).toBe(0);
        expect(r.stdout).toMatch(/^synced \d+ batches \(\d+ bytes\), cursor \d{13}-\d{4}-[0-9a-f]{6}/);
        outputs.push(r.stdout);
      }
      await waitFor(
        async () => (await listAll(url, 'shop')).length === pushed.length || null,
        30_000,
        'every pushed batch listed',
      );
      for (const expectZero of [false, true]) {
        const r = await cli(args).done;
        expect(r.code, r.stderr).toBe(0);
        if (expectZero) expect(r.stdout).toMatch(/^synced 0 batches \(0 bytes\), cursor /);
      }
      // The run after the kill cleaned up its partial file and took over the stale lock.
      expect(filesIn(out)).not.toContain(partial[0]);

      const listed = await listAll(url, 'shop');
      expect(listed.map((n) => n.replace('.parquet', ''))).toEqual([...pushed].sort());
      const names = filesIn(out);
      expect(names).toEqual(['.cursor', ...listed].sort());
      for (const name of listed) {
        const r = await fetch(`${url}/pull/events/shop/${name}`, { headers: { Authorization: `Bearer ${TOKEN}` } });
        const served = new Uint8Array(await r.arrayBuffer());
        expect(sha256(readFileSync(join(out, name))), name).toBe(sha256(served));
      }
      const cursor = (await readCursor(out)) as CursorFile;
      expect(cursor).toMatchObject({
        version: 1,
        lastId: listed[listed.length - 1]?.replace('.parquet', ''),
        app: 'shop',
        collectionPath: 'events',
      });
      // None twice: every batch's body went through the proxy completely exactly once (the killed one was cut short).
      for (const name of listed) expect(proxy.completedPulls.get(name.replace('.parquet', '')), name).toBe(1);
      expect(proxy.completedPulls.size).toBe(listed.length);
      expect(outputs.filter((o) => !o.startsWith('synced 0 ')).length).toBeGreaterThan(0);

      // A file already present (a run killed between rename and cursor write) is confirmed by ETag, not fetched again.
      writeFileSync(
        join(out, '.cursor'),
        JSON.stringify({ ...cursor, lastId: listed[listed.length - 3]?.replace('.parquet', '') }),
      );
      const before = proxy.notModified;
      const again = await cli(['sync', '--url', proxy.url, '--app', 'shop', '--out', out]).done;
      expect(again.code, again.stderr).toBe(0);
      expect(again.stdout).toMatch(/^synced 0 batches \(0 bytes\), cursor \S+; 2 already present/);
      expect(proxy.notModified - before).toBe(2);
      for (const name of listed) expect(proxy.completedPulls.get(name.replace('.parquet', ''))).toBe(1);
      expect(again.stderr).toMatch(/progress: \d+\/\d+ batches/);
    },
  );

  it(
    'retries: 503 + Retry-After is waited out; retries run out with exit 1; 401 is not retried; bad usage exits 2',
    { timeout: 180_000 },
    async () => {
      const out = tmp('retry');
      const shopBefore = (await listAll(url, 'shop')).length;
      await pushBatch(url, 'shop', 5);
      await waitFor(async () => (await listAll(url, 'shop')).length === shopBefore + 1, 30_000, 'batch listed');
      proxy.failLists = 2;
      proxy.listCalls = [];
      const ok = await cli(['sync', '--url', proxy.url, '--app', 'shop', '--out', out, '--max-retries', '3']).done;
      expect(ok.code, ok.stderr).toBe(0);
      expect(ok.stderr).toMatch(/answered 503: overloaded; retry later; retry 1\/3 in 1\.0 s/);
      expect(proxy.listCalls.length).toBeGreaterThanOrEqual(3);
      const [t0, t1, t2] = proxy.listCalls as [number, number, number];
      // Retry-After: 1 is honoured (the default backoff would have waited 250-500 ms).
      expect(t1 - t0).toBeGreaterThanOrEqual(950);
      expect(t2 - t1).toBeGreaterThanOrEqual(950);
      expect(filesIn(out).filter((n) => n.endsWith('.parquet')).length).toBeGreaterThan(0);

      proxy.failLists = 1000;
      proxy.failStatus = 429;
      const gaveUp = await cli([
        'sync',
        '--url',
        proxy.url,
        '--app',
        'shop',
        '--out',
        tmp('retry2'),
        '--max-retries',
        '1',
      ]).done;
      proxy.failLists = 0;
      proxy.failStatus = 503;
      expect(gaveUp.code).toBe(1);
      expect(gaveUp.stderr).toMatch(/answered 429.*gave up after 2 attempts/);

      proxy.listCalls = [];
      const denied = await cli(['sync', '--url', proxy.url, '--app', 'shop', '--out', tmp('denied')], {
        EVENTS_INGEST_TOKEN: 'wrong-token-0123456789',
      }).done;
      expect(denied.code).toBe(1);
      expect(denied.stderr).toMatch(/answered 401/);
      expect(proxy.listCalls.length).toBe(1);

      const usage = await cli(['sync', '--url', url, '--app', 'shop']).done;
      expect(usage.code).toBe(2);
      expect(usage.stderr).toMatch(/--out/);
    },
  );

  it(
    'plain errors: --url with a query or fragment, an --app no push could use (exit 2), an app with no events or an empty store (exit 1)',
    { timeout: 180_000 },
    async () => {
      for (const [bad, what] of [
        [`${url}/?x=1`, 'a query'],
        [`${url}/#top`, 'a fragment'],
      ] as const) {
        const out = join(tmp('badurl'), 'out');
        const r = await cli(['sync', '--url', bad, '--app', 'shop', '--out', out]).done;
        expect(r.code, r.stderr).toBe(2);
        expect(r.stderr).toContain(`--url has ${what}`);
        expect(r.stderr).toContain(`(e.g. ${url})`);
        expect(existsSync(out)).toBe(false);
      }

      const storeEnv = { STORE: 'fs', DATA_DIR: dataDir };
      const count = 'SELECT COUNT(*) AS n FROM events';
      for (const [app, rule] of [
        ['a/b', 'must be 1-128 characters of [A-Za-z0-9._~-]'],
        ['..', 'must not be "." or ".."'],
      ] as const) {
        const r = await cli(['query', count, '--store', '--app', app], storeEnv).done;
        expect(r.code, r.stderr).toBe(2);
        expect(r.stderr).toBe(`events-ingest: --app ${JSON.stringify(app)}: an app name ${rule}\n`);
      }
      const nope = await cli(['query', count, '--store', '--app', 'nope'], storeEnv).done;
      expect(nope.code).toBe(1);
      expect(nope.stderr).toBe(`events-ingest: no events for app "nope" in fs:${dataDir}\n`);
      expect(nope.stdout).toBe('');
      const empty = tmp('empty-store');
      const none = await cli(['query', count, '--store'], { STORE: 'fs', DATA_DIR: empty }).done;
      expect(none.code).toBe(1);
      expect(none.stderr).toBe(`events-ingest: no events in collection "events" in fs:${empty}\n`);
      const every = await cli(['query', count, '--store', '--app', '*'], { STORE: 'fs', DATA_DIR: empty }).done;
      expect(every.code).toBe(1);
      expect(every.stderr).toBe(none.stderr);
      // The same exit code as a synced folder with nothing in it.
      const emptyDir = await cli(['query', count, '--dir', empty]).done;
      expect(emptyDir.code).toBe(1);
      expect(emptyDir.stderr).toMatch(/^events-ingest: no \.parquet files in /);
    },
  );

  it('the lock: a live holder makes a run exit 3 without touching the folder', { timeout: 180_000 }, async () => {
    const out = tmp('locked');
    writeFileSync(
      join(out, '.sync.lock'),
      JSON.stringify({ pid: process.pid, host: os.hostname(), startedAt: new Date().toISOString() }),
    );
    const r = await cli(['sync', '--url', url, '--app', 'shop', '--out', out]).done;
    expect(r.code).toBe(3);
    expect(r.stderr).toMatch(/another sync holds .*\.sync\.lock \(pid \d+/);
    expect(filesIn(out)).toEqual(['.sync.lock']);
  });

  it(
    'query over the synced folder and over the store matches DuckDB on the raw files; both README queries run',
    { timeout: 180_000 },
    async () => {
      const out = tmp('query');
      const shopBefore = (await listAll(url, 'shop')).length;
      for (let i = 0; i < 3; i++) await pushBatch(url, 'shop', 40);
      await pushBatch(url, 'other', 13);
      await waitFor(
        async () =>
          (await listAll(url, 'other')).length === 1 && (await listAll(url, 'shop')).length === shopBefore + 3,
        30_000,
        'batches listed',
      );
      const synced = await cli(['sync', '--url', url, '--app', 'shop', '--out', out]).done;
      expect(synced.code, synced.stderr).toBe(0);
      const shopFiles = sqlString(`${dataDir}/events/shop/*.parquet`);
      const [raw] = await duckQuery(`SELECT COUNT(*)::INTEGER AS n FROM read_parquet(${shopFiles})`);
      const [rawAll] = await duckQuery(
        `SELECT COUNT(*)::INTEGER AS n FROM read_parquet(${sqlString(`${dataDir}/events/*/*.parquet`)})`,
      );
      expect(Number(rawAll?.n)).toBe(Number(raw?.n) + 13);

      const storeEnv = { STORE: 'fs', DATA_DIR: dataDir };
      const count = 'SELECT COUNT(*)::INTEGER AS n FROM events';
      const jsonRows = (s: string): unknown[] =>
        s
          .trim()
          .split('\n')
          .map((l) => JSON.parse(l) as unknown);
      // Counts: per app over the folder and the store come from the README queries below; every app here.
      const everyApp = await cli(['query', count, '--store', '--json'], storeEnv, 'tsx').done;
      expect(jsonRows(everyApp.stdout)).toEqual([rawAll]);

      const byType = 'SELECT event_type, COUNT(*) AS n FROM events GROUP BY event_type ORDER BY n DESC';
      const hourly =
        "SELECT time_bucket(INTERVAL '1 hour', received_at::TIMESTAMPTZ) AS hour, COUNT(*) AS n FROM events WHERE received_at >= now() - INTERVAL '7 days' GROUP BY 1 ORDER BY 1";
      const rawByType = await duckQuery(byType.replace('FROM events', `FROM read_parquet(${shopFiles})`));
      const rawHourly = await duckQuery(hourly.replace('FROM events', `FROM read_parquet(${shopFiles})`));
      expect(rawByType.length).toBe(2);
      const rawTotal = Number(raw?.n);
      const total = (rows: unknown[]): number => rows.reduce((a: number, r) => a + Number((r as { n: unknown }).n), 0);
      const q1 = await cli(['query', byType, '--dir', out, '--json']).done;
      expect(q1.code, q1.stderr).toBe(0);
      expect(jsonRows(q1.stdout)).toEqual(rawByType);
      expect(total(jsonRows(q1.stdout))).toBe(rawTotal);
      const q2 = await cli(['query', hourly, '--store', '--app', 'shop', '--json'], storeEnv).done;
      expect(q2.code, q2.stderr).toBe(0);
      expect(jsonRows(q2.stdout)).toEqual(rawHourly);
      expect(total(jsonRows(q2.stdout))).toBe(rawTotal);

      const csv = await cli(['query', byType, '--dir', out, '--csv']).done;
      expect(csv.stdout).toBe(
        `event_type,n\r\n${rawByType.map((r) => `${String(r.event_type)},${String(r.n)}`).join('\r\n')}\r\n`,
      );
      const table = await cli(['query', byType, '--dir', out]).done;
      const lines = table.stdout.trimEnd().split('\n');
      expect(lines[0]).toMatch(/^event_type\s+n$/);
      expect(lines[1]).toMatch(/^-+\s+-+$/);
      expect(lines[lines.length - 1]).toBe('(2 rows)');
      // Numbers right-aligned in one column.
      expect(new Set(lines.slice(2, -1).map((l) => l.length)).size).toBe(1);

      const bad = await cli(['query', 'SELEC nonsense FROM events', '--dir', out]).done;
      expect(bad.code).toBe(1);
      expect(bad.stderr).toMatch(/^events-ingest: DuckDB: Parser Error/);
      const memory = await cli(['query', count, '--store'], { STORE: 'memory' }).done;
      expect(memory.code).toBe(1);
      expect(memory.stderr).toMatch(/keeps no files DuckDB can open/);
    },
  );

  it(
    "the README's queries run as shown (no --dir/--store); the events view has an app column over every app, one app and a synced folder",
    { timeout: 180_000 },
    async () => {
      const [a, b] = ['readme-a', 'readme-b'];
      for (let i = 0; i < 2; i++) await pushBatch(url, a, 25);
      await pushBatch(url, b, 7);
      await waitFor(
        async () => (await listAll(url, a)).length === 2 && (await listAll(url, b)).length === 1,
        30_000,
        'batches listed',
      );
      const jsonRows = (s: string): unknown[] =>
        s
          .trim()
          .split('\n')
          .filter(Boolean)
          .map((l) => JSON.parse(l) as unknown);

      // The commands exactly as the README prints them, with its folder and app replaced by this test's.
      const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
      const commands = [...readme.matchAll(/^node bin\/events-ingest\.mjs query "([^"]+)"$/gm)].map(
        (m) => m[1] as string,
      );
      expect(commands.length).toBe(2);
      for (const shown of commands) {
        expect(shown).toContain("read_parquet('$PWD/data/events/myapp/**/*.parquet')");
        const sql = shown.replaceAll('$PWD/data', dataDir).replaceAll('myapp', a);
        const r = await cli(['query', sql, '--json']).done;
        expect(r.code, r.stderr).toBe(0);
        const rows = jsonRows(r.stdout);
        expect(rows).toEqual(await duckQuery(sql));
        expect(rows.reduce((n: number, row) => n + Number((row as { n: unknown }).n), 0)).toBe(50);
      }
      // The view still needs --dir or --store, and says so.
      const noView = await cli(['query', 'SELECT COUNT(*) FROM events']).done;
      expect(noView.code).toBe(1);
      expect(noView.stderr).toMatch(/needs --dir <dir> or --store/);

      const storeEnv = { STORE: 'fs', DATA_DIR: dataDir };
      const perApp = `SELECT app, COUNT(*)::INTEGER AS n FROM events WHERE app IN ('${a}', '${b}') GROUP BY app ORDER BY app`;
      const every = await cli(['query', perApp, '--store', '--json'], storeEnv).done;
      expect(every.code, every.stderr).toBe(0);
      expect(jsonRows(every.stdout)).toEqual([
        { app: a, n: 50 },
        { app: b, n: 7 },
      ]);
      // Every row of every app has its app, and it matches the folder the file is in.
      const checked = await cli(
        ['query', "SELECT COUNT(*)::INTEGER AS bad FROM events WHERE app IS NULL OR app = ''", '--store', '--json'],
        storeEnv,
      ).done;
      expect(jsonRows(checked.stdout)).toEqual([{ bad: 0 }]);
      const one = await cli(['query', 'SELECT DISTINCT app FROM events', '--store', '--app', b, '--json'], storeEnv)
        .done;
      expect(jsonRows(one.stdout)).toEqual([{ app: b }]);
      const out = tmp('readme');
      const synced = await cli(['sync', '--url', url, '--app', a, '--out', out]).done;
      expect(synced.code, synced.stderr).toBe(0);
      const folder = await cli([
        'query',
        'SELECT app, COUNT(*)::INTEGER AS n FROM events GROUP BY app',
        '--dir',
        out,
        '--json',
      ]).done;
      expect(jsonRows(folder.stdout)).toEqual([{ app: a, n: 50 }]);
    },
  );
});
