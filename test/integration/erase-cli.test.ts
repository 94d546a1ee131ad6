/**
 * `events-ingest erase` as a user runs it (bin/events-ingest.mjs, a real process), against a
 * small loopback HTTP stand-in for the admin erase routes. The stand-in plays the agreed
 * contract (POST /admin/erase/<collection>/<app> → 202 {id}; GET /admin/erase/<id> → {state,
 * counts}) because the product's own routes are built separately (issue 36): this file tests the
 * CLI's request, polling, progress and exit codes only, not the erasure.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';

const ROOT = resolve(import.meta.dirname, '../..');
const BIN = join(ROOT, 'bin/events-ingest.mjs');
const TOKEN = 'erase-admin-token-0123456789';
const PERSON = 'person-7f3a9e21';

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
  ms: number;
}

function cli(args: string[]): Promise<Run> {
  const started = Date.now();
  const child: ChildProcess = spawn(process.execPath, [BIN, ...args], {
    cwd: ROOT,
    env: { ...process.env, EVENTS_INGEST_TOKEN: TOKEN },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout?.on('data', (d: Buffer) => (stdout += d.toString()));
  child.stderr?.on('data', (d: Buffer) => (stderr += d.toString()));
  const kill = setTimeout(() => child.kill('SIGKILL'), 60_000);
  return new Promise((r) =>
    child.once('close', (code) => {
      clearTimeout(kill);
      r({ code, stdout, stderr, ms: Date.now() - started });
    }),
  );
}

/** What the stand-in answers: the states GET walks through (the last one repeats), and what it saw. */
const plan = {
  postStatus: 202,
  /** 503 + Retry-After to this many GETs first. */
  failGets: 0,
  failedGets: 0,
  states: [] as Record<string, unknown>[],
  posts: [] as { path: string; auth: string | undefined; body: unknown }[],
  gets: 0,
};

