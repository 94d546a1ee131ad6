/**
 * Scenario `codec` — the batch-file codec (a collection's `parquetCompression`): for each codec,
 * bytes per event on disk and the encoder's CPU per batch (one thread, encode only) at 10-, 100-
 * and 1,000-event batches, on the same push bodies as the `encoder` scenario; and whether the
 * file opens in plain hyparquet (no hyparquet-compressors) and in DuckDB (1 = opens and reads
 * back every row). The reference column is ZSTD, the codec batch files had before
 * docs/decisions/0022-batch-file-codec.md, so the ratio is each codec against it.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DuckDBInstance } from '@duckdb/node-api';
import { parquetReadObjects } from 'hyparquet';
import { PARQUET_COMPRESSIONS, type ParquetCompression, encodeBatch } from '../../shared/parquet/encode.js';
import { bodyFactory, median, row } from '../lib.js';
import type { BenchContext, BenchRow } from '../types.js';

const SIZES = [1000, 100, 10] as const;

function encodeWith(compression: ParquetCompression): (body: string) => Uint8Array {
  return (body) => {
    const r = encodeBatch(body, Date.now(), { compression });
    if (!r.ok) throw new Error(`encodeBatch refused a bench batch: ${r.reason}`);
    return r.bytes;
  };
}

/** Milliseconds of one thread per batch of `fn` over the bodies, looped for at least `minMs`. */
function msPerBatch(fn: (b: string) => unknown, bodies: readonly string[], minMs: number): number {
  let done = 0;
  const t0 = performance.now();
  let elapsed = 0;
  for (let pass = 0; pass < 100_000 && elapsed < minMs; pass++) {
    for (const b of bodies) fn(b);
    done += bodies.length;
    elapsed = performance.now() - t0;
  }
  return elapsed / done;
}

/** 1 when plain hyparquet (no compressors passed) reads every row of `file`, else 0. */
async function hyparquetOpens(file: Uint8Array, rows: number): Promise<number> {
  const buf = file.buffer.slice(file.byteOffset, file.byteOffset + file.byteLength) as ArrayBuffer;
  try {
    const got = await parquetReadObjects({ file: buf });
    return got.length === rows ? 1 : 0;
  } catch {
    return 0;
  }
}

/** 1 when DuckDB reads every row of `file` (written to a temporary folder), else 0. */
async function duckdbOpens(
  db: DuckDBInstance,
  dir: string,
  name: string,
  file: Uint8Array,
  rows: number,
): Promise<number> {
  const path = join(dir, `${name}.parquet`);
  writeFileSync(path, file);
  const conn = await db.connect();
  try {
    const r = await conn.runAndReadAll(
      `SELECT count(*)::INTEGER AS n FROM read_parquet('${path.replaceAll("'", "''")}')`,
    );
    return Number(r.getRowObjects()[0]?.n) === rows ? 1 : 0;
  } catch {
    return 0;
  } finally {
    conn.closeSync();
  }
}

/** The rows of one batch size: per codec, bytes/event and CPU/batch against ZSTD's. */
function sizeRows(
  size: number,
  bodies: readonly string[],
  rounds: number,
  minMs: number,
  ctx: BenchContext,
): BenchRow[] {
  const cpu = new Map<ParquetCompression, number[]>(PARQUET_COMPRESSIONS.map((c) => [c, []]));
  for (const c of PARQUET_COMPRESSIONS) msPerBatch(encodeWith(c), bodies, minMs / 4);
  for (let r = 0; r < rounds; r++) {
    ctx.progress(`codec: ${size}-event batches, round ${r + 1}/${rounds}`);
    // Rotate the order so drift on a shared machine hits every codec alike.
    const order = PARQUET_COMPRESSIONS.map(
      (_, i) => PARQUET_COMPRESSIONS[(i + r) % PARQUET_COMPRESSIONS.length] as ParquetCompression,
    );
    for (const c of order) cpu.get(c)?.push(msPerBatch(encodeWith(c), bodies, minMs));
  }
  const bytesPerEvent = (c: ParquetCompression): number =>
    bodies.reduce((s, b) => s + encodeWith(c)(b).byteLength, 0) / (bodies.length * size);
  const zstdBytes = bytesPerEvent('zstd');
  const zstdCpu = median(cpu.get('zstd') ?? []);
  return PARQUET_COMPRESSIONS.flatMap((c) => [
    row({
      scenario: 'codec',
      metric: `${c}: bytes per event, ${size}-event batches (reference: zstd)`,
      unit: 'B',
      ours: bytesPerEvent(c),
      reference: zstdBytes,
    }),
    row({
      scenario: 'codec',
      metric: `${c}: encoder CPU per batch (encode only, one thread), ${size}-event batches (reference: zstd)`,
      unit: 'ms',
      ours: median(cpu.get(c) ?? []),
      reference: zstdCpu,
    }),
  ]);
}

/** Runs the codec comparison; see the module comment. */
export async function run(ctx: BenchContext): Promise<BenchRow[]> {
  const rows: BenchRow[] = [];
  const rounds = ctx.smoke ? 2 : 5;
  const minMs = ctx.smoke ? 100 : 800;
  const dir = mkdtempSync(join(tmpdir(), 'bench-codec-'));
  const db = await DuckDBInstance.create(':memory:');
  try {
    for (const size of SIZES) {
      const next = bodyFactory(size, 8);
      const bodies = Array.from({ length: Math.min(200, Math.max(4, Math.round(4000 / size))) }, next);
      rows.push(...sizeRows(size, bodies, rounds, minMs, ctx));
    }
    const sample = bodyFactory(100, 8)();
    for (const c of PARQUET_COMPRESSIONS) {
      const file = encodeWith(c)(sample);
      rows.push(
        row({
          scenario: 'codec',
          metric: `${c}: opens in plain hyparquet, no compressors (1 = yes)`,
          unit: '',
          ours: await hyparquetOpens(file, 100),
        }),
        row({
          scenario: 'codec',
          metric: `${c}: opens in DuckDB (1 = yes)`,
          unit: '',
          ours: await duckdbOpens(db, dir, c, file, 100),
        }),
      );
    }
  } finally {
    db.closeSync();
    rmSync(dir, { recursive: true, force: true });
  }
  return rows;
}
