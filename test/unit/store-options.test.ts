import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { StoreError } from '../../shared/errors.js';
import { FilesystemObjectStore } from '../../shared/store/filesystem/index.js';
import { S3ObjectStore } from '../../shared/store/s3/index.js';

// Constructor checks only: no object is written or read here (see store-options in
// test/integration for the reference's options against a real S3 server).
describe('store constructor options', () => {
  const dirs: string[] = [];
  afterAll(async () => {
    await Promise.all(dirs.map((d) => rm(d, { recursive: true, force: true })));
  });

  it("FilesystemObjectStore takes the reference's baseDir as well as root", async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'fs-opts-'));
    dirs.push(dir);
    expect(new FilesystemObjectStore({ baseDir: dir }).root).toBe(path.resolve(dir));
    expect(new FilesystemObjectStore({ root: dir }).root).toBe(path.resolve(dir));
    expect(new FilesystemObjectStore({ root: dir, baseDir: `${dir}/` }).root).toBe(path.resolve(dir));
    expect(() => new FilesystemObjectStore({ root: dir, baseDir: `${dir}-other` })).toThrow(/both root and baseDir/);
    expect(() => new FilesystemObjectStore({ baseDir: '' })).toThrow(/non-empty root \(or baseDir\)/);
  });

  it('an unknown option is an error that names it', () => {
    const fsOpts = { root: '/tmp/x', rootDir: '/tmp/y' } as unknown as { root: string };
    expect(() => new FilesystemObjectStore(fsOpts)).toThrow(StoreError);
    expect(() => new FilesystemObjectStore(fsOpts)).toThrow(/unknown option "rootDir"/);
    const s3Opts = { bucket: 'b', endpoint: 'http://127.0.0.1:1', acessKeyId: 'k', secret: 's' } as unknown as {
      bucket: string;
    };
    expect(() => new S3ObjectStore(s3Opts)).toThrow(/unknown options "acessKeyId", "secret"/);
  });

  it('S3ObjectStore takes the flat credentials (both, and not beside credentials)', () => {
    const store = new S3ObjectStore({
      bucket: 'b',
      endpoint: 'http://127.0.0.1:1',
      accessKeyId: 'k',
      secretAccessKey: 's',
    });
    // The reference defaults to path-style addressing; so does its option shape here.
    expect(store.forcePathStyle).toBe(true);
    expect(
      new S3ObjectStore({ bucket: 'b', accessKeyId: 'k', secretAccessKey: 's', forcePathStyle: false }).forcePathStyle,
    ).toBe(false);
    expect(
      new S3ObjectStore({ bucket: 'b', credentials: { accessKeyId: 'k', secretAccessKey: 's' } }).forcePathStyle,
    ).toBe(false);
    expect(() => new S3ObjectStore({ bucket: 'b', accessKeyId: 'k' })).toThrow(
      /accessKeyId without a non-empty secretAccessKey/,
    );
    expect(() => new S3ObjectStore({ bucket: 'b', secretAccessKey: 's' })).toThrow(
      /secretAccessKey without a non-empty accessKeyId/,
    );
    expect(
      () =>
        new S3ObjectStore({
          bucket: 'b',
          accessKeyId: 'k',
          secretAccessKey: 's',
          credentials: { accessKeyId: 'k', secretAccessKey: 's' },
        }),
    ).toThrow(/both credentials and accessKeyId/);
  });
});
