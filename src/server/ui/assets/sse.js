// Server-sent events from a fetch() response body. EventSource cannot send an Authorization
// header, so the chat stream is read here: `event:` and `data:` lines, blank-line separated.

/** Largest event accepted; the gateway's own events are far smaller. */
const MAX_EVENT_CHARS = 16 * 1024 * 1024;

/** Yields `{ event, data }` for each event of `body` (data parsed as JSON when it is JSON). */
export async function* sseEvents(body) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += value;
      // CRLF and CR line ends become LF; a CR at the very end may be half of a CRLF.
      const keep = buffer.endsWith('\r') ? 1 : 0;
      const head = buffer.slice(0, buffer.length - keep).replace(/\r\n?/g, '\n');
      buffer = head + buffer.slice(buffer.length - keep);
      let end;
      while ((end = buffer.indexOf('\n\n')) >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        const event = parse(block);
        if (event) yield event;
      }
      if (buffer.length > MAX_EVENT_CHARS) {
        throw new Error('an event from the gateway is too large');
      }
    }
    const last = parse(buffer.replace(/\r\n?/g, '\n'));
    if (last) yield last;
  } finally {
    // Stops the download when the reader leaves early (Stop, sign-out, an error).
    reader.cancel().catch(() => {});
  }
}

function parse(block) {
  let event = 'message';
  const data = [];
  for (const line of block.split('\n')) {
    if (line === '' || line.startsWith(':')) continue;
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'event') event = value;
    else if (field === 'data') data.push(value);
  }
  if (data.length === 0) return null;
  const text = data.join('\n');
  try {
    return { event, data: JSON.parse(text) };
  } catch {
    return { event, data: text };
  }
}
