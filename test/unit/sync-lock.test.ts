/**
 * The sync folder lock under contention: several runs try to take it at the same moment. The lock
 * file must never be visible empty (created, not yet written), or a second run reads it as a dead
 * owner's and takes it too. Real files in a temp folder; every round bounded. A slow disk is
 * simulated by delaying every write by a few ms (the window a loaded machine gives by chance).
 */
import { promises as fsp, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it, vi } from 'vitest';
import { type HeldLock, LOCK_NAME, acquireLock } from '../../cli/lock.js';
import { CliError, EXIT } from '../../cli/errors.js';

const dirs: string[] = [];
afterAll(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));
function freshDir(): string {
  const d = mkdtempSync(join(os.tmpdir(), 'ingest-lock-'));
  dirs.push(d);
  return d;
}

describe('sync lock', () => {
  it('of 8 runs taking the lock at once on a slow disk, exactly one holds it (50 rounds); the file always names its owner', async () => {
    const slow = async (): Promise<void> => new Promise((r) => setTimeout(r, 20));
    const realOpen = fsp.open.bind(fsp);
    const realWriteFile = fsp.writeFile.bind(fsp);
    vi.spyOn(fsp, 'open').mockImplementation(async (...args: Parameters<typeof fsp.open>) => {
      const handle = await realOpen(...args);
      const write = handle.writeFile.bind(handle);
      handle.writeFile = async (...a: Parameters<typeof handle.writeFile>) => (await slow(), write(...a));
      return handle;
    });
    vi.spyOn(fsp, 'writeFile').mockImplementation(
      async (...args: Parameters<typeof fsp.writeFile>) => (await slow(), realWriteFile(...args)),
    );
    try {
      await contend(50);
    } finally {
      vi.restoreAllMocks();
    }
  });

  it('of 8 runs taking the lock at once, exactly one holds it (200 rounds)', async () => {
    await contend(200);
  });

  async function contend(rounds: number): Promise<void> {
    const dir = freshDir();
    for (let round = 0; round < rounds; round++) {
      const results = await Promise.allSettled(Array.from({ length: 8 }, () => acquireLock(dir)));
      const held = results
        .filter((r): r is PromiseFulfilledResult<HeldLock> => r.status === 'fulfilled')
        .map((r) => r.value);
      const refused = results
        .filter((r): r is PromiseRejectedResult => r.status === 'rejected')
        .map((r) => r.reason as unknown);
      expect(held.length, `round ${round}`).toBe(1);
      for (const err of refused) {
        expect(err).toBeInstanceOf(CliError);
        expect((err as CliError).exitCode).toBe(EXIT.locked);
      }
      const info = JSON.parse(readFileSync(join(dir, LOCK_NAME), 'utf8')) as { pid: number; host: string };
      expect(info).toMatchObject({ pid: process.pid, host: os.hostname() });
      await held[0]?.release();
      // No temp files left behind by the losers or the winner.
      expect(readdirSync(dir)).toEqual([]);
    }
  }

  it('a lock left by a dead pid on this host is taken over; a live one is not', async () => {
    const dir = freshDir();
    const dead = 2 ** 22 + 12345;
    writeFileSync(join(dir, LOCK_NAME), JSON.stringify({ pid: dead, host: os.hostname(), startedAt: 'then' }));
    // The temp file of a run killed between writing its lock and linking it into place.
    writeFileSync(join(dir, `${LOCK_NAME}.new-${dead}-0123abcd`), '{}');
    const lock = await acquireLock(dir);
    expect(JSON.parse(readFileSync(join(dir, LOCK_NAME), 'utf8'))).toMatchObject({ pid: process.pid });
    await expect(acquireLock(dir)).rejects.toMatchObject({ exitCode: EXIT.locked });
    await lock.release();
    expect(readdirSync(dir)).toEqual([]);
  });
});
