/** Parquet encoding for events files; see ./encode.ts. */
export {
  EVENT_COLUMNS,
  EVENTS_ARROW_SCHEMA,
  arrowToParquet,
  buildEventColumns,
  encodeBatch,
  eventsToArrow,
  parseBatchEvents,
} from './encode.js';
export type {
  EncodeResult,
  EventColumnName,
  EventColumns,
  EventRecord,
  ParquetWriteOptions,
  ParseResult,
} from './encode.js';
