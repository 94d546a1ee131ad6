/**
 * DuckDB for tests: reads back what the product wrote, the way an analyst would.
 */
import { DuckDBInstance } from '@duckdb/node-api';

// One in-memory instance per test process: creating one costs ~tens of ms, and every query
// only reads files, so sharing it cannot leak state between tests.
let instance: Promise<DuckDBInstance> | undefined;

/**
 * Runs `sql` on a fresh connection to a shared in-memory DuckDB and returns the rows as
 * JSON-safe objects (BIGINT and timestamps come back as strings, lists as arrays).
 */
export async function duckQuery(sql: string): Promise<Record<string, unknown>[]> {
  instance ??= DuckDBInstance.create(':memory:');
  const connection = await (await instance).connect();
  try {
    const reader = await connection.runAndReadAll(sql);
    return reader.getRowObjectsJson();
  } finally {
    connection.closeSync();
  }
}

/** Quotes a string as a SQL literal (file paths in `read_parquet('...')`). */
export function sqlString(value: string): string {
  return `'${value.replaceAll("'", "''")}'`;
}
