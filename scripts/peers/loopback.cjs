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

net.Server.prototype.listen = function listenOnLoopback(...args) {
  const [first, second] = args;
  // listen() and listen(callback) pick a random port on every interface.
  if (first === undefined || typeof first === 'function') {
    return originalListen.call(this, 0, LOOPBACK, ...args.filter((a) => typeof a === 'function'));
  }
  // listen(port[, backlog][, callback]): a host, when given, is always the second argument.
  if (isPort(first) && typeof second !== 'string') {
    return originalListen.call(this, first, LOOPBACK, ...args.slice(1));
  }
  // listen({ port }) without host or path.
  if (typeof first === 'object' && first !== null && first.host === undefined &&
      first.path === undefined && first.fd === undefined && first.handle === undefined &&
      first._handle === undefined) {
    return originalListen.call(this, { ...first, host: LOOPBACK }, ...args.slice(1));
  }
  return originalListen.apply(this, args);
};
