import { parseEnv } from '../../shared/config.js';
import { Lifecycle, runUntilSignal } from '../../shared/lifecycle.js';
import { exitOnStartupError } from '../../shared/runtime.js';
import { SHUTDOWN_GRACE_MS, StackContext, redisConnections } from '../../shared/stack-context.js';
import { apiServer, apiUpkeep } from './components.js';

/** `npm run start:api`: the HTTP service alone (run any number, behind a load balancer). */
try {
  const ctx = new StackContext(parseEnv(), { name: 'api' });
  const api = apiServer(ctx);
  await runUntilSignal(new Lifecycle([redisConnections(ctx), api, apiUpkeep(api)], { logger: ctx.logger }), {
    logger: ctx.logger,
    graceMs: SHUTDOWN_GRACE_MS,
  });
} catch (err) {
  exitOnStartupError(err);
}
