// The chat: a conversation with a model that uses the gateway's tools. Each turn streams
// from `POST /api/v1/chat` (server-sent events read from fetch); text streams as plain text
// until the `final` event brings the answer rendered and sanitized by the gateway, which is
// the only markup this page ever inserts.

import { ApiError, api, errorOf, rejected, send, session } from './api.js';
import { appContexts, teardownApps } from './apps.js';
import { h, plural, replace, say } from './dom.js';
import { MyServers } from './my_servers.js';
import { sseEvents } from './sse.js';
import { ToolCard } from './tool_card.js';

const SESSION_KEY = 'mcpgate.chat-session';
/** The servers a conversation leaves out, by session: the toggles are remembered with it. */
const LEFT_OUT_KEY = 'mcpgate.chat-left-out';

/** Characters of a tool's definition per token, roughly, for the size shown per server. */
const CHARS_PER_TOKEN = 4;

/** How long Stop waits for the gateway to end the turn before dropping the stream. */
const STOP_GRACE_MS = 10_000;

export class Chat {
  constructor(root) {
    this.root = root;
    this.conversation = root.querySelector('#conversation');
    this.status = root.querySelector('#chat-status');
    this.form = root.querySelector('#composer');
    this.prompt = root.querySelector('#prompt');
    this.sendButton = root.querySelector('#send');
    this.stopButton = root.querySelector('#stop');
    this.approvalsBar = root.querySelector('#approvals-bar');
    this.serverBox = root.querySelector('#chat-servers');
    this.serverList = root.querySelector('.chat-server-list');
    this.modelPicker = root.querySelector('#model-picker');
    this.modelSelect = root.querySelector('#model');
    this.myServers = new MyServers(root.querySelector('#my-servers'), () => this.loadServers());
    this.messages = [];
    this.turn = null;
    this.form.addEventListener('submit', (event) => {
      event.preventDefault();
      this.submit();
    });
    this.prompt.addEventListener('keydown', (event) => {
      if (event.key === 'Enter' && !event.shiftKey && !event.isComposing) {
        event.preventDefault();
        this.form.requestSubmit();
      }
    });
    this.stopButton.addEventListener('click', () => this.stop());
    root.querySelector('#new-chat').addEventListener('click', () => this.reset());
    // An app proposes the next message: it waits in the composer for the user.
    document.addEventListener('mcpgate:app-message', (event) => {
      if (typeof event.detail !== 'string') return;
      this.prompt.value = event.detail;
      this.prompt.focus({ preventScroll: true });
    });
  }

  show() {
    this.prompt.focus();
    this.checkModel();
    this.loadServers();
    this.myServers.load();
  }

  /**
   * The servers whose tools the model may be offered, as toggles with each one's tool count
   * and the size of its tool definitions in tokens (what every request to the model carries).
   */
  async loadServers() {
    let tools;
    try {
      ({ tools = [] } = await api('/mcp/tools'));
    } catch (error) {
      rejected(error);
      return;
    }
    const servers = new Map();
    for (const tool of tools) {
      if (tool.status !== 'ok' && tool.status !== 'stale') continue;
      const entry = servers.get(tool.server) ?? { tools: 0, chars: 0 };
      entry.tools += 1;
      entry.chars += JSON.stringify({
        name: tool.functionName, description: tool.description, parameters: tool.inputSchema,
      }).length;
      servers.set(tool.server, entry);
    }
    const leftOut = this.leftOut();
    const rows = [...servers.keys()].sort().map((id) => {
      const { tools: count, chars } = servers.get(id);
      const tokens = Math.round(chars / CHARS_PER_TOKEN);
      const box = h('input', { type: 'checkbox', value: id, checked: !leftOut.includes(id) });
      box.addEventListener('change', () => this.rememberLeftOut());
      return h('label', { class: 'chat-server', 'data-server': id }, box,
        h('span', { class: 'name' }, id),
        h('span', { class: 'muted' },
          ` ${plural(count, 'tool')}, ~${tokens.toLocaleString('en')} tokens`));
    });
    replace(this.serverList, ...rows);
    this.serverBox.hidden = rows.length < 2;
  }

  /** The servers this conversation leaves out (remembered for its session, if it has one). */
  leftOut() {
    const id = sessionStorage.getItem(SESSION_KEY);
    if (!id) return [];
    try {
      const all = JSON.parse(sessionStorage.getItem(LEFT_OUT_KEY) ?? '{}');
      return Array.isArray(all[id]) ? all[id] : [];
    } catch {
      return [];
    }
  }

  rememberLeftOut() {
    const out = [...this.serverList.querySelectorAll('input[type=checkbox]')]
      .filter((box) => !box.checked).map((box) => box.value);
    sessionStorage.setItem(LEFT_OUT_KEY, JSON.stringify({ [this.session]: out }));
  }

