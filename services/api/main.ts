import { parseEnv } from '../../shared/config.js';
import { exitOnStartupError, handleShutdown } from '../../shared/runtime.js';
import { startStack } from '../stack.js';

/** `npm run start:api`: the HTTP service alone (run any number, behind a load balancer). */
try {
  const stack = await startStack(parseEnv(), { api: true, encoder: false });
  handleShutdown(stack.logger, [() => stack.close()]);
} catch (err) {
  exitOnStartupError(err);
}
