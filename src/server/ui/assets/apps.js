// MCP Apps in the chat (the `io.modelcontextprotocol/ui` extension): a call of a tool that
// has a view renders the app in its card. The app runs in a frame of the sandbox's origin,
// never the page's (so it cannot reach the page, its token or its API), behind the sandbox
// proxy, which relays its JSON-RPC messages. This side is the host: it answers
// `ui/initialize`, delivers the call's input and result, and sends what the app asks of the
// gateway (`tools/call`, `resources/read`) to /api/v1/apps as the signed-in user, where the
// gate keeps the app to its own server's tools meant for apps. A write the app asks for
// waits for the user's approval here, as the model's do.

import { api, errorOf, send } from './api.js';
import { h, jsonBlock } from './dom.js';

/** The MCP Apps protocol version this host speaks. */
const PROTOCOL = '2026-01-26';
const RESERVED = 'ui/notifications/sandbox-';
/** Bounds of a frame's height, whatever the app asks for. */
const MIN_HEIGHT = 48;
const MAX_HEIGHT = 2400;
/** How long teardown waits for the app's answer before removing it anyway. */
const TEARDOWN_WAIT_MS = 1000;
/** The spec's permissions, as Permissions Policy features. */
const FEATURES = {
  camera: 'camera', microphone: 'microphone', geolocation: 'geolocation',
  clipboardWrite: 'clipboard-write',
};
/** Notes kept under an app (links it offered, what it asked). */
const MAX_NOTICES = 5;
/** Characters of an app's model context sent (the gateway takes at most 8000). */
const MAX_CONTEXT_CHARS = 8000;
/** JSON-RPC error codes. */
const METHOD_NOT_FOUND = -32601;
const INVALID_PARAMS = -32602;
const REFUSED = -32000;

let sandboxOrigin = null;

/** The sandbox's origin (`null`: the gateway renders no apps), asked once. */
function sandbox() {
  sandboxOrigin ??= api('/apps').then((r) => r.sandbox ?? null, () => null);
  return sandboxOrigin;
}

/** Every app on the page, so a new conversation tears them all down. */
const live = new Set();

/**
 * What the apps in view asked to tell the model (`ui/update-model-context`), the latest of
 * each: sent with the next turns, where the gateway fences it as data.
 */
export function appContexts() {
  return [...live].filter((app) => app.modelContext).map((app) => ({
    tool: app.tool, text: app.modelContext,
  }));
}

/** Tears down every app (a new conversation, sign-out). */
export function teardownApps() {
  for (const app of [...live]) app.teardown();
}

/** A tool result as the chat's events carry it (`data` of the gateway's shape), as MCP's. */
export function callToolResult(data) {
  const content = (data?.content ?? []).map((part) => {
    switch (part.type) {
      case 'resource':
        return { type: 'resource', resource: { uri: part.uri, mimeType: part.mimeType,
          ...(part.blob !== undefined ? { blob: part.blob } : { text: part.text ?? '' }) } };
      case 'omitted':
        return { type: 'text', text: `[${part.kind} of ${part.bytes} bytes left out: ${part.reason}]` };
      default:
        return part;
    }
  });
  const result = { content };
  if (data?.structuredContent !== undefined) result.structuredContent = data.structuredContent;
  return result;
}

/** One app in one tool card. */
export class AppFrame {
  /** `call`: `{ view, tool, server, arguments }` of the chat's `tool_call` event. */
  constructor(call) {
    this.view = call.view;
    this.tool = call.tool;
    this.arguments = call.arguments ?? {};
    this.initialized = false;
    this.result = null;
    this.ended = false;
    this.nextId = 1;
    this.waiting = new Map();
    this.status = h('p', { class: 'app-status muted', role: 'status' }, 'Loading the app…');
    this.notices = h('div', { class: 'app-notices' });
    this.element = h('section', { class: 'app-view', 'aria-label': `App of ${this.tool}` },
      this.status, this.notices);
    this.onMessage = (event) => this.receive(event);
    live.add(this);
    this.start().catch((error) => this.fail(error?.message ?? String(error)));
  }

  async start() {
    const origin = await sandbox();
    if (!origin) {
      this.fail('this gateway renders no apps (no sandbox is configured)');
      return;
    }
    const view = await api(`/apps/view?uri=${encodeURIComponent(this.view)}`);
    const html = typeof view.html === 'string' ? view.html : decodeBlob(view.blob);
    if (this.ended) return;
    this.origin = origin;
    this.resource = { html, csp: view.csp ?? undefined, permissions: view.permissions ?? undefined };
    const query = new URLSearchParams({ host: location.origin });
    if (view.csp) query.set('csp', JSON.stringify(view.csp));
    const allowed = Object.keys(view.permissions ?? {})
      .filter((name) => Object.hasOwn(FEATURES, name)).map((name) => FEATURES[name]);
    this.frame = h('iframe', {
      class: `app-frame${view.prefersBorder === false ? '' : ' bordered'}`,
      title: `App of ${this.tool}`,
      sandbox: 'allow-scripts allow-same-origin',
      allow: allowed.length ? allowed.join('; ') : null,
      referrerpolicy: 'no-referrer',
      src: `${origin}/sandbox?${query}`,
    });
    window.addEventListener('message', this.onMessage);
    this.element.append(this.frame);
  }

