// The console in a real headless Chromium (docs/console.md#the-browser-test), driven by
// playwright-core: sign in, resolve one `unknown` record with an authored answer, erase
// another, and open a hostile record to prove nothing in it runs. Run by the end-to-end
// scenario `an_operator_decides_in_a_real_browser`, which made the records and checks
// afterwards, through Envoy and the audit, what the decisions did.
//
//   node console.mjs CONSOLE_URL TOKEN RESOLVE_SCOPE ERASE_SCOPE HOSTILE_SCOPE SCREENSHOT
//
// KEYFLIGHT_PLAYWRIGHT_DIR names the folder playwright-core is installed in. Prints one
// JSON line: the answer it authored. Any failed check throws (exit status 1).

import { checker, inChromium, signIn } from './chromium.mjs';

const [base, token, resolveScope, eraseScope, hostileScope, screenshot] = process.argv.slice(2);

const AUTHORED = {
  status: 201,
  headers: 'content-type: application/json',
  body: '{"payment_id":"settled-in-the-browser"}',
};

// What the hostile record's page must show as text (the scenario recorded it).
const SHOWN_ESCAPED = [
  '<script>window.keyflightPwned = 1; alert(1)</script>',
  '<a href="javascript:alert(2)">pay</a>',
  '<script>alert(4)</script>',
  '<javascript:alert(5)>',
  '\\u{202e}gnp.exe\\u{2028}next',
];

const check = checker('console browser test');

await inChromium(async ({ context, page }) => {
  const dialogs = [];
  page.on('dialog', async (dialog) => {
    dialogs.push(dialog.message());
    await dialog.dismiss();
  });
  const go = async (url, act) => Promise.all([page.waitForURL(url), act()]);

  // Sign in: the token once, then the session cookie.
  await signIn(page, base, token);
  check((await page.innerText('header')).includes('admin'), 'signed in as admin');
  const [cookie] = (await context.cookies()).filter((c) => c.name === 'keyflight_console');
  check(cookie?.httpOnly && cookie.sameSite === 'Strict', 'an HttpOnly, SameSite=Strict cookie');

  // From the queue to a record's evidence, then a decision: preview, confirm, done.
  const open = async (scope) => {
    await page.goto(`${base}/console`);
    await go(`${base}/console/records/${scope}`, () =>
      page.click(`a[href="/console/records/${scope}"]`),
    );
    const evidence = await page.innerText('main dl');
    check(evidence.includes('unknown') && evidence.includes(scope), `${scope} is unknown`);
  };
  const decide = async (action, fill, reason) => {
    const form = page.locator('main form', {
      has: page.locator(`input[name=action][value=${action}]`),
    });
    await fill(form);
    await go(/\/preview\?/, () => form.locator('button[type=submit]').click());
    const confirm = page.locator('main form[method=post]');
    await confirm.locator('input[name=reason]').fill(reason);
    await confirm.locator('input[name=confirm]').check();
    await go(/\/decide$/, () => confirm.locator('button[type=submit]').click());
    check((await page.innerText('h1')).startsWith('Done'), `${action} done`);
  };

  await open(resolveScope);
  await decide(
    'resolve_completed',
    async (form) => {
      await form.locator('input[name=status]').fill(String(AUTHORED.status));
      await form.locator('textarea[name=headers]').fill(AUTHORED.headers);
      await form.locator('textarea[name=body]').fill(AUTHORED.body);
    },
    'browser: the payment settled',
  );
  await page.goto(`${base}/console/records/${resolveScope}`);
  const audit = await page.locator('main table').last().innerText();
  check(audit.includes('browser: the payment settled'), 'the audit row on the record page');

  await open(eraseScope);
  await decide('erase', async () => {}, 'browser: never charged, run it again');

  // The hostile record: its text shown escaped, nothing of it run.
  await page.goto(`${base}/console/records/${hostileScope}`);
  await page.screenshot({ path: screenshot, fullPage: true });
  const text = await page.innerText('main');
  for (const shown of SHOWN_ESCAPED) check(text.includes(shown), `shown as text: ${shown}`);
  check(!text.includes('\u202e') && !text.includes('\u2028'), 'no raw bidi or line separator');
  check((await page.locator('script, img, iframe').count()) === 0, 'no element from the record');
  check((await page.locator('a[href^="javascript:"]').count()) === 0, 'no javascript: link');
  check(
    (await page.evaluate(() => typeof window.keyflightPwned)) === 'undefined',
    'no script set a global',
  );
  check(dialogs.length === 0, `no dialog opened: ${dialogs.join(', ')}`);

  console.log(JSON.stringify({ authored: AUTHORED }));
});
