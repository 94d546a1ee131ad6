/**
 * The API's drain on SIGTERM, on one real `start:api` process (docs/operations.md, "Draining"):
 * for SHUTDOWN_DRAIN_MS /readyz answers 503 `draining` (checked against the OpenAPI document by
 * the integration tier's hook), /healthz 200, pushes are served with `Connection: close`; then a
 * new connection is refused, and the process exits 0 within the window + SHUTDOWN_GRACE_MS. The
 * rollout through a load balancer is test/integration/rollout.test.ts (system tier).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { SHUTDOWN_GRACE_MS } from '../../shared/stack-context.js';
import { batchBody } from '../helpers/events.js';
import { uniqueName } from '../helpers/names.js';
import { type ServiceProcess, startService, waitFor, waitForHttp } from '../helpers/proc.js';
import { freePort } from '../helpers/redis-server.js';

const DRAIN_MS = 3000;

/**
 * One request on a keep-alive connection of its own (not fetch: `Connection` is a hop-by-hop
 * header): the client asks to keep it, so a `Connection: close` answer is the server's choice.
 */
function rawPost(url: string, body: string): Promise<{ status: number; connection: string | undefined; body: string }> {
  const agent = new http.Agent({ keepAlive: true });
  return new Promise<{ status: number; connection: string | undefined; body: string }>((resolve, reject) => {
    const req = http.request(url, { method: 'POST', headers: { 'Content-Type': 'application/json' }, agent }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => (text += d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, connection: res.headers.connection, body: text }));
    });
    req.setTimeout(10_000, () => req.destroy(new Error('timed out')));
    req.on('error', reject);
    req.end(body);
  }).finally(() => agent.destroy());
}

describe('start:api drains on SIGTERM', () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'ingest-drain-'));
  let proc: ServiceProcess | undefined;
  afterAll(async () => {
    await proc?.stop('SIGKILL');
    rmSync(dataDir, { recursive: true, force: true });
  });

  it('readyz 503 draining, healthz 200, pushes served with Connection: close, then refused; exit 0 within the bound', async () => {
    const port = await freePort();
    const base = `http://127.0.0.1:${port}`;
    proc = startService('services/api/main.ts', {
      PORT: String(port),
      HOST: '127.0.0.1',
      REDIS_URL: inject('redisUrl'),
      DATA_DIR: dataDir,
      QUEUE_NAME: uniqueName('drain'),
      SHUTDOWN_DRAIN_MS: String(DRAIN_MS),
    });
    await waitForHttp(`${base}/readyz`, 60_000, proc);
    const before = (await (await fetch(`${base}/readyz`)).json()) as { draining: boolean; checks: object };
    expect(before.draining).toBe(false);
    expect(before.checks).not.toHaveProperty('process');
    // Keep-alive answers before the drain.
    expect((await rawPost(`${base}/push/events/drainapp/x`, batchBody(1))).connection).not.toBe('close');

    const t0 = performance.now();
    proc.child.kill('SIGTERM');
    const ready = await waitFor(
      async () => {
        const r = await fetch(`${base}/readyz`);
        return r.status === 503 ? r : null;
      },
      DRAIN_MS,
      'readyz 503 after SIGTERM',
    );
    expect(ready.headers.get('retry-after')).toMatch(/^\d+$/);
    expect(await ready.json()).toMatchObject({
      ok: false,
      draining: true,
      checks: { redis: 'ok', store: 'ok', process: 'draining' },
    });
    expect((await fetch(`${base}/healthz`)).status).toBe(200);
    const pushed = await rawPost(`${base}/push/events/drainapp/x`, batchBody(2));
    expect(pushed.status, pushed.body).toBe(200);
    expect(pushed.connection).toBe('close');
    // Still inside the window: what was asserted above happened while the listener was open.
    expect(performance.now() - t0).toBeLessThan(DRAIN_MS);

    const code = await proc.exited();
    const ms = Math.round(performance.now() - t0);
    expect(code, proc.output().slice(-3000)).toBe(0);
    expect(ms).toBeGreaterThanOrEqual(DRAIN_MS - 100);
    expect(ms).toBeLessThan(DRAIN_MS + SHUTDOWN_GRACE_MS + 2000);
    const refused = await rawPost(`${base}/push/events/drainapp/x`, batchBody(1)).then(
      () => 'answered',
      (err: NodeJS.ErrnoException) => err.code ?? err.message,
    );
    expect(refused).toBe('ECONNREFUSED');
    expect(proc.output()).toContain('draining: /readyz answers 503');
    console.log(`start:api SIGTERM with SHUTDOWN_DRAIN_MS=${DRAIN_MS}: exited ${String(code)} after ${ms} ms`);
  }, 120_000);
});
