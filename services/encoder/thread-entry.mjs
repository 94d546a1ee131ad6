// Worker threads do not inherit tsx's loader from the main thread; register it here, then load
// the TypeScript entry.
import { register } from 'tsx/esm/api';

register();
await import('./thread.ts');
