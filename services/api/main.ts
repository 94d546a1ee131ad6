import { parseEnv, shutdownDrainMs } from '../../shared/config.js';
import { Lifecycle, runUntilSignal } from '../../shared/lifecycle.js';
import { exitOnStartupError } from '../../shared/runtime.js';
import { SHUTDOWN_GRACE_MS, StackContext, redisConnections } from '../../shared/stack-context.js';
import { apiDrain, apiServer, apiUpkeep } from './components.js';
import { drainedStopGraceMs } from './drain.js';

/** `npm run start:api`: the HTTP service alone (run any number, behind a load balancer). */
try {
  const env = parseEnv();
  const ctx = new StackContext(env, { name: 'api' });
  const api = apiServer(ctx);
  // On SIGTERM the drain window comes first (its stop runs first), then the upkeep, the server and Redis.
  const drainMs = shutdownDrainMs(env, 'api');
  const lifecycle = new Lifecycle([redisConnections(ctx), api, apiUpkeep(api), apiDrain(ctx, api, drainMs)], {
    logger: ctx.logger,
  });
  await runUntilSignal(lifecycle, { logger: ctx.logger, graceMs: drainedStopGraceMs(drainMs, SHUTDOWN_GRACE_MS) });
} catch (err) {
  exitOnStartupError(err);
}
