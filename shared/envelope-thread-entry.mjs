// Development only (code run through tsx or vitest): worker threads do not inherit the loader of
// the thread that starts them, so register tsx here, then load the TypeScript entry. The compiled
// build (dist/) starts dist/shared/envelope-thread.js directly with plain node.
import { register } from 'tsx/esm/api';

register();
await import('./envelope-thread.ts');
