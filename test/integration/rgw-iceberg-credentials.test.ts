/**
 * An Iceberg commit on S3 signs with the store's own credentials. The store is built as the
 * library's users build it, `new S3ObjectStore({ bucket, endpoint, region, accessKeyId,
 * secretAccessKey })`, against Ceph RGW (which checks every signature), with no AWS credentials
 * the SDK's default chain could find: no AWS_* variables, no shared credentials or config file,
 * no instance metadata. The rollup service (in this process, as `npm run start:rollup` runs it)
 * commits a batch file through its Iceberg committer, and icebird reads the table back.
 *
 * Before the store had a conditional create of its own, the committer built a second S3Client
 * from the store's public fields for the commit's `If-None-Match: *` put, without the
 * credentials, so this commit failed with CredentialsProviderError.
 */
import { randomBytes } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { icebergRead } from 'icebird';
import { Registry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { type RollupService, startRollupService } from '../../services/rollup/service.js';
import { loadSyncConfig, parseEnv } from '../../shared/config.js';
import { rollupSlice } from '../../shared/config-slices.js';
import { IcebergTable, THROUGH_BATCH_ID, currentSnapshot, storeRootUri } from '../../shared/iceberg/table.js';
import { createLogger } from '../../shared/logger.js';
import { PARQUET_MIME_TYPE } from '../../shared/parquet/encode.js';
import { encodeBatch } from '../../shared/parquet/index.js';
import { S3ObjectStore } from '../../shared/store/s3/index.js';
import { serveStoreToIcebird } from '../helpers/icebird-store.js';
import { uniqueName } from '../helpers/names.js';
import { type RgwServer, startRgw } from '../helpers/rgw.js';

/** Every place the SDK's default chain reads credentials from in the environment. */
const AWS_VARIABLES = [
  'AWS_ACCESS_KEY_ID',
  'AWS_SECRET_ACCESS_KEY',
  'AWS_SESSION_TOKEN',
  'AWS_PROFILE',
  'AWS_DEFAULT_PROFILE',
  'AWS_SHARED_CREDENTIALS_FILE',
  'AWS_CONFIG_FILE',
  'AWS_WEB_IDENTITY_TOKEN_FILE',
  'AWS_ROLE_ARN',
  'AWS_CONTAINER_CREDENTIALS_RELATIVE_URI',
  'AWS_CONTAINER_CREDENTIALS_FULL_URI',
  'AWS_CONTAINER_AUTHORIZATION_TOKEN',
  'AWS_EC2_METADATA_DISABLED',
] as const;

const APP = 'cred';
const PREFIX = `events/${APP}/`;
/** Bound on commit attempts that find the prefix lock held by the service's own first pass. */
const BUSY_ATTEMPTS = 50;

const icebird = serveStoreToIcebird();

describe('an Iceberg commit through S3ObjectStore({ accessKeyId, secretAccessKey }) on Ceph RGW, with no AWS credentials in the environment', () => {
  let rgw: RgwServer;
  let store: S3ObjectStore;
  let service: RollupService | null = null;
  const saved = new Map<string, string | undefined>();

  beforeAll(async () => {
    rgw = await startRgw();
    for (const name of AWS_VARIABLES) saved.set(name, process.env[name]);
    for (const name of AWS_VARIABLES) delete process.env[name];
    // Files that do not exist: the chain finds no profile; and no instance metadata (nothing leaves loopback).
    const nowhere = join(tmpdir(), `no-aws-${randomBytes(6).toString('hex')}`);
    process.env.AWS_SHARED_CREDENTIALS_FILE = join(nowhere, 'credentials');
    process.env.AWS_CONFIG_FILE = join(nowhere, 'config');
    process.env.AWS_EC2_METADATA_DISABLED = 'true';
    store = new S3ObjectStore({
      bucket: rgw.bucket,
      endpoint: rgw.endpoint,
      region: rgw.region,
      accessKeyId: rgw.accessKeyId,
      secretAccessKey: rgw.secretAccessKey,
    });
    // icebird turns `s3://bucket/` into the AWS host name: those URLs are answered from the store.
    icebird.route(storeRootUri(store).replace(/^s3:\/\/([^/]+)\//, 'https://$1.s3.amazonaws.com/'), store);
  }, 120_000);

  afterAll(async () => {
    await service?.close(5_000);
    store?.destroy();
    await rgw?.close();
    for (const [name, value] of saved) {
      if (value === undefined) delete process.env[name];
      else process.env[name] = value;
    }
  });

  it(
    "the rollup service commits a snapshot signed with the store's credentials, and icebird reads it back",
    { timeout: 90_000 },
    async () => {
      // One batch file a minute old (below the list bound of an empty ledger: every id before now).
      const ms = Date.now() - 60_000;
      const id = `${ms}-0000-${randomBytes(3).toString('hex')}`;
      const events = Array.from({ length: 3 }, (_, i) => ({
        event_type: 'track',
        event: 'open',
        distinct_id: `u-${i}`,
        message_id: `${id}-${i}`,
      }));
      const encoded = encodeBatch(JSON.stringify({ data: { events }, baseHash: null }), ms);
      if (!encoded.ok) throw new Error(encoded.reason);
      await store.putBytes(`${PREFIX}${id}.parquet`, encoded.bytes, { contentType: PARQUET_MIME_TYPE });

      const env = parseEnv({
        STORE: 's3',
        S3_BUCKET: rgw.bucket,
        S3_ENDPOINT: rgw.endpoint,
        REDIS_URL: inject('redisUrl'),
        QUEUE_NAME: uniqueName('cred'),
        LOG_LEVEL: 'silent',
        ICEBERG: 'on',
        // Only the commit this test asks for: the service's own loop waits an hour after its first pass.
        ICEBERG_COMMIT_SECONDS: '3600',
      });
      const logger = createLogger({ level: 'silent', name: 'test' });
      service = await startRollupService({
        env: rollupSlice(env),
        config: loadSyncConfig(env),
        store,
        redis: { kind: 'single', url: inject('redisUrl') },
        registry: new Registry(),
        logger,
        required: true,
      });
      const committer = service?.iceberg;
      if (!committer) throw new Error('the rollup service started without its Iceberg committer');

      let pass = await committer.commitPrefix(PREFIX);
      for (let i = 0; pass.busy && i < BUSY_ATTEMPTS; i++) {
        await new Promise((r) => setTimeout(r, 100));
        pass = await committer.commitPrefix(PREFIX);
      }
      expect(pass).toMatchObject({ busy: false, appended: 1 });

      const table = new IcebergTable({
        store,
        collection: 'events',
        app: APP,
        rootUri: storeRootUri(store),
        createIfAbsent: () => Promise.reject(new Error('read only')),
      });
      const loaded = await table.load();
      expect(loaded).not.toBeNull();
      expect(currentSnapshot(loaded!.metadata)?.summary[THROUGH_BATCH_ID]).toBe(id);
      const rows = await icebergRead({ tableUrl: table.location });
      expect(rows.map((r) => String(r.message_id)).sort()).toEqual(events.map((e) => e.message_id).sort());
    },
  );
});
