// Shared by the page's browser tests: Debian's Chromium driven by playwright-core (from the
// test peers in target/peers), steps that say what they checked, and screenshots.
// Run by tests/it/page.rs, which passes the service's address and tokens in the environment.

import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import path from 'node:path';

/** An environment variable the Rust side must set. */
export function env(name) {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set (tests/it/page.rs sets it)`);
  return value;
}

const require = createRequire(path.join(env('MCPGATE_PEERS'), 'package.json'));
const { chromium } = require('playwright-core');

/** How long one condition may take. */
export const WAIT = 30_000;

export const BASE = env('MCPGATE_URL');
const SCREENSHOTS = env('MCPGATE_SCREENSHOTS');

/** Flags from PEERS.md; playwright adds --headless and the fresh --user-data-dir. */
const ARGS = [
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

/**
 * Runs `body(page, browser)` in a fresh Chromium profile; on failure saves a screenshot named
 * after `name`. Fails when the page threw or broke its Content-Security-Policy.
 */
export async function withPage(name, body, { viewport = { width: 1200, height: 900 } } = {}) {
  // A failure picture from an earlier run would mislead whoever reads the folder.
  rmSync(path.join(SCREENSHOTS, `failure-${name}.png`), { force: true });
  const profile = mkdtempSync(path.join(tmpdir(), 'mcpgate-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: '/usr/bin/chromium',
    headless: true,
    args: ARGS,
    viewport,
    reducedMotion: 'reduce',
  });
  context.setDefaultTimeout(WAIT);
  const page = context.pages()[0] ?? await context.newPage();
  const problems = [];
  page.on('pageerror', (error) => problems.push(`uncaught error in the page: ${error.message}`));
  page.on('console', (message) => {
    // An app's frame (another origin, or its srcdoc) breaking its own policy is the app's
    // doing, and what the apps test provokes: only the page's own messages count.
    const from = message.location()?.url ?? '';
    const ours = from === '' || from.startsWith(BASE);
    if (ours && /Content.Security.Policy/i.test(message.text())) {
      problems.push(`CSP violation: ${message.text()}`);
    }
  });
  try {
    await body(page, context);
    assert.deepEqual(problems, [], 'the page ran cleanly');
  } catch (error) {
    await screenshot(page, `failure-${name}`).catch(() => {});
    throw error;
  } finally {
    await context.close();
    rmSync(profile, { recursive: true, force: true });
  }
}

/** Saves a screenshot to target/screenshots/NAME.png (CI keeps that folder). */
export async function screenshot(page, name, options = {}) {
  mkdirSync(SCREENSHOTS, { recursive: true });
  const file = path.join(SCREENSHOTS, `${name}.png`);
  await page.screenshot({ path: file, ...options });
  console.log(`screenshot ${file}`);
}

/** Runs one named check and prints it when it passed. */
export async function step(name, body) {
  await body();
  console.log(`ok - ${name}`);
}

/** Opens the page and signs in with `token`. */
export async function signIn(page, token) {
  await page.goto(`${BASE}/`);
  await page.getByLabel('Access token').fill(token);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.locator('#nav').waitFor();
}

/** Rendered text of the first element matching `selector`, whitespace collapsed. */
export async function text(page, selector) {
  const value = await page.locator(selector).first().innerText();
  return (value ?? '').replace(/\s+/g, ' ').trim();
}

export { assert };
