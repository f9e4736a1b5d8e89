// One tool call in the chat: server badge, tool name, the full arguments, a state pill,
// progress, elapsed time, the result or the error with its code; for a write tool, the
// approval (exactly what will run, until when) with Approve and Deny buttons.

import {
  clock, collapsible, duration, h, jsonBlock, localTime, pill, replace, uid,
} from './dom.js';
import { AppFrame } from './apps.js';
import { connectButton } from './connect.js';
import { renderResult } from './result.js';

const STATES = {
  calling: ['calling', 'info'],
  waiting: ['waiting for approval', 'warn'],
  done: ['done', 'ok'],
  error: ['error', 'danger'],
  cancelled: ['cancelled', 'muted'],
  denied: ['denied', 'danger'],
};

/** Arguments longer than this start folded. */
const LONG_ARGUMENTS = 600;

export class ToolCard {
  /**
   * `call`: the `tool_call` event; `decide(callId, decision)` sends an approval decision and
   * resolves when the gateway accepted it.
   */
  constructor(call, decide) {
    this.callId = call.callId;
    this.tool = call.tool;
    this.server = call.server ?? null;
    this.decide = decide;
    this.started = performance.now();
    this.elapsedMs = null;
    this.state = 'calling';
    this.titleId = uid('call');
    this.pill = h('span', { class: 'state' });
    this.elapsed = h('span', { class: 'elapsed muted', 'aria-label': 'elapsed time' });
    this.eta = h('span', { class: 'eta muted' });
    this.progressBox = h('div', { class: 'progress', hidden: true });
    this.approvalBox = h('div', { class: 'approval-slot' });
    this.outcome = h('div', { class: 'outcome' });
    const args = call.arguments ?? {};
    const argsText = JSON.stringify(args) ?? '';
    this.label = `${this.tool}${hint(args)}`;
    const empty = argsText === '{}';
    this.argumentsFold = collapsible(empty ? 'Arguments: none' : 'Arguments',
      jsonBlock(args, `Arguments of ${this.tool}`),
      { open: !empty && argsText.length <= LONG_ARGUMENTS, className: 'arguments' });
    this.argumentsShown = this.argumentsFold.open;
    this.element = h('article', {
      class: 'tool-card card',
      'aria-labelledby': this.titleId,
      dataset: { callId: this.callId, tool: this.tool, state: this.state },
    },
    h('header', { class: 'tool-card-head' },
      this.server ? h('span', { class: 'server-badge', title: 'server' }, this.server) : null,
      h('h3', { id: this.titleId, class: 'tool-name' }, h('code', {}, shortName(this.tool, this.server))),
      this.pill, this.eta, this.elapsed),
    this.argumentsFold,
    this.progressBox, this.approvalBox, this.outcome);
    // A tool with an MCP Apps view: the app renders under the call, with its input and result.
    if (call.view) {
      this.app = new AppFrame(call);
      this.element.append(this.app.element);
    }
    this.setState('calling');
    this.tick();
  }

  setState(state) {
    this.state = state;
    this.element.dataset.state = state;
    const [label, tone] = STATES[state] ?? [state, 'muted'];
    replace(this.pill, pill(label, tone, { dataset: { state } }));
  }

  /** Whether the call is still open (running or waiting for approval). */
  get open() {
    return this.state === 'calling' || this.state === 'waiting';
  }

  /** Updates the elapsed time and the approval countdown. */
  tick() {
    const ms = this.elapsedMs ?? performance.now() - this.started;
    this.elapsed.textContent = duration(ms);
    if (this.expiry) this.updateExpiry();
  }

  showEta(expectedMs) {
    this.eta.textContent = `usually ${duration(expectedMs)}`;
  }

  showProgress({ progress, total, message }) {
    this.progressBox.hidden = false;
    const bar = h('progress', { 'aria-label': `Progress of ${this.tool}` });
    if (Number.isFinite(total) && total > 0) {
      bar.max = total;
      bar.value = Math.min(progress, total);
    }
    const label = message
      ?? (Number.isFinite(total) ? `${progress} of ${total}` : `progress ${progress}`);
    replace(this.progressBox, bar, h('span', { class: 'progress-text' }, label));
  }

  /** The `approval_required` event: what will run, until when, and the two buttons. */
  askApproval(event) {
    this.setState('waiting');
    // The approval shows the arguments that will run; one copy on screen is enough.
    this.argumentsFold.open = false;
    this.expiry = new Date(event.expiresAt);
    this.expiryText = h('span', { class: 'expiry' });
    this.decisionStatus = h('p', { class: 'decision-status', role: 'status' });
    this.approveButton = h('button', { type: 'button', class: 'primary approve' }, 'Approve');
    this.denyButton = h('button', { type: 'button', class: 'danger deny' }, 'Deny');
    this.approveButton.addEventListener('click', () => this.send('approve'));
    this.denyButton.addEventListener('click', () => this.send('deny'));
    const headingId = uid('approval');
    replace(this.approvalBox, h('section', {
      class: 'approval', role: 'group', 'aria-labelledby': headingId,
    },
    h('h4', { id: headingId }, 'Approve this call?'),
    h('p', {}, 'The model asks to run ', h('code', {}, event.tool ?? this.tool),
      ' on server ', h('code', {}, event.server ?? this.server ?? '?'), ' with these arguments:'),
    jsonBlock(event.arguments ?? {}, 'Arguments that will be sent'),
    h('p', { class: 'muted' }, 'Expires at ',
      h('time', { datetime: event.expiresAt, title: localTime(event.expiresAt) },
        clock(event.expiresAt)), ' ', this.expiryText),
    h('div', { class: 'actions' }, this.approveButton, this.denyButton),
    this.decisionStatus));
    this.updateExpiry();
  }

