import { type Step, done, next } from '../runner.js';
import { contentTypeAllowed, parseContentEncoding } from './content.js';
import { type AdmissionDeps, type Refused, type WithHeaders, type WithParams, refused } from './types.js';

import { IdempotencyKey, fits } from '../../contract/schemas.js';

/**
 * Step 3: the headers, before the body is read: Content-Type (`content_type`), Content-Encoding
 * (`content_encoding`), Idempotency-Key (`bad_header`).
 */
export function headers(deps: AdmissionDeps): Step<WithParams, WithHeaders, Refused> {
  const { collection, observer } = deps;
  return {
    name: 'headers',
    async run(c) {
      const { input } = c;
      if (!contentTypeAllowed(input.contentType, collection.allowedMimeTypes)) {
        observer?.rejected?.('content_type');
        return done(
          refused('content_type', `Content-Type must be ${collection.allowedMimeTypes.join(' or ')} (UTF-8)`),
        );
      }
      const coding = parseContentEncoding(input.contentEncoding);
      if (!coding.ok) {
        observer?.rejected?.('content_encoding');
        return done(refused('content_encoding', coding.error));
      }
      const key = input.idempotencyKey;
      if (key !== undefined && (typeof key !== 'string' || !fits(IdempotencyKey, key))) {
        observer?.rejected?.('bad_header');
        return done(refused('bad_header', 'Idempotency-Key must be 1-255 printable ASCII characters'));
      }
      return next({ ...c, coding: coding.coding, idempotencyKey: key });
    },
  };
}
