/** Parquet encoding for events files; see ./encode.ts. */
export {
  EVENT_COLUMNS,
  EVENTS_ARROW_SCHEMA,
  arrowToParquet,
  columnValues,
  encodeBatch,
  columnsToIpcStream,
  eventsToArrow,
  parseBatchColumns,
  prepareBatch,
  restampParquet,
} from './encode.js';
export type {
  EncodeResult,
  EventColumnName,
  EventColumns,
  ParquetWriteOptions,
  ParseResult,
  PreparedBatch,
  PrepareResult,
  Utf8Column,
} from './encode.js';
