import { parseEnv } from '../../shared/config.js';
import { Lifecycle, runUntilSignal } from '../../shared/lifecycle.js';
import { exitOnStartupError } from '../../shared/runtime.js';
import { SHUTDOWN_GRACE_MS, StackContext, redisConnections } from '../../shared/stack-context.js';
import { encoderHealthServer, encoderWorkers, logEncoderStarted } from './components.js';

/** `npm run start:encoder`: one encoder process (run any number against the same Redis and store). */
try {
  const ctx = new StackContext(parseEnv(), { name: 'encoder' });
  const encoder = encoderWorkers(ctx);
  // Listed before the encoder, so /healthz still answers while it finishes its active jobs.
  const health = encoderHealthServer(ctx, encoder);
  await runUntilSignal(new Lifecycle([redisConnections(ctx), health, encoder], { logger: ctx.logger }), {
    logger: ctx.logger,
    graceMs: SHUTDOWN_GRACE_MS,
  });
  logEncoderStarted(ctx, health);
} catch (err) {
  exitOnStartupError(err);
}