  /** The servers to offer: absent when none is left out (every server, new ones too). */
  selectedServers() {
    const boxes = [...this.serverList.querySelectorAll('input[type=checkbox]')];
    if (boxes.every((box) => box.checked)) return undefined;
    return boxes.filter((box) => box.checked).map((box) => box.value);
  }

  /**
   * Asks which models the chat may talk to: several, a picker (the choice kept while the
   * model stays offered); none, a note before the first question on how to set one up (the
   * catalog and its forms work without one).
   */
  async checkModel() {
    let model;
    let models;
    try {
      ({ model, models = [] } = await api('/chat'));
    } catch (error) {
      rejected(error);
      return;
    }
    const chosen = this.modelSelect.value;
    replace(this.modelSelect, models.map((m) => h('option', { value: m.name },
      m.tools ? m.name : `${m.name} (no tools)`)));
    this.modelSelect.value = models.some((m) => m.name === chosen) ? chosen : (model ?? '');
    this.modelPicker.hidden = models.length < 2;
    const missing = model === null;
    this.prompt.disabled = missing;
    this.sendButton.disabled = missing;
    const notice = this.conversation.querySelector('.no-model');
    if (!missing) {
      if (notice) replace(this.conversation, emptyNote());
      return;
    }
    if (!notice && this.messages.length === 0 && !this.turn) {
      replace(this.conversation, noModelNote(() => this.checkModel()));
    }
  }

  /** Forgets the conversation (and stops a running turn). */
  reset() {
    this.turn?.controller.abort();
    teardownApps();
    this.messages = [];
    sessionStorage.removeItem(SESSION_KEY);
    sessionStorage.removeItem(LEFT_OUT_KEY);
    for (const box of this.serverList.querySelectorAll('input[type=checkbox]')) box.checked = true;
    replace(this.conversation, emptyNote());
    say(this.status, '');
    this.updateApprovals();
    if (session.token) this.checkModel();
  }

  /** This conversation's session id: approvals bind to it. */
  get session() {
    let id = sessionStorage.getItem(SESSION_KEY);
    if (!id) {
      const bytes = crypto.getRandomValues(new Uint8Array(16));
      id = `page-${[...bytes].map((b) => b.toString(16).padStart(2, '0')).join('')}`;
      sessionStorage.setItem(SESSION_KEY, id);
    }
    return id;
  }

  submit() {
    const text = this.prompt.value.trim();
    if (!text || this.turn) return;
    this.prompt.value = '';
    this.run(text);
  }

  async run(text) {
    this.conversation.querySelector('.empty')?.remove();
    this.updateApprovals();
    this.messages.push({ role: 'user', content: text });
    this.conversation.append(h('article', { class: 'msg user', 'aria-label': 'You' },
      h('div', { class: 'bubble' }, text)));
    const turn = new Turn(this);
    this.turn = turn;
    this.setRunning(true);
    say(this.status, 'The model is thinking…');
    try {
      const response = await send('/chat', {
        method: 'POST',
        accept: 'text/event-stream',
        signal: turn.controller.signal,
        body: {
          messages: this.messages,
          session: this.session,
          timeZone: Intl.DateTimeFormat().resolvedOptions().timeZone,
          appContext: appContexts(),
          servers: this.selectedServers(),
          model: this.modelPicker.hidden ? undefined : this.modelSelect.value,
        },
      });
      if (!response.ok) {
        // Refused before the turn started (no model, too many turns): the question was not
        // asked, so it is not part of the conversation sent next time.
        this.messages.pop();
        throw await errorOf(response);
      }
      for await (const { event, data } of sseEvents(response.body)) {
        const following = nearBottom();
        turn.handle(typeof data === 'object' && data?.type ? data.type : event, data);
        if (following) window.scrollTo({ top: document.body.scrollHeight });
        if (turn.done) break;
      }
    } catch (error) {
      if (error?.name !== 'AbortError') {
        rejected(error);
        turn.fail(error instanceof ApiError ? error.code : 'stream_failed', error.message);
      }
    } finally {
      turn.end();
      if (turn.answerText) this.messages.push({ role: 'assistant', content: turn.answerText });
      this.turn = null;
      this.setRunning(false);
      this.updateApprovals();
    }
  }

  /** Asks the gateway to cancel the turn (and its running tools). */
  async stop() {
    const turn = this.turn;
    if (!turn || turn.stopping) return;
    turn.stopping = true;
    this.stopButton.disabled = true;
    say(this.status, 'Stopping…');
    const drop = setTimeout(() => turn.controller.abort(), STOP_GRACE_MS);
    turn.controller.signal.addEventListener('abort', () => clearTimeout(drop));
    try {
      const response = await send(`/chat/${encodeURIComponent(this.session)}/cancel`, {
        method: 'POST',
      });
      if (!response.ok) throw await errorOf(response);
    } catch {
      turn.controller.abort();
    }
  }

