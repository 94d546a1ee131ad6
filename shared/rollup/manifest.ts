/**
 * The per-prefix rollup manifest: one small JSON object, rewritten whole (the store's put is
 * atomic: temp file + rename on the filesystem, a single PutObject on S3), so a reader sees the
 * old manifest or the new one, never a mix.
 *
 * Invariants (kept by the rollup job, which is the only writer, under a per-prefix lock):
 * - every row with `received_at < watermarkMs` that is in a batch file rolled so far is in exactly
 *   one file of exactly one listed period; every listed period ends at or before `watermarkMs`;
 * - `watermarkMs` never moves back;
 * - a file is listed only after it is durable in the store; a file is deleted only after a
 *   manifest that no longer lists it is durable.
 */
import { z } from 'zod';
import type { ObjectStore } from '../store/types.js';
import { manifestKey } from './layout.js';

const RollupFileSchema = z.object({
  key: z.string().min(1),
  rows: z.number().int().nonnegative(),
  bytes: z.number().int().nonnegative(),
  /** Number of distinct batch ids in the file, and the smallest and largest of them. */
  batches: z.number().int().nonnegative(),
  firstId: z.string(),
  lastId: z.string(),
});
export type RollupFile = z.infer<typeof RollupFileSchema>;

const RollupPeriodSchema = z.object({
  startMs: z.number().int().nonnegative(),
  endMs: z.number().int().positive(),
  files: z.array(RollupFileSchema),
  /** When this period's files were last (re)written (epoch ms). */
  rolledAt: z.number().int(),
  /** Batch files of this period were deleted (raw retention) up to and including this id ('' = none). */
  rawDeletedThrough: z.string().default(''),
});
export type RollupPeriod = z.infer<typeof RollupPeriodSchema>;

export const ManifestSchema = z.object({
  v: z.literal(1),
  /** The list prefix (`events/myapp/`). */
  prefix: z.string(),
  periodSeconds: z.number().int().positive(),
  /** Rows with received_at below this are read from rollups; at or above it, from batch files. */
  watermarkMs: z.number().int().nonnegative(),
  /** Rolled periods with at least one row, ascending by start. */
  periods: z.array(RollupPeriodSchema),
  updatedAt: z.number().int(),
});
export type Manifest = z.infer<typeof ManifestSchema>;

/** A manifest with nothing rolled yet. */
export function emptyManifest(prefix: string, periodSeconds: number): Manifest {
  return { v: 1, prefix, periodSeconds, watermarkMs: 0, periods: [], updatedAt: 0 };
}

/** Attempts at reading a manifest that does not parse (see readManifest). */
const READ_ATTEMPTS = 5;

/**
 * Reads a prefix's manifest; null when there is none. A manifest that fails to parse is an error,
 * never "empty". S3 and the filesystem store replace objects atomically, but some S3-compatible
 * test servers (s3rver) let a GET see an object while a PUT is still writing it: a manifest that
 * does not parse is read again (up to 5 times, 100 ms apart) before that is an error.
 */
export async function readManifest(store: ObjectStore, prefix: string): Promise<Manifest | null> {
  const key = manifestKey(prefix);
  for (let attempt = 1; ; attempt++) {
    const got = await store.getBytes(key);
    if (!got) return null;
    try {
      return parseManifest(key, got.body);
    } catch (err) {
      if (attempt >= READ_ATTEMPTS) throw err;
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}

function parseManifest(key: string, body: Uint8Array): Manifest {
  let json: unknown;
  try {
    json = JSON.parse(Buffer.from(body).toString('utf8'));
  } catch (err) {
    throw new Error(`rollup manifest ${key} is not JSON: ${(err as Error).message}`);
  }
  const r = ManifestSchema.safeParse(json);
  if (!r.success) throw new Error(`rollup manifest ${key} is invalid: ${r.error.issues[0]?.message ?? 'unknown'}`);
  return r.data;
}

/** Writes a prefix's manifest in one atomic put. */
export async function writeManifest(store: ObjectStore, manifest: Manifest): Promise<void> {
  const sorted = { ...manifest, periods: [...manifest.periods].sort((a, b) => a.startMs - b.startMs) };
  await store.putBytes(manifestKey(manifest.prefix), Buffer.from(`${JSON.stringify(sorted)}\n`), {
    contentType: 'application/json',
  });
}

/** Every rollup file key the manifest lists. */
export function manifestFiles(manifest: Manifest): string[] {
  return manifest.periods.flatMap((p) => p.files.map((f) => f.key));
}
