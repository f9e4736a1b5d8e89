// The MCP Apps sandbox proxy, on an origin of its own: it takes the view's HTML from the
// page that framed it (the `host` of its URL, the only origin it listens to and talks to),
// renders it in an inner frame, and relays the app's JSON-RPC messages both ways. It sends
// no request of its own and holds nothing: no token, no data.
(() => {
  'use strict';
  const host = new URLSearchParams(location.search).get('host');
  if (window.parent === window || !host) return;
  const RESERVED = 'ui/notifications/sandbox-';
  // The spec's permissions, as Permissions Policy features.
  const FEATURES = {
    camera: 'camera', microphone: 'microphone', geolocation: 'geolocation',
    clipboardWrite: 'clipboard-write',
  };
  let inner = null;

  function render(params) {
    if (inner || typeof params?.html !== 'string') return;
    inner = document.createElement('iframe');
    inner.setAttribute('sandbox', 'allow-scripts allow-same-origin allow-forms');
    const allowed = Object.keys(params.permissions ?? {})
      .filter((name) => Object.hasOwn(FEATURES, name))
      .map((name) => FEATURES[name]);
    if (allowed.length) inner.setAttribute('allow', allowed.join('; '));
    inner.setAttribute('title', 'app');
    inner.style.cssText = 'border:0;width:100%;height:100%;display:block';
    inner.srcdoc = params.html;
    document.body.style.margin = '0';
    document.documentElement.style.height = '100%';
    document.body.style.height = '100%';
    document.body.append(inner);
  }

  window.addEventListener('message', (event) => {
    if (event.source === window.parent) {
      if (event.origin !== host) return;
      const message = event.data;
      const method = typeof message?.method === 'string' ? message.method : '';
      if (method === `${RESERVED}resource-ready`) render(message.params);
      else if (!method.startsWith(RESERVED)) inner?.contentWindow?.postMessage(message, '*');
    } else if (inner && event.source === inner.contentWindow) {
      window.parent.postMessage(event.data, host);
    }
  });
  window.parent.postMessage(
    { jsonrpc: '2.0', method: `${RESERVED}proxy-ready`, params: {} }, host);
})();