  /** Whether an approval is waiting for the user. */
  get waiting() {
    return this.state === 'waiting' && !this.decided && !this.expired;
  }

  focusApproval() {
    this.element.scrollIntoView({ block: 'center', behavior: 'smooth' });
    this.approveButton?.focus({ preventScroll: true });
  }

  updateExpiry() {
    if (this.decided || !this.expiryText) return;
    const left = this.expiry.getTime() - Date.now();
    if (Number.isNaN(left)) return;
    if (left <= 0) {
      this.expired = true;
      this.expiryText.textContent = '(expired)';
      this.approveButton.disabled = true;
      this.denyButton.disabled = true;
    } else {
      this.expiryText.textContent = `(in ${duration(Math.ceil(left / 1000) * 1000)})`;
    }
  }

  async send(decision) {
    this.approveButton.disabled = true;
    this.denyButton.disabled = true;
    this.decisionStatus.textContent = decision === 'approve' ? 'Approving…' : 'Denying…';
    try {
      await this.decide(this.callId, decision);
      this.decided = decision;
      this.element.dataset.decision = decision;
      // The call may have finished (its result on the turn's stream) before the decision's
      // answer came back: a later state is never set back.
      if (this.state === 'waiting') this.setState(decision === 'approve' ? 'calling' : 'denied');
      this.settle(decision === 'approve'
        ? `Approved by you at ${clock(new Date())}.`
        : `Denied by you at ${clock(new Date())}; the model is told.`);
      this.onDecided?.(decision);
    } catch (error) {
      this.decisionStatus.textContent = `Not sent: ${error.message}`;
      this.approveButton.disabled = false;
      this.denyButton.disabled = false;
    }
  }

  /** `nameImage()` names the result's images in the turn's order. */
  showResult(event, nameImage) {
    this.elapsedMs = event.elapsedMs;
    this.progressBox.hidden = true;
    this.setState('done');
    replace(this.outcome, renderResult(event.result, nameImage));
    this.app?.showResult(event.result);
    this.tick();
  }

  showError(event) {
    this.elapsedMs = event.elapsedMs;
    this.progressBox.hidden = true;
    const state = event.code === 'denied_by_user' ? 'denied'
      : event.code === 'cancelled' ? 'cancelled' : 'error';
    this.setState(state);
    // A denial the user did not send is the request expiring on the server.
    if (event.code === 'denied_by_user') this.expired = true;
    this.disableApproval();
    replace(this.outcome, h('p', { class: `note ${state === 'cancelled' ? 'muted' : 'danger'}` },
      h('code', { class: 'error-code' }, event.code ?? 'error'), ' ', event.message ?? ''));
    this.app?.cancelled(`${event.code ?? 'error'}: ${event.message ?? ''}`);
    // The server wants the user's own account: connect it from here, then ask again.
    if (event.code === 'authorization_required' && this.server) {
      this.needsConnection = true;
      this.outcome.append(h('p', { class: 'connect-account' },
        `${this.server} needs your own account. `,
        connectButton(this.server, `Connect ${this.server}`, () => {
          this.outcome.append(h('p', { class: 'note' }, 'Connected: ask again to use it.'));
        })));
    }
    this.tick();
  }

  /** The turn ended while this call was open: it was cancelled. */
  endTurn() {
    if (!this.open) return;
    this.elapsedMs = performance.now() - this.started;
    this.progressBox.hidden = true;
    this.setState('cancelled');
    this.disableApproval();
    this.app?.cancelled('the turn ended before the call did');
    this.tick();
  }

  /** The approval is over: its box shrinks to one line; the arguments show again. */
  settle(line) {
    this.decisionStatus.textContent = line;
    this.decisionStatus.classList.add('settled');
    replace(this.approvalBox, this.decisionStatus);
    this.argumentsFold.open = this.argumentsShown;
  }

  /** No decision can be sent any more (the call ended or the turn did). */
  disableApproval() {
    if (!this.approveButton || this.decided) return;
    this.decided = 'none';
    this.settle(this.expired
      ? 'Not approved: the request expired.'
      : 'Not approved: the call ended before a decision.');
  }
}

/** A short reminder of which call this is: its first short string argument, quoted. */
function hint(args) {
  const first = Object.values(args ?? {}).find((v) => typeof v === 'string' && v.trim() !== '');
  if (first === undefined) return '';
  const cut = first.length > 24 ? `${first.slice(0, 23)}…` : first;
  return ` "${cut}"`;
}

/** `server.tool` shown as `tool` next to the server badge. */
function shortName(tool, server) {
  return server && tool.startsWith(`${server}.`) ? tool.slice(server.length + 1) : tool;
}
