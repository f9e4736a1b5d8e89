// The remote servers a user adds for themselves (`[user_servers]`, when the operator allows
// it): added by URL with an optional header (an API key, sent to that server alone, sealed
// by the gateway and never shown back), listed with their tools, each tool a write that waits
// for approval unless marked read-only here, removed with their connection. Hidden when the
// gateway answers that the feature is off.

import { ApiError, api, rejected } from './api.js';
import { connectButton, connectionPill } from './connect.js';
import { h, plural, replace, say } from './dom.js';

export class MyServers {
  /** `root` is the `#my-servers` block; `onChange()` runs after a server is added or removed. */
  constructor(root, onChange) {
    this.root = root;
    this.onChange = onChange;
    this.list = root.querySelector('.my-server-list');
    this.form = root.querySelector('form');
    this.status = root.querySelector('.my-servers-status');
    this.form.addEventListener('submit', (event) => {
      event.preventDefault();
      this.add();
    });
  }

  /** Shows the user's servers, or hides the block when the gateway does not offer them. */
  async load() {
    let servers;
    let tools;
    try {
      [{ servers = [] }, { tools = [] }] = await Promise.all([
        api('/me/servers'), api('/mcp/tools'),
      ]);
    } catch (error) {
      rejected(error);
      // 404: the operator has not enabled it; nothing of it shows.
      this.root.hidden = true;
      return;
    }
    this.root.hidden = false;
    replace(this.list, ...servers.map((server) => this.row(server, tools)));
  }

  row(server, tools) {
    const own = tools.filter((tool) => tool.server === server.server);
    const readOnly = new Set(server.readOnly ?? []);
    const boxes = own.map((tool) => {
      const name = tool.name.slice(server.server.length + 1);
      const box = h('input', {
        type: 'checkbox', value: name, checked: readOnly.has(name),
        dataset: { fingerprint: tool.fingerprint ?? '' },
      });
      box.addEventListener('change', () => this.markReadOnly(server, item));
      return h('label', { class: 'my-server-tool' }, box, ` ${name} is read-only`);
    });
    const remove = h('button', { type: 'button', class: 'secondary', text: 'Remove' });
    remove.addEventListener('click', () => this.remove(server));
    // A server that wants the user's own account: its connection, and Connect until made.
    const account = server.authorization
      ? [' ', connectionPill(server.authorization),
        server.authorization.status === 'connected'
          ? null
          : [' ', connectButton(server.server, 'Connect', () => {
            this.load();
            this.onChange();
          })]]
      : null;
    const item = h('li', { class: 'my-server', 'data-server': server.server },
      h('span', { class: 'name' }, server.server),
      h('span', { class: 'muted' }, ` ${server.url}`),
      server.tools === null || server.tools === undefined
        ? null : h('span', { class: 'muted' }, ` · ${plural(server.tools, 'tool')}`),
      account,
      server.error && server.authorization?.status !== 'none'
        ? h('span', { class: 'warn' }, ` · ${server.error}`) : null,
      ' ', remove,
      boxes.length ? h('div', { class: 'my-server-tools' }, boxes) : null);
    return item;
  }

  async add() {
    const data = new FormData(this.form);
    const body = { name: String(data.get('name') ?? '').trim(), url: String(data.get('url') ?? '').trim() };
    const header = String(data.get('header') ?? '').trim();
    const value = String(data.get('value') ?? '');
    if (header) body.headers = { [header]: value };
    if (data.get('oauth')) body.auth = 'oauth';
    say(this.status, `Connecting to ${body.url}…`);
    try {
      await api('/me/servers', { method: 'POST', body });
    } catch (error) {
      rejected(error);
      say(this.status, error instanceof ApiError ? `Not added: ${error.message}` : String(error));
      return;
    }
    this.form.reset();
    say(this.status, `Added user-${body.name}.`);
    await this.load();
    this.onChange();
  }

  async remove(server) {
    try {
      await api(`/me/servers/${encodeURIComponent(server.name)}`, { method: 'DELETE' });
    } catch (error) {
      rejected(error);
      say(this.status, `Not removed: ${error.message}`);
      return;
    }
    say(this.status, `Removed ${server.server}.`);
    await this.load();
    this.onChange();
  }

  async markReadOnly(server, item) {
    // Each with the definition the user is looking at: one the server swapped in since is
    // refused, not marked.
    const boxes = [...item.querySelectorAll('.my-server-tool input')].filter((box) => box.checked);
    const tools = boxes.map((box) => box.value);
    const marks = boxes.map((box) => ({ name: box.value, fingerprint: box.dataset.fingerprint }));
    try {
      await api(`/me/servers/${encodeURIComponent(server.name)}/read-only`,
        { method: 'PUT', body: { tools: marks } });
      say(this.status, `${server.server}: ${tools.length ? tools.join(', ') : 'no tool'} read-only.`);
    } catch (error) {
      rejected(error);
      say(this.status, `Not changed: ${error.message}`);
    }
  }
}
