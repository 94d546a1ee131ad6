/**
 * The push envelope as JSON Schema 2020-12: exactly the JSON texts the byte scanner
 * (shared/envelope.ts) accepts, apart from what JSON Schema cannot say. The scanner, not this
 * schema, validates pushes (for speed); test/unit/envelope-schema.test.ts runs one corpus through
 * both and requires the same verdict. Refused by the scanner only:
 * - a duplicate key in an event, or `data` or `events` twice (JSON Schema sees the parsed
 *   object, where one value won);
 * - nesting deeper than MAX_JSON_DEPTH (64) inside an event or another member;
 * - bytes that are not UTF-8 (a JSON Schema validator sees decoded text).
 */
export const PUSH_ENVELOPE_SCHEMA: Record<string, unknown> = {
  type: 'object',
  description:
    'A push envelope {"data":{"events":[...]},"baseHash":null}. Also refused: a duplicate key in an event (or data/events twice), nesting deeper than 64 levels, bytes that are not UTF-8. A leading UTF-8 byte order mark is ignored.',
  required: ['data'],
  properties: {
    data: {
      type: 'object',
      required: ['events'],
      properties: {
        events: {
          type: 'array',
          items: { type: 'object', additionalProperties: true, description: 'One event: any JSON object' },
        },
      },
    },
    baseHash: { description: 'Ignored (the Starfish envelope has it)' },
  },
};
