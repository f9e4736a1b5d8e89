// A chat turn where the model calls two read tools and two write tools: the read tools'
// cards show their arguments and results (text; an image named as the model knows it); both
// writes wait for approval at once, each showing what will run and until when; one is
// approved and one denied, from the keyboard.

import { assert, env, screenshot, signIn, step, text, withPage } from './lib.mjs';

const TOKEN = env('MCPGATE_TOKEN');

await withPage('chat-tools', async (page) => {
  await signIn(page, TOKEN);
  const card = (tool, hasText) => page.locator(`.tool-card[data-tool="${tool}"]`,
    hasText ? { hasText } : {});
  const inState = (locator, state) => locator.and(page.locator(`[data-state="${state}"]`))
    .waitFor({ state: 'attached' });

  const prompt = page.getByLabel('Message to the model');
  await prompt.fill('Echo hello, then save two notes.');
  await prompt.press('Enter');

  await step('a read tool\'s card shows its arguments and result', async () => {
    const echo = card('demo.echo');
    await inState(echo, 'done');
    assert.equal(await text(page, '.tool-card[data-tool="demo.echo"] .server-badge'), 'demo');
    assert.equal(await text(page, '.tool-card[data-tool="demo.echo"] .tool-name'), 'echo');
    assert.match(await echo.locator('.arguments pre').textContent(),
      /"message": "hello from the page"/);
    assert.equal(await echo.locator('.text-part').textContent(), 'Echo: hello from the page');
    assert.match(await echo.locator('.pill').textContent(), /done/);
    assert.match(await echo.locator('.elapsed').textContent(), /\d+(\.\d)? (ms|s)/);
  });

  await step('an image result is shown and named as the model knows it', async () => {
    const image = card('conf.test_image_content');
    await inState(image, 'done');
    const img = image.locator('img.result-image');
    assert.match(await img.getAttribute('src'), /^data:image\/png;base64,/);
    assert.equal(await img.getAttribute('alt'), 'image_1, returned by the tool');
    assert.match(await image.locator('figcaption').innerText(), /^image_1 · image\/png/);
  });

  const keep = card('demo.add_note', '"keep"');
  const drop = card('demo.add_note', '"drop"');

  await step('two writes wait for approval at once, showing what will run and until when',
    async () => {
      await inState(keep, 'waiting');
      await inState(drop, 'waiting');
      for (const write of [keep, drop]) {
        const approval = write.getByRole('group', { name: 'Approve this call?' });
        await approval.waitFor();
        const shown = (await approval.innerText()).replace(/\s+/g, ' ');
        assert.match(shown, /run demo\.add_note on server demo/);
        assert.match(shown, /Expires at .+\(in \d/);
        assert.match(shown, /"body": "(approved|denied) in the page"/);
      }
      const bar = page.getByRole('region', { name: 'Approvals waiting' });
      assert.match(await bar.innerText(), /2 calls wait for your approval/);
      await screenshot(page, 'chat-approval');
    });

  await step('approve from the keyboard runs the write', async () => {
    // The approval's answer is held until the call's result has reached the card through
    // the turn's stream, as on a busy machine: the card stays done.
    await page.route('**/approvals/**', async (route) => {
      const response = await route.fetch();
      await keep.locator('.text-part', { hasText: 'Saved note' }).waitFor({ state: 'attached' });
      await route.fulfill({ response });
    }, { times: 1 });
    await keep.getByRole('button', { name: 'Approve' }).focus();
    await page.keyboard.press('Enter');
    await keep.locator('.decision-status', { hasText: 'Approved' }).waitFor();
    await inState(keep, 'done');
    assert.equal(await keep.locator('.text-part').textContent(), 'Saved note `keep`.');
    assert.match(await keep.locator('.decision-status').textContent(), /Approved/);
  });

  await step('deny from the keyboard tells the model', async () => {
    await drop.getByRole('button', { name: 'Approve' }).focus();
    await page.keyboard.press('Tab');
    assert.equal(await page.evaluate(() => document.activeElement?.textContent), 'Deny');
    await page.keyboard.press('Space');
    await inState(drop, 'denied');
    // The card shows the denial as soon as it is sent; the call's error (what the model is
    // told) follows on the turn's stream.
    await drop.locator('.outcome', { hasText: 'denied_by_user' })
      .waitFor({ state: 'attached' });
    assert.match(await drop.locator('.outcome').textContent(), /denied_by_user/);
    assert.equal(await drop.locator('.text-part').count(), 0, 'no result: it did not run');
  });

  await step('the answer renders and the cards fold into Used 4 tools', async () => {
    const answer = page.locator('.msg.assistant .answer.markdown');
    await answer.waitFor();
    assert.equal(await answer.locator('strong').textContent(), 'keep');
    assert.match(await answer.innerText(), /was denied, so it was not saved/);
    const used = page.locator('details.used-tools');
    assert.equal(await used.locator(':scope > summary').textContent(), 'Used 4 tools');
    assert.equal(await used.evaluate((d) => d.open), false, 'folded once the turn ended');
    assert.equal(await page.locator('#send').isEnabled(), true);
    await used.locator(':scope > summary').click();
    await card('demo.echo').waitFor();
    await screenshot(page, 'chat-tool-cards');
  });
}, { viewport: { width: 1200, height: 1400 } });
