// Model output is untrusted: an answer with raw HTML, an event handler and `javascript:`
// links streams as text and renders, from the gateway's sanitized HTML, without any of it
// becoming live markup. A second turn shows folded reasoning.

import { BASE, assert, env, signIn, step, withPage } from './lib.mjs';

const TOKEN = env('MCPGATE_TOKEN');

/** Records every element inserted into the conversation that could run or load anything. */
function watchForMarkup() {
  window.__markup = [];
  const bad = (element) => ['IMG', 'SCRIPT', 'IFRAME', 'OBJECT', 'EMBED'].includes(element.tagName)
    || [...element.attributes].some((a) => a.name.toLowerCase().startsWith('on'))
    || /^\s*javascript:/i.test(element.getAttribute('href') ?? '');
  const check = (node) => {
    if (node.nodeType !== Node.ELEMENT_NODE) return;
    for (const element of [node, ...node.querySelectorAll('*')]) {
      if (bad(element)) window.__markup.push(element.tagName);
    }
  };
  new MutationObserver((records) => {
    for (const record of records) {
      if (record.type === 'attributes') check(record.target);
      record.addedNodes.forEach(check);
    }
  }).observe(document.getElementById('conversation'),
    { childList: true, subtree: true, attributes: true });
}

await withPage('chat-untrusted', async (page) => {
  await signIn(page, TOKEN);
  await page.evaluate(watchForMarkup);
  const prompt = page.getByLabel('Message to the model');
  await prompt.fill('first question');
  await prompt.press('Enter');
  const answer = page.locator('.msg.assistant .answer.markdown').first();

  await step('streamed text and the final answer never become markup that runs', async () => {
    await answer.waitFor();
    assert.deepEqual(await page.evaluate(() => window.__markup), []);
    assert.equal(await answer.locator('img, script, iframe').count(), 0);
    assert.equal(await answer.locator('a[href^="javascript" i]').count(), 0);
    assert.equal(await answer.locator('[onclick], [onerror]').count(), 0);
    const link = answer.getByText('a link');
    await link.click();
    await answer.getByText('raw').click();
    assert.equal(page.url().startsWith(BASE), true, 'no navigation');
    assert.equal(await page.evaluate(() => window.__xss), undefined, 'no script ran');
  });

  await step('safe Markdown renders', async () => {
    assert.equal(await answer.locator('strong').textContent(), 'bold');
    const docs = answer.getByRole('link', { name: 'docs' });
    assert.equal(await docs.getAttribute('href'), 'https://example.com/docs');
    assert.match(await docs.getAttribute('rel'), /noopener/);
    assert.equal(await docs.getAttribute('target'), '_blank');
  });

  await step('reasoning is shown folded', async () => {
    await prompt.fill('second question');
    await prompt.press('Enter');
    const second = page.locator('.msg.assistant').nth(1);
    await second.locator('.answer.markdown').waitFor();
    assert.equal(await second.locator('.answer').innerText(), 'Second answer.');
    const reasoning = second.locator('details.reasoning');
    assert.equal(await reasoning.evaluate((d) => d.open), false);
    await reasoning.locator('summary').click();
    assert.equal(await reasoning.locator('pre').innerText(), 'The user asks again.');
    assert.deepEqual(await page.evaluate(() => window.__markup), []);
  });
});
