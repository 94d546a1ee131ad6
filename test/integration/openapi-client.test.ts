/**
 * A client generated from the document (openapi-typescript types in test/helpers/openapi-types.ts,
 * regenerated with `npx openapi-typescript docs/openapi.json -o test/helpers/openapi-types.ts`,
 * and openapi-fetch) pushes, lists, pulls and reads /config against the running product.
 */
import createClient from 'openapi-fetch';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { paths } from '../helpers/openapi-types.js';
import { ADMIN_TOKEN, type TestStack, startTestStack } from '../helpers/stack.js';
import { waitFor } from '../helpers/wait.js';

describe('a client generated from the OpenAPI document', () => {
  // The API and an encoder, as `npm start` runs them: the pushed batch is written, listed and pulled.
  let stack: TestStack;
  beforeAll(async () => {
    stack = await startTestStack({ ROLLUP: 'off' });
  });
  afterAll(async () => {
    await stack?.shutdown();
  });

  it('pushes, lists, pulls and reads /config', async () => {
    const client = createClient<paths>({ baseUrl: stack.url });
    const config = await client.GET('/config');
    expect(config.data?.collections.map((c) => c.name)).toEqual(['events']);

    const pushed = await client.POST('/push/events/{app}/{batchId}', {
      params: { path: { app: 'client-app', batchId: 'b' }, header: { 'Idempotency-Key': 'client-1' } },
      body: { data: { events: [{ event: 'generated', message_id: 'g1' }] }, baseHash: null },
    });
    expect(pushed.response.status).toBe(200);
    const batchId = pushed.data?.batchId;
    expect(batchId).toMatch(/^\d{13}-\d{4}-[0-9a-f]{6}$/);

    const auth = { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } };
    const refused = await client.GET('/list/events/{app}', { params: { path: { app: 'client-app' } } });
    expect(refused.error?.code).toBe('unauthorized');
    // A batch is listed once the encoder has written its file.
    const list = await waitFor(
      async () => {
        const r = await client.GET('/list/events/{app}', {
          params: { path: { app: 'client-app' }, query: { limit: 10 } },
          ...auth,
        });
        return r.data?.items.includes(`${String(batchId)}.parquet`) ? r : undefined;
      },
      30_000,
      'the pushed batch in the list',
    );
    expect(list.response.status).toBe(200);
    expect(list.data).toEqual({ items: [`${String(batchId)}.parquet`], hasMore: false });

    const pull = await client.GET('/pull/events/{app}/{batchId}', {
      params: { path: { app: 'client-app', batchId: String(batchId) } },
      parseAs: 'arrayBuffer',
      ...auth,
    });
    expect(pull.response.status).toBe(200);
    expect(pull.response.headers.get('content-type')).toBe('application/vnd.apache.parquet');
    const bytes = Buffer.from(pull.data as ArrayBuffer);
    expect(bytes.subarray(0, 4).toString()).toBe('PAR1');
    expect(bytes.subarray(-4).toString()).toBe('PAR1');
  });
});