  /** Sends an approval decision for `callId`. */
  async decide(callId, decision) {
    const path = `/chat/${encodeURIComponent(this.session)}/approvals/${encodeURIComponent(callId)}`;
    const response = await send(path, { method: 'POST', body: { decision } });
    if (!response.ok) {
      const error = await errorOf(response);
      rejected(error);
      throw error;
    }
  }

  setRunning(running) {
    this.sendButton.disabled = running;
    this.stopButton.hidden = !running;
    this.stopButton.disabled = false;
    this.root.classList.toggle('running', running);
  }

  /** The bar listing every approval that waits, each a button to its card. */
  updateApprovals() {
    const waiting = this.turn ? [...this.turn.cards.values()].filter((c) => c.waiting) : [];
    this.approvalsBar.hidden = waiting.length === 0;
    if (waiting.length === 0) {
      this.approvalsBar.replaceChildren();
      return;
    }
    replace(this.approvalsBar,
      h('span', {}, waiting.length === 1
        ? '1 call waits for your approval:'
        : `${waiting.length} calls wait for your approval:`),
      waiting.map((card) => h('button', {
        type: 'button', class: 'small ghost', onclick: () => card.focusApproval(),
      }, card.label)));
  }
}

/** One request and everything the model and the tools do until `done`. */
class Turn {
  constructor(chat) {
    this.chat = chat;
    this.controller = new AbortController();
    this.cards = new Map();
    // Images are named in the order they arrive, as the model is told to call them.
    this.images = 0;
    this.text = '';
    this.answerText = '';
    this.done = false;
    this.reasoning = null;
    this.tools = h('div', { class: 'tools' });
    // The conversation is a live log; busy until the answer is complete.
    this.answer = h('div', { class: 'answer', 'aria-busy': 'true' });
    this.meta = h('p', { class: 'turn-meta muted' });
    this.element = h('article', { class: 'msg assistant', 'aria-label': 'Assistant' },
      this.tools, this.answer, this.meta);
    chat.conversation.append(this.element);
    this.ticker = setInterval(() => this.cards.forEach((c) => c.open && c.tick()), 250);
  }

  handle(kind, event) {
    const card = event?.callId ? this.cards.get(event.callId) : undefined;
    switch (kind) {
      case 'round_start':
        if (event.round > 0) say(this.chat.status, 'The model is reading the tool results…');
        break;
      case 'text_delta':
        this.text += event.text ?? '';
        this.answer.textContent = this.text;
        say(this.chat.status, 'The model is answering…');
        break;
      case 'reasoning_delta':
        this.reason(event.text ?? '');
        break;
      case 'tool_call': {
        const created = new ToolCard(event, (id, decision) => this.chat.decide(id, decision));
        created.onDecided = (decision) => {
          say(this.chat.status, `${created.label}: ${decision === 'approve' ? 'approved' : 'denied'}.`);
          this.chat.updateApprovals();
        };
        this.cards.set(event.callId, created);
        this.tools.append(created.element);
        say(this.chat.status, `Calling ${event.tool}…`);
        break;
      }
      case 'tool_eta':
        card?.showEta(event.expectedMs);
        break;
      case 'tool_progress':
        card?.showProgress(event);
        break;
      case 'approval_required':
        card?.askApproval(event);
        say(this.chat.status, `${event.tool} waits for your approval.`);
        this.chat.updateApprovals();
        break;
      case 'tool_result':
        card?.showResult(event, () => {
          this.images += 1;
          return `image_${this.images}`;
        });
        this.chat.updateApprovals();
        break;
      case 'tool_error':
        card?.showError(event);
        this.chat.updateApprovals();
        break;
      case 'session':
        // Which model answers; another than the one chosen when that one has no tools.
        this.model = event.routedFrom
          ? `${event.model} (${event.routedFrom} has no tools)`
          : event.model;
        this.meta.textContent = this.model ?? '';
        break;
      case 'final':
        this.finish(event);
        break;
      case 'error':
        this.fail(event.code, event.message);
        break;
      case 'done':
        this.done = true;
        break;
      default:
        break;
    }
  }

  reason(text) {
    if (!this.reasoning) {
      this.reasoning = h('pre', { class: 'reasoning-text' });
      this.element.prepend(h('details', { class: 'fold reasoning' },
        h('summary', {}, 'Reasoning'), this.reasoning));
    }
    this.reasoning.textContent += text;
  }