  /** The tool call's result arrived (`data` of the chat's `tool_result`). */
  showResult(data) {
    this.result = callToolResult(data);
    if (this.initialized) this.notify('ui/notifications/tool-result', this.result);
  }

  /** The tool call failed or was cancelled. */
  cancelled(reason) {
    this.cancelReason = reason;
    if (this.initialized) this.notify('ui/notifications/tool-cancelled', { reason });
  }

  /** Asks the app to tear down, then removes it. */
  async teardown() {
    if (this.ended) return;
    this.ended = true;
    live.delete(this);
    if (this.initialized) {
      await Promise.race([
        this.request('ui/resource-teardown', {}),
        new Promise((resolve) => { setTimeout(resolve, TEARDOWN_WAIT_MS); }),
      ]).catch(() => {});
    }
    window.removeEventListener('message', this.onMessage);
    this.frame?.remove();
  }

  fail(message) {
    this.status.hidden = false;
    this.status.className = 'app-status note danger';
    this.status.textContent = `The app cannot be shown: ${message}`;
  }

  /** A message from the sandbox: only from this frame's window and the sandbox's origin. */
  receive(event) {
    if (!this.frame || event.source !== this.frame.contentWindow) return;
    if (event.origin !== this.origin) return;
    const message = event.data;
    if (message?.jsonrpc !== '2.0') return;
    if (message.method === `${RESERVED}proxy-ready`) {
      this.post({ jsonrpc: '2.0', method: `${RESERVED}resource-ready`, params: this.resource });
      return;
    }
    if (typeof message.method === 'string') {
      if (message.id === undefined) this.notified(message.method, message.params ?? {});
      else this.answer(message.id, message.method, message.params ?? {});
      return;
    }
    const waiting = this.waiting.get(message.id);
    if (waiting) {
      this.waiting.delete(message.id);
      if (message.error) waiting.reject(new Error(message.error.message ?? 'error'));
      else waiting.resolve(message.result);
    }
  }

  post(message) {
    this.frame?.contentWindow?.postMessage(message, this.origin);
  }

  notify(method, params) {
    this.post({ jsonrpc: '2.0', method, params });
  }

  request(method, params) {
    const id = `host-${this.nextId++}`;
    return new Promise((resolve, reject) => {
      this.waiting.set(id, { resolve, reject });
      this.post({ jsonrpc: '2.0', id, method, params });
    });
  }

  notified(method, params) {
    switch (method) {
      case 'ui/notifications/initialized':
        this.initialized = true;
        this.status.hidden = true;
        this.notify('ui/notifications/tool-input', { arguments: this.arguments });
        if (this.result) this.notify('ui/notifications/tool-result', this.result);
        else if (this.cancelReason) {
          this.notify('ui/notifications/tool-cancelled', { reason: this.cancelReason });
        }
        break;
      case 'ui/notifications/size-changed': {
        const height = Number(params.height);
        if (Number.isFinite(height) && this.frame) {
          const bounded = Math.min(Math.max(Math.ceil(height), MIN_HEIGHT), MAX_HEIGHT);
          this.frame.style.height = `${bounded}px`;
        }
        break;
      }
      case 'ui/notifications/request-teardown':
        this.teardown();
        break;
      default:
        // Log messages and anything else an app notifies: nothing to do.
        break;
    }
  }

  async answer(id, method, params) {
    let reply;
    try {
      reply = { result: await this.handle(method, params) };
    } catch (error) {
      reply = { error: { code: error.rpcCode ?? REFUSED, message: error.message ?? String(error) } };
    }
    if (!this.ended) this.post({ jsonrpc: '2.0', id, ...reply });
  }

  async handle(method, params) {
    switch (method) {
      case 'ui/initialize':
        return this.initialize(params);
      case 'ping':
        return {};
      case 'tools/call':
        return this.callTool(params);
      case 'resources/read':
        return this.apiCall('/apps/read', { view: this.view, uri: String(params.uri ?? '') });
      case 'ui/open-link':
        this.offerLink(params.url);
        return {};
      case 'ui/message':
        this.offerMessage(params);
        return {};
      case 'ui/update-model-context':
        this.modelContext = contextText(params);
        this.notice('The app updated what it tells the model with your next message.');
        return {};
      case 'ui/request-display-mode':
        return { mode: 'inline' };
      default:
        throw rpcError(METHOD_NOT_FOUND, `${method} is not supported by this host`);
    }
  }

  initialize(params) {
    const dark = window.matchMedia?.('(prefers-color-scheme: dark)').matches;
    return {
      protocolVersion: params.protocolVersion === PROTOCOL ? params.protocolVersion : PROTOCOL,
      hostInfo: { name: 'mcpgate', version: '1' },
      hostCapabilities: {
        openLinks: {},
        serverTools: {},
        serverResources: {},
        logging: {},
        message: { text: {} },
        updateModelContext: { text: {} },
      },
      hostContext: {
        toolInfo: { tool: { name: this.tool, inputSchema: { type: 'object' } } },
        theme: dark ? 'dark' : 'light',
        displayMode: 'inline',
        availableDisplayModes: ['inline'],
        containerDimensions: { maxHeight: MAX_HEIGHT },
        locale: navigator.language,
        timeZone: Intl.DateTimeFormat().resolvedOptions().timeZone,
        platform: 'web',
      },
    };
  }

