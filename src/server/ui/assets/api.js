// The authenticated API: the token (this tab's session storage only; never in a URL), JSON
// requests with `Authorization: Bearer`, typed errors, and what happens when the gateway
// rejects the token.

const TOKEN_KEY = 'mcpgate.token';
const BASE = '/api/v1';

/** An API failure with the gateway's stable `code` and its message. */
export class ApiError extends Error {
  constructor(status, code, message, body = null) {
    super(message);
    this.name = 'ApiError';
    this.status = status;
    this.code = code;
    this.body = body;
  }
}

let onRejected = () => {};

/** The token, kept for the life of this tab. */
export const session = {
  get token() {
    return sessionStorage.getItem(TOKEN_KEY);
  },
  signIn(token) {
    sessionStorage.setItem(TOKEN_KEY, token);
  },
  signOut() {
    sessionStorage.removeItem(TOKEN_KEY);
  },
  /** `handler(message)` runs when a request comes back 401 (the token stopped working). */
  onRejected(handler) {
    onRejected = handler;
  },
};

/** Headers of every API request. */
export function authHeaders(token = session.token, extra = {}) {
  return { Authorization: `Bearer ${token ?? ''}`, ...extra };
}

/** Sends a request to the API; `body` is sent as JSON. Resolves with the `Response`. */
export async function send(path, { method = 'GET', body, signal, token, accept } = {}) {
  const headers = authHeaders(token ?? session.token, { Accept: accept ?? 'application/json' });
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  try {
    return await fetch(`${BASE}${path}`, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      signal,
      credentials: 'omit',
      cache: 'no-store',
      referrerPolicy: 'no-referrer',
    });
  } catch (error) {
    if (error?.name === 'AbortError') throw error;
    throw new ApiError(0, 'unreachable', `cannot reach the gateway (${error?.message ?? error})`);
  }
}

/** The error a failed response describes. */
export async function errorOf(response) {
  const body = await readJson(response);
  const code = body?.code ?? `http_${response.status}`;
  const message = body?.message ?? (response.statusText || `HTTP ${response.status}`);
  return new ApiError(response.status, code, message, body);
}

/** JSON of an API call; throws `ApiError` on a non-2xx status. `token` overrides the stored one. */
export async function api(path, options = {}) {
  const response = await send(path, options);
  if (!response.ok) {
    const error = await errorOf(response);
    if (response.status === 401 && options.token === undefined) onRejected(error.message);
    throw error;
  }
  return (await readJson(response)) ?? {};
}

/** A 401 was answered: the page treats the token as rejected. */
export function rejected(error) {
  if (error instanceof ApiError && error.status === 401) onRejected(error.message);
}

async function readJson(response) {
  try {
    return await response.json();
  } catch {
    return null;
  }
}