  /** The answer: the gateway's sanitized rendering, else the raw text as text. */
  finish(event) {
    this.answerText = event.message ?? this.text;
    if (typeof event.html === 'string') {
      // The one place markup is inserted: rendered from Markdown and sanitized by the gateway.
      this.answer.innerHTML = event.html;
      for (const link of this.answer.querySelectorAll('a[href]')) {
        link.target = '_blank';
        link.rel = 'noopener noreferrer nofollow';
      }
    } else {
      this.answer.textContent = this.answerText;
    }
    this.answer.classList.add('markdown');
    const usage = event.usage;
    if (usage && Number.isFinite(usage.totalTokens)) {
      const tokens = `${usage.promptTokens} prompt + ${usage.completionTokens} completion tokens`;
      this.meta.textContent = this.model ? `${this.model} · ${tokens}` : tokens;
    }
  }

  fail(code, message) {
    const stopped = code === 'cancelled';
    this.element.append(h('p', { class: `note ${stopped ? 'muted' : 'danger'}`, role: 'alert' },
      stopped ? 'Stopped.' : [h('code', { class: 'error-code' }, code ?? 'error'), ' ', message ?? '']));
  }

  /** Closes open cards, folds the cards into "Used N tools", ends the stream. */
  end() {
    clearInterval(this.ticker);
    this.done = true;
    this.answer.setAttribute('aria-busy', 'false');
    for (const card of this.cards.values()) card.endTurn();
    if (this.stopping && !this.answerText) say(this.chat.status, 'Stopped.');
    else say(this.chat.status, '');
    const count = this.cards.size;
    if (count > 0) {
      // Cards with an app stay where they are: moving a frame would load the app again.
      const apps = new Set([...this.cards.values()].filter((c) => c.app).map((c) => c.element));
      const cards = [...this.tools.children].filter((element) => !apps.has(element));
      // A call that waits for the user to connect an account stays in view with its button.
      const waiting = [...this.cards.values()].some((card) => card.needsConnection);
      this.tools.prepend(h('details', { class: 'fold used-tools', open: waiting },
        h('summary', {}, `Used ${plural(count, 'tool')}`), cards));
    }
    if (!this.answer.textContent && !this.answerText) this.answer.remove();
  }
}

/** Whether the reader is at the end of the page (then new output keeps it in view). */
function nearBottom() {
  return window.innerHeight + window.scrollY >= document.body.scrollHeight - 120;
}

/** `[llm]` for the common model servers, each a setup a user copies. */
const MODEL_SETUPS = [
  ['Ollama', 'ollama pull qwen2.5:7b', 'http://127.0.0.1:11434/v1', 'qwen2.5:7b'],
  ['llama.cpp', 'llama-server -m model.gguf --jinja --port 8080', 'http://127.0.0.1:8080/v1',
    'model'],
  ['vLLM', 'vllm serve Qwen/Qwen2.5-7B-Instruct --enable-auto-tool-choice --tool-call-parser hermes',
    'http://127.0.0.1:8000/v1', 'Qwen/Qwen2.5-7B-Instruct'],
];

function noModelNote(recheck) {
  const setups = MODEL_SETUPS.map(([name, command, url, model]) => h('details', { class: 'fold' },
    h('summary', {}, name),
    h('p', {}, 'Run: ', h('code', {}, command)),
    h('pre', { tabindex: 0, 'aria-label': `${name} configuration` },
      `[llm]\nbase_url = "${url}"\nmodel = "${model}"`)));
  setups.push(h('details', { class: 'fold' },
    h('summary', {}, 'Any OpenAI-compatible server'),
    h('pre', { tabindex: 0, 'aria-label': 'OpenAI-compatible configuration' },
      '[llm]\nbase_url = "https://api.example.com/v1"\nmodel = "the-model"\n'
      + 'api_key = "${OPENAI_API_KEY}"   # a reference to the environment, never the key'),
    h('p', {}, 'Or, with no file: set ', h('code', {}, 'MCPGATE_MODEL'), ' (and ',
      h('code', {}, 'OPENAI_BASE_URL'), ', ', h('code', {}, 'OPENAI_API_KEY'),
      ') in the gateway\'s environment.')));
  return h('div', { class: 'empty no-model', role: 'note' },
    h('h2', {}, 'No model is configured'),
    h('p', {}, 'The chat needs a model server with an OpenAI-compatible API. The catalog and '
      + 'its forms work without one.'),
    setups,
    h('p', {}, 'Add the ', h('code', {}, '[llm]'), ' section to the gateway\'s configuration file, '
      + 'then reload it (', h('code', {}, 'POST /api/v1/admin/reload'), ' or SIGHUP) or restart '
      + 'the gateway.'),
    h('button', { type: 'button', class: 'ghost', onclick: recheck }, 'Check again'));
}

function emptyNote() {
  return h('div', { class: 'empty' },
    h('p', {}, 'Ask something. The model can use the gateway\'s tools; each call shows here '
      + 'as it runs, and a tool that writes waits for your approval.'));
}
