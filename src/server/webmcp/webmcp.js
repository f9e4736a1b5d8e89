// mcpgate's WebMCP bridge, for pages: register tools that run in this page, and mcpgate's
// callers (its REST API, its MCP endpoint, its chat) call them through the gateway's gate.
//
//   import { connect } from "https://gateway.example.com/webmcp.js";
//   const bridge = connect({ gateway: "https://gateway.example.com", clientId: "editor",
//                            token: async () => (await fetch("/my-token")).text() });
//   bridge.registerTool({ name, title, description, inputSchema,
//                         annotations: { readOnlyHint: true }, execute }, { signal });
//
// The tool shape is the W3C WebMCP draft's (`document.modelContext.registerTool`). `token`
// is a short-lived JWT the page's own backend obtained for its user (a string, or a function
// returning one, called again on each reconnection). No dependencies, no build step.

const SUBPROTOCOL = "mcpgate.webmcp.v1";
const TOKEN_PREFIX = "mcpgate.bearer.";
const MAX_BACKOFF_MS = 30000;

/** A tool's return value as an MCP CallToolResult. */
export function toResult(value) {
  if (value && typeof value === "object" && Array.isArray(value.content)) {
    return value;
  }
  if (typeof value === "string") {
    return { content: [{ type: "text", text: value }] };
  }
  if (value === undefined) {
    return { content: [] };
  }
  const result = { content: [{ type: "text", text: JSON.stringify(value) }] };
  if (value !== null && typeof value === "object" && !Array.isArray(value)) {
    result.structuredContent = value;
  }
  return result;
}

export function connect({ gateway, clientId, token, log = console }) {
  const tools = new Map();
  let socket = null;
  let accepted = false;
  let backoff = 500;
  let closed = false;
  let timer = null;
  const running = new Map();

  const send = (message) => {
    if (socket && socket.readyState === WebSocket.OPEN) {
      socket.send(JSON.stringify(message));
    }
  };
  const definitions = () =>
    [...tools.values()].map(({ name, title, description, inputSchema, annotations }) => ({
      name, title, description, inputSchema, annotations,
    }));
  const announce = (type) => {
    if (accepted) send({ type, tools: definitions() });
  };

  async function run(callId, name, args) {
    const tool = tools.get(name);
    let result;
    try {
      if (!tool) throw new Error(`no tool ${name} on this page`);
      result = toResult(await tool.execute(args ?? {}));
    } catch (error) {
      result = { content: [{ type: "text", text: String(error?.message ?? error) }], isError: true };
    }
    if (running.delete(callId)) send({ type: "result", callId, result });
  }

  function onMessage(event) {
    let message;
    try {
      message = JSON.parse(event.data);
    } catch {
      return;
    }
    switch (message.type) {
      case "accepted":
        accepted = true;
        backoff = 500;
        log.info(`mcpgate WebMCP: connected as ${message.server}`);
        announce("tools");
        break;
      case "rejected":
        log.error(`mcpgate WebMCP: rejected (${message.reason}): ${message.message}`);
        break;
      case "invoke":
        running.set(message.callId, true);
        run(message.callId, message.tool, message.arguments);
        break;
      case "cancel":
        running.delete(message.callId);
        break;
      case "ping":
        send({ type: "pong" });
        break;
      case "error":
        log.warn(`mcpgate WebMCP: ${message.code}: ${message.message}`);
        break;
    }
  }

  async function open() {
    if (closed) return;
    let bearer;
    try {
      bearer = typeof token === "function" ? await token() : token;
    } catch (error) {
      log.error(`mcpgate WebMCP: not connected: no token (${error})`);
      return retry();
    }
    const url = new URL(`/api/v1/webmcp/bridge/${encodeURIComponent(clientId)}`, gateway);
    url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
    socket = new WebSocket(url, [SUBPROTOCOL, TOKEN_PREFIX + bearer]);
    socket.onopen = () => send({ type: "hello", version: 1 });
    socket.onmessage = onMessage;
    socket.onclose = (event) => {
      accepted = false;
      running.clear();
      if (!closed) {
        log.warn(`mcpgate WebMCP: not connected (${event.code} ${event.reason}); retrying`);
        retry();
      }
    };
  }

  function retry() {
    clearTimeout(timer);
    timer = setTimeout(open, backoff);
    backoff = Math.min(backoff * 2, MAX_BACKOFF_MS);
  }

  open();

  return {
    /** Registers a tool; aborting `signal` unregisters it. */
    registerTool(tool, { signal } = {}) {
      if (typeof tool?.execute !== "function") throw new TypeError("a tool needs execute()");
      tools.set(tool.name, tool);
      announce("tools_changed");
      signal?.addEventListener("abort", () => {
        if (tools.get(tool.name) === tool) {
          tools.delete(tool.name);
          announce("tools_changed");
        }
      });
    },
    unregisterTool(name) {
      if (tools.delete(name)) announce("tools_changed");
    },
    get connected() {
      return accepted;
    },
    close() {
      closed = true;
      clearTimeout(timer);
      socket?.close(1000, "closed by the page");
    },
  };
}
