// The chat's server toggles: each server shows its tool count and the size of its tool
// definitions; a server switched off is left out of the turn (tests/it/page/chat.rs reads the
// tools the model was offered) and stays off for the conversation, across a reload; New chat
// switches every server on again.

import { assert, env, screenshot, signIn, step, withPage } from './lib.mjs';

const TOKEN = env('MCPGATE_TOKEN');

await withPage('chat-servers', async (page) => {
  await signIn(page, TOKEN);
  const demo = page.locator('.chat-server[data-server="demo"]');
  const slow = page.locator('.chat-server[data-server="slow"]');

  await step('each server shows its tools and their size', async () => {
    await demo.waitFor();
    assert.match(await demo.innerText(), /demo\s+\d+ tools, ~[\d,]+ tokens/);
    assert.equal(await demo.locator('input').isChecked(), true);
    await screenshot(page, 'chat-servers');
  });

  await step('a server switched off is left out of the turn', async () => {
    await demo.locator('input').uncheck();
    const prompt = page.getByLabel('Message to the model');
    await prompt.fill('which tools do you have?');
    await prompt.press('Enter');
    await page.locator('.msg.assistant .answer.markdown').first().waitFor();
  });

  await step('the choice stays with the conversation, and New chat resets it', async () => {
    await page.reload();
    await demo.waitFor();
    assert.equal(await demo.locator('input').isChecked(), false, 'still off after a reload');
    assert.equal(await slow.locator('input').isChecked(), true);
    await page.getByRole('button', { name: 'New chat' }).click();
    assert.equal(await demo.locator('input').isChecked(), true, 'on again in a new chat');
  });
});
