import { createHash } from 'node:crypto';
import type { NextFunction, Request, RequestHandler, Response } from 'express';
import type { CollectionConfig, SyncConfig } from '../../shared/config.js';
import { AuthError, type RoleResolver } from './auth.js';
import { ApiError } from './error-map.js';

/** `GET /config`: `public` lists every collection; `role-filtered` only those whose read or write roles the caller has. */
export interface ConfigEndpointOptions {
  auth: 'public' | 'role-filtered';
}

/**
 * One collection as the Starfish protocol's `GET /config` describes it (what `fetchServerConfig`
 * reads). Events are pushed and pulled, never appended or kept as documents, so the reference's
 * optional flags (`pullOnly`, `pushOnly`, `appendOnly`, `ttlMs`, `forceFullFetch`) stay unset.
 */
export interface CollectionClientInfo {
  name: string;
  maxBodyBytes: number;
  encryption: string;
  allowedMimeTypes: string[];
  /** Ours: events per push at most (a push with more gets 413), so an SDK can split its batches. */
  maxEventsPerBatch: number;
}

/** The manifest: what clients need to push (body limit, MIME types, encryption), never roles, tokens or rate-limit internals. */
export function collectionManifest(collections: readonly CollectionConfig[]): { collections: CollectionClientInfo[] } {
  return {
    collections: collections.map((c) => ({
      name: c.name,
      maxBodyBytes: c.maxBodyBytes,
      encryption: c.encryption,
      allowedMimeTypes: [...c.allowedMimeTypes],
      maxEventsPerBatch: c.maxEventsPerBatch,
    })),
  };
}

/** A cached answer: the JSON text and its strong ETag. */
interface Rendered {
  body: string;
  etag: string;
}

function render(collections: readonly CollectionConfig[]): Rendered {
  const body = JSON.stringify(collectionManifest(collections));
  return { body, etag: `"${createHash('sha256').update(body).digest('base64url').slice(0, 27)}"` };
}

/** If-None-Match by weak comparison (RFC 9110 §13.1.2); `*` matches, since there is a representation. */
function notModified(req: Request, etag: string): boolean {
  const inm = req.headers['if-none-match'];
  return (
    typeof inm === 'string' && inm.split(',').some((v) => v.trim() === '*' || v.trim().replace(/^W\//, '') === etag)
  );
}

/**
 * Handler of `GET /config` (also answers HEAD). The config is fixed for the life of the router,
 * so the public answer is rendered once. Cacheable: `Cache-Control: public, max-age=60` (a
 * config change needs a restart, and a client learns it within a minute), a strong ETag and 304
 * for a matching If-None-Match. Role-filtered answers depend on the caller: `private` and
 * `Vary: Authorization`; no credentials see the collections open to `public`, invalid ones get 401.
 */
export function configHandler(config: SyncConfig, opts: ConfigEndpointOptions, resolver: RoleResolver): RequestHandler {
  const everything = render(config.collections);
  const send = (req: Request, res: Response, r: Rendered, cacheControl: string): void => {
    res.setHeader('Cache-Control', cacheControl);
    res.setHeader('ETag', r.etag);
    if (notModified(req, r.etag)) {
      res.status(304).end();
      return;
    }
    res.setHeader('Content-Type', 'application/json; charset=utf-8');
    res.status(200).send(r.body);
  };
  if (opts.auth === 'public') {
    return function configPublic(req: Request, res: Response): void {
      send(req, res, everything, 'public, max-age=60');
    };
  }
  return function configRoleFiltered(req: Request, res: Response, next: NextFunction): void {
    res.setHeader('Vary', 'Authorization');
    const roles = (): Promise<readonly string[]> =>
      req.headers.authorization
        ? resolver(req).then((who) => (who ? [...who.roles, 'public'] : ['public']))
        : Promise.resolve(['public']);
    roles().then(
      (have) => {
        const visible = config.collections.filter(
          (c) => c.readRoles.some((r) => have.includes(r)) || c.writeRoles.some((r) => have.includes(r)),
        );
        send(req, res, render(visible), 'private, max-age=60');
      },
      (err: unknown) =>
        next(err instanceof AuthError ? new ApiError('unauthorized', `invalid credentials: ${err.message}`) : err),
    );
  };
}
