#!/usr/bin/env node
// The `events-ingest` command. An installed package runs the compiled CLI (dist/, plain node).
// A development checkout (cli/main.ts next to this file) runs the sources through tsx instead, so
// the command never runs a stale build while the code is being edited.
import { existsSync } from 'node:fs';

const source = new URL('../cli/main.ts', import.meta.url);
if (existsSync(source)) {
  const { register } = await import('tsx/esm/api');
  register();
  await import(source.href);
} else {
  await import(new URL('../dist/cli/main.js', import.meta.url).href);
}
