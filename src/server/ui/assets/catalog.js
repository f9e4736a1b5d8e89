// The catalog: servers with their state, last error and tool count; every tool with its
// description, schema, read/write kind, fingerprint, review status and scan findings; and a
// form, generated from its schema, to call a read tool.

import { ApiError, api } from './api.js';
import { connectButton, connectionPill, disconnectAccount } from './connect.js';
import { clear, collapsible, h, jsonBlock, pill, plural, replace, say } from './dom.js';
import { pinReview } from './pin_review.js';
import { renderResult } from './result.js';
import { schemaForm } from './schema_form.js';

const SERVER_TONES = {
  ready: 'ok', connecting: 'info', degraded: 'warn', failed: 'danger', authorization_required: 'warn',
};
const STATUS_TONES = { ok: 'ok', stale: 'warn', pending: 'warn', quarantined: 'danger' };
/** Why calls of a tool in this status are refused (or may fail), and what to do. */
const STATUS_NOTES = {
  quarantined: ['Quarantined', 'calls are refused until an operator reviews the change and '
    + 'accepts it (below, or `mcpgate pin --tool`).'],
  pending: ['Pending review', 'a new tool under `on_change = "block"`; calls are refused until '
    + 'an operator accepts it (below, or `mcpgate pin --tool`).'],
  stale: ['Stale', 'its server is not answering, so this is the last definition seen; calls '
    + 'may fail.'],
};

/** The catalog view. */
export class Catalog {
  constructor(root) {
    this.root = root;
    this.servers = root.querySelector('#servers');
    this.tools = root.querySelector('#tools');
    this.status = root.querySelector('#catalog-status');
    this.filter = root.querySelector('#tool-filter');
    this.filter.addEventListener('input', () => this.applyFilter());
    root.querySelector('#catalog-reload').addEventListener('click', () => this.load());
    this.loaded = false;
  }

  /** Shows the view, loading it the first time. */
  show() {
    if (!this.loaded) this.load();
  }

  reset() {
    this.loaded = false;
    clear(this.servers);
    clear(this.tools);
    say(this.status, '');
  }

  async load() {
    this.loaded = true;
    say(this.status, 'Loading the catalog…');
    // Only the latest load is shown, whatever order answers arrive in.
    const ticket = (this.ticket = (this.ticket ?? 0) + 1);
    try {
      const [servers, tools] = await Promise.all([api('/mcp/servers'), api('/mcp/tools')]);
      if (ticket !== this.ticket) return;
      this.renderServers(servers.servers ?? []);
      this.renderTools(tools.tools ?? [], servers.servers ?? []);
      say(this.status, '');
    } catch (error) {
      if (ticket !== this.ticket) return;
      this.loaded = false;
      say(this.status, `The catalog could not be loaded: ${error.message}`);
    }
  }

  renderServers(servers) {
    if (servers.length === 0) {
      replace(this.servers, h('p', { class: 'muted' }, 'No servers are visible to you.'));
      return;
    }
    const rows = servers.map((server) => {
      const refresh = h('button', { type: 'button', class: 'small ghost' }, 'Refresh');
      const note = h('span', { class: 'muted small-text', role: 'status' });
      refresh.addEventListener('click', async () => {
        refresh.disabled = true;
        try {
          await api(`/mcp/servers/${encodeURIComponent(server.id)}/refresh`, { method: 'POST', body: {} });
          note.textContent = 'refreshing…';
          setTimeout(() => this.load(), 800);
        } catch (error) {
          note.textContent = error instanceof ApiError && error.status === 403
            ? 'admins only' : error.message;
        } finally {
          refresh.disabled = false;
        }
      });
      return h('tr', { dataset: { server: server.id } },
        h('th', { scope: 'row' }, h('code', {}, server.id)),
        h('td', {}, pill(server.state, SERVER_TONES[server.state] ?? 'muted'),
          server.stale ? [' ', pill('stale', 'warn')] : null),
        h('td', {}, server.transport ?? '', sandboxNote(server.sandbox)),
        h('td', { class: 'num' }, String(server.toolCount ?? 0)),
        h('td', { class: 'last-error' }, server.lastError ?? h('span', { class: 'muted' }, '—')),
        h('td', {}, this.account(server)),
        h('td', {}, refresh, ' ', note));
    });
    replace(this.servers, h('div', { class: 'table-wrap' },
      h('table', { class: 'table' },
        h('caption', { class: 'visually-hidden' }, 'Upstream servers'),
        h('thead', {}, h('tr', {},
          ['Server', 'State', 'Transport', 'Tools', 'Last error', 'Your account', 'Actions']
            .map((t) => h('th', { scope: 'col' }, t)))),
        h('tbody', {}, rows))));
  }

