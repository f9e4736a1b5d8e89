// Users' own accounts on a server that wants one: Alice connects from the catalog (the
// authorization server's login and consent pages, in the window the page opens, clicked like
// a user would), and Bob, whose chat calls that server's tool without an account, gets a
// card with a Connect button instead of an obscure failure, and connects from there.
// Run by tests/it/oauth.rs with the gateway, a token-checking upstream and oidc-provider.

import { BASE, assert, env, screenshot, signIn, step, text, withPage } from './lib.mjs';

const ALICE = env('MCPGATE_TOKEN');
const BOB = env('MCPGATE_USER_TOKEN');

/** Only loopback: the authorization server's pages would fetch web fonts. */
async function loopbackOnly(context) {
  await context.route((url) => !['127.0.0.1', 'localhost', '[::1]'].includes(url.hostname),
    (route) => route.abort());
}

/** Signs in and consents in the authorization server's window, as `login`. */
async function consent(popup, login) {
  await popup.waitForLoadState();
  await popup.locator('input[name="login"]').fill(login);
  await popup.locator('input[name="password"]').fill('any password');
  await popup.getByRole('button', { name: 'Sign-in' }).click();
  await popup.getByRole('button', { name: 'Continue' }).click();
  await popup.getByRole('heading', { name: 'Connected' }).waitFor();
  assert.match(await popup.locator('#message').innerText(), /notes is connected/);
  assert.ok(popup.url().startsWith(`${BASE}/api/v1/oauth/callback`), popup.url());
}

await withPage('connect-catalog', async (page, context) => {
  await loopbackOnly(context);
  await signIn(page, ALICE);
  const row = '#servers tr[data-server="notes"]';

  await step('a server that wants the user\'s own account offers Connect', async () => {
    await page.getByRole('link', { name: 'Catalog' }).click();
    await page.locator(row).waitFor();
    assert.match(await text(page, row), /authorization_required/);
    assert.match(await text(page, `${row} .account`), /not connected/);
    await screenshot(page, 'connect-before');
  });

  await step('Connect opens the sign-in, and the row says connected after it', async () => {
    const opened = context.waitForEvent('page');
    await page.locator(row).getByRole('button', { name: 'Connect' }).click();
    const popup = await opened;
    await consent(popup, 'alice');
    assert.equal(await popup.evaluate(() => window.opener), null, 'no way back to the page');
    await popup.close();
    await page.locator(`${row} [data-connection="connected"]`).waitFor();
    await page.locator(`${row}`).getByRole('button', { name: 'Disconnect' }).waitFor();
    await screenshot(page, 'connect-after');
  });

  await step('the page keeps no token of the server', async () => {
    const kept = await page.evaluate(() => ({
      session: Object.keys(sessionStorage), local: Object.keys(localStorage),
    }));
    assert.deepEqual(kept, { session: ['mcpgate.token'], local: [] });
  });
});

await withPage('connect-chat', async (page, context) => {
  await loopbackOnly(context);
  await signIn(page, BOB);

  await step('a chat tool that needs Bob\'s account shows Connect, not a bare error', async () => {
    const prompt = page.getByLabel('Message to the model');
    await prompt.fill('Echo hello through notes.');
    await prompt.press('Enter');
    const card = page.locator('.tool-card[data-tool="notes.echo"]');
    await card.locator('.connect-account').waitFor();
    assert.match(await card.locator('.error-code').innerText(), /authorization_required/);
    assert.match(await card.locator('.connect-account').innerText(), /notes needs your own account/);
    await screenshot(page, 'connect-chat-card');
  });

  await step('Connect from the card connects Bob', async () => {
    const opened = context.waitForEvent('page');
    await page.locator('.tool-card[data-tool="notes.echo"]')
      .getByRole('button', { name: 'Connect notes' }).click();
    const popup = await opened;
    await consent(popup, 'bob');
    await popup.close();
    await page.getByText('Connected: ask again to use it.').waitFor();
  });
});
