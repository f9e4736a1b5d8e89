// MCP Apps in the chat: the scripted model calls a tool with a view, and its card renders the
// app in a frame of the sandbox's origin (never the page's), with the spec's sandbox; the app
// shows the result, and its own button calls the tool again through the gate. The system
// monitor's app polls an app-only tool the model never sees. A hostile app tries to reach the
// page, its token, its API and an undeclared domain, and to call tools that are not its own;
// its own write waits for the user's approval.

import { BASE, assert, env, screenshot, signIn, step, withPage } from './lib.mjs';

const TOKEN = env('MCPGATE_TOKEN');
const ISO_TIME = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d/;

/** Sends `text` and waits for the turn to end with `answer`. */
async function ask(page, text, answer) {
  const prompt = page.getByLabel('Message to the model');
  await prompt.fill(text);
  await prompt.press('Enter');
  await page.locator('.msg.assistant .answer', { hasText: answer }).waitFor();
  await page.locator('#stop').waitFor({ state: 'hidden' });
}

await withPage('apps', async (page) => {
  await signIn(page, TOKEN);
  const pageOrigin = new URL(BASE).origin;

  await ask(page, 'What time is it on the server?', 'Here is the time.');
  const timeCard = page.locator('.tool-card[data-tool="basic.get-time"]');
  const outer = timeCard.locator('iframe.app-frame');
  const app = timeCard.frameLocator('iframe.app-frame').frameLocator('iframe');

  await step('the app renders in a frame of another origin with the spec\'s sandbox', async () => {
    await outer.waitFor();
    assert.equal(await outer.getAttribute('sandbox'), 'allow-scripts allow-same-origin');
    const src = new URL(await outer.getAttribute('src'));
    assert.notEqual(src.origin, pageOrigin, 'the sandbox is another origin');
    // From the page, the frame's document cannot be reached.
    await app.locator('#get-time-btn').waitFor();
    assert.equal(await outer.evaluate((frame) => frame.contentDocument), null);
    const inner = timeCard.frameLocator('iframe.app-frame').locator('iframe');
    assert.equal(await inner.getAttribute('sandbox'), 'allow-scripts allow-same-origin allow-forms');
  });

  let first;
  await step('the app shows the tool\'s result', async () => {
    const shown = app.locator('#server-time');
    await assert.doesNotReject(async () => {
      for (let i = 0; i < 300; i += 1) {
        first = (await shown.textContent()).trim();
        if (ISO_TIME.test(first)) return;
        await page.waitForTimeout(100);
      }
      throw new Error(`the app shows ${first}`);
    });
    await screenshot(page, 'apps-get-time');
  });

  await step('the app\'s own button calls the tool through the gate and updates the view',
    async () => {
      await page.waitForTimeout(1100);
      await app.locator('#get-time-btn').click();
      const shown = app.locator('#server-time');
      let now = first;
      for (let i = 0; i < 300 && now === first; i += 1) {
        await page.waitForTimeout(100);
        now = (await shown.textContent()).trim();
      }
      assert.match(now, ISO_TIME);
      assert.notEqual(now, first, 'the view shows the new call\'s time');
    });

  await ask(page, 'How busy is the machine?', 'Here is the machine.');
  await step('an app-only tool the model never sees answers the app', async () => {
    const card = page.locator('.tool-card[data-tool="monitor.get-system-info"]');
    const monitor = card.frameLocator('iframe.app-frame').frameLocator('iframe');
    const status = monitor.locator('#status-text');
    let text = '';
    for (let i = 0; i < 300 && !/^\d\d:\d\d:\d\d$/.test(text); i += 1) {
      await page.waitForTimeout(100);
      text = ((await status.textContent().catch(() => '')) ?? '').trim();
    }
    assert.match(text, /^\d\d:\d\d:\d\d$/, 'a poll answered (its time shows)');
    await screenshot(page, 'apps-system-monitor');
  });

  await ask(page, 'Show the other app.', 'Shown.');
  const hostileCard = page.locator('.tool-card[data-tool="hostile.show"]');
  const hostile = hostileCard.frameLocator('iframe.app-frame').frameLocator('iframe');

  await step('an app\'s write waits for the user\'s approval in the page', async () => {
    const approval = hostileCard.getByRole('group', { name: 'The app asks to run a tool' });
    await approval.waitFor();
    assert.match(await approval.innerText(), /record[\s\S]*"note": "approved in the page"/);
    await screenshot(page, 'apps-approval');
    await approval.getByRole('button', { name: 'Approve' }).click();
    await hostile.locator('body[data-done="yes"]').waitFor({ state: 'attached' });
  });
  const findings = JSON.parse(await hostile.locator('#findings').textContent());
  console.log(`findings ${JSON.stringify(findings)}`);

  await step('a hostile app reaches neither the page, its token, its API nor an undeclared domain',
    async () => {
      assert.equal(findings.initialized, true);
      assert.equal(findings.page, pageOrigin, 'it knows where the page is');
      for (const name of ['topDocument', 'parentDocumentOfPage', 'topStorage', 'topNavigation']) {
        assert.match(findings[name], /^blocked: SecurityError/, name);
      }
      assert.ok(!String(findings.ownStorage).includes(TOKEN), 'no token in its own storage');
      assert.match(findings.fetchPage, /^blocked/);
      assert.match(findings.fetchUndeclared, /^blocked/);
      const refused = findings.violations.join('\n');
      assert.match(refused, new RegExp(`connect-src ${pageOrigin}`));
      assert.match(refused, /connect-src https:\/\/undeclared\.example\.com/);
      assert.ok(page.url().startsWith(BASE) && !page.url().includes('pwned'),
        `the page is still the page: ${page.url()}`);
    });

  await step('a hostile app cannot call another server\'s tool or a model-only tool', async () => {
    for (const name of ['modelOnly', 'otherServer', 'otherServerDotted']) {
      assert.match(findings[name], /^refused: not_found/, name);
    }
    assert.match(findings.ownWrite, /^ok: .*record done/);
    // Reads: its own server's resources only (the other server's is unknown to it).
    assert.equal(findings.ownRead, 'ok: text/html;profile=mcp-app');
    assert.match(findings.otherRead, /^refused: resource_not_found/);
  });

  await step('a link the app offers is shown, not opened; its message waits in the composer',
    async () => {
      assert.match(findings.scriptLink, /^refused: only http and https/);
      assert.equal(findings.link, 'ok');
      const link = hostileCard.locator('a.app-link');
      assert.equal(await link.getAttribute('href'), 'https://example.com/docs');
      assert.equal(await link.getAttribute('rel'), 'noopener noreferrer nofollow');
      assert.equal(page.context().pages().length, 1, 'nothing was opened');
      assert.equal(findings.message, 'ok');
      assert.equal(await page.getByLabel('Message to the model').inputValue(), 'Proposed by the app');
      assert.equal(findings.context, 'ok');
    });

  // The user asks something else; the app's context goes along, for the gateway to fence.
  await ask(page, 'What does the app show?', 'It shows widgets.');
});
