// Reviewing a quarantined or pending tool: the pinned definition beside the live one, the
// lines that differ highlighted, and the operator's choice: accept the live definition for
// this one tool (its pin is rewritten and the release audited) or keep it blocked.

import { ApiError, api } from './api.js';
import { h, replace } from './dom.js';

/** Above this many lines a side is compared line by line at the same index only. */
const MAX_DIFF_LINES = 2000;

/** A tool's "Review the change" block; `released` runs after the tool was accepted. */
export function pinReview(tool, released) {
  const area = h('div', { class: 'review', 'aria-live': 'polite' });
  const open = h('button', { type: 'button', class: 'ghost' }, 'Review the change');
  open.addEventListener('click', () => load(tool, area, open, released));
  return h('div', { class: 'review-wrap' }, open, area);
}

async function load(tool, area, open, released) {
  open.disabled = true;
  replace(area, h('p', { class: 'muted' }, 'Loading both definitions…'));
  try {
    const review = await api(`/mcp/pins/${encodeURIComponent(tool.name)}`);
    open.hidden = true;
    replace(area, render(review, area, open, released));
  } catch (error) {
    open.disabled = false;
    replace(area, h('p', { class: 'note warn' }, error instanceof ApiError && error.status === 403
      ? ['Only a gateway operator can review and release a tool; ask one, or run ',
        h('code', {}, `mcpgate pin --tool ${tool.name}`), ' on the gateway\'s machine.']
      : `The definitions could not be loaded: ${error.message}`));
  }
}

function render(review, area, open, released) {
  const live = lines(review.live?.definition);
  const pinned = review.pinned?.definition ? lines(review.pinned.definition) : null;
  const [left, right] = pinned ? diff(pinned, live) : [[], live.map((text) => ({ text, changed: true }))];
  const leftBody = pinned
    ? column(left, 'removed')
    : h('p', { class: 'muted' }, review.pinned
      ? `The pin file keeps only this tool's fingerprint (${short(review.pinned.fingerprint)}…), `
        + 'not the reviewed definition: it was written before definitions were kept.'
      : 'No pin: the tool is new since the pin file was written.');
  const changed = right.filter((l) => l.changed).length + left.filter((l) => l.changed).length;
  const status = h('p', { class: 'muted', role: 'status' });
  const accept = h('button', { type: 'button', class: 'primary' }, 'Accept this definition');
  const keep = h('button', { type: 'button', class: 'ghost' }, 'Keep it blocked');
  accept.addEventListener('click', async () => {
    accept.disabled = true;
    keep.disabled = true;
    status.textContent = 'Pinning…';
    try {
      const done = await api(`/mcp/pins/${encodeURIComponent(review.tool)}`, {
        method: 'POST',
        body: { fingerprint: review.live.fingerprint },
      });
      status.textContent = `Accepted: ${done.tool} is pinned at ${short(done.fingerprint)}…`;
      released();
    } catch (error) {
      status.textContent = error.code === 'definition_changed'
        ? 'The tool changed again since this was shown; review it again.'
        : `Not accepted: ${error.message}`;
      keep.disabled = false;
    }
  });
  keep.addEventListener('click', () => {
    replace(area);
    open.hidden = false;
    open.disabled = false;
  });
  return h('section', { class: 'pin-review', 'aria-label': `Review of ${review.tool}` },
    h('p', {}, pinned
      ? `${changed} line${changed === 1 ? '' : 's'} differ. Calls stay refused until you accept `
        + 'the live definition for this tool.'
      : 'Calls stay refused until you accept the live definition for this tool.'),
    h('div', { class: 'side-by-side' },
      h('div', { class: 'side pinned' },
        h('h5', {}, 'Pinned (reviewed)',
          review.pinned ? h('code', { class: 'fingerprint' }, ` ${short(review.pinned.fingerprint)}…`) : null),
        leftBody),
      h('div', { class: 'side live' },
        h('h5', {}, 'Live (now)', h('code', { class: 'fingerprint' }, ` ${short(review.live?.fingerprint)}…`)),
        column(right, 'added'))),
    h('div', { class: 'actions' }, keep, accept), status);
}

function short(fingerprint) {
  return String(fingerprint ?? '').slice(0, 12);
}

/** A definition as pretty JSON lines, keys sorted so both sides line up. */
function lines(value) {
  return JSON.stringify(sorted(value ?? null), null, 2).split('\n');
}

function sorted(value) {
  if (Array.isArray(value)) return value.map(sorted);
  if (value && typeof value === 'object') {
    return Object.fromEntries(Object.keys(value).sort().map((k) => [k, sorted(value[k])]));
  }
  return value;
}

function column(entries, tone) {
  return h('pre', { class: 'diff', tabindex: 0 },
    entries.map(({ text, changed }) => h('span', {
      class: changed ? `line ${tone}` : 'line',
      dataset: changed ? { changed: tone } : {},
    }, `${text}\n`)));
}

/**
 * The two sides with the lines outside their longest common subsequence marked changed; at
 * most MAX_DIFF_LINES a side, else lines are compared at the same index.
 */
export function diff(a, b) {
  if (a.length > MAX_DIFF_LINES || b.length > MAX_DIFF_LINES) {
    return [a.map((text, i) => ({ text, changed: text !== b[i] })),
      b.map((text, i) => ({ text, changed: text !== a[i] }))];
  }
  const n = a.length;
  const m = b.length;
  const table = Array.from({ length: n + 1 }, () => new Uint32Array(m + 1));
  for (let i = n - 1; i >= 0; i -= 1) {
    for (let j = m - 1; j >= 0; j -= 1) {
      table[i][j] = a[i] === b[j] ? table[i + 1][j + 1] + 1
        : Math.max(table[i + 1][j], table[i][j + 1]);
    }
  }
  const left = a.map((text) => ({ text, changed: true }));
  const right = b.map((text) => ({ text, changed: true }));
  let i = 0;
  let j = 0;
  while (i < n && j < m) {
    if (a[i] === b[j]) {
      left[i].changed = false;
      right[j].changed = false;
      i += 1;
      j += 1;
    } else if (table[i + 1][j] >= table[i][j + 1]) {
      i += 1;
    } else {
      j += 1;
    }
  }
  return [left, right];
}
