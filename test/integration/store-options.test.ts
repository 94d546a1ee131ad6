import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { StoreError } from '../../shared/errors.js';
import { S3ObjectStore } from '../../shared/store/s3/index.js';
import { S3RVER_CREDENTIALS, type S3TestServer, startS3Server } from '../helpers/s3.js';

// s3rver knows one access key id (S3RVER) and refuses others: a store whose flat credentials were
// dropped (the SDK's default chain, which has none here) or replaced cannot write.
describe("S3ObjectStore with the Starfish reference's flat options, on s3rver", () => {
  let s3: S3TestServer;
  beforeAll(async () => {
    s3 = await startS3Server();
  });
  afterAll(async () => {
    await s3?.close();
  });

  it('writes and reads with { bucket, endpoint, region, accessKeyId, secretAccessKey } (path style by default)', async () => {
    const store = new S3ObjectStore({
      bucket: s3.bucket,
      endpoint: s3.endpoint,
      region: 'us-east-1',
      ...S3RVER_CREDENTIALS,
    });
    try {
      await store.putBytes('opts/a.json', new TextEncoder().encode('{"a":1}'), { contentType: 'application/json' });
      const got = await store.getBytes('opts/a.json');
      expect(new TextDecoder().decode(got?.body)).toBe('{"a":1}');
    } finally {
      store.destroy();
    }
  });

  it('uses the flat credentials it is given: an unknown key id is refused by the server', async () => {
    const store = new S3ObjectStore({
      bucket: s3.bucket,
      endpoint: s3.endpoint,
      accessKeyId: 'NOT-S3RVER',
      secretAccessKey: 'S3RVER',
    });
    try {
      const err = await store
        .putBytes('opts/b.json', new TextEncoder().encode('{}'), { contentType: 'application/json' })
        .catch((e: unknown) => e);
      expect(err).toBeInstanceOf(StoreError);
      expect((err as StoreError).retriable).toBe(false);
    } finally {
      store.destroy();
    }
  });
});
