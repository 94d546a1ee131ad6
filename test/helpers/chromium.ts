import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import puppeteer, { type Browser } from 'puppeteer-core';

/** Debian's `chromium` package; no browser is ever downloaded. */
export const CHROMIUM_PATH = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';

export interface RunningChromium {
  browser: Browser;
  close(): Promise<void>;
}

/**
 * Headless Chromium driven by puppeteer-core, with a fresh profile and nothing that talks to
 * the network on its own (no component updates, sync, QUIC or first-run pages).
 */
export async function launchChromium(): Promise<RunningChromium> {
  if (!existsSync(CHROMIUM_PATH))
    throw new Error(
      `${CHROMIUM_PATH} not found: install Debian's chromium (apt-get install -y chromium) or set CHROMIUM_PATH`,
    );
  const profile = mkdtempSync(join(tmpdir(), 'ingest-chromium-'));
  const browser = await puppeteer.launch({
    executablePath: CHROMIUM_PATH,
    headless: true,
    userDataDir: profile,
    timeout: 60_000,
    protocolTimeout: 60_000,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      '--disable-dev-shm-usage',
      `--user-data-dir=${profile}`,
    ],
  });
  let closed: Promise<void> | undefined;
  return {
    browser,
    close() {
      closed ??= (async () => {
        try {
          await browser.close();
        } finally {
          rmSync(profile, { recursive: true, force: true });
        }
      })();
      return closed;
    },
  };
}
