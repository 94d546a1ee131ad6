/**
 * Every Lua script the product runs, and the one loader that gives a connection its commands.
 * No other module holds Lua, calls `eval` or `defineCommand`: a caller asks {@link withScripts}
 * for the connection with these commands and calls them by name.
 *
 * Each script is one file in ./scripts/ whose header lists its KEYS, ARGV and what it returns,
 * and whose name ends with its key count (`list_written-4.lua`: four keys), which is the count
 * the loader declares; `-n` (`mint_batches-n.lua`) means the caller passes the count first. Every key a script touches is among its KEYS, so on a Redis Cluster each call
 * is routed by its first key and stays in that key's slot (the keys share a hash tag:
 * ./keyspace.ts). scripts/build.mjs copies the .lua files into dist/ next to this module.
 */
import { readFileSync } from 'node:fs';
import type { RedisClient } from './connection.js';

/** The command each script becomes on a connection, and its file in ./scripts/. */
export const SCRIPT_FILES = {
  // The ledger (shared/ledger/ledger.ts).
  ingestMint: 'mint_batches-n.lua',
  ingestIdemLookup: 'idem_lookup-1.lua',
  ingestRelease: 'release_batches-n.lua',
  ingestReap: 'release_unless_replaying-3.lua',
  ingestListBound: 'list_bound-2.lua',
  ingestListWritten: 'list_written-4.lua',
  ingestScanPending: 'scan_pending-2.lua',
  ingestSeedClock: 'seed_clock-1.lua',
  // The API's rate limits (services/api/edge/counters.ts).
  ingestRateCheck: 'rate_check-1.lua',
  ingestAppEvents: 'app_events-1.lua',
  // The rollup's per-prefix lock (./rollup-keys.ts).
  ingestLockRenew: 'lock_renew-1.lua',
  ingestLockRelease: 'lock_release-1.lua',
} as const;

export type ScriptName = keyof typeof SCRIPT_FILES;

type Arg = string | Buffer;

/** The scripts as commands: KEYS first, then ARGV, as each file's header lists them. */
export interface ScriptCommands {
  /** Key count (2 + 2 per push), the keys, then the arguments; answers `[id, status]` per push, flat. */
  ingestMint(keyCount: number, ...keysAndArgv: Arg[]): Promise<(string | number)[]>;
  ingestIdemLookup(idemPrefix: string, ...argv: Arg[]): Promise<[string, number]>;
  /** Key count (3 + 4 per release), the keys, then the arguments; answers 1 or 0 per release. */
  ingestRelease(keyCount: number, ...keysAndArgv: Arg[]): Promise<number[]>;
  ingestReap(pending: string, prefixes: string, replayMark: string, batchId: string, prefix: string): Promise<number>;
  ingestListBound(clock: string, pending: string): Promise<[string, string, string]>;
  ingestListWritten(
    clock: string,
    pending: string,
    written: string,
    floor: string,
    a1: string,
    a2: string,
  ): Promise<string[]>;
  ingestScanPending(prefixes: string, failed: string, ...argv: string[]): Promise<[number, number, string, number]>;
  ingestSeedClock(clock: string, ms: string): Promise<number>;
  ingestRateCheck(counter: string, windowMs: string): Promise<[number, number]>;
  ingestAppEvents(counter: string, windowMs: string, max: string, events: string): Promise<[number, number, number]>;
  ingestLockRenew(lock: string, token: string, ttlMs: string): Promise<number>;
  ingestLockRelease(lock: string, token: string): Promise<number>;
}

/** A connection with every script defined on it. */
export type ScriptedRedis = RedisClient & ScriptCommands;

/** The key count a script file's name declares (`name-<keys>.lua`); undefined for `name-n.lua` (the caller's). */
export function keyCountOf(file: string): number | undefined {
  const m = /-(\d+|n)\.lua$/.exec(file);
  if (!m) throw new Error(`script ${file} does not end with -<key count>.lua or -n.lua`);
  return m[1] === 'n' ? undefined : Number(m[1]);
}

/** Script sources, read once per process from ./scripts/ next to this module (src or dist). */
let sources: Map<ScriptName, string> | undefined;

/** The Lua text of script `name`. */
export function scriptSource(name: ScriptName): string {
  sources ??= new Map(
    Object.entries(SCRIPT_FILES).map(([n, file]) => [
      n as ScriptName,
      readFileSync(new URL(`./scripts/${file}`, import.meta.url), 'utf8'),
    ]),
  );
  return sources.get(name) as string;
}

/**
 * `redis` with every script as a command (ioredis sends EVALSHA, and the script once when Redis
 * does not know it yet). Defined once per connection; later calls return it as it is.
 */
export function withScripts(redis: RedisClient): ScriptedRedis {
  if (!('ingestMint' in redis)) {
    for (const [name, file] of Object.entries(SCRIPT_FILES)) {
      redis.defineCommand(name, { numberOfKeys: keyCountOf(file), lua: scriptSource(name as ScriptName) });
    }
  }
  return redis as ScriptedRedis;
}
