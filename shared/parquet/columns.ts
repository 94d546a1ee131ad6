/**
 * The column names of an events file, with no dependencies: shared/parquet/encode.ts writes them
 * and shared/iceberg/schema.ts gives them their Iceberg field ids (which the writer then stamps
 * into every file's Parquet schema), so neither module has to import the other for the names.
 */

/** The string columns of every events file, in file order (`received_at` and `extra` follow). */
export const EVENT_COLUMNS = [
  'event_type',
  'event',
  'distinct_id',
  'anonymous_id',
  'ts',
  'message_id',
  'properties',
  'context',
  'dt',
] as const;

/** One of the nine fixed string columns. */
export type EventColumnName = (typeof EVENT_COLUMNS)[number];
