// A user's own servers in the page: hidden where the operator has not enabled them; where it
// has, a server added by URL with its API key header (the key never shows again), its tools
// marked read-only one by one, and removed. tests/it/page/my_servers.rs checks the gateway's
// side: the audit, the mark, and that the key reached the server and nothing else.

import { assert, env, screenshot, signIn, step, withPage } from './lib.mjs';

const TOKEN = env('MCPGATE_TOKEN');
const OFF = env('MCPGATE_OFF_URL');
const UPSTREAM = env('MCPGATE_UPSTREAM');
const KEY = env('MCPGATE_KEY');

await withPage('my-servers', async (page) => {
  await step('without the feature the page offers no server of your own', async () => {
    await page.goto(`${OFF}/`);
    await page.getByLabel('Access token').fill(TOKEN);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.locator('#nav').waitFor();
    await page.getByLabel('Message to the model').waitFor();
    // The page asks, is told 404, and keeps the block hidden.
    await page.waitForLoadState('networkidle');
    assert.equal(await page.locator('#my-servers').isHidden(), true);
    assert.equal(await page.getByRole('button', { name: 'Add server' }).count(), 0);
    await page.evaluate(() => sessionStorage.clear());
  });

  await signIn(page, TOKEN);
  const block = page.locator('#my-servers');
  const status = block.locator('.my-servers-status');
  const row = block.locator('.my-server[data-server="user-notes"]');

  await step('a server is added with its key, which never shows again', async () => {
    await block.waitFor();
    await block.locator('summary').click();
    await block.getByLabel('Name').fill('notes');
    await block.getByLabel('URL').fill(UPSTREAM);
    await block.getByLabel('Header').fill('X-Api-Key');
    await block.getByLabel('Value').fill(KEY);
    await block.getByRole('button', { name: 'Add server' }).click();
    await row.waitFor();
    assert.match(await status.innerText(), /Added user-notes/);
    assert.match(await row.innerText(), /2 tools/);
    assert.equal(await block.getByLabel('Value').inputValue(), '', 'the form is cleared');
    const html = await page.content();
    assert.equal(html.includes(KEY), false, 'the key is nowhere in the page');
    // Its tools join the conversation's server toggles.
    await page.locator('.chat-server[data-server="user-notes"]').waitFor();
    await screenshot(page, 'my-servers');
  });

  await step('a tool is marked read-only', async () => {
    await row.getByLabel('echo is read-only').check();
    await page.waitForFunction(
      () => /echo read-only/.test(document.querySelector('.my-servers-status')?.textContent ?? ''),
    );
  });

  await step('the server is removed', async () => {
    await row.getByRole('button', { name: 'Remove' }).click();
    await row.waitFor({ state: 'detached' });
    assert.match(await status.innerText(), /Removed user-notes/);
    await page.locator('.chat-server[data-server="user-notes"]').waitFor({ state: 'detached' });
  });
});
