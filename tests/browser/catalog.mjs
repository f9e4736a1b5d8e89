// The catalog and the audit log: servers and their state, a quarantined tool, a read tool
// called from the form generated from its schema (text, structured data, an image, and
// markup in a result staying text), audit filters, and the admin-only note for a user.

import { assert, env, screenshot, signIn, step, text, withPage } from './lib.mjs';

const ADMIN = env('MCPGATE_TOKEN');
const USER = env('MCPGATE_USER_TOKEN');

const tool = (name) => `.tool[data-tool="${name}"]`;

/** Opens a tool's entry, fills its form fields by label, calls it, waits for the outcome. */
async function call(page, name, fields) {
  const entry = page.locator(tool(name));
  if (!(await entry.evaluate((e) => e.open))) await entry.locator('summary').first().click();
  for (const [label, value] of Object.entries(fields)) {
    await entry.getByLabel(label, { exact: false }).fill(value);
  }
  await entry.getByRole('button', { name: 'Call' }).click();
  await entry.locator('.call-output .result, .call-output .note').first().waitFor();
  return entry;
}

await withPage('catalog', async (page) => {
  await signIn(page, ADMIN);

  await step('servers show with their state and tool count', async () => {
    await page.getByRole('link', { name: 'Catalog' }).click();
    for (const server of ['demo', 'slow', 'conf']) {
      await page.locator(`#servers tr[data-server="${server}"]`).waitFor();
      assert.match(await text(page, `#servers tr[data-server="${server}"]`), /ready/);
    }
    assert.match(await text(page, '#servers tr[data-server="demo"]'), /\b6\b/);
  });

  await step('a quarantined tool is marked, explained, and offers no call', async () => {
    const entry = page.locator(tool('demo.time_now'));
    await entry.locator('[data-status="quarantined"]').waitFor();
    await entry.locator('summary').first().click();
    assert.match(await text(page, `${tool('demo.time_now')} .note`), /Quarantined/);
    assert.equal(await entry.getByRole('button', { name: 'Call' }).count(), 0);
    assert.equal(await page.locator(`${tool('demo.echo')} [data-status="quarantined"]`).count(), 0);
    await screenshot(page, 'catalog-quarantined');
  });

  await step('scan findings are listed and a poisoned description stays text', async () => {
    const entry = page.locator(tool('odd.weather'));
    assert.match(await text(page, `${tool('odd.weather')} summary`), /\d+ findings?/);
    await entry.locator('summary').first().click();
    assert.match(await entry.locator('.findings').innerText(), /hidden_instructions \(high\) in description/);
    assert.match(await entry.locator('.description').textContent(), /<IMPORTANT>.*<img src=x/);
    assert.equal(await entry.locator('.description img, .description important').count(), 0);
    assert.equal(await page.evaluate(() => window.__xss), undefined);
  });

  await step('write tools are marked and not called from the catalog', async () => {
    const entry = page.locator(tool('demo.add_note'));
    assert.match(await text(page, `${tool('demo.add_note')} summary`), /write/);
    await entry.locator('summary').first().click();
    assert.equal(await entry.getByRole('button', { name: 'Call' }).count(), 0);
  });

  await step('the form checks required fields', async () => {
    const entry = page.locator(tool('demo.add'));
    await entry.locator('summary').first().click();
    await entry.getByLabel('a (required)').fill('2');
    await entry.getByRole('button', { name: 'Call' }).click();
    const problem = entry.locator('.error-text:not([hidden])');
    await problem.waitFor();
    assert.match(await problem.first().textContent(), /b \(required\): is required/);
    assert.equal(await entry.getByLabel('b (required)').getAttribute('aria-invalid'), 'true');
  });

  await step('a read tool called from its form shows text and structured data', async () => {
    const entry = await call(page, 'demo.add', { 'a (required)': '2', 'b (required)': '3.5' });
    assert.equal(await text(page, `${tool('demo.add')} .text-part`), '5.5');
    assert.match(await text(page, `${tool('demo.add')} .structured pre`), /"sum": 5\.5/);
    assert.equal(await entry.locator('.error-text:not([hidden])').count(), 0);
  });

  await step('markup in a tool result stays text', async () => {
    const hostile = '<img src=x onerror="window.__xss=1"><script>window.__xss=2</script>';
    await call(page, 'demo.echo', { message: hostile });
    assert.equal(await text(page, `${tool('demo.echo')} .text-part`), `Echo: ${hostile}`);
    assert.equal(await page.locator(`${tool('demo.echo')} .result img`).count(), 0);
    assert.equal(await page.evaluate(() => window.__xss), undefined);
  });

  await step('an image result is shown from its data', async () => {
    await call(page, 'conf.test_image_content', {});
    const image = page.locator(`${tool('conf.test_image_content')} img.result-image`);
    await image.waitFor();
    assert.match(await image.getAttribute('src'), /^data:image\/png;base64,/);
    await page.waitForFunction((selector) => document.querySelector(selector)?.naturalWidth > 0,
      `${tool('conf.test_image_content')} img.result-image`);
  });

  await step('the tool filter narrows the list', async () => {
    await page.getByLabel('Filter tools').fill('sleep');
    assert.equal(await page.locator(`${tool('slow.sleep')}`).isVisible(), true);
    assert.equal(await page.locator(`${tool('demo.add')}`).isVisible(), false);
    await page.getByLabel('Filter tools').fill('');
    assert.equal(await page.locator(`${tool('demo.add')}`).isVisible(), true);
  });

  await step('the audit log lists the calls and filters them', async () => {
    await page.getByRole('link', { name: 'Audit' }).click();
    const audit = page.locator('#view-audit');
    const field = (label) => audit.getByLabel(label, { exact: true });
    await page.locator('#audit-results tbody tr').first().waitFor();
    const tools = await page.locator('#audit-results tbody tr').evaluateAll(
      (rows) => rows.map((r) => r.dataset.tool));
    for (const name of ['demo.add', 'demo.echo', 'conf.test_image_content']) {
      assert.ok(tools.includes(name), `${name} in ${tools}`);
    }
    await field('Tool').fill('demo.add');
    await audit.getByRole('button', { name: 'Apply' }).click();
    await page.waitForFunction(() => [...document.querySelectorAll('#audit-results tbody tr')]
      .every((r) => r.dataset.tool === 'demo.add'));
    assert.ok(await page.locator('#audit-results tbody tr').count() >= 1);
    assert.match(await text(page, '#audit-results tbody tr'), /ada/);
    await field('User').fill('nobody');
    await audit.getByRole('button', { name: 'Apply' }).click();
    await page.getByText('No calls match these filters.').waitFor();
    await audit.getByRole('button', { name: 'Reset' }).click();
    await field('Outcome').fill('ok');
    await field('Since').fill('2000-01-01T00:00:00');
    await audit.getByRole('button', { name: 'Apply' }).click();
    await page.locator('#audit-results tbody tr[data-outcome="ok"]').first().waitFor();
    await field('Since').fill('2999-01-01T00:00:00');
    await audit.getByRole('button', { name: 'Apply' }).click();
    await page.getByText('No calls match these filters.').waitFor();
    await screenshot(page, 'audit');
  });

  await step('a user without the admin role sees that the audit log is admin only', async () => {
    await page.getByRole('button', { name: 'Sign out' }).click();
    await signIn(page, USER);
    await page.getByRole('link', { name: 'Audit' }).click();
    await page.locator('.admin-only').waitFor();
    assert.match(await text(page, '.admin-only'), /Admin only/);
    assert.equal(await page.locator('#audit-results table').count(), 0);
    await page.getByRole('link', { name: 'Catalog' }).click();
    await page.locator(tool('demo.echo')).waitFor();
  });
});
