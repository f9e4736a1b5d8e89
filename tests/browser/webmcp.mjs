// WebMCP in a real browser: an editor page on its own origin (served here, on PAGE_PORT)
// imports the gateway's /webmcp.js, connects with a token its own backend (this script's
// /token) hands it, and registers tools that act on its DOM. The Rust side (tests/it/page/
// webmcp.rs) calls them over REST and /mcp between the steps; the gateway's own chat page, in
// a second tab, calls them through the model. Lines on stdin say when the Rust side is done.

import http from 'node:http';
import readline from 'node:readline';

import { assert, BASE, env, screenshot, signIn, step, text, withPage, WAIT } from './lib.mjs';

const TOKEN = env('MCPGATE_TOKEN');
const PORT = Number(env('PAGE_PORT'));
const ORIGIN = `http://127.0.0.1:${PORT}`;

const EDITOR = `<!doctype html>
<html lang="en"><meta charset="utf-8"><title>Editor</title>
<h1 id="title">Draft</h1>
<p>Blocks:</p><ol id="blocks"></ol>
<script type="module">
  import { connect } from '${BASE}/webmcp.js';
  const runs = { get_title: 0, set_title: 0, add_block: 0 };
  window.runs = runs;
  // The page's own backend gives it a short-lived token for its user.
  const token = async () => (await fetch('/token')).text();
  const bridge = connect({ gateway: '${BASE}', clientId: 'editor', token });
  window.bridge = bridge;
  const title = document.querySelector('#title');
  bridge.registerTool({
    name: 'get_title', title: 'Get the title', description: "The open document's title.",
    inputSchema: { type: 'object', properties: {} },
    // The title is typed by people: content from others, for the model to read as data.
    annotations: { readOnlyHint: true, untrustedContentHint: true },
    execute: () => { runs.get_title += 1; return { title: title.textContent }; },
  });
  bridge.registerTool({
    name: 'set_title', description: "Sets the open document's title.",
    inputSchema: { type: 'object', properties: { title: { type: 'string' } },
                   required: ['title'] },
    execute: ({ title: next }) => { runs.set_title += 1; title.textContent = next; return { title: next }; },
  });
  window.blocks = new AbortController();
  bridge.registerTool({
    name: 'add_block', description: 'Appends a block of text to the document.',
    inputSchema: { type: 'object', properties: { text: { type: 'string' } }, required: ['text'] },
    execute: ({ text }) => {
      runs.add_block += 1;
      const item = document.createElement('li');
      item.textContent = text;
      document.querySelector('#blocks').append(item);
      return 'added';
    },
  }, { signal: window.blocks.signal });
</script>
</html>`;

const server = http.createServer((request, response) => {
  if (request.url === '/token') {
    response.writeHead(200, { 'content-type': 'text/plain' });
    response.end(TOKEN);
  } else if (request.url === '/') {
    response.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
    response.end(EDITOR);
  } else {
    response.writeHead(404);
    response.end();
  }
});
await new Promise((resolve) => server.listen(PORT, '127.0.0.1', resolve));

const input = readline.createInterface({ input: process.stdin });
const lines = input[Symbol.asyncIterator]();
/** Says `word` to the Rust side and waits for its answer line. */
async function handOver(word) {
  console.log(`hand-over ${word}`);
  const { value, done } = await lines.next();
  assert.ok(!done, 'the Rust side is still there');
  assert.equal(value, `${word} done`);
}

async function api(path, init = {}) {
  const response = await fetch(`${BASE}${path}`, {
    ...init,
    headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
  });
  return { status: response.status, body: await response.json() };
}

async function pageTools() {
  const { status, body } = await api('/api/v1/mcp/tools');
  assert.equal(status, 200);
  return body.tools.filter((t) => t.source === 'webmcp').map((t) => t.name).sort();
}

async function until(what, check) {
  const deadline = Date.now() + WAIT;
  for (;;) {
    if (await check()) return;
    assert.ok(Date.now() < deadline, `timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

try {
  await withPage('webmcp', async (editor, context) => {
    const consoleLines = [];
    editor.on('console', (message) => consoleLines.push(message.text()));
    await editor.goto(`${ORIGIN}/`);

    await step('the page connects from its own origin and registers its tools', async () => {
      await editor.waitForFunction(() => window.bridge?.connected === true);
      await until('the page tools in the catalog', async () =>
        (await pageTools()).length === 3);
      assert.deepEqual(await pageTools(),
        ['webmcp-editor.add_block', 'webmcp-editor.get_title', 'webmcp-editor.set_title']);
      assert.ok(consoleLines.some((l) => l.includes('connected as webmcp-editor')), consoleLines);
    });

    // The Rust side reads over REST and /mcp, and runs the write after approving it.
    await handOver('calls');

    await step('the reads ran in the page and the approved write changed it once', async () => {
      assert.equal(await text(editor, '#title'), 'Final');
      const runs = await editor.evaluate(() => window.runs);
      assert.deepEqual(runs, { get_title: 2, set_title: 1, add_block: 0 });
    });

    await step('the invoke route answers in the AX shape with what the page computed', async () => {
      const { status, body } = await api('/api/v1/webmcp/invoke', {
        method: 'POST', body: JSON.stringify({ clientId: 'editor', tool: 'get_title' }),
      });
      assert.equal(status, 200);
      assert.deepEqual(body, { code: 0, data: { result: { ok: true, data: { title: 'Final' }, error: null } } });
    });

    await step("the gateway's own chat uses the tools of the user's other page", async () => {
      const chat = await context.newPage();
      await signIn(chat, TOKEN);
      const prompt = chat.getByLabel('Message to the model');
      await prompt.fill("What is my document's title?");
      await prompt.press('Enter');
      const card = chat.locator('.tool-card[data-tool="webmcp-editor.get_title"]');
      await card.and(chat.locator('[data-state="done"]')).waitFor({ state: 'attached' });
      assert.match(await card.locator('.text-part').textContent(), /Final/);
      await chat.getByText('The title is Final.').waitFor();
      await screenshot(chat, 'webmcp-chat');
      await chat.close();
      assert.equal((await editor.evaluate(() => window.runs)).get_title, 4);
    });

    await step("aborting a tool's signal unregisters it", async () => {
      await editor.evaluate(() => window.blocks.abort());
      await until('add_block to leave', async () => (await pageTools()).length === 2);
      assert.deepEqual(await pageTools(), ['webmcp-editor.get_title', 'webmcp-editor.set_title']);
    });

    await step('a reloaded page registers again and answers from its new DOM', async () => {
      await editor.reload();
      await editor.waitForFunction(() => window.bridge?.connected === true);
      await until('the tools to return', async () => (await pageTools()).length === 3);
      const { status, body } = await api('/api/v1/mcp/tools/call', {
        method: 'POST', body: JSON.stringify({ tool: 'webmcp-editor.get_title', arguments: {} }),
      });
      assert.equal(status, 200, JSON.stringify(body));
      assert.match(JSON.stringify(body), /Draft/);
    });

    await step("a closed page's tools leave the catalog", async () => {
      await editor.close();
      await until('the page tools to leave', async () => (await pageTools()).length === 0);
    });
  });
} finally {
  // Neither stdin nor the server may keep the script alive once the steps ended.
  input.close();
  server.close();
  server.closeAllConnections();
}
