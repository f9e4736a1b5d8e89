// Building the page: elements from our own structure, and untrusted text (model, tool,
// upstream) always as text nodes. Nothing here parses a string as markup.

/** Properties set as DOM properties rather than attributes. */
const PROPERTIES = new Set(['value', 'checked', 'disabled', 'hidden', 'open', 'selected']);

/**
 * Creates `<tag>` with `props` and `children`.
 * props: `class`, `text` (text content), `dataset`, `on<event>` handlers, DOM properties, and
 * any other attribute (names come from this code, never from data).
 * children: nodes, strings (as text nodes), arrays, or null/false (skipped).
 */
export function h(tag, props = {}, ...children) {
  const element = document.createElement(tag);
  for (const [key, value] of Object.entries(props ?? {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === 'class') element.className = value;
    else if (key === 'text') element.textContent = String(value);
    else if (key === 'dataset') Object.assign(element.dataset, value);
    else if (key.startsWith('on') && typeof value === 'function') {
      element.addEventListener(key.slice(2), value);
    } else if (PROPERTIES.has(key)) element[key] = value;
    else element.setAttribute(key, value === true ? '' : String(value));
  }
  append(element, children);
  return element;
}

/** Appends children as `h` takes them. */
export function append(parent, children) {
  for (const child of [children].flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    parent.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return parent;
}

/** Removes every child. */
export function clear(element) {
  element.replaceChildren();
  return element;
}

/** Replaces the children of `element`. */
export function replace(element, ...children) {
  clear(element);
  return append(element, children);
}

/** Pretty JSON in a `<pre>`, as text. */
export function jsonBlock(value, label) {
  let text;
  try {
    text = JSON.stringify(value, null, 2);
  } catch {
    text = String(value);
  }
  return h('pre', { class: 'json', tabindex: 0, 'aria-label': label ?? 'JSON' }, text ?? 'null');
}

/** A collapsible block: `<details>` with a summary. */
export function collapsible(summary, content, { open = false, className = '' } = {}) {
  return h('details', { class: `fold ${className}`.trim(), open },
    h('summary', {}, summary), content);
}

/** A small coloured label. `tone`: ok, warn, danger, info, muted. */
export function pill(text, tone = 'muted', extra = {}) {
  return h('span', { class: `pill pill-${tone}`, ...extra }, text);
}

/** `1.2 s`, `340 ms`, `2 min 5 s`. */
export function duration(ms) {
  if (!Number.isFinite(ms) || ms < 0) return '';
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)} s`;
  const minutes = Math.floor(ms / 60_000);
  return `${minutes} min ${Math.round((ms % 60_000) / 1000)} s`;
}

/** Local date and time of an RFC 3339 string or epoch milliseconds. */
export function localTime(when) {
  const date = when instanceof Date ? when : new Date(when);
  if (Number.isNaN(date.getTime())) return String(when);
  return date.toLocaleString(undefined, {
    year: 'numeric', month: 'short', day: 'numeric',
    hour: '2-digit', minute: '2-digit', second: '2-digit',
  });
}

/** The time of day when `when` is today, else the local date and time. */
export function clock(when) {
  const date = when instanceof Date ? when : new Date(when);
  if (Number.isNaN(date.getTime())) return String(when);
  if (date.toDateString() !== new Date().toDateString()) return localTime(date);
  return date.toLocaleTimeString(undefined, { hour: '2-digit', minute: '2-digit', second: '2-digit' });
}

/** A unique id for label/aria wiring. */
let counter = 0;
export function uid(prefix = 'id') {
  counter += 1;
  return `${prefix}-${counter}`;
}

/** Shows one `role=status`/`role=alert` message in `element` (empty text hides it). */
export function say(element, text) {
  element.textContent = text ?? '';
  element.hidden = !text;
}

/** `1 tool`, `2 tools`. */
export function plural(count, noun) {
  return `${count} ${noun}${count === 1 ? '' : 's'}`;
}
