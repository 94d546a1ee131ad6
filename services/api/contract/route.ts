import express, { type Request, type Response, type Router } from 'express';
import { methodNotAllowed } from '../edge/methods.js';
import { type OpenApiDocument, renderDocument } from './document.js';

/**
 * `GET /openapi.json` (public, also HEAD): the document, rendered once (the config is fixed for
 * the life of the process), with a strong ETag and 304 for a matching If-None-Match.
 */
export function createOpenApiRouter(doc: OpenApiDocument): Router {
  const { body, etag } = renderDocument(doc);
  const router = express.Router({ caseSensitive: true });
  router.get('/openapi.json', (req: Request, res: Response) => {
    res.setHeader('ETag', etag);
    res.setHeader('Cache-Control', 'public, max-age=60');
    const inm = req.headers['if-none-match'];
    if (
      typeof inm === 'string' &&
      inm.split(',').some((v) => v.trim() === '*' || v.trim().replace(/^W\//, '') === etag)
    ) {
      res.status(304).end();
      return;
    }
    res.setHeader('Content-Type', 'application/json; charset=utf-8');
    res.status(200).send(body);
  });
  router.all('/openapi.json', methodNotAllowed(['GET', 'HEAD']));
  return router;
}
