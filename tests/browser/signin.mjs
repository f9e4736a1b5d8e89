// Sign-in against `mcpgate serve` on its embedded defaults: a bad token gets the gateway's
// reason; the dev token from the banner signs in; the token lives in session storage only,
// never in a URL; with no model the chat says so before the first question, and how to set one
// up; reload keeps the session; sign-out forgets it.

import { BASE, assert, env, screenshot, signIn, step, text, withPage } from './lib.mjs';

const TOKEN = env('MCPGATE_TOKEN');

await withPage('signin', async (page) => {
  const urls = [];
  page.on('request', (request) => urls.push(request.url()));

  await step('the page is served with its security headers', async () => {
    const response = await page.goto(`${BASE}/`);
    const headers = response.headers();
    assert.match(headers['content-security-policy'], /script-src 'self'/);
    assert.match(headers['content-security-policy'], /default-src 'none'/);
    assert.equal(headers['x-content-type-options'], 'nosniff');
    assert.equal(headers['referrer-policy'], 'no-referrer');
    await page.getByRole('heading', { name: 'Sign in to mcpgate' }).waitFor();
    assert.equal(await page.locator('#nav').isVisible(), false, 'no navigation before sign-in');
  });

  await step('a bad token shows a clear message with the reason', async () => {
    await page.getByLabel('Access token').fill('not-the-token');
    await page.getByRole('button', { name: 'Sign in' }).click();
    const error = page.getByRole('alert');
    await error.waitFor();
    const message = await text(page, '#signin-error');
    assert.match(message, /^The token was rejected: /);
    assert.match(message, /dev token/, 'the API\'s reason is shown');
    assert.equal(await page.getByLabel('Access token').getAttribute('aria-invalid'), 'true');
    assert.equal(await page.evaluate(() => sessionStorage.length), 0, 'nothing stored');
    await screenshot(page, 'signin-bad-token');
  });

  await step('the dev token signs in; it is kept in session storage only', async () => {
    await signIn(page, TOKEN);
    await page.locator('#view-chat').waitFor();
    assert.equal(await page.evaluate(() => Object.keys(localStorage).length), 0);
    const stored = await page.evaluate(() => Object.values(sessionStorage));
    assert.ok(stored.includes(TOKEN), 'the token is in session storage');
    assert.equal(await page.evaluate(() => document.cookie), '');
  });

  await step('with no model the chat says so before the first question, and how to set one up', async () => {
    const notice = page.locator('#conversation .no-model');
    await notice.getByRole('heading', { name: 'No model is configured' }).waitFor();
    for (const server of ['Ollama', 'llama.cpp', 'vLLM', 'Any OpenAI-compatible server']) {
      await notice.locator('summary', { hasText: server }).waitFor();
    }
    await notice.locator('summary', { hasText: 'Ollama' }).click();
    const setup = await page.locator('#conversation .no-model details[open] pre').innerText();
    assert.match(setup, /^\[llm\]\nbase_url = "http:\/\/127\.0\.0\.1:11434\/v1"\nmodel = "/);
    assert.equal(await page.getByLabel('Message to the model').isDisabled(), true);
    assert.equal(await page.getByRole('button', { name: 'Send' }).isDisabled(), true);
    await screenshot(page, 'chat-no-model');
  });

  await step('the catalog of the built-in demo server shows', async () => {
    await page.getByRole('link', { name: 'Catalog' }).click();
    await page.locator('#servers tr[data-server="demo"]').waitFor();
    assert.match(await text(page, '#servers tr[data-server="demo"]'), /ready/);
    await page.locator('.tool[data-tool="demo.echo"]').waitFor();
    assert.equal(await page.locator('.tool').count(), 6);
  });

  await step('a reload keeps the session', async () => {
    await page.reload();
    await page.locator('#view-catalog').waitFor();
    await page.locator('.tool[data-tool="demo.echo"]').waitFor();
  });

  await step('sign-out forgets the token', async () => {
    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.getByRole('heading', { name: 'Sign in to mcpgate' }).waitFor();
    assert.equal(await page.evaluate(() => sessionStorage.length), 0);
    assert.equal(await page.locator('#nav').isVisible(), false);
    await page.reload();
    await page.getByRole('heading', { name: 'Sign in to mcpgate' }).waitFor();
  });

  await step('no URL the page ever requested holds the token', async () => {
    assert.ok(urls.length > 5, `requests were seen (${urls.length})`);
    for (const url of urls) assert.ok(!url.includes(TOKEN), `token in ${url}`);
    assert.ok(!page.url().includes(TOKEN));
  });
});
