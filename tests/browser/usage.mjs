// The Usage tab over a seeded month (tests/it/page/usage.rs): totals, calls and errors per
// day for every day, the top tools and users, and cost per model, drawn as SVG by the page.

import { assert, env, screenshot, signIn, step, withPage } from './lib.mjs';

const TOKEN = env('MCPGATE_TOKEN');

await withPage('usage', async (page) => {
  await signIn(page, TOKEN);
  await page.getByRole('link', { name: 'Usage' }).click();
  const figures = page.locator('#usage-charts figure');

  await step('the totals and four charts show', async () => {
    await figures.nth(3).waitFor();
    assert.equal(await figures.count(), 4);
    const totals = await page.locator('#usage-totals').innerText();
    assert.match(totals, /calls/);
    assert.match(totals, /cost/);
  });

  await step('every day of the month has its column', async () => {
    const daily = page.getByRole('img', { name: 'Calls and errors per day' });
    assert.equal(await daily.locator('rect.column.ok').count(), 30);
    assert.ok(await daily.locator('rect.column.error').count() > 0, 'errors drawn');
  });

  await step('top tools, users and the cost per model name what was used', async () => {
    const labels = async (name) => page.getByRole('img', { name })
      .locator('rect').evaluateAll((rects) => rects.map((r) => r.dataset.label));
    assert.deepEqual((await labels('Top tools')).slice(0, 2), ['demo.echo', 'slow.sleep']);
    assert.ok((await labels('Top users')).includes('ada'));
    assert.deepEqual(await labels('Cost per model'), ['big-model', 'small-model']);
    await screenshot(page, 'usage');
  });

  await step('a shorter range asks again', async () => {
    await page.getByLabel('Range').selectOption('7');
    const daily = page.getByRole('img', { name: 'Calls and errors per day' });
    await page.waitForFunction(() => document.querySelectorAll(
      '#usage-charts svg[aria-label="Calls and errors per day"] rect.column.ok').length === 7);
    assert.equal(await daily.locator('rect.column.ok').count(), 7);
  });
});
