/**
 * Acceptance: a burst of 200 concurrent 7.9 MB pushes against `npm start` with default settings
 * stays under 1 GB of RSS; every push is answered 200 or 503 + Retry-After, and every 200 is
 * written. The process is a real child (services/main.ts), its memory read from /proc.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { duckQuery, sqlString } from '../helpers/duckdb.js';
import { sampleEvent } from '../helpers/events.js';
import { uniqueName } from '../helpers/names.js';
import { type ServiceProcess, startService, waitFor, waitForHttp } from '../helpers/proc.js';
import { freePort } from '../helpers/redis-server.js';

const PUSHES = 200;
const BODY_BYTES = 7_900_000;
const GB = 1024 * 1024 * 1024;

/** VmRSS and VmHWM (peak RSS) of a process, in bytes. */
function memoryOf(pid: number): { rss: number; hwm: number } {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (field: string): number => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? 0) * 1024;
  return { rss: kb('VmRSS'), hwm: kb('VmHWM') };
}

/**
 * The bulk of every body: events joined by commas, ~7.9 MB in all. Each push adds its own first
 * event, so no two bodies are byte-identical (a retry window would merge them otherwise) while
 * the test process holds one copy of the bulk, not 200.
 */
function bulkEvents(targetBytes: number): { bulk: Buffer; events: number } {
  const parts: string[] = [];
  let size = 0;
  for (let i = 0; size < targetBytes; i++) {
    const text = JSON.stringify(sampleEvent(i));
    parts.push(text);
    size += text.length + 1;
  }
  return { bulk: Buffer.from(parts.join(',')), events: parts.length };
}

interface Answer {
  status: number;
  retryAfter: string | undefined;
  body: string;
}

function push(url: string, head: Buffer, bulk: Buffer, tail: Buffer): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = http.request(`${url}/push/events/burst/any`, {
      method: 'POST',
      agent: false,
      headers: { 'Content-Type': 'application/json', 'Content-Length': String(head.length + bulk.length + tail.length) },
    });
    req.setTimeout(120_000, () => req.destroy(new Error('push timed out')));
    req.on('response', (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, retryAfter: res.headers['retry-after'], body: Buffer.concat(chunks).toString() }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.write(head);
    req.write(bulk);
    req.end(tail);
  });
}

describe('memory budget of npm start', () => {
  let proc: ServiceProcess;
  let url: string;
  let dataDir: string;

  beforeAll(async () => {
    dataDir = mkdtempSync(join(tmpdir(), 'ingest-burst-'));
    const port = await freePort();
    url = `http://127.0.0.1:${port}`;
    // Defaults for everything that sizes memory; only where to listen, which Redis and which folder.
    proc = startService('services/main.ts', { PORT: String(port), HOST: '127.0.0.1', REDIS_URL: inject('redisUrl'), DATA_DIR: dataDir, QUEUE_NAME: uniqueName('burst'), LOG_LEVEL: 'warn' });
    await waitForHttp(`${url}/readyz`, 30_000, proc);
  });

  afterAll(async () => {
    await proc?.stop('SIGTERM', 20_000);
    rmSync(dataDir, { recursive: true, force: true });
  });

  it(`${PUSHES} concurrent ${BODY_BYTES / 1e6} MB pushes: RSS under 1 GB, every push 200 or 503 + Retry-After, every 200 written`, async () => {
    const { bulk, events } = bulkEvents(BODY_BYTES - 200);
    const tail = Buffer.from(']},"baseHash":null}');
    const before = memoryOf(proc.pid);
    let peakRss = before.rss;
    const sampler = setInterval(() => {
      try {
        peakRss = Math.max(peakRss, memoryOf(proc.pid).rss);
      } catch {
        /* the process is gone: the assertions below say so */
      }
    }, 20);
    const t0 = performance.now();
    let answers: Answer[];
    try {
      answers = await Promise.all(
        Array.from({ length: PUSHES }, (_, i) => push(url, Buffer.from(`{"data":{"events":[${JSON.stringify({ event: 'burst', distinct_id: `push-${i}` })},`), bulk, tail)),
      );
    } finally {
      clearInterval(sampler);
    }
    const seconds = (performance.now() - t0) / 1000;
    const after = memoryOf(proc.pid);
    const accepted = answers.filter((a) => a.status === 200);
    const shed = answers.filter((a) => a.status === 503);
    console.log(
      `burst: ${PUSHES} x ${(bulk.length / 1e6).toFixed(2)} MB in ${seconds.toFixed(1)} s: ${accepted.length} x 200, ${shed.length} x 503; ` +
        `RSS before ${(before.rss / 2 ** 20).toFixed(0)} MiB, peak sampled ${(peakRss / 2 ** 20).toFixed(0)} MiB, VmHWM ${(after.hwm / 2 ** 20).toFixed(0)} MiB`,
    );
    for (const a of answers) {
      expect([200, 503], a.body).toContain(a.status);
      if (a.status === 503) expect(a.retryAfter, a.body).toMatch(/^\d+$/);
    }
    expect(after.hwm).toBeLessThan(GB);
    expect(accepted.length).toBeGreaterThan(0);

    // Every 200 ends up as a file holding all of its events.
    const ids = accepted.map((a) => (JSON.parse(a.body) as { batchId: string }).batchId);
    expect(new Set(ids).size).toBe(ids.length);
    const files = ids.map((id) => join(dataDir, 'events', 'burst', `${id}.parquet`));
    await waitFor(async () => files.every((f) => existsSync(f)), 120_000, `${files.length} batch files`);
    const [row] = await duckQuery(`SELECT count(*)::INTEGER AS n, count(DISTINCT filename)::INTEGER AS f FROM read_parquet([${files.map(sqlString).join(', ')}], filename = true)`);
    expect(row).toEqual({ n: ids.length * (events + 1), f: ids.length });

    const metrics = await (await fetch(`${url}/metrics`)).text();
    const shedCount = Number(/^ingest_push_shed_total\{[^}]*reason="inflight_bytes"[^}]*\} (\d+)/m.exec(metrics)?.[1] ?? -1);
    expect(shedCount).toBe(shed.length);
  }, 240_000);
});
