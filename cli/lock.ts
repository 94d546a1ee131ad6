/**
 * The folder lock of `sync`: `<dir>/.sync.lock`, put in place whole with link(2) (fails if it
 * exists) and holding the owner's pid, so two runs (cron overlapping a slow run, or a human) never interleave in one folder.
 * A lock whose pid is no longer alive on this host is stale (the run was killed) and is taken over.
 */
import { randomBytes } from 'node:crypto';
import { promises as fs } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { CliError, EXIT } from './errors.js';

export const LOCK_NAME = '.sync.lock';

interface LockInfo {
  pid: number;
  host: string;
  startedAt: string;
}

export interface HeldLock {
  readonly file: string;
  /** Removes the lock if it is still ours. Idempotent. */
  release(): Promise<void>;
}

/** Whether `pid` is a live process here; EPERM means it exists but belongs to someone else. */
function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

async function readLock(file: string): Promise<LockInfo | null | 'missing'> {
  let text: string;
  try {
    text = await fs.readFile(file, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return 'missing';
    throw err;
  }
  try {
    const v = JSON.parse(text) as Partial<LockInfo>;
    if (typeof v.pid === 'number' && Number.isInteger(v.pid) && v.pid > 0)
      return { pid: v.pid, host: String(v.host ?? ''), startedAt: String(v.startedAt ?? '') };
  } catch {
    // Unparseable: never written by this version (the lock appears whole); edited, or left by an older one.
  }
  return null;
}

/** A lock that names another host cannot be checked from here, so it is never treated as stale. */
function isStale(info: LockInfo | null): boolean {
  if (info === null) return true;
  return info.host === os.hostname() && !pidAlive(info.pid);
}

/**
 * Takes the lock of `dir` or throws a CliError (exit 3) naming the holder (`holder` says what
 * kind of run holds it: `sync`, or `query` for a view copy's folder). A stale lock is
 * moved aside with rename (atomic: of several runs breaking it at once, one wins), checked
 * again (it must still be the stale one), and the exclusive create is retried.
 */
export async function acquireLock(dir: string, holder = 'sync'): Promise<HeldLock> {
  const file = path.join(dir, LOCK_NAME);
  const info: LockInfo = { pid: process.pid, host: os.hostname(), startedAt: new Date().toISOString() };
  for (let attempt = 0; attempt < 3; attempt++) {
    if (await publishLock(file, info)) {
      await removeDeadTemps(dir);
      return heldLock(file);
    }
    const current = await readLock(file);
    if (current === 'missing') continue;
    if (!isStale(current)) {
      throw new CliError(
        `another ${holder} holds ${file} (pid ${current?.pid} on ${current?.host}, since ${current?.startedAt}); nothing done`,
        EXIT.locked,
      );
    }
    const aside = `${file}.stale-${randomBytes(4).toString('hex')}`;
    try {
      await fs.rename(file, aside);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') continue;
      throw err;
    }
    const moved = await readLock(aside);
    if (moved !== 'missing' && !isStale(moved)) {
      // A live run re-created the lock between our read and our rename: put it back (link fails if
      // taken again, and then the lock is already held, which is what putting it back was for).
      await fs.link(aside, file).catch(() => undefined);
      await fs.rm(aside, { force: true });
      throw new CliError(`another ${holder} holds ${file} (pid ${moved?.pid}); nothing done`, EXIT.locked);
    }
    await fs.rm(aside, { force: true });
  }
  throw new CliError(`could not take ${file} after 3 attempts (other runs keep taking it)`, EXIT.locked);
}

/**
 * Creates `file` holding `info`, atomically: the content goes to a temp file first, which
 * link(2) then puts in place, failing with EEXIST if the lock exists. So the lock is never
 * seen empty (an exclusive create followed by a write would be, for a moment, and a second run
 * would read that as a dead owner's lock and take it too). False when the lock exists.
 */
async function publishLock(file: string, info: LockInfo): Promise<boolean> {
  const temp = `${file}.new-${process.pid}-${randomBytes(4).toString('hex')}`;
  await fs.writeFile(temp, JSON.stringify(info), { flag: 'wx' });
  try {
    await fs.link(temp, file);
    return true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'EEXIST') return false;
    throw err;
  } finally {
    await fs.rm(temp, { force: true });
  }
}

/** Temp files of runs killed between writing and linking their lock (their pid is in the name). */
async function removeDeadTemps(dir: string): Promise<void> {
  const re = /^\.sync\.lock\.new-(\d+)-[0-9a-f]{8}$/;
  for (const name of await fs.readdir(dir)) {
    const pid = Number(re.exec(name)?.[1] ?? 0);
    if (pid > 0 && !pidAlive(pid)) await fs.rm(path.join(dir, name), { force: true });
  }
}

function heldLock(file: string): HeldLock {
  let released = false;
  return {
    file,
    async release() {
      if (released) return;
      released = true;
      const current = await readLock(file).catch(() => null);
      if (current !== 'missing' && current !== null && current.pid === process.pid) await fs.rm(file, { force: true });
    },
  };
}
