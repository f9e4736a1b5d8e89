// Stop during a slow tool: the card shows the upstream's progress while it runs; Stop ends
// the turn and cancels the call (tests/it/page/chat.rs checks the upstream saw the cancel).

import { assert, env, screenshot, signIn, step, withPage } from './lib.mjs';

const TOKEN = env('MCPGATE_TOKEN');

await withPage('chat-stop', async (page) => {
  await signIn(page, TOKEN);
  const prompt = page.getByLabel('Message to the model');
  await prompt.fill('Wait for a minute.');
  await page.getByRole('button', { name: 'Send' }).click();
  const sleep = page.locator('.tool-card[data-tool="slow.sleep"]');

  await step('the slow tool\'s card shows progress', async () => {
    await sleep.and(page.locator('[data-state="calling"]')).waitFor();
    await sleep.locator('.progress progress').waitFor();
    await page.waitForFunction(() => /slept \d+ of 60000 ms/.test(
      document.querySelector('.tool-card[data-tool="slow.sleep"] .progress-text')?.textContent ?? ''));
    assert.equal(await page.locator('#send').isDisabled(), true, 'one turn at a time');
    await screenshot(page, 'chat-slow-tool');
  });

  await step('Stop cancels the turn and the running tool', async () => {
    await page.getByRole('button', { name: 'Stop' }).click();
    await sleep.and(page.locator('[data-state="cancelled"]')).waitFor({ state: 'attached' });
    await page.getByText('Stopped.', { exact: true }).first().waitFor();
    await page.locator('#stop').waitFor({ state: 'hidden' });
    assert.equal(await page.locator('#send').isEnabled(), true);
    assert.match(await sleep.locator('.pill').textContent(), /cancelled/);
  });
});
