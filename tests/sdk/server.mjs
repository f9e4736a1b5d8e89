// An MCP server built with the official TypeScript SDK (npm `@modelcontextprotocol/sdk`, from
// the test peers) over Streamable HTTP, behaving as servers built with it do: progress and log
// messages sent on the call's stream right before its result, and sampling and elicitation
// requested with `server.request(...)` inside the tool handler without `relatedRequestId`, so
// they go out on the session's standalone GET stream, not on the call's.
//
// Binds 127.0.0.1 on the port the OS picks and prints `listening <port>`; with `--sse`,
// speaks the legacy HTTP+SSE transport there instead; with `--stdio`, serves one session
// over stdin and stdout. Over HTTP, `test_wait` answers once `POST /release` came, and a call
// of `test_http_status` is answered with the HTTP status it names, as a proxy in front of a
// failing server does; over Streamable HTTP, `POST /forget?status=N[&body=json]` forgets
// every session and answers N for them from then on. Run by tests/it/faithful.rs, which names the test peers' folder
// (target/peers) in MCPGATE_PEERS or as `--peers DIR`.

import { randomUUID } from 'node:crypto';
import { createRequire } from 'node:module';
import path from 'node:path';

const argv = process.argv.slice(2);
const flag = (name) => argv.indexOf(name);
const peers = flag('--peers') >= 0 ? argv[flag('--peers') + 1] : process.env.MCPGATE_PEERS;
if (!peers) throw new Error('MCPGATE_PEERS or --peers names the test peers (tests/it/faithful.rs does)');
const require = createRequire(path.join(path.resolve(peers), 'package.json'));
const { McpServer } = require('@modelcontextprotocol/sdk/server/mcp.js');
const { StreamableHTTPServerTransport } = require('@modelcontextprotocol/sdk/server/streamableHttp.js');
const {
  CreateMessageResultSchema, ElicitResultSchema, isInitializeRequest,
} = require('@modelcontextprotocol/sdk/types.js');
const express = require('express');
const { z } = require('zod');

/** Calls of `test_wait` waiting for `POST /release`. */
const waiting = [];
/** Sessions initialized so far. */
let initialized = 0;
/** How a request naming an unknown session is answered once `/forget` set it: a status with
 * a text body, as a proxy or an older server answers (the SDK's examples: 404 and a JSON-RPC
 * error). */
let unknownSession = null;
/** Whether that answer is a JSON-RPC error naming no request instead, as the SDK's servers
 * answered before they said 404. */
let unknownSessionJson = false;

/** One McpServer per session, as the SDK's examples do. */
function build() {
  const server = new McpServer({ name: 'sdk-faithful', version: '1.0.0' },
    { capabilities: { logging: {} } });

  server.registerTool('test_tool_with_progress', {
    description: 'Reports progress 0, 50 and 100 on the call\'s stream, the last right before the result.',
  }, async (extra) => {
    const token = extra._meta?.progressToken;
    if (token !== undefined) {
      for (const progress of [0, 50, 100]) {
        await extra.sendNotification({
          method: 'notifications/progress',
          params: { progressToken: token, progress, total: 100 },
        });
      }
    }
    return { content: [{ type: 'text', text: 'progress done' }] };
  });

  server.registerTool('test_tool_with_logging', {
    description: 'Logs three messages on the call\'s stream, the last right before the result.',
  }, async (extra) => {
    for (const data of ['Tool execution started', 'Tool execution running', 'Tool execution completed']) {
      await extra.sendNotification({ method: 'notifications/message', params: { level: 'info', data } });
    }
    return { content: [{ type: 'text', text: 'logging done' }] };
  });

  server.registerTool('test_sampling', {
    description: 'Asks the client to sample, unlinked from the call (the standalone GET stream).',
    inputSchema: { prompt: z.string() },
  }, async ({ prompt }) => {
    // No relatedRequestId: the SDK sends this on the session's GET stream.
    const answer = await server.server.request({
      method: 'sampling/createMessage',
      params: { messages: [{ role: 'user', content: { type: 'text', text: prompt } }], maxTokens: 50 },
    }, CreateMessageResultSchema);
    return { content: [{ type: 'text', text: `sampled: ${answer.content?.text ?? ''}` }] };
  });

  server.registerTool('test_elicitation', {
    description: 'Asks the client for a username, unlinked from the call.',
    inputSchema: { message: z.string() },
  }, async ({ message }) => {
    const answer = await server.server.request({
      method: 'elicitation/create',
      params: {
        message,
        requestedSchema: { type: 'object', properties: { username: { type: 'string' } }, required: ['username'] },
      },
    }, ElicitResultSchema);
    return { content: [{ type: 'text', text: `elicited: ${answer.action} ${answer.content?.username ?? ''}` }] };
  });

  server.registerTool('test_wait', {
    description: 'Answers once the test posts to /release.',
  }, async () => {
    await new Promise((resolve) => waiting.push(resolve));
    return { content: [{ type: 'text', text: 'released' }] };
  });

  // Never runs: serveHttp answers its calls with the HTTP status asked for, as a proxy in
  // front of a server does when the server fails.
  server.registerTool('test_http_status', {
    description: 'Answered with HTTP `status` and a text body, before the SDK sees it.',
    inputSchema: { status: z.number().int(), json: z.boolean().optional() },
  }, async () => ({ content: [{ type: 'text', text: 'not reached' }] }));

  return server;
}

