import type { IncomingMessage } from 'node:http';
import type { ContinueRefusal } from '../../../shared/http.js';
import { refusalAnswer } from '../error-map.js';
import { parseStoragePath } from '../../../shared/paths.js';

const escape = (s: string): string => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/**
 * For Node's `checkContinue` event (a request with `Expect: 100-continue`): a push whose declared
 * `Content-Length` is over its collection's `maxBodyBytes` is refused there with 413, before the
 * client is told to send its body, instead of getting `100 Continue`, uploading it all, and then
 * the 413 it could have had at once. Anything else (another route, no or a small length,
 * chunked) gets `100 Continue` and the normal path, which checks the body as it streams.
 * Paths are matched like the router's push routes: `<basePath>/push/<storagePath>`.
 */
export function pushLengthCheck(
  collections: readonly { name: string; storagePath: string; maxBodyBytes: number }[],
  basePath = '',
): (req: IncomingMessage) => ContinueRefusal | null {
  const base = basePath.replace(/\/+$/, '');
  const routes = collections.map((c) => {
    const parts = parseStoragePath(c.storagePath).segments.map((s) =>
      s.kind === 'literal' ? escape(s.value) : '[^/]+',
    );
    return { re: new RegExp(`^${escape(base)}/push/${parts.join('/')}/?$`), collection: c };
  });
  return function checkPushLength(req) {
    if (req.method !== 'POST') return null;
    const raw = req.headers['content-length'];
    if (raw === undefined || !/^\d{1,16}$/.test(raw)) return null;
    const declared = Number(raw);
    const path = (req.url ?? '').split('?')[0] ?? '';
    const route = routes.find((r) => r.re.test(path));
    if (!route || declared <= route.collection.maxBodyBytes) return null;
    const a = refusalAnswer(
      'too_large',
      `body of ${declared} bytes is over this collection's limit of ${route.collection.maxBodyBytes} bytes`,
    );
    return { status: a.status, body: a.body };
  };
}
