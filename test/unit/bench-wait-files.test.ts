import { mkdirSync, mkdtempSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { countParquet, sleep, waitForFiles } from '../../bench/lib.js';

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function tempDir(): string {
  const d = mkdtempSync(join(tmpdir(), 'wait-files-'));
  dirs.push(d);
  return d;
}

/** Writes a file the way the filesystem store does: a dot-named temp file, then a rename. */
function put(dir: string, name: string): void {
  const tmp = join(dir, `.tmp-${name}`);
  writeFileSync(tmp, 'x');
  renameSync(tmp, join(dir, name));
}

describe('bench waitForFiles (a watch on the folder, not a listing every 50 ms)', () => {
  it('counts files already there and files renamed in later, and not temp files or sidecars', async () => {
    const dir = tempDir();
    for (let i = 0; i < 5; i++) put(dir, `a${i}.parquet`);
    writeFileSync(join(dir, '.tmp-unfinished'), 'x');
    writeFileSync(join(dir, '.meta-a0.parquet.json'), '{}');
    let listings = 0;
    const waiting = waitForFiles(dir, 25, 10_000, () => listings++);
    let lastPut = 0;
    // 20 more over ~400 ms: a 50 ms poll would list the folder about 8 times meanwhile.
    for (let i = 0; i < 20; i++) {
      await sleep(20);
      put(dir, `b${i}.parquet`);
      lastPut = performance.now();
    }
    const at = await waiting;
    expect(at).toBeGreaterThanOrEqual(lastPut);
    expect(countParquet(dir)).toBe(25);
    // The first listing (5 files), and at most one timed recount on a slow machine.
    expect(listings).toBeGreaterThanOrEqual(1);
    expect(listings).toBeLessThanOrEqual(2);
  });

  it('waits for a folder that does not exist yet', async () => {
    const dir = join(tempDir(), 'later');
    const waiting = waitForFiles(dir, 3, 10_000);
    await sleep(100);
    mkdirSync(dir);
    for (let i = 0; i < 3; i++) put(dir, `c${i}.parquet`);
    await expect(waiting).resolves.toBeGreaterThan(0);
  });

  it('with a counter: believes it once a listing agrees, and only then', async () => {
    const dir = tempDir();
    for (let i = 0; i < 3; i++) put(dir, `e${i}.parquet`);
    // The counter reaches 3 at its fourth call; the folder already holds the files.
    let calls = 0;
    const at = await waitForFiles(dir, 3, 10_000, undefined, { count: async () => Math.min(3, ++calls - 1) });
    expect(calls).toBe(4);
    expect(at).toBeGreaterThan(0);

    // A counter ahead of the folder is not believed: the wait ends on a later listing that finds the files.
    const dir2 = tempDir();
    put(dir2, 'f0.parquet');
    const started = performance.now();
    const waiting = waitForFiles(dir2, 2, 10_000, undefined, { count: async () => 2 });
    await sleep(300);
    put(dir2, 'f1.parquet');
    const done = await waiting;
    expect(done - started).toBeGreaterThanOrEqual(300);
    expect(countParquet(dir2)).toBe(2);
  });

  it('gives up after its time with the count it saw', async () => {
    const dir = tempDir();
    put(dir, 'd0.parquet');
    await expect(waitForFiles(dir, 3, 300)).rejects.toThrow(/only 1\/3 files/);
  });
});
