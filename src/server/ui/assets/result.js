// A tool's result as the gateway shapes it: `content` parts (text, image, audio, resource,
// resource_link, omitted), optional `structuredContent`, `truncated`. Text stays text; images
// become data: URLs of a few known raster types, set as a property, never as markup.

import { collapsible, h, jsonBlock } from './dom.js';

/** Image types shown inline; anything else (SVG included: it can carry script) is described. */
const IMAGE_TYPES = new Set(['image/png', 'image/jpeg', 'image/gif', 'image/webp']);
const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;

/**
 * The result's parts as elements. `nameImage()`, when given, names each image part in order
 * (the chat names them `image_1`, `image_2`, ... as the model is told).
 */
export function renderResult(result, nameImage) {
  const parts = Array.isArray(result?.content) ? result.content : [];
  const box = h('div', { class: 'result' });
  for (const part of parts) box.append(renderPart(part, nameImage));
  if (result?.structuredContent !== undefined && result?.structuredContent !== null) {
    box.append(collapsible('Structured data', jsonBlock(result.structuredContent, 'Structured data'),
      { open: true, className: 'structured' }));
  }
  if (parts.length === 0 && result?.structuredContent == null) {
    box.append(h('p', { class: 'muted' }, 'The tool returned nothing.'));
  }
  if (result?.truncated) {
    box.append(h('p', { class: 'note warn' },
      'The result was cut or parts were left out to fit the gateway\'s size limit.'));
  }
  return box;
}

function renderPart(part, nameImage) {
  switch (part?.type) {
    case 'text':
      return h('pre', { class: 'text-part' }, part.text ?? '');
    case 'image':
      return image(part, nameImage?.());
    case 'audio':
      return h('p', { class: 'muted part' },
        `Audio (${part.mimeType ?? 'unknown type'}, ${bytesOf(part.data)}), not played here.`);
    case 'resource':
      return resource(part);
    case 'resource_link':
      return h('p', { class: 'part' }, 'Resource link: ', h('code', {}, part.uri ?? ''),
        part.name ? ` (${part.name})` : '', part.mimeType ? `, ${part.mimeType}` : '');
    case 'omitted':
      return h('p', { class: 'note warn part' },
        `Left out: ${part.kind ?? 'a part'}${part.mimeType ? ` (${part.mimeType})` : ''}, `
        + `${part.bytes ?? '?'} bytes: ${part.reason ?? 'over a limit'}.`);
    default:
      return collapsible(`Part of type ${String(part?.type ?? 'unknown')}`, jsonBlock(part));
  }
}

function image(part, name) {
  const type = String(part.mimeType ?? '').toLowerCase();
  const data = String(part.data ?? '');
  if (!IMAGE_TYPES.has(type) || !BASE64.test(data)) {
    return h('p', { class: 'muted part' },
      `Image of type ${type || 'unknown'} (${bytesOf(data)}), not shown: only PNG, JPEG, GIF `
      + 'and WebP are shown.');
  }
  const img = h('img', {
    class: 'result-image', alt: name ? `${name}, returned by the tool` : 'Image returned by the tool',
  });
  img.src = `data:${type};base64,${data}`;
  return h('figure', { class: 'part' }, img,
    h('figcaption', { class: 'muted' }, name ? h('code', {}, name) : null, name ? ' · ' : null,
      `${type}, ${bytesOf(data)}`));
}

function resource(part) {
  const head = h('p', { class: 'part' }, 'Resource ', h('code', {}, part.uri ?? ''),
    part.mimeType ? ` (${part.mimeType})` : '');
  if (typeof part.text === 'string') {
    return h('div', {}, head, h('pre', { class: 'text-part' }, part.text));
  }
  if (typeof part.blob === 'string') {
    return h('div', {}, head, h('p', { class: 'muted' }, `Binary, ${bytesOf(part.blob)}.`));
  }
  return head;
}

/** Decoded size of base64 text, in words. */
function bytesOf(base64) {
  const text = String(base64 ?? '');
  const padding = text.endsWith('==') ? 2 : text.endsWith('=') ? 1 : 0;
  const bytes = Math.max(0, Math.floor((text.length * 3) / 4) - padding);
  if (bytes < 1024) return `${bytes} bytes`;
  if (bytes < 1024 * 1024) return `${(bytes / 1024).toFixed(1)} KiB`;
  return `${(bytes / 1024 / 1024).toFixed(1)} MiB`;
}
