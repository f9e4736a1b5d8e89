// Usage: calls and errors over time, the most used tools and the busiest users, and what the
// chat's models cost, over the last 7, 30 or 90 days. Administrators see their scope (an
// operator every tenant, a tenant's admin its tenant); anyone else their own usage.

import { api } from './api.js';
import { bars, columns, compact } from './charts.js';
import { clear, h, say } from './dom.js';

const DAY_MS = 86_400_000;
const TOP = 10;

export class Usage {
  constructor(root) {
    this.root = root;
    this.range = root.querySelector('#usage-range');
    this.status = root.querySelector('#usage-status');
    this.totals = root.querySelector('#usage-totals');
    this.charts = root.querySelector('#usage-charts');
    this.range.addEventListener('change', () => this.load());
    this.loaded = false;
  }

  show() {
    if (!this.loaded) this.load();
  }

  reset() {
    this.loaded = false;
    clear(this.charts);
    clear(this.totals);
    say(this.status, '');
  }

  async load() {
    this.loaded = true;
    const days = Number(this.range.value) || 30;
    const until = new Date(Math.ceil(Date.now() / 3_600_000) * 3_600_000);
    const since = new Date(until.getTime() - days * DAY_MS);
    const range = `since=${since.toISOString()}&until=${until.toISOString()}`;
    say(this.status, 'Loading…');
    const ticket = (this.ticket = (this.ticket ?? 0) + 1);
    try {
      const [daily, tools, users, models] = await Promise.all([
        api(`/usage?${range}&interval=day`),
        api(`/usage?${range}&groupBy=tool`),
        api(`/usage?${range}&groupBy=user`),
        api(`/usage?${range}&groupBy=model`),
      ]);
      if (ticket !== this.ticket) return;
      this.render(daily, tools, users, models, since, until);
      say(this.status, '');
    } catch (error) {
      if (ticket !== this.ticket) return;
      clear(this.charts);
      say(this.status, `Usage could not be loaded: ${error.message}`);
    }
  }

  render(daily, tools, users, models, since, until) {
    const t = daily.totals ?? {};
    clear(this.totals);
    for (const [label, value] of [
      ['calls', compact(t.calls ?? 0)],
      ['errors', compact(t.errors ?? 0)],
      ['chat turns', compact(t.turns ?? 0)],
      ['tokens', compact((t.promptTokens ?? 0) + (t.completionTokens ?? 0))],
      ['cost', (t.cost ?? 0).toFixed(2)],
    ]) {
      this.totals.append(h('div', { class: 'stat' },
        h('span', { class: 'stat-value' }, value), h('span', { class: 'stat-label muted' }, label)));
    }
    // Every UTC day the range touches, empty ones too.
    const byDay = new Map((daily.calls ?? []).map((g) => [g.time?.slice(0, 10), g]));
    const points = [];
    const first = Math.floor(since.getTime() / DAY_MS) * DAY_MS;
    for (let at = first; at < until.getTime(); at += DAY_MS) {
      const day = new Date(at).toISOString().slice(0, 10);
      const g = byDay.get(day);
      const errors = g?.errors ?? 0;
      points.push({ label: day.slice(5), values: [(g?.calls ?? 0) - errors, errors] });
    }
    const top = (report, key) => (report.calls ?? []).slice(0, TOP)
      .map((g) => ({ label: g[key] ?? '—', value: g.calls, note: `${g.errors} errors` }));
    const cost = (models.models ?? []).slice(0, TOP).map((g) => ({
      label: g.model ?? '—', value: g.cost ?? 0,
      note: `${compact(g.promptTokens + g.completionTokens)} tokens, ${g.turns} turns`,
    }));
    const charts = [
      columns('Calls and errors per day', points, [
        { name: 'calls', className: 'ok' }, { name: 'errors', className: 'error' },
      ]),
      bars('Top tools', top(tools, 'tool')),
      bars('Top users', top(users, 'user')),
    ];
    charts.push(cost.length
      ? bars('Cost per model', cost, (v) => v.toFixed(2))
      : h('p', { class: 'muted' }, 'No chat turns in this range.'));
    clear(this.charts);
    this.charts.append(...charts);
  }
}
