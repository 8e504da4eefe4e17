// `make demo`'s operator (scripts/demo.sh, docs/console.md#in-make-demo): in a headless
// Chromium, signs in to the console, opens an `unknown` record from the queue, previews
// resolving it as completed with an answer it authors, screenshots the preview, confirms,
// and checks the record's page shows it completed with the audit row.
//
//   node demo-console.mjs CONSOLE_URL TOKEN SCOPE SCREENSHOT_DIR
//
// KEYFLIGHT_PLAYWRIGHT_DIR names the folder playwright-core is installed in. Prints one
// JSON line: the answer it authored and the screenshots it saved. A failed check throws.

import { join } from 'node:path';

import { checker, inChromium, signIn } from '../e2e/browser/chromium.mjs';

const [base, token, scope, shots] = process.argv.slice(2);

const AUTHORED = {
  status: 201,
  headers: 'content-type: application/json',
  body: '{"payment_id":"pay-confirmed-by-the-provider","decided_in":"the console"}',
};
const REASON = 'demo: the provider confirms the payment went through';

const check = checker('make demo, the console');

await inChromium(async ({ page }) => {
  const go = async (url, act) => Promise.all([page.waitForURL(url), act()]);
  await signIn(page, base, token);
  await go(`${base}/console/records/${scope}`, () =>
    page.click(`a[href="/console/records/${scope}"]`),
  );
  check((await page.innerText('main dl')).includes('unknown'), `${scope} is unknown`);

  const form = page.locator('main form', {
    has: page.locator('input[name=action][value=resolve_completed]'),
  });
  await form.locator('input[name=status]').fill(String(AUTHORED.status));
  await form.locator('textarea[name=headers]').fill(AUTHORED.headers);
  await form.locator('textarea[name=body]').fill(AUTHORED.body);
  await go(/\/preview\?/, () => form.locator('button[type=submit]').click());
  const confirm = page.locator('main form[method=post]');
  await confirm.locator('input[name=reason]').fill(REASON);
  await confirm.locator('input[name=confirm]').check();
  const preview = join(shots, 'console-preview.png');
  await page.screenshot({ path: preview, fullPage: true });
  await go(/\/decide$/, () => confirm.locator('button[type=submit]').click());
  check((await page.innerText('h1')).startsWith('Done'), 'the decision was taken');

  await page.goto(`${base}/console/records/${scope}`);
  check((await page.innerText('main dl')).includes('completed'), `${scope} is completed`);
  const audit = await page.locator('main table').last().innerText();
  check(audit.includes(REASON) && audit.includes('resolve_completed'), 'the audit row');
  const record = join(shots, 'console-record.png');
  await page.screenshot({ path: record, fullPage: true });

  console.log(JSON.stringify({ authored: AUTHORED, reason: REASON, screenshots: [preview, record] }));
});