describe('events-ingest erase (CLI against a stand-in of the admin erase routes)', () => {
  let server: http.Server;
  let url: string;

  beforeAll(async () => {
    server = http.createServer((req, res) => {
      let raw = '';
      req.on('data', (d: Buffer) => (raw += d.toString()));
      req.on('end', () => {
        const json = (status: number, body: unknown, headers: Record<string, string> = {}): void => {
          res.writeHead(status, { 'Content-Type': 'application/json', ...headers }).end(JSON.stringify(body));
        };
        if (req.method === 'POST' && req.url?.startsWith('/admin/erase/')) {
          plan.posts.push({ path: req.url, auth: req.headers.authorization, body: JSON.parse(raw) as unknown });
          if (plan.postStatus !== 202) return json(plan.postStatus, { error: 'token lacks a required role (admin)' });
          return json(202, { id: 'er-0001' });
        }
        if (req.method === 'GET' && req.url === '/admin/erase/er-0001') {
          plan.gets++;
          if (plan.failGets > 0) {
            plan.failGets--;
            plan.failedGets++;
            return json(503, { error: 'queue unavailable (Redis); retry later' }, { 'Retry-After': '0' });
          }
          // The n-th successful read gets the n-th state; the last one repeats.
          const served = plan.gets - plan.failedGets;
          return json(200, { id: 'er-0001', ...plan.states[Math.min(served - 1, plan.states.length - 1)] });
        }
        json(404, { error: 'not found' });
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    server.closeAllConnections();
    await new Promise<void>((r) => server.close(() => r()));
  });
  beforeEach(() => {
    Object.assign(plan, { postStatus: 202, failGets: 0, failedGets: 0, states: [], posts: [], gets: 0 });
  });

  const counts = (s: number, f: number, r: number): Record<string, number> => ({
    files_scanned: s,
    files_rewritten: f,
    rows_erased: r,
  });

  it('--wait: posts the ids, prints the id, follows queued → running → waiting → completed with one line per change, exits 0; never prints the ids erased', async () => {
    plan.failGets = 1;
    plan.states = [
      { state: 'queued', ...counts(0, 0, 0) },
      { state: 'running', ...counts(4, 1, 3) },
      { state: 'running', ...counts(4, 1, 3) },
      { state: 'running', ...counts(9, 2, 5) },
      { state: 'waiting', ...counts(10, 2, 5) },
      { state: 'completed', ...counts(10, 2, 5) },
    ];
    const r = await cli([
      'erase',
      '--url',
      url,
      '--app',
      'shop',
      '--distinct-id',
      PERSON,
      '--anonymous-id',
      `${PERSON}-anon`,
      '--wait',
      '--poll-interval',
      '100',
    ]);
    expect(r.code, r.stderr).toBe(0);
    expect(plan.posts).toEqual([
      {
        path: '/admin/erase/events/shop',
        auth: `Bearer ${TOKEN}`,
        body: { distinct_ids: [PERSON], anonymous_ids: [`${PERSON}-anon`], dry_run: false },
      },
    ]);
    expect(r.stdout).toBe('er-0001\nerasure er-0001: completed, 10 files scanned, 2 rewritten, 5 rows erased\n');
    const progress = r.stderr.split('\n').filter((l) => l.startsWith('erasure er-0001:'));
    expect(progress).toEqual([
      'erasure er-0001: queued, 0 files scanned, 0 rewritten, 0 rows erased',
      'erasure er-0001: running, 4 files scanned, 1 rewritten, 3 rows erased',
      'erasure er-0001: running, 9 files scanned, 2 rewritten, 5 rows erased',
      'erasure er-0001: waiting, 10 files scanned, 2 rewritten, 5 rows erased',
      'erasure er-0001: completed, 10 files scanned, 2 rewritten, 5 rows erased',
    ]);
    // The 503 was retried (and said so), then six reads.
    expect(r.stderr).toMatch(/erasure status er-0001 answered 503.*retry 1\//);
    expect(plan.gets).toBe(7);
    expect(`${r.stdout}${r.stderr}`).not.toContain(PERSON);
  });

  it('--dry-run without --wait: posts dry_run, prints only the id, reads no status', async () => {
    const r = await cli([
      'erase',
      '--url',
      url,
      '--app',
      'shop',
      '--collection',
      'clicks',
      '--distinct-id',
      PERSON,
      '--dry-run',
    ]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toBe('er-0001\n');
    expect(plan.posts[0]).toMatchObject({
      path: '/admin/erase/clicks/shop',
      body: { distinct_ids: [PERSON], anonymous_ids: [], dry_run: true },
    });
    expect(plan.gets).toBe(0);
  });

  it('a failed erasure exits 1 naming its error', async () => {
    plan.states = [
      { state: 'running', ...counts(1, 0, 0) },
      { state: 'failed', ...counts(2, 0, 0), error: 'store unavailable' },
    ];
    const r = await cli([
      'erase',
      '--url',
      url,
      '--app',
      'shop',
      '--distinct-id',
      PERSON,
      '--wait',
      '--poll-interval',
      '100',
    ]);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('events-ingest: erasure er-0001 failed: store unavailable');
  });

  it('--wait-timeout bounds the wait: exit 1 naming the id to read later, within the timeout plus a poll', async () => {
    plan.states = [{ state: 'running', ...counts(1, 0, 0) }];
    const r = await cli([
      'erase',
      '--url',
      url,
      '--app',
      'shop',
      '--distinct-id',
      PERSON,
      '--wait',
      '--wait-timeout',
      '2',
      '--poll-interval',
      '200',
    ]);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('erasure er-0001 is still running after 2 s (--wait-timeout)');
    expect(r.stderr).toContain('GET /admin/erase/er-0001');
    // Polls grow from 200 ms: a handful of reads in 2 s, not hundreds.
    expect(plan.gets).toBeGreaterThanOrEqual(3);
    expect(plan.gets).toBeLessThanOrEqual(10);
    expect(r.ms).toBeLessThan(20_000);
  });

  it('a refused request exits 1 with the server reason; no ids given is a usage error (2) with no request', async () => {
    plan.postStatus = 403;
    const refused = await cli(['erase', '--url', url, '--app', 'shop', '--distinct-id', PERSON]);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain('erase events/shop answered 403: token lacks a required role (admin)');
    plan.posts.length = 0;
    const usage = await cli(['erase', '--url', url, '--app', 'shop']);
    expect(usage.code).toBe(2);
    expect(usage.stderr).toContain('at least one --distinct-id or --anonymous-id');
    expect(plan.posts).toEqual([]);
  });
});