  /** The app's own call: through the gate; a write first waits for the user's approval. */
  async callTool(params) {
    if (typeof params.name !== 'string') throw rpcError(INVALID_PARAMS, 'name is required');
    const body = { view: this.view, tool: params.name, arguments: params.arguments ?? {} };
    const response = await send('/apps/call', { method: 'POST', body });
    if (response.ok) return response.json();
    const error = await errorOf(response);
    if (error.code !== 'confirmation_required') throw rpcError(REFUSED, `${error.code}: ${error.message}`);
    const id = error.body?.confirmationId;
    const token = await this.approval(params.name, body.arguments, id);
    return this.apiCall('/apps/call', { ...body, confirmationToken: token });
  }

  /** Asks the user to approve the app's write; resolves with the token, rejects on deny. */
  approval(tool, args, id) {
    return new Promise((resolve, reject) => {
      const status = h('p', { class: 'decision-status', role: 'status' });
      const decide = async (decision) => {
        approve.disabled = true;
        deny.disabled = true;
        try {
          const path = `/mcp/confirmations/${encodeURIComponent(id)}/${decision}`;
          const answer = await api(path, { method: 'POST' });
          box.remove();
          if (decision === 'approve') resolve(answer.confirmationToken);
          else reject(rpcError(REFUSED, 'denied_by_user: the user denied the call'));
        } catch (error) {
          status.textContent = `Not sent: ${error.message}`;
          approve.disabled = false;
          deny.disabled = false;
        }
      };
      const approve = h('button', { type: 'button', class: 'primary approve', onclick: () => decide('approve') }, 'Approve');
      const deny = h('button', { type: 'button', class: 'danger deny', onclick: () => decide('deny') }, 'Deny');
      const box = h('section', { class: 'approval app-approval', role: 'group', 'aria-label': 'The app asks to run a tool' },
        h('h4', {}, 'The app asks to run a tool'),
        h('p', {}, 'Run ', h('code', {}, tool), ' with these arguments?'),
        jsonBlock(args, 'Arguments the app sends'),
        h('div', { class: 'actions' }, approve, deny), status);
      this.notices.append(box);
      approve.focus({ preventScroll: true });
    });
  }

  async apiCall(path, body) {
    const response = await send(path, { method: 'POST', body });
    if (!response.ok) {
      const error = await errorOf(response);
      throw rpcError(REFUSED, `${error.code}: ${error.message}`);
    }
    return response.json();
  }

  /** A link the app wants opened: shown, opened only when the user clicks it. */
  offerLink(url) {
    let parsed;
    try {
      parsed = new URL(String(url));
    } catch {
      throw rpcError(INVALID_PARAMS, 'url is not a URL');
    }
    if (!['http:', 'https:'].includes(parsed.protocol)) {
      throw rpcError(INVALID_PARAMS, 'only http and https links open');
    }
    this.notice('The app offers a link: ', h('a', {
      href: parsed.href, target: '_blank', rel: 'noopener noreferrer nofollow', class: 'app-link',
    }, parsed.href));
  }

  /** A message the app proposes: put in the composer for the user to send, or not. */
  offerMessage(params) {
    const parts = Array.isArray(params.content) ? params.content : [params.content];
    const text = parts.filter((p) => p?.type === 'text').map((p) => p.text).join('\n');
    if (!text) throw rpcError(INVALID_PARAMS, 'only text messages are offered');
    document.dispatchEvent(new CustomEvent('mcpgate:app-message', { detail: text }));
    this.notice('The app proposed a message: it is in the composer, to send or not.');
  }

  /** Says something about the app under it; the latest few stay. */
  notice(...children) {
    this.notices.append(h('p', { class: 'app-notice note' }, ...children));
    const shown = this.notices.querySelectorAll('.app-notice');
    if (shown.length > MAX_NOTICES) shown[0].remove();
  }
}

/** An app's model context as text: its text parts, then its structured content as JSON. */
function contextText(params) {
  const parts = (Array.isArray(params.content) ? params.content : [])
    .filter((p) => p?.type === 'text' && typeof p.text === 'string').map((p) => p.text);
  if (params.structuredContent !== undefined) parts.push(JSON.stringify(params.structuredContent));
  return parts.join('\n').slice(0, MAX_CONTEXT_CHARS) || null;
}

function rpcError(code, message) {
  const error = new Error(message);
  error.rpcCode = code;
  return error;
}

/** A base64 view body as text. */
function decodeBlob(blob) {
  if (typeof blob !== 'string') throw new Error('the view has no HTML');
  const bytes = Uint8Array.from(atob(blob), (c) => c.charCodeAt(0));
  return new TextDecoder().decode(bytes);
}