  /** The caller's own account on a server that wants one: its state, Connect or Disconnect. */
  account(server) {
    const auth = server.authorization;
    if (!auth) return h('span', { class: 'muted' }, '—');
    const reload = () => this.load();
    if (auth.status === 'connected') {
      const disconnect = h('button', { type: 'button', class: 'small ghost' }, 'Disconnect');
      disconnect.addEventListener('click', async () => {
        disconnect.disabled = true;
        try {
          await disconnectAccount(server.id);
        } finally {
          reload();
        }
      });
      return h('span', { class: 'account' }, connectionPill(auth), ' ', disconnect);
    }
    const label = auth.status === 'expired' ? 'Reconnect' : 'Connect';
    return h('span', { class: 'account' }, connectionPill(auth), ' ',
      connectButton(server.id, label, reload));
  }

  renderTools(tools, servers) {
    if (tools.length === 0) {
      replace(this.tools, h('p', { class: 'muted' }, 'No tools are visible to you.'));
      return;
    }
    const order = servers.map((s) => s.id);
    const groups = new Map();
    for (const tool of tools) {
      if (!groups.has(tool.server)) groups.set(tool.server, []);
      groups.get(tool.server).push(tool);
    }
    const sorted = [...groups.keys()].sort((a, b) => rank(order, a) - rank(order, b));
    replace(this.tools, sorted.map((server) => h('section', { class: 'tool-group' },
      h('h3', {}, h('code', {}, server), ' ',
        h('span', { class: 'muted' }, plural(groups.get(server).length, 'tool'))),
      groups.get(server).map((tool) => toolEntry(tool, () => this.load())))));
    this.applyFilter();
  }

  applyFilter() {
    const needle = this.filter.value.trim().toLowerCase();
    for (const entry of this.tools.querySelectorAll('.tool')) {
      entry.hidden = needle !== '' && !entry.dataset.search.includes(needle);
    }
    for (const group of this.tools.querySelectorAll('.tool-group')) {
      group.hidden = ![...group.querySelectorAll('.tool')].some((t) => !t.hidden);
    }
  }
}

function rank(order, id) {
  const index = order.indexOf(id);
  return index < 0 ? order.length : index;
}

function toolEntry(tool, reload) {
  const write = tool.requiresConfirmation === true;
  const findings = Array.isArray(tool.findings) ? tool.findings : [];
  const summary = [
    h('code', { class: 'tool-name' }, tool.name),
    ' ',
    pill(write ? 'write' : 'read', write ? 'info' : 'muted'),
    tool.status && tool.status !== 'ok'
      ? [' ', pill(tool.status, STATUS_TONES[tool.status] ?? 'muted', { dataset: { status: tool.status } })]
      : null,
    findings.length > 0
      ? [' ', pill(plural(findings.length, 'finding'), 'warn')]
      : null,
    tool.overridden ? [' ', pill('overridden', 'info')] : null,
    tool.title ? h('span', { class: 'tool-title muted' }, ` ${tool.title}`) : null,
  ];
  const body = h('div', { class: 'tool-body' });
  if (tool.description) body.append(h('p', { class: 'description' }, tool.description));
  if (tool.overridden) {
    // What models see is the operator's text; what the server itself says stays readable.
    const own = tool.overridden;
    body.append(h('div', { class: 'overridden' },
      h('h4', {}, 'The server\'s own words (overridden by the operator)'),
      own.title ? h('p', { class: 'muted' }, h('strong', {}, 'Title: '), own.title) : null,
      own.description ? h('p', { class: 'muted' }, own.description) : null));
  }
  if (STATUS_NOTES[tool.status]) {
    const [label, consequence] = STATUS_NOTES[tool.status];
    body.append(h('p', { class: `note ${tool.status === 'quarantined' ? 'danger' : 'warn'}` },
      h('strong', {}, `${label}: `), tool.statusReason ? `${tool.statusReason}; ` : '',
      consequence));
  }
  if (tool.status === 'quarantined' || tool.status === 'pending') {
    body.append(pinReview(tool, () => setTimeout(reload, 600)));
  }
  body.append(h('dl', { class: 'facts' },
    h('dt', {}, 'Function name'), h('dd', {}, h('code', {}, tool.functionName ?? '')),
    h('dt', {}, 'Kind'), h('dd', {}, write
      ? 'write: each call needs the user\'s approval'
      : 'read'),
    h('dt', {}, 'Fingerprint'), h('dd', {}, h('code', { class: 'fingerprint' }, tool.fingerprint ?? ''))));
  if (findings.length > 0) {
    body.append(h('div', { class: 'findings' },
      h('h4', {}, 'Scan findings'),
      h('ul', {}, findings.map((f) => h('li', { dataset: { severity: f.severity ?? '' } },
        h('code', {}, f.code ?? ''), f.severity ? ` (${f.severity})` : '',
        ` in ${f.location ?? '?'}`, f.detail ? `: ${f.detail}` : '')))));
  }
  body.append(collapsible('Input schema', jsonBlock(tool.inputSchema ?? {}, `Input schema of ${tool.name}`)));
  body.append(tryIt(tool, write));
  const entry = h('details', {
    class: 'tool card',
    dataset: {
      tool: tool.name,
      status: tool.status ?? 'ok',
      search: `${tool.name} ${tool.title ?? ''} ${tool.description ?? ''}`.toLowerCase(),
    },
  }, h('summary', {}, summary), body);
  return entry;
}

