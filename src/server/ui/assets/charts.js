// Small SVG charts drawn by the page itself (no library, no CDN): columns over time and
// horizontal bars. Elements and attributes only, no inline style (the page's policy forbids
// it); colours come from classes in app.css. Labels are data, always set as text.

const SVG = 'http://www.w3.org/2000/svg';

function el(tag, attrs = {}, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, String(value));
  for (const child of children) {
    if (child == null) continue;
    node.append(typeof child === 'string' ? document.createTextNode(child) : child);
  }
  return node;
}

/** A number as people read it: 1234 → 1.2k. */
export function compact(value) {
  return new Intl.NumberFormat('en', { notation: 'compact', maximumFractionDigits: 1 })
    .format(value);
}

/**
 * Columns over time: `points` are `{ label, values }`, one value per series, stacked;
 * `series` names each (`{ name, className }`). An accessible summary goes in `title`.
 */
export function columns(title, points, series) {
  const width = 640;
  const height = 180;
  const left = 40;
  const bottom = 22;
  const plot = height - bottom - 8;
  const top = Math.max(1, ...points.map((p) => p.values.reduce((a, b) => a + b, 0)));
  const step = (width - left) / Math.max(points.length, 1);
  const bar = Math.max(1, step * 0.7);
  const svg = el('svg', {
    viewBox: `0 0 ${width} ${height}`, role: 'img', 'aria-label': title, class: 'chart',
  });
  svg.append(el('line', { x1: left, y1: 8 + plot, x2: width, y2: 8 + plot, class: 'axis' }));
  svg.append(el('text', { x: left - 6, y: 14, class: 'tick end' }, compact(top)));
  svg.append(el('text', { x: left - 6, y: 8 + plot, class: 'tick end' }, '0'));
  points.forEach((point, i) => {
    const x = left + i * step + (step - bar) / 2;
    let y = 8 + plot;
    point.values.forEach((value, s) => {
      const h = (value / top) * plot;
      y -= h;
      if (value > 0) {
        svg.append(el('rect', {
          x: x.toFixed(1), y: y.toFixed(1), width: bar.toFixed(1), height: h.toFixed(1),
          class: `column ${series[s].className}`, 'data-label': point.label,
        }, el('title', {}, `${point.label}: ${value} ${series[s].name}`)));
      }
    });
    const every = Math.ceil(points.length / 8);
    if (i % every === 0) {
      svg.append(el('text', { x: x + bar / 2, y: height - 6, class: 'tick middle' }, point.label));
    }
  });
  return figure(title, svg, series);
}

/** Horizontal bars: `items` are `{ label, value, note? }`, largest first. */
export function bars(title, items, format = compact) {
  const row = 24;
  const width = 640;
  const labelWidth = 200;
  const height = Math.max(row, items.length * row);
  const top = Math.max(1, ...items.map((item) => item.value));
  const svg = el('svg', {
    viewBox: `0 0 ${width} ${height}`, role: 'img', 'aria-label': title, class: 'chart',
  });
  items.forEach((item, i) => {
    const y = i * row;
    const w = ((width - labelWidth - 80) * item.value) / top;
    const shown = item.label.length > 28 ? `${item.label.slice(0, 27)}…` : item.label;
    svg.append(el('text', { x: labelWidth - 8, y: y + 16, class: 'label end' }, shown));
    svg.append(el('rect', {
      x: labelWidth, y: y + 4, width: Math.max(1, w).toFixed(1), height: row - 8,
      class: 'bar', 'data-label': item.label,
    }, el('title', {}, `${item.label}: ${format(item.value)}${item.note ? ` (${item.note})` : ''}`)));
    svg.append(el('text', { x: labelWidth + w + 6, y: y + 16, class: 'value' },
      format(item.value)));
  });
  return figure(title, svg);
}

function figure(title, svg, series = []) {
  const caption = document.createElement('figcaption');
  caption.textContent = title;
  for (const s of series) {
    const key = document.createElement('span');
    key.className = `key ${s.className}`;
    key.textContent = s.name;
    caption.append(' ', key);
  }
  const fig = document.createElement('figure');
  fig.className = 'chart-figure';
  fig.append(caption, svg);
  return fig;
}
