/**
 * The README as a newcomer follows it: the Quick start's commands start `npm start` with the
 * token the walk-through's list and pull send, so those answer 200 (not 401).
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { type ServiceProcess, startService, waitFor, waitForHttp } from '../helpers/proc.js';
import { freePort } from '../helpers/redis-server.js';
import { uniqueName } from '../helpers/names.js';

const README = readFileSync(resolve(import.meta.dirname, '../../README.md'), 'utf8');

/** The first ```sh block of a `## <title>` section. */
function shellBlock(title: string): string {
  const section = README.split(/^## /m).find((s) => s.startsWith(`${title}\n`)) ?? '';
  return /```sh\n([\s\S]*?)```/.exec(section)?.[1] ?? '';
}

describe('README Quick start + walk-through', () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'ingest-readme-'));
  let svc: ServiceProcess | undefined;
  afterAll(async () => {
    await svc?.stop('SIGTERM');
    rmSync(dataDir, { recursive: true, force: true });
  });

  it('the Quick start sets the ADMIN_TOKEN the walk-through uses; its push, list and pull answer 200', { timeout: 120_000 }, async () => {
    const quick = shellBlock('Quick start');
    const walk = shellBlock('Walk-through with curl');
    const tokenOf = (block: string): string | undefined => /^export ADMIN_TOKEN=(\S+)/m.exec(block)?.[1];
    const token = tokenOf(quick);
    expect(token, 'the Quick start exports ADMIN_TOKEN before npm start').toBeDefined();
    expect(quick.indexOf('export ADMIN_TOKEN')).toBeLessThan(quick.indexOf('npm start'));
    expect(tokenOf(walk)).toBe(token);

    const port = await freePort();
    svc = startService('services/main.ts', { ADMIN_TOKEN: token as string, PORT: String(port), HOST: '127.0.0.1', DATA_DIR: dataDir, REDIS_URL: inject('redisUrl'), QUEUE_NAME: uniqueName('readme'), LOG_LEVEL: 'warn' });
    const base = `http://127.0.0.1:${port}`;
    await waitForHttp(`${base}/readyz`, 60_000, svc);

    const body = /-d '([^']+)'/.exec(walk)?.[1] ?? '';
    const pushed = await fetch(`${base}/push/events/myapp/any`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body });
    expect(pushed.status).toBe(200);
    const { batchId } = (await pushed.json()) as { batchId: string };
    const headers = { Authorization: `Bearer ${token}` };
    const items = await waitFor(async () => {
      const r = await fetch(`${base}/list/events/myapp`, { headers });
      expect(r.status).toBe(200);
      const listed = ((await r.json()) as { items: string[] }).items;
      return listed.length ? listed : null;
    }, 30_000, 'the batch listed');
    expect(items).toEqual([`${batchId}.parquet`]);
    expect((await fetch(`${base}/pull/events/myapp/${batchId}`, { headers })).status).toBe(200);
    // What a newcomer got before: no token, 401.
    expect((await fetch(`${base}/list/events/myapp`)).status).toBe(401);
  });
});
