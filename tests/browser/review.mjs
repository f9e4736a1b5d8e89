// Releasing a changed tool from the page: an operator sees the pinned and the live definition
// side by side with the differing lines marked, keeps it blocked or accepts it for that one
// tool; a user without the admin role is told who can.

import { assert, env, screenshot, signIn, step, text, withPage } from './lib.mjs';

const ADMIN = env('MCPGATE_TOKEN');
const USER = env('MCPGATE_USER_TOKEN');

const tool = (name) => `.tool[data-tool="${name}"]`;

async function openReview(page, name) {
  const entry = page.locator(tool(name));
  await entry.locator('[data-status="quarantined"]').waitFor();
  if (!(await entry.evaluate((e) => e.open))) await entry.locator('summary').first().click();
  await entry.getByRole('button', { name: 'Review the change' }).click();
  return entry;
}

await withPage('review', async (page) => {
  await signIn(page, ADMIN);
  await page.getByRole('link', { name: 'Catalog' }).click();

  await step('the pinned and the live definition show side by side, the change marked', async () => {
    const entry = await openReview(page, 'demo.time_now');
    const review = entry.locator('.pin-review');
    await review.waitFor();
    const pinned = review.locator('.side.pinned pre.diff');
    const live = review.locator('.side.live pre.diff');
    const removed = await pinned.locator('[data-changed="removed"]').allInnerTexts();
    const added = await live.locator('[data-changed="added"]').allInnerTexts();
    assert.deepEqual(removed.map((l) => l.trim()), ['"description": "Tells the time.",']);
    assert.equal(added.length, 1, `one line added: ${added}`);
    assert.match(added[0], /"description": "Returns the current time/);
    // The lines both share are not marked: the schema is the same on both sides.
    assert.match(await pinned.innerText(), /"inputSchema"/);
    assert.equal(await live.locator('.line:not([data-changed])').count(),
      await pinned.locator('.line:not([data-changed])').count());
    assert.match(await text(page, `${tool('demo.time_now')} .pin-review`), /2 lines differ/);
    await screenshot(page, 'catalog-review');
  });

  await step('keeping it blocked changes nothing', async () => {
    const entry = page.locator(tool('demo.time_now'));
    await entry.getByRole('button', { name: 'Keep it blocked' }).click();
    await entry.getByRole('button', { name: 'Review the change' }).waitFor();
    assert.equal(await entry.locator('.pin-review').count(), 0);
    await entry.locator('[data-status="quarantined"]').waitFor();
  });

  await step('accepting releases that one tool only', async () => {
    const entry = await openReview(page, 'demo.time_now');
    await entry.getByRole('button', { name: 'Accept this definition' }).click();
    await page.getByText(/Accepted: demo\.time_now is pinned at/).waitFor();
    // The catalog reloads: the tool is released, the other changed tool is still held.
    await page.locator(`${tool('demo.time_now')}[data-status="ok"]`).waitFor();
    await page.locator(`${tool('demo.echo')}[data-status="quarantined"]`).waitFor();
  });

  await step('a user without the admin role is told who can release a tool', async () => {
    await page.getByRole('button', { name: 'Sign out' }).click();
    await signIn(page, USER);
    await page.getByRole('link', { name: 'Catalog' }).click();
    const entry = await openReview(page, 'demo.echo');
    await entry.getByText('Only a gateway operator can review and release a tool').waitFor();
    assert.match(await text(page, `${tool('demo.echo')} .review`), /mcpgate pin --tool demo\.echo/);
  });
});