function tryIt(tool, write) {
  if (write) {
    return h('p', { class: 'muted' },
      'Write tools are not called from here: ask for it in Chat, where you approve the call.');
  }
  if (tool.status === 'quarantined' || tool.status === 'pending') {
    return h('p', { class: 'muted' }, 'Calls are refused until the tool is reviewed.');
  }
  const form = schemaForm(tool.inputSchema);
  const output = h('div', { class: 'call-output', 'aria-live': 'polite' });
  const button = h('button', { type: 'submit', class: 'primary' }, 'Call');
  const element = h('form', { class: 'try', 'aria-label': `Call ${tool.name}`, novalidate: true },
    h('h4', {}, 'Call this tool'), form.element, h('div', { class: 'actions' }, button), output);
  element.addEventListener('submit', async (event) => {
    event.preventDefault();
    const args = form.read();
    if (!args.ok) return;
    button.disabled = true;
    replace(output, h('p', { class: 'muted' }, 'Calling…'));
    const started = performance.now();
    try {
      const reply = await api('/mcp/tools/call', {
        method: 'POST',
        body: { tool: tool.name, arguments: args.value },
      });
      const took = `${Math.round(performance.now() - started)} ms`;
      if (reply.ok === false) {
        replace(output, failure(reply.code, reply.message));
      } else {
        replace(output, h('p', { class: 'muted small-text' }, `Done in ${took}.`),
          renderResult(reply.data));
      }
    } catch (error) {
      replace(output, failure(error.code, error.message));
    } finally {
      button.disabled = false;
    }
  });
  return element;
}

/** An error with its stable code. */
export function failure(code, message) {
  return h('p', { class: 'note danger', role: 'alert' },
    h('code', { class: 'error-code' }, code ?? 'error'), ' ', message ?? '');
}

// A stdio server's sandbox in a line (shown to administrators, who get it from the API):
// its user, what the kernel enforces, its network and paths beyond the defaults.
function sandboxNote(sandbox) {
  if (!sandbox) return null;
  if (sandbox.mode === 'off') {
    return h('div', { class: 'muted small-text sandbox' }, 'sandbox: off');
  }
  const network = sandbox.network === true ? 'any network'
    : sandbox.network === false ? 'no network' : `TCP ports ${sandbox.network.join(', ')}`;
  const landlock = sandbox.enforced?.landlock ?? 'not yet reported';
  const parts = [`as ${sandbox.user}`, `Landlock ${landlock}`, network];
  if ((sandbox.write ?? []).length > 0) parts.push(`writes ${sandbox.write.join(', ')}`);
  return h('div', { class: 'muted small-text sandbox' }, `sandbox: ${parts.join(' · ')}`);
}
