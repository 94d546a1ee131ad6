/**
 * Group commit of directory fsyncs (shared/store/durable.ts): puts into one folder share an
 * fsync, but every caller waits for one that started after it asked, so a rename done before
 * the call is always covered.
 */
import { describe, expect, it } from 'vitest';
import { DirSyncGroup } from '../../shared/store/durable.js';

/** An fsync the test finishes by hand, recording when each one started. */
function manualFsync(): {
  fsync: (dir: string) => Promise<void>;
  started: { dir: string; finish(err?: Error): void }[];
} {
  const started: { dir: string; finish(err?: Error): void }[] = [];
  return {
    started,
    fsync: (dir) =>
      new Promise<void>((resolve, reject) => {
        started.push({ dir, finish: (err) => (err ? reject(err) : resolve()) });
      }),
  };
}

const tick = (): Promise<void> => new Promise((r) => setImmediate(r));

describe('DirSyncGroup', () => {
  it('runs one fsync for a lone caller and resolves when it finishes', async () => {
    const f = manualFsync();
    const group = new DirSyncGroup(f.fsync);
    let done = false;
    const p = group.sync('/d').then(() => (done = true));
    await tick();
    expect(f.started).toHaveLength(1);
    expect(done).toBe(false);
    f.started[0].finish();
    await p;
    expect(done).toBe(true);
  });

  it('callers arriving while an fsync runs share the next one, which starts only after the running one ends', async () => {
    const f = manualFsync();
    const group = new DirSyncGroup(f.fsync);
    const first = group.sync('/d');
    const resolved: number[] = [];
    // Their renames happened after the first fsync started, so it must not be the one they wait for.
    const later = Array.from({ length: 5 }, (_, i) => group.sync('/d').then(() => resolved.push(i)));
    await tick();
    expect(f.started).toHaveLength(1);
    f.started[0].finish();
    await first;
    await tick();
    expect(resolved).toEqual([]);
    expect(f.started).toHaveLength(2);
    f.started[1].finish();
    await Promise.all(later);
    expect(resolved.sort()).toEqual([0, 1, 2, 3, 4]);
    expect(f.started).toHaveLength(2);
  });

  it('keeps folders apart and starts afresh once a folder is idle', async () => {
    const f = manualFsync();
    const group = new DirSyncGroup(f.fsync);
    const a = group.sync('/a');
    const b = group.sync('/b');
    await tick();
    expect(f.started.map((s) => s.dir)).toEqual(['/a', '/b']);
    f.started[0].finish();
    f.started[1].finish();
    await Promise.all([a, b]);
    const again = group.sync('/a');
    await tick();
    expect(f.started.map((s) => s.dir)).toEqual(['/a', '/b', '/a']);
    f.started[2].finish();
    await again;
  });

  it('rejects every caller of a failed fsync, and the queued callers still get their own fsync', async () => {
    const f = manualFsync();
    const group = new DirSyncGroup(f.fsync);
    const first = group.sync('/d');
    const queued = group.sync('/d');
    await tick();
    f.started[0].finish(new Error('EIO'));
    await expect(first).rejects.toThrow('EIO');
    await tick();
    expect(f.started).toHaveLength(2);
    f.started[1].finish();
    await expect(queued).resolves.toBeUndefined();
  });
});
