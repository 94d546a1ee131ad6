/**
 * `events-ingest openapi`: the OpenAPI 3.1 document of the server for the config it would run
 * with (CONFIG_FILE, BASE_PATH, JWT_JWKS_URL / JWT_PUBLIC_KEY, CAP_AUTH from the environment),
 * on stdout: the same document the server serves at `GET <BASE_PATH>/openapi.json`.
 */
import { Command } from 'commander';
import { loadSyncConfig } from '../shared/config.js';
import { CliError, EXIT } from './errors.js';
import { documentOptionsOf, openApiDocument, renderDocument } from '../services/api/contract/document.js';

/** The `openapi` command. */
export function openapiCommand(io: { stdout: NodeJS.WriteStream; env: NodeJS.ProcessEnv }): Command {
  return new Command('openapi')
    .description(
      'print the OpenAPI 3.1 document of the server for CONFIG_FILE, BASE_PATH, JWT_*, CAP_AUTH, CORS_ORIGINS and SEGMENT_WRITE_KEYS_FILE (e.g. events-ingest openapi > openapi.json)',
    )
    .action(() => {
      const env = io.env;
      const config = loadSyncConfig({ CONFIG_FILE: env.CONFIG_FILE || undefined });
      const doc = openApiDocument(
        config,
        documentOptionsOf({
          BASE_PATH: normalBasePath(env.BASE_PATH),
          JWT_JWKS_URL: env.JWT_JWKS_URL,
          JWT_PUBLIC_KEY: env.JWT_PUBLIC_KEY,
          CAP_AUTH: env.CAP_AUTH,
          CORS_ORIGINS: env.CORS_ORIGINS,
          SEGMENT_WRITE_KEYS_FILE: env.SEGMENT_WRITE_KEYS_FILE,
        }),
      );
      io.stdout.write(renderDocument(doc).body);
    });
}

/** BASE_PATH as the server takes it (shared/config.ts): empty or like `/ingest`. */
function normalBasePath(raw: string | undefined): string {
  const value = raw ?? '';
  if (!/^(\/[A-Za-z0-9._~-]+)*$/.test(value))
    throw new CliError('BASE_PATH must be empty or like /ingest (no trailing slash)', EXIT.usage);
  return value;
}
