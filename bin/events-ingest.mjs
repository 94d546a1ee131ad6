#!/usr/bin/env node
// The `events-ingest` command: loads tsx's ESM hooks so the TypeScript CLI runs as-is, no build step.
import { register } from 'tsx/esm/api';

register();
await import(new URL('../cli/main.ts', import.meta.url).href);
