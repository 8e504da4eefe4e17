// Debian's Chromium under playwright-core, as the console's browser test and `make demo`
// drive it (docs/console.md#the-browser-test): headless, a fresh profile, and nothing of its
// own on the network (this may be a closed network), so the console is its only connection.
//
// KEYFLIGHT_PLAYWRIGHT_DIR names the folder playwright-core is installed in
// (scripts/browser-prereqs.sh installs it into .tools/browser).

import { mkdtempSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const { chromium } = createRequire(join(process.env.KEYFLIGHT_PLAYWRIGHT_DIR, 'noop.js'))(
  'playwright-core',
);

// A page in a fresh Chromium; `close()` ends the browser and removes its profile.
async function openChromium() {
  const profile = mkdtempSync(join(tmpdir(), 'keyflight-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: '/usr/bin/chromium',
    headless: true,
    viewport: { width: 1100, height: 800 },
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
  const page = context.pages()[0] ?? (await context.newPage());
  const close = async () => {
    await context.close();
    rmSync(profile, { recursive: true, force: true });
  };
  return { context, page, close };
}

// Runs `work({ context, page })` in a fresh Chromium and closes it after. When a step or a
// check fails, prints where it stopped and what the page said there, then throws.
export async function inChromium(work) {
  const { context, page, close } = await openChromium();
  try {
    return await work({ context, page });
  } catch (error) {
    const shown = await page.innerText('body').catch(() => '(no page)');
    console.error(`at ${page.url()}:\n${shown}`);
    throw error;
  } finally {
    await close();
  }
}

// A check for the run named `run`: throws naming it and `what` unless `holds`.
export function checker(run) {
  return (holds, what) => {
    if (!holds) throw new Error(`${run}: ${what}`);
  };
}

// Signs in to the console at `base` with an operator's token; lands on the queue.
export async function signIn(page, base, token) {
  await page.goto(`${base}/console/login`);
  await page.fill('input[name=token]', token);
  await Promise.all([page.waitForURL(`${base}/console`), page.click('main button[type=submit]')]);
}
