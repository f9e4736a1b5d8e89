// The chat's model picker (several models configured): it lists the models the user may
// choose with the default chosen; each answer says which model gave it, and that a turn with
// tools on a model without them was answered by the tools model (tests/it/page/chat.rs checks
// which scripted model each request reached).

import { assert, env, screenshot, signIn, step, withPage } from './lib.mjs';

const TOKEN = env('MCPGATE_TOKEN');

await withPage('chat-models', async (page) => {
  await signIn(page, TOKEN);
  const picker = page.getByRole('combobox', { name: /^Model/ });
  const prompt = page.getByLabel('Message to the model');
  const meta = page.locator('.msg.assistant .turn-meta');
  const ask = async (text, answers) => {
    await prompt.fill(text);
    await prompt.press('Enter');
    await page.locator('.msg.assistant .answer.markdown').nth(answers - 1).waitFor();
    return (await meta.nth(answers - 1).innerText()).trim();
  };

  await step('the picker lists the models with the default chosen', async () => {
    await picker.waitFor();
    const options = await picker.locator('option').allInnerTexts();
    assert.deepEqual(options, ['writer (no tools)', 'tools']);
    assert.equal(await picker.inputValue(), 'writer');
    await screenshot(page, 'chat-models');
  });

  await step('without tools the chosen model answers', async () => {
    for (const box of await page.locator('.chat-server input').all()) await box.uncheck();
    const said = await ask('write a haiku', 1);
    assert.match(said, /^writer\b/);
  });

  await step('a turn with tools on a model without them is answered by the tools model', async () => {
    await page.getByRole('button', { name: 'New chat' }).click();
    const said = await ask('what time is it?', 1);
    assert.match(said, /^tools \(writer has no tools\)/);
  });

  await step('the model picked is the one asked', async () => {
    await picker.selectOption('tools');
    const said = await ask('and now?', 2);
    assert.match(said, /^tools\b/);
    assert.doesNotMatch(said, /has no tools/);
  });
});
