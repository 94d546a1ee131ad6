/**
 * The reference implementation as its README sets it up: starfish-server's sync router with the
 * starfish-events plugin on @hono/node-server, a filesystem store, one listable JSON-typed
 * `events` collection with public writes. Run by the bench as its own process.
 *
 * Env: PORT (required), DATA_DIR (required). Prints `listening <port>` once it accepts requests.
 * REF_OBJECTS_AS_TEXT=1: the fair-size variant. As shipped, the plugin writes every column with
 * `String(value)`, so `properties` and `context` become "[object Object]"; this variant hands it
 * each event with those two members replaced by their JSON text, so its files hold the same
 * information as ours. It costs an extra parse and stringify per push: the bench uses it for
 * bytes on disk only, never for speed.
 */
import { serve } from '@hono/node-server';
import { createEventsServerPlugin } from '@drakkar.software/starfish-events';
import { createSyncRouter, parseConfigJson } from '@drakkar.software/starfish-server';
import { FilesystemObjectStore } from '@drakkar.software/starfish-server/node';
import { Hono } from 'hono';

const port = Number(process.env.PORT);
const dataDir = process.env.DATA_DIR;
if (!Number.isInteger(port) || port <= 0 || !dataDir) {
  process.stderr.write('reference-server: PORT and DATA_DIR are required\n');
  process.exit(2);
}

const store = new FilesystemObjectStore({ baseDir: dataDir });
const config = parseConfigJson(
  JSON.stringify({
    version: 1,
    collections: [
      {
        name: 'events',
        storagePath: 'events/{app}/{batchId}',
        readRoles: ['public'],
        writeRoles: ['public'],
        encryption: 'none',
        allowedMimeTypes: ['application/json'],
        maxBodyBytes: 8_000_000,
        listable: true,
      },
    ],
  }),
);
// The plugin's ObjectStore type comes from its own (nested) copy of starfish-server; the
// filesystem store implements the same methods.
const plugin = createEventsServerPlugin({
  store: store as unknown as Parameters<typeof createEventsServerPlugin>[0]['store'],
  collection: 'events',
  storagePath: 'events/{app}/{batchId}',
});
type PushHook = (ctx: { rawBody: string } & Record<string, unknown>) => Promise<unknown>;
if (process.env.REF_OBJECTS_AS_TEXT === '1') {
  const hooks = plugin as unknown as { interceptPush: PushHook };
  const original = hooks.interceptPush.bind(plugin);
  hooks.interceptPush = async (ctx) => {
    let rawBody = ctx.rawBody;
    try {
      const envelope = JSON.parse(rawBody) as { data?: { events?: Record<string, unknown>[] } };
      for (const e of envelope.data?.events ?? []) {
        for (const k of ['properties', 'context'])
          if (e[k] !== null && typeof e[k] === 'object') e[k] = JSON.stringify(e[k]);
      }
      rawBody = JSON.stringify(envelope);
    } catch {
      // Not JSON: the plugin answers it as shipped.
    }
    return original({ ...ctx, rawBody });
  };
}
const sync = createSyncRouter({
  store,
  config,
  // Every caller is anonymous/public: the collection needs no credentials, like ours by default.
  roleResolver: async () => ({ identity: '', roles: ['public'] }),
  plugins: [plugin as unknown as NonNullable<Parameters<typeof createSyncRouter>[0]['plugins']>[number]],
});
const app = new Hono();
app.get('/healthz', (c) => c.json({ ok: true }));
app.route('/', sync);

// The plugin logs one line per push with console.log; that cost is part of the reference as
// shipped, but the line goes nowhere (stdout is not read by the bench beyond start-up).
const server = serve({ fetch: app.fetch, port, hostname: '127.0.0.1' }, (info) => {
  process.stdout.write(`listening ${info.port}\n`);
});
const stop = (): void => {
  server.close(() => process.exit(0));
  setTimeout(() => process.exit(0), 3000).unref();
};
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
