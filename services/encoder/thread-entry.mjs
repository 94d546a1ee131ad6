// Development only (services run through tsx): worker threads do not inherit tsx's loader from
// the main thread, so register it here, then load the TypeScript entry. The compiled build
// (dist/) starts dist/services/encoder/thread.js directly with plain node.
import { register } from 'tsx/esm/api';

register();
await import('./thread.ts');
