// Preload for NODE_OPTIONS=--require: a server that listens without naming a host binds
// 127.0.0.1 instead of every interface, so test peers (server-everything's HTTP modes call
// `app.listen(PORT)`) are never reachable from outside the machine.
'use strict';

const net = require('net');

const LOOPBACK = '127.0.0.1';
const originalListen = net.Server.prototype.listen;

function isPort(value) {
  return typeof value === 'number' || (typeof value === 'string' && /^\d+$/.test(value));
}

// Binds `port` on loopback at once. Giving listen() a host would bind only after an
// asynchronous lookup, and programs that read `server.address()` right after `listen(0)` (the
// conformance suite's scenario servers do) would see null; a ready handle binds synchronously.
function loopbackHandle(port) {
  const handle = net._createServerHandle(LOOPBACK, Number(port), 4);
  return typeof handle === 'number' ? null : handle;
}

net.Server.prototype.listen = function listenOnLoopback(...args) {
  const [first, second] = args;
  const callbacks = args.filter((a) => typeof a === 'function');
  let port = null;
  // listen() and listen(callback) pick a random port on every interface.
  if (first === undefined || typeof first === 'function') {
    port = 0;
  } else if (isPort(first) && typeof second !== 'string') {
    // listen(port[, backlog][, callback]): a host, when given, is always the second argument.
    port = first;
  } else if (typeof first === 'object' && first !== null && first.host === undefined &&
      first.path === undefined && first.fd === undefined && first.handle === undefined &&
      first._handle === undefined) {
    // listen({ port }) without host or path.
    port = first.port === undefined ? 0 : first.port;
  }
  if (port === null) {
    return originalListen.apply(this, args);
  }
  const handle = loopbackHandle(port);
  if (handle === null) {
    // Let listen() report the error (port in use, ...) in its usual way.
    return originalListen.call(this, port, LOOPBACK, ...callbacks);
  }
  return originalListen.call(this, handle, ...callbacks);
};
