/**
 * Erasing a person's rows from one batch file, in memory, through the encoder's own write path
 * (parquet-wasm read → Arrow → shared/parquet/encode.ts `arrowToParquet`, as a dead-letter
 * reissue restamps a file): every kept row keeps every value exactly as stored, the file keeps
 * the events schema, the Iceberg field ids and its codec; a file whose every row is erased becomes a
 * zero-row Parquet file with the same schema. Pure: no store, no Redis.
 */
import * as arrow from 'apache-arrow';
import { readParquet } from 'parquet-wasm';
import { arrowToParquet, sameCompression } from '../parquet/encode.js';

/** Whom to erase: rows whose `distinct_id` is one of `distinctIds` or whose `anonymous_id` is one of `anonymousIds`. */
export interface ErasureIds {
  distinctIds: readonly string[];
  anonymousIds: readonly string[];
}

/** True when a row with these two values belongs to the person. */
export function rowMatches(
  ids: { distinct: ReadonlySet<string>; anonymous: ReadonlySet<string> },
  distinctId: unknown,
  anonymousId: unknown,
): boolean {
  return (
    (typeof distinctId === 'string' && ids.distinct.has(distinctId)) ||
    (typeof anonymousId === 'string' && ids.anonymous.has(anonymousId))
  );
}

export interface FilteredFile {
  /** The rewritten file, or null when no row matched (the file stays as it is). */
  file: Uint8Array | null;
  rows: number;
  erased: number;
}

/** Reads a Parquet batch file into an Arrow table (parquet-wasm, as restampParquet does). */
export function parquetToArrow(file: Uint8Array): arrow.Table {
  return arrow.tableFromIPC(readParquet(file).intoIPCStream());
}

/** The batch file without the person's rows (see the module comment). */
export function eraseRowsFromParquet(file: Uint8Array, ids: ErasureIds): FilteredFile {
  const table = parquetToArrow(file);
  const sets = { distinct: new Set(ids.distinctIds), anonymous: new Set(ids.anonymousIds) };
  const d = table.getChild('distinct_id');
  const a = table.getChild('anonymous_id');
  if (!d || !a) throw new Error('not an events file: no distinct_id or anonymous_id column');
  // Runs of kept rows, sliced out of the table (no value is re-encoded by hand).
  const runs: [number, number][] = [];
  let erased = 0;
  let runStart = -1;
  for (let i = 0; i < table.numRows; i++) {
    const hit = rowMatches(sets, d.get(i), a.get(i));
    if (hit) {
      erased++;
      if (runStart >= 0) runs.push([runStart, i]);
      runStart = -1;
    } else if (runStart < 0) runStart = i;
  }
  if (runStart >= 0) runs.push([runStart, table.numRows]);
  if (erased === 0) return { file: null, rows: table.numRows, erased: 0 };
  let kept: arrow.Table = table.slice(0, 0);
  if (runs.length > 0) {
    const parts = runs.map(([s, e]) => table.slice(s, e));
    kept = (parts[0] as arrow.Table).concat(...parts.slice(1));
  }
  return { file: arrowToParquet(kept, sameCompression(file)), rows: table.numRows, erased };
}
