// A user's own server that wants their OAuth account, connected from the page: "Your own
// servers" shows it not connected with a Connect button; Connect opens the authorization
// server's sign-in in a window of its own (no way back to the page), and the row then says
// connected and counts the server's tools. Run by tests/it/oauth.rs with the gateway, the
// token-checking upstream and oidc-provider.

import { BASE, assert, env, screenshot, signIn, step, withPage } from './lib.mjs';

const TOKEN = env('MCPGATE_TOKEN');

await withPage('my-server-connect', async (page, context) => {
  // Only loopback: the authorization server's pages would fetch web fonts.
  await context.route((url) => !['127.0.0.1', 'localhost', '[::1]'].includes(url.hostname),
    (route) => route.abort());
  await signIn(page, TOKEN);
  const block = page.locator('#my-servers');
  const row = block.locator('.my-server[data-server="user-mine"]');

  await step('the server waits for the user\'s account, with Connect', async () => {
    await block.waitFor();
    await block.locator('summary').click();
    await row.waitFor();
    await row.locator('[data-connection="none"]').waitFor();
    await row.getByRole('button', { name: 'Connect' }).waitFor();
  });

  await step('Connect signs the user in, and the row says connected with its tools', async () => {
    const opened = context.waitForEvent('page');
    await row.getByRole('button', { name: 'Connect' }).click();
    const popup = await opened;
    await popup.waitForLoadState();
    await popup.locator('input[name="login"]').fill('alice');
    await popup.locator('input[name="password"]').fill('any password');
    await popup.getByRole('button', { name: 'Sign-in' }).click();
    await popup.getByRole('button', { name: 'Continue' }).click();
    await popup.getByRole('heading', { name: 'Connected' }).waitFor();
    assert.match(await popup.locator('#message').innerText(), /user-mine is connected/);
    assert.ok(popup.url().startsWith(`${BASE}/api/v1/oauth/callback`), popup.url());
    assert.equal(await popup.evaluate(() => window.opener), null, 'no way back to the page');
    await popup.close();
    const connected = block.locator('.my-server[data-server="user-mine"] [data-connection="connected"]');
    await connected.waitFor();
    assert.match(await block.locator('.my-server[data-server="user-mine"]').innerText(), /2 tools/);
    await screenshot(page, 'my-server-connected');
  });
});