/** Answers a call of `test_http_status` with the status it names, and a text body or (with
 * `json`) a JSON-RPC error naming no request, as catch-all error handlers answer; true when
 * it did. */
function failed(req, res) {
  if (req.body?.method !== 'tools/call' || req.body.params?.name !== 'test_http_status') return false;
  const args = req.body.params.arguments ?? {};
  res.status(args.status ?? 500);
  if (args.json) {
    res.json({ jsonrpc: '2.0', error: { code: -32603, message: 'Internal server error' }, id: null });
  } else {
    res.type('text/plain').send('the server failed');
  }
  return true;
}

/** `GET /sessions`: how many sessions are open and were opened (how a test sees sessions
 * opened and closed) and how many `test_wait` calls wait; `POST /release` ends them. */
function counters(app, transports) {
  app.get('/sessions', (_req, res) => res.json({ open: transports.size, initialized, waiting: waiting.length }));
  app.post('/release', (_req, res) => {
    for (const resolve of waiting.splice(0)) resolve();
    res.json({ released: true });
  });
}

if (flag('--stdio') >= 0) {
  const { StdioServerTransport } = require('@modelcontextprotocol/sdk/server/stdio.js');
  await build().connect(new StdioServerTransport());
} else if (flag('--sse') >= 0) {
  serveSse();
} else {
  serveHttp();
}

/** The legacy HTTP+SSE transport (2024-11-05): `GET /sse` opens a session, whose messages
 * are posted to `/messages?sessionId=...`. */
function serveSse() {
  const { SSEServerTransport } = require('@modelcontextprotocol/sdk/server/sse.js');
  const transports = new Map();
  const app = express();
  app.get('/sse', async (_req, res) => {
    const transport = new SSEServerTransport('/messages', res);
    initialized += 1;
    transports.set(transport.sessionId, transport);
    res.on('close', () => transports.delete(transport.sessionId));
    await build().connect(transport);
  });
  app.post('/messages', express.json({ limit: '4mb' }), async (req, res) => {
    if (failed(req, res)) return;
    const transport = transports.get(req.query.sessionId);
    if (!transport) {
      res.status(404).send('Session not found');
      return;
    }
    await transport.handlePostMessage(req, res, req.body);
  });
  counters(app, transports);
  const listener = app.listen(0, '127.0.0.1', () => {
    console.log(`listening ${listener.address().port}`);
  });
}

function serveHttp() {
const transports = new Map();
const app = express();
app.use(express.json({ limit: '4mb' }));

app.post('/mcp', async (req, res) => {
  if (failed(req, res)) return;
  const id = req.headers['mcp-session-id'];
  let transport = id ? transports.get(id) : undefined;
  if (!transport) {
    if (id && unknownSession && unknownSessionJson) {
      res.status(unknownSession).json({ jsonrpc: '2.0', error: { code: -32000, message: 'Bad Request: No valid session ID provided' }, id: null });
      return;
    }
    if (id && unknownSession) {
      res.status(unknownSession).type('text/plain').send('Bad Request: no such session');
      return;
    }
    if (id || !isInitializeRequest(req.body)) {
      res.status(404).json({ jsonrpc: '2.0', error: { code: -32001, message: 'Session not found' }, id: null });
      return;
    }
    transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      onsessioninitialized: (sessionId) => {
        initialized += 1;
        transports.set(sessionId, transport);
      },
    });
    transport.onclose = () => {
      if (transport.sessionId) transports.delete(transport.sessionId);
    };
    await build().connect(transport);
  }
  await transport.handleRequest(req, res, req.body);
});

const bySession = async (req, res) => {
  const transport = transports.get(req.headers['mcp-session-id']);
  if (!transport) {
    res.status(unknownSession ?? 404).send('Session not found');
    return;
  }
  await transport.handleRequest(req, res);
};
app.get('/mcp', bySession);
app.delete('/mcp', bySession);

counters(app, transports);
/** `POST /forget?status=N[&body=json]`: forgets every session, as a restarted server does,
 * and answers requests naming one with N and a text body (or a JSON-RPC error naming no
 * request) from then on. */
app.post('/forget', (req, res) => {
  unknownSession = Number(req.query.status ?? 404);
  unknownSessionJson = req.query.body === 'json';
  transports.clear();
  res.json({ forgotten: true });
});

const listener = app.listen(0, '127.0.0.1', () => {
  console.log(`listening ${listener.address().port}`);
});
for (const signal of ['SIGTERM', 'SIGINT']) {
  process.on(signal, () => {
    listener.close();
    process.exit(0);
  });
}
}
