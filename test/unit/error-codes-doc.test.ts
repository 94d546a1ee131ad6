import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { ERROR_CODES } from '../../services/api/error-map.js';

/** The rows between the error-codes markers of docs/http-api.md, as [code, status, meaning]. */
function documentedCodes(): string[][] {
  const text = readFileSync(new URL('../../docs/http-api.md', import.meta.url), 'utf8');
  const start = text.indexOf('<!-- error-codes');
  const end = text.indexOf('<!-- /error-codes -->');
  expect(start, 'the error-codes markers in docs/http-api.md').toBeGreaterThanOrEqual(0);
  expect(end).toBeGreaterThan(start);
  return text
    .slice(start, end)
    .split('\n')
    .filter((l) => /^\| `/.test(l))
    .map((l) =>
      l
        .split('|')
        .slice(1, -1)
        .map((c) => c.trim()),
    );
}

describe("the docs' error-code table", () => {
  it('lists exactly the codes the server answers with, each with its status and meaning, in order', () => {
    const expected = Object.entries(ERROR_CODES).map(([code, v]) => [`\`${code}\``, String(v.status), v.description]);
    expect(documentedCodes()).toEqual(expected);
  });
});
