// The audit log (the admin role: its tenant's; an operator: all): recent tool-call attempts,
// newest first, filtered by user, tool, outcome and time, paged with "Load older".

import { ApiError, api } from './api.js';
import { clear, h, localTime, pill, say } from './dom.js';

const PAGE = 50;

/** The audit view. */
export class Audit {
  constructor(root) {
    this.root = root;
    this.form = root.querySelector('#audit-filters');
    this.results = root.querySelector('#audit-results');
    this.status = root.querySelector('#audit-status');
    this.more = root.querySelector('#audit-more');
    this.form.addEventListener('submit', (event) => {
      event.preventDefault();
      this.load();
    });
    this.form.addEventListener('reset', () => setTimeout(() => this.load(), 0));
    this.more.addEventListener('click', () => this.load(this.before));
    this.loaded = false;
  }

  show() {
    if (!this.loaded) this.load();
  }

  reset() {
    this.loaded = false;
    this.form.reset();
    clear(this.results);
    say(this.status, '');
    this.more.hidden = true;
  }

  /** Loads the first page, or the page older than `before`. */
  async load(before) {
    this.loaded = true;
    const query = this.query(before);
    if (!query) return;
    say(this.status, 'Loading…');
    this.more.disabled = true;
    // Only the latest request's answer is shown, whatever order answers arrive in.
    const ticket = (this.ticket = (this.ticket ?? 0) + 1);
    try {
      const page = await api(`/audit?${query}`);
      if (ticket !== this.ticket) return;
      const records = page.records ?? [];
      if (before === undefined) clear(this.results);
      this.render(records, before !== undefined);
      this.before = page.before;
      this.more.hidden = records.length < PAGE || page.before == null;
      const shown = this.results.querySelectorAll('tbody tr').length;
      say(this.status, shown === 0 ? 'No calls match these filters.' : `${shown} calls shown.`);
    } catch (error) {
      if (ticket !== this.ticket) return;
      this.more.hidden = true;
      clear(this.results);
      if (error instanceof ApiError && error.status === 403) {
        this.results.append(h('div', { class: 'note info admin-only', role: 'note' },
          h('strong', {}, 'Admin only. '),
          'The audit log is shown to administrators: the admin role reads its tenant\'s calls, ' +
          'a gateway operator every tenant\'s. Your token is neither.'));
        say(this.status, '');
      } else {
        say(this.status, `The audit log could not be loaded: ${error.message}`);
      }
    } finally {
      this.more.disabled = false;
    }
  }

  /** The query string from the filters, or null (with a message) when one is invalid. */
  query(before) {
    const data = new FormData(this.form);
    const params = new URLSearchParams({ limit: String(PAGE) });
    for (const name of ['user', 'tool', 'outcome']) {
      const value = String(data.get(name) ?? '').trim();
      if (value) params.set(name, value);
    }
    for (const name of ['since', 'until']) {
      const value = String(data.get(name) ?? '');
      if (!value) continue;
      const time = new Date(value).getTime();
      if (Number.isNaN(time)) {
        say(this.status, `The ${name} time is not a valid date.`);
        return null;
      }
      params.set(name, new Date(time).toISOString().replace(/\.\d{3}Z$/, 'Z'));
    }
    if (before !== undefined && before !== null) params.set('before', String(before));
    return params.toString();
  }

  render(records, appending) {
    let body = this.results.querySelector('tbody');
    if (!appending || !body) {
      body = h('tbody');
      clear(this.results);
      this.results.append(h('div', { class: 'table-wrap' },
        h('table', { class: 'table audit-table' },
          h('caption', { class: 'visually-hidden' }, 'Tool calls, newest first'),
          h('thead', {}, h('tr', {},
            ['Time', 'User', 'Tool', 'Decision', 'Outcome', 'Duration', 'Detail']
              .map((t) => h('th', { scope: 'col' }, t)))),
          body)));
    }
    for (const r of records) {
      const okay = r.outcome === 'ok';
      body.append(h('tr', { dataset: { outcome: r.outcome ?? '', tool: r.tool ?? '' } },
        h('td', { class: 'nowrap' }, h('time', { datetime: r.time ?? '' }, localTime(r.time))),
        h('td', {}, r.user ?? '', r.tenant && r.tenant !== 'local'
          ? h('span', { class: 'muted' }, ` (${r.tenant})`) : null),
        h('td', {}, h('code', {}, r.tool ?? '')),
        h('td', {}, r.decision ?? ''),
        h('td', {}, pill(r.outcome ?? '', okay ? 'ok' : 'danger')),
        h('td', { class: 'num nowrap' }, `${r.durationMs ?? 0} ms`),
        h('td', { class: 'detail' }, r.detail ?? '')));
    }
  }
}
