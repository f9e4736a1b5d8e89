// Connecting the user's own account on a server that wants one (`auth = "oauth"`): the
// authorization server's sign-in opens in a window of its own, cut off from this page (no
// `opener`), and this page asks the gateway until the connection is made. Tokens never reach
// the page: only the gateway holds them.

import { api } from './api.js';
import { h, pill } from './dom.js';

/** How often the gateway is asked whether the connection is made, and for how long. */
const POLL_MS = 1000;
const WAIT_MS = 10 * 60 * 1000;

/** A user's own server's id starts so (`[user_servers]`). */
const USER_PREFIX = 'user-';

const TONES = { connected: 'ok', expired: 'warn', none: 'muted' };
const WORDS = { connected: 'connected', expired: 'expired', none: 'not connected' };

/** The caller's connection to `server` (`{ status, connectedAt, ... }`), or null. */
export async function connection(server) {
  if (server.startsWith(USER_PREFIX)) {
    const { servers = [] } = await api('/me/servers');
    return servers.find((s) => s.server === server)?.authorization ?? null;
  }
  const { servers = [] } = await api('/mcp/servers');
  return servers.find((s) => s.id === server)?.authorization ?? null;
}

/** Where `server`'s connection is made: a user's own server has its own route. */
function connectRoute(server) {
  return server.startsWith(USER_PREFIX)
    ? `/me/servers/${encodeURIComponent(server.slice(USER_PREFIX.length))}/connect`
    : `/mcp/servers/${encodeURIComponent(server)}/connect`;
}

/**
 * Connects the caller's account on `server`; `onStatus(text)` tells what happens. Resolves
 * true once the gateway reports the connection made, false when it was not.
 */
export async function connectAccount(server, onStatus = () => {}) {
  const before = await connection(server);
  const started = await api(connectRoute(server));
  // Opened blank first, its opener cut, then sent on: the sign-in page cannot reach back.
  const popup = window.open('', 'mcpgate-connect', 'popup,width=520,height=720');
  if (!popup) {
    onStatus('The sign-in window was blocked: allow pop-ups for this page and try again.');
    return false;
  }
  popup.opener = null;
  popup.location.href = started.authorizationUrl;
  onStatus('Waiting for you to finish signing in…');
  const until = Date.now() + WAIT_MS;
  while (Date.now() < until) {
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
    const now = await connection(server).catch(() => null);
    if (now?.status === 'connected' && now.connectedAt !== before?.connectedAt) {
      onStatus('Connected.');
      return true;
    }
  }
  onStatus('Signing in took too long: try again.');
  return false;
}

/** Ends the caller's connection to `server`. */
export async function disconnectAccount(server) {
  await api(connectRoute(server), { method: 'DELETE' });
}

/** The connection's state as a pill. */
export function connectionPill(authorization) {
  const status = authorization?.status ?? 'none';
  return pill(WORDS[status] ?? status, TONES[status] ?? 'muted', {
    dataset: { connection: status },
  });
}

/** A Connect button for `server`, with its status line; `done()` runs once connected. */
export function connectButton(server, label, done = () => {}) {
  const button = h('button', { type: 'button', class: 'small' }, label);
  const note = h('span', { class: 'muted small-text', role: 'status' });
  button.addEventListener('click', async () => {
    button.disabled = true;
    try {
      if (await connectAccount(server, (text) => { note.textContent = text; })) done();
    } catch (error) {
      note.textContent = error.message;
    } finally {
      button.disabled = false;
    }
  });
  return [button, ' ', note];
}
