/**
 * The published Starfish TypeScript client against the real API over a real port (issue 33):
 * the calls of docs/http-api.md, "Starfish clients", and v3 cap-cert auth (CAP_AUTH=on) with nonces shared
 * by two API instances on one Redis.
 */
import { createHash } from 'node:crypto';
import http from 'node:http';
import { StarfishClient, StarfishHttpError, fetchServerConfig } from '@drakkar.software/starfish-client';
import {
  type DeviceCredentials,
  bootstrapRootIdentity,
  mintDeviceCap,
  scopes,
} from '@drakkar.software/starfish-identities';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { waitFor } from '../helpers/proc.js';
import { ADMIN_TOKEN, type TestStack, startTestStack } from '../helpers/stack.js';

type Cap = Awaited<ReturnType<typeof mintDeviceCap>>;

/** A request as the client sent it, to send again. */
interface Sent {
  url: string;
  headers: Record<string, string>;
}

/** Sends GET `path` to `base` with exactly `headers` (Host included: node:http lets a test set it, fetch does not). */
function rawGet(
  base: string,
  path: string,
  headers: Record<string, string>,
): Promise<{ status: number; body: string }> {
  const u = new URL(base);
  return new Promise((resolve, reject) => {
    const req = http.request({ host: u.hostname, port: u.port, path, method: 'GET', headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8') }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end();
  });
}

async function statusOf(p: Promise<unknown>): Promise<{ status: number; body: string }> {
  try {
    await p;
    return { status: 200, body: '' };
  } catch (err) {
    if (err instanceof StarfishHttpError) return { status: err.status, body: err.body };
    throw err;
  }
}

describe('published Starfish client (CAP_AUTH=on, two API instances on one Redis)', () => {
  let root: DeviceCredentials;
  let a: TestStack;
  let b: TestStack;
  const app = `sf${Date.now().toString(36)}`;

  const capOf = (cap: Cap) => ({ getCap: async () => ({ cap, devEdPrivHex: root.device.edPriv }) });
  /** A root-identity cap of another scope or validity, signed with the root key (as the identity's owner could). */
  const mint = (scope: Parameters<typeof mintDeviceCap>[3], o: { nbf?: number; ttlSec?: number } = {}) =>
    mintDeviceCap(
      root.device.edPriv,
      root.device.edPub,
      { edPubHex: root.device.edPub, kemPubHex: root.device.kemPub },
      scope,
      o,
    );
  /** A client whose requests are recorded (URL and headers) before they are sent. */
  const recording = (capProvider: ReturnType<typeof capOf>, sent: Sent[]) =>
    new StarfishClient({
      baseUrl: a.url,
      capProvider,
      fetch: async (input, init) => {
        sent.push({ url: String(input), headers: { ...(init?.headers as Record<string, string>) } });
        return fetch(input, init);
      },
    });

  beforeAll(async () => {
    root = await bootstrapRootIdentity('events-ingest cap test passphrase');
    a = await startTestStack({ CAP_AUTH: 'on', CAP_ADMINS: root.userId, ROLLUP: 'off' });
    // Same queue, Redis and files: a second instance behind the same load balancer.
    b = await startTestStack(
      { QUEUE_NAME: a.queueName, DATA_DIR: a.dataDir, CAP_AUTH: 'on', CAP_ADMINS: root.userId, ROLLUP: 'off' },
      { api: true, encoder: false },
    );
  }, 60_000);
  afterAll(async () => {
    await b?.shutdown();
    await a?.shutdown();
  });

  let batchId = '';
  it('fetchServerConfig, push, then a cap-signed list and pullParquet (the docs/http-api.md snippet)', async () => {
    // docs/http-api.md, "Starfish clients": the same calls.
    const config = await fetchServerConfig(a.url);
    expect(config.collections).toEqual([
      {
        name: 'events',
        maxBodyBytes: 8_000_000,
        encryption: 'none',
        allowedMimeTypes: ['application/json'],
        maxEventsPerBatch: 100_000,
      },
    ]);

    const sdk = new StarfishClient({ baseUrl: a.url });
    const pushed = (await sdk.push(
      `/push/events/${app}/batch`,
      { events: [{ event: 'signup', distinct_id: 'u1' }] },
      null,
    )) as unknown as { hash: string; batchId: string };
    expect(pushed.batchId).toMatch(/^\d{13}-\d{4}-[0-9a-f]{6}$/);
    batchId = pushed.batchId;

    const admin = new StarfishClient({
      baseUrl: a.url,
      capProvider: { getCap: async () => ({ cap: root.capCert, devEdPrivHex: root.device.edPriv }) },
    });
    const listed = await waitFor(
      async () => {
        const page = (await admin.pull(`/list/events/${app}`)) as unknown as { items: string[]; hasMore: boolean };
        return page.items.includes(`${batchId}.parquet`) ? page : null;
      },
      20_000,
      'the batch listed',
    );
    expect(listed.hasMore).toBe(false);
    const file = await admin.pullParquet(`/pull/events/${app}/${batchId}`);
    const bytes = Buffer.from(file.data);
    expect(bytes.subarray(0, 4).toString()).toBe('PAR1');
    expect(file.hash).toBe(createHash('sha256').update(bytes).digest('hex'));

    const missing = await admin.pull(`/pull/events/${app}/1000000000000-0000-000000`);
    expect(missing.data).toEqual({});
    expect(missing.hash).toBe('');
    expect(typeof missing.timestamp).toBe('number');
  });

  it('a cap-signed push goes through as an anonymous push (public write route); Bearer tokens keep working beside caps', async () => {
    const signed = new StarfishClient({ baseUrl: a.url, capProvider: capOf(root.capCert) });
    const pushed = (await signed.push(`/push/events/${app}/x`, { events: [{ event: 'e' }] }, null)) as unknown as {
      batchId: string;
    };
    expect(pushed.batchId).toMatch(/^\d{13}-/);
    const bearer = new StarfishClient({
      baseUrl: a.url,
      fetch: (input, init) =>
        fetch(input, {
          ...init,
          headers: { ...(init?.headers as Record<string, string>), Authorization: `Bearer ${ADMIN_TOKEN}` },
        }),
    });
    const file = await waitFor(
      () => bearer.pullParquet(`/pull/events/${app}/${pushed.batchId}`).catch(() => null),
      20_000,
      'the file',
    );
    expect(Buffer.from(file.data).subarray(0, 4).toString()).toBe('PAR1');
  });

  it('a replayed signed request is refused, by this instance and by another on the same Redis', async () => {
    const sent: Sent[] = [];
    await recording(capOf(root.capCert), sent).pull(`/list/events/${app}`);
    const first = sent[0];
    if (!first) throw new Error('nothing sent');
    const path = new URL(first.url).pathname;
    const again = await fetch(first.url, { headers: first.headers });
    expect(again.status).toBe(401);
    expect(((await again.json()) as { error: string }).error).toMatch(/nonce replay/);

    // Instance b behind the same name (Host) as a: a fresh request signed for a passes there...
    const host = new URL(a.url).host;
    const fresh: Sent[] = [];
    const client = new StarfishClient({
      baseUrl: a.url,
      capProvider: capOf(root.capCert),
      fetch: async (input, init) => {
        fresh.push({ url: String(input), headers: { ...(init?.headers as Record<string, string>) } });
        const r = await rawGet(b.url, new URL(String(input)).pathname, {
          ...(init?.headers as Record<string, string>),
          host,
        });
        return new Response(r.body, { status: r.status, headers: { 'content-type': 'application/json' } });
      },
    });
    await client.pull(`/list/events/${app}`);
    // ...and the request a already answered is refused by b: the nonce is in the shared Redis.
    const replayed = await rawGet(b.url, path, { ...first.headers, host });
    expect(replayed.status).toBe(401);
    expect(JSON.parse(replayed.body).error).toMatch(/nonce replay/);
    // And the other way round.
    const back = fresh[0];
    if (!back) throw new Error('nothing sent to b');
    const toA = await rawGet(a.url, new URL(back.url).pathname, back.headers);
    expect(toA.status).toBe(401);
    expect(JSON.parse(toA.body).error).toMatch(/nonce replay/);

    const metrics = await (await fetch(`${a.url}/metrics`)).text();
    expect(metrics).toMatch(/ingest_cap_auth_total\{outcome="replay",service="ingest"\} [1-9]/);
  });

  it('no credentials, an expired cap, a wrong host or path, an oversized Cap header: 401 naming why', async () => {
    const none = await fetch(`${a.url}/list/events/${app}`);
    expect(none.status).toBe(401);
    expect(((await none.json()) as { error: string }).error).toMatch(/missing/);

    const now = Math.floor(Date.now() / 1000);
    const expired = await mint(scopes.rootAll(), { nbf: now - 7200, ttlSec: 600 });
    const r1 = await statusOf(
      new StarfishClient({ baseUrl: a.url, capProvider: capOf(expired) }).pull(`/list/events/${app}`),
    );
    expect(r1.status).toBe(401);
    expect(JSON.parse(r1.body).error).toMatch(/cap-cert expired/);

    const sent: Sent[] = [];
    const rec = recording(capOf(root.capCert), sent);
    // Signed for one path, sent to another: refused before its nonce is used.
    await rec.pull(`/list/events/${app}?limit=1`);
    const one = sent[0];
    if (!one) throw new Error('nothing sent');
    const otherPath = await rawGet(a.url, `/list/events/${app}?limit=2`, one.headers);
    expect(otherPath.status).toBe(401);
    expect(JSON.parse(otherPath.body).error).toMatch(/bad request signature/);
    const otherHost = await rawGet(a.url, `/list/events/${app}?limit=1`, {
      ...one.headers,
      host: 'ingest.example.com',
    });
    expect(otherHost.status).toBe(401);
    expect(JSON.parse(otherHost.body).error).toMatch(/bad request signature/);

    const big = await rawGet(a.url, `/list/events/${app}`, {
      authorization: `Cap ${'A'.repeat(9000)}`,
      'x-starfish-sig': 'x',
      'x-starfish-ts': String(Date.now()),
      'x-starfish-nonce': 'x',
    });
    expect(big.status).toBe(401);
    expect(JSON.parse(big.body).error).toMatch(/Cap header is 9004 bytes; at most 8192/);
  });

  it('a cap of a CAP_ADMINS identity without the read scope gets 403 on pull (its list scope still lists)', async () => {
    const noRead = await mint({ ops: ['list', 'write'], collections: ['*'], paths: ['**'] });
    const client = new StarfishClient({ baseUrl: a.url, capProvider: capOf(noRead) });
    const pulled = await statusOf(client.pullParquet(`/pull/events/${app}/${batchId}`));
    expect(pulled.status).toBe(403);
    const page = (await client.pull(`/list/events/${app}`)) as unknown as { items: string[] };
    expect(page.items).toContain(`${batchId}.parquet`);
    // A cap of an identity nobody listed: valid, identified, no admin.
    const stranger = await bootstrapRootIdentity('someone else entirely');
    const other = new StarfishClient({
      baseUrl: a.url,
      capProvider: { getCap: async () => ({ cap: stranger.capCert, devEdPrivHex: stranger.device.edPriv }) },
    });
    expect((await statusOf(other.pull(`/list/events/${app}`))).status).toBe(403);
  });
});
